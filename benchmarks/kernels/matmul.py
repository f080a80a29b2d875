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


def _tile(pid, M: tl.constexpr, N: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, GROUP: tl.constexpr):
  """(tile row, tile column) of program pid: programs walk C in groups of GROUP tile-rows, so that they share B's tiles
  in L2."""
  tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
  first_m = (pid // (GROUP * tiles_n)) * GROUP
  rows = min(tiles_m - first_m, GROUP)
  return first_m + (pid % (GROUP * tiles_n)) % rows, (pid % (GROUP * tiles_n)) // rows


def gemm_kernel(a, b, c, bias, aux, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, SAM: tl.constexpr,
                SAK: tl.constexpr, SBK: tl.constexpr, SBN: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                BK: tl.constexpr, GROUP: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
                HAS_BIAS: tl.constexpr, EPILOGUE: tl.constexpr):
  """One (BM, BN) tile of C per program (_tile's order). EVEN_*: the dimension is a multiple of its tile, so its bounds
  masks are compiled out. HAS_BIAS: bias (N,) is added to the fp32 accumulator before the one rounding to C's dtype (a
  linear layer's output in one pass).
  EPILOGUE, after the K loop (one in it made the GEMM 2-3x slower): GELU stores gelu(pre) into C and gelu'(pre) into
  aux (M, N), pre the result rounded to C's dtype (the FFN's up layer); GELU_GRAD multiplies the product by aux (the
  down layer's data gradient through the GELU: a load and a multiply, where computing gelu'(pre) there took 255
  registers, spilled 176 bytes and made the GEMM 1.66x slower than without an epilogue on an H100); NONE leaves aux
  unread."""
  pm, pn = _tile(tl.program_id(0), M, N, BM, BN, GROUP)
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


SPLIT_M, SPLIT_N, SPLIT_K = 1, 2, 3   # parts_gemm_kernel's SPLIT: the dimension its parts make up


def parts_gemm_kernel(a, b, c, bias, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, SAM: tl.constexpr,
                      SAK: tl.constexpr, SBK: tl.constexpr, SBN: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr, GROUP: tl.constexpr, SPLIT: tl.constexpr, SEG: tl.constexpr,
                      PARTS: tl.constexpr, HAS_BIAS: tl.constexpr):
  """gemm_kernel for PARTS products of one shape in one launch (BERT's query, key and value layers): a, b, c and bias
  are tuples of pointers, PARTS long where the operand differs per part, one long where it is shared.
    SPLIT_N  C_i = A @ op(B_i) + bias_i   the parts side by side along N   forward        x @ W_i.T
    SPLIT_M  C_i = op(A_i) @ B            stacked along M                  weight grads   dy_i.T @ x
    SPLIT_K  C = sum_i op(A_i) @ op(B_i)  one after another along K        input grad     sum_i dy_i @ W_i
  M, N, K are the whole product's, SEG a part's extent along SPLIT; the strides are a part's. Every extent is a multiple
  of its tile (no masks), SEG too."""
  pm, pn = _tile(tl.program_id(0), M, N, BM, BN, GROUP)
  rm = pm * BM + tl.arange(0, BM)
  rn = pn * BN + tl.arange(0, BN)
  rk = tl.arange(0, BK)
  part = 0   # of the program's tile (SPLIT_M, SPLIT_N)
  if SPLIT == 1:
    part = pm * BM // SEG
    rm -= part * SEG
  if SPLIT == 2:
    part = pn * BN // SEG
    rn -= part * SEG
  acc = tl.zeros((BM, BN), dtype=tl.float32)
  if SPLIT == 3:   # the part changes along the K loop: both pointers are picked anew each step
    for k in range(0, K // BK):
      kp = k * BK // SEG
      kk = k * BK - kp * SEG + rk
      x = tl.load(prg.pick(a, kp, PARTS) + rm[:, None] * SAM + kk[None, :] * SAK)
      y = tl.load(prg.pick(b, kp, PARTS) + kk[:, None] * SBK + rn[None, :] * SBN)
      acc = tl.dot(x, y, acc)
  else:
    a_ptr = prg.pick(a, part, PARTS if SPLIT == 1 else 1) + rm[:, None] * SAM + rk[None, :] * SAK
    b_ptr = prg.pick(b, part, PARTS if SPLIT == 2 else 1) + rk[:, None] * SBK + rn[None, :] * SBN
    for k in range(0, K // BK):
      acc = tl.dot(tl.load(a_ptr), tl.load(b_ptr), acc)
      a_ptr += BK * SAK
      b_ptr += BK * SBK
  if HAS_BIAS: acc += tl.load(prg.pick(bias, part, PARTS) + rn)[None, :].to(tl.float32)
  width = SEG if SPLIT == 2 else N   # C's row length: a part's along N
  out = prg.pick(c, part, 1 if SPLIT == 3 else PARTS) + rm[:, None] * width + rn[None, :]
  tl.store(out, acc.to(out.dtype.element_ty))


if triton is not None:   # the helper is jitted first: the kernels call it as a Triton function
  _tile = triton.jit(_tile)
  compiled_kernel, compiled_parts = triton.jit(gemm_kernel), triton.jit(parts_gemm_kernel)


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
# (lab/scripts/bench_gemm.py; docs/perf/2026-12-04_gemm_triton_1xH200.jsonl), except the 1024 x 1024 weight gradient:
# that table timed 8 GEMMs in one CUDA graph, where independent ones overlap, and its 128x256 (32 programs) takes 0.332 ms
# alone on an H100 at BS 64 against 0.171 ms at 64x128 (docs/perf/2026-12-07_gemm_triton_serial_bs64_h100.jsonl,
# docs/perf/2026-12-07_gemm_overlap_h100.jsonl); other shapes: tile()'s rule
TUNED: dict[tuple[int, int, int, bool, bool], tuple[int, int, int, int, int]] = {
  (49152, 1024, 1024, False, True): (128, 256, 64, 8, 3),   # qkv/out fwd: 553.6 TFLOP/s
  (49152, 1024, 1024, False, False): (128, 256, 64, 8, 3),   # qkv/out dgrad: 565.4 TFLOP/s
  (1024, 1024, 49152, True, False): (64, 128, 64, 4, 4),    # out wgrad: 402.0 TFLOP/s alone (H100, BS 64)
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
    # an unread bias before the read aux: tinygrad 0.14 then passes a threaded CPU kernel's thread id in the wrong
    # argument (a segfault at 256x256x64), so that kernel runs without hand-coded optimizations
    opts = () if epilogue == GELU_GRAD and not has_bias else None
    return UOp.group(*stores).end(m, n).sink(arg=KernelInfo(name=f"gemm_{M}_{N}_{K}", opts_to_apply=opts))
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


def _empty_c(shape: tuple[int, int], dtype, device, out_axis) -> Tensor:
  """A product's output laid out by _out_axis: per-device partials for "partial", else shards along out_axis."""
  if out_axis == "partial": return prg.empty_partials(shape, dtype, device)
  return prg.empty_shards(shape, dtype, device, out_axis)


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
  c = _empty_c((M, N), dt, a.device, out_axis)
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


# ---- linear layers of one shape on one input (BERT's query, key and value): one launch each way for all of them ----

def _parts_triton_fxn(split: int, parts: int, M, N, K, seg, sam, sak, sbk, sbn, counts: tuple[int, int, int, int],
                      has_bias: bool, dtype, device):
  """parts_gemm_kernel for tuples of counts (a, b, c, bias) pointers."""
  BM, BN, BK, warps, stages = tile(M, N, K, trans_a=sam == 1, trans_b=sbk == 1)
  ty = prg.POINTER[dtype]
  k = prg.compile_kernel(compiled_parts, tuple((name, (ty,) * n) for name, n in zip(("a", "b", "c", "bias"), counts)),
                         (("M", M), ("N", N), ("K", K), ("SAM", sam), ("SAK", sak), ("SBK", sbk), ("SBN", sbn), ("BM", BM),
                          ("BN", BN), ("BK", BK), ("GROUP", 8), ("SPLIT", split), ("SEG", seg), ("PARTS", parts),
                          ("HAS_BIAS", has_bias)), warps, stages, prg.cuda_arch(device))
  first_c = counts[0] + counts[1]
  outs = tuple(range(first_c, first_c + counts[2]))
  ins = tuple(i for i in range(sum(counts[:2 + has_bias * 2])) if i not in outs)
  nbytes = (M * K + K * N + M * N) * dtype.itemsize
  return lambda *params: prg.program(k, list(params), -(-M // BM) * -(-N // BN), outs=outs, ins=ins, device=device,
                                     flops=2 * M * N * K, nbytes=nbytes)


def _parts_tinygrad_fxn(split: int, parts: int, M1, N1, K1, sam, sak, sbk, sbn, counts: tuple[int, int, int, int],
                        has_bias: bool):
  """The same products as one tinygrad kernel (no Triton: CPU, tests): C_i = op(A_i) @ op(B_i) of each part, summed
  into one C for SPLIT_K; a part's shapes and strides."""
  def fxn(*bufs: UOp) -> UOp:
    starts = [sum(counts[:i]) for i in range(4)]
    a, b, c, bias = ([u.flatten() for u in bufs[s:s + n]] for s, n in zip(starts, counts))
    m, n = UOp.range(M1, 0), UOp.range(N1, 1)
    accs = []
    for i in range(parts):
      k = UOp.range(K1, 2 + i, AxisType.REDUCE)
      prod = a[min(i, len(a) - 1)][m * sam + k * sak].cast(dtypes.float32) * \
        b[min(i, len(b) - 1)][k * sbk + n * sbn].cast(dtypes.float32)
      accs.append(prod.reduce(k, arg=Ops.ADD) + (bias[i][n].cast(dtypes.float32) if has_bias else 0.0))
    if split == SPLIT_K: accs = [functools.reduce(lambda x, y: x + y, accs)]
    stores = [ci[m * N1 + n].store(acc.cast(ci.dtype)) for ci, acc in zip(c, accs)]
    return UOp.group(*stores).end(m, n).sink(arg=KernelInfo(name=f"parts_gemm_{split}_{M1}_{N1}_{K1}"))
  return fxn


def parts_dims(split: int, parts: int, shape_a, shape_b, trans_a: bool, trans_b: bool) -> tuple:
  """((M, N, K) of the whole product, SEG, (M1, N1, K1) of a part, (SAM, SAK, SBK, SBN)) for parts of operands of
  shape_a and shape_b as stored."""
  M1, N1, K1, *st = strides(shape_a, shape_b, trans_a, trans_b)
  whole = tuple(d * (parts if split == s else 1) for d, s in ((M1, SPLIT_M), (N1, SPLIT_N), (K1, SPLIT_K)))
  return whole, {SPLIT_M: M1, SPLIT_N: N1, SPLIT_K: K1}[split], (M1, N1, K1), tuple(st)


def _parts_call(split: int, As: list[Tensor], Bs: list[Tensor], trans_a: bool, trans_b: bool,
                biases: list[Tensor] | None = None, grad=None) -> list[Tensor]:
  """The C's of parts_gemm_kernel (one for SPLIT_K) of parts op(A_i) @ op(B_i) of one shape, a list of one where an
  operand is shared, with grad function grad. On several devices as gemm: C laid out by _out_axis."""
  parts = max(len(As), len(Bs))
  (M, N, K), seg, (M1, N1, K1), st = parts_dims(split, parts, prg.local_shape(As[0]), prg.local_shape(Bs[0]), trans_a,
                                                trans_b)
  out_axis, dt, dev = _out_axis(As[0], Bs[0], trans_a, trans_b), As[0].dtype, As[0].device
  cs = [_empty_c((M1, N1), dt, dev, out_axis) for _ in range(1 if split == SPLIT_K else parts)]
  has_bias = biases is not None
  bs = [t.cast(dt).contiguous() for t in biases] if has_bias else [Tensor.empty(1, dtype=dt, device=dev)]
  srcs = [*(prg.contiguous(t) for t in (*As, *Bs)), *cs, *bs]
  counts = (len(As), len(Bs), len(cs), len(bs))
  if prg.on_triton(As[0]):
    fxn = _parts_triton_fxn(split, parts, M, N, K, seg, *st, counts, has_bias, dt, dev)
    out = srcs[0].custom_kernel(*srcs[1:], *prg.scratch(dev), fxn=fxn, grad_fxn=grad)
  else:
    out = srcs[0].custom_kernel(*srcs[1:], fxn=_parts_tinygrad_fxn(split, parts, M1, N1, K1, *st, counts, has_bias),
                                grad_fxn=grad)
  cs = out[counts[0] + counts[1]:][:len(cs)]
  return [prg.partial_sum(c) for c in cs] if out_axis == "partial" else cs


def _linears_grad(*grads: UOp, call: UOp | None = None, parts: int) -> tuple:
  """The linears call's (sources x, W_i..., C_i..., b_i...[, scratch]) gradients: d x = sum_i dC_i @ W_i in one SPLIT_K
  launch, d W_i = dC_i.T @ x in one SPLIT_M launch, d b_i = dC_i's column sums. tinygrad passes the outputs' gradients
  in slot order, the call last (by keyword when there are several), and none for an output that got none."""
  if call is None: *grads, call = grads
  if len(grads) != parts:   # tinygrad drops the slots of outputs without one: which gradient is whose is lost
    raise NotImplementedError(f"matmul.linears: all {parts} outputs need a gradient, {len(grads)} got one")
  x, ws = Tensor(call.src[1]), [Tensor(call.src[2 + i]) for i in range(parts)]
  bs = [Tensor(call.src[2 + 2 * parts + i]) for i in range(parts)]
  dcs = [Tensor(g).cast(x.dtype) for g in grads]
  (dx,) = _parts_call(SPLIT_K, dcs, ws, False, False)
  dws = _parts_call(SPLIT_M, dcs, [x], True, False)
  dbs = [column_sum(Tensor(g)).cast(b.dtype) for g, b in zip(grads, bs)]
  rest = (None,) * (len(call.src) - 2 - 3 * parts)   # Triton's scratch
  return (dx.uop, *(t.uop for t in dws), *(None,) * parts, *(t.uop for t in dbs), *rest)


@functools.cache   # one per count: tinygrad's schedule cache keys on id(grad_fxn) (_grad_fxn says why)
def _linears_grad_fxn(parts: int): return functools.partial(_linears_grad, parts=parts)


def _parts_fit(M: int, N: int, K: int, seg_axis: str, seg: int, trans_a: bool, trans_b: bool) -> bool:
  """The whole product tiles evenly, and so does a part along its split (parts_gemm_kernel has no masks)."""
  BM, BN, BK, *_ = tile(M, N, K, trans_a, trans_b)
  return M % BM == 0 and N % BN == 0 and K % BK == 0 and seg % {"M": BM, "N": BN, "K": BK}[seg_axis] == 0


def linears(x: Tensor, weights: list[Tensor], biases: list[Tensor]) -> list[Tensor]:
  """[linear(x, w, b) for w, b in zip(weights, biases)] for weights of one shape (out, in): each way one launch for all
  of them (forward, input gradient summed over the layers, weight gradients), where BERT's three (tokens, 1024, 1024)
  GEMMs filled an H100 with at most 128 programs each and a fourth kernel summed the input gradients (BS 64 step replay
  197.1 -> 192.8 ms: docs/perf/2026-12-07_bert_step_profile_linears_bs64_h100.jsonl). Each output is (..., out) in its
  own buffer (BERT's attention reads q, k and v as they are). Every output must get a gradient. On CUDA shapes that do
  not tile evenly take linear() per layer."""
  x2, (O, I), n = x.reshape(-1, x.shape[-1]), weights[0].shape, len(weights)
  T = prg.local_shape(x2)[0]
  if prg.on_triton(x) and not (_parts_fit(T, n * O, I, "N", O, False, True) and _parts_fit(T, I, n * O, "K", O, False, False)
                               and _parts_fit(n * O, I, T, "M", O, True, False)):
    return [linear(x, w, b) for w, b in zip(weights, biases)]
  ys = _parts_call(SPLIT_N, [x2], list(weights), False, True, list(biases), _linears_grad_fxn(n))
  return [y.reshape(*x.shape[:-1], O) for y in ys]


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
