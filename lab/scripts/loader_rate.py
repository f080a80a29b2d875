#!/usr/bin/env python3
"""The ResNet train loader alone, as train_epoch drives it (IMAGE_SIZE 224 crops, 256 a batch), with 1, 2, 4 and all
cores: `python3 lab/scripts/loader_rate.py DATA_DIR [--batches 16]`. Timed after the first batch (the workers' start-up
apart); one JSON line per worker count (img/s), to set against the train step's img/s: does the loader keep up, and
with how many cores. `--bert BS` times BERT's loader instead (train_batches over DATA_DIR/train, in-process as RUN
drives it; seq/s at BS sequences a batch, MAX_SEQ_LEN/MAX_PREDICTIONS read from the shards)."""
from __future__ import annotations
import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python3 lab/scripts/loader_rate.py` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("data", type=Path, help="prepared ImageNet or synthetic-imagenet folder")
  p.add_argument("--batches", type=int, default=16, help="batches timed per worker count (default 16)")
  p.add_argument("--bert", type=int, metavar="BS", help="time BERT's train loader at BS sequences a batch")
  return p


def main() -> int:
  from tinyperf.benchmarks.resnet.data import DataError, batches, load_manifest
  args = build_parser().parse_args()
  if args.bert: return bert_rate(args.data, args.bert, args.batches)
  try: tr = load_manifest(args.data)["train"]
  except DataError as e:
    print(f"loader_rate: error: {e}", file=sys.stderr)
    return 2
  for w in sorted({1, 2, 4, len(os.sched_getaffinity(0))}):
    with batches(tr.files, tr.labels, 256, train=True, seed=1, epoch=w, image_size=224, num_workers=w,
                 ring_batches=16) as it:
      t0, n = time.perf_counter(), 0
      for i, (_, _, k) in enumerate(it):
        if i == 0: t1 = time.perf_counter()  # workers started (spawn) and the first batch decoded
        else: n += k
        if i + 1 == args.batches: break
      dt = time.perf_counter() - t1
    print(json.dumps({"loader_workers": w, "first_batch_s": round(t1 - t0, 2), "images_after_first": n,
                      "seconds": round(dt, 2), "img_per_s": round(n / dt, 1) if n else None}), flush=True)
  return 0


def bert_rate(data: Path, bs: int, n_batches: int) -> int:
  from tinyperf.benchmarks.bert.data import train_batches, train_shard_paths
  from tinyperf.benchmarks.bert.shard import ShardError, read_header
  try:
    paths = train_shard_paths(data)
    h = read_header(paths[0])
    it = train_batches(paths, bs, h["max_seq_len"], h["max_predictions"], seed=1)
    t0 = time.perf_counter()
    next(it)
    t1 = time.perf_counter()
    for _ in range(n_batches): next(it)
  except (ShardError, KeyError) as e:
    print(f"loader_rate: error: {e}", file=sys.stderr)
    return 2
  dt = time.perf_counter() - t1
  print(json.dumps({"loader": "bert", "shards": len(paths), "bs": bs, "first_batch_s": round(t1 - t0, 3),
                    "seqs_after_first": n_batches * bs, "seconds": round(dt, 3),
                    "seq_per_s": round(n_batches * bs / dt, 1)}), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
