"""An independent numpy BERT (eval mode) reading TF-named variables, and random TF-named weights, for the model and
checkpoint-conversion tests. Written from the BERT paper's definitions, not from any implementation."""
from __future__ import annotations
import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x): return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x, g, b, eps=1e-12):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * g + b


def softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def tf_weights(layers=2, hidden=32, heads=2, intermediate=64, vocab=97, positions=64, seed=0, slots=False):
  """Random TF-named float32 variables of a BertForPreTraining checkpoint (non-trivial LayerNorm and biases, so that
  a swapped gamma/beta or a missing transpose shows). slots=True adds optimizer variables the converter must skip."""
  rng = np.random.default_rng(seed)
  w = {}
  def n(*s, scale=0.05): return (rng.standard_normal(s) * scale).astype(np.float32)
  def dense(p, i, o): w[f"{p}/kernel"], w[f"{p}/bias"] = n(i, o), n(o)
  def ln(p, d): w[f"{p}/gamma"], w[f"{p}/beta"] = (1 + n(d, scale=0.1)), n(d)
  w["bert/embeddings/word_embeddings"] = n(vocab, hidden, scale=0.5)
  w["bert/embeddings/position_embeddings"] = n(positions, hidden, scale=0.5)
  w["bert/embeddings/token_type_embeddings"] = n(2, hidden, scale=0.5)
  ln("bert/embeddings/LayerNorm", hidden)
  for i in range(layers):
    p = f"bert/encoder/layer_{i}"
    for q in ("query", "key", "value"): dense(f"{p}/attention/self/{q}", hidden, hidden)
    dense(f"{p}/attention/output/dense", hidden, hidden); ln(f"{p}/attention/output/LayerNorm", hidden)
    dense(f"{p}/intermediate/dense", hidden, intermediate)
    dense(f"{p}/output/dense", intermediate, hidden); ln(f"{p}/output/LayerNorm", hidden)
  dense("bert/pooler/dense", hidden, hidden)
  dense("cls/predictions/transform/dense", hidden, hidden); ln("cls/predictions/transform/LayerNorm", hidden)
  w["cls/predictions/output_bias"] = n(vocab)
  w["cls/seq_relationship/output_weights"] = n(2, hidden)
  w["cls/seq_relationship/output_bias"] = n(2)
  if slots:
    for k in list(w)[:5]: w[f"{k}/adam_m"], w[f"{k}/adam_v"] = np.zeros_like(w[k]), np.ones_like(w[k])
    w[f"{list(w)[0]}/LAMB"] = np.zeros_like(w[list(w)[0]])
    w["global_step"] = np.array(28252, np.int64)
  return w


def forward(w, input_ids, segment_ids, input_mask, positions, heads):
  """-> (MLM logits (B, P, V), NSP logits (B, 2)) in float64."""
  w = {k: np.asarray(v, np.float64) for k, v in w.items()}
  B, L = input_ids.shape
  layers = sum(1 for k in w if k.endswith("/attention/self/query/kernel"))
  x = (w["bert/embeddings/word_embeddings"][input_ids] + w["bert/embeddings/position_embeddings"][:L][None]
       + w["bert/embeddings/token_type_embeddings"][segment_ids])
  x = layer_norm(x, w["bert/embeddings/LayerNorm/gamma"], w["bert/embeddings/LayerNorm/beta"])
  H = x.shape[-1]; d = H // heads
  add = (1.0 - input_mask[:, None, None, :]) * -10000.0
  def dense(p, v): return v @ w[f"{p}/kernel"] + w[f"{p}/bias"]
  def ln(p, v): return layer_norm(v, w[f"{p}/gamma"], w[f"{p}/beta"])
  for i in range(layers):
    p = f"bert/encoder/layer_{i}"
    q, k, v = (dense(f"{p}/attention/self/{n}", x).reshape(B, L, heads, d).transpose(0, 2, 1, 3)
               for n in ("query", "key", "value"))
    ctx = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + add) @ v
    a = ln(f"{p}/attention/output/LayerNorm", dense(f"{p}/attention/output/dense", ctx.transpose(0, 2, 1, 3).reshape(B, L, H)) + x)
    x = ln(f"{p}/output/LayerNorm", dense(f"{p}/output/dense", gelu(dense(f"{p}/intermediate/dense", a))) + a)
  pooled = np.tanh(dense("bert/pooler/dense", x[:, 0]))
  m = x[np.arange(B)[:, None], positions]
  t = ln("cls/predictions/transform/LayerNorm", gelu(dense("cls/predictions/transform/dense", m)))
  mlm = t @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
  nsp = pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
  return mlm, nsp


def fixed_batch(B=3, L=16, P=4, vocab=97, seed=1):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, vocab, (B, L)).astype(np.int32)
  seg = (np.arange(L)[None] >= rng.integers(3, L - 3, (B, 1))).astype(np.int32)
  mask = np.ones((B, L), np.int32); mask[0, L - 5:] = 0; mask[1, L - 2:] = 0
  ids[mask == 0] = 0; seg[mask == 0] = 0
  pos = np.sort(rng.choice(np.arange(1, L - 5), (B, P), replace=True), axis=1).astype(np.int32)
  return ids, seg, mask, pos
