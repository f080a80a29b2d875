"""`python -m tinyperf.benchmarks.preflight --platform P --benchmark B --data D --work W [--config F]`: is this container fit to run?

Runs once per `tinyperf run`, where the runs run (a container like theirs), before any run is claimed or timed, so a
mismatch fails in seconds with a clear message instead of minutes into INIT. Its config: F, the resolved config.json
the launcher wrote for it (benchmarks/common/rundir.py), else W/config.json, else the platform's config.yaml. Checks:
  gpus     the GPU count the container sees equals the config's GPUS (nv: /dev/nvidiaN; amd: KFD GPU nodes)
  driver   nv: the kernel driver (/proc/driver/nvidia/version) is at least the image's TINYPERF_MIN_DRIVER
  cwsr     amd platforms whose host prerequisites require it: /sys/module/amdgpu/parameters/cwsr_enable reads 0
  data     the dataset manifest (resnet: manifest.json, every listed file present; bert: train and eval shards)
  disk     free space where results and the kernel cache are written
  shm      /dev/shm holds the loader's shared-memory rings (docker's default 64 MB does not)
  cores    resnet: the cores the loader needs to feed the GPUs (benchmarks/common/feeding.py) against the cores this
           container may use; too few is a loud WARNING, not a failure (the run is slower, not wrong)
Exit 0 when all pass, 2 otherwise (bad environment: nothing was run). One line per check."""
from __future__ import annotations
import argparse
import glob
import importlib
import os
import re
import shutil
import socket
import sys
from pathlib import Path

from tinyperf.benchmarks.common.config import PlatformConfig
from tinyperf.benchmarks.common.io import two_sizes

GiB = 2**30


def shm_bytes_needed(cfg: PlatformConfig) -> int:
  """Shared memory the data loader maps: the train and eval rings of decoded images (uint8 HWC; spec.loader_shm), both
  alive at once in the worst case. A loader of memory-mapped shards needs no shared memory beyond the default."""
  if not cfg.spec.loader_shm: return 0
  s, ring = cfg["IMAGE_SIZE"], cfg["SHM_RING_BATCHES"]
  return ring * (cfg["BS"] + cfg["EVAL_BS"]) * s * s * 3


def shm_size_for(cfg: PlatformConfig) -> str:
  """The container's --shm-size: the rings plus 25 % and 1 GiB of headroom, rounded up to whole GiB."""
  need = shm_bytes_needed(cfg)
  return f"{-(-int(need * 1.25 + GiB) // GiB)}g"


def min_free_bytes(cfg: PlatformConfig) -> int:
  """Results, the raw console log, the kernel cache and (with CKPT=1) checkpoints (spec.min_free_gb on a GPU)."""
  default = 1 if cfg["vendor"] == "cpu" else cfg.spec.min_free_gb
  return int(float(os.environ.get("TINYPERF_MIN_FREE_GB", default)) * GiB)


def _version_tuple(v: str) -> tuple[int, ...]: return tuple(int(x) for x in re.findall(r"\d+", v))


def visible_gpus(vendor: str, root: Path = Path("/")) -> tuple[int, str | None]:
  """(GPUs of vendor nv|amd this machine or container shows, why none can be used or None), from the device nodes the
  backends open: no tinygrad import (its device probe falls back to the CPU and compiles there)."""
  p = lambda path: root / path.lstrip("/")
  if vendor == "nv":
    nodes = sorted(n for n in glob.glob(str(p("/dev/nvidia*"))) if re.fullmatch(r"nvidia\d+", Path(n).name))
    missing = [n for n in ("/dev/nvidiactl", "/dev/nvidia-uvm") if not p(n).exists()]
    if missing or not nodes:
      return 0, (f"no NVIDIA GPU in this container or machine ({', '.join(missing) or '/dev/nvidiaN'} missing). Start it with the "
                 f"NVIDIA container toolkit (compose deploy.resources.reservations.devices, `--gpus`), and check "
                 f"`nvidia-smi` on the host.")
    return len(nodes), None
  kfd, dri = p("/dev/kfd"), glob.glob(str(p("/dev/dri/renderD*")))
  if not kfd.exists() or not dri:
    return 0, ("no AMD GPU in this container or machine (/dev/kfd or /dev/dri/renderD* missing). Start it with --device /dev/kfd "
               "--device /dev/dri and the host's render group (compose does this).")
  if not os.access(kfd, os.R_OK | os.W_OK):
    return 0, (f"/dev/kfd is not accessible to uid {os.getuid()} (groups {os.getgroups()}): add the host's render group "
               f"(compose: RENDER_GID=$(stat -c %g /dev/dri/renderD128)).")
  have = 0
  for props in glob.glob(str(p("/sys/class/kfd/kfd/topology/nodes/*/properties"))):
    m = re.search(r"^simd_count\s+(\d+)", Path(props).read_text(), re.M)
    if m and int(m.group(1)) > 0: have += 1
  return have, None


class Preflight:
  def __init__(self, cfg: PlatformConfig, data: Path | None, work: Path, sysroot: str = "/", host_cores: int | None = None):
    self.cfg, self.data, self.work, self.root = cfg, data, work, Path(sysroot)
    self.host_cores = host_cores   # None: what this process may use (affinity, cgroup quota under sysroot)
    self.results: list[tuple[str, bool, str]] = []
    self.warned: list[str] = []

  def p(self, path: str) -> Path: return self.root / path.lstrip("/")

  def record(self, name: str, ok: bool, detail: str):
    self.results.append((name, ok, detail))
    print(f"preflight {'ok    ' if ok else 'FAILED'} {name}: {detail}", flush=True)

  # ------------------------------------------------------------------------------------------------------- checks
  def gpus(self):
    vendor, want = self.cfg["vendor"], self.cfg["GPUS"]
    if vendor == "cpu": return self.record("gpus", True, "cpu platform: no GPU needed")
    have, problem = visible_gpus(vendor, self.root)
    if problem: return self.record("gpus", False, problem)
    ok = have == want
    self.record("gpus", ok, f"{have} {vendor.upper()} GPU(s) visible, config GPUS={want}" +
                ("" if ok else f". The config ({self.cfg.path.name} of {self.cfg.platform}) shards over {want}: run on a "
                 f"machine with {want}, or expose exactly {want} (compose count / device_ids, --gpus '\"device=...\"')."))

  def driver(self):
    vendor = self.cfg["vendor"]
    if vendor == "nv":
      f = self.p("/proc/driver/nvidia/version")
      if not f.exists(): return self.record("driver", False, f"{f} is missing: no NVIDIA kernel driver is visible.")
      m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", f.read_text())
      have = m.group(1) if m else "unknown"
      want = os.environ.get("TINYPERF_MIN_DRIVER", "")
      if not want or not m: return self.record("driver", bool(m), f"NVIDIA driver {have}")
      ok = _version_tuple(have) >= _version_tuple(want)
      return self.record("driver", ok, f"NVIDIA driver {have}, image needs >= {want}" +
                         ("" if ok else ": upgrade the host driver (tinybox green: the 550.54.15 P2P module)."))
    if vendor == "amd":
      f = self.p("/sys/module/amdgpu/version")
      return self.record("driver", True, f"amdgpu {f.read_text().strip() if f.exists() else '(in-tree, no version file)'}")
    self.record("driver", True, "cpu platform: no driver needed")

  def cwsr(self):
    needs = any("cwsr_enable=0" in str(x) for x in self.cfg.get("host_prerequisites") or [])
    if self.cfg["vendor"] != "amd" or not needs: return
    f = self.p("/sys/module/amdgpu/parameters/cwsr_enable")
    val = f.read_text().strip() if f.exists() else None
    self.record("cwsr", val == "0", f"cwsr_enable={val}" + ("" if val == "0" else
                f" ({f} must read 0 for {self.cfg.platform}): set `options amdgpu cwsr_enable=0` in "
                f"/etc/modprobe.d/amdgpu.conf on the host, update-initramfs -u, reboot."))

  def dataset(self):
    d = self.data
    if d is None: return self.record("data", False, "no data directory given (--data).")
    try:
      # each benchmark's loader module knows its data set (benchmarks/<bm>/data.py, as train.py is its entrypoint)
      detail = importlib.import_module(f"tinyperf.benchmarks.{self.cfg.benchmark}.data").check_prepared(self.cfg, d)
    except Exception as e:  # DataError/ShardError carry the fix; anything else is reported the same way
      return self.record("data", False, str(e))
    self.record("data", True, detail)

  def disk(self):
    need = min_free_bytes(self.cfg)
    try: free = shutil.disk_usage(self.work).free
    except OSError as e: return self.record("disk", False, f"{self.work}: {e.strerror}")
    # unique per host and process: Slurm array tasks on several nodes run their preflights in one results directory
    probe = self.work / f".tinyperf-write-test-{socket.gethostname()}-{os.getpid()}"
    try: probe.write_bytes(b"x"); probe.unlink()
    except OSError as e:
      return self.record("disk", False, f"{self.work} is not writable by uid {os.getuid()} ({e.strerror}); make the "
                         f"results directory writable for that user (tinyperf run does this for you).")
    have, want = two_sizes(free, need)
    self.record("disk", free >= need, f"{have} free under {self.work}, need {want}" +
                ("" if free >= need else ": free space or choose another --results (TINYPERF_MIN_FREE_GB overrides)."))

  def shm(self):
    need = shm_bytes_needed(self.cfg)
    if not need: return
    try: free = shutil.disk_usage(self.p("/dev/shm")).free
    except OSError: return self.record("shm", False, "/dev/shm is missing")
    have, want = two_sizes(free, need)
    self.record("shm", free >= need, f"/dev/shm {have} free, the loader rings need {want}" +
                ("" if free >= need else f": start the container with --shm-size={shm_size_for(self.cfg)} or --ipc=host "
                 f"(compose and tinyperf run size it from the config)."))

  def cores(self):
    if not self.cfg.spec.loader_shm: return
    from tinyperf.benchmarks.common.feeding import banner, budget, host_cores
    b = budget(self.cfg, host_cores(self.root) if self.host_cores is None else self.host_cores)
    warnings = b.warnings()
    self.record("cores", True, b.line() + (" -- WARNING, see below" if warnings else ""))
    if warnings:
      self.warned.append("cores")
      print(banner(warnings), flush=True)

  def run(self) -> int:
    for c in (self.gpus, self.driver, self.cwsr, self.dataset, self.disk, self.shm, self.cores): c()
    bad = [n for n, ok, _ in self.results if not ok]
    print(f"preflight: {len(self.results) - len(bad)} passed, {len(bad)} failed" + (f" ({', '.join(bad)})" if bad else "")
          + (f", warnings: {', '.join(self.warned)}" if self.warned else ""), flush=True)
    return 2 if bad else 0


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m tinyperf.benchmarks.preflight` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog="python -m tinyperf.benchmarks.preflight", description=__doc__.splitlines()[0])
  p.add_argument("--benchmark", required=True)
  p.add_argument("--platform", required=True)
  p.add_argument("--data", type=Path)
  p.add_argument("--work", type=Path, required=True, help="the run's work folder: where its results and cache are written")
  p.add_argument("--config", type=Path, help="a resolved config.json or a config.yaml (default: WORK/config.json, else "
                 "the platform's config.yaml)")
  return p


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  from tinyperf.benchmarks.common.io import InputError
  from tinyperf.benchmarks.common.rundir import load_run_config
  from tinyperf.benchmarks.registry import spec
  try:
    cfg, _ = load_run_config(spec(args.benchmark), args.platform, args.config, args.work)
  except InputError as e:
    print(f"preflight FAILED config: {e}", flush=True)
    return 2
  return Preflight(cfg, args.data, args.work).run()


if __name__ == "__main__":
  sys.exit(main())
