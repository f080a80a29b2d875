"""lab/scripts/loss_compare.py on the CPU at toy shapes: both benchmarks' losses with KERNELS=tinygrad and
KERNELS=triton (the kernels' tinygrad fallbacks here) from one seed agree within the tolerance and say so (exit 0, a
record); a triton side from another seed is out of it even with --noise-floor's wider tolerance (exit 1); bad input is
refused before anything trains (exit 2)."""
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
  # bert with --noise-floor's third side too (one run for both: each side is a capture of its own)
  noise = benchmark == "bert"
  r, rec = compare(tmp_path, benchmark, "--steps", "3", *(["--noise-floor", "--float-reference"] if noise else []))
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  assert rec["pass"] and rec["benchmark"] == benchmark and rec["device"] == "CPU" and rec["steps"] == 3
  a, b = rec["loss"]["tinygrad"], rec["loss"]["triton"]
  assert len(a) == len(b) == 3 and all(math.isfinite(v) and v > 0 for v in a + b)
  rtol = rec["tolerance"]["rtol_step0"]
  assert all(abs(y - x) <= rtol * abs(x) for x, y in zip(a, b)) and rec["max_rel_diff"] <= rtol
  assert len(set(a)) > 1, "every step gave the same loss: the steps did not run on their own batches"
  assert rec["seeds"]["tinygrad"] == rec["seeds"]["triton"] == 1 and "fallbacks" in rec["triton_side"]
  assert rec["git_sha"] and rec["tinygrad"] and rec["command"].startswith("python3 lab/scripts/loss_compare.py")
  assert "PASS" in r.stdout and "rel diff" in r.stdout   # the table and the verdict
  if not noise:
    assert set(rec["loss"]) == {"tinygrad", "triton"} and rec["tolerance"]["rule"] == "linear"
    assert "grad_norm" not in rec   # ResNet's step returns no gradient norm
    return
  g = rec["grad_norm"]   # BERT: every side's gradient norm per step; the fallbacks' within rounding of tinygrad's
  assert set(g) == {"tinygrad", "triton", "noise_floor"} and all(len(v) == 3 and min(v) > 0 for v in g.values())
  assert rec["grad_norm_rel_diff"]["triton"] == [abs(y - x) / x for x, y in zip(g["tinygrad"], g["triton"])]
  assert max(rec["grad_norm_rel_diff"]["triton"]) < 1e-3 and "gradient norm before clipping" in r.stdout
  gd = rec["grad_rel_diff"]   # per parameter on the first batch: every one, the fallbacks' within rounding
  assert set(gd) == {"triton", "noise_floor"} and set(gd["triton"]) == set(gd["noise_floor"]) and len(gd["triton"]) > 10
  # within twice the noise side's for the same tensor (the key bias's gradient is rounding alone, 1.5 on that side)
  assert all(v <= max(2 * gd["noise_floor"][k], 1e-2) for k, v in gd["triton"].items()), gd
  assert sorted(gd["triton"].values())[-2] < 1e-3 < max(gd["noise_floor"].values()), gd
  assert "bert.encoder.layer.0.attention.self.query.weight" in gd["triton"] and "per parameter" in r.stdout
  # --float-reference: cpu_smoke computes in float32 already, so its float side is the tinygrad side from the same seed
  # and batch, gradient for gradient
  gf = rec["grad_rel_diff_to_float32"]
  assert set(gf) == {"tinygrad", "triton"} and set(gf["tinygrad"]) == set(gd["triton"])
  assert all(v == 0.0 for v in gf["tinygrad"].values()) and gf["triton"] == gd["triton"], gf
  assert "g_float32" in r.stdout
  # the noise side starts a rounding away and sets the tolerance rule
  assert set(rec["loss"]) == {"tinygrad", "triton", "noise_floor"}
  n = rec["loss"]["noise_floor"]
  assert len(n) == 3 and all(math.isfinite(v) for v in n)
  assert 0 < abs(n[0] - a[0]) / abs(a[0]) < 1e-3, (a, n)   # perturbed, and by far less than another seed (2.9e-3)
  assert rec["noise_rel_diff"] == [abs(y - x) / abs(x) for x, y in zip(a, n)]
  assert rec["tolerance"]["rule"] == "noise_floor" and rec["noise"]["factor"] == 2
  assert len(rec["step_s"]["noise_floor"]) == 3 and rec["seeds"]["noise_floor"] == 1
  floor = [2 * max(rec["noise_rel_diff"][:i + 1]) for i in range(3)]
  assert rec["tolerance"]["rtol"] == [max(1e-3 + 2e-4 * i, f) for i, f in enumerate(floor)]
  assert "noise rel" in r.stdout and "noise_floor step 2/3" in r.stdout   # the table's column, the side's progress


def test_the_noise_floor_widens_the_tolerance_to_twice_its_largest_rel_diff_so_far():
  from lab.scripts.loss_compare import compare as rows_of
  a, b = [1.0] * 4, [1.0, 1.003, 1.003, 1.0]
  rows = rows_of(a, b, 1e-3, 2e-4, noise=[1.0, 1.002, 1.0, float("nan")])   # a NaN widens nothing further
  assert [r["rtol"] for r in rows] == pytest.approx([1e-3, 4e-3, 4e-3, 4e-3])
  assert all(r["ok"] for r in rows) and [r["from_noise"] for r in rows] == [False, True, True, True]
  assert [r["ok"] for r in rows_of(a, b, 1e-3, 2e-4)] == [True, False, False, True]   # without: the linear rule


def test_a_triton_side_from_another_seed_is_out_of_tolerance(tmp_path):
  # with --noise-floor: the perturbation applied, and step 0 kept strict (the linear rule's own failures: the rows test
  # above)
  r, rec = compare(tmp_path, "resnet", "--steps", "1", "--triton-seed", "2", "--noise-floor")
  assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
  assert rec["pass"] is False and rec["failed_steps"] == [0] and rec["seeds"]["triton"] == 2
  assert "FAIL" in r.stdout
  assert rec["tolerance"]["rule"] == "noise_floor" and 0 < rec["noise_rel_diff"][0] < 1e-3


@pytest.mark.parametrize("flags", [["--steps", "0"], ["--bs", "0"], ["--rtol", "-1"], ["--platform", "nosuch"],
                                   ["--out", "/nonexistent-dir/x.jsonl"], ["--platform", "1xH200"], ["--float-reference"]])
def test_bad_input_is_refused_before_training(tmp_path, flags):
  from tinyperf.benchmarks.preflight import visible_gpus
  if "1xH200" in flags and visible_gpus("nv")[0]: pytest.skip("this machine has the GPU 1xH200 runs on")
  r, rec = compare(tmp_path, "resnet", *flags)
  assert r.returncode == 2 and rec is None and "Traceback" not in r.stderr and r.stderr.count("\n") <= 2, r.stderr
  assert "loss" not in r.stdout   # nothing trained
