"""The run ledger: one JSON file per system x benchmark recording every run attempt, so that rerunning the same
`tinyperf run` command skips valid finished runs and redoes crashed or interrupted ones.

A run that finished but missed the target is *done*, not failed: the rules count it (olympic scoring drops one), and
redoing it until it converges would be cherry-picking. Only runs that crashed, were killed or were interrupted are
redone. Every attempt stays in the ledger, with its seed, so the submission record keeps all of them."""
from __future__ import annotations
import fcntl
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, asdict
from pathlib import Path

from tooling.errors import UserError, write_atomic

DONE, FAILED, INTERRUPTED, RUNNING = "done", "failed", "interrupted", "running"


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


class Ledger:
  def __init__(self, path: Path):
    self.path = Path(path)
    self.attempts: list[Attempt] = []
    if self.path.exists():
      try:
        raw = json.loads(self.path.read_text())
        self.attempts = [Attempt(**a) for a in raw["attempts"]]
      except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise UserError(f"{self.path}: the run ledger is unreadable ({e}). It records which runs are finished; restore it "
                        f"from a backup or move it away to start a fresh set of runs (finished result files stay).") from None

  @staticmethod
  @contextmanager
  def locked(path: Path):
    """Read the ledger under an exclusive lock (held until the block ends) for a read-modify-write."""
    path = Path(path)
    with file_lock(path.with_suffix(".lock")): yield Ledger(path)

  def save(self):
    data = json.dumps({"format": "tinyperf-ledger-v1", "attempts": [asdict(a) for a in self.attempts]}, indent=1)
    write_atomic(self.path, data, overwrite=True)

  def latest(self, index: int) -> Attempt | None:
    tries = [a for a in self.attempts if a.index == index]
    return tries[-1] if tries else None

  def seeds(self) -> set[int]: return {a.seed for a in self.attempts}

  def pending(self, nexp: int) -> list[int]:
    """Indices without a finished run: never run, crashed, interrupted, or left 'running' by a killed launcher."""
    return [i for i in range(nexp) if (a := self.latest(i)) is None or a.status != DONE]


def add_attempt(ledger_path: Path, attempt: Attempt):
  with Ledger.locked(ledger_path) as led:
    led.attempts.append(attempt); led.save()


def update_attempt(ledger_path: Path, attempt: Attempt):
  with Ledger.locked(ledger_path) as led:
    for i, a in enumerate(led.attempts):
      if a.index == attempt.index and a.seed == attempt.seed: led.attempts[i] = attempt
    led.save()
