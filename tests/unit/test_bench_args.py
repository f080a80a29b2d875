"""`tinyperf bench` refuses arguments that do not fit the benchmark before starting anything."""
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("argv", [["resnet", "--dropout", "0"], ["bert", "--dropout", "1.5"], ["bert", "--dropout", "-0.1"]])
def test_dropout_only_for_bert_and_only_a_probability(argv):
  r = subprocess.run([sys.executable, "-m", "tooling.cli", "bench", *argv], cwd=REPO, capture_output=True, text=True,
                     timeout=120)
  assert r.returncode == 2 and "--dropout" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv, says", [(["--steps", "0"], "--steps 0: time at least one step"),
                                        (["--time-limit", "0"], "--time-limit 0: give a number of seconds above 0"),
                                        (["--time-limit", "-5"], "--time-limit -5: give a number of seconds above 0"),
                                        (["--time-limit", "inf"], "--time-limit inf: give a number of seconds above 0"),
                                        (["--record", "no-such-dir/r.jsonl"], "no-such-dir does not exist or is not writable"),
                                        (["--record", "docs"], "docs: a directory, not a file")])
def test_steps_time_limit_and_record_are_refused_before_init(argv, says):
  # each once ran INIT on the CPU first (about 20 s) and only then failed; --record with a traceback after the bench
  # (also onto a directory); --time-limit inf with an OverflowError traceback from the limit's timer thread
  r = subprocess.run([sys.executable, "-m", "tooling.cli", "bench", "resnet", "--platform", "cpu_smoke", "--against", "none",
                      *argv], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
  assert "init took" not in r.stdout + r.stderr


@pytest.mark.parametrize("vary, names", [("USE_ATOMICS", "KNOB=VALUE"), ("NOT_A_KNOB=1", "NOT_A_KNOB"),
                                          ("USE_ATOMICS=2", "allowed: 0, 1"), ("BS=many", "must be int")])
def test_vary_takes_one_knob_of_the_config_with_a_valid_value(vary, names):
  r = subprocess.run([sys.executable, "-m", "tooling.cli", "bench", "bert", "--against", "none", "--vary", vary],
                     cwd=REPO, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and f"--vary {vary}" in r.stderr and names in r.stderr, r.stderr
  assert "Traceback" not in r.stderr


def _bench_args(*argv):
  import argparse
  from tooling.perf.bench import add_arguments
  p = argparse.ArgumentParser(); add_arguments(p)
  return p.parse_args(list(argv))


def test_the_pytorch_side_trains_the_depth_the_tinygrad_side_trains(monkeypatch):
  from tooling.perf.bench import torch_command
  args = _bench_args("bert", "--gpus", "1", "--bs", "32")
  assert torch_command(args)[torch_command(args).index("--layers") + 1] == "24"
  monkeypatch.setenv("BERT_LAYERS", "2")   # as in `BERT_LAYERS=2 tinyperf bench bert ...`: both sides 2 layers
  cmd = torch_command(args)
  assert cmd[cmd.index("--layers") + 1] == "2" and cmd[cmd.index("--seq") + 1] == "512"


@pytest.mark.parametrize("argv, env, named", [
    (["bert"], {"BERT_HIDDEN": "512", "BERT_HEADS": "8"}, "BERT_HIDDEN=512"),
    (["resnet", "--platform", "cpu_smoke"], {}, "RESNET_LAYERS=1,1")])
def test_a_model_the_pytorch_side_cannot_build_is_refused_before_anything_runs(argv, env, named):
  import os
  r = subprocess.run([sys.executable, "-m", "tooling.cli", "bench", *argv], cwd=REPO, capture_output=True, text=True,
                     timeout=120, env={**os.environ, **env})
  assert r.returncode == 2 and "--against torch" in r.stderr and named in r.stderr and "--against none" in r.stderr, r.stderr
  assert "Traceback" not in r.stderr and "tinyperf-bench" not in r.stdout
  # what to unset is said only for what the environment set: cpu_smoke's toy model is its config file's
  assert ("Unset " + " ".join(env)) in r.stderr if env else "Unset" not in r.stderr, r.stderr
