"""`tinyperf check PATH`: the real MLCommons checkers, plus the traps they miss.

PATH is one result log, a results/<system>/<benchmark> directory, or a submitter directory <org>/{systems,results}.
Per file: compliance_checker (ruleset from the log's submission_benchmark: resnet 4.0.0, bert 5.0.0). Per directory:
package_checker (on a scratch copy: it writes scaling.json) with its seed and RCP checks, and system_desc_checker.
Verdicts come from the tools' parsed output, never their exit codes. On top (see docs/check.md): init time and its
margin, run_stop status, a closed log's dataset sizes, seeds (present, unique, wide enough), result file names and
count, keys logged twice, and for a submitter tree the log <-> directory <-> systems JSON cross-checks.

Python API: tinyperf.tooling.common.judge.check.check_path.
"""
from __future__ import annotations
import argparse
import json
from pathlib import Path

from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common.judge.check import check_path


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
