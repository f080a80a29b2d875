"""Platform configs: the one source of truth for every knob of a benchmark x platform.

A config lives at benchmarks/<benchmark>/implementations/<platform>/config.yaml. Two kinds of keys:
  - lower-case keys are facts about the submission (platform, system, division, ruleset, ...): fixed per file.
  - UPPER-CASE keys are knobs, named like the environment variables tinygrad's own scripts use (BS, LR, BEAM_*).
    An environment variable with the same name overrides the file, one knob at a time (BS=512 ./dev_run.sh).

This module imports nothing from tinygrad: the launcher (tooling/) reads configs through it too, so that compose,
scripts and docs are generated from, or checked against, the same values the training entrypoint uses. What differs
per benchmark (its knobs, rules, ruleset, closed model) comes from its spec (benchmarks/<bm>/spec.py), passed in: this
module names no benchmark; benchmarks/registry.py loads a config by benchmark name.
"""
from __future__ import annotations
import difflib
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tinyperf.benchmarks.common.io import InputError
from tinyperf.benchmarks.common.rules import SEED_BITS, closed_model_changes
from tinyperf.benchmarks.common.spec import BenchmarkSpec, Knob

ROOT = Path(__file__).resolve().parents[2]
PLATFORMS = ("tinybox_green", "tinybox_red", "tinybox_8xMI300X", "1xH200", "2xH200", "cpu_smoke")


class ConfigError(InputError):
  """A config or override is invalid. The message names the file, the key and the fix."""


class ClosedModelError(ConfigError):
  """A closed-division config or run that changes the closed model (the spec's closed_model knobs)."""


MAX_YAML_BYTES = 1 << 20   # a config or an overrides file: a few KB


class StrictLoader(yaml.SafeLoader):
  """PyYAML's safe loader refusing what a hand-written config never needs and an attack does: aliases (a "billion laughs"
  of nested aliases expands to gigabytes and hangs the reader) and a key written twice (PyYAML silently keeps the last
  value, so a knob edited in one place is overridden by a forgotten copy below it)."""
  def compose_node(self, parent, index):
    if self.check_event(yaml.AliasEvent):
      event = self.peek_event()
      raise yaml.composer.ComposerError(None, None, f"an alias (*{event.anchor}): write each value out", event.start_mark)
    return super().compose_node(parent, index)

  def construct_mapping(self, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
      key = self.construct_object(key_node, deep=True)
      try: twice = key in seen; seen.add(key)
      except TypeError: continue   # an unhashable key: SafeLoader's construct_mapping refuses it
      if twice:
        raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is written twice: keep one",
                                                key_node.start_mark)
    return super().construct_mapping(node, deep)


def load_yaml(path: Path, text: str | None = None):
  """A YAML file (or TEXT read from it) through StrictLoader; every problem a ConfigError naming the file and line."""
  try:
    if text is None:
      with open(path, "rb") as f: data = f.read(MAX_YAML_BYTES + 1)
      if len(data) > MAX_YAML_BYTES:
        raise ConfigError(f"{path}: over {MAX_YAML_BYTES >> 20} MiB, too large for a config; it is not one.")
      text = data.decode("utf-8")
    return yaml.load(text, Loader=StrictLoader)
  except yaml.YAMLError as e:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    raise ConfigError(f"{path}{f':{mark.line + 1}' if mark else ''}: not valid YAML ({problem}). Fix it and rerun."
                      ) from None
  except UnicodeDecodeError as e:
    raise ConfigError(f"{path}: not UTF-8 text ({e.reason}).") from None
  except OSError as e:
    raise ConfigError(f"{path}: cannot be read ({e.strerror or e}).") from None


# Facts about the submission (lower-case, never overridden by the environment, except DIVISION=open: load_config).
META = {
  "benchmark": Knob(str, "benchmark keyword as MLPerf logs it (the directory's: load_config)"),
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

# Knobs every benchmark has (its spec adds its own): device, precision and the tinygrad kernel search.
COMMON = {
  "DEV": Knob(str, "tinygrad device backend", choices=("NV", "AMD", "CUDA", "CPU", "NULL")),
  "GPUS": Knob(int, "devices the batch is sharded over", range="[1,)"),
  "DEFAULT_FLOAT": Knob(str, "compute dtype (HALF = fp16 with fp32 master weights)", choices=("HALF", "FLOAT")),
  "TRAIN_BEAM": Knob(int, "BEAM width for train kernels (0 = no search)", range="[0,)"),
  "EVAL_BEAM": Knob(int, "BEAM width for eval kernels", range="[0,)"),
  "IGNORE_JIT_FIRST_BEAM": Knob(int, "run a JIT's uncaptured first call without BEAM (tinycorp's steps; ours capture it)",
                                required=False, range="[0,1]"),
  "BEAM_UOPS_MAX": Knob(int, "reject BEAM candidates with more uops", required=False, range="[1,)"),
  "BEAM_UPCAST_MAX": Knob(int, "BEAM upcast limit", required=False, range="[1,)"),
  "BEAM_LOCAL_MAX": Knob(int, "BEAM local-size limit", required=False, range="[1,)"),
  "BEAM_MIN_PROGRESS": Knob(float, "stop searching when a step improves less than this many us", required=False,
                            range="[0,)"),
  "BEAM_PADTO": Knob(int, "add PADTO actions to the search when non-zero", required=False, range="[0,)"),
  "BEAM_COVERAGE": Knob(float, "search only the slowest kernels at BEAM=0 until they hold this share of the step's time "
                        "(1 = every kernel, tinygrad's own BEAM; benchmarks/common/beam.py)", required=False, range="(0,1]"),
  "BEAM_BUDGET_S": Knob(float, "seconds a process may spend in BEAM search (a search still running then is stopped); the "
                        "kernels not searched keep tinygrad's hand-coded optimizations (benchmarks/common/beam.py)",
                        required=False, range="[0,)"),
  "HCQDEV_WAIT_TIMEOUT_MS": Knob(int, "HCQ signal wait timeout", required=False, range="[1,)"),
  "NOOPT": Knob(int, "1 = tinygrad skips its hand-coded kernel optimizations: faster compiles, slower kernels (for "
                "toy runs whose INIT is mostly compile time)", required=False, range="[0,1]"),
  "KERNELS": Knob(str, "who writes the GEMMs (BERT's dense layers, ResNet's convs): tinygrad (its own "
                 "kernels, BEAM-searched; when unset) or triton (benchmarks/kernels, compiled for the GPU at INIT; "
                 "DEV=CUDA only; on several GPUs each runs its batch shard, not yet measured there)",
                 required=False, choices=("tinygrad", "triton")),
  "NUM_WORKERS": Knob(int, "data-loader worker processes (0 = one per available core)", range="[0,)"),
  # 16..32: narrower seeds collide ($RANDOM is 15 bits), and tinygrad keeps its seed as a uint32
  "SEED_BITS": Knob(int, f"width of the random seed drawn per run ({SEED_BITS} avoids $RANDOM-sized collisions)", required=False,
                    range="[16,32]"),
}

BERT_DROPOUT = 0.1   # BERT-large's dropout, fixed in the closed division: DROPOUT's value when a config does not set it


def bert_dropout(knobs) -> float:
  return float(knobs.get("DROPOUT", BERT_DROPOUT))


@dataclass
class PlatformConfig:
  spec: BenchmarkSpec
  platform: str
  path: Path
  meta: dict
  knobs: dict                                    # UPPER-CASE knob -> typed value, env overrides applied
  overridden: dict = field(default_factory=dict)  # knob -> (file value, env value) for the log

  @property
  def benchmark(self) -> str: return self.spec.name
  @property
  def schema(self) -> dict[str, Knob]: return {**COMMON, **self.spec.knobs}

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


def coerce_knob(value, knob: Knob, key: str, where: str, from_env: bool = False):
  """Type-check a value from YAML (strict) or from the environment (from_env: a string, parsed); where names its
  source in the error."""
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
  if t in (int, float) and not _in_range(value, knob.range):
    raise ConfigError(f"{where}: {key}={value!r} is out of range: it must be in {knob.range or '(-inf, inf)'} "
                      f"({knob.doc}). Fix the value and rerun; nothing was run or written.")
  return value


def _in_range(v: float, rng: str) -> bool:
  if not math.isfinite(v): return False
  if not rng: return True
  lo, hi = (x.strip() for x in rng[1:-1].split(","))
  if lo and (v < float(lo) or (rng[0] == "(" and v == float(lo))): return False
  if hi and (v > float(hi) or (rng[-1] == ")" and v == float(hi))): return False
  return True


def load_config(spec: BenchmarkSpec, platform: str, environ: dict | None = None, path: Path | None = None,
                given_as: dict[str, str] | None = None) -> PlatformConfig:
  """Load and validate one config of spec's benchmark; environment variables named like a knob override it. given_as:
  for knobs a command set in environ from its own flags, the flag as the user typed it (`python -m lab.bench`: {"BS":
  "--bs 0"}), which an error names instead of the environment variable the user never set."""
  benchmark = spec.name
  path = Path(path) if path else config_path(benchmark, platform)
  if not path.is_file():
    have = available_platforms(benchmark)
    close = difflib.get_close_matches(platform, have, n=1, cutoff=0.5)
    raise ConfigError(f"unknown platform {platform!r} for {benchmark}: {path} does not exist. "
                      + (f"Did you mean {close[0]}? " if close else "") + f"Valid platforms: {', '.join(have) or '(none)'}.")
  raw = load_yaml(path)
  if not isinstance(raw, dict):
    raise ConfigError(f"{path}: expected a mapping of keys to values, got {type(raw).__name__}.")
  schema = {**COMMON, **spec.knobs}
  unknown = sorted(k for k in raw if k not in schema and k not in META)
  if unknown:
    raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}. Known knobs are listed in "
                      f"benchmarks/common/config.py (COMMON, META) and benchmarks/{benchmark}/spec.py; remove or rename them.")
  meta, knobs = {}, {}
  for table, out in ((META, meta), (schema, knobs)):
    for key, knob in table.items():
      if key not in raw:
        if knob.required: raise ConfigError(f"{path}: missing required key {key} ({knob.doc}). Add it.")
        continue
      out[key] = coerce_knob(raw[key], knob, key, str(path))
  if meta["benchmark"] != benchmark:
    raise ConfigError(f"{path}: benchmark is {meta['benchmark']!r} but the file lives under {benchmark}/.")
  if meta["platform"] != path.parent.name:
    raise ConfigError(f"{path}: platform is {meta['platform']!r} but the directory is {path.parent.name!r}.")
  if meta["division"] == "closed" and meta["ruleset"] != spec.ruleset:
    raise ConfigError(f"{path}: ruleset {meta['ruleset']} does not accept closed {benchmark}; use {spec.ruleset}.")
  in_file = dict(knobs)
  if environ is None:
    environ = os.environ
    _warn_misspelt(environ, schema)
  given_as, overridden = given_as or {}, {}
  for key, knob in schema.items():
    if key in environ and environ[key] != "":
      val = coerce_knob(environ[key], knob, key, given_as.get(key, f"environment variable {key}"), from_env=True)
      if knobs.get(key) != val: overridden[key] = (knobs.get(key), val)
      knobs[key] = val
  _check_consistency(path, spec, knobs, {key: given_as.get(key, "the environment") for key in overridden})
  # DIVISION=open makes a closed config's run an open one (a shortened schedule, part of the data: docs/check.md);
  # the other way, a closed log, comes only from a config file that says closed
  if (division := environ.get("DIVISION", "")) not in ("", "open"):
    raise ConfigError(f"environment variable DIVISION={division!r}: only DIVISION=open is accepted (it makes "
                      f"{path}'s run an open-division one); a closed run's division comes from its config file. Unset "
                      f"DIVISION or set it to open.")
  if division == "open" and meta["division"] != "open":
    overridden["DIVISION"] = (meta["division"], "open")   # passed on as DIVISION=open where a launcher starts the run
    meta["division"] = "open"
  # the file's model; an environment override of it is refused where a run starts (require_closed_model)
  if meta["division"] == "closed" and (changed := closed_model_changes(spec, in_file)):
    raise ClosedModelError(f"{path}: division closed requires {_closed_model(spec)}, not "
                      f"{', '.join(f'{k} {v}' for k, v in changed.items())}; set those or division: open.")
  return PlatformConfig(spec, meta["platform"], path, meta, knobs, overridden)


RESOLVED_FORMAT = "tinyperf-config-v1"


def _resolved_hash(body: dict) -> str:
  import hashlib
  import json
  return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_resolved(cfg: PlatformConfig, path: Path, submitter: str) -> str:
  """One run's resolved config: cfg's facts and knobs after the environment's overrides, and the submitter its log
  records, as `tinyperf run` resolved them at claim time (what load_resolved reads back). Returns its sha256."""
  import json
  from tinyperf.benchmarks.common.io import write_atomic
  body = {"format": RESOLVED_FORMAT, "benchmark": cfg.benchmark, "platform": cfg.platform, "submitter": submitter,
          "meta": cfg.meta, "knobs": cfg.knobs, "overridden": {k: list(v) for k, v in cfg.overridden.items()}}
  digest = _resolved_hash(body)
  write_atomic(path, json.dumps({**body, "sha256": digest}, indent=1), overwrite=True)
  return digest


def load_resolved(path: Path, spec: BenchmarkSpec) -> tuple[PlatformConfig, str, str]:
  """(config, submitter, sha256) of spec's resolved config.json (write_resolved), its facts and knobs held to the rules
  config.yaml's are (types, choices, ranges, consistency); the environment overrides nothing: the launcher resolved it."""
  import json
  try:
    with open(path, "rb") as f: text = f.read(MAX_YAML_BYTES + 1)
  except OSError as e:
    raise ConfigError(f"{path}: cannot be read ({e.strerror or e}).") from None
  try:
    raw = json.loads(text) if len(text) <= MAX_YAML_BYTES else None
    if not isinstance(raw, dict) or raw.get("format") != RESOLVED_FORMAT: raise ValueError(f"not a {RESOLVED_FORMAT} file")
    body = {k: v for k, v in raw.items() if k != "sha256"}
    if set(body) != {"format", "benchmark", "platform", "submitter", "meta", "knobs", "overridden"}:
      raise ValueError("its keys are not format, benchmark, platform, submitter, meta, knobs, overridden, sha256")
    if raw.get("sha256") != _resolved_hash(body): raise ValueError("its sha256 does not match: it was edited")
    benchmark, meta, knobs, overridden = raw["benchmark"], raw["meta"], raw["knobs"], raw["overridden"]
    if not (isinstance(meta, dict) and isinstance(knobs, dict) and isinstance(overridden, dict)
            and all(isinstance(v, list) and len(v) == 2 for v in overridden.values())):
      raise ValueError("meta, knobs and overridden must be objects (overridden: knob -> [file value, value])")
    if not isinstance(raw["submitter"], str): raise ValueError("submitter must be a string")
  except (ValueError, RecursionError) as e:   # json.JSONDecodeError is a ValueError
    raise ConfigError(f"{path}: not a resolved config `tinyperf run` wrote ({e}). Remove it and rerun the run with "
                      f"`tinyperf run`, or run the entrypoint without it (it resolves config.yaml itself).") from None
  if benchmark != spec.name:
    raise ConfigError(f"{path}: the resolved config of {benchmark}, not {spec.name}; pass another work folder.")
  schema, where = {**COMMON, **spec.knobs}, str(path)
  if unknown := sorted(set(knobs) - set(schema)) + sorted(set(meta) - set(META)):
    raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; remove the file and rerun `tinyperf run`.")
  for table, got in ((META, meta), (schema, knobs)):
    for key, knob in table.items():
      if key in got: got[key] = coerce_knob(got[key], knob, key, where)
      elif knob.required: raise ConfigError(f"{path}: missing required key {key} ({knob.doc}); remove the file and rerun.")
  if raw["platform"] != meta["platform"] or meta["benchmark"] != benchmark:
    raise ConfigError(f"{path}: benchmark and platform disagree with its meta; remove the file and rerun `tinyperf run`.")
  _check_consistency(path, spec, knobs, {k: "the environment" for k in overridden})
  cfg = PlatformConfig(spec, meta["platform"], config_path(benchmark, meta["platform"]), meta, knobs,
                       {k: tuple(v) for k, v in overridden.items()})
  return cfg, raw["submitter"], raw["sha256"]

_warned: set[str] = set()


def misspelt_knobs(environ, schema: dict) -> dict[str, str]:
  """Environment variables that look like a typo of a knob of schema: {name: knob}. Upper-case names that are not one
  of its knobs and are close to one (difflib ratio >= 0.85; none of tinygrad's own variables is, nor another
  benchmark's knob: tests/unit/test_config.py); a name without an underscore only against knobs of its length (a
  swapped letter), so tinygrad's device switches (GPU=1 beside GPUS) never match."""
  out = {}
  for name in environ:
    if name in schema or not name.isupper(): continue
    cands = [k for k in schema if "_" in name or len(k) == len(name)]
    close = difflib.get_close_matches(name, cands, n=1, cutoff=0.85)
    if close: out[name] = close[0]
  return out


def _warn_misspelt(environ, schema: dict) -> None:
  for name, knob in misspelt_knobs(environ, schema).items():
    if name in _warned: continue
    _warned.add(name)
    print(f"warning: environment variable {name} is not a knob and is ignored; did you mean {knob}? "
          f"(knobs: benchmarks/common/config.py and benchmarks/*/spec.py)", file=sys.stderr)


def _check_consistency(path: Path, spec: BenchmarkSpec, k: dict, sources: dict[str, str]):
  """sources: the knobs that differ from the file's -> where they come from ("the environment", a command's flag)."""
  def fail(keys: tuple, why: str):
    # the message names the file; say which of the values the environment (or a flag) set, where one did
    raise ConfigError(f"{path}: {why}{_said_where(keys, sources)}")
  for bs in ("BS", "EVAL_BS"):
    if k[bs] % k["GPUS"]:
      fail((bs, "GPUS"), f"{bs}={k[bs]} is not divisible by GPUS={k['GPUS']}; the batch is sharded evenly.")
  warmup, total = spec.schedule
  if k[warmup] >= k[total]:
    fail((warmup, total), f"{warmup}={k[warmup]} is not below {total}={k[total]}; the learning rate warms up for {warmup} "
                          f"and then decays until {total}. Lower {warmup} or raise {total}.")
  ranked = [key for key in ("BEAM_BUDGET_S", "BEAM_COVERAGE") if key in k and (key == "BEAM_BUDGET_S" or k[key] < 1)]
  if ranked and max(k["TRAIN_BEAM"], k["EVAL_BEAM"]) >= 1 and k.get("IGNORE_JIT_FIRST_BEAM") != 1:
    # the ranked search bounds the JIT's capture. Our steps capture their first call (runtime.captured_jit); tinycorp's
    # run it uncaptured, where tinygrad's own BEAM would search every kernel outside any bound (lab/upstream.py runs them
    # at a config's knobs)
    fail((*ranked, "TRAIN_BEAM", "EVAL_BEAM", "IGNORE_JIT_FIRST_BEAM"),
         f"{' and '.join(ranked)} {'bounds' if len(ranked) == 1 else 'bound'} the BEAM search only with "
         f"IGNORE_JIT_FIRST_BEAM=1: without it an uncaptured first step (tinycorp's code runs one) searches every kernel "
         f"first. Set IGNORE_JIT_FIRST_BEAM: 1 (as the H200 configs do).")
  # NULL compiles every kernel and runs none: what lab/bert/step_cost.py counts a GPU config's step on
  if k.get("KERNELS") == "triton" and (k["DEV"] not in ("CUDA", "NULL") or not spec.triton):
    fail(("KERNELS", "DEV"), f"KERNELS=triton needs DEV=CUDA (its kernels are Triton's, compiled for NVIDIA GPUs); "
                             f"got DEV={k['DEV']} for {spec.name}. Set KERNELS: tinygrad.")
  for keys, why in spec.rules(k): fail(keys, why)


def _said_where(keys: tuple, sources: dict[str, str]) -> str:
  """' (BS, GPUS come from the environment.)', or with several sources ' (BEAM_BUDGET_S comes from the environment;
  TRAIN_BEAM from --beam 1.)'; '' when the file set them all."""
  by_source: dict[str, list[str]] = {}
  for key in keys:
    if key in sources: by_source.setdefault(sources[key], []).append(key)
  parts = []
  for source, ks in by_source.items():
    verb = "" if parts else "comes " if len(ks) == 1 else "come "   # once: "A comes from X; B from Y"
    parts.append(f"{', '.join(ks)} {verb}from {source}")
  return f" ({'; '.join(parts)}.)" if parts else ""


def _closed_model(spec: BenchmarkSpec) -> str:
  return f"{spec.model} ({', '.join(f'{k} {v}' for k, v in spec.closed_model.items())})"


def require_closed_model(cfg: PlatformConfig):
  """A closed run (one that writes a result log) trains the closed model. The config file is checked when loaded; this
  catches environment overrides (NUM_CLASSES=10, BERT_LAYERS=2), which stay allowed for measurements without a result
  (`python -m lab.bench`, --phase init)."""
  if cfg["division"] != "closed" or not (changed := closed_model_changes(cfg.spec, cfg.knobs)): return
  raise ClosedModelError(f"{cfg.path}: division closed requires {_closed_model(cfg.spec)}; the environment sets "
                    f"{', '.join(f'{k}={v}' for k, v in changed.items())}, which would make this closed log an open-"
                    f"division run. Unset {' '.join(changed)}; a smaller model can be timed without a result with "
                    f"`python -m lab.bench {cfg.benchmark} --against none`.")


def available_platforms(benchmark: str) -> list[str]:
  impl = ROOT / "benchmarks" / benchmark / "implementations"
  return sorted(p.name for p in impl.iterdir() if (p / "config.yaml").is_file()) if impl.is_dir() else []

