#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# ResNet-50 v1.5 (ImageNet) on 1xH200: download (or make) the data set into DATA_DIR and verify it; a rerun resumes.
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the tools are modules of this tree
[ -n "${DATA_DIR:-}" ] || { echo "$(basename "${BASH_SOURCE[0]}"): DATA_DIR is not set: set it to the directory to prepare the data in." >&2; exit 2; }
if [ ! -f "$DATA_DIR/manifest.json" ]; then   # prep writes the manifest last, after verifying the extraction
  [ -n "${VAL_LABELS:-}" ] || { echo "$(basename "${BASH_SOURCE[0]}"): VAL_LABELS is not set: set it to the ILSVRC2012 validation ground truth, one wnid per line (docs/data.md)." >&2; exit 2; }
  # the two ILSVRC2012 archives, downloaded (resumable, md5-checked) or taken from IMAGENET_TARS when it is set
  python3 -m tinyperf.tooling.cli prep imagenet --out "$DATA_DIR" --val-labels "$VAL_LABELS" ${IMAGENET_TARS:+--from-tars "$IMAGENET_TARS"}
fi
python3 -m tinyperf.tooling.cli prep imagenet --verify "$DATA_DIR"   # every image decoded, sizes against the manifest
# the next command as the caller can type it: this directory as they named it (the cd above leaves BASH_SOURCE)
echo "data ready and verified: ORG=myorg DATA_DIR=$(printf %q "$DATA_DIR") $(printf %q "$(dirname "${BASH_SOURCE[0]}")")/run_and_time.sh"
