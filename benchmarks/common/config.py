"""Platform configs: the one source of truth for every knob of a benchmark x platform.

A config lives at benchmarks/<benchmark>/implementations/<platform>/config.yaml. Two kinds of keys:
  - lower-case keys are facts about the submission (platform, system, division, ruleset, ...): fixed per file.
  - UPPER-CASE keys are knobs, named like the environment variables tinygrad's own scripts use (BS, LR, BEAM_*).
    An environment variable with the same name overrides the file, one knob at a time (BS=512 ./dev_run.sh).

This module imports nothing from tinygrad: the launcher (tooling/) reads configs through it too, so that compose,
scripts and docs are generated from, or checked against, the same values the training entrypoint uses.
"""
from __future__ import annotations
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from benchmarks.common.io import InputError

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ("resnet", "bert")
PLATFORMS = ("tinybox_green", "tinybox_red", "tinybox_8xMI300X", "1xH200", "2xH200", "cpu_smoke")
# MLPerf retired both benchmarks: resnet's last ruleset is 4.0.0, bert's 5.0.0. Newer rulesets skip them silently.
RULESETS = {"resnet": "4.0.0", "bert": "5.0.0"}


class ConfigError(InputError):
  """A config or override is invalid. The message names the file, the key and the fix."""


@dataclass(frozen=True)
class Knob:
  type: type
  doc: str
  required: bool = True
  choices: tuple = ()


# Facts about the submission (lower-case, never overridden by the environment).
META = {
  "benchmark": Knob(str, "benchmark keyword as MLPerf logs it", choices=BENCHMARKS),
  "platform": Knob(str, "implementation directory name"),
  "system": Knob(str, "systems/<system>.json stem; logged as submission_platform"),
  "vendor": Knob(str, "which image runs it", choices=("nv", "amd", "cpu")),
  "division": Knob(str, "MLPerf division", choices=("closed", "open")),
  "ruleset": Knob(str, "mlperf-logging ruleset the logs are checked against"),
  "submission_status": Knob(str, "log's submission_status (ruleset 4.0.0 only)",
                            choices=("onprem", "cloud", "preview", "research")),
  "tested": Knob(bool, "false when these settings never ran on this hardware"),
  "time_limit_minutes": Knob(int, "wall-clock limit for one INIT+RUN (Slurm, launcher watchdog)"),
  "host_prerequisites": Knob(list, "host setup the container cannot do (documented, never run with sudo)", required=False),
  "notes": Knob(str, "where the values come from", required=False),
}

# Knobs shared by both benchmarks: device, precision and the tinygrad kernel search.
COMMON = {
  "DEV": Knob(str, "tinygrad device backend", choices=("NV", "AMD", "CUDA", "CPU", "NULL")),
  "GPUS": Knob(int, "devices the batch is sharded over"),
  "DEFAULT_FLOAT": Knob(str, "compute dtype (HALF = fp16 with fp32 master weights)", choices=("HALF", "FLOAT")),
  "TRAIN_BEAM": Knob(int, "BEAM width for train kernels (0 = no search)"),
  "EVAL_BEAM": Knob(int, "BEAM width for eval kernels"),
  "IGNORE_JIT_FIRST_BEAM": Knob(int, "run the first, uncaptured JIT call without BEAM", required=False),
  "BEAM_UOPS_MAX": Knob(int, "reject BEAM candidates with more uops", required=False),
  "BEAM_UPCAST_MAX": Knob(int, "BEAM upcast limit", required=False),
  "BEAM_LOCAL_MAX": Knob(int, "BEAM local-size limit", required=False),
  "BEAM_MIN_PROGRESS": Knob(float, "stop searching when a step improves less than this many us", required=False),
  "BEAM_PADTO": Knob(int, "add PADTO actions to the search when non-zero", required=False),
  "HCQDEV_WAIT_TIMEOUT_MS": Knob(int, "HCQ signal wait timeout", required=False),
  "NUM_WORKERS": Knob(int, "data-loader worker processes (0 = one per available core)"),
  "SEED_BITS": Knob(int, "width of the random seed drawn per run (31 avoids $RANDOM-sized collisions)", required=False),
}

RESNET = {
  "BS": Knob(int, "global train batch size"),
  "EVAL_BS": Knob(int, "global eval batch size"),
  "LR": Knob(float, "LARS peak learning rate"),
  "WARMUP_EPOCHS": Knob(int, "linear warm-up length in epochs"),
  "EPOCHS": Knob(int, "schedule length in epochs (training stops earlier at the target)"),
  "END_LR": Knob(float, "final learning rate of the polynomial decay"),
  "DECAY": Knob(float, "LARS weight decay (1e-4 * 2^N for closed)"),
  "MOMENTUM": Knob(float, "LARS and SGD momentum"),
  "LABEL_SMOOTHING": Knob(float, "label smoothing (0 or 0.1 in closed)"),
  "LOSS_SCALER": Knob(float, "static loss scale (128 for fp16: the v4.0 reviewed runs)"),
  "TARGET": Knob(float, "top-1 accuracy that stops the run"),
  "EVAL_START_EPOCH": Knob(int, "eval offset: evals after epochs where (epoch - offset) % EVAL_FREQ == 0"),
  "EVAL_FREQ": Knob(int, "eval every N epochs"),
  "EVAL_EVERY_EPOCH_FROM": Knob(int, "from this epoch on, eval after every epoch"),
  "SYNCBN": Knob(int, "1 = BatchNorm statistics synced across devices, 0 = per device"),
  "IMAGE_SIZE": Knob(int, "train/eval crop size (224 for closed)"),
  "NUM_CLASSES": Knob(int, "classifier width (1000 for closed)"),
  "RESNET_WIDTH": Knob(int, "stem/first-stage width (64 = ResNet-50)"),
  "RESNET_LAYERS": Knob(str, "bottleneck blocks per stage, comma separated (3,4,6,3 = ResNet-50)"),
  "SHM_RING_BATCHES": Knob(int, "batches held in the shared-memory ring per loader"),
  "FEED_IMG_S_PER_GPU": Knob(float, "train img/s one GPU consumes at the speed expected on this platform (the "
                                    "loader must feed GPUS times this; source in the config's comment)"),
  "LOADER_IMG_S_PER_CORE": Knob(float, "train img/s one CPU core of the loader delivers (benchmarks.resnet."
                                       "bench_decode); sets the cores the platform needs (benchmarks/common/feeding.py)"),
}

BERT = {
  "BS": Knob(int, "global train batch size"),
  "EVAL_BS": Knob(int, "global eval batch size"),
  "LR": Knob(float, "LAMB peak learning rate"),
  "BETA1": Knob(float, "LAMB beta1"),
  "BETA2": Knob(float, "LAMB beta2"),
  "EPSILON": Knob(float, "LAMB epsilon"),
  "DECAY": Knob(float, "LAMB weight decay (LayerNorm and biases excluded)"),
  "POLY_POWER": Knob(float, "LR decay power"),
  "WARMUP_STEPS": Knob(int, "linear warm-up steps"),
  "TRAIN_STEPS": Knob(int, "schedule length in steps"),
  "LOSS_SCALER": Knob(float, "static loss scale (2048 for fp16)"),
  "CLIP_NORM": Knob(float, "global gradient-norm clip"),
  "TARGET": Knob(float, "masked-LM accuracy that stops the run"),
  "EVAL_SAMPLES": Knob(int, "eval set size (10000 for closed)"),
  "EVAL_STEP_FREQ": Knob(int, "eval every N steps; 0 = the MLPerf formula floor(0.05*(230.23*BS+3e6), 25000)/BS"),
  "MAX_SEQ_LEN": Knob(int, "sequence length (512 for closed)"),
  "MAX_PREDICTIONS": Knob(int, "masked positions per sequence (76 for closed)"),
  "BERT_LAYERS": Knob(int, "encoder layers (24 = BERT-large)"),
  "BERT_HIDDEN": Knob(int, "hidden size (1024 = BERT-large)"),
  "BERT_HEADS": Knob(int, "attention heads (16 = BERT-large)"),
  "BERT_INTERMEDIATE": Knob(int, "feed-forward width (4096 = BERT-large)"),
  "INIT_BERT_LAYERS": Knob(int, "encoder layers the INIT phase compiles (kernels repeat per layer)"),
  "INIT_CHECKPOINT": Knob(int, "1 = RUN starts from the MLPerf phase-1 checkpoint (DATA/bert-large.safetensors, made by "
                              "prep checkpoint), 0 = from random init (toy runs)", choices=(0, 1)),
  "SUM_DTYPE": Knob(str, "reduction accumulation dtype", required=False, choices=("HALF", "FLOAT")),
  "USE_ATOMICS": Knob(int, "1 = the word-embedding gradient is an atomic scatter-add (O(tokens x hidden)), 0 = the "
                           "reference's one-hot reduction (O(vocab x tokens x hidden)); CPU always scatters "
                           "(benchmarks/bert/model.py Embedding)", required=False, choices=(0, 1)),
  "DROPOUT": Knob(float, "hidden and attention dropout probability (default BERT_DROPOUT, BERT-large's and the closed "
                         "reference's; a closed RUN refuses any other value; `tinyperf bench --dropout 0` measures its cost)",
                  required=False),
}

SCHEMA = {"resnet": {**COMMON, **RESNET}, "bert": {**COMMON, **BERT}}
BERT_DROPOUT = 0.1   # BERT-large's dropout, fixed in the closed division: DROPOUT's value when a config does not set it


def bert_dropout(knobs) -> float:
  return float(knobs.get("DROPOUT", BERT_DROPOUT))


@dataclass
class PlatformConfig:
  benchmark: str
  platform: str
  path: Path
  meta: dict
  knobs: dict                                    # UPPER-CASE knob -> typed value, env overrides applied
  overridden: dict = field(default_factory=dict)  # knob -> (file value, env value) for the log

  def __getitem__(self, key): return self.knobs[key] if key.isupper() else self.meta[key]
  def get(self, key, default=None):
    try: return self[key]
    except KeyError: return default

  def env(self) -> dict[str, str]:
    """The knobs as environment variables (what run_and_time.sh and compose export)."""
    return {k: _to_env(v) for k, v in self.knobs.items()}


def config_path(benchmark: str, platform: str) -> Path:
  return ROOT / "benchmarks" / benchmark / "implementations" / platform / "config.yaml"


def _to_env(v) -> str:
  if isinstance(v, bool): return "1" if v else "0"
  return str(v)


def _coerce(value, knob: Knob, key: str, where: str):
  """Type-check a value from YAML (strict) or from the environment (a string, parsed)."""
  from_env = where.startswith("environment")
  t = knob.type
  try:
    if from_env and isinstance(value, str):
      if t is bool: value = {"1": True, "0": False, "true": True, "false": False}[value.strip().lower()]
      elif t is int: value = int(value)
      elif t is float: value = float(value)
    if t is float and isinstance(value, int) and not isinstance(value, bool): value = float(value)
    ok = isinstance(value, t) and not (t in (int, float) and isinstance(value, bool))
  except (ValueError, KeyError):
    ok = False
  if not ok:
    raise ConfigError(f"{where}: {key} must be {t.__name__} ({knob.doc}), got {value!r}. Fix the value and rerun.")
  if knob.choices and value not in knob.choices:
    raise ConfigError(f"{where}: {key} is {value!r}; allowed: {', '.join(map(str, knob.choices))}.")
  return value


def load_config(benchmark: str, platform: str, environ: dict | None = None, path: Path | None = None) -> PlatformConfig:
  """Load and validate one config; environment variables named like a knob override it."""
  if benchmark not in BENCHMARKS:
    raise ConfigError(f"unknown benchmark {benchmark!r}; valid: {', '.join(BENCHMARKS)}.")
  path = Path(path) if path else config_path(benchmark, platform)
  if not path.is_file():
    have = available_platforms(benchmark)
    raise ConfigError(f"unknown platform {platform!r} for {benchmark}: {path} does not exist. "
                      f"Valid platforms: {', '.join(have) or '(none)'}.")
  try:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
  except (yaml.YAMLError, UnicodeDecodeError) as e:
    raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]}). Fix the syntax and rerun.") from None
  if not isinstance(raw, dict):
    raise ConfigError(f"{path}: expected a mapping of keys to values, got {type(raw).__name__}.")
  schema = SCHEMA[benchmark]
  unknown = sorted(k for k in raw if k not in schema and k not in META)
  if unknown:
    raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}. Known knobs are listed in "
                      f"benchmarks/common/config.py (SCHEMA['{benchmark}'], META); remove or rename them.")
  meta, knobs = {}, {}
  for table, out in ((META, meta), (schema, knobs)):
    for key, knob in table.items():
      if key not in raw:
        if knob.required: raise ConfigError(f"{path}: missing required key {key} ({knob.doc}). Add it.")
        continue
      out[key] = _coerce(raw[key], knob, key, str(path))
  if meta["benchmark"] != benchmark:
    raise ConfigError(f"{path}: benchmark is {meta['benchmark']!r} but the file lives under {benchmark}/.")
  if meta["platform"] != path.parent.name:
    raise ConfigError(f"{path}: platform is {meta['platform']!r} but the directory is {path.parent.name!r}.")
  if meta["division"] == "closed" and meta["ruleset"] != RULESETS[benchmark]:
    raise ConfigError(f"{path}: ruleset {meta['ruleset']} does not accept closed {benchmark}; use {RULESETS[benchmark]}.")
  environ = os.environ if environ is None else environ
  overridden = {}
  for key, knob in schema.items():
    if key in environ and environ[key] != "":
      val = _coerce(environ[key], knob, key, f"environment variable {key}")
      if knobs.get(key) != val: overridden[key] = (knobs.get(key), val)
      knobs[key] = val
  _check_consistency(path, benchmark, knobs)
  return PlatformConfig(benchmark, meta["platform"], path, meta, knobs, overridden)


def _check_consistency(path: Path, benchmark: str, k: dict):
  for bs in ("BS", "EVAL_BS"):
    if k[bs] % k["GPUS"]:
      raise ConfigError(f"{path}: {bs}={k[bs]} is not divisible by GPUS={k['GPUS']}; the batch is sharded evenly.")
  if benchmark == "resnet":
    for key in ("FEED_IMG_S_PER_GPU", "LOADER_IMG_S_PER_CORE"):
      if k[key] <= 0: raise ConfigError(f"{path}: {key}={k[key]} must be positive (img/s).")
    try: layers = [int(x) for x in k["RESNET_LAYERS"].split(",")]
    except ValueError: layers = []
    if len(layers) != 4 or min(layers) < 1:
      raise ConfigError(f"{path}: RESNET_LAYERS={k['RESNET_LAYERS']!r} must be four positive integers, e.g. 3,4,6,3.")


def available_platforms(benchmark: str) -> list[str]:
  impl = ROOT / "benchmarks" / benchmark / "implementations"
  return sorted(p.name for p in impl.iterdir() if (p / "config.yaml").is_file()) if impl.is_dir() else []
