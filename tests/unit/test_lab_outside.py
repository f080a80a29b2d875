"""The perf lab (lab/) stays out of the product: no package of the wheel and no file of an image's build context is
the lab's, while `tinyperf report` (tooling/ship/report.py) travels in both."""
from __future__ import annotations
import os
import runpy

from tests.conftest import REPO


def test_the_wheel_finds_no_lab_package(monkeypatch):
  monkeypatch.chdir(REPO)   # setup.py finds the packages from the directory pip builds in
  packages = runpy.run_path(os.fspath(REPO / "setup.py"))["PACKAGES"]
  assert "tinyperf.tooling.ship" in packages, packages
  assert not [p for p in packages if "lab" in p.split(".") or p.split(".")[0] != "tinyperf"], packages


def test_the_images_get_no_lab_file():
  from tinyperf.tooling.prep import build
  files = build.context_files("Dockerfile.cpu")
  assert files is not None, "not a git checkout: the build context cannot be listed"
  assert "tooling/ship/report.py" in files and not [f for f in files if f.startswith("lab/")]
