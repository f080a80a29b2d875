"""Fused attention for KERNELS=triton: BERT's self-attention in one forward kernel and two backward kernels.

  scores = q @ k^T / sqrt(D) + mask_add          (B, H, L, L) fp32, never written to memory
  probs  = dropout(softmax(scores), p)            softmax in fp32, dropout applied to the probabilities
  out    = probs @ v                              (B, L, H, D) fp16

q, k, v, out and their gradients are (B, L, H, D) fp16, the layout of the (B*L, H*D) GEMM outputs and inputs around
attention in BERT (lin(x).reshape(B, L, H, D)), so no transpose copy is made on either side: the kernels read head h of
row l at (b*L + l)*H*D + h*D. mask_add (B, 1, 1, L) fp32 (BERT's (1 - input_mask) * -10000). The forward stores each
row's logsumexp (B, H, L) fp32 so the backward recomputes the probabilities instead of storing them. Dropout keeps element
(b, h, i, j) as dropout.keep_mask draws element j of row (b*H + h)*L + i (Philox, one call per 4 keys): the forward and
both backward kernels draw the same mask from the same seed, a uint32 tensor drawn by tinygrad's RNG, so a captured JIT
step gets a new mask each step. With MASK_MODE "bits" the forward also stores the mask it drew as bits,
(B, H, L, L / 32) uint32, and the backward kernels read them instead of drawing again (opt-in, for the benches). With
the batch sharded over devices, b is the index in the device's own piece and each device has its own seed
(program.device_seeds).

Backward (FlashAttention-2's): with P the softmax, Z the kept mask over (1 - p), dO the output's gradient,
  dV = (P*Z)^T dO     dP = (dO V^T) * Z     dS = P * (dP - rowsum(dO * O))
  dQ = dS K / sqrt(D)     dK = dS^T Q / sqrt(D)
one kernel per key block for dK and dV, one per query block for dQ, so no gradient is written by two programs.

On a device without Triton (CPU, in tests) the same calls run a tinygrad kernel (forward) and tinygrad ops (backward)
with a hash in place of Philox, so the custom_kernel and grad wiring is tested everywhere; the Triton kernels themselves
are tested by Triton's interpreter (tests/unit/test_kernels_attention.py).
"""
from __future__ import annotations
import functools
import math

from tinygrad import Tensor, dtypes
from tinygrad.helpers import TRAINING
from tinygrad.uop.ops import AxisType, KernelInfo, Ops, UOp

from tinyperf.benchmarks.kernels import dropout, program as prg

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: the Triton path is never taken there
  triton = None

# exp(x) = exp2(x * LOG2E): the GPU's exp is ex2 (a constexpr: Triton kernels read no other globals)
LOG2E = tl.constexpr(1.4426950408889634) if triton is not None else 1.4426950408889634


def attn_fwd_kernel(q, k, v, mask, seed, o, lse, bits, H: tl.constexpr, L: tl.constexpr, D: tl.constexpr,
                    SM_SCALE: tl.constexpr, P_DROP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                    RNG_GROUP: tl.constexpr):
  """One (BM, D) block of out per program, for one (batch, head): walks the keys in blocks of BN with an online softmax
  (running max m_i, running sum l_i), so the (BM, L) scores never leave registers. Programs are ordered head-major:
  neighbours read the same K and V from L2. bits: None, or where the dropout mask is stored (MASK_MODE "bits")."""
  pid = tl.program_id(0)
  bh, pm = pid // (L // BM), pid % (L // BM)
  b = bh // H
  rm = pm * BM + tl.arange(0, BM)
  rn = tl.arange(0, BN)
  rd = tl.arange(0, D)
  base = b * L * H * D + (bh % H) * D   # (b, h, 0, 0) of a (B, L, H, D) tensor: its rows are H * D apart
  qb = tl.load(q + base + rm[:, None] * (H * D) + rd[None, :])                  # (BM, D)
  m_i = tl.full((BM,), float("-inf"), tl.float32)
  l_i = tl.zeros((BM,), tl.float32)
  acc = tl.zeros((BM, D), tl.float32)
  if P_DROP > 0: s0 = tl.load(seed)
  for start in range(0, L, BN):
    kb = tl.load(k + base + (start + rn)[:, None] * (H * D) + rd[None, :])      # (BN, D)
    vb = tl.load(v + base + (start + rn)[:, None] * (H * D) + rd[None, :])      # (BN, D)
    mb = tl.load(mask + b * L + start + rn)                                      # (BN,) fp32
    s = tl.dot(qb, tl.trans(kb)) * (SM_SCALE * LOG2E) + (mb * LOG2E)[None, :]   # (BM, BN) scores in log2 units
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)   # the softmax's denominator counts dropped elements too
    if P_DROP > 0:
      keep = dropout.keep_mask(s0, bh * L + rm, start, L, BN, P_DROP, RNG_GROUP)
      if bits is not None:   # stored from a tensor in p's layout: stored from keep, Triton drew keep twice (2 layouts)
        kept = tl.where(keep, p * (1.0 / (1.0 - P_DROP)), -1.0)   # -1: dropped (p is >= 0 or NaN)
        dropout.store_bits(bits, bh * L + rm, start, L, BN, kept != -1.0)
        p = tl.where(kept != -1.0, kept, 0.0)
      else:
        p = tl.where(keep, p * (1.0 / (1.0 - P_DROP)), 0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(vb.dtype), vb)
    m_i = m_new
  tl.store(o + base + rm[:, None] * (H * D) + rd[None, :], (acc / l_i[:, None]).to(o.dtype.element_ty))
  tl.store(lse + bh * L + rm, (m_i + tl.math.log2(l_i)) / LOG2E)             # natural log, as the tests compare it


def attn_bwd_dkdv_kernel(q, k, v, mask, seed, do, lse, delta, dk, dv, bits, H: tl.constexpr, L: tl.constexpr,
                         D: tl.constexpr, SM_SCALE: tl.constexpr, P_DROP: tl.constexpr, BM: tl.constexpr,
                         BN: tl.constexpr, RNG_GROUP: tl.constexpr):
  """dK and dV of one (BN, D) key block per program: walks the queries in blocks of BM, recomputing P from lse; the
  dropout mask redrawn from seed, or read from the forward's bits unless they are None."""
  pid = tl.program_id(0)
  bh, pn = pid // (L // BN), pid % (L // BN)
  b = bh // H
  rm = tl.arange(0, BM)
  rn = pn * BN + tl.arange(0, BN)
  rd = tl.arange(0, D)
  base = b * L * H * D + (bh % H) * D   # as the forward's
  kb = tl.load(k + base + rn[:, None] * (H * D) + rd[None, :])                  # (BN, D)
  vb = tl.load(v + base + rn[:, None] * (H * D) + rd[None, :])                  # (BN, D)
  mb = tl.load(mask + b * L + rn) * LOG2E                                      # (BN,)
  dk_acc = tl.zeros((BN, D), tl.float32)
  dv_acc = tl.zeros((BN, D), tl.float32)
  if P_DROP > 0: s0 = tl.load(seed)
  for start in range(0, L, BM):
    qb = tl.load(q + base + (start + rm)[:, None] * (H * D) + rd[None, :])      # (BM, D)
    dob = tl.load(do + base + (start + rm)[:, None] * (H * D) + rd[None, :])    # (BM, D)
    lse_i = tl.load(lse + bh * L + start + rm) * LOG2E                         # (BM,)
    d_i = tl.load(delta + bh * L + start + rm)                                 # (BM,)
    p = tl.math.exp2(tl.dot(qb, tl.trans(kb)) * (SM_SCALE * LOG2E) + mb[None, :] - lse_i[:, None])   # (BM, BN)
    dp = tl.dot(dob, tl.trans(vb))                                              # (BM, BN) d(dropped probs)
    if P_DROP > 0:
      if bits is not None: keep = dropout.load_bits(bits, bh * L + start + rm, pn * BN, L, BN)
      else: keep = dropout.keep_mask(s0, bh * L + start + rm, pn * BN, L, BN, P_DROP, RNG_GROUP)
      pd = tl.where(keep, p * (1.0 / (1.0 - P_DROP)), 0.0)
      dp = tl.where(keep, dp * (1.0 / (1.0 - P_DROP)), 0.0)
    else:
      pd = p
    dv_acc += tl.dot(tl.trans(pd.to(dob.dtype)), dob)
    ds = p * (dp - d_i[:, None])                                                # (BM, BN) d(scores)
    dk_acc += tl.dot(tl.trans(ds.to(qb.dtype)), qb)
  tl.store(dk + base + rn[:, None] * (H * D) + rd[None, :], (dk_acc * SM_SCALE).to(dk.dtype.element_ty))
  tl.store(dv + base + rn[:, None] * (H * D) + rd[None, :], dv_acc.to(dv.dtype.element_ty))


def attn_bwd_dq_kernel(q, k, v, mask, seed, do, lse, delta, dq, bits, H: tl.constexpr, L: tl.constexpr, D: tl.constexpr,
                       SM_SCALE: tl.constexpr, P_DROP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                       RNG_GROUP: tl.constexpr):
  """dQ of one (BM, D) query block per program: walks the keys in blocks of BN, recomputing P from lse; the mask as in
  the dK/dV kernel."""
  pid = tl.program_id(0)
  bh, pm = pid // (L // BM), pid % (L // BM)
  b = bh // H
  rm = pm * BM + tl.arange(0, BM)
  rn = tl.arange(0, BN)
  rd = tl.arange(0, D)
  base = b * L * H * D + (bh % H) * D   # as the forward's
  qb = tl.load(q + base + rm[:, None] * (H * D) + rd[None, :])                  # (BM, D)
  dob = tl.load(do + base + rm[:, None] * (H * D) + rd[None, :])                # (BM, D)
  lse_i = tl.load(lse + bh * L + rm) * LOG2E                                   # (BM,)
  d_i = tl.load(delta + bh * L + rm)                                           # (BM,)
  dq_acc = tl.zeros((BM, D), tl.float32)
  if P_DROP > 0: s0 = tl.load(seed)
  for start in range(0, L, BN):
    kb = tl.load(k + base + (start + rn)[:, None] * (H * D) + rd[None, :])      # (BN, D)
    vb = tl.load(v + base + (start + rn)[:, None] * (H * D) + rd[None, :])      # (BN, D)
    mb = tl.load(mask + b * L + start + rn) * LOG2E                            # (BN,)
    p = tl.math.exp2(tl.dot(qb, tl.trans(kb)) * (SM_SCALE * LOG2E) + mb[None, :] - lse_i[:, None])   # (BM, BN)
    dp = tl.dot(dob, tl.trans(vb))                                              # (BM, BN)
    if P_DROP > 0:
      if bits is not None: keep = dropout.load_bits(bits, bh * L + rm, start, L, BN)
      else: keep = dropout.keep_mask(s0, bh * L + rm, start, L, BN, P_DROP, RNG_GROUP)
      dp = tl.where(keep, dp * (1.0 / (1.0 - P_DROP)), 0.0)
    ds = p * (dp - d_i[:, None])
    dq_acc += tl.dot(ds.to(kb.dtype), kb)
  tl.store(dq + base + rm[:, None] * (H * D) + rd[None, :], (dq_acc * SM_SCALE).to(dq.dtype.element_ty))


if triton is not None:
  compiled_fwd, compiled_dkdv, compiled_dq = (triton.jit(f) for f in (attn_fwd_kernel, attn_bwd_dkdv_kernel,
                                                                         attn_bwd_dq_kernel))

# (BM, BN, warps, stages) per kernel for head dim 64: the fastest of lab/scripts/bench_attention.py's four sets on an
# H200 at BS 96 (fwd + bwd 6.29 ms vs 6.58-8.54; docs/perf/2026-12-04_attention_triton_1xH200.jsonl)
TILES = {"fwd": (64, 64, 4, 3), "dkdv": (64, 64, 4, 2), "dq": (64, 64, 4, 2)}

# how the backward kernels get the forward's dropout mask: "redraw" it from the seed (Philox again in both), or read
# the "bits" the forward stored, (B, H, L, L / 32) uint32 (L^2 / 8 bytes per (batch, head)); a global for the benches.
# bits: forward + backward 2.90 ms against 3.41 redrawn at BS 96 on an H100 (docs/perf/2026-12-06_attention_triton_h100.jsonl)
MASK_MODES = ("redraw", "bits")
MASK_MODE = "bits"


def _shape(q: Tensor) -> tuple[int, int, int, int]:
  """(B, H, L, D) of q (B, L, H, D)."""
  B, L, H, D = q.shape
  if B * H * L * L >= 2 ** 31: raise ValueError(f"attention: B*H*L*L = {B * H * L * L} overflows the dropout index")
  return B, H, L, D


# ---- the Triton path (CUDA) ----

# each kernel's pointer arguments in order (custom_kernel's sources follow it, then Triton's two scratch buffers); with
# the mask stored as bits, one more last (the forward's output, the backwards' input), else the kernels get bits=None
_IN = (("q", "*fp16"), ("k", "*fp16"), ("v", "*fp16"), ("mask", "*fp32"), ("seed", "*u32"))
_BWD_IN = _IN + (("do", "*fp16"), ("lse", "*fp32"), ("delta", "*fp32"))
POINTERS = {"fwd": _IN + (("o", "*fp16"), ("lse", "*fp32")), "dkdv": _BWD_IN + (("dk", "*fp16"), ("dv", "*fp16")),
            "dq": _BWD_IN + (("dq", "*fp16"),)}
BITS = ("bits", "*u32")
OUTS = {"fwd": (5, 6, 7), "dkdv": (8, 9), "dq": (8,)}   # the pointers each kernel writes, by argument number


def pointers(which: str, bits: bool) -> tuple[tuple[str, str], ...]:
  return POINTERS[which] + (BITS,) * bits


def stores_bits(p_drop: float) -> bool:
  """Whether the attention built now keeps its dropout mask as bits (MASK_MODE "bits", and a mask to keep)."""
  if MASK_MODE not in MASK_MODES: raise ValueError(f"attention: MASK_MODE {MASK_MODE!r} is not one of {MASK_MODES}")
  return MASK_MODE == "bits" and p_drop > 0


def compile_attention(which: str, H: int, L: int, D: int, p_drop: float, arch: int,
                      bits: bool = False) -> tuple[prg.Compiled, int, int]:
  """The cubin of one of the three kernels for sm_<arch>, with its (BM, BN); bits: the forward stores the dropout mask
  as bits and the backwards read them (stores_bits)."""
  BM, BN, warps, stages = TILES[which]
  BM, BN = min(BM, L), min(BN, L)
  if L % BM or L % BN or D & (D - 1):   # the kernels have no bounds masks: whole tiles, power-of-two head dim
    raise ValueError(f"attention: L {L} must be a multiple of the tile ({BM}, {BN}) and D {D} a power of two")
  # the mask's columns: BN in fwd and dq, the key block BN in dkdv; every tile starts at a multiple of its width
  dropout.check_group(dropout.RNG_GROUP, BN, L, f"attention {which}")
  if bits: dropout.check_bits(BN, f"attention {which} tile (BM {BM}, BN {BN})")
  fn = {"fwd": compiled_fwd, "dkdv": compiled_dkdv, "dq": compiled_dq}[which]
  consts = (("H", H), ("L", L), ("D", D), ("SM_SCALE", 1.0 / math.sqrt(D)), ("P_DROP", float(p_drop)), ("BM", BM),
            ("BN", BN), ("RNG_GROUP", dropout.RNG_GROUP)) + ((("bits", None),) if not bits else ())
  return prg.compile_kernel(fn, pointers(which, bits), consts, warps, stages, arch), BM, BN


def _triton_fxn(which: str, B: int, H: int, L: int, D: int, p_drop: float, device: str | tuple[str, ...],
                bits: bool = False):
  k, BM, BN = compile_attention(which, H, L, D, p_drop, prg.cuda_arch(device), bits)
  n = len(pointers(which, bits))
  outs = tuple(i for i in OUTS[which] if i < n)
  grid = B * H * L // (BN if which == "dkdv" else BM)
  # fwd: QK^T and PV; backward: QK^T, dO V^T, dV, dK (dkdv) or QK^T, dO V^T, dQ (dq)
  flops = {"fwd": 4, "dkdv": 8, "dq": 6}[which] * B * H * L * L * D
  nbytes = {"fwd": 4, "dkdv": 6, "dq": 5}[which] * B * H * L * D * 2   # the (B, L, H, D) fp16 tensors read and written
  nbytes += B * H * L * L // 8 * bits                                  # the mask's bits, written or read
  return lambda *params: prg.program(k, list(params), grid, outs=outs, ins=tuple(i for i in range(n) if i not in outs),
                                     device=device, flops=flops, nbytes=nbytes)


# ---- the tinygrad path (CPU, tests) ----

def _hash_uniform(idx, seed):
  """Uniform [0, 1) from uint32 element indices and a uint32 seed (UOps or Tensors): the fallback's stand-in for
  Philox (a murmur3 finalizer), the same in the forward kernel and the backward ops."""
  x = idx * 0x9E3779B1 + seed
  x = x ^ (x >> 16)
  x = x * 0x85EBCA6B
  x = x ^ (x >> 13)
  x = x * 0xC2B2AE35
  x = x ^ (x >> 16)
  return (x >> 8).cast(dtypes.float32) * (1.0 / 2 ** 24)


def _tinygrad_fwd(B: int, H: int, L: int, D: int, p_drop: float):
  """The forward as one tinygrad kernel with the Triton kernel's arguments: per (b, h, i, d) the row max, the softmax's
  sum and the output, each a reduction over keys of a reduction over D (three passes; slow, for tests only). A bits
  output, if given, is left unwritten: the backward ops hash the mask again."""
  scale = 1.0 / math.sqrt(D)
  def fxn(q: UOp, k: UOp, v: UOp, mask: UOp, seed: UOp, o: UOp, lse: UOp, *bits: UOp) -> UOp:
    q, k, v, mask, o, lse = (x.flatten() for x in (q, k, v, mask, o, lse))
    b, h, i, d = UOp.range(B, 0), UOp.range(H, 1), UOp.range(L, 2), UOp.range(D, 3)
    bh = b * H + h
    row = lambda l: ((b * L + l) * H + h) * D   # (b, l, h, 0) of q, k, v, o (B, L, H, D), as the Triton kernels index
    def score(j: UOp, slot: int) -> UOp:   # scores[b, h, i, j] in fp32
      c = UOp.range(D, slot, AxisType.REDUCE)
      qk = q[row(i) + c].cast(dtypes.float32) * k[row(j) + c].cast(dtypes.float32)
      qk = qk.reduce(c, arg=Ops.ADD)
      return qk * scale + mask[b * L + j].cast(dtypes.float32)
    j1, j2, j3 = (UOp.range(L, s, AxisType.REDUCE) for s in (4, 6, 8))
    m = score(j1, 5).reduce(j1, arg=Ops.MAX)
    l = (score(j2, 7) - m).exp().reduce(j2, arg=Ops.ADD)
    pj = (score(j3, 9) - m).exp()
    if p_drop > 0:
      u = _hash_uniform(((bh * L + i) * L + j3).cast(dtypes.uint32), seed.flatten()[0])
      pj = (u >= p_drop).where(pj * (1.0 / (1.0 - p_drop)), 0.0)
    acc = (pj * v[row(j3) + d].cast(dtypes.float32)).reduce(j3, arg=Ops.ADD)
    # lse is written once per d (the same value): one set of ranges for both stores
    stores = UOp.group(o[row(i) + d].store((acc / l).cast(o.dtype)), lse[bh * L + i].store(m + l.log()))
    return stores.end(b, h, i, d).sink(arg=KernelInfo(name=f"attention_{B}_{H}_{L}_{D}", opts_to_apply=()))
  return fxn


def _uniform(shape: tuple[int, ...], seed: Tensor) -> Tensor:
  """The fallback's uniform [0, 1) for each element of a tensor of shape, as its kernels draw them: over the whole
  tensor on one device, or with seed (ndev,) sharded, each device's piece of axis 0 hashed from its own seed and its
  own indices (built on the first device, then sharded)."""
  devs = prg.devices(seed.device)
  n = math.prod(shape)
  idx = (Tensor.arange(n).to(devs[0]) % (n // len(devs))).cast(dtypes.uint32).reshape(len(devs), -1)
  u = _hash_uniform(idx, seed.to(devs[0]).reshape(len(devs), 1)).reshape(shape)
  return u.shard(devs, axis=0) if len(devs) > 1 else u


def _keep(B: int, H: int, L: int, seed: Tensor, p_drop: float) -> Tensor:
  """Z (B, H, L, L) as the kernels draw it: the kept elements scaled by 1 / (1 - p), the dropped zero."""
  return (_uniform((B, H, L, L), seed) >= p_drop).where(1.0 / (1.0 - p_drop), 0.0).cast(dtypes.float32)


def _tinygrad_bwd(q, k, v, mask, seed, do, lse, delta, p_drop: float) -> tuple[Tensor, Tensor, Tensor]:
  """dq, dk, dv (B, L, H, D) with tinygrad ops, the probabilities recomputed from lse as the Triton kernels do."""
  B, L, H, D = q.shape
  scale = 1.0 / math.sqrt(D)
  qf, kf, vf, dof = (x.float().transpose(1, 2) for x in (q, k, v, do))   # (B, H, L, D)
  p = ((qf @ kf.transpose(-2, -1)) * scale + mask.reshape(B, 1, 1, L) - lse.unsqueeze(-1)).exp()   # (B, H, L, L)
  dp = dof @ vf.transpose(-2, -1)                                                                  # (B, H, L, L)
  z = _keep(B, H, L, seed, p_drop) if p_drop > 0 else 1.0
  dv = (p * z).transpose(-2, -1) @ dof
  ds = p * (dp * z - delta.unsqueeze(-1))
  dq, dk = (ds @ kf) * scale, (ds.transpose(-2, -1) @ qf) * scale
  return tuple(g.transpose(1, 2).cast(x.dtype) for g, x in ((dq, q), (dk, k), (dv, v)))


# ---- the differentiable call ----


def _grad(grad_o: UOp, call: UOp, p_drop: float, bits: bool) -> tuple:
  """dq, dk, dv of the forward call (sources q, k, v, mask, seed, o, lse[, bits][, scratch]); o, lse and bits are read
  after it."""
  q, k, v, mask, seed = (Tensor(call.src[1 + i]) for i in range(5))
  o, lse, *stored = (Tensor(call.src[1 + i].after(call)) for i in (5, 6, 7)[:2 + bits])
  B, L, H, D = prg.local_shape(q)   # the kernels' shapes: one device's piece
  do = prg.contiguous(Tensor(grad_o).cast(q.dtype))   # (B, L, H, D)
  # (B, H, L) rowsum(dO * O) = rowsum(P * dP), in lse's layout as the kernels read it (the permute copies 4 bytes a row)
  delta = (do.float() * o.float()).sum(-1).permute(0, 2, 1).contiguous()
  if prg.on_triton(q):
    args = (q, k, v, mask, seed, do, lse, delta)
    dq, dk, dv = (prg.empty_shards((B, L, H, D), q.dtype, q.device, prg.batch_axis(q))
                  for _ in range(3))
    # two kernels, so each gradient block has one writer (no atomics): dK, dV per key block, dQ per query block
    dk, dv = q.custom_kernel(*args[1:], dk, dv, *stored, *prg.scratch(q.device),
                             fxn=_triton_fxn("dkdv", B, H, L, D, p_drop, q.device, bits))[8:10]
    dq = q.custom_kernel(*args[1:], dq, *stored, *prg.scratch(q.device),
                         fxn=_triton_fxn("dq", B, H, L, D, p_drop, q.device, bits))[8]
  else:
    dq, dk, dv = _tinygrad_bwd(q, k, v, mask, seed, do, lse, delta, p_drop)
  return (dq.uop, dk.uop, dv.uop) + (None,) * (len(call.src) - 4)


@functools.cache   # one per (rate, mode): tinygrad's schedule cache keys on id(grad_fxn) (matmul._grad_fxn says why)
def _grad_fxn(p_drop: float, bits: bool): return functools.partial(_grad, p_drop=p_drop, bits=bits)


def attention(q: Tensor, k: Tensor, v: Tensor, mask_add: Tensor, dropout_p: float,
              seed: Tensor | None = None) -> Tensor:
  """dropout(softmax(q @ k^T / sqrt(D) + mask_add), dropout_p) @ v per head, (B, L, H, D), for q, k, v (B, L, H, D)
  (BERT's lin(x).reshape(B, L, H, D), no transpose) and mask_add (B, 1, 1, L) fp32; dropout only under TRAINING, as
  Tensor.dropout. seed: a (1,) uint32 tensor; None draws one from tinygrad's RNG (a new one per step inside a TinyJit).
  On several devices q, k, v and mask_add are sharded on the batch: each device attends over its own sequences, with
  its own dropout seed (and its own mask bits, MASK_MODE "bits")."""
  devs = prg.devices(q.device)
  if len(devs) > 1 and any(t.uop.axis != 0 for t in (q, k, v, mask_add)):
    raise NotImplementedError("attention: on several devices q, k, v and mask_add are sharded on the batch (axis 0)")
  B, H, L, D = _shape(q)
  Bl = B // len(devs)   # the kernels' batch: one device's piece
  p_drop = float(dropout_p) if TRAINING else 0.0
  if not 0 <= p_drop < 1: raise ValueError(f"attention: dropout_p {dropout_p} is outside [0, 1)")
  mask = mask_add.float().reshape(B, L).contiguous()
  if seed is None:
    seed = dropout.next_seed(devs[0]) if p_drop > 0 else Tensor.zeros(1, device=devs[0])
  seed = prg.device_seeds(seed, q.device)
  axis = prg.batch_axis(q)
  o = prg.empty_shards((Bl, L, H, D), q.dtype, q.device, axis)
  lse = prg.empty_shards((Bl, H, L), dtypes.float32, q.device, axis)
  bits = stores_bits(p_drop)
  # (B, H, L, L / 32) words; rounded up, for the fallback's short rows (the Triton kernels take L a multiple of 32)
  stored = (prg.empty_shards((Bl, H, L, -(-L // dropout.WORD)), dtypes.uint32, q.device, axis),) * bits
  grad = _grad_fxn(p_drop, bits)
  # custom_kernel's sources are the kernel's arguments in order: q, k, v, mask, seed, o, lse[, bits], Triton's scratch
  # q, k, v as they are where they are BERT's GEMM outputs, reshaped: prg.contiguous copies only other views
  q, k, v = (prg.contiguous(x) for x in (q, k, v))
  if prg.on_triton(q):
    if q.dtype != dtypes.half: raise NotImplementedError(f"attention: the Triton kernels take fp16, not {q.dtype}")
    fxn = _triton_fxn("fwd", Bl, H, L, D, p_drop, q.device, bits)
    return q.custom_kernel(k, v, mask, seed, o, lse, *stored, *prg.scratch(q.device), fxn=fxn, grad_fxn=grad)[5]
  return q.custom_kernel(k, v, mask, seed, o, lse, *stored, fxn=_tinygrad_fwd(Bl, H, L, D, p_drop), grad_fxn=grad)[5]
