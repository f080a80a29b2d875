"""The checks of one result log beyond compliance_checker's (whose verdict it takes from the parsed output): init time
and its margin, run_stop status, the clock, a closed log's dataset sizes, seeds."""
from __future__ import annotations

from tinyperf.benchmarks.common.rules import (INIT_LIMIT_MIN, NEAR_LIMIT, RANDOM_BITS, SAMPLES_SLACK, SEED_BITS,
                                     beyond_rules, required_runs)
from tinyperf.benchmarks.registry import BENCHMARKS
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common.mllog_reader import MLLog
from tinyperf.tooling.common.judge.findings import FAIL, INFO, WARN, FileReport, Finding
from tinyperf.tooling.common.judge.score import time_to_train_minutes


def collision_probability(n: int, bits: int) -> float:
  p_unique = 1.0
  for i in range(n): p_unique *= max(0.0, 1 - i / 2 ** bits)
  return 1 - p_unique


def _line_for(msg: mlperf_tools.CheckerMessage, log: MLLog) -> int | None:
  """Map a checker message to a file line (the checker counts MLLOG lines from 0 and skips other lines)."""
  if msg.checker_line is not None:
    e = log.by_index(msg.checker_line)
    return e.line if e else None
  if msg.text.startswith("Failed executing"):
    lines = msg.text.splitlines()
    for i, l in enumerate(lines):
      if l.startswith("triggered by line") and i + 1 < len(lines):
        e = log.by_text(lines[i + 1])
        return e.line if e else None
    return None
  occ = log.all(msg.key) if msg.key else []
  if msg.duplicate or "with different values" in msg.rule: return occ[1].line if len(occ) > 1 else None
  if msg.rule.startswith("Failed checks for"): return occ[-1].line if occ else None   # the last (best-known) value
  return None


def division_of(d: str | None) -> str: return d if d in INIT_LIMIT_MIN else "closed"


def _init_check(log: MLLog, fr: FileReport) -> None:
  div = division_of(fr.division)
  limit = INIT_LIMIT_MIN[div]
  stop = log.first("init_stop")
  if stop is None:
    fr.findings.append(Finding(FAIL, "init-time", "no init_stop event: the init phase never finished (or its log lines "
                               "were lost), so the init time cannot be checked", fr.name))
    return
  starts = [e for e in log.events[:stop.index] if e.key == "init_start"]
  if not starts:
    fr.findings.append(Finding(FAIL, "init-time", "init_stop has no init_start before it", fr.name, stop.line))
    return
  first = min(starts, key=lambda e: e.time_ms)
  elapsed_ms = stop.time_ms - first.time_ms
  fr.init_minutes = elapsed_ms / 60000
  fr.init_margin_minutes = limit - fr.init_minutes
  div_ev = log.first("submission_division")
  if div_ev is not None and div_ev.index > stop.index:
    fr.findings.append(Finding(FAIL, "init-time", f"submission_division is logged after init_stop (line {stop.line}); "
                               f"the checker's init allowance is 0 minutes until the division is known. Log it before "
                               f"init_start", fr.name, div_ev.line))
  span = f"first init_start line {first.line} to init_stop line {stop.line}"
  if elapsed_ms >= limit * 60000:
    fr.findings.append(Finding(FAIL, "init-time", f"init took {fr.init_minutes:.2f} min ({span}): "
                               f"{-fr.init_margin_minutes:.2f} min over the {limit}-min {div} limit", fr.name, stop.line))
  elif fr.init_margin_minutes < NEAR_LIMIT * limit:
    fr.findings.append(Finding(WARN, "init-time", f"init took {fr.init_minutes:.2f} min: only "
                               f"{fr.init_margin_minutes:.2f} min under the {limit}-min {div} limit", fr.name, stop.line))
  else:
    fr.findings.append(Finding(INFO, "init-time", f"init took {fr.init_minutes:.2f} min ({span}): "
                               f"{fr.init_margin_minutes:.2f} min under the {limit}-min {div} limit", fr.name, stop.line))


def _run_stop_check(log: MLLog, fr: FileReport) -> None:
  stops = log.all("run_stop")
  if not stops:
    fr.findings.append(Finding(FAIL, "run-stop", "no run_stop: the run did not finish (killed, crashed, or it ran out "
                               "of schedule without converging); it counts as a failed run", fr.name))
    return
  status = stops[0].metadata.get("status")
  if status != "success":
    fr.findings.append(Finding(FAIL, "run-stop", f"run_stop status is {status!r}, not 'success': the run did not "
                               f"converge (the compliance checker only requires a status to be present)",
                               fr.name, stops[0].line))


def _clock_check(log: MLLog, fr: FileReport) -> None:
  """A run's time is run_stop - run_start: a stop before its start is a time no clock measured (the rules time the run
  from run_start to run_stop), which result_summarizer would score as negative minutes. Other backward steps of
  time_ms in the run only warn: no tool checks them, but a reviewer may ask how the clock went back."""
  m = time_to_train_minutes(log)
  if m is not None and m < 0:
    stop = log.first("run_stop")
    fr.findings.append(Finding(FAIL, "clock", f"run_stop (line {stop.line}) is {-m:.2f} min before run_start: the log "
                               f"gives a negative time to train, which no run can have (a clock that went back or "
                               f"edited timestamps); it counts as a failed run", fr.name, stop.line))
    return
  start = log.first("run_start")
  if start is None: return
  prev = start
  for e in log.events[start.index + 1:]:
    if e.time_ms < prev.time_ms:
      fr.findings.append(Finding(WARN, "clock", f"time_ms goes back {prev.time_ms - e.time_ms} ms at {e.key} (line "
                                 f"{prev.line} to line {e.line}): no MLCommons tool checks the order, but a reviewer may "
                                 f"ask which clock the run was timed with", fr.name, e.line))
      return
    prev = e


def _dataset_check(log: MLLog, fr: FileReport, strict: bool = False) -> None:
  """A closed log states the whole dataset (its spec's closed_samples); a missing key is the compliance checker's finding.
  Far fewer samples is a run on part of the data (the rules' text: a failure); any other count off the size is a
  question for the reviewer (a warning, a failure under --strict)."""
  if division_of(fr.division) != "closed": return
  for key, (size, what) in (BENCHMARKS[log.benchmark].closed_samples if log.benchmark in BENCHMARKS else {}).items():
    e = log.first(key)
    if e is None: continue
    v = e.value
    number = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")
    if number and v == size: continue
    if not number or v < size * (1 - SAMPLES_SLACK):
      part = ("this one used only part of the data (a shortened or synthetic run)" if number else
              "this log does not say how many it used")
      fr.findings.append(Finding(FAIL, "dataset", f"{key} is {v!r}, not {size}: a closed {log.benchmark} run uses "
                                 f"{what}, and {part}, "
                                 f"which the closed division's rules exclude; the compliance checker does not look at "
                                 f"the value. Rerun on the full dataset, or make the run open (DIVISION=open)",
                                 fr.name, e.line))
      continue
    off = v - size
    fr.findings.append(Finding(beyond_rules(strict), "dataset", f"{key} is {v!r}: {abs(off):g} "
                               f"{'more' if off > 0 else 'fewer'} than {what}. Reviewers accepted such counts, but one "
                               f"may ask " + ("which samples were counted twice or padded in, and whether the padding "
                                              "was scored" if off > 0 else "which samples were left out and why"),
                               fr.name, e.line))


def _seed_check(log: MLLog, fr: FileReport, runs: int) -> None:
  seeds = log.all("seed")
  closed = division_of(fr.division) == "closed"
  if not seeds:
    fr.findings.append(Finding(FAIL if closed else WARN, "seed", "no seed logged; the seed checker rejects a closed "
                               "package with a run that logs none (compliance_checker does not notice)", fr.name))
    return
  line_of = {}
  for e in seeds:
    try:
      v = int(e.value)
      if isinstance(e.value, bool) or (isinstance(e.value, float) and not e.value.is_integer()): raise ValueError
    except (TypeError, ValueError, OverflowError):   # a list, a string, NaN, Infinity
      fr.findings.append(Finding(FAIL, "seed", f"seed {e.value!r} is not an integer value", fr.name, e.line))
      continue
    if v not in fr.seeds: fr.seeds.append(v); line_of[v] = e.line
  for v in fr.seeds:
    if 0 <= v < 2 ** RANDOM_BITS:
      fr.findings.append(Finding(WARN, "seed-width", f"seed {v} fits in {RANDOM_BITS} bits (0..32767, bash $RANDOM's "
                                 f"range): {runs} runs with such seeds share one with probability "
                                 f"{collision_probability(runs, RANDOM_BITS):.2%}, and a repeated seed fails the seed "
                                 f"checker. Draw {SEED_BITS}-bit seeds (SEED_BITS={SEED_BITS})", fr.name, line_of[v]))


def analyse_file(log: MLLog, res: mlperf_tools.ComplianceResult, ruleset: str, runs: int | None = None,
                 strict: bool = False) -> FileReport:
  """Per-file report from the compliance checker's parsed output and our own reading of the log."""
  fr = FileReport(str(log.path), log.path.name, log.benchmark, ruleset, log.division or "",
                  checker_success=res.success)
  for m in res.messages:
    line = _line_for(m, log)
    if m.duplicate:
      n = len(log.all(m.key)) if m.key else 0
      text = (f"{m.key} logged {n} times with identical values; the checker allows one "
              + ("(a failure under --werror)" if res.werror else "(a warning; --werror makes it a failure)"))
      fr.findings.append(Finding(FAIL if res.werror else WARN, "duplicate-key", text, fr.name, line))
    else:
      fr.findings.append(Finding(FAIL, "compliance", m.rule, fr.name, line))
  if not res.success and not any(f.level == FAIL for f in fr.findings):
    fr.findings.append(Finding(FAIL, "compliance", "compliance_checker did not report SUCCESS", fr.name))
  _init_check(log, fr)
  _run_stop_check(log, fr)
  _dataset_check(log, fr, strict)
  _clock_check(log, fr)
  _seed_check(log, fr, runs or required_runs(log.benchmark) or 10)
  fr.minutes = time_to_train_minutes(log)
  fails = [f for f in fr.findings if f.level == FAIL]
  fr.compliant = res.success and not fails
  fr.first_failure = next((f for f in fails if f.check in ("compliance", "duplicate-key")), fails[0] if fails else None)
  return fr
