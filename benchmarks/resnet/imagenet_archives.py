"""The two ILSVRC2012 archives (benchmarks/resnet/prep.py prepares ImageNet from them): what image-net.org serves, a
resumable download checked against its size and md5, and streaming extraction of the train tar of per-class tars and
of the flat val tar, whose images the labels file sorts into classes."""
from __future__ import annotations
import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import sys
import tarfile
import time
import zlib
from contextlib import contextmanager
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from tinyperf.benchmarks.resnet.data import SPLITS, DataError

URL_BASE = "https://image-net.org/data/ILSVRC/2012/"


@dataclass(frozen=True)
class Archive:
  name: str
  size: int
  md5: str


# The two ILSVRC2012 archives as image-net.org serves them (sizes and md5 as published with the download page).
ARCHIVES = {
  "train": Archive("ILSVRC2012_img_train.tar", 147_897_477_120, "1d675b47d978889d74fa0da5fadfb00e"),
  "val": Archive("ILSVRC2012_img_val.tar", 6_744_924_160, "29b22e2961454d5413ddabcf34fc5622"),
}
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_VAL_NAME = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG")   # image k of the validation set: line k of the labels file
_CHUNK = 1 << 20


def progress(**kw):
  """A progress bar on stderr as every step of prep draws one."""
  return tqdm(file=sys.stderr, mininterval=0.5, dynamic_ncols=True, **kw)


# ---------------------------------------------------------------------------------------------------------- download

def md5_file(path: Path, desc: str | None = None) -> str:
  # not io.file_digest: 148 GB of archives take minutes, so this reads its own chunks to drive a progress bar
  h = hashlib.md5()
  with open(path, "rb") as f, progress(total=path.stat().st_size, unit="B", unit_scale=True, unit_divisor=1024,
                                       desc=desc or f"md5 {path.name}") as bar:
    while chunk := f.read(8 * _CHUNK):
      h.update(chunk)
      bar.update(len(chunk))
  return h.hexdigest()


def check_archive(path: Path, archive: Archive, check_md5: bool = True) -> dict:
  """Size (always) and md5 (unless skipped) of a complete archive; DataError naming the file on a mismatch."""
  size = path.stat().st_size
  if size != archive.size:
    raise DataError(f"{path}: {size:,} bytes, but {archive.name} is {archive.size:,} bytes. The file is incomplete or "
                    f"not the ILSVRC2012 archive; delete it and download it again.")
  digest = None
  if check_md5:
    digest = md5_file(path)
    if digest != archive.md5:
      raise DataError(f"{path}: md5 {digest}, expected {archive.md5} for {archive.name}. The file is corrupt; delete it "
                      f"and download it again.")
  return {"name": archive.name, "size": size, "md5": digest or "not checked"}


def download(url: str, dest: Path, archive: Archive, retries: int = 5, timeout: float = 60.0,
             check_md5: bool = True) -> dict:
  """Download url to dest through dest.part, resuming with HTTP Range after a dropped connection (and across runs),
  then check size and md5. A bad download leaves nothing behind: the .part is removed and DataError names the file."""
  dest.parent.mkdir(parents=True, exist_ok=True)
  part = dest.with_name(dest.name + ".part")
  attempt = 0
  while True:
    have = part.stat().st_size if part.exists() else 0
    if have > archive.size: part.unlink(); have = 0
    if have == archive.size: break
    try:
      _fetch_into(url, part, have, archive, timeout)
    except (http.client.IncompleteRead, ConnectionError, socket.timeout, TimeoutError, urllib.error.URLError) as e:
      if isinstance(e, urllib.error.HTTPError): raise _http_error(url, e) from None
      attempt += 1
      got = part.stat().st_size if part.exists() else 0
      if attempt > retries:
        raise DataError(f"downloading {url} failed {attempt} times (last: {e}); {got:,} of {archive.size:,} bytes are "
                        f"in {part}. Rerun the same command to resume, or fetch the file yourself and pass "
                        f"--from-tars.") from None
      print(f"connection lost at {got:,} bytes ({e}); resuming ({attempt}/{retries})", file=sys.stderr)
      time.sleep(min(30.0, 0.5 * 2 ** (attempt - 1)))
  try:
    info = check_archive(part, archive, check_md5)
  except DataError:
    part.unlink()
    raise
  os.replace(part, dest)
  return info


def _http_error(url: str, e: urllib.error.HTTPError) -> DataError:
  if e.code in (401, 403):
    return DataError(f"{url}: HTTP {e.code}. image-net.org serves the ILSVRC2012 archives only to logged-in accounts: "
                     f"download them in a browser after signing in at image-net.org, then pass the folder with "
                     f"--from-tars DIR.")
  return DataError(f"{url}: HTTP {e.code} {e.reason}. Check --url-base, or download the archive yourself and pass "
                   f"--from-tars DIR.")


def _fetch_into(url: str, part: Path, have: int, archive: Archive, timeout: float):
  req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
  try:
    resp = urllib.request.urlopen(req, timeout=timeout)
  except urllib.error.HTTPError as e:
    if e.code == 416 and have: part.unlink(); raise ConnectionError("server refused the resume range; restarting") from None
    raise
  with resp:
    if have and resp.status == 206:
      start = int(re.match(r"bytes (\d+)-", resp.headers.get("Content-Range", "")).group(1)) \
              if resp.headers.get("Content-Range") else -1
      if start != have: raise DataError(f"{url}: asked to resume at byte {have:,}, server sent {resp.headers.get('Content-Range')!r}.")
      mode = "ab"
    else:
      have, mode = 0, "wb"  # the server ignored Range: start over
    length = resp.headers.get("Content-Length")
    if length is not None and have + int(length) != archive.size:
      raise DataError(f"{url}: the server announces {have + int(length):,} bytes, {archive.name} is {archive.size:,}. "
                      f"Wrong --url-base or a different file; nothing was kept.")
    with open(part, mode) as f, progress(total=archive.size, initial=have, unit="B", unit_scale=True,
                                         unit_divisor=1024, desc=archive.name) as bar:
      while chunk := resp.read(_CHUNK):
        f.write(chunk)
        bar.update(len(chunk))
      f.flush()
      os.fsync(f.fileno())
  got = part.stat().st_size
  if got != archive.size: raise ConnectionError(f"stream ended at {got:,} of {archive.size:,} bytes")


def load_checksums(path: str | None) -> dict[str, Archive]:
  """The archive table, or a JSON override {"train": {"name","size","md5"}, "val": {...}} (mirrors with repacked tars,
  tests)."""
  if not path: return dict(ARCHIVES)
  p = Path(path)
  try:
    raw = json.loads(p.read_text())
    return {s: Archive(str(v["name"]), int(v["size"]), str(v["md5"]).lower()) for s, v in raw.items() if s in SPLITS}
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise DataError(f"{p}: not a checksum table ({e}); expected JSON like "
                    f'{{"val": {{"name": "ILSVRC2012_img_val.tar", "size": 6744924160, "md5": "..."}}}}.') from None


# ---------------------------------------------------------------------------------------------------------- extract

def _safe(name: str, where: str) -> str:
  base = name.rsplit("/", 1)[-1]
  if not _SAFE_NAME.match(base): raise DataError(f"{where}: unexpected member name {name!r}; not an ILSVRC2012 archive?")
  return base


@contextmanager
def _reading(tar_path: Path, what: str):
  """A tar that does not parse (empty, garbage, truncated: tarfile's ReadError, an EOFError mid-member) is bad data
  naming the archive, not a traceback; our own DataErrors pass through."""
  try: yield
  except (tarfile.TarError, EOFError, zlib.error) as e:
    raise DataError(f"{tar_path}: not a readable {what} ({e or type(e).__name__}): the file is empty, truncated or "
                    f"damaged. Download it again; its md5 must be image-net.org's (prep checks it unless --no-md5, against "
                    f"--checksums when given).") from None


def _write_member(tf: tarfile.TarFile, m: tarfile.TarInfo, dest: Path):
  with tf.extractfile(m) as src, open(dest, "wb") as dst:
    shutil.copyfileobj(src, dst, _CHUNK)


def extract_train(tar_path: Path, dest: Path) -> list[str]:
  """The train archive is a tar of per-class tars (<wnid>.tar); stream both levels, never writing the inner tars."""
  dest.mkdir(parents=True)
  classes = []
  with _reading(tar_path, "train archive"), tarfile.open(tar_path, mode="r|") as outer, \
       progress(total=1000, unit="class", desc="train") as bar:
    for m in outer:
      if not m.isfile(): continue
      name = _safe(m.name, str(tar_path))
      if not name.endswith(".tar"): raise DataError(f"{tar_path}: member {m.name!r} is not a per-class .tar; not the train archive?")
      wnid = name[:-4]
      if (dest / wnid).exists(): raise DataError(f"{tar_path}: {m.name} appears twice; not the ILSVRC2012 train archive?")
      (dest / wnid).mkdir()
      with outer.extractfile(m) as inner_f, tarfile.open(fileobj=inner_f, mode="r|") as inner:
        for im in inner:
          if im.isfile(): _write_member(inner, im, dest / wnid / _safe(im.name, f"{tar_path}:{m.name}"))
      classes.append(wnid)
      bar.update(1)
  if not classes: raise DataError(f"{tar_path}: no per-class tars inside; not the ILSVRC2012 train archive.")
  return sorted(classes)


def read_val_labels(path: Path) -> list[str]:
  try: lines = [l.strip() for l in path.read_text(encoding="utf-8").splitlines()]
  except (OSError, UnicodeDecodeError) as e: raise DataError(f"{path}: cannot read the validation labels ({e}).") from None
  while lines and not lines[-1]: lines.pop()
  bad = [i + 1 for i, l in enumerate(lines) if not _SAFE_NAME.match(l)]
  if not lines or bad:
    raise DataError(f"{path}: expected one wnid per line (line k = class of ILSVRC2012_val_<k>.JPEG), "
                    f"{'empty file' if not lines else f'line {bad[0]} is {lines[bad[0] - 1]!r}'}. See docs/data.md for "
                    f"where this file comes from.")
  return lines


def extract_val(tar_path: Path, labels: list[str], labels_path: Path, dest: Path, classes: list[str] | None) -> list[str]:
  """The val archive is flat; image ILSVRC2012_val_<k>.JPEG belongs to the class on line k of the labels file (by its
  number, never by its position among the names: an archive with a renamed or missing image would shift every label
  after it)."""
  if classes is not None:
    unknown = sorted(set(labels) - set(classes))
    if unknown: raise DataError(f"{labels_path}: classes {', '.join(unknown[:5])} are not among the train archive's classes.")
  dest.mkdir(parents=True)
  for wnid in sorted(set(labels)): (dest / wnid).mkdir()
  seen: set[int] = set()
  with _reading(tar_path, "validation archive"), tarfile.open(tar_path, mode="r|") as tf, \
       progress(total=len(labels), unit="img", desc="val") as bar:
    for m in tf:
      if not m.isfile(): continue
      name = _safe(m.name, str(tar_path))
      if not (num := _VAL_NAME.fullmatch(name)):
        raise DataError(f"{tar_path}: member {m.name!r} is not named ILSVRC2012_val_<8 digits>.JPEG; the class of each "
                        f"image is the line of {labels_path} its number names, so the names must be the archive's "
                        f"originals. Not the ILSVRC2012 validation archive?")
      k = int(num[1])
      if k in seen: raise DataError(f"{tar_path}: {name} appears twice; not the ILSVRC2012 validation archive?")
      seen.add(k)
      if 1 <= k <= len(labels): _write_member(tf, m, dest / labels[k - 1] / name)
      bar.update(1)
  if len(seen) != len(labels):
    raise DataError(f"{labels_path} has {len(labels):,} labels but {tar_path} holds {len(seen):,} images; the labels "
                    f"file must be the one for this archive (50,000 lines for ILSVRC2012).")
  if missing := [k for k in range(1, len(labels) + 1) if k not in seen]:
    raise DataError(f"{tar_path} has no ILSVRC2012_val_{missing[0]:08d}.JPEG although {labels_path} labels it (line "
                    f"{missing[0]}); the images must be numbered 1 to {len(labels):,} as in the original archive.")
  return sorted(set(labels))

