"""A plain `pip install .` (the wheel alone, not editable) into a fresh virtualenv: the verbs that need only the Python
packages work from any directory; the verbs that read repository files (images.lock.json, systems/) refuse in one
paragraph with the fix (install editable from the git checkout), never a traceback or a misleading "restore it" error.
The README offers only the editable install; this is what a user who does otherwise meets. The wheel claims one
top-level import name, tinyperf: benchmarks/ and tooling/ go in as tinyperf.benchmarks and tinyperf.tooling."""
from __future__ import annotations
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _outside() -> dict[str, str]:
  """The environment without the checkout on PYTHONPATH: there its package would import instead of the wheel's, and pip
  would take the in-tree build's tinyperf.egg-info for an installed tinyperf."""
  return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
  """The wheel of the checkout as it is (git's tracked and untracked-not-ignored files), built from a copy: a build
  writes build/ and *.egg-info into its source tree, which other tests read at the same time."""
  tmp = tmp_path_factory.mktemp("wheel")
  files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True,
                         check=True, timeout=60).stdout.decode().split("\0")
  for rel in filter(None, files):
    if (REPO / rel).is_file():
      (tmp / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(REPO / rel, tmp / "src" / rel)
  r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"),
                      str(tmp / "src")], capture_output=True, text=True, timeout=300, env=_outside())
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  (whl,) = (tmp / "dist").glob("tinyperf-*.whl")
  return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
  v = tmp_path_factory.mktemp("venv") / "venv"
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True, timeout=120)
  subprocess.run([sys.executable, "-m", "pip", "--python", str(v / "bin/python"), "install", "-q", "--no-deps", str(wheel)],
                 check=True, capture_output=True, timeout=300, env=_outside())
  # the locked dependencies from this test's environment (the project itself from the wheel: .pth files of a directory
  # named in a .pth are not run, so this environment's editable install stays out)
  (sp,) = (v / "lib").glob("python3*/site-packages")
  (v / "installed.txt").write_text("\n".join(sorted(p.name for p in sp.iterdir())))   # before deps.pth is added
  (sp / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
  return v


def test_the_wheel_holds_no_lab_file(wheel):
  import zipfile
  names = zipfile.ZipFile(wheel).namelist()
  assert "tinyperf/tooling/ship/report.py" in names and not [n for n in names if "lab/" in n], names


def test_the_install_claims_only_the_tinyperf_import_name(venv):
  # site-packages of a fresh venv without pip: empty before the install; a generic name (benchmarks, tooling) would clash
  # with any other project's
  added = (venv / "installed.txt").read_text().split()
  assert [n for n in added if not n.endswith(".dist-info")] == ["tinyperf"], added
  names = {p.name for p in (venv / "lib").glob("python3*/site-packages/tinyperf/*")}
  assert {"__init__.py", "benchmarks", "tooling"} <= names, names


def _tinyperf(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
  return subprocess.run([str(venv / "bin/tinyperf"), *args], cwd=cwd, env=_outside(), capture_output=True, text=True, timeout=300)


def test_wheel_alone_runs_its_own_verbs_and_refuses_the_repository_ones_with_the_fix(venv, tmp_path):
  where = subprocess.run([str(venv / "bin/python"), "-c", "import tinyperf.tooling.cli as c; print(c.__file__)"],
                         cwd=tmp_path, env=_outside(), capture_output=True, text=True, check=True).stdout
  assert where.startswith(str(venv)), where   # the wheel's copy, not the checkout
  r = _tinyperf(venv, "--version", cwd=tmp_path)
  assert r.returncode == 0 and r.stdout.startswith("tinyperf 0.") and "tinygrad 0.14.0" in r.stdout, r.stdout + r.stderr
  r = _tinyperf(venv, "run", "--help", cwd=tmp_path)
  assert r.returncode == 0 and "cpu_smoke" in r.stdout                      # the configs travel in the wheel
  for args in (["images", "show"], ["render", "--check"], ["sysinfo", "--system", "cpu_smoke"]):
    r = _tinyperf(venv, *args, cwd=tmp_path)
    assert r.returncode == 2 and "pip install --no-deps -e ." in r.stderr, (args, r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr and not r.stdout, (args, r.stderr)


def test_wheel_alone_compose_refuses_and_package_verify_needs_no_repository(venv, tmp_path):
  # compose writes .env and host directories beside compose.yaml: with no checkout there is none, so it refuses (it wrote
  # .env and out/ into site-packages and printed a `docker compose` command for a folder without compose.yaml)
  r = _tinyperf(venv, "compose", "check", cwd=tmp_path)
  assert r.returncode == 2 and "compose.yaml" in r.stderr and "pip install --no-deps -e ." in r.stderr, r.stdout + r.stderr
  assert "Traceback" not in r.stderr and not r.stdout
  (sp,) = (venv / "lib").glob("python3*/site-packages")
  assert not [p for p in (sp, sp / "tinyperf") for n in (".env", "out") if (p / n).exists()]
  # --verify reads the tarball and its sha1 only, never images.lock.json
  import hashlib, tarfile
  (tmp_path / "x.txt").write_text("x\n")
  tarball = tmp_path / "mlperf_submission_myorg.tar.gz"
  with tarfile.open(tarball, "w:gz") as t: t.add(tmp_path / "x.txt", arcname="myorg/x.txt")
  (tmp_path / "mlperf_submission_myorg.sha1").write_text(f"{hashlib.sha1(tarball.read_bytes()).hexdigest()}  {tarball.name}\n")
  r = _tinyperf(venv, "package", "--verify", tarball.name, cwd=tmp_path)
  assert "sha1: ok" in r.stdout and "pip install" not in r.stderr, r.stdout + r.stderr
