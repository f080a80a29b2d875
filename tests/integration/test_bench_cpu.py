"""`python -m lab.bench` end to end on the CPU (cpu_smoke's small ResNet, no PyTorch side): BENCHMARK=N times N replayed
steps after the JIT's two compiling ones, the record says which steps the median came from, --vary runs the
tinygrad side again with one knob changed, and SIGTERM stops it leaving nothing behind."""
from __future__ import annotations
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def test_bench_times_replayed_steps_and_records_the_warmup(tmp_path):
  record = tmp_path / "bench.jsonl"
  # one stage of the toy's two (a knob from the environment, as a user overrides one): both tinygrad processes compile
  # faster, and what is tested is how bench times and records, not the model (90 -> 58 CPU-s)
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--against", "none",
                      "--steps", "3", "--record", str(record), "--vary", "BS=32"], cwd=REPO, capture_output=True, text=True,
                     timeout=900, env={**os.environ, "RESNET_LAYERS": "1"})
  assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
  rec, varied = [json.loads(line) for line in record.read_text().splitlines()]
  assert (rec["bs"], "varied" in rec) == (64, False) and (varied["bs"], varied["varied"]) == (32, "BS=32")
  # the environment's knob is in both records, the varied one in its own: a 1-stage record must not read as the config's
  assert rec["overrides"]["RESNET_LAYERS"] == "1" and "BS" not in rec["overrides"], rec["overrides"]
  assert (varied["overrides"]["RESNET_LAYERS"], varied["overrides"]["BS"]) == ("1", 32), varied["overrides"]
  ratio = varied["img_per_s"] / rec["img_per_s"]
  assert f"ratio BS=32 / config: {ratio:.3f}x throughput" in r.stdout
  assert rec["steps_timed"] == len(rec["step_ms"]) == len(rec["issue_ms"]) == 3 and len(rec["warmup_ms"]) == 1
  assert all(0 < i <= s + 0.05 for i, s in zip(rec["issue_ms"], rec["step_ms"]))   # the host's part of each step
  assert round(rec["median_step_ms"], 1) == sorted(rec["step_ms"])[1]
  assert min(rec["warmup_ms"]) > max(rec["step_ms"])     # the compiling (capture) step is the slow one, left out
  assert rec["img_per_s"] == pytest.approx(rec["bs"] / (rec["median_step_ms"] / 1e3))
  assert r.stdout.count("init train step 3:") == 2 and "init train step 4:" not in r.stdout
  # a toy's step projects no time to train (it projected "7h1m" from ImageNet's step count)
  assert rec["projected_minutes"] is None and "toy model" in rec["no_projection"]
  assert "no projected time to train: cpu_smoke times a toy model" in r.stdout and "projected time to train " not in r.stdout


def test_bench_records_what_the_ranked_search_covered(tmp_path):
  """A ranked search's figures go into the bench record and the printed summary: a step figure says how much of the
  step was searched. BEAM_BUDGET_S=0 with an empty cache of the test's own: every kernel ranked, none searched."""
  record = tmp_path / "bench.jsonl"
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--against", "none",
                      "--steps", "1", "--beam", "1", "--record", str(record)], cwd=REPO, capture_output=True, text=True,
                     timeout=900, env={**os.environ, "RESNET_LAYERS": "1", "BEAM_BUDGET_S": "0", "IGNORE_JIT_FIRST_BEAM": "1",
                                       "CACHEDB": str(tmp_path / "cache.db")})
  assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
  (rec,) = [json.loads(line) for line in record.read_text().splitlines()]
  (train,) = rec["ranked_beam"]                    # the train step's capture (a bench warms no eval step)
  assert train["kernels"] > 10 and train["searched"] == 0 and train["stopped"] == "budget", train
  assert train["covered"] == 0.0 and train["step_beam0_s"] > 0
  assert f"ranked BEAM: 0/{train['kernels']} kernels given a search result (0 of them from the cache)" in r.stdout


def _searched(tmp: Path) -> int:
  """BEAM results in the kernel cache of the tinygrad side bench started (in its temp folder under tmp), 0 until then."""
  from lab.bench import beam_rows
  for db in tmp.glob("*/cache.db"):
    try: return beam_rows(db)
    except sqlite3.Error: pass   # the search holds the write lock just now
  return 0


def _processes_with(marker: str) -> list[int]:
  """Live processes whose environment holds marker: bench and all it started (the tinygrad side, its BEAM workers)."""
  pids = []
  for d in Path("/proc").iterdir():
    try:
      if d.name.isdigit() and marker.encode() in (d / "environ").read_bytes() and \
         (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":   # a zombie waiting for its parent is gone
        pids.append(int(d.name))
    except OSError: pass   # it ended while being read
  return pids


def test_sigterm_saves_the_search_stops_the_tinygrad_side_and_leaves_no_temp_folder(tmp_path):
  """Slurm, docker stop or kill stopping a BEAM search: SIGTERM once ended bench at once, leaving its temp folder (the
  kernel cache, the results) and losing what was searched since the last once-a-minute save of --beam-cache. The
  user's path: a relative --beam-cache from another working directory; TMPDIR shows where bench's temp folder goes."""
  tmp, marker = tmp_path / "tmp", f"TEST_BENCH_SIGTERM={uuid.uuid4().hex}"
  tmp.mkdir()
  key, value = marker.split("=")
  p = subprocess.Popen([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--against",
                        "none", "--steps", "1", "--beam", "1", "--beam-cache", "beam.db"], cwd=tmp_path,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                       env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp), "RESNET_LAYERS": "1", key: value})
  try:
    deadline = time.time() + 120
    while not (searched := _searched(tmp)):           # the first kernel's search (about 15 s on 2 busy cores)
      assert p.poll() is None and time.time() < deadline, "bench ended or searched nothing"
      time.sleep(0.2)
    assert len(_processes_with(marker)) >= 2           # bench and the tinygrad side: what must go
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=90)
  finally:
    if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)
  assert p.returncode == 130 and err.splitlines() == ["python -m lab.bench: stopped by SIGTERM (scancel, a Slurm time limit, "
                                                      "or kill)"], err
  from lab.bench import beam_rows
  assert beam_rows(tmp_path / "beam.db") >= searched and "BEAM-searched kernels saved in" in out   # the last save
  assert not (tmp_path / "beam.db.tmp").exists()
  assert list(tmp.iterdir()) == []                     # bench's temp folder is gone
  deadline = time.time() + 10                          # killed processes may take a moment to be reaped
  while (left := _processes_with(marker)) and time.time() < deadline: time.sleep(0.2)
  assert not left, left
