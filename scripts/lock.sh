#!/usr/bin/env bash
# Regenerate the hash locks from pyproject.toml / requirements-*.in, then prove each one installable on Python 3.11.0,
# the oldest interpreter an image has (Ubuntu 22.04's python3.11). pip-compile resolves for the Python it runs on, so
# without the proof a lock made on 3.11.7 can name a wheel that 3.11.0 refuses (soupsieve 4.1.3 did, in an image build).
#   scripts/lock.sh            regenerate (keeps existing pins where they still resolve) and verify
#   scripts/lock.sh --upgrade  regenerate with the newest versions, then verify
#   scripts/lock.sh --verify   only verify (no network writes; pip --dry-run reads the index)
set -euo pipefail
cd "$(dirname "$0")/.."
FLOOR_PYTHON=3.11.0
TOOLS=${PIP_TOOLS_VENV:-/tmp/tinyperf-pip-tools}

verify() {
  local failed=0 lock nodeps
  for lock in requirements.lock requirements-dev.lock requirements-convert.lock requirements-gpulibs.lock \
              requirements-kernels.lock requirements-testdata.txt; do
    nodeps=""; case $lock in requirements-testdata.txt|requirements-gpulibs.lock) nodeps="--no-deps" ;; esac
    # --only-binary: images install wheels only; --target: --python-version requires it (nothing is written: --dry-run)
    if out=$(python3 -m pip install --dry-run --quiet --ignore-installed --disable-pip-version-check $nodeps \
               --python-version "$FLOOR_PYTHON" --only-binary=:all: --target /tmp/tinyperf-lock-verify \
               --require-hashes -r "$lock" 2>&1); then
      echo "lock.sh: $lock installs on Python $FLOOR_PYTHON"
    else
      echo "lock.sh: $lock does NOT install on Python $FLOOR_PYTHON:"; echo "$out" | grep -E '^ERROR' | sed 's/^/  /'
      echo "  fix: hold the package back in requirements-floor.txt and rerun scripts/lock.sh"
      failed=1
    fi
  done >&2
  return $failed
}

if [ "${1:-}" = --verify ]; then verify; exit; fi
upgrade=""; [ "${1:-}" = --upgrade ] && upgrade="--upgrade"
[ -x "$TOOLS/bin/pip-compile" ] || { python3 -m venv "$TOOLS" && "$TOOLS/bin/pip" install -q pip-tools==7.6.2; }
compile() { "$TOOLS/bin/pip-compile" --quiet --allow-unsafe --generate-hashes --strip-extras --no-emit-index-url \
              --no-emit-find-links $upgrade -c requirements-floor.txt "$@"; }
compile --output-file=requirements.lock pyproject.toml
compile --output-file=requirements-dev.lock requirements-dev.in
compile --output-file=requirements-convert.lock requirements-convert.in
compile --output-file=requirements-gpulibs.lock requirements-gpulibs.in
compile --output-file=requirements-kernels.lock requirements-kernels.in
verify
