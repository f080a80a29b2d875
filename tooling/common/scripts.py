"""Generate each implementation's run_and_time.sh, dev_run.sh, dev_beam.sh, setup.sh, init_datasets.sh and README.md from
its config.yaml. setup.sh and init_datasets.sh are the per-implementation scripts MLCommons' submission rules ask for
beside README.md and run_and_time.sh (one-time machine setup; download and verify the data).

The config is the one place a knob lives; these files are rendered from it and a test fails when the committed copies
differ from what this renders (`tinyperf render --check`). Scripts pass only --platform to the entrypoint, which reads
the same config, so a value cannot disagree between a script and a run."""
from __future__ import annotations

from tinyperf.benchmarks.common.config import PlatformConfig
from tinyperf.benchmarks.common.rules import required_runs
from tinyperf.tooling.common.dataset import stand_in_data

HEADER = "# Generated from config.yaml by `tinyperf render`: edit the config, not this file."
# where the repository root is, seen from a script: benchmarks/<bm>/implementations/<platform>/ in the repository; "."
# for the copies `tinyperf package` puts at the top of a packaged implementation (which is itself a repository root)
REPO_ROOT = "../../../.."


def _require(var: str, desc: str, indent: str = "") -> str:
  """The script's refusal of an unset VAR: one line naming the script, the variable and what to set it to, exit 2
  (bash's own ${VAR:?} says "line N:" and exits 1)."""
  desc = desc.replace("`", "")   # bash would run backticks inside the double-quoted message
  return (f'{indent}[ -n "${{{var}:-}}" ] || {{ echo "$(basename "${{BASH_SOURCE[0]}}"): {var} is not set: set it to '
          f'{desc}." >&2; exit 2; }}\n')


def _prerequisites(cfg: PlatformConfig) -> list[str]:
  return list(cfg.get("host_prerequisites", []) or [])


def _entry(cfg: PlatformConfig, phase: str, extra: str = "") -> str:
  return (f'python3 -m tinyperf.benchmarks.{cfg.benchmark}.train --platform {cfg.platform} --phase {phase} \\\n'
          f'  --seed "$SEED" --data "$DATA_DIR" --work "$RESULTS_DIR"{extra}')


def _prelude(cfg: PlatformConfig, what: str, root: str = REPO_ROOT) -> str:
  var, desc = "DATA_DIR", cfg.spec.data_dir_doc
  return f"""#!/usr/bin/env bash
{HEADER}
# {cfg.spec.title} on {cfg.platform}: {what}
# Every knob comes from config.yaml beside this script (the entrypoint reads it); an environment variable of the same
# name overrides one knob for one run (BS=512 ./run_and_time.sh) and is printed at the top of the log.
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${{!v:-}}" ] && [ "${{!v#/}}" = "${{!v}}" ]; then printf -v "$v" '%s' "$PWD/${{!v}}"; fi; done
cd "$(dirname "${{BASH_SOURCE[0]}}")/{root}"   # repository root: the entrypoint is a module of this tree
{_require(var, desc)}RESULTS_DIR="${{RESULTS_DIR:-$PWD/results/{cfg['system']}/{cfg.benchmark}}}"
# a SEED_BITS-wide seed from the OS entropy pool (not $RANDOM: 15 bits collide across runs)
SEED="${{SEED:-$(python3 -m tinyperf.benchmarks.registry seed {cfg.benchmark} {cfg.platform})}}"
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
# {cfg.spec.title} on {cfg.platform}: {what}
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${{!v:-}}" ] && [ "${{!v#/}}" = "${{!v}}" ]; then printf -v "$v" '%s' "$PWD/${{!v}}"; fi; done
cd "$(dirname "${{BASH_SOURCE[0]}}")/{root}"   # repository root: the tools are modules of this tree
"""


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
{cfg.spec.stand_in_setup if stand_in_data(cfg) else ''}if [ "${{BUILD_IMAGE:-1}}" = 1 ]; then
  "$VENV/bin/python" -m tinyperf.tooling.cli build --platform {cfg.platform}
fi
here="$(printf %q "$(dirname "${{BASH_SOURCE[0]}}")")"   # as the caller named it: the commands work from where they are
echo "setup done: source $(cd "$VENV" && pwd)/bin/activate; then DATA_DIR=... $here/init_datasets.sh and {_org_arg(cfg)}DATA_DIR=... $here/run_and_time.sh"
"""


def render_init_datasets(cfg: PlatformConfig, root: str = REPO_ROOT) -> str:
  var = "DATA_DIR"
  return _script_head(cfg, "download (or make) the data set into DATA_DIR and verify it; a rerun resumes.",
                      root) + f"""{_require(var, "the directory to prepare the data in")}{cfg.spec.init_steps(cfg, stand_in_data(cfg), _require)}# the next command as the caller can type it: this directory as they named it (the cd above leaves BASH_SOURCE)
echo "data ready and verified: {_org_arg(cfg)}{var}=$(printf %q "${var}") $(printf %q "$(dirname "${{BASH_SOURCE[0]}}")")/run_and_time.sh"
"""


def render_readme(cfg: PlatformConfig) -> str:
  b, p = cfg.benchmark, cfg.platform
  var = "DATA_DIR"
  schema = cfg.schema
  knob_rows = "\n".join(f"| `{k}` | {v} | {schema[k].doc} |" for k, v in cfg.knobs.items())
  prereq = "\n".join(f"- {x}" for x in _prerequisites(cfg)) or "- none beyond a working driver"
  status = ("These settings ran on this hardware." if cfg["tested"] else
            "**Untested here:** these settings have not been run on this hardware by this repository.")
  text = cfg.spec.readme(cfg, stand_in_data(cfg))
  org, org_note = _org_arg(cfg), " (default: smoke)" if stand_in_data(cfg) else ""
  stand_in = ("\nThis platform trains a toy model on stand-in data made by `init_datasets.sh`; sections 3 to 5 describe "
              "the benchmark, and the knobs below what this platform changes." if stand_in_data(cfg) else "")

  def sections(d: dict) -> str: return "\n\n".join(f"### {k}\n{v}" for k, v in d.items())

  return f"""<!-- {HEADER[2:]} -->
# {cfg.spec.title} — {p}

{status} Division `{cfg['division']}`, checked against mlperf-logging ruleset `{cfg['ruleset']}`,
system description `systems/{cfg['system']}.json`, device backend `DEV={cfg['DEV']}` on {cfg['GPUS']} device(s).
{cfg.get('notes') or ''}

## 1. Problem
{text['problem']}{stand_in}

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
It prepares {text['data']} It ends by verifying the whole set; a rerun resumes where it stopped.

### Steps to run and time
```
{org}{var}=/path/to/data ./run_and_time.sh   # one run
tinyperf run {b} --platform {p} --data /path/to/data --results ../../../../out --org myorg   # the runs of a submission
tinyperf run {b} --platform {p} --data /path/to/data --results ../../../../out --org myorg --runtime host   # on this host
```
`run_and_time.sh` runs INIT (JIT and BEAM search on fake data, under the init allowance) then RUN (the timed training)
and appends both to one MLPerf log in `$RESULTS_DIR` (default: the repository's `results/{cfg['system']}/{b}`); its last
line names the log and the `tinyperf check` command for it. `ORG` is the submitter the log records{org_note}.
`tinyperf run` does this {required_runs(b)} times with fresh seeds, each run in the platform's image (with
`--runtime host`: on this host, in the .venv of `BUILD_IMAGE=0 ./setup.sh`), checks each log, and records the machine in
the repository's `out/systems/{cfg['system']}.json`.
`dev_run.sh` runs RUN alone; `dev_beam.sh` runs the search and BENCHMARK steps only.

## 3. Dataset/Environment
{sections(text['dataset'])}

## 4. Model
{sections(text['model'])}

## 5. Quality
{sections(text['quality'])}

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

