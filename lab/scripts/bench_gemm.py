"""BERT-large's dense-layer GEMMs through benchmarks/kernels (KERNELS=triton) inside TinyJit, on one NVIDIA GPU.

For each GEMM of a training step at --bs sequences of 512 tokens (forward, data gradient, weight gradient of the Q/K/V
and attention-output, FFN-up and FFN-down layers) and each tile of matmul.TILES: TFLOP/s (REPS GEMMs per replayed JIT
call, median of the calls) and the largest difference from tinygrad's own matmul of the same fp16 operands; then one
layer's backward through gemm's grad function against tinygrad's; then the FFN block's forward + backward as
matmul.ffn (GELU in the GEMMs' epilogues), unfused (linear, the model's gelu, linear), the two epilogue GEMMs alone
beside the same GEMMs without an epilogue, and fused with each epilogue GEMM at 128x128 on 8 warps; the query, key and
value layers each way in one launch (matmul.linears) beside three. One JSON line per measurement, the fastest tile
per GEMM after the nine (the table to put in matmul.TUNED). GEMMs are timed one after another (lab.kernel_bench).
  DEV=CUDA python lab/scripts/bench_gemm.py [--bs 96] [--tiles all|rule] [--only ffn|qkv]
"""
import argparse, json, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tinygrad import Tensor, dtypes   # noqa: E402
from tinyperf.benchmarks.kernels import matmul as mm          # noqa: E402
from lab.kernel_bench import jit_seconds, positive, tile_override   # noqa: E402

REPS, CALLS = 8, 5
EPILOGUE_TILE = (128, 128, 64, 8, 3)   # (BM, BN, BK, warps, stages): the epilogue GEMMs' no-spill candidate


def gemms(tokens: int, hidden: int = 1024, inter: int = 4096):
  """(name, M, N, K, trans_a, trans_b) of a linear layer y = x @ W.T (W stored (out, in)) and its two gradients."""
  for layer, cin, cout in (("qkv/out", hidden, hidden), ("ffn_up", hidden, inter), ("ffn_down", inter, hidden)):
    yield f"{layer} fwd", tokens, cout, cin, False, True      # x (T, in) @ W.T
    yield f"{layer} dgrad", tokens, cin, cout, False, False   # dy (T, out) @ W (out, in)
    yield f"{layer} wgrad", cout, cin, tokens, True, False    # dy.T @ x


def operands(M, N, K, ta, tb):
  a = Tensor.randn(*((K, M) if ta else (M, K)), dtype=dtypes.half).realize()
  b = Tensor.randn(*((N, K) if tb else (K, N)), dtype=dtypes.half).realize()
  return a, b


def time_gemm(a, b, ta, tb) -> float:
  """Seconds per GEMM, REPS per replayed TinyJit call."""
  return jit_seconds(lambda a, b: [mm.gemm(a, b, ta, tb).realize() for _ in range(REPS)], a, b, calls=CALLS, per_call=REPS)


def time_jit(fn, *args) -> float:
  """Seconds per call of fn, its results realized."""
  return jit_seconds(lambda *a: Tensor.realize(*fn(*a)), *args, calls=CALLS)


def ffn_rows(tokens: int, hidden: int = 1024, inter: int = 4096):
  """The FFN's forward + every gradient, fused (matmul.ffn) and unfused, on the same fp16 operands: ms and the largest
  difference (relative to each result's max) of y and the five gradients from the unfused ones."""
  from tinyperf.benchmarks.bert.model import gelu
  x, dy = (Tensor.randn(tokens, hidden, dtype=dtypes.half).realize() for _ in range(2))
  w1, w2 = ((Tensor.randn(*s, dtype=dtypes.half) * 0.03).realize() for s in ((inter, hidden), (hidden, inter)))
  b1, b2 = (Tensor.randn(n, dtype=dtypes.half).realize() for n in (inter, hidden))
  def run(block):
    def f(x, w1, b1, w2, b2, dy):
      y = block(x, w1, b1, w2, b2)
      return [y, *(y.float() * dy.float()).sum().gradient(x, w1, b1, w2, b2)]
    return f
  fused, unfused = run(mm.ffn), run(lambda x, w1, b1, w2, b2: mm.linear(gelu(mm.linear(x, w1, b1)), w2, b2))
  args = (x, w1, b1, w2, b2, dy)
  diff = lambda u, r: ((u.float() - r.float()).abs().max() / r.float().abs().max()).item()
  def row(name: str, f, **extra) -> dict:
    rel = max(diff(u, r) for u, r in zip(fused(*args), unfused(*args))) if f is fused else 0.0
    return {"ffn": name, "tokens": tokens, **extra, "fwd_bwd_ms": round(time_jit(f, *args) * 1e3, 4),
            "max_rel_diff_vs_unfused": rel}
  yield row("ffn fused", fused)
  yield row("ffn unfused", unfused)
  # the two epilogue GEMMs alone beside the same GEMMs without one: what each epilogue costs in the step
  slope = mm._gemm_call(x, w1, False, True, b1, None, None, mm.GELU)[1].realize()   # gelu'(pre): the backward's aux
  dy_i = Tensor.randn(tokens, hidden, dtype=dtypes.half).realize()
  flops = 2 * tokens * inter * hidden
  for name, f in (("up fwd + bias", lambda: mm.gemm(x, w1, trans_b=True, bias=b1)),
                  ("up fwd + bias, GELU epilogue", lambda: mm._gemm_call(x, w1, False, True, b1, None, None, mm.GELU)[0]),
                  ("down dgrad", lambda: mm.gemm(dy_i, w2)),
                  ("down dgrad, GELU_GRAD epilogue",
                   lambda: mm._gemm_call(dy_i, w2, False, False, None, None, None, mm.GELU_GRAD, slope)[0])):
    s = jit_seconds(lambda *_: [f().realize() for _ in range(REPS)], x, calls=CALLS, per_call=REPS)
    yield {"ffn_gemm": name, "tokens": tokens, "ms": round(s * 1e3, 4), "tflops": round(flops / s / 1e12, 1)}
  # each epilogue GEMM alone at 128x128 on 8 warps (two programs per multiprocessor: one's epilogue beside the
  # other's K loop; sm_90: about 120 registers, no spill, where 128x256 takes 228-255)
  with tile_override(mm.TUNED, (tokens, inter, hidden, False, False), EPILOGUE_TILE):
    yield row("ffn fused, gelu-grad GEMM 128x128x8", fused, tile=EPILOGUE_TILE)
  with tile_override(mm.TUNED, (tokens, inter, hidden, False, True), EPILOGUE_TILE):
    yield row("ffn fused, gelu GEMM 128x128x8", fused, tile=EPILOGUE_TILE)


def parts_rows(tokens: int, hidden: int = 1024, parts: int = 3):
  """BERT's query, key and value layers each way as matmul.linears launches them (parts_gemm_kernel: one launch for the
  three) beside three gemm launches (and, for the input gradient, their sum): ms and the largest difference."""
  h = lambda *s: (Tensor.randn(*s, dtype=dtypes.half) * 0.5).realize()
  x, ws, dys = h(tokens, hidden), [h(hidden, hidden) for _ in range(parts)], [h(tokens, hidden) for _ in range(parts)]
  cases = (("fwd", lambda: mm._parts_call(mm.SPLIT_N, [x], ws, False, True), lambda: [mm.gemm(x, w, trans_b=True) for w in ws]),
           ("dgrad", lambda: mm._parts_call(mm.SPLIT_K, dys, ws, False, False),
            lambda: [sum((mm.gemm(dy, w) for dy, w in zip(dys, ws)), Tensor.zeros(1, dtype=dtypes.half))]),
           ("wgrad", lambda: mm._parts_call(mm.SPLIT_M, dys, [x], True, False),
            lambda: [mm.gemm(dy, x, trans_a=True) for dy in dys]))
  for name, fused, separate in cases:
    diff = max(((u.float() - r.float()).abs().max() / r.float().abs().max()).item() for u, r in zip(fused(), separate()))
    for impl, f in (("parts", fused), ("separate", separate)):
      # the outputs of one launch realized together: realizing them one by one schedules the launch again for each
      s = jit_seconds(lambda *_: [Tensor.realize(*f()) for _ in range(REPS)], x, calls=CALLS, per_call=REPS)
      yield {"qkv": name, "impl": impl, "tokens": tokens, "ms": round(s * 1e3, 4),
             "tflops": round(2 * parts * tokens * hidden * hidden / s / 1e12, 1), "max_rel_diff": diff}


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--bs", type=positive, default=96, help="sequences of 512 tokens per step (the GEMMs' M or K)")
  p.add_argument("--tiles", choices=("all", "rule"), default="all", help="every tile of matmul.TILES, or tile()'s choice")
  p.add_argument("--only", choices=("all", "ffn", "qkv"), default="all",
                 help="everything, or only the FFN block fused/unfused, or only the query/key/value launches")
  return p


def main():
  args = build_parser().parse_args()
  if args.only == "all": gemm_rows(args)
  if args.only in ("all", "qkv"):
    for row in parts_rows(args.bs * 512): print(json.dumps(row), flush=True)
  if args.only in ("all", "ffn"):
    for row in ffn_rows(args.bs * 512): print(json.dumps(row), flush=True)


def gemm_rows(args):
  best = {}
  for name, M, N, K, ta, tb in gemms(args.bs * 512):
    a, b = operands(M, N, K, ta, tb)
    ref = ((a.T if ta else a) @ (b.T if tb else b)).float().realize()
    for t in (mm.TILES if args.tiles == "all" else (mm.tile(M, N, K, ta, tb),)):
      with tile_override(mm.TUNED, (M, N, K, ta, tb), t):
        err = ((mm.gemm(a, b, ta, tb).float() - ref).abs().max() / ref.abs().max()).item()
        s = time_gemm(a, b, ta, tb)
      row = {"gemm": name, "M": M, "N": N, "K": K, "trans_a": ta, "trans_b": tb, "tile": t, "ms": round(s * 1e3, 4),
             "tflops": round(2 * M * N * K / s / 1e12, 1), "max_rel_diff_vs_tinygrad": err}
      print(json.dumps(row), flush=True)
      if row["tflops"] > best.get((M, N, K, ta, tb), {"tflops": 0})["tflops"]: best[(M, N, K, ta, tb)] = row
    del a, b, ref
  for row in best.values(): print(json.dumps({"best": row}), flush=True)
  # one layer's backward at the FFN-up shape: gemm's grad function against tinygrad's matmul
  T = args.bs * 512
  x, w = Tensor.randn(T, 1024, dtype=dtypes.half).realize(), (Tensor.randn(4096, 1024, dtype=dtypes.half) * 0.05).realize()
  g = Tensor.randn(T, 4096, dtype=dtypes.half).realize()
  dx, dw = (mm.linear(x, w).float() * g.float()).sum().gradient(x, w)
  rx, rw = ((x @ w.T).float() * g.float()).sum().gradient(x, w)
  rel = lambda u, r: ((u.float() - r.float()).abs().max() / r.float().abs().max()).item()
  print(json.dumps({"backward": "ffn_up", "dx_max_rel_diff": rel(dx, rx), "dw_max_rel_diff": rel(dw, rw)}), flush=True)


if __name__ == "__main__":
  main()
