"""What a `tinyperf run` container runs: preflight, then one INIT + RUN process, exactly as the host backend runs it (tooling/launch/backends.py).

  python -m tooling.launch.inside --benchmark B --platform P --seed S --data /data --work /work --cache /cache

The console output goes to stdout (the launcher streams it to the host while the run goes on); the MLPerf log is
/work/mlperf.txt; /work/exit_codes.json records the exit codes for the ledger (tooling.launch.backends.host_run's); the kernel cache
(INIT's BEAM results and compiled kernels) is /cache/tinygrad.db on its own mounted volume. Exit code: the training
process's (0 converged, 1 not), the stopped INIT's when its time limit ended it, 2 when preflight failed (nothing ran)."""
from __future__ import annotations
import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.registry import load_config
from tooling.common.errors import write_atomic


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m tooling.launch.inside` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog="python -m tooling.launch.inside", description=__doc__.splitlines()[0])
  p.add_argument("--benchmark", required=True)
  p.add_argument("--platform", required=True)
  p.add_argument("--seed", type=int, required=True)
  p.add_argument("--data", type=Path, required=True)
  p.add_argument("--work", type=Path, required=True)
  p.add_argument("--cache", type=Path, required=True)
  return p


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  from tooling.launch.backends import host_run
  cfg = load_config(args.benchmark, args.platform)
  codes_file = args.work / "exit_codes.json"
  pre = subprocess.call([sys.executable, "-m", "benchmarks.preflight", "--benchmark", args.benchmark,
                         "--platform", args.platform, "--data", str(args.data), "--work", str(args.work)])
  if pre != 0:
    write_atomic(codes_file, json.dumps({"preflight": pre}), overwrite=True)
    return 2
  codes, _ = host_run(cfg, seed=args.seed, data=args.data, work=args.work, out_file=None,
                      cache_db=args.cache / "tinygrad.db")
  write_atomic(codes_file, json.dumps(codes), overwrite=True)
  return codes.get("run", codes.get("init", 1))


if __name__ == "__main__":
  sys.exit(main())
