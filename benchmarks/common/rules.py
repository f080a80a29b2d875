"""The MLPerf Training rules tinyperf applies, each defined here once; every other module imports them.

It sits at the bottom and imports only benchmarks/common/io.py and spec.py; mlperf_logging, installed wherever
benchmarks run, is imported inside the function that reads it. What differs per benchmark (ruleset, closed model and
samples, quality target) is its spec's (benchmarks/<bm>/spec.py).
"""
from __future__ import annotations
import os
import re

from tinyperf.benchmarks.common.io import InputError
from tinyperf.benchmarks.common.spec import BenchmarkSpec

USAGE = "training"   # mlperf_logging's --usage for every tool and table
STATUS_RULESETS = ("3.1.0", "4.0.0")   # the rulesets that require (and accept) submission_status in a log

# INIT: the rules' allowance from init_start to init_stop, in minutes; the checker enforces it strictly (<).
INIT_LIMIT_MIN = {"closed": 30, "open": 240}
NEAR_LIMIT = 0.10   # `tinyperf check` warns when init is within 10% of its allowance
# A closed INIT still going 35 minutes after its process started (init_start comes seconds in, after imports and the
# page-cache drop) cannot pass, and a BEAM search can stall far longer (docs/decisions.md, INIT limit), so the launcher
# stops it there instead of holding the GPUs for a RUN whose log the checker would reject.
CLOSED_INIT_STOP_S = (INIT_LIMIT_MIN["closed"] + 5) * 60

# The verdict policy of `tinyperf check` (docs/check.md, "Verdict policy"), written once: a run or a set FAILs only where
# MLCommons' own tools (compliance_checker, package_checker with its seed and RCP checks, system_desc_checker) or the
# rules' text require it. Whatever tinyperf adds beyond them is a WARN that says what a reviewer may ask, and a FAIL
# only under `tinyperf check --strict`: published results that package_checker passed and review accepted (result files
# numbered from 1, ResNet eval_samples 49999 or 50016, vendor keys that differ between runs) keep their verdict.
def beyond_rules(strict: bool) -> str:
  """The level of a finding tinyperf adds beyond MLCommons' tools and the rules' text: warn, or fail under --strict."""
  return "fail" if strict else "warn"


# The closed division's datasets (a spec's closed_samples: log key -> (the dataset's size, what it counts)). The
# compliance checker requires the keys, not their values. The rules' text requires the whole dataset, so a log stating
# fewer samples than SAMPLES_SLACK below the size says a run on part of the data (EVAL_SAMPLES=480, 10 synthetic
# classes): a failure. Counts near the size are what reviewed logs state (ResNet 49999 and 50016, tinycorp's BERT 10080:
# the 10000 in whole batches of 96), and more than the size means padding: a warning asking what was counted.
IMAGENET_COUNTS = {"train": 1_281_167, "val": 50_000}   # ILSVRC2012, as prep verifies it
SAMPLES_SLACK = 0.01


def closed_model_changes(spec: BenchmarkSpec, knobs: dict) -> dict:
  """{knob: value} where knobs differ from spec's closed model, whose change makes an open-division run whatever the
  log says (the checker cannot see it) (RESNET_LAYERS compared as numbers: "3, 4, 6, 3" is it)."""
  def norm(k, v):
    if k != "RESNET_LAYERS": return v
    try: return tuple(int(x) for x in str(v).split(","))
    except ValueError: return v
  return {k: knobs.get(k) for k, v in spec.closed_model.items() if norm(k, knobs.get(k)) != norm(k, v)}


# Seeds: every run of a set needs its own (the seed checker rejects a repeat). SEED_BITS is the default width of the
# SEED_BITS knob (16..32: tinygrad keeps its seed as a uint32); RANDOM_BITS is bash $RANDOM's width (0..32767), what
# upstream's run_and_time.sh draws and where a handful of runs already collide.
SEED_BITS = 31
RANDOM_BITS = 15
SEED_EVIDENCE = 10   # bits of evidence before `tinyperf check` calls a package's seeds narrow (p < 0.1%)

# Result files: `tinyperf run` writes result_0.txt ... result_<N-1>.txt; package_checker and result_summarizer count every
# result_*.txt, whatever follows the underscore (published sets numbered 1..N passed both).
RESULT_NAME = re.compile(r"^result_(0|[1-9][0-9]*)\.txt$")
RESULT_GLOB = re.compile(r"^result_.*\.txt\Z", re.S)
def result_name(index: int) -> str: return f"result_{index}.txt"


def required_runs(benchmark: str) -> int | None:
  """Runs per benchmark (resnet 5, bert 10) as mlperf_logging's package checker counts them: `tinyperf run`'s default
  --nexp, compose's NEXP default, `tinyperf check`'s required count and `tinyperf package`'s selection."""
  from mlperf_logging import benchmark_meta   # plain dict module, cheap to import
  return benchmark_meta.get_result_file_counts(USAGE).get(benchmark)


def max_dropped_runs(benchmark: str) -> int:
  """Olympic scoring drops the fastest and this many slowest runs (result_summarizer's one exception is unet3d)."""
  return 4 if benchmark == "unet3d" else 1


def draw_seed(bits: int = SEED_BITS, taken: set[int] = frozenset(), where: str = "") -> int:
  """A seed of `bits` bits from the OS entropy pool (not bash $RANDOM), not in `taken` (the seeds `where`, a ledger,
  already used): the one place seeds are drawn, by `tinyperf run` and the generated run scripts."""
  space = 1 << max(bits, 0)
  if bits < 0 or len({s for s in taken if 0 <= s < space}) >= space:
    raise InputError(f"SEED_BITS={bits} allows {space if bits >= 0 else 0} seed(s) and {where or 'the ledger'} already "
                     f"used them all: raise SEED_BITS (default {SEED_BITS}) and rerun. Nothing was run.")
  while True:
    seed = int.from_bytes(os.urandom(8), "little") % space
    if seed not in taken: return seed
