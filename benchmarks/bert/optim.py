"""BERT optimizer: LAMB with weight decay on all weights but LayerNorm parameters and biases, polynomial LR decay
with linear warm-up, global-norm gradient clipping, static loss scale (as tinycorp's examples/mlperf BERT).

tinygrad 0.14.0's nn.optim.LAMB, read from the installed nn/optim.py, per tensor w with gradient g at step t:
  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2                 (fp32 moments, OPTIM_DTYPE default float32)
  m^ = m / (1 - b1^t);  v^ = v / (1 - b2^t)                          (bias correction; b1^t, b2^t are fp32 tensors)
  u = m^ / (sqrt(v^) + eps) + wd * w
  r = |w| / |u| if |w| > 0 and |u| > 0 else 1                        (adam=True: r = 1)
  w <- w - lr * r * u
tests/unit/test_bert_optim.py checks three steps against a numpy implementation of these lines.

Groups (state-dict key contains "bias" or "LayerNorm" -> no decay, as the reference's exclusion list):
  decay group: LAMB(weight_decay=DECAY), trust ratio on;
  no-decay group: by default LAMB with adam=True, i.e. weight decay 0 *and no trust ratio*. This is the MLCommons
  reference: mlcommons/training language_model/tensorflow/bert/optimization.py builds
  LAMBOptimizer(weight_decay_rate=0.01, exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]) and passes no
  exclude_from_layer_adaptation, which its LAMBOptimizer (lamb_optimizer_v1) then sets to exclude_from_weight_decay:
  those variables get ratio 1.0 (_do_layer_adaptation). The other compliant implementation of the rules' optimizer
  appendix agrees: apex FusedLAMB applies the trust ratio only to tensors with non-zero weight decay (use_nvlamb=False,
  its default). tinycorp's code differs: LAMB(adam=False, weight_decay=0) for this group also scales LayerNorm and
  bias updates by |w|/|u|; adapt_no_decay=True reproduces that, for comparison only (docs/bert_train.md).
fused=False always: with FUSE_OPTIM=1 tinygrad concatenates all tensors before _step, which would turn the per-tensor
trust ratio into one global ratio.

Clipping (clip_and_unscale): gradients are unscaled (divided by LOSS_SCALER) in fp32, the global L2 norm over all of
them is computed in fp32, and if it exceeds CLIP_NORM every gradient is multiplied by CLIP_NORM / norm (the reference:
divide by the norm when it is > 1, CLIP_NORM = 1). The static loss scale never skips steps.

Schedule: benchmarks/common/schedule.PolyWarmupLR(peak LR, end 0, warmup WARMUP_STEPS, total TRAIN_STEPS, POLY_POWER),
stepped after the optimizer inside the jitted step: step 0 trains with LR 0 (reference: step 0 LR 0, step 1 the peak).
"""
from __future__ import annotations
from typing import Mapping

from tinygrad import Tensor
from tinygrad.nn.optim import LAMB, OptimizerGroup
from tinygrad.nn.state import get_state_dict

from tinyperf.benchmarks.common.schedule import PolyWarmupLR

NO_DECAY = ("bias", "LayerNorm")


def is_decay_key(key: str) -> bool: return not any(s in key for s in NO_DECAY)


def split_parameters(model) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
  """(decay, no_decay): state-dict key -> tensor, in model key order."""
  sd = get_state_dict(model)
  return {k: t for k, t in sd.items() if is_decay_key(k)}, {k: t for k, t in sd.items() if not is_decay_key(k)}


def build_optimizer(decay_params: list[Tensor], no_decay_params: list[Tensor], lr: float, b1: float, b2: float,
                    eps: float, weight_decay: float, adapt_no_decay: bool = False) -> OptimizerGroup:
  """OptimizerGroup(LAMB over decay_params with weight_decay, LAMB over no_decay_params without)."""
  opt_decay = LAMB(decay_params, lr, b1, b2, eps, weight_decay=weight_decay, adam=False, fused=False)
  opt_plain = LAMB(no_decay_params, lr, b1, b2, eps, weight_decay=0.0, adam=not adapt_no_decay, fused=False)
  return OptimizerGroup(opt_decay, opt_plain)


def make_optimizer(model, knobs: Mapping, adapt_no_decay: bool = False) -> tuple[OptimizerGroup, PolyWarmupLR]:
  """OptimizerGroup(LAMB decay, LAMB no-decay) and the scheduler driving both LRs (knobs LR, BETA1, BETA2, EPSILON,
  DECAY, WARMUP_STEPS, TRAIN_STEPS, POLY_POWER). Call after place_model: state is created on the parameters' devices."""
  decay, plain = split_parameters(model)
  optimizer = build_optimizer(list(decay.values()), list(plain.values()), float(knobs["LR"]), float(knobs["BETA1"]),
                              float(knobs["BETA2"]), float(knobs["EPSILON"]), float(knobs["DECAY"]), adapt_no_decay)
  scheduler = PolyWarmupLR(optimizer.optimizers, peak=float(knobs["LR"]), end=0.0, warmup=int(knobs["WARMUP_STEPS"]),
                           total=int(knobs["TRAIN_STEPS"]), power=float(knobs["POLY_POWER"]))
  return optimizer, scheduler


def clip_and_unscale(grads: list[Tensor], loss_scale: float, clip_norm: float) -> tuple[list[Tensor], Tensor]:
  """Unscale (fp32), clip to a global L2 norm of clip_norm. Returns (clipped grads in fp32, global norm before
  clipping () fp32). A norm of 0 leaves the grads unchanged."""
  g32 = [g.float() * (1.0 / loss_scale) for g in grads]
  norm = Tensor.stack(*[g.square().sum() for g in g32]).sum().sqrt()          # () float32
  factor = (norm > clip_norm).where(clip_norm / norm.maximum(1e-30), 1.0)       # () float32
  return [g * factor for g in g32], norm


def fused_step(optimizer: OptimizerGroup, knobs: Mapping):
  """KERNELS=triton: benchmarks/kernels' clip + LAMB kernels over the optimizer's state (the same formulas, in place,
  three launches per 32 tensors of a size; tinygrad kernels of the same plan off CUDA), else None (tinygrad's LAMB after
  clip_and_unscale). Made outside the jit."""
  if knobs.get("KERNELS") != "triton": return None
  from tinyperf.benchmarks.kernels import lamb   # imports Triton: only where the knob asks for it
  if not lamb.supported(optimizer.optimizers): return None
  return lamb.FusedLAMB(optimizer.optimizers, float(knobs["LOSS_SCALER"]), float(knobs["CLIP_NORM"]))


def lamb_hparams(knobs: Mapping) -> dict:
  """The ten LAMB keys closed_bert.yaml requires EXACTLY_ONE each, plus the poly power (optional key), named as
  mlperf_logging's constants spell them. opt_name, max_sequence_length, eval_samples and train_samples are logged by
  the entrypoint."""
  return {
    "global_batch_size": int(knobs["BS"]),
    "opt_base_learning_rate": float(knobs["LR"]),
    "opt_lamb_epsilon": float(knobs["EPSILON"]),
    "opt_learning_rate_training_steps": int(knobs["TRAIN_STEPS"]),
    "opt_learning_rate_warmup_steps": int(knobs["WARMUP_STEPS"]),
    "num_warmup_steps": int(knobs["WARMUP_STEPS"]),
    "start_warmup_step": 0,
    "opt_lamb_beta_1": float(knobs["BETA1"]),
    "opt_lamb_beta_2": float(knobs["BETA2"]),
    "opt_lamb_weight_decay_rate": float(knobs["DECAY"]),
    "opt_lamb_learning_rate_decay_poly_power": float(knobs["POLY_POWER"]),
  }
