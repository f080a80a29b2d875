"""The checks of a whole tree: its systems JSONs (system_desc_checker and the fields it misses) and MLCommons'
package_checker, run on a scratch copy (it writes scaling.json), its verdict taken from its parsed output."""
from __future__ import annotations
import json
import os
import shutil
import tempfile
from pathlib import Path

from tinyperf.benchmarks.common.rules import beyond_rules
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common.errors import ToolError
from tinyperf.tooling.common.safe_read import MAX_LOG_BYTES
from tinyperf.tooling.common.submission_tree import BenchDir, Target, read_scaling
from tinyperf.tooling.common.judge.dir_checks import submitter
from tinyperf.tooling.common.judge.findings import FAIL, INFO, WARN, DirReport, Finding, Report

COUNT_FIELDS = ("number_of_nodes", "host_processors_per_node", "accelerators_per_node")


def _is_sysdesc(msg: str) -> bool: return "System description" in msg


def check_systems(t: Target, rulesets: list[str], report: Report) -> None:
  for stem, data in t.systems.items():
    path = t.system_paths[stem]
    name = f"systems/{stem}.json"
    for f in COUNT_FIELDS:
      if f in data:
        try: int(data[f])
        except (TypeError, ValueError, OverflowError):
          report.findings.append(Finding(FAIL, "system-desc", f"{f} is {data[f]!r}, not an integer string; "
                                         f"result_summarizer crashes on it", name))
    sub, org = data.get("submitter"), submitter(t)
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


def package_checker(t: Target, dirs: list[tuple[BenchDir, DirReport]], ruleset: str, werror: bool,
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
