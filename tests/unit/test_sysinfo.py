"""`tinyperf sysinfo`: detection from recorded machine outputs (tests/fixtures/sysinfo), overrides, validation with the
real system_desc_checker, and bad input (exit 2, one paragraph, no traceback, nothing written)."""
from __future__ import annotations
import json
import re
import time

import pytest

from conftest import REPO
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.launch import sysinfo, sysinfo_detect
from tinyperf.tooling.launch.run import this_scheduler
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common.errors import UserError
from tinyperf.tooling.cli import main as cli

FIX = REPO / "tests" / "fixtures" / "sysinfo"
H200 = FIX / "h200x2"
CACHE = "/sys/devices/system/cpu/cpu0/cache"


class RecordedProbe(sysinfo_detect.Probe):
  """A machine made of recorded outputs: files, commands (by argv), environment and package versions."""
  def __init__(self, files=None, commands=None, env=None, versions=None):
    self.files, self.commands = dict(files or {}), dict(commands or {})
    self.envs = dict(env or {})
    self.versions = {"tinygrad": "0.14.0", "mlperf-logging": "4.1.68", **(versions or {})}

  def read(self, path): return self.files.get(path)
  def run(self, cmd): return self.commands.get(tuple(cmd))
  def env(self, name): return self.envs.get(name)
  def version(self, dist): return self.versions.get(dist)
  def vcs_commit(self, dist): return None


def nvidia_cmd(): return ("nvidia-smi", f"--query-gpu={sysinfo_detect.NVIDIA_QUERY}", "--format=csv,noheader,nounits")


def h200_probe(**env) -> RecordedProbe:
  files = {"/proc/cpuinfo": (H200 / "cpuinfo").read_text(), "/proc/meminfo": (H200 / "meminfo").read_text(),
           "/etc/os-release": (H200 / "os-release").read_text()}
  for line in (H200 / "caches.txt").read_text().splitlines():
    path, level, typ, size = line.split()
    files.update({f"{path}/level": level, f"{path}/type": typ, f"{path}/size": size})
  commands = {nvidia_cmd(): (H200 / "nvidia-smi-query.csv").read_text(),
              ("nvidia-smi",): (H200 / "nvidia-smi.txt").read_text(),
              ("nvidia-smi", "topo", "-m"): (H200 / "nvidia-smi-topo.txt").read_text()}
  return RecordedProbe(files, commands, {"TINYPERF_KERNEL": "6.8.0", "TINYPERF_PYTHON": "3.12.3",
                                         "TINYPERF_GIT_SHA": "abc123", **env})


def cpuinfo(sockets: int, cores: int, threads: int, model: str) -> str:
  """/proc/cpuinfo of a multi-socket SMT machine (x86 layout)."""
  blocks, n = [], 0
  for s in range(sockets):
    for t in range(threads):
      for c in range(cores):
        blocks.append(f"processor\t: {n}\nvendor_id\t: AuthenticAMD\nmodel name\t: {model}\ncpu MHz\t\t: 1500.000\n"
                      f"physical id\t: {s}\nsiblings\t: {cores * threads}\ncore id\t\t: {c}\ncpu cores\t: {cores}\n")
        n += 1
  return "\n".join(blocks) + "\n"


def test_h200_recording():
  f, notes = sysinfo_detect.detect(h200_probe(CUDA_VERSION="12.4.1", TINYPERF_BASE_DIGEST="sha256:" + "ab" * 32))
  assert (f["host_processors_per_node"], f["host_processor_model_name"]) == ("1", "Intel(R) Xeon(R) Processor")
  assert (f["host_processor_core_count"], f["host_processor_vcpu_count"]) == ("32", "32")
  assert f["host_processor_frequency"] == "2100 MHz"            # no cpufreq on this VM: /proc/cpuinfo's clock
  assert f["host_processor_caches"] == "L1d 48 KiB, L1i 32 KiB, L2 2 MiB, L3 300 MiB"
  assert f["host_memory_capacity"] == "252 GiB"                 # MemTotal 263998500 kB
  assert (f["accelerators_per_node"], f["accelerator_model_name"]) == ("2", "NVIDIA H200")
  assert f["accelerator_memory_capacity"] == "140 GiB"           # 143771 MiB
  assert f["accelerator_frequency"] == "1980 MHz"
  assert f["accelerator_interconnect"] == "NVLink (NV18)"
  assert f["operating_system"] == "Ubuntu 24.04.3 LTS"
  assert f["framework"] == "tinygrad 0.14.0 (PyPI)"
  s = f["other_software_stack"]
  assert s["nvidia_driver"] == "580.159.04" and s["cuda_driver_api"] == "13.0" and s["CUDA"] == "12.4.1"
  assert (s["python"], s["kernel"], s["mlperf-logging"], s["tinyperf_commit"]) == ("3.12.3", "6.8.0", "4.1.68", "abc123")
  assert s["base_image_digest"] == "sha256:" + "ab" * 32 and "sha256:abab" in f["sw_notes"]
  assert any("frequency" in n for n in notes) and any("nvidia-smi" in n for n in notes)


def test_cuda_version_falls_back_to_the_driver_banner():
  f, _ = sysinfo_detect.detect(h200_probe())
  s = f["other_software_stack"]
  assert s["CUDA"].startswith("13.0 (highest the driver supports") and s["base_image_digest"].startswith("none")


def test_nvidia_csv_with_units_and_header_parses_the_same():
  plain = sysinfo_detect.parse_nvidia_csv((H200 / "nvidia-smi-query.csv").read_text())
  units = sysinfo_detect.parse_nvidia_csv((H200 / "nvidia-smi-query-units.csv").read_text())
  assert plain == units and [g["index"] for g in plain] == [0, 1] and plain[1]["bus_id"] == "00000000:00:07.0"


def test_topology_pcie_only():
  text = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tPHB\tSYS\t0-15\nGPU1\tPHB\t X \tSYS\t0-15\nGPU2\tSYS\tSYS\t X \t16-31\n"
  assert sysinfo_detect.parse_nvidia_topology(text) == "PCIe (PHB, SYS)"
  assert sysinfo_detect.parse_nvidia_topology("garbage") == ""


def test_rocm_mi300x_two_sockets():
  p = RecordedProbe(files={"/proc/cpuinfo": cpuinfo(2, 32, 2, "AMD EPYC 9354 32-Core Processor"),
                           "/proc/meminfo": "MemTotal:       2374000000 kB\n",
                           "/opt/rocm/.info/version": "6.1.2-119\n"},
                    commands={("rocm-smi", *sysinfo_detect.ROCM_ARGS): (FIX / "rocm-smi-mi300x.json").read_text()})
  f, notes = sysinfo_detect.detect(p)
  assert (f["host_processors_per_node"], f["host_processor_core_count"], f["host_processor_vcpu_count"]) == ("2", "32", "64")
  assert f["host_processor_model_name"] == "AMD EPYC 9354 32-Core Processor"
  assert (f["accelerators_per_node"], f["accelerator_model_name"]) == ("8", "AMD Instinct MI300X OAM")
  assert f["accelerator_memory_capacity"] == "192 GiB"            # 205822885888 B
  s = f["other_software_stack"]
  assert s["amdgpu_driver"] == "6.7.0" and s["ROCm"] == "6.1.2-119" and "nvidia_driver" not in s
  assert any("rocm-smi" in n for n in notes)


def test_no_accelerator():
  f, notes = sysinfo_detect.detect(RecordedProbe(files={"/proc/cpuinfo": cpuinfo(1, 4, 1, "Some CPU")}))
  assert (f["accelerators_per_node"], f["accelerator_model_name"]) == ("0", "none (CPU only)")
  assert (f["host_processor_core_count"], f["host_processor_vcpu_count"]) == ("4", "4")
  assert "operating_system" not in f and any("no accelerator" in n for n in notes)


def test_rocm_json_variants():
  cards, driver = sysinfo_detect.parse_rocm_json('{"card1": {"Card Series": "Radeon RX 7900 XTX", "VRAM Total Memory '
                                                 '(B)": "25753026560", "Driver version": "6.1.3"}, "card0": {"Card SKU": "X"}}')
  assert [c["index"] for c in cards] == [0, 1] and cards[1]["name"] == "Radeon RX 7900 XTX" and driver == "6.1.3"
  assert sysinfo_detect.parse_rocm_json("not json") == ([], None)


# ---------------------------------------------------------------------------------------------------------------------
# the verb

GOOD = """\
submitter: tinycorp
division: closed
status: Available on-premise
system_name: test box
host_storage_type: NVMe SSD
cooling: air
accelerators_per_node: 2        # a YAML integer becomes "2"
other_software_stack:
  notes: overridden
"""


@pytest.fixture
def recorded(monkeypatch):
  monkeypatch.setattr(sysinfo_detect, "Probe", lambda: h200_probe(TINYPERF_BASE_DIGEST="sha256:" + "cd" * 32))


def run(capsys, *argv):
  code = cli(["sysinfo", *map(str, argv)])
  out, err = capsys.readouterr()
  return code, out, err


def bad(capsys, *argv, needles=()):
  code, out, err = run(capsys, *argv)
  assert code == 2, (out, err)
  assert err.startswith("tinyperf sysinfo: error: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1
  for n in needles: assert n in err, err
  return err


def test_writes_a_valid_systems_json(capsys, tmp_path, recorded):
  (tmp_path / "o.yaml").write_text(GOOD)
  out = tmp_path / "test_box.json"
  code, stdout, err = run(capsys, "--system", "test_box", "--overrides", tmp_path / "o.yaml", "--out", out)
  assert code == 0, err
  data = json.loads(out.read_text())
  assert list(data)[:len(sysinfo.FIELDS)] == list(sysinfo.FIELDS)
  assert data["system_name"] == "test box" and data["cooling"] == "air" and data["accelerators_per_node"] == "2"
  assert data["accelerator_model_name"] == "NVIDIA H200" and data["host_processor_core_count"] == "32"
  assert data["other_software_stack"]["notes"] == "overridden"
  assert data["other_software_stack"]["nvidia_driver"] == "580.159.04"       # merged, not replaced
  assert data["other_software_stack"]["base_image_digest"] == "sha256:" + "cd" * 32
  for r in ("4.0.0", "5.0.0"):
    res = mlperf_tools.system_desc_check(out, r)
    assert res.passed, res.output
  assert "unknown (empty" in stdout and "host_networking" in stdout


def test_json_overrides_and_platform_division(capsys, tmp_path, recorded, monkeypatch):
  monkeypatch.chdir(tmp_path)   # no ./out: the repository's systems JSON is the layer under detection
  (tmp_path / "o.json").write_text(json.dumps({"submitter": "me", "status": "Preview"}))
  out = tmp_path / "s.json"
  code, _, err = run(capsys, "--platform", "cpu_smoke", "--overrides", tmp_path / "o.json", "--out", out)
  assert code == 0, err
  data = json.loads(out.read_text())
  assert data["division"] == "open" and data["system_name"] == "cpu smoke" and data["status"] == "Preview"


def test_invalid_status_names_the_field_and_the_four_values(capsys, tmp_path, recorded):
  (tmp_path / "o.yaml").write_text(GOOD.replace("Available on-premise", "onprem"))
  out = tmp_path / "s.json"
  err = bad(capsys, "--system", "x", "--overrides", tmp_path / "o.yaml", "--out", out,
            needles=["'onprem'", "system_desc_checker", *STATUS_REPRS])     # the value, who refuses it, the four
  assert not out.exists() and str(tmp_path / "o.yaml") in err


STATUS_REPRS = [repr(s) for s in sysinfo.STATUS_VALUES]


def test_fields_that_cannot_be_detected_must_be_given(capsys, tmp_path, recorded):
  (tmp_path / "o.yaml").write_text("cooling: air\n")
  bad(capsys, "--system", "x", "--overrides", tmp_path / "o.yaml", "--out", tmp_path / "s.json",
      needles=["submitter", "division", "status", "'closed', 'open'", STATUS_REPRS[0]])   # each empty field, its values


@pytest.mark.parametrize("text,needles", [
  ("submitter: [a, b\n", ["o.yaml:"]),                     # each: the file (and line), the field, the value
  ("cooling: air\ncooling: water\n", ["o.yaml:2", "'cooling'"]),
  ("- just\n- a list\n", ["o.yaml"]),
  ("colling: air\n", ["colling", "cooling"]),
  (GOOD + "hw_notes: yes\n", ["hw_notes", "True"]),
  (GOOD.replace("closed", "closd"), ["'closd'", "'closed', 'open'"]),
  (GOOD + "number_of_nodes: one\n", ["number_of_nodes", "'one'"]),
])
def test_bad_overrides(capsys, tmp_path, recorded, text, needles):
  (tmp_path / "o.yaml").write_text(text)
  bad(capsys, "--system", "x", "--overrides", tmp_path / "o.yaml", "--out", tmp_path / "s.json", needles=needles)
  assert not (tmp_path / "s.json").exists()


def test_missing_overrides_file_and_bad_json(capsys, tmp_path, recorded):
  bad(capsys, "--system", "x", "--overrides", tmp_path / "nope.yaml", "--out", tmp_path / "s.json",
      needles=[str(tmp_path / "nope.yaml")])
  (tmp_path / "o.json").write_text('{"submitter": "a",}')
  bad(capsys, "--system", "x", "--overrides", tmp_path / "o.json", "--out", tmp_path / "s.json",
      needles=["o.json:1"])


def test_never_overwrites_without_force(capsys, tmp_path, recorded):
  (tmp_path / "o.yaml").write_text(GOOD)
  out = tmp_path / "s.json"
  out.write_text("keep me")
  bad(capsys, "--system", "x", "--overrides", tmp_path / "o.yaml", "--out", out, needles=[str(out), "--force"])
  assert out.read_text() == "keep me"
  code, _, err = run(capsys, "--system", "x", "--overrides", tmp_path / "o.yaml", "--out", out, "--force")
  assert code == 0, err
  assert json.loads(out.read_text())["submitter"] == "tinycorp"


def test_bad_names_and_arguments(capsys, tmp_path, recorded):
  bad(capsys, needles=["--system", "--platform"])
  bad(capsys, "--system", "has space", "--out", tmp_path / "s.json", needles=["'has space'"])
  bad(capsys, "--platform", "nope", needles=["'nope'"])
  (tmp_path / "o.yaml").write_text(GOOD)
  bad(capsys, "--system", "x", "--overrides", tmp_path / "o.yaml", "--out", tmp_path / "s.json", "--ruleset", "9.9.9",
      needles=["9.9.9"])
  (tmp_path / "f").write_text("")
  bad(capsys, "--system", "x", "--overrides", tmp_path / "o.yaml", "--out", tmp_path / "f" / "s.json",
      needles=[f"{tmp_path / 'f'}:"])   # the file in the way (it said "(File exists)")


# ---------------------------------------------------------------------------------------------------------------------
# what `tinyperf run` records: RESULTS/systems/<system>.json

IMAGE = "tinyperf:nv sha256:" + "ef" * 32


def test_layers_base_then_detection_then_overrides():
  """The repository's systems JSON supplies what no machine can tell; what detection finds replaces it; overrides win."""
  base = json.loads((REPO / "systems" / "tinybox_green.json").read_text())
  f, notes = sysinfo_detect.detect(h200_probe(TINYPERF_IMAGE=IMAGE, TINYPERF_BASE_DIGEST="sha256:" + "ab" * 32))
  data = sysinfo.merge(f, {"cooling": "liquid", "other_software_stack": {"notes": "x"}}, "tinybox_green", notes, base)
  assert list(data)[:len(sysinfo.FIELDS)] == list(sysinfo.FIELDS)
  for k in ("submitter", "status", "system_name", "host_storage_type"): assert data[k] == base[k] != ""
  assert data["accelerator_model_name"] == f["accelerator_model_name"] != base["accelerator_model_name"]
  assert data["host_processor_core_count"] == f["host_processor_core_count"]
  assert data["cooling"] == "liquid" != base["cooling"]
  s = data["other_software_stack"]
  assert s["python"] == "3.12.3" != base["other_software_stack"]["python"]       # detected over the base, key by key
  assert s["CUDA"] == f["other_software_stack"]["CUDA"] and s["notes"] == "x"
  assert s["image"] == IMAGE and f"image {IMAGE}" in data["sw_notes"] and "base image sha256:abab" in data["sw_notes"]
  assert data["hw_notes"].startswith("Detected by tinyperf sysinfo")
  # without a base the layers are what `tinyperf sysinfo` always did
  assert sysinfo.merge(f, {}, "x", notes) == sysinfo.merge(f, {}, "x", notes, {})


def cpu_probe(**env) -> RecordedProbe:
  return RecordedProbe(files={"/proc/cpuinfo": cpuinfo(1, 4, 2, "Test CPU 9000"), "/proc/meminfo": "MemTotal: 8388608 kB\n",
                              "/etc/os-release": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n'},
                       env={"TINYPERF_KERNEL": "6.1.0", "TINYPERF_PYTHON": "3.11.2", **env})


def test_run_description_is_valid_and_takes_the_configs_division(tmp_path):
  from tinyperf.benchmarks.registry import load_config
  cfg = load_config("resnet", "cpu_smoke", environ={})
  base = json.loads((REPO / "systems" / "cpu_smoke.json").read_text())
  f, notes = sysinfo_detect.detect(cpu_probe())
  data = sysinfo.run_description(cfg, f, notes, {"host_storage_type": "scratch SSD"}, tmp_path / "o.yaml", tmp_path / "R",
                                 this_scheduler())
  assert (data["submitter"], data["status"], data["division"]) == (base["submitter"], base["status"], cfg["division"])
  assert data["host_processor_model_name"] == "Test CPU 9000" and data["host_processor_vcpu_count"] == "8"
  assert data["host_storage_type"] == "scratch SSD" and data["accelerators_per_node"] == "0"
  out = tmp_path / "s.json"; out.write_text(json.dumps(data))
  for r in ("4.0.0", "5.0.0"): assert mlperf_tools.system_desc_check(out, r).passed


def test_run_description_names_the_overrides_file_and_the_allowed_values(tmp_path):
  from tinyperf.benchmarks.registry import load_config
  from tinyperf.tooling.common.errors import UserError
  f, notes = sysinfo_detect.detect(cpu_probe())
  with pytest.raises(UserError) as e:
    sysinfo.run_description(load_config("resnet", "cpu_smoke", environ={}), f, notes, {"status": "onprem"},
                            tmp_path / "mine.yaml", tmp_path / "R", this_scheduler())
  msg = str(e.value)
  assert msg.startswith(f"{tmp_path / 'mine.yaml'}: ") and "'onprem'" in msg and STATUS_REPRS[0] in msg
  assert "--system-overrides" in msg


TASK = {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_JOB_ID": "9", "SLURM_JOB_ID": "10", "TINYPERF_SLURM_RUNTIME": "host"}


def test_a_slurm_task_with_a_bad_overrides_file_names_the_fix_that_applies(tmp_path):
  """The user's path: a Slurm array task (`tinyperf run ... --only-index`, which nobody types) whose --system-overrides
  file makes the description invalid said "rerun the same command". Its fix is the file the whole set reads, then
  the set's `status --resume`; outside a task the same run still says to rerun the command."""
  import os
  import subprocess
  import sys
  d = tmp_path / "data"
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "prep", "synthetic-imagenet", "--out", str(d), "--classes", "4",
                      "--train-per-class", "2", "--val-per-class", "1", "--size", "16", "--seed", "0"], cwd=REPO,
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  (tmp_path / "o.yaml").write_text("status: onprem\n")
  def run(env):
    return subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "run", "resnet", "--platform", "cpu_smoke", "--nexp", "1",
                           "--data", "data", "--results", "out", "--runtime", "host", "--only-index", "0",
                           "--system-overrides", "o.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})
  r = run(TASK)
  assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert "'onprem'" in r.stderr and str(tmp_path / "o.yaml") in r.stderr, r.stderr
  assert f"`tinyperf status --results {tmp_path / 'out'} --resume`" in r.stderr, r.stderr   # the set's fix, not a rerun
  r = run({})
  assert r.returncode == 2 and str(tmp_path / "o.yaml") in r.stderr and "tinyperf status" not in r.stderr, r.stderr


def test_a_slurm_task_without_an_overrides_file_names_the_resubmission(monkeypatch, tmp_path):
  """A set submitted without --system-overrides: `status --resume` resubmits the last submission's arguments, which
  have no file, so the fix is the submitting command again with the file added."""
  from tinyperf.benchmarks.registry import load_config
  for k, v in TASK.items(): monkeypatch.setenv(k, v)
  f, notes = sysinfo_detect.detect(cpu_probe())
  broken = {**f, "operating_system": ""}      # what the systems JSON cannot lack, missing
  with pytest.raises(UserError) as e:
    sysinfo.run_description(load_config("resnet", "cpu_smoke", environ={}), broken, notes, {"status": ""}, None,
                            tmp_path / "out", this_scheduler())   # the task's environment picks the Slurm hints
  msg = str(e.value)
  assert "tinyperf status" not in msg                                  # --resume would not carry the file
  assert "`tinyperf run ... --scheduler slurm`" in msg and "`--system-overrides FILE`" in msg   # the resubmission


def test_record_run_system_never_replaces_a_different_description(tmp_path, capsys):
  f, notes = sysinfo_detect.detect(cpu_probe())
  data = sysinfo.merge(f, {}, "cpu_smoke", notes, json.loads((REPO / "systems" / "cpu_smoke.json").read_text()))
  R = tmp_path / "R"
  first = sysinfo.record_run_system(R, "cpu_smoke", data, this_scheduler())
  assert first == R / "systems" / "cpu_smoke.json" and json.loads(first.read_text()) == data
  assert first.stat().st_mode & 0o777 == 0o644
  before = first.read_bytes()
  assert sysinfo.record_run_system(R, "cpu_smoke", json.loads(json.dumps(data)), this_scheduler()) == first   # the same machine
  assert "unchanged" in capsys.readouterr().out and not T.variants_dir(R).exists()
  f2, notes2 = sysinfo_detect.detect(cpu_probe(TINYPERF_KERNEL="6.9.1"))                    # a reboot into a new kernel
  newer = sysinfo.merge(f2, {}, "cpu_smoke", notes2, json.loads((REPO / "systems" / "cpu_smoke.json").read_text()))
  v1 = sysinfo.record_run_system(R, "cpu_smoke", newer, this_scheduler())
  v2 = sysinfo.record_run_system(R, "cpu_smoke", {**newer, "cooling": "water"}, this_scheduler())
  err = capsys.readouterr().err
  assert first.read_bytes() == before                                                        # the old one is kept
  assert v1.parent == v2.parent == T.variants_dir(R) and v1 != v2 and v1.name.startswith("cpu_smoke-")
  assert json.loads(v1.read_text()) == newer and json.loads(v2.read_text())["cooling"] == "water"
  assert err.count("WARNING") == 2 and "other_software_stack.kernel: '6.1.0' -> '6.9.1'" in err
  assert "cooling: '' -> 'water'" in err and str(first) in err
  assert sorted(p.name for p in (R / "systems").glob("*.json")) == ["cpu_smoke.json"]    # check/package see one file


def test_detect_entrypoint_writes_this_machines_facts(tmp_path):
  """What `tinyperf run` starts in the run's container, here on this machine."""
  import platform
  import subprocess
  import sys
  out = tmp_path / "detected.json"
  p = subprocess.run([sys.executable, "-m", "tinyperf.tooling.launch.sysinfo", "--detect-json", str(out)], cwd=REPO, text=True,
                     capture_output=True, env={"PATH": "/usr/bin:/bin", "TINYPERF_IMAGE": IMAGE}, timeout=120)
  assert p.returncode == 0, p.stderr
  found = json.loads(out.read_text())
  fields, notes = found["fields"], found["notes"]
  assert fields["other_software_stack"]["image"] == IMAGE and fields["other_software_stack"]["python"] == platform.python_version()
  assert int(fields["accelerators_per_node"]) >= 0 and fields["framework"].startswith("tinygrad 0.14.0")
  assert notes and all(isinstance(n, str) for n in notes)


def test_run_refuses_a_bad_overrides_file_before_anything(capsys, tmp_path):
  (tmp_path / "o.yaml").write_text("colling: air\n")
  code = cli(["run", "resnet", "--platform", "cpu_smoke", "--data", str(tmp_path / "no-data"), "--results",
              str(tmp_path / "R"), "--runtime", "host", "--system-overrides", str(tmp_path / "o.yaml")])
  err = capsys.readouterr().err
  assert code == 2 and f"{tmp_path / 'o.yaml'}:" in err and "colling" in err and "Traceback" not in err
  assert not (tmp_path / "R").exists()


def test_record_run_system_unwritable_is_a_clear_error(tmp_path):
  from tinyperf.tooling.common.errors import UserError
  (tmp_path / "R").write_text("a file, not a directory")
  with pytest.raises(UserError, match=re.escape(str(tmp_path / "R" / "systems" / "x.json"))):
    sysinfo.record_run_system(tmp_path / "R", "x", {"submitter": "a"}, this_scheduler())


def _record_at(args):
  R, data, start = args
  time.sleep(max(0.0, start - time.time()))   # every process writes at the same moment, as array tasks start together
  return str(sysinfo.record_run_system(R, "cpu_smoke", data, this_scheduler()))


def test_record_run_system_from_simultaneous_tasks_writes_one_file(tmp_path):
  from concurrent.futures import ProcessPoolExecutor
  data = json.loads((REPO / "systems" / "cpu_smoke.json").read_text())
  R = tmp_path / "R"
  with ProcessPoolExecutor(6) as pool:
    start = time.time() + 1.0
    written = list(pool.map(_record_at, [(R, data, start)] * 6))
  assert written == [str(R / "systems" / "cpu_smoke.json")] * 6          # nobody failed, nobody saw a "variant"
  assert not T.variants_dir(R).exists() and json.loads((R / "systems" / "cpu_smoke.json").read_text()) == data


def test_a_description_that_cannot_be_written_is_bad_input_with_the_fix(tmp_path, monkeypatch):
  def full_disk(path, text, **options): raise OSError(28, "No space left on device")
  monkeypatch.setattr(sysinfo, "write_atomic", full_disk)
  with pytest.raises(UserError, match=rf"{re.escape(str(tmp_path / 'r'))}.*No space left on device"):   # where, and why
    sysinfo.record_run_system(tmp_path / "r", "cpu_smoke", {"system_name": "a"}, this_scheduler())


def test_packages_missing_systems_json_hint_pastes_as_printed(tmp_path):
  """`tinyperf package` without a systems JSON prints the sysinfo command that writes one where it looks; a results
  directory with a space in its name made that command's --out two arguments."""
  import shlex
  from tinyperf.tooling.ship.package import systems_source
  results = tmp_path / "my results"
  with pytest.raises(UserError) as e:
    systems_source("nobox", results, None)
  cmd = str(e.value).split("Write one with `")[1].split("`")[0]
  assert shlex.split(cmd) == ["tinyperf", "sysinfo", "--system", "nobox", "--overrides", "FILE", "--out",
                              str(results / "systems" / "nobox.json")], e.value
