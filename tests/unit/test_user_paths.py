"""The user's path: `tinyperf check/score` typed with a relative path, from another working directory, give the same
bytes and exit code as with the absolute path (the MLCommons tools run in a scratch directory, so a relative path
handed through used to crash them: every log NON-COMPLIANT). Real published submission trees, the real CLI."""
from __future__ import annotations
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

TINYPERF = [sys.executable, "-m", "tinyperf.tooling.cli"]


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


@pytest.mark.real_tool_subprocess   # a crash of the real `python -m` process, not of a fork-server child
def test_a_crashed_checker_is_a_tool_error_not_a_verdict(tmp_path):
  """A traceback from an MLCommons tool is exit 2 with the tool and the file named, never NON-COMPLIANT."""
  from tinyperf.tooling.common import mlperf_tools
  from tinyperf.tooling.common.errors import ToolError
  missing = Path("results") / "result_0.txt"        # relative: the checker runs in a scratch directory and crashes
  with pytest.raises(ToolError, match=r"mlperf_logging\.compliance_checker\b.*results/result_0\.txt.*FileNotFoundError"):
    mlperf_tools.compliance_check(missing, "4.0.0")
  log = tmp_path / "result_0.txt"
  log.write_text(":::MLLOG {}\n")
  with pytest.raises(ToolError, match="compliance_checker"):   # argparse refuses the ruleset: no traceback, no verdict
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

  # runs of one tree that log different submitters (run refuses a second --org: the recorded one was edited by hand):
  # the odd ones out are named, loudly
  code, out = tp(*run, "--nexp", "3", "--results", "mixed", "--org", "myorg")
  assert code == 0, out
  sysjson = tmp_path / "mixed" / "systems" / "cpu_smoke.json"
  sysjson.write_text(sysjson.read_text().replace('"submitter": "myorg"', '"submitter": "other"'))
  code, out = tp(*run, "--nexp", "5", "--results", "mixed", "--org", "other")
  assert code == 0, out
  code, out = tp("check", "mixed")
  warned = [w for w in _org_warnings(out) if "result_" in w]
  assert len(warned) == 2 and all("submission_org" in w and "'other'" in w and "'myorg'" in w for w in warned), out
  assert "result_3.txt" in warned[0] and "result_4.txt" in warned[1], out
  code, one_dir = tp("check", "mixed/results/cpu_smoke/resnet")   # one set of the tree: the same verdict on its logs
  assert [w for w in _org_warnings(one_dir) if "result_" in w] == warned, one_dir

  # SUBMISSION_ORG is --org from the environment: the logs and the recorded machine both name it
  code, out = tp(*run, "--nexp", "5", "--results", "env", extra={"SUBMISSION_ORG": "envorg"})
  assert code == 0, out
  code, out = tp("check", "env")
  assert code == 0 and not _org_warnings(out), out


def test_the_submitter_is_asked_once_recorded_and_package_refuses_another(tmp_path):
  """The submitter's name is in every log and cannot change after the runs: the first run of a real platform without
  --org is refused (it silently logged tinycorp); a bad SUBMISSION_ORG is refused like a bad --org; later runs reuse the
  recorded name and refuse another; `package --org` with another name than the logs' is refused with the command that
  packs them, which then works as typed."""
  env = {"TINYPERF_TEST_TRAIN_MODULE": "tests.stand_in_train"}
  def tp(*args, extra=None, cwd=tmp_path):
    e = {k: v for k, v in os.environ.items() if k != "SUBMISSION_ORG"}
    p = subprocess.run([*TINYPERF, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                       env={**e, "PYTHONPATH": str(REPO), **env, **(extra or {})})
    return p.returncode, p.stdout, p.stderr
  code, out, err = tp("run", "bert", "--platform", "tinybox_green", "--data", "data", "--results", "out")
  assert code == 2 and "--org NAME" in err and "Traceback" not in err and not (tmp_path / "out").exists(), out + err
  code, out, err = tp("run", "bert", "--platform", "tinybox_green", "--data", "data", extra={"SUBMISSION_ORG": "my org"})
  assert code == 2 and "SUBMISSION_ORG" in err and "Traceback" not in err, out + err

  code, out, err = tp("prep", "synthetic-imagenet", "--out", "data", "--classes", "4", "--train-per-class", "2",
                      "--val-per-class", "1", "--size", "16", "--seed", "0")
  assert code == 0, out + err
  run = ["run", "resnet", "--platform", "cpu_smoke", "--data", "data", "--runtime", "host", "--results", "out"]
  code, out, err = tp(*run, "--nexp", "3", "--org", "myorg")
  assert code == 0, out + err
  code, out, err = tp(*run, "--nexp", "5")                      # no --org: the recorded one
  assert code == 0, out + err
  typed = out.strip().splitlines()[-1].split("check them with: ")[1]   # the last line names the check of the set
  code, out, err = tp(*shlex.split(typed)[1:], cwd=tmp_path.parent)
  assert code == 0 and "ACCEPTED" in out, out + err
  code, out, err = tp(*run, "--nexp", "6", "--org", "other")
  assert code == 2 and "--org myorg" in err, out + err
  # the toy platform leaves the host's page cache alone, root or not: it evicts its own data files only
  attempts = json.loads((tmp_path / "out" / "runs" / "cpu_smoke" / "resnet" / "ledger.json").read_text())["attempts"]
  assert attempts and all(a["cache_drop"].startswith("posix_fadvise") for a in attempts), attempts
  logs = sorted((tmp_path / "out" / "results" / "cpu_smoke" / "resnet").glob("result_*.txt"))
  assert len(logs) == 5 and all('"value": "myorg"' in l.read_text() for l in logs)

  code, out, err = tp("package", "--org", "other", "--out", "sub", "--results", "out")
  assert code == 2 and "Traceback" not in err and not (tmp_path / "sub" / "other").exists(), out + err
  fix = err.split("`")[1]
  assert fix.startswith("tinyperf package --org myorg "), err
  code, out, err = tp(*shlex.split(fix)[1:], cwd=tmp_path.parent)   # as typed, from another directory
  assert code == 0 and (tmp_path / "sub" / "mlperf_submission_myorg.tar.gz").is_file(), out + err


def test_one_default_results_location_across_verbs(tmp_path):
  """The Quickstart's runs are in out/smoke; `tinyperf status` looked in ./out, `check`, `score` and `report` wanted a
  path, `package` read ./out and `sysinfo --out` asked for the submitter and status `run` had recorded. Typed without a
  path, every reading verb now finds the runs: ./out, or the one results directory in it."""
  env = {**{k: v for k, v in os.environ.items() if k != "SUBMISSION_ORG"}, "PYTHONPATH": str(REPO),
         "TINYPERF_TEST_TRAIN_MODULE": "tests.stand_in_train"}
  def tp(*args):
    p = subprocess.run([*TINYPERF, *args], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    return p.returncode, p.stdout, p.stderr
  code, out, err = tp("prep", "synthetic-imagenet", "--out", "out/smoke/data", "--classes", "4", "--train-per-class", "2",
                      "--val-per-class", "1", "--size", "16", "--seed", "0")
  assert code == 0, out + err
  code, out, err = tp("run", "resnet", "--platform", "cpu_smoke", "--data", "out/smoke/data", "--runtime", "host",
                      "--results", "out/smoke")
  assert code == 0, out + err
  for verb in (["status"], ["check"], ["score"], ["report"], ["package", "--out", "submission"],
               ["sysinfo", "--platform", "cpu_smoke", "--out", "box.json"]):
    code, out, err = tp(*verb)
    assert code == 0 and "Traceback" not in err, (verb, out, err)
    if verb[0] != "sysinfo": assert "results: out/smoke" in err, (verb, err)
  assert (tmp_path / "submission" / "mlperf_submission_smoke.tar.gz").is_file()   # the submitter the runs recorded
  assert json.loads((tmp_path / "box.json").read_text())["submitter"] == "smoke"
  assert (tmp_path / "out" / "smoke" / "report").is_dir()


def test_the_documented_sysinfo_commands_work_on_a_fresh_checkout(tmp_path):
  """docs/usage.md's sysinfo lines, as typed in an empty directory: the repository's systems JSON gives what neither
  detection nor the one-line overrides file says (status, storage, ...), never its submitter."""
  usage = (REPO / "docs" / "usage.md").read_text()
  block = usage.split("## sysinfo")[1].split("```bash\n")[1].split("```")[0]
  env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
  for line in block.splitlines():
    p = subprocess.run(line.split("#")[0], shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (line, p.stdout, p.stderr)
  data = json.loads((tmp_path / "my_box.json").read_text())
  assert data["submitter"] == "myorg" and data["status"], data
