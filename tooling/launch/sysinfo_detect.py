"""What `tinyperf sysinfo` finds out about the machine it runs on (tooling/launch/sysinfo.py merges, validates and
writes it): the Probe it reads through (files, commands, environment; tests feed it recorded outputs), a parser per
source (text in, facts out) and detect(), the facts as systems-JSON fields with notes on how each was found."""
from __future__ import annotations
import csv
import io
import json
import os
import platform as pyplatform
import re
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

from tinyperf.benchmarks.common.config import ROOT

NVIDIA_QUERY = "index,name,memory.total,driver_version,clocks.max.sm,pci.bus_id"
ROCM_ARGS = ["--showproductname", "--showmeminfo", "vram", "--showdriverversion", "--json"]


# ---------------------------------------------------------------------------------------------------------------------
# where detection reads from

class Probe:
  """The live machine: file contents, command output, environment. Each returns None when unavailable."""
  def read(self, path: str) -> str | None:
    try: return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError: return None

  def run(self, cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None: return None
    try:
      p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, errors="replace")
    except (OSError, subprocess.SubprocessError):
      return None
    return p.stdout if p.returncode == 0 else None

  def env(self, name: str) -> str | None: return os.environ.get(name) or None

  def version(self, dist: str) -> str | None:
    try: return metadata.version(dist)
    except metadata.PackageNotFoundError: return None

  def vcs_commit(self, dist: str) -> str | None:
    """The commit a package was installed from (pip's direct_url.json), None for an index release."""
    try: raw = metadata.distribution(dist).read_text("direct_url.json")
    except metadata.PackageNotFoundError: return None
    try: return (json.loads(raw or "{}").get("vcs_info") or {}).get("commit_id")
    except (json.JSONDecodeError, AttributeError): return None


# ---------------------------------------------------------------------------------------------------------------------
# parsers (pure: text in, facts out)

def parse_cpuinfo(text: str) -> dict:
  """/proc/cpuinfo -> model, sockets, cores and vCPUs per socket, current MHz (x86 layout; others best effort)."""
  blocks = [b for b in re.split(r"\n\s*\n", text.strip()) if b.strip()]
  procs = []
  for b in blocks:
    d = {}
    for line in b.splitlines():
      if ":" in line:
        k, v = line.split(":", 1)
        d[k.strip()] = v.strip()
    if "processor" in d: procs.append(d)
  if not procs: return {}
  vcpus = len(procs)
  sockets = len({p.get("physical id", "0") for p in procs})
  cores = len({(p.get("physical id", "0"), p["core id"]) for p in procs if "core id" in p})
  if not cores:
    per = procs[0].get("cpu cores")
    cores = int(per) * sockets if per and per.isdigit() else vcpus
  model = procs[0].get("model name") or procs[0].get("Processor") or procs[0].get("cpu model") or ""
  mhz = procs[0].get("cpu MHz")
  return {"model": re.sub(r"\s+", " ", model), "sockets": sockets, "cores_per_socket": cores // sockets,
          "vcpus_per_socket": vcpus // sockets, "vcpus": vcpus, "mhz": float(mhz) if mhz else None}


def parse_meminfo(text: str) -> int | None:
  """MemTotal in bytes."""
  m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.M)
  return int(m.group(1)) * 1024 if m else None


def parse_os_release(text: str) -> str:
  vals = {}
  for line in text.splitlines():
    if "=" in line:
      k, v = line.split("=", 1)
      vals[k.strip()] = v.strip().strip('"')
  return vals.get("PRETTY_NAME") or " ".join(x for x in (vals.get("NAME"), vals.get("VERSION")) if x)


def _gib(nbytes: float) -> str:
  g = nbytes / 2 ** 30
  return f"{g:.0f} GiB" if g >= 10 else f"{g:.1f} GiB"


def _size_kib(s: str) -> int | None:
  m = re.fullmatch(r"(\d+)\s*([KMG]?)", s.strip())
  if not m: return None
  return int(m.group(1)) * {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024 ** 2}[m.group(2)]


def format_caches(entries: list[tuple[str, str, str]]) -> str:
  """(level, type, size) of cpu0's caches -> 'L1d 48 KiB, L1i 32 KiB, L2 2 MiB, L3 300 MiB' (per core or shared)."""
  out = []
  for level, typ, size in sorted(entries):
    kib = _size_kib(size)
    if kib is None: continue
    name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(typ, "")
    out.append(f"{name} {kib // 1024:.0f} MiB" if kib >= 1024 and kib % 1024 == 0 else f"{name} {kib:.0f} KiB")
  return ", ".join(out)


def parse_nvidia_csv(text: str) -> list[dict]:
  """`nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm,pci.bus_id --format=csv,noheader,
  nounits`: one row per GPU. A header row or unit suffixes (without nounits) are tolerated."""
  gpus = []
  for row in csv.reader(io.StringIO(text)):
    row = [c.strip() for c in row]
    if len(row) < 6 or row[0].lower() == "index" or not row[0].isdigit(): continue
    mem = re.match(r"[\d.]+", row[2])
    clk = re.match(r"[\d.]+", row[4])
    gpus.append({"index": int(row[0]), "name": row[1], "memory_bytes": float(mem.group()) * 2 ** 20 if mem else None,
                 "driver": row[3], "max_clock_mhz": float(clk.group()) if clk else None, "bus_id": row[5]})
  return gpus


def parse_nvidia_cuda_version(text: str) -> str | None:
  """The CUDA version the driver supports, from nvidia-smi's banner ('CUDA Version: 13.0')."""
  m = re.search(r"CUDA Version:\s*([\d.]+)", text)
  return m.group(1) if m else None


def parse_nvidia_topology(text: str) -> str:
  """`nvidia-smi topo -m` -> 'NVLink (NV18)' or 'PCIe (PHB)' etc.: the link types between pairs of GPUs."""
  lines = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in text.splitlines()]
  header = next((t for t in (l.split() for l in lines) if t[:1] == ["GPU0"] and "X" not in t), None)
  if not header: return ""
  ngpu = sum(1 for h in header if re.fullmatch(r"GPU\d+", h))
  links = set()
  for l in lines:
    cells = l.split()
    if cells and re.fullmatch(r"GPU\d+", cells[0]) and "X" in cells[1:ngpu + 1]:   # a matrix row, not the header
      links.update(c for c in cells[1:ngpu + 1] if c != "X")
  nv = sorted(l for l in links if l.startswith("NV"))
  other = sorted(l for l in links if not l.startswith("NV"))
  parts = ([f"NVLink ({', '.join(nv)})"] if nv else []) + ([f"PCIe ({', '.join(other)})"] if other else [])
  return "; ".join(parts)


def parse_rocm_json(text: str) -> tuple[list[dict], str | None]:
  """`rocm-smi --showproductname --showmeminfo vram --showdriverversion --json` -> (cards, driver version).
  rocm-smi may print warnings before the JSON; key spellings vary between versions, so keys match case-insensitively."""
  start = text.find("{")
  if start < 0: return [], None
  try:
    data = json.loads(text[start:])
  except json.JSONDecodeError:
    return [], None
  if not isinstance(data, dict): return [], None

  def get(d: dict, *names):
    low = {k.lower(): v for k, v in d.items()}
    for n in names:
      if low.get(n.lower()) not in (None, "", "N/A"): return str(low[n.lower()])
    return None

  cards, driver = [], None
  for key, val in sorted(data.items(), key=lambda kv: (len(kv[0]), kv[0])):
    if not isinstance(val, dict): continue
    if re.fullmatch(r"card\d+", key):
      mem = get(val, "VRAM Total Memory (B)")
      cards.append({"index": int(key[4:]), "name": get(val, "Card series", "Card SKU", "Device Name", "Card model") or "",
                    "memory_bytes": float(mem) if mem and mem.isdigit() else None, "driver": get(val, "Driver version")})
    elif key == "system":
      driver = get(val, "Driver version")
  driver = driver or next((c["driver"] for c in cards if c["driver"]), None)
  return cards, driver


# ---------------------------------------------------------------------------------------------------------------------
# detection

def _git_sha(probe: Probe) -> str | None:
  sha = probe.env("TINYPERF_GIT_SHA")
  if sha: return sha
  out = probe.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
  return out.strip() if out and out.strip() else None


def detect(probe: Probe | None = None) -> tuple[dict, list[str]]:
  """Facts about this machine as systems-JSON fields, and notes on how each was found (for hw_notes / the user)."""
  probe = probe or Probe()
  f: dict = {"number_of_nodes": "1"}
  notes: list[str] = []
  stack: dict = {}

  cpu = parse_cpuinfo(probe.read("/proc/cpuinfo") or "")
  if cpu:
    f["host_processors_per_node"] = str(cpu["sockets"])
    f["host_processor_model_name"] = cpu["model"]
    f["host_processor_core_count"] = str(cpu["cores_per_socket"])
    f["host_processor_vcpu_count"] = str(cpu["vcpus_per_socket"])
    notes.append("host core and vCPU counts are per processor (socket), from /proc/cpuinfo")
    khz = (probe.read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") or "").strip()
    if khz.isdigit():
      f["host_processor_frequency"] = f"{int(khz) / 1000:.0f} MHz"
    elif cpu["mhz"]:
      f["host_processor_frequency"] = f"{cpu['mhz']:.0f} MHz"
      notes.append("host_processor_frequency is /proc/cpuinfo's current clock (no cpufreq maximum is exposed)")
  caches = []
  for i in range(8):
    base = f"/sys/devices/system/cpu/cpu0/cache/index{i}"
    level, typ, size = (probe.read(f"{base}/{x}") for x in ("level", "type", "size"))
    if level is None: break
    if typ is not None and size is not None: caches.append((level.strip(), typ.strip(), size.strip()))
  if caches: f["host_processor_caches"] = format_caches(caches)
  mem = parse_meminfo(probe.read("/proc/meminfo") or "")
  if mem:
    f["host_memory_capacity"] = _gib(mem)
    notes.append("host_memory_capacity is MemTotal (usable memory, a little below the installed capacity)")

  smi = probe.run(["nvidia-smi", f"--query-gpu={NVIDIA_QUERY}", "--format=csv,noheader,nounits"])
  gpus = parse_nvidia_csv(smi) if smi else []
  if gpus:
    _accelerators(f, gpus, notes)
    driver = gpus[0]["driver"]
    stack["nvidia_driver"] = driver
    banner = probe.run(["nvidia-smi"]) or ""
    cuda_driver = parse_nvidia_cuda_version(banner)
    cuda_rt = probe.env("CUDA_VERSION")  # set by the nvidia/cuda base images: the toolkit libraries in the image
    if cuda_rt: stack["CUDA"] = cuda_rt
    elif cuda_driver: stack["CUDA"] = f"{cuda_driver} (highest the driver supports; no CUDA_VERSION in the environment)"
    if cuda_driver: stack["cuda_driver_api"] = cuda_driver
    topo = parse_nvidia_topology(probe.run(["nvidia-smi", "topo", "-m"]) or "") if len(gpus) > 1 else ""
    if topo: f["accelerator_interconnect"] = topo
    notes.append("accelerators from nvidia-smi")
  else:
    out = probe.run(["rocm-smi", *ROCM_ARGS])
    cards, driver = parse_rocm_json(out) if out else ([], None)
    if cards:
      _accelerators(f, cards, notes)
      if driver: stack["amdgpu_driver"] = driver
      rocm_path = probe.env("ROCM_PATH") or "/opt/rocm"
      rocm = (probe.read(f"{rocm_path}/.info/version") or "").strip() or probe.env("ROCM_VERSION")
      if rocm: stack["ROCm"] = rocm
      notes.append("accelerators from rocm-smi")
    else:
      f["accelerators_per_node"] = "0"
      f["accelerator_model_name"] = "none (CPU only)"
      notes.append("no accelerator found (neither nvidia-smi nor rocm-smi answered)")

  os_name = parse_os_release(probe.read("/etc/os-release") or "")
  if os_name: f["operating_system"] = os_name
  stack["kernel"] = probe.env("TINYPERF_KERNEL") or pyplatform.release()
  stack["python"] = probe.env("TINYPERF_PYTHON") or pyplatform.python_version()
  tg = probe.version("tinygrad")
  commit = probe.vcs_commit("tinygrad") if tg else None
  f["framework"] = (f"tinygrad {tg}, commit {commit}" if commit else f"tinygrad {tg} (PyPI)") if tg else \
    "tinygrad (not installed in this Python)"
  if not tg: notes.append("tinygrad is not installed in the Python that ran sysinfo: run it where training runs")
  for dist in ("mlperf-logging", "tinyperf"):
    v = probe.version(dist)
    if v: stack[dist] = v
  sha = _git_sha(probe)
  if sha: stack["tinyperf_commit"] = sha
  digest = probe.env("TINYPERF_BASE_DIGEST")
  stack["base_image_digest"] = digest or "none (not run in a tinyperf image)"
  image = probe.env("TINYPERF_IMAGE")   # set by `tinyperf run`'s container backend: "<tag> <image ID>"
  if image: stack["image"] = image
  f["other_software_stack"] = stack
  if image: f["sw_notes"] = f"image {image}; base image {digest or 'digest unknown'}"
  else: f["sw_notes"] = f"base image {digest}" if digest else "not run in a tinyperf image"
  return f, notes


def _accelerators(f: dict, devs: list[dict], notes: list[str]) -> None:
  names = sorted({d["name"] for d in devs})
  f["accelerators_per_node"] = str(len(devs))
  f["accelerator_model_name"] = " + ".join(names)
  if len(names) > 1: notes.append(f"mixed accelerator models: {', '.join(names)}")
  mems = sorted({d["memory_bytes"] for d in devs if d.get("memory_bytes")})
  if mems: f["accelerator_memory_capacity"] = _gib(mems[0])
  clocks = sorted({d["max_clock_mhz"] for d in devs if d.get("max_clock_mhz")})
  if clocks: f["accelerator_frequency"] = f"{clocks[-1]:.0f} MHz"
