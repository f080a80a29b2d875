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
    """Exclusive lock across processes (and across nodes on filesystems with working flock, e.g. NFSv4)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
      fcntl.flock(lock, fcntl.LOCK_EX)
      try: yield Ledger(path)
      finally: fcntl.flock(lock, fcntl.LOCK_UN)

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
