"""Jitted train/eval steps end to end on CPU: bit-identical resume and 1- vs 2-device equivalence.

Marked integration: each step configuration compiles a few hundred kernels (~1-2 min on 2 shared cores). The models
are as small as the code allows (one stage, width 4, 16x16 images) so that only compile time remains."""
import numpy as np
import pytest
from tinygrad import Tensor, Context

from tinyperf.benchmarks.common.checkpoint import training_state, save_state, load_state, snapshot_state, restore_state
from tinyperf.benchmarks.resnet.model import make_model
from tinyperf.benchmarks.resnet.optim import make_optimizer
from tinyperf.benchmarks.resnet.steps import make_steps, to_device, normalize, MEAN_RGB
from tests.conftest import captured_kernels

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fast_compile")]   # compile-bound

KNOBS = dict(RESNET_LAYERS="1", RESNET_WIDTH=4, NUM_CLASSES=3, SYNCBN=0, LR=0.5, MOMENTUM=0.9, DECAY=2e-4,
             WARMUP_EPOCHS=1, EPOCHS=4, END_LR=1e-4, LABEL_SMOOTHING=0.1, LOSS_SCALER=1.0)
ONE, TWO = ("CPU",), ("CPU:0", "CPU:1")


def batches(n, bs=8, size=16, seed=0):
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    y = rng.integers(0, 3, bs).astype(np.int32)
    x = (rng.integers(0, 60, (bs, size, size, 3)) + 60 * y[:, None, None, None]).astype(np.uint8)  # learnable
    if i == 0: y[:3] = -1                       # the loader pads the first batch of an epoch
    out.append((x, y))
  return out


def build(devices, seed=0, **over):
  knobs = {**KNOBS, **over}
  model = make_model(knobs, devices, seed=seed)
  opt, sched = make_optimizer(model, knobs, steps_per_epoch=4)
  return model, opt, sched, *make_steps(model, opt, sched, knobs, devices)


def state_np(model, opt, sched):
  return {k: t.numpy().copy() for k, t in training_state(model, opt, sched)[0].items()}


def test_resume_is_bit_identical(tmp_path):
  data = batches(8)
  model, opt, sched, train_step, _ = build(ONE)
  losses = []
  for x, y in data:
    loss, _ = train_step(*to_device(x, y, ONE))
    losses.append(loss.item())
  straight = state_np(model, opt, sched)
  assert np.isfinite(losses).all()
  assert not np.array_equal(straight["model.layer1.0.conv2.weight"], build(ONE)[0].layer1[0].conv2.weight.numpy())

  model, opt, sched, train_step, _ = build(ONE)
  for x, y in data[:4]: train_step(*to_device(x, y, ONE))
  save_state(tmp_path / "half.safetensors", model, opt, sched)
  del model, opt, sched, train_step
  model, opt, sched, train_step, _ = build(ONE, seed=123)    # fresh objects, different init, fresh JIT
  load_state(tmp_path / "half.safetensors", model, opt, sched)
  assert sched.steps_done() == 4
  resumed_losses = []
  for x, y in data[4:]:                                      # capture, then three replays of the new JIT
    loss, _ = train_step(*to_device(x, y, ONE))
    resumed_losses.append(loss.item())
  resumed = state_np(model, opt, sched)
  assert resumed_losses == losses[4:]
  assert resumed.keys() == straight.keys()
  for k in straight: np.testing.assert_array_equal(resumed[k], straight[k], err_msg=k)


@pytest.mark.parametrize("devs", [ONE, TWO], ids=["one_device", "two_devices"])   # the snapshot differs per case
def test_warm_up_then_restore_trains_like_a_fresh_start(devs):
  """INIT and RUN in one process: fake-data steps capture the JIT, restore_state puts the initial state back, and the
  run then replays from its first step exactly as a fresh process would train (losses and state bit-identical)."""
  data = batches(4)
  model, opt, sched, train_step, _ = build(devs)
  fresh = [train_step(*to_device(x, y, devs))[0].item() for x, y in data]
  fresh_state = state_np(model, opt, sched)

  model, opt, sched, train_step, _ = build(devs)
  snap = snapshot_state(model, opt, sched)
  fake = np.zeros_like(data[0][0]), np.zeros_like(data[0][1])
  for _ in range(3): train_step(*to_device(*fake, devs))       # capture, replays: weights and counters move
  assert sched.steps_done() == 3 and not np.array_equal(model.fc.weight.numpy(), fresh_state["model.fc.weight"])
  restore_state(snap, model, opt, sched)
  assert sched.steps_done() == 0
  warmed = [train_step(*to_device(x, y, devs))[0].item() for x, y in data]   # all replays of the captured JIT
  assert warmed == fresh
  state = state_np(model, opt, sched)
  for k in fresh_state: np.testing.assert_array_equal(state[k], fresh_state[k], err_msg=k)


@pytest.mark.parametrize("devs", [ONE, TWO], ids=["one_device", "two_devices"])
def test_the_steps_capture_their_first_call_as_tinygrads_order_would_run(devs):
  """runtime.captured_jit: each step captures its first call (tinygrad runs it uncaptured, which keeps every custom
  kernel's output allocated to the end of the step), with the optimizer's lazy momenta realized first: the same
  captured kernels and bit-identical results as tinygrad's uncaptured, capture, replay order."""
  data = batches(4)
  runs = []
  for tinygrads_order in (False, True):
    model, opt, sched, train_step, eval_step = build(devs)
    if tinygrads_order: train_step.cnt = eval_step.cnt = 0   # _TinyJit's own start: call 0 runs uncaptured
    out = []
    for i, (x, y) in enumerate(data):
      out.append([t.numpy() for t in train_step(*to_device(x, y, devs))])
      if i == 0: assert (train_step.captured is not None) != tinygrads_order   # captured by the first call, or not
    out += [[t.numpy() for t in eval_step(*to_device(x, y, devs))] for x, y in data[:3]]
    runs.append((out, captured_kernels(train_step), captured_kernels(eval_step), state_np(model, opt, sched)))
  (first, *first_kernels, first_state), (tinygrad, *tinygrad_kernels, tinygrad_state) = runs
  assert first_kernels == tinygrad_kernels
  for a, b in zip(first, tinygrad):
    for x, y in zip(a, b): np.testing.assert_array_equal(x, y)
  for k in tinygrad_state: np.testing.assert_array_equal(first_state[k], tinygrad_state[k], err_msg=k)


def test_two_devices_synced_bn_equal_one_device():
  data = batches(3)
  runs = {}
  for devs in (ONE, TWO):
    model, opt, sched, train_step, eval_step = build(devs, SYNCBN=1)
    out = []
    for x, y in data:
      loss, correct = train_step(*to_device(x, y, devs))
      out.append((loss.item(), correct.item()))
    ev = [t.item() for t in eval_step(*to_device(*data[0], devs))]
    runs[devs] = out, ev, state_np(model, opt, sched)
  (out1, ev1, s1), (out2, ev2, s2) = runs[ONE], runs[TWO]
  np.testing.assert_allclose([l for l, _ in out2], [l for l, _ in out1], rtol=1e-5)
  assert [c for _, c in out2] == [c for _, c in out1]
  assert ev1[2] == ev2[2] == 5.0                               # n_real: 3 of the 8 samples are padding
  np.testing.assert_allclose(ev2[:2], ev1[:2], rtol=1e-4)
  for k in s1:
    np.testing.assert_allclose(s2[k], s1[k], rtol=2e-4, atol=2e-6, err_msg=k)
  assert not np.allclose(s1["model.conv1.weight"], build(ONE, SYNCBN=1)[0].conv1.weight.numpy())   # weights moved


def test_two_devices_unsynced_bn_is_per_device():
  # per-device BN makes the forward of each shard independent: the 2-device output and running stats must equal a
  # 1-device model (same weights) run on each half of the batch separately
  x, y = batches(1, bs=8)[0]
  mean = Tensor(MEAN_RGB)
  two = make_model(KNOBS, TWO, seed=0)
  with Context(TRAINING=1):
    X, _ = to_device(x, y, TWO)
    logits2 = two(normalize(X, mean.to(TWO))).numpy()
  rm2 = two.bn1.running_mean.numpy()
  assert two.bn1.running_mean.shape == (2, 4) and two.bn1.running_mean.uop.axis == 0
  halves, rms = [], []
  for h in range(2):
    one = make_model(KNOBS, ONE, seed=0)                          # groups=1 model, same seed -> same weights
    with Context(TRAINING=1):
      halves.append(one(normalize(Tensor(x[4 * h:4 * h + 4]), mean)).numpy())
    rms.append(one.bn1.running_mean.numpy()[0])
  np.testing.assert_allclose(logits2, np.concatenate(halves), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(rm2, np.stack(rms), rtol=1e-5, atol=1e-6)
  assert not np.allclose(rm2[0], rm2[1])


def test_step_zero_has_lr_zero_and_loss_uses_pre_update_weights():
  x, y = batches(1)[0]
  model, opt, sched, train_step, _ = build(ONE)
  w0 = model.fc.weight.numpy().copy()
  X, Y = to_device(x, y, ONE)
  losses = []
  for _ in range(4):                                   # eager, capture, replay, replay on the same batch
    loss, correct = train_step(X, Y)
    losses.append(loss.item())
    assert 0 <= correct.item() <= 5                    # only the 5 real samples can be correct
  np.testing.assert_array_equal(model.fc.weight.numpy() == w0, False)   # every fc weight moved after step 1
  # step 0 trains at LR 0, so step 1 sees the same weights; the loss a step returns is computed before its own update
  assert losses[0] == losses[1]
  assert losses[2] != losses[1] and losses[3] != losses[2]
  assert sched.steps_done() == 4 and opt[0].lr.numpy()[0] == pytest.approx(sched.lr_at(4))


def test_static_loss_scale_is_undone():
  # in fp32 a loss scale of 256 only multiplies and divides by a power of two: the updates must be the same
  data = batches(3)
  states = []
  for scale in (1.0, 256.0):
    model, opt, sched, train_step, _ = build(ONE, LOSS_SCALER=scale)
    for x, y in data: train_step(*to_device(x, y, ONE))
    states.append(state_np(model, opt, sched))
  for k in states[0]: np.testing.assert_allclose(states[1][k], states[0][k], rtol=1e-5, atol=1e-7, err_msg=k)
