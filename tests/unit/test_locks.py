"""The hash locks are portable: no dev machine's package index or wheel folder is baked into them."""
from tests.conftest import REPO


def test_locks_name_no_local_index():
  # a dev machine's --find-links/--extra-index-url in a lock points every other machine at paths it does not have
  for lock in REPO.glob("requirements*.lock"):
    bad = [l for l in lock.read_text().splitlines() if l.startswith(("--find-links", "--extra-index-url", "--index-url"))]
    assert not bad, f"{lock.name}: {bad}; regenerate with scripts/lock.sh"
