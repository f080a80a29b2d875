"""MLCommons TF1 BERT checkpoint (model.ckpt-28252) -> safetensors with our state-dict names, and back-check.

`python -m tinyperf.benchmarks.bert.prep checkpoint --tf DIR --out FILE [--verify]` (DIR: the directory holding `checkpoint`
and model.ckpt-28252.*, or the checkpoint prefix itself). Only this conversion imports TensorFlow (the optional
`convert` extra: pip install tensorflow-cpu); training reads the safetensors file with tinygrad and never imports it.

The mapping is an explicit table (tf_name_table): every TF model variable has exactly one destination name and a
transpose flag; TF dense kernels are (in, out), our Linear weights (out, in) -> transposed. cls/seq_relationship/
output_weights is stored (2, hidden) by TF already (used with transpose_b) -> not transposed. Optimizer state is skipped:
any variable whose path has a component adam_m, adam_v, LAMB or LAMB_1, and global_step, beta1_power, beta2_power.
Any other variable the table does not know, and any table entry the checkpoint lacks, is an error that lists the names.
The MLM decoder weight is the word-embedding table (tied): the checkpoint has no separate decoder kernel.

The output is a plain safetensors file (float32, little endian, written with numpy: no tinygrad device work) with
metadata {"format": FORMAT, "source": ..., "layers": ...}. verify() reloads both files and compares every tensor
bit-exactly.
"""
from __future__ import annotations
import json
import os
import re
import struct
from pathlib import Path
from typing import Mapping

import numpy as np

from tinyperf.benchmarks.common.io import InputError

FORMAT = "tinyperf-bert-weights-v1"
SLOT_COMPONENTS = {"adam_m", "adam_v", "LAMB", "LAMB_1"}
SKIP_NAMES = {"global_step", "beta1_power", "beta2_power"}
LAYER_RE = re.compile(r"^bert/encoder/layer_(\d+)/")


def is_optimizer_state(name: str) -> bool:
  parts = name.split("/")
  return bool(SLOT_COMPONENTS & set(parts)) or parts[-1] in SKIP_NAMES


def tf_name_table(layers: int) -> dict[str, tuple[str, bool]]:
  """TF variable name -> (our state-dict name, transpose?) for a `layers`-layer BertForPreTraining checkpoint."""
  t: dict[str, tuple[str, bool]] = {}

  def dense(tf: str, ours: str):
    t[f"{tf}/kernel"] = (f"{ours}.weight", True)
    t[f"{tf}/bias"] = (f"{ours}.bias", False)

  def ln(tf: str, ours: str):
    t[f"{tf}/gamma"] = (f"{ours}.weight", False)
    t[f"{tf}/beta"] = (f"{ours}.bias", False)

  for e in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
    t[f"bert/embeddings/{e}"] = (f"bert.embeddings.{e}.weight", False)
  ln("bert/embeddings/LayerNorm", "bert.embeddings.LayerNorm")
  for i in range(layers):
    tf, ours = f"bert/encoder/layer_{i}", f"bert.encoder.layer.{i}"
    for q in ("query", "key", "value"): dense(f"{tf}/attention/self/{q}", f"{ours}.attention.self.{q}")
    dense(f"{tf}/attention/output/dense", f"{ours}.attention.output.dense")
    ln(f"{tf}/attention/output/LayerNorm", f"{ours}.attention.output.LayerNorm")
    dense(f"{tf}/intermediate/dense", f"{ours}.intermediate.dense")
    dense(f"{tf}/output/dense", f"{ours}.output.dense")
    ln(f"{tf}/output/LayerNorm", f"{ours}.output.LayerNorm")
  dense("bert/pooler/dense", "bert.pooler.dense")
  dense("cls/predictions/transform/dense", "cls.predictions.transform.dense")
  ln("cls/predictions/transform/LayerNorm", "cls.predictions.transform.LayerNorm")
  t["cls/predictions/output_bias"] = ("cls.predictions.bias", False)
  t["cls/seq_relationship/output_weights"] = ("cls.seq_relationship.weight", False)
  t["cls/seq_relationship/output_bias"] = ("cls.seq_relationship.bias", False)
  return t


def count_layers(names) -> int:
  idx = [int(m.group(1)) for n in names if (m := LAYER_RE.match(n))]
  return max(idx) + 1 if idx else 0


def convert_arrays(tf_arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """TF name -> array (optimizer state allowed, it is dropped) -> our name -> float32 array. Raises InputError naming
  every unmapped TF variable and every expected variable that is missing."""
  model = {n: a for n, a in tf_arrays.items() if not is_optimizer_state(n)}
  table = tf_name_table(count_layers(model))
  unmapped, missing = sorted(model.keys() - table.keys()), sorted(table.keys() - model.keys())
  if unmapped or missing:
    raise InputError(f"the TF checkpoint does not match BERT's variable table: {len(unmapped)} unmapped variable(s) "
                     f"{unmapped}, {len(missing)} missing variable(s) {missing}. Is this the MLCommons BERT checkpoint?")
  out = {}
  for tf_name, (ours, transpose) in table.items():
    a = np.asarray(model[tf_name], dtype=np.float32)
    out[ours] = np.ascontiguousarray(a.T if transpose else a)
  return out


# ------------------------------------------------------------------------------------------------ TF side (lazy import)

def _tf():
  try:
    import tensorflow as tf  # noqa: F401  (only the conversion needs it)
  except ImportError:
    raise InputError("reading the TF checkpoint needs TensorFlow: pip install tensorflow-cpu (the `convert` extra, "
                     "pip install '.[convert]'). Training itself never imports it.") from None
  return tf


def resolve_checkpoint(path: str | os.PathLike) -> str:
  """A checkpoint directory (through its `checkpoint` file, else the single *.index in it) or prefix -> the prefix."""
  p = Path(path)
  if p.is_dir():
    tf = _tf()
    latest = tf.train.latest_checkpoint(str(p))
    if latest: return latest
    idx = sorted(p.glob("*.index"))
    if len(idx) == 1: return str(idx[0])[:-len(".index")]
    raise InputError(f"{p}: no TF checkpoint found (no `checkpoint` file and {len(idx)} *.index files). Point --tf at "
                     f"the directory with model.ckpt-28252.* (prep download puts it in DATA) or at the prefix.")
  if Path(f"{p}.index").is_file(): return str(p)
  raise InputError(f"{p}: neither a checkpoint directory nor a checkpoint prefix ({p}.index not found).")


def read_tf_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """Every variable of a TF checkpoint as numpy (optimizer slots included; convert_arrays drops them)."""
  tf = _tf()
  prefix = resolve_checkpoint(path)
  reader = tf.train.load_checkpoint(prefix)
  return {name: np.asarray(reader.get_tensor(name)) for name in sorted(reader.get_variable_to_shape_map())}


# ------------------------------------------------------------------------------------------------ safetensors (numpy)

def write_safetensors(path: str | os.PathLike, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> Path:
  """float32 tensors -> safetensors file, atomically (temp file + rename)."""
  header: dict = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
  off = 0
  names = sorted(tensors)
  for n in names:
    a = tensors[n]
    assert a.dtype == np.float32, f"{n}: {a.dtype}"
    header[n] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
    off += a.nbytes
  hb = json.dumps(header, separators=(",", ":")).encode()
  hb += b" " * (-len(hb) % 8)
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
  try:
    with open(tmp, "wb") as f:
      f.write(struct.pack("<Q", len(hb)) + hb)
      for n in names: f.write(np.ascontiguousarray(tensors[n], dtype="<f4").tobytes())
      f.flush(); os.fsync(f.fileno())
    os.replace(tmp, path)
  finally:
    if tmp.exists(): tmp.unlink()
  return path


def read_safetensors(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str]]:
  """(name -> float32 array, metadata) of a file written by write_safetensors."""
  data = Path(path).read_bytes()
  (n,) = struct.unpack("<Q", data[:8])
  header = json.loads(data[8:8 + n])
  meta = header.pop("__metadata__", {})
  base, out = 8 + n, {}
  for name, h in header.items():
    if h["dtype"] != "F32": raise InputError(f"{path}: {name} is {h['dtype']}, expected F32")
    s, e = h["data_offsets"]
    out[name] = np.frombuffer(data, dtype="<f4", count=(e - s) // 4, offset=base + s).reshape(h["shape"])
  return out, meta


# ------------------------------------------------------------------------------------------------ entry points

def convert(tf_path: str | os.PathLike, out: str | os.PathLike, quiet: bool = False) -> dict:
  """TF checkpoint -> safetensors at `out`; then verify. Returns a summary dict."""
  tf_arrays = read_tf_checkpoint(tf_path)
  skipped = sorted(n for n in tf_arrays if is_optimizer_state(n))
  ours = convert_arrays(tf_arrays)
  layers = count_layers(tf_arrays)
  n_params = sum(a.size for a in ours.values())
  write_safetensors(out, ours, {"format": FORMAT, "source": resolve_checkpoint(tf_path), "layers": layers,
                                "parameters": n_params})
  problems = verify(tf_path, out, tf_arrays=tf_arrays)
  if problems: raise InputError(f"{out}: verification against {tf_path} failed: {problems}")
  if not quiet:
    print(f"prep checkpoint: {len(ours)} tensors ({n_params:,} parameters, {layers} layers) -> {out}; skipped "
          f"{len(skipped)} optimizer variables; verified: every tensor equal")
  return {"tensors": len(ours), "parameters": n_params, "layers": layers, "skipped": skipped}


def verify(tf_path: str | os.PathLike, st_path: str | os.PathLike, tf_arrays=None) -> list[str]:
  """Compare every tensor of the safetensors file with the TF checkpoint (through the table, bit-exact). Returns the
  problems (empty = identical)."""
  tf_arrays = read_tf_checkpoint(tf_path) if tf_arrays is None else tf_arrays
  mine, meta = read_safetensors(st_path)
  problems = [] if meta.get("format") == FORMAT else [f"format {meta.get('format')!r} != {FORMAT!r}"]
  model = {n: a for n, a in tf_arrays.items() if not is_optimizer_state(n)}
  table = tf_name_table(count_layers(model))
  for tf_name, (ours, transpose) in sorted(table.items()):
    if tf_name not in model: problems.append(f"{tf_name}: not in the TF checkpoint"); continue
    if ours not in mine: problems.append(f"{ours}: not in {st_path}"); continue
    ref = np.asarray(model[tf_name], np.float32)
    ref = ref.T if transpose else ref
    if ref.shape != mine[ours].shape: problems.append(f"{ours}: shape {mine[ours].shape} != {ref.shape}")
    elif not np.array_equal(ref, mine[ours]): problems.append(f"{ours}: values differ from {tf_name}")
  extra = sorted(mine.keys() - {o for o, _ in table.values()})
  problems += [f"{n}: in {st_path} but not in the table" for n in extra]
  return problems
