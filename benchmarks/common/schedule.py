"""Learning-rate schedule shared by ResNet (LARS) and BERT (LAMB): linear warm-up, then polynomial decay.

  lr(c) = peak * c / warmup                                                    for c <= warmup
  lr(c) = (peak - end) * (1 - (c - warmup) / (total - warmup + 1))^power + end  for c >  warmup

c counts optimizer steps already taken. The scheduler writes lr(0) = 0 into the optimizers at construction and steps
*after* the optimizer inside the jitted train step, so step 0 trains with LR 0 and step k with lr(k) (matches the
MLCommons reference). Past the end of the schedule the decay base is clamped at 0, so the LR stays at `end`.

Two forms of the same formula:
  poly_warmup_lr(...)  pure Python, for tests, logging and the MLLOG hyperparameters;
  PolyWarmupLR         a device-tensor counter whose step assigns counter+1 and the new LR into every optimizer's lr
                       tensor, so it runs inside a TinyJit'd step with no host round-trip.
"""
from __future__ import annotations
from typing import Sequence

from tinygrad import Tensor, dtypes


def poly_warmup_lr(c: float, peak: float, end: float, warmup: int, total: int, power: float = 2.0) -> float:
  if c <= warmup: return peak * c / warmup if warmup > 0 else peak
  base = max(0.0, 1.0 - (c - warmup) / (total - warmup + 1))
  return (peak - end) * base ** power + end


class PolyWarmupLR:
  """Drives the `lr` tensor of one or more tinygrad optimizers (all get the same LR).

  counter: float32 (1,) tensor on the optimizers' device(s), part of the training state (save_state/load_state)."""
  def __init__(self, optimizers: Sequence, peak: float, end: float, warmup: int, total: int, power: float = 2.0):
    assert total > warmup >= 0, f"schedule needs total ({total}) > warmup ({warmup}) >= 0"
    self.optimizers = list(optimizers)
    self.peak, self.end, self.warmup, self.total, self.power = peak, end, warmup, total, power
    lr0 = self.optimizers[0].lr
    self.counter = Tensor.zeros_like(lr0, dtype=dtypes.float32).contiguous().realize()  # (1,)
    for o in self.optimizers: o.lr.assign(self._lr(self.counter).cast(o.lr.dtype)).realize()

  def _lr(self, c: Tensor) -> Tensor:
    warm = c * (self.peak / self.warmup) if self.warmup > 0 else c.const_like(self.peak)
    base = (1.0 - (c - self.warmup) / (self.total - self.warmup + 1)).maximum(0.0)
    return (c <= self.warmup).where(warm, (self.peak - self.end) * base.pow(self.power) + self.end)

  def schedule_step(self) -> list[Tensor]:
    """Lazy counter += 1 and lr = lr(counter); returns the tensors to realize."""
    self.counter.assign(self.counter + 1)
    for o in self.optimizers: o.lr.assign(self._lr(self.counter).cast(o.lr.dtype))
    return [self.counter] + [o.lr for o in self.optimizers]

  def step(self) -> None: Tensor.realize(*self.schedule_step())

  def steps_done(self) -> int:
    """Optimizer steps taken so far (host read; not for use inside a JIT)."""
    return int(self.counter.numpy().reshape(-1)[0])

  def lr_at(self, c: float) -> float: return poly_warmup_lr(c, self.peak, self.end, self.warmup, self.total, self.power)
