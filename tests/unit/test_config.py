"""Platform configs: validation, env overrides, and the files rendered from them."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tinyperf.benchmarks.common.config import PLATFORMS, ClosedModelError, ConfigError, available_platforms, config_path
from tinyperf.benchmarks.registry import ALL_KNOBS, BENCHMARKS, SCHEMA, load_config
from tests.conftest import REPO
from tinyperf.tooling.common.scripts import SCRIPTS


@pytest.mark.parametrize("bm", BENCHMARKS)
def test_every_platform_has_a_valid_config(bm):
  assert sorted(available_platforms(bm)) == sorted(PLATFORMS)
  for p in PLATFORMS:
    cfg = load_config(bm, p, environ={})
    assert cfg["BS"] % cfg["GPUS"] == 0
    if cfg["division"] == "closed": assert cfg["ruleset"] == BENCHMARKS[bm].ruleset
    assert (REPO / "systems" / f"{cfg['system']}.json").is_file(), f"{p}: systems/{cfg['system']}.json missing"


def test_upstream_tinybox_values():
  """The tinybox values are tinycorp's (their published MLPerf scripts, tinygrad's examples/mlperf): a typo here silently changes a submission."""
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


@pytest.mark.parametrize("env,facts", [({"BS": "lots"}, ["BS", "'lots'"]), ({"DEV": "TPU"}, ["DEV", "NV"]),
                                       ({"BS": "1000"}, ["BS=1000", "GPUS=6"])])
def test_bad_env_override_names_the_variable(env, facts):
  with pytest.raises(ConfigError) as e: load_config("resnet", "tinybox_green", environ=env)
  assert all(f in str(e.value) for f in facts), e.value


def _write(tmp_path, mutate, platform="tinybox_green"):
  raw = yaml.safe_load(config_path("resnet", platform).read_text())
  mutate(raw)
  d = tmp_path / platform; d.mkdir()
  (d / "config.yaml").write_text(yaml.safe_dump(raw))
  return d / "config.yaml"


@pytest.mark.parametrize("mutate,facts", [
  (lambda r: r.update(BS_TYPO=1), ["BS_TYPO"]),
  (lambda r: r.pop("LR"), ["LR"]),
  (lambda r: r.update(LR="fast"), ["LR", "'fast'"]),
  (lambda r: r.update(EPOCHS=37.5), ["EPOCHS", "37.5"]),
  (lambda r: r.update(division="closed", ruleset="5.0.0"), ["5.0.0", "4.0.0"]),   # the ruleset and the one to use
  (lambda r: r.update(RESNET_LAYERS="3,0,6"), ["RESNET_LAYERS", "'3,0,6'"]),
  (lambda r: r.update(platform="other"), ["'other'", "'tinybox_green'"]),
])
def test_invalid_config_names_file_and_key(tmp_path, mutate, facts):
  path = _write(tmp_path, mutate)
  with pytest.raises(ConfigError) as e: load_config("resnet", "tinybox_green", environ={}, path=path)
  assert str(path) in str(e.value) and all(f in str(e.value) for f in facts), e.value
  assert not isinstance(e.value, ClosedModelError)


def test_a_closed_config_with_another_model_is_refused(tmp_path):
  path = _write(tmp_path, lambda r: r.update(RESNET_LAYERS="3,4,6"))
  with pytest.raises(ClosedModelError) as e: load_config("resnet", "tinybox_green", environ={}, path=path)
  assert str(path) in str(e.value) and "RESNET_LAYERS" in str(e.value)


def test_bad_yaml_and_unknown_platform(tmp_path):
  p = tmp_path / "tinybox_green"; p.mkdir(); (p / "config.yaml").write_text("BS: [1,\n")
  with pytest.raises(ConfigError, match=f"^{re.escape(str(p / 'config.yaml'))}:[0-9]+: "):   # the file and line
    load_config("resnet", "tinybox_green", path=p / "config.yaml")
  with pytest.raises(ConfigError) as e: load_config("resnet", "tinybox_blue")
  assert "tinybox_blue" in str(e.value) and "tinybox_green" in str(e.value)      # the bad name and the valid ones


# a billion laughs: nine levels of nine aliases each, 9**9 strings once expanded; its repr never ends
BOMB = ("host_prerequisites: [&l0 [x], " + ", ".join(f"&l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 10))
        + "]\nnotes: *l9\n")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("edit,msg", [
  (lambda text: re.sub(r"(?m)^notes:.*\n", "", text) + BOMB, "an alias"),
  (lambda text: text + "LR: 3.6\n", "'LR' is written twice"),   # the last one silently won
])
def test_aliases_and_keys_written_twice_are_refused(tmp_path, edit, msg):
  d = tmp_path / "tinybox_green"; d.mkdir()
  (d / "config.yaml").write_text(edit(config_path("resnet", "tinybox_green").read_text()))
  with pytest.raises(ConfigError, match=msg) as e: load_config("resnet", "tinybox_green", environ={}, path=d / "config.yaml")
  assert f"{d / 'config.yaml'}:" in str(e.value)


def test_schema_docs_every_knob():
  for b in BENCHMARKS:
    for k, knob in SCHEMA[b].items(): assert k.isupper() and knob.doc


def test_rendered_scripts_match_configs():
  """Scripts and READMEs are generated from the configs; a hand edit or a config change without `tinyperf render` fails."""
  from tinyperf.tooling.prep.render import stale_files
  assert stale_files() == []


def test_render_detects_drift(tmp_path, monkeypatch):
  from tinyperf.tooling.prep import render
  files = render.rendered_files()
  path, text = next((p, t) for p, t in files.items() if p.name == "run_and_time.sh")
  assert "--platform" in text and "set -euo pipefail" in text
  # a script that disagrees with what its config renders (here: another platform) is reported stale
  monkeypatch.setattr(render, "rendered_files", lambda: {path: text.replace("--platform ", "--platform x", 1)})
  assert render.stale_files() == [path]


def test_rendered_scripts_are_executable_bash():
  """run_and_time.sh, the dev scripts, setup.sh and init_datasets.sh of every implementation."""
  for b in BENCHMARKS:
    for p in PLATFORMS:
      for name in SCRIPTS:
        f = config_path(b, p).parent / name
        assert subprocess.run(["bash", "-n", str(f)]).returncode == 0, f
        assert f.stat().st_mode & 0o111, f"{f} is not executable"


def test_init_datasets_names_run_and_time_as_the_caller_can_type_it(tmp_path):
  """Typed from another directory, init_datasets.sh ended with `DATA_DIR=... ./run_and_time.sh`, a file that is not
  there: the path must be the one the caller used for init_datasets.sh (the BERT stand-in data: seconds)."""
  impl = config_path("bert", "cpu_smoke").parent
  rel = os.path.relpath(impl, tmp_path)
  p = subprocess.run(f"DATA_DIR=data {rel}/init_datasets.sh", shell=True, cwd=tmp_path, capture_output=True, text=True,
                     timeout=600)
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
  last = p.stdout.strip().splitlines()[-1]
  assert last == f"data ready and verified: DATA_DIR={tmp_path}/data {rel}/run_and_time.sh", last
  assert (tmp_path / rel / "run_and_time.sh").is_file()


@pytest.mark.parametrize("bm", BENCHMARKS)
def test_an_unset_data_dir_is_one_line_naming_the_script_and_exit_2(bm, tmp_path):
  """Each generated script typed from another directory without DATA_DIR (and ResNet's init_datasets.sh without
  VAL_LABELS on an empty DATA_DIR): one line naming the script, the variable and what to set it to; exit 2, nothing
  written. bash's own ${DATA_DIR:?} had said "run_and_time.sh: line 10: DATA_DIR: ..." and exited 1."""
  rel = os.path.relpath(config_path(bm, "1xH200").parent, tmp_path)
  env = {k: v for k, v in os.environ.items() if k not in ("DATA_DIR", "VAL_LABELS")}
  for name in ("run_and_time.sh", "dev_run.sh", "dev_beam.sh", "init_datasets.sh"):
    p = subprocess.run([f"{rel}/{name}"], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2 and p.stdout == "", (name, p.stdout, p.stderr)
    assert p.stderr.startswith(f"{name}: DATA_DIR is not set: set it to ") and p.stderr.count("\n") == 1, p.stderr
  if bm == "resnet":
    p = subprocess.run([f"{rel}/init_datasets.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**env, "DATA_DIR": "data"})
    assert p.returncode == 2 and p.stderr.startswith("init_datasets.sh: VAL_LABELS is not set: set it to the ILSVRC2012"), p.stderr
  assert list(tmp_path.iterdir()) == []


# --- attacks on the knobs: every out-of-range value is refused at load, before anything runs or is written ----------

@pytest.mark.parametrize("bm,env,knob", [
  ("resnet", {"BS": "-1"}, "BS"), ("resnet", {"BS": "0"}, "BS"), ("resnet", {"EVAL_BS": "-64"}, "EVAL_BS"),
  ("resnet", {"GPUS": "0"}, "GPUS"), ("resnet", {"SEED_BITS": "-1"}, "SEED_BITS"),
  ("resnet", {"SEED_BITS": "0"}, "SEED_BITS"), ("resnet", {"SEED_BITS": "64"}, "SEED_BITS"),
  ("resnet", {"LR": "nan"}, "LR"), ("resnet", {"LR": "inf"}, "LR"), ("resnet", {"LR": "0"}, "LR"),
  ("resnet", {"MOMENTUM": "1"}, "MOMENTUM"), ("resnet", {"TARGET": "1.5"}, "TARGET"),
  ("resnet", {"EPOCHS": "0"}, "EPOCHS"), ("resnet", {"EVAL_FREQ": "0"}, "EVAL_FREQ"),
  ("resnet", {"NUM_WORKERS": "-2"}, "NUM_WORKERS"), ("resnet", {"TRAIN_BEAM": "-1"}, "TRAIN_BEAM"),
  ("resnet", {"SHM_RING_BATCHES": "1"}, "SHM_RING_BATCHES"),
  ("bert", {"BS": "0"}, "BS"), ("bert", {"DROPOUT": "1"}, "DROPOUT"), ("bert", {"BETA2": "-0.1"}, "BETA2"),
  ("bert", {"EPSILON": "0"}, "EPSILON"), ("bert", {"TRAIN_STEPS": "0"}, "TRAIN_STEPS"),
  ("bert", {"CLIP_NORM": "-inf"}, "CLIP_NORM"),
])
def test_out_of_range_knob_is_refused(bm, env, knob):
  with pytest.raises(ConfigError) as e: load_config(bm, "tinybox_green", environ=env)
  assert f"environment variable {knob}" in str(e.value) and SCHEMA[bm][knob].range in str(e.value)   # the allowed range


@pytest.mark.parametrize("mutate,msg", [
  (lambda r: r.update(GPUS=0), "GPUS=0"),              # once a ZeroDivisionError in BS % GPUS
  (lambda r: r.update(LR=float("nan")), "LR=nan"),
  (lambda r: r.update(IMAGE_SIZE=-224), "IMAGE_SIZE=-224"),
])
def test_out_of_range_in_the_file_names_it(tmp_path, mutate, msg):
  path = _write(tmp_path, mutate)
  with pytest.raises(ConfigError) as e: load_config("resnet", "tinybox_green", environ={}, path=path)
  assert str(path) in str(e.value) and msg in str(e.value)


def test_every_numeric_knob_has_a_range():
  for bm, schema in SCHEMA.items():
    for key, knob in schema.items():
      if knob.type in (int, float): assert knob.range or knob.choices, f"{bm} {key} has no range"


@pytest.mark.parametrize("env,other", [({"BERT_HEADS": "3"}, "BERT_HIDDEN="), ({"MAX_PREDICTIONS": "600"}, "MAX_SEQ_LEN="),
                                       ({"INIT_BERT_LAYERS": "30"}, "BERT_LAYERS=")])
def test_bert_shapes_must_agree(env, other):
  with pytest.raises(ConfigError) as e: load_config("bert", "tinybox_green", environ=env)
  key = next(iter(env))
  assert f"{key}={env[key]}" in str(e.value) and other in str(e.value), e.value   # both values that disagree
  assert f"({key} comes from the environment.)" in str(e.value)                   # and where the value came from


def test_a_consistency_error_names_only_the_environment_values_it_involves(tmp_path):
  # the file's EVAL_BS is what is wrong; BS, set in the environment, is not part of it (though "BS=" is in "EVAL_BS=")
  raw = yaml.safe_load(config_path("bert", "tinybox_green").read_text()); raw["EVAL_BS"] = 97
  d = tmp_path / "tinybox_green"; d.mkdir(); (d / "config.yaml").write_text(yaml.safe_dump(raw))
  with pytest.raises(ConfigError) as e: load_config("bert", "tinybox_green", environ={"BS": "192"}, path=d / "config.yaml")
  assert "EVAL_BS=97" in str(e.value) and "GPUS=6" in str(e.value) and "environment" not in str(e.value)


@pytest.mark.parametrize("benchmark, env, facts", [("resnet", {"EPOCHS": "1"}, ["WARMUP_EPOCHS=1", "EPOCHS=1"]),
                                                   ("bert", {"TRAIN_STEPS": "20"}, ["WARMUP_STEPS=20", "TRAIN_STEPS=20"])])
def test_a_schedule_must_warm_up_before_it_ends(tmp_path, benchmark, env, facts):
  # cpu_smoke warms up for 1 epoch (ResNet) and 20 steps (BERT); a shortened schedule no longer than that died in the
  # LR scheduler's assert with a traceback after the log was opened
  with pytest.raises(ConfigError) as e: load_config(benchmark, "cpu_smoke", environ=env)
  assert all(f in str(e.value) for f in facts) and f"({next(iter(env))} comes from the environment.)" in str(e.value)
  raw = yaml.safe_load(config_path(benchmark, "cpu_smoke").read_text()); raw.update({k: int(v) for k, v in env.items()})
  d = tmp_path / "cpu_smoke"; d.mkdir(); (d / "config.yaml").write_text(yaml.safe_dump(raw))
  with pytest.raises(ConfigError) as e: load_config(benchmark, "cpu_smoke", environ={}, path=d / "config.yaml")
  assert all(f in str(e.value) for f in facts) and "environment" not in str(e.value)                  # the file's own value: the message says only the file
  load_config(benchmark, "cpu_smoke", environ={k: str(int(v) + 1) for k, v in env.items()})
  r = subprocess.run([sys.executable, "-m", f"tinyperf.benchmarks.{benchmark}.train", "--platform", "cpu_smoke", "--phase", "all",
                      "--seed", "1", "--work", str(tmp_path / "r"), "--data", str(tmp_path)], cwd=REPO,
                     capture_output=True, text=True, timeout=120, env={**os.environ, **env})
  assert r.returncode == 2 and all(f in r.stderr for f in facts) and "Traceback" not in r.stderr, r.stderr
  assert not (tmp_path / "r").exists()


def test_out_of_range_knob_stops_run_before_anything_is_written(capsys, tmp_path, monkeypatch):
  from tinyperf.tooling.cli import main as cli
  monkeypatch.setenv("BS", "0")
  code = cli(["run", "resnet", "--platform", "cpu_smoke", "--data", str(tmp_path / "data"), "--results",
              str(tmp_path / "out"), "--runtime", "host"])
  err = capsys.readouterr().err
  assert code == 2 and "BS=0" in err and "Traceback" not in err
  assert not (tmp_path / "out").exists()


def test_misspelt_knob_in_the_environment_warns(monkeypatch, capsys):
  import tinyperf.benchmarks.common.config as C
  monkeypatch.setattr(C, "_warned", set())
  monkeypatch.setenv("TRAIN_BAEM", "2")
  monkeypatch.setenv("EVAL_BSS", "64")
  load_config("resnet", "tinybox_green")
  err = capsys.readouterr().err
  for typo, knob in (("TRAIN_BAEM", "TRAIN_BEAM"), ("EVAL_BSS", "EVAL_BS")):   # the misspelt name and the knob meant
    assert re.search(rf"^warning: .*\b{typo}\b.*\b{knob}\b", err, re.M), err


def test_ordinary_environment_variables_never_warn(monkeypatch, capsys):
  import tinyperf.benchmarks.common.config as C
  monkeypatch.setattr(C, "_warned", set())
  ordinary = ["PATH", "HOME", "BEAM", "DEBUG", "JIT", "GPU", "CUDA", "NV", "AMD", "CUDA_VISIBLE_DEVICES",
              "HIP_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PYTHONPATH", "NCCL_DEBUG", "SLURM_JOB_ID", "BEAM_DEBUG",
              "BEAM_TIMEOUT_SEC", "CACHEDB", "CACHELEVEL", "SEED", "DATADIR", "LRU", "WARMUP_STEPS", "EVAL_STEP_FREQ"]
  for name in ordinary: monkeypatch.setenv(name, os.environ.get(name, "1"))
  for bm in BENCHMARKS: load_config(bm, "tinybox_green")
  assert "warning:" not in capsys.readouterr().err
  # and none of tinygrad's own variables looks like a knob
  import re, tinygrad
  src = "\n".join(p.read_text() for p in Path(tinygrad.__file__).parent.rglob("*.py"))
  names = set(re.findall(r'(?:getenv|ContextVar)\("([A-Z][A-Z0-9_]+)"', src))
  assert len(names) > 50
  for bm in BENCHMARKS: assert not C.misspelt_knobs(names, SCHEMA[bm]), bm
  # nor another benchmark's knob (misspelt_knobs compares against one benchmark's knobs alone)
  for bm in BENCHMARKS: assert not C.misspelt_knobs(ALL_KNOBS, SCHEMA[bm]), bm


@pytest.mark.parametrize("benchmark, env", [("resnet", {"NUM_CLASSES": "10"}), ("resnet", {"RESNET_LAYERS": "2,2,2,2"}),
                                            ("bert", {"BERT_LAYERS": "2"}), ("bert", {"BERT_HIDDEN": "512", "BERT_HEADS": "8"})])
def test_an_override_of_the_closed_model_loads_for_a_bench_and_is_refused_for_a_run(tmp_path, benchmark, env):
  from tinyperf.benchmarks.common.config import require_closed_model
  cfg = load_config(benchmark, "1xH200", environ=env)          # `python -m lab.bench` and --phase init may time it
  with pytest.raises(ClosedModelError) as e: require_closed_model(cfg)
  assert all(f"{k}={v}" in str(e.value) for k, v in env.items()) and str(cfg.path) in str(e.value)
  require_closed_model(load_config(benchmark, "1xH200", environ={}))           # the closed model itself
  if benchmark == "resnet": require_closed_model(load_config(benchmark, "1xH200", environ={"RESNET_LAYERS": "3, 4, 6, 3"}))
  require_closed_model(load_config(benchmark, "cpu_smoke", environ=env))      # open: any model
  # the entrypoint refuses before it writes anything (no result log, no kernel cache)
  r = subprocess.run([sys.executable, "-m", f"tinyperf.benchmarks.{benchmark}.train", "--platform", "1xH200", "--phase", "all",
                      "--seed", "1", "--work", str(tmp_path / "r"), "--data", str(tmp_path)], cwd=REPO,
                     capture_output=True, text=True, timeout=120, env={**os.environ, **env})
  assert r.returncode == 2 and all(f"{k}={v}" in r.stderr for k, v in env.items()) and "Traceback" not in r.stderr, r.stderr
  assert not (tmp_path / "r").exists()


def test_a_closed_bert_config_file_must_be_bert_large(tmp_path):
  raw = yaml.safe_load(config_path("bert", "1xH200").read_text()); raw["BERT_LAYERS"] = 12
  d = tmp_path / "1xH200"; d.mkdir(); (d / "config.yaml").write_text(yaml.safe_dump(raw))
  with pytest.raises(ClosedModelError, match="BERT_LAYERS 12"):
    load_config("bert", "1xH200", environ={}, path=d / "config.yaml")


@pytest.mark.parametrize("env", [{"TRAIN_BEAM": "1", "BEAM_BUDGET_S": "60"}, {"EVAL_BEAM": "2", "BEAM_COVERAGE": "0.9"}])
def test_a_ranked_search_needs_the_first_uncaptured_step_without_beam(env):
  # without IGNORE_JIT_FIRST_BEAM=1 tinygrad searched every kernel in the first, uncaptured step (cpu_smoke ResNet: a
  # 247 s step 0 under BEAM_BUDGET_S=0) before the bounded search began
  with pytest.raises(ConfigError, match="IGNORE_JIT_FIRST_BEAM=1") as e:    # the setting that fixes it
    load_config("resnet", "cpu_smoke", environ=env)
  assert all(k in str(e.value) for k in env) and "environment" in str(e.value)
  load_config("resnet", "cpu_smoke", environ={**env, "IGNORE_JIT_FIRST_BEAM": "1"})
  load_config("resnet", "cpu_smoke", environ={**env, "TRAIN_BEAM": "0", "EVAL_BEAM": "0"})   # no BEAM: nothing to bound
  load_config("resnet", "1xH200", environ={})                                                  # the configs that rank
  load_config("bert", "1xH200", environ={})


def test_a_value_a_command_set_from_its_flag_is_named_by_that_flag():
  # `python -m lab.bench --bs 0` sets BS in its tinygrad side's environment: the refusal names the flag the user typed, not an
  # environment variable the user never set; what the environment itself set is still named as such
  with pytest.raises(ConfigError, match=r"^--bs 0: BS=0\b") as e:
    load_config("resnet", "cpu_smoke", environ={"BS": "0"}, given_as={"BS": "--bs 0"})
  assert "environment" not in str(e.value)
  with pytest.raises(ConfigError, match="IGNORE_JIT_FIRST_BEAM=1") as e:
    load_config("resnet", "cpu_smoke", environ={"TRAIN_BEAM": "1", "BEAM_BUDGET_S": "10"}, given_as={"TRAIN_BEAM": "--beam 1"})
  assert str(e.value).endswith("(BEAM_BUDGET_S comes from the environment; TRAIN_BEAM from --beam 1.)"), e.value


def test_division_open_from_the_environment_makes_a_closed_config_open_and_never_the_other_way():
  from tinyperf.benchmarks.common.config import require_closed_model
  cfg = load_config("bert", "1xH200", environ={"DIVISION": "open", "BERT_LAYERS": "2"})
  assert cfg["division"] == "open" and cfg.overridden["DIVISION"] == ("closed", "open")
  require_closed_model(cfg)      # an open run may train another model
  assert load_config("bert", "1xH200", environ={})["division"] == "closed"   # the file is unchanged
  smoke = load_config("bert", "cpu_smoke", environ={"DIVISION": "open"})
  assert smoke["division"] == "open" and "DIVISION" not in smoke.overridden
  for bad in ("closed", "Open"):
    with pytest.raises(ConfigError, match=f"DIVISION='{bad}'.*DIVISION=open"):   # the value given and the one accepted
      load_config("resnet", "cpu_smoke", environ={"DIVISION": bad})
