"""Polynomial decay with linear warm-up: pure function vs closed form, and the in-JIT tensor scheduler vs the function."""
import numpy as np
import pytest
from tinygrad import Tensor, TinyJit, Context, dtypes
from tinygrad.nn.optim import SGD

from tinyperf.benchmarks.common.schedule import poly_warmup_lr, PolyWarmupLR

# the tinybox schedule: peak 7.2, end 1e-4, 2 warm-up epochs of 835 steps, 37 epochs
PEAK, END, WARMUP, TOTAL = 7.2, 1e-4, 1670, 30895


def test_closed_form_values():
  assert poly_warmup_lr(0, PEAK, END, WARMUP, TOTAL) == 0.0
  assert poly_warmup_lr(835, PEAK, END, WARMUP, TOTAL) == pytest.approx(3.6)
  assert poly_warmup_lr(1670, PEAK, END, WARMUP, TOTAL) == pytest.approx(7.2)          # warm-up end: the peak
  # first decay step: (7.2 - 1e-4) * (1 - 1/29226)^2 + 1e-4
  assert poly_warmup_lr(1671, PEAK, END, WARMUP, TOTAL) == pytest.approx(7.1999 * (29225 / 29226) ** 2 + 1e-4)
  # middle of the decay: c - warmup = 14613 = 29226 / 2 -> (1/2)^2
  assert poly_warmup_lr(1670 + 14613, PEAK, END, WARMUP, TOTAL) == pytest.approx(7.1999 / 4 + 1e-4)
  # last trained step (c = total - 1) and the end of the schedule: tiny but above END
  assert poly_warmup_lr(30894, PEAK, END, WARMUP, TOTAL) == pytest.approx(7.1999 * (2 / 29226) ** 2 + 1e-4)
  assert poly_warmup_lr(30895, PEAK, END, WARMUP, TOTAL) == pytest.approx(7.1999 * (1 / 29226) ** 2 + 1e-4)
  # past the schedule the base clamps at 0: LR stays at END instead of growing again
  assert poly_warmup_lr(40000, PEAK, END, WARMUP, TOTAL) == pytest.approx(END)


def test_monotone_shape():
  lrs = [poly_warmup_lr(c, 2.0, 1e-4, 10, 80) for c in range(81)]
  assert all(a < b for a, b in zip(lrs[:10], lrs[1:11]))      # rising through warm-up
  assert all(a > b for a, b in zip(lrs[10:], lrs[11:]))       # falling afterwards
  assert max(lrs) == lrs[10] == 2.0


def test_power_is_used():
  assert poly_warmup_lr(15, 1.0, 0.0, 10, 20, power=1) == pytest.approx(1 - 5 / 11)
  assert poly_warmup_lr(15, 1.0, 0.0, 10, 20, power=2) == pytest.approx((1 - 5 / 11) ** 2)


def _sgd():
  w = Tensor([1.0, 2.0], dtype=dtypes.float32).contiguous().realize()
  return w, SGD([w], lr=123.0, momentum=0.0, classic=True)


def test_tensor_scheduler_follows_function_inside_jit():
  peak, end, warmup, total = 2.0, 1e-4, 4, 12
  _, opt = _sgd()
  sched = PolyWarmupLR([opt], peak, end, warmup, total)
  assert opt.lr.numpy()[0] == 0.0 and sched.steps_done() == 0    # constructor writes lr(0) = 0

  @TinyJit
  def step():
    sched.step()
    return sched.counter

  for c in range(1, 16):
    step()
    assert sched.steps_done() == c
    assert opt.lr.numpy()[0] == pytest.approx(poly_warmup_lr(c, peak, end, warmup, total), rel=1e-6, abs=1e-7), c
  assert step.captured is not None   # the assigns replayed from the captured JIT


def test_step_k_trains_with_lr_k():
  # scheduler after the optimizer: step 0 uses lr(0) = 0 and leaves the weights alone; step k uses lr(k)
  peak, end, warmup, total = 1.0, 0.0, 2, 6
  w, opt = _sgd()
  sched = PolyWarmupLR([opt], peak, end, warmup, total)

  @TinyJit
  @Context(TRAINING=1)
  def train_step():
    opt.zero_grad()
    (w * Tensor([1.0, -1.0])).sum().backward()     # grad = (1, -1)
    opt.step()
    sched.step()
    return w

  expect = np.array([1.0, 2.0])
  for k in range(6):
    got = train_step().numpy()
    expect = expect - poly_warmup_lr(k, peak, end, warmup, total) * np.array([1.0, -1.0])
    np.testing.assert_allclose(got, expect, rtol=1e-6)
  assert poly_warmup_lr(0, peak, end, warmup, total) == 0.0 and not np.allclose(expect, [1.0, 2.0])


def test_scheduler_drives_all_optimizers():
  (_, a), (_, b) = _sgd(), _sgd()
  sched = PolyWarmupLR([a, b], 3.0, 0.0, 3, 9)
  sched.step(); sched.step()
  assert a.lr.numpy()[0] == b.lr.numpy()[0] == pytest.approx(2.0)
