#!/usr/bin/env bash
# The CPU smoke, end to end on this machine: synthetic ImageNet JPEGs -> NEXP x (INIT + RUN) of a toy ResNet on the CPU
# -> tinyperf check (which also scores). Installs what it needs (virtualenv from the lock file; clang as root).
# Rerunning resumes: finished runs are kept, interrupted ones are redone. OUT=dir NEXP=n ORG=name override the defaults
# (NEXP below a set of 5 judges each log and says the set is not scored);
# VERBOSE=1 shows every run's whole output (it always goes to OUT/runs/.../output.log). ORG is the submitter name the
# logs record (default: OUT's name, smoke); `tinyperf package --org` takes the same name.
# Ends with one verdict line: SMOKE PASSED (exit 0) or SMOKE FAILED (exit 1).
set -euo pipefail
# OUT=dir is where it was typed (made absolute before moving into the checkout); the default is this checkout's
# out/smoke. The verdict names paths as seen from there too (CALLER).
CALLER="$PWD"
if [ -n "${OUT:-}" ] && [ "${OUT#/}" = "$OUT" ]; then OUT="$PWD/$OUT"; fi
if [ -n "${NEXP:-}" ] && ! [[ "$NEXP" =~ ^[1-9][0-9]*$ ]]; then
  echo "smoke.sh: NEXP=$NEXP: the number of runs is a whole number of at least 1 (unset: as many as MLPerf requires)." >&2
  exit 2
fi
# ORG names the submitter directory and the tarball (tinyperf's ORG_NAME): checked here, before anything is installed
ORG="${ORG:-$(basename "${OUT:-out/smoke}")}"
if ! [[ "$ORG" =~ ^[A-Za-z0-9][A-Za-z0-9_.+-]*$ ]]; then
  echo "smoke.sh: ORG=$ORG: the submitter name (default: the name of OUT) names a directory and the tarball: letters," \
    "digits and _ . + - only, no spaces, no leading dot. Pass ORG=name (or an OUT whose name is one)." >&2
  exit 2
fi
cd "$(dirname "${BASH_SOURCE[0]}")"
source ./scripts/env.sh
OUT="${OUT:-out/smoke}"
NEED="$(python3 -c 'from tinyperf.benchmarks.common.rules import required_runs; print(required_runs("resnet"))')"   # a set
NEXP="${NEXP:-$NEED}"
RES="$OUT/results/cpu_smoke/resnet"
# its progress bar goes to a log (the console keeps one line per step); on failure the log is shown. A rerun asks prep
# again: "nothing to do" for this set, a refusal for one an older tinyperf drew otherwise (whose val images might all
# be learnable: the checker rejects an accuracy of 1.0)
mkdir -p "$OUT"
tinyperf prep synthetic-imagenet --out "$OUT/data" --classes 4 --train-per-class 160 --val-per-class 40 --size 48 --seed 0 \
  2> "$OUT/prep.log" || { cat "$OUT/prep.log" >&2; echo "SMOKE FAILED: tinyperf prep synthetic-imagenet (above)"; exit 1; }
set +e
tinyperf run resnet --platform cpu_smoke --nexp "$NEXP" --data "$OUT/data" --results "$OUT" --org "$ORG" --runtime host \
  ${VERBOSE:+--verbose}
ran=$?
tinyperf check --json "$RES" > "$OUT/check.json"
checked=$?
set -e
python3 - "$OUT" "$RES" "$NEXP" "$NEED" "$ran" "$checked" "$CALLER" <<'PY'
import json, os, shlex, sys
out, res, caller = sys.argv[1], sys.argv[2], sys.argv[7]
nexp, need, ran, checked = map(int, sys.argv[3:7])
def shown(p):   # a path as the user can type it where they ran smoke.sh: relative below that directory, else absolute
  rel = os.path.relpath(os.path.abspath(p), caller)
  return rel if not rel.startswith("..") else os.path.abspath(p)
try: rep = json.load(open(f"{out}/check.json"))
except (OSError, ValueError): rep = None
files = [f for d in (rep or {}).get("dirs", []) for f in d["files"]]
ok = sum(f["compliant"] for f in files)
score = next((d["score_minutes"] for d in (rep or {}).get("dirs", []) if d["score_minutes"] is not None), None)
if nexp >= need:   # a whole set: judged as the package checker judges it (compliant logs, a score)
  passed = ran == 0 and checked == 0 and rep is not None and rep["accepted"] and ok == nexp
  what = f"{ok}/{nexp} compliant" + (f", score {score:.2f} min" if score is not None else ", no score")
else:              # NEXP below a set: each log is judged; the set is too small to score, and the line says so
  passed = ran == 0 and rep is not None and ok == len(files) == nexp
  what = f"{ok}/{nexp} compliant, not scored (a set of {nexp}: MLPerf scores {need})"
if rep is None: what = f"tinyperf check exited {checked} without a report"
elif nexp >= need and not rep["accepted"]:
  what += f" (rejected: tinyperf check {shlex.quote(shown(res))} says why)"
if ran != 0: what += f"; tinyperf run exited {ran} (rerun the same command to resume)"
print(f"SMOKE {'PASSED' if passed else 'FAILED'}: {what}, results in {shown(out)}")
sys.exit(0 if passed else 1)
PY
