"""The record of a result set's Slurm submissions, R/runs/<system>/<bm>/slurm.json (layout: tooling/launch/slurm.py):
each job's id, its directory, run indices and arguments, as `tinyperf status` and --resume read them; and the scripts
kept by submissions stopped while sbatch ran, which no record names yet."""
from __future__ import annotations
import json
import os
import re
from pathlib import Path

from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common import safe_read
from tinyperf.tooling.common.errors import UserError, write_atomic
from tinyperf.tooling.launch.slurm_cluster import QUEUED, RUNNING

# the script sbatch is given, until sbatch has answered and the job is recorded; one kept by a submission stopped
# while sbatch ran (Slurm may have queued it) is matched to its job by squeue's %o on the next submission
UNSUBMITTED = ".unsubmitted-{}.sbatch"


def record_path(work_root: Path) -> Path: return T.slurm_record(work_root)


# what submit_runs records of each job and of its arguments, as status and --resume read them
JOB_FIELDS = {"job_id": (str, int), "job_name": str, "indices": list, "files": str, "submitted": (int, float),
              "spec": dict}
SPEC_FIELDS = {"benchmark": str, "platform": str, "nexp": int, "data": str, "results": str, "runtime": str,
               "image": (str, type(None)), "partition": str, "sbatch_args": list, "no_check": bool, "assume_shared": bool,
               "knobs": dict, "python": str, "repo": str}


def _check_job(k: int, job) -> None:
  """ValueError naming what is wrong with the record's job k (a hand edit, a copy from elsewhere)."""
  if not isinstance(job, dict): raise ValueError(f"job {k} is not an object")
  for fields, where in ((JOB_FIELDS, f"job {k}"), (SPEC_FIELDS, f"job {k} spec")):
    d = job if fields is JOB_FIELDS else job["spec"]   # JOB_FIELDS has made sure spec is an object
    for key, kind in fields.items():
      if key not in d: raise ValueError(f"{where}: {key!r} is missing")
      if not isinstance(d[key], kind) or (isinstance(d[key], bool) and kind is not bool):   # True is an int
        raise ValueError(f"{where}: {key!r} is {d[key]!r}")
  if not str(job["job_id"]).isdigit(): raise ValueError(f"job {k}: job_id {job['job_id']!r} is not a Slurm job id")
  if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", job["files"]):
    raise ValueError(f"job {k}: files {job['files']!r} is not the name of a directory in slurm/")
  nexp = job["spec"]["nexp"]
  if not 1 <= nexp <= L.MAX_NEXP: raise ValueError(f"job {k} spec: nexp {nexp} is not a number of runs 1 to {L.MAX_NEXP}")
  if not all(type(i) is int and 0 <= i < nexp for i in job["indices"]):
    raise ValueError(f"job {k}: indices {job['indices']!r} are not run numbers 0 to {nexp - 1}")


def load_record(work_root: Path) -> dict:
  path = record_path(work_root)
  if not path.exists(): return {"format": "tinyperf-slurm-v1", "jobs": []}
  try:
    rec = json.loads(safe_read.read_text(path, L.MAX_LEDGER_BYTES, "record of Slurm submissions"))
    if not isinstance(rec, dict) or not isinstance(rec.get("jobs"), list): raise ValueError("no list of jobs")
    for k, job in enumerate(rec["jobs"]): _check_job(k, job)
    return rec
  except (ValueError, RecursionError) as e:  # json.JSONDecodeError is a ValueError
    raise UserError(f"{path}: the record of Slurm submissions is unreadable ({e}). Restore it from a backup; the ledger "
                    f"and result files beside it are intact.") from None


def queued_indices(rec: dict, tasks: dict) -> dict[int, str]:
  """Run index -> '<job>_<index>' for the runs of this record that Slurm has queued or running."""
  ours = {str(j["job_id"]) for j in rec["jobs"]}
  return {i: f"{job}_{i}" for (job, i), (state, _) in tasks.items() if job in ours and state in QUEUED | RUNNING}


def kept_scripts(work_root: Path) -> list[Path]:
  """Scripts kept by submissions that were stopped once sbatch was started (SubmitInterrupted, MaybeSubmitted, or
  killed): Slurm may have queued a job from each, which no record names."""
  return sorted(T.slurm_dir(work_root).glob(f"{T.SLURM_SUBMISSION.format('*')}/{UNSUBMITTED.format('*')}"))


def record_job(rec: dict, work_root: Path, sbatched: Path, job: dict) -> None:
  """A queued job into the record (once), then its script from the name sbatch was given to job["script"]: in that
  order, because until the record holds the job, that first name (squeue's %o) is what finds it again (adopt_kept)."""
  if not any(str(j["job_id"]) == job["job_id"] and j["files"] == job["files"] for j in rec["jobs"]):
    rec["jobs"].append(job)
  write_atomic(record_path(work_root), json.dumps(rec, indent=1), overwrite=True)
  os.replace(sbatched, job["script"])
