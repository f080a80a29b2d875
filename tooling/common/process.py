"""A child process of the launcher, the bench or a Slurm task: its output teed as it arrives, its whole process group
stopped on Ctrl-C, a time limit or the launcher's death (no stage owns this: each of them runs processes)."""
from __future__ import annotations
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path


_WATCHDOG = ("import os, signal, sys\n"
             "if sys.stdin.buffer.read() != b'done':\n"
             "  try: os.killpg(int(sys.argv[1]), signal.SIGKILL)\n"
             "  except ProcessLookupError: pass\n")


def _watchdog(pgid: int) -> subprocess.Popen:
  """A process that kills the phase's process group when this launcher dies without saying "done" (kill -9, the OOM
  killer): it reads a pipe only the launcher holds, so EOF without "done" means the launcher is gone, and an INIT left
  running would hold the GPUs when the rerun starts. Its own session keeps Ctrl-C and SIGHUP of the terminal off it."""
  return subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(pgid)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)   # holds no pipe of a reader of ours open


def _release(dog: subprocess.Popen):
  try: dog.stdin.write(b"done"); dog.stdin.close()
  except OSError: pass
  dog.wait()


def raw_stdout(chunk: bytes): sys.stdout.buffer.write(chunk); sys.stdout.buffer.flush()


def stop_process_group(proc: subprocess.Popen, grace_s: float = 30) -> None:
  """SIGTERM to the process group of proc (started with start_new_session: what it started, e.g. BEAM's workers, too),
  SIGKILL if proc has not ended after grace_s seconds."""
  try: os.killpg(proc.pid, signal.SIGTERM); proc.wait(timeout=grace_s)
  except (ProcessLookupError, subprocess.TimeoutExpired):
    try: os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError: pass


def stream_process(cmd: list[str], env: dict, out_file, cwd: Path, time_limit: float | None = None,
                   console=raw_stdout, limit_until: bytes | None = None) -> tuple[int, bool]:
  """Run one process, teeing its output to out_file (if any) and to console (all of it by default; a tinyperf.tooling.launch.console
  Console shows milestones) as it arrives (a crash keeps what was printed). With time_limit, its whole process group
  (BEAM's workers too) is killed after that many seconds, unless limit_until appeared in its output before (the limit
  then no longer applies: INIT's limit ends at init_stop).
  Returns (exit code, whether the time limit stopped it): -SIGKILL alone could also be the OOM killer."""
  proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
  dog = _watchdog(proc.pid)
  stopped = threading.Event()
  def stop():
    if proc.poll() is not None: return     # it finished just as the limit came
    stopped.set()
    try: os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError: pass
  timer = threading.Timer(time_limit, stop) if time_limit else None
  if timer: timer.start()
  seen = b""   # the end of the previous chunk: the marker may straddle two reads
  try:
    for chunk in iter(lambda: proc.stdout.read1(65536), b""):
      if out_file is not None: out_file.write(chunk); out_file.flush()
      console(chunk)
      if timer and limit_until:
        if limit_until in seen + chunk: timer.cancel()
        seen = chunk[-len(limit_until):]
    return proc.wait(), stopped.is_set()
  except BaseException:
    # Ctrl-C or launcher failure: stop the whole process group of the phase, then re-raise
    stop_process_group(proc)
    raise
  finally:
    if timer: timer.cancel()
    _release(dog)
