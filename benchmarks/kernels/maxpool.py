"""ResNet-50's max-pool for KERNELS=triton: 3x3, stride 2, padding 1, over x (N, C, H, W), forward and backward as one
Triton kernel each.

  forward   y[p, q] = max of x over rows 2p-1 .. 2p+1 and columns 2q-1 .. 2q+1 inside the image; idx[p, q] (int8) the
            tap r * 3 + s of the first maximum in that order
  backward  dx[h, w] = sum of dy[p, q] over the (at most 4) windows whose idx is the tap at (h, w)

The padding never wins (a masked tap is -inf): the model pads with zeros, which is the same for x >= 0, as the stem's
ReLU leaves it. Ties: the first maximum takes the whole gradient (PyTorch's rule; tinygrad splits it among them), and
in the stem a tie is a run of zeros, whose gradient the ReLU below stops either way. tinygrad's own backward of the
padded pool is a reduce with the stem's 205M outputs: the step's one such kernel, r_512_7_28_..., takes 2.8 ms of the
BS 256 step on an H100 (docs/perf/2026-12-06_resnet_step_profile_bn_h100.jsonl). This one reads dy and idx (a
quarter of x's elements each) and writes dx once.

On a device without Triton (CPU, in tests) the same calls run one tinygrad kernel each with the same arguments, so the
custom_kernel and grad wiring is tested everywhere; the Triton kernels themselves are tested by Triton's interpreter
(tests/unit/test_kernels_maxpool.py).
"""
from __future__ import annotations

from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import KernelInfo, UOp

from tinyperf.benchmarks.kernels import program as prg

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: the Triton path is never taken there
  triton = None

K, ST, PAD = 3, 2, 1   # the one pool ResNet-50 has


def pool_fwd_kernel(x, y, idx, NC: tl.constexpr, H: tl.constexpr, W: tl.constexpr, P: tl.constexpr,
                    Q: tl.constexpr, BLOCK: tl.constexpr):
  """BLOCK outputs (plane, p, q) per program."""
  o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
  ok = o < NC * P * Q
  plane, pq = o // (P * Q), o % (P * Q)
  h0, w0 = (pq // Q) * 2 - 1, (pq % Q) * 2 - 1
  best = tl.full((BLOCK,), float("-inf"), tl.float32)
  arg = tl.zeros((BLOCK,), tl.int32)
  for t in tl.static_range(9):
    h, w = h0 + t // 3, w0 + t % 3
    inside = ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
    v = tl.load(x + plane * (H * W) + h * W + w, mask=inside, other=float("-inf")).to(tl.float32)
    better = v > best
    best = tl.where(better, v, best)
    arg = tl.where(better, t, arg)
  tl.store(y + o, best.to(y.dtype.element_ty), mask=ok)
  tl.store(idx + o, arg.to(tl.int8), mask=ok)


def pool_bwd_kernel(dy, idx, dx, NC: tl.constexpr, H: tl.constexpr, W: tl.constexpr, P: tl.constexpr,
                    Q: tl.constexpr, BLOCK: tl.constexpr):
  """BLOCK inputs (plane, h, w) per program. Row h is tap r = h + 1 - 2p of window row p: for even h only r = 1,
  for odd h r = 0 (p = (h + 1) / 2) and r = 2 (p = (h - 1) / 2); columns likewise."""
  i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
  ok = i < NC * H * W
  plane, hw = i // (H * W), i % (H * W)
  h, w = hw // W, hw % W
  acc = tl.zeros((BLOCK,), tl.float32)
  for a in tl.static_range(2):
    r = tl.where(h % 2 == 0, 1, 2 * a)   # a = 1 on an even row repeats r = 1: masked below
    p = (h + 1 - r) // 2
    prow = ok & (p >= 0) & (p < P) & ((h % 2 == 1) | (a == 0))
    for b in tl.static_range(2):
      s = tl.where(w % 2 == 0, 1, 2 * b)
      q = (w + 1 - s) // 2
      m = prow & (q >= 0) & (q < Q) & ((w % 2 == 1) | (b == 0))
      off = plane * (P * Q) + p * Q + q
      hit = m & (tl.load(idx + off, mask=m, other=-1).to(tl.int32) == r * 3 + s)
      acc += tl.load(dy + off, mask=hit, other=0.0).to(tl.float32)
  tl.store(dx + i, acc.to(dx.dtype.element_ty), mask=ok)


if triton is not None:
  compiled = {"fwd": triton.jit(pool_fwd_kernel), "bwd": triton.jit(pool_bwd_kernel)}

BLOCK, WARPS = 1024, 4   # not yet measured (an elementwise-sized block)


def out_size(n: int) -> int: return (n + 2 * PAD - K) // ST + 1


def launch(kind: str, NC: int, H: int, W: int) -> tuple[dict, int]:
  """The kernel's constexprs (in its argument order) and grid."""
  P, Q = out_size(H), out_size(W)
  n = NC * (P * Q if kind == "fwd" else H * W)
  return {"NC": NC, "H": H, "W": W, "P": P, "Q": Q, "BLOCK": BLOCK}, -(-n // BLOCK)




def _triton_fxn(kind: str, NC: int, H: int, W: int, dtype, device):
  consts, grid = launch(kind, NC, H, W)
  t = prg.POINTER[dtype]
  sig = (("x", t), ("y", t), ("idx", "*i8")) if kind == "fwd" else (("dy", t), ("idx", "*i8"), ("dx", t))
  k = prg.compile_kernel(compiled[kind], sig, tuple(consts.items()), WARPS, 1, prg.cuda_arch(device))
  big, small = NC * H * W, NC * consts["P"] * consts["Q"]
  nbytes = (big + small) * dtype.itemsize + small   # fwd: x, y, idx; bwd: dx, dy, idx
  return lambda a, b, c, s0, s1: prg.program(k, [a, b, c, s0, s1], grid, outs=(1, 2) if kind == "fwd" else (2,),
                                             ins=(0,) if kind == "fwd" else (0, 1), device=device, flops=9 * small,
                                             nbytes=nbytes)


# ---- the tinygrad path (CPU, tests): the Triton kernels' arithmetic, one tinygrad kernel each ----

def _tinygrad_fxn(kind: str, NC: int, H: int, W: int):
  P, Q = out_size(H), out_size(W)
  f32 = dtypes.float32
  def fwd(x: UOp, y: UOp, idx: UOp) -> UOp:
    x, y, idx = x.flatten(), y.flatten(), idx.flatten()
    o = UOp.range(NC * P * Q, 0)
    plane, p, q = o // (P * Q), (o // Q) % P, o % Q
    best, arg = UOp.const(float("-inf"), f32), UOp.const(0, dtypes.int32)
    for t in range(9):
      h, w = p * 2 - 1 + t // 3, q * 2 - 1 + t % 3
      inside = (h >= 0) & (h < H) & (w >= 0) & (w < W)
      v = inside.where(x[(plane * H + h) * W + w].valid(inside).cast(f32), float("-inf"))
      better = v > best
      best, arg = better.where(v, best), better.where(t, arg)
    stores = UOp.group(y[o].store(best.cast(y.dtype)), idx[o].store(arg.cast(dtypes.int8)))
    return stores.end(o).sink(arg=KernelInfo(name=f"maxpool_fwd_{NC}_{H}", opts_to_apply=()))
  def bwd(dy: UOp, idx: UOp, dx: UOp) -> UOp:
    dy, idx, dx = dy.flatten(), idx.flatten(), dx.flatten()
    i = UOp.range(NC * H * W, 0)
    plane, h, w = i // (H * W), (i // W) % H, i % W
    acc = UOp.const(0.0, f32)
    for r in range(3):                   # every tap: the Triton kernel visits only the ones parity allows
      for s in range(3):
        ph, pw = h + 1 - r, w + 1 - s    # 2p and 2q when (h, w) is tap (r, s) of window (p, q)
        p, q = ph // 2, pw // 2
        m = (ph >= 0) & (ph % 2).eq(0) & (p < P) & (pw >= 0) & (pw % 2).eq(0) & (q < Q)   # UOp's == is Python's
        off = (plane * P + p) * Q + q
        hit = m & idx[off.valid(m)].cast(dtypes.int32).eq(r * 3 + s)
        acc = acc + hit.where(dy[off.valid(m)].cast(f32), 0.0)
    return dx[i].store(acc.cast(dx.dtype)).end(i).sink(arg=KernelInfo(name=f"maxpool_bwd_{NC}_{H}", opts_to_apply=()))
  body = fwd if kind == "fwd" else bwd
  return lambda a, b, c: body(a, b, c)


# ---- the differentiable call ----


def _call(kind: str, a: Tensor, b: Tensor, c: Tensor, NC: int, H: int, W: int, grad_fxn=None) -> Tensor:
  if prg.on_triton(a):
    fxn = _triton_fxn(kind, NC, H, W, a.dtype, a.device)
    return prg.contiguous(a).custom_kernel(b, c, *prg.scratch(a.device), fxn=fxn, grad_fxn=grad_fxn)
  return prg.contiguous(a).custom_kernel(b, c, fxn=_tinygrad_fxn(kind, NC, H, W), grad_fxn=grad_fxn)


def _grad(grad_y: UOp, call: UOp) -> tuple:
  """dx of the forward call (sources x, y, idx[, scratch]); idx is read after it."""
  x = Tensor(call.src[1])
  idx = Tensor(call.src[3].after(call))
  N, C, H, W = prg.local_shape(x)
  dy = prg.contiguous(Tensor(grad_y).cast(x.dtype))
  dx = prg.empty_shards((N, C, H, W), x.dtype, x.device, prg.batch_axis(x))
  dx = _call("bwd", dy, idx, dx, N * C, H, W)[2]
  return (dx.uop,) + (None,) * (len(call.src) - 2)


def max_pool(x: Tensor) -> Tensor:
  """x.pad(1).max_pool2d(3, stride 2) of x (N, C, H, W) >= 0, in x's dtype; on several devices x is sharded on the
  batch."""
  if x.ndim != 4: raise ValueError(f"max_pool: x {x.shape} is not (N, C, H, W)")
  if isinstance(x.device, tuple) and x.uop.axis != 0:
    raise NotImplementedError(f"max_pool: x sharded on axis {x.uop.axis}; it takes the batch axis")
  N, C, H, W = prg.local_shape(x)
  if N * C * H * W >= 2 ** 31: raise ValueError(f"max_pool: {x.shape} has 2^31 elements or more per device")
  P, Q = out_size(H), out_size(W)
  y, idx = (prg.empty_shards((N, C, P, Q), dt, x.device, prg.batch_axis(x)) for dt in (x.dtype, dtypes.int8))
  return _call("fwd", x, y, idx, N * C, H, W, grad_fxn=_grad)[1]
