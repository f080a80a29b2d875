"""Fused residual add + LayerNorm (benchmarks/kernels/layernorm.py) on the CPU: the Triton forward and backward kernels
run by Triton's interpreter against the model's LayerNorm (benchmarks/bert/model.py) and tinygrad's autograd through
it, the custom_kernel + grad wiring through the tinygrad fallback, and both cubins compiled ahead for an H200."""
from __future__ import annotations
import os
os.environ["TRITON_INTERPRET"] = "1"   # before Triton's first import: its language functions are then interpreted too
import json
import subprocess
import sys

import numpy as np
import pytest
from tinygrad import Context, Tensor, TinyJit, dtypes

triton = pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")
from triton.runtime.interpreter import InterpretedFunction   # noqa: E402

from tinyperf.benchmarks.bert.model import LN_EPS, LayerNorm          # noqa: E402
from tinyperf.benchmarks.kernels import dropout as dr                 # noqa: E402
from tinyperf.benchmarks.kernels import layernorm as ln, program as prg   # noqa: E402
from tests.conftest import REPO, captured_kernels            # noqa: E402
from tests.unit.test_kernels import HostArray, compiled_facts                # noqa: E402
from tests.unit.test_kernels_dropout import keep_mask        # noqa: E402
from tests.unit.test_kernels_attention import copy_kernels   # noqa: E402

BM, ROWS = 4, 12   # interpreter tiles: 37 or 50 rows give a partial last block and several backward programs


def inputs(M: int, N: int, seed: int = 0):
  """fp16 x, residual, dy (M, N); fp32 weight and bias near the trained values' scale."""
  rng = np.random.default_rng(seed)
  x, r, dy = (rng.standard_normal((M, N)).astype(np.float16) for _ in range(3))
  w = (1 + 0.2 * rng.standard_normal(N)).astype(np.float32)
  b = (0.2 * rng.standard_normal(N)).astype(np.float32)
  return x, r, w, b, dy


def run_forward(x, r, w, b, p_drop=0.0, seed=0, group=dr.RNG_GROUP):
  M, N = x.shape
  y, mean, rstd = np.zeros_like(x), np.zeros(M, np.float32), np.zeros(M, np.float32)
  args = (x, r, w, b, np.array([seed], np.uint32), y, mean, rstd)
  InterpretedFunction(ln.add_ln_fwd_kernel)[(-(-M // BM),)](*map(HostArray, args), M, N, LN_EPS, p_drop, BM,
                                                            prg.pow2(N), group)
  return y, mean, rstd


def run_backward(x, r, w, dy, mean, rstd, p_drop=0.0, seed=0, group=dr.RNG_GROUP, dy2=None):
  """-> dr, dx (x's gradient: dr itself without dropout, the kernel then writes none), dweight, dbias. dy2: the output's
  gradient is dy + dy2, which the kernel adds."""
  M, N = x.shape
  grid = -(-M // ROWS)
  dr, dx, dw, db = np.zeros_like(x), np.zeros_like(x), np.zeros((grid, N), np.float32), np.zeros((grid, N), np.float32)
  args = (x, r, w, np.array([seed], np.uint32), dy, np.zeros(1, x.dtype) if dy2 is None else dy2, mean, rstd, dr, dx,
          dw, db)
  InterpretedFunction(ln.add_ln_bwd_kernel)[(grid,)](*map(HostArray, args), M, N, p_drop, BM, prg.pow2(N), ROWS,
                                                      group, int(dy2 is not None))
  return dr, dx if p_drop > 0 else dr, dw.sum(0), db.sum(0)


def reference(x, r, w, b, dy):
  """The model's LayerNorm of the fp16 sum, and tinygrad's autograd through it: out, mean, rstd and the gradients of
  the sum, weight and bias (fp32)."""
  s = Tensor((x + r).astype(np.float32))   # numpy adds fp16 as the model does: one rounding to fp16
  layer = LayerNorm(x.shape[1])
  layer.weight, layer.bias = Tensor(w), Tensor(b)
  out = layer(s)
  grads = (out.float() * Tensor(dy).float()).sum().gradient(s, layer.weight, layer.bias)
  sf = (x + r).astype(np.float32)
  mu = sf.mean(1)
  return (out.numpy(), mu, 1 / np.sqrt(((sf - mu[:, None]) ** 2).mean(1) + LN_EPS), *(g.numpy() for g in grads))


def within_fp16_rounding(got, ref, atol):
  """fp32 math rounded once to fp16 (relative 2^-11) is within that of the fp32 reference, element by element."""
  return bool((np.abs(got.astype(np.float32) - ref) <= 2 ** -11 * np.abs(ref) + atol).all())


@pytest.mark.parametrize("M,N", [(37, 64), (50, 1024), (37, 48)], ids=["hidden64", "hidden1024", "masked_columns"])
def test_forward_and_backward_interpreted_equal_the_models_math(M, N):
  assert triton.knobs.runtime.interpret, "Triton was imported before this module set TRITON_INTERPRET=1"
  x, r, w, b, dy = inputs(M, N, seed=M + N)
  y, mean, rstd = run_forward(x, r, w, b)
  dr, dx, dw, db = run_backward(x, r, w, dy, mean, rstd)
  ref_y, ref_mean, ref_rstd, ref_ds, ref_dw, ref_db = reference(x, r, w, b, dy)
  np.testing.assert_allclose(mean, ref_mean, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(rstd, ref_rstd, rtol=1e-5)
  assert within_fp16_rounding(y, ref_y, 1e-5) and within_fp16_rounding(dr, ref_ds, 1e-4)   # seen: 2^-11 * |ref|
  # dweight, dbias: fp32 sums over the rows in another order (per-program partials, then their sum)
  np.testing.assert_allclose(dw, ref_dw, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(db, ref_db, rtol=1e-4, atol=1e-4)


def test_the_backward_adds_a_gradient_given_as_two_terms():
  """dy + dy2 read by the kernel (DY2) equals the backward of their sum, up to the sum's one fp16 rounding the kernel
  does not make; a term left out is measurably wrong."""
  x, r, w, b, dy = inputs(50, 1024, seed=3)
  dy2 = inputs(50, 1024, seed=4)[4]
  _, mean, rstd = run_forward(x, r, w, b)
  got = run_backward(x, r, w, dy, mean, rstd, dy2=dy2)
  ref_ds, ref_dw, ref_db = reference(x, r, w, b, dy.astype(np.float32) + dy2.astype(np.float32))[3:]
  assert within_fp16_rounding(got[0], ref_ds, 1e-4)
  np.testing.assert_allclose(got[2], ref_dw, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(got[3], ref_db, rtol=1e-4, atol=1e-4)
  one_term = run_backward(x, r, w, dy, mean, rstd)[0]
  assert np.abs(one_term.astype(np.float32) - ref_ds).max() > 0.1 * np.abs(ref_ds).max()


def test_the_backward_reads_the_forwards_statistics():
  """A backward given another row's statistics is measurably wrong: the check above can tell them apart."""
  x, r, w, b, dy = inputs(37, 64, seed=1)
  _, mean, rstd = run_forward(x, r, w, b)
  dr = run_backward(x, r, w, dy, np.roll(mean, 1), np.roll(rstd, 1))[0]
  ref_ds = reference(x, r, w, b, dy)[3]
  assert np.abs(dr.astype(np.float32) - ref_ds).max() > 0.1 * np.abs(ref_ds).max()


@pytest.mark.parametrize("group", dr.GROUPS, ids=lambda g: f"rng_group{g}")
def test_dropout_is_seeded_keeps_one_minus_p_and_the_backward_draws_the_same_mask(group):
  """The kernels against the model's math with the mask dropout.keep_mask draws for each element (its own tests:
  test_kernels_dropout.py), over rows of 64 drawn here in one tile per 16 rows."""
  M, N, p, seed = 64, 64, 0.25, 7
  keep = keep_mask(M, N, p, seed, group, tile=(16, N))
  assert abs(keep.mean() - (1 - p)) < 0.03   # 4096 draws: 0.03 is over 4 standard deviations
  assert (keep != keep_mask(M, N, p, seed + 1, group, tile=(16, N))).mean() > 0.2
  x, r, w, b, dy = inputs(M, N, seed=2)
  xd = np.where(keep, (x.astype(np.float32) * np.float32(1 / (1 - p))).astype(np.float16), np.float16(0))
  y, mean, rstd = run_forward(x, r, w, b, p, seed, group)
  dr, dx, dw, db = run_backward(x, r, w, dy, mean, rstd, p, seed, group)
  ref_y, ref_mean, _, ref_ds, ref_dw, ref_db = reference(xd, r, w, b, dy)
  np.testing.assert_allclose(mean, ref_mean, rtol=1e-5, atol=1e-6)
  assert within_fp16_rounding(y, ref_y, 1e-5) and within_fp16_rounding(dr, ref_ds, 1e-4)
  assert within_fp16_rounding(dx, np.where(keep, ref_ds / (1 - p), 0), 1e-4)   # the residual is not dropped out
  np.testing.assert_allclose(dw, ref_dw, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(db, ref_db, rtol=1e-4, atol=1e-4)
  # a backward drawing another seed's mask is measurably wrong: the checks above can tell masks apart
  dx8 = run_backward(x, r, w, dy, mean, rstd, p, seed + 1, group)[1]
  assert np.abs(dx8.astype(np.float32) - np.where(keep, ref_ds / (1 - p), 0)).max() > 0.1 * np.abs(ref_ds).max()


@pytest.mark.parametrize("p_drop", [0.0, 0.3], ids=["no_dropout", "dropout"])
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.half], ids=["fp32", "fp16"])
def test_add_layernorm_and_its_gradients_through_custom_kernel(dtype, p_drop):
  """add_layernorm's custom_kernel call and grad function on the CPU (the tinygrad fallback, a hash for Philox): out
  and the gradients of x, residual, weight and bias equal tinygrad's autograd through the model's
  LayerNorm(dropout(x) + residual) with the fallback's mask."""
  rng = np.random.default_rng(3)
  shape = (2, 5, 24)
  x, r, g = (Tensor(rng.standard_normal(shape).astype(np.float32)).cast(dtype) for _ in range(3))
  w = Tensor((1 + 0.2 * rng.standard_normal(24)).astype(np.float32))
  b = Tensor(rng.standard_normal(24).astype(np.float32))
  seed = Tensor([7], dtype=dtypes.uint32)
  with Context(TRAINING=1):
    out = ln.add_layernorm(x, r, w, b, LN_EPS, p_drop, seed=seed)
    grads = (out.float() * g.float()).sum().gradient(x, r, w, b)
  xd = x
  if p_drop:
    keep = ln._keep(10, 24, seed, p_drop).reshape(shape)
    assert abs(keep.float().mean().item() - (1 - p_drop)) < 0.1
    xd = keep.where(x.float() * (1 / (1 - p_drop)), 0.0).cast(dtype)
  layer = LayerNorm(24)
  layer.weight, layer.bias = w, b
  ref = layer(xd, r)
  ref_grads = (ref.float() * g.float()).sum().gradient(x, r, w, b)
  tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == dtypes.float32 else {"rtol": 2e-3, "atol": 2e-3}
  assert out.shape == shape and out.dtype == dtype
  np.testing.assert_allclose(out.float().numpy(), ref.float().numpy(), **tol)
  for got, want in zip(grads, ref_grads):
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), **tol)
  if not p_drop: np.testing.assert_array_equal(grads[0].numpy(), grads[1].numpy())   # both addends: the sum's gradient


def test_dropout_only_in_training_and_a_new_seed_per_call():
  rng = np.random.default_rng(4)
  x, r = (Tensor(rng.standard_normal((8, 16)).astype(np.float32)) for _ in range(2))
  w, b = Tensor.ones(16), Tensor.zeros(16)
  plain = ln.add_layernorm(x, r, w, b, LN_EPS, 0.3).numpy()   # TRAINING unset: no dropout, as Tensor.dropout
  np.testing.assert_allclose(plain, ln.add_layernorm(x, r, w, b, LN_EPS).numpy())
  with Context(TRAINING=1):
    one, two = (ln.add_layernorm(x, r, w, b, LN_EPS, 0.3).numpy() for _ in range(2))
  assert not np.allclose(one, plain) and not np.allclose(one, two)   # seed None: tinygrad's RNG draws a new seed


def test_a_jitted_step_schedules_once_and_draws_a_new_dropout_mask_each_step():
  """The grad function is one object per (eps, p), so the capture step hits tinygrad's schedule cache (test_kernels.py's
  test_a_jitted_step_with_the_kernels_schedules_once says why that matters); the seed is drawn inside the step."""
  from tinygrad.schedule import schedule_cache
  w = Tensor.ones(16).contiguous().realize()
  x = Tensor(np.random.default_rng(0).random((8, 16), np.float32)).realize()
  Tensor.randint(1, high=2).realize()   # the device's RNG state is made by its first draw, once per process, not per step
  @TinyJit
  def step(x: Tensor) -> Tensor:
    return ln.add_layernorm(x, x * 2, w, w, LN_EPS, 0.3).sum().gradient(w)[0].realize()
  sizes, outs = [], []
  with Context(TRAINING=1):
    for _ in range(4):   # captured at the second call, replayed after
      outs.append(step(x).numpy())
      sizes.append(len(schedule_cache))
  assert len(set(sizes)) == 1, f"schedule cache entries after each step: {sizes}"
  assert all(not np.allclose(outs[i], outs[i + 1]) for i in range(3))


def test_a_step_captured_on_its_first_call_plans_the_outputs_and_makes_nothing_of_its_own(monkeypatch):
  """runtime.captured_jit over a chain of dropout sites: tinygrad's uncaptured first call keeps every output of a
  custom kernel (a Tensor.empty, which its memory planner leaves alone) to the end of the step, the capture's plan
  reuses them: a lower peak. The captured kernels are tinygrad's order's: a site's seed constant realized inside the
  step would have been captured as a copy, replayed at every step."""
  from tinygrad import GlobalCounters
  from tinygrad.device import Buffer
  from tinyperf.benchmarks.common.runtime import captured_jit
  w = Tensor.ones(64).contiguous().realize()
  x = Tensor(np.random.default_rng(0).random((256, 64), np.float32)).realize()
  Tensor.randint(1, high=2).realize()   # the device's RNG state, made outside the step
  peak, allocate = [0], Buffer.allocate
  def counted(self, *a, **kw):
    out = allocate(self, *a, **kw)
    peak[0] = max(peak[0], GlobalCounters.mem_used_per_device[self.device])
    return out
  monkeypatch.setattr(Buffer, "allocate", counted)
  def chain(x: Tensor) -> Tensor:
    with dr.step_seeds():
      y = x
      for _ in range(6): y = ln.add_layernorm(y, x, w, w, LN_EPS, 0.1)
    return y.sum().realize()
  runs = {}
  for order in ("captured first", "tinygrad's"):
    step = captured_jit(chain)   # no training state to realize
    if order == "tinygrad's": step.cnt = 0   # _TinyJit's own start: call 0 runs uncaptured
    with Context(TRAINING=1):
      base = GlobalCounters.mem_used_per_device["CPU"]
      peak[0] = base
      step(x)
      first_peak = peak[0] - base
      for _ in range(2): step(x)
    runs[order] = first_peak, captured_kernels(step)
  (first_peak, first_kernels), (tinygrad_peak, tinygrad_kernels) = runs["captured first"], runs["tinygrad's"]
  assert first_kernels == tinygrad_kernels
  assert first_peak < tinygrad_peak - 3 * 256 * 64 * 4, (first_peak, tinygrad_peak)   # three outputs' worth at least


@pytest.mark.parametrize("kernels,calls", [("tinygrad", 0), ("triton", 2 * 2 + 1)])
def test_bert_sends_each_residual_layernorm_through_add_layernorm(monkeypatch, kernels, calls):
  """Under KERNELS=triton: both of each layer's LayerNorm(dense + residual) and the embeddings' (words + positions,
  types); not the MLM head's LayerNorm of gelu(dense), which has no sum. The values: test_kernels.py's knob test."""
  from tinyperf.benchmarks.bert.model import BertConfig, BertForPretraining
  seen = []
  monkeypatch.setattr(ln, "add_layernorm", lambda *a, **k: seen.append(a[0].shape) or a[0] + a[1])
  c = BertConfig(layers=2, hidden=16, heads=2, intermediate=32, vocab=50, max_positions=16, kernels=kernels)
  ids = Tensor.zeros(2, 8, dtype=dtypes.int32)
  BertForPretraining(c)(ids, ids, ids + 1, Tensor.zeros(2, 3, dtype=dtypes.int32))   # shapes only: nothing realized
  assert seen == [(2, 8, 16)] * calls


def test_mismatched_shapes_are_refused():
  x = Tensor.zeros(4, 16)
  with pytest.raises(ValueError, match="add_layernorm"):
    ln.add_layernorm(x, Tensor.zeros(4, 8), Tensor.ones(16), Tensor.zeros(16), LN_EPS)
  with pytest.raises(ValueError, match="add_layernorm"):
    ln.add_layernorm(x, x, Tensor.ones(8), Tensor.zeros(16), LN_EPS)


def test_h200_cubins_compile_here_with_the_launch_facts():
  """Both kernels compiled ahead for sm_90 at BERT-large's shape (96 x 512 rows of 1024, dropout 0.1) by Triton's own
  ptxas, without a GPU: 16-byte vector loads, Philox (and none at dropout 0), shared memory within the 227 KB a block
  may have, the block size of the tile, the kernel's pointers + Triton's two scratch parameters, and a backward grid
  that fills the GPU with few partial rows."""
  code = """
import json
from tinygrad import dtypes
from tinyperf.benchmarks.kernels import layernorm as ln
out = {}
for which in ("fwd", "bwd"):
  k, grid = ln.compile_layernorm(which, 96 * 512, 1024, 1e-12, 0.1, dtypes.half, 90)
  params = [l for l in k.ptx.splitlines() if ".param .u64" in l]
  out[which] = {"name": k.name, "smem": k.smem, "threads": k.threads, "params": len(params), "cubin": len(k.cubin),
                "grid": grid, "v4_loads": "ld.global.v4" in k.ptx, "philox": "mul.hi.u32" in k.ptx,
                "warps": ln.TILES[which][-1]}
  out[which]["philox_at_p0"] = "mul.hi.u32" in ln.compile_layernorm(which, 96 * 512, 1024, 1e-12, 0.0, dtypes.half,
                                                                     90)[0].ptx
print(json.dumps(out))
"""
  got = compiled_facts(code)
  for which, name in (("fwd", "add_ln_fwd_kernel"), ("bwd", "add_ln_bwd_kernel")):
    g = got[which]
    assert g["name"] == name and g["cubin"] > 1000 and g["v4_loads"], g
    assert g["philox"] and not g["philox_at_p0"], g   # p 0: compiled out
    assert 0 <= g["smem"] <= 227 * 1024 and g["threads"] == 32 * g["warps"], g
    assert g["params"] == len(ln.pointers(which, dtypes.half)) + 2, g
  assert got["fwd"]["grid"] == 96 * 512 // ln.TILES["fwd"][0]
  assert ln.SMS <= got["bwd"]["grid"] <= 4 * ln.SMS   # every multiprocessor busy; dw, db partials stay ~1 MB

def test_bench_script_checks_and_times_every_candidate_on_the_cpu():
  """lab/scripts/bench_layernorm.py at a small shape on the CPU (both layers run tinygrad kernels there): the check line
  and one timing line per implementation, tile set and dropout grouping, so the GPU command that measures it cannot
  fail on the script."""
  cmd = [sys.executable, "lab/scripts/bench_layernorm.py", "--rows", "40", "--hidden", "64", "--rng", "1,4"]
  r = subprocess.run(cmd, cwd=REPO, env={**os.environ, "DEV": "CPU"}, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  check, *timed = (json.loads(line) for line in r.stdout.splitlines())
  for n in ("out", "dx", "dresidual", "dweight", "dbias"):
    assert check[f"{n}_max_abs_diff"] <= 1e-3 * check[f"{n}_ref_max_abs"], check
  sys.path.insert(0, str(REPO / "lab" / "scripts"))
  try: import bench_layernorm
  finally: sys.path.pop(0)
  n = len(bench_layernorm.CANDIDATES)
  want = [("tinygrad", None)] + [("triton", 1)] * n + [("triton", 4)] * n
  assert [(t["impl"], t["rng_group"]) for t in timed] == want
  assert all(t["fwd_ms"] > 0 and t["fwd_bwd_ms"] > 0 for t in timed), timed


def test_a_gradient_summed_from_two_kernel_outputs_is_read_as_two_terms(monkeypatch):
  """A LayerNorm output that feeds two GEMMs (in BERT: the next projection and, as residual, the next LayerNorm) gets
  the sum of two kernel outputs as its gradient: the backward takes both terms (on CUDA the kernel adds them, with no
  add kernel of tinygrad's). The gradients equal those of the model's plain ops; a lazy sum stays one term."""
  from tinyperf.benchmarks.bert.model import Linear
  rng = np.random.default_rng(5)
  d1, d2, d3, d4 = (Linear(16, 16, rng, "triton") for _ in range(4))
  norm = LayerNorm(16, rng, kernels="triton")
  x = Tensor(rng.standard_normal((2, 8, 16)).astype(np.float32))
  params = [p for d in (d1, d2, d3, d4, norm) for p in (d.weight, d.bias)]
  Tensor.realize(x, *params)
  terms = []
  monkeypatch.setattr(ln, "_gradient_terms", lambda *a, real=ln._gradient_terms: terms.append(len(t := real(*a))) or t)
  def grads(kernels: str, head):
    for m in (d1, d2, d3, d4, norm): m.kernels = kernels
    y = norm(d1(x), d2(x))
    return [g.numpy() for g in head(y).square().sum().gradient(d1.weight, norm.weight, norm.bias)]
  two_gemms = lambda y: d3(y) + d4(y)
  for got, want in zip(grads("triton", two_gemms), grads("tinygrad", two_gemms)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  assert terms == [2]
  grads("triton", lambda y: d3(y) + y * 2)   # one term a kernel output, the other tinygrad's ops: summed lazily
  assert terms == [2, 1]


def test_gemm_outputs_go_into_the_fused_layernorm_and_back_without_a_copy():
  """KERNELS=triton on the CPU, as BERT chains them: two dense outputs, (B, L, H) reshapes of GEMM outputs, are
  add_layernorm's x and residual, and its output the next dense's input; forward and backward to the first dense's
  weight schedule no copy kernel (tinygrad's contiguous() copies a reshaped kernel output). The check can fail: a
  flipped residual is one copy more."""
  from tinyperf.benchmarks.bert.model import Linear
  rng = np.random.default_rng(2)
  d1, d2, d3 = (Linear(16, 16, rng, "triton") for _ in range(3))
  norm = LayerNorm(16, rng, kernels="triton")
  x = Tensor(rng.standard_normal((2, 8, 16)).astype(np.float32))
  Tensor.realize(x, *(p for d in (d1, d2, d3, norm) for p in (d.weight, d.bias)))
  with Context(TRAINING=1):
    out = d3(norm(d1(x), d2(x), 0.1))
    assert copy_kernels(out, *out.square().sum().gradient(d1.weight)) == []
    assert len(copy_kernels(norm(d1(x), d2(x).flip(1), 0.1))) == 1   # a view out of memory order: copied once

