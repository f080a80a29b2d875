"""What a PATH given to `tinyperf check` / `tinyperf score` is: one result log, a results/<system>/<benchmark> directory,
or a submitter directory <org>/{systems,benchmarks,results}. Reads every log and systems JSON once and refuses bad input
(UserError, exit 2) before any checker runs."""
from __future__ import annotations
import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tinyperf.benchmarks.common.rules import RESULT_GLOB
from tinyperf.benchmarks.registry import BENCHMARKS
from tinyperf.tooling.common.errors import UserError
from tinyperf.tooling.common.mllog_reader import TOKEN, MLLog, read_log
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common.safe_read import (MAX_JSON_BYTES, MAX_LOG_BYTES, kind_of, list_dir, os_error, read_bytes, read_text,
                                      walk_dirs)

# a submitter name: it names the <org>/ directory of a submission and its tarball
ORG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
LOG_SUFFIXES = (".txt", ".log")
AUX_FILES = {"scaling.json", "package_checker_params"}   # files package_checker and the summarizer read themselves
AUX_DIRS = {"power"}


@dataclass
class BenchDir:
  path: Path
  system: str
  name: str                          # directory name: the benchmark as package_checker sees it
  logs: list[MLLog]
  other_files: list[Path]            # neither a log nor a file the tools know
  benchmark: str = ""                # from the logs' submission_benchmark
  division: str = ""                 # from the first log's submission_division
  ruleset: str = ""
  scaling: float = 1.0               # scaling.json's scaling_factor (1.0 without one), read before any checker runs

  @property
  def rel(self) -> str: return f"results/{self.system}/{self.name}"


@dataclass
class Target:
  kind: str                          # "file" | "results" | "submission"
  path: Path
  org_dir: Path | None = None        # the submitter directory, when PATH is one or lies inside one
  # org_dir is the --results tree of `tinyperf run` (its runs/ holds the ledgers), shaped like a submitter directory but
  # named as the user chose: its name is no submitter's (`tinyperf package --org` names the submission)
  results_tree: bool = False
  bench_dirs: list[BenchDir] = field(default_factory=list)
  log: MLLog | None = None           # kind == "file"
  file_ruleset: str = ""
  systems: dict[str, dict] = field(default_factory=dict)       # stem -> parsed systems JSON
  system_paths: dict[str, Path] = field(default_factory=dict)

  @property
  def org(self) -> str | None: return self.org_dir.name if self.org_dir else None


def read_systems_json(path: Path) -> dict:
  text = read_text(path, MAX_JSON_BYTES, "systems JSON")
  try:
    data = json.loads(text)
  except json.JSONDecodeError as e:
    raise UserError(f"{path}:{e.lineno}: systems JSON does not parse ({e.msg.removesuffix(' at')} at column {e.colno}); package_checker and "
                    f"result_summarizer would crash on it. Fix the JSON syntax.") from None
  if not isinstance(data, dict):
    raise UserError(f"{path}: systems JSON must be an object of fields, got {type(data).__name__}.")
  return data


def recorded_submitter(root: Path) -> tuple[str, Path] | None:
  """(name, file) of the submitter the runs under a results tree R record: R/systems/<system>.json's submitter, which
  `tinyperf run` writes with the logs' submission_org at the first run; None before any."""
  for p in sorted((Path(root) / T.SYSTEMS).glob("*.json")):
    if isinstance(name := read_systems_json(p).get("submitter"), str) and name: return name, p
  return None


def read_scaling(bench_dir: Path) -> float:
  """results/<system>/<benchmark>/scaling.json's factor (1.0 without the file), which multiplies the score."""
  p = Path(bench_dir) / "scaling.json"
  if not p.exists() and not p.is_symlink(): return 1.0
  text = read_text(p, MAX_JSON_BYTES, "scaling.json")
  try:
    v = json.loads(text)["scaling_factor"]
  except (ValueError, KeyError, TypeError):
    v = None
  # bool is an int and float() takes "NaN", "inf" and "1e9": only a finite positive JSON number scales a score
  if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
    raise UserError(f"{p}: not a scaling.json with a finite positive numeric scaling_factor (got {v!r}); "
                    f'package_checker writes {{"scaling_factor": <float>}}. Delete it and rerun the check.')
  return float(v)


def _is_log_candidate(p: Path) -> bool:
  return p.suffix in LOG_SUFFIXES   # result_<i>.txt and misnamed logs (result0.txt, bert_green_<seed>.log)


def _entry_kind(p: Path) -> str:
  """What an entry is, a link to a file followed; UserError for what no reader may open (FIFOs, devices, sockets,
  loops) and for a link to a directory (copying it for package_checker would follow it, in a loop if it points up)."""
  try:
    st = p.stat()
  except OSError as e:
    raise os_error(p, e) from None
  kind = kind_of(st.st_mode)
  if kind == "directory" and p.is_symlink():
    raise UserError(f"{p}: a symbolic link to a directory in a results directory; replace it with the directory's "
                    f"files (a submission holds no links).")
  if kind not in ("regular file", "directory"):
    raise UserError(f"{p}: a {kind} in a results directory, which holds only regular files (result_<i>.txt, "
                    f"scaling.json, ...) and directories; remove it.")
  return kind


def _check_tree_entries(d: Path) -> None:
  """Every entry below an auxiliary directory (power/) is a file or directory: package_checker copies them."""
  for _ in walk_dirs(d, lambda p: _entry_kind(p) == "directory"): pass   # no recursion: depth capped


def _org_hint(entries: list[Path]) -> str:
  """Where package's --out or --verify's directory was given for the submitter directory inside it."""
  orgs = [p for p in entries if (p / T.RESULTS).is_dir() and (p / T.SYSTEMS).is_dir()]
  return f" {orgs[0].name} is a submitter directory: `tinyperf check {shlex.quote(str(orgs[0]))}`." if orgs else ""


def _read_bench_dir(d: Path, system: str) -> BenchDir:
  entries = list_dir(d)
  if not entries:
    raise UserError(f"{d}: empty directory; a results/<system>/<benchmark> directory holds the runs' result_<i>.txt "
                    f"files. Remove it or add the logs.")
  logs, other = [], []
  for p in entries:
    if _entry_kind(p) == "directory":
      _check_tree_entries(p)
      if p.name not in AUX_DIRS: other.append(p)
      continue
    if p.name in AUX_FILES: continue
    if RESULT_GLOB.match(p.name) or (_is_log_candidate(p) and p.stat().st_size <= MAX_LOG_BYTES
                                     and TOKEN.encode() in read_bytes(p, MAX_LOG_BYTES)):
      logs.append(read_log(p))     # strict: a broken result log is bad input, not an unknown file
    else: other.append(p)          # console logs, notes: package_checker warns about them, so do we
  if not logs:
    raise UserError(f"{d}: no result logs (result_<i>.txt) in this directory, only "
                    f"{', '.join(p.name for p in entries)}.{_org_hint(entries)}")
  bd = BenchDir(d, system, d.name, logs, other)
  bd.scaling = read_scaling(d)
  first = logs[0]
  for log in logs[1:]:
    if log.benchmark != first.benchmark:
      raise UserError(f"{d}: two benchmarks mixed in one results directory: {first.path.name} logs "
                      f"{first.benchmark!r} but {log.path.name} logs {log.benchmark!r}. A results/<system>/<benchmark> "
                      f"directory holds the runs of one benchmark; move the other runs to their own directory.")
  bd.benchmark, bd.division = first.benchmark, first.division or ""
  return bd


def choose_ruleset(benchmark: str, division: str, override: str | None, where: str) -> str:
  """A registered benchmark's ruleset (its spec's); --ruleset overrides; refuse a ruleset the
  benchmark does not exist in, naming the ones that accept it."""
  div = division if division in ("closed", "open") else "closed"
  if override:
    mlperf_tools.require_ruleset(benchmark, div, override, where)
    return override
  if benchmark in BENCHMARKS:
    mlperf_tools.require_ruleset(benchmark, div, BENCHMARKS[benchmark].ruleset, where)
    return BENCHMARKS[benchmark].ruleset
  ok = mlperf_tools.accepting_rulesets(benchmark, div)
  if not ok:
    raise UserError(f"{where}: benchmark {benchmark!r} exists in no ruleset of the installed mlperf_logging "
                    f"(known: {', '.join(mlperf_tools.training_rulesets())}); check submission_benchmark.")
  return ok[-1]


def _stat_error(path: Path) -> OSError:
  try: path.stat()
  except OSError as e: return e
  return OSError(f"{path}: not found")


def _find_org_dir(results_dir: Path) -> Path | None:
  # results/<system>/<benchmark> inside <org>/: the org is three levels up, next to systems/
  if results_dir.parent.parent.name == T.RESULTS:
    org = results_dir.parent.parent.parent
    if (org / T.SYSTEMS).is_dir(): return org
  return None


def _load_systems(target: Target, stems: set[str] | None = None) -> None:
  sysdir = target.org_dir / T.SYSTEMS
  if not sysdir.is_dir(): return
  for p in sorted(sysdir.glob("*.json")):
    if stems is not None and p.stem not in stems: continue
    target.systems[p.stem] = read_systems_json(p)
    target.system_paths[p.stem] = p


def discover(path: str | Path, ruleset: str | None = None) -> Target:
  path = Path(path)
  try:
    return _discover(path, ruleset)
  except OSError as e:   # a directory that cannot be listed or searched, a file that vanished: bad input, named
    raise os_error(e.filename or path, e) from None


def _discover(path: Path, ruleset: str | None) -> Target:
  if not path.exists() and path.is_symlink():
    raise os_error(path, _stat_error(path))
  if not path.exists():
    raise UserError(f"{path}: no such file or directory. Give a result log, a results/<system>/<benchmark> directory "
                    f"or a submitter directory (<org>/{{systems,benchmarks,results}}).")
  if path.is_file():
    log = read_log(path)
    t = Target("file", path, log=log)
    t.file_ruleset = choose_ruleset(log.benchmark, log.division or "", ruleset, str(path))
    return t
  if not path.is_dir():
    raise UserError(f"{path}: a {kind_of(path.stat().st_mode)}, neither a regular file nor a directory; give a result "
                    f"log or a directory.")
  if not list_dir(path):
    raise UserError(f"{path}: empty directory; nothing to check.")
  if (path / T.RESULTS).is_dir():
    t = Target("submission", path, org_dir=path, results_tree=bool(T.run_roots(path)))
    for sysdir in (p for p in list_dir(path / T.RESULTS) if p.is_dir()):
      for bdir in (p for p in list_dir(sysdir) if p.is_dir()):
        t.bench_dirs.append(_read_bench_dir(bdir, sysdir.name))
    if not t.bench_dirs:
      raise UserError(f"{path}/results: no results/<system>/<benchmark> directories; nothing to check.")
    _load_systems(t)
  elif any(not p.is_dir() for p in list_dir(path)):
    org_dir = _find_org_dir(path)
    t = Target("results", path, org_dir=org_dir, results_tree=bool(org_dir and T.run_roots(org_dir)))
    t.bench_dirs.append(_read_bench_dir(path, path.parent.name))
    if t.org_dir: _load_systems(t, {path.parent.name})
  else:
    raise UserError(f"{path}: neither a results/<system>/<benchmark> directory (it holds no files) nor a submitter "
                    f"directory (it has no results/ subdirectory).{_org_hint(list_dir(path))}")
  for bd in t.bench_dirs:
    bd.ruleset = choose_ruleset(bd.benchmark, bd.division, ruleset, str(bd.path))
  return t
