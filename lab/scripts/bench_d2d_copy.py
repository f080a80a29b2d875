"""GPU0 -> GPU1 copy bandwidth, tinygrad against PyTorch, side by side in one command: the transport under tinygrad's
2-GPU gradient all-reduce (docs/PERFORMANCE.md, BERT 2x). Needs 2 CUDA GPUs, DEV=CUDA and PyTorch.

  DEV=CUDA python3 lab/scripts/bench_d2d_copy.py [--sizes-mb 4,64,256] [--reps 20]

Prints one JSON line per (framework, size) and whether each framework has peer access between the two GPUs."""
from __future__ import annotations
import argparse
import json
import statistics
import time


def tinygrad_copy(nbytes: int, reps: int) -> tuple[list[float], bool]:
  from tinygrad import Device, Tensor, dtypes
  src = Tensor.empty(nbytes // 4, dtype=dtypes.float32, device="CUDA:0").realize()
  Device["CUDA:1"]                                   # opening the second device enables peer access when possible
  from tinygrad.runtime.ops_cuda import CUDADevice
  times = []
  for _ in range(reps + 2):                          # two warm-up copies (allocation, first transfer)
    Device["CUDA:0"].synchronize(); Device["CUDA:1"].synchronize()
    t0 = time.perf_counter()
    src.to("CUDA:1").realize()
    Device["CUDA:1"].synchronize()
    times.append(time.perf_counter() - t0)
  return times[2:], CUDADevice.peer_access


def torch_copy(nbytes: int, reps: int) -> tuple[list[float], bool]:
  import torch
  src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda:0")
  dst = torch.empty_like(src, device="cuda:1")
  times = []
  for _ in range(reps + 2):
    torch.cuda.synchronize(0); torch.cuda.synchronize(1)
    t0 = time.perf_counter()
    dst.copy_(src)
    torch.cuda.synchronize(1)
    times.append(time.perf_counter() - t0)
  return times[2:], torch.cuda.can_device_access_peer(0, 1)


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python3 lab/scripts/bench_d2d_copy.py` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--sizes-mb", default="4,64,256")
  p.add_argument("--reps", type=int, default=20)
  return p


def main():
  args = build_parser().parse_args()
  for mb in (int(x) for x in args.sizes_mb.split(",")):
    for name, fn in (("tinygrad", tinygrad_copy), ("torch", torch_copy)):
      times, peer = fn(mb << 20, args.reps)
      med = statistics.median(times)
      print(json.dumps({"framework": name, "mb": mb, "median_ms": round(med * 1e3, 3),
                        "gb_per_s": round((mb << 20) / med / 1e9, 1), "peer_access": peer}), flush=True)


if __name__ == "__main__":
  main()
