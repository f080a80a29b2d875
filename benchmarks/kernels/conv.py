"""Convolutions for KERNELS=triton: ResNet-50's conv2d (groups 1, no dilation) and both its gradients as implicit GEMMs.

x (N, C, H, W), w (K, C, R, S), y (N, K, P, Q) with P = (H + 2 PAD - R) // ST + 1 (Q likewise):

  forward  y  = conv(x, w)     GEMM (N*P*Q pixels) x (K channels), reducing over (c, r, s)
  dgrad    dx = conv^T(dy, w)  GEMM (N*H*W pixels) x (C channels), reducing over (k, r, s); one launch per phase
                               (h % ST, w % ST) of the ST*ST, whose taps are known, so no zero is multiplied; w read
                               as wt (R, S, K, C), a copy made per step, so a tile's C channels are adjacent
  wgrad    dw = dy (x) x       GEMM (K) x (C*R*S), reducing over N*P*Q, split SPLIT ways (fp32 partials summed after)

Layout: NCHW, the model's own, read and written in place, so no transpose enters the step (every tile is a gather
through constexpr shapes either way). No operand is copied into an im2col matrix: each kernel computes the pixel and
tap of every element of its tiles. Every shape, stride and tile is a compile-time constant (one cubin per conv shape);
fp16 or bf16 operands, fp32 accumulation, one rounding.

`conv2d` is differentiable: its grad function calls the dgrad and wgrad kernels, so loss.backward() needs no change.
On a device without Triton (CPU, in tests) the same calls run tinygrad kernels with the same arguments, so the
custom_kernel and grad wiring is tested everywhere; the Triton kernels themselves are tested by Triton's interpreter
(tests/unit/test_kernels_conv.py).
"""
from __future__ import annotations
import functools
from dataclasses import dataclass

from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import AxisType, KernelInfo, Ops, UOp

from tinyperf.benchmarks.kernels import conv_tiles, program as prg
from tinyperf.benchmarks.kernels.matmul import SMS   # the H200's multiprocessors, which the tile rules fill

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: the Triton path is never taken there
  triton = None


def _tile_ids(pid, tiles_m, tiles_n, GROUP: tl.constexpr):
  """(tile row, tile column) of program pid, walking tile rows in groups of GROUP so neighbours share B's tiles in L2."""
  first_m = (pid // (GROUP * tiles_n)) * GROUP
  rows = min(tiles_m - first_m, GROUP)
  return first_m + (pid % (GROUP * tiles_n)) % rows, (pid % (GROUP * tiles_n)) // rows


def conv_fwd_kernel(x, w, y, N: tl.constexpr, C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, K: tl.constexpr,
                    P: tl.constexpr, Q: tl.constexpr, R: tl.constexpr, S: tl.constexpr, ST: tl.constexpr,
                    PAD: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
  """One (BM pixels, BN output channels) tile of y per program; the reduction index kk is (c, r, s) flattened, the
  order w is stored in, so w's tile is a plain (K, C*R*S) GEMM operand."""
  M: tl.constexpr = N * P * Q
  CRS: tl.constexpr = C * R * S
  pm, pn = _tile_ids(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(K, BN), GROUP)
  rm = pm * BM + tl.arange(0, BM)
  rn = pn * BN + tl.arange(0, BN)
  img, pq = rm // (P * Q), rm % (P * Q)
  hb, wb = (pq // Q) * ST - PAD, (pq % Q) * ST - PAD                 # the input pixel of tap (0, 0)
  row = img * (C * H * W) + hb * W + wb
  acc = tl.zeros((BM, BN), dtype=tl.float32)
  for kb in range(0, tl.cdiv(CRS, BK)):
    kk = kb * BK + tl.arange(0, BK)
    c, r, s = kk // (R * S), (kk // S) % R, kk % S
    mask = (rm < M)[:, None] & (kk < CRS)[None, :]
    if PAD > 0:   # without padding every tap of an output pixel lies inside the image
      ih, iw = hb[:, None] + r[None, :], wb[:, None] + s[None, :]
      mask = mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    a = tl.load(x + row[:, None] + (c * (H * W) + r * W + s)[None, :], mask=mask, other=0.0)
    b = tl.load(w + rn[None, :] * CRS + kk[:, None], mask=(kk < CRS)[:, None] & (rn < K)[None, :], other=0.0)
    acc = tl.dot(a, b, acc)
  out = y + (img * (K * P * Q) + pq)[:, None] + rn[None, :] * (P * Q)
  tl.store(out, acc.to(y.dtype.element_ty), mask=(rm < M)[:, None] & (rn < K)[None, :])


def conv_dgrad_kernel(dy, wt, dx, N: tl.constexpr, C: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
                      K: tl.constexpr, P: tl.constexpr, Q: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                      ST: tl.constexpr, PAD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, BM: tl.constexpr,
                      BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
  """One (BM pixels, BN input channels) tile of dx per program, over the pixels of phase (h % ST, w % ST) = (PH, PW)
  alone (one launch per phase). dx[h] takes dy[p] through tap r when h = p ST - PAD + r: in phase PH those are the
  taps r = R0 + i ST, R0 = (PH + PAD) % ST, with p = h // ST + (PH + PAD - R0) // ST - i. The reduction index kk is
  (tap (i, j), channel k), k fastest. A phase without taps (1x1, ST 2, odd rows) stores zeros."""
  HP: tl.constexpr = (H - PH + ST - 1) // ST   # the phase's rows and columns
  WP: tl.constexpr = (W - PW + ST - 1) // ST
  M: tl.constexpr = N * HP * WP
  R0: tl.constexpr = (PH + PAD) % ST
  S0: tl.constexpr = (PW + PAD) % ST
  RV: tl.constexpr = (R - R0 + ST - 1) // ST   # the phase's taps, 0 when R0 >= R
  SV: tl.constexpr = (S - S0 + ST - 1) // ST
  TK: tl.constexpr = RV * SV * K
  pm, pn = _tile_ids(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(C, BN), GROUP)
  rm = pm * BM + tl.arange(0, BM)
  rn = pn * BN + tl.arange(0, BN)
  img, hw = rm // (HP * WP), rm % (HP * WP)
  hh, ww = hw // WP, hw % WP
  pb, qb = hh + (PH + PAD - R0) // ST, ww + (PW + PAD - S0) // ST   # the dy pixel of the phase's tap (0, 0)
  row = img * (K * P * Q) + pb * Q + qb
  acc = tl.zeros((BM, BN), dtype=tl.float32)
  for kb in range(0, tl.cdiv(TK, BK)):
    kk = kb * BK + tl.arange(0, BK)
    tap, k = kk // K, kk % K
    i, j = tap // SV, tap % SV
    p, q = pb[:, None] - i[None, :], qb[:, None] - j[None, :]
    mask = (rm < M)[:, None] & (kk < TK)[None, :] & (p >= 0) & (p < P) & (q >= 0) & (q < Q)
    a = tl.load(dy + row[:, None] + (k * (P * Q) - i * Q - j)[None, :], mask=mask, other=0.0)
    wk = ((R0 + i * ST) * S + S0 + j * ST) * (K * C) + k * C          # wt[r, s, k, 0] of the phase's tap (i, j)
    b = tl.load(wt + wk[:, None] + rn[None, :], mask=(kk < TK)[:, None] & (rn < C)[None, :], other=0.0)
    acc = tl.dot(a, b, acc)
  out = dx + (img * (C * H * W) + (hh * ST + PH) * W + ww * ST + PW)[:, None] + rn[None, :] * (H * W)
  tl.store(out, acc.to(dx.dtype.element_ty), mask=(rm < M)[:, None] & (rn < C)[None, :])


def conv_wgrad_kernel(dy, x, dw, N: tl.constexpr, C: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
                      K: tl.constexpr, P: tl.constexpr, Q: tl.constexpr, R: tl.constexpr, S: tl.constexpr,
                      ST: tl.constexpr, PAD: tl.constexpr, SPLIT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                      BK: tl.constexpr, GROUP: tl.constexpr):
  """One (BM output channels, BN (c, r, s)) tile of the fp32 partial dw[split] per program, reducing over its share of
  the N*P*Q output pixels: a weight gradient reduces over far more than it has outputs, so SPLIT programs share it."""
  L: tl.constexpr = N * P * Q
  CRS: tl.constexpr = C * R * S
  tiles_m, tiles_n = tl.cdiv(K, BM), tl.cdiv(CRS, BN)
  pid = tl.program_id(0)
  split = pid // (tiles_m * tiles_n)
  pm, pn = _tile_ids(pid % (tiles_m * tiles_n), tiles_m, tiles_n, GROUP)
  rm = pm * BM + tl.arange(0, BM)
  rn = pn * BN + tl.arange(0, BN)
  c, r, s = rn // (R * S), (rn // S) % R, rn % S
  col = c * (H * W) + r * W + s
  blocks: tl.constexpr = (L + BK - 1) // BK
  per_split: tl.constexpr = (blocks + SPLIT - 1) // SPLIT
  acc = tl.zeros((BM, BN), dtype=tl.float32)
  for kb in range(0, per_split):   # the last split's blocks past the end are masked
    l = (split * per_split + kb) * BK + tl.arange(0, BK)
    img, pq = l // (P * Q), l % (P * Q)
    hb, wb = (pq // Q) * ST - PAD, (pq % Q) * ST - PAD
    a = tl.load(dy + (img * (K * P * Q) + pq)[None, :] + rm[:, None] * (P * Q),
                mask=(rm < K)[:, None] & (l < L)[None, :], other=0.0)
    mask = (l < L)[:, None] & (rn < CRS)[None, :]
    if PAD > 0:
      ih, iw = hb[:, None] + r[None, :], wb[:, None] + s[None, :]
      mask = mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    b = tl.load(x + (img * (C * H * W) + hb * W + wb)[:, None] + col[None, :], mask=mask, other=0.0)
    acc = tl.dot(a, b, acc)
  tl.store(dw + split * (K * CRS) + rm[:, None] * CRS + rn[None, :], acc, mask=(rm < K)[:, None] & (rn < CRS)[None, :])


if triton is not None:
  _tile_ids = triton.jit(_tile_ids)
  compiled = {"fwd": triton.jit(conv_fwd_kernel), "dgrad": triton.jit(conv_dgrad_kernel),
              "wgrad": triton.jit(conv_wgrad_kernel)}


@dataclass(frozen=True)
class Shape:
  """One conv: input (N, C, H, W), weight (K, C, R, S), stride ST, zero padding PAD on every side."""
  N: int
  C: int
  H: int
  W: int
  K: int
  R: int
  S: int
  ST: int
  PAD: int

  @property
  def P(self) -> int: return (self.H + 2 * self.PAD - self.R) // self.ST + 1
  @property
  def Q(self) -> int: return (self.W + 2 * self.PAD - self.S) // self.ST + 1
  @property
  def flops(self) -> int: return 2 * self.N * self.K * self.P * self.Q * self.C * self.R * self.S
  @property
  def phases(self) -> list[tuple[int, int]]: return [(ph, pw) for ph in range(self.ST) for pw in range(self.ST)]

  def gemm(self, kind: str, phase: tuple[int, int] = (0, 0)) -> tuple[int, int, int]:
    """(M, N, K) of the kind's GEMM; dgrad: of one phase, all its taps counted."""
    N, C, K, RS = self.N, self.C, self.K, self.R * self.S
    if kind == "fwd": return N * self.P * self.Q, K, C * RS
    if kind == "dgrad": return N * -(-(self.H - phase[0]) // self.ST) * -(-(self.W - phase[1]) // self.ST), C, K * RS
    return K, C * RS, N * self.P * self.Q

  def nbytes(self, itemsize: int) -> int:
    return (self.N * self.C * self.H * self.W + self.K * self.C * self.R * self.S + self.N * self.K * self.P * self.Q) * itemsize


# (BM, BN, BK, warps, stages), largest first; tile() takes the first that fills the GPU. First guesses: the loads are
# gathers (no TMA), so the tiles are smaller than the GEMM's; lab/scripts/bench_conv.py measures them all
TILES = ((128, 128, 64, 8, 3), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4), (64, 64, 32, 4, 4))
# (kind, Shape) -> the tile measured fastest (lab/scripts/bench_conv.py, the table in conv_tiles.py); others: tile()'s rule
TUNED: dict[tuple[str, Shape], tuple[int, int, int, int, int]] = {(kind, Shape(*shape)): t for (kind, shape), t in
                                                                 conv_tiles.TUNED.items()}


def tile(kind: str, s: Shape) -> tuple[int, int, int, int, int]:
  """The measured tile, else the largest that the GEMM fills (BM <= M, BN <= N where it can) and that gives 90 % of the
  multiprocessors a program (dgrad: per phase); wgrad the largest, since its split fills the GPU."""
  if (t := TUNED.get((kind, s))): return t
  M, N, _ = s.gemm(kind)
  fits = [t for t in TILES if t[0] <= max(M, TILES[-1][0]) and t[1] <= max(N, TILES[-1][1])]
  if kind == "wgrad": return fits[0]
  for t in fits:
    if -(-M // t[0]) * -(-N // t[1]) >= 0.9 * SMS: return t
  return fits[-1]


def split(s: Shape, BM: int, BN: int, BK: int) -> int:
  """wgrad's SPLIT: enough programs for two waves, each reducing at least 8 blocks of BK pixels."""
  M, N, L = s.gemm("wgrad")
  tiles, blocks = -(-M // BM) * -(-N // BN), -(-L // BK)
  return max(1, min(-(-2 * SMS // tiles), blocks // 8))


def launch(kind: str, s: Shape, t: tuple[int, ...], n_split: int | None = None,
           phase: tuple[int, int] = (0, 0)) -> tuple[dict, int]:
  """The kernel's constexprs (in its argument order) and grid for tile t = (BM, BN, BK, ...): what the CUDA path
  compiles and launches and what the interpreter tests run. n_split: wgrad's SPLIT, else split()'s; phase: dgrad's."""
  BM, BN, BK = t[:3]
  M, N, _ = s.gemm(kind, phase)
  c = {k: getattr(s, k) for k in ("N", "C", "H", "W", "K", "P", "Q", "R", "S", "ST", "PAD")}
  grid = -(-M // BM) * -(-N // BN)
  if kind == "dgrad": c |= {"PH": phase[0], "PW": phase[1]}
  if kind == "wgrad":
    c["SPLIT"] = n_split or split(s, BM, BN, BK)
    grid *= c["SPLIT"]
  return c | {"BM": BM, "BN": BN, "BK": BK, "GROUP": 8}, grid


# ---- the Triton path (CUDA) ----

POINTERS = {"fwd": ("x", "w", "y"), "dgrad": ("dy", "wt", "dx"), "wgrad": ("dy", "x", "dw")}


def compile_conv(kind: str, s: Shape, ty: str, arch: int, phase: tuple[int, int] = (0, 0)) -> tuple[prg.Compiled, int]:
  """The cubin of one kernel for sm_<arch> at its tile, with its grid; ty the operands' pointer type ("*fp16")."""
  t = tile(kind, s)
  consts, grid = launch(kind, s, t, phase=phase)
  sig = tuple((p, "*fp32" if p == "dw" else ty) for p in POINTERS[kind])
  return prg.compile_kernel(compiled[kind], sig, tuple(consts.items()), t[3], t[4], arch), grid


def _triton_fxn(kind: str, s: Shape, dtype, device: str | tuple[str, ...], phase: tuple[int, int]):
  ty = {dtypes.half: "*fp16", dtypes.bfloat16: "*bf16"}.get(dtype)
  if ty is None: raise NotImplementedError(f"conv2d: the Triton kernels take fp16 or bf16, not {dtype}")
  k, grid = compile_conv(kind, s, ty, prg.cuda_arch(device), phase)
  flops = s.flops // len(s.phases) if kind == "dgrad" else s.flops   # the estimate only: phases differ in taps
  return lambda a, b, c, s0, s1: prg.program(k, [a, b, c, s0, s1], grid, outs=(2,), ins=(0, 1), device=device,
                                             flops=flops, nbytes=s.nbytes(dtype.itemsize))


# ---- the tinygrad path (CPU, tests): the same arguments, one tinygrad kernel each ----

def _ranges(*sizes: int, start: int = 0, reduce: bool = False) -> list[UOp]:
  return [UOp.range(n, start + i, AxisType.REDUCE if reduce else AxisType.LOOP) for i, n in enumerate(sizes)]


def _inside(ih: UOp, iw: UOp, H: int, W: int) -> UOp: return (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)


def _load(buf: UOp, idx: UOp, ok: UOp) -> UOp:
  """buf[idx] in fp32 where ok, else 0. The where is needed: tinygrad drops a load's gate when idx stays inside the
  buffer, and a pixel outside the image (p = P, a column -1) often maps inside it."""
  return ok.where(buf.flatten()[idx.valid(ok)].cast(dtypes.float32), 0.0)


def _tinygrad_fxn(kind: str, s: Shape, phase: tuple[int, int]):
  N, C, H, W, K, P, Q, R, S, ST, PAD = (getattr(s, k) for k in ("N", "C", "H", "W", "K", "P", "Q", "R", "S", "ST", "PAD"))
  f32 = dtypes.float32
  def fwd(x: UOp, w: UOp, y: UOp) -> UOp:
    n, k, p, q = _ranges(N, K, P, Q)
    c, r, t = _ranges(C, R, S, start=4, reduce=True)
    ih, iw = p * ST - PAD + r, q * ST - PAD + t
    xv = _load(x, ((n * C + c) * H + ih) * W + iw, _inside(ih, iw, H, W))
    acc = (xv * w.flatten()[((k * C + c) * R + r) * S + t].cast(f32)).reduce(c, r, t, arg=Ops.ADD)
    return y.flatten()[((n * K + k) * P + p) * Q + q].store(acc.cast(y.dtype)).end(n, k, p, q)
  def dgrad(dy: UOp, w: UOp, dx: UOp) -> UOp:   # the phase's pixels and taps only, as the Triton kernel; w is wt
    (ph, pw), HP, WP = phase, -(-(H - phase[0]) // ST), -(-(W - phase[1]) // ST)
    R0, S0 = (ph + PAD) % ST, (pw + PAD) % ST
    RV, SV = -(-(R - R0) // ST), -(-(S - S0) // ST)
    n, c, hh, ww = _ranges(N, C, HP, WP)
    if RV * SV == 0: acc = UOp.const(0.0, f32)
    else:
      k, i, j = _ranges(K, RV, SV, start=4, reduce=True)
      p, q = hh + (ph + PAD - R0) // ST - i, ww + (pw + PAD - S0) // ST - j
      dyv = _load(dy, ((n * K + k) * P + p) * Q + q, _inside(p, q, P, Q))
      wv = w.flatten()[(((R0 + i * ST) * S + S0 + j * ST) * K + k) * C + c].cast(f32)   # wt (R, S, K, C)
      acc = (dyv * wv).reduce(k, i, j, arg=Ops.ADD)
    return dx.flatten()[((n * C + c) * H + hh * ST + ph) * W + ww * ST + pw].store(acc.cast(dx.dtype)).end(n, c, hh, ww)
  def wgrad(dy: UOp, x: UOp, dw: UOp) -> UOp:   # SPLIT 1: dw is (1, K, C*R*S)
    k, c, r, t = _ranges(K, C, R, S)
    n, p, q = _ranges(N, P, Q, start=4, reduce=True)
    ih, iw = p * ST - PAD + r, q * ST - PAD + t
    xv = _load(x, ((n * C + c) * H + ih) * W + iw, _inside(ih, iw, H, W))
    acc = (dy.flatten()[((n * K + k) * P + p) * Q + q].cast(f32) * xv).reduce(n, p, q, arg=Ops.ADD)
    return dw.flatten()[((k * C + c) * R + r) * S + t].store(acc).end(k, c, r, t)
  body = {"fwd": fwd, "dgrad": dgrad, "wgrad": wgrad}[kind]
  name = f"conv_{kind}_{N}_{C}_{H}_{K}_{R}_{ST}" + (f"_{phase[0]}{phase[1]}" if kind == "dgrad" else "")
  return lambda a, b, c: body(a, b, c).sink(arg=KernelInfo(name=name))


# ---- the differentiable call ----


def _call(kind: str, s: Shape, a: Tensor, b: Tensor, out: Tensor, grad_fxn=None, phase: tuple[int, int] = (0, 0)):
  """custom_kernel over the kernel's arguments in order (a, b, out, then Triton's two scratch buffers); returns out."""
  if prg.on_triton(a):
    fxn = _triton_fxn(kind, s, a.dtype, a.device, phase)
    return prg.contiguous(a).custom_kernel(prg.contiguous(b), out, *prg.scratch(a.device), fxn=fxn, grad_fxn=grad_fxn)[2]
  return prg.contiguous(a).custom_kernel(prg.contiguous(b), out, fxn=_tinygrad_fxn(kind, s, phase), grad_fxn=grad_fxn)[2]


def dgrad(dy: Tensor, w: Tensor, s: Shape) -> Tensor:
  """dx (N, C, H, W) of y = conv(x, w) from dy (N, K, P, Q), in dy's dtype: one kernel per phase, each writing its
  pixels of the one buffer. s: one device's shapes."""
  dx = prg.empty_shards((s.N, s.C, s.H, s.W), dy.dtype, dy.device, prg.batch_axis(dy))
  wt = w.permute(2, 3, 0, 1).contiguous()   # (R, S, K, C): read along C, as the GEMM's N, not with stride R*S
  for phase in s.phases: dx = _call("dgrad", s, dy, wt, dx, phase=phase)
  return dx


def wgrad(dy: Tensor, x: Tensor, s: Shape) -> Tensor:
  """dw (K, C, R, S) of y = conv(x, w) from dy and x, in x's dtype: the fp32 partials of the split (and, with the batch
  sharded, of each device), summed."""
  n_split = launch("wgrad", s, tile("wgrad", s))[0]["SPLIT"] if prg.on_triton(dy) else 1
  shape = (n_split, s.K, s.C * s.R * s.S)
  if prg.batch_axis(dy) is None: part = Tensor.empty(*shape, dtype=dtypes.float32, device=dy.device)
  else: part = prg.empty_partials(shape, dtypes.float32, dy.device)
  part = _call("wgrad", s, dy, x, part)
  if prg.batch_axis(dy) is not None: part = prg.partial_sum(part)
  return part.sum(0).cast(x.dtype).reshape(s.K, s.C, s.R, s.S)


def _grad(grad_y: UOp, call: UOp, s: Shape) -> tuple:
  x, w = Tensor(call.src[1]), Tensor(call.src[2])
  dy = prg.contiguous(Tensor(grad_y).cast(x.dtype))
  return (dgrad(dy, w, s).uop, wgrad(dy, x, s).uop) + (None,) * (len(call.src) - 3)


def conv2d(x: Tensor, w: Tensor, stride: int = 1, padding: int = 0) -> Tensor:
  """x.conv2d(w, stride=stride, padding=padding) for x (N, C, H, W) and w (K, C, R, S), in x's dtype; no bias, groups 1,
  no dilation. On several devices x is sharded on the batch (or replicated) and w replicated: each device convolves
  its images."""
  if x.ndim != 4 or w.ndim != 4 or x.shape[1] != w.shape[1]:
    raise ValueError(f"conv2d: x {x.shape} and w {w.shape} are not (N, C, H, W) and (K, C, R, S)")
  if isinstance(x.device, tuple) and (x.uop.axis not in (None, 0) or w.uop.axis is not None):
    raise NotImplementedError(f"conv2d: x sharded on axis {x.uop.axis}, w on {w.uop.axis}; x takes the batch axis, w none")
  s = Shape(*prg.local_shape(x), w.shape[0], *w.shape[2:], stride, padding)
  if s.P < 1 or s.Q < 1: raise ValueError(f"conv2d: a {s.R}x{s.S} kernel does not fit {s.H}x{s.W} with padding {padding}")
  if max(s.N * s.C * s.H * s.W, s.N * s.K * s.P * s.Q) >= 2 ** 31:
    raise ValueError(f"conv2d: {s} has tensors of 2^31 elements or more, past the kernels' int32 offsets")
  y = prg.empty_shards((s.N, s.K, s.P, s.Q), x.dtype, x.device, prg.batch_axis(x))
  return _call("fwd", s, x, w.cast(x.dtype), y, grad_fxn=functools.partial(_grad, s=s))
