"""BERT-large's fused attention (benchmarks/kernels/attention.py, KERNELS=triton) inside TinyJit, on one NVIDIA GPU.

At --bs sequences of --seq tokens (16 heads, head dim 64, a quarter of each sequence padded): the largest difference of
out, dq, dk, dv from tinygrad's ops doing the model's math (BertSelfAttention, no dropout), then for each tile set of
CANDIDATES and each --rng (dropout elements per Philox call, the mask redrawn in the backward, dropout.RNG_GROUP; or
"bits": the committed group's mask stored by the forward as bits for the backward, attention.MASK_MODE) the forward
alone and forward + backward (dropout 0.1) per replayed JIT call, TFLOP/s and ms, beside tinygrad's own attention of
the same math. One JSON line per measurement, named by its "rng" (the fastest tiles go in attention.TILES).
  DEV=CUDA python lab/scripts/bench_attention.py [--bs 96] [--seq 512] [--rng 1,4,bits]
"""
import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np                                             # noqa: E402
from tinygrad import Context, Tensor, dtypes   # noqa: E402

from tinyperf.benchmarks.kernels import attention as at                   # noqa: E402
from tinyperf.benchmarks.kernels import dropout as dr                     # noqa: E402
from lab.kernel_bench import jit_seconds, positive   # noqa: E402

HEADS, HEAD_DIM, P_DROP, CALLS = 16, 64, 0.1, 5
DEFAULT_GROUP, DEFAULT_MODE = dr.RNG_GROUP, at.MASK_MODE   # as committed, restored after the --rng variants
BITS = at.MASK_MODES[1]   # "bits": the --rng variant that keeps the mask as bits (attention.MASK_MODE)
# tile sets to try: {kernel: (BM, BN, warps, stages)}; the first is attention.TILES as committed
CANDIDATES = [dict(at.TILES),
              {"fwd": (128, 128, 8, 2), "dkdv": (64, 128, 8, 2), "dq": (128, 64, 8, 2)},
              {"fwd": (128, 64, 4, 3), "dkdv": (64, 128, 8, 2), "dq": (128, 64, 8, 2)},
              {"fwd": (128, 64, 8, 3), "dkdv": (128, 128, 8, 2), "dq": (128, 128, 8, 2)}]


def model_attention(q, k, v, mask_add, p):
  """BertSelfAttention's math (its KERNELS=tinygrad path) on (B, L, H, D) fp16 tensors, attention()'s layout."""
  q, k, v = (t.transpose(1, 2) for t in (q, k, v))   # (B, H, L, D)
  scores = q.matmul(k.transpose(-2, -1), dtype=dtypes.float32) * (1.0 / math.sqrt(q.shape[-1])) + mask_add
  return (scores.softmax(-1).cast(q.dtype).dropout(p) @ v).transpose(1, 2)


def step_time(fn, *args) -> float: return jit_seconds(fn, *args, calls=CALLS)


def rng_variants(text: str) -> tuple[str, ...]:
  """A comma-separated list of --rng variants ("1,4,bits"): elements per Philox call (dropout.GROUPS) or "bits"."""
  names = tuple(text.split(","))
  dr.rng_groups(",".join(n for n in names if n != BITS) or str(DEFAULT_GROUP))   # ValueError for anything else
  return names


def set_rng(variant: str) -> tuple[int, str]:
  """Build the kernels of an --rng variant from now on; returns its (dropout.RNG_GROUP, attention.MASK_MODE)."""
  dr.RNG_GROUP, at.MASK_MODE = (DEFAULT_GROUP, BITS) if variant == BITS else (int(variant), at.MASK_MODES[0])
  return dr.RNG_GROUP, at.MASK_MODE


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--bs", type=positive, default=96, help="sequences per step")
  p.add_argument("--seq", type=positive, default=512, help="tokens per sequence")
  p.add_argument("--rng", type=rng_variants, default=(*map(str, dr.GROUPS), BITS),
                 help="dropout variants to time, comma-separated: elements per Philox call (dropout.RNG_GROUP) or "
                      "bits (the mask stored for the backward, attention.MASK_MODE); default 1,4,bits")
  return p


def main():
  args = build_parser().parse_args()
  B, L = args.bs, args.seq
  q, k, v, g = (Tensor.randn(B, L, HEADS, HEAD_DIM, dtype=dtypes.half).realize() for _ in range(4))   # (B, L, H, D)
  mask = np.zeros((B, 1, 1, L), np.float32)
  mask[..., L - L // 4:] = -10000.0   # (1 - input_mask) * -10000 with the last quarter padded
  mask_add = Tensor(mask).realize()   # from the host: a mask computed from constants stays unrealized, and JIT refuses it
  rel = lambda u, r: ((u.float() - r.float()).abs().max() / r.float().abs().max()).item()
  out = at.attention(q, k, v, mask_add, 0.0)
  grads = (out.float() * g.float()).sum().gradient(q, k, v)
  ref = model_attention(q, k, v, mask_add, 0.0)
  ref_grads = (ref.float() * g.float()).sum().gradient(q, k, v)
  print(json.dumps({"check": "no dropout", "bs": B, "seq": L, "out_max_rel_diff": rel(out, ref),
                    **{f"d{n}_max_rel_diff": rel(a, b) for n, a, b in zip("qkv", grads, ref_grads)}}), flush=True)

  flops_fwd = 4 * B * HEADS * L * L * HEAD_DIM   # QK^T and PV; the backward is 2.5x (recomputes QK^T)
  def fwd(fn): return lambda q, k, v, m: fn(q, k, v, m, P_DROP).realize()
  def fwd_bwd(fn):
    return lambda q, k, v, m: Tensor.realize(*(fn(q, k, v, m, P_DROP).float() * g.float()).sum().gradient(q, k, v))
  variants = [("tinygrad", model_attention, None, None)]
  variants += [("triton", at.attention, t, r) for r in args.rng for t in CANDIDATES]
  with Context(TRAINING=1):
    for name, fn, tiles, rng in variants:
      if tiles: at.TILES.update(tiles)
      group, mode = set_rng(rng) if rng else (None, None)
      what = {"impl": name, "tiles": tiles, "rng": rng, "rng_group": group, "mask_mode": mode}
      try:
        s_f, s_fb = step_time(fwd(fn), q, k, v, mask_add), step_time(fwd_bwd(fn), q, k, v, mask_add)
      except Exception as e:   # a tile that does not fit (shared memory, registers) is reported, not fatal
        print(json.dumps({**what, "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
        continue
      print(json.dumps({**what, "bs": B, "seq": L,
                        "fwd_ms": round(s_f * 1e3, 3), "fwd_tflops": round(flops_fwd / s_f / 1e12, 1),
                        "fwd_bwd_ms": round(s_fb * 1e3, 3), "fwd_bwd_tflops": round(3.5 * flops_fwd / s_fb / 1e12, 1)}),
            flush=True)
  at.TILES.update(CANDIDATES[0])
  dr.RNG_GROUP, at.MASK_MODE = DEFAULT_GROUP, DEFAULT_MODE


if __name__ == "__main__":
  main()
