"""Full training state (model + optimizer + scheduler) in one safetensors file, for CKPT / RESUME.

The state is every tensor reachable from the three objects (tinygrad.nn.state.get_state_dict walks their attributes):
model weights and BN running stats, the optimizers' momentum buffers and LR tensors, the scheduler's step counter.
The same tensor is reachable under several names (an optimizer's params *are* the model's weights, the scheduler holds
the optimizers), so each tensor is stored once under its first name, model first; the other names are recorded in the
header metadata ("aliases") and checked on load.

Loading assigns into the existing tensors (buffer identity is kept: a TinyJit captured before the load keeps working)
and places each value like its destination: replicated across devices, sharded on the same axis, or single-device.
On CPU a resumed run continues bit-identically (tests/unit/test_resnet_integration.py).
"""
from __future__ import annotations
import json
from pathlib import Path

from tinygrad import Tensor
from tinygrad.nn.state import get_state_dict, safe_load, safe_load_metadata, safe_save

FORMAT = "tinyperf-training-state-v1"


def training_state(model, optimizer, scheduler) -> tuple[dict[str, Tensor], dict[str, str]]:
  """(unique name -> tensor, alias name -> unique name). Names: model.<torchvision key>, optimizer.<path>,
  scheduler.<path>; each tensor appears once, under the first name in that order."""
  unique: dict[str, Tensor] = {}
  aliases: dict[str, str] = {}
  first_name: dict[int, str] = {}
  for name, t in get_state_dict({"model": model, "optimizer": optimizer, "scheduler": scheduler}).items():
    if id(t) in first_name: aliases[name] = first_name[id(t)]
    else: first_name[id(t)], unique[name] = name, t
  return unique, aliases


def _first_device(t: Tensor) -> str:
  """The device of a single-device tensor, the first of a multi-device one's: where a state tensor is read or written
  whole, never through tinygrad's CPU device (opening it compiles with clang, which a GPU host need not have)."""
  return t.device[0] if isinstance(t.device, tuple) else t.device


def save_state(path: str | Path, model, optimizer, scheduler, metadata: dict[str, str] | None = None) -> None:
  """Write the training state to `path` (safetensors). Multi-device tensors are written from their first device."""
  unique, aliases = training_state(model, optimizer, scheduler)
  # made contiguous on their (first) device, so that writing is a plain copy to the file: gathering them on tinygrad's
  # CPU device first compiled a kernel there (the 2xH200 config's per-device BN statistics)
  host = {k: t.to(_first_device(t)).contiguous() for k, t in unique.items()}
  Tensor.realize(*host.values())
  meta = {**(metadata or {}), "format": FORMAT, "aliases": json.dumps(aliases, sort_keys=True)}
  Path(path).parent.mkdir(parents=True, exist_ok=True)
  safe_save(host, str(path), metadata=meta)


def snapshot_state(model, optimizer, scheduler) -> dict[str, Tensor]:
  """The whole training state copied into new buffers (never views of the live ones), for restore_state: INIT
  warms the jitted steps up on fake data, which changes weights, momenta and step counters, then puts them back."""
  unique, _ = training_state(model, optimizer, scheduler)
  # not through tinygrad's CPU device: opening it compiles with clang, which a GPU host need not have (the H200 has
  # none). One device: read into numpy. Several: a copy on the same devices, which keeps the sharding.
  multi = {k: t.clone() for k, t in unique.items() if isinstance(t.device, tuple)}
  if multi: Tensor.realize(*multi.values())   # one schedule for all: per-tensor realizes cost ~2x (scheduling per call)
  return {k: multi[k] if k in multi else Tensor(t.numpy()) for k, t in unique.items()}


def restore_state(snapshot: dict[str, Tensor], model, optimizer, scheduler) -> None:
  """Assign a snapshot_state back into the same objects (buffer identity kept: the captured JIT stays valid)."""
  unique, _ = training_state(model, optimizer, scheduler)
  if unique.keys() != snapshot.keys(): raise ValueError("the training state changed its tensors since the snapshot")
  Tensor.realize(*[dst.assign(snapshot[k].shard_like(dst)) for k, dst in unique.items()])


def read_metadata(path: str | Path) -> dict[str, str]:
  return safe_load_metadata(str(path))[2].get("__metadata__", {})


def load_state(path: str | Path, model, optimizer, scheduler) -> dict[str, str]:
  """Restore a state written by save_state into freshly built objects of the same configuration (same model
  shape, devices, optimizer grouping). Raises ValueError naming the mismatch. Returns the file's metadata."""
  meta = read_metadata(path)
  if meta.get("format") != FORMAT: raise ValueError(f"{path}: not a training state ({FORMAT}); format={meta.get('format')!r}")
  stored = safe_load(str(path))
  unique, aliases = training_state(model, optimizer, scheduler)
  missing, extra = sorted(unique.keys() - stored.keys()), sorted(stored.keys() - unique.keys())
  if missing or extra:
    raise ValueError(f"{path}: training state does not match the model/optimizer: missing {missing[:5]}, "
                     f"unexpected {extra[:5]} ({len(missing)} missing, {len(extra)} unexpected)")
  if json.loads(meta.get("aliases", "{}")) != aliases:
    raise ValueError(f"{path}: tensor sharing differs from the current objects (different optimizer grouping?)")
  for k, dst in unique.items():  # validate everything before touching anything
    if (src := stored[k]).shape != dst.shape or src.dtype != dst.dtype:
      raise ValueError(f"{path}: {k} is {src.dtype} {src.shape} in the file but {dst.dtype} {dst.shape} here")
  for k, dst in unique.items(): dst.assign(stored[k].to(_first_device(dst)).shard_like(dst)).realize()
  return meta
