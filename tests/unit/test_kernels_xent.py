"""Softmax cross entropy (benchmarks/kernels/xent.py) on the CPU: the Triton forward and backward kernels run by Triton's
interpreter against numpy, the custom_kernel + grad wiring through the tinygrad fallback against tinygrad's
log_softmax and its autograd, and both kernels compiled ahead for an H200 at BERT's vocabulary."""
from __future__ import annotations
import os
os.environ["TRITON_INTERPRET"] = "1"   # before Triton's first import: its language functions are then interpreted too

import numpy as np
import pytest
from tinygrad import Tensor

triton = pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")
from triton.runtime.interpreter import InterpretedFunction   # noqa: E402

from tinyperf.benchmarks.kernels import xent                 # noqa: E402
from tests.unit.test_kernels import HostArray, compiled_facts                # noqa: E402


def numpy_reference(x: np.ndarray, y: np.ndarray, g: np.ndarray):
  """(nll, lse, dx) in float64; a label outside [0, V) picks nothing (nll 0, no gradient), as the one-hot pick."""
  x64, V = x.astype(np.float64), x.shape[1]
  mx = x64.max(1, keepdims=True)
  lse = (np.log(np.exp(x64 - mx).sum(1, keepdims=True)) + mx)[:, 0]
  valid = (y >= 0) & (y < V)
  rows, cols = np.arange(len(y))[valid], y[valid]
  nll = np.zeros(len(y))
  nll[valid] = lse[valid] - x64[rows, cols]
  dx = np.exp(x64 - lse[:, None])
  dx[rows, cols] -= 1
  return nll, lse, dx * np.where(valid, g, 0)[:, None]


@pytest.mark.parametrize("V,BV", [(37, 16), (10, 16), (64, 16)], ids=["partial_block", "masked_lanes", "even"])
def test_forward_and_backward_interpreted_equal_numpy(V, BV):
  """Rows of large and mixed magnitudes (an online softmax must not overflow), labels at both ends of the vocabulary
  and one outside it."""
  rng = np.random.default_rng(V)
  R = 6
  x = (rng.standard_normal((R, V)) * np.array([1, 10, 80, 0.01, 3, 50])[:, None]).astype(np.float32)
  y = np.array([0, V - 1, 3, 5, V, V // 2], np.int32)
  g = rng.standard_normal(R).astype(np.float32)
  nll, lse = np.zeros(R, np.float32), np.zeros(R, np.float32)
  InterpretedFunction(xent.xent_fwd_kernel)[(R,)](*map(HostArray, (x, y, nll, lse)), V, BV)
  dx = np.zeros_like(x)
  InterpretedFunction(xent.xent_bwd_kernel)[(R,)](*map(HostArray, (x, y, lse, g, dx)), V, BV)
  ref_nll, ref_lse, ref_dx = numpy_reference(x, y, g)
  np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(nll, ref_nll, rtol=1e-5, atol=1e-4)
  # x - lse in fp32 at |x| = 80 rounds to ~1e-5 (tinygrad's log_softmax does the same): p - 1 keeps that absolutely
  np.testing.assert_allclose(dx, ref_dx, rtol=1e-4, atol=2e-5)


def test_the_fallback_call_and_its_gradient_equal_tinygrads_log_softmax():
  """softmax_nll on the CPU (the tinygrad kernel forward, tinygrad ops backward) against the model's one-hot pick of
  log_softmax, values and gradients, through the (B, P, V) shape the MLM head gives."""
  rng = np.random.default_rng(0)
  x = (rng.standard_normal((3, 5, 37)) * 3).astype(np.float32)
  y = rng.integers(0, 37, (3, 5)).astype(np.int32)
  y[1, 2] = -1   # outside the vocabulary: nll 0 and no gradient, as the one-hot pick
  g = Tensor(rng.standard_normal((3, 5)).astype(np.float32))
  xt, xr = Tensor(x), Tensor(x)
  nll = xent.softmax_nll(xt, Tensor(y))
  ref = -(Tensor(y).unsqueeze(-1) == Tensor.arange(37)).where(xr.log_softmax(-1), 0.0).sum(-1)
  (got_dx,), (ref_dx,) = (nll * g).sum().gradient(xt), (ref * g).sum().gradient(xr)
  assert nll.shape == (3, 5)
  np.testing.assert_allclose(nll.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got_dx.numpy(), ref_dx.numpy(), rtol=1e-5, atol=1e-7)


def test_h200_cubins_compile_here_at_berts_vocabulary():
  """Both kernels compiled ahead for sm_90 at V = 30522 by Triton's own ptxas, without a GPU: no local memory, the
  kernel's pointers + Triton's two scratch parameters. (Rows of 30522 fp32 are not 16-byte aligned: 4-byte loads,
  coalesced.)"""
  code = """
import json
from tinyperf.benchmarks.kernels import xent
out = {}
for which in ("fwd", "bwd"):
  k = xent.compile_xent(which, 30522, 90)
  out[which] = {"name": k.name, "local": "ld.local" in k.ptx or "st.local" in k.ptx,
                "params": sum(".param .u64" in l for l in k.ptx.splitlines()), "threads": k.threads}
print(json.dumps(out))
"""
  got = compiled_facts(code)
  for which, name in (("fwd", "xent_fwd_kernel"), ("bwd", "xent_bwd_kernel")):
    assert got[which] == {"name": name, "local": False, "params": len(xent.pointers(which)) + 2,
                          "threads": 32 * xent.WARPS}, got
