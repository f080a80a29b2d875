"""BERT optimizer: tinygrad's LAMB against a numpy LAMB (both groups), the weight-decay grouping, clipping after
unscaling, the schedule at warm-up end / mid / last for power 1, the MLLOG hyperparameters, the eval interval, and the
eval aggregation (ratio of totals over exactly EVAL_SAMPLES samples)."""
from __future__ import annotations
import math

import numpy as np
import pytest
from tinygrad import Tensor, Context

from tinyperf.benchmarks.bert.optim import (build_optimizer, clip_and_unscale, is_decay_key, lamb_hparams, make_optimizer,
                                   split_parameters)
from tinyperf.benchmarks.common.schedule import poly_warmup_lr

KNOBS = dict(BS=96, LR=1e-3, BETA1=0.9, BETA2=0.999, EPSILON=1e-6, DECAY=0.01, POLY_POWER=1.0, WARMUP_STEPS=1,
             TRAIN_STEPS=100, LOSS_SCALER=2048.0, CLIP_NORM=1.0, EVAL_STEP_FREQ=0)



@pytest.fixture(autouse=True, scope="module")
def _stop_compile_pool():
  """tinygrad keeps a pool of compile worker processes alive after compiling; later tests assert no live children."""
  yield
  from tinygrad.engine.worker import terminate_worker_pool
  terminate_worker_pool()

def np_lamb(w, grads, lr, b1, b2, eps, wd, adapt):
  """numpy LAMB for one tensor over len(grads) steps (bias-corrected moments, trust ratio |w|/|u| when both > 0)."""
  w, m, v = w.astype(np.float64), np.zeros_like(w, np.float64), np.zeros_like(w, np.float64)
  for t, g in enumerate(grads, 1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    u = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * w
    r1, r2 = np.linalg.norm(w), np.linalg.norm(u)
    r = r1 / r2 if adapt and r1 > 0 and r2 > 0 else 1.0
    w = w - lr * r * u
  return w


@pytest.mark.parametrize("adapt_no_decay", [False, True])
def test_lamb_matches_numpy(adapt_no_decay):
  rng = np.random.default_rng(0)
  w_decay = [rng.standard_normal((4, 3)).astype(np.float32), np.zeros((5,), np.float32)]   # zero norm: ratio 1
  w_plain = [rng.standard_normal((3,)).astype(np.float32)]
  grads = [[rng.standard_normal(w.shape).astype(np.float32) for _ in range(3)] for w in w_decay + w_plain]
  params = [Tensor(w.copy()) for w in w_decay + w_plain]
  opt = build_optimizer(params[:2], params[2:], lr=0.1, b1=0.9, b2=0.99, eps=1e-6, weight_decay=0.1,
                        adapt_no_decay=adapt_no_decay)
  with Context(TRAINING=1):
    for s in range(3):
      for p, g in zip(params, grads): p.grad = Tensor(g[s])
      opt.step()
  ref = [np_lamb(w_decay[0], grads[0], 0.1, 0.9, 0.99, 1e-6, 0.1, True),
         np_lamb(w_decay[1], grads[1], 0.1, 0.9, 0.99, 1e-6, 0.1, True),
         np_lamb(w_plain[0], grads[2], 0.1, 0.9, 0.99, 1e-6, 0.0, adapt_no_decay)]
  for p, r in zip(params, ref): np.testing.assert_allclose(p.numpy(), r, rtol=1e-5, atol=1e-6)


def test_weight_decay_excludes_layernorm_and_biases():
  from tinyperf.benchmarks.bert.model import BertConfig, BertForPretraining
  model = BertForPretraining(BertConfig(layers=2, hidden=16, heads=2, intermediate=32, vocab=50))
  decay, plain = split_parameters(model)
  assert all(k.endswith(".weight") and "LayerNorm" not in k for k in decay)
  assert all(k.endswith(".bias") or ".LayerNorm." in k for k in plain)
  assert "bert.embeddings.word_embeddings.weight" in decay and "cls.seq_relationship.weight" in decay
  assert {"cls.predictions.bias", "bert.embeddings.LayerNorm.weight", "bert.encoder.layer.1.output.dense.bias"} <= set(plain)
  assert len(decay) == 3 + 2 * 6 + 2 + 1 and not is_decay_key("x.LayerNorm.weight")


def test_clip_after_unscale_in_fp32():
  rng = np.random.default_rng(1)
  gs = [rng.standard_normal((3, 4)).astype(np.float32) * 2048, rng.standard_normal((5,)).astype(np.float32) * 2048]
  norm = math.sqrt(sum(((g.astype(np.float64) / 2048) ** 2).sum() for g in gs))
  out, n = clip_and_unscale([Tensor(g) for g in gs], 2048.0, 1.0)
  assert n.item() == pytest.approx(norm, rel=1e-5) and norm > 1
  for o, g in zip(out, gs): np.testing.assert_allclose(o.numpy(), g / 2048 / norm, rtol=1e-5)
  out, n = clip_and_unscale([Tensor(g) for g in gs], 2048.0, 10.0)     # below the clip: only unscaled
  for o, g in zip(out, gs): np.testing.assert_allclose(o.numpy(), g / 2048, rtol=1e-6)
  out, n = clip_and_unscale([Tensor(np.zeros(3, np.float32))], 1.0, 1.0)
  assert n.item() == 0 and not np.isnan(out[0].numpy()).any()


def test_schedule_power_one():
  # warm-up 1 (every closed config): step 0 LR 0, step 1 the peak, then peak * (1 - (c - 1) / TRAIN_STEPS)
  lr = lambda c, w=1, total=100: poly_warmup_lr(c, 1e-3, 0.0, w, total, power=1.0)
  assert lr(0) == 0 and lr(1) == pytest.approx(1e-3)
  assert lr(51) == pytest.approx(1e-3 * 0.5) and lr(100) == pytest.approx(1e-3 * (1 - 99 / 100))
  assert lr(101) == 0 and lr(150) == 0
  assert lr(5, w=10) == pytest.approx(0.5e-3) and lr(10, w=10) == pytest.approx(1e-3)     # warm-up mid / end
  assert lr(55, w=10) == pytest.approx(1e-3 * (1 - 45 / 91))                               # decay mid


def test_make_optimizer_schedule_drives_both_groups():
  from tinyperf.benchmarks.bert.model import build_bert
  model = build_bert(dict(BERT_LAYERS=1, BERT_HIDDEN=8, BERT_HEADS=2, BERT_INTERMEDIATE=16, MAX_SEQ_LEN=8), seed=0, vocab=11)
  opt, sched = make_optimizer(model, {**KNOBS, "WARMUP_STEPS": 2})
  assert [o.lr.item() for o in opt.optimizers] == [0.0, 0.0]
  with Context(TRAINING=1): sched.step()
  assert [o.lr.item() for o in opt.optimizers] == pytest.approx([0.5e-3, 0.5e-3])
  assert opt.optimizers[0].wd == 0.01 and opt.optimizers[1].wd == 0.0 and opt.optimizers[1].adam


def test_lamb_hparams_are_the_closed_bert_keys():
  from mlperf_logging.mllog import constants as C
  h = lamb_hparams(KNOBS)
  ten = {C.GLOBAL_BATCH_SIZE, C.OPT_BASE_LR, C.OPT_LAMB_EPSILON, C.OPT_LR_TRAINING_STEPS, C.OPT_LR_WARMUP_STEPS,
         C.NUM_WARMUP_STEPS, C.START_WARMUP_STEP, C.OPT_LAMB_BETA_1, C.OPT_LAMB_BETA_2, C.OPT_LAMB_WEIGHT_DECAY}
  assert set(h) == ten | {C.OPT_LAMB_LR_DECAY_POLY_POWER}
  assert h[C.OPT_LAMB_WEIGHT_DECAY] == 0.01 and h[C.START_WARMUP_STEP] == 0 and h[C.GLOBAL_BATCH_SIZE] == 96


def test_eval_interval_formula():
  from tinyperf.benchmarks.bert.train import eval_every_steps
  # FLOOR(0.05*(230.23*GBS + 3e6), 25000) samples, rounded up to whole steps
  assert eval_every_steps({**KNOBS, "BS": 96}) == 1563 and 1563 * 96 >= 150_000 > 1562 * 96
  assert eval_every_steps({**KNOBS, "BS": 1024}) == 147
  assert eval_every_steps({**KNOBS, "BS": 4096}) == math.ceil(175_000 / 4096)
  assert eval_every_steps({**KNOBS, "EVAL_STEP_FREQ": 50}) == 50


def test_eval_totals_are_ratios_of_totals():
  from tinyperf.benchmarks.bert.steps import EvalTotals
  t = EvalTotals()
  t.add(dict(mlm_correct=9, mlm_count=10, nsp_correct=4, nsp_count=4, mlm_loss_sum=5.0, nsp_loss_sum=2.0))
  t.add(dict(mlm_correct=0, mlm_count=90, nsp_correct=0, nsp_count=1, mlm_loss_sum=45.0, nsp_loss_sum=1.0))
  assert t.mlm_accuracy == pytest.approx(0.09)        # not (0.9 + 0) / 2
  assert t.nsp_accuracy == pytest.approx(0.8) and t.mlm_loss == pytest.approx(0.5) and t.nsp_loss == pytest.approx(0.6)


def test_eval_set_is_exact_and_padding_is_masked(tmp_path):
  from tinyperf.benchmarks.bert import prep
  from tinyperf.benchmarks.bert.shard import load_shard
  from tinyperf.benchmarks.bert.steps import eval_set_batches
  from bert_helpers import make_data_dir
  d = make_data_dir(tmp_path / "d")
  assert prep.main(["eval", "--data", str(d), "--max-seq-len", "32", "--max-predictions", "5", "--eval-samples", "10",
                    "--tokenizer", "reference", "--quiet"]) == 0
  batches = list(eval_set_batches(d / "eval.shard", 4, 10, 32, 5))
  assert len(batches) == 3 and all(len(b["input_ids"]) == 4 for b in batches)
  last = batches[-1]
  assert (last["masked_lm_weights"][2:] == 0).all() and (last["next_sentence_labels"][2:] == -1).all()
  assert (last["input_mask"][2:] == 0).all() and (last["next_sentence_labels"][:2] >= 0).all()
  shard = load_shard(d / "eval.shard", 32, 5)
  ids = np.concatenate([b["input_ids"] for b in batches])[:10]
  np.testing.assert_array_equal(ids, shard["input_ids"][:10])          # samples 0..9, once, in order
  with pytest.raises(Exception, match="EVAL_SAMPLES"): next(eval_set_batches(d / "eval.shard", 4, 11, 32, 5))
