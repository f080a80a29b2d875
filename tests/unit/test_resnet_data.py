"""benchmarks/resnet/data.py: manifest, preprocessing and the shared-memory loader."""
from __future__ import annotations
import gc
import json
import math
import multiprocessing as mp
import os
import re
import shutil

import numpy as np
import pytest
from PIL import Image

from tinyperf.benchmarks.resnet import data as D
from tinyperf.benchmarks.resnet.prep import synthetic_imagenet
from fake_imagenet import shm_entries

SIZE = 32


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
  out = tmp_path_factory.mktemp("syn") / "imagenet"
  synthetic_imagenet(out, classes=4, train_per_class=9, val_per_class=3, size=48, seed=3)
  return out


@pytest.fixture
def syn_copy(syn, tmp_path):
  dst = tmp_path / "imagenet"
  shutil.copytree(syn, dst)
  return dst


def collect(split, bs, train, seed=0, epoch=0, workers=1, ring=2, **kw):
  with D.batches(split.files, split.labels, bs, train, seed, epoch, SIZE, workers, ring, **kw) as it:
    out = [(x.copy(), y, n) for x, y, n in it]
    assert len(it.wait_s) == len(out) and all(w >= 0 for w in it.wait_s)
  return out


def no_leftovers():
  assert shm_entries(os.getpid()) == []
  # only our loader's workers: other tests (or libraries) in this process may keep pools of their own
  assert [c for c in mp.active_children() if c.name.startswith(D.WORKER_NAME)] == []


# ------------------------------------------------------------------------------------------------------------ manifest

def test_manifest_round_trip(syn):
  m = D.load_manifest(syn)
  assert m.kind == "synthetic" and m.classes == [f"n{k:08d}" for k in range(4)]
  assert len(m["train"]) == 36 and len(m["val"]) == 12
  assert m["train"].per_class == {c: 9 for c in m.classes}
  for split in ("train", "val"):
    sp = m[split]
    assert sp.labels.dtype == np.int32
    for f, label, size in zip(sp.files, sp.labels, sp.sizes):
      assert os.path.isabs(f) and os.path.basename(os.path.dirname(f)) == m.classes[label]
      assert os.path.getsize(f) == size
  raw = json.loads((syn / D.MANIFEST_NAME).read_text())
  assert raw["format"] == D.MANIFEST_FORMAT and raw["version"] == D.MANIFEST_VERSION
  assert raw["splits"]["train"]["files"][0] == "train/n00000000/n00000000_00000.JPEG"


def _edit_manifest(root, fn):
  p = root / D.MANIFEST_NAME
  raw = json.loads(p.read_text())
  fn(raw)
  p.write_text(json.dumps(raw))


def test_missing_data_dir_and_manifest(tmp_path):
  with pytest.raises(D.DataError, match=rf"{re.escape(str(tmp_path / 'nope'))}.*`tinyperf prep "):   # the folder, the fix
    D.load_manifest(tmp_path / "nope")
  with pytest.raises(D.DataError) as e:
    D.load_manifest(tmp_path)
  assert str(tmp_path / "manifest.json") in str(e.value) and "tinyperf prep" in str(e.value)
  assert isinstance(e.value, ValueError)  # callers may catch ValueError; the CLI maps UserError to exit 2


def test_manifest_wrong_version(syn_copy):
  _edit_manifest(syn_copy, lambda r: r.update(version=99))
  with pytest.raises(D.DataError) as e: D.load_manifest(syn_copy)
  assert all(f in str(e.value) for f in ("99", f"version {D.MANIFEST_VERSION}", "`tinyperf prep ")), e.value


@pytest.mark.parametrize("edit, match", [
  (lambda r: r.update(format="something-else"), "'something-else'"),       # each: the offending value or field
  (lambda r: r["splits"]["train"]["labels"].__setitem__(0, 1), "train/n00000001/"),
  (lambda r: r["splits"]["train"]["files"].pop(), r"\b36\b.*\b35\b"),
  (lambda r: r.update(classes=["b", "a"]), "'classes'"),
  (lambda r: r["splits"]["val"]["per_class"].update(n00000000=4), "per_class"),
  (lambda r: r["splits"]["val"]["files"].__setitem__(0, "val/n00000000/../../../etc/passwd"), r"\.\./\.\./\.\./etc/passwd"),
])
def test_manifest_corrupt(syn_copy, edit, match):
  _edit_manifest(syn_copy, edit)
  with pytest.raises(D.DataError, match=match) as e:
    D.load_manifest(syn_copy)
  assert str(syn_copy / "manifest.json") in str(e.value)


def test_manifest_not_json(syn_copy):
  (syn_copy / D.MANIFEST_NAME).write_text('{"format": ')
  with pytest.raises(D.DataError, match=re.escape(str(syn_copy / D.MANIFEST_NAME))):
    D.load_manifest(syn_copy)


def test_manifest_lists_missing_file(syn_copy):
  victim = syn_copy / "val" / "n00000002"
  gone = sorted(victim.iterdir())[1]
  gone.unlink()
  with pytest.raises(D.DataError) as e:
    D.load_manifest(syn_copy)
  assert gone.name in str(e.value) and "--verify" in str(e.value)
  D.load_manifest(syn_copy, check_files=False)  # the cheap check can be skipped


def test_imagenet_kind_warns_on_unofficial_counts(syn_copy, capsys):
  _edit_manifest(syn_copy, lambda r: r.update(kind="imagenet"))
  D.load_manifest(syn_copy)
  err = capsys.readouterr().err
  assert re.search(r"train\b.*\b36\b.*\b1,281,167\b", err) and re.search(r"val\b.*\b12\b", err), err   # ours, official


def test_missing_split(syn_copy):
  _edit_manifest(syn_copy, lambda r: r["splits"].pop("val"))
  m = D.load_manifest(syn_copy)
  with pytest.raises(D.DataError, match="'val'"):
    m["val"]


# ------------------------------------------------------------------------------------------------------ preprocessing

def test_random_resized_crop_params_bounds_and_fallback():
  rng = np.random.default_rng(0)
  for _ in range(2000):
    W, H = int(rng.integers(20, 700)), int(rng.integers(20, 700))
    l, t, w, h = D.random_resized_crop_params(W, H, rng)
    assert 0 <= l and 0 <= t and l + w <= W and t + h <= H and w > 0 and h > 0
  # the reference's box (sample_distorted_bounding_box, no boxes): area fraction 0.1-1 (min_object_covered 0.1 of the
  # whole image, above area_range's 0.05), aspect 0.75-1.33 up to rounding; heights spread over the whole range
  rng = np.random.default_rng(1)
  boxes = [D.random_resized_crop_params(600, 500, rng) for _ in range(2000)]
  fracs = np.array([w * h / 3e5 for _, _, w, h in boxes])
  assert fracs.min() >= 0.1 and fracs.max() <= 1.0 and fracs.min() < 0.12 and fracs.max() > 0.9
  assert all(0.75 * 0.97 <= w / h <= 1.33 * 1.03 for _, _, w, h in boxes)
  # a 1000x10 strip: no try fits, the reference then uses the whole image
  assert D.random_resized_crop_params(1000, 10, np.random.default_rng(2)) == (0, 0, 1000, 10)
  assert D.random_resized_crop_params(10, 1000, np.random.default_rng(2)) == (0, 0, 10, 1000)


def _framed(w, h, box, path):
  """Red outside `box`, a gradient with a diagonal inside: any off-by-one crop shows red or shifts the gradient."""
  a = np.zeros((h, w, 3), np.uint8)
  a[..., 0] = 255
  l, t, r, b = box
  yy, xx = np.mgrid[t:b, l:r]
  a[t:b, l:r, 0] = (xx - l) * 255 // (r - l)
  a[t:b, l:r, 1] = (yy - t) * 255 // (b - t)
  a[t:b, l:r, 2] = np.where((xx - l) == (yy - t), 255, 0)
  Image.fromarray(a).save(path)
  return Image.fromarray(a)


def test_eval_center_crop_exact_at_scale_1(tmp_path):
  # short side 256 at image_size 224: the transform is a pure 224x224 center crop
  img = _framed(320, 256, (48, 16, 272, 240), tmp_path / "a.png")
  assert D.eval_crop_box(320, 256, 224) == (48, 16, 272, 240)
  out = D.decode_eval(str(tmp_path / "a.png"), 224)
  np.testing.assert_array_equal(out, np.asarray(img.crop((48, 16, 272, 240))))


def test_eval_crop_and_resize_matches_pillow(tmp_path):
  # short side 512: the two-step definition (resize the short side to 256, center-crop 224) computed by Pillow equals
  # our one resize over the crop box exactly: resize(box=) filters across the box edge just as resize-then-crop does
  img = _framed(640, 512, (96, 32, 544, 480), tmp_path / "b.png")
  out = D.decode_eval(str(tmp_path / "b.png"), 224)
  np.testing.assert_array_equal(out, np.asarray(img.resize((320, 256), Image.BILINEAR).crop((48, 16, 272, 240))))
  # (cropping first and then resizing would differ on the border rows, where the filter would see no red)
  assert not np.array_equal(out, np.asarray(img.crop((96, 32, 544, 480)).resize((224, 224), Image.BILINEAR)))
  # any image_size: short side to 256/224 of it, center crop (two Pillow steps agree up to resampling)
  ref = img.resize((round(640 * (32 * 256 / 224) / 512), round(32 * 256 / 224)), Image.BILINEAR)
  l = (ref.width - 32) // 2; t = (ref.height - 32) // 2
  ref = np.asarray(ref.crop((l, t, l + 32, t + 32))).astype(int)
  out32 = D.decode_eval(str(tmp_path / "b.png"), 32).astype(int)
  assert out32.shape == (32, 32, 3) and np.abs(out32 - ref).mean() < 6


def test_eval_draft_on_large_jpeg(tmp_path):
  img = _framed(1400, 1000, (262, 62, 1137, 937), tmp_path / "c.png")
  img.save(tmp_path / "c.jpg", quality=95)
  full = D.decode_eval(str(tmp_path / "c.jpg"), 224, draft=False).astype(int)
  fast = D.decode_eval(str(tmp_path / "c.jpg"), 224, draft=True).astype(int)
  # crop side 875 allows a 1/2 DCT decode (875/2 >= 224 but 875/4 < 224): different pixels, same geometry
  assert not np.array_equal(full, fast)
  assert np.abs(full - fast).mean() < 2.0
  shifted = D.decode_eval(str(tmp_path / "c.jpg"), 224, draft=False)[:, 4:].astype(int)  # a 4-px shift is far worse
  assert np.abs(shifted - fast[:, :-4]).mean() > 3 * np.abs(full - fast).mean()


def test_train_augmentation_is_a_function_of_seed_epoch_index(syn):
  f = D.load_manifest(syn)["train"].files[5]
  a = D.decode_train(f, SIZE, D.image_rng(7, 2, 5))
  assert a.shape == (SIZE, SIZE, 3) and a.dtype == np.uint8
  np.testing.assert_array_equal(a, D.decode_train(f, SIZE, D.image_rng(7, 2, 5)))
  others = [D.decode_train(f, SIZE, D.image_rng(7, e, 5)) for e in range(3, 8)]
  assert any(not np.array_equal(a, o) for o in others)


# ------------------------------------------------------------------------------------------------------------- loader

def test_loader_deterministic_across_worker_counts(syn):
  sp = D.load_manifest(syn)["train"]
  one = collect(sp, 8, True, seed=11, epoch=1, workers=1, ring=2)
  three = collect(sp, 8, True, seed=11, epoch=1, workers=3, ring=3)
  assert len(one) == len(three) == 5
  for (x1, y1, n1), (x3, y3, n3) in zip(one, three):
    np.testing.assert_array_equal(x1, x3)
    np.testing.assert_array_equal(y1, y3)
    assert n1 == n3
  # and equal to decoding each image in-process from its (seed, epoch, index)
  order = D.epoch_order(len(sp), True, 11, 1)
  for row in (0, 7):
    i = order[4 + row]  # batch 0 holds the 36 % 8 = 4 real samples of the padded batch
    np.testing.assert_array_equal(one[1][0][row], D.decode_train(sp.files[i], SIZE, D.image_rng(11, 1, int(i))))
    assert one[1][1][row] == sp.labels[i]
  other_seed = collect(sp, 8, True, seed=12, epoch=1)
  other_epoch = collect(sp, 8, True, seed=11, epoch=2)
  assert not np.array_equal(one[0][1], other_seed[0][1]) or not np.array_equal(one[0][0], other_seed[0][0])
  assert not np.array_equal(np.concatenate([b[1] for b in one]), np.concatenate([b[1] for b in other_epoch]))
  no_leftovers()


def test_train_epoch_visits_every_image_once(syn):
  sp = D.load_manifest(syn)["train"]
  out = collect(sp, 8, True, seed=5)
  order = D.epoch_order(len(sp), True, 5, 0)
  assert sorted(order.tolist()) == list(range(36)) and order.tolist() != list(range(36))
  ys = np.concatenate([y[y >= 0] for _, y, n in out])
  np.testing.assert_array_equal(ys, sp.labels[order])
  assert [n for _, _, n in out] == [4, 8, 8, 8, 8] and all((y >= 0).sum() == n for _, y, n in out)


def test_first_batch_padded(syn):
  sp = D.load_manifest(syn)["val"]
  out = collect(sp, 5, False, workers=2)
  assert [n for _, _, n in out] == [2, 5, 5]
  assert all(x.shape == (5, SIZE, SIZE, 3) and x.dtype == np.uint8 and y.dtype == np.int32 for x, y, _ in out)
  x, y, n = out[0]
  assert (y[2:] == -1).all() and (y[:2] >= 0).all()
  assert (x[2:] == np.array(D.MEAN_PIXEL, np.uint8)).all()
  assert not (x[:2] == np.array(D.MEAN_PIXEL, np.uint8)).all()
  assert all((y >= 0).all() for _, y, _ in out[1:])
  np.testing.assert_array_equal(np.concatenate([y[y >= 0] for _, y, n in out]), sp.labels)  # val keeps file order
  for i, (b, row) in ((0, (0, 0)), (6, (1, 4)), (11, (2, 4))):  # eval preprocessing is exactly decode_eval
    np.testing.assert_array_equal(out[b][0][row], D.decode_eval(sp.files[i], SIZE))
  no_leftovers()


def test_real_rows_deal_the_first_batch_over_shards():
  np.testing.assert_array_equal(D.real_rows(5, 5), np.arange(5))
  np.testing.assert_array_equal(D.real_rows(2, 5), [0, 1])
  np.testing.assert_array_equal(D.real_rows(4, 12, 3), [0, 1, 4, 8])  # shards [0,4) [4,8) [8,12): 2, 1, 1 real
  rows = D.real_rows(143, 1536, 6)  # ImageNet at BS 1536 on 6 GPUs: 1393 padding images
  assert np.bincount(rows // 256, minlength=6).tolist() == [24, 24, 24, 24, 24, 23]
  with pytest.raises(D.DataError, match="shards=6"):
    D.batches(["a"], [0], 8, True, 0, 0, SIZE, 1, 1, shards=6)


def test_batches_are_views_valid_for_keep(syn):
  sp = D.load_manifest(syn)["train"]
  ref = collect(sp, 4, True, seed=1)
  with D.batches(sp.files, sp.labels, 4, True, 1, 0, SIZE, 2, 3, keep=2) as it:
    prev = None
    for k, (x, y, n) in enumerate(it):
      if prev is not None: np.testing.assert_array_equal(prev, ref[k - 1][0])  # still intact one batch later
      np.testing.assert_array_equal(x, ref[k][0])
      prev = x
  with pytest.raises(D.DataError, match="ring_batches=1.*keep=2"):
    D.batches(sp.files, sp.labels, 4, True, 1, 0, SIZE, 1, 1, keep=2)
  no_leftovers()


def test_shm_cleanup_after_early_stop(syn):
  sp = D.load_manifest(syn)["train"]
  it = D.batches(sp.files, sp.labels, 4, True, 0, 0, SIZE, 2, 3)
  x, y, n = next(it)
  assert len(shm_entries(os.getpid())) == 1  # the ring exists while iterating
  it.close()
  assert x.sum() >= 0  # the caller's view stays readable after close (no unmapped memory)
  no_leftovers()
  it2 = D.batches(sp.files, sp.labels, 4, True, 0, 0, SIZE, 2, 3)
  next(it2)
  del it2
  gc.collect()
  no_leftovers()
  for _ in D.batches(sp.files, sp.labels, 4, True, 0, 0, SIZE, 1, 2): break  # `break` in a for loop, then GC
  gc.collect()
  no_leftovers()


def test_corrupt_jpeg_in_batch_names_file_and_cleans_up(syn_copy):
  sp = D.load_manifest(syn_copy)["val"]
  bad = sp.files[7]
  with open(bad, "r+b") as f: f.truncate(300)
  with pytest.raises(D.DataError) as e:
    collect(sp, 4, False, workers=2, ring=3)
  assert bad in str(e.value) and "--verify" in str(e.value)
  no_leftovers()
  with open(bad, "wb") as f: f.write(b"this is not a jpeg")
  with pytest.raises(D.DataError, match=rf"{re.escape(bad)}.*UnidentifiedImageError"):   # the file, the decoder's error
    collect(sp, 4, False, workers=1)
  no_leftovers()


def test_missing_file_in_batch(syn_copy):
  sp = D.load_manifest(syn_copy)["train"]
  os.unlink(sp.files[3])
  with pytest.raises(D.DataError, match=rf"{re.escape(sp.files[3])}.*FileNotFoundError"):
    collect(sp, 8, False)
  no_leftovers()


def test_shm_too_small(syn, monkeypatch):
  sp = D.load_manifest(syn)["train"]
  monkeypatch.setattr(D, "shm_free_bytes", lambda shm_dir=D.SHM_DIR: 16 * 2**20)
  with pytest.raises(D.DataError) as e:
    D.batches(sp.files, sp.labels, 256, True, 0, 0, 224, 1, 16)
  msg = str(e.value)  # 36 files make one batch, so the ring is capped at 1 batch of 256 x 224x224x3 bytes
  assert "/dev/shm" in msg and "16.00 MiB" in msg and f"{256 * 224 * 224 * 3 / 2**20:.2f} MiB" in msg   # free, needed
  assert "--ipc=host" in msg and "--shm-size=1g" in msg and "SHM_RING_BATCHES" in msg
  no_leftovers()


def test_keyboard_interrupt_cleans_up(syn, monkeypatch):
  sp = D.load_manifest(syn)["train"]
  it = D.batches(sp.files, sp.labels, 4, True, 0, 0, SIZE, 2, 3)
  # Ctrl-C while next() waits for decoders (the first next() always waits: results are only read inside next())
  def interrupted(self): raise KeyboardInterrupt
  monkeypatch.setattr(D.BatchLoader, "_collect_one", interrupted)
  with pytest.raises(KeyboardInterrupt):
    next(it)
  no_leftovers()
  with pytest.raises(StopIteration):
    next(it)


def test_dead_worker_is_reported(syn):
  sp = D.load_manifest(syn)["train"]
  it = D.batches(sp.files, sp.labels, 1, True, 0, 0, SIZE, 2, 1)
  next(it)
  for p in it._res.procs: p.kill()
  with pytest.raises(D.DataError, match=r"signal 9\b"):
    for _ in it: pass
  no_leftovers()


def test_bad_arguments(syn):
  sp = D.load_manifest(syn)["train"]
  with pytest.raises(D.DataError, match=r"\b36\b.*\b35\b"):
    D.batches(sp.files, sp.labels[:-1], 4, True, 0, 0, SIZE, 1, 2)
  with pytest.raises(D.DataError, match="batch_size.*0"):
    D.batches(sp.files, sp.labels, 0, True, 0, 0, SIZE, 1, 2)
  with pytest.raises(D.DataError):
    D.batches([], [], 4, True, 0, 0, SIZE, 1, 2)
  no_leftovers()


def test_len_and_ring_capped(syn):
  sp = D.load_manifest(syn)["val"]
  with D.batches(sp.files, sp.labels, 5, False, 0, 0, SIZE, 1, 64) as it:
    assert len(it) == math.ceil(12 / 5) and it.ring_batches == 3


# ------------------------------------------------------------------------------------- signals, in a real subprocess

_CHILD = r"""
import os, sys, time
from tinyperf.benchmarks.resnet import data as D
if __name__ == "__main__":
  sp = D.load_manifest(sys.argv[1])["train"]
  it = D.batches(sp.files * 50, list(sp.labels) * 50, 4, True, 0, 0, 32, 2, 3)
  next(it)
  print(os.getpid(), *[p.pid for p in it._res.procs], flush=True)
  for _ in it: time.sleep(0.05)
"""


def _alive(pid):
  try:
    with open(f"/proc/{pid}/status") as f: return "\nState:\tZ" not in f.read()
  except FileNotFoundError:
    return False


def _default_sigint():
  import signal
  signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_child(syn, tmp_path):
  import subprocess, sys
  (tmp_path / "child.py").write_text(_CHILD)
  env = dict(os.environ, PYTHONPATH=str(fake_root()))
  p = subprocess.Popen([sys.executable, str(tmp_path / "child.py"), str(syn)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, start_new_session=True, env=env,
                       # a suite started in the background of a script inherits SIGINT ignored: undo that, as a terminal has it
                       preexec_fn=_default_sigint)
  pids = [int(x) for x in p.stdout.readline().split()]
  assert len(pids) == 3, p.stderr.read()
  return p, pids


def fake_root():
  from fake_imagenet import ROOT
  return ROOT


def _wait_gone(pids, shm_pid, timeout=15.0):
  import time
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline and (any(_alive(p) for p in pids) or shm_entries(shm_pid)):
    time.sleep(0.1)
  assert not [p for p in pids if _alive(p)] and shm_entries(shm_pid) == []


def test_ctrl_c_stops_workers_and_unlinks(syn, tmp_path):
  import signal
  p, (parent, *workers) = _start_child(syn, tmp_path)
  assert len(shm_entries(parent)) == 1
  os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
  _, err = p.communicate(timeout=30)
  assert p.returncode != 0 and "KeyboardInterrupt" in err
  _wait_gone(workers, parent, timeout=5.0)


def test_killed_parent_leaves_no_orphans_or_segments(syn, tmp_path):
  import signal
  p, (parent, *workers) = _start_child(syn, tmp_path)
  os.kill(parent, signal.SIGKILL)  # no Python cleanup at all: workers notice, the resource tracker unlinks
  _wait_gone(workers, parent)  # (a worker may still be starting up when its parent dies: it must notice too)
  p.communicate(timeout=30)
