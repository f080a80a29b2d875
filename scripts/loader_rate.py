#!/usr/bin/env python3
"""The ResNet train loader alone, as train_epoch drives it (IMAGE_SIZE 224 crops, 256 a batch), with 1, 2, 4 and all
cores: `python3 scripts/loader_rate.py DATA_DIR [--batches 16]`. Timed after the first batch (the workers' start-up
apart); one JSON line per worker count (img/s), to set against the train step's img/s: does the loader keep up, and
with how many cores."""
from __future__ import annotations
import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
  from benchmarks.resnet.data import DataError, batches, load_manifest
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("data", type=Path, help="prepared ImageNet or synthetic-imagenet folder")
  p.add_argument("--batches", type=int, default=16, help="batches timed per worker count (default 16)")
  args = p.parse_args()
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


if __name__ == "__main__":
  sys.exit(main())
