#!/usr/bin/env bash
# Run the test suite: `./test.sh` (everything), `./test.sh unit` (minutes), `./test.sh integration`.
# Installs what it needs on a fresh machine: a virtualenv from the hash-locked requirements and, as root, clang (tinygrad's
# CPU backend compiles with it). Extra arguments go to pytest. Tests run in TEST_WORKERS pytest-xdist workers (default: one more than the
# cores, at most 4; tests that share an engine or a fresh clone stay on one worker: their xdist_group marks);
# TEST_WORKERS=0 runs them in this process (pdb, -s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export TINYPERF_WITH_KERNELS="${TINYPERF_WITH_KERNELS:-1}"   # Triton: the kernel layer's interpreter tests
source ./scripts/env.sh            # venv + locked deps + clang
# bytecode caches on (git-ignored __pycache__): the suite starts about a thousand Python processes of this checkout, and
# with PYTHONDONTWRITEBYTECODE set in the caller's environment each one compiled every tinyperf module it imported
# again (a `tinyperf` CLI start: 0.84 -> 0.5 CPU-s)
unset PYTHONDONTWRITEBYTECODE
layer="${1:-all}"; [ $# -gt 0 ] && shift
case "$layer" in
  unit) sel=(-m "not integration") ;;
  integration) sel=(-m integration) ;;
  all) sel=() ;;
  *) sel=(); set -- "$layer" "$@" ;;   # a path or pytest option
esac
# one worker more than cores (at most 4): the engine and fresh-clone tests spend part of their time waiting on docker,
# Slurm, pip and subprocess pipes
workers="${TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) + 1 : 4 ))}"
# --no-loadscope-reorder: hand out work in collection order (tests/conftest.py puts the long groups first), not by size
par=(); [ "$workers" -gt 0 ] && par=(-n "$workers" --dist loadgroup --no-loadscope-reorder)
set +e
python -m pytest "${par[@]}" "${sel[@]}" "$@"
rc=$?
set -e
# pytest exits 5 when nothing was collected: an empty selection must fail loudly, not pass
if [ $rc -eq 5 ]; then echo "test.sh: pytest collected no tests for '$layer' - failing" >&2; exit 1; fi
exit $rc
