#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# BERT-large pretraining (Wikipedia) on tinybox_8xMI300X: BEAM search + BENCHMARK steps only (INIT without the clock), printing step time.
# Every knob comes from config.yaml beside this script (the entrypoint reads it); an environment variable of the same
# name overrides one knob for one run (BS=512 ./run_and_time.sh) and is printed at the top of the log.
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the entrypoint is a module of this tree
[ -n "${DATA_DIR:-}" ] || { echo "$(basename "${BASH_SOURCE[0]}"): DATA_DIR is not set: set it to the prepared Wikipedia shards, eval set and checkpoint (tinyperf prep wiki download|pretrain|eval|checkpoint)." >&2; exit 2; }
RESULTS_DIR="${RESULTS_DIR:-$PWD/results/tinybox_8xMI300X/bert}"
# a SEED_BITS-wide seed from the OS entropy pool (not $RANDOM: 15 bits collide across runs)
SEED="${SEED:-$(python3 -m tinyperf.benchmarks.registry seed bert tinybox_8xMI300X)}"
# INIT's kernel/BEAM cache; one file per run so runs never share a search
export CACHEDB="${CACHEDB:-$RESULTS_DIR/cache/tinygrad_$SEED.db}"

export BENCHMARK="${BENCHMARK:-10}" DEBUG="${DEBUG:-2}"
LOG="$RESULTS_DIR/dev_beam_$SEED.txt"
rc=0
python3 -m tinyperf.benchmarks.bert.train --platform tinybox_8xMI300X --phase init \
  --seed "$SEED" --data "$DATA_DIR" --work "$RESULTS_DIR" --log "$LOG" || rc=$?
echo "MLPerf log (exit $rc): $(printf %q "$LOG")"
exit $rc
