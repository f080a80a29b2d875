"""What a `tinyperf run` container runs: one INIT + RUN process, exactly as the host backend runs it (tooling/launch/backends.py).

  python -m tinyperf.tooling.launch.inside --benchmark B --platform P --seed S --data /data --work /work

/work is the run's work folder (benchmarks/common/rundir.py); the run's config is its config.json (the launcher's
preflight ran once, before the set's runs, in a container like this one). The console output goes to stdout (the launcher streams it
to the host while the run goes on); the MLPerf log is /work/mlperf.txt; /work/exit_codes.json records the exit codes for
the ledger (tinyperf.tooling.launch.backends.host_run's); the kernel cache (INIT's BEAM results and compiled kernels) is
/work/cache/tinygrad.db. Exit code: the training
process's (0 converged, 1 not), the stopped INIT's when its time limit ended it, 2 when preflight failed (nothing ran)."""
from __future__ import annotations
import argparse
import json
import sys
from pathlib import Path

from tinyperf.benchmarks.common.io import InputError
from tinyperf.benchmarks.common.rundir import RunDir, load_run_config
from tinyperf.benchmarks.registry import spec
from tinyperf.tooling.common.errors import write_atomic


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m tinyperf.tooling.launch.inside` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog="python -m tinyperf.tooling.launch.inside", description=__doc__.splitlines()[0])
  p.add_argument("--benchmark", required=True)
  p.add_argument("--platform", required=True)
  p.add_argument("--seed", type=int, required=True)
  p.add_argument("--data", type=Path, required=True)
  p.add_argument("--work", type=Path, required=True)
  return p


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  from tinyperf.tooling.launch.backends import host_run
  run = RunDir(args.work)
  try: cfg, _ = load_run_config(spec(args.benchmark), args.platform, work=args.work)
  except InputError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  codes, _ = host_run(cfg, seed=args.seed, data=args.data, run=run, out_file=None)
  write_atomic(run.exit_codes, json.dumps(codes), overwrite=True)
  return codes.get("run", codes.get("init", 1))


if __name__ == "__main__":
  sys.exit(main())
