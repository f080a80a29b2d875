"""GEMM for KERNELS=triton: C (M, N) = op(A) @ op(B) in fp16/bf16 with fp32 accumulation, op() a transpose or not.

One Triton kernel serves a linear layer's forward and both gradients: every stride is a compile-time constant, so a
transposed operand is read in place (no copy) and the contiguous axis is known to the compiler (vector loads).

  forward   y  = x @ W.T          gemm(x, W, trans_b=True)         x (M, K), W (N, K) as torch and tinygrad store it
  data grad dx = dy @ W           gemm(dy, W)
  weight    dW = dy.T @ x         gemm(dy, x, trans_a=True)

`gemm` is differentiable: its grad function calls gemm again, so loss.backward() needs no change. On a device without
Triton (CPU, in tests) the same call runs a tinygrad kernel with the same layouts, so the gradient wiring is tested
everywhere; the Triton kernel itself is tested on the CPU by Triton's interpreter (tests/unit/test_kernels.py).
"""
from __future__ import annotations
import functools
import math

from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import AxisType, KernelInfo, Ops, UOp

from tinyperf.benchmarks.kernels import program as prg

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: the Triton path is never taken there
  triton = None


def gemm_kernel(a, b, c, bias, aux, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, SAM: tl.constexpr,
                SAK: tl.constexpr, SBK: tl.constexpr, SBN: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr, GROUP: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
                HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr):
  """One (BM, BN) tile of C per program; programs walk C in groups of GROUP tile-rows so that they share B's tiles in
  L2. EVEN_*: the dimension is a multiple of its tile, so its bounds masks are compiled out. HAS_BIAS: bias (N,) is
  added to the fp32 accumulator before the one rounding to C's dtype (a linear layer's output in one pass).
  EPILOGUE, after the K loop (one in it made the GEMM 2-3x slower): GELU stores gelu(pre) into C and gelu'(pre) into
  aux (M, N), pre the result rounded to C's dtype (the FFN's up layer); GELU_GRAD multiplies the product by aux (the
  down layer's data gradient through the GELU: a load and a multiply, where computing gelu'(pre) there took 255
  registers, spilled 176 bytes and made the GEMM 1.66x slower than without an epilogue on an H100); NONE leaves aux
  unread."""
  pid = tl.program_id(0)
  tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
  first_m = (pid // (GROUP * tiles_n)) * GROUP
  rows = min(tiles_m - first_m, GROUP)
  pm = first_m + (pid % (GROUP * tiles_n)) % rows
  pn = (pid % (GROUP * tiles_n)) // rows
  rm = pm * BM + tl.arange(0, BM)
  rn = pn * BN + tl.arange(0, BN)
  rk = tl.arange(0, BK)
  a_ptr = a + rm[:, None] * SAM + rk[None, :] * SAK
  b_ptr = b + rk[:, None] * SBK + rn[None, :] * SBN
  acc = tl.zeros((BM, BN), dtype=tl.float32)
  for k in range(0, tl.cdiv(K, BK)):
    if EVEN_M and EVEN_K: x = tl.load(a_ptr)
    else: x = tl.load(a_ptr, mask=(rm[:, None] < M) & (rk[None, :] < K - k * BK), other=0.0)
    if EVEN_N and EVEN_K: y = tl.load(b_ptr)
    else: y = tl.load(b_ptr, mask=(rk[:, None] < K - k * BK) & (rn[None, :] < N), other=0.0)
    acc = tl.dot(x, y, acc)
    a_ptr += BK * SAK
    b_ptr += BK * SBK
  if HAS_BIAS:
    if EVEN_N: acc += tl.load(bias + rn)[None, :].to(tl.float32)
    else: acc += tl.load(bias + rn, mask=rn < N, other=0.0)[None, :].to(tl.float32)
  if EPILOGUE == 1:   # GELU of pre rounded as the dense layer's output is: the unfused model's numbers
    x = acc.to(c.dtype.element_ty).to(tl.float32)
    # erf(x / sqrt 2) as tinygrad's Tensor.erf computes it (Abramowitz-Stegun 7.1.26): libdevice's erff took 255
    # registers and a 1 KB stack at the 128x256 tile; e = exp(-x^2 / 2) serves gelu' too
    z = x * 0.7071067811865476
    e = tl.exp(-z * z)
    t = 1.0 / (1.0 + 0.3275911 * tl.abs(z))
    erf = 1.0 - t * ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * e
    erf = tl.where(z < 0, -erf, erf)
    phi = 0.5 * (1.0 + erf)
    acc = x * phi
    slope = (phi + x * e * 0.3989422804014327).to(c.dtype.element_ty)   # gelu' = Phi(x) + x phi(x)
    if EVEN_M and EVEN_N: tl.store(aux + rm[:, None] * N + rn[None, :], slope)
    else: tl.store(aux + rm[:, None] * N + rn[None, :], slope, mask=(rm[:, None] < M) & (rn[None, :] < N))
  if EPILOGUE == 2:   # lanes outside C load nothing and are never stored
    if EVEN_M and EVEN_N: acc *= tl.load(aux + rm[:, None] * N + rn[None, :]).to(tl.float32)
    else: acc *= tl.load(aux + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N)).to(tl.float32)
  out = c + rm[:, None] * N + rn[None, :]
  if EVEN_M and EVEN_N: tl.store(out, acc.to(c.dtype.element_ty))
  else: tl.store(out, acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

compiled_kernel = triton.jit(gemm_kernel) if triton is not None else None


def colsum_kernel(x, out, M: tl.constexpr, N: tl.constexpr, ROWS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
  """A bias's gradient: program (g, j) sums rows g * ROWS ... of x's columns j * BN ... in fp32, BM rows at a time, into
  row g of the partials out (G, N); tinygrad then sums the G rows (a fixed order, no atomics)."""
  NB: tl.constexpr = (N + BN - 1) // BN
  g, j = tl.program_id(0) // NB, tl.program_id(0) % NB
  cols = j * BN + tl.arange(0, BN)
  cmask = cols < N
  acc = tl.zeros((BM, BN), tl.float32)
  for start in range(0, ROWS, BM):
    rows = g * ROWS + start + tl.arange(0, BM)
    mask = (rows < M)[:, None] & cmask[None, :]
    acc += tl.load(x + rows[:, None] * N + cols[None, :], mask=mask, other=0.0).to(tl.float32)
  tl.store(out + g * N + cols, tl.sum(acc, 0), mask=cmask)

compiled_colsum = triton.jit(colsum_kernel) if triton is not None else None

# (BM, BN, BK, warps, stages), largest first; tile() takes the first that fills the GPU
TILES = ((128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4))
SMS = 132   # H200 streaming multiprocessors
# (M, N, K, trans_a, trans_b) -> the tile measured fastest on an H200 for BERT-large at BS 96, every tile of TILES tried
# (lab/scripts/bench_gemm.py; docs/perf/2026-12-04_gemm_triton_1xH200.jsonl); other shapes: tile()'s rule
TUNED: dict[tuple[int, int, int, bool, bool], tuple[int, int, int, int, int]] = {
  (49152, 1024, 1024, False, True): (128, 256, 64, 8, 3),   # qkv/out fwd: 553.6 TFLOP/s
  (49152, 1024, 1024, False, False): (128, 256, 64, 8, 3),   # qkv/out dgrad: 565.4 TFLOP/s
  (1024, 1024, 49152, True, False): (128, 256, 64, 8, 3),   # qkv/out wgrad: 647.7 TFLOP/s
  (49152, 4096, 1024, False, True): (128, 256, 64, 8, 3),   # ffn_up fwd: 632.0 TFLOP/s
  (49152, 1024, 4096, False, False): (128, 256, 64, 8, 3),   # ffn_up dgrad: 681.4 TFLOP/s
  (4096, 1024, 49152, True, False): (128, 256, 64, 8, 3),   # ffn_up wgrad: 694.9 TFLOP/s
  (49152, 1024, 4096, False, True): (128, 256, 64, 8, 3),   # ffn_down fwd: 680.7 TFLOP/s
  (49152, 4096, 1024, False, False): (128, 256, 64, 8, 3),   # ffn_down dgrad: 602.5 TFLOP/s
  (1024, 4096, 49152, True, False): (128, 256, 64, 8, 3),   # ffn_down wgrad: 716.2 TFLOP/s
}


def tile(M: int, N: int, K: int, trans_a: bool = False, trans_b: bool = False) -> tuple[int, int, int, int, int]:
  """The measured tile for this GEMM, else the largest tile that still gives 90 % of the multiprocessors a program."""
  if (t := TUNED.get((M, N, K, trans_a, trans_b))): return t
  for t in TILES:
    if -(-M // t[0]) * -(-N // t[1]) >= 0.9 * SMS: return t
  return TILES[-1]


def strides(shape_a, shape_b, trans_a: bool, trans_b: bool) -> tuple[int, int, int, int, int, int, int]:
  """(M, N, K, SAM, SAK, SBK, SBN) of op(A) @ op(B) for row-major A and B as stored."""
  M, K = shape_a[::-1] if trans_a else shape_a
  K2, N = shape_b[::-1] if trans_b else shape_b
  if K != K2: raise ValueError(f"gemm: op(A) is {M}x{K} and op(B) {K2}x{N}")
  sam, sak = (1, M) if trans_a else (K, 1)
  sbk, sbn = (1, K) if trans_b else (N, 1)
  return M, N, K, sam, sak, sbk, sbn


NONE, GELU, GELU_GRAD = 0, 1, 2   # gemm_kernel's EPILOGUE


def _triton_fxn(M, N, K, sam, sak, sbk, sbn, has_bias, dtype, out_dtype, device, epilogue=NONE):
  BM, BN, BK, warps, stages = tile(M, N, K, trans_a=sam == 1, trans_b=sbk == 1)
  ty = prg.POINTER
  k = prg.compile_kernel(compiled_kernel, (("a", ty[dtype]), ("b", ty[dtype]), ("c", ty[out_dtype]), ("bias", ty[dtype]),
                                           ("aux", ty[out_dtype])),
                         (("M", M), ("N", N), ("K", K), ("SAM", sam), ("SAK", sak), ("SBK", sbk), ("SBN", sbn), ("BM", BM),
                          ("BN", BN), ("BK", BK), ("GROUP", 8), ("EVEN_M", M % BM == 0), ("EVEN_N", N % BN == 0),
                          ("EVEN_K", K % BK == 0), ("HAS_BIAS", has_bias), ("EPILOGUE", epilogue)), warps, stages,
                         prg.cuda_arch(device))
  grid = -(-M // BM) * -(-N // BN)
  nbytes = (M * K + K * N) * dtype.itemsize + M * N * out_dtype.itemsize * (1 + (epilogue != NONE))
  outs, ins = (2, 4) if epilogue == GELU else (2,), (0, 1) + (3,) * has_bias + (4,) * (epilogue == GELU_GRAD)
  return lambda a, b, c, bias, aux, s0, s1: prg.program(k, [a, b, c, bias, aux, s0, s1], grid, outs=outs, ins=ins,
                                                        device=device, flops=2 * M * N * K, nbytes=nbytes)


INV_SQRT2, INV_SQRT_2PI = 1 / math.sqrt(2), 1 / math.sqrt(2 * math.pi)


def _gelu(x: UOp) -> UOp: return x * 0.5 * (1.0 + (x * INV_SQRT2).erf())   # the model's gelu, in fp32
def _gelu_grad(x: UOp) -> UOp: return 0.5 * (1.0 + (x * INV_SQRT2).erf()) + x * (x * x * -0.5).exp() * INV_SQRT_2PI


def _tinygrad_fxn(M, N, K, sam, sak, sbk, sbn, has_bias, epilogue=NONE):
  """The same GEMM and epilogue as a tinygrad kernel: the layer's path where there is no Triton (CPU), with the same
  strides."""
  def fxn(a: UOp, b: UOp, c: UOp, bias: UOp, aux: UOp) -> UOp:
    m, n, k = UOp.range(M, 1), UOp.range(N, 2), UOp.range(K, 0, AxisType.REDUCE)
    prod = a.flatten()[m * sam + k * sak].cast(dtypes.float32) * b.flatten()[k * sbk + n * sbn].cast(dtypes.float32)
    acc = prod.reduce(k, arg=Ops.ADD)
    if has_bias: acc = acc + bias.flatten()[n].cast(dtypes.float32)
    stores = []
    if epilogue == GELU:
      pre = acc.cast(c.dtype).cast(dtypes.float32)
      stores.append(aux.flatten()[m * N + n].store(_gelu_grad(pre).cast(c.dtype)))
      acc = _gelu(pre)
    if epilogue == GELU_GRAD: acc = acc * aux.flatten()[m * N + n].cast(dtypes.float32)
    stores.append(c.flatten()[m * N + n].store(acc.cast(c.dtype)))
    return UOp.group(*stores).end(m, n).sink(arg=KernelInfo(name=f"gemm_{M}_{N}_{K}"))
  return fxn


# column sums: (BM rows per step, BN columns, warps, programs per multiprocessor): on an H100 at BS 64 the fastest of
# lab/scripts/bench_colsum.py's on tokens x 1024 and 4096 (0.117 and 0.185 ms, 0.128 and 0.217 at 16 rows a step)
COLSUM = (32, 256, 4, 4)


def colsum_plan(M: int, N: int) -> tuple[int, int]:
  """(ROWS per program, G programs along the rows) for column sums of (M, N): about COLSUM[3] programs per
  multiprocessor."""
  BM, BN, _, per_sm = COLSUM
  per_column_block = max(1, per_sm * SMS // -(-N // BN))
  rows = BM * -(-M // (BM * per_column_block))
  return rows, -(-M // rows)


def column_sum(dc: Tensor) -> Tensor:
  """dc (M, N) summed over its rows, fp32 (N,): a linear layer's bias gradient. On CUDA one Triton kernel reads dc
  once into per-program partial rows (tinygrad's column sum ran at 1.1 TB/s, 0.09-0.34 ms per BERT-large layer at BS 96
  on an H100: docs/perf/2026-12-06_gemm_rowsum_h100.jsonl); elsewhere, or sharded other than by rows, tinygrad's sum."""
  if not prg.on_triton(dc) or (isinstance(dc.device, tuple) and dc.uop.axis != 0): return dc.float().sum(0)
  M, N = prg.local_shape(dc)
  if M * N >= 2 ** 31: return dc.float().sum(0)   # the kernel's int32 offsets
  BM, BN, warps, _ = COLSUM
  rows, G = colsum_plan(M, N)
  k = prg.compile_kernel(compiled_colsum, (("x", prg.POINTER[dc.dtype]), ("out", "*fp32")),
                         (("M", M), ("N", N), ("ROWS", rows), ("BM", BM), ("BN", BN)), warps, 1, prg.cuda_arch(dc.device))
  grid = G * -(-N // BN)
  fxn = lambda x, out, s0, s1: prg.program(k, [x, out, s0, s1], grid, outs=(1,), ins=(0,), device=dc.device,
                                           flops=M * N, nbytes=M * N * dc.dtype.itemsize)
  partials = prg.empty_partials((G, N), dtypes.float32, dc.device)
  partials = prg.contiguous(dc).custom_kernel(partials, *prg.scratch(dc.device), fxn=fxn)[1]
  return prg.partial_sum(partials.sum(-2))


def _grad(grad_c: UOp, call: UOp, trans_a: bool, trans_b: bool, has_bias: bool) -> tuple:
  """d op(A) = dC @ op(B).T and d op(B) = op(A).T @ dC, each written in the layout its operand is stored in; d bias =
  dC summed over rows."""
  a, b, bias = Tensor(call.src[1]), Tensor(call.src[2]), Tensor(call.src[4])
  g = Tensor(grad_c)
  if g.ndim == 3: g = g[0]   # a K-sharded product's (ndev, M, N) partials: each device's gradient is the sum's
  dc = g.cast(a.dtype)
  da = gemm(b, dc, trans_a=trans_b, trans_b=True) if trans_a else gemm(dc, b, trans_b=not trans_b)
  db = gemm(dc, a, trans_a=True, trans_b=trans_a) if trans_b else gemm(a, dc, trans_a=not trans_a)
  # summed from dC as it came: an fp32 C's gradient (the MLM decoder's, ~3e-5) is fp16 subnormals once rounded
  dbias = column_sum(g).cast(bias.dtype).uop if has_bias else None
  return (da.uop, db.uop, None, dbias) + (None,) * (len(call.src) - 5)


# One grad function per layout: tinygrad keys its schedule cache on the call's grad function by id(), so a new one per
# call would make every step of a TinyJit schedule the whole graph again (the capture step took 187 s instead of 13 s)
@functools.cache
def _grad_fxn(trans_a: bool, trans_b: bool, has_bias: bool):
  return functools.partial(_grad, trans_a=trans_a, trans_b=trans_b, has_bias=has_bias)


def _out_axis(a: Tensor, b: Tensor, trans_a: bool, trans_b: bool) -> int | None | str:
  """How C is laid over the devices of sharded operands: 0 (op(A)'s rows sharded, B replicated), 1 (op(B)'s columns
  sharded, A replicated), "partial" (both sharded along K: each device's product is a partial sum) or None (one device,
  or nothing sharded)."""
  if not isinstance(a.device, tuple): return None
  role_a = None if a.uop.axis is None else "MK"[a.uop.axis ^ trans_a]
  role_b = None if b.uop.axis is None else "KN"[b.uop.axis ^ trans_b]
  if (out := {(None, None): None, ("M", None): 0, (None, "N"): 1, ("K", "K"): "partial"}.get((role_a, role_b), "?")) == "?":
    raise NotImplementedError(f"gemm: op(A) sharded along {role_a}, op(B) along {role_b}; sharded inputs take rows of "
                              "A, columns of B, or K of both")
  return out


def _gemm_call(a: Tensor, b: Tensor, trans_a: bool, trans_b: bool, bias: Tensor | None, out_dtype, grad,
               epilogue: int = NONE, aux: Tensor | None = None) -> tuple[Tensor, Tensor]:
  """gemm's custom_kernel call with grad function grad: C and aux. aux: gelu'(pre) (M, N), written by the GELU epilogue,
  read by GELU_GRAD's; with none, a given aux is a source the kernel does not read (for grad to return its gradient)."""
  out_axis = _out_axis(a, b, trans_a, trans_b)
  if out_axis == "partial" and (bias is not None or epilogue != NONE):
    raise NotImplementedError("gemm: a bias or an epilogue on a K-sharded product")
  M, N, K, *st = strides(prg.local_shape(a), prg.local_shape(b), trans_a, trans_b)
  # custom_kernel's sources are the kernel's arguments in order (tinygrad's CUDA graph passes them so): a, b, c, bias
  # (an unread one-element buffer without one), aux (likewise), then Triton's scratch
  dt = out_dtype or a.dtype
  c = prg.empty_partials((M, N), dt, a.device) if out_axis == "partial" else prg.empty_shards((M, N), dt, a.device, out_axis)
  has_bias = bias is not None
  bias = bias.cast(a.dtype).contiguous() if has_bias else Tensor.empty(1, dtype=a.dtype, device=a.device)
  if epilogue == GELU: aux = prg.empty_shards((M, N), dt, a.device, out_axis)
  elif aux is None: aux = Tensor.empty(1, dtype=dt, device=a.device)
  elif epilogue == GELU_GRAD and (aux.dtype != dt or prg.local_shape(aux) != (M, N) or
                                  (isinstance(a.device, tuple) and aux.uop.axis != out_axis)):
    raise ValueError(f"gemm: the GELU gradient's gelu'(pre) {aux.shape} {aux.dtype} is not laid out as C ({M}, {N}) {dt}")
  a, b, aux = (prg.contiguous(t) for t in (a, b, aux))   # no copy of another kernel's output seen through a reshape
  if prg.on_triton(a):
    fxn = _triton_fxn(M, N, K, *st, has_bias, a.dtype, c.dtype, a.device, epilogue)
    c, _, aux = a.custom_kernel(b, c, bias, aux, *prg.scratch(a.device), fxn=fxn, grad_fxn=grad)[2:5]
  else:
    c, _, aux = a.custom_kernel(b, c, bias, aux, fxn=_tinygrad_fxn(M, N, K, *st, has_bias, epilogue), grad_fxn=grad)[2:5]
  return prg.partial_sum(c) if out_axis == "partial" else c, aux


def gemm(a: Tensor, b: Tensor, trans_a: bool = False, trans_b: bool = False, bias: Tensor | None = None,
         out_dtype=None) -> Tensor:
  """op(A) @ op(B) (+ bias (N,)) for 2-D a, b, in out_dtype (default a's; fp32 accumulation). On several devices the
  kernel runs on each device's pieces (_out_axis); a product sharded along K is summed across devices."""
  return _gemm_call(a, b, trans_a, trans_b, bias, out_dtype, _grad_fxn(trans_a, trans_b, bias is not None))[0]


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
  """x (..., in) @ weight (out, in).T + bias, as Tensor.linear with a torch-layout weight; the bias is added in the
  GEMM's epilogue (no second pass over the output)."""
  y = gemm(x.reshape(-1, x.shape[-1]), weight, trans_b=True, bias=bias)
  return y.reshape(*x.shape[:-1], weight.shape[0])


def _ffn_grad(grad_y: UOp, call: UOp) -> tuple:
  """The FFN's down call (sources post, w2, y, b2, slope = gelu'(pre)): d w2 = dy.T @ post, d b2 = dy's column sums,
  and d pre = (dy @ w2) * slope in one GEMM, returned as slope's gradient and none as post's (post = gelu(pre) has no
  other use). The up call's gradient then arrives at pre = x @ w1.T + b1: a linear layer's (gemm's _grad)."""
  post, w2, b2, slope = (Tensor(call.src[i]) for i in (1, 2, 4, 5))
  dy = Tensor(grad_y).cast(post.dtype)
  d_pre = _gemm_call(dy, w2, False, False, None, None, None, GELU_GRAD, slope)[0]
  dw2, db2 = gemm(dy, post, trans_a=True), column_sum(dy).cast(b2.dtype)
  return (None, dw2.uop, None, db2.uop, d_pre.uop) + (None,) * (len(call.src) - 6)


def ffn(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
  """gelu(x @ w1.T + b1) @ w2.T + b2 for x (..., H), w1 (I, H), b1 (I,), w2 (H, I), b2 (H,), GELU exact (erf) in fp32
  as the model's gelu: BERT's feed-forward block as two GEMMs, the GELU and its derivative (kept for the backward) in
  the up GEMM's epilogue, the product with that derivative in the epilogue of the down layer's data gradient, so no
  elementwise pass over the (tokens, I) activations either way.
  On several devices x is sharded along its rows, the weights replicated."""
  x2 = x.reshape(-1, x.shape[-1])
  post, slope = _gemm_call(x2, w1, False, True, b1, None, _grad_fxn(False, True, True), GELU)   # (M, I) each
  y = _gemm_call(post, w2, False, True, b2, None, _ffn_grad, NONE, slope)[0]                   # (M, H)
  return y.reshape(*x.shape[:-1], w2.shape[0])
