"""A plain `pip install .` (the wheel alone, not editable) into a fresh virtualenv: the verbs that need only the Python
packages work from any directory; the verbs that read repository files (images.lock.json, systems/) refuse in one
paragraph with the fix (install editable from the git checkout), never a traceback or a misleading "restore it" error.
The README offers only the editable install; this is what a user who does otherwise meets."""
from __future__ import annotations
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
  tmp = tmp_path_factory.mktemp("wheel")
  subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"),
                  str(REPO)], check=True, capture_output=True, timeout=300)
  (whl,) = (tmp / "dist").glob("tinyperf-*.whl")
  return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
  v = tmp_path_factory.mktemp("venv") / "venv"
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True, timeout=120)
  subprocess.run([sys.executable, "-m", "pip", "--python", str(v / "bin/python"), "install", "-q", "--no-deps", str(wheel)],
                 check=True, capture_output=True, timeout=300)
  # the locked dependencies from this test's environment (the project itself from the wheel: .pth files of a directory
  # named in a .pth are not run, so this environment's editable install stays out)
  (sp,) = (v / "lib").glob("python3*/site-packages")
  (sp / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
  return v


def test_the_wheel_holds_no_lab_file(wheel):
  import zipfile
  names = zipfile.ZipFile(wheel).namelist()
  assert "tooling/ship/report.py" in names and not [n for n in names if n.startswith("lab/")], names


def _tinyperf(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
  return subprocess.run([str(venv / "bin/tinyperf"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_wheel_alone_runs_its_own_verbs_and_refuses_the_repository_ones_with_the_fix(venv, tmp_path):
  where = subprocess.run([str(venv / "bin/python"), "-c", "import tinyperf.tooling; print(tinyperf.tooling.__file__)"], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
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
  assert not (sp / ".env").exists() and not (sp / "out").exists()
  # --verify reads the tarball and its sha1 only, never images.lock.json
  import hashlib, tarfile
  (tmp_path / "x.txt").write_text("x\n")
  tarball = tmp_path / "mlperf_submission_myorg.tar.gz"
  with tarfile.open(tarball, "w:gz") as t: t.add(tmp_path / "x.txt", arcname="myorg/x.txt")
  (tmp_path / "mlperf_submission_myorg.sha1").write_text(f"{hashlib.sha1(tarball.read_bytes()).hexdigest()}  {tarball.name}\n")
  r = _tinyperf(venv, "package", "--verify", tarball.name, cwd=tmp_path)
  assert "sha1: ok" in r.stdout and "pip install" not in r.stderr, r.stdout + r.stderr
