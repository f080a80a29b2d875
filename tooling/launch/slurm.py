"""`tinyperf run --scheduler slurm`: the N runs of a benchmark as one Slurm array job, one task (and one node) per run.

Each array task runs `tinyperf run ... --only-index $SLURM_ARRAY_TASK_ID`: the local scheduler's own code (preflight,
page-cache drop, INIT, RUN, check, result file, ledger entry), so a task writes into the shared results directory exactly
what a local run writes, and the ledger's POSIX lock keeps tasks on different nodes from losing each other's entries.
Beside the ledger, for the submission record (paths: tooling/common/results_tree.py), S = slurm/submission_<k>, a
directory of each submission's own, so a job id Slurm hands out again (its counter restarted) overwrites nothing:
  R/runs/<system>/<bm>/slurm.json              every submission: job id, its directory, run indices, its arguments
  R/runs/<system>/<bm>/S/job_<id>.sbatch       the script of the job, exactly as it was submitted
  R/runs/<system>/<bm>/S/.unsubmitted-<token>.sbatch   the script until sbatch has answered and the job is recorded;
                                               kept when the submission stops once sbatch was started, and then
                                               adopted (renamed job_<id>.sbatch) or removed by the next one (adopt_kept)
  R/runs/<system>/<bm>/S/job_<id>_<i>.out      each task's console output (written by Slurm on the node, appended to
                                               by each attempt of a task Slurm requeues)
  R/runs/<system>/<bm>/S/job_<id>_<i>.restart<r>.exit   each attempt's exit status, written by the script when it ends
                                               (r: SLURM_RESTART_COUNT, 0 for the first attempt)
Only Slurm's own commands are used (sbatch, squeue, sinfo). sacct is not: without slurmdbd it has no data, so a run's
state comes from squeue (queued, running, or how a task that ended minutes ago ended), the ledger (what the run itself
recorded) and the last attempt's .exit file (tooling/launch/status.py puts them together)."""
from __future__ import annotations
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from benchmarks.common.config import ROOT, PlatformConfig
from benchmarks.registry import SCHEMA, load_config
from tooling.common import ledger as L
from tooling.common import results_tree as T
from tooling.common import safe_read
from tooling.common.dataset import check_prepared
from tooling.launch.scheduler import OVERRIDES_FILE
from tooling.common.errors import UserError, stop_on_signals, write_atomic

IMAGE_PYTHON = "/opt/tinyperf/venv/bin/python"  # docker/install.sh installs the project into this venv in every image
TIME_MARGIN_MIN = 10  # on top of the platform's INIT+RUN limit: preflight, page-cache drop, image start, tinyperf check
# Where Slurm states (squeue %T) put a task. Anything else has ended: COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL,...
QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
# Filesystem types (as /proc/mounts names them) that only this machine can see, and ones made to be mounted by many.
LOCAL_ONLY_FS = {"tmpfs", "ramfs", "devtmpfs", "overlay", "aufs", "squashfs"}
SHARED_FS = {"nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cephfs", "fuse.ceph", "glusterfs", "fuse.glusterfs",
             "cifs", "smb3", "panfs", "wekafs", "afs", "ocfs2", "gfs2", "fuse.juicefs"}
SUBMIT_LOCK = "slurm.lock"   # beside the ledger: two submitters of one result set never both submit a run
TASK_RUNTIME_ENV = "TINYPERF_SLURM_RUNTIME"   # every task's script exports it; recorded with each attempt in the ledger
# the line each attempt of a task prints first into its (appended) output; status reads the attempts' restart counts
TASK_START = "==== tinyperf: Slurm task {task}, restart {restart} "
TASK_START_RE = re.compile(r"==== tinyperf: Slurm task \S+, restart (\d+) ")
# the script sbatch is given, until sbatch has answered and the job is recorded; one kept by a submission stopped
# while sbatch ran (Slurm may have queued it) is matched to its job by squeue's %o on the next submission
UNSUBMITTED = ".unsubmitted-{}.sbatch"
SUBMISSION_LINE = "# tinyperf-submission: "   # + the token in UNSUBMITTED's name: host-pid-time, one per submission


def add_run_arguments(p):
  g = p.add_argument_group("Slurm (--scheduler slurm)")
  g.add_argument("--partition", help="partition to submit to (default: the cluster's default partition)")
  g.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                 help="one more #SBATCH line, e.g. --sbatch-arg=--account=mlperf (repeatable)")
  g.add_argument("--assume-shared", action="store_true",
                 help="the results directory is mounted at the same path on every node although tinyperf cannot tell "
                      "(e.g. it is an NFS export seen from its own server)")


def check_local_args(args):
  """The Slurm options mean nothing to a local run: say so rather than ignore them."""
  given = [o for o, v in (("--partition", args.partition), ("--sbatch-arg", args.sbatch_arg),
                          ("--assume-shared", args.assume_shared)) if v]
  if given:
    raise UserError(f"{', '.join(given)} only apply to --scheduler slurm; add --scheduler slurm to submit the runs to Slurm, "
                    f"or drop {'them' if len(given) > 1 else 'it'} to run here.")


# ------------------------------------------------------------------------------------------------- Slurm commands
def require(tool: str, then: str = ""):
  if not shutil.which(tool):
    raise UserError(f"{tool} is not on PATH: tinyperf submits and follows Slurm runs with Slurm's own commands (sbatch, "
                    f"squeue, sinfo). Run tinyperf on a login node of the cluster, or add Slurm's bin directory to PATH "
                    f"(Debian/Ubuntu: apt-get install slurm-client, plus the cluster's slurm.conf and munge key); or run "
                    f"on this machine with --scheduler local.{' ' + then if then else ''}")


def _slurm(*cmd: str, shown: str | None = None) -> str:
  """Run one Slurm client command; any failure is a UserError carrying Slurm's own message."""
  require(cmd[0])
  shown = shown or shlex.join(cmd)
  try:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=120)
  except subprocess.TimeoutExpired:
    raise NoAnswer(f"`{shown}` did not answer in 120 s; is the Slurm controller up (`scontrol ping`)?") from None
  if r.returncode != 0:
    msg = " ".join((r.stderr.strip() or r.stdout.strip() or "no message").split())
    raise UserError(f"`{shown}` failed (exit {r.returncode}): {msg}")
  return r.stdout


def partitions() -> tuple[list[str], str | None]:
  """(every partition, the default one) as sinfo lists them; the default carries a '*' suffix."""
  names, default = [], None
  for line in _slurm("sinfo", "--all", "--noheader", "--format=%P").split():
    name = line.rstrip("*")
    if line.endswith("*"): default = name
    if name not in names: names.append(name)
  return names, default


def check_partition(partition: str | None) -> str:
  names, default = partitions()
  if partition is None:
    if default is None:
      raise UserError(f"this cluster has no default partition; pass --partition (one of: {', '.join(names) or 'none'}). "
                      f"Nothing was submitted.")
    return default
  if partition not in names:
    raise UserError(f"partition {partition!r} is unknown to this cluster (sinfo lists: {', '.join(names) or 'none'}); "
                    f"pass one of those to --partition. Nothing was submitted.")
  return partition


def partition_nodes(partition: str) -> list[tuple[str, str, str]]:
  """(node name, hostname, address) of every node of a partition."""
  out = _slurm("sinfo", "--noheader", "--Node", f"--partition={partition}", "--format=%N|%n|%o")
  return sorted({tuple(l.split("|")) for l in out.splitlines() if l.count("|") == 2})


def queue(job_name: str) -> dict[tuple[str, int], tuple[str, str]]:
  """(array job id, task index) -> (state, node or reason) for every task of jobs with this name that slurmctld still
  knows: queued and running ones, and those that ended less than MinJobAge (default 5 min) ago. Jobs are filtered by
  name rather than id because squeue refuses a job id it has forgotten."""
  return parse_squeue(_slurm("squeue", "--noheader", "--array", "--states=all", f"--name={job_name}",
                              "--format=%F|%K|%T|%N|%r"))


def parse_squeue(out: str) -> dict[tuple[str, int], tuple[str, str]]:
  tasks = {}
  for line in out.splitlines():
    parts = line.strip().split("|")
    if len(parts) != 5 or not parts[1].isdigit(): continue  # not an array task
    job, index, state, nodes, reason = parts
    tasks[(job, int(index))] = (state, nodes if state in RUNNING else reason)
  return tasks


# ---------------------------------------------------------------------------------------------- the shared results
def mount_of(path: Path) -> tuple[str, str]:
  """(filesystem type, mount point) of the mount holding path, from /proc/mounts (the longest matching mount point;
  the last one listed wins when mounts are stacked)."""
  path, best = str(Path(path).resolve()), ("unknown", "/")
  try: lines = Path("/proc/mounts").read_text().splitlines()
  except OSError: return best
  best_len = -1
  for line in lines:
    f = line.split()
    if len(f) < 3: continue
    mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[1])  # /proc/mounts writes a space as \040
    if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= best_len:
      best, best_len = (f[2], mnt), len(mnt)
  return best


def _this_host(node: tuple[str, str, str]) -> bool:
  me = socket.gethostname()
  return bool({*node} & {me, me.split(".")[0], socket.getfqdn(), "localhost", "127.0.0.1", "::1"})


def check_shared(results: Path, partition: str, assume_shared: bool, nodes: list | None = None):
  """Refuse, before submitting, a results directory the nodes cannot write into. What can be told from here: memory and
  container filesystems are this machine's alone; NFS, Lustre, GPFS, ... are shared; a local disk is fine only when the
  partition's nodes are all this machine. Whether a shared filesystem is mounted at the same path on every node cannot
  be seen from here: a task on a node without it fails at once and `tinyperf status` says so. `nodes` (name, hostname,
  address) defaults to what sinfo lists for the partition."""
  if assume_shared: return
  fstype, mnt = mount_of(results)
  fix = ("Put --results on a filesystem that every node mounts at the same path (NFS, Lustre, GPFS, BeeGFS, ...)")
  if fstype in LOCAL_ONLY_FS:
    raise UserError(f"results directory {results} is on {fstype} (mounted at {mnt}), which exists on this machine only: "
                    f"the compute nodes cannot write the runs' results and ledger into it, and it does not survive a "
                    f"reboot. {fix}. Nothing was submitted.")
  if fstype in SHARED_FS: return
  others = [n[0] for n in (partition_nodes(partition) if nodes is None else nodes) if not _this_host(n)]
  if others:
    names = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
    raise UserError(f"results directory {results} is on a local {fstype} filesystem (mounted at {mnt}), but partition "
                    f"{partition} has nodes other than this machine ({names}) "
                    f"that cannot see it. {fix}, or pass --assume-shared if it is shared in a way tinyperf cannot tell "
                    f"(e.g. this machine exports it over NFS). Nothing was submitted.")


# --------------------------------------------------------------------------------------------------- the record
def record_path(work_root: Path) -> Path: return T.slurm_record(work_root)


# what submit_runs records of each job and of its arguments, as status and --resume read them
JOB_FIELDS = {"job_id": (str, int), "job_name": str, "indices": list, "submitted": (int, float), "spec": dict}
SPEC_FIELDS = {"benchmark": str, "platform": str, "nexp": int, "data": str, "results": str, "runtime": str,
               "image": (str, type(None)), "partition": str, "sbatch_args": list, "no_check": bool, "assume_shared": bool,
               "knobs": dict, "python": str, "repo": str}


def _check_job(k: int, job) -> None:
  """ValueError naming what is wrong with the record's job k (a hand edit, a copy from elsewhere)."""
  if not isinstance(job, dict): raise ValueError(f"job {k} is not an object")
  for fields, where in ((JOB_FIELDS, f"job {k}"), (SPEC_FIELDS, f"job {k} spec")):
    d = job if fields is JOB_FIELDS else job["spec"]   # JOB_FIELDS has made sure spec is an object
    for key, kind in fields.items():
      if key not in d: raise ValueError(f"{where}: {key!r} is missing")
      if not isinstance(d[key], kind) or (isinstance(d[key], bool) and kind is not bool):   # True is an int
        raise ValueError(f"{where}: {key!r} is {d[key]!r}")
  if not str(job["job_id"]).isdigit(): raise ValueError(f"job {k}: job_id {job['job_id']!r} is not a Slurm job id")
  files = job.get("files")   # absent in records from before each submission had a directory of its own
  if files is not None and not (isinstance(files, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", files)):
    raise ValueError(f"job {k}: files {files!r} is not the name of a directory in slurm/")
  nexp = job["spec"]["nexp"]
  if not 1 <= nexp <= L.MAX_NEXP: raise ValueError(f"job {k} spec: nexp {nexp} is not a number of runs 1 to {L.MAX_NEXP}")
  if not all(type(i) is int and 0 <= i < nexp for i in job["indices"]):
    raise ValueError(f"job {k}: indices {job['indices']!r} are not run numbers 0 to {nexp - 1}")


def load_record(work_root: Path) -> dict:
  path = record_path(work_root)
  if not path.exists(): return {"format": "tinyperf-slurm-v1", "jobs": []}
  try:
    rec = json.loads(safe_read.read_text(path, L.MAX_LEDGER_BYTES, "record of Slurm submissions"))
    if not isinstance(rec, dict) or not isinstance(rec.get("jobs"), list): raise ValueError("no list of jobs")
    for job in rec["jobs"]:   # a record written before --runtime says "none" for what is now "host"
      if isinstance(job, dict) and isinstance(job.get("spec"), dict) and job["spec"].get("runtime") == "none":
        job["spec"]["runtime"] = "host"
    for k, job in enumerate(rec["jobs"]): _check_job(k, job)
    return rec
  except (ValueError, RecursionError) as e:  # json.JSONDecodeError is a ValueError
    raise UserError(f"{path}: the record of Slurm submissions is unreadable ({e}). Restore it from a backup; the ledger "
                    f"and result files beside it are intact.") from None


def task_info() -> dict:
  """What the ledger records about the Slurm task a run ran in (empty outside Slurm)."""
  if "SLURM_JOB_ID" not in os.environ: return {}
  job, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
  info = {"job": f"{job}_{index}" if job and index else os.environ["SLURM_JOB_ID"],
          "node": os.environ.get("SLURMD_NODENAME", socket.gethostname())}
  for key, env in (("runtime", TASK_RUNTIME_ENV), ("image", "TINYPERF_SLURM_IMAGE")):
    if os.environ.get(env): info[key] = os.environ[env]
  restart = os.environ.get("SLURM_RESTART_COUNT", "")   # Slurm sets it in a requeued task: absent, the first attempt
  if restart.isdigit() and int(restart) > 0: info["restart"] = int(restart)
  return info


def task_restarts(out: Path) -> list[int]:
  """The restart counts of the attempts whose start line a task's output holds (an output file is appended to)."""
  try:
    with open(out, errors="replace") as f: return [int(m[1]) for line in f if (m := TASK_START_RE.match(line))]
  except OSError: return []


def resume_command(results: Path) -> str:
  return f"tinyperf status --results {shlex.quote(str(results))} --resume"


def in_array_task() -> bool:
  """Whether this process is an array task's `tinyperf run ... --only-index` (the script exports TASK_RUNTIME_ENV)."""
  return bool(os.environ.get(TASK_RUNTIME_ENV)) and "SLURM_ARRAY_TASK_ID" in os.environ


def queued_indices(rec: dict, tasks: dict) -> dict[int, str]:
  """Run index -> '<job>_<index>' for the runs of this record that Slurm has queued or running."""
  ours = {str(j["job_id"]) for j in rec["jobs"]}
  return {i: f"{job}_{i}" for (job, i), (state, _) in tasks.items() if job in ours and state in QUEUED | RUNNING}


def refuse_if_queued(rs: T.ResultSet):
  """A local `tinyperf run` would redo runs a Slurm job of the same result set still has queued or running."""
  work_root = rs.runs_dir
  if kept := kept_scripts(work_root):
    raise UserError(f"{kept[0]} is the script of a Slurm submission of this result set that was stopped while sbatch "
                    f"ran: Slurm may have queued a job from it that no record names, and running its runs here too "
                    f"would do them twice. Rerun that `tinyperf run ... --scheduler slurm` command, which records the "
                    f"job (or removes the script if Slurm has none), then rerun here; or, if no job was queued from it "
                    f"(`squeue --me --format='%i %T %o'` lists none whose command is that file), remove it. Nothing "
                    f"was run.")
  rec = load_record(work_root)
  if not rec["jobs"]: return
  if not shutil.which("squeue"):
    print(f"WARNING: {record_path(work_root)} lists Slurm jobs but squeue is not on PATH: cannot tell whether they still "
          f"run; make sure they do not (scancel) before running the same runs here.", file=sys.stderr)
    return
  active = queued_indices(rec, queue(rec["jobs"][-1]["job_name"]))
  if active:
    raise UserError(f"runs {sorted(active)} of this result set are queued or running in Slurm "
                    f"({', '.join(active.values())}); running them here too would do them twice. Wait for them "
                    f"(`tinyperf status --results {shlex.quote(str(rs.root))} --wait`) or cancel them (scancel), then rerun. "
                    f"Nothing was run.")


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
          f"  {IMAGE_PYTHON} -m tooling.cli {tinyperf} || rc=$?"]
  else:
    # the same checkout and Python that submitted: both must be at the same path on the nodes (a shared filesystem)
    s += [f"cd {q(spec['repo'])} || exit 2",
          f"{q(spec['python'])} -m tooling.cli {tinyperf} || rc=$?"]
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


# ----------------------------------------------------------------------------------------------------- submitting
def _check_path_chars(path: str, runtime: str):
  # #SBATCH lines are not shell-quoted, --output expands %, pyxis mounts split on ',' and ':'
  bad = set(path) & set(" \t\n%\"'" + (",:" if runtime == "pyxis" else ""))
  if bad:
    why = "#SBATCH lines are not quoted, --output expands %" + (", pyxis mounts split on , and :" if runtime == "pyxis" else "")
    raise UserError(f"{path} contains {' '.join(repr(c) for c in sorted(bad))}, which an sbatch script cannot carry "
                    f"there ({why}); use a path without them. Nothing was submitted.")


def submit(cfg: PlatformConfig, rs: T.ResultSet, args, nexp: int, runtime: str, org: str) -> int:
  """`tinyperf run --scheduler slurm` (its flags already checked together by tooling/launch/run.py launch_mode): check what can
  be checked here, then submit the runs not yet done or queued. runtime: one of backends.RUNTIMES."""
  stop_on_signals()   # SIGTERM/SIGHUP as Ctrl-C: cleanup before sbatch, the "may be queued" message after it
  spec = {"benchmark": cfg.benchmark, "platform": cfg.platform, "nexp": nexp, "data": str(args.data.resolve()),
          "results": str(rs.root), "runtime": runtime, "image": args.image, "partition": args.partition,
          "sbatch_args": list(args.sbatch_arg), "no_check": bool(args.no_check), "assume_shared": bool(args.assume_shared),
          "system_overrides": str(args.system_overrides.resolve()) if getattr(args, "system_overrides", None) else None,
          "knobs": {k: str(new) for k, (_, new) in cfg.overridden.items()}, "python": sys.executable, "repo": str(ROOT),
          "org": org}   # the submitter run.submitter() settled on: each task records it
  return _check_and_submit(cfg, spec)


class MaybeSubmitted(UserError):
  """sbatch has (or may have) queued a job, but the submission could not be finished (its answer is not a job id, it
  did not answer, the record could not be written): nothing is cleaned up, the job's tasks write there."""


class NoAnswer(UserError):
  """A Slurm command did not answer in time: unlike a refusal, it may have done what it was asked."""


class SubmitInterrupted(KeyboardInterrupt):
  """Ctrl-C (or SIGTERM/SIGHUP where stop_on_signals makes them one) once sbatch was started: the job may be queued, so
  nothing is removed, and the message says how to find, follow or cancel it (tooling/cli.py prints it, exit 130)."""


@contextlib.contextmanager
def _signals_held():
  """Ctrl-C, SIGTERM and SIGHUP that arrive inside the block are acted on when it ends (raised again, to the handlers
  there were): for bookkeeping of milliseconds that must not be cut in half. Only the main thread sets handlers."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  got = []
  old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
  old = {sig: h for sig, h in old.items() if h is not None}   # None: a handler set outside Python, left alone
  for sig in old: signal.signal(sig, lambda signum, frame: got.append(signum))
  try: yield
  finally:
    for sig, h in old.items(): signal.signal(sig, h)
    for sig in dict.fromkeys(got): signal.raise_signal(sig)


def _absent(paths: list[Path]) -> list[Path]:
  """Those of paths and their ancestors that do not exist yet, deepest first."""
  return sorted({a for p in paths for a in (p, *p.parents) if not os.path.lexists(a)}, key=lambda p: -len(p.parts))


def _check_and_submit(cfg: PlatformConfig, spec: dict) -> int:
  """A submission that ends without queuing a job leaves --results as it found it, whatever ends it (bad input, a full
  disk, Ctrl-C, a bug): it removes what this call created there, and only that, and the failure goes on unchanged.
  Once sbatch may have queued the job (MaybeSubmitted, SubmitInterrupted) nothing is removed: its tasks write there."""
  rs = T.ResultSet.of(Path(spec["results"]), cfg)   # R as the submission (or its record, for --resume) gives it
  new = _absent([rs.results_dir, T.slurm_dir(rs.runs_dir), rs.runs_dir / SUBMIT_LOCK, L.Ledger.lock_path(rs.ledger)])
  try:
    _check_before_submitting(cfg, rs, spec)
    return submit_runs(cfg, rs, spec)
  except (MaybeSubmitted, SubmitInterrupted): raise
  except BaseException:
    _remove(new)
    raise


def _remove(paths: list[Path]):
  """Remove what a failed submission made, deepest first: a directory only when empty (what another process put there
  meanwhile stays); never raises, so the failure that got here is the one reported."""
  for p in paths:
    try: p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()
    except OSError: pass


# options render_script sets that the bookkeeping relies on: a later #SBATCH line would override them (long name, short)
OWN_OPTIONS = {"job-name": ("J", "`tinyperf status` finds the set's tasks in squeue by the job name"),
               "array": ("a", "the array holds one task per run not yet finished, as the ledger says"),
               "output": ("o", "`tinyperf status` reads each task's output from slurm/submission_<k>/job_<id>_<i>.out"),
               "error": ("e", "`tinyperf status` reads each task's errors from slurm/submission_<k>/job_<id>_<i>.out"),
               "open-mode": (None, "a task Slurm requeues appends its output to what its earlier attempts wrote"),
               "partition": ("p", "pass the partition as tinyperf's own --partition, which is checked and recorded")}


def _check_sbatch_arg(a: str):
  if not a.startswith("-") or "\n" in a or re.search(r"\s--?[A-Za-z]", a):
    raise UserError(f"--sbatch-arg {a!r}: give one sbatch option per --sbatch-arg, e.g. --sbatch-arg=--account=mlperf "
                    f"--sbatch-arg=--qos=high. Nothing was submitted.")
  name = re.split(r"[=\s]", a[2:], maxsplit=1)[0] if a.startswith("--") else None
  for long, (short, why) in OWN_OPTIONS.items():
    # sbatch takes any unambiguous prefix of a long option (--job=x), and a short one with its value attached (-Jx)
    if (name and len(name) >= 2 and long.startswith(name)) or (not name and short and a[1:2] == short):
      raise UserError(f"--sbatch-arg {a!r}: tinyperf sets --{long} itself and must keep it: {why}. Drop this "
                      f"--sbatch-arg. Nothing was submitted.")


def _check_before_submitting(cfg: PlatformConfig, rs: T.ResultSet, spec: dict):
  """Everything that can be checked from here, in the order a person would fix it; sets spec's partition."""
  for a in spec["sbatch_args"]: _check_sbatch_arg(a)   # each is written as one option (sbatch_quote)
  for tool in ("sbatch", "squeue", "sinfo"): require(tool, "Nothing was submitted.")
  spec["partition"] = check_partition(spec["partition"])
  for p in (spec["results"], spec["data"]): _check_path_chars(p, spec["runtime"])
  check_prepared(cfg, Path(spec["data"]), "Nothing was submitted.")
  check_shared(rs.root, spec["partition"], spec["assume_shared"])  # before anything is created there
  T.ensure_writable(rs.root)


def _claim_files_dir(work_root: Path, k: int) -> Path:
  """slurm/submission_<k>, made here: the first number from k on whose directory does not exist yet (mkdir is atomic,
  on NFS too). Never an existing one: a job whose id Slurm handed out before must not write over that job's files."""
  while True:
    d = T.slurm_files_dir(work_root, T.SLURM_SUBMISSION.format(k))
    try:
      d.mkdir()
      return d
    except FileExistsError:
      k += 1
    except OSError as e:
      raise UserError(f"cannot create {d} ({e.strerror}); choose a writable --results directory. Nothing was "
                      f"submitted.") from None


def kept_scripts(work_root: Path) -> list[Path]:
  """Scripts kept by submissions that were stopped once sbatch was started (SubmitInterrupted, MaybeSubmitted, or
  killed): Slurm may have queued a job from each, which no record names."""
  return sorted(T.slurm_dir(work_root).glob(f"{T.SLURM_SUBMISSION.format('*')}/{UNSUBMITTED.format('*')}"))


def _record_job(rec: dict, work_root: Path, sbatched: Path, job: dict) -> None:
  """A queued job into the record (once), then its script from the name sbatch was given to job["script"]: in that
  order, because until the record holds the job, that first name (squeue's %o) is what finds it again (adopt_kept)."""
  if not any(str(j["job_id"]) == job["job_id"] and j.get("files") == job["files"] for j in rec["jobs"]):
    rec["jobs"].append(job)
  write_atomic(record_path(work_root), json.dumps(rec, indent=1), overwrite=True)
  os.replace(sbatched, job["script"])


def adopt_kept(rec: dict, work_root: Path, spec: dict) -> None:
  """Under the submit lock (so no kept script is one a live submitter is still handing to sbatch): record the job
  Slurm queued from each kept script, as if sbatch had answered, or remove a script no job runs. squeue's %o is the
  path sbatch was given (an absolute one, unique to its submission). spec: this submission's, recorded with an adopted
  job (the interrupted one's is not kept; a rerun is the same command)."""
  kept = kept_scripts(work_root)
  if not kept: return
  try:   # --states=all: a job that has ended within MinJobAge is recorded too, so status can say how its tasks ended
    out = _slurm("squeue", "--me", "--noheader", "--states=all", "--format=%F|%T|%o")
  except UserError as e:
    raise UserError(f"{kept[0]} is the script of an earlier submission that was stopped while sbatch ran: Slurm may "
                    f"have queued a job from it that tinyperf has no record of, and squeue could not say ({e}). "
                    f"Submitting these runs now could run them twice. Make `squeue --me` work here and rerun; or, if "
                    f"no job was queued from it (`squeue --me --format='%i %T %o'` lists none whose command is that "
                    f"file), remove {' and '.join(map(str, kept))} and rerun. Nothing was submitted.") from None
  jobs: dict[str, dict[str, set]] = {}   # command -> job id -> states (an array's tasks can be in several)
  for line in out.splitlines():
    job, state, cmd = (line.strip().split("|", 2) + ["", ""])[:3]
    if job.isdigit(): jobs.setdefault(cmd, {}).setdefault(job, set()).add(state)
  for path in kept:
    found = jobs.get(str(path), {})
    if not found:   # never queued, or ended so long ago that squeue forgot it (its runs are in the ledger)
      _remove([path, path.parent])   # the directory only when empty: a job that ran left its tasks' output there
      print(f"{path}: no Slurm job runs this script of an earlier, interrupted submission (squeue); removed it")
      continue
    if len(found) > 1:
      raise UserError(f"Slurm jobs {', '.join(sorted(found))} all run {path}, the script of an earlier, interrupted "
                      f"submission (submitted again by hand?): their runs would be done twice. Cancel all but one "
                      f"(`scancel <job id>`) and rerun. Nothing was submitted.")
    (job_id, states), = found.items()
    text = path.read_text(errors="replace")
    array = re.search(r"^#SBATCH --array=(\S+)$", text, re.M)
    name = re.search(r"^#SBATCH --job-name=(\S+)$", text, re.M)
    indices = array_indices(array[1] if array else "")
    if not (indices and name) or indices[-1] >= spec["nexp"]:
      raise UserError(f"Slurm job {job_id} runs {path}, the script of an earlier, interrupted submission, whose runs "
                      f"({array[1] if array else 'no --array line'}) are not runs 0 to {spec['nexp'] - 1} of this "
                      f"command: rerun the command of that submission (its --nexp), or cancel the job (`scancel "
                      f"{job_id}`) and rerun. Nothing was submitted.")
    script = path.parent / T.slurm_script_name(job_id)
    with _signals_held():   # the record and the script's name change together, as after sbatch's answer
      try:
        _record_job(rec, work_root, path, {"job_id": job_id, "job_name": name[1], "indices": indices,
                                           "files": path.parent.name, "script": str(script),
                                           "submitted": path.stat().st_mtime, "spec": spec, "adopted": time.time()})
      except OSError as e:
        raise UserError(f"Slurm job {job_id} runs {path}, the script of an earlier, interrupted submission, but "
                        f"{e.filename or record_path(work_root)} could not be written ({e.strerror}) to record it. "
                        f"Free space on that filesystem and rerun. Nothing was submitted.") from None
    print(f"{spec['benchmark']} on {spec['platform']}: adopted Slurm job {job_id} (runs {indices}, "
          f"{', '.join(sorted(states))}), which an earlier submission stopped while sbatch ran had queued; its runs "
          f"are not submitted again. script: {script}", flush=True)


def submit_runs(cfg: PlatformConfig, rs: T.ResultSet, spec: dict) -> int:
  """Write the script for the runs that are neither finished nor queued/running, sbatch it, record the job."""
  from tooling.common.provenance import git_revision
  results_dir, work_root = rs.results_dir, rs.runs_dir
  slurm_dir = T.slurm_dir(work_root)
  try:
    results_dir.mkdir(parents=True, exist_ok=True); slurm_dir.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UserError(f"cannot create {slurm_dir} ({e.strerror}); choose a writable --results directory.") from None
  ledger_path, nexp = rs.ledger, spec["nexp"]
  job_name = f"tinyperf-{cfg.benchmark}-{cfg.platform}"
  with L.file_lock(work_root / SUBMIT_LOCK):
    rec = load_record(work_root)
    adopt_kept(rec, work_root, spec)   # before `active`: the runs of a job Slurm queued unrecorded are not submitted twice
    active = queued_indices(rec, queue(job_name)) if rec["jobs"] else {}
    with L.Ledger.locked(ledger_path) as led: unfinished = led.pending(nexp)
    todo = [i for i in unfinished if i not in active]
    T.refuse_unknown_results(results_dir, ledger_path, todo)
    if not todo:
      print(f"{cfg.benchmark} on {cfg.platform}: nothing to submit: {nexp - len(unfinished)} of {nexp} runs finished"
            + (f", runs {sorted(active)} queued or running ({', '.join(active.values())})" if active else ""))
      return 0
    when = time.time()
    files_dir = _claim_files_dir(work_root, len(rec["jobs"]) + 1)
    token = f"{socket.gethostname()}-{os.getpid()}-{int(when)}"
    tmp = files_dir / UNSUBMITTED.format(token)
    try:   # until sbatch is asked, whatever fails removes the submission's directory (the caller removes the rest)
      text = render_script(cfg, spec, todo, files_dir, git_revision(), when, token)
      try:
        write_atomic(tmp, text, overwrite=True)
      except OSError as e:
        raise UserError(f"cannot write the job script into {files_dir.parent} ({e.strerror}); free space on that "
                        f"filesystem or choose a writable --results directory, and rerun. Nothing was submitted.") from None
    except BaseException:
      _remove([tmp, files_dir])
      raise
    script = job_id = None; recorded = False   # until sbatch has answered with an id; until the record holds the job
    try:   # from here on the job may be queued: whatever stops the submission removes nothing
      try:
        out = _slurm("sbatch", "--parsable", str(tmp), shown=f"sbatch --parsable <script for runs {todo}>")
      except NoAnswer as e:
        raise MaybeSubmitted(f"{e} The job may be queued: `squeue --me --name={job_name} --format='%i %T %o'` lists "
                             f"it, its command {tmp}. Rerunning the same command records that job, or submits the "
                             f"runs if Slurm has none from that script.") from None
      except UserError as e:   # sbatch refused: nothing is queued
        _remove([tmp, files_dir])
        asked = " ".join(l.split(" ", 1)[1] for l in text.splitlines()
                         if l.startswith("#SBATCH ") and not l.startswith(("#SBATCH --job-name=", "#SBATCH --output=",
                                                                            "#SBATCH --open-mode=")))
        raise UserError(f"sbatch refused the job: {e}. The job asked for {asked} (GPUs and time from the platform's "
                        f"config, the rest from --partition and --sbatch-arg). Change --partition or --sbatch-arg and "
                        f"rerun `tinyperf run ... --scheduler slurm`"
                        + ("; `tinyperf status --resume` resubmits the last submission's arguments unchanged"
                           if rec["jobs"] else "") + ". Nothing was submitted.") from None
      with _signals_held():   # the job is queued: its record is written whole before a Ctrl-C is acted on
        answer = out.strip().split(";")[0]  # --parsable prints "<id>" or "<id>;<cluster>"
        if not answer.isdigit():
          raise MaybeSubmitted(f"sbatch printed {out.strip()!r}, not a job id: the job may be queued. Rerunning the "
                               f"same command records the job squeue lists with the command {tmp}, or submits the "
                               f"runs if there is none.")
        job_id, script = answer, files_dir / T.slurm_script_name(answer)   # the directory is this job's alone
        try:
          _record_job(rec, work_root, tmp, {"job_id": job_id, "job_name": job_name, "indices": todo,
                                            "files": files_dir.name, "script": str(script), "submitted": when,
                                            "spec": spec})
        except OSError as e:
          raise MaybeSubmitted(f"Slurm job {job_id} is queued (runs {todo}), but {e.filename or record_path(work_root)} "
                               f"could not be written ({e.strerror}): `tinyperf status` and --resume may not know the "
                               f"job. Free space on that filesystem and rerun the same command: it finds the job by its "
                               f"script {tmp} (kept) and records it instead of submitting runs {todo} again. Or cancel "
                               f"it (`scancel {job_id}`).") from None
        recorded = True
    except KeyboardInterrupt as e:   # Ctrl-C, or SIGTERM/SIGHUP (stop_on_signals says which)
      raise SubmitInterrupted(_interrupted(str(e) or "interrupted", job_name, todo, spec["results"], files_dir, tmp,
                                           job_id, script, recorded)) from None
  skipped = f"; {nexp - len(unfinished)} finished" + (f", {sorted(active)} already queued" if active else "")
  print(f"{cfg.benchmark} on {cfg.platform}: submitted Slurm job {job_id}, runs {todo} of {nexp} "
        f"({spec['runtime']} runtime, partition {spec['partition']}){skipped}\n"
        f"  script: {script}\n  follow: tinyperf status --results {spec['results']}  (--wait blocks until they end)",
        flush=True)
  return 0


def _interrupted(why: str, job_name: str, todo: list[int], results: str, files_dir: Path, tmp: Path,
                 job_id: str | None, script: Path | None, recorded: bool) -> str:
  """What a submission stopped once sbatch was started says: whether the job is queued and known, and what to do."""
  if recorded:
    return (f"{why} after sbatch queued Slurm job {job_id} (runs {todo}). The job is recorded and runs as submitted: "
            f"`tinyperf status --results {shlex.quote(results)}` follows it, `scancel {job_id}` cancels it. Its script "
            f"is {script}.")
  kept = f"its script {script if script and script.exists() else tmp} is kept, with the folder its tasks write to"
  if job_id is not None:
    return (f"{why} after sbatch queued Slurm job {job_id} (runs {todo}), before tinyperf recorded it: `tinyperf "
            f"status` and --resume do not know it. Cancel it (`scancel {job_id}`) and submit again; {kept}.")
  return (f"{why} while sbatch was submitting the job for runs {todo}: Slurm may have queued it, but tinyperf has no "
          f"job id for it and has not recorded it, so `tinyperf status` and --resume do not know it yet. Rerun the "
          f"same command: it looks in squeue for a job whose command is {tmp} (the script, kept with the folder its "
          f"tasks write to) and records that job instead of submitting runs {todo} again, or, if Slurm never queued "
          f"it, removes the script and submits them. `squeue --me --name={job_name} --format='%i %T %o'` lists it "
          f"meanwhile; `scancel <job id>` cancels it.")


def resubmit(work_root: Path) -> int:
  """`tinyperf status --resume`: the last submission's arguments again, for the runs that failed or were never submitted."""
  rec = load_record(work_root)
  spec = dict(rec["jobs"][-1]["spec"])
  cfg = load_config(spec["benchmark"], spec["platform"], environ=spec["knobs"])  # the recorded knobs, not this shell's
  return _check_and_submit(cfg, spec)


class Slurm:
  """--scheduler slurm: an array job, one task per run; a task's unfinished runs are redone by resubmitting them."""
  name = "slurm"

  def submit(self, cfg: PlatformConfig, rs: T.ResultSet, args, nexp: int, runtime: str, overrides: dict, org: str) -> int:
    return submit(cfg, rs, args, nexp, runtime, org)   # each task reads the overrides file itself

  def redo_hint(self, results: Path) -> str:
    return f"run `{resume_command(results)}`"   # a task's own command (`tinyperf run ... --only-index`) is typed by no one

  def overrides_hint(self, results: Path, overrides: Path | None) -> str:
    """`status --resume` resubmits the last submission's arguments: with a --system-overrides file there, editing it is
    enough (every task reads it); without one, only a new submission with the file added carries it to the tasks."""
    if overrides is not None:
      return f"fix them in {overrides} (the --system-overrides file: {OVERRIDES_FILE}) and {self.redo_hint(results)}"
    return (f"give them in a file ({OVERRIDES_FILE}) on a path every node sees and submit the runs again with it: your "
            f"`tinyperf run ... --scheduler slurm` command with `--system-overrides FILE` added")


SLURM = Slurm()
