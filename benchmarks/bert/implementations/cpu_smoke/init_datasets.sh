#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# BERT-large pretraining (Wikipedia) on cpu_smoke: download (or make) the data set into DATA_DIR and verify it; a rerun resumes.
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the tools are modules of this tree
[ -n "${DATA_DIR:-}" ] || { echo "$(basename "${BASH_SOURCE[0]}"): DATA_DIR is not set: set it to the directory to prepare the data in." >&2; exit 2; }
# stand-in data: a synthetic text (85 % "the") with the real uncased vocab, tokenised at this config's
# MAX_SEQ_LEN / MAX_PREDICTIONS / EVAL_SAMPLES; finished shards are kept on a rerun
[ -d "$DATA_DIR/results4" ] || python3 -m tinyperf.tooling.cli prep wiki corpus --out "$DATA_DIR" --text synthetic
python3 -m tinyperf.tooling.cli prep wiki pretrain --data "$DATA_DIR" --platform cpu_smoke --workers "${WORKERS:-2}"
python3 -m tinyperf.tooling.cli prep wiki eval --data "$DATA_DIR" --platform cpu_smoke
python3 -m tinyperf.tooling.cli prep wiki verify --data "$DATA_DIR"
# the next command as the caller can type it: this directory as they named it (the cd above leaves BASH_SOURCE)
echo "data ready and verified: DATA_DIR=$(printf %q "$DATA_DIR") $(printf %q "$(dirname "${BASH_SOURCE[0]}")")/run_and_time.sh"
