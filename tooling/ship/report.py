"""`tinyperf report RESULTS`: plots and a Markdown summary of a set of runs.

RESULTS is `tinyperf run`'s --results directory (results/ + runs/), a submitter tree, or one results/<system>/<benchmark>
directory. Per system x benchmark it writes, into --out (default RESULTS/report):
  <system>_<bm>_accuracy.png       eval accuracy against epochs completed (ResNet) or training samples (BERT), every run
                                   with its own colour, marker and line style (a run drawn over an identical one says so
                                   in the legend), the target
  <system>_<bm>_time_to_train.png  time to train per run; the runs olympic scoring drops are marked, the mean is a line
                                   (no score: no run is marked as in a mean)
  <system>_<bm>_throughput.png     training throughput over the run, one panel per run (see below)
  report.md                        scores, verdicts (the full `tinyperf check`), seeds, and each run's provenance

Throughput comes from the result log's timestamps: samples per second per epoch from epoch_start/epoch_stop (ResNet,
times train_samples, held over epoch n from n-1 to n epochs completed) or between consecutive evals (BERT, whose eval
metadata counts samples, held over that stretch of samples). Those timestamps are in
every result file, including packaged and published ones, and they measure what the clock measures: data loading, host
work and stalls included. When the run's metrics file is still there (<log>.metrics.jsonl beside the run's MLPerf log,
one JSON line per train step), each step's rate is drawn under it as a thin line at its own position in the run: a
per-step rate that excludes data waits, so the gap between the two lines is time the device spent waiting. The timestamps are the reference; the step
rate is a diagnostic. Provenance comes from the run's console output (output.log), where it still is.
"""
from __future__ import annotations
import argparse
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tinyperf.benchmarks.common.config import available_platforms, load_resolved
from tinyperf.benchmarks.common.runtime import metrics_path
from tinyperf.benchmarks.registry import BENCHMARKS, load_config
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common import results_tree as T
from tinyperf.benchmarks.common.io import require_dir_possible
from tinyperf.tooling.common.errors import UserError, write_atomic
from tinyperf.tooling.common.mllog_reader import MLLog
from tinyperf.tooling.common.safe_read import iter_lines
from tinyperf.tooling.common.submission_tree import BenchDir, discover

@dataclass
class RunData:
  name: str                       # result_<i>.txt
  seed: int | None
  minutes: float | None
  verdict: str
  compliant: bool
  converged: bool
  score_note: str                 # score's note: fastest/slowest not in the mean, or dropped
  first_failure: str
  accuracy: list[tuple[float, float]] = field(default_factory=list)
  throughput: list[tuple[float, float]] = field(default_factory=list)      # from MLLOG timestamps
  step_rate: list[tuple[float, float]] = field(default_factory=list)       # per train step, from the metrics file
  step_unit: str = ""
  beam_search: list[tuple[float, float]] = field(default_factory=list)     # INIT's ranked BEAM: (s searched, step covered)
  provenance: list[str] = field(default_factory=list)
  output: str | None = None


@dataclass
class BenchData:
  system: str
  benchmark: str
  ruleset: str
  division: str
  target: float
  target_source: str
  runs: list[RunData]
  score_minutes: float | None
  score_note: str
  scaling: float
  rcp_scaling_factor: float | None
  accepted: bool
  summary: str
  findings: list[str]
  ledger: Path | None


# ---------------------------------------------------------------------------------------------------------------------
# reading

def accuracy_series(log: MLLog) -> list[tuple[float, float]]:
  out = []
  for e in log.all("eval_accuracy"):
    x = e.metadata.get("epoch_num", e.metadata.get("samples_count"))
    if _num(x) and _num(e.value): out.append((float(x), float(e.value)))
  return out


def _num(x) -> bool:
  """A plottable JSON number: not a bool, a list, a string, NaN or Infinity (a log's values are untrusted)."""
  return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def throughput_series(log: MLLog, benchmark: str) -> list[tuple[float, float]]:
  """(epoch, samples/s) per epoch from epoch_start/epoch_stop where the benchmark's log times epochs (ResNet);
  (samples, samples/s) between evals otherwise (BERT)."""
  if _by_epoch(benchmark):
    n = log.value("train_samples")
    if not _num(n) or n <= 0: return []
    starts = {e.metadata["epoch_num"]: e.time_ms for e in log.all("epoch_start") if _num(e.metadata.get("epoch_num"))}
    out = []
    for e in log.all("epoch_stop"):
      k = e.metadata.get("epoch_num")
      if _num(k) and k in starts and e.time_ms > starts[k]: out.append((float(k), n / ((e.time_ms - starts[k]) / 1000)))
    return out
  start = log.first("run_start")
  prev_x, prev_t, out = 0.0, start.time_ms if start else None, []
  for e in log.all("eval_accuracy"):
    x = e.metadata.get("epoch_num")
    if not _num(x) or prev_t is None: continue
    if x > prev_x and e.time_ms > prev_t: out.append((float(x), (x - prev_x) / ((e.time_ms - prev_t) / 1000)))
    prev_x, prev_t = float(x), e.time_ms
  return out


def read_provenance(path: Path) -> list[str]:
  """A run's console output (output.log): the provenance lines its INIT and RUN printed."""
  prov = []
  for raw in iter_lines(path):
    line = raw.decode("utf-8", "replace").strip()
    if line.startswith("provenance: ") and line not in prov: prov.append(line)
  return prov


def read_step_rate(path: Path) -> tuple[list[tuple[float, float]], str]:
  """A run's metrics file: (x, items/s) per train step and the unit. x is the epoch position (epoch - 1 + steps done /
  steps per epoch) for ResNet, the samples seen for BERT: the x axes of the throughput plot."""
  rate, unit = [], ""
  for raw in iter_lines(path):
    try: rec = json.loads(raw)
    except ValueError: continue          # a line cut by a kill: the rest still counts
    if not isinstance(rec, dict) or rec.get("kind") != "step" or not _num(rec.get("rate")): continue
    if _num(rec.get("epoch")) and _num(rec.get("step")) and _num(rec.get("steps")) and rec["steps"] > 0:
      x = rec["epoch"] - 1 + (rec["step"] + 1) / rec["steps"]
    elif _num(rec.get("samples")): x = float(rec["samples"])
    else: continue
    rate.append((float(x), float(rec["rate"])))
    unit = str(rec.get("unit", unit))
  return rate, unit


def read_beam_search(path: Path) -> list[tuple[float, float]]:
  """A run's metrics file: INIT's ranked BEAM search as (seconds searched so far, share of the step's BEAM=0 time held
  by the kernels searched so far), one point per searched kernel (benchmarks/common/beam.py)."""
  out = []
  for raw in iter_lines(path):
    try: rec = json.loads(raw)
    except ValueError: continue
    if isinstance(rec, dict) and rec.get("kind") == "beam_kernel" and _num(rec.get("spent_s")) and _num(rec.get("covered")):
      out.append((float(rec["spent_s"]), float(rec["covered"])))
  return out


def _ledger_for(bd: BenchDir) -> tuple[Path | None, dict[int, L.Attempt]]:
  """runs/<system>/<bm>/ledger.json beside results/ (a `tinyperf run` tree); {} for packaged or published trees."""
  results = bd.path.parent.parent
  if results.name != T.RESULTS: return None, {}
  path = T.ledger_path(results.parent, bd.system, bd.name)
  if not path.is_file(): return None, {}
  led = L.Ledger(path)
  done = {}
  for a in led.attempts:
    if a.status == L.DONE: done[a.index] = a
  return path, done


def _output_path(a: L.Attempt, ledger: Path) -> Path | None:
  for p in (Path(a.output) if a.output else None, T.work_dir(ledger.parent, a.index, a.seed) / T.OUTPUT_LOG):
    if p is not None and p.is_file(): return p
  return None


def _target(system: str, benchmark: str, ledger: Path | None, done: dict[int, L.Attempt]) -> tuple[float, str]:
  """The target the runs trained to: the resolved config.json of a finished run (the knobs it ran with), else the
  config of the platform that names the system (runs recorded before config.json)."""
  for i, a in sorted(done.items()):
    if ledger and a.config_sha256 and (conf := T.ResultSet.of_runs_dir(ledger.parent).run(a.index, a.seed).config).is_file():
      cfg, _, sha = load_resolved(conf, BENCHMARKS[benchmark])
      if sha == a.config_sha256: return float(cfg["TARGET"]), f"TARGET of the {cfg.platform} config run {i} ran with"
  for p in available_platforms(benchmark):
    cfg = load_config(benchmark, p, environ={})
    if cfg["system"] == system: return float(cfg["TARGET"]), f"TARGET of the {p} config"
  return BENCHMARKS[benchmark].quality_target, "the MLPerf closed target"


def collect(path: Path) -> list[BenchData]:
  from tinyperf.tooling.common.judge.check import check_path
  from tinyperf.tooling.common.judge.findings import WARN
  from tinyperf.tooling.common.judge.score import score_bench_dir
  t = discover(path)
  if t.kind == "file":
    raise UserError(f"{path}: one result log; give the directory of a set of runs (a `tinyperf run` --results "
                    f"directory, a submitter tree, or results/<system>/<benchmark>).")
  out = []
  for bd in t.bench_dirs:
    report = check_path(bd.path)
    (dr,) = report.dirs
    score = score_bench_dir(bd)
    notes = {r.file: r.note for r in score.runs}
    ledger, done = _ledger_for(bd)
    target, source = _target(bd.system, bd.benchmark, ledger, done)
    runs = []
    logs = {log.path.name: log for log in bd.logs}
    for fr in dr.files:
      log = logs[fr.name]
      m = re.match(r"result_(\d+)\.txt$", fr.name)
      att = done.get(int(m.group(1))) if m else None
      stop = log.first("run_stop")
      rd = RunData(fr.name, fr.seeds[0] if fr.seeds else None, fr.minutes, fr.verdict, fr.compliant,
                   bool(stop and stop.metadata.get("status") == "success"), notes.get(fr.name, ""),
                   fr.first_failure.message if fr.first_failure else "", accuracy_series(log),
                   throughput_series(log, bd.benchmark))
      out_path = _output_path(att, ledger) if att and ledger else None
      if out_path:
        rd.output = str(out_path)
        rd.provenance = read_provenance(out_path)
        metrics = metrics_path(out_path.parent / T.RUN_LOG)
        if metrics.is_file():
          rd.step_rate, rd.step_unit = read_step_rate(metrics)
          rd.beam_search = read_beam_search(metrics)
      runs.append(rd)
    findings = [f"{f.level.upper()} {f.where() + ': ' if f.where() else ''}{f.message}"
                for f in report.failures() + [x for x in dr.findings + report.findings if x.level == WARN]]
    out.append(BenchData(bd.system, bd.benchmark, bd.ruleset, bd.division, target, source, runs, score.score_minutes,
                         score.reason, score.scaling_factor, dr.rcp_scaling_factor, report.accepted, dr.summary,
                         list(dict.fromkeys(findings)), ledger))
  return out


# ---------------------------------------------------------------------------------------------------------------------
# plots

def _pyplot():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def _figure():
  """pyplot, a figure and its axes at the size and resolution every report plot uses."""
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
  return plt, fig, ax


# One look per run where runs share axes (accuracy, BEAM search): colour, marker shape and line style all differ between
# neighbours, so two runs with the same points still show both markers (hollow, of different shapes) and both names in
# the legend. The throughput panels keep each run's colour.
MARKERS = "osD^vP*Xph"
LINESTYLES = ("-", "--", "-.", ":")


def run_style(i: int) -> dict:
  return dict(color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)], ls=LINESTYLES[i % len(LINESTYLES)])


def _by_epoch(bm: str) -> bool: return BENCHMARKS[bm].progress == "epoch"


def _x_label(bm: str) -> str:
  return ("epochs completed (epoch n spans n-1 to n)" if _by_epoch(bm) else
          "training samples seen")


def _same_as(series: list[list[tuple[float, float]]], i: int) -> int | None:
  """The first earlier run whose points equal run i's (drawn exactly underneath it), else None."""
  for j in range(i):
    if series[i] and series[j] == series[i]: return j
  return None


def plot_accuracy(b: BenchData) -> bytes:
  plt, fig, _ = accuracy_figure(b)
  return _save(fig, plt)


def accuracy_figure(b: BenchData):
  plt, fig, ax = _figure()
  series = [r.accuracy for r in b.runs]
  for i, r in enumerate(b.runs):
    if not r.accuracy: continue
    xs, ys = zip(*r.accuracy)
    same = _same_as(series, i)
    label = f"{r.name} (seed {r.seed})" + ("" if r.converged else ", did not converge")
    if same is not None: label += f": same points as {b.runs[same].name}"
    ax.plot(xs, ys, ms=7 - 0.3 * (i % 10), mfc="none", mew=1.2, lw=1.3, label=label, **run_style(i))
  ax.axhline(b.target, color="crimson", ls="--", lw=1.5, label=f"target {b.target:g} ({b.target_source})")
  ax.set_xlabel(_x_label(b.benchmark) + ", at each eval")
  ax.set_ylabel(BENCHMARKS[b.benchmark].quality_metric)
  if not _by_epoch(b.benchmark):
    from matplotlib.ticker import EngFormatter
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))   # 1.5M samples, not 1.5 under a "1e6" in the corner
  ax.set_title(f"{b.benchmark} on {b.system}: eval accuracy per run")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7.5, loc="lower right")
  return plt, fig, ax


def plot_time_to_train(b: BenchData) -> bytes:
  plt, fig, _ = time_to_train_figure(b)
  return _save(fig, plt)


def _no_score_reason(b: BenchData) -> str:
  return re.sub(r"^no score:\s*", "", b.score_note) or "no olympic mean"


def _olympic_role(b: BenchData, r: RunData) -> str:
  """score's note for the run; a counted run is 'in the mean' only where there is one."""
  return r.score_note or ("in the mean" if b.score_minutes is not None else "counted (no mean: no score)")


def time_to_train_figure(b: BenchData):
  from matplotlib.patches import Patch
  plt, fig, ax = _figure()
  names = [r.name.replace(".txt", "") for r in b.runs]
  top = max((r.minutes for r in b.runs if r.minutes), default=1.0)   # no floor: a smoke run's bars are 0.1 min tall
  scored = b.score_minutes is not None
  roles = {  # role: (colour, hatch, bar text, legend)
    "mean": ("steelblue", None, "", "in the mean"),
    "excluded": ("silver", None, "\nexcluded", "fastest / slowest: excluded"),
    "dropped": ("indianred", "//", "\ndropped", "dropped (counts as the slowest)"),
    "unscored": ("wheat", None, "", f"counted, but no mean: {_no_score_reason(b)}"),
  }
  used = []
  for i, r in enumerate(b.runs):
    role = ("dropped" if r.score_note.startswith("dropped") else "excluded" if "not in the mean" in r.score_note
            else "mean" if scored else "unscored")
    color, hatch, text, _ = roles[role]
    if role not in used: used.append(role)
    h = r.minutes if r.minutes is not None else 0.0
    ax.bar(i, h, color=color, hatch=hatch, edgecolor="black", lw=0.6)
    label = "no run_stop" if r.minutes is None else f"{r.minutes:.2f}"   # the precision of check, score and the mean
    ax.text(i, h + top * 0.01, label + text, ha="center", va="bottom", fontsize=7.5,
            bbox=dict(facecolor="white", edgecolor="none", pad=1))
  if scored:
    mean = b.score_minutes / b.scaling
    ax.axhline(mean, color="black", ls="--", lw=1.3, label=f"olympic mean {mean:.2f} min")
  handles = ax.get_legend_handles_labels()[0] + [
    Patch(facecolor=roles[k][0], edgecolor="black", hatch=roles[k][1], label=roles[k][3]) for k in used]
  ax.legend(handles=handles, fontsize=8, loc="upper right", ncol=1 if "unscored" in used else 2)
  ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
  ax.set_ylabel("time to train (minutes, run_start to run_stop)")
  ax.set_ylim(0, top * 1.3)
  ax.set_title(f"{b.benchmark} on {b.system}: time to train per run" + ("" if scored else " (no score)"))
  ax.grid(axis="y", alpha=0.3)
  return plt, fig, ax


def _spans(b: BenchData, r: RunData) -> tuple[list[float], list[float]]:
  """A run's timestamp throughput as a step line: each rate held over the stretch it was measured on (ResNet: epoch n
  from n-1 to n; BERT: from the previous eval's sample count to this one's), so the step rates fall inside it."""
  xs, ys, prev = [], [], 0.0
  for x, y in r.throughput:
    start = x - 1 if _by_epoch(b.benchmark) else prev
    if xs and xs[-1] != start: xs.append(float("nan")); ys.append(float("nan"))   # a gap: an epoch not in the log
    xs += [start, x]; ys += [y, y]
    prev = x
  return xs, ys


def plot_throughput(b: BenchData) -> bytes:
  plt, fig, _ = throughput_figure(b)
  return _save(fig, plt, tight=False)   # laid out below its legend


def throughput_figure(b: BenchData):
  """Small multiples, one panel per run on shared axes: ten runs' per-step rates overlaid are a smear."""
  from matplotlib.lines import Line2D
  from matplotlib.ticker import EngFormatter
  plt = _pyplot()
  n = max(1, len(b.runs))
  cols = 1 if n <= 3 else 2
  rows = math.ceil(n / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(9 if cols == 1 else 11, max(5.5, 1.2 + 1.75 * rows)), dpi=110,
                           sharex=True, sharey=True, squeeze=False)
  unit = next((r.step_unit for r in b.runs if r.step_unit), BENCHMARKS[b.benchmark].throughput_unit)
  flat = list(axes.flat)
  top = 0.0
  for i, (ax, r) in enumerate(zip(flat, b.runs)):
    if r.step_rate:
      xs, ys = zip(*r.step_rate)
      ax.plot(xs, ys, lw=0.6, alpha=0.5, color="gray")
      top = max(top, *ys)
    if r.throughput:
      xs, ys = _spans(b, r)
      ax.plot(xs, ys, lw=2.0, color=f"C{i % 10}")
      top = max(top, *(y for y in ys if y == y))
    missing = [w for w, have in (("no epoch timestamps" if _by_epoch(b.benchmark) else "no evals", r.throughput),
                                 ("no metrics file", r.step_rate)) if not have]
    ax.set_title(f"{r.name} (seed {r.seed})" + "".join(f", {m}" for m in missing), fontsize=8, loc="left", pad=2)
    ax.grid(alpha=0.3)
  for ax in flat[:len(b.runs)]: ax.set_ylim(0, top * 1.08 or 1.0)
  if not _by_epoch(b.benchmark): flat[0].xaxis.set_major_formatter(EngFormatter(sep=""))
  for k in range(len(b.runs), len(flat)):
    flat[k].axis("off")
    if k >= cols: flat[k - cols].xaxis.set_tick_params(labelbottom=True)   # the panel above the gap ends its column
  span = "epoch" if _by_epoch(b.benchmark) else "stretch between evals"
  handles = [Line2D([], [], lw=2.0, color="black", label=f"thick, the run's colour: result-log timestamps, samples/s "
                                                         f"over each {span} (data waits included)"),
             Line2D([], [], lw=0.6, color="gray", label=f"thin gray: metrics file, each train step's {unit}/s "
                                                        "(no data waits)")]
  height = fig.get_figheight()
  fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.45 / height), fontsize=8, frameon=False)
  fig.suptitle(f"{b.benchmark} on {b.system}: training throughput over the run, one panel per run", fontsize=11)
  fig.supxlabel(_x_label(b.benchmark), fontsize=10)
  fig.supylabel(f"training samples ({unit}) per second", fontsize=10)
  fig.tight_layout(rect=(0, 0, 1, 1 - 0.8 / height))
  return plt, fig, axes


def plot_beam_search(b: BenchData) -> bytes:
  """INIT's ranked BEAM per run: how much of the step's BEAM=0 time the searched kernels hold, against search time."""
  plt, fig, ax = _figure()
  for i, r in enumerate(b.runs):
    if not r.beam_search: continue
    xs, ys = zip(*r.beam_search)
    same = _same_as([r.beam_search for r in b.runs], i)
    ax.step([0.0, *[x / 60 for x in xs]], [0.0, *[y * 100 for y in ys]], where="post", lw=1.5, ms=6 - 0.3 * (i % 10),
            mfc="none", label=f"{r.name}: {len(xs)} kernels searched" +
            (f", the same search as {b.runs[same].name}" if same is not None else ""), **run_style(i))
  ax.set_xlabel("minutes of BEAM search in INIT")
  ax.set_ylabel("% of the train step's BEAM=0 time held by the searched kernels")
  ax.set_title(f"{b.benchmark} on {b.system}: INIT's ranked BEAM search (slowest kernels first)")
  ax.set_ylim(0, 100)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7.5, loc="lower right")
  return _save(fig, plt)


def _save(fig, plt, tight: bool = True) -> bytes:
  import io
  buf = io.BytesIO()
  if tight: fig.tight_layout()
  fig.savefig(buf, format="png")
  plt.close(fig)
  return buf.getvalue()


# ---------------------------------------------------------------------------------------------------------------------
# markdown

def _fmt(x: float | None, nd: int = 2) -> str: return "-" if x is None else f"{x:.{nd}f}"


def markdown(results: Path, data: list[BenchData], images: dict[tuple[str, str], list[str]]) -> str:
  lines = [f"# tinyperf report: `{results}`", "",
           "Scores follow result_summarizer's rules (`tinyperf score`); verdicts are the full `tinyperf check` (the "
           "real MLCommons checkers plus the checks they miss). Throughput comes from the result logs' timestamps "
           "(per epoch for ResNet, between evals for BERT), one panel per run; each train step's rate from the run's metrics "
           "file, where it survives, is drawn thin in gray under it (it leaves out data waits). The olympic column follows result_summarizer, which drops "
           "only runs the compliance checker rejects; the verdict column is stricter (e.g. a run whose run_stop status "
           "is not success).", ""]
  for b in data:
    lines += [f"## {b.benchmark} on {b.system}", "",
              f"- ruleset {b.ruleset}, division {b.division or '?'}; accuracy target {b.target:g} ({b.target_source})"]
    if b.score_minutes is not None:
      scale = f" x scaling.json {b.scaling:.4f}" if b.scaling != 1.0 else ""
      lines.append(f"- **score: {b.score_minutes:.2f} min** (olympic mean of {len(b.runs)} runs{scale})")
    else:
      lines.append(f"- **no score**: {_no_score_reason(b)}")
    if b.rcp_scaling_factor is not None:
      lines.append(f"- RCP: package_checker would write scaling.json with factor {b.rcp_scaling_factor:.4f}")
    lines.append(f"- verdict: {b.summary}; `tinyperf check`: {'ACCEPTED' if b.accepted else 'REJECTED'}")
    lines.append(f"- run ledger: `{b.ledger}`" if b.ledger else "- run ledger: none beside these results (packaged or "
                 "published tree): no raw output, no provenance lines")
    lines += ["", "| file | seed | minutes | verdict | converged | olympic | first failure |", "|---|---|---|---|---|---|---|"]
    for r in b.runs:
      fail = r.first_failure.replace("|", "\\|")[:120] if r.first_failure else ""
      lines.append(f"| `{r.name}` | {r.seed if r.seed is not None else '-'} | {_fmt(r.minutes)} | {r.verdict} | "
                   f"{'yes' if r.converged else 'no'} | {_olympic_role(b, r)} | {fail} |")
    if b.findings:
      lines += ["", "Findings:", ""] + [f"- {f}" for f in b.findings]
    prov: dict[str, list[str]] = {}
    for r in b.runs:
      for p in r.provenance: prov.setdefault(p, []).append(r.name)
    lines += ["", "Provenance (the `provenance:` lines the runs printed):", ""]
    if prov:
      for p, names in prov.items():
        lines.append(f"- `{p}`: {', '.join(dict.fromkeys(names))}")
    missing = [r.name for r in b.runs if not r.provenance]
    if missing: lines.append(f"- not recorded (no raw output): {', '.join(missing)}")
    lines.append("")
    for img in images[(b.system, b.benchmark)]:
      lines += [f"![{img}]({img})", ""]
  return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# CLI

def default_out(results: Path) -> Path:
  """Never inside a results/ tree (check would take it for a benchmark) nor inside a submitter tree (it would be
  packed): RESULTS/report for a `tinyperf run` directory, <org>_report beside a submitter tree."""
  results = Path(os.path.abspath(results))   # as tooling/cli.absolute_paths: a symlink keeps the name the user gave it
  if results.parent.parent.name == T.RESULTS: results = results.parent.parent.parent   # results/<system>/<bm>
  # a `tinyperf run` directory has run ledgers (runs/), and since it records the system also a systems/
  if (results / T.RESULTS).is_dir() and (results / T.RUNS).is_dir(): return results / "report"
  if (results / T.SYSTEMS).is_dir(): return results.parent / f"{results.name}_report"
  if (results / T.RESULTS).is_dir(): return results / "report"
  return results.parent / f"{results.name}_report"


def add_arguments(p: argparse.ArgumentParser) -> None:
  p.epilog = "exit status: 0 written, 2 bad input (or existing files without --force). See docs/package.md."
  p.add_argument("results", metavar="RESULTS", type=Path, nargs="?",
                 help="`tinyperf run`'s --results directory (default: ./out, or the one results directory in it, "
                      "e.g. ./smoke.sh's out/smoke), a submitter tree, or results/<system>/<benchmark>")
  p.add_argument("--out", type=Path, help="where the PNGs and report.md go (default: RESULTS/report for a `tinyperf "
                                          "run` directory, <org>_report beside a submitter tree)")
  p.add_argument("--force", action="store_true", help="replace existing report files")


def main(args: argparse.Namespace) -> int:
  results: Path = args.results or T.default_root()
  require_dir_possible(results, "RESULTS")
  if not results.is_dir():
    raise UserError(f"{results}: no such directory; give `tinyperf run`'s --results directory, a submitter tree, or "
                    f"a results/<system>/<benchmark> directory.")
  out = args.out or default_out(results)
  data = collect(results)
  files: dict[Path, bytes | str] = {}
  images: dict[tuple[str, str], list[str]] = {}
  for b in data:
    stem = f"{b.system}_{b.benchmark}"
    images[(b.system, b.benchmark)] = []
    plots = [("accuracy", plot_accuracy), ("time_to_train", plot_time_to_train), ("throughput", plot_throughput)]
    if any(r.beam_search for r in b.runs): plots.append(("beam_search", plot_beam_search))
    for kind, fn in plots:
      name = f"{stem}_{kind}.png"
      files[out / name] = fn(b)
      images[(b.system, b.benchmark)].append(name)
  files[out / "report.md"] = markdown(results, data, images)
  existing = [str(p) for p in files if p.exists()]
  if existing and not args.force:
    raise UserError(f"{', '.join(existing)} already exist(s); pass --force to replace them or --out DIR for a new "
                    f"report.")
  try:
    for p, content in files.items(): write_atomic(p, content, overwrite=args.force, mode=0o644)
  except OSError as e:
    raise UserError(f"cannot write the report into {out} ({e.strerror or e}); choose a writable --out.") from None
  print(f"wrote {len(files)} files to {out}: " + ", ".join(p.name for p in files))
  for b in data:
    score = f"score {b.score_minutes:.2f} min" if b.score_minutes is not None else b.score_note
    print(f"  {b.benchmark} on {b.system}: {len(b.runs)} runs, {score}, check {'accepted' if b.accepted else 'REJECTED'}")
  return 0
