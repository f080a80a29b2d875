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
import os
import shlex
import shutil
import tempfile
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.common.rules import (INIT_LIMIT_MIN, NEAR_LIMIT, RANDOM_BITS, RESULT_GLOB, RESULT_NAME, SAMPLES_SLACK,
                                     SEED_BITS, SEED_EVIDENCE, beyond_rules, max_dropped_runs, required_runs, result_name)
from benchmarks.registry import BENCHMARKS
from tooling.common import mlperf_tools
from tooling.common import results_tree as T
from tooling.common.errors import ToolError
from tooling.common.mllog_reader import MLLog
from tooling.common.safe_read import MAX_LOG_BYTES, shown
from tooling.verdict.score import score_bench_dir, time_to_train_minutes
from tooling.common.submission_tree import BenchDir, Target, discover, read_scaling

FAIL, WARN, INFO = "fail", "warn", "info"
COUNT_FIELDS = ("number_of_nodes", "host_processors_per_node", "accelerators_per_node")


@dataclass
class Finding:
  level: str              # fail | warn | info
  check: str              # which check: compliance, init-time, run-stop, seed, duplicate-key, result-files, ...
  message: str
  file: str | None = None
  line: int | None = None

  def where(self) -> str:
    if not self.file: return ""
    return f"{self.file}:{self.line}" if self.line else self.file


@dataclass
class FileReport:
  path: str
  name: str
  benchmark: str
  ruleset: str
  division: str
  compliant: bool = False          # the checker's SUCCESS and none of our per-file failures
  checker_success: bool = False
  first_failure: Finding | None = None
  minutes: float | None = None     # time to train (result_summarizer's definition)
  init_minutes: float | None = None
  init_margin_minutes: float | None = None
  seeds: list[int] = field(default_factory=list)
  findings: list[Finding] = field(default_factory=list)

  @property
  def verdict(self) -> str: return "compliant" if self.compliant else "NON-COMPLIANT"


@dataclass
class DirReport:
  path: str
  rel: str
  system: str
  benchmark: str
  ruleset: str
  division: str
  files: list[FileReport] = field(default_factory=list)
  findings: list[Finding] = field(default_factory=list)
  noncompliant: int = 0
  summary: str = ""
  rcp_scaling_factor: float | None = None   # what package_checker's RCP check writes into scaling.json
  score_minutes: float | None = None        # `tinyperf score`'s olympic mean (result_summarizer's number)
  score_note: str = ""
  score_scaling_factor: float = 1.0         # the directory's own scaling.json factor, in score_minutes
  accepted: bool = False


@dataclass
class Report:
  path: str
  kind: str                                  # file | results | submission
  org: str | None                            # the submitter directory's name (a results tree's: not a submitter's)
  werror: bool
  strict: bool = False                       # what tinyperf adds beyond MLCommons' tools fails (rules.beyond_rules)
  results_tree: bool = False                 # the --results tree of `tinyperf run` (submission_tree.Target.results_tree)
  files: list[FileReport] = field(default_factory=list)    # kind == file
  dirs: list[DirReport] = field(default_factory=list)
  findings: list[Finding] = field(default_factory=list)    # package level: systems JSONs, package_checker, cross-checks
  rulesets: list[str] = field(default_factory=list)
  accepted: bool = False

  @property
  def exit_code(self) -> int: return 0 if self.accepted else 1


  def failures(self) -> list[Finding]:
    """The failures that decide the verdict. In a directory, failed runs count through its olympic finding (one
    non-compliant run is tolerated); their own findings stay in the file reports."""
    if self.kind == "file": return [x for fr in self.files for x in fr.findings if x.level == FAIL]
    return [f for f in self.findings + [x for d in self.dirs for x in d.findings] if f.level == FAIL]

  def to_dict(self) -> dict:
    d = asdict(self)
    d["exit_code"] = self.exit_code
    for fr, fd in zip(self.files, d["files"]): fd["verdict"] = fr.verdict
    for dr, dd in zip(self.dirs, d["dirs"]):
      for fr, fd in zip(dr.files, dd["files"]): fd["verdict"] = fr.verdict
    return d

  def render(self) -> str: return render(self)


# ---------------------------------------------------------------------------------------------------------------------
# per file

def _collision_probability(n: int, bits: int) -> float:
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


def _division(d: str | None) -> str: return d if d in INIT_LIMIT_MIN else "closed"


def _init_check(log: MLLog, fr: FileReport) -> None:
  div = _division(fr.division)
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
  if _division(fr.division) != "closed": return
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
  closed = _division(fr.division) == "closed"
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
                                 f"{_collision_probability(runs, RANDOM_BITS):.2%}, and a repeated seed fails the seed "
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


# ---------------------------------------------------------------------------------------------------------------------
# per results/<system>/<benchmark> directory

def _naming_check(bd: BenchDir, dr: DirReport, strict: bool = False) -> None:
  """package_checker counts the result_*.txt files and nothing else: the count is its rule (a failure); how they are
  numbered is ours (`tinyperf run` writes result_0..N-1), and a reviewer may only ask about a gap or an odd name."""
  required = required_runs(bd.benchmark)
  level = beyond_rules(strict)
  named, counted = {}, 0
  for log in bd.logs:
    m = RESULT_NAME.match(log.path.name)
    counted += bool(RESULT_GLOB.match(log.path.name))
    if m: named[int(m.group(1))] = log
    elif RESULT_GLOB.match(log.path.name):
      dr.findings.append(Finding(level, "result-files", f"{log.path.name}: the index is not a plain number "
                                 f"(result_<i>.txt, i = 0, 1, ...); package_checker counts it, a reviewer may ask what "
                                 f"it is", log.path.name))
    else:
      dr.findings.append(Finding(level, "result-files", f"{log.path.name} is a result log not named "
                                 f"result_<i>.txt (i = 0, 1, ...): package_checker and result_summarizer do not count "
                                 f"it, and a reviewer may ask why a run's log is left out", log.path.name))
  if required is not None and counted != required:
    dr.findings.append(Finding(FAIL, "result-files", f"{counted} result_*.txt files; a {bd.benchmark} package "
                               f"needs exactly {required} (package_checker's rule)", dr.rel))
  if named:
    first = min(named)
    missing = [i for i in range(first, max(named) + 1) if i not in named]
    if missing:
      dr.findings.append(Finding(level, "result-files", "result files are not numbered contiguously: missing "
                                 + ", ".join(result_name(i) for i in missing) + " (package_checker only counts the "
                                 "files; a reviewer may ask whether a run was left out)", dr.rel))
  for p in bd.other_files:
    dr.findings.append(Finding(WARN, "result-files", f"{p.name}: unknown entry in a results directory "
                               f"(package_checker warns); keep only result_<i>.txt, scaling.json, package_checker_params "
                               f"and power/", dr.rel))


def _dataset_package_check(dr: DirReport) -> None:
  """One line for the directory, instead of one per run, where runs warn about the same count (tinycorp's ten BERT
  logs all state eval_samples 10080)."""
  same = defaultdict(list)
  for fr in dr.files:
    for f in fr.findings:
      if f.check == "dataset" and f.level == WARN: same[f.message.split(":")[0]].append((fr, f))
  for head, found in same.items():
    if len(found) < 2: continue
    for fr, f in found: fr.findings.remove(f)
    names = [fr.name for fr, _ in found]
    dr.findings.append(Finding(WARN, "dataset", f"{head} in {len(found)} of {len(dr.files)} runs ({', '.join(names[:3])}"
                               f"{', ...' if len(names) > 3 else ''}):{found[0][1].message.split(':', 1)[1]}", dr.rel))


def _seed_package_check(dr: DirReport) -> None:
  closed = _division(dr.division) == "closed"
  by_seed = defaultdict(list)
  for fr in dr.files:
    for s in fr.seeds: by_seed[s].append(fr.name)
  for s, names in by_seed.items():
    if len(names) > 1:
      dr.findings.append(Finding(FAIL if closed else WARN, "seed", f"seed {s} is logged by {len(names)} runs "
                                 f"({', '.join(names)}): every run needs its own seed (the seed checker rejects a seed "
                                 f"repeated on the same source line)", dr.rel))
  narrow = [(fr, f) for fr in dr.files for f in fr.findings if f.check == "seed-width"]
  if narrow:
    # one line for the directory instead of one per run
    for fr, f in narrow: fr.findings.remove(f)
    runs = len(dr.files)
    dr.findings.append(Finding(WARN, "seed-width", f"{len(narrow)} of {runs} runs log a seed that fits in {RANDOM_BITS} "
                               f"bits (bash $RANDOM's range 0..32767: "
                               f"{', '.join(f'{fr.name} {fr.seeds[0]}' for fr, _ in narrow[:3])}"
                               f"{', ...' if len(narrow) > 3 else ''}): {runs} such runs share a seed with probability "
                               f"{_collision_probability(runs, RANDOM_BITS):.2%}, and a repeated seed fails the seed "
                               f"checker. Draw {SEED_BITS}-bit seeds (SEED_BITS={SEED_BITS})", dr.rel))
  firsts = [fr.seeds[0] for fr in dr.files if fr.seeds and fr.seeds[0] >= 0]
  if len(firsts) >= 2:
    width = max(max(firsts).bit_length(), 1)
    # N seeds drawn from SEED_BITS bits all fit in `width` bits with probability 2^-(N*(SEED_BITS-width))
    if RANDOM_BITS < width < SEED_BITS and len(firsts) * (SEED_BITS - width) >= SEED_EVIDENCE:
      dr.findings.append(Finding(WARN, "seed-width", f"all {len(firsts)} seeds fit in {width} bits (largest {max(firsts)}): "
                                 f"they look drawn from a {width}-bit range, where {len(firsts)} runs collide with "
                                 f"probability {_collision_probability(len(firsts), width):.3%}. Draw {SEED_BITS}-bit "
                                 f"seeds", dr.rel))


TRAINING_STARTED = ("epoch_start", "block_start", "eval_start", "eval_accuracy", "run_stop")


def hyperparameters(log: MLLog, keys: frozenset[str]) -> dict[str, object]:
  """key -> first value of each MLPerf hyperparameter (`keys`: mlperf_tools.hyperparameter_keys) logged before the first
  epoch/block/eval: what a run was configured with. Vendor keys (s_optimizer) are a submitter's own notes, and keys
  logged later (BERT's train_samples: samples to converge) are results."""
  out = {}
  for e in log.events:
    if e.key in TRAINING_STARTED: break
    if e.key in keys and e.value is not None and e.key not in out: out[e.key] = e.value
  return out


def _same(a, b) -> bool: return a == b or json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN == NaN


def _hparam_check(bd: BenchDir, dr: DirReport, strict: bool = False) -> None:
  """One set, one configuration: olympic scoring averages runs of the same settings. No MLCommons tool compares runs,
  except that package_checker's RCP check cannot pass a closed set of two batch sizes (it crashes on one): that is a
  failure, any other disagreement a question for the reviewer."""
  if len(bd.logs) < 2: return
  keys = mlperf_tools.hyperparameter_keys(bd.benchmark, bd.ruleset)
  hp = [(log.path.name, hyperparameters(log, keys)) for log in bd.logs]
  for key in dict.fromkeys(k for _, h in hp for k in h):
    base = next((name, h[key]) for name, h in hp if key in h)
    for name, h in hp:
      if key not in h:
        msg = f"{key} is logged by {base[0]} ({base[1]!r}) but not by {name}"
      elif not _same(h[key], base[1]):
        msg = f"{key} is {base[1]!r} in {base[0]} but {h[key]!r} in {name}"
      else: continue
      rcp = key == "global_batch_size" and _division(bd.division) == "closed"
      dr.findings.append(Finding(FAIL if rcp else beyond_rules(strict), "hyperparameters",
                                 f"runs of one set disagree on an MLPerf hyperparameter: {msg}. "
                                 + ("package_checker's RCP check cannot judge a closed set of two batch sizes; "
                                    if rcp else "A reviewer may ask why: olympic scoring averages runs of one "
                                    "configuration; ")
                                 + "rerun the odd run(s) with the set's settings or move them to their own set", dr.rel))
      break   # one finding per key names the first disagreement


def _olympic(dr: DirReport) -> None:
  n, bad = len(dr.files), [f for f in dr.files if not f.compliant]
  dr.noncompliant = len(bad)
  tolerated = max_dropped_runs(dr.benchmark)
  if len(bad) > tolerated:
    dr.findings.append(Finding(FAIL, "olympic", f"{len(bad)} of {n} runs are non-compliant "
                               f"({', '.join(f.name for f in bad)}); olympic scoring tolerates {tolerated}", dr.rel))


def _summary(dr: DirReport) -> str:
  """The directory's one line, once all its findings are in: a tolerated run reads as accepted only when nothing else
  fails the set."""
  n, bad = len(dr.files), [f.name for f in dr.files if not f.compliant]
  others = sum(f.level == FAIL and f.check != "olympic" for f in dr.findings)
  if not bad: return f"{n} of {n} compliant"
  if len(bad) > max_dropped_runs(dr.benchmark): return f"{n - len(bad)} of {n} compliant: rejected"
  line = (f"{n - len(bad)} of {n} compliant: {'tolerated by' if others else 'accepted under'} olympic scoring "
          f"({', '.join(bad)} counts as the slowest run)")
  return line + (f"; {others} set-level failure{'s' if others != 1 else ''} above" if others else "")


def _submitter(t: Target) -> str | None:
  """The submitter name the tree's logs and systems JSONs are compared with: a submitter directory's name; in the
  --results tree of `tinyperf run`, whose name is the user's choice, the name its logs agree on (the most common
  submission_org; None when none is logged)."""
  if not t.results_tree: return t.org
  orgs = Counter(e.value for bd in t.bench_dirs for log in bd.logs if (e := log.first("submission_org")) is not None)
  return orgs.most_common(1)[0][0] if orgs else None


def _cross_checks(t: Target, bd: BenchDir, dr: DirReport, strict: bool = False) -> None:
  """The log <-> directory <-> systems JSON names: no official tool compares them, a reviewer may ask (rules.beyond_rules)."""
  level = beyond_rules(strict)
  if bd.name != bd.benchmark:
    dr.findings.append(Finding(FAIL, "cross-check", f"directory is named {bd.name!r} but its logs are "
                               f"{bd.benchmark!r}; package_checker takes the benchmark from the directory name", dr.rel))
  for log in bd.logs:
    if (log.division or "") != bd.division:
      dr.findings.append(Finding(FAIL, "cross-check", f"logs division {log.division!r} but "
                                 f"{bd.logs[0].path.name} logs {bd.division!r}: one directory, one division",
                                 log.path.name))
  if not t.org_dir: return
  org = _submitter(t)
  sysjson = t.systems.get(bd.system)
  if sysjson is None:
    dr.findings.append(Finding(FAIL, "cross-check", f"systems/{bd.system}.json is missing: package_checker and "
                               f"result_summarizer crash on results/{bd.system} without it", dr.rel))
  for log in bd.logs:
    e = log.first("submission_platform")
    if e is None:
      dr.findings.append(Finding(level, "cross-check", "no submission_platform logged; it should name the system "
                                 f"({bd.system})", log.path.name))
    elif e.value != bd.system:
      dr.findings.append(Finding(level, "cross-check", f"submission_platform is {e.value!r} but the run sits in "
                                 f"results/{bd.system}", log.path.name, e.line))
    e = log.first("submission_org")
    if e is None:
      dr.findings.append(Finding(level, "cross-check", f"no submission_org logged; it should be {org!r}" if org else
                                 "no submission_org logged; `tinyperf run --org NAME` logs the submitter's name",
                                 log.path.name))
    elif e.value != org and t.results_tree:
      dr.findings.append(Finding(level, "cross-check", f"submission_org is {e.value!r} but the other runs of this results "
                                 f"tree log {org!r}: a submission has one submitter, and `tinyperf package --org` packs "
                                 f"every run under that one name (`tinyperf run --org NAME` sets what a run logs)",
                                 log.path.name, e.line))
    elif e.value != org:
      dr.findings.append(Finding(level, "cross-check", f"submission_org is {e.value!r} but the submitter directory is "
                                 f"{org!r} (`tinyperf package --org {shlex.quote(str(e.value))}` packs it under a "
                                 f"directory of that name, as MLCommons expects)", log.path.name, e.line))
    if sysjson is not None and log.division and sysjson.get("division") != log.division:
      e = log.first("submission_division")
      dr.findings.append(Finding(level, "cross-check", f"logs division {log.division!r} but systems/{bd.system}.json says "
                                 f"{sysjson.get('division')!r} (package_checker runs the seed and RCP checks only when "
                                 f"the systems JSON says closed)", log.path.name, e.line if e else None))


# ---------------------------------------------------------------------------------------------------------------------
# systems JSONs and package_checker

def _is_sysdesc(msg: str) -> bool: return "System description" in msg


def _check_systems(t: Target, rulesets: list[str], report: Report) -> None:
  for stem, data in t.systems.items():
    path = t.system_paths[stem]
    name = f"systems/{stem}.json"
    for f in COUNT_FIELDS:
      if f in data:
        try: int(data[f])
        except (TypeError, ValueError, OverflowError):
          report.findings.append(Finding(FAIL, "system-desc", f"{f} is {data[f]!r}, not an integer string; "
                                         f"result_summarizer crashes on it", name))
    sub, org = data.get("submitter"), _submitter(t)
    if sub is not None and org is not None and sub != org:
      report.findings.append(Finding(beyond_rules(report.strict), "cross-check", f"submitter is {sub!r} but the runs' logs say submission_org "
                                     f"{org!r}; one of them names the wrong submitter (`tinyperf run --org NAME` records "
                                     f"the same name in both)" if t.results_tree else
                                     f"submitter is {sub!r} but the submitter directory is {org!r}", name))
    for r in rulesets:
      res = mlperf_tools.system_desc_check(path, r)
      if res.passed:
        report.findings.append(Finding(INFO, "system-desc", f"system_desc_checker {r}: passed", name))
        continue
      reasons = list(res.reasons)
      if any(x.startswith("Field status contains a non valid value") for x in reasons):
        # the checker replaces its reason list on a bad status: ask it again with a valid status to see the rest
        with tempfile.TemporaryDirectory(prefix="tinyperf-sysdesc-") as tmp:
          copy = Path(tmp) / path.name
          copy.write_text(json.dumps(dict(data, status="Available on-premise")))
          hidden = mlperf_tools.system_desc_check(copy, r)
          reasons += [f"{x} (hidden behind the status error)" for x in hidden.reasons]
      for x in reasons or ["system_desc_checker did not report a pass"]:
        report.findings.append(Finding(FAIL, "system-desc", f"system_desc_checker {r}: {x}", name))


def _oversized(d: str, names: list[str]) -> list[str]:
  """Files over the log cap stay out of package_checker's scratch copy: discover() already read every log, so they are
  stray files (a 100 GB console dump), which our unknown-entry finding reports without copying them."""
  paths = [(n, os.path.join(d, n)) for n in names]
  return [n for n, p in paths if os.path.isfile(p) and os.path.getsize(p) > MAX_LOG_BYTES]


def _package_checker(t: Target, dirs: list[tuple[BenchDir, DirReport]], ruleset: str, werror: bool,
                     report: Report) -> None:
  org = t.org or "submitter"
  with tempfile.TemporaryDirectory(prefix="tinyperf-package-") as tmp:
    root = Path(tmp) / org
    (root / T.SYSTEMS).mkdir(parents=True)
    stubbed = []
    if t.kind == "submission":
      for stem, p in t.system_paths.items(): shutil.copy2(p, T.systems_json(root, stem))
    for bd, _ in dirs:
      target = T.systems_json(root, bd.system)
      if bd.system in t.system_paths: shutil.copy2(t.system_paths[bd.system], target)
      elif not target.exists():
        # no systems JSON to copy: package_checker would crash; a stand-in with the logs' division lets its seed and RCP
        # checks run (its system-description verdict is ignored then: it judges the stand-in, not a real file)
        target.write_text(json.dumps({"division": bd.division or "closed", "system_name": bd.system,
                                      "status": "Available on-premise"}))
        stubbed.append(bd.system)
      shutil.copytree(bd.path, T.result_dir(root, bd.system, bd.name), ignore=_oversized)
      params = bd.path.parent / "package_checker_params"
      if params.is_file(): shutil.copy2(params, T.result_dir(root, bd.system, bd.name).parent / params.name)
    try:
      res = mlperf_tools.package_check(Path(tmp), org, ruleset, werror)
    except ToolError as e:
      # a crash is no verdict, but a set our own rules already reject stays rejected whatever the tool does: the
      # RCP checker crashes on a set whose runs disagree on the batch size, which _hparam_check has reported
      if not any(f.level == FAIL for _, d in dirs for f in d.findings): raise
      report.findings.append(Finding(INFO, "package-checker", f"not judged: {str(e).split('. That is')[0]} (the "
                                     f"failures above already reject it)", f"package_checker {ruleset}"))
      return
    for bd, dr in dirs:
      copy = T.result_dir(root, bd.system, bd.name)
      if (copy / "scaling.json").is_file(): dr.rcp_scaling_factor = read_scaling(copy)
  where = f"package_checker {ruleset}"
  failed_before = sum(f.level == FAIL for f in report.findings + [x for _, d in dirs for x in d.findings])
  if stubbed:
    report.findings.append(Finding(INFO, "package-checker", f"no systems JSON for {', '.join(stubbed)} in PATH: "
                                   f"package_checker ran with a stand-in carrying the logs' division", where))
  expected = {f"{org}/{bd.rel}": dr for bd, dr in dirs}
  for name in res.skipped:
    report.findings.append(Finding(FAIL, "package-checker", f"package_checker skipped benchmark {name!r} (not in "
                                   f"ruleset {ruleset}): a vacuous pass", where))
  for d in expected:
    if d not in res.checked_dirs:
      report.findings.append(Finding(FAIL, "package-checker", f"package_checker never ran its checks in {d}", where))
  for d in res.checked_dirs:
    if d not in expected:
      report.findings.append(Finding(WARN, "package-checker", f"package_checker also checked {d}", where))
  for sec, records in res.sections.items():
    dr = expected.get(sec)
    for r in records:
      msg = r.message.strip()
      if _is_sysdesc(msg): continue   # system_desc_checker runs on its own; its reasons are reported per file
      if "Run incomplete or did not converge" in msg or "accepting this under olympic scoring" in msg: continue
      level = {"ERROR": FAIL, "WARNING": WARN}.get(r.level, INFO)
      f = Finding(level, "package-checker", f"package_checker: {msg.splitlines()[0]}"
                  + (f" ({len(msg.splitlines()) - 1} more lines)" if len(msg.splitlines()) > 1 and level != INFO else ""),
                  dr.rel if dr else where)
      (dr.findings if dr else report.findings).append(f)
  # safety net: package_checker did not accept the package but no finding above says why. (Its success line is also
  # missing when only a system description failed; system_desc_checker's own run reports that one.)
  failed_now = sum(f.level == FAIL for f in report.findings + [x for _, d in dirs for x in d.findings])
  sysdesc_only = bool(res.errors) and all(_is_sysdesc(e) for e in res.errors) and not res.skipped
  if failed_now == failed_before and not sysdesc_only and not res.accepted(list(expected)):
    report.findings.append(Finding(FAIL, "package-checker", "package_checker did not accept the package (no "
                                   "'FOUND NO ERRORS, SUCCESS' line); see its output", where))


# ---------------------------------------------------------------------------------------------------------------------

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
    _naming_check(bd, dr, strict)
    _seed_package_check(dr)
    _dataset_package_check(dr)
    _hparam_check(bd, dr, strict)
    _cross_checks(t, bd, dr, strict)
    _olympic(dr)
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
  _check_systems(t, report.rulesets, report)
  for r in report.rulesets:
    _package_checker(t, [(bd, dr) for bd, dr in pairs if bd.ruleset == r], r, werror, report)
  for dr in report.dirs:
    dr.accepted = not any(f.level == FAIL for f in dr.findings)
    dr.summary = _summary(dr)
  report.accepted = all(dr.accepted for dr in report.dirs) and not any(f.level == FAIL for f in report.findings)
  return report


# ---------------------------------------------------------------------------------------------------------------------
# output

def _cut(s: str, n: int) -> str: return s if len(s) <= n else s[:n - 3] + "..."


def _file_table(files: list[FileReport]) -> list[str]:
  head = ("file", "benchmark", "ruleset", "division", "verdict", "first failing rule (line)", "TTT min", "init min (margin)")
  rows = []
  for f in files:
    rule = "-"
    if f.first_failure:
      rule = _cut(f.first_failure.message, 64) + (f" (line {f.first_failure.line})" if f.first_failure.line else "")
    ttt = "-" if f.minutes is None else f"{f.minutes:.2f}"
    init = "-" if f.init_minutes is None else f"{f.init_minutes:.2f} ({f.init_margin_minutes:+.2f})"
    rows.append((shown(f.name), f.benchmark, f.ruleset, f.division or "?", f.verdict, rule, ttt, init))
  widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
  fmt = lambda r: "  " + "  ".join(c.ljust(w) if i not in (6,) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
  return [fmt(head).rstrip()] + [fmt(r).rstrip() for r in rows]


def _finding_lines(findings: list[Finding], indent: str = "  ") -> list[str]:
  out = []
  for f in findings:
    if f.level == INFO and f.check in ("init-time", "system-desc"): continue   # in the table / summarised below
    where = f.where()
    out.append(f"{indent}{f.level.upper():4}  {shown(where) + ': ' if where else ''}{shown(f.message)}")
  return out


def render(report: Report) -> str:
  kind = {"file": "result log", "results": "results directory",
          "submission": "results tree of `tinyperf run`" if report.results_tree else
                        f"submitter directory {report.org!r}"}[report.kind]
  from tooling.common.container import host_path   # a compose service checks /results: name the host's directory
  lines = [f"tinyperf check {shown(host_path(report.path))}  ({shown(kind)}{', --werror' if report.werror else ''})", ""]
  if report.kind == "file":
    lines += _file_table(report.files)
    lines += _finding_lines([x for f in report.files for x in f.findings])
    lines += ["", f"result log: {'ACCEPTED' if report.accepted else 'REJECTED'}"]
    return "\n".join(lines) + "\n"
  for dr in report.dirs:
    lines.append(f"{shown(dr.rel)}: {dr.benchmark}, ruleset {dr.ruleset}, {dr.division or '?'}, {len(dr.files)} runs")
    lines += _file_table(dr.files)
    lines += _finding_lines([x for f in dr.files for x in f.findings] + dr.findings)
    if dr.rcp_scaling_factor is not None:
      f, own = dr.rcp_scaling_factor, dr.score_scaling_factor
      line = f"  INFO  RCP: package_checker writes scaling.json with factor {f:.4f} into the package it checks; "
      if abs(f - own) < 5e-5: line += "the score below includes it (the directory's scaling.json holds it)"
      elif dr.score_minutes is None: line += "result_summarizer multiplies the score by it"
      else:
        own_txt = f"the directory's scaling.json factor {own:.4f}" if own != 1.0 else "no scaling.json"
        line += (f"the score below does not include it ({own_txt}); result_summarizer's score with it is "
                 f"{dr.score_minutes / own * f:.2f} min")
      lines.append(line)
    score = f"score {dr.score_minutes:.2f} min" if dr.score_minutes is not None else (dr.score_note or "no score")
    if not dr.accepted and dr.score_minutes is not None: score += " (result_summarizer's figure; no valid score while rejected)"
    lines += [f"  => {dr.summary}; {score}; directory {'accepted' if dr.accepted else 'REJECTED'}", ""]
  sysinfo = [f for f in report.findings if f.check == "system-desc" and f.level == INFO]
  if sysinfo: lines.append("systems: " + "; ".join(f"{shown(f.file)} {f.message[len('system_desc_checker '):]}" for f in sysinfo))
  lines += _finding_lines(report.findings, indent="")
  n = len(report.failures())
  verdict = "ACCEPTED" if report.accepted else f"REJECTED ({n} failure{'s' if n != 1 else ''})"
  lines += ["", f"check: {verdict}{' (--strict)' if report.strict else ''}"]
  return "\n".join(lines) + "\n"


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
