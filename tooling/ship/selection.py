"""Which runs a package holds: per results/<system>/<benchmark> a run ledger knows about, the first N finished runs in
the order they started (N = 5 resnet, 10 bert), renumbered result_0..result_<N-1>, never chosen by score or
convergence; each file's logged seed must match its ledger entry, and seeds must be distinct."""
from __future__ import annotations
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tinyperf.benchmarks.common.config import available_platforms, PlatformConfig
from tinyperf.benchmarks.registry import BENCHMARKS, load_config
from tinyperf.benchmarks.common.rules import required_runs, result_name
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common.container import host_path
from tinyperf.tooling.common.errors import UserError
from tinyperf.tooling.common.mllog_reader import read_log


@dataclass
class Run:
  attempt: L.Attempt
  source: Path          # R/results/<system>/<bm>/result_<index>.txt
  packaged: str         # result_<j>.txt


@dataclass
class BenchSelection:
  system: str
  benchmark: str
  ledger: Path
  cfg: PlatformConfig
  runs: list[Run] = field(default_factory=list)
  left_out: list[L.Attempt] = field(default_factory=list)    # finished runs after the first N (keep their logs)
  not_finished: list[L.Attempt] = field(default_factory=list)


def find_ledgers(results: Path, systems: list[str] | None, benchmarks: list[str] | None) -> list[tuple[str, str, Path]]:
  runs = results / T.RUNS
  found = [f for f in T.ledgers(results) if (not systems or f[0] in systems) and (not benchmarks or f[1] in benchmarks)]
  if not found:
    what = f" for {' '.join((systems or []) + (benchmarks or []))}" if systems or benchmarks else ""
    raise UserError(f"{runs}: no run ledgers ({T.RUNS}/<system>/<benchmark>/{T.LEDGER}){what}. `tinyperf run` writes them "
                    f"under its --results directory; pass that directory as --results.")
  return found


def platform_for(system: str, benchmark: str, platform: str | None) -> PlatformConfig:
  """The implementation whose config names the system (what the logs call submission_platform)."""
  if benchmark not in BENCHMARKS:
    raise UserError(f"results for unknown benchmark {benchmark!r} (known: {', '.join(BENCHMARKS)}).")
  if platform:
    cfg = load_config(benchmark, platform, environ={})
    if cfg["system"] != system:
      raise UserError(f"--platform {platform}: its {benchmark} config names system {cfg['system']!r}, not {system!r}.")
    return cfg
  cfgs = [c for c in (load_config(benchmark, p, environ={}) for p in available_platforms(benchmark))
          if c["system"] == system]
  if not cfgs:
    raise UserError(f"no benchmarks/{benchmark}/implementations/*/config.yaml names system {system!r}, so there is no "
                    f"implementation to package with its runs. Add the platform's config or pass --platform.")
  if len(cfgs) > 1:
    raise UserError(f"several {benchmark} platforms name system {system!r} ({', '.join(c.platform for c in cfgs)}); "
                    f"choose one with --platform.")
  return cfgs[0]


def select_runs(results: Path, system: str, benchmark: str, ledger_path: Path, cfg: PlatformConfig) -> BenchSelection:
  """The first N finished runs by start time. Never by score: that would be cherry-picking."""
  n = required_runs(benchmark)
  led = L.Ledger(ledger_path)
  sel = BenchSelection(system, benchmark, ledger_path, cfg)
  done = [a for a in led.attempts if a.status == L.DONE]
  by_index: dict[int, L.Attempt] = {}
  for a in done:
    if a.index in by_index:
      raise UserError(f"{ledger_path}: run {a.index} is finished twice (seeds {by_index[a.index].seed} and {a.seed}) "
                      f"but has one result file; the ledger was edited by hand. Restore it.")
    by_index[a.index] = a
  done.sort(key=lambda a: (a.started, a.index))
  sel.not_finished = [a for a in led.attempts if a.status != L.DONE]
  if len(done) < n:
    raise UserError(f"{host_path(ledger_path)}: {len(done)} finished {benchmark} run(s) on {system}; a package needs exactly {n}. "
                    f"Finish them with `tinyperf run {benchmark} --platform {cfg.platform} --nexp {n} ...` (it resumes).")
  chosen, sel.left_out = done[:n], done[n:]
  bench_dir = T.result_dir(results, system, benchmark)
  seen: dict[int, str] = {}
  for j, a in enumerate(chosen):
    src = bench_dir / result_name(a.index)
    if not src.is_file():
      raise UserError(f"{src}: missing, but {ledger_path} records run {a.index} (seed {a.seed}) as finished. Restore the "
                      f"file from a backup; a package never skips a finished run, since choosing which runs to submit "
                      f"is cherry-picking.")
    if a.sha256 is not None and L.digest(src) != a.sha256:   # mode 000: bad input naming it
      raise UserError(f"{src}: CHANGED since run {a.index} (seed {a.seed}) wrote it (its sha256 differs from "
                      f"{ledger_path}). `tinyperf status --results {shlex.quote(str(results))}` says how to restore it.")
    log = read_log(src)
    if log.benchmark != benchmark:
      raise UserError(f"{src}: logs submission_benchmark {log.benchmark!r} but sits in results/{system}/{benchmark}.")
    seeds = [e.value for e in log.all("seed")]
    if seeds and str(seeds[0]) != str(a.seed):
      raise UserError(f"{src}: logs seed {seeds[0]} but {ledger_path} says run {a.index} used seed {a.seed}; the file "
                      f"is not the run the ledger recorded. Restore the right file.")
    for s in {str(x) for x in seeds} | {str(a.seed)}:
      if s in seen:
        raise UserError(f"seed {s} is used by both {seen[s]} and {src.name} (results/{system}/{benchmark}): every run "
                        f"needs its own seed, and the seed checker rejects the package. Redo one of the runs.")
      seen[s] = src.name
    sel.runs.append(Run(a, src, result_name(j)))
  return sel
