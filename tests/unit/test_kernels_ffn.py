"""BERT's feed-forward block as matmul.ffn (GELU in the up GEMM's epilogue, gelu' in the epilogue of the down layer's
data gradient) on the CPU: both epilogues run by Triton's interpreter against float64 math and the model's gelu, ffn's
custom_kernel + grad wiring through the tinygrad fallback against the model's ops and tinygrad's autograd, the cubins
compiled ahead for an H200, and the model sending each layer's FFN through ffn under KERNELS=triton only."""
from __future__ import annotations
import os
os.environ["TRITON_INTERPRET"] = "1"   # before Triton's first import: its language functions are then interpreted too
import math
import subprocess
import sys

import numpy as np
import pytest
from tinygrad import Tensor, TinyJit, dtypes

triton = pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")

from tinyperf.benchmarks.bert.model import gelu                       # noqa: E402
from tinyperf.benchmarks.kernels import matmul as mm                  # noqa: E402
from tests.conftest import REPO                              # noqa: E402
from tests.unit.test_kernels import compiled_facts, run_interpreted          # noqa: E402

erf = np.vectorize(math.erf, otypes=[np.float64])
SHAPES = {"even": (64, 96, 128), "uneven": (40, 72, 100)}   # (tokens, intermediate, hidden); 32-wide interpreter tiles


def gelu64(x): return x * 0.5 * (1 + erf(x / math.sqrt(2)))
def gelu_grad64(x): return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def within_fp16_rounding(got, ref, atol):
  """fp32 math rounded once to fp16 (relative 2^-11) is within that of the float64 reference, element by element."""
  return bool((np.abs(got.astype(np.float64) - ref) <= 2 ** -11 * np.abs(ref) + atol).all())


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_gelu_epilogue_stores_the_models_gelu_and_gelu_prime_of_pre(shape):
  """The up GEMM's GELU epilogue: C = gelu(pre), aux = gelu'(pre), pre the product + bias rounded to fp16 as the same
  kernel without an epilogue stores it (the unfused model's dense output)."""
  assert triton.knobs.runtime.interpret, "Triton was imported before this module set TRITON_INTERPRET=1"
  M, N, K = shape
  rng = np.random.default_rng(M)
  x, w = rng.standard_normal((M, K)).astype(np.float16), (0.15 * rng.standard_normal((N, K))).astype(np.float16)
  bias = rng.standard_normal(N).astype(np.float16)
  slope = np.full((M, N), np.nan, np.float16)
  post = run_interpreted(x, w, False, True, bias, epilogue=mm.GELU, aux=slope)
  pre = run_interpreted(x, w, False, True, bias)
  ref_pre = x.astype(np.float64) @ w.astype(np.float64).T + bias
  assert within_fp16_rounding(pre, ref_pre, 1e-4) and np.abs(ref_pre).max() > 3   # the curve and both tails
  assert within_fp16_rounding(post, gelu64(pre.astype(np.float64)), 1e-6)   # gelu of pre as stored, one rounding
  assert within_fp16_rounding(slope, gelu_grad64(pre.astype(np.float64)), 1e-6)
  # the model's gelu of the same fp16 pre (tinygrad's erf, the same formula): the same fp16 numbers
  np.testing.assert_array_equal(post, gelu(Tensor(pre)).numpy())


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_gelu_grad_epilogue_multiplies_the_data_gradient_by_the_stored_gelu_prime(shape):
  """d pre = (dy @ W2) * slope: dy (tokens, hidden), W2 (hidden, intermediate) as stored, slope = gelu'(pre) read from
  aux as the GELU epilogue wrote it."""
  M, N, K = shape
  rng = np.random.default_rng(N)
  dy, w2 = rng.standard_normal((M, K)).astype(np.float16), (0.1 * rng.standard_normal((K, N))).astype(np.float16)
  slope = gelu_grad64(2 * rng.standard_normal((M, N))).astype(np.float16)
  d_pre = run_interpreted(dy, w2, False, False, epilogue=mm.GELU_GRAD, aux=slope)
  ref = (dy.astype(np.float64) @ w2.astype(np.float64)) * slope.astype(np.float64)
  assert within_fp16_rounding(d_pre, ref, 1e-4)
  # against a slope of other rows the check fails: the epilogue reads it at its own positions
  assert not within_fp16_rounding(d_pre, (dy.astype(np.float64) @ w2.astype(np.float64)) *
                                  np.roll(slope, 1, 0).astype(np.float64), 1e-2)


def reference_ffn(x, w1, b1, w2, b2):
  """The model's unfused block: dense (tinygrad's matmul), model.gelu, dense."""
  return gelu(x.linear(w1.T, b1)).linear(w2.T, b2)


def ffn_inputs(dtype, B=2, L=5, H=24, I=40):
  rng = np.random.default_rng(5)
  arrays = [rng.standard_normal((B, L, H)), 0.3 * rng.standard_normal((I, H)), rng.standard_normal(I),
            0.3 * rng.standard_normal((H, I)), rng.standard_normal(H)]
  return [Tensor(a.astype(np.float32)).cast(dtype) for a in arrays], Tensor(rng.standard_normal((B, L, H)).astype(np.float32))


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.half], ids=["fp32", "fp16"])
def test_ffn_and_every_gradient_equal_the_models_ops_and_autograd(dtype):
  """The fallback path (the CPU: tinygrad kernels with the same epilogues): y and the gradients of x, w1, b1, w2, b2;
  fp32 within fp32 rounding (gelu' exact vs autograd through tinygrad's erf polynomial), fp16 within fp16 rounding."""
  ts, g = ffn_inputs(dtype)
  y = mm.ffn(*ts)
  grads = (y.float() * g).sum().gradient(*ts)
  ref = reference_ffn(*ts)
  ref_grads = (ref.float() * g).sum().gradient(*ts)
  tol = 1e-5 if dtype == dtypes.float32 else 2e-3
  assert y.shape == ref.shape and y.dtype == dtype
  np.testing.assert_allclose(y.float().numpy(), ref.float().numpy(), rtol=tol, atol=tol)
  for got, want in zip(grads, ref_grads):
    assert got.shape == want.shape and got.dtype == want.dtype
    want = want.float().numpy()
    np.testing.assert_allclose(got.float().numpy(), want, rtol=tol, atol=tol * np.abs(want).max())


def test_a_jitted_ffn_step_schedules_once():
  """ffn's grad functions are fixed objects (tinygrad's schedule cache keys on them: test_kernels.py says why)."""
  from tinygrad.schedule import schedule_cache
  (x, w1, b1, w2, b2), _ = ffn_inputs(dtypes.float32)
  for t in (w1, b1, w2, b2): t.realize()
  @TinyJit
  def step(x: Tensor) -> list[Tensor]:
    return [g.realize() for g in mm.ffn(x, w1, b1, w2, b2).sum().gradient(w1, b1, w2, b2)]
  sizes = []
  for i in range(3):
    step(Tensor(x.numpy() + i).realize())
    sizes.append(len(schedule_cache))
  assert sizes[1] == sizes[0] == sizes[2], f"schedule cache entries after each step: {sizes}"


def test_the_gelu_gradient_refuses_a_slope_not_laid_out_as_its_output():
  dy, w2 = Tensor.ones(8, 4), Tensor.ones(4, 6)
  with pytest.raises(ValueError, match="GELU"):
    mm._gemm_call(dy, w2, False, False, None, None, None, mm.GELU_GRAD, Tensor.ones(6, 8))


@pytest.mark.parametrize("kernels,calls", [("tinygrad", 0), ("triton", 2)])
def test_bert_sends_each_layers_ffn_through_ffn(monkeypatch, kernels, calls):
  """Under KERNELS=triton each layer's intermediate dense + GELU + output dense; not the attention output's dense or
  the MLM head's dense + GELU. The values: test_kernels.py's knob test."""
  from tinyperf.benchmarks.bert.model import BertConfig, BertForPretraining
  seen = []
  monkeypatch.setattr(mm, "ffn", lambda x, w1, b1, w2, b2: seen.append((x.shape, w1.shape, w2.shape)) or x)
  c = BertConfig(layers=2, hidden=16, heads=2, intermediate=32, vocab=50, max_positions=16, kernels=kernels)
  ids = Tensor.zeros(2, 8, dtype=dtypes.int32)
  BertForPretraining(c)(ids, ids, ids + 1, Tensor.zeros(2, 3, dtype=dtypes.int32))   # shapes only: nothing realized
  assert seen == [((2, 8, 16), (32, 16), (16, 32))] * calls


def test_h200_cubins_of_each_epilogue_keep_wgmma_and_spill_only_after_the_k_loop():
  """Compiled ahead for sm_90 at BERT-large's FFN shapes (BS 96): the up GEMM with and without the GELU epilogue, the
  down layer's data gradient with and without gelu'. Each keeps wgmma and the tile's shared memory; registers and any
  stack (spills) read from the cubin, and no local-memory access before the K loop's closing branch (the epilogue
  must not slow the loop)."""
  code = """
import json, re, subprocess, tempfile
import triton
from tinyperf.benchmarks.kernels import matmul as mm, program as prg
NAMES = ("M","N","K","SAM","SAK","SBK","SBN","BM","BN","BK","GROUP","EVEN_M","EVEN_N","EVEN_K","HAS_BIAS","EPILOGUE")
def build(M, N, K, tb, bias, epilogue):
  _, _, _, sam, sak, sbk, sbn = mm.strides((M, K), (N, K) if tb else (K, N), False, tb)
  t = mm.tile(M, N, K, False, tb)
  k = prg.compile_kernel(mm.compiled_kernel, tuple((p, "*fp16") for p in ("a", "b", "c", "bias", "aux")),
    tuple(zip(NAMES, (M, N, K, sam, sak, sbk, sbn, *t[:3], 8, M % t[0] == 0, N % t[1] == 0, K % t[2] == 0, bias,
                      epilogue))), t[3], t[4], 90)
  with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
    f.write(k.cubin); f.flush()
    tool = lambda *a: subprocess.run([triton.knobs.nvidia.cuobjdump.path, *a, f.name], capture_output=True,
                                     text=True, check=True).stdout
    res, sass = tool("--dump-resource-usage"), tool("-sass").splitlines()
  mma = [i for i, l in enumerate(sass) if "HGMMA" in l]
  loop_end = next(i for i in range(mma[-1], len(sass)) if "BRA" in sass[i])
  local = [i for i, l in enumerate(sass) if re.search(r"\\b(STL|LDL)", l)]
  return {"wgmma": "wgmma.mma_async" in k.ptx, "smem": k.smem, "regs": int(re.search(r"REG:(\\d+)", res)[1]),
          "stack": int(re.search(r"STACK:(\\d+)", res)[1]), "local_in_loop": sum(i <= loop_end for i in local)}
T, H, I = 96 * 512, 1024, 4096
print(json.dumps({"up": build(T, I, H, True, True, mm.NONE), "up_gelu": build(T, I, H, True, True, mm.GELU),
                  "dgrad": build(T, I, H, False, False, mm.NONE), "dgrad_gelu": build(T, I, H, False, False, mm.GELU_GRAD)}))
"""
  got = compiled_facts(code)
  for name, g in got.items():
    assert g["wgmma"] and 48 * 1024 < g["smem"] <= 227 * 1024 and g["regs"] <= 255, (name, g)
    assert g["local_in_loop"] == 0, (name, g)
  assert got["up_gelu"]["smem"] == got["up"]["smem"] and got["dgrad_gelu"]["smem"] == got["dgrad"]["smem"]
  assert got["up"]["stack"] == got["dgrad"]["stack"] == got["dgrad_gelu"]["stack"] == 0   # gelu' read, not computed


def test_bench_gemm_times_the_ffn_fused_and_unfused_on_the_cpu():
  """lab/scripts/bench_gemm.py's FFN rows at a small shape on the CPU (both paths run tinygrad kernels there) and its
  --help, so the GPU command that measures the fusion cannot fail on the script."""
  r = subprocess.run([sys.executable, "lab/scripts/bench_gemm.py", "--help"], cwd=REPO, capture_output=True, text=True,
                     timeout=120)
  assert r.returncode == 0 and "--only" in r.stdout, r.stderr[-2000:]
  sys.path.insert(0, str(REPO / "lab" / "scripts"))
  try: import bench_gemm
  finally: sys.path.pop(0)
  tuned = dict(mm.TUNED)
  rows = list(bench_gemm.ffn_rows(tokens=16, hidden=8, inter=24))
  assert mm.TUNED == tuned   # the 128x128x8 rows' tiles were put back out of the table
  blocks, gemms = [r for r in rows if "ffn" in r], [r for r in rows if "ffn_gemm" in r]
  assert [row["ffn"] for row in blocks] == ["ffn fused", "ffn unfused", "ffn fused, gelu-grad GEMM 128x128x8",
                                            "ffn fused, gelu GEMM 128x128x8"]
  assert all(row["fwd_bwd_ms"] > 0 for row in blocks) and 0 <= blocks[0]["max_rel_diff_vs_unfused"] < 1e-2, rows
  assert len(gemms) == 4 and all(row["ms"] > 0 for row in gemms), gemms
  qkv = list(bench_gemm.parts_rows(tokens=16, hidden=8))
  assert [(r["qkv"], r["impl"]) for r in qkv] == [(k, i) for k in ("fwd", "dgrad", "wgrad") for i in ("parts", "separate")]
  assert all(r["ms"] > 0 and r["max_rel_diff"] < 1e-2 for r in qkv), qkv


def test_a_tile_tried_by_a_bench_leaves_the_committed_table_as_it_was():
  from lab.kernel_bench import tile_override
  tuned = {"a": 1}
  with tile_override(tuned, "a", 2): assert tuned == {"a": 2}
  with pytest.raises(RuntimeError):   # a tile that does not fit raises inside; the committed entry still comes back
    with tile_override(tuned, "b", 3):
      assert tuned == {"a": 1, "b": 3}
      raise RuntimeError("out of shared memory")
  assert tuned == {"a": 1}


def test_the_cpu_gelu_grad_gemm_without_a_bias_runs_with_tinygrads_optimizations_on():
  """The down layer's data gradient on the CPU fallback (no bias, gelu' read) at cpu_smoke's FFN size, in a fresh
  process with tinygrad's hand-coded optimizations on: their threaded kernel took the thread id in the unread bias's
  argument and crashed (loss_compare.py bert --platform cpu_smoke). Its product equals numpy's."""
  code = """
import numpy as np
from tinygrad import Tensor
from tinyperf.benchmarks.kernels import matmul as mm
rng = np.random.default_rng(0)
dy, w2, slope = (rng.standard_normal(s).astype(np.float32) for s in ((256, 64), (64, 256), (256, 256)))
got = mm._gemm_call(Tensor(dy), Tensor(w2), False, False, None, None, None, mm.GELU_GRAD, Tensor(slope).realize())[0]
np.testing.assert_allclose(got.numpy(), (dy @ w2) * slope, rtol=1e-4, atol=1e-4)
"""
  env = {k: v for k, v in os.environ.items() if k not in ("NOOPT", "TRITON_INTERPRET")} | {"DEV": "CPU"}
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
