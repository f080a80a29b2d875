"""`python -m lab.upstream LOG[.gz] [--json]`: the step figures of one tinycorp examples/mlperf train log, as
`lab/scripts/upstream_beam.sh` writes it (PERFORMANCE.md row 18), also from a run its time limit stopped.

tinycorp's trainer prints one line per step: `i  RUN ms run, PY ms python, FETCH ms fetch data, WAIT ms CUDA, ...`, where
run = python dispatch + making the batch + waiting for the device. With IGNORE_JIT_FIRST_BEAM=1, step 0 runs uncaptured
at BEAM=0 and step 1 captures the JIT and runs the whole BEAM search; steps 2 on replay the searched kernels. So steps
0 + 1 are its INIT and the median of the rest is the searched step (run_upstream.sh's "median of the rest"). Under our
ranked search (lab/scripts/upstream_beam.sh) its report line says how much of the step was searched, and a log that ends
inside the search says how far it got. Exit 0 with a replayed step, 1 without one yet (the search is still going or
was stopped), 2 on a file it cannot read."""
from __future__ import annotations
import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from tinyperf.benchmarks.common.beam import KERNEL_LINE, REPORT_LINE
from lab.beamlog import read_text

STEP = re.compile(r"^\s*(\d+)\s+([\d.]+) ms run,\s+([\d.]+) ms python,\s+([\d.]+) ms fetch data,\s+([\d.]+) ms (\w+)", re.M)
BATCH = re.compile(r"training with (?:global )?batch size (\d+)")
CAPTURED = 2   # steps 0 (uncaptured) and 1 (the JIT capture, with the search) come before the first replay


def summary(text: str) -> dict:
  """The figures of one log: steps logged, INIT (steps 0 and 1, s) and the replayed steps' medians (ms)."""
  steps = [(int(m[1]), float(m[2]), float(m[3]), float(m[4]), float(m[5]), m[6]) for m in STEP.finditer(text)]
  out: dict = {"steps_logged": len(steps)}
  if m := BATCH.search(text): out["bs"] = int(m[1])
  if len(steps) >= CAPTURED:
    out.update(step0_s=round(steps[0][1] / 1e3, 1), capture_step_s=round(steps[1][1] / 1e3, 1),
               init_s=round((steps[0][1] + steps[1][1]) / 1e3, 1))
  # our ranked search's report on the captured train step (lab/scripts/upstream_beam.sh applies it)
  if m := REPORT_LINE.search(text): out.update(searched=int(m[1]), kernels=int(m[2]), covered=round(float(m[3]) / 100, 4))
  # while it searches (or when it was stopped), its last kernel line says how far it got
  elif kernel := KERNEL_LINE.findall(text):
    n, covered, spent = kernel[-1]
    out["ranked_so_far"] = {"given": int(n), "covered": round(float(covered) / 100, 4), "spent_s": int(spent)}
  replays = steps[CAPTURED:]
  if replays:
    med = {k: round(statistics.median(s[i] for s in replays), 2)
           for k, i in (("median_step_ms", 1), ("median_python_ms", 2), ("median_fetch_data_ms", 3))}
    med["median_device_wait_ms"] = round(statistics.median(s[4] for s in replays), 2)
    out.update(replayed_steps=len(replays), device=replays[0][5], **med, step_ms=[s[1] for s in replays])
    if "bs" in out: out["items_per_s"] = round(out["bs"] * 1e3 / med["median_step_ms"], 1)
  return out


def line(s: dict) -> str:
  if "median_step_ms" not in s:
    r = s.get("ranked_so_far")
    so_far = (f"; the ranked search had given {r['given']} kernels a result, {r['covered']:.1%} of the BEAM=0 step "
              f"covered, {r['spent_s']} s spent" if r else "")
    return (f"upstream: {s['steps_logged']} steps logged, none replayed yet (steps 0 and 1 are INIT: the search runs in "
            f"step 1){so_far}; rerun with the same CACHE to go on")
  rate = f" = {s['items_per_s']} items/s at BS {s['bs']}" if "items_per_s" in s else ""
  ranked = (f"; ranked BEAM searched {s['searched']}/{s['kernels']} kernels holding {s['covered']:.1%} of the BEAM=0 step"
            if "kernels" in s else "")
  return (f"upstream: median of {s['replayed_steps']} replayed steps {s['median_step_ms']} ms{rate} (python "
          f"{s['median_python_ms']} ms, fetch data {s['median_fetch_data_ms']} ms, waiting for {s['device']} {s['median_device_wait_ms']} ms); "
          f"INIT {s['init_s']} s (step 0 {s['step0_s']} s, capture step {s['capture_step_s']} s){ranked}")


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m lab.upstream` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog="python -m lab.upstream", description=__doc__.split("\n\n")[0])
  p.add_argument("log", type=Path, help="tinycorp's train log (lab/scripts/upstream_beam.sh's LOG), plain or gzipped")
  p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
  return p


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  try: text = read_text(args.log)
  except (OSError, EOFError) as e:
    print(f"upstream: cannot read {args.log} ({getattr(e, 'strerror', None) or e}). Give the "
          f"log lab/scripts/upstream_beam.sh wrote (LOG, by default beside CACHE with .log).", file=sys.stderr)
    return 2
  s = summary(text)
  print(json.dumps(s) if args.json else line(s))
  return 0 if "median_step_ms" in s else 1


if __name__ == "__main__":
  sys.exit(main())
