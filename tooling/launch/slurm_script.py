"""The sbatch script of a Slurm submission (tooling/launch/slurm.py): one array task per run, each running `tinyperf run
... --only-index $SLURM_ARRAY_TASK_ID` on a whole node; what the script can carry (paths, --sbatch-arg); and the start
line each attempt of a task prints into its output."""
from __future__ import annotations
import re
import shlex
import textwrap
import time
from pathlib import Path

from tinyperf.benchmarks.common.config import PlatformConfig
from tinyperf.benchmarks.registry import SCHEMA
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common.errors import UserError

IMAGE_PYTHON = "/opt/tinyperf/venv/bin/python"  # docker/install.sh installs the project into this venv in every image
TIME_MARGIN_MIN = 10  # on top of the platform's INIT+RUN limit: preflight, page-cache drop, image start, tinyperf check
TASK_RUNTIME_ENV = "TINYPERF_SLURM_RUNTIME"   # every task's script exports it; recorded with each attempt in the ledger
# the line each attempt of a task prints first into its (appended) output; status reads the attempts' restart counts
TASK_START = "==== tinyperf: Slurm task {task}, restart {restart} "
TASK_START_RE = re.compile(r"==== tinyperf: Slurm task \S+, restart (\d+) ")
SUBMISSION_LINE = "# tinyperf-submission: "   # + the submission's token (host-pid-time), also in the name sbatch is given


def task_restarts(out: Path) -> list[int]:
  """The restart counts of the attempts whose start line a task's output holds (an output file is appended to)."""
  try:
    with open(out, errors="replace") as f: return [int(m[1]) for line in f if (m := TASK_START_RE.match(line))]
  except OSError: return []


# ---------------------------------------------------------------------------------------------------- the script
def array_spec(indices: list[int]) -> str:
  """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8' (sbatch --array syntax)."""
  out, start = [], None
  for k, i in enumerate(sorted(indices)):
    if start is None: start = i
    if k + 1 == len(indices) or sorted(indices)[k + 1] != i + 1:
      out.append(str(start) if start == i else f"{start}-{i}"); start = None
  return ",".join(out)


def array_indices(spec: str) -> list[int]:
  """'0-2,5,7-8' -> [0, 1, 2, 5, 7, 8]: array_spec read back (parts of another form are skipped)."""
  return sorted({i for part in spec.split(",") if re.fullmatch(r"\d+(-\d+)?", part)
                 for i in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)})


def render_script(cfg: PlatformConfig, spec: dict, indices: list[int], files_dir: Path, revision: str, when: float,
                  token: str | None = None) -> str:
  """The sbatch script of one submission: a plain bash script that a person can read, and rerun by hand with sbatch.
  Its tasks write their output and exit records into files_dir, the submission's own directory. token: the
  submission's own (SUBMISSION_LINE), also in the name of the file sbatch is given."""
  q = shlex.quote
  bm, platform, nexp, runtime = spec["benchmark"], spec["platform"], spec["nexp"], spec["runtime"]
  array = array_spec(indices)
  gpus = cfg["GPUS"] if cfg["vendor"] in ("nv", "amd") else 0
  limit = cfg["time_limit_minutes"]
  args = ["run", bm, "--platform", platform, "--nexp", str(nexp), "--data", spec["data"], "--results", spec["results"]]
  if runtime == "docker": args += ["--image", spec["image"]] if spec["image"] else []
  else: args += ["--runtime", "host"]
  if spec["no_check"]: args.append("--no-check")
  if spec.get("system_overrides"): args += ["--system-overrides", spec["system_overrides"]]
  if spec.get("org"): args += ["--org", spec["org"]]
  tinyperf = " ".join(q(a) for a in args) + ' --only-index "$SLURM_ARRAY_TASK_ID"'
  stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))
  s = [
    "#!/bin/bash",
    f"# tinyperf: {bm} on {platform} (system {cfg['system']}), run indices {array} of {nexp} runs.",
    "# One Slurm array task per run, each on a node of its own, doing what a local `tinyperf run` does for one run:",
    "# preflight, page-cache drop, INIT, RUN, `tinyperf check`, then result_<i>.txt and its entry in the shared ledger.",
    "# Kept beside the ledger as part of the submission record; `tinyperf status` follows the runs and",
    "# `tinyperf status --resume` resubmits failed ones.",
    f"# Written by `tinyperf run --scheduler slurm` on {stamp} from tinyperf {revision}",
    *([SUBMISSION_LINE + token] if token else []),
    f"#SBATCH --job-name=tinyperf-{bm}-{platform}",
    f"#SBATCH --array={array}",
    "#SBATCH --nodes=1",
    "#SBATCH --ntasks=1",
    "# the whole node for one run: a timed run shares no GPU, CPU, memory bandwidth or page cache with another job",
    "#SBATCH --exclusive",
    "#SBATCH --mem=0",
  ]
  if gpus: s.append(f"#SBATCH --gpus-per-node={gpus}")
  s += [f"# the platform's time_limit_minutes ({limit}) + {TIME_MARGIN_MIN} for preflight, cache drop, image start and check",
        f"#SBATCH --time={limit + TIME_MARGIN_MIN}",
        f"#SBATCH --partition={spec['partition']}",
        f"#SBATCH --output={files_dir}/{T.slurm_task_name('%A', '%a', 'out')}",
        "# appended to, not truncated: a task Slurm requeues (scontrol requeue, a node failure) keeps its earlier output",
        "#SBATCH --open-mode=append"]
  s += [f"#SBATCH {sbatch_quote(a)}" for a in spec["sbatch_args"]]
  knobs = spec["knobs"]
  s += ["set -uo pipefail",
        "# each attempt of the task starts its output with this line; Slurm counts the attempts in SLURM_RESTART_COUNT",
        'restart="${SLURM_RESTART_COUNT:-0}"',
        f'echo "{TASK_START.format(task="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}", restart="$restart")}'
        f'(SLURM_RESTART_COUNT=${{SLURM_RESTART_COUNT:-unset}}) on $(hostname) at $(date -u +%FT%TZ) ===="', "",
        "# knobs: the platform's config.yaml plus the overrides given at submission, and nothing else: a knob set in the",
        "# shell that submits (or resubmits) this script must not change the runs",
        " \\\n".join(textwrap.wrap("unset " + " ".join(k for k in SCHEMA[bm] if k not in knobs), 110,
                                    subsequent_indent="  ", break_on_hyphens=False))]
  s += [f"export {k}={q(v)}" for k, v in knobs.items()]
  s += [f"export {TASK_RUNTIME_ENV}={runtime}"]
  if spec["image"]: s += [f"export TINYPERF_SLURM_IMAGE={q(spec['image'])}"]
  s += [f"files_dir={q(str(files_dir))}", "", "rc=0"]
  if runtime == "pyxis":
    # the image's own Python and tinyperf; data and results mounted at the same paths, so the ledger's paths hold
    # outside the container too
    mounts = f"{spec['data']}:{spec['data']}:ro,{spec['results']}:{spec['results']}"
    s += [f"srun --ntasks=1 --container-image={q(spec['image'])} --container-mounts={q(mounts)} --container-workdir=/tmp \\",
          f"  {IMAGE_PYTHON} -m tinyperf.tooling.cli {tinyperf} || rc=$?"]
  else:
    # the same checkout and Python that submitted: both must be at the same path on the nodes (a shared filesystem)
    s += [f"cd {q(spec['repo'])} || exit 2",
          f"{q(spec['python'])} -m tinyperf.tooling.cli {tinyperf} || rc=$?"]
  exit_file = "$files_dir/" + T.slurm_task_name("${SLURM_ARRAY_JOB_ID}", "${SLURM_ARRAY_TASK_ID}", "exit", "${restart}")
  s += ["# how this attempt of the task ended, for `tinyperf status` (which needs no sacct); no file means Slurm killed it",
        f'echo "$rc" > "{exit_file}.tmp" &&',
        f'  mv -f "{exit_file}.tmp" "{exit_file}"',
        'exit "$rc"', ""]
  return "\n".join(s)


def sbatch_quote(arg: str) -> str:
  """One sbatch option as an #SBATCH line carries it verbatim: sbatch splits a directive at whitespace, drops quotes
  and cuts it at '#'; inside double quotes it keeps all of them and a backslash escapes the next character. An option
  and its value given apart ('-A mlperf', '--comment a b') stay two words, the value quoted."""
  q = lambda w: w if not re.search(r"[\s\"'\\#]", w) else '"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"'
  if m := re.fullmatch(r"(-[A-Za-z]|--[A-Za-z][A-Za-z-]*)\s+(.*\S)\s*", arg, re.S): return f"{m[1]} {q(m[2])}"
  return q(arg)


def check_path_chars(path: str, runtime: str):
  # #SBATCH lines are not shell-quoted, --output expands %, pyxis mounts split on ',' and ':'
  bad = set(path) & set(" \t\n%\"'" + (",:" if runtime == "pyxis" else ""))
  if bad:
    why = "#SBATCH lines are not quoted, --output expands %" + (", pyxis mounts split on , and :" if runtime == "pyxis" else "")
    raise UserError(f"{path} contains {' '.join(repr(c) for c in sorted(bad))}, which an sbatch script cannot carry "
                    f"there ({why}); use a path without them. Nothing was submitted.")


# options render_script sets that the bookkeeping relies on: a later #SBATCH line would override them (long name, short)
OWN_OPTIONS = {"job-name": ("J", "`tinyperf status` finds the set's tasks in squeue by the job name"),
               "array": ("a", "the array holds one task per run not yet finished, as the ledger says"),
               "output": ("o", "`tinyperf status` reads each task's output from slurm/submission_<k>/job_<id>_<i>.out"),
               "error": ("e", "`tinyperf status` reads each task's errors from slurm/submission_<k>/job_<id>_<i>.out"),
               "open-mode": (None, "a task Slurm requeues appends its output to what its earlier attempts wrote"),
               "partition": ("p", "pass the partition as tinyperf's own --partition, which is checked and recorded")}


def check_sbatch_arg(a: str):
  if not a.startswith("-") or "\n" in a or re.search(r"\s--?[A-Za-z]", a):
    raise UserError(f"--sbatch-arg {a!r}: give one sbatch option per --sbatch-arg, e.g. --sbatch-arg=--account=mlperf "
                    f"--sbatch-arg=--qos=high. Nothing was submitted.")
  name = re.split(r"[=\s]", a[2:], maxsplit=1)[0] if a.startswith("--") else None
  for long, (short, why) in OWN_OPTIONS.items():
    # sbatch takes any unambiguous prefix of a long option (--job=x), and a short one with its value attached (-Jx)
    if (name and len(name) >= 2 and long.startswith(name)) or (not name and short and a[1:2] == short):
      raise UserError(f"--sbatch-arg {a!r}: tinyperf sets --{long} itself and must keep it ({why}). Drop this "
                      f"--sbatch-arg; nothing was submitted.")

