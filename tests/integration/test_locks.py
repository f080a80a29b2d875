"""The hash locks install on the oldest Python an image runs (3.11.0): pip-compile resolves for the Python it runs on,
and a lock made on 3.11.7 once named soupsieve 4.1.3 (Requires-Python >=3.11.5), which broke every image build.
Reads the package index (pip --dry-run), so it lives in the integration layer."""
import subprocess

from tests.conftest import REPO


def test_every_lock_installs_on_python_3_11_0():
  r = subprocess.run(["scripts/lock.sh", "--verify"], cwd=REPO, capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-4000:]
  for lock in ("requirements.lock", "requirements-dev.lock", "requirements-convert.lock", "requirements-gpulibs.lock",
               "requirements-testdata.txt"):
    assert f"{lock} installs on Python 3.11.0" in r.stderr

