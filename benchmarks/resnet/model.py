"""ResNet-50 v1.5 for MLPerf Training, written on tinygrad 0.14.0 (which ships no models).

Facts followed (the MLCommons reference and tinycorp's examples/mlperf ResNet-50):
  - bottleneck blocks, stride on the 3x3 conv (v1.5), all convs bias-free, downsample = 1x1 conv (stride s) + BN
    whenever the stride or the channel count changes;
  - stem: 7x7/2 conv pad 3 -> BN -> ReLU -> zero pad 1 -> 3x3/2 max-pool without pool padding;
  - head: global average pool -> float32 -> FC, computed in float32;
  - master weights are float32; the forward casts conv weights to dtypes.default_float (fp16 under DEFAULT_FLOAT=HALF);
  - BatchNorm statistics per device by default (running stats shaped (num_devices, C)), synced on request.
The same class builds the toy model of the CPU smoke run: layers=(1,1), width=8, num_classes=4.

Initial weights are drawn on the host with numpy (default_rng(seed)), not with tinygrad's device RNG: the same weights
on every backend and device count, and no per-shape init kernels to compile (or BEAM-search during INIT) -- with
tinygrad's randn the toy model's init alone compiled for ~40 s on 2 CPU cores. The truncated normal redraws rejected
values until none is left (exact truncated normal); upstream keeps the first of 8 candidates, which differs only with
probability 0.0455^8 ~ 2e-11 per weight.

State-dict names follow torchvision: conv1, bn1, layer{1-4}.{i}.conv{1-3}/bn{1-3}, layer{k}.0.downsample.0 (conv) and
.downsample.1 (BN), fc. BN has no num_batches_tracked: nothing reads it, and a Python-side `+= 1` would rebind the tensor
inside the JIT.
"""
from __future__ import annotations
import math
from typing import Mapping, Sequence

import numpy as np

from tinygrad import Tensor, dtypes
from tinygrad.helpers import prod, TRAINING
from tinygrad.nn.state import get_state_dict

# std of a standard normal truncated to [-2, 2]; dividing by it keeps the truncated draw's std at the He value
TRUNC_NORMAL_STD = 0.87962566103423978


def _param(shape: tuple[int, ...], rng: np.random.Generator | None, fill) -> Tensor:
  """fp32 tensor of `shape`: fill(rng, shape) drawn on the host when rng is given, else an unallocated placeholder
  (Tensor.empty: no memory, no kernels), enough to count parameters and trace shapes."""
  if rng is None: return Tensor.empty(*shape, dtype=dtypes.float32)
  return Tensor(np.ascontiguousarray(fill(rng, shape), dtype=np.float32))


def trunc_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  """Standard normal truncated to [-2, 2]: rejected draws are redrawn until none is left (exact truncated normal)."""
  z = rng.standard_normal(shape, dtype=np.float32)
  while (bad := np.abs(z) > 2.0).any(): z[bad] = rng.standard_normal(int(bad.sum()), dtype=np.float32)
  return z


def he_std(fan_in: int) -> float: return math.sqrt(2.0) / math.sqrt(fan_in) / TRUNC_NORMAL_STD


class Conv2d:
  """Bias-free conv. Weight (cout, cin, k, k): float32 He-normal (a=0, fan_in = cin*k*k) truncated at +-2 std.
  Computes in dtypes.default_float, with tinygrad's conv2d or (kernels="triton") benchmarks/kernels' implicit GEMM."""
  def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0,
               rng: np.random.Generator | None = None, kernels: str = "tinygrad"):
    self.stride, self.padding, self.kernels = stride, padding, kernels
    self.weight = _param((cout, cin, kernel, kernel), rng, lambda r, s: trunc_normal(r, s) * he_std(cin * kernel * kernel))

  def __call__(self, x: Tensor) -> Tensor:
    w = self.weight.cast(dtypes.default_float)
    if self.kernels == "triton":
      from tinyperf.benchmarks.kernels.conv import conv2d   # imports Triton: only where the knob asks for it
      return conv2d(x, w, self.stride, self.padding)
    return x.conv2d(w, stride=self.stride, padding=self.padding)


class Linear:
  """Classifier: weight (cout, cin) N(0, 0.01), bias 0; float32 weights and float32 compute."""
  def __init__(self, cin: int, cout: int, rng: np.random.Generator | None = None):
    self.weight = _param((cout, cin), rng, lambda r, s: r.normal(0.0, 0.01, s))
    self.bias = _param((cout,), rng, lambda r, s: np.zeros(s))

  def __call__(self, x: Tensor) -> Tensor:  # (B, cin) -> (B, cout), float32
    return x.float().linear(self.weight.T, self.bias)


class BatchNorm2d:
  """BatchNorm over (B, C, H, W), statistics in float32, output in the input dtype. eps 1e-5, momentum 0.1.

  groups=None: synced -- one set of statistics over the whole (possibly sharded) batch; running stats (C,).
  groups=D:    unsynced -- the batch, sharded on axis 0 over D devices, is viewed as (D, B/D, C, H, W) and every device
               normalises with its own statistics; running stats (D, C), sharded on axis 0, each device keeps its row.
  Running variance uses the unbiased estimate (n/(n-1), n = samples per group * H * W). The running stats are assigned
  lazily in the forward pass: the optimizer realizes them as its buffers (they are not parameters)."""
  def __init__(self, channels: int, groups: int | None = None, eps: float = 1e-5, momentum: float = 0.1,
               rng: np.random.Generator | None = None, kernels: str = "tinygrad"):
    self.groups, self.eps, self.momentum, self.kernels = groups, eps, momentum, kernels
    self.weight = _param((channels,), rng, lambda r, s: np.ones(s))
    self.bias = _param((channels,), rng, lambda r, s: np.zeros(s))
    stats = (channels,) if groups is None else (groups, channels)
    self.running_mean = _param(stats, rng, lambda r, s: np.zeros(s)).is_param_(False)
    self.running_var = _param(stats, rng, lambda r, s: np.ones(s)).is_param_(False)

  def __call__(self, x: Tensor, residual: Tensor | None = None, relu: bool = False) -> Tensor:
    """[relu](bn(x) [+ residual]): the add and ReLU that follow a BN in the network, fused into its kernels under
    KERNELS=triton while training (one device, or one group per device as SYNCBN=0 shards it)."""
    devices = x.device if isinstance(x.device, tuple) else (x.device,)
    if TRAINING and self.kernels == "triton" and (self.groups or 1) == len(devices):
      from tinyperf.benchmarks.kernels.batchnorm import batchnorm   # imports Triton: only where the knob asks for it
      y, mean, var = batchnorm(x, self.weight, self.bias, self.eps, residual, relu)   # mean, var (devices, C)
      n = x.shape[0] // len(devices) * x.shape[2] * x.shape[3]
      self._update_running(mean.reshape(self.running_mean.shape), var.reshape(self.running_var.shape), n)
      return y
    y = self._normalize(x)
    if residual is not None: y = y + residual
    return y.relu() if relu else y

  def _update_running(self, mean: Tensor, var: Tensor, n: int):
    """Assign the running statistics from the batch's mean and biased variance over n values per channel."""
    m = self.momentum
    self.running_mean.assign((1 - m) * self.running_mean + m * mean.detach())
    self.running_var.assign((1 - m) * self.running_var + m * var.detach() * (n / (n - 1)))

  def _normalize(self, x: Tensor) -> Tensor:
    B, C, H, W = x.shape
    if self.groups is None:
      xg, axes, bshape = x.float(), (0, 2, 3), (1, C, 1, 1)                  # (B, C, H, W)
    else:
      G = self.groups
      assert B % G == 0, f"batch {B} not divisible by {G} BatchNorm groups"
      xg, axes, bshape = x.float().reshape(G, B // G, C, H, W), (1, 3, 4), (G, 1, C, 1, 1)
    if TRAINING:
      mean = xg.mean(axis=axes)                                              # (C,) or (G, C)
      var = (xg - mean.detach().reshape(bshape)).square().mean(axis=axes)    # biased; d var / d mean = 0
      self._update_running(mean, var, prod(xg.shape) // prod(mean.shape))
    else:
      mean, var = self.running_mean, self.running_var
    scale = (var + self.eps).rsqrt() * self.weight                         # (C,) or (G, C)
    y = (xg - mean.reshape(bshape)) * scale.reshape(bshape) + self.bias.reshape(C, 1, 1)
    return y.reshape(B, C, H, W).cast(x.dtype)


class Bottleneck:
  expansion = 4

  def __init__(self, cin: int, width: int, stride: int, bn_groups: int | None, rng: np.random.Generator | None = None,
               kernels: str = "tinygrad"):
    cout = width * self.expansion
    self.conv1 = Conv2d(cin, width, 1, rng=rng, kernels=kernels)
    self.bn1 = BatchNorm2d(width, bn_groups, rng=rng, kernels=kernels)
    # v1.5: the stride sits on the 3x3
    self.conv2 = Conv2d(width, width, 3, stride=stride, padding=1, rng=rng, kernels=kernels)
    self.bn2 = BatchNorm2d(width, bn_groups, rng=rng, kernels=kernels)
    self.conv3 = Conv2d(width, cout, 1, rng=rng, kernels=kernels)
    self.bn3 = BatchNorm2d(cout, bn_groups, rng=rng, kernels=kernels)
    self.downsample = [Conv2d(cin, cout, 1, stride=stride, rng=rng, kernels=kernels),
                       BatchNorm2d(cout, bn_groups, rng=rng, kernels=kernels)] if stride != 1 or cin != cout else []

  def __call__(self, x: Tensor) -> Tensor:  # (B, cin, H, W) -> (B, 4*width, H/stride, W/stride)
    out = self.bn1(self.conv1(x), relu=True)
    out = self.bn2(self.conv2(out), relu=True)
    return self.bn3(self.conv3(out), residual=x.sequential(self.downsample), relu=True)


class ResNet:
  """layers: bottleneck blocks per stage (3,4,6,3 = ResNet-50; any number of stages, stage i has width * 2^i);
  width: stem / first-stage width (64); bn_groups: None = synced BN, D = per-device BN over D devices;
  rng: numpy generator for the initial weights, None = unallocated placeholders (shape-only model); kernels: who
  computes the convs, the max-pool and (training) the BNs with their add and ReLU (KERNELS). The FC stays tinygrad's:
  it is float32 and the Triton GEMM takes fp16/bf16."""
  def __init__(self, layers: Sequence[int] = (3, 4, 6, 3), width: int = 64, num_classes: int = 1000,
               bn_groups: int | None = None, rng: np.random.Generator | None = None, kernels: str = "tinygrad"):
    self.kernels = kernels
    self.conv1 = Conv2d(3, width, 7, stride=2, padding=3, rng=rng, kernels=kernels)
    self.bn1 = BatchNorm2d(width, bn_groups, rng=rng, kernels=kernels)
    cin = width
    for i, n in enumerate(layers):
      w, blocks = width * 2**i, []
      for j in range(n):
        blocks.append(Bottleneck(cin, w, 2 if i > 0 and j == 0 else 1, bn_groups, rng=rng, kernels=kernels))
        cin = w * Bottleneck.expansion
      setattr(self, f"layer{i+1}", blocks)
    self.num_stages = len(layers)
    self.fc = Linear(cin, num_classes, rng=rng)

  def stages(self) -> list[list[Bottleneck]]: return [getattr(self, f"layer{i+1}") for i in range(self.num_stages)]

  def features(self, x: Tensor) -> list[Tensor]:
    """Activations after the stem conv, the max-pool and each stage. x: (B, 3, H, W) default float."""
    out = [x := self.bn1(self.conv1(x), relu=True)]                       # (B, w, H/2, W/2)
    if self.kernels == "triton":
      from tinyperf.benchmarks.kernels.maxpool import max_pool   # imports Triton: only where the knob asks for it
      out.append(x := max_pool(x))                                        # (B, w, H/4, W/4)
    else:
      x = x.pad(((0, 0), (0, 0), (1, 1), (1, 1)))                         # zeros are safe: x >= 0 after ReLU
      out.append(x := x.max_pool2d(kernel_size=(3, 3), stride=2))         # (B, w, H/4, W/4)
    for stage in self.stages(): out.append(x := x.sequential(stage))      # (B, 4w*2^i, H/4/2^i, W/4/2^i)
    return out

  def __call__(self, x: Tensor) -> Tensor:  # (B, 3, H, W) default float -> (B, num_classes) float32 logits
    x = self.features(x)[-1]                                              # (B, C, h, w)
    return self.fc(x.mean(axis=(2, 3)).float())                           # (B, C) -> (B, num_classes)


def parse_layers(spec: str | Sequence[int]) -> tuple[int, ...]:
  return tuple(int(v) for v in spec.split(",")) if isinstance(spec, str) else tuple(int(v) for v in spec)


def build_resnet(knobs: Mapping, num_devices: int = 1, seed: int | None = None) -> ResNet:
  """Model from the config knobs (RESNET_LAYERS, RESNET_WIDTH, NUM_CLASSES, SYNCBN, KERNELS), initialised on the host
  from numpy's default_rng(seed) (same weights on every backend), or shape-only placeholders when seed is None."""
  return ResNet(parse_layers(knobs["RESNET_LAYERS"]), int(knobs["RESNET_WIDTH"]), int(knobs["NUM_CLASSES"]),
                bn_groups=None if int(knobs["SYNCBN"]) else num_devices,
                rng=None if seed is None else np.random.default_rng(seed), kernels=knobs.get("KERNELS", "tinygrad"))


def place_model(model, devices: Sequence[str]) -> None:
  """Put every state tensor on `devices`, in key order: unsynced BN running stats (num_devices, C) are sharded on
  axis 0 (each device owns its row), everything else is replicated (as upstream)."""
  devices = tuple(devices)
  for t in get_state_dict(model).values():
    if len(devices) == 1: t.to_(devices[0])
    elif not t.is_param and t.ndim == 2: t.shard_(devices, axis=0)
    else: t.to_(devices)
    t.realize()


def make_model(knobs: Mapping, devices: Sequence[str], seed: int) -> ResNet:
  """Build, initialise with `seed` and place the model on `devices` (GPUS names, see tinyperf.benchmarks.common.runtime.devices)."""
  model = build_resnet(knobs, num_devices=len(devices), seed=seed)
  place_model(model, devices)
  return model


def count_parameters(model) -> int:
  """Trainable parameters (conv/BN/FC weights and biases; running stats excluded), counted from shapes only."""
  return sum(prod(t.shape) for t in get_state_dict(model).values() if t.is_param)
