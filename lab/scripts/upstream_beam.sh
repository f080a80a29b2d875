#!/usr/bin/env bash
# tinycorp's examples/mlperf train step at the 1xH200 config's BEAM settings, its search carried across device commands
# (issue 20: fully searched steps against tinycorp's code with the same BEAM settings; ours is PERFORMANCE.md row 3).
# A full search takes longer than one device command (ResNet-50: 23 min on 16 cores seeded with our cache, row 18), so
# each call searches for at most TIME_LIMIT seconds, keeps what was searched (tinygrad's beam_search tables, a few
# hundred kB) in CACHE, and the next call goes on from there. Its whole search runs in step 1 (the JIT capture); steps
# 2 on replay it, and the script ends with their median and INIT read from LOG (`python -m lab.upstream`).
#   UPSTREAM=.upstream CACHE=.whl/upstream_resnet_beam.db TIME_LIMIT=540 lab/scripts/upstream_beam.sh resnet 256
# Each start first rebuilds step 0 unsearched (about 50 s at BEAM=0 for ResNet-50), so one long search beats many short ones:
# start it detached with TIME_LIMIT up to the lease's end (`setsid nohup env ... lab/scripts/upstream_beam.sh ... &`) and
# copy CACHE and LOG to $OUT in each polling call; CACHE follows the search within a second of each result (SAVE_CHECK_S
# sets how often it looks).
# UPSTREAM: a copy of ../shared/upstream-mlperf in a folder that .git/info/exclude ignores, carried to the GPU machine
# and never committed (MIT, for measurement only). CACHE: a missing file starts a new search; the grown cache is written
# back to CACHE (copy it to $OUT to keep it past the lease). tinycorp's log goes to LOG (default: CACHE's name with .log;
# run_upstream.sh's own default sits in /tmp and goes back with the machine). The BEAM knobs (TRAIN_BEAM, EVAL_BEAM,
# IGNORE_JIT_FIRST_BEAM, BEAM_*) are the PLATFORM config's (default 1xH200; its ResNet config has TRAIN_BEAM 0 beside the
# Triton kernels, so give TRAIN_BEAM=1 for tinycorp's search), the environment overriding them as in our INIT, the ranked
# search too: its kernels searched slowest first until BEAM_COVERAGE of the step or BEAM_BUDGET_S of search (the log
# says how far: "ranked BEAM: searched N/M kernels holding P% ..."); a large BEAM_BUDGET_S searches every kernel.
# BEAM_KERNELS_OUT=FILE writes the captured step's kernels and their BEAM=0 times there, once the capture has timed
# them: `python -m lab.beam_kernels FILE --cache CACHE` then searches them on a later call without the trainer,
# whose step 0 no longer stands before the search (docs/PERFORMANCE.md).
# Its output names what a record of the run needs ("upstream_beam: provenance {...}": date, GPU and driver, cores,
# versions, git sha) and ends with the figures read from LOG.
set -u -o pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in UPSTREAM CACHE LOG BEAM_KERNELS_OUT; do
  if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi
done
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
usage() { echo "upstream_beam.sh: $1. Usage: UPSTREAM=DIR CACHE=FILE lab/scripts/upstream_beam.sh resnet|bert [BS]" \
  "(this script's header and docs/PERFORMANCE.md say more)." >&2; exit 2; }
[ -n "${1:-}" ] || usage "no benchmark given"
bm=$1; bs=${2:-}
[ -n "${UPSTREAM:-}" ] || usage "UPSTREAM is not set: give it a copy of ../shared/upstream-mlperf"
[ -n "${CACHE:-}" ] || usage "CACHE is not set: give it the search-results file (a missing file starts a new search)"
[ -x "$UPSTREAM/run_upstream.sh" ] || { echo "upstream_beam.sh: $UPSTREAM/run_upstream.sh not found (or not executable)." \
  "Set UPSTREAM to a copy of ../shared/upstream-mlperf in a git-excluded folder here (docs/PERFORMANCE.md)." >&2
  exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# the config's BEAM knobs as environment variables, and the search results carried in
python3 - "$bm" "${PLATFORM:-1xH200}" "$CACHE" "$work/cache.db" >"$work/env" <<'PY' || exit 2
import os, sys
from pathlib import Path
from tinyperf.benchmarks.common.config import ConfigError
from tinyperf.benchmarks.registry import load_config
from tinyperf.benchmarks.common.runtime import TINYGRAD_BEAM_ENV
from tinyperf.tooling.common.errors import UserError
from lab.bench import require_saving_folder, seed_beam_cache
bm, platform, cache, db = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
try: env = load_config(bm, platform).env()
except ConfigError as e: sys.exit(f"upstream_beam.sh: {e}")
# the BEAM knobs as our INIT sets them: the two levels and what tinygrad reads itself (runtime.TINYGRAD_BEAM_ENV)
# and the ranked search's (BEAM_COVERAGE, BEAM_BUDGET_S), which the hook below applies to tinycorp's trainer
for k in ("TRAIN_BEAM", "EVAL_BEAM", "BEAM_COVERAGE", "BEAM_BUDGET_S", *TINYGRAD_BEAM_ENV):
  if k in env: print(f"{k}={env[k]}")
# refused before the search, not after it: the search is saved into CACHE at the end
try:
  require_saving_folder(f"CACHE={cache}", cache)
  if out := os.environ.get("BEAM_KERNELS_OUT"): require_saving_folder(f"BEAM_KERNELS_OUT={out}", Path(out))
  n = seed_beam_cache(f"CACHE={cache}", cache, db)
except UserError as e: sys.exit(f"upstream_beam.sh: {e}")
print(f"upstream_beam: {n} searched kernels carried in from {cache}", file=sys.stderr)
# what a record of this run names, from the run itself: date, GPU and driver, cores, versions, git sha
import json, time
from tinyperf.benchmarks.common.runtime import provenance
from tinyperf.tooling.launch.sysinfo_detect import NVIDIA_QUERY, Probe, parse_nvidia_csv   # as `tinyperf sysinfo` reads the GPUs
gpus = parse_nvidia_csv(Probe().run(["nvidia-smi", f"--query-gpu={NVIDIA_QUERY}", "--format=csv,noheader,nounits"]) or "")
gpu = {"gpu": gpus[0]["name"], "driver": gpus[0]["driver"]} if gpus else {"gpu": "none (nvidia-smi did not answer)"}
print("upstream_beam: provenance " + json.dumps({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **gpu,
      "cores": os.cpu_count(), **provenance()}), file=sys.stderr)
PY
echo "upstream_beam: $(tr '\n' ' ' <"$work/env")"
# our ranked search (benchmarks/common/beam.py) around tinycorp's JIT compile, as our INIT has it: Python imports
# sitecustomize from PYTHONPATH at its start; the hook acts in the trainer alone, not in BEAM's workers or our scripts
mkdir "$work/hook"
cat >"$work/hook/sitecustomize.py" <<'PY'
import os, sys
if sys.argv and sys.argv[0].endswith("model_train.py"):
  from tinyperf.benchmarks.common.beam import activate_from_environ
  activate_from_environ(os.environ)
PY
# its own process group, so that the time limit stops the trainer and its BEAM workers too
LOG=${LOG:-${CACHE%.db}.log}
env $(cat "$work/env") CACHEDB="$work/cache.db" LOG="$LOG" PARALLEL="${PARALLEL:-15}" STEPS="${STEPS:-20}" \
  PYTHONPATH="$work/hook:$PWD${PYTHONPATH:+:$PYTHONPATH}" \
  setsid "$UPSTREAM/run_upstream.sh" "$bm" $bs &
pid=$!
setsid bash -c 'sleep "$1"; echo "upstream_beam: time limit reached, stopping" >&2; kill -TERM -- "-$2" 2>/dev/null' \
  _ "${TIME_LIMIT:-540}" "$pid" &
killer=$!
# CACHE follows each search result (lab.bench.follow_beam_cache): a run left going across device calls keeps
# its search when the machine is taken back
python3 -c 'import sys; from pathlib import Path; from lab.bench import BEAM_SAVE_CHECK_S, follow_beam_cache
follow_beam_cache(Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3] or BEAM_SAVE_CHECK_S))' \
  "$work/cache.db" "$CACHE" "${SAVE_CHECK_S:-}" &
saver=$!
# stopped by hand (Ctrl-C, kill): the trainer's group goes too, and what it searched is saved below
trap 'kill -TERM -- "-$pid" 2>/dev/null' INT TERM
wait "$pid"; rc=$?
wait "$pid" 2>/dev/null   # a signal ends the first wait early: let the group finish dying before the last save
trap - INT TERM
kill -- "-$killer" 2>/dev/null; kill "$saver" 2>/dev/null; wait "$saver" 2>/dev/null
python3 -c 'import sys; from pathlib import Path; from lab.bench import save_beam_cache
save_beam_cache(Path(sys.argv[1]), Path(sys.argv[2]))' "$work/cache.db" "$CACHE"
if [ "$rc" = 143 ]; then echo "upstream_beam: run_upstream.sh stopped at the time limit or by a signal (exit 143); rerun to go on"
else echo "upstream_beam: run_upstream.sh exit $rc"; fi
# the figures from the log itself: run_upstream.sh's own summary is lost when the time limit stops it after the steps
python3 -m lab.upstream "$LOG"
exit "$rc"
