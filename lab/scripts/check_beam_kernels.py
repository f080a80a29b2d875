"""A captured step's kernels through BEAM_KERNELS_OUT and `python -m lab.beam_kernels` on this machine's device,
end to end: a jitted fp16 step (an NxN matmul with its ReLU, and an elementwise kernel) is captured at BEAM=1 with
nothing searched and its kernels written; beam_kernels searches them into a cache; a second capture from that cache
must take every kernel's result from it. So the kernels read back from the file are the capture's own (tinygrad's
cache key: AST, BEAM amount, device) on this device, before a lease's search relies on it (docs/PERFORMANCE.md).

  DEV=CUDA python3 lab/scripts/check_beam_kernels.py [--n 1024]

Prints one verdict line; exit 0 when the second capture took every kernel from the cache, 1 when it did not."""
from __future__ import annotations
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# one capture of the step at BEAM=1 under the ranked search, its cache CACHEDB, BEAM_BUDGET_S 0: only cached results
CAPTURE = """
import json, sys
from pathlib import Path
import numpy as np
from tinygrad import Context, Tensor, TinyJit, dtypes
from tinyperf.benchmarks.common.beam import RankedBeam
n, out = int(sys.argv[1]), sys.argv[2]
w = Tensor(np.linspace(-1, 1, n * n, dtype=np.float32).reshape(n, n)).cast(dtypes.half).realize()
x = Tensor(np.linspace(0, 1, n * n, dtype=np.float32).reshape(n, n)).cast(dtypes.half).realize()
@TinyJit
def step(x): return ((x @ w).relu() + 1).realize(), (x * 3 - 1).realize()
with Context(BEAM=0): step(x.contiguous().realize())        # the uncaptured first call, as IGNORE_JIT_FIRST_BEAM=1
rb = RankedBeam(budget_s=0, kernels_out=Path(out) if out else None, log=lambda s: print(s, file=sys.stderr))
with Context(BEAM=1), rb.active(): step(x.contiguous().realize())
print(json.dumps(rb.reports[0].summary()))
"""


def run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
  r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **env})
  if r.returncode != 0:
    sys.exit(f"check_beam_kernels: `{' '.join(argv[:4])} ...` failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
  return r


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="lab/scripts/check_beam_kernels.py", description=__doc__.split("\n\n")[0])
  p.add_argument("--n", type=int, default=1024, help="the matmul's size (default 1024)")
  return p


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  work = Path(tempfile.mkdtemp(prefix="check_beam_kernels."))
  try:
    kernels, cache = work / "k.pkl", work / "beam.db"
    first = json.loads(run([sys.executable, "-c", CAPTURE, str(args.n), str(kernels)],
                           {"CACHEDB": str(work / "first.db")}).stdout.splitlines()[-1])
    search = run([sys.executable, "-m", "lab.beam_kernels", str(kernels), "--cache", str(cache)], {})
    print(search.stdout, end="", file=sys.stderr)
    shutil.copy(cache, work / "second.db")
    second = json.loads(run([sys.executable, "-c", CAPTURE, str(args.n), ""],
                            {"CACHEDB": str(work / "second.db")}).stdout.splitlines()[-1])
  finally:
    shutil.rmtree(work, ignore_errors=True)
  dev = os.environ.get("DEV", "the default device")
  if first["searched"] == 0 and second["cached"] == second["kernels"] == first["kernels"]:
    print(f"check_beam_kernels: all {second['kernels']} kernels of the capture came from the cache beam_kernels filled "
          f"(DEV={dev}): OK")
    return 0
  print(f"check_beam_kernels: the second capture took {second['cached']} of {second['kernels']} kernels from the cache "
        f"beam_kernels filled (DEV={dev}; the first searched {first['searched']}): the kernels file does not reproduce "
        "the capture's cache keys on this device, so a lease's search with it would be lost")
  return 1


if __name__ == "__main__":
  sys.exit(main())
