"""Shared test setup: the repository root and tests/ on sys.path, and the location of ../shared."""
from __future__ import annotations
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "tests"):
  if str(p) not in sys.path: sys.path.insert(0, str(p))


def shared_dir() -> Path:
  return Path(os.environ.get("TINYPERF_SHARED", REPO.parent / "shared"))


@pytest.fixture
def reference(tmp_path):
  """reference("v4.0") -> a scratch copy of shared/reference-submissions/v4.0/tinycorp; skips when shared/ is absent."""
  def get(version: str, copy: bool = True) -> Path:
    src = shared_dir() / "reference-submissions" / version / "tinycorp"
    if not src.is_dir(): pytest.skip(f"reference submissions not found at {src} (set TINYPERF_SHARED)")
    if not copy: return src
    dst = tmp_path / version / "tinycorp"
    shutil.copytree(src, dst)
    return dst
  return get


def pytest_collection_modifyitems(config, items):
  """Everything under tests/integration/ is in the slow layer, whether or not its file says so: a test file that forgot
  its `pytestmark` once put a multi-minute NULL-device BERT run into `./test.sh unit`."""
  slow = REPO / "tests" / "integration"
  for item in items:
    if slow in Path(item.fspath).parents: item.add_marker(pytest.mark.integration)
