import os
from pathlib import Path
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TINYPERF_SHARED", REPO.parent / "shared"))


@pytest.fixture
def shared_dir() -> Path:
  """../shared (specs, reference submissions). CI always has it; elsewhere tests that need it skip."""
  if not (SHARED / "reference-submissions").is_dir(): pytest.skip(f"{SHARED}/reference-submissions is absent")
  return SHARED
