"""Training-mode BatchNorm with the residual add and ReLU that follow it, for ResNet-50 under KERNELS=triton:
relu(bn(x) + residual) in two forward and two backward kernels, each reading its tensors once.

x (N, C, H, W), statistics per channel over (N, H, W) in fp32, weight and bias fp32 (the model's master weights):

  stats       mean and biased variance; each program (channel c, its share of the images) keeps a running mean and
              M2 per lane (Welford), combined across lanes (Chan) into one (mean, M2) partial; tinygrad combines the
              SPLIT partials (equal counts)
  apply       y = [relu]((x - mean) * rstd * weight + bias [+ residual]), one rounding to x's dtype
  bwd sums    per (channel, share): sum dz and sum dz (x - mean), where dz = dy * (y > 0) with ReLU, else dy
  bwd apply   dx = weight rstd (dz - sum dz / M - (x - mean) rstd^2 sum dz (x - mean) / M), M = N H W;
              d residual = dz; d weight = rstd sum dz (x - mean), d bias = sum dz

The statistics carry no gradient of their own: the apply kernel's grad function gives x the whole gradient (through
mean and variance too), so the stats kernel needs none. ReLU's mask is read from y (y > 0 exactly where the sum is),
so no mask is stored. A block's output feeds the next block twice (its conv and its residual), so its gradient is a
sum: both backward kernels read the two addends and add them as they load, instead of tinygrad's elementwise kernel
writing the sum first (one add per block: by the block outputs' sizes about 8.3 of the 10.4 GB that tinygrad's
elementwise kernels moved in the H100 profile, docs/perf/2026-12-06_resnet_step_profile_bn_h100.jsonl).

On several devices (unsynced BN, SYNCBN=0, as every config runs) x is sharded on the batch: each device normalises its
images with its own statistics, mean and variance come out (devices, C) sharded as the running statistics are, and
the weight and bias gradients are summed across devices. On a device without Triton (CPU, in tests) the statistics
are tinygrad ops, the apply one tinygrad kernel and the backward tinygrad ops, through the same custom_kernel and grad
wiring; the Triton kernels themselves are tested by Triton's interpreter (tests/unit/test_kernels_batchnorm.py).
"""
from __future__ import annotations
import functools

from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import KernelInfo, Ops, UOp

from tinyperf.benchmarks.kernels import program as prg

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: the Triton path is never taken there
  triton = None


def _row_tile(pid, NC: tl.constexpr, C: tl.constexpr, HW: tl.constexpr, RB: tl.constexpr, BHW: tl.constexpr):
  """Program pid's tile of the (N*C rows, HW) view: its rows' channels (RB,), offsets and mask (RB, BHW)."""
  chunks: tl.constexpr = (HW + BHW - 1) // BHW
  rows = (pid // chunks) * RB + tl.arange(0, RB)
  hw = (pid % chunks) * BHW + tl.arange(0, BHW)
  return rows % C, rows[:, None] * HW + hw[None, :], (rows < NC)[:, None] & (hw < HW)[None, :]


def bn_stats_kernel(x, mean_p, m2_p, N: tl.constexpr, C: tl.constexpr, HW: tl.constexpr, SPLIT: tl.constexpr,
                    IB: tl.constexpr, BHW: tl.constexpr):
  """Program (split, c): channel c of images [split * N/SPLIT, (split + 1) * N/SPLIT), IB images x BHW pixels a step;
  writes that slice's mean and M2 (sum of squared deviations) to row split of mean_p, m2_p (SPLIT, C)."""
  NI: tl.constexpr = N // SPLIT
  pid = tl.program_id(0)
  c, split = pid % C, pid // C
  img, hw = tl.arange(0, IB), tl.arange(0, BHW)
  cnt = tl.zeros((IB, BHW), tl.float32)
  mu = tl.zeros((IB, BHW), tl.float32)
  m2 = tl.zeros((IB, BHW), tl.float32)
  for i0 in range(0, NI, IB):
    row = (split * NI + i0 + img) * C + c
    for h0 in range(0, HW, BHW):
      mask = (i0 + img < NI)[:, None] & (h0 + hw < HW)[None, :]
      v = tl.load(x + row[:, None] * HW + (h0 + hw)[None, :], mask=mask, other=0.0).to(tl.float32)
      cnt += mask.to(tl.float32)
      d = tl.where(mask, v - mu, 0.0)
      mu += tl.fdiv(d, tl.maximum(cnt, 1.0))   # fast division (2 ulp): a running mean needs no exact one
      m2 += d * (v - mu)
  mean = tl.sum(cnt * mu) / (NI * HW)
  dm = mu - mean
  tl.store(mean_p + split * C + c, mean)
  tl.store(m2_p + split * C + c, tl.sum(m2 + cnt * dm * dm))


def bn_apply_kernel(x, mean, rstd, w, b, res, y, NC: tl.constexpr, C: tl.constexpr, HW: tl.constexpr,
                    RELU: tl.constexpr, RES: tl.constexpr, RB: tl.constexpr, BHW: tl.constexpr):
  """RB rows (image, channel) x BHW pixels of x per program: y = [relu](bn(x) [+ res])."""
  c, off, mask = _row_tile(tl.program_id(0), NC, C, HW, RB, BHW)
  scale = tl.load(rstd + c) * tl.load(w + c)
  shift = tl.load(b + c) - tl.load(mean + c) * scale
  z = tl.load(x + off, mask=mask, other=0.0).to(tl.float32) * scale[:, None] + shift[:, None]
  if RES: z += tl.load(res + off, mask=mask, other=0.0).to(tl.float32)
  if RELU: z = tl.maximum(z, 0.0)
  tl.store(y + off, z.to(y.dtype.element_ty), mask=mask)


def _load_dy(dy, dy2, off, mask, TWO: tl.constexpr):
  """dy, or dy + dy2 (a gradient's two addends), in fp32."""
  g = tl.load(dy + off, mask=mask, other=0.0).to(tl.float32)
  if TWO: g += tl.load(dy2 + off, mask=mask, other=0.0).to(tl.float32)
  return g


def bn_bwd_sums_kernel(dy, dy2, y, x, mean, sdz_p, sdzx_p, N: tl.constexpr, C: tl.constexpr, HW: tl.constexpr,
                       SPLIT: tl.constexpr, RELU: tl.constexpr, TWO: tl.constexpr, IB: tl.constexpr,
                       BHW: tl.constexpr):
  """Program (split, c), the stats kernel's slice: sum dz and sum dz (x - mean) into row split of sdz_p, sdzx_p."""
  NI: tl.constexpr = N // SPLIT
  pid = tl.program_id(0)
  c, split = pid % C, pid // C
  img, hw = tl.arange(0, IB), tl.arange(0, BHW)
  mu = tl.load(mean + c)
  s1 = tl.zeros((IB, BHW), tl.float32)
  s2 = tl.zeros((IB, BHW), tl.float32)
  for i0 in range(0, NI, IB):
    row = (split * NI + i0 + img) * C + c
    for h0 in range(0, HW, BHW):
      mask = (i0 + img < NI)[:, None] & (h0 + hw < HW)[None, :]
      off = row[:, None] * HW + (h0 + hw)[None, :]
      g = _load_dy(dy, dy2, off, mask, TWO)
      if RELU: g = tl.where(tl.load(y + off, mask=mask, other=0.0) > 0, g, 0.0)
      s1 += g
      s2 += g * (tl.load(x + off, mask=mask, other=0.0).to(tl.float32) - mu)
  tl.store(sdz_p + split * C + c, tl.sum(s1))
  tl.store(sdzx_p + split * C + c, tl.sum(s2))


def bn_bwd_apply_kernel(dy, dy2, y, x, mean, rstd, w, sdz, sdzx, dx, dres, NC: tl.constexpr, C: tl.constexpr,
                        HW: tl.constexpr, M: tl.constexpr, RELU: tl.constexpr, RES: tl.constexpr, TWO: tl.constexpr,
                        RB: tl.constexpr, BHW: tl.constexpr):
  """The apply kernel's tiles: dx, and d residual = dz when the forward added one."""
  c, off, mask = _row_tile(tl.program_id(0), NC, C, HW, RB, BHW)
  rs = tl.load(rstd + c)
  k = tl.load(w + c) * rs                        # dx = k dz + kx (x - mean) + k0
  kx = -k * rs * rs * tl.load(sdzx + c) / M
  k0 = -k * tl.load(sdz + c) / M
  g = _load_dy(dy, dy2, off, mask, TWO)
  if RELU: g = tl.where(tl.load(y + off, mask=mask, other=0.0) > 0, g, 0.0)
  xc = tl.load(x + off, mask=mask, other=0.0).to(tl.float32) - tl.load(mean + c)[:, None]
  tl.store(dx + off, (k[:, None] * g + kx[:, None] * xc + k0[:, None]).to(dx.dtype.element_ty), mask=mask)
  if RES: tl.store(dres + off, g.to(dres.dtype.element_ty), mask=mask)


if triton is not None:   # the helpers are jitted first: the kernels call them as Triton functions
  _row_tile, _load_dy = triton.jit(_row_tile), triton.jit(_load_dy)
  compiled = {"stats": triton.jit(bn_stats_kernel), "apply": triton.jit(bn_apply_kernel),
              "bwd_sums": triton.jit(bn_bwd_sums_kernel), "bwd_apply": triton.jit(bn_bwd_apply_kernel)}

SMS = 132      # H200 streaming multiprocessors
BLOCK = 2048   # elements a program holds per step; 8 warps. No other size tried yet (step_profile.py times the kernels)
WARPS = 8


def split(N: int, C: int) -> int:
  """The stats and sums kernels' SPLIT: the least divisor of N (equal counts per partial) giving 4 programs per
  multiprocessor, else N."""
  return next((s for s in range(1, N + 1) if N % s == 0 and C * s >= 4 * SMS), N)


def tiles(HW: int) -> tuple[int, int]:
  """(images or rows, pixels) of a BLOCK-element step: a row's pixels rounded up to a power of two, at most BLOCK."""
  bhw = min(prg.pow2(HW), BLOCK)
  return BLOCK // bhw, bhw


def launch(kind: str, N: int, C: int, HW: int, relu: bool = False, res: bool = False,
           two: bool = False) -> tuple[dict, int]:
  """The kernel's constexprs (in its argument order) and grid: what the CUDA path compiles and the interpreter runs.
  two: the backward's dy comes as two addends."""
  rb, bhw = tiles(HW)
  if kind in ("stats", "bwd_sums"):
    s = split(N, C)
    c = {"N": N, "C": C, "HW": HW, "SPLIT": s} | ({"RELU": int(relu), "TWO": int(two)} if kind == "bwd_sums" else {})
    return c | {"IB": rb, "BHW": bhw}, C * s
  c = {"NC": N * C, "C": C, "HW": HW} | ({"M": N * HW} if kind == "bwd_apply" else {})
  c |= {"RELU": int(relu), "RES": int(res)} | ({"TWO": int(two)} if kind == "bwd_apply" else {})
  return c | {"RB": rb, "BHW": bhw}, -(-N * C // rb) * -(-HW // bhw)


# ---- the Triton path (CUDA) ----

_TY = {dtypes.half: "*fp16", dtypes.bfloat16: "*bf16"}
F32 = "*fp32"


def pointers(kind: str, dtype) -> tuple[tuple[str, str], ...]:
  """Each kernel's pointer arguments in order (custom_kernel's sources follow it, then Triton's two scratch buffers)."""
  t = _TY[dtype]
  return {"stats": (("x", t), ("mean_p", F32), ("m2_p", F32)),
          "apply": (("x", t), ("mean", F32), ("rstd", F32), ("w", F32), ("b", F32), ("res", t), ("y", t)),
          "bwd_sums": (("dy", t), ("dy2", t), ("y", t), ("x", t), ("mean", F32), ("sdz_p", F32), ("sdzx_p", F32)),
          "bwd_apply": (("dy", t), ("dy2", t), ("y", t), ("x", t), ("mean", F32), ("rstd", F32), ("w", F32),
                        ("sdz", F32), ("sdzx", F32), ("dx", t), ("dres", t))}[kind]


def _triton_fxn(kind: str, N: int, C: int, HW: int, relu: bool, res: bool, dtype, device, outs: tuple[int, ...],
                two: bool = False):
  if dtype not in _TY: raise NotImplementedError(f"batchnorm: the Triton kernels take fp16 or bf16, not {dtype}")
  consts, grid = launch(kind, N, C, HW, relu, res, two)
  k = prg.compile_kernel(compiled[kind], pointers(kind, dtype), tuple(consts.items()), WARPS, 1, prg.cuda_arch(device))
  # tensors of N*C*HW elements each kernel reads or writes: stats x; apply x, y (+ res); sums dy, x (+ y, + dy2);
  # bwd apply dy, x, dx (+ y, + dres, + dy2)
  passes = {"stats": 1, "apply": 2 + res, "bwd_sums": 2 + relu + two, "bwd_apply": 3 + relu + res + two}[kind]
  n = len(pointers(kind, dtype))
  return lambda *params: prg.program(k, list(params), grid, outs=outs, ins=tuple(i for i in range(n) if i not in outs),
                                     device=device, flops=6 * N * C * HW, nbytes=passes * N * C * HW * dtype.itemsize)


# ---- the tinygrad path (CPU, tests) ----

def _tinygrad_apply(N: int, C: int, HW: int, relu: bool, res: bool):
  """The apply kernel as one tinygrad kernel with the Triton kernel's arguments."""
  def fxn(x: UOp, mean: UOp, rstd: UOp, w: UOp, b: UOp, r: UOp, y: UOp) -> UOp:
    x, mean, rstd, w, b, r, y = (u.flatten() for u in (x, mean, rstd, w, b, r, y))
    i = UOp.range(N * C * HW, 0)
    c = (i // HW) % C
    z = (x[i].cast(dtypes.float32) - mean[c]) * rstd[c] * w[c] + b[c]
    if res: z = z + r[i].cast(dtypes.float32)
    if relu: z = (z > 0.0).where(z, 0.0)
    return y[i].store(z.cast(y.dtype)).end(i).sink(arg=KernelInfo(name=f"bn_apply_{N}_{C}_{HW}", opts_to_apply=()))
  return fxn


def _groups(t: Tensor, D: int) -> Tensor:
  """(N*D, C, H, W) -> (D, N, C, H*W) in fp32: each device's images apart."""
  return t.float().reshape(D, t.shape[0] // D, t.shape[1], -1)


# ---- the differentiable call ----


def addends(grad_y: UOp, x: Tensor) -> tuple[Tensor, Tensor | None]:
  """The gradient as the backward kernels read it: its two addends when autograd summed two of x's shape and dtype
  (a tensor used twice), else itself and None; each contiguous in x's dtype."""
  if grad_y.op is Ops.ADD and all(s.shape == grad_y.shape == x.shape and s.dtype == x.dtype for s in grad_y.src):
    a, b = (prg.contiguous(Tensor(s)) for s in grad_y.src)
    return a, b
  return prg.contiguous(Tensor(grad_y).cast(x.dtype)), None


def _grad(grad_y: UOp, call: UOp, relu: bool, res: bool) -> tuple:
  """d x, d weight, d bias, d residual of the apply call (sources x, mean, rstd, w, b, res, y[, scratch]); y is read
  after it. mean and rstd get none: x's gradient already runs through them."""
  x, mean, rstd, w = (Tensor(call.src[1 + i]) for i in range(4))
  y = Tensor(call.src[7].after(call))
  N, C, H, W = prg.local_shape(x)
  D, HW = len(prg.devices(x.device)), H * W
  if prg.on_triton(x):
    axis = prg.batch_axis(x)
    dy, dy2 = addends(grad_y, x)
    two = dy2 is not None
    if not two: dy2 = Tensor.empty(1, dtype=x.dtype, device=x.device)   # read by no kernel
    s = split(N, C)
    sdz, sdzx = (prg.empty_shards((s, C), dtypes.float32, x.device, axis) for _ in range(2))
    sdz, sdzx = dy.custom_kernel(dy2, y, x, mean, sdz, sdzx, *prg.scratch(x.device),
                                 fxn=_triton_fxn("bwd_sums", N, C, HW, relu, res, x.dtype, x.device, (5, 6), two))[5:7]
    sdz, sdzx = (t.reshape(D, s, C).sum(1).contiguous() for t in (sdz, sdzx))   # (D, C): each device's sums
    dx = prg.empty_shards((N, C, H, W), x.dtype, x.device, axis)
    dres = prg.empty_shards((N, C, H, W), x.dtype, x.device, axis) if res else Tensor.empty(1, dtype=x.dtype,
                                                                                             device=x.device)
    fxn = _triton_fxn("bwd_apply", N, C, HW, relu, res, x.dtype, x.device, (9, 10), two)
    dx, dres = dy.custom_kernel(dy2, y, x, mean, rstd, w, sdz, sdzx, dx, dres, *prg.scratch(x.device), fxn=fxn)[9:11]
  else:
    g = _groups(Tensor(grad_y).cast(x.dtype), D)                                # (D, N, C, HW)
    if relu: g = (_groups(y, D) > 0).where(g, 0.0)
    xc = _groups(x, D) - mean.reshape(D, 1, C, 1)
    sdz, sdzx = g.sum((1, 3)), (g * xc).sum((1, 3))                             # (D, C)
    r, M = rstd.reshape(D, 1, C, 1), N * HW
    dx = (w.reshape(1, 1, C, 1) * r * (g - sdz.reshape(D, 1, C, 1) / M - xc * r * r * sdzx.reshape(D, 1, C, 1) / M))
    dx, dres = dx.cast(x.dtype).reshape(x.shape), g.cast(x.dtype).reshape(x.shape)
  dw, db = (sdzx * rstd).sum(0), sdz.sum(0)   # over devices: the replicated weight's gradient
  return (dx.uop, None, None, dw.uop, db.uop, dres.uop if res else None) + (None,) * (len(call.src) - 7)


@functools.cache   # one per flags: tinygrad's schedule cache keys on id(grad_fxn) (matmul._grad_fxn says why)
def _grad_fxn(relu: bool, res: bool): return functools.partial(_grad, relu=relu, res=res)


def batchnorm(x: Tensor, weight: Tensor, bias: Tensor, eps: float, residual: Tensor | None = None,
              relu: bool = False) -> tuple[Tensor, Tensor, Tensor]:
  """Training-mode [relu](BatchNorm(x) [+ residual]) of x (N, C, H, W), fp32 weight and bias (C,), in x's dtype, and
  the batch's mean and biased variance (devices, C), fp32, without gradient. On several devices x (and residual) are
  sharded on the batch and each device normalises its own images; weight and bias are replicated."""
  devs = prg.devices(x.device)
  D = len(devs)
  if D > 1 and (x.uop.axis != 0 or weight.uop.axis is not None or bias.uop.axis is not None
                or (residual is not None and residual.uop.axis != 0)):
    raise NotImplementedError("batchnorm: on several devices x and residual are sharded on axis 0 (the batch), "
                              "weight and bias replicated")
  if x.ndim != 4 or weight.shape != (x.shape[1],) or bias.shape != weight.shape or \
      (residual is not None and residual.shape != x.shape):
    raise ValueError(f"batchnorm: x {x.shape}, weight {weight.shape}, bias {bias.shape} and residual "
                     f"{None if residual is None else residual.shape} must be (N, C, H, W), (C,), (C,), (N, C, H, W)")
  N, C, H, W = prg.local_shape(x)
  HW, axis = H * W, prg.batch_axis(x)
  if N * C * HW >= 2 ** 31: raise ValueError(f"batchnorm: {x.shape} has 2^31 elements or more per device")
  xs = prg.contiguous(x)
  if prg.on_triton(x):
    s = split(N, C)
    mean_p, m2_p = (prg.empty_shards((s, C), dtypes.float32, x.device, axis) for _ in range(2))
    mean_p, m2_p = xs.custom_kernel(mean_p, m2_p, *prg.scratch(x.device),
                                    fxn=_triton_fxn("stats", N, C, HW, False, False, x.dtype, x.device, (1, 2)))[1:3]
    mean_p, m2_p = mean_p.reshape(D, s, C), m2_p.reshape(D, s, C)
    mean = mean_p.mean(1)                                                      # equal counts N/s * HW per partial
    var = (m2_p.sum(1) + (N // s * HW) * (mean_p - mean.unsqueeze(1)).square().sum(1)) / (N * HW)
  else:
    xg = _groups(xs, D)
    mean = xg.mean((1, 3))
    var = (xg - mean.reshape(D, 1, C, 1)).square().mean((1, 3))
  mean, var = mean.detach().contiguous(), var.detach().contiguous()            # (D, C)
  rstd = (var + eps).rsqrt().contiguous()
  w, b = weight.float().contiguous(), bias.float().contiguous()
  r = prg.contiguous(residual.cast(x.dtype)) if residual is not None else Tensor.empty(1, dtype=x.dtype, device=x.device)
  y = prg.empty_shards((N, C, H, W), x.dtype, x.device, axis)
  grad = _grad_fxn(bool(relu), residual is not None)
  # custom_kernel's sources are the kernel's arguments in order: x, mean, rstd, w, b, res, y, then Triton's scratch
  if prg.on_triton(x):
    fxn = _triton_fxn("apply", N, C, HW, relu, residual is not None, x.dtype, x.device, (6,))
    y = xs.custom_kernel(mean, rstd, w, b, r, y, *prg.scratch(x.device), fxn=fxn, grad_fxn=grad)[6]
  else:
    y = xs.custom_kernel(mean, rstd, w, b, r, y, fxn=_tinygrad_apply(N, C, HW, relu, residual is not None),
                         grad_fxn=grad)[6]
  return y, mean, var
