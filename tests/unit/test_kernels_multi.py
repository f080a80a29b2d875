"""The KERNELS=triton layer on two devices, as the 2xH200 configs run it (batch sharded, weights replicated), through
the tinygrad fallback on CPU:0 and CPU:1: gemm, attention, conv2d and add_layernorm give the single-device result,
forward and every gradient, with each weight gradient summed across devices exactly once; and the BERT model with the
knob."""
from __future__ import annotations

import numpy as np
import pytest
from tinygrad import Context, Tensor, dtypes

from tinyperf.benchmarks.kernels import attention as at, conv as cv, layernorm as ln, matmul as mm, program as prg

TWO = ("CPU:0", "CPU:1")
RNG = np.random.default_rng(0)


def _run(fn, arrays: list[np.ndarray], devs, axes: list[int | None], n_grad: int | None = None) -> list[np.ndarray]:
  """fn's output and the gradients of sum(out**2) w.r.t. the first n_grad inputs (default all), on one device (devs
  None) or sharded on devs (input i along axes[i], None: replicated); each gradient must come laid out as its input."""
  ts = [Tensor(a) if devs is None else Tensor(a).shard(devs, axis=ax) for a, ax in zip(arrays, axes)]
  y = fn(*ts)
  grads = (y.float() * y.float()).sum().gradient(*ts[:n_grad])
  if devs is not None:
    assert isinstance(y.device, tuple) and len(y.device) == len(devs)
    assert [g.uop.axis for g in grads] == axes[:n_grad]
  return [y.numpy()] + [g.numpy() for g in grads]


def _assert_same(got, want):
  for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_linear_rows_sharded_weight_and_bias_gradients_summed_once():
  x, w = RNG.standard_normal((8, 16), np.float32), RNG.standard_normal((12, 16), np.float32)
  b = RNG.standard_normal(12).astype(np.float32)
  _assert_same(_run(mm.linear, [x, w, b], TWO, [0, None, None]), _run(mm.linear, [x, w, b], None, [None] * 3))


def test_linears_rows_sharded_each_weight_and_bias_gradient_summed_once():
  """matmul.linears (BERT's query, key and value): each device runs the three launches on its rows; the weight
  gradients' one SPLIT_M launch is K-sharded there, its partials summed across devices."""
  x, ws = RNG.standard_normal((8, 16), np.float32), [RNG.standard_normal((12, 16), np.float32) for _ in range(3)]
  bs = [RNG.standard_normal(12).astype(np.float32) for _ in range(3)]
  fn = lambda x, *p: Tensor.cat(*mm.linears(x, list(p[:3]), list(p[3:])), dim=-1)
  _assert_same(_run(fn, [x, *ws, *bs], TWO, [0] + [None] * 6), _run(fn, [x, *ws, *bs], None, [None] * 7))


@pytest.mark.parametrize("ta", [False, True])
def test_a_product_sharded_along_k_is_summed_across_devices(ta):
  """The weight-gradient GEMM of a batch-sharded layer: each device multiplies its rows, the partials are added."""
  a = RNG.standard_normal((8, 6), np.float32)
  b = RNG.standard_normal((8, 5), np.float32)
  if not ta: a = np.ascontiguousarray(a.T)   # stored (M, K): sharded along its columns
  fn = lambda a, b: mm.gemm(a, b, trans_a=ta)
  want = _run(fn, [a, b], None, [None, None])
  _assert_same(_run(fn, [a, b], TWO, [0 if ta else 1, 0]), want)


def test_gemm_refuses_a_sharding_it_cannot_split():
  a, b = (Tensor(RNG.standard_normal((8, 8), np.float32)).shard(TWO, axis=1) for _ in range(2))
  with pytest.raises(NotImplementedError):
    mm.gemm(a, b)


def test_ffn_batch_sharded_equals_one_device_weight_and_bias_gradients_summed_once():
  """Both epilogue GEMMs run on each device's rows; only the weight gradients are K-sharded (plain GEMMs, summed)."""
  H, I = 16, 24
  arrays = [RNG.standard_normal((4, 3, H), np.float32), 0.3 * RNG.standard_normal((I, H), np.float32),
            RNG.standard_normal(I).astype(np.float32), 0.3 * RNG.standard_normal((H, I), np.float32),
            RNG.standard_normal(H).astype(np.float32)]
  _assert_same(_run(mm.ffn, arrays, TWO, [0] + [None] * 4), _run(mm.ffn, arrays, None, [None] * 5))


def test_conv2d_batch_sharded_equals_one_device():
  x, w = RNG.standard_normal((4, 3, 8, 8), np.float32), RNG.standard_normal((5, 3, 3, 3), np.float32)
  fn = lambda x, w: cv.conv2d(x, w, stride=2, padding=1)
  _assert_same(_run(fn, [x, w], TWO, [0, None]), _run(fn, [x, w], None, [None, None]))


def _qkvm(B=4, H=2, L=8, D=4):
  q, k, v = (RNG.standard_normal((B, L, H, D), np.float32) for _ in range(3))   # attention's (B, L, H, D)
  m = np.zeros((B, 1, 1, L), np.float32)
  m[1, ..., 5:] = m[3, ..., 2:] = -10000.0
  return [q, k, v, m]


def test_attention_batch_sharded_equals_one_device():
  arrays = _qkvm()
  fn = lambda q, k, v, m: at.attention(q, k, v, m, 0.0)
  with Context(TRAINING=1):
    got, want = _run(fn, arrays, TWO, [0, 0, 0, 0], 3), _run(fn, arrays, None, [None] * 4, 3)
  _assert_same(got, want)


@pytest.mark.parametrize("mode", at.MASK_MODES)
def test_attention_dropout_each_device_draws_its_own_mask_from_its_own_seed(monkeypatch, mode):
  """Device d's half is the one-device result on that half with seed + d * SEED_STRIDE: the backward uses the same
  mask as the forward, and the two halves do not share one (MASK_MODE "bits": each device's call has its own bits)."""
  monkeypatch.setattr(at, "MASK_MODE", mode)
  arrays, seed = _qkvm(), 1234
  with Context(TRAINING=1):
    got = _run(lambda q, k, v, m: at.attention(q, k, v, m, 0.5, seed=Tensor([seed], dtype=dtypes.uint32)), arrays, TWO,
               [0, 0, 0, 0], 3)
    for d in range(2):
      s = (seed + d * prg.SEED_STRIDE) % 2 ** 32
      half = _run(lambda q, k, v, m: at.attention(q, k, v, m, 0.5, seed=Tensor([s], dtype=dtypes.uint32)),
                  [a[2 * d:2 * d + 2] for a in arrays], None, [None] * 4, 3)
      _assert_same([g[2 * d:2 * d + 2] for g in got], half)
  assert not np.allclose(got[0][:2] != 0, got[0][2:] != 0)


def _ln_inputs(B=4, L=3, N=24):
  x, r = (RNG.standard_normal((B, L, N), np.float32) for _ in range(2))
  return [x, r, (1 + 0.2 * RNG.standard_normal(N)).astype(np.float32), RNG.standard_normal(N).astype(np.float32)]


def test_add_layernorm_batch_sharded_equals_one_device_weight_and_bias_gradients_summed_once():
  fn = lambda x, r, w, b: ln.add_layernorm(x, r, w, b, 1e-12)
  arrays = _ln_inputs()
  _assert_same(_run(fn, arrays, TWO, [0, 0, None, None]), _run(fn, arrays, None, [None] * 4))


def test_add_layernorm_dropout_each_device_draws_its_own_mask_from_its_own_seed():
  """As attention's: device d's half is the one-device result on that half with seed + d * SEED_STRIDE, in the
  forward and every gradient (x's through the same mask), the weight gradients summed over both halves."""
  arrays, seed = _ln_inputs(), 99
  fn = lambda s: lambda x, r, w, b: ln.add_layernorm(x, r, w, b, 1e-12, 0.5, seed=Tensor([s], dtype=dtypes.uint32))
  with Context(TRAINING=1):
    got = _run(fn(seed), arrays, TWO, [0, 0, None, None])
    halves = [_run(fn((seed + d * prg.SEED_STRIDE) % 2 ** 32), [a[2 * d:2 * d + 2] for a in arrays[:2]] + arrays[2:],
                   None, [None] * 4) for d in range(2)]
  for d, half in enumerate(halves): _assert_same([g[2 * d:2 * d + 2] for g in got[:3]], half[:3])
  _assert_same(got[3:], [halves[0][i] + halves[1][i] for i in (3, 4)])
  assert not np.array_equal(got[1][:2] == 0, got[1][2:] == 0)   # x's gradient is zero where its element was dropped


def test_add_layernorm_refuses_a_sharding_it_cannot_split():
  x, r, w, b = _ln_inputs()
  xs, rs = Tensor(x).shard(TWO, axis=2), Tensor(r).shard(TWO, axis=2)   # the features: each row split
  with pytest.raises(NotImplementedError):
    ln.add_layernorm(xs, rs, Tensor(w).shard(TWO), Tensor(b).shard(TWO), 1e-12)


def test_bert_with_triton_kernels_knob_on_two_devices_equals_one_device():
  from tinyperf.benchmarks.bert.model import BertConfig, BertForPretraining, place_model, pretraining_loss
  rng = np.random.default_rng(0)
  B, L, P = 4, 8, 3
  batch = {"input_ids": rng.integers(0, 50, (B, L)).astype(np.int32), "segment_ids": np.zeros((B, L), np.int32),
           "input_mask": np.ones((B, L), np.int32), "masked_lm_positions": rng.integers(0, L, (B, P)).astype(np.int32),
           "masked_lm_ids": rng.integers(0, 50, (B, P)).astype(np.int32),
           "masked_lm_weights": np.ones((B, P), np.float32), "next_sentence_labels": np.array([0, 1, 1, 0], np.int32)}
  batch["input_mask"][1, 5:] = 0
  out = {}
  for devs in (("CPU",), TWO):
    c = BertConfig(layers=1, hidden=16, heads=2, intermediate=32, vocab=50, max_positions=16, hidden_dropout=0.0,
                   attention_dropout=0.0, kernels="triton")
    model = BertForPretraining(c, rng=np.random.default_rng(1))
    place_model(model, devs)
    t = {k: Tensor(v).to(devs[0]) if len(devs) == 1 else Tensor(v).shard(devs, axis=0) for k, v in batch.items()}
    with Context(TRAINING=1):
      mlm, nsp = model(t["input_ids"], t["segment_ids"], t["input_mask"], t["masked_lm_positions"])
      loss = pretraining_loss(mlm, nsp, t, c.kernels)[0]   # the MLM loss through the xent call too
      layer = model.bert.encoder.layer[0]
      w, d, q = layer.intermediate.dense, layer.output.dense, layer.attention.self.query
      grads = loss.gradient(w.weight, w.bias, d.weight, d.bias, q.weight, model.bert.embeddings.word_embeddings.weight,
                            model.cls.predictions.bias)
    if len(devs) > 1: assert all(g.uop.axis is None for g in grads)   # replicated, as the optimizer updates them
    out[len(devs)] = (loss.item(), *(g.numpy() for g in grads))
  assert out[2][0] == pytest.approx(out[1][0], rel=1e-5)
  for got, want in zip(out[2][1:], out[1][1:]): np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_the_arch_check_asks_every_device():
  from tinyperf.benchmarks.kernels import program as prg
  with pytest.raises(RuntimeError, match="KERNELS=triton"):
    prg.cuda_arch(TWO)   # CPU devices: no CUDA architecture on either
