"""How many kernels INIT's BEAM search meets with IGNORE_JIT_FIRST_BEAM=1 and =0, for a ResNet config's train step,
counted on tinygrad's NULL device (no GPU needed: the scheduler splits the step into the same kernels as on the
config's GPU; BEAM "times" candidates at zero, so only the count is meaningful, not the choice).

  python3 lab/scripts/count_beam_kernels.py [--platform 1xH200] [--steps 3]

A TinyJit's first call runs uncaptured; with IGNORE_JIT_FIRST_BEAM=0 it is searched too and the capture step then finds
its kernels in the cache, so the difference between the two counts is the first step's one-off kernels (state set-up)
that a search would time in vain. Prints one JSON line per setting: kernels searched = rows of the beam_search table."""
from __future__ import annotations
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from lab.bench import beam_rows  # noqa: E402  (the count `python -m lab.bench --beam-cache` prints)
CHILD = """
import sys
from tinyperf.benchmarks.registry import load_config
from tinyperf.benchmarks.common import runtime
cfg = load_config("resnet", sys.argv[1])
runtime.apply_tinygrad_env(cfg, "init", keep_dev=True)
from tinyperf.benchmarks.resnet.train import Trainer, run_fake_steps
run_fake_steps(Trainer(cfg, seed=0, spe=100), int(sys.argv[2]), with_eval=False)
"""


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python3 lab/scripts/count_beam_kernels.py` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--platform", default="1xH200")
  p.add_argument("--steps", type=int, default=3, help="train steps (the JIT captures the second)")
  return p


def main() -> int:
  args = build_parser().parse_args()
  for ignore_first in (1, 0):
    with tempfile.TemporaryDirectory() as tmp:
      # KERNELS: tinygrad's path unless the caller names it (the Triton kernels build for CUDA only, not on NULL)
      env = {"KERNELS": "tinygrad", **os.environ, "DEV": "NULL", "NULL_ALLOW_COPYOUT": "1", "TRAIN_BEAM": "1", "PARALLEL": "0",
             "IGNORE_JIT_FIRST_BEAM": str(ignore_first), "CACHEDB": str(Path(tmp) / "cache.db"),
             "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
      t0 = time.time()
      rc = subprocess.run([sys.executable, "-c", CHILD, args.platform, str(args.steps)], env=env, cwd=ROOT,
                          stdout=subprocess.DEVNULL).returncode
      if rc != 0: sys.exit(f"count_beam_kernels: the {args.platform} train step failed on DEV=NULL (exit {rc}, above)")
      print(json.dumps({"benchmark": "resnet", "platform": args.platform, "IGNORE_JIT_FIRST_BEAM": ignore_first,
                        "kernels_searched": beam_rows(Path(tmp) / "cache.db"),
                        "wall_s_on_null": round(time.time() - t0, 1)}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
