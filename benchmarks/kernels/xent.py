"""Softmax cross entropy over a large vocabulary for KERNELS=triton: BERT's masked-LM loss per prediction in one
forward and one backward kernel, each reading the fp32 logits once (tinygrad's log_softmax and its gradient make four
passes over them and a fifth for the gradient's fp16 copy: about 4 ms of a BERT-large step at BS 64, H100).

  forward:   lse = log(sum_v exp(x_v));  nll = lse - x_label                  per row of x (R, V) fp32
  backward:  dx_v = dnll * (exp(x_v - lse) - [v == label])                   written in dx's dtype

The forward keeps each row's lse (R,) fp32 for the backward. One program per row walks the vocabulary in blocks of BV
with a running max and sum per lane (an online softmax), combined at the end. On several devices the rows (the batch)
are sharded and each device computes its own.

On a device without Triton (CPU, in tests) the same calls run a tinygrad kernel (forward) and tinygrad ops (backward);
the Triton kernels are tested by Triton's interpreter (tests/unit/test_kernels_xent.py).
"""
from __future__ import annotations

from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import AxisType, KernelInfo, Ops, UOp

from tinyperf.benchmarks.kernels import program as prg
from tinyperf.benchmarks.kernels.attention import LOG2E   # exp(x) = exp2(x * LOG2E), a constexpr the kernels read

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: the Triton path is never taken there
  triton = None

BV, WARPS = 2048, 8   # vocabulary elements per step of a row's program: 8 per thread (rows of 30522 fp32 are not
                      # 16-byte aligned: 4-byte loads, coalesced)


def xent_fwd_kernel(x, labels, nll, lse, V: tl.constexpr, BV: tl.constexpr):
  row = tl.program_id(0)
  cols = tl.arange(0, BV)
  m = tl.full((BV,), float("-inf"), tl.float32)   # per lane: the running max and the sum of exp(x - max), in log2 units
  s = tl.zeros((BV,), tl.float32)
  for start in range(0, V, BV):
    xv = tl.load(x + row * V + start + cols, mask=start + cols < V, other=float("-inf")) * LOG2E
    m_new = tl.maximum(m, xv)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)   # a lane with nothing yet: exp2(-inf - 0) = 0, no NaN
    s = s * tl.math.exp2(m - m_safe) + tl.math.exp2(xv - m_safe)
    m = m_new
  mx = tl.max(m, 0)   # finite: V >= 1
  total = tl.sum(s * tl.math.exp2(m - mx), 0)
  out = (mx + tl.math.log2(total)) / LOG2E
  y = tl.load(labels + row)
  valid = (y >= 0) & (y < V)   # a label outside the vocabulary picks nothing: nll 0, as the one-hot pick gives
  tl.store(lse + row, out)
  tl.store(nll + row, tl.where(valid, out - tl.load(x + row * V + tl.where(valid, y, 0)), 0.0))


def xent_bwd_kernel(x, labels, lse, dnll, dx, V: tl.constexpr, BV: tl.constexpr):
  row = tl.program_id(0)
  cols = tl.arange(0, BV)
  y = tl.load(labels + row)
  l2 = tl.load(lse + row) * LOG2E
  g = tl.where((y >= 0) & (y < V), tl.load(dnll + row), 0.0)   # an nll of 0 by definition has no gradient
  for start in range(0, V, BV):
    c = start + cols
    p = tl.math.exp2(tl.load(x + row * V + c, mask=c < V, other=0.0) * LOG2E - l2)
    tl.store(dx + row * V + c, (g * (p - tl.where(c == y, 1.0, 0.0))).to(dx.dtype.element_ty), mask=c < V)


if triton is not None:
  compiled_fwd, compiled_bwd = triton.jit(xent_fwd_kernel), triton.jit(xent_bwd_kernel)

def pointers(which: str, dx_dtype=dtypes.float32) -> tuple[tuple[str, str], ...]:
  """Each kernel's pointer arguments in order (custom_kernel's sources follow it, then Triton's two scratch buffers)."""
  if which == "fwd": return (("x", "*fp32"), ("labels", "*i32"), ("nll", "*fp32"), ("lse", "*fp32"))
  return (("x", "*fp32"), ("labels", "*i32"), ("lse", "*fp32"), ("dnll", "*fp32"), ("dx", prg.POINTER[dx_dtype]))


def compile_xent(which: str, V: int, arch: int, dx_dtype=dtypes.float32) -> prg.Compiled:
  fn = compiled_fwd if which == "fwd" else compiled_bwd
  return prg.compile_kernel(fn, pointers(which, dx_dtype), (("V", V), ("BV", BV)), WARPS, 1, arch)


def _triton_fxn(which: str, R: int, V: int, device, dx_dtype=dtypes.float32):
  k = compile_xent(which, V, prg.cuda_arch(device), dx_dtype)
  n = len(pointers(which))
  outs = (2, 3) if which == "fwd" else (4,)
  nbytes = R * V * 4 + (R * V * dx_dtype.itemsize if which == "bwd" else 0)
  return lambda *params: prg.program(k, list(params), R, outs=outs, ins=tuple(i for i in range(n) if i not in outs),
                                     device=device, flops=4 * R * V, nbytes=nbytes)


# ---- the tinygrad path (CPU, tests) ----

def _tinygrad_fwd(R: int, V: int):
  """The forward as one tinygrad kernel with the Triton kernel's arguments: per row the max, the sum of exponentials
  (two reductions over the row), lse and the label's nll."""
  def fxn(x: UOp, labels: UOp, nll: UOp, lse: UOp) -> UOp:
    x, labels, nll, lse = (u.flatten() for u in (x, labels, nll, lse))
    i = UOp.range(R, 0)
    j1, j2 = UOp.range(V, 1, AxisType.REDUCE), UOp.range(V, 2, AxisType.REDUCE)
    mx = x[i * V + j1].reduce(j1, arg=Ops.MAX)
    out = (x[i * V + j2] - mx).exp().reduce(j2, arg=Ops.ADD).log() + mx
    y = labels[i].cast(dtypes.weakint)
    valid = (y >= 0) & (y < V)
    stores = UOp.group(lse[i].store(out), nll[i].store(valid.where(out - x[i * V + valid.where(y, 0)], 0.0)))
    return stores.end(i).sink(arg=KernelInfo(name=f"xent_{R}_{V}", opts_to_apply=()))
  return fxn


# ---- the differentiable call ----

def _grad(grad_nll: UOp, call: UOp) -> tuple:
  """d logits of the forward call (sources x, labels, nll, lse[, scratch]); lse is read after it."""
  x, labels = Tensor(call.src[1]), Tensor(call.src[2])
  lse = Tensor(call.src[4].after(call))
  R, V = prg.local_shape(x)
  g = prg.contiguous(Tensor(grad_nll).float())
  if prg.on_triton(x):
    dx = prg.empty_shards((R, V), dtypes.float32, x.device, prg.batch_axis(x))
    dx = x.custom_kernel(labels, lse, g, dx, *prg.scratch(x.device), fxn=_triton_fxn("bwd", R, V, x.device))[4]
  else:
    onehot = labels.unsqueeze(-1) == Tensor.arange(V)
    g = ((labels >= 0) & (labels < V)).where(g, 0.0)
    dx = g.unsqueeze(-1) * ((x - lse.unsqueeze(-1)).exp() - onehot.float())
  return (dx.uop,) + (None,) * (len(call.src) - 2)


def softmax_nll(logits: Tensor, labels: Tensor) -> Tensor:
  """-log_softmax(logits)[label] per row: logits (..., V) fp32, labels (...) int -> (...) fp32, as log_softmax and a
  one-hot pick compute it (a label outside [0, V) picks nothing: 0, no gradient). Differentiable in logits. On several
  devices logits and labels are sharded along axis 0."""
  V = logits.shape[-1]
  R = logits.numel() // V
  devs = prg.devices(logits.device)
  if len(devs) > 1 and (logits.uop.axis != 0 or labels.uop.axis != 0):
    raise NotImplementedError("softmax_nll: on several devices logits and labels are sharded on axis 0 (the batch)")
  Rl = R // len(devs)
  if Rl * V >= 2 ** 31: raise ValueError(f"softmax_nll: {Rl} x {V} logits overflow the kernels' int32 offsets")
  x = prg.contiguous(logits.float().reshape(R, V))
  y = prg.contiguous(labels.cast(dtypes.int32).reshape(R))
  axis = prg.batch_axis(x)
  nll, lse = (prg.empty_shards((Rl,), dtypes.float32, x.device, axis) for _ in range(2))
  if prg.on_triton(x):
    out = x.custom_kernel(y, nll, lse, *prg.scratch(x.device), fxn=_triton_fxn("fwd", Rl, V, x.device),
                          grad_fxn=_grad)[2]
  else:
    out = x.custom_kernel(y, nll, lse, fxn=_tinygrad_fwd(Rl, V), grad_fxn=_grad)[2]
  return out.reshape(logits.shape[:-1])
