"""`tinyperf run BENCHMARK --platform P --nexp N`: N seeded INIT+RUN runs, each checked, recorded in a resumable ledger.

Layout under --results R:
  R/results/<system>/<bm>/result_<i>.txt   finished runs (the submission's results tree; never overwritten)
  R/runs/<system>/<bm>/ledger.json         every attempt: seed, status, exit codes, cache-drop method
  R/runs/<system>/<bm>/run_<i>_<seed>/     raw console output, the MLPerf log while it is written, the kernel cache
  R/systems/<system>.json                  the machine the runs ran on (tooling/sysinfo.py: detected where the runs
                                           run, over the repository's systems/<system>.json, under --system-overrides)
The training entrypoint is started as a process (this module never imports tinygrad or training code): by default in
the platform's image, one container per run (tooling/docker_run.py: preflight, host page-cache drop, INIT + RUN with the
kernel cache on its own volume, output streamed to the host); with --no-container with this Python (host_run), which is
also what the compose services run inside their image. Both run a preflight before anything is timed.
With --backend slurm the runs become one Slurm array job (tooling/slurm.py) whose tasks each run this verb with
--only-index, on their own node."""
from __future__ import annotations
import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.common.config import BENCHMARKS, available_platforms, load_config, PlatformConfig
from tooling.errors import UserError, write_atomic
from tooling import ledger as L
from tooling import slurm

DEFAULT_NEXP = {"resnet": 5, "bert": 10}  # the runs MLPerf requires per benchmark


def add_arguments(p: argparse.ArgumentParser):
  p.add_argument("benchmark", choices=BENCHMARKS)
  p.add_argument("--platform", required=True, help="implementation name (benchmarks/<bm>/implementations/<platform>): "
                 + "; ".join(f"{b}: {', '.join(available_platforms(b))}" for b in BENCHMARKS))
  p.add_argument("--nexp", type=int, help="number of runs (default: 5 for resnet, 10 for bert, as MLPerf requires)")
  p.add_argument("--data", type=Path, required=True, help="prepared dataset directory (tinyperf prep ...)")
  p.add_argument("--results", type=Path, default=Path("out"), help="output root (default: ./out)")
  p.add_argument("--image", help="image to run in (default tinyperf:<vendor of the platform>, as `tinyperf build` tags it)")
  p.add_argument("--no-container", action="store_true",
                 help="run on this host with this Python instead of in the platform's image")
  p.add_argument("--no-check", action="store_true", help="skip `tinyperf check` after each run")
  p.add_argument("-v", "--verbose", action="store_true",
                 help="show each run's whole output (MLLOG lines, progress bars) instead of one line per phase and "
                      "milestone; it always goes to R/runs/<system>/<bm>/run_<i>_<seed>/output.log")
  p.add_argument("--backend", choices=("local", "slurm"), default="local",
                 help="local: run here, one run after the other (default); slurm: submit an sbatch array job, one task "
                      "(node) per run, and return (tinyperf status follows it)")
  p.add_argument("--only-index", type=int, metavar="I",
                 help="do only run I of the N (what each Slurm array task runs); skipped if already finished")
  slurm.add_run_arguments(p)
  p.add_argument("--org", type=_org, help="submitter name the logs record as submission_org (default: $SUBMISSION_ORG, "
                 "else tinycorp); use the --org you will `tinyperf package` with, or `tinyperf check` warns")
  p.add_argument("--system-overrides", type=Path, metavar="FILE",
                 help="YAML or JSON of systems-JSON fields no machine can detect (submitter, status, storage, cooling, "
                      "...) for R/systems/<system>.json, which records the machine the runs ran on (detected in the "
                      "container, over the repository's systems/<system>.json; this file wins)")


def _org(name: str) -> str:
  from tooling.package import ORG_NAME
  if not ORG_NAME.fullmatch(name):
    raise argparse.ArgumentTypeError(f"{name!r}: the submitter name names a directory and the tarball; use letters, "
                                     f"digits and _ . + - (no spaces, no leading dot)")
  return name


def run_dirs(results: Path, cfg: PlatformConfig) -> tuple[Path, Path]:
  return (results / "results" / cfg["system"] / cfg.benchmark, results / "runs" / cfg["system"] / cfg.benchmark)


def _unique_seed(taken: set[int], bits: int) -> int:
  while True:
    seed = int.from_bytes(os.urandom(8), "little") % (1 << bits)
    if seed not in taken: return seed


def raw_stdout(chunk: bytes): sys.stdout.buffer.write(chunk); sys.stdout.buffer.flush()


def stream_process(cmd: list[str], env: dict, out_file, cwd: Path, time_limit: float | None = None,
                   console=raw_stdout) -> tuple[int, bool]:
  """Run one phase, teeing its output to out_file (if any) and to console (all of it by default; a tooling.console
  Console shows milestones) as it arrives (a crash keeps what was printed). With time_limit, its whole process group
  (BEAM's workers too) is killed after that many seconds.
  Returns (exit code, whether the time limit stopped it): -SIGKILL alone could also be the OOM killer."""
  proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
  stopped = threading.Event()
  def stop():
    if proc.poll() is not None: return     # it finished just as the limit came
    stopped.set()
    try: os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError: pass
  timer = threading.Timer(time_limit, stop) if time_limit else None
  if timer: timer.start()
  try:
    for chunk in iter(lambda: proc.stdout.read1(65536), b""):
      if out_file is not None: out_file.write(chunk); out_file.flush()
      console(chunk)
    return proc.wait(), stopped.is_set()
  except BaseException:
    # Ctrl-C or launcher failure: stop the whole process group of the phase, then re-raise
    try: os.killpg(proc.pid, signal.SIGTERM); proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
      try: os.killpg(proc.pid, signal.SIGKILL)
      except ProcessLookupError: pass
    raise
  finally:
    if timer: timer.cancel()


# Closed rules allow 30 minutes from init_start to init_stop. An INIT still going 35 minutes after its process started
# (init_start comes seconds in, after imports and the page-cache drop) cannot pass, and a BEAM search can stall far
# longer than that (docs/PERFORMANCE.md: a compile timeout tinygrad 0.14 loses), so a closed INIT is stopped there
# instead of holding the GPUs for a RUN whose log the checker would reject.
CLOSED_INIT_STOP_S = 35 * 60


PHASES = {"init": "INIT (untimed: JIT warm-up and BEAM search on fake data)", "run": "RUN (timed: training on the data)"}


def host_run(cfg: PlatformConfig, seed: int, data: Path, work: Path, out_file, cache_db: Path | None = None,
             init_limit_s: float | None = None, console=None) -> tuple[dict, Path]:
  """INIT then RUN with this Python, the way run_and_time.sh does it, appending to one MLPerf log in `work`. The host
  backend calls it directly; in a container, tooling/inside.py does (with the kernel cache on its own volume).
  init_limit_s: stop INIT after this long (default: CLOSED_INIT_STOP_S in the closed division, none in open).
  console: a tooling.console.Console (phase lines, milestones, the tail of a failed phase); None: all output raw."""
  from benchmarks.common.config import ROOT
  log = work / "mlperf.txt"
  env = {**os.environ, "PYTHONUNBUFFERED": "1", "CACHEDB": str(cache_db or work / "cache" / "tinygrad.db")}
  codes = {}
  if init_limit_s is None and cfg["division"] == "closed": init_limit_s = CLOSED_INIT_STOP_S
  for phase in ("init", "run"):
    cmd = [sys.executable, "-m", f"benchmarks.{cfg.benchmark}.train", "--platform", cfg.platform, "--phase", phase,
           "--seed", str(seed), "--data", str(data), "--results", str(work), "--log", str(log)]
    if console: console.say(PHASES[phase])
    codes[phase], stopped = stream_process(cmd, env, out_file, cwd=ROOT, time_limit=init_limit_s if phase == "init" else None,
                                           console=console or raw_stdout)
    failed = codes[phase] not in (0, 1) or (phase == "init" and codes[phase] != 0)
    if failed and console and not stopped:
      console.failed(f"{phase.upper()} exited {codes[phase]}", getattr(out_file, "name", "its output.log"))
    if stopped:
      msg = (f"\n{'!' * 100}\nINIT stopped after {init_limit_s / 60:.0f} min: the closed rules allow 30 min from init_start "
             f"to init_stop, so this run could not pass. Narrow the BEAM search (the BEAM_* knobs of {cfg.path}) or "
             f"look for a stalled compile in the output above; RUN was not started.\n{'!' * 100}\n")
      sys.stderr.write(msg)
      if out_file is not None: out_file.write(msg.encode()); out_file.flush()
    if failed: break
  return codes, log


def check_log(log: Path) -> tuple[bool | None, str]:
  """Compliance of one finished log with the real checker (+ our extra checks). Returns (accepted, one-line summary);
  accepted is None when a checker crashed: no verdict is recorded, `tinyperf check` can be rerun on the result."""
  from tooling.check import check_path
  from tooling.errors import ToolError
  try: report = check_path(log)
  except ToolError as e: return None, f"not checked ({e})"
  fr = report.files[0]
  if report.accepted: return True, f"{fr.verdict}, {fr.minutes:.2f} min to train" if fr.minutes is not None else fr.verdict
  first = report.failures()[0] if report.failures() else fr.first_failure
  return False, f"{fr.verdict}: {first.message if first else 'see tinyperf check ' + str(log)}"


def _results_writable(results: Path):
  """Create the output root (or fail with the fix) and prove a file can be written there, before anything runs."""
  try:
    results.mkdir(parents=True, exist_ok=True)
    probe = results / f".tinyperf-write-test-{socket.gethostname()}-{os.getpid()}"  # unique across nodes too
    probe.write_bytes(b""); probe.unlink()
  except OSError as e:
    raise UserError(f"results directory {results} is not writable ({e.strerror}); choose a writable --results "
                    f"directory or fix its permissions. Nothing was run.") from None


def _check_data(cfg: PlatformConfig, data: Path):
  """Cheap host-side checks of the data directory; the container's preflight verifies the manifest in full."""
  if not data.is_dir():
    raise UserError(f"data directory {data} does not exist; prepare it with `tinyperf prep ...` and pass --data. "
                    f"Nothing was run.")
  marker = data / ("manifest.json" if cfg.benchmark == "resnet" else "eval.shard")
  if not marker.is_file():
    how = (f"tinyperf prep imagenet --out {data}` (or `tinyperf prep synthetic-imagenet --out {data}` for smoke runs)"
           if cfg.benchmark == "resnet" else f"tinyperf prep wiki pretrain/eval --data {data}`")
    raise UserError(f"{data} is not a prepared, verified data set ({marker.name} is missing; prep writes it last, after "
                    f"verifying). Run `{how}. Nothing was run.")


def _host_preflight(cfg: PlatformConfig, data: Path, work_root: Path, verbose: bool):
  cmd = [sys.executable, "-m", "benchmarks.common.preflight", "--benchmark", cfg.benchmark, "--platform", cfg.platform,
         "--data", str(data), "--work", str(work_root)]
  from benchmarks.common.config import ROOT
  r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
  lines = r.stdout.strip().splitlines()
  sys.stdout.write(r.stdout if verbose else (lines[-1] + "\n" if lines else ""))   # quiet: "preflight: N passed"
  if r.returncode != 0:
    failed = [l for l in r.stdout.splitlines() if "FAILED" in l] or (r.stdout + r.stderr).strip().splitlines()[-5:]
    raise UserError(f"preflight failed for {cfg.benchmark} on {cfg.platform}:\n  " + "\n  ".join(failed) +
                    "\nNothing was run or timed; fix the above and rerun the same command.")


def refuse_unknown_results(results_dir: Path, ledger_path: Path, pending: list[int]):
  """A result file the ledger does not know about is never overwritten: refuse loudly instead."""
  for i in pending:
    if (results_dir / f"result_{i}.txt").exists():
      raise UserError(f"{results_dir / f'result_{i}.txt'} exists but the ledger {ledger_path} has no finished run {i}. "
                      f"Results are never overwritten: move the file away, or restore the ledger, and rerun.")


def _sigterm(signum, frame):
  # the except KeyboardInterrupt below stops the run's processes (or container) and records why in the ledger
  raise KeyboardInterrupt("stopped by SIGTERM (scancel, a Slurm time limit, or kill)")


def main(args) -> int:
  cfg = load_config(args.benchmark, args.platform)
  if args.org: os.environ["SUBMISSION_ORG"] = args.org   # read by the entrypoint (benchmarks/common/mlperf.py ORG)
  nexp = args.nexp or DEFAULT_NEXP[args.benchmark]
  if nexp < 1: raise UserError(f"--nexp {nexp}: need at least one run.")
  from tooling import sysinfo
  overrides = sysinfo.load_overrides(args.system_overrides) if args.system_overrides else {}   # bad file: exit 2 now
  if args.only_index is not None and not 0 <= args.only_index < nexp:
    raise UserError(f"--only-index {args.only_index}: runs are numbered 0 to {nexp - 1} (--nexp {nexp}).")
  if args.backend == "slurm": return slurm.submit(cfg, args, nexp)  # each array task comes back here with --only-index
  slurm.check_local_args(args)
  _check_data(cfg, args.data)
  _results_writable(args.results)
  results_dir, work_root = run_dirs(args.results, cfg)
  backend = None
  if not args.no_container:
    from tooling.docker_run import ContainerBackend
    backend = ContainerBackend(cfg, args.image, args.data, work_root)  # daemon, image, GPU runtime: UserError if not
  try:
    results_dir.mkdir(parents=True, exist_ok=True); work_root.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UserError(f"cannot create {results_dir} ({e.strerror}); choose a writable --results directory.") from None
  ledger_path = work_root / "ledger.json"
  if args.only_index is None: slurm.refuse_if_queued(work_root)  # a Slurm job of this result set would redo them too
  with L.Ledger.locked(ledger_path) as led: pending = led.pending(nexp)
  if args.only_index is not None: pending = [i for i in pending if i == args.only_index]  # other tasks own the rest
  refuse_unknown_results(results_dir, ledger_path, pending)
  if pending:  # before anything is timed: inside the run's container, or in this environment (host, compose service)
    if backend: backend.preflight()
    else: _host_preflight(cfg, args.data, work_root, args.verbose)
    fields, notes = backend.detect_system() if backend else sysinfo.detect()   # the machine as the runs see it
    system = sysinfo.run_description(cfg, fields, notes, overrides, args.system_overrides)
    sysinfo.record_run_system(args.results, cfg["system"], system)
  done = nexp - len(pending)
  where = f"in {backend.describe()}" if backend else "on this host (--no-container)"
  if args.only_index is None:
    print(f"{cfg.benchmark} on {cfg.platform} {where}: {nexp} runs, {done} already finished, running {pending}", flush=True)
  else:
    print(f"{cfg.benchmark} on {cfg.platform} {where}: run {args.only_index} of {nexp}"
          f"{'' if pending else ' is already finished'}", flush=True)
  signal.signal(signal.SIGTERM, _sigterm)  # scancel, a Slurm time limit or `kill`: record the run as interrupted
  from tooling.console import Console
  console = Console(verbose=args.verbose)
  for i in pending:
    # the seed is drawn and recorded under one lock: Slurm tasks on other nodes draw theirs from the same ledger
    with L.Ledger.locked(ledger_path) as led:
      seed = _unique_seed(led.seeds(), cfg.get("SEED_BITS", 31))
      work = work_root / f"run_{i}_{seed}"; work.mkdir(parents=True)
      att = L.Attempt(index=i, seed=seed, backend="container" if backend else "host", output=str(work / "output.log"),
                      slurm=slurm.task_info())
      if backend: att.image, att.provenance = backend.image_ref(), backend.provenance()
      led.attempts.append(att); led.save()
    t0 = time.time()
    console.prefix = f"run {i} of {nexp} (seed {seed}): "
    console.say(f"started; output in {att.output}")
    try:
      with open(work / "output.log", "ab") as out_file:
        if backend:
          att.cache_drop = backend.drop_page_cache()
          L.update_attempt(ledger_path, att)
          att.exit_codes, log, note = backend.run_one(i, seed, work, out_file, att.cache_drop, console)
          if note: att.note = note
        else:
          # compose services keep tinygrad's kernel cache on their own volume (TINYPERF_CACHE_DIR), one file per run
          cdir = os.environ.get("TINYPERF_CACHE_DIR")
          cache_db = Path(cdir) / f"{cfg['system']}_{cfg.benchmark}_{i}_{seed}.db" if cdir else None
          att.exit_codes, log = host_run(cfg, seed, args.data, work, out_file, cache_db=cache_db, console=console)
    except KeyboardInterrupt as e:
      att.status, att.finished, att.note = L.INTERRUPTED, time.time(), str(e) or "interrupted by the user (Ctrl-C)"
      L.update_attempt(ledger_path, att)
      print(f"\nrun {i} interrupted; rerun the same command to redo it (finished runs are kept)", file=sys.stderr)
      return 130
    att.finished = time.time()
    codes = att.exit_codes
    if codes.get("init") != 0 or codes.get("run") not in (0, 1) or not log.is_file():
      att.status = L.FAILED
      att.note = f"{att.note + '; ' if att.note else ''}exit codes {codes}; see {att.output}"
      L.update_attempt(ledger_path, att)
      if backend: console.failed(f"the container exited {codes.get('container')}", att.output)
      print(f"run {i} (seed {seed}) failed: {att.note}", file=sys.stderr)
      continue
    att.converged = codes["run"] == 0
    accepted, summary = (True, "not checked (--no-check)") if args.no_check else check_log(log)
    result = results_dir / f"result_{i}.txt"
    write_atomic(result, log.read_bytes())  # never overwrites
    att.status, att.result, att.note = L.DONE, str(result), summary
    L.update_attempt(ledger_path, att)
    mins = (att.finished - t0) / 60
    console.say(f"{'converged' if att.converged else 'did NOT converge'} in {mins:.1f} min wall; check: {summary}")
    if accepted is False: print(f"run {i}: the log is not compliant: {summary}", file=sys.stderr)
    elif accepted is None: print(f"run {i}: {summary}; check it with `tinyperf check {result}`", file=sys.stderr)
  with L.Ledger.locked(ledger_path) as led: left = [i for i in led.pending(nexp) if args.only_index in (None, i)]
  if left:
    print(f"{len(left)} run(s) not finished: {left}; rerun the same command to redo them", file=sys.stderr)
    return 1
  print(f"all {nexp} runs finished: {results_dir}" if args.only_index is None else
        f"run {args.only_index} finished: {results_dir}", flush=True)
  return 0
