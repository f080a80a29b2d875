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
recorded) and the last attempt's .exit file (tooling/launch/status.py puts them together).
This module submits; beside it slurm_cluster.py asks the cluster (sinfo, squeue, the nodes' view of --results),
slurm_script.py writes the sbatch script and slurm_record.py reads and writes slurm.json."""
from __future__ import annotations
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from tinyperf.benchmarks.common.config import ROOT, PlatformConfig
from tinyperf.benchmarks.registry import load_config
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common.dataset import check_prepared
from tinyperf.tooling.launch import slurm_cluster, slurm_record, slurm_script
from tinyperf.tooling.launch.scheduler import OVERRIDES_FILE
from tinyperf.tooling.common.errors import UserError, stop_on_signals, write_atomic

SUBMIT_LOCK = "slurm.lock"   # beside the ledger: two submitters of one result set never both submit a run


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


def task_info() -> dict:
  """What the ledger records about the Slurm task a run ran in (empty outside Slurm)."""
  if "SLURM_JOB_ID" not in os.environ: return {}
  job, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
  info = {"job": f"{job}_{index}" if job and index else os.environ["SLURM_JOB_ID"],
          "node": os.environ.get("SLURMD_NODENAME", socket.gethostname())}
  for key, env in (("runtime", slurm_script.TASK_RUNTIME_ENV), ("image", "TINYPERF_SLURM_IMAGE")):
    if os.environ.get(env): info[key] = os.environ[env]
  restart = os.environ.get("SLURM_RESTART_COUNT", "")   # Slurm sets it in a requeued task: absent, the first attempt
  if restart.isdigit() and int(restart) > 0: info["restart"] = int(restart)
  return info


def resume_command(results: Path) -> str:
  return f"tinyperf status --results {shlex.quote(str(results))} --resume"


def in_array_task() -> bool:
  """Whether this process is an array task's `tinyperf run ... --only-index` (its script exports TASK_RUNTIME_ENV)."""
  return bool(os.environ.get(slurm_script.TASK_RUNTIME_ENV)) and "SLURM_ARRAY_TASK_ID" in os.environ


def refuse_if_queued(rs: T.ResultSet):
  """A local `tinyperf run` would redo runs a Slurm job of the same result set still has queued or running."""
  work_root = rs.runs_dir
  if kept := slurm_record.kept_scripts(work_root):
    raise UserError(f"{kept[0]} is the script of a Slurm submission stopped while sbatch ran, whose job may be queued "
                    f"unrecorded; nothing was run. Rerun that `tinyperf run ... --scheduler slurm` command (it records "
                    f"the job or removes the script), then rerun here; or remove the script if `squeue --me "
                    f"--format='%i %T %o'` lists no job running it.")
  rec = slurm_record.load_record(work_root)
  if not rec["jobs"]: return
  if not shutil.which("squeue"):
    print(f"WARNING: {slurm_record.record_path(work_root)} lists Slurm jobs but squeue is not on PATH: cannot tell "
          f"whether they still run; make sure they do not (scancel) before running the same runs here.", file=sys.stderr)
    return
  active = slurm_record.queued_indices(rec, slurm_cluster.queue(rec["jobs"][-1]["job_name"]))
  if active:
    raise UserError(f"runs {sorted(active)} of this result set are queued or running in Slurm "
                    f"({', '.join(active.values())}); nothing was run, as they would be done twice. Wait for them "
                    f"(`tinyperf status --results {shlex.quote(str(rs.root))} --wait`) or cancel them (scancel), then "
                    f"rerun.")


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


def _check_before_submitting(cfg: PlatformConfig, rs: T.ResultSet, spec: dict):
  """Everything that can be checked from here, in the order a person would fix it; sets spec's partition."""
  for a in spec["sbatch_args"]: slurm_script.check_sbatch_arg(a)   # each is written as one option (sbatch_quote)
  for tool in ("sbatch", "squeue", "sinfo"): slurm_cluster.require(tool, "Nothing was submitted.")
  spec["partition"] = slurm_cluster.check_partition(spec["partition"])
  for p in (spec["results"], spec["data"]): slurm_script.check_path_chars(p, spec["runtime"])
  check_prepared(cfg, Path(spec["data"]), "Nothing was submitted.")
  slurm_cluster.check_shared(rs.root, spec["partition"], spec["assume_shared"])  # before anything is created there
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


def adopt_kept(rec: dict, work_root: Path, spec: dict) -> None:
  """Under the submit lock (so no kept script is one a live submitter is still handing to sbatch): record the job
  Slurm queued from each kept script, as if sbatch had answered, or remove a script no job runs. squeue's %o is the
  path sbatch was given (an absolute one, unique to its submission). spec: this submission's, recorded with an adopted
  job (the interrupted one's is not kept; a rerun is the same command)."""
  kept = slurm_record.kept_scripts(work_root)
  if not kept: return
  try:   # --states=all: a job that has ended within MinJobAge is recorded too, so status can say how its tasks ended
    out = slurm_cluster.slurm_command("squeue", "--me", "--noheader", "--states=all", "--format=%F|%T|%o")
  except UserError as e:
    raise UserError(f"{kept[0]} is the script of an earlier submission stopped while sbatch ran, whose job may be "
                    f"queued unrecorded, and squeue could not say ({e}); nothing was submitted. Make `squeue --me` work "
                    f"here and rerun; or, if no job runs it, remove {' and '.join(map(str, kept))} and rerun.") from None
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
                      f"submission, so their runs would be done twice; nothing was submitted. Cancel all but one "
                      f"(`scancel <job id>`) and rerun.")
    (job_id, states), = found.items()
    text = path.read_text(errors="replace")
    array = re.search(r"^#SBATCH --array=(\S+)$", text, re.M)
    name = re.search(r"^#SBATCH --job-name=(\S+)$", text, re.M)
    indices = slurm_script.array_indices(array[1] if array else "")
    if not (indices and name) or indices[-1] >= spec["nexp"]:
      raise UserError(f"Slurm job {job_id} runs {path}, the script of an earlier, interrupted submission, whose runs "
                      f"({array[1] if array else 'no --array line'}) are not runs 0 to {spec['nexp'] - 1} of this "
                      f"command: rerun the command of that submission (its --nexp), or cancel the job (`scancel "
                      f"{job_id}`) and rerun. Nothing was submitted.")
    script = path.parent / T.slurm_script_name(job_id)
    with _signals_held():   # the record and the script's name change together, as after sbatch's answer
      try:
        slurm_record.record_job(rec, work_root, path, {"job_id": job_id, "job_name": name[1], "indices": indices,
                                           "files": path.parent.name, "script": str(script),
                                           "submitted": path.stat().st_mtime, "spec": spec, "adopted": time.time()})
      except OSError as e:
        raise UserError(f"Slurm job {job_id} runs {path}, the script of an earlier, interrupted submission, but "
                        f"{e.filename or slurm_record.record_path(work_root)} could not be written ({e.strerror}) to "
                        f"record it; nothing was submitted. Free space on that filesystem and rerun.") from None
    print(f"{spec['benchmark']} on {spec['platform']}: adopted Slurm job {job_id} (runs {indices}, "
          f"{', '.join(sorted(states))}), which an earlier submission stopped while sbatch ran had queued; its runs "
          f"are not submitted again. script: {script}", flush=True)


def submit_runs(cfg: PlatformConfig, rs: T.ResultSet, spec: dict) -> int:
  """Write the script for the runs that are neither finished nor queued/running, sbatch it, record the job."""
  from tinyperf.tooling.common.provenance import git_revision
  results_dir, work_root = rs.results_dir, rs.runs_dir
  slurm_dir = T.slurm_dir(work_root)
  try:
    results_dir.mkdir(parents=True, exist_ok=True); slurm_dir.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UserError(f"cannot create {slurm_dir} ({e.strerror}); choose a writable --results directory.") from None
  ledger_path, nexp = rs.ledger, spec["nexp"]
  job_name = f"tinyperf-{cfg.benchmark}-{cfg.platform}"
  with L.file_lock(work_root / SUBMIT_LOCK):
    rec = slurm_record.load_record(work_root)
    adopt_kept(rec, work_root, spec)   # before `active`: the runs of a job Slurm queued unrecorded are not submitted twice
    active = slurm_record.queued_indices(rec, slurm_cluster.queue(job_name)) if rec["jobs"] else {}
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
    tmp = files_dir / slurm_record.UNSUBMITTED.format(token)
    try:   # until sbatch is asked, whatever fails removes the submission's directory (the caller removes the rest)
      text = slurm_script.render_script(cfg, spec, todo, files_dir, git_revision(), when, token)
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
        out = slurm_cluster.slurm_command("sbatch", "--parsable", str(tmp),
                                          shown=f"sbatch --parsable <script for runs {todo}>")
      except slurm_cluster.NoAnswer as e:
        raise MaybeSubmitted(f"{e} The job may be queued: `squeue --me --name={job_name} --format='%i %T %o'` lists "
                             f"it, its command {tmp}. Rerunning the same command records that job, or submits the "
                             f"runs if Slurm has none from that script.") from None
      except UserError as e:   # sbatch refused: nothing is queued
        _remove([tmp, files_dir])
        asked = " ".join(l.split(" ", 1)[1] for l in text.splitlines()
                         if l.startswith("#SBATCH ") and not l.startswith(("#SBATCH --job-name=", "#SBATCH --output=",
                                                                            "#SBATCH --open-mode=")))
        raise UserError(f"sbatch refused the job asking for {asked}: {e} (nothing was submitted). Change --partition "
                        f"or --sbatch-arg and rerun `tinyperf run ... --scheduler slurm`"
                        + (" (`tinyperf status --resume` resubmits the last submission's arguments unchanged)"
                           if rec["jobs"] else "") + ".") from None
      with _signals_held():   # the job is queued: its record is written whole before a Ctrl-C is acted on
        answer = out.strip().split(";")[0]  # --parsable prints "<id>" or "<id>;<cluster>"
        if not answer.isdigit():
          raise MaybeSubmitted(f"sbatch printed {out.strip()!r}, not a job id: the job may be queued. Rerunning the "
                               f"same command records the job squeue lists with the command {tmp}, or submits the "
                               f"runs if there is none.")
        job_id, script = answer, files_dir / T.slurm_script_name(answer)   # the directory is this job's alone
        try:
          slurm_record.record_job(rec, work_root, tmp, {"job_id": job_id, "job_name": job_name, "indices": todo,
                                            "files": files_dir.name, "script": str(script), "submitted": when,
                                            "spec": spec})
        except OSError as e:
          raise MaybeSubmitted(f"Slurm job {job_id} is queued (runs {todo}), but "
                               f"{e.filename or slurm_record.record_path(work_root)} could not be written "
                               f"({e.strerror}) to record it. Free space on that filesystem and rerun the same command, "
                               f"which records the job by its kept script {tmp}; or cancel it (`scancel {job_id}`).") from None
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
  rec = slurm_record.load_record(work_root)
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
