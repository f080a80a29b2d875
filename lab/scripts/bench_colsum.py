"""BERT-large's bias gradients (matmul.column_sum, KERNELS=triton: the column sums of a linear layer's output gradient)
inside TinyJit, on one NVIDIA GPU, for each COLSUM tile of CANDIDATES beside tinygrad's own sum.

The shapes at --bs sequences of 512 (BS 96: 49152 tokens): the attention and FFN-down biases (tokens x 1024, fp16), the
FFN-up bias (tokens x 4096, fp16) and the MLM decoder's (bs x 76 predictions x 30522, fp32). First a check line (the
largest relative difference from numpy's float64 sums, per shape), then one JSON line per tile and shape: ms per
replayed call and GB/s of the bytes read once (the fastest tile goes in matmul.COLSUM).
  DEV=CUDA python lab/scripts/bench_colsum.py [--bs 96] [--tiles N]
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np                               # noqa: E402
from tinygrad import Tensor, dtypes              # noqa: E402

from tinyperf.benchmarks.kernels import matmul as mm, program as prg   # noqa: E402
from lab.kernel_bench import jit_seconds, positive   # noqa: E402

CALLS = 20
# (BM rows per step, BN columns, warps, programs per multiprocessor); the first is matmul.COLSUM as committed
CANDIDATES = [mm.COLSUM, (32, 256, 4, 4), (64, 256, 8, 4), (32, 512, 8, 4), (16, 512, 4, 8), (64, 128, 4, 8),
              (32, 256, 8, 2), (128, 256, 8, 2), (16, 1024, 8, 4), (8, 256, 2, 8)]


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--bs", type=positive, default=96, help="sequences of 512 tokens per step (default 96)")
  p.add_argument("--seq", type=positive, default=512, help="tokens per sequence (default 512)")
  p.add_argument("--hidden", type=positive, default=1024)
  p.add_argument("--intermediate", type=positive, default=4096)
  p.add_argument("--vocab", type=positive, default=30522)
  p.add_argument("--tiles", type=positive, default=len(CANDIDATES), help="the first N candidates (default all)")
  return p


def main():
  args = build_parser().parse_args()
  tokens = args.bs * args.seq
  shapes = [(tokens, args.hidden, dtypes.half), (tokens, args.intermediate, dtypes.half),
            (args.bs * 76, args.vocab, dtypes.float32)]
  xs = [Tensor.randn(M, N, dtype=dt).realize() for M, N, dt in shapes]
  check = {"check": "vs numpy float64"}
  for (M, N, _), x in zip(shapes, xs):
    ref = x.numpy().astype(np.float64).sum(0)
    check[f"{M}x{N}_max_rel_diff"] = float(np.abs(mm.column_sum(x).numpy() - ref).max() / np.abs(ref).max())
  print(json.dumps(check), flush=True)
  for tile in [None, *CANDIDATES[:args.tiles]]:
    if tile: mm.COLSUM = tile
    for (M, N, dt), x in zip(shapes, xs):
      fn = (lambda x: x.float().sum(0).realize()) if tile is None else (lambda x: mm.column_sum(x).realize())
      try: s = jit_seconds(fn, x, calls=CALLS)
      except Exception as e:   # a tile that does not compile is reported, not fatal
        print(json.dumps({"tile": tile, "shape": [M, N], "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
        continue
      impl = "triton" if tile and prg.on_triton(x) else "tinygrad"   # off CUDA column_sum is tinygrad's sum
      print(json.dumps({"impl": impl, "tile": tile, "shape": [M, N],
                        "dtype": dt.name, "ms": round(s * 1e3, 4), "gbps": round(M * N * dt.itemsize / s / 1e9, 1)}),
            flush=True)
  mm.COLSUM = CANDIDATES[0]


if __name__ == "__main__":
  main()
