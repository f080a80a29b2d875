"""Batches for the BERT training loop, from shards written by `python -m tinyperf.benchmarks.bert.prep`.

train_batches: like the reference input pipeline (a TF-style interleave): the shard list, sorted, is shuffled with
the seed; `cycle` shards are open at once (memory maps: no RAM cost per open shard); samples are taken round-robin,
one from each open shard in turn, in the order stored in the shard (prep already shuffled instances within a part);
an exhausted shard is replaced by the next one in the shuffled list. With loop=True a new pass with a fresh
shuffle starts when the list runs out, so the iterator never ends. Upstream used cycle = number of CPU threads,
which makes the order depend on the machine; here it is a parameter (default 16) so runs are reproducible.

eval_batches: the eval shard in stored order, wrapping around, forever (the reference's iterator also persists
across evals and wraps).
"""
from __future__ import annotations
import os
import random
import shlex
from pathlib import Path
from typing import Iterator

import numpy as np

from tinyperf.benchmarks.bert.shard import FIELD_NAMES, SUFFIX, ShardError, load_shard, to_batch


def train_shard_paths(data_dir: str | os.PathLike) -> list[Path]:
  """Sorted train shards of a prepared data directory (DIR/train/part-*.shard)."""
  d = Path(data_dir) / "train"
  paths = sorted(d.glob(f"part-*{SUFFIX}"))
  if not paths:
    raise ShardError(f"{d}: no train shards (part-*{SUFFIX}). Run `python -m tinyperf.benchmarks.bert.prep pretrain --data "
                     f"{Path(data_dir)}` first.")
  return paths


def check_prepared(cfg, data_dir: Path) -> str:
  """The preflight's look at a data set (benchmarks/preflight.py): what it holds, or a ShardError naming the fix."""
  shards = train_shard_paths(data_dir)
  if not (data_dir / "eval.shard").is_file():
    raise ShardError(f"{data_dir / 'eval.shard'} is missing; run `tinyperf prep wiki eval --data "
                     f"{shlex.quote(str(data_dir))}`.")
  return f"{len(shards)} train shards + eval.shard"


def shard_order(paths: list[str | os.PathLike], seed: int, passes: int = 1) -> list[Path]:
  """The seeded shard order: sorted list shuffled with random.Random(seed); each further pass reshuffles."""
  rng = random.Random(seed)
  base = sorted(Path(p) for p in paths)
  out = []
  for _ in range(passes):
    cur = list(base)
    rng.shuffle(cur)
    out += cur
  return out


def _shard_stream(paths: list[Path], seed: int, loop: bool) -> Iterator[Path]:
  rng = random.Random(seed)
  base = sorted(paths)
  while True:
    cur = list(base)
    rng.shuffle(cur)
    yield from cur
    if not loop: return


def train_batches(paths: list[str | os.PathLike], batch_size: int, max_seq_len: int, max_predictions: int,
                  seed: int = 12345, cycle: int = 16, loop: bool = True, skip_batches: int = 0,
                  vocab_md5: str | None = None) -> Iterator[dict[str, np.ndarray]]:
  """Yield dicts of numpy arrays: input_ids, input_mask, segment_ids (B, max_seq_len) int32; masked_lm_positions,
  masked_lm_ids (B, max_predictions) int32; masked_lm_weights (B, max_predictions) float32; next_sentence_labels
  (B, 1) int32. Every shard is validated (shapes, max_seq_len, max_predictions, vocab md5 when given) when opened.
  skip_batches fast-forwards (for resuming) without reading sample data. With loop=False the last partial batch
  is dropped."""
  if batch_size < 1: raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  paths = [Path(p) for p in paths]
  if not paths: raise ShardError("train_batches: no shard paths given.")
  stream = _shard_stream(paths, seed, loop)
  cache: dict[Path, dict] = {}

  def open_shard(p: Path):
    if p not in cache:   # memory maps are cheap; keep at most the shards in play
      cache[p] = load_shard(p, max_seq_len, max_predictions, mmap=True, vocab_md5=vocab_md5)
    return cache[p]

  slots: list[list] = []   # [path, n_rows, cursor]

  def refill() -> list | None:
    for p in stream:
      n = len(open_shard(p)["input_ids"])
      if n: return [p, n, 0]
    return None

  for _ in range(min(cycle, len(paths))):
    s = refill()
    if s is None: break
    slots.append(s)
  if not slots: raise ShardError(f"train_batches: all {len(paths)} shards are empty.")
  turn, emitted = 0, 0
  while slots:
    picks: list[tuple[Path, int]] = []
    while len(picks) < batch_size and slots:
      turn %= len(slots)
      slot = slots[turn]
      picks.append((slot[0], slot[2]))
      slot[2] += 1
      if slot[2] == slot[1]:
        new = refill()
        if new is None: del slots[turn]; continue
        if slot[0] not in (s[0] for s in slots if s is not slot) and slot[0] != new[0]: cache.pop(slot[0], None)
        slots[turn] = new
      turn += 1
    if len(picks) < batch_size: return
    emitted += 1
    if emitted <= skip_batches: continue
    yield _gather(open_shard, picks)


def _gather(open_shard, picks: list[tuple[Path, int]]) -> dict[str, np.ndarray]:
  B = len(picks)
  by_shard: dict[Path, tuple[list[int], list[int]]] = {}
  for i, (p, r) in enumerate(picks):
    dst, rows = by_shard.setdefault(p, ([], []))
    dst.append(i); rows.append(r)
  out: dict[str, np.ndarray] | None = None
  for p, (dst, rows) in by_shard.items():
    part = to_batch(open_shard(p), np.asarray(rows))
    if out is None: out = {k: np.empty((B,) + v.shape[1:], v.dtype) for k, v in part.items()}
    for k, v in part.items(): out[k][dst] = v
  assert out is not None and set(out) == set(FIELD_NAMES)
  return out


def eval_batches(path: str | os.PathLike, batch_size: int, max_seq_len: int, max_predictions: int,
                 vocab_md5: str | None = None) -> Iterator[dict[str, np.ndarray]]:
  """Eval shard in stored order, batch_size rows at a time, wrapping around at the end; never ends."""
  shard = load_shard(path, max_seq_len, max_predictions, mmap=True, vocab_md5=vocab_md5)
  n = len(shard["input_ids"])
  if n == 0: raise ShardError(f"{path}: the eval shard holds no samples; recreate it with prep eval.")
  start = 0
  while True:
    rows = (start + np.arange(batch_size)) % n
    start = (start + batch_size) % n
    yield to_batch(shard, rows)
