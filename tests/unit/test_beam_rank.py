"""The ranked BEAM's choice of kernels (benchmarks/common/beam.py rank): slowest first, until the coverage."""
from benchmarks.common.beam import rank


def test_rank_takes_the_slowest_kernels_until_they_hold_the_coverage():
  cost = {"small": 1.0, "big": 6.0, "mid": 3.0}
  assert rank(cost, 0.5) == ["big"]                  # 6 of 10 >= 50 %
  assert rank(cost, 0.7) == ["big", "mid"]           # 6 < 7, 9 >= 7
  assert rank(cost, 1.0) == ["big", "mid", "small"]


def test_rank_always_searches_one_kernel_and_survives_a_zero_step():
  assert rank({"a": 0.0, "b": 0.0}, 0.01) == ["a"]
  assert rank({"a": 2.0}, 0.01) == ["a"]
