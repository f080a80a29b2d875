"""The ResNet entrypoint's failure paths on the CPU (a RUN process alone: one JIT warm-up), and the host launcher's
loop with the stand-in trainer. The protocol of a whole INIT + RUN log, closed rules included, is checked on the
cpu_smoke README run (tests/integration/test_implementation_flows.py)."""
import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO
from mllog_builder import read_events
from tinyperf.tooling.common.judge.check import check_path

pytestmark = pytest.mark.integration


def _run(args, env=None, timeout=900):
  return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  d = tmp_path_factory.mktemp("smoke") / "data"
  r = _run(["-m", "tinyperf.benchmarks.resnet.prep", "synthetic-imagenet", "--out", str(d), "--classes", "4",
            "--train-per-class", "160", "--val-per-class", "40", "--size", "48", "--seed", "0"])
  assert r.returncode == 0, r.stderr
  return d


def test_non_finite_loss_ends_the_run_with_run_stop_aborted(data, tmp_path):
  """A loss scale that float32 cannot hold (1e39 passes the knob's range as a Python float, and overflows to inf on the
  device) turns the gradients and then the weights NaN, so the second step's loss is NaN: the RUN (no INIT needed) must
  end its log with one run_stop status=aborted and exit 1 with a message, not a traceback."""
  log = tmp_path / "nan.txt"
  # one stage of the toy's two: how a run ends does not depend on the depth, and the step compiles faster (37 -> 24 CPU-s)
  r = _run(["-m", "tinyperf.benchmarks.resnet.train", "--platform", "cpu_smoke", "--phase", "run", "--seed", "3",
            "--data", str(data), "--work", str(tmp_path / "r"), "--log", str(log)],
           env={"LOSS_SCALER": "1e39", "RESNET_LAYERS": "1"})
  assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
  assert "RUN ABORTED" in r.stderr and re.search(r"loss is (nan|inf) at epoch 1 step [12]\b", r.stderr), r.stderr[-3000:]
  assert "Traceback" not in r.stderr
  events = read_events(log)
  assert [e["key"] for e in events].count("run_stop") == 1
  assert events[-1]["key"] == "run_stop" and events[-1]["metadata"]["status"] == "aborted"


def test_missing_data_is_exit_2_without_traceback(tmp_path):
  r = _run(["-m", "tinyperf.benchmarks.resnet.train", "--platform", "cpu_smoke", "--phase", "run", "--seed", "1",
            "--data", str(tmp_path / "nope"), "--work", str(tmp_path / "r")])
  assert r.returncode == 2 and "Traceback" not in r.stderr
  assert "nope" in r.stderr and "tinyperf prep" in r.stderr
  log = tmp_path / "r" / "mlperf.txt"  # bad input found after run_start: the run still ends with run_stop
  assert [(e["key"], e["metadata"].get("status")) for e in read_events(log)][-1] == ("run_stop", "aborted")


def test_host_launcher_runs_checks_and_resumes(data, tmp_path):
  """`tinyperf run --runtime host`: a finished run is checked and kept; rerunning skips it and redoes only what the
  ledger says is unfinished; an unknown result file is never overwritten. The trainer is the stand-in
  (tests/stand_in_train.py): the real INIT + RUN through this launcher is what tests/integration/test_report_smoke.py
  runs five times, and tests/integration/test_run_attacks.py attacks the loop."""
  from tinyperf.tooling.launch.backends import TRAIN_MODULE_ENV
  out = tmp_path / "out"
  def cmd(nexp): return ["-m", "tinyperf.tooling.cli", "run", "resnet", "--platform", "cpu_smoke", "--nexp", str(nexp),
                         "--data", str(data), "--results", str(out), "--runtime", "host"]
  env = {TRAIN_MODULE_ENV: "tests.stand_in_train"}
  r = _run(cmd(1), env)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  result = out / "results" / "cpu_smoke" / "resnet" / "result_0.txt"
  ledger = json.loads((out / "runs" / "cpu_smoke" / "resnet" / "ledger.json").read_text())
  (att,) = ledger["attempts"]
  assert att["status"] == "done" and att["converged"] and att["seed"] < 2**31
  assert att["result"] == "results/cpu_smoke/resnet/result_0.txt"   # stored relative to --results: read as host paths
  assert check_path(result).accepted
  before = result.read_bytes()
  r = _run(cmd(1), env)  # same command again: nothing to do
  assert r.returncode == 0 and "1 already finished" in r.stdout and result.read_bytes() == before
  # a result_1.txt the ledger does not know: refuse to run over it (exit 2), leave it untouched
  stray = result.with_name("result_1.txt"); stray.write_text("mine")
  r = _run(cmd(2), env)
  assert r.returncode == 2 and "never overwritten" in r.stderr and stray.read_text() == "mine"
  assert "Traceback" not in r.stderr
