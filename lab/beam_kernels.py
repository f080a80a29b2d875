"""`python -m lab.beam_kernels KERNELS --cache FILE [--coverage SHARE] [--budget-s S]`: the ranked BEAM
search of kernels a run wrote with BEAM_KERNELS_OUT=KERNELS (benchmarks/common/beam.py), without running its trainer.

A trainer's search happens inside its JIT capture, after its step 0 at BEAM=0: tinycorp's BERT-large spends 210-320 s
there on a fresh H200 before the first kernel is searched (PERFORMANCE.md), and a device call is 540 s. Its kernels
and their BEAM=0 times, written once, let every later call search from its first second: slowest first, until the
searched kernels hold SHARE of the step or S seconds are spent, results in tinygrad's cache. A kernel whose result FILE
already holds costs nothing. FILE is seeded into a fresh tinygrad cache and written back about a second after each
result and at the end (as `python -m lab.bench --beam-cache` and lab/scripts/upstream_beam.sh's CACHE), so a run stopped by a
signal or a lost machine keeps what it searched. The trainer run next with the same cache takes the results from it:
the key is the kernel's AST, the BEAM amount and the device. The BEAM knobs the search reads (BEAM_UOPS_MAX, ...) are
those the trainer ran with, from KERNELS; PARALLEL (compile workers) is tinygrad's, from the environment. Exit 0 when
done (coverage reached, budget spent or every kernel tried), 2 on bad input, 130 when stopped by a signal."""
from __future__ import annotations
import argparse
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
from importlib import metadata
from pathlib import Path

from tinyperf.benchmarks.common.beam import RankedBeam, kernels_header, read_kernels
from tinyperf.tooling.common.errors import UserError
from lab.bench import follow_beam_cache, require_saving_folder, save_beam_cache, seed_beam_cache


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m lab.beam_kernels", description=__doc__.split("\n\n")[0])
  p.add_argument("kernels", type=Path, help="the file a run wrote with BEAM_KERNELS_OUT (a pickle: give only a file "
                 "your own run wrote)")
  p.add_argument("--cache", type=Path, required=True,
                 help="BEAM results to start from and add to (a missing file starts empty)")
  p.add_argument("--coverage", type=float, default=1.0, help="stop once the searched kernels hold this share of the "
                 "step's BEAM=0 time (default 1: every kernel)")
  p.add_argument("--budget-s", type=float, default=None, help="stop searching after this many seconds (a search still "
                 "running then is stopped; default: no limit)")
  return p


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  try:
    if not 0 < args.coverage <= 1:
      raise UserError(f"beam_kernels: --coverage {args.coverage} is not a share of the step: give one in (0, 1].")
    try: header = kernels_header(args.kernels)
    except OSError as e:
      raise UserError(f"beam_kernels: cannot read {args.kernels} ({e.strerror or e}). Give the file a run wrote with "
                      "BEAM_KERNELS_OUT=FILE (lab/scripts/upstream_beam.sh passes it to tinycorp's trainer).") from None
    except ValueError as e:
      raise UserError(f"beam_kernels: {args.kernels}: {e}. Give the file a run wrote with BEAM_KERNELS_OUT=FILE under "
                      "this tinygrad (write it again with the run, `docs/PERFORMANCE.md` says how).") from None
    except metadata.PackageNotFoundError:
      raise UserError(f"beam_kernels: this Python ({sys.executable}) has no tinygrad, and the kernels in "
                      f"{args.kernels} are tinygrad's: run it in the project's environment "
                      "(`bash scripts/env.sh && source .venv/bin/activate`).") from None
    require_saving_folder("--cache", args.cache)
  except UserError as e:
    print(e, file=sys.stderr)
    return 2
  # tinygrad reads CACHEDB when it is imported, and the search its BEAM knobs: both set before the kernels import it
  work = Path(tempfile.mkdtemp(prefix="beam_kernels."))
  db = work / "cache.db"
  os.environ["CACHEDB"] = str(db)
  os.environ.update(header["env"])
  print(f"beam_kernels: the run's BEAM knobs: {' '.join(f'{k}={v}' for k, v in header['env'].items()) or 'none set'}",
        flush=True)
  try:
    try: n = seed_beam_cache("--cache", args.cache, db)
    except UserError as e:
      print(e, file=sys.stderr)
      return 2
    print(f"beam_kernels: {n} searched kernels carried in from {args.cache}", flush=True)
    try: captures = read_kernels(args.kernels)
    except Exception as e:  # noqa: BLE001 -- a header that reads but kernels that do not: a cut-short copy
      print(f"beam_kernels: {args.kernels}: its kernels cannot be read ({type(e).__name__}: {e}); the file is cut "
            "short or damaged. Copy it again from the run that wrote it.", file=sys.stderr)
      return 2
    stop = threading.Event()
    def save():
      stop.set()
      if db.is_file(): save_beam_cache(db, args.cache)
    # SIGTERM and SIGHUP (Slurm, `kill -- -PGID`) reach BEAM's compile workers too, and multiprocessing's
    # Pool.terminate, which tinygrad's search calls on KeyboardInterrupt, then waits forever on a lock a killed worker
    # held: save, end the workers and leave at once instead. Ctrl-C reaches them too, but they ignore SIGINT, so it
    # takes the KeyboardInterrupt path below.
    def stopped(signum, frame):
      try: save()
      finally:
        for worker in multiprocessing.active_children(): worker.kill()
        print(f"beam_kernels: stopped by {signal.Signals(signum).name}; what was searched is kept in {args.cache}",
              file=sys.stderr, flush=True)
        shutil.rmtree(work, ignore_errors=True)
        os._exit(130)
    for sig in (signal.SIGTERM, signal.SIGHUP): signal.signal(sig, stopped)
    saver = threading.Thread(target=follow_beam_cache, args=(db, args.cache), kwargs={"stop": stop}, daemon=True)
    saver.start()
    try: RankedBeam(args.coverage, args.budget_s, log=lambda s: print(s, flush=True)).search_written(captures)
    except KeyboardInterrupt:
      print(f"beam_kernels: interrupted; what was searched is kept in {args.cache}", file=sys.stderr)
      return 130
    finally:
      save(); saver.join()
    return 0
  finally:
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
  sys.exit(main())
