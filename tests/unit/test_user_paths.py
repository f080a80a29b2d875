"""The user's path: `tinyperf check/score` typed with a relative path, from another working directory, give the same
bytes and exit code as with the absolute path (the MLCommons tools run in a scratch directory, so a relative path
handed through used to crash them: every log NON-COMPLIANT). Real published submission trees, the real CLI."""
from __future__ import annotations
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

TINYPERF = [sys.executable, "-m", "tooling.cli"]


def tinyperf(cwd: Path, *args: str) -> tuple[int, str]:
  env = {**os.environ, "PYTHONPATH": str(REPO)}
  p = subprocess.run([*TINYPERF, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
  return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize("verb", ["check", "score"])
def test_relative_and_absolute_paths_agree_from_any_cwd(reference, verb, tmp_path):
  tree = reference("v4.0", copy=False)                  # read-only: check works on a scratch copy
  absolute = tinyperf(tmp_path, verb, str(tree))
  from_parent = tinyperf(tree.parent, verb, tree.name)
  from_inside = tinyperf(tree / "results", verb, "..")
  assert "122.08" in absolute[1], absolute[1]          # the published olympic mean: the checkers really ran
  assert from_parent == absolute and from_inside == absolute
  assert "checker crashed" not in absolute[1]


def test_check_dot_inside_a_benchmark_directory_keeps_its_system(reference):
  tree = reference("v4.0", copy=False)
  bench = tree / "results" / "tinybox_green" / "resnet"
  code, out = tinyperf(bench, "check", ".")
  assert code == 1, out                                  # v4.0 is rejected for its systems JSON status only
  assert "results/tinybox_green/resnet" in out and "4 of 5 compliant" in out and "no systems JSON" not in out
  assert tinyperf(bench.parent.parent.parent, "check", "results/tinybox_green/resnet/.") == (code, out)


def test_symlinked_directory_keeps_the_name_given(reference, tmp_path):
  tree = reference("v4.0", copy=False)
  (tmp_path / "link").symlink_to(tree)
  code, out = tinyperf(tmp_path, "score", "link/results/tinybox_green/resnet")
  assert code == 0 and "tinybox_green" in out and "122.08" in out, out


def test_a_crashed_checker_is_a_tool_error_not_a_verdict(tmp_path):
  """A traceback from an MLCommons tool is exit 2 with the tool and the file named, never NON-COMPLIANT."""
  from tooling.common import mlperf_tools
  from tooling.common.errors import ToolError
  missing = Path("results") / "result_0.txt"        # relative: the checker runs in a scratch directory and crashes
  with pytest.raises(ToolError, match=r"mlperf_logging\.compliance_checker crashed on results/result_0\.txt.*"
                     r"FileNotFoundError.*not a verdict"):
    mlperf_tools.compliance_check(missing, "4.0.0")
  log = tmp_path / "result_0.txt"
  log.write_text(":::MLLOG {}\n")
  with pytest.raises(ToolError, match="printed no verdict"):   # argparse refuses the ruleset: no traceback, no verdict
    mlperf_tools.compliance_check(log, "0.0.0")


def _org_warnings(out: str) -> list[str]:
  return [l.strip() for l in out.splitlines() if "WARN" in l and ("org" in l or "submitter" in l)]


def test_check_on_the_results_tree_run_wrote_warns_only_where_orgs_disagree(tmp_path):
  """The documented flow: `tinyperf run ... --results out [--org NAME]`, then `tinyperf check out` (compose's check
  service: `tinyperf check /results`). That tree's name is the user's choice, not a submitter's, yet check read it as
  the submitter directory and warned on every log ("submission_org is 'tinycorp' but the submitter directory is
  'out'") and on the systems JSON. Now it is clean, and warns where the submitter names really disagree: runs of the
  tree logging another org, a systems JSON naming another submitter. A packed submitter tree is still checked
  against its directory name (tests/integration/test_check_packages.py)."""
  env = {"TINYPERF_TEST_TRAIN_MODULE": "tests.stand_in_train"}
  def tp(*args, extra=None):
    p = subprocess.run([*TINYPERF, *args], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(REPO), **env, **(extra or {})})
    return p.returncode, p.stdout + p.stderr
  code, out = tp("prep", "synthetic-imagenet", "--out", "data", "--classes", "4", "--train-per-class", "2",
                 "--val-per-class", "1", "--size", "16", "--seed", "0")
  assert code == 0, out
  run = ["run", "resnet", "--platform", "cpu_smoke", "--data", "data", "--runtime", "host"]
  code, out = tp(*run, "--nexp", "5", "--results", "out", "--org", "myorg")
  assert code == 0, out
  code, out = tp("check", "out")
  assert code == 0 and "check: ACCEPTED" in out, out
  assert not _org_warnings(out) and "submitter directory 'out'" not in out, out

  # runs of one tree that log different submitters: the odd ones out are named, loudly
  code, out = tp(*run, "--nexp", "3", "--results", "mixed", "--org", "myorg")
  assert code == 0, out
  code, out = tp(*run, "--nexp", "5", "--results", "mixed", "--org", "other")
  assert code == 0, out
  code, out = tp("check", "mixed")
  warned = _org_warnings(out)
  assert len(warned) == 2 and all("submission_org is 'other' but the other runs of this results tree log 'myorg'" in w
                                  for w in warned), out
  assert "result_3.txt" in warned[0] and "result_4.txt" in warned[1], out
  code, one_dir = tp("check", "mixed/results/cpu_smoke/resnet")   # one set of the tree: the same verdict on its logs
  assert _org_warnings(one_dir) == warned, one_dir

  # the logs name one submitter (SUBMISSION_ORG), the recorded machine another (the repository's systems JSON)
  code, out = tp(*run, "--nexp", "5", "--results", "env", extra={"SUBMISSION_ORG": "envorg"})
  assert code == 0, out
  code, out = tp("check", "env")
  assert _org_warnings(out) == ["WARN  systems/cpu_smoke.json: submitter is 'tinycorp' but the runs' logs say "
                                "submission_org 'envorg'; one of them names the wrong submitter (`tinyperf run --org "
                                "NAME` records the same name in both)"], out
