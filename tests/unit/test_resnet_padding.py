"""ResNet padding on 6 devices (tinybox: 6 GPUs, unsynced BatchNorm): the loader's batches, moved to 6 CPU devices the
way the training loop moves them, never give a device a padding-only shard, and the batch right before an eval is full.

With the padding at the end of the epoch, the last step before every eval gave devices 1-5 of a tinybox nothing but
mean-pixel images (143 real of 1536 at BS 1536), and their running statistics took that update right before the eval."""
import numpy as np
import pytest
from tinygrad import Device

from tinyperf.benchmarks.resnet import data as D
from tinyperf.benchmarks.resnet.prep import synthetic_imagenet
from tinyperf.benchmarks.resnet.steps import to_device

SIX = tuple(f"CPU:{i}" for i in range(6))


@pytest.fixture(scope="module")
def train_split(tmp_path_factory):
  out = tmp_path_factory.mktemp("pad") / "imagenet"
  synthetic_imagenet(out, classes=4, train_per_class=10, val_per_class=1, size=40, seed=5)
  return D.load_manifest(out)["train"]


def real_per_device(y: np.ndarray) -> list[int]:
  """Real labels on each of the 6 devices, counted on the devices themselves: each holds one row after the reshape."""
  _, Y = to_device(np.zeros((len(y), 1, 1, 3), np.uint8), y, SIX)
  assert Y.device == tuple(Device.canonicalize(d) for d in SIX)
  return (Y >= 0).reshape(len(SIX), -1).sum(1).numpy().tolist()


@pytest.mark.parametrize("train", [True, False])
def test_no_device_gets_a_padding_only_shard(train_split, train):
  n, bs = len(train_split), 24                        # 40 images = 16 + 24: the first batch is 8 padding, 16 real
  with D.batches(train_split.files, train_split.labels, bs, train, 3, 0, 16, 1, 2, shards=len(SIX)) as it:
    batches = [(y, k) for _, y, k in it]
  assert [k for _, k in batches] == [n - bs, bs]        # padded first, so the step before an eval is a full batch
  per_device = [real_per_device(y) for y, _ in batches]
  assert per_device == [[3, 3, 3, 3, 2, 2], [4] * 6]
  seen = np.concatenate([y[y >= 0] for y, _ in batches])
  np.testing.assert_array_equal(seen, train_split.labels[D.epoch_order(n, train, 3, 0)])  # every image once, in order
