#!/usr/bin/env python3
"""One docs/perf record of a lab/scripts/e2e_h200.sh run, from what `lab/scripts/e2e_h200.sh collect DIR` brought back:
`python3 lab/scripts/e2e_record.py DIR/e2e.tgz --record R.jsonl --what "one sentence"` writes (R: docs/perf/<date>_<what>)
  R.jsonl            one JSON line: date, machine, GPU, driver, cores, versions, git sha and the command (the run's
                     host.txt and command files), the figures of lab/scripts/e2e_summary.py (INIT, ranked BEAM, RUN step 0
                     vs steady, items/s, data wait, evals), INIT's step 0 at BEAM=0 (run.log), PyTorch's line (torch.log,
                     when the run had time for it) and `tinyperf check`'s verdict on the log as of this checkout
  R_result.txt       the MLPerf result log itself
  R_job.tgz          the whole collected job (run log, metrics, events), as brought back
Nothing existing is overwritten (exit 2). --command gives the command for a job whose e2e_h200.sh predates its
command file."""
from __future__ import annotations
import argparse
import datetime
import json
import re
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _host(text: str) -> dict:
  """host.txt as e2e_h200.sh writes it: nvidia-smi's name, driver, memory; nproc; python3 --version; the package
  versions; the git sha."""
  out: dict = {}
  for line in text.splitlines():
    if m := re.match(r"(NVIDIA [^,]+), ([\d.]+), ", line): out.update(gpu=m[1], driver=m[2])
    # the sha: git's 40 digits, or TINYPERF_GIT_SHA as the caller gave it (7 or more); nproc's line is shorter
    elif re.fullmatch(r"[0-9a-f]{7,40}", line.strip()): out["git"] = line.strip()[:7]
    elif re.fullmatch(r"\d+", line.strip()): out["cores"] = int(line)
    elif m := re.match(r"Python (\S+)", line): out["python"] = m[1]
    elif line.startswith("tinygrad "):
      words = line.split()
      out.update({k.replace("-", "_"): v for k, v in zip(words[::2], words[1::2])})
  return out


def build_record(job: Path, what: str, command: str | None = None, shown: str | None = None) -> tuple[dict, Path]:
  """The record of the job folder JOB (named SHOWN in errors), and the result log it describes (the newest, as
  e2e_h200.sh checks it)."""
  shown = shown or str(job)
  from tinyperf.tooling.common.judge.check import check_path
  from tinyperf.tooling.common.judge.findings import FAIL
  import importlib.util
  spec = importlib.util.spec_from_file_location("e2e_summary", Path(__file__).with_name("e2e_summary.py"))
  e2e_summary = importlib.util.module_from_spec(spec); spec.loader.exec_module(e2e_summary)

  for need in ("events", "host.txt"):
    if not (job / need).is_file(): raise ValueError(f"{shown} holds no {need}: not a job that e2e_h200.sh wrote")
  logs = sorted(job.glob("results/result_*.txt"), key=lambda p: p.stat().st_mtime)
  if not logs: raise ValueError(f"{shown} holds no results/result_*.txt: the run made no result log (see its events)")
  log = logs[-1]
  if command is None:
    if not (job / "command").is_file():
      raise ValueError(f"{shown} has no command file (its e2e_h200.sh predates it): give the command with --command")
    command = (job / "command").read_text().strip()
  first_event = int((job / "events").read_text().split()[0])
  summary = e2e_summary.summarize(log)
  report = check_path(log)
  (fr,) = report.files
  rec: dict = {"date": datetime.datetime.fromtimestamp(first_event, datetime.timezone.utc).strftime("%Y-%m-%d"),
               "machine": summary["platform"], **_host((job / "host.txt").read_text()),
               "what": what, "command": command,
               "check": {"verdict": "ACCEPTED" if report.accepted else "REJECTED", "division": fr.division,
                         "ttt_min": None if fr.minutes is None else round(fr.minutes, 2),
                         "init_min": None if fr.init_minutes is None else round(fr.init_minutes, 2),
                         "failures": [f"{x.message} (line {x.line})" for x in fr.findings if x.level == FAIL]}}
  run_log = (job / "run.log").read_text(errors="replace") if (job / "run.log").is_file() else ""
  if m := re.search(r"init train step 0: ([\d.]+) ms", run_log): rec["init_step0_s"] = round(float(m[1]) / 1000, 2)
  # who wrote the big kernels (the KERNELS knob), from the provenance line every phase prints
  if m := re.search(r"provenance: .*\bkernels=(\w+)", run_log): rec["kernels"] = m[1]
  rec.update({k: v for k, v in summary.items() if k != "log"})
  for beam in summary.get("ranked_beam", [])[:1]:   # the train step's search: its figures at the top level
    rec.update(searched_kernels=beam["searched"], total_kernels=beam["kernels"], covered=beam["covered"],
               search_s=beam["search_s"])
    if summary.get("steady_step_s"): rec["speedup_over_beam0"] = round(beam["step_beam0_s"] / summary["steady_step_s"], 3)
  # the loader alone (loader_rate.py's JSON lines: img/s per worker count, or seq/s), beside the step's items/s
  if (job / "loader.log").is_file():
    rates = [json.loads(l) for l in (job / "loader.log").read_text().splitlines() if l.startswith("{")]
    if rates: rec["loader_rates"] = rates
  torch_lines = (job / "torch.log").read_text().strip().splitlines() if (job / "torch.log").is_file() else []
  rec["torch"] = torch_lines[-1] if torch_lines else None
  return rec, log


def write_record(src: Path, record: Path, what: str, command: str | None = None) -> list[Path]:
  from tinyperf.benchmarks.common.io import write_atomic
  if record.suffix != ".jsonl": raise ValueError(f"--record {record}: a record is a .jsonl file")
  stem = record.with_suffix("")
  outs = [record, *(stem.with_name(stem.name + s) for s in ("_result.txt", "_job.tgz"))]
  if there := [str(p) for p in outs if p.exists()]:
    raise ValueError(f"{', '.join(there)} already exist(s) and records are never overwritten: choose another --record")
  with tempfile.TemporaryDirectory() as tmp:
    job = Path(tmp)
    if not src.is_file() or not tarfile.is_tarfile(src):
      raise ValueError(f"{src} is not the e2e.tgz that `lab/scripts/e2e_h200.sh collect DIR` writes")
    packed = src.read_bytes()
    (job / "x").mkdir()
    with tarfile.open(src) as t: t.extractall(job / "x", filter="data")
    rec, log = build_record(job / "x", what, command, shown=str(src))
    rec.update(result_log=str(outs[1]), job=str(outs[2]))
    write_atomic(outs[1], log.read_bytes())
    write_atomic(outs[2], packed)
    write_atomic(outs[0], json.dumps(rec) + "\n")
  return outs


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python3 lab/scripts/e2e_record.py` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("job", type=Path, metavar="E2E_TGZ", help="the e2e.tgz that `lab/scripts/e2e_h200.sh collect DIR` wrote")
  p.add_argument("--record", type=Path, required=True, metavar="R.jsonl", help="the record to write (the result log "
                 "and the job go beside it as R_result.txt and R_job.tgz); docs/perf/<date>_<what>.jsonl")
  p.add_argument("--what", required=True, help="what ran, in one sentence (the performance table's first column)")
  p.add_argument("--command", help="the command, for a job made before e2e_h200.sh wrote its command file")
  return p


def main(argv: list[str] | None = None) -> int:
  from tinyperf.benchmarks.common.io import InputError
  a = build_parser().parse_args(argv)
  try:
    outs = write_record(a.job, a.record, a.what, a.command)
  except (ValueError, OSError, tarfile.TarError, InputError) as e:
    print(f"e2e_record: {e}", file=sys.stderr)
    return 2
  rec = json.loads(outs[0].read_text())
  print(f"wrote {', '.join(map(str, outs))}: {rec['check']['verdict']} ({rec['check']['division']}), "
        f"init {rec.get('init_s')} s", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
