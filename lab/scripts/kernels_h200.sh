#!/usr/bin/env bash
# Every pending KERNELS=triton measurement on one H200, as one detached job in one device lease (issue 43).
#   CACHE=b.db lab/scripts/kernels_h200.sh start     checks its input, prints the plan with estimates and starts the job
#                                                    detached (it returns at once; the job runs on past the device call)
#   lab/scripts/kernels_h200.sh poll                 each step's status, the running step's last log line, the events
#   lab/scripts/kernels_h200.sh collect DIR          DIR/kernels.tgz (the whole JOB: logs, records, the grown BEAM cache)
#                                                    and DIR/summary.txt: two files, within what a device call returns
# The steps, in this order (STEPS=1,3 runs only those; the default is all):
#   1 layernorm|attention|gemm|lamb  the fused add+LayerNorm kernel vs tinygrad at BERT-large's 49152x1024
#                            (bench_layernorm.py); the fused attention at BS 96, each dropout draw: per element, per 4,
#                            stored bits (bench_attention.py --rng 1,4,bits); the nine GEMMs at the tiles the layer
#                            picks and the fused FFN (bench_gemm.py); clip + LAMB fused vs tinygrad's (bench_lamb.py)
#   2 loss_compare_bert|resnet  20 train steps a side at BS 32, KERNELS=tinygrad vs triton, and tinygrad from weights
#                            perturbed by 2^-11 for the noise floor (loss_compare.py --noise-floor; exit 1: out of
#                            tolerance)
#   3 step_profile_bert      every kernel of the KERNELS=triton TRAIN_BEAM=2 step at BS BERT_BS (default 96: 44.7 GiB
#                            counted on NULL, untried on an 80 GB H100) timed alone (step_profile.py), after a ranked
#                            search of BERT_BEAM_S seconds (default 240) seeded from CACHE=FILE if given
#   4 bench_bert_triton      that step again with the grown cache and no more search, beside PyTorch eager
#   5 bench_resnet_triton|tinygrad  ResNet-50's BS 256 BEAM=0 step with the conv kernels, and without, each beside
#                            PyTorch eager
#   6 bench_conv             every conv tile of conv.TILES at BS 256 (bench_conv.py --tiles all), when time is left
#   7 step_profile_resnet    every kernel of ResNet-50's BS 256 KERNELS=triton TRAIN_BEAM=1 step timed alone, after a
#                            ranked search of RESNET_BEAM_S seconds (default 240) seeded from RESNET_CACHE=FILE if given
#   8 bench_resnet_triton_beam  that step again with the grown cache and no more search, beside PyTorch eager
# The seeds are copied to $JOB/bert_beam.db and $JOB/resnet_beam.db (without one the search starts empty): step 3's
# (7's) search grows the copy and step 4 (8) finds it. Seeds: CACHE=b.db from `git show
# perf-data:perf/2026-12-04_bert_triton_beam2_154.db > b.db`, RESNET_CACHE=../shared/beam-seeds/resnet_1xH200_beam1_336.db
# (the tinygrad path's search, whose optimizer kernels the triton path shares), carried in .whl/.
# Each step writes $JOB/<name>.log and $JOB/<name>.jsonl (the JSON lines it printed, where it has no --out or --record)
# and runs only while BUDGET_S (default 1380 s from the start; give the lease's seconds left less 2 min to collect)
# holds its estimate, under `timeout` at its bound or the time left, whichever is less; a failure, timeout or skip is
# recorded ($JOB/steps.tsv, $JOB/events) and the next step runs. Estimates (minutes) from docs/perf: bench_bert_triton 5.6 (wall 334 s, INIT 330 s with the 154-kernel
# cache) + PyTorch; step_profile the same INIT + the kernels alone; ResNet BEAM=0 INIT 121 s + 20 steps of 1.1 s;
# loss_compare three captures of the 24-layer step (INIT 229 s at BEAM=0) + 20 steps of 2.1 s; the rest unmeasured.
# The sum (about 69 min) is over one lease: split the steps over leases with STEPS (the plan says what fits).
# DRY_RUN=1 start prints the plan and each step's command and runs nothing. JOB (default /tmp/kernelsjob) must be the
# same for start, poll and collect. Needs python3 with tinygrad 0.14.0, mlperf-logging, Triton and PyTorch (on a
# leased machine: PYTHONPATH=/tmp/site:$PWD with the carried wheels installed there, as for e2e_h200.sh), run from a
# checkout. One job per machine (a lock in TMPDIR) and a GPU no other process holds, as for e2e_h200.sh.
set -u -o pipefail
TYPED=""
for v in STEPS CACHE RESNET_CACHE BERT_BEAM_S RESNET_BEAM_S BERT_BS BUDGET_S JOB DRY_RUN; do [ -n "${!v+x}" ] && TYPED+="$v=$(printf %q "${!v}") "; done
TYPED+="lab/scripts/kernels_h200.sh ${1:-}"
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in JOB CACHE RESNET_CACHE; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
[ "${1:-}" = collect ] && [ -n "${2:-}" ] && [ "${2#/}" = "$2" ] && set -- collect "$PWD/$2"
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export JOB=${JOB:-/tmp/kernelsjob} BERT_DB=${JOB:-/tmp/kernelsjob}/bert_beam.db \
  RESNET_DB=${JOB:-/tmp/kernelsjob}/resnet_beam.db RESNET_BEAM_S=${RESNET_BEAM_S:-240} BERT_BEAM_S=${BERT_BEAM_S:-240} BERT_BS=${BERT_BS:-96} \
  PYTHONUNBUFFERED=1
die() { echo "kernels_h200.sh: $1" >&2; exit 2; }

# step number, name, estimate and bound in seconds; the name's function below is the step's command
PLAN="1 layernorm 120 300
1 attention 240 420
1 gemm 180 360
1 lamb 120 300
2 loss_compare_bert 640 900
2 loss_compare_resnet 450 720
3 step_profile_bert 480 660
4 bench_bert_triton 360 600
5 bench_resnet_triton 240 420
5 bench_resnet_tinygrad 180 360
6 bench_conv 420 600
7 step_profile_resnet 480 660
8 bench_resnet_triton_beam 240 420"
s_layernorm() {
  DEV=CUDA python3 lab/scripts/bench_layernorm.py
}
s_attention() {
  DEV=CUDA python3 lab/scripts/bench_attention.py --bs 96 --rng 1,4,bits
}
s_gemm() {
  DEV=CUDA python3 lab/scripts/bench_gemm.py --bs 96 --tiles rule
}
s_lamb() {
  DEV=CUDA python3 lab/scripts/bench_lamb.py
}
s_loss_compare_bert() {
  python3 lab/scripts/loss_compare.py bert --bs 32 --noise-floor --out "$JOB/loss_compare_bert.jsonl"
}
s_loss_compare_resnet() {
  python3 lab/scripts/loss_compare.py resnet --bs 32 --noise-floor --out "$JOB/loss_compare_resnet.jsonl"
}
s_step_profile_bert() {
  CACHEDB="$BERT_DB" KERNELS=triton TRAIN_BEAM=2 BEAM_BUDGET_S="$BERT_BEAM_S" python3 lab/scripts/step_profile.py bert --platform 1xH200 --bs "$BERT_BS" --out "$JOB/step_profile_bert.jsonl"
}
s_bench_bert_triton() {
  KERNELS=triton BEAM_BUDGET_S=0 python3 -m lab.bench bert --gpus 1 --bs "$BERT_BS" --steps 6 --beam 2 --beam-cache "$BERT_DB" --torch-modes eager --record "$JOB/bench_bert_triton.jsonl"
}
s_bench_resnet_triton() {
  KERNELS=triton python3 -m lab.bench resnet --gpus 1 --bs 256 --steps 20 --beam 0 --torch-modes eager --record "$JOB/bench_resnet_triton.jsonl"
}
s_bench_resnet_tinygrad() {
  KERNELS=tinygrad python3 -m lab.bench resnet --gpus 1 --bs 256 --steps 20 --beam 0 --torch-modes eager --record "$JOB/bench_resnet_tinygrad.jsonl"
}
s_bench_conv() {
  DEV=CUDA python3 lab/scripts/bench_conv.py --tiles all --bs 256
}
s_step_profile_resnet() {
  CACHEDB="$RESNET_DB" KERNELS=triton TRAIN_BEAM=1 BEAM_BUDGET_S="$RESNET_BEAM_S" python3 lab/scripts/step_profile.py resnet --platform 1xH200 --bs 256 --out "$JOB/step_profile_resnet.jsonl"
}
s_bench_resnet_triton_beam() {
  KERNELS=triton BEAM_BUDGET_S=0 python3 -m lab.bench resnet --gpus 1 --bs 256 --steps 20 --beam 1 --beam-cache "$RESNET_DB" --torch-modes eager --record "$JOB/bench_resnet_triton_beam.jsonl"
}
export -f s_layernorm s_attention s_gemm s_lamb s_loss_compare_bert s_loss_compare_resnet s_step_profile_bert s_bench_bert_triton \
  s_bench_resnet_triton s_bench_resnet_tinygrad s_bench_conv s_step_profile_resnet s_bench_resnet_triton_beam

event() { echo "$(date +%s) t=$(( $(date +%s) - ${T0:-$(date +%s)} ))s $*" >>"$JOB/events"; }
records() { [ -f "$JOB/$1.jsonl" ] && grep -c '^{' "$JOB/$1.jsonl" || echo 0; }

# each step's status: from steps.tsv once it ended, "running" for the one the events last started, else "pending"
status_lines() {
  local num name est bound line
  while read -r num name est bound; do
    line=$(awk -F'\t' -v n="$name" '$1 == n' "$JOB/steps.tsv" 2>/dev/null | tail -1)
    if [ -n "$line" ]; then
      printf '%s %-22s %s\n' "$num" "$name" "$(cut -f2- <<<"$line" | tr '\t' ' ')"
    elif grep -q "start $name " "$JOB/events" 2>/dev/null; then
      printf '%s %-22s running: %s\n' "$num" "$name" "$(tr '\r' '\n' <"$JOB/$name.log" 2>/dev/null | grep -v '^\s*$' | tail -1 | cut -c1-200)"
    elif grep -qw "$num" <<<"${SEL:-$(cat "$JOB/steps" 2>/dev/null)}"; then printf '%s %-22s pending\n' "$num" "$name"; fi
  done <<<"$PLAN"
}

case "${1:-}" in
  poll)
    [ -f "$JOB/events" ] || die "no job in JOB=$JOB (no events file): start one, or give the JOB it was started with."
    status_lines; tail -3 "$JOB/events"; exit 0 ;;
  collect)
    [ -n "${2:-}" ] || die "collect needs a folder: lab/scripts/kernels_h200.sh collect DIR"
    [ -f "$JOB/events" ] || die "no job in JOB=$JOB (no events file): give the JOB it was started with."
    mkdir -p "$2" || die "cannot make the folder $2; give another DIR."
    { cat "$JOB/command"; cat "$JOB/host.txt" 2>/dev/null; status_lines
      grep -q ' done$' "$JOB/events" && echo "job done" || echo "job still running"; } >"$JOB/summary.txt"
    cp "$JOB/summary.txt" "$2/summary.txt"
    tar czf "$2/kernels.tgz" -C "$JOB" . || die "could not pack $JOB into $2/kernels.tgz."
    exit 0 ;;
  start|_run) ;;
  *) die "give start, poll or collect DIR, not '${1:-}' (the header of lab/scripts/kernels_h200.sh is its manual)." ;;
esac

if [ "$1" = _run ]; then   # the detached job: start exported SEL, T0, DEADLINE and holds the lock on fd 9
  event "start steps $SEL"
  while read -r num name est bound; do
    grep -qw "$num" <<<"$SEL" || continue
    left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt "$est" ]; then
      printf '%s\tskipped: %s s left, estimate %s s\t0 s\t0 records\n' "$name" "$left" "$est" >>"$JOB/steps.tsv"
      event "$name skipped ($left s left, estimate $est s)"; continue
    fi
    limit=$(( left < bound ? left : bound ))
    rm -f "$JOB/$name.jsonl"   # the scripts append to their --out
    event "start $name (limit $limit s, estimate $est s)"
    t=$(date +%s)
    timeout -k 30 "$limit" bash -c "s_$name" >"$JOB/$name.log" 2>&1 </dev/null
    rc=$?
    case $rc in 0) st=ok ;; 124|137) st="timed out at $limit s" ;; *) st="exit $rc" ;; esac
    # scripts without --out print their JSON lines: those are the step's records
    [ -f "$JOB/$name.jsonl" ] || { grep '^{' "$JOB/$name.log" >"$JOB/$name.jsonl" || rm -f "$JOB/$name.jsonl"; }
    printf '%s\t%s\t%s s\t%s records\n' "$name" "$st" "$(( $(date +%s) - t ))" "$(records "$name")" >>"$JOB/steps.tsv"
    event "$name $st in $(( $(date +%s) - t )) s, $(records "$name") records"
  done <<<"$PLAN"
  event done
  exit 0
fi

# start: bad input is refused here, before anything runs
SEL=${STEPS:-1,2,3,4,5,6,7,8}
[[ "$SEL" =~ ^[1-8](,[1-8])*$ ]] || die "STEPS is a comma list of step numbers 1-8 (e.g. STEPS=1,3), not '$SEL'."
SEL=${SEL//,/ }
BUDGET_S=${BUDGET_S:-1380}
[[ "$BUDGET_S" =~ ^[0-9]+$ ]] || die "BUDGET_S is whole seconds (e.g. 1380), not '$BUDGET_S'."
# the seed caches: steps that read one, its variable, the job's copy, an example; unset, the search starts empty
SEEDS="34|CACHE|$BERT_DB|b.db (git show perf-data:perf/2026-12-04_bert_triton_beam2_154.db > b.db)
78|RESNET_CACHE|$RESNET_DB|../shared/beam-seeds/resnet_1xH200_beam1_336.db"
while IFS='|' read -r steps var copy example; do
  if grep -qw "[$steps]" <<<"$SEL" && [ -n "${!var:-}" ] && [ ! -f "${!var}" ]; then
    die "steps ${steps:0:1} and ${steps:1:1} seed BEAM from $var=FILE, and '${!var}' is no file: pass\
 $var=$example, or leave $var unset to search from an empty cache."
  fi
done <<<"$SEEDS"
for v in RESNET_BEAM_S BERT_BEAM_S; do [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v is whole seconds (e.g. 240), not '${!v}'."; done
[[ "$BERT_BS" =~ ^[1-9][0-9]*$ ]] || die "BERT_BS is the batch of steps 3 and 4 (default 96), not '$BERT_BS'."

T0=$(date +%s); DEADLINE=$((T0 + BUDGET_S))
minutes() { printf '%d.%d' $(($1 / 60)) $(($1 % 60 * 10 / 60)); }
plan() {
  local num name est bound total=0 n=0
  echo "kernels_h200.sh plan: JOB=$JOB, budget $BUDGET_S s, steps $SEL (minutes: estimate / bound)"
  while read -r num name est bound; do
    grep -qw "$num" <<<"$SEL" || continue
    total=$((total + est)); n=$((n + 1))
    printf '  %s %-22s %4s / %4s%s\n' "$num" "$name" "$(minutes "$est")" "$(minutes "$bound")" \
      "$([ "$total" -gt "$BUDGET_S" ] && echo "   over the budget by the estimates: skipped if its turn comes late")"
    [ "${DRY_RUN:-0}" = 1 ] && declare -f "s_$name" | sed '1,2d;$d;s/^ */      /'
  done <<<"$PLAN"
  printf '  %d steps, about %s min in all\n' "$n" "$(minutes "$total")"
}
if [ "${DRY_RUN:-0}" = 1 ]; then plan; exit 0; fi

LOCK=${TMPDIR:-/tmp}/kernels_h200.lock
exec 9>>"$LOCK"
flock -n 9 || die "another kernels_h200.sh job runs on this machine (JOB=$(cat "$LOCK"); it holds $LOCK). Its\
 steps need the GPU alone: poll it (JOB=$(cat "$LOCK") lab/scripts/kernels_h200.sh poll) and start when it is done."
if ! missing=$(python3 -c 'import importlib.util as u
print(" ".join(m for m in ("tinygrad", "mlperf_logging", "triton", "torch", "numpy") if u.find_spec(m) is None))') ||
  [ -n "$missing" ]; then
  die "python3 ($(command -v python3)) cannot import: ${missing:-its own check failed}. Install the carried wheels\
 (python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl), export PYTHONPATH=/tmp/site:\$PWD, and rerun."
fi
busy=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null | paste -sd';') ||
  busy=""   # no nvidia-smi, or no GPU it can read: nothing to share
[ -z "$busy" ] || die "the GPU is in use by another process ($busy): the steps' timings need it alone; stop that\
 process or wait for it, then rerun."

echo "$JOB" >"$LOCK"
mkdir -p "$JOB" || die "cannot make JOB=$JOB; give another JOB."
rm -f "$JOB/events" "$JOB/steps.tsv"
echo "$TYPED" >"$JOB/command"; echo "$SEL" >"$JOB/steps"
while IFS='|' read -r steps var copy example; do
  if grep -qw "[$steps]" <<<"$SEL" && [ -n "${!var:-}" ]; then
    cp "${!var}" "$copy" && chmod u+w "$copy" || die "cannot copy $var=${!var} to $copy."
  fi
done <<<"$SEEDS"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 --version
  echo "${TINYPERF_GIT_SHA:-$(git rev-parse HEAD 2>/dev/null || echo no git)}"; } >"$JOB/host.txt" 2>&1
plan | tee "$JOB/plan.txt"
export SEL T0 DEADLINE
setsid nohup bash "$SELF" _run >>"$JOB/runner.log" 2>&1 </dev/null &
echo "started (pid $!): poll with JOB=$JOB lab/scripts/kernels_h200.sh poll"
