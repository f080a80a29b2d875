"""BERT pretraining shards: one binary file per text part, safe to load (no pickle) and memory-mappable.

Layout (docs/bert_data.md has the reasoning):
  bytes 0-7     magic b"TPBSHRD\\x01"
  bytes 8-15    little-endian uint64: length H of the JSON header
  bytes 16-16+H JSON header (utf-8, sorted keys), space padded; the first field starts at DATA_OFFSET (4096)
  fields        raw C-order little-endian arrays, each starting at a multiple of 64 bytes, in FIELDS order

The header records format/version, generator, max_seq_len, max_predictions, vocab_size, vocab_md5, the special-token
ids, the generation parameters (seed, dupe_factor, ...), part, source file and its sha256, count, and per field dtype,
shape, offset, nbytes and sha256, plus file_size. A shard whose version, size, max_seq_len, max_predictions or vocab
differs from what the reader expects is rejected with ShardError naming the file.
"""
from __future__ import annotations
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from tinyperf.benchmarks.common.io import InputError

MAGIC = b"TPBSHRD\x01"
FORMAT = "tinyperf-bert-shard"
VERSION = 2       # instances equal to the MLCommons reference generator's; a shard of any other version is refused
GENERATOR = "mlcommons-create_pretraining_data"
DATA_OFFSET = 4096
ALIGN = 64
SUFFIX = ".shard"

# name -> (dtype for vocab <= 65536, per-row shape key); ids use int32 for larger vocabs
FIELDS = (
  ("input_ids", "ids", "L"),
  ("input_mask", "u1", "L"),
  ("segment_ids", "u1", "L"),
  ("masked_lm_positions", "u2", "P"),
  ("masked_lm_ids", "ids", "P"),
  ("masked_lm_weights", "u1", "P"),
  ("next_sentence_labels", "u1", ""),
)
FIELD_NAMES = tuple(f[0] for f in FIELDS)


class ShardError(InputError):
  """A shard is missing, truncated, corrupt or made with other parameters; the message names the file and the fix."""


def _id_dtype(vocab_size: int) -> str:
  return "<u2" if vocab_size <= 65536 else "<i4"


def field_layout(count: int, max_seq_len: int, max_predictions: int, vocab_size: int) -> list[dict]:
  out, off = [], DATA_OFFSET
  for name, dt, shape_key in FIELDS:
    dtype = _id_dtype(vocab_size) if dt == "ids" else "<" + dt if dt != "u1" else "|u1"
    shape = [count] + ([max_seq_len] if shape_key == "L" else [max_predictions] if shape_key == "P" else [])
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    out.append({"name": name, "dtype": dtype, "shape": shape, "offset": off, "nbytes": nbytes})
    off += -(-nbytes // ALIGN) * ALIGN
  return out


class ShardWriter:
  """Write a shard atomically: a hidden temp file in the target directory, renamed into place by close().
  Rows must be written in order (write(chunk) appends len(chunk) rows to every field)."""

  def __init__(self, path: str | os.PathLike, meta: dict, count: int, max_seq_len: int, max_predictions: int,
               vocab_size: int):
    self.path = Path(path)
    self.layout = field_layout(count, max_seq_len, max_predictions, vocab_size)
    last = self.layout[-1]
    self.file_size = last["offset"] + last["nbytes"]
    self.header = {"format": FORMAT, "version": VERSION, "count": count, "max_seq_len": max_seq_len,
                   "max_predictions": max_predictions, "vocab_size": vocab_size, **meta}
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self.tmp = self.path.with_name(f".{self.path.name}.tmp.{os.getpid()}")
    self.f = open(self.tmp, "wb")
    self.f.truncate(self.file_size)
    self.rows = 0
    self.count = count
    self.hashes = {f["name"]: hashlib.sha256() for f in self.layout}   # per field, as rows arrive: no file to digest yet

  def write(self, chunk: dict[str, np.ndarray]):
    n = len(chunk["input_ids"])
    if self.rows + n > self.count: raise ValueError(f"{self.path}: more rows than announced ({self.count})")
    for f in self.layout:
      a = np.ascontiguousarray(chunk[f["name"]], dtype=f["dtype"])
      if list(a.shape[1:]) != f["shape"][1:] or len(a) != n:
        raise ValueError(f"{f['name']}: shape {a.shape}, expected (N, {f['shape'][1:]})")
      rowbytes = f["nbytes"] // self.count if self.count else 0
      self.f.seek(f["offset"] + self.rows * rowbytes)
      buf = memoryview(a).cast("B")   # no copy: the array's bytes as they are (C order, little-endian dtypes)
      self.f.write(buf)
      self.hashes[f["name"]].update(buf)
    self.rows += n

  def close(self) -> Path:
    if self.rows != self.count: raise ValueError(f"{self.path}: wrote {self.rows} rows, announced {self.count}")
    fields = [{**f, "sha256": self.hashes[f["name"]].hexdigest()} for f in self.layout]
    header = {**self.header, "fields": fields, "file_size": self.file_size}
    blob = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    if 16 + len(blob) > DATA_OFFSET: raise ValueError(f"header too large ({len(blob)} bytes)")
    self.f.seek(0)
    self.f.write(MAGIC + len(blob).to_bytes(8, "little") + blob + b" " * (DATA_OFFSET - 16 - len(blob)))
    self.f.flush(); os.fsync(self.f.fileno()); self.f.close()
    os.replace(self.tmp, self.path)
    return self.path

  def abort(self):
    try: self.f.close()
    finally:
      if self.tmp.exists(): self.tmp.unlink()

  def __enter__(self): return self
  def __exit__(self, exc_type, *_):
    if exc_type is not None: self.abort()


def read_header(path: str | os.PathLike) -> dict:
  """Parse and sanity-check the header (magic, version, file size, field layout). Raises ShardError."""
  path = Path(path)
  if not path.is_file():
    raise ShardError(f"{path}: shard not found. Create it with `python -m tinyperf.benchmarks.bert.prep pretrain` (or `eval`).")
  size = path.stat().st_size
  with open(path, "rb") as f:
    head = f.read(DATA_OFFSET)
  if len(head) < 16 or head[:8] != MAGIC:
    raise ShardError(f"{path}: not a tinyperf BERT shard (bad magic bytes{'; file truncated' if len(head) < 16 else ''}). "
                     f"Delete it and rerun prep to recreate it.")
  n = int.from_bytes(head[8:16], "little")
  try:
    if 16 + n > len(head): raise ValueError("header extends past the header block")
    header = json.loads(head[16:16 + n])
  except ValueError as e:
    raise ShardError(f"{path}: unreadable header ({e}); the file is truncated or corrupt. Delete it and rerun prep.") from None
  if header.get("format") != FORMAT or header.get("version") != VERSION:
    raise ShardError(f"{path}: format {header.get('format')!r:.40} version {header.get('version')!r:.40}; this code reads "
                     f"{FORMAT!r} version {VERSION} only and never mixes versions. Delete the shards (train/part-*.shard "
                     f"and eval.shard) and re-run `tinyperf prep wiki pretrain` and `tinyperf prep wiki eval`.")
  if size != header.get("file_size"):
    raise ShardError(f"{path}: {size} bytes on disk but the header says {header.get('file_size')}: the file is "
                     f"truncated or was appended to. Delete it and rerun prep for this part.")
  want = field_layout(header["count"], header["max_seq_len"], header["max_predictions"], header["vocab_size"])
  got = [{k: f[k] for k in ("name", "dtype", "shape", "offset", "nbytes")} for f in header.get("fields", [])]
  if got != want:
    raise ShardError(f"{path}: field layout in the header does not match the format; the file is corrupt. "
                     f"Delete it and rerun prep.")
  return header


def check_params(path, header: dict, max_seq_len: int, max_predictions: int, vocab_md5: str | None = None,
                 vocab_size: int | None = None):
  path = Path(path)
  for key, want in (("max_seq_len", max_seq_len), ("max_predictions", max_predictions), ("vocab_size", vocab_size),
                    ("vocab_md5", vocab_md5)):
    if want is not None and header.get(key) != want:
      raise ShardError(f"{path}: made with {key}={header.get(key)} but {want} is expected here. The shard belongs to "
                       f"another configuration: point to the right data directory, or delete the shard and rerun prep.")


def load_shard(path: str | os.PathLike, max_seq_len: int, max_predictions: int, mmap: bool = True, *,
               vocab_md5: str | None = None, vocab_size: int | None = None) -> dict[str, np.ndarray]:
  """Open a shard -> {field: array} for the 7 BERT fields, validated against the expected shapes (and vocab, when
  given). Arrays keep their compact on-disk dtypes (ids uint16, masks/weights/labels uint8, positions uint16) and
  are read-only memory maps when mmap=True; to_batch() converts rows to the training dtypes."""
  path = Path(path)
  header = read_header(path)
  check_params(path, header, max_seq_len, max_predictions, vocab_md5, vocab_size)
  out = {}
  for f in header["fields"]:
    shape = tuple(f["shape"])
    if mmap and f["nbytes"]:
      out[f["name"]] = np.memmap(path, dtype=f["dtype"], mode="r", offset=f["offset"], shape=shape)
    else:
      with open(path, "rb") as fh:
        fh.seek(f["offset"])
        out[f["name"]] = np.frombuffer(fh.read(f["nbytes"]), dtype=f["dtype"]).reshape(shape)
  return out


def to_batch(shard: dict[str, np.ndarray], rows) -> dict[str, np.ndarray]:
  """Rows of a loaded shard in the dtypes/shapes the training step takes: int32 everywhere, masked_lm_weights
  float32, next_sentence_labels (B, 1) as in the reference pipeline."""
  rows = np.asarray(rows)
  b = {k: np.asarray(shard[k][rows], dtype=np.int32) for k in FIELD_NAMES if k != "masked_lm_weights"}
  b["masked_lm_weights"] = np.asarray(shard["masked_lm_weights"][rows], dtype=np.float32)
  b["next_sentence_labels"] = b["next_sentence_labels"].reshape(-1, 1)
  return b


def verify_shard(path: str | os.PathLike, max_seq_len: int | None = None, max_predictions: int | None = None,
                 vocab_md5: str | None = None, vocab_size: int | None = None, chunk: int = 4096) -> list[str]:
  """Full check: header, per-field sha256, value ranges and layout of every row. Returns problems (empty = good)."""
  path = Path(path)
  try:
    header = read_header(path)
    check_params(path, header, header["max_seq_len"] if max_seq_len is None else max_seq_len,
                 header["max_predictions"] if max_predictions is None else max_predictions, vocab_md5, vocab_size)
    arrays = load_shard(path, header["max_seq_len"], header["max_predictions"])
  except ShardError as e:
    return [str(e)]
  problems = [] if header["count"] else [f"{path}: holds no instances (made from an empty text part); remake it"]
  with open(path, "rb") as fh:
    for f in header["fields"]:
      h = hashlib.sha256()   # one field's byte range, not the whole file: io.file_digest does not apply
      fh.seek(f["offset"]); left = f["nbytes"]
      while left:
        block = fh.read(min(left, 1 << 24)); h.update(block); left -= len(block)
      if h.hexdigest() != f.get("sha256"): problems.append(f"{path}: field {f['name']} fails its sha256 (corrupt data)")
  V, L, P = header["vocab_size"], header["max_seq_len"], header["max_predictions"]
  cls, sep = header.get("cls_id"), header.get("sep_id")
  pos_l = np.arange(L)[None]
  for s in range(0, header["count"], chunk):
    a = {k: np.asarray(v[s:s + chunk]).astype(np.int64) for k, v in arrays.items()}
    where = f"{path}: rows {s}-{s + len(a['input_ids']) - 1}"
    n = a["input_mask"].sum(1)
    if (a["input_ids"] >= V).any() or (a["masked_lm_ids"] >= V).any(): problems.append(f"{where}: token id >= vocab {V}")
    if (a["input_mask"] != (pos_l < n[:, None])).any(): problems.append(f"{where}: input_mask is not a prefix mask")
    if (n < 5).any() or (n > L).any(): problems.append(f"{where}: sequence length outside [5, {L}]")
    if ((a["input_ids"] != 0) & (pos_l >= n[:, None])).any(): problems.append(f"{where}: non-zero padding")
    seg = a["segment_ids"]
    s1 = seg.argmax(1)   # first segment-1 position
    if (seg > 1).any() or (np.diff(np.where(pos_l < n[:, None], seg, 1), axis=1) < 0).any() or (seg[:, 0] != 0).any() \
       or ((seg == 1) & (pos_l >= n[:, None])).any():
      problems.append(f"{where}: segment_ids are not 0...0 1...1 0-padding")
    rows, last, a_sep = np.arange(len(n)), np.clip(n - 1, 0, L - 1), np.clip(s1 - 1, 0, L - 1)
    if cls is not None and ((a["input_ids"][:, 0] != cls) | (a["input_ids"][rows, last] != sep)
                            | (a["input_ids"][rows, a_sep] != sep)).any():
      problems.append(f"{where}: [CLS]/[SEP] not where the segment layout puts them")
    w, p = a["masked_lm_weights"], a["masked_lm_positions"]
    k = w.sum(1)
    if (w > 1).any() or (w != (np.arange(P)[None] < k[:, None])).any(): problems.append(f"{where}: masked_lm_weights not a 0/1 prefix")
    if (k < 1).any(): problems.append(f"{where}: a row with no masked position")
    if ((p != 0) & (w == 0)).any() or ((a["masked_lm_ids"] != 0) & (w == 0)).any(): problems.append(f"{where}: non-zero prediction padding")
    pw = np.where(w == 1, p, L + 1)
    if ((np.diff(pw, axis=1) <= 0) & (np.arange(P - 1)[None] < (k - 1)[:, None])).any() or \
       ((w == 1) & ((p == 0) | (p >= n[:, None]) | (p == n[:, None] - 1) | (p == s1[:, None] - 1))).any():
      problems.append(f"{where}: masked_lm_positions not strictly increasing inside the sequence (or on [CLS]/[SEP])")
    if (a["next_sentence_labels"] > 1).any(): problems.append(f"{where}: next_sentence_labels outside {{0, 1}}")
    if len(problems) > 20: problems.append(f"{path}: (more problems not listed)"); break
  return problems


def dump_jsonl(path: str | os.PathLike, out, chunk: int = 1024) -> int:
  """Write a shard's rows as JSON Lines in the MLCommons TFRecord's keys and value types (the fixtures' format): one
  record per line in shard order, every value a list, masked_lm_weights as floats. Returns the number of rows."""
  header = read_header(path)
  arrays = load_shard(path, header["max_seq_len"], header["max_predictions"])
  for s in range(0, header["count"], chunk):
    rows = {k: np.asarray(v[s:s + chunk]).tolist() for k, v in arrays.items()}
    for r in range(len(rows["input_ids"])):
      rec = {k: rows[k][r] if k != "next_sentence_labels" else [rows[k][r]] for k in FIELD_NAMES}
      rec["masked_lm_weights"] = [float(x) for x in rec["masked_lm_weights"]]
      out.write(json.dumps(rec, separators=(",", ":")) + "\n")
  return header["count"]
