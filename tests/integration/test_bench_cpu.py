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
