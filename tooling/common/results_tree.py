"""The directory tree `tinyperf run` writes under --results R. Every verb that reads or writes it builds its paths here:

  R/results/<system>/<bm>/result_<i>.txt   finished runs: the submitter tree's results/ (never overwritten)
  R/systems/<system>.json                  the machine the runs ran on (variants/ keeps earlier, different ones)
  R/runs/<system>/<bm>/ledger.json         every attempt of the set (tooling/common/ledger.py)
  R/runs/<system>/<bm>/run_<i>_<seed>/     one attempt's work folder (benchmarks/common/rundir.py RunDir): output.log,
                                           the MLPerf log RUN_LOG while it is written, cache/
  R/runs/<system>/<bm>/slurm.json          every Slurm submission of the set (tooling/launch/slurm.py)
  R/runs/<system>/<bm>/slurm/submission_<k>/   one Slurm submission's script, and each of its tasks' output and exit
                                               record(s): one per attempt of a task Slurm requeued

results/ and systems/ are named as in an MLCommons submitter directory <org>/, so R can be checked like one. A set
(R, system, benchmark) is a ResultSet, built once where R enters (the CLI made R absolute) and handed on."""
from __future__ import annotations
import os
import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from tinyperf.benchmarks.common.rules import result_name
from tinyperf.benchmarks.common.rundir import OUTPUT_LOG, RUN_LOG, RunDir  # noqa: F401  (the layout's readers name the files here)
from tinyperf.tooling.common.container import host_path
from tinyperf.tooling.common.errors import UserError

RESULTS, SYSTEMS, RUNS = "results", "systems", "runs"
LEDGER = "ledger.json"
SLURM_RECORD = "slurm.json"   # every Slurm submission of a set (tooling/launch/slurm.py)


def result_dir(root: Path, system: str, benchmark: str) -> Path: return root / RESULTS / system / benchmark
def run_root(root: Path, system: str, benchmark: str) -> Path: return root / RUNS / system / benchmark
def ledger_path(root: Path, system: str, benchmark: str) -> Path: return run_root(root, system, benchmark) / LEDGER
def work_dir(run_root_dir: Path, index: int, seed: int) -> Path: return run_root_dir / f"run_{index}_{seed}"
def slurm_dir(run_root_dir: Path) -> Path: return run_root_dir / "slurm"
def slurm_record(run_root_dir: Path) -> Path: return Path(run_root_dir) / SLURM_RECORD
# Each submission's files go into a directory of its own, made (exclusively) before sbatch is asked: Slurm hands a job id
# out again once its counter restarts (a wiped StateSaveLocation), and a new job named by id alone would overwrite an
# earlier job's script, output and exit record. The record (slurm.json) names each job's directory.
SLURM_SUBMISSION = "submission_{}"
def slurm_files_dir(run_root_dir: Path, files: str) -> Path: return slurm_dir(run_root_dir) / files
def slurm_script_name(job: str) -> str: return f"job_{job}.sbatch"
# A task Slurm requeues (`scontrol requeue`, a node failure) runs again under the same job id and index: its output is
# appended to (the script's --open-mode=append; each attempt starts with a line naming its SLURM_RESTART_COUNT), and each
# attempt writes an exit record of its own, named by that count, so no attempt's output or exit status replaces an
# earlier one's.
SLURM_EXIT_RESTART = "restart{}"
def slurm_task_name(job: str, index, ext: str, restart=None) -> str:
  """A Slurm array task's output (ext "out", written by Slurm, restart None: one file every attempt appends to) or exit
  record ("exit", by the batch script; restart: the attempt's SLURM_RESTART_COUNT). job, index and restart may be what
  sbatch (%A, %a) or the script (${SLURM_ARRAY_JOB_ID}, ...) expands."""
  return f"job_{job}_{index}.{ext}" if restart is None else f"job_{job}_{index}.{SLURM_EXIT_RESTART.format(restart)}.{ext}"
def slurm_task_file(run_root_dir: Path, files: str, job: str, index: int, ext: str, restart=None) -> Path:
  return slurm_files_dir(run_root_dir, files) / slurm_task_name(job, index, ext, restart)
def slurm_exit_records(run_root_dir: Path, files: str, job: str, index: int) -> dict[int, Path]:
  """Every exit record one task left: restart count -> file."""
  d, found = slurm_files_dir(run_root_dir, files), {}
  name = re.compile(re.escape(slurm_task_name(job, index, "exit", "@")).replace("@", r"(\d+)", 1))
  for p in d.glob(slurm_task_name(job, index, "exit", "*")):
    if m := name.fullmatch(p.name): found[int(m[1])] = p
  return found
def systems_json(root: Path, system: str) -> Path: return root / SYSTEMS / f"{system}.json"
def variants_dir(root: Path) -> Path: return root / SYSTEMS / "variants"
def systems_lock(root: Path) -> Path: return root / RUNS / "systems.lock"


DEFAULT_ROOT = "out"   # `tinyperf run --results` when not given, relative to where it is typed


def default_root(quiet: bool = False) -> Path:
  """The results directory a verb reads when none is given: ./out, which `tinyperf run` writes by default; when ./out
  holds no runs of its own but exactly one directory in it does (./smoke.sh's out/smoke), that one, said on stderr."""
  root = Path(os.path.abspath(DEFAULT_ROOT))
  def holds_runs(d: Path) -> bool: return bool(run_roots(d)) or (d / RESULTS).is_dir()
  if holds_runs(root) or not root.is_dir(): return root
  inner = [d for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith(".") and holds_runs(d)]
  if len(inner) != 1: return root
  if not quiet: print(f"results: {os.path.relpath(inner[0])} (no --results given; ./{DEFAULT_ROOT} holds no runs but this "
                      f"directory in it)", file=sys.stderr)
  return inner[0]


@dataclass(frozen=True)
class ResultSet:
  """The runs of one system x benchmark under R: R/results/<system>/<bm> and R/runs/<system>/<bm>."""
  root: Path
  system: str
  benchmark: str

  @classmethod
  def of(cls, root: Path, cfg) -> ResultSet: return cls(Path(root), cfg["system"], cfg.benchmark)

  @classmethod
  def of_runs_dir(cls, runs_dir: Path) -> ResultSet:
    """The set whose R/runs/<system>/<bm> is runs_dir (a ledger's folder, a Slurm record's)."""
    d = Path(os.path.abspath(runs_dir))
    return cls(d.parents[2] if len(d.parents) > 2 else d, d.parent.name, d.name)

  @property
  def results_dir(self) -> Path: return result_dir(self.root, self.system, self.benchmark)
  @property
  def runs_dir(self) -> Path: return run_root(self.root, self.system, self.benchmark)
  @property
  def ledger(self) -> Path: return self.runs_dir / LEDGER
  @property
  def shown(self) -> str:
    """R as the user names it (inside a compose service: the host directory behind /results)."""
    return host_path(self.root)
  def result(self, index: int) -> Path: return self.results_dir / result_name(index)
  def run(self, index: int, seed: int) -> RunDir: return RunDir(work_dir(self.runs_dir, index, seed))


def run_roots(root: Path) -> list[Path]:
  """R/runs/<system>/<bm> of every set under R that has a ledger or a Slurm record, sorted."""
  runs = root / RUNS
  if not runs.is_dir(): return []
  return sorted({p.parent for name in (LEDGER, SLURM_RECORD) for p in runs.glob(f"*/*/{name}")})


def ledgers(root: Path) -> list[tuple[str, str, Path]]:
  """(system, benchmark, ledger path) of every set under R, sorted."""
  runs = root / RUNS
  if not runs.is_dir(): return []
  return sorted((p.parent.parent.name, p.parent.name, p) for p in runs.glob(f"*/*/{LEDGER}"))


def ensure_writable(root: Path):
  """Create the output root (or fail with the fix) and prove a file can be written there, before anything runs."""
  try:
    root.mkdir(parents=True, exist_ok=True)
    probe = root / f".tinyperf-write-test-{socket.gethostname()}-{os.getpid()}"  # unique across nodes too
    probe.write_bytes(b""); probe.unlink()
  except OSError as e:
    raise UserError(f"results directory {root} is not writable ({e.strerror}); choose a writable --results "
                    f"directory or fix its permissions. Nothing was run.") from None


def refuse_unknown_results(results_dir: Path, ledger: Path, pending: list[int]):
  """A result file the ledger does not know about is never overwritten: refuse loudly instead."""
  for i in pending:
    f = results_dir / result_name(i)
    if os.path.lexists(f):   # a dangling symlink too: the copy could not replace it
      raise UserError(f"{f} exists but the ledger {ledger} has no finished run {i}. Results are never overwritten: move "
                      f"the file away, or restore the ledger, and rerun.")
