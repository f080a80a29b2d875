"""Jitted BERT train/eval steps, device placement of batches, the eval set as whole padded batches, dropout RNG state.

Batches are dicts of numpy arrays as benchmarks/bert/data.py yields them: input_ids, input_mask, segment_ids (B, L)
int32; masked_lm_positions, masked_lm_ids (B, P) int32; masked_lm_weights (B, P) float32; next_sentence_labels (B, 1)
int32. to_device shards every field on axis 0 across the devices (or moves it to the single device); the steps take
the fields as keyword arguments (TinyJit sees top-level tensors only).

Eval (a fix of upstream's, as the MLCommons reference counts): eval_set_batches yields exactly the first EVAL_SAMPLES
samples of the eval shard once, in ceil(EVAL_SAMPLES / EVAL_BS) batches; the last one is padded with rows whose
masked_lm_weights are 0 and next_sentence_labels -1, so padding counts nowhere. EvalTotals adds the per-batch sums:
accuracy = total correct / total real predictions.
"""
from __future__ import annotations
import os
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
from tinygrad import Tensor, Context, Device

from tinyperf.benchmarks.bert.model import pretraining_loss, eval_sums
from tinyperf.benchmarks.bert.optim import clip_and_unscale, fused_step
from tinyperf.benchmarks.common.runtime import captured_jit, host_scalar

FIELDS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
          "next_sentence_labels")
EVAL_KEYS = ("mlm_correct", "mlm_count", "nsp_correct", "nsp_count", "mlm_loss_sum", "nsp_loss_sum")


def to_device(batch: Mapping[str, np.ndarray], devices: Sequence[str]) -> dict[str, Tensor]:
  """numpy batch -> realized tensors, split on axis 0 across `devices` (B must divide evenly)."""
  out = {}
  for k in FIELDS:
    a = batch[k]
    want = np.float32 if k == "masked_lm_weights" else np.int32
    assert a.dtype == want, f"{k}: want {np.dtype(want)}, got {a.dtype}"
    assert len(a) % len(devices) == 0, f"{k}: batch {len(a)} does not split over {len(devices)} devices"
    t = Tensor(np.ascontiguousarray(a))
    t = t.to(devices[0]) if len(devices) == 1 else t.shard(tuple(devices), axis=0)
    out[k] = t.realize()
  return out


def fake_batch(bs: int, max_seq_len: int, max_predictions: int) -> dict[str, np.ndarray]:
  """INIT/BENCHMARK data of the real shapes (the values never change a compiled kernel)."""
  B, L, P = bs, max_seq_len, max_predictions
  return {"input_ids": np.zeros((B, L), np.int32), "input_mask": np.ones((B, L), np.int32),
          "segment_ids": np.zeros((B, L), np.int32),
          "masked_lm_positions": np.broadcast_to(np.arange(1, P + 1, dtype=np.int32) % L, (B, P)).copy(),
          "masked_lm_ids": np.zeros((B, P), np.int32), "masked_lm_weights": np.ones((B, P), np.float32),
          "next_sentence_labels": np.zeros((B, 1), np.int32)}


def pad_batch(batch: Mapping[str, np.ndarray], bs: int) -> dict[str, np.ndarray]:
  """Pad a short batch to bs rows: zeros everywhere, masked_lm_weights 0 (no prediction counts), next_sentence_labels
  -1 (the sample counts for no NSP metric)."""
  n = len(batch["input_ids"])
  if n == bs: return dict(batch)
  out = {}
  for k, a in batch.items():
    pad = np.full((bs - n,) + a.shape[1:], -1 if k == "next_sentence_labels" else 0, a.dtype)
    out[k] = np.concatenate([a, pad])
  return out


def eval_set_batches(path: str | os.PathLike, batch_size: int, eval_samples: int, max_seq_len: int,
                     max_predictions: int, vocab_md5: str | None = None) -> Iterator[dict[str, np.ndarray]]:
  """The first eval_samples samples of the eval shard, once, in stored order; the last batch padded (pad_batch)."""
  from tinyperf.benchmarks.bert.shard import ShardError, load_shard, to_batch
  shard = load_shard(path, max_seq_len, max_predictions, mmap=True, vocab_md5=vocab_md5)
  n = len(shard["input_ids"])
  if n < eval_samples:
    raise ShardError(f"{path}: holds {n} eval samples, the config asks for EVAL_SAMPLES={eval_samples}. Remake it with "
                     f"`python -m tinyperf.benchmarks.bert.prep eval --eval-samples {eval_samples}` or lower EVAL_SAMPLES.")
  for start in range(0, eval_samples, batch_size):
    rows = np.arange(start, min(start + batch_size, eval_samples))
    yield pad_batch(to_batch(shard, rows), batch_size)


@dataclass
class EvalTotals:
  """Sums over an eval pass; the metrics are ratios of totals (not means of per-batch ratios)."""
  sums: dict = field(default_factory=lambda: {k: 0.0 for k in EVAL_KEYS})
  batches: int = 0

  def add(self, values: Mapping[str, float]):
    for k in EVAL_KEYS: self.sums[k] += float(values[k])
    self.batches += 1

  @property
  def mlm_accuracy(self) -> float: return self.sums["mlm_correct"] / max(self.sums["mlm_count"], 1.0)
  @property
  def nsp_accuracy(self) -> float: return self.sums["nsp_correct"] / max(self.sums["nsp_count"], 1.0)
  @property
  def mlm_loss(self) -> float: return self.sums["mlm_loss_sum"] / max(self.sums["mlm_count"], 1.0)
  @property
  def nsp_loss(self) -> float: return self.sums["nsp_loss_sum"] / max(self.sums["nsp_count"], 1.0)


class DropoutRNG:
  """tinygrad's per-device RNG state (seeded by Tensor.manual_seed; dropout draws advance a (2,) uint32 counter
  tensor per device, inside the JIT). Held here so that a training state includes it: a resumed run then draws the
  same dropout masks as an uninterrupted one. Create it once, right after building the model, before any step."""
  def __init__(self, seed: int, devices: Sequence[str]):
    Tensor.manual_seed(seed)
    self.keys, self.counters = [], []
    for d in devices:
      Tensor.rand(1, device=d).realize()                         # creates this device's key and counter tensors
      d = Device.canonicalize(d)
      self.keys.append(Tensor._device_seeds[d].realize())        # (2,) uint32, derived from the seed
      self.counters.append(Tensor._device_rng_counters[d].realize())


class StepState:
  """What a training state holds besides the model and the optimizers: the LR schedule and the dropout RNG."""
  def __init__(self, scheduler, rng: DropoutRNG):
    self.lr, self.rng = scheduler, rng


def make_steps(model, optimizer, scheduler, knobs: Mapping) -> tuple[Callable, Callable]:
  """TinyJit'd train_step(**batch) -> (loss, grad_norm) and eval_step(**batch) -> tuple of EVAL_KEYS sums.

  Returned tensors are realized device tensors that the JIT overwrites on its next call: read them (host_scalar)
  before calling the same step again. Each step captures its first call (runtime.captured_jit, which realizes the model's
  and the optimizer's state first) and replays from the second."""
  scale, clip = float(knobs["LOSS_SCALER"]), float(knobs["CLIP_NORM"])
  fused = fused_step(optimizer, knobs)   # KERNELS=triton: clip + LAMB as its own kernels; None: tinygrad's LAMB

  @Context(TRAINING=1)
  def train_step(**batch: Tensor) -> tuple[Tensor, Tensor]:
    optimizer.zero_grad()
    mlm, nsp = model(batch["input_ids"], batch["segment_ids"], batch["input_mask"], batch["masked_lm_positions"])
    loss, _, _ = pretraining_loss(mlm, nsp, batch, model.config.kernels)  # fp32
    (loss * scale).backward()
    if fused is not None: updated, norm = fused.schedule_step()
    else:
      grads, norm = clip_and_unscale([p.grad for p in optimizer.params], scale, clip)
      for p, g in zip(optimizer.params, grads): p.grad = g.contiguous()
      updated = optimizer.schedule_step()
    # one schedule: the forward reads finish before the weights are overwritten
    Tensor.realize(loss, norm, *updated)
    scheduler.step()                                                     # after the optimizer: step 0 used lr(0) = 0
    return loss, norm

  @Context(TRAINING=0)
  def eval_step(**batch: Tensor) -> tuple[Tensor, ...]:
    mlm, nsp = model(batch["input_ids"], batch["segment_ids"], batch["input_mask"], batch["masked_lm_positions"])
    sums = eval_sums(mlm, nsp, batch)
    out = tuple(sums[k] for k in EVAL_KEYS)
    Tensor.realize(*out)
    return out

  return captured_jit(train_step, model, optimizer, scheduler), captured_jit(eval_step, model, optimizer, scheduler)


def read_eval(out: Sequence[Tensor]) -> dict[str, float]:
  return {k: host_scalar(t) for k, t in zip(EVAL_KEYS, out)}


def evaluate(eval_step: Callable, batches, devices: Sequence[str], max_batches: int | None = None) -> EvalTotals:
  """Run eval_step over `batches` (numpy dicts) and add up the sums."""
  totals = EvalTotals()
  for i, b in enumerate(batches):
    if max_batches is not None and i >= max_batches: break
    totals.add(read_eval(eval_step(**to_device(b, devices))))
  return totals
