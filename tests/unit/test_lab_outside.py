"""The perf lab (lab/) stays out of the product: no package of the wheel and no file of an image's build context is
the lab's, while `tinyperf report` (tooling/ship/report.py) travels in both."""
from __future__ import annotations
import tomllib

from setuptools import find_packages

from tests.conftest import REPO


def test_the_wheel_finds_no_lab_package():
  include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
  packages = find_packages(str(REPO), include=include)
  assert "tinyperf.tooling.ship" in packages and "lab" not in {p.split(".")[0] for p in packages}, packages


def test_the_images_get_no_lab_file():
  from tinyperf.tooling.prep import build
  files = build.context_files("Dockerfile.cpu")
  assert files is not None, "not a git checkout: the build context cannot be listed"
  assert "tooling/ship/report.py" in files and not [f for f in files if f.startswith("lab/")]
