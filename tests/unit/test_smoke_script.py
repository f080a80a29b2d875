"""smoke.sh's own input, refused before it installs or writes anything (the run itself: tests/integration/test_report_smoke.py)."""
import os
import subprocess

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("nexp", ["0", "-1", "five"])
def test_a_bad_nexp_is_refused_before_anything_is_written(nexp, tmp_path):
  # NEXP=0 once reached `tinyperf run --nexp 0`, which ran the default five and ended "SMOKE FAILED: 5/0 compliant"
  r = subprocess.run([str(REPO / "smoke.sh")], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                     env={**os.environ, "NEXP": nexp, "OUT": "out"})
  assert r.returncode == 2 and "Traceback" not in r.stderr
  assert r.stderr.strip() == (f"smoke.sh: NEXP={nexp}: the number of runs is a whole number of at least 1 (unset: as many "
                              "as MLPerf requires).")
  assert not list(tmp_path.iterdir()) and not (REPO / "out" / "out").exists()


@pytest.mark.parametrize("env,shown", [({"OUT": "my smoke"}, "my smoke"), ({"OUT": "out", "ORG": "my org"}, "my org")])
def test_an_org_that_cannot_name_a_submitter_is_refused_before_anything_is_written(env, shown, tmp_path):
  # ORG defaults to OUT's name: OUT="my smoke" once installed, ran nothing (`run --org` refused it with a usage dump) and
  # ended SMOKE FAILED telling the user to rerun ./smoke.sh, which failed the same way
  r = subprocess.run([str(REPO / "smoke.sh")], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                     env={**os.environ, **env})
  assert r.returncode == 2 and "Traceback" not in r.stderr and "usage:" not in r.stderr, r.stderr
  assert r.stderr.strip().startswith(f"smoke.sh: ORG={shown}: ") and "ORG=name" in r.stderr, r.stderr
  assert not list(tmp_path.iterdir())


def test_a_data_set_an_older_prep_drew_is_refused_not_reused(tmp_path):
  # smoke.sh once prepped only where no manifest was: a set drawn before val held other-class images was reused, and
  # a run that scored 1.0 on it failed the checker's eval_accuracy < 1.0 with no word about the data
  import json
  from tinyperf.benchmarks.resnet.prep import manifest_path, synthetic_imagenet
  data = tmp_path / "out" / "data"
  synthetic_imagenet(data, classes=4, train_per_class=1, val_per_class=1, size=8)
  m = json.loads(manifest_path(data).read_text())
  m["source"] = {k: v for k, v in m["source"].items() if k != "val_other_class_every"}   # as the older prep wrote it
  manifest_path(data).write_text(json.dumps(m))
  before = manifest_path(data).read_bytes()
  r = subprocess.run([str(REPO / "smoke.sh")], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                     env={**os.environ, "OUT": "out", "NEXP": "1"})
  assert r.returncode == 1 and "Traceback" not in r.stderr, r
  assert str(manifest_path(data)) in r.stderr, r.stderr                # the data set prep refused to mix
  assert r.stdout.strip().splitlines()[-1] == "SMOKE FAILED: tinyperf prep synthetic-imagenet (above)"
  assert manifest_path(data).read_bytes() == before and not (tmp_path / "out" / "results").exists()


def test_the_install_says_it_is_still_working(tmp_path):
  """scripts/env.sh sends pip's output to install.log; a cold install was 79 s without a line. Every 10 s it says how
  long it has taken and pip's last line (here a stand-in python whose first pip call takes 12 s)."""
  venv = tmp_path / "venv"
  (venv / "bin").mkdir(parents=True)
  fake = venv / "bin" / "python"
  fake.write_text(f"#!/bin/sh\necho \"pip $*\"\n[ -e {tmp_path}/slept ] || {{ touch {tmp_path}/slept; sleep 12; }}\n")
  fake.chmod(0o755)
  p = subprocess.run(["bash", "-c", f"source {REPO}/scripts/env.sh"], cwd=tmp_path, capture_output=True, text=True,
                     timeout=120, env={**os.environ, "TINYPERF_VENV": str(venv)})
  assert p.returncode == 0, p.stderr
  ticks = [l for l in p.stderr.splitlines() if "installing, 1" in l]
  assert ticks and "pip install --upgrade pip" in ticks[0], p.stderr
