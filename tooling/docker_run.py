"""The container backend of `tinyperf run`: one container per run (preflight + INIT + RUN inside), the host's page cache
dropped before each, its console output streamed to the run's output.log while it runs.

Per run i (seed S), under R/runs/<system>/<bm>/run_<i>_<S>/ on the host:
  /work   that directory (rw): output.log (written by the launcher), mlperf.txt, exit_codes.json
  /cache  its cache/ subdirectory (rw): tinygrad's kernel/BEAM database, filled by INIT and read by RUN
  /data   the data set (read-only)
The container runs as the host user (or, when the launcher is root, as the image's non-root user, UID 1000, with the
run directory handed to it) with the platform's GPUs, a /dev/shm sized from the config, memlock/stack ulimits, no
network and never --privileged: the same settings compose.yaml gives its services (both come from the config)."""
from __future__ import annotations
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.config import PlatformConfig
from benchmarks.common.mlperf import evict_files
from benchmarks.preflight import shm_size_for
from tooling import container as C
from tooling.errors import UserError
from tooling.ledger import IMAGE_ENV
from tooling import results_tree as T

IMAGE_UID = 1000   # the image's `tinyperf` user (docker/install.sh)


def drop_host_page_cache(data: Path) -> str:
  """Flush the host page cache before a run, as the rules require; returns the method (recorded and logged).
  Root writes /proc/sys/vm/drop_caches; otherwise passwordless `sudo -n sysctl`; otherwise evict the dataset's own
  files with posix_fadvise(DONTNEED), which needs no privilege but is per-file, not a global flush."""
  os.sync()
  if os.geteuid() == 0:
    try:
      with open("/proc/sys/vm/drop_caches", "w") as f: f.write("3\n")
      return "drop_caches (root)"
    except OSError:
      pass
  elif shutil.which("sudo"):
    r = subprocess.run(["sudo", "-n", "sysctl", "-q", "vm.drop_caches=3"], capture_output=True, timeout=120)
    if r.returncode == 0: return "drop_caches (sudo -n sysctl)"
  n = evict_files([data]) if data.is_dir() else 0
  return f"posix_fadvise(DONTNEED) over {n} dataset files (no root, no passwordless sudo)"


class ContainerBackend:
  def __init__(self, cfg: PlatformConfig, image: str | None, data: Path, work_root: Path, client=None):
    self.cfg, self.data, self.work_root = cfg, Path(data).resolve(), Path(work_root).resolve()
    self.vendor = cfg["vendor"]
    self.tag = image or f"tinyperf:{self.vendor}"
    self.client = client or C.connect(timeout=600, instead="run on this host with --no-container")
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
  def describe(self) -> str: return f"{self.tag} ({self.image.short_id}, user {self.user})"
  def image_ref(self) -> str: return f"{self.tag} {self.image.id}"

  def provenance(self) -> dict:
    env = dict(e.split("=", 1) for e in (self.image.attrs.get("Config") or {}).get("Env") or [] if "=" in e)
    return {k: env.get(k) for k in IMAGE_ENV}

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
    knob_env = {k: str(new) for k, (_, new) in self.cfg.overridden.items()}  # BS=512 tinyperf run ... reaches the run
    knob_env.update({k: os.environ[k] for k in ("SUBMISSION_ORG",) if k in os.environ})   # tinyperf run --org
    return C.RunSpec(image=self.image.id, command=command, name=name, mounts=mounts, vendor=self.vendor,
                     gpus=self.cfg["GPUS"], shm_size=shm_size_for(self.cfg), user=self.user, labels=labels,
                     render_gid=self.render_gid, memlock=self.memlock,
                     environment={"HOME": "/tmp", "PYTHONUNBUFFERED": "1", **knob_env, **env})

  def _name(self, suffix: str) -> str:
    return f"tinyperf-{self.cfg['system']}-{self.cfg.benchmark}-{suffix}".replace("_", "-").lower()

  def _own(self, *paths: Path):
    if self.root:
      for p in paths: C.chown_tree(p, IMAGE_UID, IMAGE_UID)

  # ----------------------------------------------------------------------------------------------------- preflight
  def preflight(self):
    """Preflight in a container exactly like the runs' (same image, devices, mounts, user): UserError if unfit."""
    self._own(self.work_root)
    cmd = ["python", "-m", "benchmarks.preflight", "--benchmark", self.cfg.benchmark, "--platform",
           self.cfg.platform, "--data", "/data", "--work", "/work"]
    spec = self._spec(self._name(f"preflight-{os.getpid()}"), cmd,
                      [(str(self.data), "/data", True), (str(self.work_root), "/work", False)], {}, "preflight", {})
    out = bytearray()
    rc = C.Running(self.client, spec).run(lambda b: (out.extend(b), sys.stdout.buffer.write(b), sys.stdout.flush()),
                                          limit_s=600)
    if rc != 0:
      failed = [l for l in out.decode(errors="replace").splitlines() if "FAILED" in l or "Error" in l] or \
               out.decode(errors="replace").splitlines()[-5:]
      raise UserError(f"preflight failed in {self.tag} for {self.cfg.benchmark} on {self.cfg.platform} (exit {rc}):\n  " +
                      "\n  ".join(failed) + "\nNothing was run or timed; fix the above and rerun the same command.")

  # ------------------------------------------------------------------------------------------------------ sysinfo
  def detect_system(self) -> tuple[dict, list[str]]:
    """The machine as the runs see it: `python -m tooling.sysinfo` in a container like the runs' (same image, devices
    and user), told its image in TINYPERF_IMAGE. Returns (fields, notes) for sysinfo.run_description."""
    d = Path(tempfile.mkdtemp(prefix="sysinfo-", dir=self.work_root))
    try:
      d.chmod(0o755); self._own(d)
      cmd = ["python", "-m", "tooling.sysinfo", "--detect-json", "/work/detected.json"]
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
                        f"`tinyperf run` recorded the system has no `python -m tooling.sysinfo`: rebuild it with "
                        f"`tinyperf build --vendor {self.vendor}`. Nothing was run or timed.")
      return fields, list(notes)
    finally:
      shutil.rmtree(d, ignore_errors=True)

  # ----------------------------------------------------------------------------------------------------------- run
  def drop_page_cache(self) -> str:
    method = drop_host_page_cache(self.data)
    print(f"host page cache: {method}", flush=True)
    return method

  def run_one(self, index: int, seed: int, work: Path, out_file, cache_drop: str, console) -> tuple[dict, Path, str]:
    """One INIT + RUN in a fresh container; its output goes to out_file and console (a tooling.console.Console).
    Returns (exit codes, MLPerf log path, note for the ledger)."""
    cache = work / T.CACHE; cache.mkdir(exist_ok=True)
    self._own(work)
    cmd = ["python", "-m", "tooling.inside", "--benchmark", self.cfg.benchmark, "--platform", self.cfg.platform,
           "--seed", str(seed), "--data", "/data", "--work", "/work", "--cache", "/cache"]
    spec = self._spec(self._name(f"{index}-{seed}"), cmd,
                      [(str(self.data), "/data", True), (str(work), "/work", False), (str(cache), "/cache", False)],
                      {"TINYPERF_CACHE_DROPPED": cache_drop}, "run", {f"{C.LABEL}.index": str(index), f"{C.LABEL}.seed": str(seed)})
    def sink(chunk: bytes):
      out_file.write(chunk); out_file.flush()
      console(chunk)
    running = C.Running(self.client, spec)
    limit = self.cfg["time_limit_minutes"] * 60
    console.say(f"container {spec.name}")
    t0 = time.time()
    rc = running.run(sink, limit_s=limit)
    codes_file = work / "exit_codes.json"
    try:
      codes = json.loads(codes_file.read_text())
    except (OSError, json.JSONDecodeError):
      codes = {}
    codes["container"] = rc
    note = ""
    if running.timed_out: note = f"killed after the platform's time limit ({self.cfg['time_limit_minutes']} min)"
    elif "run" not in codes and "preflight" not in codes:
      note = f"container exited {rc} after {time.time() - t0:.0f} s before finishing (killed or crashed)"
    elif "preflight" in codes: note = "preflight failed inside the run's container"
    return codes, work / T.RUN_LOG, note
