"""Each benchmark's `implementations/cpu_smoke` README, step by step, as a user types it in a fresh `git clone`:
`BUILD_IMAGE=0 ./setup.sh`, `source .venv/bin/activate`, `DATA_DIR=data ./init_datasets.sh`, `DATA_DIR=data
./run_and_time.sh` (relative paths, from the implementation directory), then `tinyperf check` of the log given
relative to another directory. The BERT run (seed 7, deterministic on the CPU; tests/conftest.py bert_readme_run) is
the one test_bert_smoke_run.py reads."""
from __future__ import annotations
import json

import pytest

from tests.conftest import readme_flow, sh

pytestmark = pytest.mark.integration


def test_resnet_cpu_smoke_readme(fresh_clone):
  impl, log, env = readme_flow(fresh_clone, "resnet")
  p = sh(["tinyperf", "check", log.relative_to(fresh_clone.parent).as_posix()], cwd=fresh_clone.parent, env=env)
  assert p.returncode == 0 and "compliant" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]


def test_bert_cpu_smoke_readme(bert_readme_run, fresh_clone):
  _, log, env = bert_readme_run
  p = sh(["tinyperf", "check", "--json", str(log.relative_to(fresh_clone))], cwd=fresh_clone, env=env)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
  assert json.loads(p.stdout)["files"][0]["compliant"]
