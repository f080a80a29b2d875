"""A stand-in for `python -m tinyperf.benchmarks.<bm>.train` that writes a valid MLPerf log in a second, for tests of the run
loop (claims, kills, resume, disk full, concurrency): select it with TINYPERF_TEST_TRAIN_MODULE=tests.stand_in_train
(tooling/launch/backends.py train_module). It takes the entrypoint's arguments (--phase all: both); INIT prints, RUN writes a whole resnet log
with the real mllog API (tests/mllog_builder.py), seed and submission fields from the platform config (the org as
the entrypoint logs it). Its files are the entrypoint's: the log and the kernel cache of the --work folder's RunDir
(--log and CACHEDB move them); INIT creates the cache file (empty), as tinygrad's first compile does, so a test can see
where it went.

What a test can ask of it (environment):
  STAND_IN_RUN_S=S      sleep S seconds in RUN before writing the log (time to kill the launcher)
  STAND_IN_CHILD=FILE   RUN starts a `sleep 600` in its process group and writes its pid to FILE (kill tests)
  STAND_IN_RING=1       RUN creates a shared-memory ring named like the ResNet loader's (leak tests)
  STAND_IN_SPAM=N       INIT prints N bytes (fills a small disk)
  STAND_IN_STATUS=...   the run_stop status (default success; anything else: did not converge, exit 1)
  STAND_IN_CRASH=1      RUN crashes as the ResNet loader does on a full /dev/shm: the real mlperf.abort_on_failure logs
                        its run_stop, the OSError ends the process (a traceback, exit 1)"""
from __future__ import annotations
import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
  p = argparse.ArgumentParser()
  for a in ("--platform", "--phase", "--data", "--work", "--log", "--config"): p.add_argument(a)
  p.add_argument("--seed", type=int, required=True)
  args = p.parse_args()
  from tinyperf.benchmarks.common.rundir import RunDir, load_run_config
  from tinyperf.benchmarks.registry import spec
  run = RunDir(Path(args.work))
  args.log = args.log or run.log
  cache_db = Path(os.environ.get("CACHEDB") or run.cache_db)
  cfg, submitter = load_run_config(spec(os.environ.get("STAND_IN_BENCHMARK", "resnet")), args.platform,
                                   Path(args.config) if args.config else None, run.path)
  def say(phase): print(f"stand-in {phase}: pid {os.getpid()}, seed {args.seed}, page cache dropped with "
                        f"{os.environ.get('TINYPERF_CACHE_DROPPED')}", flush=True)
  from tinyperf.benchmarks.common.runtime import provenance   # the entrypoint's own line: package reads the commit from it
  print("provenance: " + ", ".join(f"{k}={v}" for k, v in provenance(cfg.knobs).items()), flush=True)
  if args.phase in ("init", "all"):
    say("init")
    try: cache_db.parent.mkdir(parents=True, exist_ok=True); cache_db.touch()
    except OSError: pass   # a full disk: the output below is what fails
    for _ in range(int(os.environ.get("STAND_IN_SPAM", "0")) // 100): print("x" * 99, flush=True)
    if args.phase == "init": return 0
  say("run")
  if os.environ.get("STAND_IN_CHILD"):
    child = subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    Path(os.environ["STAND_IN_CHILD"]).write_text(str(child.pid))
  if os.environ.get("STAND_IN_RING"):
    from multiprocessing import shared_memory
    from tinyperf.benchmarks.common.feeding import SHM_PREFIX
    ring = shared_memory.SharedMemory(name=f"{SHM_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:12]}", create=True, size=1 << 16)
    # Python's resource tracker may unlink it when this process dies, if the tracker outlives the kill of the process
    # group (a race): leave it to the launcher's cleanup, which the leak tests are about
    from multiprocessing import resource_tracker
    resource_tracker.unregister(ring._name, "shared_memory")
    print(f"ring {ring.name}", flush=True)
  time.sleep(float(os.environ.get("STAND_IN_RUN_S", "0")))
  if os.environ.get("STAND_IN_CRASH"):
    import errno
    from tinyperf.benchmarks.common import mlperf
    mlperf.open_result_log(Path(args.log))
    mlperf.start("run_start")
    with mlperf.abort_on_failure():
      raise OSError(errno.ENOSPC, "No space left on device", "/dev/shm/tinyperf_ring")
  from mllog_builder import write_log
  from tinyperf.benchmarks.common.mlperf import ORG   # the submitter the entrypoint logs: config.json's, else SUBMISSION_ORG
  status = os.environ.get("STAND_IN_STATUS", "success")
  write_log(args.log, cfg.benchmark, seed=args.seed, division=cfg["division"], platform=cfg["system"], org=submitter or ORG,
            submission_status=cfg.get("submission_status"), init_minutes=0.1, run_minutes=2.0, status=status,
            t0_ms=int(time.time() * 1000))
  return 0 if status == "success" else 1


if __name__ == "__main__":
  sys.exit(main())
