"""lab/scripts/loss_compare.py on the CPU at toy shapes: both benchmarks' losses with KERNELS=tinygrad and KERNELS=triton
(the kernels' tinygrad fallbacks here) from one seed agree within the tolerance and say so (exit 0, a record); a triton
side from another seed is out of it (exit 1); bad input is refused before anything trains (exit 2)."""
import math
import subprocess

import pytest

from tests.conftest import REPO
from tests.lab_helpers import run_toy

SCRIPT = REPO / "lab" / "scripts" / "loss_compare.py"
def compare(tmp_path, benchmark: str, *flags: str) -> tuple[subprocess.CompletedProcess, dict | None]:
  return run_toy(SCRIPT, tmp_path, benchmark, *flags, timeout=600)


@pytest.mark.parametrize("benchmark", ["resnet", "bert"])
def test_both_kernels_settings_give_the_same_curve_from_one_seed(tmp_path, benchmark):
  r, rec = compare(tmp_path, benchmark, "--steps", "3")
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  assert rec["pass"] and rec["benchmark"] == benchmark and rec["device"] == "CPU" and rec["steps"] == 3
  a, b = rec["loss"]["tinygrad"], rec["loss"]["triton"]
  assert len(a) == len(b) == 3 and all(math.isfinite(v) and v > 0 for v in a + b)
  rtol = rec["tolerance"]["rtol_step0"]
  assert all(abs(y - x) <= rtol * abs(x) for x, y in zip(a, b)) and rec["max_rel_diff"] <= rtol
  assert len(set(a)) > 1, "every step gave the same loss: the steps did not run on their own batches"
  assert rec["seeds"] == {"tinygrad": 1, "triton": 1} and "fallbacks" in rec["triton_side"]
  assert rec["git_sha"] and rec["tinygrad"] and rec["command"].startswith("python3 lab/scripts/loss_compare.py")
  assert "PASS" in r.stdout and "rel diff" in r.stdout   # the table and the verdict


def test_a_triton_side_from_another_seed_is_out_of_tolerance(tmp_path):
  r, rec = compare(tmp_path, "resnet", "--steps", "1", "--triton-seed", "2")
  assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
  assert rec["pass"] is False and rec["failed_steps"] == [0] and rec["seeds"]["triton"] == 2
  assert "FAIL" in r.stdout


@pytest.mark.parametrize("flags", [["--steps", "0"], ["--bs", "0"], ["--rtol", "-1"], ["--platform", "nosuch"],
                                   ["--out", "/nonexistent-dir/x.jsonl"], ["--platform", "1xH200"]])
def test_bad_input_is_refused_before_training(tmp_path, flags):
  from tinyperf.benchmarks.preflight import visible_gpus
  if "1xH200" in flags and visible_gpus("nv")[0]: pytest.skip("this machine has the GPU 1xH200 runs on")
  r, rec = compare(tmp_path, "resnet", *flags)
  assert r.returncode == 2 and rec is None and "Traceback" not in r.stderr and r.stderr.count("\n") <= 2, r.stderr
  assert "loss" not in r.stdout   # nothing trained
