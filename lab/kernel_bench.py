"""What the kernel benches (lab/scripts/bench_*.py) share: their one timing loop, trying a tile in a TUNED table, and
their size arguments' type."""
import argparse
import contextlib
import statistics
import time


def jit_seconds(fn, *args, calls: int, per_call: int = 1) -> float:
  """Median seconds of one replayed TinyJit call of fn, over per_call (the repetitions fn makes in one call); three
  warm-up calls first (capture and compile). Repetitions are captured without tinygrad's graph (JIT=2), so they run
  one after another: in a CUDA graph independent kernels overlap, and 8 GEMMs of 32 programs each read as one of 256."""
  from tinygrad import Device, TinyJit   # as the scripts: imported once DEV is set
  from tinygrad.helpers import Context
  jit, times = TinyJit(fn), []
  with Context(JIT=2) if per_call > 1 else contextlib.nullcontext():
    for i in range(3 + calls):
      Device[Device.DEFAULT].synchronize(); t = time.perf_counter()
      jit(*args)
      Device[Device.DEFAULT].synchronize()
      if i >= 3: times.append((time.perf_counter() - t) / per_call)
  return statistics.median(times)


@contextlib.contextmanager
def tile_override(tuned: dict, key, tile):
  """tuned[key] = tile inside the block (the kernels built there take it); the committed entry, or none, after."""
  had, old = key in tuned, tuned.get(key)
  tuned[key] = tile
  try: yield
  finally:
    if had: tuned[key] = old
    else: tuned.pop(key, None)


def positive(v: str) -> int:
  """argparse type of a size argument (--bs, --rows, ...): a positive integer, else argparse's exit 2 naming it."""
  if not v.isdigit() or int(v) < 1: raise argparse.ArgumentTypeError(f"{v!r} is not a positive integer")
  return int(v)
