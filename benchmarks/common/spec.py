"""The record every benchmark exports (benchmarks/<bm>/spec.py: SPEC): what the config loader, the rules, the launcher,
the renderers and the report need to know about it, so that none of them names a benchmark. benchmarks/registry.py
lists them. Nothing here imports more than the standard library: tooling/ reads specs on every command."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Knob:
  type: type
  doc: str
  required: bool = True
  choices: tuple = ()
  range: str = ""   # numeric knobs: the allowed interval, e.g. "[1,)" (>= 1) or "(0,1]"; NaN and infinities never pass


@dataclass(frozen=True)
class BenchmarkSpec:
  name: str                # MLPerf's benchmark keyword (logs, results/<system>/<name>/); the code is benchmarks/<name>/
  title: str               # rendered scripts' and READMEs' heading
  model: str               # the closed model's name in messages
  ruleset: str             # the mlperf-logging ruleset a closed result is checked against (its last one)
  knobs: dict[str, Knob]   # the knobs beyond config.COMMON
  schedule: tuple[str, str]   # (warm-up knob, schedule-length knob): the warm-up ends before the schedule does
  # cross-knob rules beyond config's shared ones: knobs -> [(the knobs involved, why the values cannot be)]
  rules: Callable[[dict], list[tuple[tuple[str, ...], str]]]
  triton: bool             # KERNELS=triton has kernels for its model (benchmarks/kernels)
  # The closed division's model ({knob: value}) and dataset sizes ({log key: (size, what it counts)}): a config or an
  # override changing the model makes an open-division run, and a log stating fewer samples one on part of the data.
  closed_model: dict
  closed_samples: dict
  quality_target: float    # MLPerf's closed quality target
  quality_metric: str      # what the eval accuracy measures (report's y axis)
  progress: str            # "epoch": the log times epochs (epoch_start/stop); "samples": throughput between evals
  throughput_unit: str     # what one train step's samples are (img, seq)
  data_marker: str         # the file prep writes last, after verifying: a prepared data set has it
  prep_hint: Callable[[str, str], str]   # (quoted data dir, platform) -> the `tinyperf prep` command(s) that make it
  data_dir_doc: str        # what DATA_DIR of the rendered scripts holds
  data_var: str            # compose's host-directory variable of the data ...
  data_var_cpu: str        # ... and of the CPU platform's stand-in data
  stand_in_setup: str      # lines setup.sh runs before preparing the CPU platform's stand-in data
  loader_shm: bool         # the loader feeds through shared-memory rings (SHM_RING_BATCHES) sized by loader cores
  min_free_gb: int         # free disk a GPU run needs (results, cache, checkpoints)
  # the rendered platform README and init_datasets.sh: (cfg, stand_in) -> {"problem", "data", "dataset", "model",
  # "quality"} and (cfg, stand_in, require) -> the data steps, require(var, what, indent) a script's refusal of unset var
  readme: Callable[..., dict]
  init_steps: Callable[..., str]
