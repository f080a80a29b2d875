"""lab.bert.step_cost counts a real BERT train step on the NULL device (no GPU) with the platform config's
tinygrad knobs: the DROPOUT knob really takes dropout out of the step (fewer kernels, fewer bytes), USE_ATOMICS=0 puts
the one-hot embedding gradient back (vocab x tokens x hidden more FLOP), and each variant runs in its own process with
its own knobs."""
from __future__ import annotations
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def test_dropout_variant_costs_kernels_and_bytes_on_the_null_device():
  # NOOPT=1: what is counted (kernels, bytes, FLOP) comes from the schedule, not from the optimizations inside each
  # kernel, which only make compiling slower
  env = {**os.environ, "DEV": "NULL", "NULL_ALLOW_COPYOUT": "1", "NOOPT": "1"}
  r = subprocess.run([sys.executable, "-m", "lab.bert.step_cost", "--platform", "cpu_smoke", "--layers", "1",
                      "--variants", "DROPOUT=0.1", "DROPOUT=0", "USE_ATOMICS=0"], cwd=REPO, env=env, capture_output=True,
                     text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-2000:]
  on, off, onehot = (json.loads(line) for line in r.stdout.splitlines() if line.startswith("{"))
  # the config's knobs (cpu_smoke: FLOAT, USE_ATOMICS 1), then the variant's override
  assert (on["default_float"], on["use_atomics"], onehot["use_atomics"]) == ("float", True, False)
  tokens, vocab, hidden = 16 * 64, 30522, 64      # cpu_smoke: BS 16, MAX_SEQ_LEN 64, BERT_HIDDEN 64
  assert onehot["gflop"] - on["gflop"] > 2 * vocab * tokens * hidden / 1e9 * 0.9, (on, onehot)
  assert (on["dropout"], off["dropout"]) == (0.1, 0.0) and on["layers"] == off["layers"] == 1
  assert on["kernels"] > off["kernels"] > 100 and on["gbytes"] > off["gbytes"] > 0 and on["gflop"] > off["gflop"] > 0
  assert "DROPOUT=0 vs DROPOUT=0.1: kernels -" in r.stdout
  assert on["peak_gib_per_gpu"] > off["peak_gib_per_gpu"] > 0      # dropout's masks are held for the backward


def test_half_attention_softmax_holds_less_memory_on_the_null_device():
  # ATTENTION_SOFTMAX=HALF (the tinybox configs) keeps the backward's (B, heads, L, L) buffers in half: at cpu_smoke's
  # shapes (BS 16, 2 heads, L 64) in fp16 compute that is 16*2*64*64 elements x 2 bytes less per saved buffer (at 2
  # layers the peak fell by two such buffers; at BERT-large's shapes by 3.26 GiB, docs/bert_train.md)
  env = {**os.environ, "DEV": "NULL", "NULL_ALLOW_COPYOUT": "1", "NOOPT": "1", "DEFAULT_FLOAT": "HALF"}
  r = subprocess.run([sys.executable, "-m", "lab.bert.step_cost", "--platform", "cpu_smoke", "--layers", "2",
                      "--variants", "ATTENTION_SOFTMAX=FLOAT", "ATTENTION_SOFTMAX=HALF", "--gpu-gib", "0.001"],
                     cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-2000:]
  full, half = (json.loads(line) for line in r.stdout.splitlines() if line.startswith("{"))
  assert full["default_float"] == half["default_float"] == "half"
  saved_score_buffer = 16 * 2 * 64 * 64 * 2 / 2**30
  assert full["peak_gib_per_gpu"] - half["peak_gib_per_gpu"] >= saved_score_buffer, (full, half)
  assert "ATTENTION_SOFTMAX=HALF: " in r.stdout and "does not fit" in r.stdout     # --gpu-gib names both variants


def test_the_triton_step_is_counted_on_null_and_its_capture_holds_less_than_an_uncaptured_first_call():
  """KERNELS=triton on NULL (its kernels compiled for sm_90, run nowhere): the 1xH200 config's step at one layer, as the
  trainers run it (captured on the first call) and as tinygrad's TinyJit would (--uncaptured), the same kernels; the
  uncaptured call keeps every custom kernel's output to the end of the step (81.8 against 44.7 GiB at BERT-large BS 96,
  docs/perf/2026-12-08_bert_step_memory_captured_null.jsonl)."""
  # compiled, not interpreted: the kernel tests' modules set TRITON_INTERPRET in this process
  env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "DEV": "NULL", "NULL_ALLOW_COPYOUT": "1"}
  rows = {}
  for flags in ([], ["--uncaptured"]):
    r = subprocess.run([sys.executable, "-m", "lab.bert.step_cost", "--platform", "1xH200", "--layers", "1", "--bs", "2",
                        "--variants", "KERNELS=triton", *flags], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = (json.loads(line) for line in r.stdout.splitlines() if line.startswith("{"))
    rows[row["first_call"]] = row
  captured, uncaptured = rows["captured"], rows["uncaptured"]
  assert captured["kernels"] == uncaptured["kernels"] > 100 and captured["gflop"] == uncaptured["gflop"]
  assert captured["peak_gib_per_gpu"] < uncaptured["peak_gib_per_gpu"] - 0.05, (captured, uncaptured)
