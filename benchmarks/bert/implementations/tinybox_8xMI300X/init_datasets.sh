#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# BERT-large pretraining (Wikipedia) on tinybox_8xMI300X: download (or make) the data set into DATA_DIR and verify it; a rerun resumes.
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the tools are modules of this tree
[ -n "${DATA_DIR:-}" ] || { echo "$(basename "${BASH_SOURCE[0]}"): DATA_DIR is not set: set it to the directory to prepare the data in." >&2; exit 2; }
# MLCommons' files (vocab, bert_config.json, phase-1 checkpoint, results_text): gdown, resumable, md5-checked
python3 -m tinyperf.tooling.cli prep wiki download --out "$DATA_DIR"
# tokenised, memory-mappable shards at this config's MAX_SEQ_LEN / MAX_PREDICTIONS; finished shards are kept on a rerun
python3 -m tinyperf.tooling.cli prep wiki pretrain --data "$DATA_DIR" --platform tinybox_8xMI300X --parts all --workers "${WORKERS:-$(nproc)}"
python3 -m tinyperf.tooling.cli prep wiki eval --data "$DATA_DIR" --platform tinybox_8xMI300X
# the phase-1 checkpoint RUN starts from (INIT_CHECKPOINT=1), converted to safetensors; needs TensorFlow:
#   pip install --require-hashes -r requirements-convert.lock
[ -f "$DATA_DIR/bert-large.safetensors" ] || \
  python3 -m tinyperf.tooling.cli prep wiki checkpoint --tf "$DATA_DIR" --out "$DATA_DIR/bert-large.safetensors"
python3 -m tinyperf.tooling.cli prep wiki verify --data "$DATA_DIR"
# the next command as the caller can type it: this directory as they named it (the cd above leaves BASH_SOURCE)
echo "data ready and verified: ORG=myorg DATA_DIR=$(printf %q "$DATA_DIR") $(printf %q "$(dirname "${BASH_SOURCE[0]}")")/run_and_time.sh"
