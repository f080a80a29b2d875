"""Where `tinyperf run` runs its runs: the one interface its run loop knows (Backend) and the two places it has.

  HostBackend       `--runtime host`: this Python on this machine, INIT + RUN as one process (host_run). It is also what
                    runs inside an image: a compose service's `tinyperf run`, a Slurm task with --runtime pyxis, and
                    `python -m tinyperf.tooling.launch.inside` in each container of the container backend.
  ContainerBackend  `--runtime docker` (the default): one container per run in the platform's image (preflight + INIT +
                    RUN inside), the host's page cache dropped before each, its output streamed to the run's output.log.

Slurm is not a backend but a scheduler (tooling/launch/slurm.py): each of its array tasks runs `tinyperf run --only-index I`
with one of these on its node.

The container backend, per run i (seed S), under R/runs/<system>/<bm>/run_<i>_<S>/ on the host:
  /work   that directory, the run's RunDir (rw): output.log (written by the launcher), mlperf.txt, exit_codes.json, and
          cache/, tinygrad's kernel/BEAM database, filled by INIT and read by RUN
  /data   the data set (read-only)
The container runs as the host user (or, when the launcher is root, as the image's non-root user, UID 1000, with the
run directory handed to it) with the platform's GPUs, a /dev/shm sized from the config, memlock/stack ulimits, no
network and never --privileged: the same settings compose.yaml gives its services (both come from the config).

Test-only: TRAIN_MODULE_ENV names the module host_run starts instead of tinyperf.benchmarks.<bm>.train (a stand-in that writes a
valid MLPerf log in seconds, for tests of the run loop)."""
from __future__ import annotations
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol

from tinyperf.benchmarks.common.config import ROOT, PlatformConfig
from tinyperf.benchmarks.common.rules import CLOSED_INIT_STOP_S, INIT_LIMIT_MIN
from tinyperf.benchmarks.common.rundir import RunDir
from tinyperf.benchmarks.common.runtime import image_code
from tinyperf.benchmarks.preflight import shm_size_for
from tinyperf.tooling.common import container as C
from tinyperf.tooling.common.errors import UserError
from tinyperf.tooling.common.process import raw_stdout, stream_process
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.launch.scheduler import Scheduler

class Backend(Protocol):
  """What the run loop of `tinyperf run` (tooling/launch/run.py) needs of a place to run, and all it knows of one."""
  kind: str   # what the ledger records as an attempt's backend: "host", or "container" for a run in an image

  def describe(self) -> str:
    """Where the runs run, for the launcher's first line ("on this host (--runtime host)", "in tinyperf:nv (...)")."""
  def image_record(self) -> tuple[str | None, dict]:
    """The image (tag and ID) and its provenance (L.IMAGE_ENV) the ledger records with each attempt; (None, {}) on a host."""
  def detect_system(self) -> tuple[dict, list[str]]:
    """The machine as the runs see it: (fields, notes) for sysinfo.run_description."""
  def drop_page_cache(self) -> str:
    """Flush the host's page cache before a run, as the rules require; returns the method (recorded and logged)."""
  def preflight(self, config: Path) -> None:
    """Once, before any run is claimed, where the runs run, with config (a resolved config.json in the set's runs
    folder): UserError if the machine, data or config is unfit."""
  def run_one(self, index: int, seed: int, run: RunDir, out_file, cache_drop: str, console) -> tuple[dict, Path, str]:
    """INIT + RUN of run `index` with the config.json of its work folder, the output to out_file and console (a
    tinyperf.tooling.launch.console.Console). Returns (exit codes, the MLPerf log's path, a note for the ledger or "")."""


RUNTIMES = ("docker", "pyxis", "host")   # `tinyperf run --runtime`: what runs each run (pyxis: a Slurm task's only)


def open_backend(runtime: str, cfg: PlatformConfig, image: str | None, data: Path, rs: T.ResultSet,
                 scheduler: Scheduler, verbose: bool = False) -> Backend:
  """The backend of `--runtime` docker or host (pyxis is a Slurm task's, which runs host inside its image) for the runs
  of result set rs: UserError when it cannot run here (no daemon, no image, no GPU runtime). scheduler: the one whose
  hints its refusals give."""
  if runtime == "host": return HostBackend(cfg, data, rs, scheduler, verbose)
  return ContainerBackend(cfg, image, data, rs, scheduler)


# ------------------------------------------------------------------------------------------------- the host backend
TRAIN_MODULE_ENV = "TINYPERF_TEST_TRAIN_MODULE"   # test-only, read in train_module() alone


def train_module(benchmark: str) -> str:
  """The training entrypoint host_run starts; TRAIN_MODULE_ENV swaps in a test stand-in (never set outside tests)."""
  return os.environ.get(TRAIN_MODULE_ENV) or f"tinyperf.benchmarks.{benchmark}.train"


# the MLLOG line that ends INIT (mllog prints `"key": "init_stop"`): the INIT time limit stops applying there
INIT_STOP_MARK = b'"key": "init_stop"'


def host_run(cfg: PlatformConfig, seed: int, data: Path, run: RunDir, out_file, cache_db: Path | None = None,
             init_limit_s: float | None = None, console=None, cache_drop: str | None = None) -> tuple[dict, Path]:
  """INIT then RUN in one process with this Python (`--phase all`, RUN replays what INIT compiled), the way
  run_and_time.sh does it, in the run's work folder: the entrypoint names the log and the kernel cache from it.
  HostBackend calls it; in a container, tooling/launch/inside.py does. cache_db: the kernel cache elsewhere (a compose
  service's volume).
  init_limit_s: stop the process if INIT has not ended (init_stop) after this long (default: CLOSED_INIT_STOP_S in the
  closed division, none in open). Returns ({"run": exit code}, log), or {"init": exit code} when INIT was stopped.
  console: a tinyperf.tooling.launch.console.Console (milestones, the tail of a failed run); None: all output raw.
  cache_drop: how the launcher dropped the page cache (INIT logs it instead of dropping it again)."""
  log = run.log
  # a CACHEDB in the launcher's environment must not move the run's cache out of its folder
  env = {**{k: v for k, v in os.environ.items() if k != "CACHEDB"}, "PYTHONUNBUFFERED": "1"}
  if cache_db: env["CACHEDB"] = str(cache_db)
  if cache_drop: env["TINYPERF_CACHE_DROPPED"] = cache_drop
  if init_limit_s is None and cfg["division"] == "closed": init_limit_s = CLOSED_INIT_STOP_S
  cmd = [sys.executable, "-m", train_module(cfg.benchmark), "--platform", cfg.platform, "--phase", "all",
         "--seed", str(seed), "--data", str(data), "--work", str(run.path)]
  if console: console.say("INIT (untimed: JIT warm-up and BEAM search on fake data), then RUN in the same process")
  code, stopped = stream_process(cmd, env, out_file, cwd=ROOT, time_limit=init_limit_s, console=console or raw_stdout,
                                 limit_until=INIT_STOP_MARK)
  # exit 1 with a run_stop is a verdict (target missed, loss not finite: its lines were shown); without one, a crash
  if code != 0 and console and not stopped and (code != 1 or L.log_outcome(log) is None):
    console.failed(f"INIT+RUN exited {code}", getattr(out_file, "name", "its output.log"))
  if stopped:
    msg = (f"\n{'!' * 100}\nINIT stopped after {init_limit_s / 60:.0f} min: the closed rules allow "
           f"{INIT_LIMIT_MIN['closed']} min from init_start to init_stop, so this run could not pass. Narrow the BEAM "
           f"search (the BEAM_* knobs of {cfg.path}) or "
           f"look for a stalled compile in the output above; RUN was not started.\n{'!' * 100}\n")
    sys.stderr.write(msg)
    if out_file is not None: out_file.write(msg.encode()); out_file.flush()
    return {"init": code}, log
  return {"run": code}, log


def _host_preflight(cfg: PlatformConfig, data: Path, rs: T.ResultSet, config: Path, verbose: bool, scheduler: Scheduler):
  cmd = [sys.executable, "-m", "tinyperf.benchmarks.preflight", "--benchmark", cfg.benchmark, "--platform", cfg.platform,
         "--data", str(data), "--work", str(rs.runs_dir), "--config", str(config)]
  r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
  lines = r.stdout.strip().splitlines()
  sys.stdout.write(r.stdout if verbose else (lines[-1] + "\n" if lines else ""))   # quiet: "preflight: N passed"
  if r.returncode != 0:
    failed = [l for l in r.stdout.splitlines() if "FAILED" in l] or (r.stdout + r.stderr).strip().splitlines()[-5:]
    # C.host_paths_in: in a compose service, the paths the user can open on the host
    raise UserError(f"preflight failed for {cfg.benchmark} on {cfg.platform}:\n  " + C.host_paths_in("\n  ".join(failed)) +
                    f"\nNothing was run or timed; fix the above and {scheduler.redo_hint(rs.root)}.")


def drop_host_page_cache(cfg: PlatformConfig, data: Path) -> str:
  """The page-cache drop before a run (benchmarks/common/mlperf.drop_page_cache; the CPU smoke's evicts its data files
  only); INIT logs the method it returns."""
  from tinyperf.benchmarks.common.mlperf import drop_page_cache, drops_host_cache   # mllog: not for every `tinyperf --help`
  return drop_page_cache([data] if data.is_dir() else [], drops_host_cache(cfg))


class HostBackend:
  """This Python on this machine. Inside a tinyperf image (a compose service, a pyxis task: every image sets
  TINYPERF_IMAGE_VENDOR) the ledger records the run as a container run, with the image's name and provenance."""
  def __init__(self, cfg: PlatformConfig, data: Path, rs: T.ResultSet, scheduler: Scheduler, verbose: bool = False):
    self.cfg, self.data, self.rs, self.verbose = cfg, Path(data), rs, verbose
    self.scheduler = scheduler
    self.in_image = os.environ.get("TINYPERF_IMAGE_VENDOR")
    self.kind = "container" if self.in_image else "host"

  def describe(self) -> str: return "on this host (--runtime host)"

  def preflight(self, config: Path): _host_preflight(self.cfg, self.data, self.rs, config, self.verbose, self.scheduler)

  def image_record(self) -> tuple[str | None, dict]:
    if not self.in_image: return None, {}
    return (os.environ.get("TINYPERF_IMAGE") or f"tinyperf:{self.in_image} (image ID not visible inside the container)",
            {**{k: os.environ.get(k) for k in L.IMAGE_ENV}, L.CODE_TREE: image_code().get("code_tree")})

  def detect_system(self) -> tuple[dict, list[str]]:
    from tinyperf.tooling.launch import sysinfo_detect
    return sysinfo_detect.detect()

  def drop_page_cache(self) -> str: return drop_host_page_cache(self.cfg, self.data)   # INIT logs the method instead of dropping again

  def run_one(self, index: int, seed: int, run: RunDir, out_file, cache_drop: str, console) -> tuple[dict, Path, str]:
    # compose services keep tinygrad's kernel cache on their own volume (TINYPERF_CACHE_DIR), one file per run
    cdir = os.environ.get("TINYPERF_CACHE_DIR")
    cache_db = Path(cdir) / f"{self.cfg['system']}_{self.cfg.benchmark}_{index}_{seed}.db" if cdir else None
    if cache_db:   # an earlier attempt of this run (killed, failed) left its cache: this one replaces it
      for old in cache_db.parent.glob(f"{self.cfg['system']}_{self.cfg.benchmark}_{index}_*.db*"):
        if not old.name.startswith(cache_db.name):
          try: old.unlink()
          except OSError: pass   # a cache file is worth no failed run
    codes, log = host_run(self.cfg, seed, self.data, run, out_file, cache_db=cache_db, cache_drop=cache_drop,
                          console=console)
    return codes, log, ""


# -------------------------------------------------------------------------------------------- the container backend
IMAGE_UID = 1000   # the image's `tinyperf` user (docker/install.sh)


class ContainerBackend:
  """One container per run in the platform's image, on this machine's Docker engine; its preflight and system detection
  run in a container like the runs'. Constructing it checks the daemon, the image and the GPU runtime (UserError)."""
  kind = "container"

  def __init__(self, cfg: PlatformConfig, image: str | None, data: Path, rs: T.ResultSet, scheduler: Scheduler,
               client=None):
    self.cfg, self.data, self.rs, self.scheduler = cfg, Path(data).resolve(), rs, scheduler
    self.work_root = rs.runs_dir
    self.vendor = cfg["vendor"]
    self.tag = image or f"tinyperf:{self.vendor}"
    self.client = client or C.connect(timeout=600, instead="run on this host with --runtime host")
    self.image = C.get_image(self.client, self.tag, f"tinyperf build --vendor {self.vendor}")
    labels = self.image.labels or {}
    have = labels.get("io.tinyperf.vendor")
    if have and have != self.vendor:
      raise UserError(f"image {self.tag} is the {have} image but {cfg.platform} runs on {self.vendor}; pass --image "
                      f"tinyperf:{self.vendor} (build it with `tinyperf build --vendor {self.vendor}`). Nothing was run.")
    if cfg["division"] == "closed" and labels.get("io.tinyperf.base.pinned") != "true":
      print(f"WARNING: image {self.tag} was built from an unpinned base ({labels.get('org.opencontainers.image.base.name')}); "
            f"a closed submission should use a digest-pinned base (tinyperf images pin).", file=sys.stderr)
    C.check_gpu_runtime(self.client, self.vendor)
    self.render_gid = C.host_render_gid() if self.vendor == "amd" else None
    if self.vendor == "amd" and self.render_gid is None:
      raise UserError("cannot tell the host's render group (no /dev/dri/renderD*); set TINYPERF_RENDER_GID to the GID "
                      "that owns /dev/dri/renderD* on the host. Nothing was run.")
    self.memlock = C.memlock_limit() if self.vendor in ("nv", "amd") else None
    self.root = os.geteuid() == 0
    self.user = f"{IMAGE_UID}:{IMAGE_UID}" if self.root else f"{os.getuid()}:{os.getgid()}"
    self._stop_stale()

  # ------------------------------------------------------------------------------------------------------ identity
  def describe(self) -> str: return f"in {self.tag} ({self.image.short_id}, user {self.user})"
  def image_ref(self) -> str: return f"{self.tag} {self.image.id}"

  def image_record(self) -> tuple[str, dict]:
    env = dict(e.split("=", 1) for e in (self.image.attrs.get("Config") or {}).get("Env") or [] if "=" in e)
    digests = self.image.attrs.get("RepoDigests") or [None]
    return self.image_ref(), {**{k: env.get(k) for k in L.IMAGE_ENV}, L.IMAGE_ID: self.image.id, L.IMAGE_DIGEST: digests[0],
                              L.CODE_TREE: (self.image.labels or {}).get(f"{C.LABEL}.code_tree")}

  def set_label(self) -> str: return f"{self.work_root}"

  def _stop_stale(self):
    """Containers of this result set left running by a launcher that was killed (SIGKILL, lost terminal) would keep
    writing into old run directories; stop and remove them first."""
    stale = self.client.containers.list(all=True, filters={"label": f"{C.LABEL}.set={self.set_label()}"})
    for c in stale:
      print(f"removing leftover container {c.name} ({c.status}) of an earlier launcher", file=sys.stderr)
      try: c.remove(force=True)
      except Exception: pass

  # --------------------------------------------------------------------------------------------------------- specs
  def _spec(self, name: str, command: list[str], mounts: list, env: dict, kind: str, extra_labels: dict) -> C.RunSpec:
    labels = {f"{C.LABEL}.set": self.set_label(), f"{C.LABEL}.kind": kind, f"{C.LABEL}.benchmark": self.cfg.benchmark,
              f"{C.LABEL}.platform": self.cfg.platform, **extra_labels}
    return C.RunSpec(image=self.image.id, command=command, name=name, mounts=mounts, vendor=self.vendor,
                     gpus=self.cfg["GPUS"], shm_size=shm_size_for(self.cfg), user=self.user, labels=labels,
                     render_gid=self.render_gid, memlock=self.memlock,
                     environment={"HOME": "/tmp", "PYTHONUNBUFFERED": "1", **env})

  def _name(self, suffix: str) -> str:
    return f"tinyperf-{self.cfg['system']}-{self.cfg.benchmark}-{suffix}".replace("_", "-").lower()

  def _own(self, *paths: Path):
    if self.root:
      for p in paths: C.chown_tree(p, IMAGE_UID, IMAGE_UID)

  # ----------------------------------------------------------------------------------------------------- preflight
  def preflight(self, config: Path):
    """Preflight in a container exactly like the runs' (same image, devices, mounts, user): UserError if unfit."""
    self._own(self.work_root)
    cmd = ["python", "-m", "tinyperf.benchmarks.preflight", "--benchmark", self.cfg.benchmark, "--platform",
           self.cfg.platform, "--data", "/data", "--work", "/work", "--config", f"/work/{config.relative_to(self.work_root)}"]
    spec = self._spec(self._name(f"preflight-{os.getpid()}"), cmd,
                      [(str(self.data), "/data", True), (str(self.work_root), "/work", False)], {}, "preflight", {})
    out = bytearray()
    rc = C.Running(self.client, spec).run(lambda b: (out.extend(b), sys.stdout.buffer.write(b), sys.stdout.flush()),
                                          limit_s=600)
    if rc != 0:
      failed = [l for l in out.decode(errors="replace").splitlines() if "FAILED" in l or "Error" in l] or \
               out.decode(errors="replace").splitlines()[-5:]
      raise UserError(f"preflight failed in {self.tag} for {self.cfg.benchmark} on {self.cfg.platform} (exit {rc}):\n  " +
                      "\n  ".join(failed) + f"\nNothing was run or timed; fix the above and "
                      f"{self.scheduler.redo_hint(self.rs.root)}.")

  # ------------------------------------------------------------------------------------------------------ sysinfo
  def detect_system(self) -> tuple[dict, list[str]]:
    """The machine as the runs see it: `python -m tinyperf.tooling.launch.sysinfo` in a container like the runs' (same image, devices
    and user), told its image in TINYPERF_IMAGE. Returns (fields, notes) for sysinfo.run_description."""
    d = Path(tempfile.mkdtemp(prefix="sysinfo-", dir=self.work_root))
    try:
      d.chmod(0o755); self._own(d)
      cmd = ["python", "-m", "tinyperf.tooling.launch.sysinfo", "--detect-json", "/work/detected.json"]
      spec = self._spec(self._name(f"sysinfo-{os.getpid()}"), cmd, [(str(d), "/work", False)],
                        {"TINYPERF_IMAGE": self.image_ref()}, "sysinfo", {})
      out = bytearray()
      rc = C.Running(self.client, spec).run(out.extend, limit_s=600)
      try:
        found = json.loads((d / "detected.json").read_text())
        fields, notes = found["fields"], found["notes"]
      except (OSError, json.JSONDecodeError, KeyError, TypeError):
        fields = None
      if rc != 0 or not isinstance(fields, dict):
        tail = "\n    ".join(out.decode(errors="replace").strip().splitlines()[-8:])
        raise UserError(f"detecting the system in {self.tag} failed (exit {rc}):\n    {tail}\nAn image built before "
                        f"`tinyperf run` recorded the system has no `python -m tinyperf.tooling.launch.sysinfo`: rebuild it with "
                        f"`tinyperf build --vendor {self.vendor}`. Nothing was run or timed.")
      return fields, list(notes)
    finally:
      shutil.rmtree(d, ignore_errors=True)

  # ----------------------------------------------------------------------------------------------------------- run
  def drop_page_cache(self) -> str: return drop_host_page_cache(self.cfg, self.data)

  def run_one(self, index: int, seed: int, run: RunDir, out_file, cache_drop: str, console) -> tuple[dict, Path, str]:
    """One INIT + RUN in a fresh container; its output goes to out_file and console (a tinyperf.tooling.launch.console.Console).
    Returns (exit codes, MLPerf log path, note for the ledger)."""
    self._own(run.path)
    cmd = ["python", "-m", "tinyperf.tooling.launch.inside", "--benchmark", self.cfg.benchmark, "--platform", self.cfg.platform,
           "--seed", str(seed), "--data", "/data", "--work", "/work"]
    spec = self._spec(self._name(f"{index}-{seed}"), cmd, [(str(self.data), "/data", True), (str(run.path), "/work", False)],
                      {"TINYPERF_CACHE_DROPPED": cache_drop, "TINYPERF_IMAGE": self.image_ref()}, "run", {f"{C.LABEL}.index": str(index), f"{C.LABEL}.seed": str(seed)})
    def sink(chunk: bytes):
      out_file.write(chunk); out_file.flush()
      console(chunk)
    running = C.Running(self.client, spec)
    limit = self.cfg["time_limit_minutes"] * 60
    console.say(f"container {spec.name}")
    t0 = time.time()
    rc = running.run(sink, limit_s=limit)
    try:
      codes = json.loads(run.exit_codes.read_text())
    except (OSError, json.JSONDecodeError):
      codes = {}
    codes["container"] = rc
    note = ""
    if running.timed_out: note = f"killed after the platform's time limit ({self.cfg['time_limit_minutes']} min)"
    elif "run" not in codes and "init" not in codes:
      note = f"container exited {rc} after {time.time() - t0:.0f} s before finishing (killed or crashed)"
    if L.log_outcome(run.log) is None: console.failed(f"the container exited {rc}", str(run.output))
    return codes, run.log, note
