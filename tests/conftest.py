"""Shared test setup: the repository root and tests/ on sys.path, and the location of ../shared."""
from __future__ import annotations
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "tests"):
  if str(p) not in sys.path: sys.path.insert(0, str(p))


def shared_dir() -> Path:
  return Path(os.environ.get("TINYPERF_SHARED", REPO.parent / "shared"))


@pytest.fixture
def reference(tmp_path):
  """reference("v4.0") -> a scratch copy of shared/reference-submissions/v4.0/tinycorp; skips when shared/ is absent."""
  def get(version: str, copy: bool = True) -> Path:
    src = shared_dir() / "reference-submissions" / version / "tinycorp"
    if not src.is_dir(): pytest.skip(f"reference submissions not found at {src} (set TINYPERF_SHARED)")
    if not copy: return src
    dst = tmp_path / version / "tinycorp"
    shutil.copytree(src, dst)
    return dst
  return get


# xdist groups, longest first (CI's --durations): the Quickstart's five runs and the ResNet README in one fresh clone,
# the BERT README and the BERT runs on its data in another, the docker and Slurm engines
GROUP_ORDER = ("clone", "readme", "engines")


def pytest_collection_modifyitems(config, items):
  """Everything under tests/integration/ is in the slow layer, whether or not its file says so: a test file that forgot
  its `pytestmark` once put a multi-minute NULL-device BERT run into `./test.sh unit`."""
  slow = REPO / "tests" / "integration"
  for item in items:
    if slow in Path(item.fspath).parents: item.add_marker(pytest.mark.integration)
  # longest first: xdist hands out work in collection order, one group or test at a time, to whichever worker has
  # (almost) run out; the long groups started first on separate workers keep them from ending the run alone
  def rank(item):
    group = item.get_closest_marker("xdist_group")
    if group and group.args[0] not in GROUP_ORDER:
      raise pytest.UsageError(f"{item.nodeid}: xdist_group {group.args[0]!r} is not in tests/conftest.py GROUP_ORDER; add it there")
    if group: return GROUP_ORDER.index(group.args[0])
    return len(GROUP_ORDER) + (0 if slow in Path(item.fspath).parents else 1)
  items.sort(key=rank)   # stable: files and tests keep their order within a rank


def pytest_collection_finish(session):
  """Under `--dist loadgroup` every xdist_group test must carry its group in its node id (what xdist schedules by);
  pytest 9.2 silently stopped that (pytest-xdist#1386) and grouped tests then ran apart, each building its own clone."""
  if not getattr(session.config.option, "loadgroup", False): return   # set on xdist workers only
  lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
  if lost: raise pytest.UsageError(f"pytest-xdist --dist loadgroup is not grouping {lost[:3]}: install the locked "
                                   f"pytest (requirements-dev.lock; pytest 9.2 breaks it) or run with TEST_WORKERS=0")


def captured_kernels(jit) -> list[str]:
  """The names of a captured TinyJit's calls in order (kernels, copies): what two ways of capturing a step compare."""
  return [getattr(call.src[0].arg, "name", str(call.src[0].op)) for call in jit.captured.linear.src]


def user_env(**extra) -> dict:
  """The environment of a user at a fresh shell: none of the test run's virtualenv, PYTHONPATH or TINYPERF_* settings
  (CI's TINYPERF_WITH_CONVERT would pull TensorFlow into the clone's venv)."""
  venv = os.environ.get("VIRTUAL_ENV")
  path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if not (venv and p.startswith(venv))
          and not p.startswith(str(REPO / ".venv"))]
  env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH") and not k.startswith("TINYPERF_")}
  return {**env, "PATH": os.pathsep.join(path), **extra}


_TOOL_SERVER = None
_DEV_AT_START = os.environ.get("DEV")   # before any test module imported tinygrad


@pytest.fixture(autouse=True)
def environment_restored():
  """Each test starts and ends with the session's environment. tinygrad's first device lookup exports DEV (for its
  children), so a test that ran tinygrad on the CPU handed DEV=CPU to every later test's subprocesses in that worker:
  a 1xH200 run was then refused for KERNELS=triton off CUDA, or not, by the order the tests ran in."""
  saved = {k: v for k, v in os.environ.items() if k != "DEV"} | ({"DEV": _DEV_AT_START} if _DEV_AT_START else {})
  os.environ.clear(); os.environ.update(saved)
  yield
  os.environ.clear(); os.environ.update(saved)


@pytest.fixture(autouse=True)
def tool_server(request, monkeypatch):
  """MLCommons tools that a test runs in this process (check_path, the CLI's main()) come from a fork server that
  imported them once (tests/tool_server.py: about 2 CPU-s less per package_checker or result_summarizer run). A test
  about how the tools start as processes carries `@pytest.mark.real_tool_subprocess` and gets real subprocesses."""
  global _TOOL_SERVER
  if request.node.get_closest_marker("real_tool_subprocess") or os.environ.get("TINYPERF_TEST_TOOL_SERVER") == "0":
    yield None
    return
  from tinyperf.tooling.common import mlperf_tools
  from tool_server import RoutedSubprocess, ToolServer
  if _TOOL_SERVER is None: _TOOL_SERVER = ToolServer()
  monkeypatch.setattr(mlperf_tools, "subprocess", RoutedSubprocess(_TOOL_SERVER))
  yield _TOOL_SERVER


def pytest_configure(config):
  config.addinivalue_line("markers", "real_tool_subprocess: the MLCommons tools start as fresh `python -m` processes, "
                          "not from tests/tool_server.py")


def pytest_sessionfinish(session, exitstatus):
  if _TOOL_SERVER is not None: _TOOL_SERVER.stop()


@pytest.fixture
def fast_compile():
  """tinygrad's hand-coded kernel optimizations off (NOOPT=1) for a test whose time is compiling jitted steps on the
  CPU: about half the compile time (the BERT two-device test: 160 s -> 80 s on 2 busy cores), same math. Tests about
  what a config's own kernels do leave it out. Use: pytestmark = pytest.mark.usefixtures("fast_compile")."""
  from tinygrad import Context   # the test module has imported tinygrad already, after its knobs were set
  with Context(NOOPT=1): yield


@pytest.fixture(scope="session")
def fresh_clone(tmp_path_factory) -> Path:
  """`git clone` of this repository's HEAD, as a user starts: no venv, no out/, only committed files."""
  dst = tmp_path_factory.mktemp("user") / "tinyperf"
  subprocess.run(["git", "clone", "--quiet", str(REPO), str(dst)], check=True, timeout=300)
  return dst


def activated(clone: Path, **extra) -> dict:
  """user_env after `source .venv/bin/activate` in the clone."""
  env = user_env(VIRTUAL_ENV=str(clone / ".venv"), **extra)
  env["PATH"] = f"{clone / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"
  return env


def sh(cmd: list[str] | str, cwd: Path, env: dict, timeout: int = 3600) -> subprocess.CompletedProcess:
  """A command as typed (a string goes through the shell, as `DATA_DIR=data ./init_datasets.sh` does)."""
  return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, shell=isinstance(cmd, str))


def readme_flow(clone: Path, benchmark: str, seed: int | None = None) -> tuple[Path, Path, dict]:
  """implementations/cpu_smoke/README.md's steps in the clone, relative paths from the implementation directory.
  Returns (implementation directory, the run's MLPerf log, the activated environment)."""
  impl = clone / "benchmarks" / benchmark / "implementations" / "cpu_smoke"
  p = sh("BUILD_IMAGE=0 ./setup.sh", cwd=impl, env=user_env(), timeout=1200)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  assert f"setup done: source {clone / '.venv'}/bin/activate" in p.stdout
  env = activated(clone)
  p = sh("DATA_DIR=data ./init_datasets.sh", cwd=impl, env=env, timeout=1800)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  assert (impl / "data").is_dir(), "DATA_DIR=data means data/ where the user typed it"
  code, lines, gap = timed_lines(f"DATA_DIR=data RESULTS_DIR=results {f'SEED={seed} ' if seed is not None else ''}"
                                 f"./run_and_time.sh", cwd=impl, env=env, timeout=2400)
  assert code == 0, "\n".join(lines[-60:])
  # no silence over 10 s: the entrypoint says it is still working after 8 s without a line (slack: a loaded machine)
  assert gap <= 12, f"{gap:.1f} s without a line"
  (log,) = (impl / "results").glob(f"result_{benchmark}_*.txt")
  # the last line names the log it wrote and the command that checks it, typable from anywhere
  assert lines[-1] == f"MLPerf log (exit 0): {log}; check it with: tinyperf check {log}", lines[-1]
  return impl, log, env


def timed_lines(cmd: str, cwd: Path, env: dict, timeout: int) -> tuple[int, list[str], float]:
  """A shell command's exit code, its output lines (stdout and stderr as they come) and the longest wait for a line."""
  import threading
  p = subprocess.Popen(cmd, shell=True, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  timer = threading.Timer(timeout, p.kill); timer.start()
  lines, gap, last = [], 0.0, time.monotonic()
  try:
    for line in p.stdout:
      now = time.monotonic()
      gap, last = max(gap, now - last), now
      lines.append(line.rstrip("\n"))
    return p.wait(), lines, gap
  finally:
    timer.cancel()


@pytest.fixture(scope="session")
def bert_readme_run(fresh_clone):
  """The BERT cpu_smoke README flow (seed 7): (data directory, MLPerf log, environment with the clone's venv)."""
  impl, log, env = readme_flow(fresh_clone, "bert", seed=7)
  return impl / "data", log, env
