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
  3. benchmarks/<benchmark>/implementations/<platform>/: a self-contained copy of the code (benchmarks/ with the
     other benchmarks' specs only, tooling, pyproject.toml, lock files, Dockerfiles, the repository's systems/<system>.json),
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
import os
import shlex
import shutil
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from tinyperf.benchmarks.common.config import ROOT
from tinyperf.benchmarks.common.io import require_dir_possible
from tinyperf.benchmarks.registry import BENCHMARKS
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common import scripts
from tinyperf.tooling.common.compose_file import render_compose
from tinyperf.tooling.common.container import host_path
from tinyperf.tooling.common.errors import UserError, write_atomic
from tinyperf.tooling.common.mllog_reader import read_log
from tinyperf.tooling.common.safe_read import MAX_JSON_BYTES, MAX_LOG_BYTES, read_bytes
from tinyperf.tooling.common.submission_tree import ORG_NAME, read_systems_json, recorded_submitter
from tinyperf.tooling.ship.archive import (MAX_FILE_BYTES, openssl_enc, openssl_path, read_passphrase, sha1_name, sha1_of,
                                  tarball_name, verify, write_tarball)
from tinyperf.tooling.ship.code import Code, resolve_code, run_code_tree, run_commit, run_image
from tinyperf.tooling.ship.selection import BenchSelection, find_ledgers, platform_for, select_runs


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
                f"| {sha} | {run_image(r.attempt) or 'none recorded'} | {run_code_tree(r.attempt) or 'none recorded'} |")
  left = ", ".join(f"{a.index} (seed {a.seed})" for a in sel.left_out) or "none"
  n = len(sel.runs)
  return scripts.render_readme(cfg) + f"""
## This package
Packaged by `tinyperf package --org {org}` from the tinyperf repository at {code.label}.
This directory is a self-contained copy of the code (its root is a repository root): `benchmarks/` (the entrypoint and its modules, no
tests), `tooling/` (the `tinyperf` CLI), `pyproject.toml`, the lock files, and the scripts above rendered from
`benchmarks/{cfg.benchmark}/implementations/{cfg.platform}/config.yaml`.

Results `results/{sel.system}/{cfg.benchmark}/result_0..{n - 1}.txt` are the first {n} finished runs in the order
they started, as recorded in the run ledger; runs are never chosen by score or convergence. Runs that crashed or were
interrupted are not finished runs (they were redone with fresh seeds); finished runs after the first {n}: {left}.

| file | run index | seed | converged | code commit of the run | image ID of the run | code hash of the run's image |
|---|---|---|---|---|---|---|
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
    for name, fn in scripts.RENDERERS.items():
      _write(nested / name, fn(cfg), executable=name.endswith(".sh"))
    for name, fn in scripts.SCRIPTS.items():
      _write(impl / name, fn(cfg, root="."), executable=True)
    _write(impl / "README.md", package_readme(sel, org, code))


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
  from tinyperf.tooling.common.judge.check import check_path
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
  raise UserError(f"--org {org}: the runs to pack record another submitter as submission_org: {said}. {fix}.")


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
