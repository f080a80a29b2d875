#!/usr/bin/env bash
# The CPU smoke, end to end on this machine: synthetic ImageNet JPEGs -> NEXP x (INIT + RUN) of a toy ResNet on the CPU
# -> tinyperf check -> tinyperf score. Installs what it needs (virtualenv from the lock file; clang as root).
# Rerunning resumes: finished runs are kept, interrupted ones are redone. OUT=dir NEXP=n ORG=name override the defaults.
# ORG is the submitter name the logs record; `tinyperf check` reads OUT as the submitter directory <org>/, so it
# defaults to OUT's name (smoke) and anything else gets a WARN.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source ./scripts/env.sh
OUT="${OUT:-out/smoke}"
NEXP="${NEXP:-5}"
ORG="${ORG:-$(basename "$OUT")}"
if [ ! -f "$OUT/data/manifest.json" ]; then
  tinyperf prep synthetic-imagenet --out "$OUT/data" --classes 4 --train-per-class 160 --val-per-class 40 --size 48 --seed 0
fi
tinyperf run resnet --platform cpu_smoke --nexp "$NEXP" --data "$OUT/data" --results "$OUT" --org "$ORG" --no-container
tinyperf check "$OUT/results/cpu_smoke/resnet"
tinyperf score "$OUT/results/cpu_smoke/resnet"
