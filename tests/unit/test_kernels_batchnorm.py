"""Fused BatchNorm + residual add + ReLU (benchmarks/kernels/batchnorm.py) on the CPU: the four Triton kernels run by
Triton's interpreter with the constexprs and grids the CUDA path launches, against the model's BatchNorm2d
(benchmarks/resnet/model.py) and tinygrad's autograd through it; batchnorm's custom_kernel and grad wiring through
the tinygrad fallback, on one device and two; ResNet's use of it under the knob."""
from __future__ import annotations
import os
os.environ["TRITON_INTERPRET"] = "1"   # before Triton's first import: its language functions are then interpreted too

import numpy as np
import pytest
from tinygrad import Context, Tensor

triton = pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")
from triton.runtime.interpreter import InterpretedFunction   # noqa: E402

from tinyperf.benchmarks.kernels import batchnorm as bn                # noqa: E402
from tinyperf.benchmarks.resnet.model import BatchNorm2d, ResNet      # noqa: E402
from tests.unit.test_kernels import HostArray, compiled_facts                # noqa: E402

EPS = 1e-5


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
  """Interpreter-sized steps: 64 elements, so the shapes below span several steps, rows and partial tiles."""
  monkeypatch.setattr(bn, "BLOCK", 64)


def run(kind: str, shape, relu: bool, res: bool, *arrays, two: bool = False):
  """One kernel on host arrays, launched as batchnorm.py launches it; the outputs are the arrays given last."""
  N, C, H, W = shape
  consts, grid = bn.launch(kind, N, C, H * W, relu, res, two)
  fn = {"stats": bn.bn_stats_kernel, "apply": bn.bn_apply_kernel, "bwd_sums": bn.bn_bwd_sums_kernel,
        "bwd_apply": bn.bn_bwd_apply_kernel}[kind]
  InterpretedFunction(fn)[(grid,)](*map(HostArray, arrays), *consts.values())


def interpret(x, w, b, r, dy, relu: bool, dy2=None):
  """The forward and backward as batchnorm.py chains them: y, mean, var, dx, dweight, dbias, dresidual. dy2: the
  gradient's second addend (the backward reads dy + dy2)."""
  N, C, H, W = x.shape
  s = bn.split(N, C)
  mean_p, m2_p = np.zeros((s, C), np.float32), np.zeros((s, C), np.float32)
  run("stats", x.shape, False, False, x, mean_p, m2_p)
  mean = mean_p.mean(0)
  var = ((m2_p.sum(0) + N // s * H * W * ((mean_p - mean) ** 2).sum(0)) / (N * H * W)).astype(np.float32)
  rstd = (1 / np.sqrt(var + EPS)).astype(np.float32)
  y = np.full_like(x, np.nan)
  run("apply", x.shape, relu, r is not None, x, mean, rstd, w, b, x if r is None else r, y)
  sdz_p, sdzx_p = np.zeros((s, C), np.float32), np.zeros((s, C), np.float32)
  two = dy2 is not None
  run("bwd_sums", x.shape, relu, r is not None, dy, dy2 if two else dy, y, x, mean, sdz_p, sdzx_p, two=two)
  sdz, sdzx = sdz_p.sum(0), sdzx_p.sum(0)
  dx, dres = np.full_like(x, np.nan), np.full_like(x, np.nan)
  run("bwd_apply", x.shape, relu, r is not None, dy, dy2 if two else dy, y, x, mean, rstd, w, sdz, sdzx, dx, dres,
      two=two)
  return y, mean, var, dx, sdzx * rstd, sdz, dres


def reference(x, w, b, r, dy, relu: bool):
  """The model's BatchNorm2d (tinygrad path) in fp32 from the same fp16 values, and autograd through it."""
  layer = BatchNorm2d(x.shape[1], groups=1, eps=EPS)
  layer.weight, layer.bias = Tensor(w), Tensor(b)
  xt = Tensor(x.astype(np.float32))
  rt = None if r is None else Tensor(r.astype(np.float32))
  with Context(TRAINING=1):
    y = layer(xt, rt, relu)
    wrt = (xt, layer.weight, layer.bias, *([rt] if r is not None else []))
    grads = (y * Tensor(dy.astype(np.float32))).sum().gradient(*wrt)
  xf = x.astype(np.float32)
  return (y.numpy(), xf.mean((0, 2, 3)), xf.var((0, 2, 3)), *(g.numpy() for g in grads))


def rel_err(got, ref) -> float: return float(np.abs(got.astype(np.float32) - ref).max() / np.abs(ref).max())


# (N, C, H, W): ResNet's kinds of plane at N=4: 7x7 (several images per step, a row padded to 64 pixels), 9x9 (81
# pixels: two steps per row, the second mostly masked), 1x1; C and N so that split() gives 1, 2 and 4 partials
CASES = {"7x7": (4, 6, 7, 7), "9x9_split": (4, 3, 9, 9), "1x1": (8, 5, 1, 1)}


@pytest.mark.parametrize("relu,res", [(False, False), (True, False), (True, True)],
                         ids=["bn", "bn_relu", "bn_add_relu"])
@pytest.mark.parametrize("case", list(CASES))
def test_interpreted_kernels_equal_the_models_batchnorm_and_its_gradients(monkeypatch, case, relu, res):
  assert triton.knobs.runtime.interpret, "Triton was imported before this module set TRITON_INTERPRET=1"
  monkeypatch.setattr(bn, "SMS", 1)   # four programs per "multiprocessor": small C still splits the images
  shape = CASES[case]
  rng = np.random.default_rng(sum(map(ord, case)) + 2 * relu + res)
  # a mean far from 0 against the spread: a one-pass sum of squares in fp32 would lose the variance's digits
  x = (3 + 0.5 * rng.standard_normal(shape)).astype(np.float16)
  r, dy = (rng.standard_normal(shape).astype(np.float16) for _ in range(2))
  w = (1 + 0.2 * rng.standard_normal(shape[1])).astype(np.float32)
  b = (0.2 * rng.standard_normal(shape[1])).astype(np.float32)
  got = interpret(x, w, b, r if res else None, dy, relu)
  want = reference(x, w, b, r if res else None, dy, relu)
  assert not any(np.isnan(a).any() for a in got[:4])   # the tiles cover every element
  np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
  np.testing.assert_allclose(got[2], want[2], rtol=1e-5)
  # y, dx: fp32 math rounded once to fp16 (2.4e-4 relative); dweight, dbias: fp32 sums in another order
  assert rel_err(got[0], want[0]) < 1e-3 and rel_err(got[3], want[3]) < 1e-3
  np.testing.assert_allclose(got[4], want[4], rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(got[5], want[5], rtol=1e-4, atol=1e-4)
  if res: assert rel_err(got[6], want[6]) < 1e-3
  if relu: assert (got[0] >= 0).all() and (got[0] == 0).any()


def test_the_backward_reads_the_forwards_mask_and_statistics(monkeypatch):
  """A backward given the ReLU mask of another output is measurably wrong: the checks above can tell them apart."""
  x = np.random.default_rng(1).standard_normal((4, 6, 7, 7)).astype(np.float16)
  dy = np.random.default_rng(2).standard_normal(x.shape).astype(np.float16)
  w, b = np.ones(6, np.float32), np.zeros(6, np.float32)
  ref_dx = reference(x, w, b, None, dy, True)[3]
  y, mean, var, *_ = interpret(x, w, b, None, dy, True)
  rstd = (1 / np.sqrt(var + EPS)).astype(np.float32)
  s = bn.split(4, 6)
  sdz_p, sdzx_p = np.zeros((s, 6), np.float32), np.zeros((s, 6), np.float32)
  flipped = np.ascontiguousarray(-y)
  run("bwd_sums", x.shape, True, False, dy, dy, flipped, x, mean, sdz_p, sdzx_p)
  dx = np.zeros_like(x)
  run("bwd_apply", x.shape, True, False, dy, dy, flipped, x, mean, rstd, w, sdz_p.sum(0), sdzx_p.sum(0), dx, dx)
  assert rel_err(dx, ref_dx) > 0.1


def test_the_backward_adds_a_gradients_two_addends_as_it_loads_them(monkeypatch):
  """dy given as two addends (TWO=1) gives the backward of their sum; the second is read, not ignored."""
  monkeypatch.setattr(bn, "SMS", 1)
  rng = np.random.default_rng(6)
  x = (1 + rng.standard_normal((4, 6, 7, 7))).astype(np.float16)
  r, dy, dy2 = (rng.standard_normal(x.shape).astype(np.float16) for _ in range(3))
  w, b = (1 + 0.2 * rng.standard_normal(6)).astype(np.float32), (0.2 * rng.standard_normal(6)).astype(np.float32)
  got = interpret(x, w, b, r, dy, True, dy2=dy2)
  want = reference(x, w, b, r, (dy.astype(np.float32) + dy2.astype(np.float32)), True)
  assert rel_err(got[3], want[3]) < 1e-3 and rel_err(got[6], want[6]) < 1e-3
  np.testing.assert_allclose(got[4], want[4], rtol=1e-4, atol=1e-4)
  assert rel_err(interpret(x, w, b, r, dy, True)[3], want[3]) > 0.1


def test_addends_splits_the_gradient_of_a_tensor_used_twice_and_nothing_else():
  x = Tensor(np.random.default_rng(7).standard_normal((2, 3, 4, 4)).astype(np.float32))
  seen = []
  with Context(TRAINING=1):
    for uses in (1, 2):
      y = x * 1
      out = y.conv2d(Tensor.ones(3, 3, 1, 1)).sum() + (y.sum() if uses == 2 else 0)
      g = out.gradient(y)[0]
      a, b = bn.addends(g.uop, y)
      seen.append(b is not None)
      np.testing.assert_allclose((a + b if b is not None else a).numpy(), g.numpy(), rtol=1e-6)
  assert seen == [False, True]


def test_split_gives_equal_shares_and_fills_the_gpu():
  for N, C in ((256, 64), (256, 256), (256, 2048), (32, 64), (3, 7)):
    s = bn.split(N, C)
    assert N % s == 0 and (C * s >= 4 * bn.SMS or s == N)
    assert all(C * d < 4 * bn.SMS for d in range(1, s) if N % d == 0)   # no smaller share count would do


@pytest.mark.parametrize("devices", [None, ("CPU:0", "CPU:1")], ids=["one_device", "two_devices"])
@pytest.mark.parametrize("relu,res", [(False, False), (True, True)], ids=["bn", "bn_add_relu"])
def test_batchnorm_through_custom_kernel_equals_the_model_with_every_gradient(devices, relu, res):
  """batchnorm's custom_kernel call and grad function (the tinygrad fallback) against the model's BatchNorm2d: y,
  the gradients of x, weight, bias and residual, and the statistics, per device when the batch is sharded."""
  rng = np.random.default_rng(3)
  x, r, g = ((2 + rng.standard_normal((4, 3, 5, 5))).astype(np.float32) for _ in range(3))
  w, b = (1 + 0.2 * rng.standard_normal(3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
  D = 1 if devices is None else len(devices)
  def put(a, axis):
    t = Tensor(a)
    return t if devices is None else t.shard(devices, axis=axis)
  with Context(TRAINING=1):
    xt, rt, wt, bt = put(x, 0), put(r, 0), put(w, None), put(b, None)
    y, mean, var = bn.batchnorm(xt, wt, bt, EPS, rt if res else None, relu)
    grads = (y * put(g, 0)).sum().gradient(xt, wt, bt, *([rt] if res else []))
    layer = BatchNorm2d(3, groups=D, eps=EPS)
    layer.weight, layer.bias = put(w, None), put(b, None)
    xt2, rt2 = put(x, 0), put(r, 0)
    y2 = layer(xt2, rt2 if res else None, relu)
    want = (y2 * put(g, 0)).sum().gradient(xt2, layer.weight, layer.bias, *([rt2] if res else []))
  np.testing.assert_allclose(y.numpy(), y2.numpy(), rtol=1e-5, atol=1e-5)
  for got, ref in zip(grads, want): np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
  xg = x.reshape(D, -1, 3, 25)
  assert mean.shape == var.shape == (D, 3)
  np.testing.assert_allclose(mean.numpy(), xg.mean((1, 3)), rtol=1e-5)
  np.testing.assert_allclose(var.numpy(), xg.var((1, 3)), rtol=1e-4)


def test_resnet_with_the_knob_sends_every_training_bn_through_batchnorm_and_keeps_the_running_stats(monkeypatch):
  """Under KERNELS=triton while training each BN goes through batchnorm (relu on all but the downsample's and the
  third's ReLU after the residual add), and the running statistics move as the default path's; in eval none does."""
  seen = []
  real = bn.batchnorm
  monkeypatch.setattr(bn, "batchnorm", lambda x, w, b, eps, res=None, relu=False:
                      seen.append((res is not None, relu)) or real(x, w, b, eps, res, relu))
  rng_x = np.random.default_rng(5).standard_normal((2, 3, 16, 16)).astype(np.float32)
  models = {k: ResNet((1, 1), width=4, num_classes=3, bn_groups=1, rng=np.random.default_rng(0), kernels=k)
            for k in ("tinygrad", "triton")}
  outs = {}
  with Context(TRAINING=1):
    for k, m in models.items():
      m.conv1.kernels = "tinygrad"   # the convs' own kernels are test_kernels_conv.py's: BN alone differs here
      for st in m.stages():
        for blk in st:
          for c in (blk.conv1, blk.conv2, blk.conv3, *blk.downsample[:1]): c.kernels = "tinygrad"
      outs[k] = m(Tensor(rng_x)).numpy()
      Tensor.realize(*[m.layer1[0].bn3.running_mean, m.layer1[0].bn3.running_var])
  # stem (relu), then per block bn1 (relu), bn2 (relu), downsample (plain), bn3 (add, relu)
  assert seen == [(False, True)] + [(False, True), (False, True), (False, False), (True, True)] * 2
  np.testing.assert_allclose(outs["triton"], outs["tinygrad"], rtol=1e-4, atol=1e-5)
  for name in ("running_mean", "running_var"):
    np.testing.assert_allclose(getattr(models["triton"].layer1[0].bn3, name).numpy(),
                               getattr(models["tinygrad"].layer1[0].bn3, name).numpy(), rtol=1e-5, atol=1e-6)
  seen.clear()
  models["triton"](Tensor(rng_x)).realize()   # TRAINING unset: the running statistics, tinygrad's ops
  assert not seen


def test_h200_cubins_compile_here_with_the_launch_facts():
  """The four kernels compiled ahead for sm_90 by Triton's own ptxas, without a GPU, at the stem's BN (BS 256, 64
  channels of 112x112, ReLU) and layer 4's last (2048 of 7x7, residual and ReLU): the block size, pointers + Triton's
  two scratch parameters, and grids that cover the tensor."""
  code = """
import json
from tinygrad import dtypes
from tinyperf.benchmarks.kernels import batchnorm as bn
out = []
for N, C, HW, res in ((256, 64, 112 * 112, False), (256, 2048, 49, True)):
  for kind in ("stats", "apply", "bwd_sums", "bwd_apply"):
    consts, grid = bn.launch(kind, N, C, HW, True, res, res)
    k = bn.prg.compile_kernel(bn.compiled[kind], bn.pointers(kind, dtypes.half), tuple(consts.items()), bn.WARPS, 1, 90)
    params = [l for l in k.ptx.splitlines() if ".param .u64" in l]
    out.append({"kind": kind, "name": k.name, "threads": k.threads, "params": len(params), "npointers":
                len(bn.pointers(kind, dtypes.half)), "cubin": len(k.cubin), "grid": grid, "consts": consts})
print(json.dumps(out))
"""
  got = compiled_facts(code, timeout=600)
  assert len(got) == 8
  for g in got:
    c = g["consts"]
    assert g["name"] == f"bn_{g['kind']}_kernel" and g["cubin"] > 1000 and g["threads"] == 32 * bn.WARPS, g
    assert g["params"] == g["npointers"] + 2, g
    if g["kind"] in ("stats", "bwd_sums"): assert g["grid"] == c["C"] * c["SPLIT"] >= 4 * bn.SMS, g
    else: assert g["grid"] * c["RB"] * c["BHW"] >= c["NC"] * c["HW"], g


def test_mismatched_shapes_are_refused():
  with pytest.raises(ValueError, match="batchnorm"):
    bn.batchnorm(Tensor.zeros(2, 3, 4, 4), Tensor.ones(4), Tensor.zeros(4), EPS)
