"""benchmarks/common/rules.py is the one owner of the MLPerf rules we apply: every consumer takes its value from there
(runs per benchmark from the installed mlperf_logging, rulesets, seeds), so changing the rule changes every verb."""
import argparse
import dataclasses
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml
from mlperf_logging import benchmark_meta

from tinyperf.benchmarks.common import rules
from tinyperf.benchmarks.common.config import ConfigError
from tinyperf.benchmarks.registry import BENCHMARKS, load_config
from tinyperf.benchmarks.common.io import InputError
from tests.conftest import REPO
from tinyperf.tooling.common.judge import dir_checks, findings
from tinyperf.tooling.launch import run
from tinyperf.tooling.common.submission_tree import choose_ruleset


@pytest.mark.parametrize("bm", BENCHMARKS)
def test_runs_per_benchmark_are_mlperf_loggings_count_in_every_verb(bm):
  n = benchmark_meta.get_result_file_counts("training")[bm]
  assert rules.required_runs(bm) == n
  # compose.yaml (generated, committed): every service of the benchmark defaults NEXP to it
  services = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
  cmds = [s["command"] for s in services.values() if s.get("command", [])[:3] == ["tinyperf", "run", bm]]
  nexp = [c[c.index("--nexp") + 1] for c in cmds]
  assert nexp and set(nexp) == {f"${{NEXP:-{n}}}"}
  # `tinyperf run --help` names the default --nexp
  parser = argparse.ArgumentParser()
  run.add_arguments(parser)
  assert f"{bm} {n}" in next(a.help for a in parser._actions if a.dest == "nexp")
  # `tinyperf check`: one result file short of it is a failure that names it
  logs = [SimpleNamespace(path=REPO / rules.result_name(i)) for i in range(n - 1)]
  dr = findings.DirReport("d", "d", "sys", bm, BENCHMARKS[bm].ruleset, "closed")
  dir_checks._naming_check(SimpleNamespace(benchmark=bm, logs=logs, other_files=[]), dr)
  assert [(f.level, f.message.split(" (")[0]) for f in dr.findings] == [
    (findings.FAIL, f"{n - 1} result_*.txt files; a {bm} package needs exactly {n}")]


def test_the_ruleset_of_a_benchmark_is_read_from_its_spec(monkeypatch):
  """A config whose closed ruleset differs from the spec's is refused, and `check` picks the spec's ruleset."""
  assert load_config("resnet", "tinybox_green", environ={})["ruleset"] == BENCHMARKS["resnet"].ruleset
  monkeypatch.setitem(BENCHMARKS, "resnet", dataclasses.replace(BENCHMARKS["resnet"], ruleset="3.1.0"))
  with pytest.raises(ConfigError, match=r"4\.0\.0.*3\.1\.0"):      # the config's ruleset, then the spec's
    load_config("resnet", "tinybox_green", environ={})
  monkeypatch.setitem(BENCHMARKS, "bert", dataclasses.replace(BENCHMARKS["bert"], ruleset="4.1.0"))
  assert choose_ruleset("bert", "closed", None, "x") == "4.1.0"


def test_result_names_match_the_package_pattern():
  assert [bool(rules.RESULT_NAME.match(rules.result_name(i))) for i in (0, 9, 10)] == [True] * 3
  assert not rules.RESULT_NAME.match("result_01.txt") and rules.RESULT_GLOB.match("result_01.txt")
  assert not rules.RESULT_GLOB.match("result_0.txt.bak")


def test_an_exhausted_seed_space_is_a_clear_error_not_a_hang():
  with pytest.raises(InputError, match="SEED_BITS=0"):
    rules.draw_seed(0, {0})
  assert rules.draw_seed(2, {0, 1, 2}) == 3
  assert all(0 <= rules.draw_seed() < 2 ** rules.SEED_BITS for _ in range(100))


def test_the_generated_scripts_draw_their_seed_here():
  """run_and_time.sh asks benchmarks/registry.py for its seed (drawn by rules.draw_seed), with the platform's SEED_BITS
  (the environment overrides it)."""
  script = (REPO / "benchmarks/resnet/implementations/cpu_smoke/run_and_time.sh").read_text()
  assert "python3 -m tinyperf.benchmarks.registry seed resnet cpu_smoke" in script and "urandom" not in script
  cmd = [sys.executable, "-m", "tinyperf.benchmarks.registry", "seed", "resnet", "cpu_smoke"]
  seeds = {int(subprocess.run(cmd, cwd=REPO, env={**os.environ, "SEED_BITS": "16"}, capture_output=True, text=True,
                              check=True).stdout) for _ in range(3)}
  assert all(0 <= s < 2 ** 16 for s in seeds)
  bad = subprocess.run(cmd, cwd=REPO, env={**os.environ, "SEED_BITS": "64"}, capture_output=True, text=True)
  assert bad.returncode == 2 and "SEED_BITS" in bad.stderr and "Traceback" not in bad.stderr
