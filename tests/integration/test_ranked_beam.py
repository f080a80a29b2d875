"""Ranked BEAM on tinygrad's CPU device (benchmarks/common/beam.py): a jitted step of one large matmul and small
elementwise kernels, captured under BEAM=1. With BEAM_COVERAGE 0.5 only the matmul is searched (it holds most of the
step at BEAM=0) and the step computes what the plain BEAM=0 step computes; with BEAM_BUDGET_S 0 nothing is searched.
The search's metrics lines are what `tinyperf report` plots."""
import numpy as np
import pytest

from benchmarks.common import runtime
from benchmarks.common.beam import RankedBeam
from tooling.perf.report import read_beam_search

pytestmark = pytest.mark.integration


def captured_step(n: int, rb: RankedBeam | None, beam: int):
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
  with Context(BEAM=beam, CACHELEVEL=0), (rb.active() if rb else Context()):
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
  assert rep.kernels == 3 and len(rep.searched) == 1 and rep.covered >= 0.5 and rep.stopped == ""
  assert rep.searched[0].startswith("r_"), rep.searched   # the reduce: the matmul, not an elementwise kernel
  assert rep.search_s > 0 and rb.spent_s == rep.search_s
  assert any(line.startswith("ranked BEAM: searched 1/3 kernels") for line in lines), lines
  (point,) = read_beam_search(runtime.metrics_path(tmp_path / "result.txt"))
  assert point == (round(rep.search_s, 1), round(rep.covered, 4))
  want = captured_step(96, None, beam=0)
  for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-5)


def test_a_spent_budget_searches_nothing():
  rb = RankedBeam(coverage=1.0, budget_s=0, log=lambda s: None)
  captured_step(64, rb, beam=1)
  (rep,) = rb.reports
  assert rep.kernels == 3 and rep.searched == [] and rep.stopped == "budget" and rep.covered == 0.0
