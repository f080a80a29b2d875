# Sourced by test.sh and smoke.sh: make a virtualenv with the locked dependencies and the project, once.
# Re-sourcing is cheap: the install runs again only when a lock file changed.
set -euo pipefail
ROOT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "tinyperf needs Python >= 3.11 (tinygrad 0.14 does); found $("$PY" --version 2>&1). Set PYTHON=/path/to/python3.11." >&2
  exit 2
fi
if ! command -v clang >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing clang (tinygrad's CPU backend compiles kernels with it)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null) || { echo "apt-get install clang failed" >&2; exit 2; }
  else
    echo "clang is missing: tinygrad's CPU backend needs it. Install it (e.g. sudo apt-get install clang) and rerun." >&2
    exit 2
  fi
fi
VENV="${TINYPERF_VENV:-$ROOT_DIR/.venv}"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
stamp="$VENV/.tinyperf-lock.sha"
# TINYPERF_WITH_CONVERT=1 adds TensorFlow (BERT checkpoint conversion and its test; CI sets it)
convert="${TINYPERF_WITH_CONVERT:-0}"
# TINYPERF_WITH_KERNELS=1 adds Triton (KERNELS=triton; its interpreter tests; ./test.sh sets it)
kernels="${TINYPERF_WITH_KERNELS:-0}"
want="$( (cat "$ROOT_DIR/requirements.lock" "$ROOT_DIR/requirements-dev.lock" "$ROOT_DIR/requirements-testdata.txt" \
  "$ROOT_DIR/pyproject.toml" "$ROOT_DIR/setup.py"; echo "convert=$convert kernels=$kernels"
  if [ "$convert" = 1 ]; then cat "$ROOT_DIR/requirements-convert.lock"; fi
  if [ "$kernels" = 1 ]; then cat "$ROOT_DIR/requirements-kernels.lock"; fi) | sha1sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "installing locked dependencies into $VENV (log: $VENV/install.log)" >&2
  : > "$VENV/install.log"
  # no silence over 10 s: every 10 s, how long it has taken and pip's last line
  ( t0=$SECONDS; trap 'kill "$s" 2>/dev/null; exit 0' TERM
    while :; do sleep 10 & s=$!; wait "$s"
      echo "  ... installing, $((SECONDS - t0)) s: $(tail -n 1 "$VENV/install.log" 2>/dev/null | LC_ALL=C tr -cd '\40-\176' | cut -c1-100)" >&2; done ) &
  ticker=$!
  if ! { "$VENV/bin/python" -m pip install --upgrade pip &&
         "$VENV/bin/python" -m pip install --require-hashes -r "$ROOT_DIR/requirements.lock" -r "$ROOT_DIR/requirements-dev.lock" &&
         "$VENV/bin/python" -m pip install --require-hashes --no-deps -r "$ROOT_DIR/requirements-testdata.txt" &&
         { [ "$convert" != 1 ] || "$VENV/bin/python" -m pip install --require-hashes -r "$ROOT_DIR/requirements-convert.lock"; } &&
         { [ "$kernels" != 1 ] || "$VENV/bin/python" -m pip install --require-hashes -r "$ROOT_DIR/requirements-kernels.lock"; } &&
         "$VENV/bin/python" -m pip install --no-deps --no-build-isolation -e "$ROOT_DIR"; } > "$VENV/install.log" 2>&1; then
    kill "$ticker" 2>/dev/null || true
    tail -30 "$VENV/install.log" >&2
    echo "installing the locked dependencies failed; the full log is $VENV/install.log" >&2
    exit 2
  fi
  kill "$ticker" 2>/dev/null || true
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
