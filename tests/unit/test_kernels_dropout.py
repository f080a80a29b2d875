"""The Triton kernels' dropout mask (benchmarks/kernels/dropout.py) in Triton's interpreter: the integer threshold keeps
exactly what tl.rand's float comparison keeps, a group of 4 takes Philox's four outputs in column order, the mask of a
tile depends on the element and not on the tile, and both groupings keep 1 - p."""
from __future__ import annotations
import contextlib
import os
os.environ["TRITON_INTERPRET"] = "1"   # before Triton's first import: its language functions are then interpreted too

import numpy as np
import pytest

triton = pytest.importorskip("triton", reason="Triton is installed by ./test.sh (requirements-kernels.lock)")
import triton.language as tl                                 # noqa: E402
from triton.language.random import uint_to_uniform_float     # noqa: E402
from triton.runtime.interpreter import InterpretedFunction   # noqa: E402

from tinyperf.benchmarks.kernels import attention as at      # noqa: E402
from tinyperf.benchmarks.kernels import dropout as dr        # noqa: E402
from tests.unit.test_kernels import HostArray                # noqa: E402


def mask_kernel(seed, out, N: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, P_DROP: tl.constexpr,
                RNG_GROUP: tl.constexpr):
  """One (BM, BN) tile of the keep mask of rows of N per program (grid: row blocks, column blocks)."""
  rows = tl.program_id(0) * BM + tl.arange(0, BM)
  col0 = tl.program_id(1) * BN
  keep = dr.keep_mask(tl.load(seed), rows, col0, N, BN, P_DROP, RNG_GROUP)
  tl.store(out + rows[:, None] * N + col0 + tl.arange(0, BN)[None, :], keep.to(tl.int8))


def keep_mask(M: int, N: int, p: float, seed: int, group: int, tile: tuple[int, int] = (16, 16)) -> np.ndarray:
  """The (M, N) keep mask the kernels draw, drawn here in tiles of (BM, BN)."""
  BM, BN = tile
  out = np.zeros((M, N), np.int8)
  InterpretedFunction(mask_kernel)[(M // BM, N // BN)](HostArray(np.array([seed], np.uint32)), HostArray(out), N, BM,
                                                       BN, p, group)
  return out.astype(bool)


def philox4_kernel(seed, out, n: tl.constexpr):
  """Philox's four uint32 outputs at offsets 0 .. n-1, as rows of out (4, n)."""
  offs = tl.arange(0, n)
  u0, u1, u2, u3 = tl.randint4x(tl.load(seed), offs)
  tl.store(out + offs, u0)
  tl.store(out + n + offs, u1)
  tl.store(out + 2 * n + offs, u2)
  tl.store(out + 3 * n + offs, u3)


def compare_kernel(u, by_float, by_int, n: tl.constexpr, P_DROP: tl.constexpr):
  offs = tl.arange(0, n)
  x = tl.load(u + offs)
  tl.store(by_float + offs, (uint_to_uniform_float(x) >= P_DROP).to(tl.int8))
  tl.store(by_int + offs, dr.keep_bits(x, P_DROP).to(tl.int8))


@pytest.mark.parametrize("p", [0.1, 0.25, 0.3, 1e-9])
def test_the_integer_threshold_keeps_what_tl_rands_float_comparison_keeps(p):
  T = dr.keep_threshold(p)
  edges = [0, 1, T - 2, T - 1, T, T + 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1]
  edges += [2 ** 32 - 1 - x for x in (T - 2, T - 1, T, T + 1)]   # the negative int32s fold onto the same threshold
  rng = np.random.default_rng(0)
  u = np.array(edges + list(rng.integers(0, 2 ** 32, 4096 - len(edges))), np.uint64).astype(np.uint32)
  by_float, by_int = np.zeros(len(u), np.int8), np.zeros(len(u), np.int8)
  InterpretedFunction(compare_kernel)[(1,)](*map(HostArray, (u, by_float, by_int)), len(u), p)
  np.testing.assert_array_equal(by_int, by_float)
  assert not by_int[2] and not by_int[3] and by_int[4]   # the threshold is the least kept value: tested at its edge


@pytest.mark.parametrize("seed", [3, 2 ** 31 + 5])
def test_a_group_of_four_takes_philoxs_four_outputs_in_column_order(seed):
  M, N, p = 8, 64, 0.3
  u = np.zeros((4, M * N // 4), np.uint32)
  InterpretedFunction(philox4_kernel)[(1,)](HostArray(np.array([seed], np.uint32)), HostArray(u), M * N // 4)
  # offset i * (N / 4) + j // 4 is group g = (i * N + j) // 4 of the row-major order; output j % 4 of it
  u = u.T.reshape(M, N).astype(np.int64)
  folded = np.where(u < 2 ** 31, u, 2 ** 32 - 1 - u)   # tl.rand's float of it, on the host
  want = folded.astype(np.float32) * dr.SCALE >= np.float32(p)
  np.testing.assert_array_equal(keep_mask(M, N, p, seed, 4, tile=(M, 16)), want)


@pytest.mark.parametrize("group", dr.GROUPS)
def test_the_mask_depends_on_the_element_not_the_tile_and_keeps_one_minus_p(group):
  a = keep_mask(64, 128, 0.1, 7, group, tile=(16, 64))
  np.testing.assert_array_equal(a, keep_mask(64, 128, 0.1, 7, group, tile=(32, 16)))
  assert (a != keep_mask(64, 128, 0.1, 8, group, tile=(16, 64))).mean() > 0.1   # another seed, another mask
  big = keep_mask(512, 512, 0.1, 11, group, tile=(64, 512))
  sigma = (0.1 * 0.9 / big.size) ** 0.5   # 262144 draws: 5.9e-4
  assert abs(big.mean() - 0.9) < 4 * sigma
  for lane in range(4):   # each of Philox's four outputs alone (a quarter of the draws)
    assert abs(big[:, lane::4].mean() - 0.9) < 8 * sigma


def test_tiles_that_split_a_group_are_refused():
  with pytest.raises(ValueError, match="multiples of 4"):
    dr.check_group(4, 6, 64, "attention fwd")
  with pytest.raises(ValueError, match="RNG_GROUP"):
    dr.check_group(2, 64, 64, "attention fwd")
  dr.check_group(1, 6, 6, "attention fwd")   # one element per call: any tile
  # attention's own check: L 6 makes the tile 6 keys wide, which no group of 4 divides (refused before compiling)
  with pytest.raises(ValueError, match="multiples of 4"):
    at.compile_attention("fwd", 1, 6, 8, 0.1, 90)


def test_a_step_seeds_its_dropout_sites_from_one_draw():
  """Inside step_seeds the sites' seeds are one draw + i * SITE_STRIDE (distinct, a new draw per block), in fewer
  kernels than a draw per site; outside a block each site draws its own."""
  from tinygrad import GlobalCounters, Tensor
  from tinyperf.benchmarks.kernels import program as prg
  Tensor.randint(1, high=2).realize()   # the device's RNG state is made by its first draw, once per process
  def sites(n: int, block: bool) -> tuple[list[int], int]:
    GlobalCounters.reset()
    with dr.step_seeds() if block else contextlib.nullcontext():
      seeds = [prg.device_seeds(dr.next_seed("CPU"), "CPU") for _ in range(n)]
    Tensor.realize(*seeds)
    return [s.item() for s in seeds], GlobalCounters.kernel_count
  sites(6, True)   # the first block compiles the sites' kernels
  (a, kernels), (b, _) = sites(6, True), sites(6, True)
  _, alone = sites(6, False)
  for s in (a, b): assert [(x - s[0]) % 2 ** 32 for x in s] == [i * dr.SITE_STRIDE % 2 ** 32 for i in range(6)]
  assert len(set(a)) == 6 and a[0] != b[0]
  assert kernels <= 6 + 3 < alone, (kernels, alone)
  assert not dr._STEPS   # every block closed


@pytest.mark.parametrize("kernels,blocks", [("tinygrad", []), ("triton", [1] * 6)])
def test_bert_under_triton_seeds_a_forwards_sites_from_one_block(monkeypatch, kernels, blocks):
  """BERT's forward under KERNELS=triton asks for each attention's and each residual LayerNorm's seed inside one
  step_seeds block (3 sites a layer); under KERNELS=tinygrad it asks for none."""
  from tinygrad import Context, Tensor, dtypes
  from tinyperf.benchmarks.bert.model import BertConfig, BertForPretraining
  seen = []
  monkeypatch.setattr(dr, "next_seed", lambda device, real=dr.next_seed: seen.append(len(dr._STEPS)) or real(device))
  c = BertConfig(layers=2, hidden=16, heads=2, intermediate=32, vocab=50, max_positions=16, kernels=kernels)
  ids = Tensor.zeros(2, 8, dtype=dtypes.int32)
  with Context(TRAINING=1):   # dropout acts only in training
    BertForPretraining(c)(ids, ids, ids + 1, Tensor.zeros(2, 3, dtype=dtypes.int32))   # shapes only: nothing realized
  assert seen == blocks
