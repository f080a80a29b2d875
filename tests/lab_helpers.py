"""Running a lab script (lab/scripts/*.py) as a user types it, on the CPU at test-sized shapes: the tests of
loss_compare.py and step_profile.py share it."""
from __future__ import annotations
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# the cpu_smoke configs at test-sized shapes; NOOPT: compile time is what these runs take (conftest's fast_compile)
TOY = {"resnet": {"IMAGE_SIZE": "8", "RESNET_LAYERS": "1", "NOOPT": "1"},
       "bert": {"BERT_LAYERS": "1", "INIT_BERT_LAYERS": "1", "BERT_HIDDEN": "16", "BERT_HEADS": "2",
                "BERT_INTERMEDIATE": "32", "MAX_SEQ_LEN": "16", "MAX_PREDICTIONS": "3", "NOOPT": "1"}}


def run_toy(script: Path, tmp_path: Path, benchmark: str, *flags: str,
            timeout: int) -> tuple[subprocess.CompletedProcess, dict | None]:
  """script for benchmark on cpu_smoke at the TOY shapes, BS 4, from tmp_path: its process and the last record it
  appended to --out (None when it wrote none)."""
  out = tmp_path / f"{benchmark}.jsonl"
  env = {**os.environ, **TOY[benchmark], "PYTHONPATH": str(REPO)}
  r = subprocess.run([sys.executable, str(script), benchmark, "--platform", "cpu_smoke", "--bs", "4", "--out", str(out),
                      *flags], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
  lines = out.read_text().splitlines() if out.is_file() else []
  return r, json.loads(lines[-1]) if lines else None
