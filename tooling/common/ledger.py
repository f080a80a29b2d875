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
ledger written inside a container (results at /results) reads right on the host."""
from __future__ import annotations
import errno
import fcntl
import json
import math
import os
import shlex
import socket
import stat
import time
import typing
import uuid
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, field, asdict, fields
from pathlib import Path

from tinyperf.benchmarks.common.io import file_digest
from tinyperf.benchmarks.common.mlperf import CRASHED
from tinyperf.tooling.common.container import SERVICE_ENV
from tinyperf.tooling.common.errors import UserError, write_atomic
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common import safe_read

DONE, FAILED, INTERRUPTED, RUNNING = "done", "failed", "interrupted", "running"
CLAIM = "claim.lock"      # in the run's work directory; its owner holds a POSIX lock on it
# the image's environment that identifies it (Dockerfile.* ENV): recorded with every attempt that ran in an image
IMAGE_ENV = ("TINYPERF_GIT_SHA", "TINYPERF_VERSION", "TINYGRAD_VERSION", "TINYPERF_BASE_IMAGE", "TINYPERF_BASE_DIGEST",
             "TINYPERF_BUILD_ID")
# and, where the launcher sees the image (the container backend), the image that ran the attempt: a tag is moved by
# every build, its ID is not (the digest: where the image came from a registry)
IMAGE_ID, IMAGE_DIGEST = "image_id", "image_digest"
CODE_TREE = "code_tree"   # the hash of the code the image holds (`tinyperf build`), in or out of the container
_PATH_FIELDS = ("result", "output")
STATUSES = (DONE, FAILED, INTERRUPTED, RUNNING)
MAX_NEXP = 1000                    # runs in one set: MLPerf asks for 5 (ResNet) or 10 (BERT)
MAX_LEDGER_BYTES = 64 * safe_read.MiB   # a real ledger is a few KB a run; this is tens of thousands of attempts


@contextmanager
def file_lock(lock_path: Path):
  """Exclusive lock across processes and across nodes. POSIX record locks (fcntl.lockf) go through the NFS lock protocol
  (NFSv3 lockd, NFSv4 natively) and work on Lustre and GPFS, where flock() can be local to one node (Slurm array tasks
  on several nodes share one ledger). POSIX locks belong to the process and closing any descriptor of the file drops
  them, so a process never takes the same lock twice (no nesting)."""
  lock_path = Path(lock_path)
  lock_path.parent.mkdir(parents=True, exist_ok=True)
  try:   # lockf needs a writable descriptor; O_APPEND never truncates, O_NONBLOCK never waits on a FIFO put there
    fd = os.open(lock_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
  except OSError as e:
    if e.errno == errno.ENXIO: e = OSError(errno.ENXIO, "a FIFO with no reader, not a lock file; remove it")
    raise safe_read.os_error(lock_path, e, "opened to lock the run ledger") from None
  with os.fdopen(fd, "a") as f:
    if not stat.S_ISREG(mode := os.fstat(fd).st_mode):
      raise UserError(f"{lock_path}: a {safe_read.kind_of(mode)}, not the ledger's lock file; remove it and rerun.")
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
  platform: str | None = None       # the implementation that ran it, and the sha256 of its resolved config.json
  config_sha256: str | None = None


_ME: dict = {}


def launcher() -> dict:
  """This launcher's owner record (one per process)."""
  if _ME.get("pid") != os.getpid():
    _ME.clear()
    _ME.update(id=uuid.uuid4().hex, host=socket.gethostname(), pid=os.getpid())
    # a compose service's launcher: its runs are redone by running the service again, not by a `tinyperf run` anyone typed
    if os.environ.get(SERVICE_ENV): _ME["compose_service"] = os.environ[SERVICE_ENV]
  return dict(_ME)


def who(att: Attempt) -> str:
  o = att.owner
  return f"launcher pid {o.get('pid')} on {o.get('host')}" if o else "a launcher that recorded no owner (a hand-made ledger)"


class Claim:
  """The lock that says a launcher is running an attempt; held from the claim until the attempt's outcome is saved."""
  def __init__(self, work: Path):
    self.f = open(Path(work) / CLAIM, "a")
    fcntl.lockf(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh run directory: nobody else can hold it
  def release(self):
    if self.f: self.f.close(); self.f = None  # closing drops the POSIX lock


def _run_stop(log: Path) -> dict | None:
  """The metadata of the MLPerf log's run_stop; None without one (killed, unreadable)."""
  from tinyperf.tooling.common.mllog_reader import read_log
  try: stop = read_log(log, require_benchmark=False).first("run_stop")
  except (UserError, OSError): return None
  return None if stop is None else stop.metadata if isinstance(stop.metadata, dict) else {}


def log_outcome(log: Path) -> bool | None:
  """None when the MLPerf log did not finish (no run_stop: killed, unreadable; or the run_stop of a crash, which is no
  training outcome: benchmarks/common/mlperf.abort_on_failure); else whether it converged."""
  md = _run_stop(log)
  return None if md is None or md.get(CRASHED) else md.get("status") == "success"


def crash_of(log: Path) -> str | None:
  """What crashed a RUN, as its run_stop names it; None otherwise."""
  md = _run_stop(log)
  return str(md[CRASHED]) if md and md.get(CRASHED) else None


def digest(path: Path, what: str = "result file") -> str:
  """sha256 of a file; unreadable (mode 000, a directory, a device) is bad input naming it."""
  safe_read.require_regular(path, what)
  try: return file_digest(path, "sha256")
  except OSError as e: raise safe_read.os_error(path, e) from None


_TYPES = typing.get_type_hints(Attempt)


def _typed(raw, k: int) -> Attempt:
  """Attempt k of a ledger as read, every field of the type Attempt declares (ValueError naming the field otherwise):
  a hand edit or a damaged file is refused on read, not met as a TypeError deep in `run`, `status` or `package`."""
  if not isinstance(raw, dict): raise ValueError(f"attempt {k} is not an object")
  if unknown := sorted(set(raw) - set(_TYPES)):
    raise ValueError(f"attempt {k}: unknown field(s) {', '.join(map(repr, unknown))}")
  for f in fields(Attempt):
    if f.name not in raw:
      if f.default is f.default_factory is MISSING: raise ValueError(f"attempt {k}: {f.name!r} is missing")
      continue
    v, t = raw[f.name], _TYPES[f.name]
    numeric = t in (int, float) or float in typing.get_args(t)
    if (t is float or float in typing.get_args(t)) and type(v) is int: v = raw[f.name] = float(v)   # a time written 0
    ok = isinstance(v, t) and not (isinstance(v, bool) and numeric)
    if ok and isinstance(v, float): ok = math.isfinite(v)
    if not ok: raise ValueError(f"attempt {k}: {f.name!r} is {v!r:.80}, not {getattr(t, '__name__', t)}")
  if not 0 <= raw["index"] < MAX_NEXP:
    raise ValueError(f"attempt {k}: index {raw['index']} is not a run number 0 to {MAX_NEXP - 1}")
  if raw["seed"] < 0: raise ValueError(f"attempt {k}: seed {raw['seed']} is negative")
  if raw.get("status", RUNNING) not in STATUSES:
    raise ValueError(f"attempt {k}: status {raw['status']!r:.80} is not one of {', '.join(STATUSES)}")
  return Attempt(**raw)


class Ledger:
  def __init__(self, path: Path):
    self.path = Path(os.path.abspath(path))
    self.set = T.ResultSet.of_runs_dir(self.path.parent)   # R, system and benchmark, from where the ledger lies
    self.root = self.set.root
    self.attempts: list[Attempt] = []
    self.nexp = 0   # the set size the last `tinyperf run` asked for (0: no ledger file yet; its first save sets it)
    if os.path.lexists(self.path):   # a dangling link too: read_text names it
      text = safe_read.read_text(self.path, MAX_LEDGER_BYTES, "run ledger")   # a directory, a FIFO, /dev/zero: refused
      try:
        raw = json.loads(text)
        if not isinstance(raw, dict) or not isinstance(raw.get("attempts"), list): raise ValueError("no list of attempts")
        self.attempts = [_typed(a, k) for k, a in enumerate(raw["attempts"])]
        nexp = raw.get("nexp")
        if type(nexp) is not int or not 1 <= nexp <= MAX_NEXP:
          raise ValueError(f"nexp {nexp!r:.80} is not a number of runs 1 to {MAX_NEXP}")
        self.nexp = nexp
        for a in self.attempts:
          for k in _PATH_FIELDS:
            if getattr(a, k) is not None: setattr(a, k, str(self._on_read(getattr(a, k), a, k)))
      except (ValueError, RecursionError) as e:   # json.JSONDecodeError is a ValueError; RecursionError: [[[[...]]]]
        raise UserError(f"{self.path}: the run ledger is unreadable ({e}). It records which runs are finished; restore it "
                        f"from a backup or move it away to start a fresh set of runs (finished result files stay).") from None

  def _expected(self, att: Attempt, key: str) -> Path:
    """Where an attempt's result or output is: the only place `run` ever writes it."""
    return self.run_dir(att).output if key == "output" else self.set.result(att.index)

  def _on_read(self, p: str, att: Attempt, key: str) -> Path:
    """A stored path made absolute; ValueError when it is not where `run` puts that file (a tampered ledger would
    otherwise have `run` write its copy, or `status` read, wherever it points)."""
    path, want = Path(p), self._expected(att, key)
    if not path.is_absolute(): path = self.root / path
    if Path(os.path.normpath(path)) != want:
      raise ValueError(f"run {att.index} (seed {att.seed}): its {key} {p!r:.200} is not {want}, where `tinyperf run` "
                       f"writes it")
    return want

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
    if not 1 <= self.nexp <= MAX_NEXP: raise ValueError(f"{self.path}: a ledger is saved with its set size, not {self.nexp}")
    write_atomic(self.path, json.dumps({"format": "tinyperf-ledger-v1", "nexp": self.nexp, "attempts": rows}, indent=1),
                 overwrite=True)

  def run_dir(self, att: Attempt) -> T.RunDir: return self.set.run(att.index, att.seed)

  def latest(self, index: int) -> Attempt | None:
    """The attempt that decides run `index`: its finished one if any (a later stale attempt never hides it), else the
    last one."""
    return self.latest_all().get(index)

  def latest_all(self) -> dict[int, Attempt]:
    """latest() of every run with an attempt, in one pass (a ledger may hold many thousands of attempts)."""
    out: dict[int, Attempt] = {}
    for a in self.attempts:
      if a.status == DONE or (cur := out.get(a.index)) is None or cur.status != DONE: out[a.index] = a
    return out

  def seeds(self) -> set[int]: return {a.seed for a in self.attempts}

  def pending(self, nexp: int) -> list[int]:
    """Indices without a finished run: never run, crashed, interrupted, or left 'running' (claimed or stale)."""
    latest = self.latest_all()
    return [i for i in range(nexp) if (a := latest.get(i)) is None or a.status != DONE]

  def alive(self, att: Attempt) -> bool:
    """Whether the launcher that claimed a `running` attempt still runs it."""
    return att.status == RUNNING and self.held(att)

  def held(self, att: Attempt) -> bool:
    """Whether a launcher holds the attempt's claim lock. A test lock (shared, so any reader can try it) conflicts with
    the owner's exclusive one; it is never tried on this launcher's own claims, because closing a descriptor drops
    this process's lock on the file."""
    if att.owner.get("id") == launcher()["id"]: return True
    try: f = open(self.run_dir(att).path / CLAIM, "rb")
    except FileNotFoundError: return False           # no claim (a deleted run directory)
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
    latest = self.latest_all()
    return {i: a for i in self.pending(nexp) if (a := latest.get(i)) is not None and a.status == RUNNING and self.alive(a)}

  def settle(self) -> list[str]:
    """Settle attempts whose launcher is gone: `done` when the run's own log finished (a finished run is never redone with
    a new seed), else `interrupted`. Returns one line per change; the caller saves."""
    msgs, latest = [], self.latest_all()   # one pass: a settle under the lock is linear in the attempts
    for att in self.attempts:
      if att.status == DONE or (att.status == RUNNING and self.alive(att)): continue
      if att.status != RUNNING and att is not latest[att.index]: continue   # an old failure stays as it was
      done = latest[att.index].status == DONE
      converged = None if done else log_outcome(self.run_dir(att).log)
      if converged is not None:
        i = att.index
        latest[i] = att   # the run's only finished attempt: later ones of it are not settled as done too
        att.status, att.converged, att.finished = DONE, converged, att.finished or time.time()
        att.sha256 = file_digest(self.run_dir(att).log, "sha256")
        att.result = att.result or str(self.set.result(i))
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
    res, log = Path(att.result) if att.result else None, self.run_dir(att).log
    try: log_ok = att.sha256 is not None and log.is_file() and file_digest(log, "sha256") == att.sha256
    except OSError: log_ok = False
    if res is None or not os.path.lexists(res):
      if log_ok: return "copy", f"{res} is missing; the run's own log {log} is intact and is copied to it"
      return "missing", (f"{res} is MISSING but run {att.index} (seed {att.seed}) is finished in {self.path}; restore "
                         f"the file from a backup. The run is not redone: that would re-roll a finished run.")
    if not res.is_file():
      return "changed", f"{res} is not a regular file (a dangling symlink or a directory); restore run {att.index}'s log."
    try: changed = att.sha256 is not None and digest(res) != att.sha256
    except UserError as e: return "changed", f"{e} Run {att.index}'s result file cannot be checked against {self.path}."
    if changed:
      how = (f"its own log {log} is intact: `cp {shlex.quote(str(log))} {shlex.quote(str(res))}`" if log_ok
             else "restore it from a backup")
      return "changed", (f"{res} CHANGED since run {att.index} (seed {att.seed}) wrote it (sha256 differs from "
                         f"{self.path}); {how}.")
    return "ok", ""


def add_attempt(ledger_path: Path, attempt: Attempt, nexp: int = 0):
  """nexp: the set size of a ledger this attempt starts (an existing one keeps its own)."""
  with Ledger.locked(ledger_path) as led:
    led.nexp = led.nexp or nexp
    led.attempts.append(attempt); led.save()


def update_attempt(ledger_path: Path, attempt: Attempt):
  with Ledger.locked(ledger_path) as led:
    for i, a in enumerate(led.attempts):
      if a.index == attempt.index and a.seed == attempt.seed: led.attempts[i] = attempt
    led.save()
