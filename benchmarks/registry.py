"""The benchmarks tinyperf knows, by MLPerf name: adding one is its spec, train, prep and one line here. Above both
benchmarks (benchmarks/common imports none of them), so everything that takes a benchmark by name (tooling/, the
generated scripts' seed, lab/) resolves it here.

`python3 -m tinyperf.benchmarks.registry seed BENCHMARK PLATFORM` prints one seed of the platform's SEED_BITS (environment
override included) for the generated run scripts."""
from __future__ import annotations
import sys

from tinyperf.benchmarks.bert import spec as bert_spec
from tinyperf.benchmarks.common import config
from tinyperf.benchmarks.common.config import COMMON, ConfigError
from tinyperf.benchmarks.common.io import InputError
from tinyperf.benchmarks.common.rules import SEED_BITS, draw_seed
from tinyperf.benchmarks.common.spec import BenchmarkSpec
from tinyperf.benchmarks.resnet import spec as resnet_spec

BENCHMARKS: dict[str, BenchmarkSpec] = {s.name: s for s in (resnet_spec.SPEC, bert_spec.SPEC)}
SCHEMA = {name: {**COMMON, **s.knobs} for name, s in BENCHMARKS.items()}   # every knob a benchmark's config holds
ALL_KNOBS = set().union(*SCHEMA.values())


def spec(benchmark: str) -> BenchmarkSpec:
  if benchmark not in BENCHMARKS:
    raise ConfigError(f"unknown benchmark {benchmark!r}; valid: {', '.join(BENCHMARKS)}.")
  return BENCHMARKS[benchmark]


def load_config(benchmark: str, platform: str, **kw) -> config.PlatformConfig:
  """config.load_config of the benchmark named (its keyword arguments: environ, path, given_as)."""
  return config.load_config(spec(benchmark), platform, **kw)


def build_parser():
  """The parser of `python3 -m tinyperf.benchmarks.registry seed BENCHMARK PLATFORM` (test_doc_commands checks the generated
  scripts' commands with it)."""
  import argparse
  p = argparse.ArgumentParser(prog="python3 -m tinyperf.benchmarks.registry")
  sub = p.add_subparsers(dest="cmd", required=True)
  seed = sub.add_parser("seed", help="print one seed of the platform's SEED_BITS")
  seed.add_argument("benchmark")
  seed.add_argument("platform")
  return p


if __name__ == "__main__":
  args = build_parser().parse_args()
  try:
    print(draw_seed(load_config(args.benchmark, args.platform).get("SEED_BITS", SEED_BITS)))
  except InputError as e: print(f"error: {e}", file=sys.stderr); sys.exit(2)
