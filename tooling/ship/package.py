"""`tinyperf package`: assemble a submitter tree from finished runs, check it, and pack it as MLCommons' pack script does.

  tinyperf package --org ORG --out DIR [--results R] [--systems DIR] [--encrypt] [--passphrase-file F]
  tinyperf package --verify TARBALL [--into DIR] [--passphrase-file F]

Packing, per results/<system>/<benchmark> the run ledgers under R/runs know about:
  1. results: the first N finished runs in the order they started (N = 5 resnet, 10 bert), renumbered
     result_0..result_<N-1>. Never selected by score or convergence: a run that finished without converging counts
     (olympic scoring drops one); runs that crashed or were interrupted are not finished runs (`tinyperf run` redoes
     them). Each file's logged seed must match its ledger entry, and seeds must be distinct.
  2. systems/<system>.json: from --systems DIR when given; else R/systems/<system>.json, which `tinyperf run` writes
     from the machine the runs ran on; else the repository's systems/<system>.json. A description of another machine
     that a later `tinyperf run` left in R/systems/variants/ is reported loudly (the runs were not all made on one
     system).
  3. benchmarks/<benchmark>/implementations/<platform>/: a self-contained copy of the code (benchmarks/common, the
     benchmark's package, tooling, pyproject.toml, lock files, Dockerfiles, the repository's systems/<system>.json),
     the platform's config.yaml, and the scripts and README rendered from it; no tests, no dotfiles. The code is git's
     view of the commit the runs recorded (tracked files only, never untracked or ignored ones); runs of several
     commits or of uncommitted code, or a checkout (an image) whose packaged files differ from that commit, are
     refused unless --allow-dirty, which ships the tracked files as they are now and names the package DIRTY.
  4. the full `tinyperf check` on the assembled tree, the repository rules (no dotfiles, no whitespace in names, no
     symlinks or special files, nothing over 50 MiB) and the real repo_checker. Any failure: nothing is written.
  5. DIR/ORG/, DIR/mlperf_submission_<ORG>.tar.gz (gzip tar of ORG/; with --encrypt piped through
     `openssl enc -e -aes256` like pack_submission.sh) and DIR/mlperf_submission_<ORG>.sha1 (`sha1sum` output of the
     final file, written last). Nothing existing is ever replaced.

--verify checks the .sha1, decrypts if needed, lists the members, refuses absolute paths, `..`, links, devices and
duplicates, and unpacks into a directory that must not exist yet.

Exit status: 0 done, 1 refused (checks failed, sha1 mismatch, unsafe tarball), 2 bad input.
"""
from __future__ import annotations
import argparse
import fcntl
import getpass
import gzip
import io
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

from benchmarks.common.config import ROOT, available_platforms, PlatformConfig
from benchmarks.registry import BENCHMARKS, load_config
from benchmarks.common.io import file_digest, require_dir_possible
from benchmarks.common.rules import required_runs, result_name
from tooling.common import ledger as L
from tooling.common import results_tree as T
from tooling.common import mlperf_tools
from tooling.prep import render
from tooling.prep.compose import render_compose
from tooling.common.container import host_path
from tooling.common.errors import UserError, write_atomic
from tooling.common.mllog_reader import read_log
from tooling.common.safe_read import (ENC_MAGIC, GZIP_MAGIC, MAX_JSON_BYTES, MAX_LOG_BYTES, MAX_TREE_DEPTH, MiB,
                                      iter_lines, read_bytes, require_regular)
from tooling.common.submission_tree import ORG_NAME, read_systems_json, recorded_submitter

MAX_FILE_BYTES = 50 * MiB              # repo_checker's limit (its "50MB" is 50 MiB)
# --verify's bounds on an archive (docs/package.md): a resnet + bert package of one system is 201 members and 1.8 MB
# unpacked, so a package of every platform and benchmark stays far below them
MAX_MEMBERS = 10_000
MAX_NAME_BYTES = 255                   # one path component: NAME_MAX of every common file system
MAX_PATH_BYTES = 1024                  # a member's whole name, well under PATH_MAX with the destination in front
MAX_MEMBER_BYTES = MAX_FILE_BYTES      # what the repository rules allow one file
MAX_UNPACKED_BYTES = 256 * MiB
MAX_SHA1_BYTES = 4096                  # one `sha1sum` line
MAX_PASSPHRASE = 1024

# What a packaged implementation holds, relative to the repository root. benchmarks/<bm>/ is added per benchmark, and
# of its implementations/ only the packaged platform (config.yaml plus freshly rendered scripts).
CODE_DIRS = ("benchmarks/common", "tooling", "docker")
CODE_FILES = ("benchmarks/__init__.py",)
TOP_GLOBS = ("pyproject.toml", "requirements*.lock", "images.lock.json", "Dockerfile*", "compose.yaml", "LICENSE*")
SKIP_DIRS = {"__pycache__", "tests", "implementations"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".egg-info")


def tarball_name(org: str) -> str: return f"mlperf_submission_{org}.tar.gz"
def sha1_name(org: str) -> str: return f"mlperf_submission_{org}.sha1"


# ---------------------------------------------------------------------------------------------------------------------
# choosing the runs

@dataclass
class Run:
  attempt: L.Attempt
  source: Path          # R/results/<system>/<bm>/result_<index>.txt
  packaged: str         # result_<j>.txt


@dataclass
class BenchSelection:
  system: str
  benchmark: str
  ledger: Path
  cfg: PlatformConfig
  runs: list[Run] = field(default_factory=list)
  left_out: list[L.Attempt] = field(default_factory=list)    # finished runs after the first N (keep their logs)
  not_finished: list[L.Attempt] = field(default_factory=list)


def find_ledgers(results: Path, systems: list[str] | None, benchmarks: list[str] | None) -> list[tuple[str, str, Path]]:
  runs = results / T.RUNS
  found = [f for f in T.ledgers(results) if (not systems or f[0] in systems) and (not benchmarks or f[1] in benchmarks)]
  if not found:
    what = f" for {' '.join((systems or []) + (benchmarks or []))}" if systems or benchmarks else ""
    raise UserError(f"{runs}: no run ledgers ({T.RUNS}/<system>/<benchmark>/{T.LEDGER}){what}. `tinyperf run` writes them "
                    f"under its --results directory; pass that directory as --results.")
  return found


def platform_for(system: str, benchmark: str, platform: str | None) -> PlatformConfig:
  """The implementation whose config names the system (what the logs call submission_platform)."""
  if benchmark not in BENCHMARKS:
    raise UserError(f"results for unknown benchmark {benchmark!r} (known: {', '.join(BENCHMARKS)}).")
  if platform:
    cfg = load_config(benchmark, platform, environ={})
    if cfg["system"] != system:
      raise UserError(f"--platform {platform}: its {benchmark} config names system {cfg['system']!r}, not {system!r}.")
    return cfg
  cfgs = [c for c in (load_config(benchmark, p, environ={}) for p in available_platforms(benchmark))
          if c["system"] == system]
  if not cfgs:
    raise UserError(f"no benchmarks/{benchmark}/implementations/*/config.yaml names system {system!r}, so there is no "
                    f"implementation to package with its runs. Add the platform's config or pass --platform.")
  if len(cfgs) > 1:
    raise UserError(f"several {benchmark} platforms name system {system!r} ({', '.join(c.platform for c in cfgs)}); "
                    f"choose one with --platform.")
  return cfgs[0]


def select_runs(results: Path, system: str, benchmark: str, ledger_path: Path, cfg: PlatformConfig) -> BenchSelection:
  """The first N finished runs by start time. Never by score: that would be cherry-picking."""
  n = required_runs(benchmark)
  led = L.Ledger(ledger_path)
  sel = BenchSelection(system, benchmark, ledger_path, cfg)
  done = [a for a in led.attempts if a.status == L.DONE]
  by_index: dict[int, L.Attempt] = {}
  for a in done:
    if a.index in by_index:
      raise UserError(f"{ledger_path}: run {a.index} is finished twice (seeds {by_index[a.index].seed} and {a.seed}) "
                      f"but has one result file; the ledger was edited by hand. Restore it.")
    by_index[a.index] = a
  done.sort(key=lambda a: (a.started, a.index))
  sel.not_finished = [a for a in led.attempts if a.status != L.DONE]
  if len(done) < n:
    raise UserError(f"{host_path(ledger_path)}: {len(done)} finished {benchmark} run(s) on {system}; a package needs exactly {n}. "
                    f"Finish them with `tinyperf run {benchmark} --platform {cfg.platform} --nexp {n} ...` (it resumes).")
  chosen, sel.left_out = done[:n], done[n:]
  bench_dir = T.result_dir(results, system, benchmark)
  seen: dict[int, str] = {}
  for j, a in enumerate(chosen):
    src = bench_dir / result_name(a.index)
    if not src.is_file():
      raise UserError(f"{src}: missing, but {ledger_path} records run {a.index} (seed {a.seed}) as finished. Restore the "
                      f"file from a backup; a package never skips a finished run, since choosing which runs to submit "
                      f"is cherry-picking.")
    if a.sha256 is not None and L.digest(src) != a.sha256:   # mode 000: bad input naming it
      raise UserError(f"{src}: CHANGED since run {a.index} (seed {a.seed}) wrote it (its sha256 differs from "
                      f"{ledger_path}); a package holds the logs the runs wrote. `tinyperf status --results "
                      f"{shlex.quote(str(results))}` says how to restore it.")
    log = read_log(src)
    if log.benchmark != benchmark:
      raise UserError(f"{src}: logs submission_benchmark {log.benchmark!r} but sits in results/{system}/{benchmark}.")
    seeds = [e.value for e in log.all("seed")]
    if seeds and str(seeds[0]) != str(a.seed):
      raise UserError(f"{src}: logs seed {seeds[0]} but {ledger_path} says run {a.index} used seed {a.seed}; the file "
                      f"is not the run the ledger recorded. Restore the right file.")
    for s in {str(x) for x in seeds} | {str(a.seed)}:
      if s in seen:
        raise UserError(f"seed {s} is used by both {seen[s]} and {src.name} (results/{system}/{benchmark}): every run "
                        f"needs its own seed, and the seed checker rejects the package. Redo one of the runs.")
      seen[s] = src.name
    sel.runs.append(Run(a, src, result_name(j)))
  return sel


# ---------------------------------------------------------------------------------------------------------------------
# assembling the tree

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


def _wanted(rel: PurePosixPath) -> bool:
  if any(p.startswith(".") or p in SKIP_DIRS for p in rel.parts): return False
  name = rel.name
  return not (name.endswith(SKIP_SUFFIXES) or (name.startswith("test_") and name.endswith(".py")) or name == "conftest.py")


def selected(rel: str, benchmark: str) -> bool:
  """Whether the repository file `rel` (POSIX, relative to the root) belongs to a packaged implementation of benchmark."""
  p = PurePosixPath(rel)
  if rel in CODE_FILES: return True
  if len(p.parts) == 1: return not p.name.startswith(".") and any(fnmatchcase(p.name, g) for g in TOP_GLOBS)
  return any(rel.startswith(d + "/") for d in (*CODE_DIRS, f"benchmarks/{benchmark}")) and _wanted(p)


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
  for sel in sels:
    for r in sel.runs:
      if (i := run_image(r.attempt)): images.setdefault(i, []).append(f"{sel.system}/{sel.benchmark} run {r.attempt.index}")
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
    mine = next((m.group(0) for m in [re.search(r"sha256:[0-9a-f]{64}", os.environ.get("TINYPERF_IMAGE", ""))] if m),
                None)
    if mine and images and mine not in images and not allow_dirty:
      raise UserError(f"this image ({mine[:19]}) is not the image the runs ran in ({', '.join(i[:19] for i in images)}); "
                      f"package with the image that made the runs, {fix}.")
    if image != recorded and not allow_dirty:
      raise UserError(f"this image holds the code of commit {image} but the runs were made by commit {recorded}: it is "
                      f"not the code that made them. Package with the image that made the runs (rebuild it from "
                      f"that commit: `git checkout {commit}` then `tinyperf build`), {fix}.")
    if image.endswith("-dirty") and not allow_dirty:
      raise UserError(f"this image was built from commit {image}, uncommitted changes that no commit holds; rebuild it "
                      f"from a clean checkout with `tinyperf build`, {fix}.")
    dirty = image.endswith("-dirty") or image != recorded
    return Code(f"the image built from commit {image}" + (" (DIRTY: not verifiably the runs' code)" if dirty else ""),
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


def _write(path: Path, data: bytes | str, executable: bool = False) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(data.encode() if isinstance(data, str) else data)
  path.chmod(0o755 if executable else 0o644)


def package_readme(sel: BenchSelection, org: str, code: Code) -> str:
  """The config's README plus what reviewers need about this package: the code commit, the runs and their order."""
  cfg = sel.cfg
  rows = []
  for r in sel.runs:
    sha = run_commit(r.attempt) or "not recorded"
    rows.append(f"| `{r.packaged}` | {r.attempt.index} | {r.attempt.seed} | {'yes' if r.attempt.converged else 'no'} "
                f"| {sha} | {run_image(r.attempt) or 'none recorded'} |")
  left = ", ".join(f"{a.index} (seed {a.seed})" for a in sel.left_out) or "none"
  n = len(sel.runs)
  return render.render_readme(cfg) + f"""
## This package
Packaged by `tinyperf package --org {org}` from the tinyperf repository at {code.label}.
This directory is a self-contained copy of the code (its root is a repository root): `benchmarks/` (the entrypoint and its modules, no
tests), `tooling/` (the `tinyperf` CLI), `pyproject.toml`, the lock files, and the scripts above rendered from
`benchmarks/{cfg.benchmark}/implementations/{cfg.platform}/config.yaml`.

Results `results/{sel.system}/{cfg.benchmark}/result_0..{n - 1}.txt` are the first {n} finished runs in the order
they started, as recorded in the run ledger; runs are never chosen by score or convergence. Runs that crashed or were
interrupted are not finished runs (they were redone with fresh seeds); finished runs after the first {n}: {left}.

| file | run index | seed | converged | code commit of the run | image ID of the run |
|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n"


def systems_source(system: str, results: Path, systems_dir: Path | None) -> Path:
  """Where systems/<system>.json comes from: --systems DIR; else what `tinyperf run` recorded in R/systems; else the
  repository's systems/. UserError naming where it looked when there is none."""
  if systems_dir is not None:
    src = systems_dir / f"{system}.json"
    if src.is_file(): return src
    raise UserError(f"{src}: missing. Every results/<system> needs systems/<system>.json; write it on the machine "
                    f"that ran the runs with `tinyperf sysinfo --system {system} --overrides FILE`, or pass another "
                    f"--systems DIR.")
  places = [T.systems_json(results, system), T.systems_json(ROOT, system)]
  for src in places:
    if src.is_file(): return src
  raise UserError(f"no systems JSON for {system}: neither {places[0]} (written by `tinyperf run` from the machine the "
                  f"runs ran on) nor {places[1]} exists. Write one with `tinyperf sysinfo --system {system} --overrides "
                  f"FILE --out {shlex.quote(str(places[0]))}`, or pass --systems DIR.")


def report_system_variants(system: str, results: Path, src: Path) -> None:
  """Descriptions of other machines a later `tinyperf run` left beside R/systems/<system>.json: said loudly."""
  found = sorted(T.variants_dir(results).glob(f"{system}-*.json"))
  if not found: return
  print(f"WARNING: {len(found)} later `tinyperf run` invocation(s) on {results} described system {system} differently "
        f"({', '.join(str(p) for p in found)}): its runs were not all made on the same machine and software. The package "
        f"uses {src}; compare the files, and move the right one over it before packaging if it is not.",
        file=sys.stderr, flush=True)


def assemble(org_dir: Path, sels: list[BenchSelection], sources: dict[str, Path], org: str, code: Code) -> None:
  for sel in sels:
    src = sources[sel.system]
    read_systems_json(src)   # parses, or a UserError naming the line
    dst = T.systems_json(org_dir, src.stem)
    if not dst.exists(): _write(dst, read_bytes(src, MAX_JSON_BYTES, "systems JSON"))
    bench = T.result_dir(org_dir, sel.system, sel.benchmark)
    for r in sel.runs: _write(bench / r.packaged, read_bytes(r.source, MAX_LOG_BYTES, "result log"))
    cfg = sel.cfg
    impl = org_dir / "benchmarks" / cfg.benchmark / "implementations" / cfg.platform
    for rel in code.for_benchmark(cfg.benchmark):
      data, executable = code.files[rel]
      _write(impl / rel, data, executable=executable)
    # the packaged tree holds one platform, so its compose.yaml has that platform's service (and `render --check` there
    # compares against exactly this)
    _write(impl / "compose.yaml", render_compose([cfg]))
    # the repository's description of this system: what `tinyperf run` (and the image `setup.sh` builds) layers
    # detection over when the runs are repeated from this directory
    curated = T.systems_json(ROOT, sel.system)
    if curated.is_file(): _write(T.systems_json(impl, sel.system), curated.read_bytes())
    nested = impl / "benchmarks" / cfg.benchmark / "implementations" / cfg.platform
    _write(nested / "config.yaml", cfg.path.read_bytes())
    for name, fn in render.RENDERERS.items():
      _write(nested / name, fn(cfg), executable=name.endswith(".sh"))
    for name, fn in render.SCRIPTS.items():
      _write(impl / name, fn(cfg, root="."), executable=True)
    _write(impl / "README.md", package_readme(sel, org, code))


# ---------------------------------------------------------------------------------------------------------------------
# repository rules

def repo_rules(org_dir: Path) -> list[str]:
  """What MLCommons' repository rules forbid, checked on every entry (repo_checker only flags broken symlinks)."""
  problems = []
  for dirpath, dirnames, filenames in os.walk(org_dir):
    for name in sorted(dirnames + filenames):
      p = Path(dirpath) / name
      rel = p.relative_to(org_dir.parent).as_posix()
      if name.startswith("."): problems.append(f"{rel}: the name starts with '.' (no dotfiles in a submission)")
      if any(c.isspace() for c in name): problems.append(f"{rel}: the name contains whitespace")
      st = os.lstat(p)
      if stat.S_ISLNK(st.st_mode): problems.append(f"{rel}: a symbolic link (a submission holds files and directories)")
      elif stat.S_ISREG(st.st_mode):
        if st.st_size > MAX_FILE_BYTES:
          problems.append(f"{rel}: {st.st_size / 2**20:.1f} MiB, over the 50 MiB limit for a file")
      elif not stat.S_ISDIR(st.st_mode): problems.append(f"{rel}: not a regular file or directory")
  return problems


def check_tree(org_dir: Path) -> tuple[bool, str]:
  """The full `tinyperf check`, the repository rules and the real repo_checker. Returns (accepted, report text)."""
  from tooling.verdict.check import check_path
  report = check_path(org_dir)
  text = [report.render()]
  ok = report.accepted
  rules = repo_rules(org_dir)
  for r in report.rulesets:
    res = mlperf_tools.repo_check(org_dir.parent, org_dir.name, r)
    if res.passed: text.append(f"repo_checker {r}: ALL CHECKS PASSED")
    else:
      ok = False
      text.append(f"repo_checker {r}: FAILED")
      text += [f"  FAIL  repo_checker: {e}" for e in res.errors]
  if rules:
    ok = False
    text += [f"  FAIL  repository rules: {p}" for p in rules]
  else:
    text.append("repository rules (no dotfiles, no whitespace in names, no links or special files, nothing over "
                "50 MiB): passed")
  return ok, "\n".join(text)


# ---------------------------------------------------------------------------------------------------------------------
# tarball, encryption, sha1

def _walk_sorted(path: Path):
  yield path
  if path.is_dir() and not path.is_symlink():
    for child in sorted(path.iterdir(), key=lambda p: p.name):
      yield from _walk_sorted(child)


def write_tarball(org_dir: Path, dest: Path, mtime: int) -> None:
  """gzip'd tar of ORG/ with sorted members and normalised owners, times and modes: the same runs give the same bytes."""
  with open(dest, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as gz, \
       tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
    for p in _walk_sorted(org_dir):
      ti = tar.gettarinfo(str(p), arcname=p.relative_to(org_dir.parent).as_posix())
      ti.uid = ti.gid = 0
      ti.uname = ti.gname = ""
      ti.mtime = mtime
      if ti.isdir(): ti.mode = 0o755
      elif ti.isreg(): ti.mode = 0o755 if p.stat().st_mode & 0o111 else 0o644
      else: raise UserError(f"{p}: not a regular file or directory; it cannot go into a submission tarball.")
      if ti.isreg():
        with open(p, "rb") as f: tar.addfile(ti, f)
      else: tar.addfile(ti)


def read_passphrase(path: Path | None, confirm: bool) -> bytes:
  """From the first line of a file (what `-pass file:` reads), or typed twice at a prompt. Never echoed or logged."""
  if path is not None:
    try:   # a pipe is fine (--passphrase-file <(pass show x)); the read is bounded so /dev/zero is not
      with open(path, "rb") as f: data = f.read(4 * MAX_PASSPHRASE)
    except OSError as e:
      raise UserError(f"{path}: cannot read the passphrase file ({e.strerror or e}).") from None
    pw = data.split(b"\n", 1)[0].rstrip(b"\r")
    if not pw: raise UserError(f"{path}: the passphrase file's first line is empty; put the passphrase on it.")
  else:
    if not sys.stdin.isatty():
      raise UserError("no terminal to ask for the passphrase on; give it with --passphrase-file F (its first line).")
    first = getpass.getpass("passphrase: ")
    if not first: raise UserError("empty passphrase; the tarball would not be protected.")
    if confirm and getpass.getpass("passphrase again: ") != first:
      raise UserError("the two passphrases differ; nothing was written.")
    pw = first.encode()
  if len(pw) > MAX_PASSPHRASE: raise UserError(f"the passphrase is longer than {MAX_PASSPHRASE} bytes.")
  return pw


def openssl_path() -> str:
  exe = shutil.which("openssl")
  if exe is None:
    raise UserError("the openssl command is not installed; install it (e.g. apt-get install openssl) to "
                    "use --encrypt or to verify an encrypted tarball.")
  return exe


def openssl_enc(decrypt: bool, src: Path, dst: Path, passphrase: bytes) -> None:
  """`openssl enc -e|-d -aes256` with a password, as pack_submission.sh runs it: salted, EVP_BytesToKey with SHA-256
  (OpenSSL >= 1.1's default digest, made explicit so an OpenSSL 1.0 here still writes what OpenSSL 3 decrypts). The
  passphrase goes through a pipe (`-pass fd:N`), never the command line."""
  exe = openssl_path()
  r, w = os.pipe()
  try:
    os.write(w, passphrase + b"\n")
    os.close(w); w = -1
    cmd = [exe, "enc", "-d" if decrypt else "-e", "-aes256", "-md", "sha256", "-in", str(src), "-out", str(dst),
           "-pass", f"fd:{r}"]
    p = subprocess.run(cmd, pass_fds=(r,), capture_output=True, text=True, errors="replace")
  finally:
    os.close(r)
    if w >= 0: os.close(w)
  if p.returncode != 0:
    msg = " ".join(l.strip() for l in p.stderr.splitlines() if l.strip() and "deprecated key derivation" not in l)
    if decrypt and "bad decrypt" in p.stderr:
      raise UserError(f"{src}: openssl could not decrypt it: wrong passphrase, or not an `openssl enc -aes256` file.")
    raise UserError(f"openssl enc failed on {src}: {msg or f'exit {p.returncode}'}")


def sha1_of(path: Path) -> str: return file_digest(path, "sha1")


def sha1_line(path: Path) -> str:
  """What `sha1sum <name>` prints in the tarball's directory, which is what pack_submission.sh stores and compares."""
  return f"{sha1_of(path)}  {path.name}\n"


# ---------------------------------------------------------------------------------------------------------------------
# pack

def _mtime(sels: list[BenchSelection]) -> int:
  """The newest run_stop among the packaged runs: a fixed timestamp for every member, so repacking is reproducible."""
  best = 0.0
  for sel in sels:
    for r in sel.runs:
      log = read_log(r.source)
      stop = log.first("run_stop")
      t = stop.time_ms if stop else max((e.time_ms for e in log.events), default=0)
      best = max(best, t)
  return int(best // 1000)


@contextmanager
def _locked_dir(d: Path):
  """An exclusive flock on directory d (no lock file is left in it) while the block runs."""
  fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX)
    yield
  finally:
    os.close(fd)


def refuse_other_org(sels: list[BenchSelection], org: str, args: argparse.Namespace) -> None:
  """A package's logs name its submitter (submission_org, recorded at the run): runs that record another name are
  refused with the command that packs them under theirs; the logs cannot be renamed afterwards."""
  logged: dict[str, list[Path]] = {}
  for sel in sels:
    for r in sel.runs:
      if (e := read_log(r.source).first("submission_org")) is not None and e.value != org:
        logged.setdefault(str(e.value), []).append(r.source)
  if not logged: return
  said = "; ".join(f"{len(v)} log {name!r} ({host_path(v[0])}{', ...' if len(v) > 1 else ''})"
                   for name, v in logged.items())
  fix = (f"Pack them under that name: `tinyperf package --org {shlex.quote(next(iter(logged)))} --out "
         f"{shlex.quote(host_path(args.out))} --results {shlex.quote(host_path(args.results))}`, or redo the runs with "
         f"`tinyperf run ... --org {org}` into a new --results directory"
         if len(logged) == 1 and len(logged[next(iter(logged))]) == sum(len(s.runs) for s in sels) else
         f"Redo the runs that name another submitter with `tinyperf run ... --org {org}`")
  raise UserError(f"--org {org}: the runs to pack record another submitter as submission_org: {said}. {fix}. Nothing "
                  f"was written.")


def pack(args: argparse.Namespace) -> int:
  org = args.org
  if not org or not ORG_NAME.fullmatch(org):
    raise UserError(f"--org {org!r}: the submitter name names a directory and the tarball; use letters, digits and "
                    f"_ . + - (no spaces, no leading dot).")
  out: Path = args.out
  require_dir_possible(out, "--out")
  targets = [out / org, out / tarball_name(org), out / sha1_name(org)]
  existing = [str(t) for t in targets if t.exists() or t.is_symlink()]
  if existing:
    raise UserError(f"{', '.join(existing)} already exist(s); a package is never overwritten. Move them away or choose "
                    f"another --out.")
  require_dir_possible(args.results, "--results")
  if not args.results.is_dir():
    raise UserError(f"--results {args.results}: no such directory; give the --results directory of `tinyperf run`.")
  systems_dir = args.systems
  if systems_dir is not None and not systems_dir.is_dir():
    raise UserError(f"--systems {systems_dir}: no such directory (it holds systems/<system>.json files written by "
                    f"`tinyperf sysinfo`).")
  passphrase = read_passphrase(args.passphrase_file, confirm=True) if args.encrypt else None
  if args.encrypt: openssl_path()

  sels = []
  for system, bm, ledger_path in find_ledgers(args.results, args.system, args.benchmark):
    cfg = platform_for(system, bm, args.platform)
    sels.append(select_runs(args.results, system, bm, ledger_path, cfg))
  for sel in sels:
    print(f"results/{sel.system}/{sel.benchmark} ({sel.cfg.platform}): the first {len(sel.runs)} finished runs in start "
          f"order (never chosen by score): " + ", ".join(f"run {r.attempt.index} seed {r.attempt.seed} -> {r.packaged}"
                                                         for r in sel.runs))
    if sel.left_out:
      print(f"  not packaged (finished after the first {len(sel.runs)}; keep their logs): "
            + ", ".join(f"run {a.index} seed {a.seed}" for a in sel.left_out))
    if sel.not_finished:
      print("  attempts that did not finish (crashed, interrupted or running; not runs of the package): "
            + ", ".join(f"run {a.index} seed {a.seed} {a.status}" for a in sel.not_finished))
  refuse_other_org(sels, org, args)
  code = resolve_code(sels, args.allow_dirty)
  print(f"code: {code.label}" + (" -- shipped because of --allow-dirty" if code.dirty else ""),
        file=sys.stderr if code.dirty else sys.stdout, flush=True)
  sources = {}
  for system in dict.fromkeys(sel.system for sel in sels):
    sources[system] = systems_source(system, args.results, systems_dir)
    print(f"systems/{system}.json from {sources[system]}")
    if systems_dir is None: report_system_variants(system, args.results, sources[system])

  try:
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out, prefix=".tinyperf-package-"))
  except OSError as e:
    raise UserError(f"--out {out}: cannot create a directory there ({e.strerror or e}); choose a writable --out.") from None
  try:
    org_dir = staging / org
    assemble(org_dir, sels, sources, org, code)
    print(f"checking the assembled tree ({org}/ in {staging}):", flush=True)
    ok, text = check_tree(org_dir)
    print(text)
    if not ok:
      print(f"tinyperf package: not packed: the assembled {org}/ tree fails the checks above; nothing was written to "
            f"{out}.", file=sys.stderr)
      return 1
    plain = staging / "plain.tar.gz"
    write_tarball(org_dir, plain, _mtime(sels))
    final = plain
    if passphrase is not None:
      final = staging / "encrypted.tar.gz"
      openssl_enc(False, plain, final, passphrase)
    line = f"{sha1_of(final)}  {tarball_name(org)}\n"
    with _locked_dir(out):   # two packages into one --out: the second finds the first's files, and writes none of its own
      if existing := [str(t) for t in targets if t.exists() or t.is_symlink()]:
        raise UserError(f"{', '.join(existing)} appeared while this package was assembled (another `tinyperf package` "
                        f"into {out}?); a package is never overwritten, and nothing of this one was written.")
      try:
        os.rename(org_dir, out / org)
        os.link(final, out / tarball_name(org))           # link: fails instead of replacing a file that appeared meanwhile
        write_atomic(out / sha1_name(org), line, mode=0o644)   # last: a .sha1 means the tarball is complete
      except OSError as e:
        raise UserError(f"--out {out}: writing the package failed ({e.strerror or e}); free space or choose another "
                        f"--out. A package without its .sha1 there is incomplete: remove it.") from None
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  kind = "encrypted with openssl enc -aes256 (decrypt: openssl enc -d -aes256 -in FILE | tar -xz)" if passphrase \
    else "not encrypted"
  print(f"wrote {host_path(out / org)}/, {host_path(out / tarball_name(org))} ({kind}) and {host_path(out / sha1_name(org))}: "
        f"{line.strip()}")
  return 0


# ---------------------------------------------------------------------------------------------------------------------
# verify

@dataclass
class Member:
  name: str            # normalised: no leading ./, no trailing /
  kind: str            # "dir" | "file"
  size: int
  executable: bool
  info: tarfile.TarInfo


def _kind(m: tarfile.TarInfo) -> str:
  if m.issym(): return "symbolic link"
  if m.islnk(): return "hard link"
  if m.ischr(): return "character device"
  if m.isblk(): return "block device"
  if m.isfifo(): return "FIFO"
  if m.issparse(): return "sparse file"
  if m.isdir(): return "dir"
  if m.isreg(): return "file"
  return f"type {m.type!r}"


def shown(name: str) -> str:
  """A member name as printed: control and format characters escaped, so a name cannot rewrite the listing."""
  return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def _bad_char(name: str) -> str | None:
  return next((c for c in name if unicodedata.category(c).startswith("C")), None)   # Cc, Cf (bidi), Cs, Co, Cn


def safe_members(tar: tarfile.TarFile) -> tuple[list[Member], list[str]]:
  """Every member checked before anything is written: regular files and directories with printable relative names that
  stay inside the destination; no links, devices, FIFOs, duplicates, or files used as directories; at most MAX_MEMBERS
  members, MAX_MEMBER_BYTES each and MAX_UNPACKED_BYTES in all. Reading stops at the first bound exceeded: skipping a
  member means decompressing it, so a tar bomb is refused from its headers, before its data is inflated."""
  members, problems, seen, total = [], [], {}, 0
  for i, m in enumerate(tar):   # streaming, not getmembers(): a 300,000-member archive stops at MAX_MEMBERS + 1
    if i >= MAX_MEMBERS:
      problems.append(f"more than {MAX_MEMBERS} members (a real submission has a few hundred); stopped reading")
      break
    total += max(m.size, 0)
    if m.size > MAX_MEMBER_BYTES:
      problems.append(f"{m.name!r}: {m.size} bytes, over the {MAX_MEMBER_BYTES // MiB} MiB a file of a "
                      f"submission may have; stopped reading")
      break
    if total > MAX_UNPACKED_BYTES:
      problems.append(f"over {MAX_UNPACKED_BYTES // MiB} MiB unpacked by member {m.name!r} (a real submission "
                      f"is a few MB); stopped reading")
      break
    name = m.name
    kind = _kind(m)
    bad = _bad_char(name)
    if bad is not None:
      problems.append(f"{name!r}: the name holds the control character {bad!r}; names in a submission are "
                      f"printable")
      continue
    label = repr(name)
    if kind not in ("dir", "file"):
      target = f" -> {m.linkname!r}" if m.issym() or m.islnk() else ""
      problems.append(f"{label}: a {kind}{target}; a submission holds only files and directories")
      continue
    if not name or name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\\" in name or "\x00" in name:
      problems.append(f"{label}: an absolute or non-POSIX path")
      continue
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if not parts or ".." in parts:
      problems.append(f"{label}: " + ("'..' leads out of the destination" if ".." in parts else "an empty name"))
      continue
    norm = "/".join(parts)
    long = next((p for p in parts if len(p.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES), None)
    if long is not None or len(parts) > MAX_TREE_DEPTH or len(norm.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
      # each was unpacked until the file system refused it (ENAMETOOLONG: half a tree), or raised RecursionError
      problems.append(f"{shown(norm[:80])}...: " + (
        f"a name of {len(long.encode('utf-8', 'surrogateescape'))} bytes, over the {MAX_NAME_BYTES} a file system allows"
        if long is not None else f"{len(parts)} levels deep, over {MAX_TREE_DEPTH}" if len(parts) > MAX_TREE_DEPTH
        else f"a path of over {MAX_PATH_BYTES} bytes (a real submission's are under 200)"))
      continue
    if norm in seen:
      problems.append(f"{label}: a second member with this name (it would replace the first)")
      continue
    seen[norm] = kind
    members.append(Member(norm, kind, m.size if kind == "file" else 0, bool(m.mode & 0o111), m))
  for mem in members:
    parent = str(PurePosixPath(mem.name).parent)
    while parent not in (".", ""):
      if seen.get(parent) == "file":
        problems.append(f"{mem.name!r}: its parent {parent!r} is a file in the archive")
        break
      parent = str(PurePosixPath(parent).parent)
  return members, problems


def damage(tar: tarfile.TarFile) -> str | None:
  """Why an archive whose members were all read is not whole, or None. tarfile ends its listing at the first header it
  cannot parse, as if the archive ended there, and never reads the gzip trailer (its CRC): what follows the
  end-of-archive blocks must be zeros up to a gzip stream that checks. Raises what a damaged stream raises."""
  f = tar.fileobj
  f.seek(tar.offset)
  left = MAX_UNPACKED_BYTES
  while chunk := f.read(MiB):
    if chunk.count(0) != len(chunk):
      return f"at byte {tar.offset} of the tar, where the member list ends, comes data, not the end-of-archive blocks"
    left -= len(chunk)
    if left < 0: return f"over {MAX_UNPACKED_BYTES // MiB} MiB of padding after the last member"
  return None


def extract(tar: tarfile.TarFile, members: list[Member], dest: Path) -> None:
  """Write the checked members under dest (which this call creates): directories, then files opened with O_EXCL and
  O_NOFOLLOW, modes 0755/0644 (no setuid bits, no owners)."""
  root = os.path.realpath(dest)
  for mem in members:
    target = dest.joinpath(*mem.name.split("/"))
    if not os.path.realpath(target).startswith(root + os.sep):
      raise UserError(f"{mem.name!r} resolves outside {dest}; refusing.")
    if mem.kind == "dir":
      target.mkdir(parents=True, exist_ok=True)
      target.chmod(0o755)
      continue
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mem.executable else 0o644)
    with os.fdopen(fd, "wb") as out, tar.extractfile(mem.info) as src:
      shutil.copyfileobj(src, out)


def verify(args: argparse.Namespace) -> int:
  tarball: Path = args.verify
  if not tarball.exists() and not tarball.is_symlink():
    raise UserError(f"{tarball}: no such file; give the mlperf_submission_<ORG>.tar.gz to verify.")
  require_regular(tarball, "submission tarball")
  default_sha = tarball.with_name(tarball.name[:-len(".tar.gz")] + ".sha1") if tarball.name.endswith(".tar.gz") \
    else tarball.with_name(tarball.name + ".sha1")
  sha_file = args.sha1 or default_sha
  if not sha_file.exists() and not sha_file.is_symlink():
    raise UserError(f"{sha_file}: no sha1 file next to the tarball (pack_submission.sh writes "
                    f"mlperf_submission_<ORG>.sha1); give it with --sha1 FILE.")
  want = read_bytes(sha_file, MAX_SHA1_BYTES, "sha1 file").decode("utf-8", "replace")
  got = sha1_line(tarball)
  m = re.fullmatch(r"([0-9a-f]{40})  (.+)\n?", want)
  if not m:
    print(f"sha1: {sha_file} is not one `sha1sum` line ('<40 hex digits>  <file name>')", file=sys.stderr)
    return 1
  if m.group(1) != got.split()[0]:
    print(f"sha1: MISMATCH: {sha_file} says {m.group(1)}, {tarball.name} has {got.split()[0]}: the tarball is not the "
          f"one that was packed (or is damaged)", file=sys.stderr)
    return 1
  if m.group(2) != tarball.name:
    print(f"sha1: {sha_file} names {m.group(2)!r} but the tarball is {tarball.name!r}; pack_submission.sh compares the "
          f"whole line, so rename the tarball back", file=sys.stderr)
    return 1
  print(f"sha1: ok ({got.strip()})")
  stem = tarball.name[:-len(".tar.gz")] if tarball.name.endswith(".tar.gz") else tarball.name
  dest = args.into or tarball.with_name(stem + "_unpacked")
  require_dir_possible(dest, "--into")
  if dest.exists() or dest.is_symlink():
    raise UserError(f"{dest} already exists; --verify unpacks only into a fresh directory. Remove it or pass "
                    f"--into NEW_DIR.")
  with open(tarball, "rb") as f: magic = f.read(8)
  with tempfile.TemporaryDirectory(prefix="tinyperf-verify-") as tmp:
    plain = tarball
    if magic == ENC_MAGIC:
      passphrase = read_passphrase(args.passphrase_file, confirm=False)
      plain = Path(tmp) / "plain.tar.gz"
      openssl_enc(True, tarball, plain, passphrase)
      print("decrypted with openssl enc -d -aes256")
    elif magic[:2] != GZIP_MAGIC:
      print(f"{tarball}: neither a gzip file nor an `openssl enc` file (starts with {magic!r})", file=sys.stderr)
      return 1
    try:
      tar = tarfile.open(plain, "r:gz")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
      print(f"{tarball}: not a readable gzip tar ({e}); nothing was unpacked.", file=sys.stderr)
      return 1
    with tar:
      try:
        members, problems = safe_members(tar)
        broken = None if problems else damage(tar)
      except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        broken = str(e)
      if broken:
        print(f"{tarball}: the archive is damaged ({broken}); nothing was unpacked. Ask the submitter for the tarball "
              f"again.", file=sys.stderr)
        return 1
      files = [x for x in members if x.kind == "file"]
      print(f"{len(files)} files, {len(members) - len(files)} directories, {sum(x.size for x in files)} bytes:")
      for x in members:
        print(f"  {'d' if x.kind == 'dir' else 'f'} {x.size:>10}  {shown(x.name)}{'/' if x.kind == 'dir' else ''}")
      tops = sorted({x.name.split('/')[0] for x in members})
      if problems:
        print(f"refused: {len(problems)} unsafe member(s); nothing was unpacked:", file=sys.stderr)
        for p in problems: print(f"  {p}", file=sys.stderr)
        return 1
      try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.mkdir()
      except FileExistsError:
        raise UserError(f"{dest} already exists; --verify unpacks only into a fresh directory. Remove it or pass "
                        f"--into NEW_DIR.") from None
      except OSError as e:
        raise UserError(f"cannot create {dest} ({e.strerror or e}); pass a writable --into.") from None
      try:
        extract(tar, members, dest)
      except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        print(f"{tarball}: unpacking failed ({e}); {dest} holds a partial copy", file=sys.stderr)
        return 1
  print(f"unpacked into {dest}: {', '.join(tops)}" + (f" (check it: tinyperf check {shlex.quote(str(dest / tops[0]))})" if len(tops) == 1
                                                      else ""))
  return 0


# ---------------------------------------------------------------------------------------------------------------------
# CLI

def add_arguments(p: argparse.ArgumentParser) -> None:
  p.epilog = ("exit status: 0 packed (or verified and unpacked), 1 refused (the checks failed, sha1 mismatch, unsafe "
              "tarball), 2 bad input. See docs/package.md.")
  p.add_argument("--org", help="submitter name: the tree's top directory and mlperf_submission_<ORG>.tar.gz (default: "
                 "the one `tinyperf run --org` recorded in RESULTS/systems/; it must be the name the runs' logs record)")
  p.add_argument("--out", type=Path, help="directory for ORG/, the tarball and the .sha1 (none of them may exist)")
  p.add_argument("--results", type=Path, help="`tinyperf run`'s --results directory (default: ./out, or the one "
                                              "results directory in it, e.g. ./smoke.sh's out/smoke)")
  p.add_argument("--systems", type=Path,
                 help="directory of systems/<system>.json files (default: RESULTS/systems/<system>.json, which `tinyperf "
                      "run` writes from the machine the runs ran on, else the repository's systems/)")
  p.add_argument("--system", action="append", help="package only this system (repeatable; default: all with ledgers)")
  p.add_argument("--benchmark", action="append", choices=BENCHMARKS, help="package only this benchmark (repeatable)")
  p.add_argument("--platform", help="implementation to package when several configs name the same system")
  p.add_argument("--allow-dirty", action="store_true",
                 help="ship the checkout's tracked files as they are now when they are not the clean commit the runs "
                      "recorded (the README names the package DIRTY); default: refused")
  p.add_argument("--encrypt", action="store_true", help="encrypt like pack_submission.sh: openssl enc -e -aes256")
  p.add_argument("--passphrase-file", type=Path, help="read the passphrase from this file's first line instead of "
                                                      "prompting")
  p.add_argument("--verify", type=Path, metavar="TARBALL", help="check TARBALL's sha1, list it and unpack it safely")
  p.add_argument("--sha1", type=Path, help="with --verify: the sha1 file (default: mlperf_submission_<ORG>.sha1 beside it)")
  p.add_argument("--into", type=Path, help="with --verify: a new directory to unpack into (default: beside the tarball)")


def main(args: argparse.Namespace) -> int:
  if args.verify:
    if args.org or args.out or args.encrypt:
      raise UserError("--verify TARBALL takes no --org, --out or --encrypt; it checks and unpacks an existing tarball.")
    return verify(args)
  if not args.out:
    raise UserError("give --out DIR to pack (or --verify TARBALL to check a tarball).")
  args.results = args.results or T.default_root()
  if not args.org:   # the submitter `tinyperf run` recorded with the runs
    if not (recorded := recorded_submitter(args.results)):
      raise UserError(f"give --org ORG: {host_path(args.results)} records no submitter (RESULTS/systems/<system>.json, "
                      f"written by `tinyperf run --org`).")
    args.org = recorded[0]
  return pack(args)
