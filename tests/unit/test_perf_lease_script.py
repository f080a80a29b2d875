"""lab/scripts/perf_lease_h200x2.sh, the 2-GPU lease plan: a mistyped argument is refused before any job starts (it used to
be ignored, and the whole lease started on whatever machine it was typed on); `poll` only reads."""
from __future__ import annotations
import os
import subprocess

from tests.conftest import REPO

SCRIPT = REPO / "lab" / "scripts" / "perf_lease_h200x2.sh"


def test_an_unknown_argument_starts_nothing(tmp_path):
  job = tmp_path / "job"
  r = subprocess.run([str(SCRIPT), "pol"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                     env={**os.environ, "JOB": str(job)})
  assert r.returncode == 2 and "'pol'" in r.stderr and "Usage:" in r.stderr, r.stderr
  assert not job.exists()


def test_poll_reads_a_job_and_writes_nothing(tmp_path):
  job = tmp_path / "job"; job.mkdir()
  (job / "bert_1gpu.log").write_text("step 1\nstep 2 of 10\n")
  (job / "events").write_text("1 t=0s start\n")
  r = subprocess.run([str(SCRIPT), "poll"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                     env={**os.environ, "JOB": str(job)})
  assert r.returncode == 0 and "bert_1gpu.log: step 2 of 10" in r.stdout and "t=0s start" in r.stdout, r.stdout
  assert sorted(p.name for p in job.iterdir()) == ["bert_1gpu.log", "events"]
