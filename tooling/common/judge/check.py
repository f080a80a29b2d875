"""The judge: check_path(path, ruleset=None, werror=False, strict=False) -> Report (report.accepted, report.exit_code,
report.to_dict()), what `tinyperf check` prints and `tinyperf run` and `tinyperf package` act on."""
from __future__ import annotations
from pathlib import Path

from tinyperf.benchmarks.common.rules import required_runs
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common.submission_tree import discover
from tinyperf.tooling.common.judge.dir_checks import check_dir, summary
from tinyperf.tooling.common.judge.file_checks import analyse_file
from tinyperf.tooling.common.judge.findings import FAIL, WARN, DirReport, Finding, Report
from tinyperf.tooling.common.judge.score import score_bench_dir
from tinyperf.tooling.common.judge.submission_checks import check_systems, package_checker


def check_path(path: str | Path, ruleset: str | None = None, werror: bool = False, strict: bool = False) -> Report:
  """Check a result log, a results/<system>/<benchmark> directory or a submitter directory. UserError on bad input.
  strict: what tinyperf adds beyond MLCommons' tools and the rules' text fails instead of warning."""
  t = discover(path, ruleset)
  report = Report(str(path), t.kind, t.org, werror, strict, results_tree=t.results_tree)
  if t.kind == "file":
    res = mlperf_tools.compliance_check(t.log.path, t.file_ruleset, werror)
    report.files.append(analyse_file(t.log, res, t.file_ruleset, strict=strict))
    report.rulesets = [t.file_ruleset]
    report.accepted = report.files[0].compliant
    return report

  jobs = [(log.path, bd.ruleset) for bd in t.bench_dirs for log in bd.logs]
  by_path = {path: res for (path, _), res in zip(jobs, mlperf_tools.compliance_check_all(jobs, werror))}
  pairs = []
  for bd in t.bench_dirs:
    dr = DirReport(str(bd.path), bd.rel, bd.system, bd.benchmark, bd.ruleset, bd.division)
    runs = required_runs(bd.benchmark) or len(bd.logs)
    dr.files = [analyse_file(log, by_path[log.path], bd.ruleset, runs, strict) for log in bd.logs]
    check_dir(t, bd, dr, strict)
    # the score uses the checker's verdicts without --werror, as result_summarizer does
    sc = score_bench_dir(bd, None if werror else by_path)
    dr.score_minutes, dr.score_note, dr.score_scaling_factor = sc.score_minutes, sc.reason, sc.scaling_factor
    pairs.append((bd, dr))
    report.dirs.append(dr)
  report.rulesets = sorted({bd.ruleset for bd in t.bench_dirs}, key=mlperf_tools._version_key)
  if len(report.rulesets) > 1:
    per = ", ".join(sorted({f"{bd.benchmark} {bd.ruleset}" for bd in t.bench_dirs}))
    report.findings.append(Finding(WARN, "ruleset", f"benchmarks need different rulesets ({per}); MLCommons takes one "
                                   f"package per round, so split the tree or check it with one --ruleset", t.org))
  check_systems(t, report.rulesets, report)
  for r in report.rulesets:
    package_checker(t, [(bd, dr) for bd, dr in pairs if bd.ruleset == r], r, werror, report)
  for dr in report.dirs:
    dr.accepted = not any(f.level == FAIL for f in dr.findings)
    dr.summary = summary(dr)
  report.accepted = all(dr.accepted for dr in report.dirs) and not any(f.level == FAIL for f in report.findings)
  return report

