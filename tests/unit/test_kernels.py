"""The KERNELS=triton layer on the CPU: the Triton GEMM run by Triton's interpreter against tinygrad's matmul (every
layout, with and without bias, uneven shapes), gemm's grad function through tinygrad's custom_kernel, the cubin and
launch facts for an H200 compiled ahead on this machine, the model with the knob, and the config's refusals."""
from __future__ import annotations
import os
os.environ["TRITON_INTERPRET"] = "1"   # before Triton's first import: its language functions are then interpreted too
import json
import subprocess
import sys

import numpy as np
import pytest
from tinygrad import Context, Tensor

triton = pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")
from triton.runtime.interpreter import InterpretedFunction   # noqa: E402

from tinyperf.benchmarks.kernels import matmul as mm                  # noqa: E402
from tests.conftest import REPO                              # noqa: E402


class HostArray:
  """A numpy array as the pointer argument Triton's interpreter takes (it expects torch tensors; it only needs the data
  pointer, the element type and a host copy, which a numpy array already is)."""
  def __init__(self, a: np.ndarray): self.a = a
  @property
  def dtype(self): return str(self.a.dtype)
  def data_ptr(self): return self.a.ctypes.data
  def untyped_storage(self): return self
  def cpu(self): return self
  def new_empty(self, *_, **__): return self
  def set_(self, *_): return self
  def storage_offset(self): return 0
  def size(self): return self.a.shape
  def stride(self): return self.a.strides
  def copy_(self, _): pass


def compiled_facts(code: str, timeout: int = 300):
  """What code prints as its last line (JSON), run by a fresh Python without TRITON_INTERPRET: Triton compiles there
  for real (for sm_90, with its own ptxas, no GPU needed), where this process's Triton interprets."""
  env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


def run_interpreted(A, B, ta, tb, bias=None, tile=(32, 32, 32), epilogue=mm.NONE, aux=None):
  """C; with the GELU epilogue the kernel also writes gelu'(pre) into aux, with GELU_GRAD it reads it from aux ((M, N))."""
  M, N, K, sam, sak, sbk, sbn = mm.strides(A.shape, B.shape, ta, tb)
  BM, BN, BK = tile
  C = np.zeros((M, N), np.float16)
  bias_arg = bias if bias is not None else np.zeros(1, np.float16)
  aux_arg = aux if aux is not None else np.zeros(1, np.float16)
  InterpretedFunction(mm.gemm_kernel)[(-(-M // BM) * -(-N // BN),)](
    HostArray(A), HostArray(B), HostArray(C), HostArray(bias_arg), HostArray(aux_arg), M, N, K, sam, sak, sbk, sbn, BM,
    BN, BK, 2, M % BM == 0, N % BN == 0, K % BK == 0, bias is not None, epilogue)
  return C


@pytest.mark.parametrize("shape", [(64, 96, 128), (40, 72, 100)], ids=["even", "uneven"])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("with_bias", [False, True], ids=["", "bias"])
def test_triton_gemm_interpreted_equals_tinygrads_matmul(shape, ta, tb, with_bias):
  assert triton.knobs.runtime.interpret, "Triton was imported before this module set TRITON_INTERPRET=1"
  M, N, K = shape
  rng = np.random.default_rng(M + N + K + 2 * ta + tb)
  A = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float16)
  B = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float16)
  bias = rng.standard_normal(N).astype(np.float16) if with_bias else None
  C = run_interpreted(A, B, ta, tb, bias)
  a, b = Tensor(A).float(), Tensor(B).float()
  ref = ((a.T if ta else a) @ (b.T if tb else b)).numpy() + (bias.astype(np.float32) if with_bias else 0)
  # fp32 accumulation, one rounding to fp16: within half an fp16 ulp of the fp32 product (values here reach ~40)
  np.testing.assert_allclose(C.astype(np.float32), ref, rtol=1e-3, atol=2e-2)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_and_its_gradients_through_custom_kernel(ta, tb):
  """gemm's grad function writes each gradient in its operand's stored layout (the CPU runs the same call as a tinygrad
  kernel; on CUDA it is the Triton program)."""
  rng = np.random.default_rng(2 * ta + tb)
  M, N, K = 24, 40, 56
  A = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
  B = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
  bias, G = rng.standard_normal(N).astype(np.float32), rng.standard_normal((M, N)).astype(np.float32)
  a, b, bi = Tensor(A), Tensor(B), Tensor(bias)
  c = mm.gemm(a, b, ta, tb, bias=bi)
  ga, gb, gbias = (c * Tensor(G)).sum().gradient(a, b, bi)
  opA, opB = (A.T if ta else A), (B.T if tb else B)
  np.testing.assert_allclose(c.numpy(), opA @ opB + bias, rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(ga.numpy(), (G @ opB.T).T if ta else G @ opB.T, rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(gb.numpy(), (opA.T @ G).T if tb else opA.T @ G, rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(gbias.numpy(), G.sum(0), rtol=1e-5, atol=1e-4)


def run_parts_interpreted(split, As, Bs, ta, tb, biases=None, tile=(16, 16, 16)):
  """parts_gemm_kernel's C's under Triton's interpreter (one for SPLIT_K), the tuples as linears' calls pass them."""
  parts = max(len(As), len(Bs))
  (M, N, K), seg, (M1, N1, _), (sam, sak, sbk, sbn) = mm.parts_dims(split, parts, As[0].shape, Bs[0].shape, ta, tb)
  Cs = [np.zeros((M1, N1), np.float16) for _ in range(1 if split == mm.SPLIT_K else parts)]
  bs = biases if biases is not None else [np.zeros(1, np.float16)]
  BM, BN, BK = tile
  host = lambda xs: tuple(HostArray(x) for x in xs)
  InterpretedFunction(mm.parts_gemm_kernel)[((M // BM) * (N // BN),)](
    host(As), host(Bs), host(Cs), host(bs), M, N, K, sam, sak, sbk, sbn, BM, BN, BK, 2, split, seg, parts,
    biases is not None)
  return Cs


def test_parts_gemm_interpreted_equals_each_layers_product():
  """One launch for three layers of one shape, each way: the forward (parts side by side along N, each its bias), the
  weight gradients (stacked along M) and the input gradient (one after another along K, summed), against float32."""
  rng = np.random.default_rng(7)
  T, I, O = 64, 48, 32   # tokens, in, out: multiples of the 16-wide tiles
  h = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float16)
  x, ws, bs, dys = h(T, I), [h(O, I) for _ in range(3)], [h(O) for _ in range(3)], [h(T, O) for _ in range(3)]
  f = lambda a: a.astype(np.float32)
  close = lambda got, want: np.testing.assert_allclose(f(got), want, rtol=1e-3, atol=1e-2)
  for y, w, b in zip(run_parts_interpreted(mm.SPLIT_N, [x], ws, False, True, bs), ws, bs): close(y, f(x) @ f(w).T + f(b))
  for dw, dy in zip(run_parts_interpreted(mm.SPLIT_M, dys, [x], True, False), dys): close(dw, f(dy).T @ f(x))
  (dx,) = run_parts_interpreted(mm.SPLIT_K, dys, ws, False, False)
  close(dx, sum(f(dy) @ f(w) for dy, w in zip(dys, ws)))


def test_parts_gemm_takes_berts_shapes_and_leaves_uneven_ones_to_linear():
  """parts_gemm_kernel has no masks: linears takes it where every product and part tiles evenly (BERT-large at BS 64 and
  96, each way), else one linear() per layer."""
  for T in (64 * 512, 96 * 512):
    assert mm._parts_fit(T, 3 * 1024, 1024, "N", 1024, False, True) and mm._parts_fit(T, 1024, 3 * 1024, "K", 1024, False, False)
    assert mm._parts_fit(3 * 1024, 1024, T, "M", 1024, True, False)
  assert not mm._parts_fit(1000, 3 * 1024, 1024, "N", 1024, False, True)   # 1000 tokens: no tile of rows divides them
  assert not mm._parts_fit(4096, 3 * 96, 1024, "N", 96, False, True)       # a 96-wide part splits a column tile


def test_linears_and_their_gradients_equal_each_linear_layers():
  """matmul.linears (BERT's query, key and value in one call each way) against three tinygrad linear layers: outputs,
  the input gradient summed over the layers, each weight's and bias's (the CPU runs the call as one tinygrad kernel)."""
  rng = np.random.default_rng(3)
  T, I, O = 24, 40, 16
  X, Ws, Bs = rng.standard_normal((T, I)), [rng.standard_normal((O, I)) for _ in range(3)], [rng.standard_normal(O) for _ in range(3)]
  Gs = [rng.standard_normal((T, O)).astype(np.float32) for _ in range(3)]
  x, ws, bs = Tensor(X.astype(np.float32)), [Tensor(w.astype(np.float32)) for w in Ws], [Tensor(b.astype(np.float32)) for b in Bs]
  ys = mm.linears(x.reshape(2, 12, I), ws, bs)
  assert [y.shape for y in ys] == [(2, 12, O)] * 3
  loss = sum((y.reshape(T, O) * Tensor(g)).sum() for y, g in zip(ys, Gs))
  gx, *gws = loss.gradient(x, *ws, *bs)
  for y, w, b in zip(ys, Ws, Bs): np.testing.assert_allclose(y.numpy().reshape(T, O), X @ w.T + b, rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(gx.numpy(), sum(g @ w for g, w in zip(Gs, Ws)), rtol=1e-5, atol=1e-4)
  for got, g in zip(gws[:3], Gs): np.testing.assert_allclose(got.numpy(), g.T @ X, rtol=1e-5, atol=1e-4)
  for got, g in zip(gws[3:], Gs): np.testing.assert_allclose(got.numpy(), g.sum(0), rtol=1e-5, atol=1e-4)
  with pytest.raises(NotImplementedError):   # a layer left out of the loss: its gradient's slot cannot be told
    (mm.linears(x, ws, bs)[0] * 2).sum().gradient(x)


def test_h200_cubins_of_the_parts_gemm_keep_wgmma_and_the_plain_gemms_pipeline():
  """parts_gemm_kernel compiled ahead for sm_90 at BERT-large's query/key/value shapes (BS 96), each split: Hopper's
  wgmma, no stack, and as much shared memory as gemm_kernel at the same tile (the same stages in flight: picking the
  part's pointer inside the SPLIT_K loop must not stop Triton's pipelining)."""
  code = """
import json, re, subprocess, tempfile
import triton
from tinyperf.benchmarks.kernels import matmul as mm, program as prg
T, H, P = 96 * 512, 1024, 3
def facts(k):
  with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
    f.write(k.cubin); f.flush()
    res = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "--dump-resource-usage", f.name], capture_output=True,
                         text=True, check=True).stdout
  return {"wgmma": "wgmma.mma_async" in k.ptx, "smem": k.smem, "stack": int(re.search(r"STACK:(\\d+)", res)[1])}
out = {}
# (name, split, a part's A and B as stored, trans_a, trans_b, pointers per tuple (a, b, c, bias), bias)
for name, split, sa, sb, ta, tb, counts, bias in (("fwd", mm.SPLIT_N, (T, H), (H, H), False, True, (1, P, P, P), True),
                                                 ("wgrad", mm.SPLIT_M, (T, H), (T, H), True, False, (P, 1, P, 1), False),
                                                 ("dgrad", mm.SPLIT_K, (T, H), (H, H), False, False, (P, P, 1, 1), False)):
  (M, N, K), seg, _, (sam, sak, sbk, sbn) = mm.parts_dims(split, P, sa, sb, ta, tb)
  t = mm.tile(M, N, K, ta, tb)
  k = prg.compile_kernel(mm.compiled_parts, tuple((a, ("*fp16",) * n) for a, n in zip(("a", "b", "c", "bias"), counts)),
    tuple(zip(("M","N","K","SAM","SAK","SBK","SBN","BM","BN","BK","GROUP","SPLIT","SEG","PARTS","HAS_BIAS"),
              (M, N, K, sam, sak, sbk, sbn, *t[:3], 8, split, seg, P, bias))), t[3], t[4], 90)
  plain = prg.compile_kernel(mm.compiled_kernel, tuple((a, "*fp16") for a in ("a", "b", "c", "bias", "aux")),
    tuple(zip(("M","N","K","SAM","SAK","SBK","SBN","BM","BN","BK","GROUP","EVEN_M","EVEN_N","EVEN_K","HAS_BIAS","EPILOGUE"),
              (M, N, K, sam, sak, sbk, sbn, *t[:3], 8, True, True, True, bias, 0))), t[3], t[4], 90)
  out[name] = {**facts(k), "plain_smem": plain.smem, "tile": t}
print(json.dumps(out))
"""
  got = compiled_facts(code)
  for name, g in got.items():
    assert g["wgmma"] and g["stack"] == 0 and g["smem"] == g["plain_smem"] > 48 * 1024, (name, g)


def test_an_fp32_outputs_bias_gradient_is_summed_from_the_unrounded_gradient(monkeypatch):
  """The MLM decoder's case: fp16 operands, fp32 logits, a bias; its gradient (softmax / predictions x loss scale, about
  3e-5) is below fp16's normal range, where rounding keeps a few bits: the column sum gets it as it came. (On the CPU
  tinygrad fuses the round trip away, so the sum's input dtype is what is checked; on CUDA the Triton kernel reads it.)"""
  from tinygrad import dtypes
  rng = np.random.default_rng(0)
  M, N, K = 64, 48, 16
  a, b = Tensor(rng.standard_normal((M, K)).astype(np.float16)), Tensor(rng.standard_normal((N, K)).astype(np.float16))
  bias = Tensor(np.zeros(N, np.float32))
  G = (3e-5 * (1 + rng.random((M, N)))).astype(np.float32)
  summed = []
  monkeypatch.setattr(mm, "column_sum", lambda dc, real=mm.column_sum: summed.append(dc.dtype) or real(dc))
  c = mm.gemm(a, b, trans_b=True, bias=bias, out_dtype=dtypes.float32)
  (gbias,) = (c * Tensor(G)).sum().gradient(bias)
  assert summed == [dtypes.float32]
  np.testing.assert_allclose(gbias.numpy(), G.sum(0), rtol=1e-6)


def test_h200_cubin_compiles_here_with_wgmma_and_the_launch_facts():
  """Compiled ahead for sm_90 by Triton's own ptxas, without a GPU: Hopper's wgmma, the dynamic shared memory the
  program factory must pass (over the 48 KB a launch gets without it), and the two hidden scratch parameters."""
  code = """
import json
from tinyperf.benchmarks.kernels import matmul as mm, program as prg
M, N, K = 49152, 1024, 1024
t = mm.tile(M, N, K, False, True)
k = prg.compile_kernel(mm.compiled_kernel, (("a", "*fp16"), ("b", "*fp16"), ("c", "*fp16"), ("bias", "*fp16"),
                                            ("aux", "*fp16")),
    tuple(zip(("M","N","K","SAM","SAK","SBK","SBN","BM","BN","BK","GROUP","EVEN_M","EVEN_N","EVEN_K","HAS_BIAS","EPILOGUE"),
              (M, N, K, K, 1, 1, K, *t[:3], 8, True, True, True, True, 0))), t[3], t[4], 90)
params = [l for l in k.ptx.splitlines() if ".param .u64" in l]
# the MLM decoder: fp32 logits over the uneven vocabulary (masked stores)
M, N, K = 7296, 30522, 1024
t = mm.tile(M, N, K, False, True)
d = prg.compile_kernel(mm.compiled_kernel, (("a", "*fp16"), ("b", "*fp16"), ("c", "*fp32"), ("bias", "*fp16"),
                                            ("aux", "*fp32")),
    tuple(zip(("M","N","K","SAM","SAK","SBK","SBN","BM","BN","BK","GROUP","EVEN_M","EVEN_N","EVEN_K","HAS_BIAS","EPILOGUE"),
              (M, N, K, K, 1, 1, K, *t[:3], 8, M % t[0] == 0, N % t[1] == 0, True, False, 0))), t[3], t[4], 90)
print(json.dumps({"name": k.name, "smem": k.smem, "threads": k.threads, "params": len(params), "cubin": len(k.cubin),
                  "wgmma": "wgmma.mma_async" in k.ptx, "warps": t[3], "fp32_out_rounds_to_fp16": "cvt.rn.f16" in d.ptx,
                  "fp16_out_rounds_to_fp16": "cvt.rn.f16" in k.ptx}))
"""
  got = compiled_facts(code)
  assert got["name"] == "gemm_kernel" and got["wgmma"] and got["cubin"] > 1000
  assert got["smem"] > 48 * 1024 and got["threads"] == 32 * got["warps"]
  assert got["params"] == 5 + 2   # a, b, c, bias, aux + Triton's global and profile scratch
  assert got["fp16_out_rounds_to_fp16"] and not got["fp32_out_rounds_to_fp16"]   # fp32 logits stay fp32


@pytest.mark.parametrize("M,N,BM,BN", [(37, 100, 4, 64), (64, 64, 8, 32)], ids=["partial_blocks", "even"])
def test_column_sums_interpreted_equal_numpy(M, N, BM, BN):
  """The bias-gradient kernel under Triton's interpreter: fp16 rows summed in fp32 over programs of ROWS rows (the last
  partial, columns past N masked), the partial rows then summed as tinygrad does, against numpy."""
  x = np.random.default_rng(M).standard_normal((M, N)).astype(np.float16)
  rows = BM * 3
  G, NB = -(-M // rows), -(-N // BN)
  out = np.full((G, N), np.nan, np.float32)   # every partial written
  InterpretedFunction(mm.colsum_kernel)[(G * NB,)](HostArray(x), HostArray(out), M, N, rows, BM, BN)
  np.testing.assert_allclose(out.sum(0), x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)


def test_column_sum_plan_and_cubin_at_berts_bias_gradients():
  """The bias gradients of BERT-large at BS 96 (49152 tokens x 1024 or 4096; the MLM decoder's 7296 x 30522): every
  row in one program, about COLSUM[3] programs per multiprocessor, and the kernel compiled ahead for sm_90 with 16-byte
  loads, no local memory, and its two pointers + Triton's two scratch parameters."""
  for M, N in ((49152, 1024), (49152, 4096), (7296, 30522)):
    rows, G = mm.colsum_plan(M, N)
    assert (G - 1) * rows < M <= G * rows and rows % mm.COLSUM[0] == 0
    assert mm.COLSUM[3] * mm.SMS / 2 <= G * -(-N // mm.COLSUM[1]) <= 2 * mm.COLSUM[3] * mm.SMS
  code = """
import json
from tinyperf.benchmarks.kernels import matmul as mm, program as prg
BM, BN, warps, _ = mm.COLSUM
rows, G = mm.colsum_plan(49152, 4096)
k = prg.compile_kernel(mm.compiled_colsum, (("x", "*fp16"), ("out", "*fp32")),
                       (("M", 49152), ("N", 4096), ("ROWS", rows), ("BM", BM), ("BN", BN)), warps, 1, 90)
print(json.dumps({"name": k.name, "v4": "ld.global.v4" in k.ptx, "local": "ld.local" in k.ptx or "st.local" in k.ptx,
                  "params": sum(".param .u64" in l for l in k.ptx.splitlines()), "threads": k.threads}))
"""
  got = compiled_facts(code)
  assert got == {"name": "colsum_kernel", "v4": True, "local": False, "params": 4, "threads": 32 * mm.COLSUM[2]}, got


def test_colsum_bench_checks_and_times_each_shape_on_the_cpu():
  """lab/scripts/bench_colsum.py at small shapes on the CPU (column_sum is tinygrad's sum there): the check line within
  fp32 rounding of numpy's float64 sums, then a timing line per shape for tinygrad and each tile asked for, so the GPU
  command that picks COLSUM cannot fail on the script."""
  cmd = [sys.executable, "lab/scripts/bench_colsum.py", "--bs", "2", "--seq", "8", "--hidden", "64", "--intermediate",
         "128", "--vocab", "100", "--tiles", "1"]
  env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"DEV": "CPU"}
  r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  check, *timed = (json.loads(line) for line in r.stdout.splitlines())
  diffs = [v for k, v in check.items() if k.endswith("_max_rel_diff")]
  assert len(diffs) == 3 and max(diffs) < 1e-3, check
  assert [(t["impl"], t["shape"]) for t in timed] == [("tinygrad", s) for s in ([16, 64], [16, 128], [152, 100])] * 2
  assert all(t["ms"] > 0 for t in timed), timed
  bad = subprocess.run([sys.executable, "lab/scripts/bench_colsum.py", "--bs", "0"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
  assert bad.returncode == 2 and "--bs" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr[-2000:]


def test_tile_takes_the_measured_entry_and_otherwise_fills_the_gpu():
  assert mm.tile(49152, 1024, 1024) == mm.TILES[0]
  small = mm.tile(64, 64, 64)
  assert small == mm.TILES[-1]
  mm.TUNED[(100, 100, 100, False, False)] = mm.TILES[1]
  try: assert mm.tile(100, 100, 100) == mm.TILES[1]
  finally: del mm.TUNED[(100, 100, 100, False, False)]


def bert_batch(B: int = 2, L: int = 8, P: int = 3) -> dict[str, np.ndarray]:
  """A pretraining batch for the small BERT of the knob tests (vocab 50): B sequences of L tokens, P masked each."""
  rng = np.random.default_rng(0)
  return {"input_ids": rng.integers(0, 50, (B, L)).astype(np.int32), "segment_ids": np.zeros((B, L), np.int32),
          "input_mask": np.ones((B, L), np.int32), "masked_lm_positions": rng.integers(0, L, (B, P)).astype(np.int32),
          "masked_lm_ids": rng.integers(0, 50, (B, P)).astype(np.int32), "masked_lm_weights": np.ones((B, P), np.float32),
          "next_sentence_labels": np.arange(B, dtype=np.int32) % 2}


def test_bert_with_triton_kernels_knob_computes_the_same_loss_and_gradients():
  from tinyperf.benchmarks.bert.model import BertConfig, BertForPretraining, pretraining_loss
  batch = bert_batch()
  out = {}
  for kernels in ("tinygrad", "triton"):
    c = BertConfig(layers=1, hidden=16, heads=2, intermediate=32, vocab=50, max_positions=16, hidden_dropout=0.0,
                   attention_dropout=0.0, kernels=kernels)
    model = BertForPretraining(c, rng=np.random.default_rng(1))
    t = {k: Tensor(v) for k, v in batch.items()}
    with Context(TRAINING=1):
      mlm, nsp = model(t["input_ids"], t["segment_ids"], t["input_mask"], t["masked_lm_positions"])
      loss = pretraining_loss(mlm, nsp, t, kernels)[0]   # the triton side's MLM loss through the xent call
      layer = model.bert.encoder.layer[0]
      w, d, q = layer.intermediate.dense, layer.output.dense, layer.attention.self.query
      norm = layer.attention.output.LayerNorm
      # the FFN's weights' gradients come through ffn's GELU epilogues, the query's through the fused attention, the
      # word embeddings' through the MLM decoder's GEMM and the embeddings' fused add + LayerNorm too, the
      # LayerNorm's own through its partial sums, the MLM decoder's bias through the GEMM's
      grads = loss.gradient(w.weight, w.bias, d.weight, d.bias, q.weight, model.bert.embeddings.word_embeddings.weight,
                            norm.weight, norm.bias, model.bert.embeddings.LayerNorm.weight, model.cls.predictions.bias)
    out[kernels] = (loss.item(), *(g.numpy() for g in grads))
  assert out["triton"][0] == pytest.approx(out["tinygrad"][0], rel=1e-5)
  for got, want in zip(out["triton"][1:], out["tinygrad"][1:]): np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_a_jitted_step_with_the_kernels_schedules_once():
  """tinygrad caches a step's schedule by the graph's key, which holds each custom kernel's grad function by id(): the
  capture step must hit that cache (a miss re-schedules the whole BERT-large graph: minutes of INIT)."""
  from tinygrad import TinyJit
  from tinygrad.schedule import schedule_cache
  from tinyperf.benchmarks.kernels.attention import attention
  w = Tensor(np.random.default_rng(0).random((16, 8), np.float32)).realize()
  @TinyJit
  def step(x: Tensor) -> Tensor:
    q = mm.gemm(x, w, trans_b=True).reshape(1, 8, 2, 8)   # (B, L, H, D)
    return attention(q, q, q, Tensor.zeros(1, 1, 1, 8), 0.0).sum().gradient(w)[0].realize()
  sizes = []
  for i in range(3):
    step(Tensor(np.full((8, 8), i, np.float32)).realize())
    sizes.append(len(schedule_cache))
  assert sizes[1] == sizes[0] == sizes[2], f"schedule cache entries after each step: {sizes}"


@pytest.mark.parametrize("benchmark", ["bert", "resnet"])
def test_config_refuses_triton_kernels_where_they_do_not_run(benchmark):
  from tinyperf.benchmarks.common.config import ConfigError
  from tinyperf.benchmarks.registry import load_config
  assert load_config(benchmark, "1xH200", environ={"KERNELS": "triton"}).knobs["KERNELS"] == "triton"
  two_gpus = {"KERNELS": "triton", "GPUS": "2", "BS": "192", "EVAL_BS": "192"}   # batch-sharded: one launch per GPU
  assert load_config(benchmark, "1xH200", environ=two_gpus).knobs["GPUS"] == 2
  with pytest.raises(ConfigError, match="KERNELS"):
    load_config(benchmark, "1xH200", environ={"KERNELS": "triton", "DEV": "CPU"})
  # NULL compiles every kernel and runs none: lab.bert.step_cost counts the Triton step there
  assert load_config(benchmark, "1xH200", environ={"KERNELS": "triton", "DEV": "NULL"}).knobs["DEV"] == "NULL"


@pytest.mark.parametrize("benchmark", ["bert", "resnet"])
def test_a_run_asking_for_triton_kernels_without_triton_is_refused(benchmark, tmp_path):
  """The 1xH200 configs set KERNELS=triton; where Triton does not import, the kernels' tinygrad stand-ins would run on
  the GPU unannounced. The entrypoint refuses first (exit 2, naming the knob), before any log line or device."""
  code = ("import sys; sys.modules['triton'] = None\n"   # `import triton` raises ImportError, as on a host without it
          f"from tinyperf.benchmarks.{benchmark}.train import main\n"
          f"sys.argv = ['train', '--platform', '1xH200', '--phase', 'init', '--seed', '1', '--work', {str(tmp_path)!r}]\n"
          "sys.exit(main())")
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                     env={**os.environ, "DATA_DIR": str(tmp_path)})
  assert r.returncode == 2, r.stderr[-2000:]
  assert "KERNELS=triton" in r.stderr and "KERNELS=tinygrad" in r.stderr and "Traceback" not in r.stderr, r.stderr
  assert not list(tmp_path.rglob("*.txt"))   # no result log begun


def test_every_log_and_bench_record_says_who_wrote_the_kernels():
  from tinyperf.benchmarks.common.runtime import provenance
  assert provenance({"KERNELS": "triton"})["kernels"] == "triton"
  assert provenance({})["kernels"] == "tinygrad"   # the knob unset: tinygrad's own kernels
