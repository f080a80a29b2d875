"""MLPerf logging and the INIT/RUN protocol shared by both benchmarks.

Every official run is one process (`--phase all`) writing one result file:
  INIT: submission info -> page-cache drop -> cache_clear -> init_start -> model from the seed -> JIT capture + BEAM on
        fake data -> the initial state put back -> init_stop
  RUN : run_start -> seed -> hyperparameters -> epochs/blocks + evals on real data (replays of INIT's kernels) -> run_stop
The closed rules give INIT 30 minutes (open: 4 h) and require the cache flush before the timed region; the clock
(run_start) starts before any dataset access.
"""
from __future__ import annotations
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlperf_logging import mllog
from mlperf_logging.mllog import constants as C

from tinyperf.benchmarks.common.config import ROOT, PlatformConfig
from tinyperf.benchmarks.common.rules import STATUS_RULESETS

ORG = os.environ.get("SUBMISSION_ORG", "tinycorp")
_logger: mllog.MLLogger | None = None


def open_result_log(path: Path) -> mllog.MLLogger:
  """Route MLLOG lines of this process to `path` (append: INIT and RUN share the file) and to stdout."""
  global _logger
  path.parent.mkdir(parents=True, exist_ok=True)
  # one dedicated logger: mllog.config(filename=) would add a second handler to its default logger on every call
  log = logging.getLogger(f"tinyperf_mllog_{path}")
  log.setLevel(logging.INFO)
  log.propagate = False
  for h in list(log.handlers): log.removeHandler(h)
  log.addHandler(logging.FileHandler(path, mode="a", encoding="utf-8"))
  log.addHandler(logging.StreamHandler(sys.stdout))
  mllog.config(logger=log, root_dir=str(ROOT), default_stack_offset=2)
  _logger = mllog.get_mllogger()
  return _logger


def mlog() -> mllog.MLLogger:
  if _logger is None: raise RuntimeError("open_result_log() must be called before logging MLPerf events")
  return _logger


def event(key, value=None, metadata=None): mlog().event(key=key, value=value, metadata=metadata, stack_offset=2)
def start(key, value=None, metadata=None): mlog().start(key=key, value=value, metadata=metadata, stack_offset=2)
def end(key, value=None, metadata=None): mlog().end(key=key, value=value, metadata=metadata, stack_offset=2)


# run_stop metadata of a RUN stopped by a crash (a dead loader worker, a corrupt JPEG found late, /dev/shm full, Ctrl-C):
# no training outcome, so the launcher records a failed attempt and redoes the run (tooling/common/ledger.log_outcome)
CRASHED = "tinyperf_crashed"


@contextmanager
def abort_on_failure():
  """Wraps a RUN phase from run_start up to its own run_stop. Any exception that escapes first logs run_stop with status
  aborted, so every started RUN's log ends with its one run_stop (EXACTLY_ONE in the checker), then propagates: the
  entrypoint exits non-zero (runtime.run_entrypoint: 1 for a training failure, 2 for bad input). A non-finite loss is
  the training's own failure (a run that counts, like a missed target); anything else (a dead loader worker, bad input
  found after the clock started, Ctrl-C) is a crash, named in the run_stop's CRASHED field."""
  try: yield
  except FloatingPointError:
    end(C.RUN_STOP, metadata={C.STATUS: C.ABORTED})
    raise
  except BaseException as e:
    end(C.RUN_STOP, metadata={C.STATUS: C.ABORTED, CRASHED: f"{type(e).__name__}: {e}"[:500]})
    raise


def log_submission_info(cfg: PlatformConfig):
  """The submission_* keys. division must precede init_stop: the checker reads the init budget from it."""
  event(C.SUBMISSION_ORG, ORG)
  event(C.SUBMISSION_PLATFORM, cfg["system"])
  event(C.SUBMISSION_DIVISION, cfg["division"])
  if cfg["ruleset"] in STATUS_RULESETS:
    event(C.SUBMISSION_STATUS, cfg["submission_status"])
  event(C.SUBMISSION_BENCHMARK, cfg.benchmark)


def drops_host_cache(cfg: PlatformConfig) -> bool:
  """Whether a run of this platform flushes the whole host's page cache (as root or with passwordless sudo): a real
  platform does, as the rules require; the CPU smoke's toy runs only evict their dataset files, leaving the host alone."""
  return cfg["vendor"] != "cpu"


def drop_page_cache(paths: list[Path], whole_host: bool = True) -> str:
  """Flush the page cache so that data starts on durable storage, as the rules require: the one implementation, run by
  the launcher on the host before each run (tinyperf run, tooling/launch/backends.py) or by INIT when nothing did.

  Tries the global drop (root, or a container with a writable /proc/sys), then passwordless `sudo -n sysctl`, else
  evicts just the dataset files with posix_fadvise(DONTNEED), which needs no privilege but is per file, not a global
  flush. Returns the method used; it is printed and logged (cache_clear)."""
  if not whole_host:
    return (f"posix_fadvise(DONTNEED) over {evict_files(paths)} dataset files (a CPU smoke platform: the host's page "
            f"cache is left alone)")
  os.sync()
  try:
    with open("/proc/sys/vm/drop_caches", "w") as f: f.write("3\n")
    return "drop_caches"
  except OSError:
    pass
  if shutil.which("sudo"):
    r = subprocess.run(["sudo", "-n", "sysctl", "-q", "vm.drop_caches=3"], capture_output=True, timeout=120)
    if r.returncode == 0: return "drop_caches (sudo -n sysctl)"
  return f"posix_fadvise(DONTNEED) over {evict_files(paths)} dataset files (no root, no passwordless sudo)"


EVICT_MAX_DEPTH = 64   # a data set is a few levels deep; the bound also ends a loop of linked folders


def files_below(root: Path) -> Iterator[Path]:
  """Every file below root, walked with a stack (Path.rglob recursed: a folder nested 1,000 deep raised RecursionError)."""
  stack = [(root, 0)]
  while stack:
    top, depth = stack.pop()
    try: entries = list(os.scandir(top))
    except OSError: continue
    for e in entries:
      try:
        if e.is_dir():
          if depth < EVICT_MAX_DEPTH: stack.append((e.path, depth + 1))
        elif e.is_file(): yield Path(e.path)
      except OSError: continue


def evict_files(paths: list[Path]) -> int:
  """posix_fadvise(DONTNEED) over every file under paths (no privilege needed); returns how many were evicted."""
  n = 0
  for root in paths:
    root = Path(root)
    files = [root] if root.is_file() else files_below(root) if root.is_dir() else []
    for p in files:
      try:
        fd = os.open(p, os.O_RDONLY)
        try: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally: os.close(fd)
        n += 1
      except OSError:
        pass
  return n

