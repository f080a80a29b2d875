"""ResNet-50 v1.5 structure, parameter count, initialisation and dtypes (shape-only models: nothing is computed)."""
import math

import numpy as np
import pytest
from tinygrad import Tensor, dtypes, Context
from tinygrad.nn.state import get_state_dict

from tinyperf.benchmarks.resnet.model import (ResNet, Conv2d, Linear, BatchNorm2d, TRUNC_NORMAL_STD, build_resnet,
                                     count_parameters, parse_layers, trunc_normal)

R50_PARAMS = 25_557_032  # torchvision resnet50: weights + biases of conv/BN/FC, no running stats


def modules(model, kind):
  """(prefix, module) of every instance of `kind` inside model, in state-dict order."""
  out = []
  def walk(obj, prefix):
    if isinstance(obj, kind): out.append((prefix.rstrip("."), obj))
    if isinstance(obj, list):
      for i, x in enumerate(obj): walk(x, f"{prefix}{i}.")
    elif hasattr(obj, "__dict__") and not isinstance(obj, Tensor):
      for k, v in vars(obj).items(): walk(v, f"{prefix}{k}.")
  walk(model, "")
  return out


def test_resnet50_parameter_count_from_shapes():
  model = ResNet()  # placeholders only: no memory, no kernels
  assert count_parameters(model) == R50_PARAMS
  # and by hand from the module shapes: conv weights + BN (weight, bias) + FC (weight, bias)
  convs, bns = modules(model, Conv2d), modules(model, BatchNorm2d)
  by_hand = sum(math.prod(c.weight.shape) for _, c in convs) + sum(2 * b.weight.shape[0] for _, b in bns) + 2048 * 1000 + 1000
  assert by_hand == R50_PARAMS
  assert (len(convs), len(bns)) == (53, 53)


def test_state_dict_names_like_torchvision():
  sd = get_state_dict(ResNet())
  # torchvision's resnet50 state dict has 320 keys, 53 of them num_batches_tracked (which we do not keep)
  assert len(sd) == 320 - 53
  for k in ("conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
            "layer1.0.conv1.weight", "layer1.0.bn3.bias", "layer1.0.downsample.0.weight", "layer1.0.downsample.1.weight",
            "layer2.3.conv3.weight", "layer3.5.bn2.running_var", "layer4.2.conv3.weight", "layer4.0.downsample.1.bias",
            "fc.weight", "fc.bias"):
    assert k in sd, k
  assert [k for k in sd if "downsample" in k and k.endswith("0.weight")] == \
    [f"layer{i}.0.downsample.0.weight" for i in range(1, 5)]
  assert not any(k.startswith("layer1.1.downsample") or k.startswith("layer5") for k in sd)
  assert sd["fc.weight"].shape == (1000, 2048) and sd["conv1.weight"].shape == (64, 3, 7, 7)
  assert not any("conv" in k and k.endswith("bias") for k in sd), "convs must be bias-free"


def test_resnet50_spatial_sizes_and_strides():
  model = ResNet()
  feats = model.features(Tensor.empty(2, 3, 224, 224))
  assert [f.shape for f in feats] == [(2, 64, 112, 112), (2, 64, 56, 56), (2, 256, 56, 56), (2, 512, 28, 28),
                                      (2, 1024, 14, 14), (2, 2048, 7, 7)]
  assert model(Tensor.empty(2, 3, 224, 224)).shape == (2, 1000)
  assert (model.conv1.stride, model.conv1.padding, model.conv1.weight.shape[-1]) == (2, 3, 7)
  for i, stage in enumerate(model.stages()):
    assert len(stage) == (3, 4, 6, 3)[i]
    first = stage[0]
    s = 1 if i == 0 else 2
    # v1.5: the stride is on the 3x3 conv, the 1x1 convs keep stride 1
    assert (first.conv1.stride, first.conv2.stride, first.conv3.stride) == (1, s, 1)
    assert first.conv2.weight.shape[-2:] == (3, 3) and first.conv2.padding == 1
    assert first.downsample[0].stride == s and first.downsample[0].weight.shape[-2:] == (1, 1)
    assert all(b.downsample == [] for b in stage[1:])


def test_toy_model_same_code():
  model = ResNet(parse_layers("1,1,1,1"), width=8, num_classes=4)
  feats = model.features(Tensor.empty(3, 3, 32, 32))
  assert [f.shape for f in feats] == [(3, 8, 16, 16), (3, 8, 8, 8), (3, 32, 8, 8), (3, 64, 4, 4), (3, 128, 2, 2),
                                      (3, 256, 1, 1)]
  assert model(Tensor.empty(3, 3, 32, 32)).shape == (3, 4)
  assert parse_layers("3, 4,6,3") == (3, 4, 6, 3)


def test_maxpool_uses_explicit_zero_pad_not_pool_padding():
  # a 3x3/2 pool over a zero-padded 4x4 map: output 2x2, and the corner window sees only real values and zeros
  x = Tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) + 1)
  y = x.pad(((0, 0), (0, 0), (1, 1), (1, 1))).max_pool2d(kernel_size=(3, 3), stride=2).numpy()
  assert y.shape == (1, 1, 2, 2)
  np.testing.assert_array_equal(y[0, 0], [[6, 8], [14, 16]])


def test_unsynced_bn_stats_have_device_axis():
  sd = get_state_dict(build_resnet(dict(RESNET_LAYERS="1,1,1,1", RESNET_WIDTH=8, NUM_CLASSES=4, SYNCBN=0), 6))
  assert sd["bn1.running_mean"].shape == (6, 8) and sd["layer4.0.bn3.running_var"].shape == (6, 256)
  assert sd["bn1.weight"].shape == (8,)
  sd = get_state_dict(build_resnet(dict(RESNET_LAYERS="1,1,1,1", RESNET_WIDTH=8, NUM_CLASSES=4, SYNCBN=1), 6))
  assert sd["bn1.running_mean"].shape == (8,)
  assert not sd["bn1.running_mean"].is_param and not sd["bn1.running_var"].is_param and sd["bn1.weight"].is_param


def test_conv_init_truncated_he_normal():
  rng = np.random.default_rng(0)
  conv = Conv2d(256, 128, 3, rng=rng)
  w = conv.weight.numpy()
  assert conv.weight.dtype == dtypes.float32 and w.shape == (128, 256, 3, 3)
  fan_in = 256 * 9
  formula = math.sqrt(2) / math.sqrt(fan_in) / TRUNC_NORMAL_STD   # the pre-truncation std
  assert abs(w.mean()) < 0.01 * formula
  # truncating N(0, formula) at +-2 sigma shrinks the std by TRUNC_NORMAL_STD: back to He's sqrt(2/fan_in)
  assert w.std() == pytest.approx(math.sqrt(2 / fan_in), rel=0.01)
  assert np.abs(w).max() <= 2 * formula * (1 + 1e-6)
  assert np.abs(w).max() > 1.95 * formula   # truncated at 2 sigma, not earlier
  # the truncated normal's shape: P(|z| <= 1 | |z| <= 2) = 0.6827/0.9545
  assert np.mean(np.abs(w) <= formula) == pytest.approx(0.6827 / 0.9545, abs=0.005)


def test_trunc_normal_redraws_until_inside():
  z = trunc_normal(np.random.default_rng(1), (200_000,))
  assert np.abs(z).max() <= 2.0 and z.std() == pytest.approx(TRUNC_NORMAL_STD, rel=0.01)


def test_fc_and_bn_init():
  rng = np.random.default_rng(0)
  fc = Linear(2048, 100, rng=rng)
  w = fc.weight.numpy()
  assert w.shape == (100, 2048) and w.std() == pytest.approx(0.01, rel=0.01) and abs(w.mean()) < 1e-4
  assert np.abs(w).max() > 0.04  # not truncated
  np.testing.assert_array_equal(fc.bias.numpy(), 0)
  bn = BatchNorm2d(16, groups=3, rng=rng)
  np.testing.assert_array_equal(bn.weight.numpy(), 1)
  np.testing.assert_array_equal(bn.bias.numpy(), 0)
  np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros((3, 16)))
  np.testing.assert_array_equal(bn.running_var.numpy(), np.ones((3, 16)))
  assert all(t.dtype == dtypes.float32 for t in (fc.weight, fc.bias, bn.weight, bn.bias, bn.running_mean))


def test_seeded_init_is_reproducible():
  knobs = dict(RESNET_LAYERS="1,1,1,1", RESNET_WIDTH=4, NUM_CLASSES=3, SYNCBN=0)
  a, b, c = (get_state_dict(build_resnet(knobs, 1, seed=s)) for s in (7, 7, 8))
  assert list(a) == list(b)
  for k in a: np.testing.assert_array_equal(a[k].numpy(), b[k].numpy())
  assert not np.array_equal(a["layer2.0.conv2.weight"].numpy(), c["layer2.0.conv2.weight"].numpy())


def test_half_compute_fp32_master_weights_fp32_head():
  model = ResNet((1, 1, 1, 1), width=8, num_classes=4)
  with Context(DEFAULT_FLOAT="HALF"):
    assert dtypes.default_float == dtypes.float16
    x = Tensor.empty(2, 3, 32, 32, dtype=dtypes.float16)
    feats = model.features(x)
    assert all(f.dtype == dtypes.float16 for f in feats), [f.dtype for f in feats]
    assert model(x).dtype == dtypes.float32   # pooled features cast to float32, FC in float32
  assert all(t.dtype == dtypes.float32 for t in get_state_dict(model).values())
