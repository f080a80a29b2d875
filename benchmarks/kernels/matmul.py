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

from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import AxisType, KernelInfo, Ops, UOp

from tinyperf.benchmarks.kernels import program as prg

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: the Triton path is never taken there
  triton = None


def gemm_kernel(a, b, c, bias, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, SAM: tl.constexpr, SAK: tl.constexpr,
                SBK: tl.constexpr, SBN: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                GROUP: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
                HAS_BIAS: tl.constexpr):
  """One (BM, BN) tile of C per program; programs walk C in groups of GROUP tile-rows so that they share B's tiles in
  L2. EVEN_*: the dimension is a multiple of its tile, so its bounds masks are compiled out. HAS_BIAS: bias (N,) is
  added to the fp32 accumulator before the one rounding to C's dtype (a linear layer's output in one pass)."""
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
  out = c + rm[:, None] * N + rn[None, :]
  if EVEN_M and EVEN_N: tl.store(out, acc.to(c.dtype.element_ty))
  else: tl.store(out, acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


compiled_kernel = triton.jit(gemm_kernel) if triton is not None else None

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


def _triton_fxn(M, N, K, sam, sak, sbk, sbn, has_bias, dtype, out_dtype, device):
  BM, BN, BK, warps, stages = tile(M, N, K, trans_a=sam == 1, trans_b=sbk == 1)
  ty = {dtypes.half: "*fp16", dtypes.bfloat16: "*bf16", dtypes.float32: "*fp32"}
  k = prg.compile_kernel(compiled_kernel, (("a", ty[dtype]), ("b", ty[dtype]), ("c", ty[out_dtype]), ("bias", ty[dtype])),
                         (("M", M), ("N", N), ("K", K), ("SAM", sam), ("SAK", sak), ("SBK", sbk), ("SBN", sbn), ("BM", BM),
                          ("BN", BN), ("BK", BK), ("GROUP", 8), ("EVEN_M", M % BM == 0), ("EVEN_N", N % BN == 0),
                          ("EVEN_K", K % BK == 0), ("HAS_BIAS", has_bias)), warps, stages, prg.cuda_arch(device))
  grid = -(-M // BM) * -(-N // BN)
  nbytes = (M * K + K * N) * dtype.itemsize + M * N * out_dtype.itemsize
  return lambda a, b, c, bias, s0, s1: prg.program(k, [a, b, c, bias, s0, s1], grid, outs=(2,),
                                                   ins=(0, 1, 3) if has_bias else (0, 1), device=device,
                                                   flops=2 * M * N * K, nbytes=nbytes)


def _tinygrad_fxn(M, N, K, sam, sak, sbk, sbn, has_bias):
  """The same GEMM as a tinygrad kernel: the layer's path where there is no Triton (CPU), with the same strides."""
  def fxn(a: UOp, b: UOp, c: UOp, bias: UOp) -> UOp:
    m, n, k = UOp.range(M, 1), UOp.range(N, 2), UOp.range(K, 0, AxisType.REDUCE)
    prod = a.flatten()[m * sam + k * sak].cast(dtypes.float32) * b.flatten()[k * sbk + n * sbn].cast(dtypes.float32)
    acc = prod.reduce(k, arg=Ops.ADD)
    if has_bias: acc = acc + bias.flatten()[n].cast(dtypes.float32)
    return c.flatten()[m * N + n].store(acc.cast(c.dtype)).end(m, n).sink(arg=KernelInfo(name=f"gemm_{M}_{N}_{K}"))
  return fxn


def _grad(grad_c: UOp, call: UOp, trans_a: bool, trans_b: bool, has_bias: bool) -> tuple:
  """d op(A) = dC @ op(B).T and d op(B) = op(A).T @ dC, each written in the layout its operand is stored in; d bias =
  dC summed over rows."""
  a, b, bias = Tensor(call.src[1]), Tensor(call.src[2]), Tensor(call.src[4])
  dc = Tensor(grad_c).cast(a.dtype)
  if dc.ndim == 3: dc = dc[0]   # a K-sharded product's (ndev, M, N) partials: each device's gradient is the sum's
  da = gemm(b, dc, trans_a=trans_b, trans_b=True) if trans_a else gemm(dc, b, trans_b=not trans_b)
  db = gemm(dc, a, trans_a=True, trans_b=trans_a) if trans_b else gemm(a, dc, trans_a=not trans_a)
  dbias = dc.float().sum(0).cast(bias.dtype).uop if has_bias else None
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


def gemm(a: Tensor, b: Tensor, trans_a: bool = False, trans_b: bool = False, bias: Tensor | None = None,
         out_dtype=None) -> Tensor:
  """op(A) @ op(B) (+ bias (N,)) for 2-D a, b, in out_dtype (default a's; fp32 accumulation). On several devices the
  kernel runs on each device's pieces (_out_axis); a product sharded along K is summed across devices."""
  out_axis = _out_axis(a, b, trans_a, trans_b)
  if out_axis == "partial" and bias is not None: raise NotImplementedError("gemm: a bias on a K-sharded product")
  M, N, K, *st = strides(prg.local_shape(a), prg.local_shape(b), trans_a, trans_b)
  # custom_kernel's sources are the kernel's arguments in order (tinygrad's CUDA graph passes them so): a, b, c, bias
  # (an unread one-element buffer without one), then Triton's scratch
  dt = out_dtype or a.dtype
  c = prg.empty_partials((M, N), dt, a.device) if out_axis == "partial" else prg.empty_shards((M, N), dt, a.device, out_axis)
  has_bias = bias is not None
  bias = bias.cast(a.dtype).contiguous() if has_bias else Tensor.empty(1, dtype=a.dtype, device=a.device)
  grad = _grad_fxn(trans_a, trans_b, has_bias)
  if prg.on_triton(a):
    fxn = _triton_fxn(M, N, K, *st, has_bias, a.dtype, c.dtype, a.device)
    c = a.contiguous().custom_kernel(b.contiguous(), c, bias, *prg.scratch(a.device), fxn=fxn, grad_fxn=grad)[2]
  else:
    c = a.contiguous().custom_kernel(b.contiguous(), c, bias, fxn=_tinygrad_fxn(M, N, K, *st, has_bias), grad_fxn=grad)[2]
  return prg.partial_sum(c) if out_axis == "partial" else c


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
  """x (..., in) @ weight (out, in).T + bias, as Tensor.linear with a torch-layout weight; the bias is added in the
  GEMM's epilogue (no second pass over the output)."""
  y = gemm(x.reshape(-1, x.shape[-1]), weight, trans_b=True, bias=bias)
  return y.reshape(*x.shape[:-1], weight.shape[0])
