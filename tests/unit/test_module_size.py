"""Every Python file of the repository (tooling/, benchmarks/, lab/, tests/, scripts/) is at most MAX_LINES lines: one
that grows past it is split along a seam of what it does, into modules whose names say what they are."""
from __future__ import annotations
import subprocess
from pathlib import Path

from conftest import REPO

MAX_LINES = 600


def python_files(root: Path) -> list[Path]:
  """The .py files git tracks under root, and new ones it does not ignore (a file not yet added counts too); outside a
  git checkout (an unpacked archive), every .py file there but those in hidden folders (.venv, .git) and caches."""
  try:
    r = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.py"], cwd=root,
                       capture_output=True, text=True, timeout=60)
    tracked = [root / p for p in r.stdout.split("\0") if p] if r.returncode == 0 else None
  except OSError:   # no git on this machine
    tracked = None
  if tracked is not None: return sorted(p for p in tracked if p.is_file())   # a tracked file deleted here is not read
  return sorted(p for p in root.rglob("*.py") if p.is_file() and not any(
    part.startswith(".") or part == "__pycache__" for part in p.relative_to(root).parts[:-1]))


def over_limit(paths: list[Path], root: Path) -> list[str]:
  """'path: N lines' for each file longer than MAX_LINES."""
  counts = {p: len(p.read_bytes().splitlines()) for p in paths}
  return [f"{p.relative_to(root)}: {n} lines" for p, n in counts.items() if n > MAX_LINES]


def test_every_python_file_is_at_most_600_lines():
  files = python_files(REPO)
  assert Path(__file__).resolve() in files and len(files) > 100, f"only {len(files)} .py files found: the walk broke"
  long = over_limit(files, REPO)
  assert not long, (f"Python files over {MAX_LINES} lines; split each along a seam of what it does (not by cutting at "
                    f"line {MAX_LINES}):\n  " + "\n  ".join(long))


def test_the_limit_names_each_file_over_it_and_only_those(tmp_path):
  for name, n in (("at_limit.py", MAX_LINES), ("over.py", MAX_LINES + 1), ("no_final_newline.py", MAX_LINES + 1)):
    text = "x = 1\n" * n
    (tmp_path / name).write_text(text[:-1] if name.startswith("no_final") else text)
  assert over_limit(sorted(tmp_path.iterdir()), tmp_path) == [f"no_final_newline.py: {MAX_LINES + 1} lines",
                                                             f"over.py: {MAX_LINES + 1} lines"]


def test_outside_a_git_checkout_every_python_file_is_walked_but_hidden_folders(tmp_path):
  for rel in ("a.py", "pkg/b.py", "pkg/notes.txt", ".venv/lib/c.py", "pkg/__pycache__/d.py"):
    (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / rel).write_text("x = 1\n")
  assert python_files(tmp_path) == [tmp_path / "a.py", tmp_path / "pkg/b.py"]
