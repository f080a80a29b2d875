"""One real cpu_smoke run (`tinyperf prep synthetic-imagenet` + `tinyperf run resnet --nexp 1`, about 3 minutes on 2
cores) through `tinyperf report` and `tinyperf package`: the real console output's provenance and tqdm img_s are read,
and a ledger with one finished run is refused for packaging (ResNet needs 5)."""
from __future__ import annotations
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tooling import report
from tooling.cli import main as cli

pytestmark = pytest.mark.integration


def _cli(*args, timeout=1200):
  return subprocess.run([sys.executable, "-m", "tooling.cli", *map(str, args)], cwd=REPO, capture_output=True, text=True,
                        timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_real_smoke_run_report_and_package(capsys, tmp_path):
  data, R = tmp_path / "D", tmp_path / "R"
  p = _cli("prep", "synthetic-imagenet", "--out", data, "--classes", 4, "--train-per-class", 160, "--val-per-class", 40,
           "--size", 48, "--seed", 0)
  assert p.returncode == 0, p.stderr[-3000:]
  p = _cli("run", "resnet", "--platform", "cpu_smoke", "--nexp", 1, "--data", data, "--results", R, "--no-container")
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

  (b,) = report.collect(R)
  (r,) = b.runs
  assert r.converged and r.verdict == "compliant" and r.minutes > 0 and r.accuracy[-1][1] >= b.target == 0.9
  assert r.provenance and "git_sha=" in r.provenance[0] and "tinygrad=0.14.0" in r.provenance[0]
  assert r.step_unit == "img" and len(r.step_rate) >= 10 and all(v >= 0 for _, v in r.step_rate)
  assert [x for x, _ in r.throughput] == [float(e) for e in range(1, len(r.throughput) + 1)]
  assert cli(["report", str(R)]) == 0
  md = (R / "report" / "report.md").read_text()
  assert "## resnet on cpu_smoke" in md and "provenance: tinyperf=" in md and "(TARGET of the cpu_smoke config)" in md
  for k in ("accuracy", "time_to_train", "throughput"): assert (R / "report" / f"cpu_smoke_resnet_{k}.png").stat().st_size > 10_000

  capsys.readouterr()
  assert cli(["package", "--org", "tinycorp", "--out", str(tmp_path / "out"), "--results", str(R)]) == 2
  err = capsys.readouterr().err
  assert "1 finished resnet run(s) on cpu_smoke; a package needs exactly 5" in err and "--nexp 5" in err
  assert not (tmp_path / "out").exists()
