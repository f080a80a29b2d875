#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# ResNet-50 v1.5 (ImageNet) on cpu_smoke: download (or make) the data set into DATA_DIR and verify it; a rerun resumes.
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the tools are modules of this tree
[ -n "${DATA_DIR:-}" ] || { echo "$(basename "${BASH_SOURCE[0]}"): DATA_DIR is not set: set it to the directory to prepare the data in." >&2; exit 2; }
# stand-in data: learnable synthetic JPEGs in the ImageNet layout, 4 classes (the set smoke.sh makes;
# the same arguments give the same bytes, and a finished set is left as it is)
python3 -m tinyperf.tooling.cli prep synthetic-imagenet --out "$DATA_DIR" --classes 4 --train-per-class 160 --val-per-class 40 --size 48 --seed 0
python3 -m tinyperf.tooling.cli prep imagenet --verify "$DATA_DIR"
# the next command as the caller can type it: this directory as they named it (the cd above leaves BASH_SOURCE)
echo "data ready and verified: DATA_DIR=$(printf %q "$DATA_DIR") $(printf %q "$(dirname "${BASH_SOURCE[0]}")")/run_and_time.sh"
