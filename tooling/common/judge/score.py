"""Time to train per run and the olympic mean per system and benchmark (`tinyperf score`, check's score, the report).

The numbers must equal mlperf_logging's result_summarizer (a test compares them on the reference submissions), so
this follows its rules, not a cleaner reading of them:
  - a run's minutes are (run_stop - run_start) / 60000, scanning the log in file order and keeping the latest run_start
    and the latest run_stop until both are seen (for a log with one of each: simply stop - start);
  - only files named result_*.txt count;
  - a run that fails the compliance checker, or lacks run_start/run_stop, is dropped and counts as infinitely slow;
  - olympic mean: sort, drop the fastest and the slowest (a dropped run *is* the slowest); more than one dropped run
    means no score;
  - the mean is multiplied by results/<system>/<benchmark>/scaling.json's scaling_factor when that file exists.
"""
from __future__ import annotations
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tinyperf.benchmarks.common.rules import RESULT_GLOB, max_dropped_runs
from tinyperf.tooling.common.mllog_reader import MLLog
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common.submission_tree import BenchDir, discover


def time_to_train_minutes(log: MLLog) -> float | None:
  """result_summarizer's run time: None when run_start or run_stop is missing."""
  start = stop = None
  for e in log.events:
    if e.key == "run_start": start = e.time_ms
    if e.key == "run_stop": stop = e.time_ms
    if start is not None and stop is not None: break
  if start is None or stop is None: return None
  return (stop - start) / 60 / 1000


def olympic_mean(minutes: list[float], dropped: int, max_dropped: int = 1) -> float | None:
  """Mean after dropping the max_dropped fastest and slowest runs; `dropped` runs were already removed as slowest."""
  if dropped > max_dropped: return None
  s = sorted(minutes)
  keep = s[max_dropped:len(s) - (max_dropped - dropped)]
  return sum(keep) / len(keep) if keep else None


@dataclass
class RunScore:
  file: str
  minutes: float | None
  compliant: bool
  counted: bool
  note: str = ""


@dataclass
class BenchmarkScore:
  path: str
  system: str
  benchmark: str
  ruleset: str
  runs: list[RunScore] = field(default_factory=list)
  dropped: int = 0
  olympic_minutes: float | None = None
  scaling_factor: float = 1.0
  score_minutes: float | None = None
  reason: str = ""

  def to_dict(self) -> dict: return asdict(self)


def _first_failure(res: mlperf_tools.ComplianceResult) -> str:
  f = res.failures
  return f[0].rule if f else "compliance_checker did not report SUCCESS"


def score_bench_dir(bd: BenchDir, compliance: dict[Path, mlperf_tools.ComplianceResult] | None = None) -> BenchmarkScore:
  logs = sorted((l for l in bd.logs if RESULT_GLOB.match(l.path.name)), key=lambda l: l.path.name)
  if compliance is None:
    paths = [l.path for l in logs]
    compliance = dict(zip(paths, mlperf_tools.compliance_check_all([(p, bd.ruleset) for p in paths])))
  out = BenchmarkScore(str(bd.path), bd.system, bd.benchmark, bd.ruleset)
  minutes = []
  for log in logs:
    res = compliance[log.path]
    m = time_to_train_minutes(log)
    if not res.success:
      out.runs.append(RunScore(log.path.name, m, False, False, f"dropped (counts as slowest): non-compliant: {_first_failure(res)}"))
    elif m is None:
      out.runs.append(RunScore(log.path.name, None, True, False, "dropped (counts as slowest): no run_start/run_stop"))
    else:
      out.runs.append(RunScore(log.path.name, m, True, True)); minutes.append(m); continue
    out.dropped += 1
  out.scaling_factor = bd.scaling
  limit = max_dropped_runs(bd.benchmark)
  if out.dropped > limit:
    out.reason = (f"no score: {out.dropped} of {len(logs)} runs dropped (non-compliant or not finished); olympic "
                  f"scoring tolerates {limit}")
    return out
  out.olympic_minutes = olympic_mean(minutes, out.dropped, limit)
  if out.olympic_minutes is None:
    out.reason = f"no score: {len(minutes)} counted run(s) leave nothing after dropping the fastest and slowest"
    return out
  out.score_minutes = out.olympic_minutes * out.scaling_factor
  counted = sorted((r for r in out.runs if r.counted), key=lambda r: r.minutes)
  for r in counted[:limit]: r.note = "fastest: not in the mean"
  if out.dropped < limit:
    for r in counted[len(counted) - (limit - out.dropped):]: r.note = "slowest: not in the mean"
  return out


def score_path(path: str | Path, ruleset: str | None = None) -> list[BenchmarkScore]:
  """Score every results/<system>/<benchmark> under PATH (or one log: its minutes, no olympic mean)."""
  t = discover(path, ruleset)
  if t.kind == "file":
    res = mlperf_tools.compliance_check(t.log.path, t.file_ruleset)
    m = time_to_train_minutes(t.log)
    run = RunScore(t.path.name, m, res.success, res.success and m is not None,
                   "" if res.success else f"non-compliant: {_first_failure(res)}")
    bs = BenchmarkScore(str(t.path), t.log.platform or "", t.log.benchmark, t.file_ruleset, [run])
    bs.reason = "one log: no olympic mean"
    return [bs]
  return [score_bench_dir(bd) for bd in t.bench_dirs]

