"""Jitted BERT steps on CPU: a run resumed from a saved training state (model, both LAMB groups, LR schedule, dropout
RNG) continues bit-identically, dropout on; step 0 trains with LR 0. Tiny model (2 layers, hidden 32, vocab 211): what
remains is compile time (~1-2 min on 2 shared cores)."""
import numpy as np
import pytest

from tinyperf.benchmarks.bert.model import build_bert, place_model
from tinyperf.benchmarks.bert.optim import make_optimizer
from tinyperf.benchmarks.bert.steps import DropoutRNG, StepState, make_steps, to_device
from tinyperf.benchmarks.common.checkpoint import load_state, save_state, training_state

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fast_compile")]   # compile-bound

KNOBS = dict(BERT_LAYERS=2, BERT_HIDDEN=32, BERT_HEADS=2, BERT_INTERMEDIATE=64, MAX_SEQ_LEN=16, LR=0.01, BETA1=0.9,
             BETA2=0.999, EPSILON=1e-6, DECAY=0.01, WARMUP_STEPS=2, TRAIN_STEPS=20, POLY_POWER=1.0, LOSS_SCALER=1.0,
             CLIP_NORM=1.0)
DEVS, V = ["CPU"], 211


def batches(n, B=4, L=16, P=3, seed=0):
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    mask = np.ones((B, L), np.int32); mask[:, L - 4:] = 0
    out.append(dict(input_ids=(rng.integers(1, V, (B, L)) * mask).astype(np.int32), input_mask=mask,
                    segment_ids=(np.arange(L)[None] >= 6).repeat(B, 0).astype(np.int32) * mask,
                    masked_lm_positions=rng.integers(1, L - 4, (B, P)).astype(np.int32),
                    masked_lm_ids=rng.integers(0, V, (B, P)).astype(np.int32),
                    masked_lm_weights=np.array([[1, 1, 0]] * B, np.float32),
                    next_sentence_labels=rng.integers(0, 2, (B, 1)).astype(np.int32)))
  return out


def build(seed=0):
  model = build_bert(KNOBS, seed=seed, vocab=V)
  place_model(model, DEVS)
  rng = DropoutRNG(seed, DEVS)
  opt, sched = make_optimizer(model, KNOBS)
  train_step, _ = make_steps(model, opt, sched, KNOBS)
  return model, opt, StepState(sched, rng), train_step


def state_np(model, opt, state):
  return {k: t.numpy().copy() for k, t in training_state(model, opt, state)[0].items()}


def test_resume_is_bit_identical_with_dropout(tmp_path):
  data = batches(6)
  model, opt, state, step = build()
  w0 = model.bert.pooler.dense.weight.numpy().copy()
  losses = [step(**to_device(b, DEVS))[0].item() for b in data]
  straight = state_np(model, opt, state)
  assert np.isfinite(losses).all() and not np.array_equal(straight["model.bert.pooler.dense.weight"], w0)
  assert any(k.startswith("scheduler.rng.counters") for k in straight)

  model, opt, state, step = build()
  first = [step(**to_device(b, DEVS))[0].item() for b in data[:3]]
  assert first == losses[:3]                                     # same seed, same dropout masks
  save_state(tmp_path / "half.safetensors", model, opt, state)
  del model, opt, state, step
  model, opt, state, step = build(seed=99)                       # fresh objects, other init and RNG, fresh JIT
  load_state(tmp_path / "half.safetensors", model, opt, state)
  assert state.lr.steps_done() == 3
  resumed = [step(**to_device(b, DEVS))[0].item() for b in data[3:]]   # eager, capture, replay
  assert resumed == losses[3:]
  after = state_np(model, opt, state)
  for k in straight: np.testing.assert_array_equal(after[k], straight[k], err_msg=k)


def test_step_zero_has_lr_zero():
  b = batches(1)[0]
  model, opt, state, step = build()
  w0 = model.cls.predictions.transform.dense.weight.numpy().copy()
  step(**to_device(b, DEVS))
  np.testing.assert_array_equal(model.cls.predictions.transform.dense.weight.numpy(), w0)   # LR 0 at step 0
  step(**to_device(b, DEVS))
  assert not np.array_equal(model.cls.predictions.transform.dense.weight.numpy(), w0)


def no_dropout(model):
  model.bert.embeddings.dropout = 0.0
  for layer in model.bert.encoder.layer:
    layer.attention.self.dropout = layer.attention.output.dropout = layer.output.dropout = 0.0


def test_two_devices_equal_one_device():
  from tinyperf.benchmarks.bert.steps import read_eval
  # one encoder layer (the resume test keeps two): how the batch is sharded does not depend on the depth, and the four
  # steps compiled here compile faster (this test alone: 88 -> 71 CPU-s)
  knobs = {**KNOBS, "BERT_LAYERS": 1}
  data = batches(3)
  runs = {}
  for devs in (["CPU"], ["CPU:0", "CPU:1"]):
    model = build_bert(knobs, seed=0, vocab=V)
    no_dropout(model)                      # dropout masks are drawn per device: compare the deterministic part
    place_model(model, devs)
    DropoutRNG(0, devs)
    opt, sched = make_optimizer(model, knobs)
    train_step, eval_step = make_steps(model, opt, sched, knobs)
    out = []
    for b in data:
      loss, norm = train_step(**to_device(b, devs))
      out.append((loss.item() if len(devs) == 1 else loss.to(devs[0]).item(), norm.to(devs[0]).item()))
    ev = read_eval(eval_step(**to_device(data[0], devs)))
    runs[len(devs)] = out, ev, model.bert.pooler.dense.weight.to(devs[0]).numpy()
  (o1, e1, w1), (o2, e2, w2) = runs[1], runs[2]
  np.testing.assert_allclose(o2, o1, rtol=1e-5)
  assert e1["mlm_count"] == e2["mlm_count"] == 8 and e1["nsp_count"] == e2["nsp_count"] == 4
  for k in e1: assert e2[k] == pytest.approx(e1[k], rel=1e-4, abs=1e-5), k
  np.testing.assert_allclose(w2, w1, rtol=1e-4, atol=1e-6)
