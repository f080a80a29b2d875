"""Generate each implementation's run_and_time.sh, dev_run.sh, dev_beam.sh and README.md from its config.yaml.

The config is the one place a knob lives; these files are rendered from it and a test fails when the committed copies
differ from what this renders (`tinyperf render --check`). Scripts pass only --platform to the entrypoint, which reads
the same config, so a value cannot disagree between a script and a run."""
from __future__ import annotations
import argparse
from pathlib import Path

from benchmarks.common.config import BENCHMARKS, SCHEMA, ROOT, available_platforms, load_config, PlatformConfig

HEADER = "# Generated from config.yaml by `tinyperf render`: edit the config, not this file."
# where the repository root is, seen from a script: benchmarks/<bm>/implementations/<platform>/ in the repository; "."
# for the copies `tinyperf package` puts at the top of a packaged implementation (which is itself a repository root)
REPO_ROOT = "../../../.."

TITLES = {"resnet": "ResNet-50 v1.5 (ImageNet)", "bert": "BERT-large pretraining (Wikipedia)"}
DATA = {
  "resnet": ("DATA_DIR", "the prepared ImageNet (`tinyperf prep imagenet`, or `tinyperf prep synthetic-imagenet` for smoke runs)"),
  "bert": ("DATA_DIR", "the prepared Wikipedia shards, eval set and checkpoint (`tinyperf prep wiki ...`, `tinyperf prep bert-checkpoint`)"),
}


def _knob_comment(cfg: PlatformConfig) -> str:
  width = max(len(k) for k in cfg.knobs)
  return "\n".join(f"#   {k.ljust(width)} = {v}" for k, v in cfg.knobs.items())


def _entry(cfg: PlatformConfig, phase: str, extra: str = "") -> str:
  return (f'python3 -m benchmarks.{cfg.benchmark}.train --platform {cfg.platform} --phase {phase} \\\n'
          f'  --seed "$SEED" --data "$DATA_DIR" --results "$RESULTS_DIR"{extra}')


def _prelude(cfg: PlatformConfig, what: str, root: str = REPO_ROOT) -> str:
  var, desc = DATA[cfg.benchmark]
  return f"""#!/usr/bin/env bash
{HEADER}
# {TITLES[cfg.benchmark]} on {cfg.platform}: {what}
# Knobs from config.yaml (any one can be overridden by an environment variable of the same name):
{_knob_comment(cfg)}
set -euo pipefail
cd "$(dirname "${{BASH_SOURCE[0]}}")/{root}"   # repository root: the entrypoint is a module of this tree
: "${{{var}:?set {var} to {desc}}}"
RESULTS_DIR="${{RESULTS_DIR:-results/{cfg['system']}/{cfg.benchmark}}}"
# 31-bit seed from the OS entropy pool (not $RANDOM: 15 bits collide across runs)
SEED="${{SEED:-$(python3 -c 'import os; print(int.from_bytes(os.urandom(4), "little") >> 1)')}}"
# INIT fills this kernel/BEAM cache and RUN reuses it; one file per run so runs never share a search
export CACHEDB="${{CACHEDB:-$RESULTS_DIR/cache/tinygrad_$SEED.db}}"
"""


def render_run_and_time(cfg: PlatformConfig, root: str = REPO_ROOT) -> str:
  return _prelude(cfg, "one timed run, INIT then RUN, appending to one result log.", root) + f"""
{_entry(cfg, "init")}
{_entry(cfg, "run")}
"""


def render_dev_run(cfg: PlatformConfig, root: str = REPO_ROOT) -> str:
  return _prelude(cfg, "RUN phase only, for development (no INIT, so BEAM searches inside the run).", root) + f"""
{_entry(cfg, "run", ' --log "$RESULTS_DIR/dev_$SEED.txt"')}
"""


def render_dev_beam(cfg: PlatformConfig, root: str = REPO_ROOT) -> str:
  return _prelude(cfg, "BEAM search + BENCHMARK steps only (INIT without the clock), printing step time.", root) + f"""
export BENCHMARK="${{BENCHMARK:-10}}" DEBUG="${{DEBUG:-2}}"
{_entry(cfg, "init", ' --log "$RESULTS_DIR/dev_beam_$SEED.txt"')}
"""


def render_readme(cfg: PlatformConfig) -> str:
  b, p = cfg.benchmark, cfg.platform
  var, desc = DATA[b]
  schema = SCHEMA[b]
  knob_rows = "\n".join(f"| `{k}` | {v} | {schema[k].doc} |" for k, v in cfg.knobs.items())
  prereq = "\n".join(f"- {x}" for x in cfg.get("host_prerequisites", []) or []) or "- none beyond a working driver"
  status = ("These settings ran on this hardware." if cfg["tested"] else
            "**Untested here:** these settings have not been run on this hardware by this repository.")
  if b == "resnet":
    problem = ("Image classification: ResNet-50 v1.5 trained from scratch on ImageNet-1k (ILSVRC2012) to 75.9 % top-1.")
    dataset = ("ILSVRC2012: 1,281,167 training and 50,000 validation JPEGs, class-per-directory layout with a manifest "
               "(`tinyperf prep imagenet`). Train: random-resized crop (scale 0.08-1, ratio 3/4-4/3), bilinear, "
               "horizontal flip; per-epoch shuffle from the seed. Eval: resize the short side to 256, center-crop 224. "
               "Per-channel mean subtracted on device (no std division, as the reference).")
    model = ("ResNet-50 v1.5 (stride on the 3x3 conv), bias-free convs, truncated He-normal conv init, N(0, 0.01) FC "
             "init, per-device BatchNorm statistics unless SYNCBN=1; fp16 compute with fp32 master weights and static "
             "loss scale under DEFAULT_FLOAT=HALF. LARS on conv/FC weights, SGD on BN parameters and biases; "
             "polynomial decay (power 2) with linear warm-up; label smoothing 0.1 with padded samples masked out.")
    quality = (f"Top-1 accuracy >= {cfg['TARGET']} on the full validation set; evals after epochs where "
               f"(epoch - {cfg['EVAL_START_EPOCH']}) % {cfg['EVAL_FREQ']} == 0 and after every epoch from "
               f"{cfg['EVAL_EVERY_EPOCH_FROM']}.")
  else:
    problem = "Language modeling: BERT-large pretraining on Wikipedia from the MLCommons phase-1 checkpoint to 72.0 % masked-LM accuracy."
    dataset = ("The MLCommons Wikipedia dump (results_text.tar.gz, 500 parts) tokenized with the uncased WordPiece vocab "
               "into sequences of MAX_SEQ_LEN tokens with MAX_PREDICTIONS masked positions (`tinyperf prep wiki`); "
               "10,000 evenly picked eval samples.")
    model = ("BERT-large (24 layers, hidden 1024, 16 heads), MLM head tied to the word embeddings, NSP head; LAMB with "
             "weight decay excluding LayerNorm and biases, polynomial decay with warm-up, gradient clipping at global "
             "norm CLIP_NORM, fp16 with static loss scale.")
    quality = (f"Masked-LM accuracy >= {cfg['TARGET']} on {cfg['EVAL_SAMPLES']} eval samples, evaluated every "
               "EVAL_STEP_FREQ steps (0 = the MLPerf formula).")
  return f"""<!-- {HEADER[2:]} -->
# {TITLES[b]} — {p}

{status} Division `{cfg['division']}`, checked against mlperf-logging ruleset `{cfg['ruleset']}`,
system description `systems/{cfg['system']}.json`, device backend `DEV={cfg['DEV']}` on {cfg['GPUS']} device(s).
{cfg.get('notes') or ''}

## 1. Problem
{problem}

## 2. Directions
### Steps to configure machine
Host prerequisites (the container cannot do these; nothing here runs `sudo` for you):
{prereq}

Build the image: `tinyperf build --vendor {cfg['vendor']}` (or run on the host with Python >= 3.11 and
`pip install -r requirements.lock && pip install --no-deps .`).

### Steps to download and verify data
{desc}; then `tinyperf prep ... --verify` re-checks it.

### Steps to run and time
`{var}=/path/to/data ./run_and_time.sh` runs INIT (JIT and BEAM search on fake data, under the init allowance) then RUN
(the timed training) and appends both to one MLPerf log in `$RESULTS_DIR`. `tinyperf run {b} --platform {p} --nexp N`
does this N times with fresh seeds, in containers, and checks each log. `dev_run.sh` runs RUN alone; `dev_beam.sh`
runs the search and BENCHMARK steps only.

## 3. Dataset/Environment
{dataset}

## 4. Model
{model}

## 5. Quality
{quality}

## Knobs (from `config.yaml`)
| knob | value | meaning |
|---|---|---|
{knob_rows}
"""


RENDERERS = {"run_and_time.sh": render_run_and_time, "dev_run.sh": render_dev_run,
             "dev_beam.sh": render_dev_beam, "README.md": render_readme}


def rendered_files() -> dict[Path, str]:
  """Every generated file and its text: implementation scripts/READMEs, compose.yaml, the Dockerfiles."""
  from tooling.compose import COMPOSE, render_compose
  from tooling.images import rendered_dockerfiles
  out = {COMPOSE: render_compose(), **rendered_dockerfiles()}
  for b in BENCHMARKS:
    for p in available_platforms(b):
      cfg = load_config(b, p, environ={})  # the committed files reflect the config alone, never this shell's env
      for name, fn in RENDERERS.items(): out[cfg.path.parent / name] = fn(cfg)
  return out


def stale_files() -> list[Path]:
  return [p for p, text in rendered_files().items() if not p.is_file() or p.read_text() != text]


def add_arguments(p: argparse.ArgumentParser):
  p.add_argument("--check", action="store_true", help="only report files that differ from their config (exit 1 if any)")


def main(args) -> int:
  if args.check:
    stale = stale_files()
    for p in stale: print(f"stale: {p.relative_to(ROOT)} (run `tinyperf render`)")
    return 1 if stale else 0
  for path, text in rendered_files().items():
    if path.is_file() and path.read_text() == text: continue
    path.write_text(text)
    if path.suffix == ".sh": path.chmod(0o755)
    print(f"wrote {path.relative_to(ROOT)}")
  return 0
