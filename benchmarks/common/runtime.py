"""Process setup shared by the training entrypoints: tinygrad knobs, devices, provenance, step timing."""
from __future__ import annotations
import os
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from tinyperf.benchmarks.common.config import ROOT, PlatformConfig
from tinyperf.benchmarks.common.rundir import RunDir, metrics_path, triton_cache
from tinyperf.benchmarks.common.spec import BenchmarkSpec

# knobs tinygrad itself reads from the environment (at import time, and memoised): they must be set before the import
TINYGRAD_ENV = ("DEV", "DEFAULT_FLOAT", "SUM_DTYPE", "IGNORE_JIT_FIRST_BEAM", "BEAM_UOPS_MAX", "BEAM_UPCAST_MAX",
                "BEAM_LOCAL_MAX", "BEAM_MIN_PROGRESS", "BEAM_PADTO", "HCQDEV_WAIT_TIMEOUT_MS", "USE_ATOMICS", "NOOPT")
# of those, the ones that steer a BEAM search (what a search run apart from its trainer must be given too)
TINYGRAD_BEAM_ENV = tuple(k for k in TINYGRAD_ENV if "BEAM" in k)


def apply_tinygrad_env(cfg: PlatformConfig, phase: str, keep_dev: bool = False):
  """Export the config's tinygrad knobs before tinygrad is imported; keep_dev leaves a DEV already in the environment
  (DEV=NULL counts a GPU config's step without the GPU)."""
  if "tinygrad" in sys.modules:
    raise RuntimeError("tinygrad was imported before the platform config was applied; its knobs would be ignored")
  for k in TINYGRAD_ENV:
    if k == "DEV" and keep_dev and os.environ.get("DEV"): continue
    if k in cfg.knobs: os.environ[k] = cfg.env()[k]
  # a RUN process of its own compiles with no worker pool (as upstream): BEAM work belongs to INIT. With both phases
  # in one process (phase "all") INIT searches with the pool and RUN replays what it captured.
  if phase == "run": os.environ.setdefault("PARALLEL", "0")


def require_triton(cfg: PlatformConfig):
  """KERNELS=triton with no importable Triton would run the kernels' tinygrad stand-ins (slow, for CPU tests) on the GPU
  without a word: refused as bad input instead."""
  from tinyperf.benchmarks.common.io import InputError
  if cfg.knobs.get("KERNELS") != "triton": return
  try: import triton   # noqa: F401
  except ImportError:
    raise InputError(f"KERNELS=triton ({cfg.platform}'s config or the environment) needs Triton, which {sys.executable} "
                     "cannot import: run in the tinyperf nv image, or pip install --require-hashes -r "
                     "requirements-kernels.lock, or set KERNELS=tinygrad.") from None


def prepare_cache_db(run: RunDir, fresh: bool) -> Path:
  """tinygrad's sqlite cache (BEAM results, compiled kernels): the run folder's, or CACHEDB's (the rendered scripts name
  one per seed). One file per run, shared by its INIT and RUN; INIT starts it empty so no search result of an earlier
  run is reused (upstream wipes its whole shared cache instead). Triton's compiled kernels go beside it (TRITON_CACHE_DIR
  unless set): they are no search result, only what the fixed tile tables compile to, and are kept."""
  path = Path(os.environ.get("CACHEDB") or run.cache_db).resolve()
  if fresh:
    for suffix in ("", "-wal", "-shm", "-journal"): Path(f"{path}{suffix}").unlink(missing_ok=True)
  path.parent.mkdir(parents=True, exist_ok=True)
  os.environ["CACHEDB"] = str(path)
  os.environ.setdefault("TRITON_CACHE_DIR", str(triton_cache(path)))
  return path


def devices(cfg: PlatformConfig) -> list[str]:
  """GPUS devices named like upstream: DEFAULT:0 .. DEFAULT:n-1 (CPU:0 is the same device as CPU)."""
  from tinygrad import Device
  return [Device.canonicalize(f"{Device.DEFAULT}:{i}") for i in range(cfg["GPUS"])]


def add_run_arguments(p, benchmark: str):
  """Entrypoint options both benchmarks share (env defaults as upstream: BENCHMARK, CKPT, RESUME)."""
  p.add_argument("--work", type=Path, required=True,
                 help="the run's work folder: its MLPerf log, metrics, kernel cache and checkpoints (benchmarks/common/rundir.py)")
  p.add_argument("--log", type=Path, help="MLPerf log file (default: WORK/mlperf.txt)")
  p.add_argument("--config", type=Path, help="a resolved config.json to run with (default: WORK/config.json when "
                 "`tinyperf run` wrote one), or a config.yaml instead of the platform's (development and tests)")
  p.add_argument("--benchmark-steps", type=int, default=int(os.environ.get("BENCHMARK", "0")),
                 help="run the JIT's warm-up steps and then this many timed train steps, print their median step time and the "
                 "projected time to train, and stop (env BENCHMARK)")
  p.add_argument("--ckpt", action="store_true", default=os.environ.get("CKPT", "0") == "1",
                 help="save the full training state after every eval (env CKPT=1)")
  p.add_argument("--resume", type=Path, default=Path(os.environ["RESUME"]) if os.environ.get("RESUME") else None,
                 help="training-state file to resume from (env RESUME)")


def run_entrypoint(spec: BenchmarkSpec, args, phases: dict) -> int:
  """The shared body of every training entrypoint's main(): config (the launcher's resolved one in the work folder, else
  config.yaml + env overrides; overrides printed), tinygrad knobs, the per-run kernel cache, the MLPerf log,
  provenance, then the phase. Bad input -> one paragraph on stderr, exit 2."""
  from tinyperf.benchmarks.common import mlperf
  from tinyperf.benchmarks.common.config import require_closed_model
  from tinyperf.benchmarks.common.rundir import load_run_config
  from tinyperf.benchmarks.common.io import InputError
  start_heartbeat("INIT (building the model, compiling the train step's kernels, BEAM search)"
                  if args.phase in ("init", "all") else "RUN")
  try:
    cfg, submitter = load_run_config(spec, args.platform, args.config, args.work)
    if submitter: mlperf.ORG = submitter   # the launcher's resolved config names it; else SUBMISSION_ORG
    for k, (old, new) in cfg.overridden.items(): print(f"override from environment: {k}={new} (config: {'not set' if old is None else old})")
    if args.phase in ("run", "all"): require_closed_model(cfg)
    apply_tinygrad_env(cfg, args.phase)
    require_triton(cfg)
    # INIT starts its cache empty; a BENCHMARK run given an explicit CACHEDB keeps it (a BEAM search carried over
    # from an earlier measurement: `python -m lab.bench --beam-cache`), which no submission run does
    keep = bool(args.benchmark_steps and os.environ.get("CACHEDB"))
    run = RunDir(args.work)
    prepare_cache_db(run, fresh=args.phase in ("init", "all") and not keep)
    log = args.log or run.log
    mlperf.open_result_log(log)
    if args.phase in ("run", "all"): open_metrics(log)
    print("provenance: " + ", ".join(f"{k}={v}" for k, v in provenance(cfg.knobs).items()), flush=True)
    return phases[args.phase](cfg, args)
  except InputError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  except FloatingPointError as e:  # a non-finite loss: the run failed (its log already ends with run_stop aborted)
    print(f"\n{'!' * 100}\nRUN ABORTED, training failed: {e}\n{'!' * 100}", file=sys.stderr, flush=True)
    return 1


# printed right after run_start: the launcher's console shows it as the start of the timed phase
RUN_STARTED = "RUN (timed): run_start logged, training on the data"


# No silence over 10 s: a compile, a BEAM search or a first eval can print nothing for minutes. A daemon thread prints a
# line when nothing was written to stdout or stderr for HEARTBEAT_S (the launcher's console shows it: HEARTBEAT).
HEARTBEAT_S = 8.0
HEARTBEAT = "still working"
_beat = {"last": 0.0, "stage": "", "t0": 0.0}


class _Stamped:
  """sys.stdout / sys.stderr as they were, noting the time of each write."""
  def __init__(self, f): self._f = f
  def write(self, s):
    if s.strip(): _beat["last"] = time.monotonic()   # an empty write (a hidden progress bar) shows nothing
    return self._f.write(s)
  def __getattr__(self, k): return getattr(object.__getattribute__(self, "_f"), k)   # a copy without _f: AttributeError


def set_stage(stage: str):
  """What the heartbeat says the process is doing."""
  _beat["stage"] = stage


def start_heartbeat(stage: str):
  import threading
  if _beat["t0"]: set_stage(stage); return   # one thread per process
  _beat.update(last=time.monotonic(), stage=stage, t0=time.monotonic())
  sys.stdout, sys.stderr = _Stamped(sys.stdout), _Stamped(sys.stderr)
  def beat():
    while True:
      time.sleep(1.0)
      now = time.monotonic()
      if now - _beat["last"] >= HEARTBEAT_S:
        print(f"{HEARTBEAT}: {_beat['stage']} ({now - _beat['last']:.0f} s since the last line, {now - _beat['t0']:.0f} s "
              f"since the start)", flush=True)
  threading.Thread(target=beat, name="heartbeat", daemon=True).start()


_metrics = None


def open_metrics(log: Path):
  """RUN's metrics file (appended: a resumed run continues it). `tinyperf report` reads it; the console's progress bars
  and lines are for people."""
  global _metrics
  _metrics = open(metrics_path(log), "a", buffering=1)


def metric(kind: str, **fields):
  """One JSON line: kind "step" (step, loss, step_s, wait_s, rate, unit and epoch/steps or samples), "eval", or INIT's
  ranked BEAM search: "beam_kernel" (one per searched kernel) and "beam" (one per captured step; benchmarks/common/beam.py)."""
  if _metrics is None: return
  import json
  _metrics.write(json.dumps({"kind": kind, "time": round(time.time(), 3), **fields}) + "\n")


def host_scalar(t) -> float:
  """A scalar result as a Python number. A multi-device tensor is read from its first device: going through the CPU
  device would start tinygrad's CPU backend (and its compiler) just to copy one number."""
  dev = t.device
  return (t.to(dev[0]) if isinstance(dev, tuple) else t).item()


# the identity of the code an image holds, which `tinyperf build` adds to its build context (tooling/prep/build.py): a file
# in the image's tree, which a compose `environment:` cannot override as it can a variable
IMAGE_CODE_FILE = ".tinyperf-code.json"


def image_code() -> dict:
  """{"code_tree": "sha256:...", "git_sha": ...} of the image this process runs in; {} outside a tinyperf image."""
  import json
  if not os.environ.get("TINYPERF_IMAGE_VENDOR"): return {}   # a checkout: a stray file there names no image
  try:
    with open(ROOT / IMAGE_CODE_FILE, "rb") as f: d = json.loads(f.read(4096))
  except (OSError, ValueError, RecursionError): return {}   # 4 KiB of "[" nests too deep for json
  return {k: d[k] for k in ("code_tree", "git_sha") if isinstance(d.get(k), str)} if isinstance(d, dict) else {}


def provenance(knobs: dict | None = None) -> dict:
  """What produced this log: printed at the top of every phase so a result file carries its own provenance; with the
  run's knobs, also who wrote its big kernels (KERNELS)."""
  def ver(pkg):
    try: return metadata.version(pkg)
    except metadata.PackageNotFoundError: return "not installed"
  sha = os.environ.get("TINYPERF_GIT_SHA")
  if not sha:
    try:
      sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
      # -dirty as `tinyperf build` marks it: `tinyperf package` ships only a clean commit's code with these runs
      if sha and subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30).stdout.strip(): sha += "-dirty"
    except (OSError, subprocess.SubprocessError): sha = ""
  return {"tinyperf": ver("tinyperf"), "git_sha": sha or "unknown", "tinygrad": ver("tinygrad"),
          "mlperf_logging": ver("mlperf-logging"), "python": sys.version.split()[0],
          "image_digest": os.environ.get("TINYPERF_BASE_DIGEST", "none (not in a tinyperf image)"),
          # the image itself ("<tag> <image ID>"), where the launcher told it (`tinyperf run`'s container backend)
          **({"image": os.environ["TINYPERF_IMAGE"]} if os.environ.get("TINYPERF_IMAGE") else {}),
          # the build of that image and the code it holds: what `tinyperf package` compares with the code it ships
          **({"build": os.environ["TINYPERF_BUILD_ID"]} if os.environ.get("TINYPERF_BUILD_ID") else {}),
          **({"code_tree": code} if (code := image_code().get("code_tree")) else {}),
          **({"kernels": knobs.get("KERNELS", "tinygrad")} if knobs is not None else {})}


# A step's JIT captures its first call and replays from the second (captured_jit): the first step of every run
# compiles (minutes for BERT-large). Upstream's BENCHMARK=N reports sorted(all N)[N//2], so its compiling steps are
# part of the median, and with few steps they decide it: a 2-GPU BERT-large run reported 3183 ms where its four
# replayed steps took 2353-2362 ms. Here BENCHMARK=N means N replayed steps after the warm-up, and the median is theirs.
JIT_WARMUP_STEPS = 1


def captured_jit(fxn, *state):
  """fxn as a TinyJit that captures its first call, with state (model, optimizer, scheduler: the training state of
  checkpoint.training_state) realized first. tinygrad's TinyJit runs the first call uncaptured and captures the
  second; uncaptured, every custom kernel's output buffer (a Tensor.empty) is an input of the call's schedule, which
  tinygrad's memory planner leaves alone, so all of them stay allocated to the end of the step. Counted on DEV=NULL,
  BERT-large at BS 96 with KERNELS=triton peaks at 81.8 GiB uncaptured, 44.7 GiB captured: an 80 GB card holds only
  the captured step. A capture replays every kernel it records, so the state must exist before it: a lazily made
  optimizer moment captured as its zero fill would be zeroed at every step (same kernels and results as tinygrad's
  order: test_resnet_integration.py, test_kernels_layernorm.py)."""
  from tinygrad import Tensor, TinyJit
  from tinyperf.benchmarks.common.checkpoint import training_state
  if state: Tensor.realize(*training_state(*state)[0].values())
  jit = TinyJit(fxn)
  jit.cnt = 1   # tinygrad 0.14's _TinyJit: call 0 runs uncaptured, call 1 captures, later calls replay
  return jit


class StepTimer:
  """Wall time per step and per data wait. The first JIT_WARMUP_STEPS steps are kept (shown) but not in the median.
  issues: where given, the host's part of each step, until its kernels are launched (the GPU waits for it after a sync)."""
  def __init__(self, warmup: int = JIT_WARMUP_STEPS): self.warmup, self.steps, self.waits, self.issues = warmup, [], [], []
  def add(self, step_s: float, wait_s: float, issue_s: float | None = None):
    self.steps.append(step_s); self.waits.append(wait_s)
    if issue_s is not None: self.issues.append(issue_s)
  def timed(self) -> list[float]:
    """The replayed steps; all steps when there are no more than the warm-up ones (a run stopped that early)."""
    return self.steps[self.warmup:] if len(self.steps) > self.warmup else self.steps
  def done(self, benchmark: int) -> bool: return len(self.steps) >= self.warmup + benchmark
  def median(self) -> float:
    t = sorted(self.timed())
    return t[len(t) // 2]
  def summary(self, items_per_step: int, steps_to_train: int, unit: str, no_projection: str = "") -> str:
    """no_projection: why a time to train projected from this step means nothing (no_projection(cfg)); '' projects."""
    med = self.median()
    minutes = med * steps_to_train / 60
    projection = (f"no projected time to train: {no_projection}" if no_projection else
                  f"projected time to train {int(minutes//60)}h{int(minutes%60)}m ({steps_to_train} steps)")
    return (f"median of {len(self.timed())} steps {med*1e3:.1f} ms (min {min(self.timed())*1e3:.1f}, max "
            f"{max(self.timed())*1e3:.1f}), {items_per_step/med:.1f} {unit}/s, data wait median "
            f"{statistics.median(self.waits)*1e3:.1f} ms; {projection}")


def no_projection(cfg: PlatformConfig) -> str:
  """Why a time to train projected from cfg's step would mean nothing, '' where it means something: a model other than
  the closed one (a toy config like cpu_smoke's, or a knob from the environment) or a CPU platform."""
  from tinyperf.benchmarks.common.rules import closed_model_changes
  if changed := closed_model_changes(cfg.spec, cfg.knobs):
    return (f"{cfg.platform} times a toy model ({', '.join(f'{k}={v}' for k, v in changed.items())}), not the "
            f"closed {cfg.benchmark}")
  return f"{cfg.platform} runs on the CPU" if cfg["vendor"] == "cpu" else ""


def now() -> float: return time.perf_counter()


def timed_init_step(timer: StepTimer, i: int, step) -> None:
  """INIT's train step i on fake data: step() launches it and returns the loss tensor; the wall time runs until the loss
  is on the host, the host's part (issue) until step() returns, when the kernels are launched."""
  t0 = now()
  loss = step()
  issued = now() - t0
  loss = host_scalar(loss)
  timer.add(now() - t0, 0.0, issued)
  print(f"init train step {i}: {timer.steps[-1]*1e3:.1f} ms, loss {loss:.3f}", flush=True)


def epoch_summary(epoch: int, timer: StepTimer, first: int, items_per_step: int, wall_s: float, unit: str) -> str:
  """One line per training epoch from timer's steps first.. (this epoch's): the first steps apart, since a RUN's first
  steps rebuild the JIT (and may compile), then the median of the rest, the data wait, and the epoch's wall time, which
  counts the loader too (what the clock sees)."""
  steps, waits = timer.steps[first:], timer.waits[first:]
  if not steps: return f"epoch {epoch}: no steps"
  rest = sorted(steps[1:]) or steps
  med = rest[len(rest) // 2]
  head = ", ".join(f"{t*1e3:.1f}" for t in steps[:3])
  return (f"epoch {epoch}: {len(steps)} steps in {wall_s:.1f} s ({len(steps)*items_per_step/wall_s:.1f} {unit}/s with "
          f"the loader); first steps {head} ms; median of steps 1.. {med*1e3:.1f} ms ({items_per_step/med:.1f} {unit}/s); "
          f"data wait median {statistics.median(waits)*1e3:.1f} ms, max {max(waits)*1e3:.1f} ms")


def print_bench_record(cfg: PlatformConfig, timer: StepTimer, items_per_step: int, steps_to_train: int, unit: str,
                       init_s: float, ranked_beam: list[dict] | None = None):
  """One machine-readable line for `python -m lab.bench` (which runs this entrypoint as a process and parses it).
  ranked_beam: a ranked search's summary per captured step (beam.SearchReport.summary), None without one."""
  import json
  from tinygrad import Device, GlobalCounters
  med = timer.median()
  toy = no_projection(cfg)
  rec = {"framework": "tinygrad", "benchmark": cfg.benchmark, "platform": cfg.platform, "device": Device.DEFAULT,
         "gpus": cfg["GPUS"], "bs": items_per_step, "dtype": cfg["DEFAULT_FLOAT"], "median_step_ms": med * 1e3,
         f"{unit}_per_s": items_per_step / med, "steps_timed": len(timer.timed()),
         "step_ms": [round(t * 1e3, 1) for t in timer.timed()], "warmup_ms": [round(t * 1e3, 1) for t in timer.steps[:timer.warmup]],
         # the host's part of each timed step (batch upload, the JIT's replay call): a slow host shows here, not in kernels
         **({"issue_ms": [round(t * 1e3, 2) for t in timer.issues[timer.warmup:]]} if len(timer.issues) == len(timer.steps) else {}),
         "mem_used_gb": GlobalCounters.mem_used / 1e9, "init_s": init_s,
         "projected_minutes": None if toy else med * steps_to_train / 60, **({"no_projection": toy} if toy else {}),
         "beam": {k: cfg.knobs[k] for k in cfg.knobs if "BEAM" in k},
         # knobs this run took from the environment over its config file (BERT_LAYERS=2, a --vary): a record of 2 layers
         # must not read as the config's 24
         "overrides": {k: env for k, (_, env) in cfg.overridden.items()},
         **({"ranked_beam": ranked_beam} if ranked_beam is not None else {}), **provenance(cfg.knobs)}
  print("tinyperf-bench " + json.dumps(rec), flush=True)
