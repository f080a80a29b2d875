"""What `tinyperf run --scheduler` names: local (tooling/launch/run.py) runs the set's runs here, one after the other;
slurm (tooling/launch/slurm.py) submits an sbatch array job whose tasks each run local on their node. The run loop, the
backends and sysinfo know a scheduler only through this protocol: how it starts the runs and how a message words
redoing them."""
from __future__ import annotations
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
  import argparse
  from tinyperf.benchmarks.common.config import PlatformConfig
  from tinyperf.tooling.common.results_tree import ResultSet

OVERRIDES_FILE = "YAML or JSON of systems-JSON fields"   # what a --system-overrides file holds, as hints word it


class Scheduler(Protocol):
  name: str   # its --scheduler value

  def submit(self, cfg: PlatformConfig, rs: ResultSet, args: argparse.Namespace, nexp: int, runtime: str,
             overrides: dict, org: str) -> int:
    """Start (or queue) the set's runs not yet finished, on `runtime`, their logs naming submitter org: the exit code
    of `tinyperf run`."""
  def redo_hint(self, results: Path) -> str:
    """How a message tells the user to redo the unfinished runs of the set under results."""
  def overrides_hint(self, results: Path, overrides: Path | None) -> str:
    """How a message tells the user to give systems-JSON fields that are missing or wrong, and then redo the runs."""
