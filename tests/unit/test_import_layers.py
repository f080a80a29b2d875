"""The import layers of tooling/, benchmarks/ and lab/ (docs/ARCHITECTURE.md, "Layout of tooling/"): every import, also one
inside a function, points down or stays inside its folder, and no modules import each other in a circle."""
from __future__ import annotations
import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# bottom first; the folders of one tuple are peers and import none of each other. "tooling" is tooling/cli.py. The
# stages are peers: what two of them share lives in tooling/common.
STAGES = ("tooling/prep", "tooling/verdict", "tooling/launch", "tooling/ship")
LAYERS = [("benchmarks/common", "benchmarks/kernels"), ("benchmarks/resnet", "benchmarks/bert"), ("benchmarks",),
          ("tooling/common",), STAGES, ("tooling",),
          ("lab/resnet", "lab/bert"), ("lab",), ("lab/scripts",)]   # the perf lab: above the product, imported by none of it
RANK = {folder: i for i, layer in enumerate(LAYERS) for folder in layer}


def modules() -> dict[str, Path]:
  out = {}
  for p in sorted([*ROOT.glob("tooling/**/*.py"), *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("lab/**/*.py")]):
    rel = p.relative_to(ROOT)
    if "implementations" in rel.parts: continue
    parts = rel.with_suffix("").parts
    out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = rel
  return out


def folder(rel: Path) -> str: return "/".join(rel.parent.parts[:2])


def imports(mod: str, rel: Path, known: set[str]) -> set[str]:
  """The repository modules a file imports (anywhere in it, its `__main__` block too), each resolved to the deepest
  module that exists."""
  pkg, out = mod if rel.name == "__init__.py" else mod.rpartition(".")[0], set()
  def add(name: str):
    while name and name not in known: name = name.rpartition(".")[0]
    if name and name != mod: out.add(name)
  for n in ast.walk(ast.parse((ROOT / rel).read_text(), str(rel))):
    if isinstance(n, ast.Import): [add(a.name) for a in n.names]
    elif isinstance(n, ast.ImportFrom):
      base = ".".join([*pkg.split(".")[:len(pkg.split(".")) - n.level + 1], *([n.module] if n.module else [])]) \
        if n.level else n.module or ""
      for a in n.names: add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
  return out


@cache   # parsed once for the tests below
def graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
  mods = modules()
  return mods, {m: imports(m, rel, set(mods)) for m, rel in mods.items()}


def test_every_module_is_in_a_layer():
  mods, _ = graph()
  assert len(mods) > 50, f"only {len(mods)} modules found: the walk broke"
  loose = sorted(str(rel) for rel in mods.values() if folder(rel) not in RANK)
  assert not loose, f"modules in no layer (add their folder to LAYERS here and to docs/ARCHITECTURE.md): {loose}"
  flat = sorted(str(rel) for rel in mods.values() if folder(rel) == "tooling" and rel.stem not in ("cli", "__init__"))
  assert not flat, f"tooling/ holds only cli.py; put these in the package of their stage: {flat}"


def test_imports_point_down():
  mods, deps = graph()
  up = [f"{mods[a]} imports {b} ({folder(mods[b])}, above or beside {folder(mods[a])})" for a in sorted(deps)
        for b in sorted(deps[a]) if folder(mods[a]) != folder(mods[b])
        and RANK[folder(mods[b])] >= RANK[folder(mods[a])]]
  assert not up, "imports up a layer (docs/ARCHITECTURE.md, Layout of tooling/):\n  " + "\n  ".join(up)


def test_no_import_circles():
  deps = graph()[1]
  state: dict[str, int] = {}   # 1: on the current path, 2: done
  def visit(m: str, path: list[str]) -> list[str] | None:
    state[m] = 1
    for d in sorted(deps[m]):
      if state.get(d) == 1: return path[path.index(d):] + [d] if d in path else [m, d]
      if d not in state and (c := visit(d, path + [d])): return c
    state[m] = 2
    return None
  for m in sorted(deps):
    if m not in state and (c := visit(m, [m])): raise AssertionError("import circle: " + " -> ".join(c))


def test_stages_are_peers():
  """A stage package imports no other package of tooling/ but tooling/common: what two stages share lives there; only
  tooling/cli.py, above all, imports every stage (what a stage may take from benchmarks/: the test below)."""
  mods, deps = graph()
  across = sorted(f"{mods[a]} imports {b}" for a in deps if folder(mods[a]) in STAGES for b in deps[a]
                  if folder(mods[b]).startswith("tooling/") and folder(mods[b]) not in (folder(mods[a]), "tooling/common"))
  assert not across, "a stage imports another stage (move what they share to tooling/common):\n  " + "\n  ".join(across)


def test_tooling_meets_the_benchmarks_at_their_interfaces():
  """tooling/ reads configs, rules and helpers from benchmarks/common and runs the checks above both benchmarks; a
  benchmark's internals (model, loader, training) it starts as a process by module name, never imports."""
  mods, deps = graph()
  inside = sorted(f"{mods[a]} imports {b}" for a in deps if a.startswith("tooling") for b in deps[a]
                  if b.startswith(("tinyperf.benchmarks.resnet", "tinyperf.benchmarks.bert")))
  assert not inside, "tooling/ imports a benchmark's internals (docs/ARCHITECTURE.md, two interfaces):\n  " + \
    "\n  ".join(inside)
