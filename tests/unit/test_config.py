"""Platform configs: validation, env overrides, and the files rendered from them."""
import subprocess

import pytest
import yaml

from benchmarks.common.config import (BENCHMARKS, PLATFORMS, RULESETS, SCHEMA, ConfigError, available_platforms,
                                      config_path, load_config)
from tests.conftest import REPO
from tooling.render import SCRIPTS


@pytest.mark.parametrize("bm", BENCHMARKS)
def test_every_platform_has_a_valid_config(bm):
  assert sorted(available_platforms(bm)) == sorted(PLATFORMS)
  for p in PLATFORMS:
    cfg = load_config(bm, p, environ={})
    assert cfg["BS"] % cfg["GPUS"] == 0
    if cfg["division"] == "closed": assert cfg["ruleset"] == RULESETS[bm]
    assert (REPO / "systems" / f"{cfg['system']}.json").is_file(), f"{p}: systems/{cfg['system']}.json missing"


def test_upstream_tinybox_values():
  """The tinybox values are tinycorp's (tinygrad_mlperf_spec.md 1.3, 2.3): a typo here silently changes a submission."""
  g = load_config("resnet", "tinybox_green", environ={})
  assert (g["DEV"], g["GPUS"], g["BS"], g["EVAL_BS"], g["LR"], g["EPOCHS"], g["WARMUP_EPOCHS"]) == ("NV", 6, 1536, 192, 7.2, 37, 2)
  assert (g["DECAY"], g["LOSS_SCALER"], g["TARGET"], g["EVAL_START_EPOCH"], g["EVAL_FREQ"]) == (2e-4, 128.0, 0.759, 3, 4)
  r = load_config("resnet", "tinybox_red", environ={})
  assert (r["DEV"], r["BEAM_UOPS_MAX"], r["BEAM_UPCAST_MAX"], r["BEAM_MIN_PROGRESS"]) == ("AMD", 2000, 96, 5.0)
  m = load_config("resnet", "tinybox_8xMI300X", environ={})
  assert m["tested"] is False and m["LR"] == pytest.approx(7.2 * m["BS"] / 1536)
  bg = load_config("bert", "tinybox_green", environ={})
  assert (bg["BS"], bg["LR"], bg["TRAIN_STEPS"], bg["TRAIN_BEAM"], bg["LOSS_SCALER"]) == (96, 0.000175, 37500, 8, 2048.0)
  bm = load_config("bert", "tinybox_8xMI300X", environ={})
  assert (bm["GPUS"], bm["BS"], bm["LR"], bm["BETA1"], bm["BETA2"], bm["DECAY"], bm["TRAIN_STEPS"]) == \
    (8, 1024, 0.0011, 0.60466, 0.85437, 0.1, 3900)
  assert "SUM_DTYPE" not in bm.knobs


def test_env_overrides_one_knob_typed():
  cfg = load_config("resnet", "tinybox_green", environ={"BS": "768", "LR": "3.6", "UNRELATED": "x"})
  assert cfg["BS"] == 768 and isinstance(cfg["BS"], int) and cfg["LR"] == 3.6
  assert cfg.overridden == {"BS": (1536, 768), "LR": (7.2, 3.6)}
  assert cfg["EVAL_BS"] == 192  # untouched


@pytest.mark.parametrize("env,msg", [({"BS": "lots"}, "BS must be int"), ({"DEV": "TPU"}, "allowed: NV"),
                                     ({"BS": "1000"}, "not divisible by GPUS=6")])
def test_bad_env_override_names_the_variable(env, msg):
  with pytest.raises(ConfigError, match=msg): load_config("resnet", "tinybox_green", environ=env)


def _write(tmp_path, mutate, platform="tinybox_green"):
  raw = yaml.safe_load(config_path("resnet", platform).read_text())
  mutate(raw)
  d = tmp_path / platform; d.mkdir()
  (d / "config.yaml").write_text(yaml.safe_dump(raw))
  return d / "config.yaml"


@pytest.mark.parametrize("mutate,msg", [
  (lambda r: r.update(BS_TYPO=1), "unknown key\\(s\\) BS_TYPO"),
  (lambda r: r.pop("LR"), "missing required key LR"),
  (lambda r: r.update(LR="fast"), "LR must be float"),
  (lambda r: r.update(EPOCHS=37.5), "EPOCHS must be int"),
  (lambda r: r.update(division="closed", ruleset="5.0.0"), "ruleset 5.0.0 does not accept closed resnet; use 4.0.0"),
  (lambda r: r.update(RESNET_LAYERS="3,4,6"), "RESNET_LAYERS"),
  (lambda r: r.update(platform="other"), "platform is 'other' but the directory is 'tinybox_green'"),
])
def test_invalid_config_names_file_and_key(tmp_path, mutate, msg):
  path = _write(tmp_path, mutate)
  with pytest.raises(ConfigError, match=msg) as e: load_config("resnet", "tinybox_green", environ={}, path=path)
  assert str(path) in str(e.value)


def test_bad_yaml_and_unknown_platform(tmp_path):
  p = tmp_path / "tinybox_green"; p.mkdir(); (p / "config.yaml").write_text("BS: [1,\n")
  with pytest.raises(ConfigError, match="not valid YAML"): load_config("resnet", "tinybox_green", path=p / "config.yaml")
  with pytest.raises(ConfigError, match="Valid platforms: .*tinybox_green"): load_config("resnet", "tinybox_blue")


def test_schema_docs_every_knob():
  for b in BENCHMARKS:
    for k, knob in SCHEMA[b].items(): assert k.isupper() and knob.doc


def test_rendered_scripts_match_configs():
  """Scripts and READMEs are generated from the configs; a hand edit or a config change without `tinyperf render` fails."""
  from tooling.render import stale_files
  assert stale_files() == []


def test_render_detects_drift(tmp_path, monkeypatch):
  from tooling import render
  files = render.rendered_files()
  path, text = next((p, t) for p, t in files.items() if p.name == "run_and_time.sh")
  assert "--platform" in text and "set -euo pipefail" in text
  # a script whose knob comment disagrees with the config is reported stale
  monkeypatch.setattr(render, "rendered_files", lambda: {path: text.replace("BS ", "BS_CHANGED ", 1)})
  assert render.stale_files() == [path]


def test_rendered_scripts_are_executable_bash():
  """run_and_time.sh, the dev scripts, setup.sh and init_datasets.sh of every implementation."""
  for b in BENCHMARKS:
    for p in PLATFORMS:
      for name in SCRIPTS:
        f = config_path(b, p).parent / name
        assert subprocess.run(["bash", "-n", str(f)]).returncode == 0, f
        assert f.stat().st_mode & 0o111, f"{f} is not executable"
