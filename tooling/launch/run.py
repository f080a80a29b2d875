"""`tinyperf run BENCHMARK --platform P --nexp N`: N seeded INIT+RUN runs, each checked, recorded in a resumable ledger.

It writes the tree under --results R that tooling/common/results_tree.py lays out: result_<i>.txt of finished runs, the ledger
of every attempt, each attempt's work directory, and R/systems/<system>.json, the machine the runs ran on
(tooling/launch/sysinfo.py: detected where the runs run, over the repository's systems/<system>.json, under --system-overrides).
Two choices say where the runs run:
  --scheduler  local (default): here, one run after the other, by the run loop below; slurm: one Slurm array job
               (tooling/launch/slurm.py) whose tasks each run this verb with --only-index, on their own node.
  --runtime    docker (default): one container per run in the platform's image; host: this Python on this machine
               (also what a compose service runs inside its image); pyxis (Slurm only): srun --container-image.
The run loop knows one interface, tooling/launch/backends.py's Backend (preflight, system detection, page-cache drop,
INIT + RUN); it never imports tinygrad or training code: the training entrypoint is started as a process.
Each run's config is resolved here, once, when the run is claimed: config.yaml, the environment's overrides and the
submitter go into the run folder's config.json, which the run's trainer reads (and nothing else); the one preflight of
a launcher, before it claims a run, reads the same resolution written for it.

Launchers on one --results share the work: each claims a run in the ledger before starting it (tooling/common/ledger.py), skips
runs another live launcher has claimed, and settles the attempts of launchers that died (docs/ledger.md)."""
from __future__ import annotations
import argparse
import os
import re
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tinyperf.benchmarks.common.config import available_platforms, PlatformConfig, require_closed_model, write_resolved
from tinyperf.benchmarks.registry import BENCHMARKS, load_config
from tinyperf.benchmarks.common.io import file_digest
from tinyperf.benchmarks.common.rules import SEED_BITS, draw_seed, required_runs
from tinyperf.tooling.common.container import SERVICE_ENV, compose_run, host_path
from tinyperf.tooling.common.errors import UserError, stop_on_signals, write_atomic
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common import safe_read
from tinyperf.tooling.common.dataset import check_prepared, stand_in_data
from tinyperf.tooling.launch import slurm
from tinyperf.tooling.launch.backends import RUNTIMES
from tinyperf.tooling.launch.scheduler import OVERRIDES_FILE, Scheduler
if TYPE_CHECKING:
  from tinyperf.benchmarks.common.rundir import RunDir
  from tinyperf.tooling.launch.backends import Backend



def add_arguments(p: argparse.ArgumentParser):
  p.add_argument("benchmark", choices=BENCHMARKS)
  p.add_argument("--platform", required=True, help="implementation name (benchmarks/<bm>/implementations/<platform>): "
                 + "; ".join(f"{b}: {', '.join(available_platforms(b))}" for b in BENCHMARKS))
  p.add_argument("--nexp", type=int, help="number of runs (default: as many as MLPerf requires, "
                 + ", ".join(f"{b} {required_runs(b)}" for b in BENCHMARKS) + ")")
  p.add_argument("--data", type=Path, required=True, help="prepared dataset directory (tinyperf prep ...)")
  p.add_argument("--results", type=Path, default=Path("out"), help="output root (default: ./out)")
  p.add_argument("--image", help="image to run in (default tinyperf:<vendor of the platform>, as `tinyperf build` tags it)")
  p.add_argument("--no-check", action="store_true", help="skip `tinyperf check` after each run")
  p.add_argument("-v", "--verbose", action="store_true",
                 help="show each run's whole output (MLLOG lines, progress bars) instead of one line per phase and "
                      "milestone; it always goes to R/runs/<system>/<bm>/run_<i>_<seed>/output.log")
  p.add_argument("--scheduler", choices=tuple(SCHEDULERS),
                 help="local: run here, one run after the other (default); slurm: submit an sbatch array job, one task "
                      "(node) per run, and return (tinyperf status follows it)")
  p.add_argument("--runtime", choices=RUNTIMES,
                 help="what runs each run: docker: the platform's image, one container per run (default); host: this "
                      "Python on this machine (on each node with --scheduler slurm: the same checkout and venv path); "
                      "pyxis (--scheduler slurm only): srun --container-image=IMAGE, needs --image (a registry "
                      "reference or a .sqsh file)")
  p.add_argument("--only-index", type=int, metavar="I",
                 help="do only run I of the N (what each Slurm array task runs); skipped if already finished")
  slurm.add_run_arguments(p)
  p.add_argument("--org", type=_org, help="submitter name the logs and R/systems/<system>.json record (submission_org); "
                 "needed by the first run into a results directory (or $SUBMISSION_ORG), which later runs reuse; the "
                 "name `tinyperf package --org` takes (cpu_smoke: default the results directory's name)")
  p.add_argument("--system-overrides", type=Path, metavar="FILE",
                 help="YAML or JSON of systems-JSON fields no machine can detect (submitter, status, storage, cooling, "
                      "...) for R/systems/<system>.json, which records the machine the runs ran on (detected in the "
                      "container, over the repository's systems/<system>.json; this file wins)")


class Local:
  """--scheduler local: the runs one after the other in this process (run_here); unfinished ones are redone by running
  the same command again, which skips the finished ones."""
  name = "local"

  def submit(self, cfg: PlatformConfig, rs: T.ResultSet, args, nexp: int, runtime: str, overrides: dict, org: str) -> int:
    return run_here(cfg, rs, args, nexp, runtime, overrides, org)

  def redo_hint(self, results: Path) -> str:
    if os.environ.get(SERVICE_ENV): return f"rerun {compose_run(os.environ[SERVICE_ENV])}"
    return "rerun the same command"

  def overrides_hint(self, results: Path, overrides: Path | None) -> str:
    if overrides is not None:
      return f"fix them in {overrides} (the --system-overrides file: {OVERRIDES_FILE}) and {self.redo_hint(results)}"
    return f"give them in a file ({OVERRIDES_FILE}) and rerun the same command with --system-overrides FILE added"


LOCAL = Local()
SCHEDULERS: dict[str, Scheduler] = {"local": LOCAL, "slurm": slurm.SLURM}


def this_scheduler() -> Scheduler:
  """The scheduler whose command redoes this process's runs: an array task's own `tinyperf run ... --only-index` is
  typed by no one, so its runs are resubmitted the Slurm way; any other process's are rerun here."""
  return slurm.SLURM if slurm.in_array_task() else LOCAL


def launch_mode(args) -> tuple[str, str]:
  """(scheduler, runtime) from --scheduler/--runtime and their defaults; impossible combinations: UserError."""
  scheduler, runtime = args.scheduler or "local", args.runtime or "docker"
  if scheduler == "local":
    slurm.check_local_args(args)
    if runtime == "pyxis":
      raise UserError("--runtime pyxis starts each run with srun --container-image on a Slurm node, so it needs "
                      "--scheduler slurm; to run on this machine use --runtime docker (the platform's image) or "
                      "--runtime host (this Python). Nothing was run.")
  elif args.only_index is not None:
    raise UserError("--only-index is for the Slurm array tasks, not for --scheduler slurm, whose runs come from the "
                    "ledger; nothing was submitted. Drop --only-index: the submission redoes only the failed runs.")
  if runtime == "pyxis" and not args.image:
    raise UserError("--runtime pyxis needs --image: an image every node can import, a registry reference "
                    "(e.g. registry.example.com#tinyperf:nv) or a squashfs file on a shared path made with `enroot import "
                    "dockerd://tinyperf:nv`. Nothing was submitted.")
  if runtime == "host" and args.image:
    raise UserError(f"--image {args.image} has no effect with --runtime host (this Python runs the runs, in no image); "
                    f"drop one of them.")
  return scheduler, runtime


def _org(name: str) -> str:
  from tinyperf.tooling.common.submission_tree import ORG_NAME
  if not ORG_NAME.fullmatch(name):
    raise argparse.ArgumentTypeError(f"{name!r}: the submitter name names a directory and the tarball; use letters, "
                                     f"digits and _ . + - (no spaces, no leading dot)")
  return name




def check_log(log: Path) -> tuple[bool | None, str]:
  """Compliance of one finished log with the real checker (+ our extra checks). Returns (accepted, one-line summary);
  accepted is None when a checker crashed: no verdict is recorded, `tinyperf check` can be rerun on the result."""
  from tinyperf.tooling.common.judge.check import check_path
  from tinyperf.tooling.common.errors import ToolError
  try: report = check_path(log)
  except ToolError as e: return None, f"not checked ({e})"
  fr = report.files[0]
  if report.accepted: return True, f"{fr.verdict}, {fr.minutes:.2f} min to train" if fr.minutes is not None else fr.verdict
  first = report.failures()[0] if report.failures() else fr.first_failure
  return False, f"{fr.verdict}: {first.message if first else 'see tinyperf check ' + str(log)}"


def _pid_alive(pid: int) -> bool:
  """A process with this pid exists here and is not a zombie (a killed run whose parent has not reaped it yet)."""
  try: os.kill(pid, 0)
  except ProcessLookupError: return False
  except OSError: return True        # PermissionError: another user's live process
  try:
    with open(f"/proc/{pid}/stat") as f: return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except (OSError, IndexError): return True


def reap_rings() -> list[str]:
  """Remove the shared-memory rings of ResNet loaders whose process is gone: kill -9 of a run leaks its ring (0.6-6.9
  GiB on GPU configs). Only this user's segments named <SHM_PREFIX><pid>_<hex> whose pid no longer exists here."""
  from tinyperf.benchmarks.common.feeding import SHM_DIR, SHM_PREFIX
  said = []
  try: segs = list(Path(SHM_DIR).glob(f"{SHM_PREFIX}*"))
  except OSError: return said
  for p in segs:
    m = re.fullmatch(rf"{re.escape(SHM_PREFIX)}(\d+)_[0-9a-f]+", p.name)
    if not m: continue
    if _pid_alive(int(m[1])): continue
    try:
      st = p.lstat()
      if st.st_uid != os.getuid(): continue
      p.unlink()
      said.append(f"removed {p} ({st.st_size / 2**20:.1f} MiB), the shared-memory ring of a dead run (pid {m[1]})")
    except OSError: pass
  return said


def _io(rs: T.ResultSet, what: str, then: str):
  """OSError (a full disk, a read-only mount) while writing the run's records -> one paragraph, exit 2."""
  from contextlib import contextmanager
  @contextmanager
  def guard():
    try: yield
    except OSError as e:
      raise UserError(f"{what}: {e.strerror or e}{f' ({e.filename})' if e.filename else ''}. Free space (or fix the "
                      f"file system) and {this_scheduler().redo_hint(rs.root)}: {then}") from None
  return guard()


def verify_results(rs: T.ResultSet, fix: bool) -> list[str]:
  """Check every finished run's result file against the ledger's hash. fix: copy a finished run's own log to its
  missing result file (a copy that failed, e.g. on a full disk). Returns the problems left, one line each."""
  problems = []
  with L.Ledger.locked(rs.ledger) as led:
    for i in sorted({a.index for a in led.attempts}):
      att = led.latest(i)
      if att.status != L.DONE: continue
      kind, msg = led.check_result(att)
      if kind == "copy" and fix and not led.held(att):   # its launcher may be copying it right now
        with _io(rs, f"copying run {i}'s log to {att.result}", "the copy is retried, the run is not redone"):
          write_atomic(Path(att.result), safe_read.read_bytes(led.run_dir(att).log, what="MLPerf log"))
        print(f"run {i} (seed {att.seed}): {msg}", file=sys.stderr)
      elif kind in ("missing", "changed"): problems.append(msg)
  for p in problems: print(f"ERROR: {p}", file=sys.stderr)
  return problems


def _claim_next(cfg: PlatformConfig, rs: T.ResultSet, nexp: int, only: int | None, tried: set, backend: Backend, org: str):
  """Under the ledger lock: settle dead launchers' attempts, pick the first unfinished run nobody live has claimed
  (and this launcher has not tried yet), draw its seed and claim it, its resolved config written into its folder. None
  when there is none."""
  with _io(rs, f"writing the run ledger {rs.ledger}", "finished runs are kept"), L.Ledger.locked(rs.ledger) as led:
    for m in (settled := led.settle()): print(m, file=sys.stderr)
    busy = led.claimed(nexp)
    todo = [i for i in led.pending(nexp) if i not in busy and i not in tried and only in (None, i)]
    if not todo:
      if settled: led.save()
      return None
    i = todo[0]
    T.refuse_unknown_results(rs.results_dir, rs.ledger, [i])
    taken = led.seeds()
    while True:   # the seed is drawn under the lock: Slurm tasks on other nodes draw theirs from the same ledger
      seed = draw_seed(cfg.get("SEED_BITS", SEED_BITS), taken, str(rs.ledger))
      run = rs.run(i, seed)
      if not run.path.exists(): break
      taken.add(seed)   # a run directory the ledger lost: never append to its log
    run.path.mkdir(parents=True)
    claim = L.Claim(run.path)
    att = L.Attempt(index=i, seed=seed, backend=backend.kind, output=str(run.output), slurm=slurm.task_info(),
                    owner=L.launcher(), overrides={k: list(v) for k, v in cfg.overridden.items()}, platform=cfg.platform)
    att.image, att.provenance = backend.image_record()
    led.attempts.append(att)
    try:
      att.config_sha256 = write_resolved(cfg, run.config, org)
      led.save()
    except OSError: claim.release(); raise
  return i, att, run, claim


def main(args) -> int:
  scheduler, runtime = launch_mode(args)
  cfg = load_config(args.benchmark, args.platform)   # the one load of this process: everything below is handed cfg
  require_closed_model(cfg)   # before any run starts: an override of the closed model would be refused after INIT
  rs = T.ResultSet.of(args.results, cfg)   # R as the CLI made it absolute: everything below is handed rs
  org = submitter(cfg, rs, args)   # each run's config.json names it for the entrypoint
  nexp = required_runs(args.benchmark) if args.nexp is None else args.nexp
  if nexp < 1: raise UserError(f"--nexp {nexp}: need at least one run.")
  if nexp > L.MAX_NEXP:
    raise UserError(f"--nexp {nexp}: a set is 1 to {L.MAX_NEXP} runs (MLPerf asks for {required_runs(args.benchmark)}).")
  from tinyperf.tooling.launch import sysinfo
  overrides = sysinfo.load_overrides(args.system_overrides) if args.system_overrides else {}   # bad file: exit 2 now
  # the machine's record names the same submitter as the logs (package and check compare them), and records it for the
  # later runs of the tree (submitter() reads it back)
  if overrides.get("submitter", org) != org:
    raise UserError(f"{args.system_overrides} says submitter {overrides['submitter']!r} but the logs record {org!r}: "
                    f"remove `submitter` from that file, or pass --org {shlex.quote(str(overrides['submitter']))}. "
                    f"Nothing was run.")
  overrides["submitter"] = org
  if args.only_index is not None and not 0 <= args.only_index < nexp:
    raise UserError(f"--only-index {args.only_index}: runs are numbered 0 to {nexp - 1} (--nexp {nexp}).")
  return SCHEDULERS[scheduler].submit(cfg, rs, args, nexp, runtime, overrides, org)   # each Slurm array task comes back here, local


def submitter(cfg: PlatformConfig, rs: T.ResultSet, args) -> str:
  """The submitter the runs record (submission_org, and the submitter of R/systems/<system>.json): asked for once, at
  the first run into a results tree (--org, or $SUBMISSION_ORG, held to the same rule), then read back from the tree,
  so that every run of a tree names one submitter and `tinyperf package --org` can match it. A toy platform's runs need
  none: they take the results directory's name, as smoke.sh's ORG does (else smoke)."""
  from tinyperf.tooling.common.submission_tree import ORG_NAME, recorded_submitter
  given, how = args.org, "--org"
  if not given and (env := os.environ.get("SUBMISSION_ORG")):   # empty: unset (compose's ${ORG:-})
    given, how = env, "SUBMISSION_ORG"
    if not ORG_NAME.fullmatch(env):
      raise UserError(f"SUBMISSION_ORG={env!r} (from the environment) is not a submitter name (letters, digits and "
                      f"_ . + -, no leading dot): unset it, or pass --org NAME. Nothing was run.")
  recorded = recorded_submitter(rs.root)
  if given and recorded and given != recorded[0]:
    name, where = recorded
    raise UserError(f"{how} {given}: the runs in {rs.shown} record submitter {name!r} ({host_path(where)}): pass "
                    f"--org {shlex.quote(name)} (or no --org), or give {given}'s runs their own --results directory. "
                    f"Nothing was run.")
  if given: return given
  if recorded: return recorded[0]
  if stand_in_data(cfg):   # smoke.sh's default: the results directory's name, if it can name a submitter
    return name if ORG_NAME.fullmatch(name := rs.root.name) else "smoke"
  raise UserError(f"no submitter for the runs in {rs.shown}: pass --org NAME (letters, digits and _ . + -; ORG=NAME "
                  f"for a docker compose service), the submission_org their logs record and later runs reuse. "
                  f"Nothing was run.")


def run_here(cfg: PlatformConfig, rs: T.ResultSet, args, nexp: int, runtime: str, overrides: dict, org: str) -> int:
  """The local scheduler: the runs not yet finished (or run --only-index), one after the other, on the runtime's backend."""
  from tinyperf.tooling.launch import sysinfo
  from tinyperf.tooling.launch.backends import open_backend
  check_prepared(cfg, args.data)
  T.ensure_writable(rs.root)
  backend = open_backend(runtime, cfg, args.image, args.data, rs, this_scheduler(), args.verbose)  # docker: UserError if unusable
  try:
    rs.results_dir.mkdir(parents=True, exist_ok=True); rs.runs_dir.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UserError(f"cannot create {rs.results_dir} ({e.strerror}); choose a writable --results directory.") from None
  ledger_path = rs.ledger
  if args.only_index is None: slurm.refuse_if_queued(rs)  # a Slurm job of this result set would redo them too
  for line in reap_rings(): print(line, file=sys.stderr)
  with _io(rs, f"writing the run ledger {ledger_path}", "finished runs are kept"), L.Ledger.locked(ledger_path) as led:
    if settled := led.settle():
      for m in settled: print(m, file=sys.stderr)
      led.save()
    pending, busy = led.pending(nexp), led.claimed(nexp)
  verify_results(rs, fix=True)
  if args.only_index is not None: pending = [i for i in pending if i == args.only_index]  # other tasks own the rest
  mine = [i for i in pending if i not in busy]
  T.refuse_unknown_results(rs.results_dir, ledger_path, mine)
  if mine:  # before anything is timed: inside a container like the runs', or in this environment (host, compose service)
    conf = rs.runs_dir / f".preflight-{socket.gethostname()}-{os.getpid()}.json"   # unique across a Slurm set's nodes
    try:
      with _io(rs, f"writing {conf}", "nothing was run"): write_resolved(cfg, conf, org)
      backend.preflight(conf)
    finally: conf.unlink(missing_ok=True)
    fields, notes = backend.detect_system()   # the machine as the runs see it
    system = sysinfo.run_description(cfg, fields, notes, overrides, args.system_overrides, rs.root, this_scheduler())
    sysinfo.record_run_system(rs.root, cfg["system"], system, this_scheduler())
  done = nexp - len(led.pending(nexp))
  where = backend.describe()
  others = "".join(f"; run {i} is being run by {L.who(a)}" for i, a in busy.items() if i in pending)
  if args.only_index is None:
    print(f"{cfg.benchmark} on {cfg.platform} {where}: {nexp} runs, {done} already finished, running {mine}{others}",
          flush=True)
  else:
    print(f"{cfg.benchmark} on {cfg.platform} {where}: run {args.only_index} of {nexp}"
          f"{'' if pending else ' is already finished'}{others}", flush=True)
  # the set's size, for `tinyperf status`: a set stopped between runs has no attempt yet for the runs still to come
  with _io(rs, f"writing the run ledger {ledger_path}", "finished runs are kept"), L.Ledger.locked(ledger_path) as led:
    if led.nexp != nexp:
      led.nexp = nexp
      led.save()
  # scancel, a Slurm time limit, `kill` or a closed terminal: the except KeyboardInterrupt in _one_run stops the run's
  # processes (or container) and records the run as interrupted
  stop_on_signals()
  from tinyperf.tooling.launch.console import Console
  console = Console(verbose=args.verbose)
  tried: set[int] = set()
  while (claimed := _claim_next(cfg, rs, nexp, args.only_index, tried, backend, org)):
    i, att, run, claim = claimed
    tried.add(i)
    try: rc = _one_run(cfg, rs, args, nexp, att, run, backend, console)
    finally: claim.release()   # after the outcome is saved: until then the run is ours
    if rc is not None: return rc
  with L.Ledger.locked(ledger_path) as led:
    left = [i for i in led.pending(nexp) if args.only_index in (None, i)]
    busy = led.claimed(nexp)
  problems = verify_results(rs, fix=True)
  others, redo = [i for i in left if i in busy], [i for i in left if i not in busy]
  for i in others: print(f"run {i} (seed {busy[i].seed}) is being run by {L.who(busy[i])}; `tinyperf status --results "
                         f"{shlex.quote(rs.shown)}` follows it", file=sys.stderr)
  if problems:
    print(f"{len(problems)} finished run(s) have a missing or changed result file (above); the set cannot be packaged "
          f"until they are restored", file=sys.stderr)
    return 1
  if redo:
    print(f"{len(redo)} run(s) not finished: {redo}; {this_scheduler().redo_hint(rs.root)} to redo them", file=sys.stderr)
    return 1
  if others: return 1   # finished here, but the set is not complete yet
  shown = host_path(rs.results_dir)
  print(f"all {nexp} runs finished: {shown}; check them with: tinyperf check {shlex.quote(shown)}"
        if args.only_index is None else f"run {args.only_index} finished: {shown}", flush=True)
  missed = missed_target(ledger_path, nexp, args.only_index)
  if missed and cfg["division"] == "closed":
    # finished runs count and are never redone (that would be cherry-picking), but a closed set with a run that missed
    # the target is not a clean result: say so in the exit status, not only in the log
    print(f"{len(missed)} closed run(s) did NOT reach the target: {', '.join(f'run {a.index} (seed {a.seed})' for a in missed)}. "
          f"They count (olympic scoring drops one; a second leaves the set without a score) and are not redone; "
          f"`tinyperf check {shlex.quote(shown)}` gives the verdict.", file=sys.stderr)
    return 1
  return 0


def missed_target(ledger_path: Path, nexp: int, only_index: int | None = None) -> list[L.Attempt]:
  """The finished runs of the set (or run only_index) that ended without reaching the target."""
  with L.Ledger.locked(ledger_path) as led:
    return [a for i in range(nexp) if only_index in (None, i) and (a := led.latest(i)) and a.status == L.DONE
            and a.converged is False]


def _one_run(cfg: PlatformConfig, rs: T.ResultSet, args, nexp: int, att: L.Attempt, run: RunDir, backend: Backend,
             console) -> int | None:
  """INIT + RUN of one claimed attempt, its outcome recorded. Returns an exit code to stop with, or None to go on."""
  i, seed, ledger_path = att.index, att.seed, rs.ledger
  t0 = time.time()
  console.prefix = f"run {i} of {nexp} (seed {seed}): "
  console.say(f"started; output in {host_path(att.output)}")
  try:
    with open(run.output, "ab") as out_file:
      att.cache_drop = backend.drop_page_cache()   # INIT logs the method instead of dropping it again
      console.say(f"host page cache: {att.cache_drop}")
      L.update_attempt(ledger_path, att)
      att.exit_codes, log, note = backend.run_one(i, seed, run, out_file, att.cache_drop, console)
      if note: att.note = note
  except KeyboardInterrupt as e:
    att.status, att.finished, att.note = L.INTERRUPTED, time.time(), str(e) or "interrupted by the user (Ctrl-C)"
    L.update_attempt(ledger_path, att)
    print(f"\nrun {i} interrupted; {this_scheduler().redo_hint(rs.root)} to redo it (finished runs are kept)", file=sys.stderr)
    return 130
  except OSError as e:   # a full disk mid-INIT or mid-RUN (the output log, the ledger): the next start settles it
    att.status, att.finished, att.note = L.FAILED, time.time(), f"stopped by an I/O error: {e}"
    try: L.update_attempt(ledger_path, att)
    except OSError: pass
    raise UserError(f"run {i} (seed {seed}) stopped: {e.strerror or e}{f' ({e.filename})' if e.filename else ''}. "
                    f"Free space (or fix the file system) and {this_scheduler().redo_hint(rs.root)}: finished runs are kept, and this "
                    f"one is redone unless its MLPerf log finished.") from None
  att.finished = time.time()
  converged = L.log_outcome(log) if log.is_file() else None   # the run's own log decides, not its exit codes
  if converged is None:
    att.status = L.FAILED
    why = (f"RUN crashed ({crash}): not a training outcome, so it is redone" if log.is_file() and (crash := L.crash_of(log))
           else "no run_stop in its log")
    att.note = f"{att.note + '; ' if att.note else ''}exit codes {att.exit_codes}, {why}; see {att.output}"
    with _io(rs, f"writing the run ledger {ledger_path}", "finished runs are kept"): L.update_attempt(ledger_path, att)
    print(f"run {i} (seed {seed}) failed: {att.note}", file=sys.stderr)
    return None
  att.converged = converged
  if args.no_check: accepted, summary = True, "not checked (--no-check)"
  else:
    try: accepted, summary = check_log(log)
    except UserError as e: accepted, summary = False, f"the checker could not read it: {e}"
  result = rs.result(i)
  att.status, att.result, att.note, att.sha256 = L.DONE, str(result), summary, file_digest(log, "sha256")
  with _io(rs, f"run {i} (seed {seed}) finished but recording it in {ledger_path} failed",
           "the next start records it from its finished log; it is not redone"):
    L.update_attempt(ledger_path, att)   # done from the log itself, before the copy: a failed copy never redoes it
  with _io(rs, f"run {i} (seed {seed}) finished and is recorded as done, but writing {result} failed",
           f"it copies the run's own log {log} there; the run is not redone"):
    write_atomic(result, log.read_bytes())  # never overwrites
  mins = (att.finished - t0) / 60
  console.say(f"{'converged' if att.converged else 'did NOT converge'} in {mins:.1f} min wall; check: {summary}")
  if accepted is False: print(f"run {i}: the log is not compliant: {summary}", file=sys.stderr)
  elif accepted is None: print(f"run {i}: {summary}; check it with `tinyperf check {shlex.quote(host_path(result))}`", file=sys.stderr)
  return None
