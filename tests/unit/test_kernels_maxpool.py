"""ResNet's 3x3/2 max-pool (benchmarks/kernels/maxpool.py) on the CPU: the Triton forward and backward kernels run by
Triton's interpreter against the model's zero-padded tinygrad max_pool2d and its gradient; max_pool's custom_kernel
and grad wiring through the tinygrad fallback on one device and two; both cubins compiled ahead for an H200."""
from __future__ import annotations
import os
os.environ["TRITON_INTERPRET"] = "1"   # before Triton's first import: its language functions are then interpreted too

import numpy as np
import pytest
from tinygrad import Tensor, dtypes

triton = pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")
from triton.runtime.interpreter import InterpretedFunction   # noqa: E402

from tinyperf.benchmarks.kernels import maxpool as mp                  # noqa: E402
from tests.unit.test_kernels import HostArray, compiled_facts                # noqa: E402


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
  monkeypatch.setattr(mp, "BLOCK", 64)   # the planes below span several programs, the last one partial


def reference(x: np.ndarray, dy: np.ndarray):
  """The model's pool (zero padding, tinygrad's max_pool2d) and its gradient, in fp32."""
  xt = Tensor(x.astype(np.float32))
  y = xt.pad(((0, 0), (0, 0), (1, 1), (1, 1))).max_pool2d(kernel_size=(3, 3), stride=2)
  return y.numpy(), (y * Tensor(dy.astype(np.float32))).sum().gradient(xt)[0].numpy()


def interpret(x: np.ndarray, dy: np.ndarray):
  N, C, H, W = x.shape
  P, Q = mp.out_size(H), mp.out_size(W)
  y, idx = np.full((N, C, P, Q), np.nan, x.dtype), np.full((N, C, P, Q), -1, np.int8)
  consts, grid = mp.launch("fwd", N * C, H, W)
  InterpretedFunction(mp.pool_fwd_kernel)[(grid,)](HostArray(x), HostArray(y), HostArray(idx), *consts.values())
  dx = np.full_like(x, np.nan)
  consts, grid = mp.launch("bwd", N * C, H, W)
  InterpretedFunction(mp.pool_bwd_kernel)[(grid,)](HostArray(dy), HostArray(idx), HostArray(dx), *consts.values())
  return y, idx, dx


@pytest.mark.parametrize("H,W", [(8, 8), (9, 7), (3, 3)], ids=["even", "odd", "one_window_row"])
def test_interpreted_kernels_equal_the_models_pool_and_its_gradient(H, W):
  """Distinct positive values (no ties: tinygrad splits a tied gradient, the kernel gives it to the first maximum)."""
  assert triton.knobs.runtime.interpret, "Triton was imported before this module set TRITON_INTERPRET=1"
  rng = np.random.default_rng(H * W)
  x = (rng.permutation(2 * 3 * H * W).reshape(2, 3, H, W) / 64 + 0.5).astype(np.float16)   # exact in fp16
  dy = rng.standard_normal((2, 3, mp.out_size(H), mp.out_size(W))).astype(np.float16)
  y, idx, dx = interpret(x, dy)
  ref_y, ref_dx = reference(x, dy)
  assert not np.isnan(dx).any() and ((idx >= 0) & (idx < 9)).all()
  np.testing.assert_array_equal(y.astype(np.float32), ref_y)   # a max rounds nothing
  np.testing.assert_allclose(dx.astype(np.float32), ref_dx, rtol=2e-3, atol=2e-3)   # at most 4 fp16 addends
  assert np.isclose(dx.astype(np.float32).sum(), dy.astype(np.float32).sum(), rtol=1e-2)   # every dy lands once


def test_a_tie_gives_the_whole_gradient_to_the_first_maximum_and_padding_never_wins():
  x = np.zeros((1, 1, 4, 4), np.float16)   # a ReLU'd plane of zeros: every window ties, the padding is 0 as well
  dy = np.ones((1, 1, 2, 2), np.float16)
  y, idx, dx = interpret(x, dy)
  assert (y == 0).all()
  np.testing.assert_array_equal(idx[0, 0], [[4, 3], [1, 0]])   # the first tap inside the image, in (r, s) order
  assert dx.sum() == 4 and dx.max() == 1                        # one element per window takes its gradient


@pytest.mark.parametrize("devices", [None, ("CPU:0", "CPU:1")], ids=["one_device", "two_devices"])
def test_max_pool_through_custom_kernel_equals_the_models_pool(devices):
  rng = np.random.default_rng(1)
  x = rng.permutation(4 * 3 * 9 * 9).reshape(4, 3, 9, 9).astype(np.float32)
  g = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
  def put(a):
    return Tensor(a) if devices is None else Tensor(a).shard(devices, axis=0)
  xt = put(x)
  y = mp.max_pool(xt)
  dx = (y * put(g)).sum().gradient(xt)[0]
  ref_y, ref_dx = reference(x, g)
  np.testing.assert_array_equal(y.numpy(), ref_y)
  np.testing.assert_allclose(dx.numpy(), ref_dx, rtol=1e-6, atol=1e-6)
  if devices is not None: assert y.uop.axis == 0 and dx.uop.axis == 0


def test_h200_cubins_compile_here_with_the_launch_facts():
  """Both kernels compiled ahead for sm_90 by Triton's own ptxas, without a GPU, at the stem's pool (BS 256, 64
  channels of 112x112): three pointers + Triton's two scratch parameters, grids covering the tensors."""
  code = """
import json
from tinygrad import dtypes
from tinyperf.benchmarks.kernels import maxpool as mp
out = []
for kind in ("fwd", "bwd"):
  consts, grid = mp.launch(kind, 256 * 64, 112, 112)
  sig = ((("x", "*fp16"), ("y", "*fp16"), ("idx", "*i8")) if kind == "fwd" else
         (("dy", "*fp16"), ("idx", "*i8"), ("dx", "*fp16")))
  c = mp.prg.compile_kernel(mp.compiled[kind], sig, tuple(consts.items()), mp.WARPS, 1, 90)
  params = [l for l in c.ptx.splitlines() if ".param .u64" in l]
  out.append({"kind": kind, "name": c.name, "params": len(params), "cubin": len(c.cubin), "grid": grid,
              "consts": consts})
print(json.dumps(out))
"""
  got = compiled_facts(code, timeout=600)
  for g in got:
    c = g["consts"]
    assert g["name"] == f"pool_{g['kind']}_kernel" and g["params"] == 3 + 2 and g["cubin"] > 1000, g
    n = c["NC"] * (c["P"] * c["Q"] if g["kind"] == "fwd" else c["H"] * c["W"])
    assert (g["grid"] - 1) * c["BLOCK"] < n <= g["grid"] * c["BLOCK"], g
  assert got[0]["consts"]["P"] == got[0]["consts"]["Q"] == 56


def test_max_pool_refuses_what_it_does_not_compute():
  with pytest.raises(ValueError, match="max_pool"):
    mp.max_pool(Tensor.zeros(3, 8, 8))
  with pytest.raises(NotImplementedError):
    mp.max_pool(Tensor.zeros(2, 4, 8, 8).shard(("CPU:0", "CPU:1"), axis=1))
  assert mp.max_pool(Tensor.zeros(2, 1, 8, 8, dtype=dtypes.half)).dtype == dtypes.half
