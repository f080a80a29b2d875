"""The CPU feeding budget of a ResNet platform: how many cores its data loader needs to keep the GPUs busy.

Each ResNet config states FEED_IMG_S_PER_GPU (the train images per second one GPU consumes at the speed we expect on
that platform; the config's comments say where the figure comes from) and LOADER_IMG_S_PER_CORE (train images per
second one core of our loader decodes and augments, measured by `python -m lab.resnet.bench_decode`). Then

  loader cores = ceil(GPUS x FEED_IMG_S_PER_GPU / LOADER_IMG_S_PER_CORE), plus one core for the training process

A host with fewer cores still runs (a warning, never a failure: the GPUs then wait for data and the run is slower).
The preflight and the RUN phase print the budget; bench_decode prints it for every platform at the rate it measured.
"""
from __future__ import annotations
import math
import os
from dataclasses import dataclass
from pathlib import Path

# The loader's shared-memory rings (benchmarks/resnet/data.py) are files SHM_DIR/SHM_PREFIX<pid>_<random>, so
# concurrent jobs never clobber each other's ring; the launcher reaps the rings of dead loaders by that name.
SHM_DIR = "/dev/shm"
SHM_PREFIX = "tinyperf_"


@dataclass(frozen=True)
class Budget:
  platform: str
  gpus: int
  feed_img_s: float        # all GPUs together
  per_core: float          # loader img/s per core
  loader_cores: int
  needed: int              # loader cores + 1 for the training process
  host: int
  workers: int             # NUM_WORKERS (0 = one per available core)

  @property
  def ok(self) -> bool: return self.host >= self.needed

  def line(self) -> str:
    return (f"{self.platform} needs {self.needed} cores to feed its {self.gpus} GPU(s) at {self.feed_img_s:,.0f} img/s "
            f"(loader: {self.per_core:,.0f} img/s per core measured by bench_decode, so {self.loader_cores} loader "
            f"core(s) + 1 for the training process); this host has {self.host}")

  def warnings(self) -> list[str]:
    out = []
    if not self.ok:
      feeds = max(self.host - 1, 1) * self.per_core
      out.append(f"this host has {self.host} core(s) but {self.platform} needs {self.needed} to feed its GPUs: the "
                 f"loader can deliver about {feeds:,.0f} of the {self.feed_img_s:,.0f} img/s the GPUs could take "
                 f"({100 * feeds / self.feed_img_s:.0f} %), so the GPUs will wait for data and the run will be slower "
                 f"than this platform allows. Run on a host with at least {self.needed} cores (or more CPUs for the "
                 f"container: docker --cpus / --cpuset-cpus).")
    if 0 < self.workers < self.loader_cores:
      out.append(f"NUM_WORKERS={self.workers} loader processes, but {self.loader_cores} are needed at "
                 f"{self.per_core:,.0f} img/s per core; set NUM_WORKERS=0 (one per available core) or at least "
                 f"{self.loader_cores}.")
    return out


def cores_needed(feed_img_s: float, per_core: float) -> int:
  """Loader cores for feed_img_s at per_core img/s each (at least one)."""
  if per_core <= 0: raise ValueError(f"loader img/s per core must be positive, got {per_core}")
  return max(1, math.ceil(feed_img_s / per_core - 1e-9))


def cgroup_cpu_limit(sysroot: str | os.PathLike = "/") -> float | None:
  """CPUs this container may use per its cgroup quota (docker --cpus), or None when unlimited/unknown."""
  root = Path(sysroot)
  try:
    quota, period = (root / "sys/fs/cgroup/cpu.max").read_text().split()[:2]   # cgroup v2: "max 100000" / "150000 100000"
    return None if quota == "max" else int(quota) / int(period)
  except (OSError, ValueError):
    pass
  try:
    quota = int((root / "sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())     # cgroup v1: -1 = unlimited
    period = int((root / "sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
    return None if quota <= 0 or period <= 0 else quota / period
  except (OSError, ValueError):
    return None


def host_cores(sysroot: str | os.PathLike = "/") -> int:
  """Cores this process may run on: its CPU affinity (docker --cpuset-cpus), capped by the cgroup quota (--cpus,
  rounded down, at least 1)."""
  try: n = len(os.sched_getaffinity(0))
  except (AttributeError, OSError): n = os.cpu_count() or 1
  limit = cgroup_cpu_limit(sysroot)
  return n if limit is None else max(1, min(n, math.floor(limit)))


def budget(cfg, host: int, per_core: float | None = None) -> Budget:
  """The feeding budget of a ResNet PlatformConfig on a host with `host` cores. per_core overrides the config's
  LOADER_IMG_S_PER_CORE (bench_decode passes the rate it just measured)."""
  per_core = cfg["LOADER_IMG_S_PER_CORE"] if per_core is None else per_core
  feed = cfg["GPUS"] * cfg["FEED_IMG_S_PER_GPU"]
  loader = cores_needed(feed, per_core)
  return Budget(cfg.platform, cfg["GPUS"], feed, per_core, loader, loader + 1, host, cfg["NUM_WORKERS"])


def banner(lines: list[str]) -> str:
  bar = "!" * 100
  return "\n".join([bar, *(f"WARNING: {l}" for l in lines), bar])
