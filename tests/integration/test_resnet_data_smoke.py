"""The CPU smoke's data path at full smoke size: `prep synthetic-imagenet` defaults -> real loader at 32x32 -> learnable."""
from __future__ import annotations
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinyperf.benchmarks.resnet import data as D
from tinyperf.benchmarks.resnet import prep as P

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_smoke_data_through_the_loader_is_learnable(tmp_path):
  out = tmp_path / "syn"
  r = subprocess.run([sys.executable, "-m", "tinyperf.benchmarks.resnet.prep", "synthetic-imagenet", "--out", str(out)], cwd=ROOT,
                     capture_output=True, text=True)
  assert r.returncode == 0, r.stderr
  m = D.load_manifest(out)
  assert len(m["train"]) == 4 * 256 and len(m["val"]) == 4 * 64

  def features(split, train, epoch):
    xs, ys = [], []
    with D.batches(split.files, split.labels, 64, train, 1234, epoch, 32, 2, 4) as it:
      for x, y, n in it:
        xs.append(x[:n].reshape(n, -1, 3).astype(np.float32).mean(1))
        ys.append(y[:n])
      assert len(it.wait_s) == len(it)
    return np.concatenate(xs), np.concatenate(ys)

  tr_x, tr_y = features(m["train"], True, 0)
  va_x, va_y = features(m["val"], False, 0)
  assert sorted(tr_y.tolist()) == sorted(m["train"].labels.tolist())  # one epoch = every image once
  np.testing.assert_array_equal(va_y, m["val"].labels)
  means = np.stack([tr_x[tr_y == k].mean(0) for k in range(4)])
  shown = np.array([P.synthetic_drawn_class("val", k, i, 4) for k in range(4) for i in range(64)])
  acc = (np.argmin(((va_x[:, None] - means[None]) ** 2).sum(-1), 1) == shown).mean()
  assert acc >= 0.95
  assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"{D.SHM_PREFIX}{os.getpid()}_")]
