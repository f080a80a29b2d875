"""`tinyperf check PATH`: the real MLCommons checkers, plus the traps they miss.

PATH is one result log, a results/<system>/<benchmark> directory, or a submitter directory <org>/{systems,results}.
Per file: compliance_checker (ruleset from the log's submission_benchmark: resnet 4.0.0, bert 5.0.0). Per directory:
package_checker (on a scratch copy: it writes scaling.json) with its seed and RCP checks, and system_desc_checker.
Verdicts come from the tools' parsed output, never their exit codes. On top (see docs/check.md): init time and its
margin, run_stop status, a closed log's dataset sizes, seeds (present, unique, wide enough), result file names and
count, keys logged twice, and for a submitter tree the log <-> directory <-> systems JSON cross-checks.

Python API: check_path(path, ruleset=None, werror=False, strict=False) -> Report (report.accepted, report.exit_code, report.to_dict()).
"""
from __future__ import annotations
import argparse
import json
from pathlib import Path

from benchmarks.common.rules import required_runs
from tooling.common import mlperf_tools
from tooling.common import results_tree as T
from tooling.common.submission_tree import discover
from tooling.verdict.dir_checks import check_dir, summary
from tooling.verdict.file_checks import analyse_file
from tooling.verdict.findings import FAIL, WARN, DirReport, Finding, Report
from tooling.verdict.score import score_bench_dir
from tooling.verdict.submission_checks import check_systems, package_checker


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


def add_arguments(p: argparse.ArgumentParser) -> None:
  p.epilog = "exit status: 0 accepted, 1 rejected, 2 bad input or usage. See docs/check.md."
  p.add_argument("path", metavar="PATH", type=Path, nargs="?",
                 help="a result log, a results/<system>/<benchmark> directory, a submitter directory or `tinyperf run`'s "
                      "--results directory (default: ./out, or the one results directory in it, e.g. "
                      "./smoke.sh's out/smoke)")
  p.add_argument("--ruleset", help="check against this ruleset instead of the benchmark's (resnet 4.0.0, bert 5.0.0)")
  p.add_argument("--werror", action="store_true", help="keys logged twice with identical values fail instead of warn")
  p.add_argument("--strict", action="store_true", help="what tinyperf checks beyond MLCommons' tools and the rules' text "
                 "(result file numbering, dataset counts near the size, hyperparameters that differ between runs) "
                 "fails instead of warning")
  p.add_argument("--json", action="store_true", help="print the report as JSON")


def main(args: argparse.Namespace) -> int:
  report = check_path(args.path or T.default_root(), args.ruleset, args.werror, args.strict)
  print(json.dumps(report.to_dict(), indent=2) if args.json else report.render(), end="\n" if args.json else "")
  return report.exit_code
