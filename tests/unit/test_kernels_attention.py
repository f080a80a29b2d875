"""Fused attention (benchmarks/kernels/attention.py) on the CPU: the Triton forward and backward kernels run by Triton's
interpreter against tinygrad's ops doing the model's math (BertSelfAttention), the dropout mask drawn in-kernel read
back and checked (seeded, kept fraction, the same in the backward), the custom_kernel + grad wiring through the
tinygrad fallback, no copy kernel around the model's attention, and the three cubins compiled ahead for an H200. q, k,
v, out and the gradients are (B, L, H, D), the kernels' layout; lse, delta and the mask (B, H, L, ...)."""
from __future__ import annotations
import os
os.environ["TRITON_INTERPRET"] = "1"   # before Triton's first import: its language functions are then interpreted too
import math

import numpy as np
import pytest
from tinygrad import Context, Tensor, TinyJit, dtypes
from tinygrad.uop.ops import Ops

triton = pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")
from triton.runtime.interpreter import InterpretedFunction   # noqa: E402

from tinyperf.benchmarks.kernels import attention as at               # noqa: E402
from tinyperf.benchmarks.kernels import dropout as dr                 # noqa: E402
from tests.unit.test_kernels import HostArray, bert_batch, compiled_facts    # noqa: E402
from tests.unit.test_kernels_dropout import keep_mask         # noqa: E402

B, H = 2, 2
BLOCK = 32   # interpreter tiles: L 64/128 gives 2-4 blocks per row, so the online softmax crosses blocks


def inputs(L: int, D: int, seed: int = 0):
  """fp16 q, k, v, dO (B, L, H, D) and BERT's additive mask (B, L) fp32, the second sequence padded after 5/8 of L."""
  rng = np.random.default_rng(seed)
  q, k, v, do = (rng.standard_normal((B, L, H, D)).astype(np.float16) for _ in range(4))
  mask = np.zeros((B, L), np.float32)
  mask[1, 5 * L // 8:] = -10000.0
  return q, k, v, do, mask


def run_forward(q, k, v, mask, p_drop=0.0, seed=0, tile=(BLOCK, BLOCK), group=dr.RNG_GROUP, bits=None):
  """o (B, L, H, D) and lse (B, H, L) of the forward kernel at its (BM, BN) tile; bits: a (B, H, L, L / 32) uint32 array
  it stores the dropout mask in (MASK_MODE "bits"), or None."""
  L, D = q.shape[1], q.shape[3]
  BM, BN = tile
  o, lse = np.zeros_like(q), np.zeros((B, H, L), np.float32)
  args = (q, k, v, mask, np.array([seed], np.uint32), o, lse)
  InterpretedFunction(at.attn_fwd_kernel)[(B * H * L // BM,)](
    *map(HostArray, args), _ptr(bits), H, L, D, 1 / math.sqrt(D), p_drop, BM, BN, group)
  return o, lse


def _ptr(a): return None if a is None else HostArray(a)


def run_backward(q, k, v, mask, o, lse, do, p_drop=0.0, seed=0, dkdv=(BLOCK, BLOCK), dq_tile=(BLOCK, BLOCK),
                 group=dr.RNG_GROUP, delta=None, bits=None):
  """dq, dk, dv of the two backward kernels at their (BM, BN) tiles; delta rowsum(dO * O) unless given; bits: the
  forward's stored mask to read instead of redrawing it, or None."""
  L, D = q.shape[1], q.shape[3]
  if delta is None:   # (B, H, L), as attention._grad computes it
    delta = (do.astype(np.float32) * o.astype(np.float32)).sum(-1).transpose(0, 2, 1).copy()
  dq, dk, dv = np.zeros_like(q), np.zeros_like(q), np.zeros_like(q)
  ins = (q, k, v, mask, np.array([seed], np.uint32), do, lse, delta)
  consts = (H, L, D, 1 / math.sqrt(D), p_drop)
  InterpretedFunction(at.attn_bwd_dkdv_kernel)[(B * H * L // dkdv[1],)](*map(HostArray, ins + (dk, dv)), _ptr(bits),
                                                                         *consts, *dkdv, group)
  InterpretedFunction(at.attn_bwd_dq_kernel)[(B * H * L // dq_tile[0],)](*map(HostArray, ins + (dq,)), _ptr(bits),
                                                                          *consts, *dq_tile, group)
  return dq, dk, dv


def reference(q, k, v, mask, do, keep=None, p_drop=0.0):
  """BertSelfAttention's math in tinygrad from the same fp16 inputs (fp32 scores and softmax, fp16 probabilities),
  dropout given as the kept mask (B, H, L, L); returns out (B, L, H, D), logsumexp (B, H, L) and dq, dk, dv (fp32,
  (B, L, H, D))."""
  D = q.shape[-1]
  qt, kt, vt = (Tensor(x) for x in (q, k, v))
  qh, kh, vh = (t.transpose(1, 2) for t in (qt, kt, vt))   # (B, H, L, D), as the model's tinygrad path
  mask_add = Tensor(mask).reshape(B, 1, 1, -1)
  scores = qh.matmul(kh.transpose(-2, -1), dtype=dtypes.float32) * (1.0 / math.sqrt(D)) + mask_add
  probs = scores.softmax(-1).cast(dtypes.half)
  if keep is not None: probs = Tensor(keep).where(probs, 0) / (1.0 - p_drop)
  out = probs.matmul(vh, dtype=dtypes.float32).transpose(1, 2)
  grads = (out * Tensor(do).float()).sum().gradient(qt, kt, vt)
  return (out.numpy(), scores.exp().sum(-1).log().numpy(), *(g.float().numpy() for g in grads))


def kept_mask(L: int, p_drop: float, seed: int, tile=(BLOCK, BLOCK), group=dr.RNG_GROUP) -> np.ndarray:
  """The forward kernel's dropout mask (B, H, L, L) read back: with q = 0 every unmasked probability is 1/L, and with
  v the identity (D = L) out[i, j] = keep[i, j] / (L (1 - p)); returned (B, H, L, L)."""
  q = np.zeros((B, L, H, L), np.float16)
  v = _eye(L)
  o, _ = run_forward(q, q, v, np.zeros((B, L), np.float32), p_drop, seed, tile, group)
  assert set(np.unique(o * L * (1 - p_drop)).round(2)) <= {0.0, 1.0}
  return o.transpose(0, 2, 1, 3) > 0


def _eye(L: int) -> np.ndarray:
  """(B, L, H, L) fp16: every head of every sequence the identity (row l of head h is e_l)."""
  return np.broadcast_to(np.eye(L, dtype=np.float16)[None, :, None, :], (B, L, H, L)).copy()


def backward_kept_masks(L: int, p_drop: float, seed: int, dkdv, dq_tile, group) -> tuple[np.ndarray, np.ndarray]:
  """The masks (B, H, L, L) the dK/dV and the dQ kernels draw, read back. With q = 0 and lse = ln L every probability
  is 1/L; with dO = K = the identity (D = L), V all ones and delta 0, dP = dO V^T is all ones, so
  dv[j, i] = (P Z)[i, j] = keep[i, j] / (L (1 - p)) and dq[i, j] = dS[i, j] / sqrt(D) with
  dS[i, j] = keep[i, j] / (L (1 - p)); both returned (B, H, L, L)."""
  eye = _eye(L)
  q, ones = np.zeros_like(eye), np.ones_like(eye)
  lse = np.full((B, H, L), math.log(L), np.float32)
  dq, dk, dv = run_backward(q, eye, ones, np.zeros((B, L), np.float32), None, lse, eye, p_drop, seed, dkdv, dq_tile,
                            group, delta=np.zeros((B, H, L), np.float32))
  assert not dk.any()   # dS^T Q with Q = 0
  assert set(np.unique(dv.astype(np.float32) * L * (1 - p_drop)).round(2)) <= {0.0, 1.0}
  return dv.transpose(0, 2, 3, 1) > 0, dq.transpose(0, 2, 1, 3) > 0   # dv[b, j, h, i], dq[b, i, h, j]


def max_err(got, ref): return float(np.abs(got.astype(np.float32) - ref).max())


@pytest.mark.parametrize("L,D", [(64, 16), (128, 32), (64, 64)])
def test_forward_and_backward_interpreted_equal_the_models_math(L, D):
  assert triton.knobs.runtime.interpret, "Triton was imported before this module set TRITON_INTERPRET=1"
  q, k, v, do, mask = inputs(L, D, seed=L + D)
  o, lse = run_forward(q, k, v, mask)
  dq, dk, dv = run_backward(q, k, v, mask, o, lse, do)
  ref_o, ref_lse, ref_dq, ref_dk, ref_dv = reference(q, k, v, mask, do)
  # fp32 scores, fp16 probabilities into an fp32 accumulator, one rounding to fp16: |out| <= ~2 here, seen <= 5e-4
  assert max_err(o, ref_o) < 2e-3
  assert max_err(lse, ref_lse) < 1e-4
  # gradients (|ref| ~1-2.5): fp16 dS and P into fp32 accumulators, rounded once to fp16; seen <= 8e-4
  for got, ref in ((dq, ref_dq), (dk, ref_dk), (dv, ref_dv)):
    assert max_err(got, ref) < 4e-3 * max(1.0, np.abs(ref).max())
  # the padded keys of sequence 1 get no gradient (their probabilities are exp(-10000) = 0)
  assert not dk[1, 5 * L // 8:].any() and not dv[1, 5 * L // 8:].any()


@pytest.mark.parametrize("group", dr.GROUPS, ids=lambda g: f"rng_group{g}")
def test_dropout_is_seeded_and_keeps_one_minus_p(group):
  L, p = 64, 0.1
  a, b, c = (kept_mask(L, p, seed=s, group=group) for s in (7, 7, 8))
  assert (a == b).all() and (a != c).mean() > 0.1
  assert abs(a.mean() - (1 - p)) < 0.01   # 16384 draws: 0.01 is over 4 standard deviations
  # different elements of every (batch, head) draw differently: the index covers b, h, i and j
  assert all((a[0, 0] != a[x, y]).any() for x, y in ((0, 1), (1, 0), (1, 1)))


@pytest.mark.parametrize("group", dr.GROUPS, ids=lambda g: f"rng_group{g}")
def test_both_backward_kernels_draw_the_forwards_mask_at_other_tile_shapes(group):
  """The forward at (BM 32, BN 64), dK/dV at (32, 16), dQ at (64, 32): each kernel walks its own tiles, and all three
  draw the same element's mask."""
  L, p, seed = 128, 0.25, 13
  fwd = kept_mask(L, p, seed, tile=(32, 64), group=group)
  dkdv, dq = backward_kept_masks(L, p, seed, dkdv=(32, 16), dq_tile=(64, 32), group=group)
  assert abs(fwd.mean() - (1 - p)) < 0.02   # 65536 draws: over 10 standard deviations, a mask and not all-kept
  np.testing.assert_array_equal(dkdv, fwd)
  np.testing.assert_array_equal(dq, fwd)


@pytest.mark.parametrize("group", dr.GROUPS, ids=lambda g: f"rng_group{g}")
def test_backward_uses_the_forwards_dropout_mask(group):
  L, D, p, seed = 64, 64, 0.25, 11
  keep = kept_mask(L, p, seed, group=group)
  q, k, v, do, mask = inputs(L, D, seed=3)
  o, lse = run_forward(q, k, v, mask, p, seed, group=group)
  dq, dk, dv = run_backward(q, k, v, mask, o, lse, do, p, seed, group=group)
  ref_o, ref_lse, ref_dq, ref_dk, ref_dv = reference(q, k, v, mask, do, keep, p)
  assert max_err(o, ref_o) < 2e-3 * max(1.0, np.abs(ref_o).max())   # seen 8e-4 of 1.4
  assert max_err(lse, ref_lse) < 1e-4   # the softmax's denominator counts dropped elements too
  for got, ref in ((dq, ref_dq), (dk, ref_dk), (dv, ref_dv)):   # seen <= 1.2e-3 of ~2.4
    assert max_err(got, ref) < 4e-3 * max(1.0, np.abs(ref).max())
  # a backward with another seed's mask is measurably wrong: the check above can tell masks apart
  _, _, dv8 = run_backward(q, k, v, mask, o, lse, do, p, seed + 1, group=group)
  assert max_err(dv8, ref_dv) > 0.1 * np.abs(ref_dv).max()


def _bits(L: int) -> np.ndarray:
  """A (B, H, L, L / 32) bits buffer, filled with a pattern no mask word is likely to be: unwritten words show."""
  return np.full((B, H, L, L // dr.WORD), 0xA5A5A5A5, np.uint32)


def test_mask_bits_give_the_redraws_output_and_gradients_exactly():
  """MASK_MODE "bits" at tiles of different widths (forward 64 keys, dK/dV 32, dQ 64): the forward stores the mask it
  draws, both backwards read it, and out, lse, dq, dk, dv equal the redrawing kernels' bit for bit. The backward gets
  another seed: it reads the bits, it does not draw."""
  L, D, p, seed = 128, 32, 0.25, 13
  fwd, dkdv, dq_tile = (32, 64), (64, 32), (32, 64)
  q, k, v, do, mask = inputs(L, D, seed=4)
  want_o, want_lse = run_forward(q, k, v, mask, p, seed, fwd, group=4)
  want = run_backward(q, k, v, mask, want_o, want_lse, do, p, seed, dkdv, dq_tile, group=4)
  bits = _bits(L)
  o, lse = run_forward(q, k, v, mask, p, seed, fwd, group=4, bits=bits)
  got = run_backward(q, k, v, mask, o, lse, do, p, seed + 1, dkdv, dq_tile, group=4, bits=bits)
  for g, w in zip((o, lse, *got), (want_o, want_lse, *want)): np.testing.assert_array_equal(g, w)
  # the check can fail: the redrawing backward at seed + 1 gives other gradients
  other = run_backward(q, k, v, mask, o, lse, do, p, seed + 1, dkdv, dq_tile, group=4)
  assert not np.array_equal(other[2], want[2])


def test_the_stored_mask_bits_are_keep_masks_mask():
  """Bit c of word w of row (b, h, i) is keep_mask's element (b*H + h)*L + i, 32 w + c."""
  L, D, p, seed = 64, 16, 0.1, 21
  q, k, v, _, mask = inputs(L, D)
  bits = _bits(L)
  run_forward(q, k, v, mask, p, seed, tile=(32, 64), group=4, bits=bits)
  stored = np.unpackbits(bits.view(np.uint8), axis=-1, bitorder="little").reshape(B * H * L, L).astype(bool)
  drawn = keep_mask(B * H * L, L, p, seed, 4, tile=(32, 32))
  assert abs(drawn.mean() - (1 - p)) < 0.02
  np.testing.assert_array_equal(stored, drawn)


@pytest.mark.parametrize("which,tile", [("fwd", (64, 16, 4, 3)), ("dkdv", (64, 48, 4, 2)), ("dq", (32, 16, 4, 2))])
def test_mask_bits_refuse_a_tile_not_a_multiple_of_32_keys_wide(monkeypatch, which, tile):
  monkeypatch.setitem(at.TILES, which, tile)
  with pytest.raises(ValueError, match="multiple of 32"):
    at.compile_attention(which, 16, 192, 64, 0.1, 90, bits=True)


def test_mask_bits_refuse_rows_shorter_than_a_word_and_an_unknown_mode(monkeypatch):
  with pytest.raises(ValueError, match="multiple of 32"):   # L 16: the tile is 16 keys wide
    at.compile_attention("fwd", 1, 16, 8, 0.1, 90, bits=True)
  monkeypatch.setattr(at, "MASK_MODE", "stored")
  with pytest.raises(ValueError, match="MASK_MODE"):
    at.stores_bits(0.1)


def _wiring_case(p_drop):
  rng = np.random.default_rng(5)
  L, D = 16, 8
  q, k, v, g = (Tensor(rng.standard_normal((B, L, H, D)).astype(np.float32)) for _ in range(4))   # (B, L, H, D)
  mask = np.zeros((B, 1, 1, L), np.float32)
  mask[1, ..., 11:] = -10000.0
  return q, k, v, g, Tensor(mask), L, D


def _model_math(q, k, v, mask, keep=None, p_drop=0.0):
  """softmax(q k^T / sqrt(D) + mask) v per head in tinygrad ops, for (B, L, H, D) tensors as the model's tinygrad path
  computes it (transposed to (B, H, L, D) and back); keep: a (B, H, L, L) dropout mask."""
  qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
  probs = (qh @ kh.transpose(-2, -1) / math.sqrt(q.shape[-1]) + mask).softmax(-1)
  if keep is not None: probs = keep.where(probs, 0) / (1 - p_drop)
  return (probs @ vh).transpose(1, 2)


@pytest.mark.parametrize("mode", at.MASK_MODES)
@pytest.mark.parametrize("p_drop", [0.0, 0.3], ids=["no_dropout", "dropout"])
def test_attention_and_its_gradients_through_custom_kernel(monkeypatch, p_drop, mode):
  """attention()'s custom_kernel call and grad function on the CPU (the tinygrad fallback with a hash for Philox):
  out, dq, dk, dv equal tinygrad's autograd through the model's math with the fallback's mask. With MASK_MODE "bits"
  and dropout the forward call has the bits output, (B, H, L, 1) uint32 here (the fallback leaves it unwritten)."""
  monkeypatch.setattr(at, "MASK_MODE", mode)
  q, k, v, g, mask, L, D = _wiring_case(p_drop)
  with Context(TRAINING=1):
    out = at.attention(q, k, v, mask, p_drop, seed=Tensor([7], dtype=dtypes.uint32))
    grads = (out * g).sum().gradient(q, k, v)
  call = next(u for u in out.uop.toposort() if u.op is Ops.CALL)
  bits = mode == "bits" and p_drop > 0
  assert len(call.src) == 8 + bits   # the kernel, q, k, v, mask, seed, o, lse[, bits]
  if bits: assert call.src[-1].dtype == dtypes.uint32 and call.src[-1].shape == (B, H, L, 1), call.src[-1]
  keep = None
  if p_drop:
    idx = Tensor.arange(B * H * L * L).cast(dtypes.uint32).reshape(B, H, L, L)
    keep = at._hash_uniform(idx, Tensor([7], dtype=dtypes.uint32).reshape(1, 1, 1, 1)) >= p_drop
    assert abs(keep.float().mean().item() - (1 - p_drop)) < 0.05
  ref = _model_math(q, k, v, mask, keep, p_drop)
  assert out.shape == ref.shape == (B, L, H, D)
  ref_grads = (ref * g).sum().gradient(q, k, v)
  np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
  for got, want in zip(grads, ref_grads):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


def test_dropout_only_in_training_and_a_new_seed_per_call():
  q, k, v, _, mask, _, _ = _wiring_case(0.3)
  plain = at.attention(q, k, v, mask, 0.3).numpy()   # TRAINING unset: no dropout, as Tensor.dropout
  with Context(TRAINING=1):
    a, b = at.attention(q, k, v, mask, 0.3).numpy(), at.attention(q, k, v, mask, 0.3).numpy()
  ref = _model_math(q, k, v, mask).numpy()
  np.testing.assert_allclose(plain, ref, rtol=1e-5, atol=1e-5)
  assert not np.allclose(a, b)   # seed=None: tinygrad's RNG draws a new seed each call


def test_a_captured_jit_step_draws_a_new_dropout_mask_each_step():
  q, k, v, _, mask, _, _ = _wiring_case(0.3)
  mask = mask.contiguous().realize()
  step = TinyJit(lambda q, k, v, m: at.attention(q, k, v, m, 0.3).realize())
  with Context(TRAINING=1):
    outs = [step(q, k, v, mask).numpy() for _ in range(4)]   # captured at the second call, replayed after
  assert all(not np.allclose(outs[i], outs[i + 1]) for i in range(3))


def test_h200_cubins_compile_here_with_the_launch_facts():
  """The three kernels compiled ahead for sm_90 at BERT-large's shapes (16 heads, L 512, head dim 64, dropout 0.1) by
  Triton's own ptxas, without a GPU: Hopper's wgmma in the forward, Philox in all three (and in none at dropout 0; at
  the committed RNG_GROUP a quarter of the per-element draw's), shared memory within the 227 KB a block may have, the
  block size of the tile, and the kernel's pointers + Triton's two scratch parameters."""
  code = """
import json
from tinyperf.benchmarks.kernels import attention as at
out = {}
for which in ("fwd", "dkdv", "dq"):
  k, BM, BN = at.compile_attention(which, 16, 512, 64, 0.1, 90)
  params = [l for l in k.ptx.splitlines() if ".param .u64" in l]
  out[which] = {"name": k.name, "smem": k.smem, "threads": k.threads, "params": len(params), "cubin": len(k.cubin),
                "wgmma": "wgmma.mma_async" in k.ptx, "philox": "mul.hi.u32" in k.ptx, "warps": at.TILES[which][2]}
  out[which]["philox_at_p0"] = "mul.hi.u32" in at.compile_attention(which, 16, 512, 64, 0.0, 90)[0].ptx
  out[which]["mul_hi"] = k.ptx.count("mul.hi.u32")
  committed, at.dropout.RNG_GROUP = at.dropout.RNG_GROUP, 1   # the per-element draw, for its count
  out[which]["mul_hi_group1"] = at.compile_attention(which, 16, 512, 64, 0.1, 90)[0].ptx.count("mul.hi.u32")
  at.dropout.RNG_GROUP = committed
print(json.dumps(out))
"""
  got = compiled_facts(code, timeout=600)
  for which, name in (("fwd", "attn_fwd_kernel"), ("dkdv", "attn_bwd_dkdv_kernel"), ("dq", "attn_bwd_dq_kernel")):
    g = got[which]
    assert g["name"] == name and g["cubin"] > 1000 and g["philox"] and not g["philox_at_p0"], g   # p 0: compiled out
    assert 0 < g["smem"] <= 227 * 1024 and g["threads"] == 32 * g["warps"], g
    assert g["params"] == len(at.POINTERS[which]) + 2, g
    # one Philox call per 4 keys: Philox's multiplies (2 per round) fall to about a quarter (seen 146 of 514)
    assert g["mul_hi"] < g["mul_hi_group1"] / 3, g
  assert got["fwd"]["wgmma"], got["fwd"]


def test_h200_cubins_compile_with_mask_bits_and_no_philox_in_the_backward():
  """MASK_MODE "bits" at BERT-large's shapes for sm_90: the three kernels build (no Triton scratch: compile_kernel
  refuses it) with the bits pointer last, the forward draws as the redrawing forward does (Philox's multiplies as
  many: storing the mask from keep itself made Triton draw it twice), and neither backward draws at all."""
  code = """
import json
from tinyperf.benchmarks.kernels import attention as at
out = {}
for which in ("fwd", "dkdv", "dq"):
  for bits in (False, True):
    k = at.compile_attention(which, 16, 512, 64, 0.1, 90, bits)[0]
    out[f"{which}_{bits}"] = {"smem": k.smem, "mul_hi": k.ptx.count("mul.hi.u32"),
                              "params": sum(".param .u64" in l for l in k.ptx.splitlines())}
print(json.dumps(out))
"""
  got = compiled_facts(code, timeout=600)
  for which in ("fwd", "dkdv", "dq"):
    redraw, bits = got[f"{which}_False"], got[f"{which}_True"]
    assert bits["params"] == redraw["params"] + 1 == len(at.pointers(which, True)) + 2, got
    assert 0 < bits["smem"] <= 227 * 1024, got
    assert redraw["mul_hi"] > 50, got   # seen 146: Philox's 2 per round, 10 rounds, per call
  assert got["fwd_True"]["mul_hi"] == got["fwd_False"]["mul_hi"], got
  assert got["dkdv_True"]["mul_hi"] == got["dq_True"]["mul_hi"] == 0, got


def test_bert_with_the_knob_and_attention_dropout_gives_the_same_step_with_mask_bits(monkeypatch):
  """The model with KERNELS=triton and attention dropout on the CPU, the same seed drawn in both modes: loss and
  gradients equal with the mask kept as bits and redrawn (the forward's bits output and the grad's extra source
  wired through every layer)."""
  from tinyperf.benchmarks.bert.model import BertConfig, BertForPretraining, pretraining_loss
  batch = bert_batch()
  out, stored, stores_bits = {}, [], at.stores_bits
  monkeypatch.setattr(at, "stores_bits", lambda p: stored.append(stores_bits(p)) or stored[-1])
  for mode in at.MASK_MODES:
    monkeypatch.setattr(at, "MASK_MODE", mode)
    c = BertConfig(layers=2, hidden=16, heads=2, intermediate=32, vocab=50, max_positions=16, hidden_dropout=0.0,
                   attention_dropout=0.3, kernels="triton")
    model = BertForPretraining(c, rng=np.random.default_rng(1))
    t = {k: Tensor(v) for k, v in batch.items()}
    Tensor.manual_seed(3)   # the attention layers' dropout seeds
    with Context(TRAINING=1):
      mlm, nsp = model(t["input_ids"], t["segment_ids"], t["input_mask"], t["masked_lm_positions"])
      loss = pretraining_loss(mlm, nsp, t)[0]
      q = model.bert.encoder.layer[0].attention.self.query
      grads = loss.gradient(q.weight, model.bert.embeddings.word_embeddings.weight)
    out[mode] = (loss.item(), *(g.numpy() for g in grads))
  assert stored == [False, False, True, True]   # per layer: redrawn, then kept as bits
  assert out["bits"][0] == out["redraw"][0]
  for got, want in zip(out["bits"][1:], out["redraw"][1:]): np.testing.assert_array_equal(got, want)


def copy_kernels(*ts: Tensor) -> list[tuple[str, list[str]]]:
  """The kernels of ts' schedule that store values loaded unchanged from another buffer (copies and transposes), each
  with the names of the kernels that read its output."""
  calls = [u for u in ts[0].schedule_linear(*ts[1:]).src if u.op is Ops.CALL and u.src[0].op is Ops.SINK]
  copies = [c for c in calls if all(u.src[1].op is Ops.INDEX for u in c.src[0].toposort() if u.op is Ops.STORE)]
  return [(c.src[0].arg.name, [r.src[0].arg.name for r in calls if c.src[1] in r.src[1:]]) for c in copies]


def test_the_models_attention_schedules_no_copy_between_the_gemms():
  """KERNELS=triton on the CPU: the Q, K, V GEMM's outputs go into attention and its output into the attention-output
  GEMM as they are, (B, L, H, D) reshapes, in the forward, and in the backward nothing is copied into a GEMM (dO, the
  output GEMM's data gradient, to the value weight's). (The CPU's attention backward, tinygrad ops reading k through a
  transpose, has the scheduler copy k once.) The check can fail: a transposed q is one copy kernel more."""
  from tinyperf.benchmarks.bert.model import BertConfig, BertSelfAttention, Linear
  c = BertConfig(layers=1, hidden=16, heads=2, intermediate=32, vocab=50, max_positions=16, attention_dropout=0.1,
                 kernels="triton")
  rng = np.random.default_rng(1)
  attn, dense = BertSelfAttention(c, rng), Linear(16, 16, rng, "triton")
  params = [p for lin in (attn.query, attn.key, attn.value, dense) for p in (lin.weight, lin.bias)]
  x = Tensor(rng.standard_normal((2, 8, 16)).astype(np.float32))
  m = Tensor(np.zeros((2, 1, 1, 8), np.float32))
  Tensor.realize(x, m, *params)
  with Context(TRAINING=1):
    out = dense(attn(x, m))
    grads = out.square().sum().gradient(attn.value.weight, dense.weight)
    assert not [c for c in copy_kernels(out, *grads) if any(r.startswith(("gemm", "parts_gemm")) for r in c[1])]
    assert copy_kernels(dense(attn(x, m))) == []   # the forward alone
    q = attn.query(x)
    q_view = q.reshape(2, 2, 8, 8).transpose(1, 2)   # (B, L, H, D) but not in memory order: attention copies it
    assert len(copy_kernels(at.attention(q_view, *[q.reshape(2, 8, 2, 8)] * 2, m, 0.1))) == 1
