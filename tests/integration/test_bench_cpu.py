"""`tinyperf bench` end to end on the CPU (cpu_smoke's small ResNet, no PyTorch side): BENCHMARK=N times N replayed
steps after the JIT's two compiling ones, the record says which steps the median came from, and --vary runs the
tinygrad side again with one knob changed."""
from __future__ import annotations
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def test_bench_times_replayed_steps_and_records_the_warmup(tmp_path):
  record = tmp_path / "bench.jsonl"
  # one stage of the toy's two (a knob from the environment, as a user overrides one): both tinygrad processes compile
  # faster, and what is tested is how bench times and records, not the model (90 -> 58 CPU-s)
  r = subprocess.run([sys.executable, "-m", "tooling.cli", "bench", "resnet", "--platform", "cpu_smoke", "--against", "none",
                      "--steps", "3", "--record", str(record), "--vary", "BS=32"], cwd=REPO, capture_output=True, text=True,
                     timeout=900, env={**os.environ, "RESNET_LAYERS": "1"})
  assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
  rec, varied = [json.loads(line) for line in record.read_text().splitlines()]
  assert (rec["bs"], "varied" in rec) == (64, False) and (varied["bs"], varied["varied"]) == (32, "BS=32")
  ratio = varied["img_per_s"] / rec["img_per_s"]
  assert f"ratio BS=32 / config: {ratio:.3f}x throughput" in r.stdout
  assert rec["steps_timed"] == len(rec["step_ms"]) == 3 and len(rec["warmup_ms"]) == 2
  assert round(rec["median_step_ms"], 1) == sorted(rec["step_ms"])[1]
  assert min(rec["warmup_ms"]) > max(rec["step_ms"])     # the compiling steps are the slow ones, and they are left out
  assert rec["img_per_s"] == pytest.approx(rec["bs"] / (rec["median_step_ms"] / 1e3))
  assert r.stdout.count("init train step 4:") == 2 and "init train step 5:" not in r.stdout


def test_bench_records_what_the_ranked_search_covered(tmp_path):
  """A ranked search's figures go into the bench record and the printed summary: a step figure says how much of the
  step was searched. BEAM_BUDGET_S=0 with an empty cache of the test's own: every kernel ranked, none searched."""
  record = tmp_path / "bench.jsonl"
  r = subprocess.run([sys.executable, "-m", "tooling.cli", "bench", "resnet", "--platform", "cpu_smoke", "--against", "none",
                      "--steps", "1", "--beam", "1", "--record", str(record)], cwd=REPO, capture_output=True, text=True,
                     timeout=900, env={**os.environ, "RESNET_LAYERS": "1", "BEAM_BUDGET_S": "0", "IGNORE_JIT_FIRST_BEAM": "1",
                                       "CACHEDB": str(tmp_path / "cache.db")})
  assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
  (rec,) = [json.loads(line) for line in record.read_text().splitlines()]
  (train,) = rec["ranked_beam"]                    # the train step's capture (a bench warms no eval step)
  assert train["kernels"] > 10 and train["searched"] == 0 and train["stopped"] == "budget", train
  assert train["covered"] == 0.0 and train["step_beam0_s"] > 0
  assert f"ranked BEAM: 0/{train['kernels']} kernels given a search result (0 of them from the cache)" in r.stdout
