"""BERT model: parameter count from shapes, forward vs an independent numpy BERT (through the checkpoint name table),
the attention mask, and the fixed MLM/NSP losses and eval metrics."""
from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Tensor, Context, dtypes

from tinyperf.benchmarks.bert.convert import convert_arrays
from tinyperf.benchmarks.bert.model import (BertConfig, BertForPretraining, assign_weights, bert_parameter_formula, count_parameters,
                                   eval_sums, load_weights, mlm_loss_sum, nsp_loss_sum, place_model, pretraining_loss)
from bert_numpy_ref import fixed_batch, forward, tf_weights

pytestmark = pytest.mark.usefixtures("fast_compile")   # compile-bound



@pytest.fixture(autouse=True, scope="module")
def _stop_compile_pool():
  """tinygrad keeps a pool of compile worker processes alive after compiling; later tests assert no live children."""
  yield
  from tinygrad.engine.worker import terminate_worker_pool
  terminate_worker_pool()

def test_bert_large_parameter_count():
  """BertForPreTraining-large with the tied decoder, counted from the shapes of a placeholder model (no allocation):

    embeddings  word 30522*1024 + position 512*1024 + token type 2*1024 + LayerNorm 2*1024       =  31,782,912
    per layer   Q,K,V,O 4*(1024*1024+1024) + LN 2048 + 1024*4096+4096 + 4096*1024+1024 + LN 2048 = 12,596,224
    24 layers                                                                                     = 302,309,376
    pooler      1024*1024 + 1024                                                                  =   1,049,600
    MLM head    transform dense 1,049,600 + LayerNorm 2,048 + output bias 30,522                  =   1,082,170
    NSP head    2*1024 + 2                                                                        =       2,050
    total                                                                                         = 336,226,108
  BertModel alone (embeddings + encoder + pooler) is the often quoted 335,141,888; adding only the NSP head and the
  MLM bias gives 335,174,460 -- a figure that leaves out the MLM transform (1,051,648), which BertForPreTraining has.
  """
  model = BertForPretraining(BertConfig())                 # rng=None: Tensor.empty placeholders
  assert count_parameters(model) == 336_226_108 == bert_parameter_formula(BertConfig())
  assert 31_782_912 + 24 * 12_596_224 + 1_049_600 == 335_141_888
  tiny = BertConfig(layers=3, hidden=48, heads=4, intermediate=80, vocab=101, max_positions=64)
  assert count_parameters(BertForPretraining(tiny)) == bert_parameter_formula(tiny)


def test_state_dict_names_follow_the_tf_table():
  from tinygrad.nn.state import get_state_dict
  from tinyperf.benchmarks.bert.convert import tf_name_table
  sd = get_state_dict(BertForPretraining(BertConfig(layers=2, hidden=16, heads=2, intermediate=32, vocab=50)))
  assert set(sd) == {ours for ours, _ in tf_name_table(2).values()}
  assert "cls.predictions.decoder.weight" not in sd           # tied: the word embeddings are the decoder


def _tiny_model(w, heads=2, dropout=0.1):
  ours = convert_arrays(w)
  V, H = ours["bert.embeddings.word_embeddings.weight"].shape
  c = BertConfig(layers=2, hidden=H, heads=heads, intermediate=ours["bert.encoder.layer.0.intermediate.dense.weight"].shape[0],
                 vocab=V, max_positions=ours["bert.embeddings.position_embeddings.weight"].shape[0],
                 hidden_dropout=dropout, attention_dropout=dropout)
  model = BertForPretraining(c)
  load_weights(model, ours)
  place_model(model, ["CPU"])
  return model


def test_checkpoint_assigned_after_capture_reaches_the_jitted_step():
  """`--phase all` reads the phase-1 checkpoint after run_start into a model whose steps INIT already captured:
  assign_weights must write into the captured buffers, so the replayed JIT computes with the checkpoint's weights."""
  from tinygrad import TinyJit
  w = tf_weights()
  ours = convert_arrays(w)
  c = _tiny_model(w).config
  model = BertForPretraining(c, rng=np.random.default_rng(0))    # random init, as INIT builds it
  place_model(model, ["CPU"])
  batch = fixed_batch()
  fwd = TinyJit(lambda *x: model(*x)[1].realize())               # NSP logits
  with Context(TRAINING=0):
    before = [fwd(*(Tensor(a) for a in batch)).numpy() for _ in range(3)][-1]   # eager, capture, replay
    with pytest.raises(ValueError, match="missing"): assign_weights(model, {k: v for k, v in list(ours.items())[1:]})
    assign_weights(model, ours)
    after = fwd(*(Tensor(a) for a in batch)).numpy()
  _, ref_nsp = forward(w, *batch, heads=2)
  np.testing.assert_allclose(after, ref_nsp, rtol=2e-4, atol=2e-4)
  assert not np.allclose(before, ref_nsp, atol=1e-3)


def test_forward_matches_numpy_reference_and_padding_is_masked():
  w = tf_weights()
  model = _tiny_model(w)
  ids, seg, mask, pos = fixed_batch()
  with Context(TRAINING=0):
    mlm, nsp = model(*(Tensor(a) for a in (ids, seg, mask, pos)))
    mlm, nsp = mlm.numpy(), nsp.numpy()
    ids2 = ids.copy(); ids2[mask == 0] = 7                       # change only padded tokens
    mlm2 = model(*(Tensor(a) for a in (ids2, seg, mask, pos)))[0].numpy()
    mask3 = mask.copy(); mask3[2, -3:] = 0                        # mask real tokens of row 2
    mlm3 = model(*(Tensor(a) for a in (ids, seg, mask3, pos)))[0].numpy()
  ref_mlm, ref_nsp = forward(w, ids, seg, mask, pos, heads=2)
  assert mlm.shape == (3, 4, 97) and nsp.shape == (3, 2) and mlm.dtype == np.float32
  np.testing.assert_allclose(mlm, ref_mlm, rtol=2e-4, atol=2e-4)
  np.testing.assert_allclose(nsp, ref_nsp, rtol=2e-4, atol=2e-4)
  np.testing.assert_allclose(mlm2, mlm, rtol=1e-5, atol=1e-5)   # the additive mask hides padded keys
  assert not np.allclose(mlm3[2], mlm[2], atol=1e-3)             # ... and masking real keys changes the output
  np.testing.assert_allclose(mlm3[:2], mlm[:2], rtol=1e-5, atol=1e-5)


def _np_logsoftmax(x): return x - x.max(-1, keepdims=True) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))


def test_mlm_loss_masks_by_weight_and_averages_over_real_predictions():
  rng = np.random.default_rng(0)
  logits = rng.standard_normal((2, 4, 11)).astype(np.float32)
  labels = np.array([[3, 1, 0, 0], [1, 5, 7, 0]], np.int32)   # label 1 is a real token (upstream dropped it)
  weights = np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.float32)
  s, c = mlm_loss_sum(Tensor(logits), Tensor(labels), Tensor(weights))
  lp = _np_logsoftmax(logits.astype(np.float64))
  nll = -np.take_along_axis(lp, labels[..., None], -1)[..., 0]
  assert c.item() == 5
  assert s.item() == pytest.approx((nll * weights).sum(), rel=1e-5)
  logits2 = logits.copy(); logits2[weights == 0] = 1e4 * rng.standard_normal((3, 11))  # padding contributes nothing
  labels2 = labels.copy(); labels2[weights == 0] = 9
  s2, _ = mlm_loss_sum(Tensor(logits2), Tensor(labels2), Tensor(weights))
  assert s2.item() == pytest.approx(s.item(), rel=1e-6)


def test_nsp_loss_is_two_way_softmax_ce_and_accuracy_is_per_sample():
  logits = np.array([[2.0, -1.0], [0.5, 0.25], [-3.0, 1.0], [9.0, 9.0]], np.float32)
  labels = np.array([[0], [1], [1], [-1]], np.int32)           # last row: eval padding
  s, c = nsp_loss_sum(Tensor(logits), Tensor(labels))
  lp = _np_logsoftmax(logits[:3].astype(np.float64))
  assert c.item() == 3 and s.item() == pytest.approx(-(lp[0, 0] + lp[1, 1] + lp[2, 1]), rel=1e-5)
  B, P, V = 4, 2, 5
  mlm = np.zeros((B, P, V), np.float32); mlm[..., 2] = 1.0         # always predicts token 2
  batch = {"masked_lm_ids": Tensor(np.array([[2, 2], [2, 3], [4, 2], [2, 2]], np.int32)),
           "masked_lm_weights": Tensor(np.array([[1, 1], [1, 1], [1, 0], [0, 0]], np.float32)),
           "next_sentence_labels": Tensor(labels)}
  out = {k: v.item() for k, v in eval_sums(Tensor(mlm), Tensor(logits), batch).items()}
  assert out["mlm_correct"] == 3 and out["mlm_count"] == 5        # (0,0) (0,1) (1,0); padding never counts
  assert out["nsp_correct"] == 2 and out["nsp_count"] == 3        # argmax (0, 0, 1) vs (0, 1, 1): a (B,) comparison
  total, m, n = pretraining_loss(Tensor(mlm), Tensor(logits), batch)
  assert total.item() == pytest.approx(m.item() + n.item()) and n.item() == pytest.approx(s.item() / 3, rel=1e-5)


def test_half_compute_keeps_fp32_weights_and_fp32_logits():
  w = tf_weights(layers=1, hidden=16, intermediate=32, vocab=23, positions=16)
  ours = convert_arrays(w)
  model = BertForPretraining(BertConfig(layers=1, hidden=16, heads=2, intermediate=32, vocab=23, max_positions=16))
  load_weights(model, ours)
  ids, seg, mask, pos = fixed_batch(B=2, L=8, P=2, vocab=23)
  with Context(DEFAULT_FLOAT="HALF", TRAINING=0):
    assert dtypes.default_float == dtypes.float16
    mlm, nsp = model(*(Tensor(a) for a in (ids, seg, mask, np.minimum(pos, 2))))
    h = model.bert.embeddings(Tensor(ids), Tensor(seg))
  assert h.dtype == dtypes.float16                              # compute in half ...
  assert mlm.dtype == dtypes.float32 and nsp.dtype == dtypes.float32   # ... logits (and losses) in float32
  assert model.bert.embeddings.word_embeddings.weight.dtype == dtypes.float32   # fp32 master weights


def test_dropout_knob_reaches_the_model_and_zero_turns_it_off():
  from tinyperf.benchmarks.registry import load_config
  default = BertConfig.from_knobs(load_config("bert", "1xH200", environ={}).knobs)
  off = BertConfig.from_knobs(load_config("bert", "1xH200", environ={"DROPOUT": "0"}).knobs)
  assert (default.hidden_dropout, default.attention_dropout) == (0.1, 0.1)     # BERT-large's, when the config is silent
  assert (off.hidden_dropout, off.attention_dropout) == (0.0, 0.0)
  w = tf_weights()
  ids, seg, mask, pos = (Tensor(a) for a in fixed_batch())
  for p, differs in ((0.1, True), (0.0, False)):
    model = _tiny_model(w, dropout=p)
    with Context(TRAINING=1):
      a, b = (model(ids, seg, mask, pos)[0].numpy() for _ in range(2))
    assert (not np.allclose(a, b)) == differs, p


def test_closed_run_refuses_a_changed_dropout(tmp_path):
  import os, subprocess, sys
  from tinyperf.benchmarks.bert.train import check_dropout
  from tinyperf.benchmarks.common.config import ClosedModelError
  from tinyperf.benchmarks.registry import load_config
  from tests.conftest import REPO
  with pytest.raises(ClosedModelError, match="DROPOUT=0.0"): check_dropout(load_config("bert", "1xH200", environ={"DROPOUT": "0"}))
  check_dropout(load_config("bert", "cpu_smoke", environ={"DROPOUT": "0"}))     # open: any dropout
  r = subprocess.run([sys.executable, "-m", "tinyperf.benchmarks.bert.train", "--platform", "1xH200", "--phase", "run",
                      "--seed", "1", "--work", str(tmp_path / "results"), "--data", str(tmp_path / "data")],
                     cwd=REPO, env={**os.environ, "DROPOUT": "0", "DEV": "CPU", "KERNELS": "tinygrad"}, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 2, r.stderr[-2000:]
  assert "DROPOUT=0.0" in r.stderr and "closed" in r.stderr and "Traceback" not in r.stderr
  assert not any(":::MLLOG" in f.read_text() for f in (tmp_path / "results").rglob("*.txt"))   # refused before any log line


@pytest.mark.parametrize("layout, says", [((), "train: no train shards"),
                                          (("train/part-00000.shard",), "eval.shard: eval shard not found")],
                         ids=["no_data", "no_eval_shard"])
def test_run_and_time_refuses_missing_data_before_init(tmp_path, layout, says):
  """DATA_DIR=typo ./run_and_time.sh (--phase all) stops before INIT (minutes of JIT and BEAM on a GPU box), naming the
  directory and the prep commands for this platform; no MLPerf log line is written."""
  import os, subprocess, sys
  from tests.conftest import REPO
  import shlex
  data = tmp_path / "my data"   # a space: the printed prep commands are pasted into a shell
  for f in layout: (data / f).parent.mkdir(parents=True, exist_ok=True); (data / f).write_bytes(b"")
  r = subprocess.run([sys.executable, "-m", "tinyperf.benchmarks.bert.train", "--platform", "cpu_smoke", "--phase", "all",
                      "--seed", "1", "--work", str(tmp_path / "results"), "--data", str(data)],
                     cwd=REPO, env={**os.environ, "DEV": "CPU"}, capture_output=True, text=True, timeout=300)
  assert r.returncode == 2, r.stderr[-2000:]
  assert says in r.stderr and "--platform cpu_smoke" in r.stderr and "Traceback" not in r.stderr
  assert f"tinyperf prep wiki pretrain --data {shlex.quote(str(data))} --platform cpu_smoke`" in r.stderr, r.stderr
  assert "init took" not in r.stdout
  assert not any(":::MLLOG" in f.read_text() for f in (tmp_path / "results").rglob("*.txt"))   # refused before init_start


@pytest.mark.parametrize("ndev, H", [(1, 256), (2, 256), (1, 96)], ids=["one_device", "two_devices", "hidden_96"])
def test_atomic_embedding_gradient_is_the_one_hot_gradient(ndev, H):
  """USE_ATOMICS' scatter-add backward against numpy's np.add.at and tinygrad's autodiff of the one-hot form, with
  repeated ids (atomics collide), ids outside the table (looked up as zero rows, so no gradient), and on two devices
  the batch split between them (partials summed by the all-reduce: both replicas hold the full gradient). On the
  default device: CPU here, the GPU's backend with DEV=CUDA (run so on the H200, docs/decisions.md, Atomics)."""
  from tinygrad import Device
  devices = tuple(Device.canonicalize(f"{Device.DEFAULT}:{i}") for i in range(ndev)) if ndev > 1 else Device.DEFAULT
  from tinyperf.benchmarks.bert.model import Embedding, _onehot_lookup
  V, B, L = 37, 4, 6                      # H 96: workgroups of gcd(96, 256) = 32 columns
  rng = np.random.default_rng(3)
  emb = Embedding(V, H, rng)
  table = emb.weight.numpy()
  ids = rng.integers(-2, V + 2, (B, L)).astype(np.int32)
  ids[0, :3] = 5                                                  # the same row three times
  g = rng.standard_normal((B, L, H)).astype(np.float32)
  inside = (ids >= 0) & (ids < V)
  want = np.zeros((V, H), np.float32)
  np.add.at(want, ids[inside], g[inside])
  multi = isinstance(devices, tuple)
  place = (lambda t, axis=None: t.shard(devices, axis=axis)) if multi else (lambda t, axis=None: t)
  emb.weight = place(emb.weight)
  emb.weight.requires_grad = True
  with Context(USE_ATOMICS=1): out = emb(place(Tensor(ids), 0))     # (always so on CPU)
  np.testing.assert_array_equal(out.numpy(), np.where(inside[..., None], table[ids.clip(0, V - 1)], 0))
  (out * place(Tensor(g), 0)).sum().backward()
  np.testing.assert_allclose(emb.weight.grad.numpy(), want, rtol=1e-6, atol=1e-6)
  if multi:   # every replica, not only the one numpy() reads
    replicas = emb.weight.grad.realize().uop.buffer.bufs
    assert tuple(b.device for b in replicas) == devices
    for b in replicas:
      np.testing.assert_allclose(np.frombuffer(b.as_memoryview(), np.float32).reshape(V, H), want, rtol=1e-6, atol=1e-6)
  onehot_table = Tensor(table)
  onehot_table.requires_grad = True
  (_onehot_lookup(onehot_table, Tensor(ids)) * Tensor(g)).sum().backward()
  np.testing.assert_allclose(onehot_table.grad.numpy(), want, rtol=1e-5, atol=1e-5)


def test_atomic_embedding_refuses_a_backend_without_a_known_atomic():
  from tinyperf.benchmarks.bert.model import scatter_add_rows
  with pytest.raises(NotImplementedError, match="METAL.*USE_ATOMICS=0"): scatter_add_rows("METAL")


def test_attention_softmax_knob_casts_the_scores_to_the_compute_dtype():
  # ATTENTION_SOFTMAX=HALF (the tinybox configs): the softmax reads fp16 scores, as tinygrad's scaled_dot_product_attention
  from dataclasses import replace
  from tinyperf.benchmarks.registry import load_config
  half = {p: BertConfig.from_knobs(load_config("bert", p, environ={}).knobs).half_softmax
          for p in ("1xH200", "tinybox_green", "tinybox_red")}
  assert half == {"1xH200": False, "tinybox_green": True, "tinybox_red": True}
  # one attention block (dropout off, so the two forms see the same probabilities up to the cast)
  from tinyperf.benchmarks.bert.model import BertSelfAttention
  c = BertConfig(layers=1, hidden=16, heads=2, intermediate=32, vocab=23, max_positions=16, attention_dropout=0.0)
  x = np.random.default_rng(0).standard_normal((2, 8, 16)).astype(np.float32) * 4
  out = {}
  for flt in ("HALF", "FLOAT"):
    for hs in (False, True):
      block = BertSelfAttention(replace(c, half_softmax=hs), rng=np.random.default_rng(1))
      with Context(DEFAULT_FLOAT=flt):
        out[flt, hs] = block(Tensor(x).cast(dtypes.default_float), Tensor.zeros(2, 1, 1, 8)).float().numpy()
  np.testing.assert_array_equal(out["FLOAT", True], out["FLOAT", False])   # a no-op when the compute dtype is float32
  assert not np.array_equal(out["HALF", True], out["HALF", False])         # in half it rounds the scores ...
  np.testing.assert_allclose(out["HALF", True], out["HALF", False], atol=5e-2)   # ... to fp16 precision
