"""What the unit tests of the Slurm scheduler share (tests/unit/test_slurm.py, test_slurm_submit.py): the CLI in a
subprocess, a submission's recorded arguments, and the shape of a bad-input answer."""
from __future__ import annotations
import os
import subprocess
import sys

from tests.conftest import REPO


def tinyperf(*args, env=None):
  return subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *args], cwd=REPO, capture_output=True, text=True,
                        env={**os.environ, **(env or {})}, timeout=300)


def spec(**kw) -> dict:
  """A submission's arguments as slurm.json records them (a tinybox_green docker submission unless kw says otherwise)."""
  s = {"benchmark": "resnet", "platform": "tinybox_green", "nexp": 5, "data": "/shared/imagenet",
       "results": "/shared/out", "runtime": "docker", "image": None, "partition": "gpu", "sbatch_args": [],
       "no_check": False, "assume_shared": False, "knobs": {}, "python": "/shared/venv/bin/python", "repo": "/shared/tinyperf"}
  return {**s, **kw}


def bad_input(r, *needles):
  """Exit 2 and one line on stderr, no traceback, holding every needle."""
  assert r.returncode == 2, r.stdout + r.stderr
  assert r.stderr.startswith("tinyperf ") and "Traceback" not in r.stderr
  assert len(r.stderr.strip().splitlines()) == 1, r.stderr
  for n in needles: assert n in r.stderr, r.stderr
