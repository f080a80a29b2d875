#!/usr/bin/env bash
# Run the test suite: `./test.sh` (everything), `./test.sh unit` (seconds), `./test.sh integration`.
# Installs what it needs on a fresh machine: a virtualenv from the hash-locked requirements and, as root, clang (tinygrad's
# CPU backend compiles with it). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
source ./scripts/env.sh            # venv + locked deps + clang
layer="${1:-all}"; [ $# -gt 0 ] && shift
case "$layer" in
  unit) sel=(-m "not integration") ;;
  integration) sel=(-m integration) ;;
  all) sel=() ;;
  *) sel=(); set -- "$layer" "$@" ;;   # a path or pytest option
esac
set +e
python -m pytest "${sel[@]}" "$@"
rc=$?
set -e
# pytest exits 5 when nothing was collected: an empty selection must fail loudly, not pass
if [ $rc -eq 5 ]; then echo "test.sh: pytest collected no tests for '$layer' - failing" >&2; exit 1; fi
exit $rc
