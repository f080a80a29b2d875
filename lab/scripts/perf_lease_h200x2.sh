#!/usr/bin/env bash
# One lease of a 2-GPU H200 machine used whole (figures: docs/PERFORMANCE.md). A lease is 30 minutes and BERT-large's
# first tinygrad steps take minutes of host-side graph building, so jobs on different GPUs overlap; only timed steps
# must have their GPU to themselves, and every log line carries a wall-clock stamp so that this can be checked.
#   t=0      GPU1: ResNet-50 BEAM=1 search (DEBUG=2: `python -m lab.beamlog` reads what BEAM bought from the log)
#   t=0      GPU0: BERT-large, 1 GPU, BEAM=0, then PyTorch eager on the same GPU (one `python3 -m lab.bench` command)
#   then     both: BERT-large on 2 GPUs, BEAM=0, once the 1-GPU job is done; the search (RESNET_FIRST_S) has stopped
#            before its timed steps, which come after about 5 minutes of first steps
#   after    both: what the BEAM_* knobs buy, side by side until the deadline: the ResNet search goes on from the same
#            saved cache twice, GPU1 with the 1xH200 config's narrowed knobs, GPU0 with tinygrad 0.14's defaults
#            (BEAM_UOPS_MAX 3000, BEAM_UPCAST_MAX 256, BEAM_MIN_PROGRESS 0.01 us), each with half the cores, so both
#            meet the same kernels in the same order: `python -m lab.beamlog` on the two logs compares search
#            time and kernel speed per kernel
# BEAM_SEED_DB=FILE starts the ResNet search from an earlier lease's results (the complete one:
# 2026-12-01_resnet_beam_343.db, 343 kernels), BERT_SEED_DB=FILE BERT's (2026-11-30_lease3_bert_beam.db); both are on
# the perf-data branch (docs/perf/README.md).
# The 2-GPU job waits for the 1-GPU one: timed steps that overlap other work come out slow.
# PLAN=beam replaces all of this with two searches side by side, PLAN=atomics with the USE_ATOMICS measurements, and
# PLAN=knobs with one side-by-side search pair per BEAM_* knob (below).
# Start it detached (`setsid nohup lab/scripts/perf_lease_h200x2.sh >/dev/null 2>&1 &`): a device command may run 10 min.
# Everything lands in $JOB (default /tmp/perfjob); `lab/scripts/perf_lease_h200x2.sh poll` prints where it stands.
set -u -o pipefail
JOB=${JOB:-/tmp/perfjob}
# no argument runs the lease; `poll` reads it: anything else is a typo, not a lease to start on this machine
case "${1:-}" in
  "") ;;
  poll)
    for f in "$JOB"/*.log; do [ -f "$f" ] && printf '%s: %s\n' "$(basename "$f")" "$(tr '\r' '\n' <"$f" | grep -v '^\s*$' | tail -1 | cut -c1-180)"; done
    tail -5 "$JOB/events" 2>/dev/null; exit 0;;
  *) echo "perf_lease_h200x2.sh: unknown argument '$1'. Usage: lab/scripts/perf_lease_h200x2.sh [poll] (PLAN=beam|atomics|knobs," \
       "JOB, BUDGET_S and the seeds in the environment, as its header says)." >&2; exit 2;;
esac
mkdir -p "$JOB"
T0=$(date +%s); DEADLINE=$((T0 + ${BUDGET_S:-1440}))
event() { echo "$(date +%s) t=$(( $(date +%s) - T0 ))s $*" >>"$JOB/events"; }
stamp() { python3 -u -c 'import sys, time
for line in sys.stdin: sys.stdout.write(f"{time.time():.1f} {line}"); sys.stdout.flush()' >"$1"; }
tinyperf() { python3 -m tinyperf.tooling.cli "$@"; }
resnet_search() {  # GPU, seconds, log, [cache, workers]
  CUDA_VISIBLE_DEVICES=$1 PARALLEL=${5:-${PARALLEL_SEARCH:-24}} DEBUG=2 python3 -m lab.bench resnet --gpus 1 --beam 1 --steps 10 \
    --against none --beam-cache "${4:-$JOB/resnet_beam.db}" --time-limit "$2" --record "$JOB/resnet.jsonl" 2>&1 | stamp "$3"
  event "resnet search ($3) exit $?"
}

event "start"
[ -n "${BEAM_SEED_DB:-}" ] && [ ! -f "$JOB/resnet_beam.db" ] && cp "$BEAM_SEED_DB" "$JOB/resnet_beam.db"
bert_search() {  # GPU, seconds: BERT-large's kernels at INIT depth (2 layers), BEAM=1, from/into $JOB/bert_beam.db
  CUDA_VISIBLE_DEVICES=$1 BERT_LAYERS=2 PARALLEL=15 DEBUG=2 python3 -m lab.bench bert --gpus 1 --bs 32 --steps 4 --beam 1 \
    --against none --beam-cache "$JOB/bert_beam.db" --time-limit "$2" --record "$JOB/bert.jsonl" 2>&1 \
    | stamp "$JOB/bert_2layers_beam1_$(date +%s).log"
  event "bert 2-layer search exit $?"
}
knob_pair() {  # KNOB=VALUE, seconds: the ResNet search goes on from the same saved cache twice, side by side, 15 workers
  # each: GPU1 with the config's knobs, GPU0 with this one knob changed, so both meet the same kernels in the same order
  # (`python -m lab.beamlog --pair` compares them kernel by kernel). The config side's cache is carried on.
  local name=${1%%=*}
  cp "$JOB/resnet_beam.db" "$JOB/resnet_beam_config_vs_$name.db"; cp "$JOB/resnet_beam.db" "$JOB/resnet_beam_$name.db"
  resnet_search 1 "$2" "$JOB/resnet_beam_config_vs_$name.log" "$JOB/resnet_beam_config_vs_$name.db" 15 &
  ( export "$1"; resnet_search 0 "$2" "$JOB/resnet_beam_$name.log" "$JOB/resnet_beam_$name.db" 15 )
  wait
  cp "$JOB/resnet_beam_config_vs_$name.db" "$JOB/resnet_beam.db"
}
if [ "${PLAN:-measure}" = knobs ]; then
  # PLAN=knobs: what each BEAM_* knob buys on its own, one side-by-side pair per KNOBS entry, the lease split evenly.
  # Default: the two the tinybox scripts set that were never varied (lease 2 varied UOPS/UPCAST/MIN_PROGRESS together).
  set -- ${KNOBS:-BEAM_PADTO=1 BEAM_LOCAL_MAX=256}
  EACH=$(( (DEADLINE - $(date +%s) - 20) / $# ))
  for setting in "$@"; do knob_pair "$setting" "$EACH"; event "knob pair $setting done"; done
  event done
  exit 0
fi
if [ "${PLAN:-measure}" = atomics ]; then
  # PLAN=atomics: the word-embedding gradient as an atomic scatter-add (USE_ATOMICS=1) against the one-hot reduction.
  #   t=0    both: the unit test of the atomic gradient on CUDA, one and two GPUs (against numpy and the one-hot form)
  #   then   GPU0: 2 layers, 1 GPU, one-hot then atomics in one command (DEBUG=2: per-kernel times), then BERT's BEAM
  #               search until GPU1 is done; GPU1: 24 layers, 1 GPU, atomics, then PyTorch eager on the same GPU
  #   then   both: 24 layers, 2 GPUs, atomics; 2 layers, 2 GPUs, one-hot then atomics (DEBUG=2)
  #   after  both: BEAM searches until the deadline (BERT on GPU0, ResNet on GPU1)
  [ -n "${BERT_SEED_DB:-}" ] && [ ! -f "$JOB/bert_beam.db" ] && cp "$BERT_SEED_DB" "$JOB/bert_beam.db"
  DEV=CUDA USE_ATOMICS=1 python3 -m pytest -q -p no:cacheprovider tests/unit/test_bert_model.py -k atomic 2>&1 \
    | stamp "$JOB/atomics_test.log"
  event "atomics unit test on CUDA exit $?"
  ( USE_ATOMICS=1 CUDA_VISIBLE_DEVICES=1 python3 -m lab.bench bert --gpus 1 --bs 32 --steps 6 --beam 0 --torch-modes eager \
      --time-limit 600 --record "$JOB/bert.jsonl" 2>&1 | stamp "$JOB/bert_1gpu_atomics.log"
    event "bert 1 GPU atomics exit $?" ) &
  BERT1=$!
  CUDA_VISIBLE_DEVICES=0 BERT_LAYERS=2 DEBUG=2 python3 -m lab.bench bert --gpus 1 --bs 32 --steps 6 --beam 0 --against none \
    --vary USE_ATOMICS=1 --time-limit 400 --record "$JOB/bert.jsonl" 2>&1 | stamp "$JOB/bert_2layers_1gpu_vary.log"
  event "bert 2 layers 1 GPU vary exit $?"
  LEFT=$(( T0 + ${GPU1_DONE_S:-460} - $(date +%s) ))
  [ "$LEFT" -gt 60 ] && bert_search 0 "$LEFT"
  wait "$BERT1"
  event "bert 2 GPUs atomics start"
  USE_ATOMICS=1 python3 -m lab.bench bert --gpus 2 --bs 32 --steps 6 --beam 0 --against none --time-limit 600 \
    --record "$JOB/bert.jsonl" 2>&1 | stamp "$JOB/bert_2gpu_atomics.log"
  event "bert 2 GPUs atomics exit $?"
  DEBUG=2 BERT_LAYERS=2 python3 -m lab.bench bert --gpus 2 --bs 32 --steps 6 --beam 0 --against none --vary USE_ATOMICS=1 \
    --time-limit 400 --record "$JOB/bert.jsonl" 2>&1 | stamp "$JOB/bert_2layers_2gpu_vary.log"
  event "bert 2 layers 2 GPUs vary exit $?"
  LEFT=$(( DEADLINE - $(date +%s) - 20 ))
  if [ "$LEFT" -gt 60 ]; then
    resnet_search 1 "$LEFT" "$JOB/resnet_beam_more.log" "$JOB/resnet_beam.db" 15 &
    bert_search 0 "$LEFT"
    wait
  fi
  event done
  exit 0
fi
if [ "${PLAN:-measure}" = beam ]; then
  # PLAN=beam: both GPUs search until the deadline, 15 workers each. GPU0: BERT-large's kernels at INIT depth (2
  # layers: every encoder layer compiles to the same kernels), whose timed steps, if the search ends in time, give
  # the BEAM=1 2-layer step against BEAM=0's 320 ms (docs/PERFORMANCE.md); BERT_SEED_DB=FILE carries an earlier
  # search in. GPU1: the ResNet-50 search goes on from BEAM_SEED_DB.
  [ -n "${BERT_SEED_DB:-}" ] && [ ! -f "$JOB/bert_beam.db" ] && cp "$BERT_SEED_DB" "$JOB/bert_beam.db"
  LEFT=$(( DEADLINE - $(date +%s) - 20 ))
  resnet_search 1 "$LEFT" "$JOB/resnet_beam_more.log" "$JOB/resnet_beam.db" 15 &
  SEARCH=$!
  bert_search 0 "$LEFT"
  wait "$SEARCH"
  event done
  exit 0
fi
resnet_search 1 "${RESNET_FIRST_S:-480}" "$JOB/resnet_beam1.log" &
SEARCH=$!
( CUDA_VISIBLE_DEVICES=0 python3 -m lab.bench bert --gpus 1 --bs 32 --steps 6 --beam 0 --torch-modes eager --time-limit 780 \
    --record "$JOB/bert.jsonl" 2>&1 | stamp "$JOB/bert_1gpu.log"; event "bert 1 GPU exit $?" ) &
BERT1=$!
wait "$BERT1"
event "bert 2 GPUs start"
python3 -m lab.bench bert --gpus 2 --bs 32 --steps 6 --beam 0 --against none --time-limit $(( DEADLINE - $(date +%s) - 60 )) \
  --record "$JOB/bert.jsonl" 2>&1 | stamp "$JOB/bert_2gpu.log"
event "bert 2 GPUs exit $?"
wait "$SEARCH"
LEFT=$(( DEADLINE - $(date +%s) - 20 ))
if [ "$LEFT" -gt 150 ]; then
  cp "$JOB/resnet_beam.db" "$JOB/resnet_beam_tinygrad_defaults.db"
  resnet_search 1 "$LEFT" "$JOB/resnet_beam_config_knobs.log" "$JOB/resnet_beam.db" 15 &
  SEARCH=$!
  BEAM_UOPS_MAX=3000 BEAM_UPCAST_MAX=256 BEAM_LOCAL_MAX=1024 BEAM_MIN_PROGRESS=0.01 \
    resnet_search 0 "$LEFT" "$JOB/resnet_beam_tinygrad_defaults.log" "$JOB/resnet_beam_tinygrad_defaults.db" 15
  wait "$SEARCH"
fi
event done
