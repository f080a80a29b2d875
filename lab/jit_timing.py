"""The kernel benches' one timing loop (lab/scripts/bench_*.py)."""
import statistics
import time


def jit_seconds(fn, *args, calls: int, per_call: int = 1) -> float:
  """Median seconds of one replayed TinyJit call of fn, over per_call (the repetitions fn makes in one call); three
  warm-up calls first (capture and compile)."""
  from tinygrad import Device, TinyJit   # as the scripts: imported once DEV is set
  jit, times = TinyJit(fn), []
  for i in range(3 + calls):
    Device[Device.DEFAULT].synchronize(); t = time.perf_counter()
    jit(*args)
    Device[Device.DEFAULT].synchronize()
    if i >= 3: times.append((time.perf_counter() - t) / per_call)
  return statistics.median(times)
