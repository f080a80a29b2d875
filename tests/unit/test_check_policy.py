"""The verdict policy (docs/check.md, "Verdict policy"; benchmarks/common/rules.py beyond_rules): on the shapes of
published results that MLCommons' package_checker passed and review accepted, `tinyperf check` gives the verdict of
package_checker and the score of result_summarizer, both run here for real on a copy of the same tree; what tinyperf adds
beyond them warns, and fails only under --strict."""
from __future__ import annotations
import json
import shutil
from pathlib import Path

import pytest

from mllog_builder import make_package, relabel_log, write_log
from tinyperf.tooling.cli import main as cli
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common.judge.check import check_path
from tinyperf.tooling.common.judge.findings import FAIL, WARN

BENCH = ("results", "tinybox_green", "resnet")


def mlcommons(org: Path, tmp_path: Path, ruleset: str = "4.0.0") -> tuple[bool, float | None, float | None]:
  """(package_checker accepts, result_summarizer's score before package_checker ran, after it: with its scaling.json),
  each on a scratch copy, as MLCommons runs them."""
  work = tmp_path / "mlcommons"
  shutil.rmtree(work, ignore_errors=True)
  shutil.copytree(org, work / org.name)
  score = mlperf_tools.result_summarizer(work, org.name, ruleset)[0]["resnet"]
  res = mlperf_tools.package_check(work, org.name, ruleset)
  after = mlperf_tools.result_summarizer(work, org.name, ruleset)[0]["resnet"]
  return res.success_line and not res.errors and bool(res.checked_dirs), score, after


def agrees(org: Path, tmp_path: Path):
  report = check_path(org)
  accepted, score, _ = mlcommons(org, tmp_path)
  (d,) = report.dirs
  assert report.accepted == accepted, [f.message for f in report.failures()]
  assert d.score_minutes == pytest.approx(score, abs=1e-6)
  return report


def edit_events(path: Path, edit) -> Path: return relabel_log(path, path, edit)


def levels(report, check):
  return [f.level for d in report.dirs for f in d.findings + [x for fr in d.files for x in fr.findings]
          if f.check == check]


def test_result_files_numbered_from_1_are_legal(tmp_path):
  org = make_package(tmp_path, "resnet", names=[f"result_{i}.txt" for i in range(1, 6)])
  report = agrees(org, tmp_path)
  assert report.accepted and levels(report, "result-files") == []
  assert check_path(org, strict=True).accepted       # nothing is missing: no question for a reviewer either


@pytest.mark.parametrize("counts", [(49999,), (50016,), (49999, 50016)])
def test_closed_resnet_eval_samples_near_50000_warns_with_the_right_words(tmp_path, counts):
  org = make_package(tmp_path, "resnet")
  for i, n in enumerate(counts):
    edit_events(org.joinpath(*BENCH, f"result_{i}.txt"), lambda e, n=n: e.update(value=n) if e["key"] == "eval_samples" else None)
  report = agrees(org, tmp_path)
  assert report.accepted and levels(report, "dataset") == [WARN] * len(counts)
  words = " ".join(f.message for d in report.dirs for fr in d.files for f in fr.findings if f.check == "dataset")
  if 49999 in counts: assert "49999: 1 fewer than" in words
  if 50016 in counts: assert "50016: 16 more than" in words
  assert "only part of the data" not in words and "rejects" not in words
  strict = check_path(org, strict=True)   # each such run fails: one is the failed run olympic scoring tolerates
  assert levels(strict, "dataset") == [FAIL] * len(counts) and strict.dirs[0].noncompliant == len(counts)
  assert strict.accepted == (len(counts) == 1)


def test_the_same_count_in_every_run_is_one_directory_line(tmp_path):
  org = make_package(tmp_path, "resnet")
  for p in org.joinpath(*BENCH).glob("result_*.txt"):
    edit_events(p, lambda e: e.update(value=50016) if e["key"] == "eval_samples" else None)
  report = check_path(org)
  (d,) = report.dirs
  assert report.accepted and [f.level for f in d.findings if f.check == "dataset"] == [WARN]
  assert not [f for fr in d.files for f in fr.findings if f.check == "dataset"]


def vendor_key(org: Path, key: str, values: list) -> None:
  """Log `key` just before run_start in each run, as submitters log their own settings (s_optimizer)."""
  for i, v in enumerate(values):
    p = org.joinpath(*BENCH, f"result_{i}.txt")
    lines = p.read_text().splitlines()
    at = next(j for j, l in enumerate(lines) if '"key": "run_start"' in l)
    t = json.loads(lines[at].split(":::MLLOG ", 1)[1])["time_ms"]
    ev = {"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": key, "value": v,
          "metadata": {"file": "train.py", "lineno": 1}}
    lines.insert(at, ":::MLLOG " + json.dumps(ev))
    p.write_text("\n".join(lines) + "\n")


def test_a_vendor_key_that_differs_between_runs_is_no_hyperparameter(tmp_path):
  org = make_package(tmp_path, "resnet")
  vendor_key(org, "s_optimizer", ["lars", "LARS", "lars", "lars-fused", "lars"])
  report = agrees(org, tmp_path)
  assert report.accepted and levels(report, "hyperparameters") == []
  assert check_path(org, strict=True).accepted


def test_an_mlperf_hyperparameter_that_differs_between_runs_warns_and_fails_under_strict(tmp_path):
  org = make_package(tmp_path, "resnet")
  edit_events(org.joinpath(*BENCH, "result_3.txt"),
              lambda e: e.update(value=7.0) if e["key"] == "lars_opt_base_learning_rate" else None)
  report = agrees(org, tmp_path)
  assert report.accepted and levels(report, "hyperparameters") == [WARN]
  (w,) = [f for f in report.dirs[0].findings if f.check == "hyperparameters"]
  assert all(f in w.message for f in ("lars_opt_base_learning_rate", "7.2", "result_0.txt", "7.0", "result_3.txt")), w
  strict = check_path(org, strict=True)
  assert not strict.accepted and [f.check for f in strict.failures()] == ["hyperparameters"]


def test_a_tree_in_a_folder_named_with_a_dash(capsys, tmp_path):
  org = make_package(tmp_path, "resnet", org="-tiny")
  report = agrees(org, tmp_path)
  assert report.accepted and not [f for f in report.findings if f.check == "package-checker" and f.level != "info"]
  assert cli(["check", str(org)]) == 0
  assert capsys.readouterr().out.rstrip().endswith("check: ACCEPTED")


def test_run_stop_before_run_start_is_a_failed_run(tmp_path):
  log = write_log(tmp_path / "result_0.txt", "resnet")
  start = next(e["time_ms"] for e in map(lambda l: json.loads(l.split(":::MLLOG ", 1)[1]), log.read_text().splitlines())
               if e["key"] == "run_start")
  edit_events(log, lambda e: e.update(time_ms=start - 60_000) if e["key"] == "run_stop" else None)
  r = check_path(log)
  (f,) = r.files
  assert f.checker_success and not f.compliant and not r.accepted      # the compliance checker does not notice
  assert f.first_failure.check == "clock" and f.minutes == pytest.approx(-1.0)
  # in a set it is the one failed run olympic scoring tolerates; the score stays result_summarizer's
  org = make_package(tmp_path / "set", "resnet")
  p = org.joinpath(*BENCH, "result_2.txt")
  start = next(e["time_ms"] for e in map(lambda l: json.loads(l.split(":::MLLOG ", 1)[1]), p.read_text().splitlines())
               if e["key"] == "run_start")
  edit_events(p, lambda e: e.update(time_ms=start - 60_000) if e["key"] == "run_stop" else None)
  report = agrees(org, tmp_path)
  assert report.dirs[0].noncompliant == 1 and report.dirs[0].summary.startswith("4 of 5 compliant")


def test_time_going_back_inside_a_run_warns(tmp_path):
  log = write_log(tmp_path / "result_0.txt", "resnet")
  seen = []
  def back(e):
    if e["key"] == "eval_accuracy" and not seen: seen.append(e); e["time_ms"] -= 10 * 60_000
  edit_events(log, back)
  r = check_path(log)
  (f,) = r.files
  assert r.accepted and [x.level for x in f.findings if x.check == "clock"] == [WARN]


def test_cross_checks_warn_and_fail_under_strict(tmp_path):
  org = make_package(tmp_path, "resnet", runs=[{}, {}, {"platform": "tinybox_red"}])
  report = agrees(org, tmp_path)
  assert report.accepted and levels(report, "cross-check") == [WARN]
  strict = check_path(org, strict=True)
  assert not strict.accepted and [f.check for f in strict.failures()] == ["cross-check"]


def test_control_characters_in_names_cannot_forge_report_lines(capsys, tmp_path):
  org = make_package(tmp_path, "resnet")
  bench = org.joinpath(*BENCH)
  (bench / "result_4.txt").rename(bench / "result_4\nFAIL  forged: REJECTED\r.txt")
  (bench / "notes\ncheck: ACCEPTED").write_text("hi")
  code = cli(["check", str(org)])
  out = capsys.readouterr().out
  lines = out.rstrip("\n").split("\n")
  assert "\r" not in out and not any(l.startswith(("FAIL  forged", "check: ACCEPTED")) for l in lines[:-1])
  assert [l for l in lines if l.startswith("check: ")] == [lines[-1]]
  assert "result_4\\nFAIL  forged: REJECTED\\r.txt" in out and "notes\\ncheck: ACCEPTED" in out
  assert cli(["score", str(org)]) == 0
  out = capsys.readouterr().out
  assert "result_4\\nFAIL  forged: REJECTED\\r.txt" in out and "\r" not in out and not any(
    l.startswith("FAIL  forged") for l in out.split("\n"))
  assert code == check_path(org).exit_code
  cli(["check", "--json", str(org)])
  data = json.loads(capsys.readouterr().out)      # JSON keeps the real name
  assert "result_4\nFAIL  forged: REJECTED\r.txt" in [f["name"] for f in data["dirs"][0]["files"]]


def test_the_scaling_line_gives_the_score_result_summarizer_gives_after_package_checker(capsys, tmp_path):
  org = make_package(tmp_path, "resnet", runs=[{"epochs": e} for e in (34, 34, 35, 34, 35)])
  report = check_path(org)
  (d,) = report.dirs
  accepted, before, after = mlcommons(org, tmp_path)
  assert accepted and d.rcp_scaling_factor > 1 and d.score_minutes == pytest.approx(before, abs=1e-6)
  (line,) = [l for l in report.render().splitlines() if "RCP: package_checker writes scaling.json" in l]
  assert f"{after:.2f} min" in line and after != pytest.approx(before)     # the score once scaling.json is there
  # once scaling.json is in the tree, the printed score includes it
  shutil.copy2(tmp_path / "mlcommons" / org.name / Path(*BENCH) / "scaling.json", org.joinpath(*BENCH, "scaling.json"))
  report = check_path(org)
  (line,) = [l for l in report.render().splitlines() if "RCP: package_checker writes scaling.json" in l]
  assert report.dirs[0].score_minutes == pytest.approx(after, abs=1e-6)
