"""pyflakes' rules over the code (ruff's F set): an undefined name is a NameError only on the line that runs it (a
write error on a full disk met one, 2026-12-02), and an unused import is a leftover of a move. Only the rules that
find faults; style is not tested."""
import subprocess
import sys

from conftest import REPO

TREES = ("tinyperf", "setup.py", "tooling", "benchmarks", "lab", "scripts", "tests")


def test_no_undefined_names_or_unused_imports():
  r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "F", "--output-format", "concise",
                      *TREES], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
