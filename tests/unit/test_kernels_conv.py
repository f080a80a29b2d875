"""Implicit-GEMM convolutions (benchmarks/kernels/conv.py) on the CPU: the Triton forward, dgrad and wgrad kernels run
by Triton's interpreter with the constexprs and grids the CUDA path launches, against tinygrad's conv2d and its
gradients; conv2d's custom_kernel and grad wiring through the tinygrad fallback; the cubins compiled ahead for an
H200; and ResNet with KERNELS=triton against the default."""
from __future__ import annotations
import os
os.environ["TRITON_INTERPRET"] = "1"   # before Triton's first import: its language functions are then interpreted too
import json
import subprocess
import sys

import numpy as np
import pytest
from tinygrad import Context, Tensor

triton = pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")
from triton.runtime.interpreter import InterpretedFunction   # noqa: E402

from tinyperf.benchmarks.kernels import conv as cv                    # noqa: E402
from tests.conftest import REPO                              # noqa: E402
from tests.unit.test_kernels import HostArray, compiled_facts                # noqa: E402

TILE = (16, 16, 16)   # interpreter tiles: the small convs below still span several tiles in M, N and the reduction
KERNEL = {"fwd": cv.conv_fwd_kernel, "dgrad": cv.conv_dgrad_kernel, "wgrad": cv.conv_wgrad_kernel}


def interpret(kind: str, s: cv.Shape, a: np.ndarray, b: np.ndarray, n_split: int = 1) -> np.ndarray:
  """One kind's kernel(s) on a, b as conv.py launches them: dgrad once per phase into one buffer (NaN until written),
  wgrad's fp32 partials summed."""
  out = {"fwd": np.zeros((s.N, s.K, s.P, s.Q), np.float16), "dgrad": np.full((s.N, s.C, s.H, s.W), np.nan, np.float16),
         "wgrad": np.zeros((n_split, s.K, s.C * s.R * s.S), np.float32)}[kind]
  for phase in s.phases if kind == "dgrad" else [(0, 0)]:
    consts, grid = cv.launch(kind, s, TILE, n_split, phase)
    InterpretedFunction(KERNEL[kind])[(grid,)](HostArray(a), HostArray(b), HostArray(out), *consts.values())
  return out.sum(0).reshape(s.K, s.C, s.R, s.S) if kind == "wgrad" else out


def reference(x, w, dy, stride, padding):
  """tinygrad's conv2d and its gradients in fp32 from the same fp16 values."""
  xt, wt = Tensor(x.astype(np.float32)), Tensor(w.astype(np.float32))
  y = xt.conv2d(wt, stride=stride, padding=padding)
  dx, dw = (y * Tensor(dy.astype(np.float32))).sum().gradient(xt, wt)
  return y.numpy(), dx.numpy(), dw.numpy()


def rel_err(got, ref) -> float: return float(np.abs(got.astype(np.float32) - ref).max() / np.abs(ref).max())


# ResNet-50's kinds of conv at N=2: (C, H, K, kernel, stride, padding); the strided 3x3 uneven (7x7 pixels: phases of
# 4 and 3 rows; K not a multiple of the tile)
CASES = {"1x1s1": (8, 8, 16, 1, 1, 0), "1x1s2": (16, 8, 8, 1, 2, 0), "3x3s1": (8, 8, 16, 3, 1, 1),
         "3x3s2": (8, 7, 24, 3, 2, 1), "7x7s2": (3, 8, 16, 7, 2, 3)}


@pytest.mark.parametrize("case", list(CASES))
def test_interpreted_kernels_equal_tinygrads_conv_and_its_gradients(case):
  assert triton.knobs.runtime.interpret, "Triton was imported before this module set TRITON_INTERPRET=1"
  C, H, K, R, ST, PAD = CASES[case]
  s = cv.Shape(2, C, H, H, K, R, R, ST, PAD)
  rng = np.random.default_rng(sum(map(ord, case)))
  x, w = rng.standard_normal((2, C, H, H)).astype(np.float16), rng.standard_normal((K, C, R, R)).astype(np.float16)
  dy = rng.standard_normal((2, K, s.P, s.Q)).astype(np.float16)
  wt = np.ascontiguousarray(w.transpose(2, 3, 0, 1))   # dgrad reads w as (R, S, K, C), as conv.dgrad hands it over
  y, dx, dw = interpret("fwd", s, x, w), interpret("dgrad", s, dy, wt), interpret("wgrad", s, dy, x, n_split=3)
  ref_y, ref_dx, ref_dw = reference(x, w, dy, ST, PAD)
  assert not np.isnan(dx).any()   # the phases' launches write every pixel of dx, zeros where no tap reaches
  # fp32 accumulation, one rounding to fp16 (half an ulp: 2.4e-4 relative); seen <= 3.9e-4 of the largest value
  assert rel_err(y, ref_y) < 1e-3 and rel_err(dx, ref_dx) < 1e-3
  assert rel_err(dw, ref_dw) < 1e-5   # fp32 partials over three splits, summed in fp32


def test_launch_fills_the_gpu_and_splits_the_weight_gradient(monkeypatch):
  monkeypatch.setattr(cv, "TUNED", {})   # tile()'s rule, not the measured table
  s = cv.Shape(256, 128, 56, 56, 128, 3, 3, 2, 1)   # layer 2's strided 3x3 at BS 256
  consts, grid = cv.launch("wgrad", s, cv.tile("wgrad", s))
  M, N, L = s.gemm("wgrad")
  BM, BN, BK = cv.tile("wgrad", s)[:3]
  assert grid == consts["SPLIT"] * -(-M // BM) * -(-N // BN) >= 2 * cv.SMS * 0.9
  assert consts["SPLIT"] * BK * 8 <= L   # every split reduces at least 8 blocks
  # dgrad: four phases of 28x28 pixels each, their grids together cover the 56x56 input once
  tiles = [cv.launch("dgrad", s, (128, 128, 64), phase=ph) for ph in s.phases]
  assert [c["PH"] * 2 + c["PW"] for c, _ in tiles] == [0, 1, 2, 3]
  assert sum(s.gemm("dgrad", ph)[0] for ph in s.phases) == 256 * 56 * 56
  # the tile is never wider than the GEMM where a narrower one exists (64 output channels: BN 64)
  assert cv.tile("fwd", cv.Shape(256, 256, 56, 56, 64, 1, 1, 1, 0))[1] == 64
  cv.TUNED[("fwd", s)] = cv.TILES[-1]
  assert cv.tile("fwd", s) == cv.TILES[-1]


def test_measured_tiles_are_resnet50s_convs_at_tiles_conv_has():
  """conv_tiles.TUNED names only tiles of conv.TILES and convs ResNet-50 has at BS 256 (a stale shape would never be
  looked up), and tile() returns them."""
  from lab.scripts.bench_conv import resnet50_convs
  convs = set(resnet50_convs(256))
  assert cv.TUNED and all(s in convs and t in cv.TILES and cv.tile(kind, s) == t for (kind, s), t in cv.TUNED.items())


def test_conv2d_and_its_gradients_through_custom_kernel():
  """conv2d's custom_kernel call, grad function and per-phase dgrad chain on the CPU (the tinygrad fallback; on CUDA
  the same calls are the Triton programs) equal tinygrad's conv2d and autograd, here a strided 3x3 on 5x5 pixels."""
  rng = np.random.default_rng(0)
  x, w = (Tensor(rng.standard_normal(shape).astype(np.float32)) for shape in ((2, 4, 5, 5), (6, 4, 3, 3)))
  g = Tensor(rng.standard_normal((2, 6, 3, 3)).astype(np.float32))
  with Context(NOOPT=1):   # tinygrad's compiles take most of this test's time
    y, ref = cv.conv2d(x, w, 2, 1), x.conv2d(w, stride=2, padding=1)
    for got, want in zip((y, *(y * g).sum().gradient(x, w)), (ref, *(ref * g).sum().gradient(x, w))):
      np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_conv2d_refuses_what_it_does_not_compute():
  with pytest.raises(ValueError):
    cv.conv2d(Tensor.empty(2, 3, 8, 8), Tensor.empty(4, 5, 3, 3))   # channel counts differ
  with pytest.raises(ValueError):
    cv.conv2d(Tensor.empty(2, 3, 2, 2), Tensor.empty(4, 3, 7, 7))   # the kernel does not fit


def test_h200_cubins_compile_here_with_the_launch_facts():
  """The three kernels compiled ahead for sm_90 at ResNet-50's shapes (BS 256: the stem and layer 2's strided 3x3,
  every dgrad phase) by Triton's own ptxas, without a GPU: Hopper's wgmma, shared memory within the 227 KB a
  block may have, the block size of the tile, and three pointers + Triton's two scratch parameters."""
  code = """
import json
from tinyperf.benchmarks.kernels import conv as cv
out = []
for s, kinds in ((cv.Shape(256, 3, 224, 224, 64, 7, 7, 2, 3), ("fwd", "wgrad")),   # the stem: its dgrad goes unused
                 (cv.Shape(256, 128, 56, 56, 128, 3, 3, 2, 1), ("fwd", "dgrad", "wgrad"))):
  for kind in kinds:
    for phase in s.phases if kind == "dgrad" else [(0, 0)]:
      k, grid = cv.compile_conv(kind, s, "*fp16", 90, phase)
      params = [l for l in k.ptx.splitlines() if ".param .u64" in l]
      out.append({"kind": kind, "name": k.name, "smem": k.smem, "threads": k.threads, "params": len(params),
                  "cubin": len(k.cubin), "wgmma": "wgmma.mma_async" in k.ptx, "warps": cv.tile(kind, s)[3], "grid": grid})
print(json.dumps(out))
"""
  got = compiled_facts(code, timeout=600)
  assert len(got) == 2 + 1 + 4 + 1   # the strided 3x3's dgrad: one cubin per phase
  for g in got:
    assert g["name"] == f"conv_{g['kind']}_kernel" and g["wgmma"] and g["cubin"] > 1000, g
    assert 0 < g["smem"] <= 227 * 1024 and g["threads"] == 32 * g["warps"] and g["grid"] > 0, g
    assert g["params"] == 3 + 2, g


def test_resnet_with_triton_kernels_knob_computes_the_same_loss_and_gradients():
  """The toy ResNet (the CPU smoke model: two stages, width 8) at 8x8: every conv through conv2d (the fallback on the
  CPU), and every BN through batchnorm, gives the default's loss and gradients, the stem's, a strided 3x3's and a
  strided downsample's among them. The
  gradients are taken before the loss is read, as the train step does: tinygrad 0.14 gives a custom_kernel whose
  output was realized zero gradients."""
  from tinyperf.benchmarks.resnet.model import ResNet
  rng = np.random.default_rng(0)
  x, labels = rng.standard_normal((2, 3, 8, 8)).astype(np.float32), Tensor([1, 3])
  out = {}
  for kernels in ("tinygrad", "triton"):
    model = ResNet(layers=(1, 1), width=8, num_classes=4, rng=np.random.default_rng(1), kernels=kernels)
    with Context(TRAINING=1, NOOPT=1):
      loss = model(Tensor(x)).sparse_categorical_crossentropy(labels)
      block = model.layer2[0]
      grads = loss.gradient(model.conv1.weight, block.conv2.weight, block.downsample[0].weight, model.fc.weight)
      out[kernels] = (loss.item(), *(g.numpy() for g in grads))
  assert out["triton"][0] == pytest.approx(out["tinygrad"][0], rel=1e-5)
  for got, want in zip(out["triton"][1:], out["tinygrad"][1:]):   # BN's fused kernels round fp32 in another order
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_bench_conv_dry_run_lists_resnet50s_convs_without_a_gpu():
  """lab/scripts/bench_conv.py's plan at BS 256 on the CPU: ResNet-50's 53 convs (23 distinct), 8.17 GFLOP per image
  forward (4.09 G multiply-adds, as published), every kind of each but the stem's data gradient; bad flags exit 2."""
  script = [sys.executable, "lab/scripts/bench_conv.py"]
  r = subprocess.run([*script, "--dry-run", "--tiles", "rule"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  rows = [json.loads(line) for line in r.stdout.splitlines()]
  fwd = [row for row in rows if row["kind"] == "fwd"]
  assert len(fwd) == 23 and sum(row["count"] for row in fwd) == 53 and {row["N"] for row in rows} == {256}
  assert sum(row["gflop"] * row["count"] for row in fwd) / 256 == pytest.approx(8.17, rel=1e-3)
  assert len(rows) == 3 * 23 - 1 and not any(row["conv"] == "conv1" and row["kind"] == "dgrad" for row in rows)
  assert all(row["launches"] == 4 for row in rows if row["kind"] == "dgrad" and row["ST"] == 2)
  for bad in (["--bs", "0"], ["--only", "layer9.conv1"], ["--platform", "nowhere"]):
    r = subprocess.run([*script, "--dry-run", *bad], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr and bad[0] in r.stderr.strip().splitlines()[-1], bad
