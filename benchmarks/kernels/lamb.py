"""Gradient clipping and LAMB for KERNELS=triton: three Triton kernels, each launched once for up to MAX_GROUP tensors
of one optimizer, size and gradient dtype, updating the weights and both moments in place, where tinygrad's LAMB
(benchmarks/bert/optim.py) writes an fp32 copy of every clipped gradient, updates m and v in two kernels, reads m, v
and w twice more for the two norms and the update, and sums the global norm in one kernel of a few threads (7.2 ms of a
229-ms BERT-large step on an H100, docs/perf).

Per tensor (w, m, v fp32; g its gradient as the backward left it, fp16 or fp32; n elements):
  sumsq:    one partial sum of g^2 per program                  -> gsq     reads g
  (tinygrad) norm = sqrt(sum gsq) / loss_scale; gscale = min(1, clip / norm) / loss_scale   (one tiny kernel)
  moments:  g' = g * gscale;  m <- b1 m + (1-b1) g';  v <- b2 v + (1-b2) g'^2                  reads g, w, m, v;
            u = m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * w                         writes m, v
            one partial sum of w^2 and of u^2 per program       -> wsq, usq
  update:   r = |w| / |u| (1 where either is 0; 1 without layer adaptation), summed from the tensor's partials;
            w <- w - lr * r * u, u recomputed from the new m and v (the same arithmetic)       reads w, m, v; writes w
40 bytes per fp16-gradient parameter, the same formulas as tinygrad 0.14's LAMB (its _step, read from nn/optim.py),
each partial summed in a fixed order: the same sums every run, no atomics. A launch takes its tensors' pointers as
tuples and program which * PROGRAMS + p picks tensor which's (program.pick: a select, so the body is compiled once).

The partials of all tensors share one buffer each: tensor i's programs write from its offset, which the kernel reads
from a one-element int32 buffer (a constant made once with the optimizer), so a kernel is compiled per tensor size
and count, not per tensor. On several devices every tensor is replicated (the gradients all-reduced before): each
device updates its own copy with the same kernels.

On a device without Triton (CPU, in tests) tinygrad kernels of the same plan run through the same custom_kernel calls
and in-place writes; tests/unit/test_kernels_lamb.py checks both, the Triton kernels under Triton's interpreter, against
clip_and_unscale + tinygrad's LAMB (optim.py).
"""
from __future__ import annotations

from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import AxisType, KernelInfo, Ops, UOp

from tinyperf.benchmarks.kernels import program as prg

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: the Triton path is never taken there
  triton = None

BLOCK, WARPS = 2048, 8   # elements per program per loop step: 8 fp32 per thread of 8 warps, 16-byte loads
MAX_PROGRAMS = 264       # 2 per H200 multiprocessor: a tensor's programs stride over it until it is done
MAX_GROUP = 32           # tensors per launch: BERT-large's 398 in 3 x 21 launches instead of 3 x 398 (each ~7 us apart)


def sumsq_kernel(g, meta, gsq, N: tl.constexpr, PROGRAMS: tl.constexpr, COUNT: tl.constexpr, BLOCK: tl.constexpr):
  """g, meta: tuples of COUNT tensors of N elements and their first partials' offsets. Program which * PROGRAMS + p
  writes tensor which's partial p."""
  pid = tl.program_id(0)
  which, p = pid // PROGRAMS, pid % PROGRAMS
  gp = prg.pick(g, which, COUNT)
  acc = tl.zeros((BLOCK,), tl.float32)
  for start in range(0, N, PROGRAMS * BLOCK):   # program p takes blocks p, p + PROGRAMS, ...
    offs = start + p * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(gp + offs, mask=offs < N, other=0.0).to(tl.float32)
    acc += x * x
  tl.store(gsq + tl.load(prg.pick(meta, which, COUNT)) + p, tl.sum(acc, 0))


def _direction(m, v, w, c1, c2, EPS: tl.constexpr, WD: tl.constexpr):
  """LAMB's u from the new moments: m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * w."""
  return (m / c1) / (tl.sqrt(v / c2) + EPS) + WD * w


def lamb_moments_kernel(g, w, m, v, meta, coef, wsq, usq, N: tl.constexpr, PROGRAMS: tl.constexpr,
                        COUNT: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr, EPS: tl.constexpr, WD: tl.constexpr,
                        BLOCK: tl.constexpr):
  """g, w, m, v, meta: tuples of COUNT; coef: gscale, 1 - b1^t, 1 - b2^t, lr (fp32)."""
  pid = tl.program_id(0)
  which, p = pid // PROGRAMS, pid % PROGRAMS
  gp, wp = prg.pick(g, which, COUNT), prg.pick(w, which, COUNT)
  mp, vp = prg.pick(m, which, COUNT), prg.pick(v, which, COUNT)
  gscale, c1, c2 = tl.load(coef), tl.load(coef + 1), tl.load(coef + 2)
  acc_w = tl.zeros((BLOCK,), tl.float32)
  acc_u = tl.zeros((BLOCK,), tl.float32)
  for start in range(0, N, PROGRAMS * BLOCK):
    offs = start + p * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    gv = tl.load(gp + offs, mask=mask, other=0.0).to(tl.float32) * gscale
    wv = tl.load(wp + offs, mask=mask, other=0.0)
    mv = B1 * tl.load(mp + offs, mask=mask, other=0.0) + (1.0 - B1) * gv
    vv = B2 * tl.load(vp + offs, mask=mask, other=0.0) + (1.0 - B2) * (gv * gv)
    tl.store(mp + offs, mv, mask=mask)
    tl.store(vp + offs, vv, mask=mask)
    u = tl.where(mask, _direction(mv, vv, wv, c1, c2, EPS, WD), 0.0)
    acc_w += wv * wv
    acc_u += u * u
  off = tl.load(prg.pick(meta, which, COUNT)) + p
  tl.store(wsq + off, tl.sum(acc_w, 0))
  tl.store(usq + off, tl.sum(acc_u, 0))


def lamb_update_kernel(w, m, v, meta, coef, wsq, usq, N: tl.constexpr, PROGRAMS: tl.constexpr, COUNT: tl.constexpr,
                       EPS: tl.constexpr, WD: tl.constexpr, ADAPT: tl.constexpr, BLOCK: tl.constexpr, PP: tl.constexpr):
  """w, m, v, meta: tuples of COUNT; PP: PROGRAMS rounded up to a power of two (every program sums its tensor's
  partials itself)."""
  pid = tl.program_id(0)
  which, p = pid // PROGRAMS, pid % PROGRAMS
  wp, mp, vp = prg.pick(w, which, COUNT), prg.pick(m, which, COUNT), prg.pick(v, which, COUNT)
  c1, c2, lr = tl.load(coef + 1), tl.load(coef + 2), tl.load(coef + 3)
  step = lr
  if ADAPT:
    idx = tl.load(prg.pick(meta, which, COUNT)) + tl.arange(0, PP)
    pmask = tl.arange(0, PP) < PROGRAMS
    r1 = tl.sqrt(tl.sum(tl.load(wsq + idx, mask=pmask, other=0.0), 0))
    r2 = tl.sqrt(tl.sum(tl.load(usq + idx, mask=pmask, other=0.0), 0))
    step = lr * tl.where(r1 > 0, tl.where(r2 > 0, r1 / r2, 1.0), 1.0)
  for start in range(0, N, PROGRAMS * BLOCK):
    offs = start + p * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    wv = tl.load(wp + offs, mask=mask, other=0.0)
    u = _direction(tl.load(mp + offs, mask=mask, other=0.0), tl.load(vp + offs, mask=mask, other=0.0), wv, c1, c2,
                   EPS, WD)
    tl.store(wp + offs, wv - step * u, mask=mask)


if triton is not None:   # the helper is jitted first: the kernels call it as a Triton function
  _direction = triton.jit(_direction)
  compiled_sumsq, compiled_moments, compiled_update = (triton.jit(f) for f in
                                                       (sumsq_kernel, lamb_moments_kernel, lamb_update_kernel))


def programs(n: int) -> int:
  """A tensor's programs: one per BLOCK elements, at most MAX_PROGRAMS (each then loops over its share)."""
  return min(MAX_PROGRAMS, -(-n // BLOCK))


def pointers(which: str, gdtype=dtypes.float32, count: int = 1) -> tuple[tuple[str, str | tuple[str, ...]], ...]:
  """Each kernel's pointer arguments in order, a tuple type for count tensors' (custom_kernel's sources follow them
  flattened, then Triton's two scratch buffers)."""
  f32, many = "*fp32", lambda t: (t,) * count
  tensors = {"sumsq": (("g", prg.POINTER[gdtype]),),
             "moments": (("g", prg.POINTER[gdtype]), ("w", f32), ("m", f32), ("v", f32)),
             "update": (("w", f32), ("m", f32), ("v", f32))}[which]
  partials = (("gsq", f32),) if which == "sumsq" else (("coef", f32), ("wsq", f32), ("usq", f32))
  return (*((k, many(t)) for k, t in tensors), ("meta", many("*i32")), *partials)


def compile_lamb(which: str, n: int, arch: int, gdtype=dtypes.float32, b1: float = 0.0, b2: float = 0.0,
                 eps: float = 0.0, wd: float = 0.0, adapt: bool = True, count: int = 1) -> prg.Compiled:
  """which's kernel for count tensors of n elements each."""
  P, sig = programs(n), pointers(which, gdtype, count)
  if which == "sumsq":
    consts = (("N", n), ("PROGRAMS", P), ("COUNT", count), ("BLOCK", BLOCK))
    return prg.compile_kernel(compiled_sumsq, sig, consts, WARPS, 1, arch)
  if which == "moments":
    consts = (("N", n), ("PROGRAMS", P), ("COUNT", count), ("B1", float(b1)), ("B2", float(b2)), ("EPS", float(eps)),
              ("WD", float(wd)), ("BLOCK", BLOCK))
    return prg.compile_kernel(compiled_moments, sig, consts, WARPS, 1, arch)
  consts = (("N", n), ("PROGRAMS", P), ("COUNT", count), ("EPS", float(eps)), ("WD", float(wd)), ("ADAPT", bool(adapt)),
            ("BLOCK", BLOCK), ("PP", prg.pow2(P)))
  return prg.compile_kernel(compiled_update, sig, consts, WARPS, 1, arch)


# ---- the tinygrad path (CPU, tests): the same programs, partials and in-place writes as tinygrad kernels ----

def _range(n: int, axis: int, kind=AxisType.LOOP):
  """A range of n steps, or 0 where n is 1 (tinygrad folds a one-step range away, leaving it unclosed)."""
  return UOp.range(n, axis, kind) if n > 1 else 0


def _sum(x: UOp, *ranges) -> UOp:
  ranges = tuple(r for r in ranges if isinstance(r, UOp))
  return x.reduce(*ranges, arg=Ops.ADD) if ranges else x


def _end(u: UOp, *ranges) -> UOp: return u.end(*(r for r in ranges if isinstance(r, UOp)))


def _blocks(n: int, P: int, pid, axis: int):
  """(element index, in range, the ranges to sum over) of program pid's elements: its blocks pid, pid + P, ..."""
  it, lane = _range(-(-n // (P * BLOCK)), axis, AxisType.REDUCE), _range(BLOCK, axis + 1, AxisType.REDUCE)
  idx = it * (P * BLOCK) + pid * BLOCK + lane
  return idx, idx < n, (it, lane)


def _tinygrad_sumsq(n: int, P: int):
  def fxn(g: UOp, meta: UOp, gsq: UOp) -> UOp:
    g, gsq, pid = g.flatten(), gsq.flatten(), _range(P, 0)
    idx, ok, ranges = _blocks(n, P, pid, 1)
    x = ok.where(g[idx.valid(ok)].cast(dtypes.float32), 0.0)
    store = gsq[meta.flatten()[0].cast(dtypes.weakint) + pid].store(_sum(x * x, *ranges))
    return _end(store, pid).sink(arg=KernelInfo(name=f"sumsq_{n}", opts_to_apply=()))
  return fxn


def _tinygrad_direction(m, v, w, coef, eps: float, wd: float):
  return (m / coef[1]) / ((v / coef[2]).sqrt() + eps) + wd * w


def _tinygrad_moments(n: int, P: int, b1: float, b2: float, eps: float, wd: float):
  """Two kernels where Triton's is one: the partials from the old moments first (a kernel that also stored them could
  read its own stores), then the moments."""
  def moments(g, m, v, coef, j):
    gv = g[j].cast(dtypes.float32) * coef[0]
    return b1 * m[j] + (1.0 - b1) * gv, b2 * v[j] + (1.0 - b2) * (gv * gv)
  def partials(g: UOp, w: UOp, m: UOp, v: UOp, coef: UOp, meta: UOp, wsq: UOp, usq: UOp) -> UOp:
    g, w, m, v, coef, wsq, usq, pid = (*(u.flatten() for u in (g, w, m, v, coef, wsq, usq)), _range(P, 0))
    idx, ok, ranges = _blocks(n, P, pid, 1)
    j = idx.valid(ok)
    mv, vv = moments(g, m, v, coef, j)
    wv = ok.where(w[j], 0.0)
    u = ok.where(_tinygrad_direction(mv, vv, w[j], coef, eps, wd), 0.0)
    off = meta.flatten()[0].cast(dtypes.weakint) + pid
    stores = UOp.group(wsq[off].store(_sum(wv * wv, *ranges)),
                       usq[off].store(_sum(u * u, *ranges)))
    return _end(stores, pid).sink(arg=KernelInfo(name=f"lamb_partials_{n}", opts_to_apply=()))
  def store(g: UOp, m: UOp, v: UOp, coef: UOp) -> UOp:
    g, m, v, coef, j = (*(u.flatten() for u in (g, m, v, coef)), UOp.range(n, 0))
    mv, vv = moments(g, m, v, coef, j)
    return UOp.group(m[j].store(mv), v[j].store(vv)).end(j).sink(arg=KernelInfo(name=f"lamb_moments_{n}",
                                                                                opts_to_apply=()))
  return partials, store


def _tinygrad_update(n: int, P: int, eps: float, wd: float, adapt: bool):
  def fxn(w: UOp, m: UOp, v: UOp, coef: UOp, meta: UOp, wsq: UOp, usq: UOp) -> UOp:
    w, m, v, coef, wsq, usq, j = (*(u.flatten() for u in (w, m, v, coef, wsq, usq)), UOp.range(n, 0))
    step = coef[3]
    if adapt:
      base = meta.flatten()[0].cast(dtypes.weakint)
      p1, p2 = _range(P, 1, AxisType.REDUCE), _range(P, 2, AxisType.REDUCE)
      r1, r2 = _sum(wsq[base + p1], p1).sqrt(), _sum(usq[base + p2], p2).sqrt()
      step = step * (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
    new = w[j] - step * _tinygrad_direction(m[j], v[j], w[j], coef, eps, wd)
    return w[j].store(new).end(j).sink(arg=KernelInfo(name=f"lamb_update_{n}", opts_to_apply=()))
  return fxn


# ---- the optimizer step ----

def _constant(value: int, device) -> Tensor:
  """A realized (1,) int32 holding value, on every device of device."""
  devs = prg.devices(device)
  t = Tensor([value], dtype=dtypes.int32, device=devs[0])
  return (t.shard(devs) if len(devs) > 1 else t).contiguous().realize()


def gradient_source(g: Tensor) -> Tensor:
  """The gradient as a kernel reads it: where the backward left an fp16 (bf16) result cast to the fp32 weight's dtype,
  that result itself (the kernels convert on load: no fp32 copy written), else g."""
  u = g.uop
  if u.op is Ops.CAST and u.src[0].dtype in (dtypes.half, dtypes.bfloat16): g = Tensor(u.src[0])
  return prg.contiguous(g)


def launches(keys: list, limit: int = MAX_GROUP) -> list[list[int]]:
  """The indices of keys grouped by key (in order of first appearance), each group split into launches of at most
  limit: the tensors one launch of a kernel updates."""
  by_key: dict = {}
  for i, k in enumerate(keys): by_key.setdefault(k, []).append(i)
  return [ix[j:j + limit] for ix in by_key.values() for j in range(0, len(ix), limit)]


def _launch(k: prg.Compiled, srcs: list[Tensor], outs: tuple[int, ...], nbytes: int, flops: int, grid: int):
  """srcs after Triton kernel k ran on them (in its argument order) with grid programs, writing the slots outs."""
  device, n_args = srcs[0].device, len(srcs)
  fx = lambda *params: prg.program(k, list(params), grid, outs=outs, ins=tuple(i for i in range(n_args) if i not in outs),
                                   device=device, flops=flops, nbytes=nbytes)
  return srcs[0].custom_kernel(*srcs[1:], *prg.scratch(device), fxn=fx)[:n_args]


def sumsq(gs: list[Tensor], metas: list[Tensor], gsq: Tensor) -> Tensor:
  """gsq after the programs of gs (tensors of one size and dtype) wrote their partial sums of g^2, each from its
  offset (metas)."""
  n, K, P = gs[0].numel(), len(gs), programs(gs[0].numel())
  if not prg.on_triton(gs[0]):
    for g, meta in zip(gs, metas): gsq = g.custom_kernel(meta, gsq, fxn=_tinygrad_sumsq(n, P))[2]
    return gsq
  k = compile_lamb("sumsq", n, prg.cuda_arch(gs[0].device), gs[0].dtype, count=K)
  return _launch(k, [*gs, *metas, gsq], (2 * K,), K * n * gs[0].dtype.itemsize, 2 * K * n, K * P)[2 * K]


def moments(o, gs: list[Tensor], ws: list[Tensor], ms: list[Tensor], vs: list[Tensor], metas: list[Tensor],
            coef: Tensor, wsq: Tensor, usq: Tensor):
  """(ms, vs, wsq, usq) after LAMB o's moment update of the tensors ws (one size, in place) and their partial sums of
  w^2 and u^2."""
  n, K, P = ws[0].numel(), len(ws), programs(ws[0].numel())
  if not prg.on_triton(ws[0]):
    partials, store = _tinygrad_moments(n, P, o.b1, o.b2, o.eps, o.wd)
    ms, vs = list(ms), list(vs)
    for i, (g, w, meta) in enumerate(zip(gs, ws, metas)):
      _, _, ms[i], vs[i], _, _, wsq, usq = g.custom_kernel(w, ms[i], vs[i], coef, meta, wsq, usq, fxn=partials)
      ms[i], vs[i] = g.custom_kernel(ms[i], vs[i], coef, fxn=store)[1:3]   # after the partials: it reads them first
    return ms, vs, wsq, usq
  k = compile_lamb("moments", n, prg.cuda_arch(ws[0].device), gs[0].dtype, o.b1, o.b2, o.eps, o.wd, count=K)
  outs = (*range(2 * K, 4 * K), 5 * K + 1, 5 * K + 2)   # m, v, wsq, usq
  out = _launch(k, [*gs, *ws, *ms, *vs, *metas, coef, wsq, usq], outs, K * n * (gs[0].dtype.itemsize + 20), 12 * K * n,
                K * P)
  return out[2 * K:3 * K], out[3 * K:4 * K], out[5 * K + 1], out[5 * K + 2]


def update(o, ws: list[Tensor], ms: list[Tensor], vs: list[Tensor], metas: list[Tensor], coef: Tensor, wsq: Tensor,
           usq: Tensor) -> list[Tensor]:
  """ws after LAMB o's update (in place), each its trust ratio summed from its partials."""
  n, K, P, adapt = ws[0].numel(), len(ws), programs(ws[0].numel()), not o.adam
  if not prg.on_triton(ws[0]):
    fxn = _tinygrad_update(n, P, o.eps, o.wd, adapt)
    return [w.custom_kernel(m, v, coef, meta, wsq, usq, fxn=fxn)[0] for w, m, v, meta in zip(ws, ms, vs, metas)]
  k = compile_lamb("update", n, prg.cuda_arch(ws[0].device), eps=o.eps, wd=o.wd, adapt=adapt, count=K)
  return _launch(k, [*ws, *ms, *vs, *metas, coef, wsq, usq], tuple(range(K)), 16 * K * n, 8 * K * n, K * P)[:K]


class FusedLAMB:
  """Clip + LAMB over the tensors of tinygrad LAMB optimizers (their params, m, v, b1^t, b2^t and lr: the same state
  that checkpoints save), stepped by the kernels above, one launch per kernel for up to MAX_GROUP tensors of one
  optimizer, size and gradient dtype; a LAMB with adam=True updates without the trust ratio. Made outside the jitted
  step (it realizes the offset constants)."""
  def __init__(self, optimizers, loss_scale: float, clip_norm: float):
    self.optimizers, self.loss_scale, self.clip_norm = list(optimizers), float(loss_scale), float(clip_norm)
    params = [p for o in self.optimizers for p in o.params]
    self.device = params[0].device
    self.offsets = [0]
    for p in params: self.offsets.append(self.offsets[-1] + programs(p.numel()))
    # tensor i's first partial: read by its kernels from a constant buffer, so one compile serves every tensor of a size
    self.meta = [_constant(o, self.device) for o in self.offsets[:-1]]
    # the moments as buffers before the first step writes them in place (tinygrad's LAMB makes them lazy zeros)
    Tensor.realize(*[t for o in self.optimizers for t in (*o.m, *o.v, o.b1_t, o.b2_t, o.lr)])

  def schedule_step(self) -> tuple[list[Tensor], Tensor]:
    """(tensors to realize: every weight, moment and b^t after its update; the global gradient norm before clipping,
    () fp32). Reads each param's .grad as the backward left it (scaled by loss_scale)."""
    dev, total = self.device, self.offsets[-1]
    # tensor i: (optimizer, param, m, v, gradient as read, offset constant)
    ts = [(o, p, m, v, gradient_source(p.grad)) for o in self.optimizers for p, m, v in zip(o.params, o.m, o.v)]
    ts = [(*t, meta) for t, meta in zip(ts, self.meta)]
    # each launch as columns: (its optimizer, params, ms, vs, gradients, offset constants)
    groups = [(ts[ix[0]][0], *([ts[i][c] for i in ix] for c in range(1, 6)))
              for ix in launches([(id(o), p.numel(), g.dtype) for o, p, _, _, g, _ in ts])]
    gsq = Tensor.empty(total, dtype=dtypes.float32, device=dev)
    for _, _, _, _, gs, metas in groups: gsq = sumsq(gs, metas, gsq)
    norm = gsq.sum().sqrt() * (1.0 / self.loss_scale)
    gscale = (norm > self.clip_norm).where(self.clip_norm / norm.maximum(1e-30), 1.0) * (1.0 / self.loss_scale)
    coefs, done = {}, []
    for o in self.optimizers:
      o.b1_t.assign(o.b1_t * o.b1)
      o.b2_t.assign(o.b2_t * o.b2)
      coefs[id(o)] = Tensor.cat(gscale.reshape(1), 1.0 - o.b1_t, 1.0 - o.b2_t, o.lr.float().reshape(1)).contiguous()
      done += [o.b1_t, o.b2_t]
    wsq, usq = (Tensor.empty(total, dtype=dtypes.float32, device=dev) for _ in range(2))
    for o, ps, ms, vs, gs, metas in groups:
      new_ms, new_vs, wsq, usq = moments(o, gs, ps, ms, vs, metas, coefs[id(o)], wsq, usq)
      for m, v, m_new, v_new in zip(ms, vs, new_ms, new_vs):
        m.uop, v.uop = m_new.uop, v_new.uop   # in place: the state tensors now read their buffers after the kernel
      done += [*ms, *vs]
    for o, ps, ms, vs, _, metas in groups:   # after every tensor's partials: each update sums its own from wsq, usq
      for p, p_new in zip(ps, update(o, ps, ms, vs, metas, coefs[id(o)], wsq, usq)): p.uop = p_new.uop
      done += ps
    return done, norm


def supported(optimizers) -> bool:
  """The fused step can run: fp32 weights and moments (the kernels' pointer types). Triton's kernels on CUDA, tinygrad
  kernels of the same plan elsewhere."""
  return all(t.dtype == dtypes.float32 for o in optimizers for t in (*o.params, *o.m, *o.v))
