"""The dropout masks of the Triton kernels (attention.py, layernorm.py), drawn in-kernel from a seed.

Element j of row i (rows of N elements, numbered across the whole tensor) is kept with probability 1 - p. RNG_GROUP
picks how its 32 random bits are drawn:
  4: one Philox4x32-10 call (tl.randint4x) per 4 adjacent elements of a row, at offset i * (N // 4) + j // 4, its four
     outputs going to columns 4g, 4g+1, 4g+2, 4g+3 in order: a quarter of the integer work of
  1: one call per element, tl.rand(seed, i * N + j) >= p, keeping one output of four (the first kernels' draw).
Both keep an element exactly when tl.rand's float of its 32 bits is >= p (keep_threshold): the same keep probability.
The mask is a function of the seed and the element's (row, column) only, so kernels with other tile shapes (the
forward's and the backwards') draw the same mask, given tiles whose width and first column are multiples of the group.
A kernel may also store a drawn mask as bits for another to read (attention's MASK_MODE "bits"): rows of N // 32 uint32
words, bit c of word w of a row holding its column 32 * w + c (store_bits, load_bits).
"""
from __future__ import annotations
import contextlib

import numpy as np
from tinygrad import Tensor, dtypes

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: no Triton kernel is built there
  triton = None

RNG_GROUP = 4   # elements per Philox call in the kernels built; a module global, like TILES, for the benches to vary
GROUPS = (1, 4)
SCALE = np.float32(4.6566127342e-10)   # tl.rand's uint_to_uniform_float: the folded 31 bits times this, in fp32


# ---- the seeds: one draw of tinygrad's RNG per step ----
SITE_STRIDE = 0x85EBCA6B   # between the seeds of a step's consecutive dropout sites (odd: 2^32 sites before a repeat)
_STEPS: list[list] = []    # the open step_seeds blocks, innermost last: [the block's draw or None, sites served]


@contextlib.contextmanager
def step_seeds():
  """Inside, next_seed serves every dropout site from one draw of tinygrad's RNG: site i (in call order) gets the draw +
  i * SITE_STRIDE, one small kernel, where a draw per site took three (the draw, the RNG counter's update, the cast):
  BERT-large's 72 sites of a step in 72 kernels and one draw instead of 216."""
  _STEPS.append([None, 0])
  try: yield
  finally: _STEPS.pop()


def next_seed(device: str) -> Tensor:
  """A (1,) dropout seed on device (one device): the next site's of the open step_seeds block, else a draw of its own."""
  if not _STEPS: return Tensor.randint(1, high=2 ** 31 - 1, device=device)
  block = _STEPS[-1]
  if block[0] is None: block[0] = Tensor.randint(1, high=2 ** 31 - 1, device=device).cast(dtypes.uint32)
  i, block[1] = block[1], block[1] + 1
  # a constant in the site's kernel, no buffer: a step captured on its first call (runtime.captured_jit) has nothing
  # of its own to make (a realized constant made there would be captured as a copy, replayed at every step)
  return block[0] + i * SITE_STRIDE % 2 ** 32


def keep_threshold(p: float) -> int:
  """The least folded value x in [0, 2^31) that tl.rand maps to a float >= p (fp32(x) * SCALE >= fp32(p), monotone in
  x): tl.rand(seed, i) >= p exactly when the fold of Philox's uint32 u (u below 2^31, else 2^32 - 1 - u) is >= it."""
  p32 = np.float32(getattr(p, "value", p))   # a Triton constexpr at compile time, a float on the host
  lo, hi = 0, 2 ** 31   # the answer is in [lo, hi]; hi: no x qualifies (p >= 1)
  while lo < hi:
    mid = (lo + hi) // 2
    if np.float32(mid) * SCALE >= p32: hi = mid
    else: lo = mid + 1
  return lo


def check_group(group: int, width: int, row: int, what: str):
  """Raise ValueError unless a tile of width columns and rows of row elements can draw groups of group: whole groups
  within a row, tiles starting on a group's first column."""
  if group not in GROUPS: raise ValueError(f"{what}: RNG_GROUP {group} is not one of {GROUPS}")
  if width % group or row % group:
    raise ValueError(f"{what}: the dropout draws {group} adjacent elements per Philox call; the tile width {width} "
                     f"and the row length {row} must be multiples of {group}")


def rng_groups(text: str) -> tuple[int, ...]:
  """A comma-separated list of GROUPS ("1,4"), as the benches take it; ValueError for anything else."""
  groups = tuple(int(g) for g in text.split(","))
  if any(g not in GROUPS for g in groups): raise ValueError(f"{text!r}: elements per Philox call are one of {GROUPS}")
  return groups


def keep_bits(u, P_DROP: tl.constexpr):
  """Whether tl.rand's float of the uint32 u is >= P_DROP, in integers: T <= u <= 2^32 - 1 - T is one unsigned
  compare of u - T (wrapping) against the span."""
  T: tl.constexpr = _threshold(P_DROP)
  return (u - tl.full((), T, tl.uint32)) <= tl.full((), 2 ** 32 - 1 - 2 * T, tl.uint32)


def keep_mask(seed, rows, col0, N: tl.constexpr, BN: tl.constexpr, P_DROP: tl.constexpr, RNG_GROUP: tl.constexpr):
  """The (len(rows), BN) keep mask of columns col0 .. col0 + BN - 1 of rows (absolute row numbers, (BM,) int32) of
  N elements each, from the uint32 seed."""
  if RNG_GROUP == 1:
    keep = tl.rand(seed, rows[:, None] * N + col0 + tl.arange(0, BN)[None, :]) >= P_DROP
  else:
    tl.static_assert(RNG_GROUP == 4, "RNG_GROUP is 1 or 4")
    tl.static_assert(BN % 4 == 0 and N % 4 == 0, "RNG_GROUP 4 draws whole groups of 4 columns")
    u0, u1, u2, u3 = tl.randint4x(seed, rows[:, None] * (N // 4) + col0 // 4 + tl.arange(0, BN // 4)[None, :])
    # (BM, BN/4, 2, 2) indexed [g, a, b] = u_(2a + b): row-major, column 4g + 2a + b gets output 2a + b
    u = tl.reshape(tl.join(tl.join(u0, u2), tl.join(u1, u3)), (rows.shape[0], BN))
    keep = keep_bits(u, P_DROP)
  return keep


WORD = 32   # mask bits per stored uint32 word
_WORD = tl.constexpr(WORD) if triton is not None else WORD   # for the kernels: they read constexpr globals only


def check_bits(width: int, what: str):
  """Raise ValueError unless a tile of width columns stores or loads whole words of the mask's bits."""
  if width % WORD:
    raise ValueError(f"{what}: the dropout mask is stored as bits, {WORD} columns per word; the tile width {width} "
                     f"must be a multiple of {WORD} (a larger tile in attention.TILES, or MASK_MODE 'redraw')")


def _words(bits, rows, col0, N: tl.constexpr, BN: tl.constexpr):
  """Pointers to the (len(rows), BN / 32) words of columns col0 .. col0 + BN - 1 of rows, in rows of N / 32 words."""
  return bits + rows[:, None] * (N // _WORD) + col0 // _WORD + tl.arange(0, BN // _WORD)[None, :]


def store_bits(bits, rows, col0, N: tl.constexpr, BN: tl.constexpr, keep):
  """Store keep, the (len(rows), BN) mask of columns col0 .. col0 + BN - 1, as bits."""
  BM: tl.constexpr = rows.shape[0]
  shifted = tl.reshape(keep.to(tl.uint32), (BM, BN // _WORD, _WORD)) << tl.arange(0, _WORD).to(tl.uint32)[None, None, :]
  words = tl.sum(shifted, 2)   # (BM, BN / 32): the shifted bits are distinct, so their sum is their OR
  tl.store(_words(bits, rows, col0, N, BN), words)


def load_bits(bits, rows, col0, N: tl.constexpr, BN: tl.constexpr):
  """The (len(rows), BN) keep mask of columns col0 .. col0 + BN - 1 that store_bits stored."""
  words = tl.load(_words(bits, rows, col0, N, BN))                             # (BM, BN / 32)
  unpacked = (words[:, :, None] >> tl.arange(0, _WORD).to(tl.uint32)[None, None, :]) & 1
  return tl.reshape(unpacked, (rows.shape[0], BN)) != 0


if triton is not None:   # jitted before the kernels that call them (Triton functions call Triton functions)
  _threshold = triton.constexpr_function(keep_threshold)
  keep_bits, keep_mask = triton.jit(keep_bits), triton.jit(keep_mask)
  _words, store_bits, load_bits = triton.jit(_words), triton.jit(store_bits), triton.jit(load_bits)
