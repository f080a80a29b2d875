"""LARS/SGD grouping, one optimizer step against a numpy implementation of the MLPerf LARS formula, MLLOG hparams."""
import numpy as np
import pytest
from tinygrad import Tensor, Context
from tinygrad.nn.state import get_state_dict

from tinyperf.benchmarks.resnet.model import ResNet, Conv2d, BatchNorm2d, make_model
from tinyperf.benchmarks.resnet.optim import split_parameters, build_optimizer, make_optimizer, lars_hparams, TRUST_COEFFICIENT
from tests.unit.test_resnet_model import modules

KNOBS = dict(RESNET_LAYERS="1,1,1,1", RESNET_WIDTH=4, NUM_CLASSES=3, SYNCBN=0, LR=2.0, MOMENTUM=0.9, DECAY=2e-4,
             WARMUP_EPOCHS=2, EPOCHS=37, END_LR=1e-4, LABEL_SMOOTHING=0.1, LOSS_SCALER=1.0)


def test_resnet50_grouping():
  model = ResNet()
  lars, sgd = split_parameters(model)
  conv_keys = {f"{p}.weight" for p, _ in modules(model, Conv2d)}
  bn_keys = {f"{p}.{n}" for p, _ in modules(model, BatchNorm2d) for n in ("weight", "bias", "running_mean", "running_var")}
  assert set(lars) == conv_keys | {"fc.weight"}
  assert set(sgd) == bn_keys | {"fc.bias"}
  assert set(lars) | set(sgd) == set(get_state_dict(model))
  # ResNet-50: 53 convs + fc.weight under LARS; 53 BNs x (weight, bias) + fc.bias params and 53 x 2 running stats under SGD
  assert len(lars) == 54
  assert sum(t.is_param for t in sgd.values()) == 107 and sum(not t.is_param for t in sgd.values()) == 106
  assert all(t.is_param for t in lars.values())
  assert "layer1.0.downsample.1.weight" in sgd and "layer1.0.downsample.0.weight" in lars


@pytest.fixture(scope="module")
def tiny_optimizer():
  model = make_model(KNOBS, ("CPU",), seed=0)
  return model, *make_optimizer(model, KNOBS, steps_per_epoch=10)


def test_make_optimizer_groups_and_hyperparameters(tiny_optimizer):
  model, opt, sched = tiny_optimizer
  lars, sgd = opt[0], opt[1]
  lars_keys, sgd_keys = split_parameters(model)
  assert [id(t) for t in lars.params] == [id(t) for t in lars_keys.values()]
  assert [id(t) for t in sgd.params] == [id(t) for k, t in sgd_keys.items() if t.is_param]
  assert [id(t) for t in sgd.buffers] == [id(t) for k, t in sgd_keys.items() if "running" in k]
  assert lars.buffers == []
  assert (lars.momentum, lars.wd, lars.tcoef, lars.classic, lars.nesterov, lars.fused) == (0.9, 2e-4, 0.001, True, False, False)
  assert (sgd.momentum, sgd.wd, sgd.tcoef, sgd.classic, sgd.nesterov, sgd.fused) == (0.9, 0.0, 0.0, True, False, False)
  assert (sched.peak, sched.end, sched.warmup, sched.total, sched.power) == (2.0, 1e-4, 20, 370, 2.0)
  assert lars.lr.numpy()[0] == 0.0 and sgd.lr.numpy()[0] == 0.0


def lars_reference(w, g, b, lr, momentum, wd, tcoef):
  """MLPerf LARS for one tensor (numpy, float64): trust ratio from the raw gradient, weight decay added, LR applied
  before the momentum buffer, ratio 1 if either norm is 0, no epsilon. tcoef None = plain momentum SGD (ratio 1).
  Returns (w, b)."""
  wn, gn = np.linalg.norm(w), np.linalg.norm(g)
  r = tcoef * wn / (gn + wd * wn) if tcoef is not None and wn > 0 and gn > 0 else 1.0
  b = momentum * b + (g + wd * w) * r * lr
  return w - b, b


def test_lars_and_sgd_steps_match_numpy_reference():
  rng = np.random.default_rng(3)
  shapes_lars = [(4, 3, 3, 3), (3, 3), (6, 5)]   # normal, all-zero weights (|w| = 0), zero gradient (|g| = 0)
  shapes_sgd = [(5,), (5,)]
  w0 = [rng.standard_normal(s).astype(np.float32) for s in shapes_lars + shapes_sgd]
  w0[1][:] = 0
  lars_t = [Tensor(w).contiguous().realize() for w in w0[:3]]
  sgd_t = [Tensor(w).contiguous().realize() for w in w0[3:]]
  stat = Tensor.zeros(5).contiguous().is_param_(False).realize()
  opt = build_optimizer(lars_t, sgd_t + [stat], lr=0.0, momentum=0.9, weight_decay=5e-4)
  assert opt[1].buffers == [stat]
  ref_w = [w.astype(np.float64) for w in w0]
  ref_b = [np.zeros_like(w) for w in ref_w]
  for step, lr in enumerate([0.5, 3.0, 1.25]):
    for o in opt.optimizers: o.lr.assign(Tensor([lr], dtype=o.lr.dtype)).realize()
    grads = [rng.standard_normal(s).astype(np.float32) * 10 for s in shapes_lars + shapes_sgd]
    grads[2][:] = 0
    for t, g in zip(lars_t + sgd_t, grads): t.grad = Tensor(g)
    with Context(TRAINING=1): opt.step()
    for i, g in enumerate(grads):
      wd, tcoef = (5e-4, TRUST_COEFFICIENT) if i < 3 else (0.0, None)
      ref_w[i], ref_b[i] = lars_reference(ref_w[i], g.astype(np.float64), ref_b[i], lr, 0.9, wd, tcoef)
    for i, t in enumerate(lars_t + sgd_t):
      np.testing.assert_allclose(t.numpy(), ref_w[i], rtol=2e-5, atol=1e-6, err_msg=f"tensor {i} step {step}")
    for i, b in enumerate(opt[0].b + opt[1].b):
      np.testing.assert_allclose(b.numpy(), ref_b[i], rtol=2e-5, atol=1e-7, err_msg=f"momentum {i} step {step}")
  # the trust ratio really scaled the normal LARS tensor: its update is far smaller than plain SGD's would be
  assert np.abs(ref_w[0] - w0[0]).max() < 0.05 * np.abs(grads[0]).max()


def test_lars_hparams():
  hp = lars_hparams(KNOBS)
  from mlperf_logging.mllog import constants as c
  assert set(hp) == {c.LARS_OPT_BASE_LEARNING_RATE, c.LARS_OPT_END_LR, c.LARS_OPT_LR_DECAY_POLY_POWER,
                     c.LARS_OPT_LR_DECAY_STEPS, c.LARS_EPSILON, c.LARS_OPT_LEARNING_RATE_WARMUP_EPOCHS,
                     c.LARS_OPT_MOMENTUM, c.LARS_OPT_WEIGHT_DECAY}
  assert hp == {"lars_opt_base_learning_rate": 2.0, "lars_opt_end_learning_rate": 1e-4,
                "lars_opt_learning_rate_decay_poly_power": 2, "lars_opt_learning_rate_decay_steps": 37,
                "lars_epsilon": 0.0, "lars_opt_learning_rate_warmup_epochs": 2, "lars_opt_momentum": 0.9,
                "lars_opt_weight_decay": 2e-4}
