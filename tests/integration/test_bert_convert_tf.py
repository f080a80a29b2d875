"""Conversion of a real TF1 checkpoint: a small BertForPreTraining checkpoint (2 layers, hidden 32) written by
TensorFlow with the MLCommons variable names and optimizer slots, converted by `prep checkpoint`, verified tensor by
tensor, and our model's MLM/NSP logits from the converted file compared with a numpy BERT run on the TF variables.
Skips when tensorflow is not installed (pip install tensorflow-cpu, the `convert` extra)."""
from __future__ import annotations

import numpy as np
import pytest

from bert_numpy_ref import fixed_batch, forward, tf_weights

pytestmark = pytest.mark.integration


def write_tf1_checkpoint(d, weights):
  tf = pytest.importorskip("tensorflow", reason="needs TensorFlow: pip install tensorflow-cpu")
  g = tf.Graph()
  with g.as_default():
    for name, value in weights.items():
      tf.compat.v1.get_variable(name, initializer=tf.constant(value), trainable=name != "global_step")
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session(graph=g) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      saver.save(sess, str(d / "model.ckpt"), global_step=28252)
  return d


def test_tf_checkpoint_converts_and_matches_a_reference_forward(tmp_path):
  from tinygrad import Tensor, Context
  from tinygrad.nn.state import safe_load
  from tinyperf.benchmarks.bert import prep
  from tinyperf.benchmarks.bert.convert import read_tf_checkpoint, tf_name_table
  from tinyperf.benchmarks.bert.model import BertConfig, BertForPretraining, load_weights, place_model
  w = tf_weights(layers=2, hidden=32, heads=2, intermediate=64, vocab=97, positions=64, slots=True)
  ckpt = write_tf1_checkpoint(tmp_path / "tf", w)
  assert (ckpt / "checkpoint").is_file() and (ckpt / "model.ckpt-28252.index").is_file()
  names = set(read_tf_checkpoint(ckpt))
  assert "bert/encoder/layer_1/attention/self/query/kernel" in names and "global_step" in names
  assert any(n.endswith("/adam_m") for n in names)
  out = tmp_path / "bert.safetensors"
  assert prep.main(["checkpoint", "--tf", str(ckpt), "--out", str(out), "--quiet"]) == 0
  assert prep.main(["checkpoint", "--tf", str(ckpt), "--out", str(out), "--verify", "--quiet"]) == 0
  assert prep.main(["checkpoint", "--tf", str(ckpt), "--out", str(out), "--quiet"]) == 2     # never overwrites
  sd = safe_load(str(out))
  assert set(sd) == {ours for ours, _ in tf_name_table(2).values()}
  model = BertForPretraining(BertConfig(layers=2, hidden=32, heads=2, intermediate=64, vocab=97, max_positions=64))
  load_weights(model, sd)
  place_model(model, ["CPU"])
  ids, seg, mask, pos = fixed_batch(vocab=97)
  with Context(TRAINING=0):
    mlm, nsp = (t.numpy() for t in model(*(Tensor(a) for a in (ids, seg, mask, pos))))
  ref_mlm, ref_nsp = forward({n: a for n, a in w.items() if n in tf_name_table(2)}, ids, seg, mask, pos, heads=2)
  np.testing.assert_allclose(mlm, ref_mlm, rtol=2e-4, atol=2e-4)
  np.testing.assert_allclose(nsp, ref_nsp, rtol=2e-4, atol=2e-4)
  # a tampered file fails verification
  bad = tmp_path / "bad.safetensors"
  from tinyperf.benchmarks.bert.convert import read_safetensors, write_safetensors
  t, meta = read_safetensors(out)
  t = dict(t); t["cls.predictions.bias"] = t["cls.predictions.bias"] + 1
  write_safetensors(bad, t, meta)
  assert prep.main(["checkpoint", "--tf", str(ckpt), "--out", str(bad), "--verify", "--quiet"]) == 1
