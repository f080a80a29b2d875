"""What the launcher asks of a data set before it starts anything (both schedulers) and which platforms train on
stand-ins (the launcher's default submitter and the rendered files' instructions)."""
from __future__ import annotations
import shlex
from pathlib import Path

from tinyperf.benchmarks.common.config import PlatformConfig
from tinyperf.tooling.common.container import host_path
from tinyperf.tooling.common.errors import UserError


def stand_in_data(cfg: PlatformConfig) -> bool:
  """The CPU platform trains toy models on stand-in data (synthetic JPEGs; a small real-text corpus), never on the real
  ImageNet or Wikipedia."""
  return cfg["vendor"] == "cpu"


def check_prepared(cfg, data: Path, nothing: str = "Nothing was run."):
  """Cheap host-side check that `data` is a prepared data set for cfg's benchmark (run and Slurm, before anything is
  started); the preflight where the run runs verifies it in full."""
  if not data.is_dir():
    what = "is a file, not a directory" if data.exists() else "does not exist"
    raise UserError(f"data directory {host_path(data)} {what}; prepare a data set with `tinyperf prep ...` and pass its directory "
                    f"as --data. {nothing}")
  marker = data / cfg.spec.data_marker
  if not marker.is_file():
    q = shlex.quote(host_path(data))   # inside a compose service: the host directory behind /data
    how = cfg.spec.prep_hint(q, cfg.platform)
    raise UserError(f"{host_path(data)} is not a prepared, verified data set ({marker.name} is missing): run `{how}. "
                    f"{nothing}")
