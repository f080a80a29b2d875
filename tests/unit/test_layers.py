"""`./test.sh unit` stays the fast layer: nothing under tests/integration/ is collected into it."""
import subprocess
import sys

from tests.conftest import REPO


def test_unit_selection_holds_no_integration_test():
  r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not integration", "tests"], cwd=REPO,
                     capture_output=True, text=True, timeout=300)
  ids = [line for line in r.stdout.splitlines() if "::" in line]
  assert r.returncode == 0 and len(ids) > 100, r.stdout[-1000:]
  assert not [i for i in ids if i.startswith("tests/integration/")]
  assert any(i.startswith("tests/unit/test_layers.py::") for i in ids)
