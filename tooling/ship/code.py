"""Which code a package ships: git's view of the commit that made the runs (its tracked files only, never the
checkout's untracked or ignored files), or inside an image the tree `tinyperf build` gave it, refused (UserError) when it
cannot be the code that made the runs: runs of several commits or code hashes, of uncommitted code, a checkout or image
whose packaged files differ. --allow-dirty ships the tracked files as they are now, named DIRTY."""
from __future__ import annotations
import io
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from tinyperf.benchmarks.common.config import ROOT
from tinyperf.benchmarks.common.runtime import image_code
from tinyperf.benchmarks.registry import BENCHMARKS
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common.errors import UserError
from tinyperf.tooling.common.safe_read import iter_lines
from tinyperf.tooling.ship.selection import BenchSelection

# What a packaged implementation holds, relative to the repository root: all of benchmarks/ but the other benchmarks'
# packages, of which the registry (benchmarks/registry.py) needs only each spec; of implementations/ only the packaged
# platform (config.yaml plus freshly rendered scripts).
CODE_DIRS = ("benchmarks", "tooling", "docker")
CODE_FILES = ("tinyperf/__init__.py",)
OTHER_BENCHMARK_FILES = ("__init__.py", "spec.py")
TOP_GLOBS = ("pyproject.toml", "setup.py", "requirements*.lock", "images.lock.json", "Dockerfile*", "compose.yaml", "LICENSE*")
SKIP_DIRS = {"__pycache__", "tests", "implementations"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".egg-info")


def _git(*args: str, text: bool = True):
  try:
    p = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=text, timeout=60)
  except (OSError, subprocess.SubprocessError):
    return None
  if p.returncode != 0: return None
  return p.stdout.strip() if text else p.stdout


def run_provenance(a: L.Attempt) -> list[str]:
  """The `provenance:` lines the run printed (INIT and RUN each print one), from its raw output."""
  if not isinstance(a.output, str) or not a.output or not Path(a.output).is_file(): return []
  lines = []
  for raw in iter_lines(a.output):
    text = raw.decode("utf-8", "replace").strip()
    if text.startswith("provenance: ") and text not in lines: lines.append(text)
  return lines


def run_commit(a: L.Attempt) -> str | None:
  """The commit whose code made the run (`<sha>-dirty`: with uncommitted changes), from its image or its provenance
  line; None when it recorded none."""
  sha = (a.provenance or {}).get("TINYPERF_GIT_SHA") if isinstance(a.provenance, dict) else None
  if not sha:
    sha = next((m.group(1) for p in run_provenance(a) for m in [re.search(r"git_sha=([^,\s]+)", p)] if m), None)
  return sha if isinstance(sha, str) and sha and sha != "unknown" else None


def run_image(a: L.Attempt) -> str | None:
  """The ID of the image that ran the attempt, where the launcher saw it (the container backend records it)."""
  prov = a.provenance if isinstance(a.provenance, dict) else {}
  found = prov.get(L.IMAGE_ID) or next((m.group(0) for m in [re.search(r"sha256:[0-9a-f]{64}", str(a.image or ""))] if m),
                                       None)
  return found if isinstance(found, str) else None


def run_code_tree(a: L.Attempt) -> str | None:
  """The hash of the code in the image that ran the attempt (`tinyperf build`), from the ledger or the run's provenance
  line; None for a run outside an image or in one that has no hash."""
  prov = a.provenance if isinstance(a.provenance, dict) else {}
  tree = prov.get(L.CODE_TREE) or next((m.group(1) for p in run_provenance(a)
                                        for m in [re.search(r"code_tree=(sha256:[0-9a-f]{64})", p)] if m), None)
  return tree if isinstance(tree, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", tree) else None


def _wanted(rel: PurePosixPath) -> bool:
  if any(p.startswith(".") or p in SKIP_DIRS for p in rel.parts): return False
  name = rel.name
  return not (name.endswith(SKIP_SUFFIXES) or (name.startswith("test_") and name.endswith(".py")) or name == "conftest.py")


def selected(rel: str, benchmark: str) -> bool:
  """Whether the repository file `rel` (POSIX, relative to the root) belongs to a packaged implementation of benchmark."""
  p = PurePosixPath(rel)
  if rel in CODE_FILES: return True
  if len(p.parts) == 1: return not p.name.startswith(".") and any(fnmatchcase(p.name, g) for g in TOP_GLOBS)
  if p.parts[0] == "benchmarks" and len(p.parts) > 2 and p.parts[1] in BENCHMARKS and p.parts[1] != benchmark:
    return len(p.parts) == 3 and p.name in OTHER_BENCHMARK_FILES
  return p.parts[0] in CODE_DIRS and _wanted(p)


@dataclass
class Code:
  """The code a package ships: git's view of the commit that made the runs (its tracked files only, never the
  checkout's untracked or ignored files), or inside an image the tree `tinyperf build` gave it from that commit."""
  label: str                                 # what the README and the output call it
  files: dict[str, tuple[bytes, bool]]       # repository path -> (content, executable)
  dirty: list[str] = field(default_factory=list)

  def for_benchmark(self, benchmark: str) -> list[str]:
    return sorted(f for f in self.files if selected(f, benchmark))


def _git_commit_files(commit: str, benchmarks: set[str]) -> dict[str, tuple[bytes, bool]]:
  """The selected files of `commit`, as `git archive` writes them (its modes say which are executable)."""
  names = _git("ls-tree", "-r", "-z", "--name-only", "--full-tree", commit, text=False)
  wanted = [n for n in (names or b"").decode("utf-8", "surrogateescape").split("\0")
            if n and any(selected(n, b) for b in benchmarks)]
  data = _git("archive", "--format=tar", commit, "--", *wanted, text=False) if wanted else None
  if not data: raise UserError(f"`git archive {commit}` in {ROOT} failed; check `git -C {ROOT} status`.")
  files = {}
  with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    for m in tar:
      if m.isreg(): files[m.name] = (tar.extractfile(m).read(), bool(m.mode & 0o111))
  return files


def _tracked_files_now(benchmarks: set[str]) -> dict[str, tuple[bytes, bool]]:
  """The checkout's tracked files as they are now (--allow-dirty): never an untracked or ignored one."""
  names = (_git("ls-files", "-z", text=False) or b"").decode("utf-8", "surrogateescape").split("\0")
  files = {}
  for n in names:
    p = ROOT / n
    if n and any(selected(n, b) for b in benchmarks) and p.is_file() and not p.is_symlink():
      files[n] = (p.read_bytes(), bool(p.stat().st_mode & 0o111))
  return files


def _image_files(benchmarks: set[str]) -> dict[str, tuple[bytes, bool]]:
  """The image's tree (no git in it): `tinyperf build` sent only git's view of the checkout, so this is that."""
  files = {}
  for dirpath, dirnames, filenames in os.walk(ROOT):
    dirnames[:] = sorted(x for x in dirnames if not x.startswith(".") and x not in SKIP_DIRS and not x.endswith(SKIP_SUFFIXES))
    for name in filenames:
      p = Path(dirpath) / name
      rel = p.relative_to(ROOT).as_posix()
      if any(selected(rel, b) for b in benchmarks) and p.is_file() and not p.is_symlink():
        files[rel] = (p.read_bytes(), bool(p.stat().st_mode & 0o111))
  return files


def _listed(names: list[str], k: int = 8) -> str:
  return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")


def resolve_code(sels: list[BenchSelection], allow_dirty: bool) -> Code:
  """Which code the package ships, refusing (UserError) when it cannot be the code that made the runs: runs of
  different commits, runs of uncommitted code or of no recorded commit, a commit this checkout lacks, a checkout (or
  image) whose packaged files differ from it. --allow-dirty ships the checkout's tracked files as they are now, named
  DIRTY in the README."""
  benchmarks = {sel.benchmark for sel in sels}
  by_commit: dict[str, list[str]] = {}
  for sel in sels:
    for r in sel.runs:
      by_commit.setdefault(run_commit(r.attempt) or "none recorded", []).append(
        f"{sel.system}/{sel.benchmark} run {r.attempt.index}")
  if len(by_commit) > 1:
    raise UserError("the runs were made by different code (" + "; ".join(f"commit {c}: {_listed(w, 3)}" for c, w in
                    by_commit.items()) + "); a package holds one implementation. Package each set on its own "
                    "(--system/--benchmark), or redo the runs of one commit.")
  (recorded, runs), = by_commit.items()
  images: dict[str, list[str]] = {}
  trees: dict[str, list[str]] = {}
  for sel in sels:
    for r in sel.runs:
      run = f"{sel.system}/{sel.benchmark} run {r.attempt.index}"
      if (i := run_image(r.attempt)): images.setdefault(i, []).append(run)
      if (t := run_code_tree(r.attempt)): trees.setdefault(t, []).append(run)
  if len(trees) > 1:
    raise UserError(f"the runs ran in images of different code, all labelled commit {recorded} (" + "; ".join(
                    f"code {t[:19]}: {_listed(w, 3)}" for t, w in trees.items()) + "): images built from edited "
                    "checkouts. A package holds one implementation: redo the runs of one image.")
  if len(images) > 1:
    print("WARNING: the runs ran in different images (" + "; ".join(f"{i[:19]}: {_listed(w, 3)}" for i, w in
          images.items()) + f"), each built from commit {recorded}: the same code, but the base and the installed "
          f"packages may differ between them; a reviewer may ask why.", file=sys.stderr, flush=True)
  fix = "or pass --allow-dirty to ship the code as it is now, named DIRTY in the package README"
  if recorded == "none recorded" or recorded.endswith("-dirty"):
    why = ("record no code commit (their output logs have no provenance line)" if recorded == "none recorded" else
           f"ran commit {recorded}: uncommitted changes that no commit holds")
    if not allow_dirty:
      raise UserError(f"the runs ({_listed(runs, 3)}) {why}, so the code they ran cannot be packaged from git. Commit "
                      f"the code and redo the runs, {fix}.")
  commit = recorded.removesuffix("-dirty") if recorded != "none recorded" else None
  top = _git("rev-parse", "--show-toplevel")
  # a checkout of this repository, not a folder inside another one (an unpacked package in a submitter's repository)
  head = _git("rev-parse", "HEAD") if top and Path(top).resolve() == Path(ROOT).resolve() else None
  if head is None:
    image = os.environ.get("TINYPERF_GIT_SHA") if os.environ.get("TINYPERF_IMAGE_VENDOR") else None
    if not image or image == "unknown":
      raise UserError(f"{ROOT} is not a git checkout (nor a tinyperf image built by `tinyperf build`), so the code that "
                      f"made the runs cannot be told from other files; package from a `git clone` of the repository.")
    mine = image_code().get("code_tree")
    other = bool(trees) and mine not in trees   # the runs' images hold other code than this one (or this one says none)
    if other and not allow_dirty:
      raise UserError(f"this image holds code {mine[:19] if mine else 'of no recorded hash'} but the runs ran code "
                      f"{', '.join(t[:19] for t in trees)}. Package with an image built from the runs' tree (`tinyperf "
                      f"build --vendor cpu` in the checkout that built theirs; out/images/ records every build), {fix}.")
    if image != recorded and not allow_dirty:
      raise UserError(f"this image holds the code of commit {image} but the runs were made by commit {recorded}. "
                      f"Package with the image that made the runs (`git checkout {commit}` then `tinyperf build`), "
                      f"{fix}.")
    if image.endswith("-dirty") and not allow_dirty:
      raise UserError(f"this image was built from commit {image}, uncommitted changes that no commit holds; rebuild it "
                      f"from a clean checkout with `tinyperf build`, {fix}.")
    dirty = image.endswith("-dirty") or image != recorded or other
    return Code(f"the image built from commit {image}" + (f", code {mine}" if mine else "") +
                (" (DIRTY: not verifiably the runs' code)" if dirty else ""),
                _image_files(benchmarks), dirty=["the image"] if dirty else [])
  if commit is None: commit = head
  known = _git("cat-file", "-e", f"{commit}^{{commit}}") is not None
  if not known and not allow_dirty:
    raise UserError(f"commit {commit}, which made the runs, is not in {ROOT}'s git history; fetch it (`git fetch`) or "
                    f"package from the clone that made the runs, {fix}.")
  changed = (_git("diff", "--name-only", "-z", commit, "--", text=False) or b"") if known else b""   # worktree vs commit
  # what assemble reads from the checkout beside the code: each config.yaml and the repository's systems JSON
  cfgs = {sel.cfg.path.relative_to(ROOT).as_posix() for sel in sels if sel.cfg.path.is_relative_to(ROOT)} | \
         {f"systems/{sel.system}.json" for sel in sels}
  dirty = sorted(n for n in changed.decode("utf-8", "surrogateescape").split("\0")
                 if n and (n in cfgs or any(selected(n, b) for b in benchmarks)))
  if recorded.endswith("-dirty") and not dirty: dirty = ["(the runs' own uncommitted changes)"]
  if not known: dirty.append(f"(commit {commit} is not in this checkout)")
  if dirty and not allow_dirty:
    raise UserError(f"this checkout's code differs from commit {commit}, which made the runs: {_listed(dirty)}. "
                    f"Package that commit's code: commit or stash the changes, or `git checkout {commit}`, {fix}.")
  if dirty or recorded == "none recorded":
    return Code(f"commit {head} with uncommitted changes (DIRTY: {_listed(dirty) or 'the runs recorded no commit'})",
                _tracked_files_now(benchmarks), dirty=dirty or ["no commit recorded"])
  return Code(f"commit {commit}", _git_commit_files(commit, benchmarks))
