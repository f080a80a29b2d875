"""`python -m lab.beamlog LOG[.gz]`: what a BEAM search bought, read from a `DEBUG=2` train log (e.g. `DEBUG=2 python -m
lab.bench resnet --beam 1 ...`), also from a search that was stopped before it finished.

Such a log holds (1) every kernel of the first train step, run at BEAM=0 (IGNORE_JIT_FIRST_BEAM), with its time and
GFLOP/s, where that step ran uncaptured (tinycorp's code; ours captures it: no BEAM=0 step in the report), and (2)
tinygrad's search trace for each kernel of the JIT capture step: the kernel's unoptimized loop shape
(global dims blue, reduce dims red), one line per round, the last one being the best time found. Searched
kernels cannot be paired one to one with their BEAM=0 launches (kernel names change with the optimizations, and
tinygrad's FLOP estimate counts index arithmetic too), so the report compares rates: what the large reductions (the
convolutions; that is where the time goes) reach at BEAM=0 and what the search found for the kernels it finished."""
from __future__ import annotations
import argparse
import gzip
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tinyperf.tooling.common.safe_read import GZIP_MAGIC

ANSI = re.compile(r"\x1b\[([0-9;]*)[mK]")
LAUNCH = re.compile(r"\*\*\* (\S+)\s+\d+ (\S+)\s.*?tm\s+([\d.]+)(us|ms)/\s*[\d.]+\w+ \(\s*([\d.]+) GFLOPS")
COPY = re.compile(r"copy\s+([\d.]+) (B|KB|MB|GB),\s+(\S+) <- (\S+)\s")
UNIT = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30}   # tinygrad's size_to_str is binary
HOST_SOURCES = ("NPY", "PYTHON", "DISK")                  # copies from the host, not between devices
START = re.compile(r"0\.00s:\s+from\s+1 ->\s+1 actions (.*)$")
ROUND = re.compile(r"([\d.]+)s:\s+([\d.]+)(us|ms)\s+from\s+\d+ ->\s+\d+ actions")
PROGRESS = re.compile(r"(\d+)/(\d+) \[(\d+):(\d+)(?::(\d+))?<")
SHAPE_DIM = re.compile(r"\x1b\[(\d+)m\s*(\d+)\x1b\[0m")


@dataclass
class Search:
  dims: list[int]          # the unoptimized kernel's loop sizes (globals then reduces)
  reduce: bool
  best_us: float = math.inf
  seconds: float = 0.0     # wall time of its rounds

  @property
  def gflop(self) -> float:   # a multiply-accumulate per point of the loop nest: 2 FLOP
    return 2 * math.prod(self.dims) / 1e9 if self.reduce else 0.0


@dataclass
class BeamLog:
  step0: list[tuple[str, float, float]] = field(default_factory=list)   # (kernel, us, GFLOP) at BEAM=0
  step0_devices: list[str] = field(default_factory=list)                 # the device of each step0 launch
  copies: list[tuple[str, str, float, float]] = field(default_factory=list)  # step 0's device-to-device (dst, src, bytes, us)
  searches: list[Search] = field(default_factory=list)
  progress: tuple[int, int, float] | None = None                         # (done, total, elapsed s)
  compile_timeouts: int = 0     # candidates whose compile outlived BEAM_TIMEOUT_SEC
  swallowed_timeouts: int = 0   # of those, timeouts raised inside a __del__, which Python ignores (the search may stall)


def parse(text: str) -> BeamLog:
  log = BeamLog()
  # the launches of an uncaptured first step at BEAM=0 (tinycorp's, IGNORE_JIT_FIRST_BEAM) come before its line and
  # before any search; our steps capture their first call, so their logs start with the search and hold none
  in_step0 = True
  for raw in text.replace("\r", "\n").splitlines():
    plain = ANSI.sub("", raw)
    if "init train step 0" in plain: in_step0 = False
    if in_step0 and (m := LAUNCH.search(plain)):
      us = float(m.group(3)) * (1000 if m.group(4) == "ms" else 1)
      if m.group(2) != "copy":
        log.step0.append((m.group(2), us, float(m.group(5)) * us / 1e6))
        log.step0_devices.append(m.group(1))
      elif (c := COPY.search(plain)):
        # weights and the batch come from the host (<- NPY, <- PYTHON) before and at the start of step 0; the
        # device-to-device copies after the last of those belong to the step (the weights' first broadcast comes before)
        if c.group(4).startswith(HOST_SOURCES): log.copies.clear()
        else: log.copies.append((c.group(3), c.group(4), float(c.group(1)) * UNIT[c.group(2)], us))
    if (m := PROGRESS.search(plain)):
      mins_or_h, secs, extra = int(m.group(3)), int(m.group(4)), m.group(5)
      elapsed = (mins_or_h * 3600 + secs * 60 + int(extra)) if extra else mins_or_h * 60 + secs
      log.progress = (int(m.group(1)), int(m.group(2)), float(elapsed))
    if (m := START.search(plain)):
      in_step0 = False
      colored = raw[raw.rfind("actions"):]
      dims = [(int(c), int(n)) for c, n in SHAPE_DIM.findall(colored)]
      log.searches.append(Search([n for _, n in dims], reduce=any(c in (31, 91) for c, _ in dims)))
    elif (m := ROUND.search(plain)) and log.searches:
      sr = log.searches[-1]
      sr.best_us = min(sr.best_us, float(m.group(2)) * (1000 if m.group(3) == "ms" else 1))
      sr.seconds = float(m.group(1))
  log.compile_timeouts = text.count("BEAM COMPILE TIMEOUT")
  log.swallowed_timeouts = len(re.findall(r"Exception ignored in: <function UOp.__del__", text))
  return log


# The loop-shape FLOP count assumes one multiply-accumulate per point of the loop nest. Some kernels break that: the
# gradients of strided convolutions run over every input position with masked (zero) loads, and gathers written as
# reductions (arange == index) multiply by 0/1. Their "rates" come out beyond the chip (216 to 13,600
# "TFLOP/s" measured). A rate above this bound (an H200's dense fp16 tensor-core peak, the fastest GPU measured here) cannot be
# real, so such kernels are left out of the rates and counted instead; rates under it remain upper bounds.
PEAK_TFLOPS = 989.0


def quartiles(xs: list[float]) -> tuple[float, float, float]:
  xs = sorted(xs)
  return tuple(xs[min(len(xs) - 1, int(q * len(xs)))] for q in (0.25, 0.5, 0.75)) if xs else (math.nan,) * 3


def report(log: BeamLog, min_gflop: float = 1.0, out=None) -> dict:
  """Print (and return) the BEAM=0 breakdown, the search's progress and the rates the search found."""
  out = out or sys.stdout
  total_ms = sum(us for _, us, _ in log.step0) / 1e3
  reduce_ms = sum(us for n, us, _ in log.step0 if n.startswith("r_")) / 1e3
  big0 = [(us, g) for n, us, g in log.step0 if n.startswith("r_") and g >= min_gflop]
  print(f"BEAM=0 first step: {len(log.step0)} kernel launches, {total_ms:.1f} ms of kernel time; reductions "
        f"(convolutions, matmuls, norms) {reduce_ms:.1f} ms = {100 * reduce_ms / max(total_ms, 1e-9):.0f}%", file=out)
  rates0 = quartiles([g / us * 1e3 for us, g in big0])
  big0_ms = sum(us for us, _ in big0) / 1e3
  print(f"  {len(big0)} launches of >= {min_gflop:g} GFLOP take {big0_ms:.1f} ms at TFLOP/s (tinygrad's estimate, which "
        f"also counts index arithmetic) q1/median/q3 {rates0[0]:.1f} / {rates0[1]:.1f} / {rates0[2]:.1f}", file=out)
  res = {"step0_ms": total_ms, "step0_launches": len(log.step0), "big0_ms": big0_ms, "big0_tflops": rates0}
  for dev in sorted(set(log.step0_devices)):   # where each device's time goes (the longest kernels decide)
    mine = sorted(((us, n) for (n, us, _), d in zip(log.step0, log.step0_devices) if d == dev), reverse=True)
    print(f"  {dev}: {len(mine)} launches, {sum(us for us, _ in mine) / 1e3:.1f} ms; longest "
          + ", ".join(f"{n} {us / 1e3:.1f} ms" for us, n in mine[:2]), file=out)
  if len(set(log.step0_devices)) > 1:   # a multi-GPU step: what crosses between the devices
    nbytes, copy_ms = sum(b for _, _, b, _ in log.copies), sum(us for *_, us in log.copies) / 1e3
    print(f"  device-to-device copies in the step: {len(log.copies)}, {nbytes / 1e6:.0f} MB in {copy_ms:.1f} ms"
          + (f" ({nbytes / copy_ms / 1e6:.1f} GB/s)" if copy_ms else ""), file=out)
    res.update(copies=len(log.copies), copy_bytes=nbytes, copy_ms=copy_ms)
  if log.progress:
    done, total, secs = log.progress
    print(f"BEAM search: kernel {done}/{total} of the capture step reached after {secs / 60:.1f} min (kernels carried in "
          f"from an earlier search count as done); {log.compile_timeouts} candidates' compiles timed out, "
          f"{log.swallowed_timeouts} of the timeouts swallowed in a __del__", file=out)
    res.update(progress=log.progress, compile_timeouts=log.compile_timeouts, swallowed_timeouts=log.swallowed_timeouts)
  finished = finished_searches(log)
  big1 = [s for s in finished if s.gflop >= min_gflop and math.isfinite(s.best_us)]
  impossible = [s for s in big1 if s.gflop / s.best_us * 1e3 > PEAK_TFLOPS]
  big1 = [s for s in big1 if s not in impossible]
  if impossible:
    print(f"  left out of the rates: {len(impossible)} searched kernels whose loop shape is not a multiply-accumulate "
          f"nest (its count would exceed {PEAK_TFLOPS:g} TFLOP/s: masked strided gradients, gathers)", file=out)
  if big1:
    rates1 = quartiles([s.gflop / s.best_us * 1e3 for s in big1])
    print(f"  searched here: {len(finished)} kernels in {sum(s.seconds for s in finished) / 60:.1f} min of rounds; "
          f"{len(big1)} of >= {min_gflop:g} GFLOP reach TFLOP/s (2 FLOP per multiply-accumulate of the loop shape) "
          f"q1/median/q3 {rates1[0]:.1f} / {rates1[1]:.1f} / {rates1[2]:.1f}", file=out)
    # the BEAM=0 launches' FLOP estimate is an upper bound on their real FLOP, so this projection errs slow
    projected = sum(g for _, g in big0) / rates1[1]
    print(f"  the {len(big0)} large BEAM=0 launches at the searched median rate: {big0_ms:.0f} ms -> about {projected:.0f} ms",
          file=out)
    print(f"  {'loop shape (unoptimized)':<30}{'GFLOP':>7}{'best us':>9}{'TFLOP/s':>9}", file=out)
    for s in sorted(big1, key=lambda s: -s.gflop)[:12]:
      print(f"  {' '.join(map(str, s.dims)):<30}{s.gflop:>7.1f}{s.best_us:>9.0f}{s.gflop / s.best_us * 1e3:>9.1f}", file=out)
    res.update(searched=len(finished), big1_tflops=rates1, projected_big_ms=projected)
  res["impossible"] = len(impossible)
  return res


def finished_searches(log: BeamLog) -> list[Search]:
  return log.searches[:-1] if log.progress and log.progress[0] < log.progress[1] else log.searches


def pair(a: BeamLog, b: BeamLog, names=("A", "B"), out=None) -> dict:
  """Two searches of the same step from the same cache (e.g. one per BEAM_* setting, side by side) meet the same
  kernels in the same order: compare each kernel's search time and best time while their loop shapes agree."""
  out = out or sys.stdout
  rows = []
  for x, y in zip(finished_searches(a), finished_searches(b)):
    if x.dims != y.dims: break
    if math.isfinite(x.best_us) and math.isfinite(y.best_us): rows.append((x, y))
  if not rows:
    print("no kernel was searched to the end by both logs (different steps, seeds or caches?)", file=out)
    return {"kernels": 0}
  sa, sb = sum(x.seconds for x, _ in rows), sum(y.seconds for _, y in rows)
  ka, kb = sum(x.best_us for x, _ in rows), sum(y.best_us for _, y in rows)
  print(f"{len(rows)} kernels searched by both, in the same order", file=out)
  print(f"  {'loop shape (unoptimized)':<30}{names[0] + ' s':>9}{names[0] + ' us':>10}{names[1] + ' s':>9}{names[1] + ' us':>10}",
        file=out)
  for x, y in sorted(rows, key=lambda r: -r[0].best_us)[:12]:
    print(f"  {' '.join(map(str, x.dims)):<30}{x.seconds:>9.1f}{x.best_us:>10.1f}{y.seconds:>9.1f}{y.best_us:>10.1f}", file=out)
  print(f"  search time {names[0]} {sa:.0f} s, {names[1]} {sb:.0f} s ({names[1]}/{names[0]} {sb / sa:.2f}x); kernel time "
        f"{names[0]} {ka:.0f} us, {names[1]} {kb:.0f} us ({names[0]}/{names[1]} {ka / kb:.2f}x)", file=out)
  return {"kernels": len(rows), "search_s": (sa, sb), "kernel_us": (ka, kb)}


class LogError(Exception): pass


def read_text(path: Path) -> str:
  """A log's text, plain or gzipped (by its .gz name or its gzip magic); OSError or EOFError when it cannot be read,
  for the caller to word (a .gz that is not gzip is BadGzipFile, an OSError; one cut short is EOFError)."""
  raw = path.read_bytes()
  data = gzip.decompress(raw) if path.suffix == ".gz" or raw.startswith(GZIP_MAGIC) else raw
  # a NUL at the start: not a console log (NULs at the end can be a crashed machine's unwritten blocks: still read)
  if b"\x00" in data[:4096]: raise OSError("binary data, not a text log")
  return data.decode(errors="replace")


def read(path: Path) -> str:
  try: return read_text(path)
  except (OSError, EOFError) as e:   # missing, unreadable, or a .gz that is not gzip / is cut short
    raise LogError(f"error: cannot read {path}: {getattr(e, 'strerror', None) or e}. Pass the log (plain or .gz) that "
                   f"a `DEBUG=2 python -m lab.bench` run wrote.") from None


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m lab.beamlog` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog="python -m lab.beamlog", description=__doc__.split("\n\n")[0])
  p.add_argument("logs", nargs="+", type=Path)
  p.add_argument("--pair", action="store_true", help="two logs of searches started from the same cache (e.g. two BEAM_* "
                 "settings side by side): compare search time and kernel time per kernel")
  return p


def main(argv=None) -> int:
  p = build_parser()
  args = p.parse_args(argv)
  if args.pair and len(args.logs) != 2: p.error("--pair takes exactly two logs")
  try:
    logs = [parse(read(path)) for path in args.logs]
  except LogError as e:
    print(e, file=sys.stderr)
    return 2
  for path, log in zip(args.logs, logs):
    if not (log.step0 or log.searches or log.progress):   # a report of zeros would read as a measurement
      print(f"error: {path} holds no kernel launch and no BEAM search line: not the log of a `DEBUG=2 python -m lab.bench` "
            "run (without DEBUG=2 tinygrad prints neither). Rerun the bench with DEBUG=2 and pass its log.", file=sys.stderr)
      return 2
  if args.pair:
    pair(logs[0], logs[1], names=("A", "B"))
    print(f"A = {args.logs[0]}\nB = {args.logs[1]}")
    return 0
  for path, log in zip(args.logs, logs):
    print(f"== {path}")
    report(log)
  return 0


if __name__ == "__main__":
  sys.exit(main())
