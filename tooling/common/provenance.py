"""The commit the code came from, which an image (tinyperf build) and a Slurm task's script (tinyperf run) record."""
from __future__ import annotations
import subprocess

from tinyperf.benchmarks.common.config import ROOT


def git_revision() -> str:
  """HEAD's sha, with -dirty when the tree has uncommitted changes (the image then holds code no commit has)."""
  try:
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True, timeout=30).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return "unknown"
  return (sha + ("-dirty" if dirty else "")) if sha else "unknown"
