#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# BERT-large pretraining (Wikipedia) on tinybox_red: one-time setup of this machine: a virtualenv with the hash-locked dependencies and
# tinyperf, then the amd image `tinyperf run` runs in (BUILD_IMAGE=0 skips it, e.g. for host runs).
# It never runs sudo: the host prerequisites it prints are yours to do, once.
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the tools are modules of this tree
cat <<'PREREQUISITES'
Host prerequisites (not done by this script):
  - amdgpu module option cwsr_enable=0 (/etc/modprobe.d/amdgpu.conf, update-initramfs -u, reboot; /sys/module/amdgpu/parameters/cwsr_enable reads 0)
  - upstream reloaded amdgpu (sudo rmmod / modprobe) around INIT and RUN; this repository never does that: load the kernel driver before starting
PREREQUISITES
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup.sh: tinyperf needs Python >= 3.11 (tinygrad 0.14 does); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
VENV="${VENV:-.venv}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --require-hashes -r requirements.lock
"$VENV/bin/python" -m pip install --no-deps -e .   # editable: tinyperf reads this checkout's files (systems/, locks)
if [ "${BUILD_IMAGE:-1}" = 1 ]; then
  "$VENV/bin/python" -m tinyperf.tooling.cli build --platform tinybox_red
fi
here="$(printf %q "$(dirname "${BASH_SOURCE[0]}")")"   # as the caller named it: the commands work from where they are
echo "setup done: source $(cd "$VENV" && pwd)/bin/activate; then DATA_DIR=... $here/init_datasets.sh and ORG=myorg DATA_DIR=... $here/run_and_time.sh"
