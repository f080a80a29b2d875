"""The wheel's packages: tinyperf, with benchmarks/ and tooling/ of the repository root installed as tinyperf.benchmarks
and tinyperf.tooling, so `pip install .` claims no generic top-level name. Metadata and package data: pyproject.toml."""
from setuptools import find_namespace_packages, setup

# namespace packages too: the implementations/<platform>/ folders have no __init__.py and carry the configs
FOLDERS = ("benchmarks", "tooling")
PACKAGES = ["tinyperf", *(f"tinyperf.{p}" for p in find_namespace_packages(include=[f"{f}{s}" for f in FOLDERS for s in ("", ".*")]))]
PACKAGE_DIR = {f"tinyperf.{f}": f for f in FOLDERS}

if __name__ == "__main__":   # setuptools runs this file as __main__; tests read PACKAGES without building
  setup(packages=PACKAGES, package_dir=PACKAGE_DIR)
