"""Thin wrappers around the real mlperf_logging tools, run as `python -m mlperf_logging.<tool>` subprocesses.

Verdicts come from the tools' parsed output, never from exit codes (package_checker, system_desc_checker and
result_summarizer exit 0 on failure). Every tool runs in a scratch directory with --log_output pointed into it, so
nothing is written to the caller's working directory. Which rulesets accept a benchmark is read from the installed
package's data (compliance_checker/training_X.Y.Z rule files and benchmark_meta), not from a list kept here.
"""
from __future__ import annotations
import ast
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from tinyperf.benchmarks.common.rules import USAGE
from tinyperf.tooling.common.errors import ToolError, UserError

SEPARATOR = "-" * 30
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_RECORD = re.compile(r"^(%s) - (.*)$" % "|".join(LEVELS))
TOOL_TIMEOUT_S = 600
WORKERS = 2   # checker subprocesses at once (each is single-threaded, ~0.2 s of CPU per log)


# ---------------------------------------------------------------------------------------------------------------------
# package data: rulesets and the benchmarks they accept (runs per benchmark: benchmarks/common/rules.py)

@lru_cache(maxsize=None)
def package_dir() -> Path:
  spec = importlib.util.find_spec("mlperf_logging")
  if spec is None or not spec.submodule_search_locations:
    raise UserError("the mlperf_logging package is not installed in this Python; install the pinned version: "
                    "pip install mlperf-logging==4.1.68")
  return Path(list(spec.submodule_search_locations)[0])


def _version_key(v: str) -> tuple[int, ...]: return tuple(int(x) for x in v.split("."))


@lru_cache(maxsize=None)
def training_rulesets() -> tuple[str, ...]:
  """Every training_X.Y.Z rule directory of the installed compliance checker, oldest first."""
  root = package_dir() / "compliance_checker"
  found = [p.name[len("training_"):] for p in root.iterdir()
           if p.is_dir() and re.fullmatch(r"training_\d+\.\d+\.\d+", p.name) and (p / "common.yaml").is_file()]
  return tuple(sorted(found, key=_version_key))


def _allowed_by_meta(benchmark: str, ruleset: str) -> bool:
  from mlperf_logging import benchmark_meta  # plain dict module, cheap to import
  try:
    return benchmark in benchmark_meta.get_allowed_benchmarks(USAGE, ruleset)
  except ValueError:
    return False


def _listed_in_common(benchmark: str, ruleset: str, division: str) -> bool:
  """Does training_X/<division>_common.yaml's submission_benchmark CHECK name the benchmark?"""
  path = package_dir() / "compliance_checker" / f"training_{ruleset}" / f"{division}_common.yaml"
  if not path.is_file(): return False
  try:
    records = yaml.load(path.read_text(), Loader=yaml.BaseLoader) or []
  except yaml.YAMLError:
    return False
  for rec in records:
    key = rec.get("KEY") if isinstance(rec, dict) else None
    if isinstance(key, dict) and key.get("NAME") == "submission_benchmark":
      check = key.get("CHECK", "")
      check = " ".join(check) if isinstance(check, list) else check
      return re.search(r"""['"]%s['"]""" % re.escape(benchmark), check) is not None
  return False


@lru_cache(maxsize=None)
def accepting_rulesets(benchmark: str, division: str = "closed") -> tuple[str, ...]:
  """Rulesets in which the benchmark really exists: its <division>_<bm>.yaml rule file ships, the division's common
  file accepts the name, and benchmark_meta lists it (package_checker skips benchmarks missing there)."""
  division = division if division in ("closed", "open") else "closed"
  out = []
  for r in training_rulesets():
    rules = package_dir() / "compliance_checker" / f"training_{r}" / f"{division}_{benchmark}.yaml"
    if rules.is_file() and _allowed_by_meta(benchmark, r) and _listed_in_common(benchmark, r, division):
      out.append(r)
  return tuple(out)


@lru_cache(maxsize=None)
def hyperparameter_keys(benchmark: str, ruleset: str) -> frozenset[str]:
  """The MLPerf hyperparameters of a benchmark in a ruleset: the keys its closed rule files (closed_<bm>.yaml, the
  optimizer files it enqueues, closed_<bm>_<opt>.yaml, and closed_common.yaml) require exactly once, submission_* aside.
  Vendor keys (s_optimizer) and per-run facts are not among them."""
  root = package_dir() / "compliance_checker" / f"training_{ruleset}"
  keys = set()
  for path in [root / "closed_common.yaml", root / f"closed_{benchmark}.yaml", *root.glob(f"closed_{benchmark}_*.yaml")]:
    if not path.is_file(): continue
    try: records = yaml.load(path.read_text(), Loader=yaml.BaseLoader) or []
    except yaml.YAMLError: continue
    for rec in records:
      key = rec.get("KEY") if isinstance(rec, dict) else None
      if isinstance(key, dict) and key.get("REQ") == "EXACTLY_ONE" and not str(key.get("NAME", "")).startswith("submission_"):
        keys.add(key["NAME"])
  return frozenset(keys)


def require_ruleset(benchmark: str, division: str, ruleset: str, where: str) -> None:
  """UserError unless the ruleset accepts the benchmark (instead of the checker's crash or silent skip)."""
  ok = accepting_rulesets(benchmark, division)
  if ruleset in ok: return
  if ruleset not in training_rulesets():
    raise UserError(f"{where}: ruleset {ruleset} is not one the installed mlperf_logging knows "
                    f"({', '.join(training_rulesets())}). Rulesets that accept {division} {benchmark}: "
                    f"{', '.join(ok) or 'none'}.")
  raise UserError(f"{where}: ruleset {ruleset} does not accept {division} {benchmark} (the checkers would crash or skip "
                  f"it silently). Rulesets that accept {division} {benchmark}: {', '.join(ok) or 'none'}.")


# ---------------------------------------------------------------------------------------------------------------------
# running a tool and reading its logging output

@dataclass
class Record:
  level: str
  message: str   # may span several lines


@dataclass
class ToolRun:
  cmd: list[str]
  returncode: int
  stdout: str
  stderr: str
  records: list[Record]

  @property
  def crash_line(self) -> str:
    lines = [l for l in self.stderr.strip().splitlines() if l.strip()]
    return lines[-1].strip() if lines else f"exit {self.returncode}"

  def find(self, level: str | None = None, contains: str = "") -> list[Record]:
    return [r for r in self.records if (level is None or r.level == level) and contains in r.message]


def parse_records(text: str) -> list[Record]:
  """Split `LEVEL - message` logging output into records; continuation lines belong to the record before them."""
  records: list[Record] = []
  for line in text.splitlines():
    m = _RECORD.match(line)
    if m: records.append(Record(m.group(1), m.group(2)))
    elif records: records[-1].message += "\n" + line
  return records


def run_tool(tool: str, args: list[str], cwd: Path | None = None, log_output: bool = True,
             timeout: int = TOOL_TIMEOUT_S) -> ToolRun:
  """Run `python -m mlperf_logging.<tool> ARGS --log_output <scratch>`; parse its stderr logging records.

  cwd defaults to the scratch directory, so a tool that writes next to itself (result_summarizer without --csv)
  never touches the caller's working directory: every path in args must therefore be absolute (the CLI resolves
  them once, tooling/cli.py). A traceback is a ToolError (exit 2): a crashed checker is no verdict on the log."""
  with tempfile.TemporaryDirectory(prefix=f"tinyperf-{tool}-") as scratch:
    cmd = [sys.executable, "-m", f"mlperf_logging.{tool}", *args]
    if log_output: cmd += ["--log_output", str(Path(scratch) / f"{tool}.log")]
    try:
      p = subprocess.run(cmd, cwd=str(cwd or scratch), capture_output=True, text=True, timeout=timeout,
                         encoding="utf-8", errors="replace")
    except subprocess.TimeoutExpired:
      raise ToolError(f"mlperf_logging.{tool} did not finish within {timeout} s ({' '.join(cmd[3:])}).") from None
  run = ToolRun(cmd, p.returncode, p.stdout, p.stderr, parse_records(p.stderr))
  if "Traceback (most recent call last)" in p.stderr: raise_crash(tool, args, cwd, run.crash_line)
  return run


def raise_crash(tool: str, args: list[str], cwd: Path | None, what: str):
  where = f" in {cwd}" if cwd else ""
  raise ToolError(f"mlperf_logging.{tool} crashed on {' '.join(args)}{where}: {what}; no verdict was recorded. Check "
                  f"that the file is a complete MLPerf log, or rerun with the pinned mlperf-logging (requirements.lock).")


# ---------------------------------------------------------------------------------------------------------------------
# compliance_checker

_DUP = re.compile(r"^Required EXACTLY_ONE occurrence of '([^']+)' but found (\d+)$")
_CHECK_LINE = re.compile(r"^CHECK for '([^']+)' failed in line (\d+):?$")
_AT_LEAST_ONE_CHECK = re.compile(r"^Failed checks for (\S+) : (.*)$", re.S)
_DIFFERENT = re.compile(r"^Required EXACTLY_ONE occurrence of '([^']+)' but found (\d+) with different values")


@dataclass
class CheckerMessage:
  rule: str                # one line: what failed
  key: str | None          # the log key the rule is about
  checker_line: int | None # the checker's own "line N" (0-based index among MLLOG lines), when it gives one
  text: str                # the full message as the checker printed it
  duplicate: bool = False  # "key logged N times with identical values": a warning unless --werror


@dataclass
class ComplianceResult:
  path: Path
  ruleset: str
  werror: bool
  success: bool                       # `INFO - SUCCESS` present, no `ERROR -` record, no traceback
  messages: list[CheckerMessage] = field(default_factory=list)
  output: str = ""

  @property
  def failures(self) -> list[CheckerMessage]:
    return [m for m in self.messages if self.werror or not m.duplicate]
  @property
  def duplicates(self) -> list[CheckerMessage]: return [m for m in self.messages if m.duplicate]


def split_checker_messages(records: list[Record]) -> list[CheckerMessage]:
  """The checker prints its findings as WARNING records whose messages are separated by a line of 30 dashes."""
  out = []
  for rec in records:
    if rec.level != "WARNING": continue
    for part in rec.message.split("\n" + SEPARATOR + "\n"):
      part = part.strip()
      if not part: continue
      first = part.splitlines()[0].strip()
      msg = CheckerMessage(rule=first.rstrip(":"), key=None, checker_line=None, text=part)
      if m := _DUP.match(first):
        msg.key, msg.duplicate = m.group(1), int(m.group(2)) > 1
      elif m := _CHECK_LINE.match(first):
        msg.key, msg.checker_line = m.group(1), int(m.group(2))
        test = next((l for l in part.splitlines() if l.startswith("failed test:")), "")
        if test: msg.rule = f"CHECK for '{msg.key}' failed: {test[len('failed test:'):].strip()}"
      elif m := _AT_LEAST_ONE_CHECK.match(first):
        msg.key = m.group(1)
      elif m := _DIFFERENT.match(first):
        msg.key = m.group(1)
      elif m := re.match(r"^Required AT_LEAST(?:_ONE|\(\d+\)) occurrence of '([^']+)'", first):
        msg.key = m.group(1)
      elif first.startswith("Failed executing"):
        lines = part.splitlines()
        code = lines[1].strip() if len(lines) > 1 else ""
        msg.rule = f"{first.rstrip(':')}: {code}" if code else first
      out.append(msg)
  return out


def compliance_check(path: Path, ruleset: str, werror: bool = False) -> ComplianceResult:
  args = [str(path), "--usage", USAGE, "--ruleset", ruleset] + (["--werror"] if werror else [])
  run = run_tool("compliance_checker", args)
  success = any(r.level == "INFO" and r.message.strip() == "SUCCESS" for r in run.records)
  failed = any(r.level == "ERROR" for r in run.records)
  messages = split_checker_messages(run.records)
  if not success and not failed and not messages:   # neither SUCCESS nor a finding: output we cannot read
    raise_crash("compliance_checker", args, None, f"printed no verdict (exit {run.returncode})")
  return ComplianceResult(Path(path), ruleset, werror, success and not failed, messages, output=run.stderr)


def compliance_check_all(jobs: list[tuple[Path, str]], werror: bool = False) -> list[ComplianceResult]:
  """compliance_check for each (log, ruleset), WORKERS at a time, results in input order."""
  with ThreadPoolExecutor(WORKERS) as ex:
    return list(ex.map(lambda j: compliance_check(j[0], j[1], werror), jobs))


# ---------------------------------------------------------------------------------------------------------------------
# system_desc_checker

@dataclass
class SystemDescResult:
  path: Path
  ruleset: str
  passed: bool
  reasons: list[str]
  output: str


def system_desc_check(path: Path, ruleset: str) -> SystemDescResult:
  run = run_tool("system_desc_checker", [str(path), USAGE, ruleset])
  passed = any(r.level == "INFO" and "System description checker passed" in r.message for r in run.records)
  errors = [r.message for r in run.records if r.level == "ERROR"]
  reasons = []
  for e in errors:
    m = re.search(r"failed for .*? : (\[.*\])\s*$", e, re.S)
    if m:
      try: reasons.extend(str(x) for x in ast.literal_eval(m.group(1)))
      except (ValueError, SyntaxError): reasons.append(m.group(1))
    else: reasons.append(e.strip())
  return SystemDescResult(Path(path), ruleset, passed and not errors, reasons, run.stderr)


# ---------------------------------------------------------------------------------------------------------------------
# package_checker

def folder_arg(name: str) -> str:
  """A folder name as a tool's positional argument: one starting with '-' would be read as an option (argparse), so the
  tool would print its usage and never run its checks."""
  return f"./{name}" if name.startswith("-") else name


@dataclass
class PackageCheckResult:
  ruleset: str
  success_line: bool
  errors: list[str]                  # every `ERROR -` message
  skipped: list[str]                 # benchmarks reported as "Skipping benchmark"
  checked_dirs: list[str]            # dirs named by "Running compliance checks in dir"
  sections: dict[str, list[Record]]  # dir -> its ERROR/WARNING/notable INFO records; "" = before the first dir
  output: str

  def accepted(self, expected_dirs: list[str]) -> bool:
    return (self.success_line and not self.errors and not self.skipped
            and sorted(self.checked_dirs) == sorted(expected_dirs))


def package_check(workdir: Path, org: str, ruleset: str, werror: bool = False) -> PackageCheckResult:
  """Run package_checker on workdir/org (a scratch copy: the tool writes scaling.json into the tree)."""
  run = run_tool("package_checker", [folder_arg(org), USAGE, ruleset] + (["--werror"] if werror else []), cwd=workdir)
  sections: dict[str, list[Record]] = {"": []}
  current, in_file = "", False
  checked, skipped = [], []
  for r in run.records:
    msg = r.message.strip()
    if r.level == "INFO" and msg.startswith("Running compliance checks in dir "):
      current = msg[len("Running compliance checks in dir "):].strip().removeprefix("./")
      checked.append(current)
      sections[current] = []
      in_file = False
      continue
    if r.level == "INFO" and msg.startswith("Running compliance on file:"): in_file = True; continue
    if r.level == "INFO" and msg == SEPARATOR: continue
    if r.level == "INFO" and msg.startswith("Run ") and "/" in msg: continue
    if r.level == "WARNING" and msg.startswith("Skipping benchmark:"):
      skipped.append(msg.split(":", 1)[1].strip())
    if r.level == "INFO" and ("Running Seed Checker" in msg or "Running RCP Checker" in msg): in_file = False
    if r.level == "WARNING" and "accepting this under olympic scoring" in msg: in_file = False
    if in_file and r.level == "WARNING": continue  # per-file compliance findings: reported from our own runs
    if r.level in ("ERROR", "WARNING") or (r.level == "INFO" and msg.startswith(("RCP Test", "Results scaling"))):
      sections.setdefault(current, []).append(r)
  errors = [r.message.strip() for r in run.records if r.level == "ERROR"]
  success = any(r.level == "INFO" and "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS" in r.message for r in run.records)
  return PackageCheckResult(ruleset, success, errors, skipped, checked, sections, run.stderr)


# ---------------------------------------------------------------------------------------------------------------------
# result_summarizer (used to cross-check `tinyperf score`)

def result_summarizer(workdir: Path, org: str, ruleset: str) -> list[dict]:
  """Run result_summarizer on workdir/org; return its JSON rows (one per system). Mutates the tree (scaling.json)."""
  csv = Path(workdir) / "tinyperf-summary.csv"
  run_tool("result_summarizer", [folder_arg(org), USAGE, ruleset, "--csv", str(csv)], cwd=workdir, log_output=False)
  js = csv.with_suffix(".json")
  if not js.is_file(): raise_crash("result_summarizer", [org, USAGE, ruleset], workdir, "it wrote no summary")
  return json.loads(js.read_text())


# ---------------------------------------------------------------------------------------------------------------------
# repo_checker

@dataclass
class RepoCheckResult:
  ruleset: str
  passed: bool          # `ALL CHECKS PASSED.`, no `ERROR -` record
  errors: list[str]     # each ERROR message (a message may list several paths, one per line)
  output: str


def repo_check(workdir: Path, folder: str, ruleset: str) -> RepoCheckResult:
  """Run repo_checker on workdir/folder (git-unfriendly names, files over 50 MB, broken symlinks). It exits 0 either
  way and ends with `ALL CHECKS PASSED.` or `CHECKS FAILED.`."""
  run = run_tool("repo_checker", [folder_arg(folder), USAGE, ruleset], cwd=workdir)
  passed = any(r.level == "INFO" and r.message.strip() == "ALL CHECKS PASSED." for r in run.records)
  errors = [r.message.strip() for r in run.records if r.level == "ERROR"]
  return RepoCheckResult(ruleset, passed and not errors, errors, run.stderr)
