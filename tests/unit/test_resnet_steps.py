"""Input normalisation, the masked label-smoothing loss and its gradient, top-1 counting, BatchNorm numerics."""
import math

import numpy as np
import pytest
from tinygrad import Tensor, Context, dtypes

from tinyperf.benchmarks.resnet.model import BatchNorm2d
from tinyperf.benchmarks.resnet.steps import MEAN_RGB, normalize, smoothed_ce_sum, top1_correct, to_device

S = 0.1
LOGITS = [[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]]
LABELS = [0, 2]
PAD_LOGITS = [[100.0, -50.0, 3.0], [0.0, 0.0, 0.0], [-7.0, 8.0, 1.0]]


def hand_loss(logits, labels, s):
  """Label-smoothed CE per sample, written out: -(1-s) log p_y - s/K sum_k log p_k."""
  out = []
  for row, y in zip(logits, labels):
    lse = math.log(sum(math.exp(v) for v in row))
    logp = [v - lse for v in row]
    out.append(-(1 - s) * logp[y] - s * sum(logp) / len(row))
  return out


def test_loss_small_case_by_hand():
  per = hand_loss(LOGITS, LABELS, S)
  # sample 0: lse(2,0,-1) = 2.1698; -0.9*(2-2.1698) - 0.1*((2+0-1)/3 - 2.1698) = 0.15281 + 0.18365
  assert per[0] == pytest.approx(0.33646, abs=1e-4)
  loss_sum, n = smoothed_ce_sum(Tensor(LOGITS), Tensor(LABELS, dtype=dtypes.int32), S)
  assert loss_sum.item() == pytest.approx(sum(per), rel=1e-6) and n.item() == 2.0
  # agrees with tinygrad's own loss when nothing is padded
  ref = Tensor(LOGITS).sparse_categorical_crossentropy(Tensor(LABELS), label_smoothing=S).item()
  assert loss_sum.item() / 2 == pytest.approx(ref, rel=1e-6)


def test_padded_rows_change_nothing():
  y = Tensor(LABELS + [-1, -1, -1], dtype=dtypes.int32)
  loss_sum, n = smoothed_ce_sum(Tensor(LOGITS + PAD_LOGITS), y, S)
  assert n.item() == 2.0
  assert loss_sum.item() == pytest.approx(sum(hand_loss(LOGITS, LABELS, S)), rel=1e-6)
  # padding first (as the loader emits it) is the same
  loss_sum2, _ = smoothed_ce_sum(Tensor(PAD_LOGITS + LOGITS), Tensor([-1, -1, -1] + LABELS, dtype=dtypes.int32), S)
  assert loss_sum2.item() == pytest.approx(loss_sum.item(), rel=1e-6)
  # why we do not use tinygrad 0.14's loss: it lets -1 rows in through the smoothing term and the denominator
  theirs = Tensor(LOGITS + PAD_LOGITS).sparse_categorical_crossentropy(y, label_smoothing=S).item()
  assert theirs != pytest.approx(loss_sum.item() / 2, rel=1e-3)


def test_all_padding_batch_is_zero_not_nan():
  loss_sum, n = smoothed_ce_sum(Tensor(PAD_LOGITS), Tensor([-1, -1, -1], dtype=dtypes.int32), S)
  assert (loss_sum.item(), n.item()) == (0.0, 0.0)


def test_masked_loss_gradient_matches_analytic():
  rng = np.random.default_rng(0)
  B, K = 7, 5
  x = rng.standard_normal((B, K)).astype(np.float32) * 3
  y = np.array([1, -1, 4, 0, -1, 2, 2], dtype=np.int32)
  logits = Tensor(x).contiguous().realize()
  loss_sum, n = smoothed_ce_sum(logits, Tensor(y), S)
  (loss_sum / n).backward()
  got = logits.grad.numpy()
  # d/dz of the mean smoothed CE: (softmax(z) - q) / n_real, q = (1-s) onehot + s/K; zero on padded rows
  p = np.exp(x - x.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
  q = np.full((B, K), S / K); q[np.arange(B), y] += 1 - S
  real = y >= 0
  want = np.where(real[:, None], (p - q) / real.sum(), 0.0)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
  assert np.all(got[~real] == 0)


def test_top1_ignores_padding():
  logits = Tensor([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0], [5.0, 0.0, 0.0], [0.0, 0.0, 9.0]])
  assert top1_correct(logits, Tensor([0, 2, -1, 2], dtype=dtypes.int32)).item() == 2  # row 2 predicts 0, label -1
  assert top1_correct(logits, Tensor([-1, -1, -1, -1], dtype=dtypes.int32)).item() == 0


def test_normalize_subtracts_mean_only():
  x = np.zeros((2, 2, 3, 3), dtype=np.uint8)                     # (B, H, W, C)
  x[0, 0, 0] = [255, 0, 124]; x[1, 1, 2] = [10, 200, 104]
  mean = Tensor(MEAN_RGB, dtype=dtypes.float32)
  out = normalize(Tensor(x), mean)
  assert out.shape == (2, 3, 2, 3) and out.dtype == dtypes.float32   # NCHW
  want = x.transpose(0, 3, 1, 2).astype(np.float32) - np.array(MEAN_RGB, np.float32).reshape(1, 3, 1, 1)
  np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=1e-5)
  assert out.numpy()[0, :, 0, 0] == pytest.approx([255 - 123.68, -116.78, 124 - 103.94], abs=1e-4)  # no /std
  with Context(DEFAULT_FLOAT="HALF"):
    half = normalize(Tensor(x), mean)
    assert half.dtype == dtypes.float16
    np.testing.assert_allclose(half.numpy().astype(np.float32), want, atol=0.07)


def test_loss_on_two_devices_equals_one_device():
  rng = np.random.default_rng(1)
  x = rng.integers(0, 256, (4, 2, 2, 3), dtype=np.uint8)
  y = np.array([2, -1, 0, 1], dtype=np.int32)
  logits = rng.standard_normal((4, 3)).astype(np.float32)
  X, Y = to_device(x, y, ("CPU:0", "CPU:1"))
  assert X.device == ("CPU", "CPU:1") and X.uop.axis == 0 and Y.uop.axis == 0
  L = Tensor(logits).shard(("CPU:0", "CPU:1"), axis=0)
  two = [t.item() for t in smoothed_ce_sum(L, Y, S)] + [top1_correct(L, Y).item()]
  one = [t.item() for t in smoothed_ce_sum(Tensor(logits), Tensor(y), S)] + [top1_correct(Tensor(logits), Tensor(y)).item()]
  assert two == pytest.approx(one, rel=1e-6)
  np.testing.assert_array_equal(X.numpy(), x)


def bn_reference(x, groups, eps=1e-5):
  """(normalised x, mean, unbiased var) per group of the batch; groups=None: the whole batch."""
  B, C, H, W = x.shape
  xg = x.reshape(1 if groups is None else groups, -1, C, H, W).astype(np.float64)
  mean, var = xg.mean(axis=(1, 3, 4)), xg.var(axis=(1, 3, 4))
  n = xg.shape[1] * H * W
  y = (xg - mean[:, None, :, None, None]) / np.sqrt(var[:, None, :, None, None] + eps)
  return y.reshape(B, C, H, W), mean, var * n / (n - 1)


@pytest.mark.parametrize("groups", [None, 2])
def test_batchnorm_train_and_eval(groups):
  rng = np.random.default_rng(2)
  x = (rng.standard_normal((4, 3, 2, 2)) * 3 + 1).astype(np.float32)
  x[2:] += 5                                       # the two halves (devices) have different statistics
  bn = BatchNorm2d(3, groups=groups, rng=rng)
  bn.weight.assign(Tensor([2.0, 1.0, 0.5])).realize(); bn.bias.assign(Tensor([0.5, 0.0, -1.0])).realize()
  y_ref, mean, var_unbiased = bn_reference(x, groups)
  with Context(TRAINING=1):
    y = bn(Tensor(x)).numpy()
  np.testing.assert_allclose(y, y_ref * np.array([2, 1, .5]).reshape(1, 3, 1, 1) + np.array([.5, 0, -1]).reshape(1, 3, 1, 1),
                             rtol=1e-4, atol=1e-4)
  rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
  shape = (3,) if groups is None else (groups, 3)
  assert rm.shape == rv.shape == shape
  np.testing.assert_allclose(rm, (0.1 * mean).reshape(shape), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(rv, (0.9 + 0.1 * var_unbiased).reshape(shape), rtol=1e-5)
  if groups: assert not np.allclose(rm[0], rm[1])    # per-device statistics really differ
  with Context(TRAINING=0):
    y_eval = bn(Tensor(x)).numpy()
  xg = x.reshape(1 if groups is None else groups, -1, 3, 2, 2)
  want = (xg - rm.reshape(-1, 1, 3, 1, 1)) / np.sqrt(rv.reshape(-1, 1, 3, 1, 1) + 1e-5)
  want = want.reshape(x.shape) * np.array([2, 1, .5]).reshape(1, 3, 1, 1) + np.array([.5, 0, -1]).reshape(1, 3, 1, 1)
  np.testing.assert_allclose(y_eval, want, rtol=1e-4, atol=1e-4)


def test_batchnorm_half_input_fp32_stats():
  # values up to 4500 are exact in fp16, but their squares (~2e7) overflow it (max 65504): statistics must be fp32
  x = np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2) * 300
  bn = BatchNorm2d(2, groups=1, rng=np.random.default_rng(0))
  with Context(TRAINING=1):
    y = bn(Tensor(x, dtype=dtypes.float16))
    assert y.dtype == dtypes.float16
    y = y.numpy().astype(np.float32)
  y_ref, mean, var_unbiased = bn_reference(x, 1)
  assert bn.running_mean.dtype == bn.running_var.dtype == dtypes.float32
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mean, rtol=1e-6)      # 0.1 * (1650, 2850)
  np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var_unbiased, rtol=1e-5)
  np.testing.assert_allclose(y, y_ref, atol=2e-3)
