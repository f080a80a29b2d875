"""The run ledger: one JSON file per system x benchmark recording every run attempt, so that rerunning the same
`tinyperf run` command skips valid finished runs and redoes crashed or interrupted ones.

A run that finished but missed the target is *done*, not failed: the rules count it (olympic scoring drops one), and
redoing it until it converges would be cherry-picking. Only runs that crashed, were killed or were interrupted are
redone. Every attempt stays in the ledger, with its seed, so the submission record keeps all of them.

A launcher claims a run before starting it: the attempt names its owner (launcher id, host, pid) and the owner holds a
POSIX lock on run_<i>_<seed>/claim.lock until the attempt is recorded. The kernel (or the NFS lock manager) drops that
lock however the owner dies (kill -9, `docker kill`, a lost node), across PID namespaces and containers, so another
launcher tells a live claim from a dead one by trying to take it, with no PID or hostname guessing. A dead owner's
attempt is settled by the next launcher: `done` when the run's own MLPerf log finished (run_stop), else `interrupted`.

Paths are stored relative to the results root (R in R/runs/<system>/<bm>/ledger.json) and made absolute on read, so a
ledger written inside a container (results at /results) reads right on the host. Older ledgers with absolute paths
that do not exist here are rebased onto this root by their results/... or runs/... tail."""
from __future__ import annotations
import errno
import fcntl
import json
import os
import shlex
import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field, asdict
from pathlib import Path

from benchmarks.common.io import file_digest
from tooling.common.errors import UserError, write_atomic
from tooling.common import results_tree as T

DONE, FAILED, INTERRUPTED, RUNNING = "done", "failed", "interrupted", "running"
CLAIM = "claim.lock"      # in the run's work directory; its owner holds a POSIX lock on it
# the image's environment that identifies it (Dockerfile.* ENV): recorded with every attempt that ran in an image
IMAGE_ENV = ("TINYPERF_GIT_SHA", "TINYPERF_VERSION", "TINYGRAD_VERSION", "TINYPERF_BASE_IMAGE", "TINYPERF_BASE_DIGEST")
# and, where the launcher sees the image (the container backend), the image that ran the attempt: a tag is moved by
# every build, its ID is not (the digest: where the image came from a registry)
IMAGE_ID, IMAGE_DIGEST = "image_id", "image_digest"
_PATH_FIELDS = ("result", "output")


@contextmanager
def file_lock(lock_path: Path):
  """Exclusive lock across processes and across nodes. POSIX record locks (fcntl.lockf) go through the NFS lock protocol
  (NFSv3 lockd, NFSv4 natively) and work on Lustre and GPFS, where flock() can be local to one node (Slurm array tasks
  on several nodes share one ledger). POSIX locks belong to the process and closing any descriptor of the file drops
  them, so a process never takes the same lock twice (no nesting)."""
  lock_path = Path(lock_path)
  lock_path.parent.mkdir(parents=True, exist_ok=True)
  with open(lock_path, "a") as f:  # lockf needs a writable descriptor; "a" never truncates
    fcntl.lockf(f, fcntl.LOCK_EX)
    try: yield
    finally: fcntl.lockf(f, fcntl.LOCK_UN)


@dataclass
class Attempt:
  index: int
  seed: int
  status: str = RUNNING
  started: float = field(default_factory=time.time)
  finished: float | None = None
  converged: bool | None = None
  result: str | None = None          # results/<system>/<bm>/result_<i>.txt once done
  output: str | None = None          # raw console output of INIT + RUN
  cache_drop: str | None = None
  backend: str = "host"
  image: str | None = None          # container backend: tag and image ID
  provenance: dict = field(default_factory=dict)  # container backend: the image's git sha, base digest, versions
  exit_codes: dict = field(default_factory=dict)
  note: str = ""
  slurm: dict = field(default_factory=dict)  # run as a Slurm array task: job (<array job>_<index>), node, runtime
  owner: dict = field(default_factory=dict)  # the launcher that claimed it: id, host, pid
  sha256: str | None = None         # of the run's MLPerf log, i.e. of result_<i>.txt (checked by run and status)
  overrides: dict = field(default_factory=dict)  # knobs the environment overrode for this run: {knob: [config, env]}


_ME: dict = {}


def launcher() -> dict:
  """This launcher's owner record (one per process)."""
  if _ME.get("pid") != os.getpid(): _ME.update(id=uuid.uuid4().hex, host=socket.gethostname(), pid=os.getpid())
  return dict(_ME)


def who(att: Attempt) -> str:
  o = att.owner
  return f"launcher pid {o.get('pid')} on {o.get('host')}" if o else "a launcher that recorded no owner (older tinyperf)"


class Claim:
  """The lock that says a launcher is running an attempt; held from the claim until the attempt's outcome is saved."""
  def __init__(self, work: Path):
    self.f = open(Path(work) / CLAIM, "a")
    fcntl.lockf(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh run directory: nobody else can hold it
  def release(self):
    if self.f: self.f.close(); self.f = None  # closing drops the POSIX lock


def log_outcome(log: Path) -> bool | None:
  """None when the MLPerf log did not finish (no run_stop: crashed, killed, unreadable); else whether it converged."""
  from tooling.common.mllog_reader import read_log
  try: stop = read_log(log, require_benchmark=False).first("run_stop")
  except (UserError, OSError): return None
  return None if stop is None else (stop.metadata or {}).get("status") == "success"


def root_of(ledger: Path) -> Path:
  """R of R/runs/<sys>/<bm>/ledger.json."""
  ledger = Path(os.path.abspath(ledger))
  return ledger.parents[3] if len(ledger.parents) > 3 else ledger.parent


class Ledger:
  def __init__(self, path: Path):
    self.path = Path(os.path.abspath(path))
    self.root = root_of(self.path)
    self.attempts: list[Attempt] = []
    self.nexp = 0   # the set size the last `tinyperf run` asked for (0: not recorded, an older ledger)
    if self.path.exists():
      try:
        raw = json.loads(self.path.read_text())
        self.attempts = [Attempt(**a) for a in raw["attempts"]]
        self.nexp = int(raw.get("nexp", 0))
        for a in self.attempts:
          for k in _PATH_FIELDS:
            if getattr(a, k) is not None: setattr(a, k, str(self._on_read(str(getattr(a, k)))))
      except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise UserError(f"{self.path}: the run ledger is unreadable ({e}). It records which runs are finished; restore it "
                        f"from a backup or move it away to start a fresh set of runs (finished result files stay).") from None

  def _on_read(self, p: str) -> Path:
    path = Path(p)
    if not path.is_absolute(): return self.root / path
    if os.path.lexists(path): return path
    # an absolute path of another mount (a container's /results): rebase its results/<sys>/<bm>/... tail onto this root
    parts, sysbm = path.parts, (self.path.parent.parent.name, self.path.parent.name)
    for k in range(len(parts) - 3, -1, -1):
      if parts[k] in (T.RESULTS, T.RUNS) and parts[k + 1:k + 3] == sysbm: return self.root.joinpath(*parts[k:])
    return path

  def _on_write(self, p: str) -> str:
    try: return str(Path(os.path.abspath(p)).relative_to(self.root))
    except ValueError: return p

  @staticmethod
  def lock_path(path: Path) -> Path: return Path(path).with_suffix(".lock")

  @staticmethod
  @contextmanager
  def locked(path: Path):
    """Read the ledger under an exclusive lock (held until the block ends) for a read-modify-write."""
    path = Path(path)
    with file_lock(Ledger.lock_path(path)): yield Ledger(path)

  def save(self):
    rows = []
    for a in self.attempts:
      d = asdict(a)
      for k in _PATH_FIELDS:
        if d[k] is not None: d[k] = self._on_write(d[k])
      rows.append(d)
    head = {"format": "tinyperf-ledger-v1", **({"nexp": self.nexp} if self.nexp else {})}
    write_atomic(self.path, json.dumps({**head, "attempts": rows}, indent=1), overwrite=True)

  def work(self, att: Attempt) -> Path: return T.work_dir(self.path.parent, att.index, att.seed)

  def latest(self, index: int) -> Attempt | None:
    """The attempt that decides run `index`: its finished one if any (a later stale attempt never hides it), else the
    last one."""
    tries = [a for a in self.attempts if a.index == index]
    done = [a for a in tries if a.status == DONE]
    return done[-1] if done else tries[-1] if tries else None

  def seeds(self) -> set[int]: return {a.seed for a in self.attempts}

  def pending(self, nexp: int) -> list[int]:
    """Indices without a finished run: never run, crashed, interrupted, or left 'running' (claimed or stale)."""
    return [i for i in range(nexp) if (a := self.latest(i)) is None or a.status != DONE]

  def alive(self, att: Attempt) -> bool:
    """Whether the launcher that claimed a `running` attempt still runs it."""
    return att.status == RUNNING and self.held(att)

  def held(self, att: Attempt) -> bool:
    """Whether a launcher holds the attempt's claim lock. A test lock (shared, so any reader can try it) conflicts with
    the owner's exclusive one; it is never tried on this launcher's own claims, because closing a descriptor drops
    this process's lock on the file."""
    if att.owner.get("id") == launcher()["id"]: return True
    try: f = open(self.work(att) / CLAIM, "rb")
    except FileNotFoundError: return False           # no claim (older tinyperf, or a deleted run directory)
    except OSError: return True                      # cannot tell: never take over a run that may be alive
    with f:
      try: fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
      except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES): return True
        raise
      fcntl.lockf(f, fcntl.LOCK_UN)
      return False

  def claimed(self, nexp: int) -> dict[int, Attempt]:
    """Unfinished runs another live launcher is running now."""
    return {i: a for i in self.pending(nexp) if (a := self.latest(i)) is not None and a.status == RUNNING and self.alive(a)}

  def settle(self) -> list[str]:
    """Settle attempts whose launcher is gone: `done` when the run's own log finished (a finished run is never redone with
    a new seed), else `interrupted`. Returns one line per change; the caller saves."""
    msgs = []
    for att in self.attempts:
      if att.status == DONE or (att.status == RUNNING and self.alive(att)): continue
      if att.status != RUNNING and att is not self.latest(att.index): continue   # an old failure stays as it was
      done = self.latest(att.index).status == DONE
      converged = None if done else log_outcome(self.work(att) / T.RUN_LOG)
      if converged is not None:
        i = att.index
        att.status, att.converged, att.finished = DONE, converged, att.finished or time.time()
        att.sha256 = file_digest(self.work(att) / T.RUN_LOG, "sha256")
        att.result = att.result or str(T.result_dir(self.root, self.path.parent.parent.name, self.path.parent.name) /
                                        T.result_name(i))
        att.note = f"{att.note + '; ' if att.note else ''}its log finished (run_stop) but {who(att)} did not record it"
        msgs.append(f"run {i} (seed {att.seed}): its MLPerf log finished but {who(att)} stopped before recording it; "
                    f"recorded as done, not redone")
      elif att.status == RUNNING:
        att.status, att.finished = INTERRUPTED, att.finished or time.time()
        att.note = f"{att.note + '; ' if att.note else ''}{who(att)} died while running it (killed, or its container was)"
        msgs.append(f"run {att.index} (seed {att.seed}) was left running by {who(att)}, which is gone: marked "
                    f"interrupted" + ("" if done else "; it is redone with a new seed"))
    return msgs

  def check_result(self, att: Attempt) -> tuple[str, str]:
    """A finished run's result file against the ledger's hash: ("ok"|"copy"|"missing"|"changed", what to say).
    "copy": the result file is absent but the run's own log is intact (its copy failed, e.g. on a full disk)."""
    res, log = Path(att.result) if att.result else None, self.work(att) / T.RUN_LOG
    log_ok = att.sha256 is not None and log.is_file() and file_digest(log, "sha256") == att.sha256
    if res is None or not os.path.lexists(res):
      if log_ok: return "copy", f"{res} is missing; the run's own log {log} is intact and is copied to it"
      return "missing", (f"{res} is MISSING but run {att.index} (seed {att.seed}) is finished in {self.path}; restore "
                         f"the file from a backup. The run is not redone: that would re-roll a finished run.")
    if not res.is_file():
      return "changed", f"{res} is not a regular file (a dangling symlink or a directory); restore run {att.index}'s log."
    if att.sha256 is not None and file_digest(res, "sha256") != att.sha256:
      how = (f"its own log {log} is intact: `cp {shlex.quote(str(log))} {shlex.quote(str(res))}`" if log_ok
             else "restore it from a backup")
      return "changed", (f"{res} CHANGED since run {att.index} (seed {att.seed}) wrote it (sha256 differs from "
                         f"{self.path}); {how}.")
    return "ok", ""


def add_attempt(ledger_path: Path, attempt: Attempt):
  with Ledger.locked(ledger_path) as led:
    led.attempts.append(attempt); led.save()


def update_attempt(ledger_path: Path, attempt: Attempt):
  with Ledger.locked(ledger_path) as led:
    for i, a in enumerate(led.attempts):
      if a.index == attempt.index and a.seed == attempt.seed: led.attempts[i] = attempt
    led.save()
