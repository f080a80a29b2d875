"""Synthetic submission trees (real mllog logs) through `tinyperf check`: package_checker with its seed and RCP checks,
system_desc_checker, and the package-level checks the official tools miss. Each test runs the checkers several times."""
from __future__ import annotations
import json
import shutil

import pytest

from mllog_builder import make_package
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common.judge.check import check_path
from tinyperf.tooling.common.judge.findings import FAIL, WARN
from tinyperf.tooling.cli import main as cli
from tinyperf.tooling.common.judge.score import score_path

pytestmark = pytest.mark.integration


def dir_findings(report, check=None, level=None):
  (d,) = report.dirs
  return [f for f in d.findings if (check is None or f.check == check) and (level is None or f.level == level)]


def test_compliant_packages_are_accepted(capsys, tmp_path):
  for bm in ("resnet", "bert"):
    org = make_package(tmp_path / bm, bm)
    report = check_path(org)
    assert report.accepted and report.exit_code == 0, [f.message for f in report.failures()]
    (d,) = report.dirs
    n = 5 if bm == "resnet" else 10
    assert d.summary == f"{n} of {n} compliant" and d.ruleset == {"resnet": "4.0.0", "bert": "5.0.0"}[bm]
    assert not [f for f in d.findings if f.level == WARN]
  assert cli(["check", str(org)]) == 0
  assert capsys.readouterr().out.rstrip().endswith("check: ACCEPTED")


def test_duplicate_seed_across_runs(tmp_path):
  seeds = [1_500_000_001, 1_600_000_003, 1_500_000_001, 1_700_000_009, 1_800_000_011]
  report = check_path(make_package(tmp_path, "resnet", seeds=seeds))
  assert not report.accepted
  (ours,) = dir_findings(report, "seed", FAIL)
  assert all(f in ours.message for f in ("1500000001", "result_0.txt", "result_2.txt")), ours.message
  theirs = dir_findings(report, "package-checker", FAIL)
  assert any("Seed checker failed" in f.message for f in theirs)


def test_narrow_seeds_warn_at_package_level(tmp_path):
  seeds = [600_001 + 90_001 * i for i in range(5)]           # all fit in 20 bits: 5*(31-20) bits of evidence
  report = check_path(make_package(tmp_path, "resnet", seeds=seeds))
  assert report.accepted
  (w,) = dir_findings(report, "seed-width", WARN)
  assert "20 bits" in w.message and "960005" in w.message, w.message      # the width, and the largest seed


def test_15_bit_seeds_are_one_package_warning(tmp_path):
  report = check_path(make_package(tmp_path, "resnet", seeds=[101, 2002, 3003, 4004, 32000]))
  assert report.accepted
  (w,) = dir_findings(report, "seed-width", WARN)
  assert w.message.startswith("5 of 5 runs log a seed that fits in 15 bits")
  assert not [f for d in report.dirs for fr in d.files for f in fr.findings if f.check == "seed-width"]


def test_misnamed_result_file(tmp_path):
  names = ["result_0.txt", "result_1.txt", "result2.txt", "result_3.txt", "result_4.txt"]
  report = check_path(make_package(tmp_path, "resnet", names=names))
  assert not report.accepted
  fails = [f.message for f in dir_findings(report, "result-files", FAIL)]
  warns = [f.message for f in dir_findings(report, "result-files", WARN)]
  assert any(m.startswith("result2.txt is a result log not named result_<i>.txt") for m in warns)
  assert fails == ["4 result_*.txt files; a resnet package needs exactly 5 (package_checker's rule)"]
  assert any(m.startswith("result files are not numbered contiguously: missing result_2.txt") for m in warns)
  assert any("Incorrect number of files" in f.message for f in dir_findings(report, "package-checker", FAIL))


def test_non_contiguous_result_files_warn_as_package_checker_passes_them(tmp_path):
  names = ["result_0.txt", "result_1.txt", "result_2.txt", "result_3.txt", "result_5.txt"]
  org = make_package(tmp_path, "resnet", names=names)
  report = check_path(org)
  assert report.accepted and dir_findings(report, "package-checker", FAIL) == []   # it only counts the files
  (w,) = dir_findings(report, "result-files", WARN)
  assert w.message.startswith("result files are not numbered contiguously: missing result_4.txt")
  report = check_path(org, strict=True)
  assert not report.accepted and [f.check for f in report.failures()] == ["result-files"]


def test_unknown_files_in_results_dir_warn(tmp_path):
  org = make_package(tmp_path, "resnet")
  bdir = org / "results" / "tinybox_green" / "resnet"
  (bdir / "notes.md").write_text("hi")
  (bdir / "console.log").write_text("training resnet\nloss 1.2\n")   # no MLLOG lines: not a result log
  report = check_path(org)
  assert report.accepted
  msgs = [f.message for f in dir_findings(report, "result-files", WARN)]
  assert any(m.startswith("notes.md") for m in msgs) and any(m.startswith("console.log") for m in msgs), msgs


def test_one_unfinished_run_is_olympic_two_are_rejected(tmp_path):
  report = check_path(make_package(tmp_path / "one", "resnet", runs=[{}, {}, {"run_stop": False}]))
  assert report.accepted
  assert report.dirs[0].summary == ("4 of 5 compliant: accepted under olympic scoring "
                                    "(result_2.txt counts as the slowest run)")
  report = check_path(make_package(tmp_path / "two", "resnet", runs=[{}, {"run_stop": False}, {"init_minutes": 40}]))
  assert not report.accepted and report.dirs[0].summary == "3 of 5 compliant: rejected"
  (o,) = dir_findings(report, "olympic", FAIL)
  assert "2 of 5 runs are non-compliant (result_1.txt, result_2.txt); olympic scoring tolerates 1" == o.message
  assert any("2 files do not comply" in f.message for f in dir_findings(report, "package-checker", FAIL))


def test_a_tolerated_run_in_a_set_rejected_for_another_reason_is_not_called_accepted(tmp_path):
  # the summary said "accepted under olympic scoring" and then "directory REJECTED" (one log's division differed)
  report = check_path(make_package(tmp_path, "resnet", runs=[{}, {}, {"run_stop": False}, {"division": "open"}]))
  assert not report.accepted and dir_findings(report, "cross-check", FAIL)
  (dr,) = report.dirs
  assert dr.summary.startswith("4 of 5 compliant: tolerated by olympic scoring (result_2.txt counts as the slowest run); ")
  assert "set-level failure" in dr.summary and "accepted" not in dr.summary
  out = report.render()
  assert "directory REJECTED" in out and "accepted under olympic scoring" not in out
  if dr.score_minutes is not None: assert "no valid score while rejected" in out


def test_duplicate_key_is_a_warning_until_werror(tmp_path):
  org = make_package(tmp_path, "bert", runs=[{"duplicate": "opt_lamb_beta_1"}])   # bert: its checker rules warn on it
  report = check_path(org)
  assert report.accepted
  assert [f.level for f in report.dirs[0].files[0].findings if f.check == "duplicate-key"] == [WARN]
  report = check_path(org, werror=True)
  assert report.dirs[0].files[0].first_failure.check == "duplicate-key"
  assert report.accepted   # one failing run of ten is tolerated under olympic scoring
  assert report.dirs[0].summary.startswith("9 of 10 compliant: accepted under olympic scoring")


def test_cross_checks_against_directories_and_systems_json(tmp_path):
  org = make_package(tmp_path, "resnet", platform="tinybox_red", runs=[{"org": "someone"}] * 5,
                     system_overrides={"division": "open"})
  report = check_path(org)
  msgs = [f.message for f in dir_findings(report, "cross-check", WARN)]
  def each_run(*facts): return sum(all(f in m for f in facts) for m in msgs) == 5   # one finding per run, naming them
  assert each_run("submission_platform", "'tinybox_red'", "results/tinybox_green")
  assert each_run("submission_org", "'someone'", "'tinycorp'", "`tinyperf package --org someone")
  assert each_run("'closed'", "systems/tinybox_green.json", "'open'")


def test_missing_systems_json_fails_but_still_runs_the_checks(tmp_path):
  org = make_package(tmp_path, "resnet", seeds=[11, 11, 2_000_000_001, 2_000_000_003, 2_000_000_005])
  (org / "systems" / "tinybox_green.json").unlink()
  report = check_path(org)
  assert not report.accepted
  assert any("systems/tinybox_green.json" in f.message for f in dir_findings(report, "cross-check", FAIL))
  # package_checker ran with a stand-in, so its seed checker still found the repeated seed
  assert any("Seed checker failed" in f.message for f in dir_findings(report, "package-checker", FAIL))


def test_results_directory_outside_a_tree(tmp_path):
  org = make_package(tmp_path / "src", "bert")
  alone = tmp_path / "bert"
  shutil.copytree(org / "results" / "tinybox_green" / "bert", alone)
  report = check_path(alone)
  assert report.accepted and report.kind == "results" and report.org is None
  assert any("stand-in" in f.message for f in report.findings)


def test_rcp_normalisation_is_reported(tmp_path):
  org = make_package(tmp_path, "resnet", runs=[{"epochs": e} for e in (34, 34, 35, 34, 35)])
  report = check_path(org)
  assert report.accepted
  assert report.dirs[0].rcp_scaling_factor == pytest.approx(1.0194, abs=1e-4)
  assert not (org / "results" / "tinybox_green" / "resnet" / "scaling.json").exists()   # checked on a copy
  assert any("Results scaling set to normalization factor" in f.message for f in report.dirs[0].findings)


def test_bad_systems_status_reports_the_reasons_it_hides(tmp_path):
  org = make_package(tmp_path, "bert")
  sj = org / "systems" / "tinybox_green.json"
  data = json.loads(sj.read_text())
  data["status"] = "onprem"
  del data["cooling"]
  sj.write_text(json.dumps(data))
  report = check_path(org)
  assert not report.accepted
  msgs = [f.message for f in report.failures()]
  assert any("non valid value: onprem" in m for m in msgs)
  assert any("Missing field cooling (hidden behind the status error)" in m for m in msgs)


def test_mixed_rulesets_in_one_tree(tmp_path):
  org = make_package(tmp_path, "resnet")
  make_package(tmp_path, "bert")
  report = check_path(org)
  assert report.accepted and report.rulesets == ["4.0.0", "5.0.0"]
  assert any(f.check == "ruleset" and f.level == WARN for f in report.findings)
  assert {(d.benchmark, d.ruleset) for d in report.dirs} == {("resnet", "4.0.0"), ("bert", "5.0.0")}


def test_score_equals_result_summarizer_with_a_dropped_run_and_scaling(tmp_path):
  org = make_package(tmp_path, "bert", runs=[{"run_minutes": 200 + 3 * i} for i in range(9)] + [{"run_stop": False}])
  (org / "results" / "tinybox_green" / "bert" / "scaling.json").write_text('{"scaling_factor": 1.05}')
  (ours,) = score_path(org)
  rows = mlperf_tools.result_summarizer(tmp_path, "tinycorp", "5.0.0")
  (row,) = rows
  assert ours.dropped == 1 and ours.score_minutes == pytest.approx(row["bert"], abs=0.01)
  assert ours.score_minutes == pytest.approx(1.05 * sum(200 + 3 * i for i in range(1, 9)) / 8, abs=1e-6)
