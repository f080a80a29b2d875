"""The per-run record of KERNELS=triton's kernels (benchmarks/kernels/program.py COMPILED, write_record): each compile's
tile, seconds and Triton cache hit; the line and JSON file a trainer writes after INIT; where Triton's cache lives."""
from __future__ import annotations
import io
import json
import os
import subprocess
import sys

import pytest

from tinyperf.benchmarks.common.rundir import RunDir, triton_cache
from tests.conftest import REPO


def test_a_compiled_gemm_is_recorded_with_its_tile_and_a_second_compile_comes_from_tritons_cache(tmp_path):
  """Compiled for sm_90 without a GPU (as tests/unit/test_kernels.py does), twice: compile_kernel's process cache
  cleared in between, so the second time Triton's disk cache (TRITON_CACHE_DIR) answers."""
  pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")
  code = """
import json, sys
from pathlib import Path
from tinyperf.benchmarks.kernels import matmul as mm, program as prg
M, N, K = 256, 256, 256
t = mm.tile(M, N, K, False, True)
args = ((("a", "*fp16"), ("b", "*fp16"), ("c", "*fp16"), ("bias", "*fp16"), ("aux", "*fp16")),
        tuple(zip(("M","N","K","SAM","SAK","SBK","SBN","BM","BN","BK","GROUP","EVEN_M","EVEN_N","EVEN_K","HAS_BIAS",
                   "EPILOGUE"), (M, N, K, K, 1, 1, K, *t[:3], 8, True, True, True, False, 0))), t[3], t[4], 90)
prg.compile_kernel(mm.compiled_kernel, *args)
prg.compile_kernel(mm.compiled_kernel, *args)   # the same process: compile_kernel's own cache, no second record
prg.compile_kernel.cache_clear()
prg.compile_kernel(mm.compiled_kernel, *args)
line = prg.write_record(Path(sys.argv[1]))
print(json.dumps({"tile": list(t), "line": line}))
"""
  env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_CACHE_DIR": str(tmp_path / "triton")}
  out = tmp_path / "kernels.json"
  r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  got = json.loads(r.stdout.strip().splitlines()[-1])
  doc = json.loads(out.read_text())
  first, second = doc["compiled"]
  BM, BN, BK, warps, stages = got["tile"]
  assert first["tile"] == {"BM": BM, "BN": BN, "BK": BK, "GROUP": 8, "num_warps": warps, "num_stages": stages}
  assert first["family"] == "matmul" and first["symbol"] == "gemm_kernel" and first["arch"] == 90
  assert first["shape"]["M"] == 256 and first["shape"]["pointers"]["c"] == "*fp16" and "BM" not in first["shape"]
  assert first["smem"] > 0 and first["compile_s"] > 0
  assert (first["from_cache"], second["from_cache"]) == (False, True)
  assert second["tile"] == first["tile"] and second["smem"] == first["smem"]
  assert doc["kernels"] == 2 and doc["from_cache"] == 1 and doc["triton_cache_dir"] == str(tmp_path / "triton")
  assert got["line"] == doc["summary"] and got["line"].startswith("kernels: 2 compiled in ")
  assert "(1 from Triton's cache); tiles: matmul 2 kernels at " in got["line"]


def record(family: str, symbol: str, tile: dict, seconds: float, hit: bool):
  from tinyperf.benchmarks.kernels import program as prg
  return prg.KernelRecord(family, symbol, {"M": 64, "pointers": {"a": "*fp16"}}, tile, 90, seconds, hit, 1024)


def test_the_trainers_record_is_a_line_and_a_json_file_in_the_run_folder(tmp_path):
  from tinyperf.benchmarks.kernels import program as prg
  big, small = {"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 3}, {"BM": 64, "BN": 64, "num_warps": 4,
                                                                                       "num_stages": 2}
  records = [record("matmul", "gemm_kernel", big, 2.0, False), record("matmul", "gemm_kernel", big, 0.5, True),
             record("attention", "attn_fwd_kernel", small, 1.25, False), record("conv", "conv_fwd_kernel", big, 0.125, True),
             record("conv", "conv_fwd_kernel", small, 0.125, True)]
  path = RunDir(tmp_path / "run_0_7").kernels
  assert path == tmp_path / "run_0_7" / "kernels.json"
  line = prg.write_record(path, records)
  assert line == ("kernels: 5 compiled in 4.0 s (3 from Triton's cache); tiles: matmul 2 kernels at 128x256x64 w8 s3, "
                  "attention 1 kernel at 64x64 w4 s2, conv 2 kernels in 2 tiles")
  doc = json.loads(path.read_text())
  assert doc["summary"] == line and doc["kernels"] == 5 and doc["from_cache"] == 3 and doc["compile_s"] == 4.0
  assert [r["tile"] for r in doc["compiled"]] == [big, big, small, big, small]
  assert doc["compiled"][2] == {"family": "attention", "symbol": "attn_fwd_kernel", "tile": small, "arch": 90,
                                "shape": {"M": 64, "pointers": {"a": "*fp16"}}, "compile_s": 1.25, "from_cache": False,
                                "smem": 1024}
  assert prg.write_record(tmp_path / "none.json", []).endswith("tiles: none")
  # the elementwise families name their blocks too: rows (or images) by pixels, or elements
  rows, flat = {"RB": 32, "BHW": 64, "num_warps": 8, "num_stages": 1}, {"BLOCK": 1024, "num_warps": 4, "num_stages": 1}
  assert prg.write_record(tmp_path / "bn.json", [record("batchnorm", "bn_apply_kernel", rows, 1.0, False),
                                                 record("maxpool", "pool_fwd_kernel", flat, 1.0, False)]).endswith(
    "tiles: batchnorm 1 kernel at 32x64 w8 s1, maxpool 1 kernel at 1024 w4 s1")


def test_tritons_cache_goes_beside_tinygrads_kernel_cache(tmp_path, monkeypatch):
  from tinyperf.benchmarks.common.runtime import prepare_cache_db
  run = RunDir(tmp_path / "run_0_7")
  assert triton_cache(run.cache_db) == run.cache / "triton"
  for k in ("CACHEDB", "TRITON_CACHE_DIR"):   # unset for this test, and restored after what prepare_cache_db sets
    monkeypatch.setenv(k, "")
    monkeypatch.delenv(k)
  prepare_cache_db(run, fresh=True)
  assert os.environ["TRITON_CACHE_DIR"] == str(triton_cache(run.cache_db.resolve()))
  # CACHEDB elsewhere (the rendered scripts' RESULTS_DIR/cache, a compose volume): Triton's cache goes with it
  monkeypatch.setenv("CACHEDB", str(tmp_path / "shared" / "tinygrad_7.db"))
  monkeypatch.delenv("TRITON_CACHE_DIR")
  prepare_cache_db(run, fresh=True)
  assert os.environ["TRITON_CACHE_DIR"] == str((tmp_path / "shared" / "triton").resolve())
  monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))   # Triton's own variable, set: kept
  prepare_cache_db(run, fresh=True)
  assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine")


def test_tinyperf_runs_console_shows_the_kernels_line():
  from tinyperf.tooling.launch.console import Console
  out = io.StringIO()
  c = Console(out=out)
  c(b"init train step 0: 48628.5 ms\nkernels: 14 compiled in 52.3 s (0 from Triton's cache); tiles: matmul 9 kernels\n")
  assert out.getvalue().splitlines() == ["kernels: 14 compiled in 52.3 s (0 from Triton's cache); tiles: matmul 9 kernels"]
