#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# ResNet-50 v1.5 (ImageNet) on tinybox_green: one timed run: INIT then RUN in one process (RUN replays the steps INIT compiled), one result log.
# Every knob comes from config.yaml beside this script (the entrypoint reads it); an environment variable of the same
# name overrides one knob for one run (BS=512 ./run_and_time.sh) and is printed at the top of the log.
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the entrypoint is a module of this tree
[ -n "${DATA_DIR:-}" ] || { echo "$(basename "${BASH_SOURCE[0]}"): DATA_DIR is not set: set it to the prepared ImageNet (tinyperf prep imagenet, or tinyperf prep synthetic-imagenet for smoke runs)." >&2; exit 2; }
RESULTS_DIR="${RESULTS_DIR:-$PWD/results/tinybox_green/resnet}"
# a SEED_BITS-wide seed from the OS entropy pool (not $RANDOM: 15 bits collide across runs)
SEED="${SEED:-$(python3 -m tinyperf.benchmarks.registry seed resnet tinybox_green)}"
# INIT's kernel/BEAM cache; one file per run so runs never share a search
export CACHEDB="${CACHEDB:-$RESULTS_DIR/cache/tinygrad_$SEED.db}"
ORG="${ORG:-${SUBMISSION_ORG:-}}"
[ -n "$ORG" ] || { echo "$(basename "${BASH_SOURCE[0]}"): ORG is not set: set it to the submitter's name, which the log records (ORG=myorg ./run_and_time.sh); tinyperf package --org takes the same name." >&2; exit 2; }
[[ "$ORG" =~ ^[A-Za-z0-9][A-Za-z0-9_.+-]*$ ]] || { echo "$(basename "${BASH_SOURCE[0]}"): ORG=$ORG: the submitter name names a directory and the tarball: letters, digits and _ . + - only." >&2; exit 2; }
export SUBMISSION_ORG="$ORG"   # what the entrypoint logs as submission_org
LOG="$RESULTS_DIR/result_resnet_$SEED.txt"
rc=0
python3 -m tinyperf.benchmarks.resnet.train --platform tinybox_green --phase all \
  --seed "$SEED" --data "$DATA_DIR" --work "$RESULTS_DIR" --log "$LOG" || rc=$?
echo "MLPerf log (exit $rc): $(printf %q "$LOG"); check it with: tinyperf check $(printf %q "$LOG")"
exit $rc
