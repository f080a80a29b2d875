"""The CPU feeding budget of ResNet platforms: arithmetic, the line and the warning at run start and in the preflight,
cgroup limits, the config knobs behind it."""
from __future__ import annotations
import re

import pytest
import yaml

from tinyperf.benchmarks.common import feeding as F
from tinyperf.benchmarks import preflight as PF
from tinyperf.benchmarks.common.config import ConfigError, available_platforms, config_path
from tinyperf.benchmarks.registry import load_config


def test_cores_needed_arithmetic():
  assert F.cores_needed(234, 315) == 1
  assert F.cores_needed(315, 315) == 1          # exactly one core's worth: no rounding up past it
  assert F.cores_needed(316, 315) == 2
  assert F.cores_needed(6 * 1000, 315) == 20    # 19.05 -> 20
  assert F.cores_needed(0.5, 315) == 1
  with pytest.raises(ValueError): F.cores_needed(100, 0)


def test_budget_of_the_configs():
  g = F.budget(load_config("resnet", "tinybox_green", environ={}), host=32)
  assert (g.gpus, g.feed_img_s, g.per_core, g.loader_cores, g.needed) == (6, 6000.0, 315.0, 20, 21) and g.ok
  h = F.budget(load_config("resnet", "1xH200", environ={}), host=16)
  assert (h.feed_img_s, h.needed) == (2386.0, 9) and h.ok and h.warnings() == []   # the KERNELS=triton step: 8 + 1 of 16
  assert not F.budget(load_config("resnet", "1xH200", environ={}), host=8).ok
  # bench_decode passes the rate it just measured instead of the config's
  assert F.budget(load_config("resnet", "tinybox_green", environ={}), host=32, per_core=600).needed == 11
  # the environment overrides the knobs like any other (a faster BEAM'd step, a faster host)
  fast = load_config("resnet", "1xH200", environ={"FEED_IMG_S_PER_GPU": "4500", "LOADER_IMG_S_PER_CORE": "400"})
  assert F.budget(fast, host=16).needed == 13


def test_line_and_warning_on_a_host_with_few_cores():
  b = F.budget(load_config("resnet", "tinybox_red", environ={}), host=4)
  assert b.line() == ("tinybox_red needs 15 cores to feed its 6 GPU(s) at 4,380 img/s (loader: 315 img/s per core "
                      "measured by bench_decode, so 14 loader core(s) + 1 for the training process); this host has 4")
  assert not b.ok
  (w,) = b.warnings()
  # the host's cores, the platform's need, what 3 loader cores x 315 feed, and its share of the GPUs' rate
  assert all(f in w for f in ("4 core(s)", "tinybox_red", "15 cores", "945", "4,380 img/s", "(22 %)")), w
  assert F.budget(load_config("resnet", "tinybox_red", environ={}), host=15).warnings() == []


def test_too_few_workers_is_reported():
  cfg = load_config("resnet", "tinybox_green", environ={"NUM_WORKERS": "8"})
  (w,) = F.budget(cfg, host=64).warnings()
  assert "NUM_WORKERS=8" in w and re.search(r"\b20\b", w), w


def test_run_phase_prints_the_budget(capsys):
  from tinyperf.benchmarks.resnet.train import print_feeding_budget
  print_feeding_budget(load_config("resnet", "2xH200", environ={}), host=2)
  out, err = capsys.readouterr()
  assert out.startswith("feeding budget: 2xH200 needs 4 cores to feed its 2 GPU(s) at 682 img/s") and "this host has 2" in out
  (warning,) = [l for l in err.splitlines() if l.startswith("WARNING:")]
  assert "!" * 100 in err and all(f in warning for f in ("2 core(s)", "2xH200", "4")), err
  print_feeding_budget(load_config("resnet", "2xH200", environ={}), host=4)
  out, err = capsys.readouterr()
  assert "this host has 4" in out and err == ""


def _cgroup(tmp_path, v2=None, v1=None):
  root = tmp_path / "root"
  if v2 is not None:
    (root / "sys/fs/cgroup").mkdir(parents=True); (root / "sys/fs/cgroup/cpu.max").write_text(v2)
  if v1 is not None:
    d = root / "sys/fs/cgroup/cpu"; d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text(f"{v1[0]}\n"); (d / "cpu.cfs_period_us").write_text(f"{v1[1]}\n")
  return root


def test_cgroup_cpu_limit(tmp_path):
  assert F.cgroup_cpu_limit(_cgroup(tmp_path / "a", v2="150000 100000\n")) == 1.5
  assert F.cgroup_cpu_limit(_cgroup(tmp_path / "b", v2="max 100000\n")) is None
  assert F.cgroup_cpu_limit(_cgroup(tmp_path / "c", v1=(400000, 100000))) == 4.0
  assert F.cgroup_cpu_limit(_cgroup(tmp_path / "d", v1=(-1, 100000))) is None
  assert F.cgroup_cpu_limit(tmp_path / "none") is None
  assert F.host_cores(_cgroup(tmp_path / "e", v2="50000 100000\n")) == 1    # half a CPU still counts as one
  assert 1 <= F.host_cores(tmp_path / "none")


def test_preflight_warns_but_passes(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(PF.Preflight, "dataset", lambda self: self.record("data", True, "skipped in this test"))
  monkeypatch.setenv("TINYPERF_MIN_FREE_GB", "0")
  cfg = load_config("resnet", "cpu_smoke", environ={})
  work = tmp_path / "w"; work.mkdir()
  pf = PF.Preflight(cfg, tmp_path, work, host_cores=1)
  assert pf.run() == 0
  out = capsys.readouterr().out
  assert "preflight ok     cores: cpu_smoke needs 2 cores" in out and "this host has 1 -- WARNING" in out
  assert any(l.startswith("WARNING:") and "1 core(s)" in l and "cpu_smoke" in l for l in out.splitlines()), out
  assert "0 failed, warnings: cores" in out
  pf = PF.Preflight(cfg, tmp_path, work, host_cores=2)
  assert pf.run() == 0
  out = capsys.readouterr().out
  assert "this host has 2\n" in out and "WARNING" not in out
  bert = PF.Preflight(load_config("bert", "cpu_smoke", environ={}), tmp_path, work, host_cores=1)
  bert.run()
  assert "cores" not in {n for n, _, _ in bert.results}


def test_every_resnet_config_states_its_budget():
  for plat in available_platforms("resnet"):
    cfg = load_config("resnet", plat, environ={})
    assert cfg["FEED_IMG_S_PER_GPU"] > 0 and cfg["LOADER_IMG_S_PER_CORE"] > 0
    before = cfg.path.read_text().split("\nFEED_IMG_S_PER_GPU:")[0]
    assert "# Feeding budget" in before.rsplit("\n\n", 1)[-1], f"{plat}: the figures need their source in a comment"


def test_bad_budget_values(tmp_path):
  raw = yaml.safe_load(config_path("resnet", "tinybox_green").read_text())
  d = tmp_path / "tinybox_green"; d.mkdir()
  for key, val, fact in (("FEED_IMG_S_PER_GPU", 0, "(0,"), ("LOADER_IMG_S_PER_CORE", "fast", "'fast'")):
    (d / "config.yaml").write_text(yaml.safe_dump({**raw, key: val}))
    with pytest.raises(ConfigError) as e: load_config("resnet", "tinybox_green", environ={}, path=d / "config.yaml")
    assert key in str(e.value) and fact in str(e.value), e.value     # the knob, and its range or bad value
  (d / "config.yaml").write_text(yaml.safe_dump({k: v for k, v in raw.items() if k != "LOADER_IMG_S_PER_CORE"}))
  with pytest.raises(ConfigError, match="LOADER_IMG_S_PER_CORE"):
    load_config("resnet", "tinybox_green", environ={}, path=d / "config.yaml")


def test_bench_decode_prints_every_platform():
  from lab.resnet.bench_decode import feeding_lines
  lines = feeding_lines(630.0, 224, host=8)
  assert len(lines) == len(available_platforms("resnet"))
  green = next(l for l in lines if l.startswith("tinybox_green"))
  assert "needs 11 cores" in green and "630 img/s per core" in green and "[config: 315 img/s per core -> 21 cores]" in green
  assert "this host has 8" in green
  smoke = next(l for l in lines if l.startswith("cpu_smoke"))   # 32x32 crops: a 224 rate says nothing about them
  assert "3,190 img/s per core" in smoke and "IMAGE_SIZE 32: the config's own loader rate" in smoke
