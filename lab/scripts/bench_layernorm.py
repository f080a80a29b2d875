"""BERT-large's fused dropout + residual add + LayerNorm (benchmarks/kernels/layernorm.py, KERNELS=triton) inside
TinyJit, on one NVIDIA GPU.

At --rows rows of --hidden (BERT-large BS 96: 96 x 512 = 49152 rows of 1024) in fp16, fp32 weight and bias: the
largest difference of out, dx, dresidual, dweight, dbias from the model's LayerNorm(x + residual) in tinygrad (no
dropout), then for each tile set of CANDIDATES and each --rng (dropout elements per Philox call, dropout.RNG_GROUP),
with dropout 0.1 as BERT trains, the forward alone and forward + backward per replayed JIT call, ms and GB/s (the
fp16 rows the kernels must move: x, residual, out forward; x, residual, dy, dresidual, dx backward), beside tinygrad's
own kernels doing the same math. One JSON line per measurement (the fastest tiles go in layernorm.TILES).
  DEV=CUDA python lab/scripts/bench_layernorm.py [--rows 49152] [--hidden 1024] [--rng 1,4]
  (BEAM=2: tinygrad's kernels searched)
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tinygrad import Context, Tensor, dtypes   # noqa: E402
from tinygrad.dtype import DEFAULT_FLOAT                # noqa: E402

from tinyperf.benchmarks.bert.model import LayerNorm             # noqa: E402
from tinyperf.benchmarks.kernels import layernorm as ln          # noqa: E402
from tinyperf.benchmarks.kernels import dropout as dr            # noqa: E402
from lab.kernel_bench import jit_seconds, positive   # noqa: E402

CALLS, P_DROP = 10, 0.1
DEFAULT_GROUP = dr.RNG_GROUP   # as committed, restored after the --rng variants
# tile sets to try: {"fwd": (BM, warps), "bwd": (BM, programs per multiprocessor, warps)}; the first is ln.TILES
CANDIDATES = [dict(ln.TILES),
              {"fwd": (1, 4), "bwd": (1, 4, 4)},
              {"fwd": (4, 8), "bwd": (4, 2, 8)},
              {"fwd": (8, 8), "bwd": (8, 1, 16)},
              {"fwd": (4, 4), "bwd": (2, 4, 4)}]


def step_time(fn, *args) -> float: return jit_seconds(fn, *args, calls=CALLS)


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--rows", type=positive, default=96 * 512, help="rows (tokens per step)")
  p.add_argument("--hidden", type=positive, default=1024, help="row length")
  p.add_argument("--rng", type=dr.rng_groups, default=dr.GROUPS,
                 help="dropout elements per Philox call to time, comma-separated (dropout.RNG_GROUP; default 1,4)")
  return p


def main():
  args = build_parser().parse_args()
  M, N = args.rows, args.hidden
  DEFAULT_FLOAT.value = "half"   # the model's LayerNorm returns default float: fp16, as the BERT configs run
  x, r, g = (Tensor.randn(M, N, dtype=dtypes.half).realize() for _ in range(3))
  w, b = (1 + 0.1 * Tensor.randn(N)).realize(), (0.1 * Tensor.randn(N)).realize()   # trained-like affine
  layers = {k: LayerNorm(N, kernels=k) for k in ("tinygrad", "triton")}
  for layer in layers.values(): layer.weight, layer.bias = w, b

  def fwd_bwd(layer, p=0.0):
    def step(x, r):
      y = layer(x, r, p)
      return Tensor.realize(y, *(y.float() * g.float()).sum().gradient(x, r, layer.weight, layer.bias))
    return step
  got, ref = (fwd_bwd(layers[k])(x, r) for k in ("triton", "tinygrad"))
  check = {"check": "vs tinygrad", "rows": M, "hidden": N}
  for n, a, b in zip(("out", "dx", "dresidual", "dweight", "dbias"), got, ref):
    check[f"{n}_max_abs_diff"] = (a.float() - b.float()).abs().max().item()
    check[f"{n}_ref_max_abs"] = b.float().abs().max().item()
  print(json.dumps(check), flush=True)

  nbytes = {"fwd": 3 * M * N * 2, "fwd_bwd": 8 * M * N * 2}
  for name, tiles, group in [("tinygrad", None, None)] + [("triton", t, g) for g in args.rng for t in CANDIDATES]:
    if tiles: ln.TILES.update(tiles)
    if group: dr.RNG_GROUP = group
    layer = layers[name]
    try:
      with Context(TRAINING=1):
        s_f = step_time(lambda x, r: layer(x, r, P_DROP).realize(), x, r)
        s_fb = step_time(fwd_bwd(layer, P_DROP), x, r)
    except Exception as e:   # a tile that does not fit (registers, shared memory) is reported, not fatal
      print(json.dumps({"impl": name, "tiles": tiles, "rng_group": group, "error": f"{type(e).__name__}: {e}"[:300]}),
            flush=True)
      continue
    print(json.dumps({"impl": name, "tiles": tiles, "rng_group": group, "rows": M, "hidden": N, "dropout": P_DROP,
                      "fwd_ms": round(s_f * 1e3, 3),
                      "fwd_gbps": round(nbytes["fwd"] / s_f / 1e9, 1), "fwd_bwd_ms": round(s_fb * 1e3, 3),
                      "fwd_bwd_gbps": round(nbytes["fwd_bwd"] / s_fb / 1e9, 1)}), flush=True)
  ln.TILES.update(CANDIDATES[0])
  dr.RNG_GROUP = DEFAULT_GROUP


if __name__ == "__main__":
  main()
