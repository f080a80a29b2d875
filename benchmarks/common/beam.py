"""Ranked BEAM: search the kernels that hold most of a step's time, within a time budget (issue 20).

tinygrad's BEAM searches every distinct kernel a JIT captures, in program order: ResNet-50's train step has 343, about
an hour of search on 16 cores, over the closed 30-minute INIT limit. With BEAM_COVERAGE < 1 or BEAM_BUDGET_S set, the
JIT's compile is wrapped: each distinct kernel is compiled with tinygrad's hand-coded optimizations and timed alone (on
fresh buffers, as BEAM times a candidate), ranked by time x uses per step, and searched in that order until the
searched kernels hold BEAM_COVERAGE of the step's BEAM=0 time or the process has spent BEAM_BUDGET_S searching; the rest
keep the hand-coded optimizations, except those whose search result is already in tinygrad's cache (CACHEDB): a cached
result costs no search, so a spent budget still takes it (and its lookup is not counted as search time). A search still
running when the budget runs out is stopped (`search_deadline`) and its kernel keeps the hand-coded optimizations, so
BEAM_BUDGET_S bounds INIT's search, not only the start of its last kernel. Search results land in that cache as a plain
search's do. A capture's kernels and their BEAM=0 times can also be written to a file (write_kernels, BEAM_KERNELS_OUT),
which lab.beam_kernels searches later without the trainer.

Leans on tinygrad 0.14.0 internals (engine.jit.compile_linear, codegen.to_program, the search's own timer); the
project pins that version and tests/integration/test_ranked_beam.py runs them.
"""
from __future__ import annotations
import contextlib
import math
import multiprocessing
import re
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from tinyperf.benchmarks.common import runtime


@dataclass
class SearchReport:
  """One JIT compile under ranked BEAM. Times are the kernels' BEAM=0 times x uses per step, in seconds."""
  kernels: int                      # distinct kernels in the captured step
  step_s: float                     # their BEAM=0 time summed: an estimate of the step at BEAM=0
  searched: list[str] = field(default_factory=list)   # kernels given a BEAM result (searched or cached), in order
  covered_s: float = 0.0            # BEAM=0 time of the searched kernels
  search_s: float = 0.0             # wall time of this compile's searches (a cached result's lookup is none)
  cached: int = 0                   # of those, the ones whose result was taken from tinygrad's cache, not searched
  stopped: str = ""                 # why the search stopped before the coverage: "budget", "" if it did not
  left: int = 0                     # ranked kernels the budget left with the hand-coded optimizations (to search next)

  @property
  def covered(self) -> float: return self.covered_s / self.step_s if self.step_s else 1.0

  def summary(self) -> dict:
    """The figures a record keeps (the "beam" metrics line, a bench record's ranked_beam)."""
    return {"kernels": self.kernels, "searched": len(self.searched), "cached": self.cached,
            "covered": round(self.covered, 4), "step_beam0_s": round(self.step_s, 6), "search_s": round(self.search_s, 1),
            "stopped": self.stopped, "left": self.left}

  def line(self) -> str:
    return (f"ranked BEAM: searched {len(self.searched)}/{self.kernels} kernels holding {self.covered:.1%} of the step's "
            f"BEAM=0 time ({self.step_s*1e3:.1f} ms) in {self.search_s:.0f} s" +
            (f" ({self.cached} of them from the cache)" if self.cached else "") +
            (f" (stopped: BEAM_BUDGET_S spent, {self.left} ranked kernels left unsearched)" if self.stopped == "budget" else ""))


# the opening of SearchReport.line() as a log reader finds it: searched, kernels, covered % (lab.upstream reads
# it from tinycorp's log, where the ranked search writes no metrics file)
REPORT_LINE = re.compile(r"ranked BEAM: searched (\d+)/(\d+) kernels holding ([\d.]+)% of the step's BEAM=0 time")
# and of the line each kernel given a result writes (RankedBeam.mark): its rank, the step covered so far %, search
# spent s
KERNEL_LINE = re.compile(r"ranked BEAM (\d+): \S+ [\d.]+ ms at BEAM=0, (?:from the cache|searched) in [\d.]+ s, "
                         r"([\d.]+)% of the step covered, (\d+) s spent")


# what write_kernels writes first, so that a reader knows the file before it unpickles tinygrad's UOps
KERNELS_FORMAT = "tinyperf ranked-BEAM kernels 1"


def kernels_header(path: Path) -> dict:
  """The header write_kernels wrote first (plain values: no tinygrad import), so that its BEAM knobs can be set in the
  environment before read_kernels unpickles tinygrad's UOps. ValueError (with the reason) when path is not such a file
  or another tinygrad wrote it (its kernels' ASTs, and so the cache keys of their results, would not be this one's)."""
  import pickle
  from importlib import metadata
  with open(path, "rb") as f:
    try: header = pickle.load(f)
    except Exception as e: raise ValueError(f"not a kernels file ({type(e).__name__}: {e})") from None  # noqa: BLE001
  if not isinstance(header, dict) or header.get("format") != KERNELS_FORMAT: raise ValueError("not a kernels file")
  if header["tinygrad"] != (ours := metadata.version("tinygrad")):
    raise ValueError(f"written by tinygrad {header['tinygrad']}, and this is {ours}")
  return header


def read_kernels(path: Path) -> list:
  """The captures write_kernels wrote, after its header (kernels_header checks that first)."""
  import pickle
  with open(path, "rb") as f:
    pickle.load(f)
    return pickle.load(f)


def rank(cost_s: dict, coverage: float) -> list:
  """The kernels to search: most expensive first, until they hold `coverage` of the summed cost (at least one).
  Coverage 1 is every kernel: those that timed at 0 and those a rounded running sum would reach `total` without."""
  order, total, picked, acc = sorted(cost_s, key=lambda k: -cost_s[k]), sum(cost_s.values()), [], 0.0
  if coverage >= 1.0: return order
  for k in order:
    if picked and acc >= coverage * total: break
    picked.append(k)
    acc += cost_s[k]
  return picked


class RankedBeam:
  """Wraps the JIT's compile while active (`with rb.active(): ...`). One per process: BEAM_BUDGET_S is what the whole
  process may spend searching, across every capture (train and eval steps). With kernels_out, each capture's kernels
  and their BEAM=0 times are also written there (write_kernels), for a later search without the trainer."""
  def __init__(self, coverage: float = 1.0, budget_s: float | None = None, log=print, kernels_out: Path | None = None):
    self.coverage, self.budget_s, self.log, self.kernels_out = coverage, budget_s, log, kernels_out
    self.spent_s, self.reports, self.captures = 0.0, [], []

  @contextlib.contextmanager
  def active(self):
    import tinygrad.engine.jit as jit
    plain = jit.compile_linear
    def compile_ranked(linear, beam=None, **kw):
      from tinygrad.helpers import BEAM
      amt = BEAM.value if beam is None else beam
      if amt < 1: return plain(linear, beam=beam, **kw)
      return plain(self.mark(linear, amt), beam=0, **kw)
    jit.compile_linear = compile_ranked
    try: yield self
    finally: jit.compile_linear = plain

  def mark(self, linear, amt: int):
    """Search the ranked kernels of one captured linear; returns it with those kernels marked for BEAM `amt` (their
    search results are cached, so the compile that follows reuses them)."""
    from tinygrad.uop.ops import Ops, UOp
    from tinygrad.engine.realize import lower_and_compile, _get_call_to_compile
    calls = [c for c in linear.src if c.op is Ops.CALL and c.src[0].op is Ops.SINK and c.src[0].arg.beam == 0]
    uses = Counter(c.src[0] for c in calls)
    renderer = {c.src[0]: _get_call_to_compile(c)[1] for c in calls}
    lower_and_compile(UOp(Ops.LINEAR, src=tuple(calls)))   # the hand-coded programs, compiled in parallel (cached)
    cost = {s: kernel_time(s, renderer[s], log=self.log) * n for s, n in uses.items()}
    if self.kernels_out is not None:
      device = {c.src[0]: c.device if isinstance(c.device, str) else c.device[0] for c in calls}
      try: self.write_kernels(amt, {s: (device[s], cost[s]) for s in cost})
      except Exception as e:  # noqa: BLE001 -- a file for later searches must not stop this run's search
        self.log(f"ranked BEAM: could not write the kernels to {self.kernels_out} ({type(e).__name__}: {e})")
    searched = self.search(cost, renderer, amt)
    def marked(c):
      if c.op is not Ops.CALL or c.src[0] not in searched: return c
      return c.replace(src=(c.src[0].replace(arg=replace(c.src[0].arg, beam=amt)), *c.src[1:]))
    return linear.replace(src=tuple(marked(c) for c in linear.src))

  def search(self, cost: dict, renderer: dict, amt: int) -> set:
    """The ranked search of one capture's kernels (cost: BEAM=0 time x uses, s; renderer: each kernel's); returns the
    kernels given a result, whose BEAM `amt` results are then in tinygrad's cache."""
    from tinygrad.codegen import to_program
    from tinygrad.helpers import ansistrip
    rep = SearchReport(kernels=len(cost), step_s=sum(cost.values()))
    searched, ranked = set(), rank(cost, self.coverage)
    for s in ranked:
      spent = self.budget_s is not None and self.spent_s >= self.budget_s
      if spent: rep.stopped = "budget"
      beamed = s.replace(arg=replace(s.arg, beam=amt))
      try:   # a result the cache holds is taken, and counted as such, budget or not: a record's "searched" is new work
        t0 = time.perf_counter()
        with cache_only(): prg, from_cache = to_program(beamed, renderer[s]), True
        dt = time.perf_counter() - t0
      except NotCached:
        if spent: continue
        t0 = time.perf_counter()
        try:
          with search_deadline(None if self.budget_s is None else t0 + self.budget_s - self.spent_s):
            prg, from_cache = to_program(beamed, renderer[s]), False
        except SearchDeadline: prg = None
        dt = time.perf_counter() - t0
        self.spent_s += dt
        rep.search_s += dt
        if prg is None:
          rep.stopped = "budget"
          self.log(f"ranked BEAM: the search of a kernel of {cost[s]*1e3:.2f} ms at BEAM=0 was stopped after "
                   f"{dt:.1f} s, when BEAM_BUDGET_S ran out; it keeps the hand-coded optimizations")
          continue
      rep.cached += from_cache
      rep.covered_s += cost[s]
      rep.searched.append(ansistrip(prg.src[0].arg.name))
      searched.add(s)
      self.log(f"ranked BEAM {len(searched)}: {rep.searched[-1]} {cost[s]*1e3:.2f} ms at BEAM=0, "
               f"{'from the cache' if from_cache else 'searched'} in {dt:.1f} s, {rep.covered:.1%} of the step covered, "
               f"{self.spent_s:.0f} s spent")
      runtime.metric("beam_kernel", rank=len(searched), name=rep.searched[-1], beam0_s=round(cost[s], 6),
                     search_s=round(dt, 2), covered=round(rep.covered, 4), spent_s=round(self.spent_s, 1))
    rep.left = len(ranked) - len(searched)
    self.reports.append(rep)
    self.log(rep.line())
    runtime.metric("beam", **rep.summary())
    return searched

  def write_kernels(self, amt: int, kernels: dict):
    """This capture's kernels ({sink: (device, BEAM=0 time x uses)}) added to kernels_out, rewritten whole and
    atomically: a header of plain values (format, tinygrad version, the BEAM knobs the search reads from the
    environment), then the captures, each {"amt": BEAM amount, "kernels": [(sink, device, cost_s), ...] slowest first}
    (tinygrad's UOps pickle)."""
    import os
    import pickle
    from importlib import metadata
    slowest_first = sorted(kernels.items(), key=lambda kv: -kv[1][1])
    self.captures.append({"amt": amt, "kernels": [(sink, device, cost) for sink, (device, cost) in slowest_first]})
    header = {"format": KERNELS_FORMAT, "tinygrad": metadata.version("tinygrad"),
              "env": {k: os.environ[k] for k in runtime.TINYGRAD_BEAM_ENV if k in os.environ}}
    tmp = self.kernels_out.with_name(self.kernels_out.name + ".tmp")
    with open(tmp, "wb") as f:
      pickle.dump(header, f)
      pickle.dump(self.captures, f)
    os.replace(tmp, self.kernels_out)
    self.log(f"ranked BEAM: the {len(kernels)} kernels of capture {len(self.captures)} and their BEAM=0 times written "
             f"to {self.kernels_out}")

  def search_written(self, captures: list):
    """The ranked search of the captures write_kernels wrote (read back by read_kernels), without the trainer: each
    kernel on its device's renderer, as the capture would have searched it (one report each in self.reports)."""
    from tinygrad import Device
    for cap in captures:
      kernels = cap["kernels"]
      self.search({s: cost for s, _, cost in kernels}, {s: Device[d].renderer for s, d, _ in kernels}, cap["amt"])


class SearchDeadline(Exception):
  """A kernel's BEAM search still running when BEAM_BUDGET_S ran out (raised inside search_deadline())."""


@contextlib.contextmanager
def search_deadline(at: float | None):
  """tinygrad's BEAM search inside raises SearchDeadline once time.perf_counter() passes `at`: while it waits for its
  compile workers and before it times a candidate. One kernel's search can run for minutes (406 s for one
  of BERT-large's on an H200, begun with 4 s of the budget left; a worker's per-compile timeout can be lost in a
  __del__, "Exception ignored ... TimeoutException"), so the budget is checked inside the search, not only between
  kernels. The workers are then ended, busy or not; the next search starts new ones. None: no deadline."""
  if at is None:
    yield
    return
  import tinygrad.codegen.opt.search as search
  from tinygrad.engine.worker import terminate_worker_pool
  plain_pool, plain_time = search.get_worker_pool, search._time_program
  def left() -> float:
    if (s := at - time.perf_counter()) <= 0: raise SearchDeadline
    return s
  class BoundedPool:   # the one method beam_search calls on its pool, with the deadline as the wait's timeout
    def __init__(self, pool): self.pool = pool
    def imap_unordered(self, fn, items):
      results = self.pool.imap_unordered(fn, items)
      while True:
        try: yield results.next(timeout=left())
        except StopIteration: return
        except multiprocessing.TimeoutError: raise SearchDeadline from None
  def pool(): return None if (p := plain_pool()) is None else BoundedPool(p)
  def timed(*args, **kw):
    left()
    return plain_time(*args, **kw)
  search.get_worker_pool, search._time_program = pool, timed   # beam_search looks both up in its module at each call
  try: yield
  except SearchDeadline:
    terminate_worker_pool()   # workers still compiling this search's candidates would hold up the next one
    raise
  finally: search.get_worker_pool, search._time_program = plain_pool, plain_time


class NotCached(Exception):
  """A kernel whose BEAM search result is not in tinygrad's cache, met inside cache_only()."""


@contextlib.contextmanager
def cache_only():
  """tinygrad's BEAM inside takes search results from its cache (CACHEDB) and raises NotCached where it would search.
  The cache key is beam_search's own (tinygrad 0.14.0: the kernel's AST, BEAM amount, test size, device, suffix)."""
  import tinygrad.codegen.opt.search as search
  plain = search.beam_search
  def cached(s, rawbufs, var_vals, amt, allow_test_size=True, disable_cache=search.IGNORE_BEAM_CACHE.value):
    key = {"ast": s.ast.key, "amt": amt, "allow_test_size": allow_test_size, "device": s.ren.target.device,
           "suffix": s.ren.suffix}
    if disable_cache or search.diskcache_get("beam_search", key) is None: raise NotCached
    return plain(s, rawbufs, var_vals, amt, allow_test_size, disable_cache)
  search.beam_search = cached   # apply_opts imports it at each call, so the patch is what it meets
  try: yield
  finally: search.beam_search = plain


def kernel_time(sink, renderer, runs: int = 3, log=print) -> float:
  """One kernel's time with tinygrad's hand-coded optimizations, alone on fresh buffers (best of `runs`), as the search
  times a candidate. A kernel that cannot be timed counts 0 (it is not searched first)."""
  from tinygrad.codegen import to_program
  from tinygrad.codegen.opt.postrange import args_from_ast
  from tinygrad.codegen.opt.search import _time_program
  from tinygrad.helpers import Context
  try:
    prg = to_program(sink, renderer)
    bufs, var_vals = args_from_ast(sink, renderer.target.device)
    with Context(ALLOW_DEVICE_USAGE=1):
      t = min(_time_program(prg, var_vals, [b.ensure_allocated() for b in bufs], allow_test_size=False, cnt=runs))
    if not math.isfinite(t): raise RuntimeError("its timed runs failed")
    return t
  except Exception as e:  # noqa: BLE001 -- ranking is advisory: an untimable kernel is searched last, never fatal
    log(f"ranked BEAM: could not time a kernel ({type(e).__name__}: {e}); it ranks last")
    return 0.0


def from_knobs(k: dict) -> RankedBeam | None:
  """The config's ranked search, or None where every kernel is searched (tinygrad's own BEAM)."""
  coverage, budget = k.get("BEAM_COVERAGE", 1.0), k.get("BEAM_BUDGET_S")
  if coverage >= 1.0 and budget is None: return None
  return RankedBeam(coverage, budget, log=lambda s: print(s, flush=True))


def activate_from_environ(environ) -> RankedBeam | None:
  """The ranked search around every JIT compile of this whole process, from BEAM_COVERAGE / BEAM_BUDGET_S in `environ`
  (already checked by load_config): for a trainer that is not ours, tinycorp's under lab/scripts/upstream_beam.sh, so that
  its search is ranked and bounded as our INIT's is; BEAM_KERNELS_OUT=FILE also writes each capture's kernels there
  (write_kernels). None (nothing wrapped) where none is set."""
  k = {key: float(environ[key]) for key in ("BEAM_COVERAGE", "BEAM_BUDGET_S") if environ.get(key)}
  ranked = from_knobs(k)
  if out := environ.get("BEAM_KERNELS_OUT"):   # the captures' kernels for a search without the trainer (write_kernels)
    ranked = ranked or RankedBeam(log=lambda s: print(s, flush=True))
    ranked.kernels_out = Path(out)
  if ranked is not None:
    _PROCESS_WIDE.enter_context(ranked.active())   # held here: a dropped context would be closed, and unwrap, when collected
  return ranked


_PROCESS_WIDE = contextlib.ExitStack()


@contextlib.contextmanager
def beam_context(k: dict, which: str, ranked: RankedBeam | None):
  """BEAM=k[which] for the steps run inside, with the ranked search wrapped around their JIT compile when given."""
  from tinygrad import Context
  with Context(BEAM=k[which]), (ranked.active() if ranked is not None and k[which] >= 1 else contextlib.nullcontext()):
    yield
