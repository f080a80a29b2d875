"""What a user sees of the CLI before anything runs: --version, run --help, the error for a mistyped platform, run --org,
the lab's bench outside the product, prep's usage lines. Run as a user runs it, from another directory."""
from __future__ import annotations
import os
import subprocess
import sys
from importlib.metadata import version

import pytest

from tinyperf.benchmarks.common.config import available_platforms
from tinyperf.benchmarks.registry import BENCHMARKS
from tests.conftest import REPO


def tinyperf(*args: str, cwd) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": str(REPO)}
  return subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *args], cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=120)


def test_version_names_tinyperf_tinygrad_and_mlperf_logging(tmp_path):
  r = tinyperf("--version", cwd=tmp_path)
  assert r.returncode == 0 and r.stdout.strip() == (f"tinyperf {version('tinyperf')} (tinygrad {version('tinygrad')}, "
                                                    f"mlperf-logging {version('mlperf-logging')})"), r.stdout + r.stderr


def test_run_help_lists_every_platform(tmp_path):
  text = " ".join(tinyperf("run", "--help", cwd=tmp_path).stdout.split())   # argparse wraps lines
  for b in BENCHMARKS:
    assert f"{b}: {', '.join(available_platforms(b))}" in text, text


@pytest.mark.parametrize("typo, meant", [("tinybox-green", "tinybox_green"), ("1xh200", "1xH200"), ("cpusmoke", "cpu_smoke")])
def test_a_mistyped_platform_gets_did_you_mean(tmp_path, typo, meant):
  r = tinyperf("run", "resnet", "--platform", typo, "--data", str(tmp_path), "--runtime", "host", cwd=tmp_path)
  assert r.returncode == 2 and meant in r.stderr and typo in r.stderr, r.stderr     # the typo and the platform meant
  assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [("check", "x", "--jso"), ("status", "--res", "out"), ("--vers",)])
def test_an_abbreviated_flag_is_refused(tmp_path, args):
  # argparse took a prefix for the whole flag, so a flag cut short in the docs still parsed in their test
  r = tinyperf(*args, cwd=tmp_path)
  assert r.returncode == 2 and r.stdout == "" and "error:" in r.stderr and "Traceback" not in r.stderr, r.stderr
  assert "unrecognized arguments" in r.stderr or args == ("--vers",)   # --vers alone: no verb given


def test_run_org_must_be_a_submitter_name(tmp_path):
  r = tinyperf("run", "resnet", "--platform", "cpu_smoke", "--data", str(tmp_path), "--org", "my org", cwd=tmp_path)
  assert r.returncode == 2 and "--org" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args, usage", [(["wiki", "--help"], "usage: tinyperf prep wiki "),
                                         (["wiki", "pretrain", "--help"], "usage: tinyperf prep wiki pretrain "),
                                         (["imagenet", "--help"], "usage: tinyperf prep imagenet ")])
def test_prep_usage_names_the_command_the_user_typed(tmp_path, args, usage):
  r = tinyperf("prep", *args, cwd=tmp_path)
  assert r.returncode == 0 and r.stdout.startswith(usage), r.stdout[:200]


def test_a_closed_stdout_ends_quietly(tmp_path):
  """`tinyperf run --scheduler slurm ... | head -1` submitted the job, then ended in a BrokenPipeError traceback and exit 1,
  which reads as a failed submission."""
  r, w = os.pipe()
  os.close(r)   # the reader is gone before tinyperf writes its first line
  try:
    p = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "images", "show"], cwd=tmp_path, stdout=w, stderr=subprocess.PIPE,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, text=True, timeout=120)
  finally: os.close(w)
  assert p.returncode == 141 and p.stderr == "", p.stderr


def test_top_level_help_names_bert_data_prep_by_a_command_that_exists(tmp_path):
  text = " ".join(tinyperf("--help", cwd=tmp_path).stdout.split())   # argparse wraps lines
  assert "BERT's Wikipedia" in text and "`tinyperf prep wiki --help`" in text, text
  r = tinyperf("prep", "wiki", "--help", cwd=tmp_path)
  assert r.returncode == 0 and "pretrain" in r.stdout


def test_render_check_says_in_one_line_that_everything_is_up_to_date(tmp_path):
  r = tinyperf("render", "--check", cwd=tmp_path)
  assert r.returncode == 0 and r.stderr == "", r.stdout + r.stderr
  (line,) = r.stdout.splitlines()
  assert line.startswith("up to date: all ") and "rendered files" in line


def test_a_prep_service_names_the_host_directory_behind_its_mount(tmp_path):
  """`docker compose run --rm prep-synthetic` printed `wrote /data/manifest.json`: a path only the container has."""
  data = tmp_path / "data"
  env = {**os.environ, "PYTHONPATH": str(REPO), "TINYPERF_MOUNTS": f"{data}=SYNTHETIC_DIR",
         "TINYPERF_HOST_SYNTHETIC_DIR": "/home/me/data/synthetic"}
  prep = ["prep", "synthetic-imagenet", "--out", str(data), "--classes", "2", "--train-per-class", "2", "--val-per-class",
          "1", "--size", "8"]
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *prep], cwd=tmp_path, env=env, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 0 and "wrote /home/me/data/synthetic/manifest.json: 2 classes" in r.stdout + r.stderr, r.stderr
  assert str(data) not in r.stdout + r.stderr
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *prep[:-1], "9"], cwd=tmp_path, env=env, capture_output=True,
                     text=True, timeout=300)   # another set in the same folder: refused, exit 2, naming the host path
  assert r.returncode == 2 and "/home/me/data/synthetic" in r.stderr and str(data) not in r.stdout + r.stderr, r.stderr


def test_the_lab_is_no_verb(tmp_path):
  # the perf lab (lab/) is not in the product: `tinyperf bench` is refused, `python -m lab.bench` is the command
  assert tinyperf("bench", "resnet", cwd=tmp_path).returncode == 2
