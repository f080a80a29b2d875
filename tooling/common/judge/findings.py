"""What `tinyperf check` found: findings per file, per results/<system>/<benchmark> directory and per package, the
verdicts they make, and the report as printed (or as JSON)."""
from __future__ import annotations
from dataclasses import asdict, dataclass, field

from tinyperf.tooling.common.safe_read import shown

FAIL, WARN, INFO = "fail", "warn", "info"


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
  from tinyperf.tooling.common.container import host_path   # a compose service checks /results: name the host's directory
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
