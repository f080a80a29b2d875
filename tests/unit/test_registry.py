"""One benchmark, one spec (benchmarks/<bm>/spec.py), listed in benchmarks/registry.py: tooling/ and the shared code
loop over the registry and name no benchmark, and reading a spec imports nothing heavy (tooling/ does on every
command)."""
import ast
import subprocess
import sys

from tinyperf.benchmarks.registry import BENCHMARKS
from tests.conftest import REPO


def _constants(tree: ast.AST):
  """Every string constant, an f-string's literal parts included (they are Constant nodes under JoinedStr)."""
  for n in ast.walk(tree):
    if isinstance(n, ast.Constant) and isinstance(n.value, str): yield n


def test_tooling_and_the_shared_code_name_no_benchmark():
  """tooling/, benchmarks/common/ and the checks above both benchmarks take what differs from the spec, never by
  switching on a benchmark's name."""
  files = sorted([*(REPO / "tooling").rglob("*.py"), *(REPO / "benchmarks" / "common").rglob("*.py"),
                  REPO / "benchmarks" / "preflight.py", REPO / "benchmarks" / "selfcheck.py"])
  assert len(files) > 40, f"only {len(files)} files: the walk broke"
  named = [f"{p.relative_to(REPO)}:{n.lineno}: {n.value!r}" for p in files
           for n in _constants(ast.parse(p.read_text(), str(p))) if n.value.strip() in BENCHMARKS]
  assert not named, ("a benchmark named; take what differs from its spec (benchmarks/registry.py):\n  "
                     + "\n  ".join(named))


def test_the_walk_sees_a_name_in_an_f_string():
  tree = ast.parse('x = f"{a}" + f"resnet{b}"\ny = "bert"')
  assert sorted(n.value for n in _constants(tree) if n.value in BENCHMARKS) == ["bert", "resnet"]


def test_each_spec_is_its_benchmarks():
  for name, spec in BENCHMARKS.items():
    assert spec.name == name and (REPO / "benchmarks" / name / "spec.py").is_file()
    for entry in ("train.py", "prep.py"): assert (REPO / "benchmarks" / name / entry).is_file(), (name, entry)
    assert set(spec.closed_model) <= set(spec.knobs) and set(spec.schedule) <= set(spec.knobs)
    assert spec.progress in ("epoch", "samples") and 0 < spec.quality_target < 1


def test_the_registry_imports_nothing_heavy():
  code = ("import sys, tinyperf.benchmarks.registry, tinyperf.tooling.cli; heavy = {'tinygrad', 'numpy'} & set(sys.modules); "
          "sys.exit(f'imported {heavy}' if heavy else 0)")
  r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
  assert r.returncode == 0, r.stdout + r.stderr


def test_a_closed_config_stops_at_mlperfs_quality_target():
  """The spec owns MLPerf's target; a closed config's TARGET is it (lower, the checker rejects the log; higher, the run
  trains past the point MLPerf times)."""
  from tinyperf.benchmarks.common.config import available_platforms
  from tinyperf.benchmarks.registry import load_config
  closed = [load_config(b, p, environ={}) for b in BENCHMARKS for p in available_platforms(b)]
  closed = [c for c in closed if c["division"] == "closed"]
  assert {c.benchmark for c in closed} == set(BENCHMARKS)
  assert all(c["TARGET"] == c.spec.quality_target for c in closed), [(c.path, c["TARGET"]) for c in closed]
