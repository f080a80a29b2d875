"""Ranked BEAM on tinygrad's CPU device (benchmarks/common/beam.py): a jitted step of one large matmul and small
elementwise kernels, captured under BEAM=1. With BEAM_COVERAGE 0.5 only the matmul is searched (it holds most of the
step at BEAM=0) and the step computes what the plain BEAM=0 step computes; with BEAM_BUDGET_S 0 nothing is searched,
but what tinygrad's cache holds is taken; a search still running when BEAM_BUDGET_S runs out is stopped there. The
search's metrics lines are what `tinyperf report` plots."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tinyperf.benchmarks.common import runtime
from tinyperf.benchmarks.common.beam import RankedBeam
from tests.conftest import REPO
from tinyperf.tooling.ship.report import read_beam_search
from lab.upstream import summary

pytestmark = pytest.mark.integration


def captured_step(n: int, rb: RankedBeam | None, beam: int, cachelevel: int = 0):
  from tinygrad import Context, Tensor, TinyJit
  w = Tensor(np.linspace(-1, 1, n * n, dtype=np.float32).reshape(n, n)).realize()
  @TinyJit
  def step(x):
    y = (x @ w).contiguous()                       # the large kernel: n^3 multiply-adds
    return (y.relu() + 1).realize(), (x * 3 - 1).realize()   # two small elementwise kernels
  x = Tensor(np.linspace(0, 1, n * n, dtype=np.float32).reshape(n, n))
  run = lambda: [t.numpy() for t in step(x.contiguous().realize())]
  with Context(BEAM=0): run()                      # the uncaptured first call, as IGNORE_JIT_FIRST_BEAM=1 runs it
  # CACHELEVEL 0: no search result from tinygrad's disk cache, so the search really runs
  with Context(BEAM=beam, CACHELEVEL=cachelevel), (rb.active() if rb else Context()):
    run()                                          # the capture: ranked, searched, compiled
    return run()                                   # a replay


def test_ranked_beam_searches_only_the_kernel_holding_most_of_the_step(tmp_path, monkeypatch):
  lines = []
  rb = RankedBeam(coverage=0.5, log=lines.append)
  monkeypatch.setattr(runtime, "_metrics", None)
  runtime.open_metrics(tmp_path / "result.txt")
  try: got = captured_step(96, rb, beam=1)
  finally: runtime._metrics.close()
  (rep,) = rb.reports
  assert rep.kernels == 3 and len(rep.searched) == 1 and rep.covered >= 0.5 and rep.stopped == "" and rep.left == 0
  assert rep.searched[0].startswith("r_"), rep.searched   # the reduce: the matmul, not an elementwise kernel
  assert rep.search_s > 0 and rb.spent_s == rep.search_s
  assert any(line.startswith("ranked BEAM: searched 1/3 kernels") for line in lines), lines
  # a log read while the search goes on (lab.upstream, on tinycorp's trainer): its per-kernel lines say how far
  so_far = summary("\n".join(line for line in lines if not line.startswith("ranked BEAM: searched")))["ranked_so_far"]
  assert so_far["given"] == 1 and abs(so_far["covered"] - rep.covered) <= 0.0005 + 1e-9, (so_far, lines)
  assert abs(so_far["spent_s"] - rb.spent_s) <= 0.5, (so_far, rb.spent_s)
  (point,) = read_beam_search(runtime.metrics_path(tmp_path / "result.txt"))
  assert point == (round(rep.search_s, 1), round(rep.covered, 4))
  want = captured_step(96, None, beam=0)
  for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-5)


def test_a_spent_budget_searches_nothing():
  rb = RankedBeam(coverage=1.0, budget_s=0, log=lambda s: None)
  captured_step(64, rb, beam=1)
  (rep,) = rb.reports
  assert rep.kernels == 3 and rep.searched == [] and rep.stopped == "budget" and rep.covered == 0.0
  assert rep.left == 3 and "3 ranked kernels left unsearched" in rep.line()   # what the next search has to do


def test_a_spent_budget_still_takes_the_cached_results(tmp_path, monkeypatch):
  import tinygrad.helpers
  import tinygrad.codegen
  monkeypatch.setattr(tinygrad.helpers, "CACHEDB", str(tmp_path / "cache.db"))   # an empty cache of this test's own
  monkeypatch.setattr(tinygrad.helpers, "_db_connection", None)
  monkeypatch.setattr(tinygrad.helpers, "_db_tables", set())   # tables the process made in the other cache are not here
  first = RankedBeam(coverage=0.5, log=lambda s: None)
  captured_step(80, first, beam=1, cachelevel=1)       # searches the matmul, and the cache keeps its result
  (rep,) = first.reports
  assert len(rep.searched) == 1 and rep.search_s > 0
  monkeypatch.setattr(tinygrad.codegen, "to_program_cache", {})  # as a new process: only the disk cache remembers
  lines = []
  again = RankedBeam(coverage=1.0, budget_s=0, log=lines.append)
  got = captured_step(80, again, beam=1, cachelevel=1)
  (rep2,) = again.reports
  assert rep2.searched == rep.searched and rep2.cached == 1 and rep2.stopped == "budget" and rep2.left == 2, lines
  assert rep2.search_s == 0 and again.spent_s == 0, (rep2.search_s, again.spent_s)  # taken, not searched again
  assert any("from the cache" in line for line in lines) and "1 of them from the cache" in lines[-1], lines
  want = captured_step(80, None, beam=0)
  for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-5)
  # with budget left, a cached result is still counted as taken, not searched: a record's "searched" is new work
  monkeypatch.setattr(tinygrad.codegen, "to_program_cache", {})
  unspent = RankedBeam(coverage=0.5, budget_s=1000, log=lambda s: None)
  captured_step(80, unspent, beam=1, cachelevel=1)
  (rep3,) = unspent.reports
  assert rep3.searched == rep.searched and rep3.cached == 1 and rep3.stopped == "", rep3


@pytest.mark.parametrize("parallel", [0, 2])   # the candidates compiled in this process, or by tinygrad's worker pool
def test_a_search_running_when_the_budget_runs_out_is_stopped_there(parallel, monkeypatch):
  import tinygrad.codegen
  from tinygrad import Context
  monkeypatch.setattr(tinygrad.codegen, "to_program_cache", {})   # no program of another test's search
  lines = []
  rb = RankedBeam(coverage=1.0, budget_s=0.3, log=lines.append)
  with Context(PARALLEL=parallel): got = captured_step(112, rb, beam=1)   # an unbounded search of the matmul: seconds
  (rep,) = rb.reports
  assert rep.searched == [] and rep.stopped == "budget", lines
  assert 0.3 <= rb.spent_s < 0.3 + 3.0, rb.spent_s           # stopped at the deadline, give or take one candidate
  assert any("was stopped after" in line and "keeps the hand-coded optimizations" in line for line in lines), lines
  want = captured_step(112, None, beam=0)
  for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-5)
  # the next search gets a working pool: the workers the deadline ended are replaced
  rb2 = RankedBeam(coverage=0.5, log=lambda s: None)
  with Context(PARALLEL=parallel): captured_step(72, rb2, beam=1)
  assert len(rb2.reports[0].searched) == 1


def test_a_kernels_search_stopped_by_sigterm_to_its_group_saves_and_leaves(tmp_path):
  """lab.beam_kernels stopped as Slurm or `kill -- -PGID` stops it: SIGTERM reaches BEAM's compile workers too
  (multiprocessing's Pool.terminate then hung on a lock a killed worker held): it saves, says so, exits 130, and nothing
  of it is left running."""
  captured_step(64, RankedBeam(budget_s=0, kernels_out=tmp_path / "k.pkl", log=lambda s: None), beam=1)
  p = subprocess.Popen([sys.executable, "-m", "lab.beam_kernels", "k.pkl", "--cache", "c.db"], cwd=tmp_path,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                       env={**os.environ, "PYTHONPATH": str(REPO), "PARALLEL": "2"})
  try:
    while "carried in" not in p.stdout.readline(): pass
    time.sleep(1.5)                             # the matmul's search runs on the pool's workers now (seconds)
    os.killpg(p.pid, signal.SIGTERM)
    out, err = p.communicate(timeout=60)
  finally:
    if p.poll() is None: os.killpg(p.pid, signal.SIGKILL)
  assert p.returncode == 130 and "stopped by SIGTERM; what was searched is kept in c.db" in err, (out, err)
  assert "beam_kernels.py" not in err, err      # no traceback of its own (a worker the pool was starting may print one)
  for _ in range(100):                          # workers the pool was starting end when they find its pipes closed
    if subprocess.run(["pgrep", "-g", str(p.pid)], capture_output=True).returncode == 1: break
    time.sleep(0.1)
  assert subprocess.run(["pgrep", "-g", str(p.pid)], capture_output=True).returncode == 1   # nothing left behind
  assert Path(tmp_path / "c.db").is_file()


def test_the_device_check_of_a_kernels_file_passes_on_the_cpu(tmp_path):
  """lab/scripts/check_beam_kernels.py, as PERFORMANCE.md has it run on a GPU before a lease relies on a kernels file: on
  the CPU, typed from another directory, the second capture takes every kernel from the cache beam_kernels filled."""
  r = subprocess.run([sys.executable, str(REPO / "lab" / "scripts" / "check_beam_kernels.py"), "--n", "32"], cwd=tmp_path,
                     capture_output=True, text=True, timeout=600, env={**os.environ, "DEV": "CPU"})
  assert r.returncode == 0, r.stdout + r.stderr
  assert r.stdout.strip() == "check_beam_kernels: all 2 kernels of the capture came from the cache beam_kernels filled " \
                             "(DEV=CPU): OK", r.stdout
  assert "searched in" in r.stderr and list(tmp_path.iterdir()) == []   # nothing left in the caller's directory
