"""The ranked BEAM's choice of kernels (benchmarks/common/beam.py rank): slowest first, until the coverage."""
from tinyperf.benchmarks.common.beam import rank


def test_rank_takes_the_slowest_kernels_until_they_hold_the_coverage():
  cost = {"small": 1.0, "big": 6.0, "mid": 3.0}
  assert rank(cost, 0.5) == ["big"]                  # 6 of 10 >= 50 %
  assert rank(cost, 0.7) == ["big", "mid"]           # 6 < 7, 9 >= 7
  assert rank(cost, 1.0) == ["big", "mid", "small"]


def test_full_coverage_searches_every_kernel_even_those_that_add_nothing_to_the_sum():
  # a ranked search with a budget it never spends (BEAM_BUDGET_S=100000) is the full search: no kernel may be left out
  assert rank({"a": 3.0, "b": 1.0, "untimable": 0.0}, 1.0) == ["a", "b", "untimable"]
  tiny = {"big": 1.0, **{f"k{i}": 1e-17 for i in range(5)}}   # 1.0 + 1e-17 == 1.0 in floating point
  assert len(rank(tiny, 1.0)) == 6


def test_rank_always_searches_one_kernel_and_survives_a_zero_step():
  assert rank({"a": 0.0, "b": 0.0}, 0.01) == ["a"]
  assert rank({"a": 2.0}, 0.01) == ["a"]
