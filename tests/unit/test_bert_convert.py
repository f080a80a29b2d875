"""Checkpoint conversion without TensorFlow: the name table, optimizer slots skipped, unmapped/missing names listed,
the numpy safetensors writer read back by tinygrad. (tests/integration/test_bert_convert_tf.py does it with a real TF
checkpoint.)"""
from __future__ import annotations

import numpy as np
import pytest

from tinyperf.benchmarks.bert.convert import convert_arrays, count_layers, is_optimizer_state, read_safetensors, write_safetensors
from tinyperf.benchmarks.common.io import InputError
from bert_numpy_ref import tf_weights


def test_table_transposes_kernels_and_skips_optimizer_state():
  w = tf_weights(layers=2, slots=True)
  assert is_optimizer_state("global_step") and is_optimizer_state("bert/pooler/dense/kernel/adam_m")
  assert is_optimizer_state("bert/pooler/dense/kernel/LAMB_1") and not is_optimizer_state("bert/pooler/dense/kernel")
  assert count_layers(w) == 2
  ours = convert_arrays(w)
  np.testing.assert_array_equal(ours["bert.encoder.layer.1.intermediate.dense.weight"],
                                w["bert/encoder/layer_1/intermediate/dense/kernel"].T)
  np.testing.assert_array_equal(ours["cls.seq_relationship.weight"], w["cls/seq_relationship/output_weights"])
  np.testing.assert_array_equal(ours["bert.embeddings.LayerNorm.weight"], w["bert/embeddings/LayerNorm/gamma"])
  assert len(ours) == 5 + 2 * 16 + 2 + 5 + 2


def test_unmapped_and_missing_names_are_listed():
  w = tf_weights(layers=1)
  w["bert/encoder/layer_0/attention/self/rotary/kernel"] = np.zeros(3, np.float32)
  del w["cls/predictions/output_bias"]
  with pytest.raises(InputError) as e: convert_arrays(w)
  assert "bert/encoder/layer_0/attention/self/rotary/kernel" in str(e.value) and "cls/predictions/output_bias" in str(e.value)


def test_safetensors_roundtrip_with_tinygrad(tmp_path):
  from tinygrad.nn.state import safe_load, safe_load_metadata
  ours = convert_arrays(tf_weights(layers=1))
  p = write_safetensors(tmp_path / "w.safetensors", ours, {"format": "x", "layers": 1})
  back, meta = read_safetensors(p)
  assert meta == {"format": "x", "layers": "1"} and back.keys() == ours.keys()
  t = safe_load(str(p))
  for k, a in ours.items():
    np.testing.assert_array_equal(back[k], a)
    np.testing.assert_array_equal(t[k].numpy(), a)
  assert safe_load_metadata(str(p))[2]["__metadata__"]["format"] == "x"
