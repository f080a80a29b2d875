"""Conformance: `tinyperf check` and `tinyperf score` on tinycorp's real submissions (mlperf-logging 4.1.68)."""
from __future__ import annotations
import json

import pytest

from conftest import shared_dir
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common.judge.check import check_path
from tinyperf.tooling.common.judge.findings import FAIL
from tinyperf.tooling.common.judge.score import score_path

STATUS_ERROR = "Field status contains a non valid value: available"


def test_v40_resnet_rejected_only_for_systems_status(reference):
  tree = reference("v4.0")
  report = check_path(tree)
  assert not report.accepted and report.exit_code == 1
  blocking = report.failures()
  assert len(blocking) == 1, [f.message for f in blocking]
  assert blocking[0].check == "system-desc" and blocking[0].file == "systems/tinybox_green.json"
  assert STATUS_ERROR in blocking[0].message
  (d,) = report.dirs
  assert d.accepted and d.noncompliant == 1
  assert d.summary.startswith("4 of 5 compliant: accepted under olympic scoring")
  bad = [f for f in d.files if not f.compliant]
  assert [f.name for f in bad] == ["result_0.txt"]
  assert "run_stop" in bad[0].first_failure.message and bad[0].minutes is None
  assert round(d.score_minutes, 2) == 122.08
  assert all(f.checker_success for f in d.files if f.name != "result_0.txt")


def test_v40_resnet_accepted_once_status_is_fixed(reference):
  tree = reference("v4.0")
  sysjson = tree / "systems" / "tinybox_green.json"
  data = json.loads(sysjson.read_text())
  data["status"] = "Available on-premise"
  sysjson.write_text(json.dumps(data))
  report = check_path(tree)
  assert report.accepted and report.exit_code == 0, [f.message for f in report.failures()]
  assert report.dirs[0].summary.startswith("4 of 5 compliant: accepted under olympic scoring")


@pytest.fixture(scope="module")
def v50_report():
  src = shared_dir() / "reference-submissions" / "v5.0" / "tinycorp"
  if not src.is_dir(): pytest.skip(f"reference submissions not found at {src} (set TINYPERF_SHARED)")
  return check_path(src)   # read-only: check runs package_checker on a scratch copy


def test_v50_bert_green_and_red_accepted_green_over_init_limit(v50_report):
  report = v50_report
  assert report.accepted and report.exit_code == 0, [f.message for f in report.failures()]
  dirs = {d.system: d for d in report.dirs}
  assert set(dirs) == {"tinybox_green", "tinybox_red"}
  assert dirs["tinybox_red"].noncompliant == 0 and dirs["tinybox_red"].summary == "10 of 10 compliant"
  green = dirs["tinybox_green"]
  assert round(green.score_minutes, 2) == 213.60 and round(dirs["tinybox_red"].score_minutes, 2) == 300.51
  assert green.summary.startswith("9 of 10 compliant: accepted under olympic scoring")
  (bad,) = [f for f in green.files if not f.compliant]
  assert bad.name == "result_2.txt"
  # the checker's rule, mapped from its 0-based MLLOG index 7 to file line 8
  assert bad.first_failure.message.startswith("CHECK for 'init_stop' failed") and bad.first_failure.line == 8
  init = [f for f in bad.findings if f.check == "init-time" and f.level == FAIL]
  assert len(init) == 1
  assert "init took 32.29 min" in init[0].message and "2.29 min over the 30-min closed limit" in init[0].message
  assert bad.init_margin_minutes == pytest.approx(-2.2945, abs=1e-3)


def test_v50_ruleset_and_rcp(v50_report):
  assert v50_report.rulesets == ["5.0.0"]
  for d in v50_report.dirs:
    assert any("RCP Test Passed" in f.message for f in d.findings)


def _summarizer_scores(tree, ruleset):
  rows = mlperf_tools.result_summarizer(tree.parent, tree.name, ruleset)
  names = {json.loads(p.read_text())["system_name"]: p.stem for p in (tree / "systems").glob("*.json")}
  bench = {"4.0.0": "resnet", "5.0.0": "bert"}[ruleset]
  return {names[r["system"]]: r[bench] for r in rows}


@pytest.mark.parametrize("version,ruleset,expected", [
  ("v4.0", "4.0.0", {"tinybox_green": 122.08}),
  ("v5.0", "5.0.0", {"tinybox_green": 213.60, "tinybox_red": 300.51}),
])
def test_scores_equal_result_summarizer(reference, version, ruleset, expected):
  tree = reference(version)
  ours = {s.system: s.score_minutes for s in score_path(tree)}
  theirs = _summarizer_scores(tree, ruleset)
  assert set(ours) == set(theirs) == set(expected)
  for system, minutes in expected.items():
    assert ours[system] == pytest.approx(theirs[system], abs=0.01)
    assert round(ours[system], 2) == minutes


def test_v40_score_drops_the_unfinished_run(reference):
  (s,) = score_path(reference("v4.0", copy=False))
  assert s.dropped == 1
  dropped = [r for r in s.runs if not r.counted]
  assert [r.file for r in dropped] == ["result_0.txt"] and "non-compliant" in dropped[0].note
  # the dropped run is the slowest, so only the fastest counted run leaves the mean
  counted = sorted(r.minutes for r in s.runs if r.counted)
  assert s.olympic_minutes == pytest.approx(sum(counted[1:]) / 3)
