"""Jitted ResNet train/eval steps, input normalisation, the masked label-smoothing loss, device placement of batches.

Batches arrive as uint8 NHWC images (B, H, W, 3) and int32 labels (B,), sharded on axis 0 across the devices (or on a
single device); label -1 marks a padding sample. The loader pads the first batch of an epoch (as upstream)
and deals its real samples evenly over the device shards (data.real_rows), so the steps right before an eval are full
batches and no device's unsynced BatchNorm takes a padding-only update (tests/unit/test_resnet_padding.py). Padding must
not train or count: the loss here masks it out of both the smoothing term and the denominator. (tinygrad 0.14.0's
sparse_categorical_crossentropy does not: its default ignore_index=-1 disables masking, so upstream's padded samples pull
towards the uniform distribution and dilute the mean.) Padded images still enter the BatchNorm batch
statistics, as upstream: the loader's pad image is the mean pixel, i.e. ~0 after normalisation.
"""
from __future__ import annotations
from typing import Callable, Mapping, Sequence

import numpy as np
from tinygrad import Tensor, Context, dtypes

from tinyperf.benchmarks.common.runtime import captured_jit

MEAN_RGB = (123.68, 116.78, 103.94)  # per-channel mean on the 0-255 scale; no std division (MLPerf reference)


def replicate(t: Tensor, devices: Sequence[str]) -> Tensor:
  return t.to(devices[0]) if len(devices) == 1 else t.to(tuple(devices))


def to_device(x_np: np.ndarray, y_np: np.ndarray, devices: Sequence[str]) -> tuple[Tensor, Tensor]:
  """numpy batch -> realized device tensors, split on axis 0 across `devices` (B must divide evenly).
  x: (B, H, W, 3) uint8, y: (B,) int32 with -1 for padding."""
  assert x_np.dtype == np.uint8 and x_np.ndim == 4 and x_np.shape[-1] == 3, f"want uint8 NHWC, got {x_np.dtype} {x_np.shape}"
  assert len(x_np) == len(y_np) and len(x_np) % len(devices) == 0, f"batch {len(x_np)} vs {len(devices)} devices"
  x, y = Tensor(np.ascontiguousarray(x_np), dtype=dtypes.uint8), Tensor(np.asarray(y_np, dtype=np.int32))
  if len(devices) == 1: x, y = x.to(devices[0]), y.to(devices[0])
  else: x, y = x.shard(tuple(devices), axis=0), y.shard(tuple(devices), axis=0)
  return x.realize(), y.realize()


def normalize(x: Tensor, mean: Tensor) -> Tensor:
  """(B, H, W, 3) uint8 -> (B, 3, H, W) dtypes.default_float, minus the per-channel mean (float32 subtraction)."""
  return (x.permute(0, 3, 1, 2).float() - mean.reshape(1, 3, 1, 1)).cast(dtypes.default_float)


def smoothed_ce_sum(logits: Tensor, y: Tensor, smoothing: float) -> tuple[Tensor, Tensor]:
  """Label-smoothed cross entropy summed over real samples, and the number of real samples (label >= 0).

  per-sample loss = (1 - s) * -log p[y] + s * mean_k(-log p[k]); a padded sample (y = -1) contributes nothing.
  logits: (B, K) float32 -> (loss_sum (), n_real ()) float32."""
  logp = logits.float().log_softmax(-1)                                   # (B, K)
  onehot = y.unsqueeze(-1) == Tensor.arange(logits.shape[-1]).cast(y.dtype)  # (B, K) bool, all False for -1
  per = -(1.0 - smoothing) * (logp * onehot).sum(-1) - smoothing * logp.mean(-1)  # (B,)
  real = y >= 0                                                           # (B,) bool
  return real.where(per, 0.0).sum(), real.float().sum()


def top1_correct(logits: Tensor, y: Tensor) -> Tensor:
  """Count of argmax == label; a -1 label never matches. () int32."""
  return (logits.argmax(-1) == y).int().sum()


def make_steps(model, optimizer, scheduler, knobs: Mapping, devices: Sequence[str]) -> tuple[Callable, Callable]:
  """TinyJit'd train_step(x, y) -> (loss, correct) and eval_step(x, y) -> (loss_sum, correct, n_real).

  The returned tensors are realized device tensors that the JIT overwrites on its next call: read them (.item(),
  .numpy()) before calling the same step again. Each step captures its first call (runtime.captured_jit, which realizes
  the model's and the optimizer's state first) and replays from the second."""
  smoothing, scale = float(knobs["LABEL_SMOOTHING"]), float(knobs["LOSS_SCALER"])
  mean = replicate(Tensor(MEAN_RGB, dtype=dtypes.float32), devices).realize()

  @Context(TRAINING=1)
  def train_step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    optimizer.zero_grad()
    logits = model(normalize(x, mean))                                    # (B, K) float32
    loss_sum, n_real = smoothed_ce_sum(logits, y, smoothing)
    loss = loss_sum / n_real.maximum(1.0)                                 # mean over real samples
    (loss * scale).backward()
    for p in optimizer.params: p.grad = p.grad.contiguous() / scale      # unscale: static loss scale, no skipping
    correct = top1_correct(logits, y)
    # one schedule: the forward reads finish before the weights are overwritten
    Tensor.realize(loss, correct, *optimizer.schedule_step())
    scheduler.step()                                                      # after the optimizer: step 0 used lr(0) = 0
    return loss, correct

  @Context(TRAINING=0)
  def eval_step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    logits = model(normalize(x, mean))
    loss_sum, n_real = smoothed_ce_sum(logits, y, smoothing)
    return loss_sum.realize(), top1_correct(logits, y).realize(), n_real.realize()

  return captured_jit(train_step, model, optimizer, scheduler), captured_jit(eval_step, model, optimizer, scheduler)
