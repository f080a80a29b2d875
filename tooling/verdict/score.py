"""`tinyperf score PATH`: time to train per run and the olympic mean per system and benchmark, as
tooling/common/judge/score.py computes them (result_summarizer's rules)."""
from __future__ import annotations
import argparse
import json
from pathlib import Path

from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common.judge.score import BenchmarkScore, score_path
from tinyperf.tooling.common.safe_read import shown


def _fmt(x: float | None) -> str: return "-" if x is None else f"{x:.2f}"


def render(scores: list[BenchmarkScore]) -> str:
  lines = []
  for s in scores:
    lines.append(f"{shown(s.path)}  ({s.benchmark}, system {shown(s.system) or '?'}, ruleset {s.ruleset})")
    w = max([len(shown(r.file)) for r in s.runs] + [4])
    lines.append(f"  {'file':<{w}}  {'minutes':>8}  note")
    for r in s.runs:
      lines.append(f"  {shown(r.file):<{w}}  {_fmt(r.minutes):>8}  {shown(r.note)}".rstrip())
    if s.olympic_minutes is not None:
      scaling = f" x scaling.json {s.scaling_factor:.4f}" if s.scaling_factor != 1.0 else " (no scaling.json)"
      lines.append(f"  olympic mean {s.olympic_minutes:.2f} min{scaling} -> score {s.score_minutes:.2f} min")
    if s.reason: lines.append(f"  {s.reason}")
    lines.append("")
  return "\n".join(lines).rstrip() + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
  p.epilog = ("exit status: 0 every benchmark has a score (or the one log finished compliant), 1 otherwise, "
              "2 bad input or usage.")
  p.add_argument("path", metavar="PATH", type=Path, nargs="?",
                 help="a result log, a results/<system>/<benchmark> directory, a submitter directory or `tinyperf run`'s "
                      "--results directory (default: ./out, or the one results directory in it, e.g. "
                      "./smoke.sh's out/smoke)")
  p.add_argument("--ruleset", help="override the ruleset (default per benchmark: resnet 4.0.0, bert 5.0.0)")
  p.add_argument("--json", action="store_true", help="print the scores as JSON")


def main(args: argparse.Namespace) -> int:
  scores = score_path(args.path or T.default_root(), args.ruleset)
  if args.json: print(json.dumps([s.to_dict() for s in scores], indent=2))
  else: print(render(scores), end="")
  single = len(scores) == 1 and len(scores[0].runs) == 1 and scores[0].reason.startswith("one log")
  if single: return 0 if scores[0].runs[0].counted else 1
  return 0 if all(s.score_minutes is not None for s in scores) else 1
