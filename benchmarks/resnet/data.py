"""ImageNet for ResNet-50: the manifest written by `tinyperf prep` and a multi-process loader into a shared-memory ring.

Independent of tinygrad: batches come out as numpy (uint8 NHWC images, int32 labels); the training loop moves them to
devices. docs/data.md describes the on-disk layout, the manifest format and the design of the loader.

  m = load_manifest("/data/imagenet")
  with batches(m["train"].files, m["train"].labels, 256, train=True, seed=SEED, epoch=e, image_size=224,
               num_workers=0, ring_batches=16) as it:
    for x, y, n_real in it:   # x: uint8 [B,H,W,3] (a view into the ring), y: int32 [B] (-1 = padding, 1st batch)
      ...                     # it.last_wait_s: seconds this batch kept the caller waiting

Determinism: the epoch order comes from (seed, epoch) and each image's augmentation from (seed, epoch, file index), so
the batches do not depend on the number of workers or on which worker decoded what.
"""
from __future__ import annotations
import json
import math
import mmap
import multiprocessing as mp
import os
import queue
import shlex
import shutil
import signal
import sys
import time
import uuid
import weakref
from dataclasses import dataclass
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
from PIL import Image

from tinyperf.benchmarks.common.feeding import SHM_DIR, SHM_PREFIX
from tinyperf.benchmarks.common.io import InputError, two_sizes
from tinyperf.benchmarks.common.rules import IMAGENET_COUNTS

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "tinyperf-imagenet-manifest"
MANIFEST_VERSION = 1
SPLITS = ("train", "val")
# The mean ImageNet pixel (123.68, 116.78, 103.94) cast to uint8: what padding images are filled with.
MEAN_PIXEL = (123, 116, 103)
# Eval: resize the short side to 256/224 of the crop, then center-crop (the 224 -> 256 convention of ResNet-50).
EVAL_RESIZE_RATIO = 256 / 224
WORKER_NAME = "tinyperf-imagenet-worker"

# JPEG decoding, chosen by measurement (lab/resnet/bench_decode.py; table in docs/data.md): stock Pillow, with
# draft() letting libjpeg decode at 1/2, 1/4 or 1/8 scale in the DCT when the crop keeps at least image_size pixels
# after the reduction (+4-5 % per core; pixels differ from a full decode by 0.06 levels on average). simplejpeg and
# PyTurboJPEG measured within 1-3 % of Pillow 13, whose wheels bundle the same libjpeg-turbo: not worth a second
# dependency and a second code path. pillow-simd (AVX2 build: 1.14-1.4x, outputs within 1 level) needs no code change
# here: an image for a data-bound host can install it in place of Pillow. draft=False gives exact full-decode pixels.
USE_DRAFT = True

_SHUFFLE_STREAM = 0x5EED0001  # keeps the shuffle's random stream apart from the per-image augmentation streams
_AUGMENT_STREAM = 0x5EED0002


class DataError(InputError, ValueError):
  """Bad data or environment: the message names the file and the fix. The CLI prints it and exits 2, no traceback."""


# ----------------------------------------------------------------------------------------------------------- manifest

@dataclass(frozen=True)
class Split:
  name: str
  files: list[str]        # absolute paths, in manifest order
  labels: np.ndarray      # int32 [N], index into Manifest.classes
  sizes: np.ndarray       # int64 [N], bytes on disk when prep wrote the manifest
  per_class: dict[str, int]

  def __len__(self): return len(self.files)


@dataclass(frozen=True)
class Manifest:
  root: Path
  kind: str                # "imagenet" or "synthetic"
  classes: list[str]       # sorted wnids; label = index
  splits: dict[str, Split]
  source: dict             # provenance written by prep (tar checksums, synthetic seed, ...)

  def __getitem__(self, split: str) -> Split:
    if split not in self.splits:
      how = (f"`tinyperf prep imagenet --out {shlex.quote(str(self.root))}` (it writes both splits)"
             if self.kind == "imagenet" else
             f"`tinyperf prep synthetic-imagenet --out NEW_DIR` with --{split}-per-class of at least 1 (prep does not "
             f"rewrite a finished data set)")
      raise DataError(f"{self.root / MANIFEST_NAME} has no {split!r} split (it has: {', '.join(self.splits) or 'none'}). "
                      f"Prepare it with {how}.")
    return self.splits[split]

  @property
  def num_classes(self) -> int: return len(self.classes)


def manifest_path(data_dir: str | os.PathLike) -> Path:
  return Path(data_dir) / MANIFEST_NAME


def _prep_hint(data_dir) -> str:
  q = shlex.quote(str(data_dir))   # pasted into a shell as printed
  return (f"Run `tinyperf prep imagenet --out {q}` (real ImageNet) or "
          f"`tinyperf prep synthetic-imagenet --out {q}` (smoke data) to create it.")


def _bad_manifest(path: Path, why: str):
  return DataError(f"{path}: {why}. The manifest is written by `tinyperf prep`; rerun prep on {path.parent} "
                   f"(or restore the file) and retry.")


def check_prepared(cfg, data_dir: Path) -> str:
  """The preflight's look at a data set (benchmarks/preflight.py): what it holds, or a DataError naming the fix."""
  m = load_manifest(data_dir, check_files=True)
  for split in SPLITS: m[split]   # a run trains and evaluates: a DataError naming the missing split
  if m.num_classes != cfg["NUM_CLASSES"]:
    raise DataError(f"{data_dir}: {m.num_classes} classes but the config's NUM_CLASSES is {cfg['NUM_CLASSES']}; prepare "
                    f"the data set this platform expects.")
  return f"{m.kind} manifest, {', '.join(f'{k} {len(v):,}' for k, v in m.splits.items())} files present"


def load_manifest(data_dir: str | os.PathLike, check_files: bool = True) -> Manifest:
  """Read and validate DATA_DIR/manifest.json. With check_files, also check every listed file is on disk (one directory
  listing per class, not one stat per file). Raises DataError naming the file and the fix; warns on stderr when a
  manifest of kind "imagenet" does not hold the official 1,281,167 / 50,000 images."""
  root = Path(data_dir)
  path = manifest_path(root)
  if not root.is_dir():
    raise DataError(f"data directory {root} does not exist. {_prep_hint(root)}")
  if not path.is_file():
    raise DataError(f"{path} is missing: {root} was not prepared by `tinyperf prep` (or preparation did not finish). "
                    f"{_prep_hint(root)}")
  try:
    raw = json.loads(path.read_text(encoding="utf-8"))
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise _bad_manifest(path, f"not valid JSON ({e})") from None
  if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
    raise _bad_manifest(path, f"not a tinyperf ImageNet manifest (format is {raw.get('format') if isinstance(raw, dict) else None!r}, "
                              f"expected {MANIFEST_FORMAT!r})")
  if raw.get("version") != MANIFEST_VERSION:
    raise DataError(f"{path}: manifest format version {raw.get('version')!r}, this code reads version {MANIFEST_VERSION}. "
                    f"Re-create it with this version's `tinyperf prep ... --out {shlex.quote(str(root))}` (the images "
                    f"can stay; prep rewrites the manifest).")
  classes = raw.get("classes")
  if not (isinstance(classes, list) and classes and all(isinstance(c, str) and c and "/" not in c for c in classes)):
    raise _bad_manifest(path, "'classes' must be a non-empty list of class directory names")
  if classes != sorted(set(classes)):
    raise _bad_manifest(path, "'classes' must be sorted and unique (label = index in the sorted wnid list)")
  splits_raw = raw.get("splits")
  if not isinstance(splits_raw, dict) or not splits_raw:
    raise _bad_manifest(path, "'splits' must map split names (train, val) to their file lists")
  splits = {}
  for name, s in splits_raw.items():
    if name not in SPLITS: raise _bad_manifest(path, f"unknown split {name!r} (expected {', '.join(SPLITS)})")
    splits[name] = _parse_split(path, name, s, classes)
  kind = raw.get("kind", "imagenet")
  if kind == "imagenet":
    for name, sp in splits.items():
      if len(sp) != IMAGENET_COUNTS[name]:
        print(f"WARNING: {path}: {name} has {len(sp):,} images, official ILSVRC2012 has {IMAGENET_COUNTS[name]:,}. "
              f"Results on this data are not comparable to MLPerf ResNet; run `tinyperf prep imagenet --verify "
              f"{shlex.quote(str(root))}`.",
              file=sys.stderr)
  m = Manifest(root=root.resolve(), kind=kind, classes=classes, splits=splits, source=raw.get("source") or {})
  if check_files:
    for sp in splits.values(): _check_files_exist(path, sp)
  return m


def _parse_split(path: Path, name: str, s, classes: list[str]) -> Split:
  if not isinstance(s, dict): raise _bad_manifest(path, f"split {name!r} must be an object")
  files, sizes, labels = s.get("files"), s.get("sizes"), s.get("labels")
  if not (isinstance(files, list) and isinstance(sizes, list) and isinstance(labels, list)):
    raise _bad_manifest(path, f"split {name!r} needs the lists 'files', 'sizes' and 'labels'")
  if not (len(files) == len(sizes) == len(labels) == s.get("count")):
    raise _bad_manifest(path, f"split {name!r}: count {s.get('count')!r} but {len(files)} files, {len(sizes)} sizes, "
                              f"{len(labels)} labels")
  if not files: raise _bad_manifest(path, f"split {name!r} is empty")
  try:
    lab = np.asarray(labels, dtype=np.int64)
    siz = np.asarray(sizes, dtype=np.int64)
  except (TypeError, ValueError):
    raise _bad_manifest(path, f"split {name!r}: labels and sizes must be integers") from None
  if lab.ndim != 1 or lab.min() < 0 or lab.max() >= len(classes):
    raise _bad_manifest(path, f"split {name!r}: labels must be integers in [0, {len(classes)})")
  if siz.ndim != 1 or siz.min() <= 0: raise _bad_manifest(path, f"split {name!r}: sizes must be positive integers")
  root = str(path.parent.resolve()) + os.sep
  prefixes = [f"{name}/{c}/" for c in classes]
  out = []
  for f, l in zip(files, lab.tolist()):  # 1.28 M entries: plain string operations only
    # layout: <split>/<wnid>/<file>, the directory naming the class (what a human and `ls` see is what trains)
    pre = prefixes[l]
    if not (isinstance(f, str) and f.startswith(pre) and "/" not in f[len(pre):] and f[len(pre):] not in ("", ".", "..")):
      raise _bad_manifest(path, f"split {name!r}: entry {f!r} with label {l} is not {pre}<file>")
    out.append(root + f)
  per_class = s.get("per_class")
  counts = np.bincount(lab, minlength=len(classes))
  want = {c: int(n) for c, n in zip(classes, counts) if n}
  if per_class != want:
    raise _bad_manifest(path, f"split {name!r}: 'per_class' counts do not match the labels of the listed files")
  return Split(name=name, files=out, labels=lab.astype(np.int32), sizes=siz, per_class=want)


def _check_files_exist(path: Path, sp: Split):
  by_dir: dict[str, list[str]] = {}
  for f in sp.files:
    d, _, base = f.rpartition("/")
    by_dir.setdefault(d, []).append(base)
  for d, names in by_dir.items():
    try: have = set(os.listdir(d))
    except FileNotFoundError: have = set()
    missing = [n for n in names if n not in have]
    if missing:
      raise DataError(f"{path} lists {len(missing)} file(s) in {d} that do not exist, e.g. {d}/{missing[0]}. The data "
                      f"directory changed after prep: restore it, or rerun `tinyperf prep` on {path.parent} "
                      f"(`tinyperf prep imagenet --verify {shlex.quote(str(path.parent))}` lists every problem).")


# ------------------------------------------------------------------------------------------------------ preprocessing

# The train crop of the MLCommons reference (image_classification/tensorflow2/imagenet_preprocessing.py,
# _decode_crop_and_flip): tf.image.sample_distorted_bounding_box(min_object_covered=0.1, aspect_ratio_range=[0.75, 1.33],
# area_range=[0.05, 1.0], max_attempts=100, use_image_if_no_bounding_boxes=True), the whole image when no try fits.
# The closed rules ask for the reference's preprocessing steps (training_rules.adoc, "Preprocessing During the Run").
CROP_AREA = (0.05, 1.0)
CROP_RATIO = (0.75, 1.33)
CROP_MIN_COVERED = 0.1
CROP_TRIES = 100


def random_resized_crop_params(width: int, height: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
  """The reference's crop box, sampled as TF's sample_distorted_bounding_box samples it: per try an aspect ratio
  U(CROP_RATIO), then a height drawn uniformly among the integers whose crop area lies in CROP_AREA of the image (width
  = round(height * ratio)); a try counts when the crop fits and covers >= CROP_MIN_COVERED of the bounding box, which
  is the whole image (the manifest carries no boxes), so effectively an area fraction >= 0.1; the offset is uniform.
  After CROP_TRIES failures, the whole image. Returns (left, top, w, h)."""
  area = width * height
  min_area, max_area = CROP_AREA[0] * area, CROP_AREA[1] * area
  for _ in range(CROP_TRIES):
    ratio = rng.uniform(*CROP_RATIO)
    h, max_h = round(math.sqrt(min_area / ratio)), round(math.sqrt(max_area / ratio))
    if round(max_h * ratio) > width:  # the tallest crop whose rounded width still fits
      max_h = int((width + 0.5 - 1e-7) / ratio)
      if round(max_h * ratio) > width: max_h -= 1
    max_h = min(max_h, height)
    h = min(h, max_h)
    h += int(rng.integers(0, max_h - h + 1))
    w = round(h * ratio)
    if w * h < min_area: h += 1; w = round(h * ratio)
    if w * h > max_area: h -= 1; w = round(h * ratio)
    if not (min_area <= w * h <= max_area and 0 < w <= width and 0 < h <= height): continue
    if w * h < CROP_MIN_COVERED * area: continue
    top = int(rng.integers(0, height - h)) if h < height else 0
    left = int(rng.integers(0, width - w)) if w < width else 0
    return left, top, w, h
  return 0, 0, width, height


def _open_scaled(im: Image.Image, crop_w: float, crop_h: float, out_size: int, draft: bool) -> tuple[Image.Image, float]:
  """Ask libjpeg for a 1/2, 1/4 or 1/8 DCT-scaled decode when the crop keeps >= out_size pixels on both sides after it.
  Returns the RGB image and the factor that maps original coordinates to it."""
  scale = 1.0
  if draft and im.format == "JPEG" and min(im.size) >= 64:  # >= 64 px: Pillow picks exactly the scale asked for
    s = next((s for s in (8, 4, 2) if crop_w / s >= out_size and crop_h / s >= out_size), 1)
    if s > 1:
      width = im.size[0]
      res = im.draft("RGB", (im.size[0] // s, im.size[1] // s))
      if res is not None: scale = width / res[1][2]  # draft's box is the original extent in decoded pixels
  if im.mode != "RGB": im = im.convert("RGB")
  else: im.load()
  return im, scale


def decode_train(path: str, image_size: int, rng: np.random.Generator, draft: bool = USE_DRAFT) -> np.ndarray:
  """Train augmentation for one image: the reference's random crop (random_resized_crop_params) resized to image_size,
  bilinear, then a horizontal flip with p=0.5. Random draws: the crop first, then the flip. Returns uint8 [image_size, image_size, 3]."""
  with Image.open(path) as im:
    width, height = im.size
    left, top, w, h = random_resized_crop_params(width, height, rng)
    flip = rng.random() < 0.5
    im, s = _open_scaled(im, w, h, image_size, draft)
    out = im.resize((image_size, image_size), Image.BILINEAR, box=(left / s, top / s, (left + w) / s, (top + h) / s))
  arr = np.asarray(out)
  return arr[:, ::-1] if flip else arr


def eval_crop_box(width: int, height: int, image_size: int = 224) -> tuple[float, float, float, float]:
  """The centered square that `resize short side to image_size*256/224, center-crop image_size` keeps, in original
  pixel coordinates (left, top, right, bottom). Cropping it and resizing to image_size is the same transform, in one
  resampling step."""
  side = min(width, height) / EVAL_RESIZE_RATIO
  left, top = (width - side) / 2, (height - side) / 2
  return left, top, left + side, top + side


def decode_eval(path: str, image_size: int, draft: bool = USE_DRAFT) -> np.ndarray:
  """Eval preprocessing: short side to 256*image_size/224, center-crop image_size, bilinear. uint8 [S, S, 3]."""
  with Image.open(path) as im:
    l, t, r, b = eval_crop_box(*im.size, image_size)
    im, s = _open_scaled(im, r - l, b - t, image_size, draft)
    out = im.resize((image_size, image_size), Image.BILINEAR, box=(l / s, t / s, r / s, b / s))
  return np.asarray(out)


def image_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
  """The augmentation random stream of one image in one epoch: a function of (seed, epoch, file index) only."""
  return np.random.Generator(np.random.PCG64(np.random.SeedSequence([_AUGMENT_STREAM, seed, epoch, index])))


def epoch_order(n: int, train: bool, seed: int, epoch: int) -> np.ndarray:
  """File indices in the order one epoch visits them: a permutation drawn from (seed, epoch) for train, 0..n-1 for val."""
  if not train: return np.arange(n, dtype=np.int64)
  return np.random.Generator(np.random.PCG64(np.random.SeedSequence([_SHUFFLE_STREAM, seed, epoch]))).permutation(n)


# ------------------------------------------------------------------------------------------------------------- loader

def shm_free_bytes(shm_dir: str = SHM_DIR) -> int | None:
  """Free bytes in the tmpfs behind multiprocessing.shared_memory, or None where there is no such directory."""
  try: return shutil.disk_usage(shm_dir).free
  except (FileNotFoundError, NotADirectoryError): return None


def check_shm_space(nbytes: int, what: str, shm_dir: str = SHM_DIR):
  """Fail early and clearly when the ring would not fit: a full tmpfs kills the writer with SIGBUS mid-epoch instead."""
  free = shm_free_bytes(shm_dir)
  if free is None or nbytes <= free: return
  have, want = two_sizes(free, nbytes)
  need_gb = math.ceil(nbytes * 1.25 / 2**30)
  raise DataError(f"{shm_dir} has {have} free but the {what} needs {want}. Start the container with `--ipc=host` or "
                  f"`--shm-size={max(need_gb, 1)}g` (`shm_size:` in compose), free space in {shm_dir}, or lower "
                  f"SHM_RING_BATCHES or the batch size in the platform config.")


def default_num_workers() -> int:
  try: return len(os.sched_getaffinity(0))
  except AttributeError: return os.cpu_count() or 1


def _worker_main(shm_name: str, ring_shape: tuple, train: bool, seed: int, epoch: int, image_size: int, draft: bool,
                 tasks, results, stop, parent: int):
  """Decoder process: takes (batch_seq, slot, [(row, file_index, path), ...]) tasks, writes images into the ring and
  reports (batch_seq, rows_done, error). Ctrl-C is the parent's to handle: it stops us through `stop` and sentinels."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  results.cancel_join_thread()  # never block exit on a parent that stopped reading
  shm = shared_memory.SharedMemory(name=shm_name)
  ring = np.ndarray(ring_shape, dtype=np.uint8, buffer=shm.buf)
  try:
    while not stop.is_set():
      try: task = tasks.get(timeout=1.0)
      except queue.Empty:
        # the parent was killed (SIGKILL, OOM killer), perhaps before we even started: do not linger as an orphan
        if os.getppid() != parent: break
        continue
      if task is None: break
      seq, slot, items = task
      done, err = 0, None
      for row, index, path in items:
        if stop.is_set(): break
        try:
          ring[slot, row] = decode_train(path, image_size, image_rng(seed, epoch, index), draft) if train else \
                            decode_eval(path, image_size, draft)
        except Exception as e:  # noqa: BLE001 -- any failure is reported with the file that caused it
          err = (path, f"{type(e).__name__}: {e}")
          break
        done += 1
      results.put((seq, done, err))
  finally:
    del ring
    shm.close()


def _map_ring(shm: shared_memory.SharedMemory, shape: tuple) -> np.ndarray:
  """The parent's view of the ring. Batches handed to the caller are views of it and may outlive the loader, so the
  mapping must live exactly as long as the last view: np.frombuffer over an mmap of our own holds a buffer export, and
  the mapping goes away with the last array (np.ndarray(buffer=shm.buf) would not, and SharedMemory.close() would
  unmap memory still in use: a segfault). The SharedMemory object is then only needed to unlink the name."""
  path = os.path.join(SHM_DIR, shm.name.lstrip("/"))
  if os.path.exists(path):
    with open(path, "r+b") as f: mm = mmap.mmap(f.fileno(), shm.size)
    shm.close()
    return np.frombuffer(mm, dtype=np.uint8, count=int(np.prod(shape))).reshape(shape)
  return np.frombuffer(shm.buf, dtype=np.uint8, count=int(np.prod(shape))).reshape(shape)  # no /dev/shm (not Linux)


class _Resources:
  """Everything that must be released, kept apart from the loader so a weakref.finalize can release it."""
  def __init__(self):
    self.procs: list = []
    self.tasks = self.results = self.stop = None
    self.shm: shared_memory.SharedMemory | None = None
    self.closed = False

  def release(self):
    if self.closed: return
    self.closed = True
    if self.stop is not None: self.stop.set()
    for _ in self.procs:
      try: self.tasks.put_nowait(None)
      except Exception: pass  # noqa: BLE001 -- queue already broken: terminate() below handles the workers
    deadline = time.monotonic() + 5.0
    for p in self.procs:
      p.join(max(0.0, deadline - time.monotonic()))
    for p in self.procs:
      if p.is_alive(): p.terminate(); p.join(1.0)
      if p.is_alive(): p.kill(); p.join(1.0)
    for q in (self.tasks, self.results):
      if q is not None:
        q.cancel_join_thread()
        q.close()
    if self.shm is not None:
      try: self.shm.close()
      except BufferError: pass  # only without /dev/shm (_map_ring): the mapping lives until the caller's views go
      try: self.shm.unlink()
      except FileNotFoundError: pass
      self.shm = None


def real_rows(n_real: int, batch_size: int, shards: int = 1) -> np.ndarray:
  """Rows of a batch that hold its n_real real samples, in epoch order: dealt evenly over the `shards` contiguous
  row blocks the batch is split into across devices (the first n_real % shards blocks get one more), each block's
  real rows first. A batch with n_real >= shards thus gives every device real images: with unsynced BatchNorm, a
  device fed padding only would update its running statistics from mean-pixel images alone."""
  per = batch_size // shards
  q, r = divmod(n_real, shards)
  return np.concatenate([s * per + np.arange(q + (s < r)) for s in range(shards)]).astype(np.int64)


class BatchLoader:
  """Iterator over (x uint8 [B,H,W,3], y int32 [B], n_real). Create it with batches(); see that docstring."""

  def __init__(self, split_files, labels, batch_size: int, train: bool, seed: int, epoch: int, image_size: int,
               num_workers: int, ring_batches: int, keep: int = 1, draft: bool = USE_DRAFT, start_method: str = "spawn",
               shards: int = 1):
    files = [str(f) for f in split_files]
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    if not files: raise DataError("batches(): the file list is empty; check the split in the manifest.")
    if len(files) != len(labels):
      raise DataError(f"batches(): {len(files)} files but {len(labels)} labels; pass the lists of one manifest split.")
    for name, v in (("batch_size", batch_size), ("image_size", image_size), ("ring_batches", ring_batches),
                    ("keep", keep), ("shards", shards)):
      if not isinstance(v, (int, np.integer)) or v < 1: raise DataError(f"batches(): {name} must be a positive integer, got {v!r}.")
    if batch_size % shards:
      raise DataError(f"batches(): batch_size={batch_size} does not split into shards={shards} equal device shards; "
                      f"make the batch size (BS, EVAL_BS) a multiple of GPUS in the platform config.")
    if ring_batches < keep:
      raise DataError(f"batches(): ring_batches={ring_batches} must be >= keep={keep} (batches the caller holds at once).")
    if seed < 0 or epoch < 0: raise DataError(f"batches(): seed and epoch must be >= 0, got {seed}, {epoch}.")
    self.batch_size, self.image_size, self.train, self.keep = int(batch_size), int(image_size), bool(train), int(keep)
    self.n = len(files)
    self.n_batches = -(-self.n // self.batch_size)
    self.shards = int(shards)
    self.first_real = self.n - (self.n_batches - 1) * self.batch_size  # real samples in batch 0, the padded one
    self.num_workers = int(num_workers) if num_workers and num_workers > 0 else default_num_workers()
    self.ring_batches = min(int(ring_batches), self.n_batches)
    self._files, self._labels = files, labels
    self._order = epoch_order(self.n, self.train, seed, epoch)
    self._chunk = max(1, min(32, -(-self.batch_size // (2 * self.num_workers))))
    self.last_wait_s = 0.0   # seconds the last __next__ waited for decoders (the caller's "fetch data" time)
    self.total_wait_s = 0.0
    self.wait_s: list[float] = []
    self._next_seq = 0       # next batch to yield
    self._remaining: dict[int, int] = {}  # batch seq -> real rows not decoded yet
    self._y = np.full((self.ring_batches, self.batch_size), -1, dtype=np.int32)

    ring_shape = (self.ring_batches, self.batch_size, self.image_size, self.image_size, 3)
    nbytes = int(np.prod(ring_shape))
    check_shm_space(nbytes, f"data loader's ring ({self.ring_batches} batches x {self.batch_size} images x "
                            f"{self.image_size}x{self.image_size}x3 bytes)")
    self._res = res = _Resources()
    self._finalizer = weakref.finalize(self, res.release)
    try:
      res.shm = shared_memory.SharedMemory(name=f"{SHM_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:12]}", create=True,
                                           size=nbytes)
      self._ring = _map_ring(res.shm, ring_shape)
      ctx = mp.get_context(start_method)
      res.tasks, res.results, res.stop = ctx.Queue(), ctx.Queue(), ctx.Event()
      for w in range(min(self.num_workers, self.n)):
        p = ctx.Process(target=_worker_main, daemon=True, name=f"{WORKER_NAME}-{w}",
                        args=(res.shm.name, ring_shape, self.train, int(seed), int(epoch), self.image_size, bool(draft),
                              res.tasks, res.results, res.stop, os.getpid()))
        p.start()
        res.procs.append(p)
      for seq in range(self.ring_batches): self._dispatch(seq)
    except BaseException:
      self.close()
      raise

  def _span(self, seq: int) -> tuple[int, int]:
    """(position in the epoch order, real samples) of batch seq: batch 0 holds the remainder, the others are full."""
    if seq == 0: return 0, self.first_real
    return self.first_real + (seq - 1) * self.batch_size, self.batch_size

  def _dispatch(self, seq: int):
    slot, (start, n_real) = seq % self.ring_batches, self._span(seq)
    idx = self._order[start:start + n_real]
    rows = real_rows(n_real, self.batch_size, self.shards)
    self._y[slot, rows] = self._labels[idx]
    if n_real < self.batch_size:  # the first batch: the rest is mean-pixel images, label -1
      pad = np.setdiff1d(np.arange(self.batch_size), rows)
      self._y[slot, pad] = -1
      self._ring[slot, pad] = np.asarray(MEAN_PIXEL, dtype=np.uint8)
    self._remaining[seq] = n_real
    for lo in range(0, n_real, self._chunk):
      self._res.tasks.put((seq, slot, [(int(rows[k]), int(idx[k]), self._files[idx[k]])
                                       for k in range(lo, min(lo + self._chunk, n_real))]))

  def __iter__(self): return self
  def __len__(self): return self.n_batches
  def __enter__(self): return self
  def __exit__(self, *exc): self.close()

  def __next__(self):
    seq = self._next_seq
    if seq >= self.n_batches or self._res.closed:
      self.close()
      raise StopIteration
    try:
      release = seq - self.keep  # the batch whose slot the caller no longer holds: refill it
      if release >= 0 and release + self.ring_batches < self.n_batches: self._dispatch(release + self.ring_batches)
      t0 = time.perf_counter()
      while self._remaining[seq] > 0: self._collect_one()
      wait = time.perf_counter() - t0
    except BaseException:  # worker error, dead worker, KeyboardInterrupt: nothing may outlive us
      self.close()
      raise
    self.last_wait_s = wait
    self.total_wait_s += wait
    self.wait_s.append(wait)
    del self._remaining[seq]
    self._next_seq += 1
    slot, n_real = seq % self.ring_batches, self._span(seq)[1]
    x, y = self._ring[slot], self._y[slot].copy()
    if self._next_seq == self.n_batches: self.close()  # all decoded: stop workers, unlink (the view stays valid)
    return x, y, n_real

  def _collect_one(self):
    res = self._res
    while True:
      try:
        seq, done, err = res.results.get(timeout=1.0)
        break
      except queue.Empty:
        dead = [p for p in res.procs if p.exitcode is not None]
        if dead:
          p = dead[0]
          if p.exitcode == -signal.SIGKILL:
            how = ("was killed by signal 9, usually the out-of-memory killer: lower NUM_WORKERS, SHM_RING_BATCHES or "
                   "the batch size")
          elif p.exitcode < 0: how = f"was killed by signal {-p.exitcode}"
          else:
            how = (f"exited with code {p.exitcode} (its traceback is above on stderr; the spawn start method re-imports "
                   f"the main script, so its top-level code must sit under `if __name__ == \"__main__\":`)")
          raise DataError(f"data loader worker (pid {p.pid}) {how}; it died while decoding batch {self._next_seq}.") from None
    if err is not None:
      path, msg = err
      raise DataError(f"{path}: cannot decode this image ({msg}). Replace the file or rerun `tinyperf prep` "
                      f"(`tinyperf prep imagenet --verify DATA_DIR` lists every unreadable file).")
    self._remaining[seq] -= done

  def close(self):
    """Stop the workers and unlink the shared memory. Idempotent; also runs on exhaustion, errors and garbage collection."""
    self._ring = None  # drop our own view first, so the segment can be unmapped when the caller holds none
    self._finalizer()

  def stats(self) -> dict:
    w = sorted(self.wait_s)
    return {"batches": len(w), "total_wait_s": self.total_wait_s,
            "median_wait_s": w[len(w) // 2] if w else 0.0, "max_wait_s": w[-1] if w else 0.0}


def batches(split_files, labels, batch_size: int, train: bool, seed: int, epoch: int, image_size: int,
            num_workers: int, ring_batches: int, *, keep: int = 1, draft: bool = USE_DRAFT, shards: int = 1) -> BatchLoader:
  """Iterate one epoch of a split as (x, y, n_real) batches, decoded by worker processes into a shared-memory ring.

  x: uint8 [batch_size, image_size, image_size, 3] NHWC, a view into the ring: valid until `keep` more batches have
     been requested (copy it, or move it to the device, before that); y: int32 [batch_size] labels, -1 for padding;
  n_real: real samples in the batch. Every batch is full: the FIRST batch of the epoch holds the remainder
  (N mod batch_size real samples) and is filled up with mean-pixel images, label -1, as upstream pads.
  shards: the devices the caller splits each batch over (axis 0, equal blocks); the first batch's real samples are
  dealt evenly over them (real_rows), so with N mod batch_size >= shards no device ever gets a padding-only shard,
  and the batches right before an eval are always full. Find a batch's real rows with y >= 0.
  train=True: order shuffled from (seed, epoch); RandomResizedCrop + flip drawn from (seed, epoch, file index).
  train=False: file order; resize short side to image_size*256/224, center crop.
  num_workers <= 0: one worker per available core. ring_batches: batches decoded ahead (capped at the epoch's batches).
  The iterator's last_wait_s / wait_s / stats() tell how long the caller waited for data.
  Raises DataError for an unreadable image (naming it), a dead worker, or a /dev/shm too small for the ring.
  Use it as a context manager, or call close(), when stopping early; garbage collection also cleans up."""
  return BatchLoader(split_files, labels, batch_size, train, seed, epoch, image_size, num_workers, ring_batches,
                     keep=keep, draft=draft, shards=shards)
