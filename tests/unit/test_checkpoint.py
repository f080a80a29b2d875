"""Training-state save/load: dedup of shared tensors, exact round trip into fresh objects, mismatch errors."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tinygrad import Tensor

from tinyperf.benchmarks.common.checkpoint import training_state, save_state, load_state, read_metadata
from tinyperf.benchmarks.resnet.model import make_model
from tinyperf.benchmarks.resnet.optim import make_optimizer

pytestmark = pytest.mark.usefixtures("fast_compile")   # compile-bound

KNOBS = dict(RESNET_LAYERS="1", RESNET_WIDTH=4, NUM_CLASSES=3, SYNCBN=0, LR=1.0, MOMENTUM=0.9, DECAY=2e-4,
             WARMUP_EPOCHS=1, EPOCHS=4, END_LR=1e-4, LABEL_SMOOTHING=0.1, LOSS_SCALER=1.0)


def build(seed, devs=("CPU",), **over):
  knobs = {**KNOBS, **over}
  model = make_model(knobs, devs, seed=seed)
  return (model, *make_optimizer(model, knobs, steps_per_epoch=5))


def test_state_is_deduplicated():
  model, opt, sched = build(0)
  unique, aliases = training_state(model, opt, sched)
  ids = [id(t) for t in unique.values()]
  assert len(ids) == len(set(ids))
  assert aliases["optimizer.optimizers.0.params.0"] == "model.conv1.weight"       # LARS param = model weight
  assert aliases["scheduler.optimizers.1.lr"] == "optimizer.optimizers.1.lr"
  assert any(aliases[k] == "model.bn1.running_mean" for k in aliases)             # SGD buffer = BN running stat
  n_model = sum(k.startswith("model.") for k in unique)
  n_momentum = sum(".b." in k for k in unique)
  # model tensors, one momentum buffer per parameter, two LR tensors, the step counter; nothing twice
  assert n_momentum == len(opt.params)
  assert len(unique) == n_model + n_momentum + 2 + 1
  assert "scheduler.counter" in unique


@pytest.mark.parametrize("devs", [("CPU",), ("CPU:0", "CPU:1")])
def test_round_trip_into_fresh_objects(tmp_path, devs):
  model, opt, sched = build(0, devs)
  if len(devs) > 1: assert model.bn1.running_var.shape == (2, 4)   # per-device BN statistics, sharded: gathered to save
  # make every kind of state non-trivial: momentum, LR, counter, running stats
  for o in opt.optimizers:
    for i, b in enumerate(o.b): b.assign(Tensor.full(b.shape, 0.25 * (i + 1)).shard_like(b)).realize()
  sched.step(); sched.step(); sched.step()
  model.bn1.running_var.assign(model.bn1.running_var * 3).realize()
  save_state(tmp_path / "s.safetensors", model, opt, sched, metadata={"epoch": "2"})
  fresh = build(1, devs)
  before = {k: t.numpy().copy() for k, t in training_state(*fresh)[0].items()}
  meta = load_state(tmp_path / "s.safetensors", *fresh)
  assert meta["epoch"] == "2" and read_metadata(tmp_path / "s.safetensors")["format"].startswith("tinyperf")
  a, b = training_state(model, opt, sched)[0], training_state(*fresh)[0]
  changed = 0
  for k in a:
    np.testing.assert_array_equal(a[k].numpy(), b[k].numpy(), err_msg=k)
    changed += not np.array_equal(before[k], b[k].numpy())
  assert changed >= len(a) // 2        # the fresh objects really were different before loading
  assert fresh[2].steps_done() == 3 and fresh[1][0].lr.numpy()[0] == pytest.approx(sched.lr_at(3))


def test_mismatch_is_an_error(tmp_path):
  saved = build(0)
  saved[2].step(); saved[2].step()
  save_state(tmp_path / "s.safetensors", *saved)
  wide = build(0, RESNET_WIDTH=8)
  with pytest.raises(ValueError, match=r"conv1\.weight\b"):        # the first tensor whose shape differs
    load_state(tmp_path / "s.safetensors", *wide)
  assert wide[2].steps_done() == 0     # validated before loading: the matching counter was not half-loaded
  with pytest.raises(ValueError, match="missing|unexpected"):
    load_state(tmp_path / "s.safetensors", *build(0, RESNET_LAYERS="2"))
  (tmp_path / "w.safetensors").write_bytes((tmp_path / "s.safetensors").read_bytes())
  from tinygrad.nn.state import safe_save
  safe_save({"x": Tensor([1.0])}, str(tmp_path / "other.safetensors"))
  with pytest.raises(ValueError, match=re.escape(str(tmp_path / "other.safetensors"))):
    load_state(tmp_path / "other.safetensors", *build(0))
  assert json.loads(read_metadata(tmp_path / "w.safetensors")["aliases"])


SNAPSHOT_ON_NULL = """
from tinygrad import Device
from tinyperf.benchmarks.resnet.model import make_model
from tinyperf.benchmarks.resnet.optim import make_optimizer
from tinyperf.benchmarks.common.checkpoint import snapshot_state
knobs = dict(RESNET_LAYERS="1", RESNET_WIDTH=4, NUM_CLASSES=3, SYNCBN=0, LR=0.5, MOMENTUM=0.9, DECAY=2e-4,
             WARMUP_EPOCHS=1, EPOCHS=4, END_LR=1e-4, LABEL_SMOOTHING=0.1, LOSS_SCALER=1.0)
for devs in (["NULL"], ["NULL:0", "NULL:1"]):
  model = make_model(knobs, devs, seed=0)
  opt, sched = make_optimizer(model, knobs, steps_per_epoch=4)
  snapshot_state(model, opt, sched)
print(sorted(Device._opened_devices))
"""


SAVE_LOAD_ON_NULL = """
import sys, tempfile
from tinyperf.benchmarks.registry import load_config
from tinyperf.benchmarks.common.runtime import apply_tinygrad_env
cfg = load_config("resnet", "2xH200")   # its knobs (fp16, unsynced BN), a small ResNet from the environment
apply_tinygrad_env(cfg, "all", keep_dev=True)
from tinyperf.benchmarks.resnet.train import Trainer
from tinyperf.benchmarks.common.checkpoint import save_state, load_state
tr = Trainer(cfg, 1, 10)
path = tempfile.mktemp(dir=sys.argv[1])
save_state(path, tr.model, tr.optimizer, tr.scheduler)
load_state(path, tr.model, tr.optimizer, tr.scheduler)
print("saved and loaded")
"""


def test_save_and_load_compile_nothing_on_the_cpu(tmp_path):
  # CKPT / RESUME on a GPU host with no C compiler (the H200 has none): gathering the 2xH200 config's per-device BN
  # statistics on tinygrad's CPU device compiled a kernel there with clang. CC=/bin/false fails any such compile.
  env = {**os.environ, "DEV": "NULL", "NULL_ALLOW_COPYOUT": "1", "CC": "/bin/false", "RESNET_LAYERS": "1", "RESNET_WIDTH": "8"}
  r = subprocess.run([sys.executable, "-c", SAVE_LOAD_ON_NULL, str(tmp_path)], cwd=Path(__file__).resolve().parents[2],
                     env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0 and "saved and loaded" in r.stdout, r.stderr[-2000:]


def test_snapshot_never_opens_the_cpu_device():
  # tinygrad's CPU device compiles with clang when it opens; a GPU host need not have clang (the H200 had none, and every
  # INIT died in snapshot_state). On tinygrad's NULL device, one and two devices, the CPU device must stay closed.
  env = {**os.environ, "DEV": "NULL", "NULL_ALLOW_COPYOUT": "1"}
  r = subprocess.run([sys.executable, "-c", SNAPSHOT_ON_NULL], cwd=Path(__file__).resolve().parents[2], env=env,
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  opened = r.stdout.strip().splitlines()[-1]
  assert "'NULL:1'" in opened and "'CPU'" not in opened, opened
