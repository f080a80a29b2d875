"""Clip + LAMB kernels (benchmarks/kernels/lamb.py) on the CPU: three steps of the Triton kernels run by Triton's
interpreter, in place on numpy buffers, against the tinygrad path they replace (clip_and_unscale + tinygrad's LAMB,
itself checked against numpy in test_bert_optim.py); the kernels compiled ahead for an H200; the tinygrad path's
kernels, in place through a TinyJit, against the same."""
from __future__ import annotations
import os
os.environ["TRITON_INTERPRET"] = "1"   # before Triton's first import: its language functions are then interpreted too
import json
import subprocess
import sys

import numpy as np
import pytest
from tinygrad import Context, Tensor, TinyJit

triton = pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")
from triton.runtime.interpreter import InterpretedFunction   # noqa: E402

from tinyperf.benchmarks.bert.optim import build_optimizer, clip_and_unscale, fused_step   # noqa: E402
from tinyperf.benchmarks.kernels import lamb, program as prg                         # noqa: E402
from tests.conftest import REPO                                                       # noqa: E402
from tests.unit.test_kernels import HostArray, compiled_facts                                         # noqa: E402

LR, B1, B2, EPS, WD = 0.05, 0.9, 0.99, 1e-6, 0.01
BLOCK, MAX_PROGRAMS = 32, 3   # interpreter tiles: 200 elements take 3 programs striding over 7 blocks, the last partial


def run(kernel, grid: int, *args, consts=()):
  host = lambda a: HostArray(a) if isinstance(a, np.ndarray) else a
  InterpretedFunction(kernel)[(grid,)](*(tuple(map(host, a)) if isinstance(a, tuple) else host(a) for a in args),
                                       *consts)


def interpreted_step(ws, ms, vs, grads, adapt, t: int, loss_scale: float, clip: float, limit: int) -> float:
  """One step of the three kernels over every tensor, as FusedLAMB.schedule_step chains them: one launch per kernel
  for up to limit tensors of one size and optimizer (lamb.launches), the partials of all tensors in shared buffers at
  each tensor's offset; ws, ms, vs updated in place. Returns the norm."""
  progs = [min(MAX_PROGRAMS, -(-w.size // BLOCK)) for w in ws]
  offsets = np.cumsum([0] + progs)
  gsq, wsq, usq = (np.full(offsets[-1], np.nan, np.float32) for _ in range(3))   # every slot written before it is read
  metas = [np.array([o], np.int32) for o in offsets[:-1]]
  # each launch: its tensors' indices, their size, programs each and whether they adapt (one optimizer, one size)
  groups = [(ix, ws[ix[0]].size, progs[ix[0]], adapt[ix[0]])
            for ix in lamb.launches([(a, w.size) for a, w in zip(adapt, ws)], limit)]
  pick = lambda xs, ix: tuple(xs[i] for i in ix)
  for ix, n, P, _ in groups:
    run(lamb.sumsq_kernel, len(ix) * P, pick(grads, ix), pick(metas, ix), gsq, consts=(n, P, len(ix), BLOCK))
  norm = np.float32(np.sqrt(gsq.sum(dtype=np.float32))) * np.float32(1 / loss_scale)
  gscale = (np.float32(clip) / norm if norm > clip else np.float32(1.0)) * np.float32(1 / loss_scale)
  coef = np.array([gscale, 1 - B1 ** t, 1 - B2 ** t, LR], np.float32)
  for ix, n, P, a in groups:
    run(lamb.lamb_moments_kernel, len(ix) * P, *(pick(xs, ix) for xs in (grads, ws, ms, vs, metas)), coef, wsq, usq,
        consts=(n, P, len(ix), B1, B2, EPS, WD * a, BLOCK))
  for ix, n, P, a in groups:
    run(lamb.lamb_update_kernel, len(ix) * P, *(pick(xs, ix) for xs in (ws, ms, vs, metas)), coef, wsq, usq,
        consts=(n, P, len(ix), EPS, WD * a, a, BLOCK, prg.pow2(P)))
  return float(norm)


def test_launches_group_by_key_in_order_and_split_at_the_limit():
  """The tensors one launch updates: grouped by (optimizer, size, dtype) in order of first appearance, at most limit
  per launch."""
  keys = ["a", "b", "a", "a", "c", "b", "a"]
  assert lamb.launches(keys, 2) == [[0, 2], [3, 6], [1, 5], [4]]
  assert lamb.launches(keys, 32) == [[0, 2, 3, 6], [1, 5], [4]]
  assert lamb.launches([], 2) == []


@pytest.mark.parametrize("loss_scale,clip", [(1024.0, 1.0), (1.0, 1e6)], ids=["clipped", "unclipped"])
def test_three_interpreted_steps_equal_tinygrads_clip_and_lamb(loss_scale, clip):
  """Four decayed tensors (two of 200 elements: three programs, a partial block; two of 5, one all zeros: trust ratio
  1) and three of 37 without decay or trust ratio, fp16 gradients scaled by the loss scale, launched two tensors at a
  time (one launch of one): weights, moments and norm after each of three steps equal tinygrad's clip_and_unscale +
  LAMB within fp32 rounding."""
  assert triton.knobs.runtime.interpret, "Triton was imported before this module set TRITON_INTERPRET=1"
  rng = np.random.default_rng(3)
  shapes, adapt = [(10, 20), (5,), (20, 10), (5,), (37,), (37,), (37,)], [True] * 4 + [False] * 3
  w0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  w0[3][:] = 0
  grads = [[(rng.standard_normal(s) * loss_scale * 0.3).astype(np.float16) for s in shapes] for _ in range(3)]
  ws, ms, vs = [w.copy() for w in w0], [np.zeros_like(w) for w in w0], [np.zeros_like(w) for w in w0]
  params = [Tensor(w.copy()) for w in w0]
  opt = build_optimizer(params[:4], params[4:], LR, B1, B2, EPS, WD)
  for t in range(1, 4):
    norm = interpreted_step(ws, ms, vs, grads[t - 1], adapt, t, loss_scale, clip, limit=2)
    for p, g in zip(params, grads[t - 1]): p.grad = Tensor(g).float()
    clipped, ref_norm = clip_and_unscale([p.grad for p in params], loss_scale, clip)
    for p, g in zip(params, clipped): p.grad = g.contiguous()
    with Context(TRAINING=1): Tensor.realize(ref_norm, *opt.schedule_step())
    assert norm == pytest.approx(ref_norm.item(), rel=1e-5)
    if clip == 1.0: assert norm > clip   # the clipped case clips
    state = [*opt[0].m, *opt[1].m, *opt[0].v, *opt[1].v]
    for got, ref in zip(ws + ms + vs, [p.numpy() for p in params] + [s.numpy() for s in state]):
      np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-7)
  assert all(not np.allclose(w, w_0) for w, w_0 in zip(ws, w0))   # the steps moved every weight


def test_h200_cubins_compile_here_at_berts_sizes():
  """The three kernels compiled ahead for sm_90 by Triton's own ptxas, without a GPU, for BERT-large's largest tensor
  (the 30522 x 1024 word embeddings, fp32 gradient, alone) and MAX_GROUP 1024 x 4096 ones with fp16 gradients in one
  launch: 16-byte vector loads (the pointer picked per program keeps its alignment), each tensor's pointers + the
  shared ones + Triton's two scratch parameters, no local memory (spills), and the body compiled once, not per tensor
  (the grouped kernel has as many vector loads as the single one's)."""
  code = """
import json
from tinygrad import dtypes
from tinyperf.benchmarks.kernels import lamb
out = []
for n, gd, count in ((30522 * 1024, dtypes.float32, 1), (1024 * 4096, dtypes.half, 1), (1024 * 4096, dtypes.half, lamb.MAX_GROUP)):
  for which in ("sumsq", "moments", "update"):
    k = lamb.compile_lamb(which, n, 90, gd, 0.9, 0.999, 1e-6, 0.01, True, count=count)
    out.append({"which": which, "count": count, "name": k.name, "threads": k.threads, "cubin": len(k.cubin),
                "params": sum(".param .u64" in l for l in k.ptx.splitlines()), "v4": k.ptx.count("ld.global.v4"),
                "local": "ld.local" in k.ptx or "st.local" in k.ptx, "gd": str(gd), "grid": lamb.programs(n)})
print(json.dumps(out))
"""
  got = compiled_facts(code)
  assert len(got) == 9
  for g in got:
    assert g["name"] == {"sumsq": "sumsq_kernel", "moments": "lamb_moments_kernel", "update": "lamb_update_kernel"}[
      g["which"]], g
    assert g["cubin"] > 1000 and g["v4"] and not g["local"] and g["threads"] == 32 * lamb.WARPS, g
    shared = sum(isinstance(t, str) for _, t in lamb.pointers(g["which"]))
    per_tensor = len(lamb.pointers(g["which"])) - shared
    assert g["params"] == g["count"] * per_tensor + shared + 2, g
    assert g["grid"] == lamb.MAX_PROGRAMS, g
  single, grouped = got[3:6], got[6:]
  assert [a["v4"] for a in single] == [b["v4"] for b in grouped], (single, grouped)


@pytest.mark.parametrize("devices", [None, ("CPU:0", "CPU:1")], ids=["one_device", "two_devices"])
def test_the_jitted_step_updates_in_place_as_tinygrads_lamb_on_the_cpu(devices):
  """FusedLAMB through the tinygrad path, as BERT's train step runs it under KERNELS=triton (a TinyJit, the state
  updated in place by custom kernels; on two devices every tensor replicated and each device's copy updated): four
  steps, the last two replays of the capture, equal clip_and_unscale + tinygrad's LAMB on one device; under
  KERNELS=tinygrad there is no fused step."""
  place = (lambda t: t.shard(devices)) if devices else (lambda t: t)
  rng = np.random.default_rng(1)
  shapes = [(100, 50), (5,), (37,)]   # 5000 elements: 3 programs of the GPU's plan; 5: one range of one step
  w0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  grads = [[(rng.standard_normal(s) * 300).astype(np.float16) for s in shapes] for _ in range(4)]
  ref, got = [Tensor(w.copy()).realize() for w in w0], [place(Tensor(w.copy())).realize() for w in w0]
  opt_ref, opt = (build_optimizer(ps[:2], ps[2:], LR, B1, B2, EPS, WD) for ps in (ref, got))
  knobs = {"LOSS_SCALER": 1024.0, "CLIP_NORM": 1.0}
  assert fused_step(opt, knobs | {"KERNELS": "tinygrad"}) is None
  fused = fused_step(opt, knobs | {"KERNELS": "triton"})

  @TinyJit
  @Context(TRAINING=1)
  def step(*gs: Tensor) -> Tensor:
    for p, g in zip(got, gs): p.grad = g.float()   # as the backward leaves them: fp16 results cast to fp32
    done, norm = fused.schedule_step()
    Tensor.realize(norm, *done)
    return norm

  for t in range(4):
    for p, g in zip(ref, grads[t]): p.grad = Tensor(g).float()
    clipped, ref_norm = clip_and_unscale([p.grad for p in ref], 1024.0, 1.0)
    for p, g in zip(ref, clipped): p.grad = g.contiguous()
    with Context(TRAINING=1): Tensor.realize(ref_norm, *opt_ref.schedule_step())
    norm = step(*(place(Tensor(g)).realize() for g in grads[t])).item()
    assert norm == pytest.approx(ref_norm.item(), rel=1e-5) and norm > 1.0
    for a, b in zip([*got, *opt[0].m, *opt[1].v], [*ref, *opt_ref[0].m, *opt_ref[1].v]):
      for copy in ([a.to(d) for d in devices] if devices else [a]):   # weights near 1: fp32 rounding
        np.testing.assert_allclose(copy.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
  assert step.captured is not None   # steps 3 and 4 replayed the capture


def test_bench_script_checks_and_times_both_sides_on_the_cpu():
  """lab/scripts/bench_lamb.py on a one-layer toy BERT on the CPU (the fused side runs tinygrad kernels there): the
  check line within fp32 rounding and one timing line per side, the fused side launching fewer kernels, so the GPU
  command that measures it cannot fail on the script."""
  cmd = [sys.executable, "lab/scripts/bench_lamb.py", "--layers", "1", "--hidden", "64", "--intermediate", "128",
         "--vocab", "100"]
  env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"DEV": "CPU"}
  r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  check, *timed = (json.loads(line) for line in r.stdout.splitlines())
  assert check["weights_moments_max_rel_diff"] < 1e-5 and check["norm_max_rel_diff"] < 1e-5, check
  assert check["norm"] > 1.0, check   # the clip acted
  assert [t["impl"] for t in timed] == ["tinygrad", "fused"] and all(t["ms"] > 0 for t in timed), timed
  assert timed[1]["kernels"] < timed[0]["kernels"], timed
