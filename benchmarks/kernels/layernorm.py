"""Fused dropout + residual add + LayerNorm for KERNELS=triton: BERT's LayerNorm(dropout(x) + residual) in one forward
and one backward kernel, each reading every row once.

  s = dropout(x, p) + residual             added in x's dtype (fp16), as the model adds before its LayerNorm
  y = (s - mean) * rstd * weight + bias    statistics and affine in fp32, y rounded once to x's dtype

over the last axis, weight and bias fp32 (the model's master weights). The forward also writes each row's mean and
rstd (fp32); the backward recomputes s from x and residual (no copy of s is kept) and gives
  ds = (w*dy - xhat * mean(xhat * w*dy) - mean(w*dy)) * rstd     residual's gradient; x's is ds through the dropout
  dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy
each program summing its own block of rows into one partial row (fp32), the partials then summed by tinygrad: no
atomics, the same sums every run. Where dy is the sum of two kernel outputs (BERT's LayerNorm output feeds the next
GEMM and the next LayerNorm), the backward reads both and adds them (_gradient_terms): 47 kernels and 9.5 GB fewer in
BERT-large's BS 96 step, counted on NULL (docs/perf/2026-12-08_bert_step_memory_captured_null.jsonl). Dropout keeps
element (i, j) of x as dropout.keep_mask draws element j of row i (Philox, one call per 4 columns), drawn again in the
backward from the same seed (a uint32 tensor from tinygrad's RNG: a captured JIT step gets a new mask each step), so
no mask is stored.

On several devices x and residual are sharded on their first axis (BERT's batch) and weight and bias replicated: each
device normalizes its own rows with its own dropout seed (program.device_seeds), and the partial dweight and dbias of
every program on every device are summed into replicated gradients.

On a device without Triton (CPU, in tests) the same calls run a tinygrad kernel (forward) and tinygrad ops (backward),
with attention.py's hash in place of Philox, so the custom_kernel and grad wiring is tested everywhere; the Triton
kernels themselves are tested by Triton's interpreter (tests/unit/test_kernels_layernorm.py).
"""
from __future__ import annotations
import functools

from tinygrad import Tensor, dtypes
from tinygrad.helpers import TRAINING
from tinygrad.uop.ops import AxisType, KernelInfo, Ops, UOp

from tinyperf.benchmarks.kernels import dropout, program as prg
from tinyperf.benchmarks.kernels.attention import _hash_uniform, _uniform

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: the Triton path is never taken there
  triton = None


def _dropped_sum(x, r, seed, rows, off, mask, N: tl.constexpr, BN: tl.constexpr, P_DROP: tl.constexpr,
                 RNG_GROUP: tl.constexpr):
  """dropout(x) + residual of rows (off: their elements), in x's dtype (the kept x scaled in fp32 and rounded once),
  as fp32."""
  xv = tl.load(x + off, mask=mask, other=0.0)
  if P_DROP > 0:
    keep = dropout.keep_mask(tl.load(seed), rows, 0, N, BN, P_DROP, RNG_GROUP)
    xv = tl.where(keep, xv.to(tl.float32) * (1.0 / (1.0 - P_DROP)), 0.0).to(xv.dtype)
  return (xv + tl.load(r + off, mask=mask, other=0.0)).to(tl.float32)


def add_ln_fwd_kernel(x, r, w, b, seed, y, mean, rstd, M: tl.constexpr, N: tl.constexpr, EPS: tl.constexpr,
                      P_DROP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, RNG_GROUP: tl.constexpr):
  """BM whole rows per program (BN: N rounded up to a power of two, the extra columns masked off)."""
  rows = tl.program_id(0) * BM + tl.arange(0, BM)
  cols = tl.arange(0, BN)
  rmask, cmask = rows < M, cols < N
  mask = rmask[:, None] & cmask[None, :]
  off = rows[:, None] * N + cols[None, :]
  s = _dropped_sum(x, r, seed, rows, off, mask, N, BN, P_DROP, RNG_GROUP)
  mu = tl.sum(s, 1) / N
  d = tl.where(mask, s - mu[:, None], 0.0)
  rs = tl.math.rsqrt(tl.sum(d * d, 1) / N + EPS)
  wv = tl.load(w + cols, mask=cmask, other=0.0)
  bv = tl.load(b + cols, mask=cmask, other=0.0)
  out = d * rs[:, None] * wv[None, :] + bv[None, :]
  tl.store(y + off, out.to(y.dtype.element_ty), mask=mask)
  tl.store(mean + rows, mu, mask=rmask)
  tl.store(rstd + rows, rs, mask=rmask)


def add_ln_bwd_kernel(x, r, w, seed, dy, dy2, mean, rstd, dr, dx, dw, db, M: tl.constexpr, N: tl.constexpr,
                      P_DROP: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, ROWS: tl.constexpr,
                      RNG_GROUP: tl.constexpr, DY2: tl.constexpr):
  """The sum's gradient dr (residual's) and, with dropout, dx (x's: dr through the same mask) of ROWS rows per
  program, BM at a time, and the program's partial dweight and dbias (row pid of dw, db). DY2: the output's gradient
  is dy + dy2, added here in fp32 (dy2 unread without it)."""
  pid = tl.program_id(0)
  cols = tl.arange(0, BN)
  cmask = cols < N
  wv = tl.load(w + cols, mask=cmask, other=0.0)
  dw_acc = tl.zeros((BM, BN), tl.float32)
  db_acc = tl.zeros((BM, BN), tl.float32)
  for start in range(0, ROWS, BM):
    rows = pid * ROWS + start + tl.arange(0, BM)
    rmask = rows < M
    mask = rmask[:, None] & cmask[None, :]
    off = rows[:, None] * N + cols[None, :]
    s = _dropped_sum(x, r, seed, rows, off, mask, N, BN, P_DROP, RNG_GROUP)
    mu = tl.load(mean + rows, mask=rmask, other=0.0)
    rs = tl.load(rstd + rows, mask=rmask, other=0.0)
    xhat = tl.where(mask, (s - mu[:, None]) * rs[:, None], 0.0)
    g = tl.load(dy + off, mask=mask, other=0.0).to(tl.float32)
    if DY2: g += tl.load(dy2 + off, mask=mask, other=0.0).to(tl.float32)
    wg = g * wv[None, :]
    c1 = tl.sum(xhat * wg, 1) / N
    c2 = tl.sum(wg, 1) / N
    ds = (wg - (xhat * c1[:, None] + c2[:, None])) * rs[:, None]
    tl.store(dr + off, ds.to(dr.dtype.element_ty), mask=mask)
    if P_DROP > 0:
      keep = dropout.keep_mask(tl.load(seed), rows, 0, N, BN, P_DROP, RNG_GROUP)
      tl.store(dx + off, tl.where(keep, ds * (1.0 / (1.0 - P_DROP)), 0.0).to(dx.dtype.element_ty), mask=mask)
    dw_acc += g * xhat
    db_acc += g
  tl.store(dw + pid * N + cols, tl.sum(dw_acc, 0), mask=cmask)
  tl.store(db + pid * N + cols, tl.sum(db_acc, 0), mask=cmask)


if triton is not None:   # _dropped_sum is jitted first: the kernels call it as a Triton function
  _dropped_sum = triton.jit(_dropped_sum)
  compiled_fwd, compiled_bwd = triton.jit(add_ln_fwd_kernel), triton.jit(add_ln_bwd_kernel)

SMS = 132   # H200 streaming multiprocessors
# fwd: (BM rows per program, warps); bwd: (BM rows per step, programs per multiprocessor, warps). The fastest of
# lab/scripts/bench_layernorm.py's CANDIDATES at 49152 x 1024, dropout 0.1, 4 elements per Philox call (H100,
# docs/perf/2026-12-07_layernorm_triton_h100.jsonl): fwd (2, 4) 0.251 ms against (4, 8) 0.282; bwd: 8 elements of a
# row per thread keep the dropout backward at 122 registers, so two programs fit each multiprocessor, one wave (at
# 16: 215; (4, 2, 8) measured within 0.011 ms of it)
TILES = {"fwd": (2, 4), "bwd": (2, 2, 8)}


def bwd_rows(M: int, BM: int, per_sm: int) -> int:
  """Rows per backward program: about per_sm programs on each multiprocessor, a whole number of BM-row steps."""
  return BM * -(-M // (BM * SMS * per_sm))


# ---- the Triton path (CUDA) ----

_TY = {dtypes.half: "*fp16", dtypes.bfloat16: "*bf16"}


def pointers(which: str, dtype) -> tuple[tuple[str, str], ...]:
  """Each kernel's pointer arguments in order (custom_kernel's sources follow it, then Triton's two scratch buffers)."""
  t = _TY[dtype]
  if which == "fwd": return (("x", t), ("r", t), ("w", "*fp32"), ("b", "*fp32"), ("seed", "*u32"), ("y", t),
                             ("mean", "*fp32"), ("rstd", "*fp32"))
  return (("x", t), ("r", t), ("w", "*fp32"), ("seed", "*u32"), ("dy", t), ("dy2", t), ("mean", "*fp32"),
          ("rstd", "*fp32"), ("dr", t), ("dx", t), ("dw", "*fp32"), ("db", "*fp32"))


def compile_layernorm(which: str, M: int, N: int, eps: float, p_drop: float, dtype,
                      arch: int, dy2: bool = False) -> tuple[prg.Compiled, int]:
  """The cubin of the forward or backward kernel (dy2: reading the output's gradient as two terms) for sm_<arch>,
  with its grid (programs)."""
  dropout.check_group(dropout.RNG_GROUP, prg.pow2(N), N, f"add_layernorm {which}")   # a tile is whole rows
  if which == "fwd":
    BM, warps = TILES["fwd"]
    consts = (("M", M), ("N", N), ("EPS", float(eps)), ("P_DROP", float(p_drop)), ("BM", BM), ("BN", prg.pow2(N)),
              ("RNG_GROUP", dropout.RNG_GROUP))
    return prg.compile_kernel(compiled_fwd, pointers("fwd", dtype), consts, warps, 1, arch), -(-M // BM)
  BM, per_sm, warps = TILES["bwd"]
  rows = bwd_rows(M, BM, per_sm)
  consts = (("M", M), ("N", N), ("P_DROP", float(p_drop)), ("BM", BM), ("BN", prg.pow2(N)), ("ROWS", rows),
            ("RNG_GROUP", dropout.RNG_GROUP), ("DY2", int(dy2)))
  return prg.compile_kernel(compiled_bwd, pointers("bwd", dtype), consts, warps, 1, arch), -(-M // rows)


def _triton_fxn(which: str, M: int, N: int, eps: float, p_drop: float, dtype, device: str | tuple[str, ...],
                dy2: bool = False):
  k, grid = compile_layernorm(which, M, N, eps, p_drop, dtype, prg.cuda_arch(device), dy2)
  n_in = 5 if which == "fwd" else 8
  n = len(pointers(which, dtype))
  # fwd reads x, r and writes y; bwd reads x, r, dy (and dy2) and writes dr (and dx with dropout); per-row and
  # per-column vectors are noise
  nbytes = (3 if which == "fwd" else 4 + dy2 + (p_drop > 0)) * M * N * dtype.itemsize
  flops = (8 if which == "fwd" else 12) * M * N
  return lambda *params: prg.program(k, list(params), grid, outs=tuple(range(n_in, n)), ins=tuple(range(n_in)),
                                     device=device, flops=flops, nbytes=nbytes)


# ---- the tinygrad path (CPU, tests) ----

def _tinygrad_fwd(M: int, N: int, eps: float, p_drop: float):
  """The forward as one tinygrad kernel with the Triton kernel's arguments: per row the mean, the variance (two
  reductions over the row) and the normalized row (slow, for tests only)."""
  def fxn(x: UOp, r: UOp, w: UOp, b: UOp, seed: UOp, y: UOp, mean: UOp, rstd: UOp) -> UOp:
    x, r, w, b, y, mean, rstd = (u.flatten() for u in (x, r, w, b, y, mean, rstd))
    i, j = UOp.range(M, 0), UOp.range(N, 1)
    def s(c: UOp) -> UOp:
      xv = x[i * N + c]
      if p_drop > 0:
        u = _hash_uniform((i * N + c).cast(dtypes.uint32), seed.flatten()[0])
        xv = (u >= p_drop).where(xv.cast(dtypes.float32) * (1.0 / (1.0 - p_drop)), 0.0).cast(x.dtype)
      return (xv + r[i * N + c]).cast(dtypes.float32)
    j1, j2 = UOp.range(N, 2, AxisType.REDUCE), UOp.range(N, 3, AxisType.REDUCE)
    mu = s(j1).reduce(j1, arg=Ops.ADD) * (1.0 / N)
    d2 = s(j2) - mu
    rs = ((d2 * d2).reduce(j2, arg=Ops.ADD) * (1.0 / N) + eps).rsqrt()
    out = (s(j) - mu) * rs * w[j].cast(dtypes.float32) + b[j].cast(dtypes.float32)
    # mean and rstd are written once per column (the same value): one set of ranges for the three stores
    stores = UOp.group(y[i * N + j].store(out.cast(y.dtype)), mean[i].store(mu), rstd[i].store(rs))
    return stores.end(i, j).sink(arg=KernelInfo(name=f"add_layernorm_{M}_{N}", opts_to_apply=()))
  return fxn


def _keep(M: int, N: int, seed: Tensor, p_drop: float) -> Tensor:
  """The fallback's dropout mask (M, N): the forward kernel's hash of each element's index (on several devices, of
  each device's rows with its seed)."""
  return _uniform((M, N), seed) >= p_drop


def _tinygrad_bwd(x, r, w, seed, dy, mean, rstd, p_drop: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """dr, dx, dweight, dbias with tinygrad ops, from the same saved statistics and mask as the Triton kernel."""
  scale, xd, keep = 1.0 / (1.0 - p_drop), x, None
  if p_drop > 0:
    keep = _keep(*x.shape, seed, p_drop)
    xd = keep.where(x.float() * scale, 0.0).cast(x.dtype)
  xhat = ((xd + r).float() - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)
  g = dy.float()
  wg = g * w
  ds = (wg - xhat * (xhat * wg).mean(-1, keepdim=True) - wg.mean(-1, keepdim=True)) * rstd.unsqueeze(-1)
  dx = keep.where(ds * scale, 0.0).cast(x.dtype) if keep is not None else ds.cast(x.dtype)
  return ds.cast(x.dtype), dx, (g * xhat).sum(0), g.sum(0)


# ---- the differentiable call ----


def _gradient_terms(grad_y: UOp, dtype, N: int) -> list[Tensor]:
  """The output's gradient as the backward kernel reads it, in dtype, without a copy: where autograd summed two
  gradients that are both buffers (BERT's LayerNorm output feeds the next GEMM and, as its residual, the next
  LayerNorm), the two, which the kernel adds on load where tinygrad's add kernel read both and wrote the sum (0.3 GB
  each, two a layer at BERT-large BS 96); else the gradient itself."""
  u = grad_y
  while u.op is Ops.RESHAPE: u = u.src[0]
  if u.op is Ops.ADD:
    terms = [Tensor(t).cast(dtype).reshape(-1, N) for t in u.src]
    if all(t.uop.has_buffer_identity(after_ok=True) for t in terms) and terms[0].uop.base is not terms[1].uop.base:
      return terms
  return [prg.contiguous(Tensor(grad_y).cast(dtype))]   # the next GEMM's data gradient, reshaped: no copy


def _grad(grad_y: UOp, call: UOp, eps: float, p_drop: float) -> tuple:
  """d x, d residual, d weight, d bias of the forward call (sources x, r, w, b, seed, y, mean, rstd[, scratch]); mean
  and rstd are read after it. Without dropout x's gradient is residual's, the same tensor."""
  x, r, w, seed = (Tensor(call.src[1 + i]) for i in (0, 1, 2, 4))
  mean, rstd = (Tensor(call.src[1 + i].after(call)) for i in (6, 7))
  M, N = prg.local_shape(x)   # the kernels' rows: one device's piece
  dys = _gradient_terms(grad_y, x.dtype, N)
  two = len(dys) == 2
  if prg.on_triton(x):
    _, grid = compile_layernorm("bwd", M, N, eps, p_drop, x.dtype, prg.cuda_arch(x.device), two)
    axis = prg.batch_axis(x)
    dr = prg.empty_shards((M, N), x.dtype, x.device, axis)
    if p_drop > 0: dx = prg.empty_shards((M, N), x.dtype, x.device, axis)
    else: dx = Tensor.empty(1, dtype=x.dtype, device=x.device)   # unwritten without dropout: one element per device
    dy2 = dys[1] if two else Tensor.empty(1, dtype=x.dtype, device=x.device)   # unread with one term
    dw, db = (prg.empty_partials((grid, N), dtypes.float32, x.device) for _ in range(2))
    dr, dx, dw, db = x.custom_kernel(r, w, seed, dys[0], dy2, mean, rstd, dr, dx, dw, db, *prg.scratch(x.device),
                                     fxn=_triton_fxn("bwd", M, N, eps, p_drop, x.dtype, x.device, two))[8:12]
    # the programs' partial sums (grid, N) -> (N,), then (several devices) the devices' (N,) across them
    dw, db = prg.partial_sum(dw.sum(-2)), prg.partial_sum(db.sum(-2))
    if p_drop == 0: dx = dr
  else:
    dy = dys[0].float() + dys[1].float() if two else dys[0]   # as the kernel: the terms added in fp32
    dr, dx, dw, db = _tinygrad_bwd(x, r, w, seed, dy.reshape(x.shape), mean, rstd, p_drop)
  return (dx.uop, dr.uop, dw.uop, db.uop) + (None,) * (len(call.src) - 5)


@functools.cache   # one per (eps, p): tinygrad's schedule cache keys on id(grad_fxn) (matmul._grad_fxn says why)
def _grad_fxn(eps: float, p_drop: float): return functools.partial(_grad, eps=eps, p_drop=p_drop)


def add_layernorm(x: Tensor, residual: Tensor, weight: Tensor, bias: Tensor, eps: float, dropout_p: float = 0.0,
                  seed: Tensor | None = None) -> Tensor:
  """LayerNorm(dropout(x) + residual) over the last axis with fp32 weight and bias (N,), in x's dtype: the model's
  LayerNorm of a sum (benchmarks/bert/model.py) as one kernel each way; dropout only under TRAINING, as
  Tensor.dropout. seed: a (1,) uint32 tensor; None draws one from tinygrad's RNG (a new one per step in a TinyJit).
  On several devices x and residual are sharded on axis 0 (the batch), weight and bias replicated."""
  devs = prg.devices(x.device)
  if len(devs) > 1 and (x.uop.axis != 0 or residual.uop.axis != 0 or weight.uop.axis is not None
                        or bias.uop.axis is not None):
    raise NotImplementedError("add_layernorm: on several devices x and residual are sharded on axis 0 (the batch), "
                              "weight and bias replicated")
  N = x.shape[-1]
  if residual.shape != x.shape or weight.shape != (N,) or bias.shape != (N,):
    raise ValueError(f"add_layernorm: x {x.shape}, residual {residual.shape}, weight {weight.shape} and bias "
                     f"{bias.shape} must be (..., N), (..., N), (N,), (N,)")
  M = x.numel() // N
  Ml = M // len(devs)   # the kernels' rows: one device's piece
  if Ml * N >= 2 ** 31: raise ValueError(f"add_layernorm: {Ml} x {N} elements overflow the dropout index")
  p_drop = float(dropout_p) if TRAINING else 0.0
  if not 0 <= p_drop < 1: raise ValueError(f"add_layernorm: dropout_p {dropout_p} is outside [0, 1)")
  if p_drop > 0:
    seed = prg.device_seeds(dropout.next_seed(devs[0]) if seed is None else seed, x.device)
  else: seed = Tensor.empty(1, dtype=dtypes.uint32, device=x.device)   # read by no kernel: no fill
  # BERT's GEMM outputs seen as (B, L, H): prg.contiguous passes them as they are (contiguous() would copy each)
  xs, rs = prg.contiguous(x.reshape(M, N)), prg.contiguous(residual.cast(x.dtype).reshape(M, N))
  w, b = weight.float().contiguous(), bias.float().contiguous()
  axis = prg.batch_axis(x)
  y = prg.empty_shards((Ml, N), x.dtype, x.device, axis)
  mean, rstd = (prg.empty_shards((Ml,), dtypes.float32, x.device, axis) for _ in range(2))
  grad = _grad_fxn(float(eps), p_drop)
  # custom_kernel's sources are the kernel's arguments in order: x, r, w, b, seed, y, mean, rstd, then Triton's scratch
  if prg.on_triton(x):
    if x.dtype not in _TY:
      raise NotImplementedError(f"add_layernorm: the Triton kernels take fp16 or bf16, not {x.dtype}")
    fxn = _triton_fxn("fwd", Ml, N, eps, p_drop, x.dtype, x.device)
    out = xs.custom_kernel(rs, w, b, seed, y, mean, rstd, *prg.scratch(x.device), fxn=fxn, grad_fxn=grad)[5]
  else:
    out = xs.custom_kernel(rs, w, b, seed, y, mean, rstd, fxn=_tinygrad_fwd(Ml, N, eps, p_drop), grad_fxn=grad)[5]
  return out.reshape(x.shape)
