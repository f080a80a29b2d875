"""tinyperf: one verb per job of an MLPerf Training submission (prep -> run -> check -> package).

Each verb lives in its own module with `add_arguments(parser)` and `main(args) -> int`; this file only wires them."""
from __future__ import annotations
import argparse
import importlib
import os
import signal
import sys
from pathlib import Path

from tinyperf.benchmarks.common.io import InputError

# verb -> (module, one-line help). Every verb module is imported to build --help, so verb modules keep heavy imports
# (docker, tinygrad, PIL) inside their functions: `tinyperf check` never pays for them.
VERBS = {
  "prep": ("tinyperf.tooling.prep.prep", "prepare data: ResNet's ImageNet (download/ingest, verify, extract) or a synthetic stand-in; "
           "BERT's Wikipedia shards, eval set and phase-1 checkpoint (`tinyperf prep wiki --help`)"),
  "check": ("tinyperf.tooling.verdict.check", "check result logs or a submission tree with the real MLCommons checkers (+ the traps they miss)"),
  "score": ("tinyperf.tooling.verdict.score", "time to train per run and the olympic mean, equal to result_summarizer's"),
  "run": ("tinyperf.tooling.launch.run", "N seeded INIT+RUN runs of a benchmark on a platform, each checked, in a resumable ledger"),
  "status": ("tinyperf.tooling.launch.status", "each run's state (done, running, pending, failed, missing) from the ledger and Slurm; "
             "--resume resubmits failed Slurm runs"),
  "render": ("tinyperf.tooling.prep.render", "regenerate each implementation's scripts and README, compose.yaml and the Dockerfiles from "
             "the configs and images.lock.json"),
  "build": ("tinyperf.tooling.prep.build", "build a vendor's image (nv, amd, cpu) with live progress, provenance and the base digest used"),
  "compose": ("tinyperf.tooling.prep.compose", "prepare docker compose services: host directories owned by you, .env (your UID/GID, "
              "the directories), image present, GPU runtime; then `docker compose run --rm SERVICE`"),
  "images": ("tinyperf.tooling.prep.images", "show the pinned base images, or pin their digests from the registry"),
  "package": ("tinyperf.tooling.ship.package", "assemble ORG/{systems,benchmarks,results} from finished runs, check it, pack the "
              "(optionally encrypted) tarball + sha1; --verify checks and safely unpacks one"),
  "report": ("tinyperf.tooling.ship.report", "PNG plots (accuracy, time to train, throughput) and a Markdown summary of a set of runs"),
  "sysinfo": ("tinyperf.tooling.launch.sysinfo", "write systems/<system>.json from this machine (+ an overrides file), checked by system_desc_checker"),
}


# Verbs that read repository files outside the Python packages, and one such file each. They are in a git checkout
# (where `pip install -e .` leaves them), also in the images (docker/install.sh installs /opt/tinyperf/src editable); a
# plain `pip install .` leaves them behind, so those verbs refuse with the fix instead of failing on a missing file.
REPO_FILES = {"render": "images.lock.json", "images": "images.lock.json", "build": "images.lock.json",
              "package": "images.lock.json", "sysinfo": "systems", "run": "systems", "compose": "compose.yaml"}


def require_repository(verb: str, args: argparse.Namespace | None = None):
  from tinyperf.benchmarks.common.config import ROOT
  need = REPO_FILES.get(verb)
  if verb == "package" and getattr(args, "verify", None): need = None   # checking a tarball reads no repository file
  if need and not (ROOT / need).exists():
    raise InputError(f"{ROOT / need} is missing: this tinyperf was installed without its repository (`pip install .`), "
                     f"and `tinyperf {verb}` reads the repository's files. Run tinyperf from its git checkout: "
                     f"`pip install --no-deps -e .` there (./smoke.sh and scripts/env.sh make such a .venv).")


def versions() -> str:
  """tinyperf's version and the two it is pinned to (what a bug report and a submission's provenance need)."""
  from importlib.metadata import PackageNotFoundError, version
  def v(dist: str) -> str:
    try: return version(dist)
    except PackageNotFoundError: return "not installed"
  return f"tinyperf {v('tinyperf')} (tinygrad {v('tinygrad')}, mlperf-logging {v('mlperf-logging')})"


class _Version(argparse.Action):
  """--version, looked up only when asked (package metadata is read from disk)."""
  def __init__(self, option_strings, dest, **kw): super().__init__(option_strings, dest, nargs=0, **kw)
  def __call__(self, parser, namespace, values, option_string=None):
    print(versions())
    parser.exit()


def build_parser() -> argparse.ArgumentParser:
  # no abbreviated flags: `--beam-cach` taken for --beam-cache would let a truncated flag in the docs pass their test
  p = argparse.ArgumentParser(prog="tinyperf", description=__doc__.splitlines()[0], allow_abbrev=False)
  p.add_argument("--version", action=_Version, help="print the versions of tinyperf, tinygrad and mlperf-logging")
  sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
  for verb, (mod, help_) in VERBS.items():
    sp = sub.add_parser(verb, help=help_, description=help_, allow_abbrev=False)
    importlib.import_module(mod).add_arguments(sp)
    sp.set_defaults(_module=mod)
  return p


def absolute_paths(args: argparse.Namespace) -> argparse.Namespace:
  """Every path argument made absolute once, here: verbs hand paths to tools that run in other directories (the
  MLCommons checkers run in a scratch directory) and name directories by their last component (`check .` inside
  results/<system>/<bm>). abspath, not resolve: a symlinked directory keeps the name the user gave it."""
  for k, v in vars(args).items():
    if isinstance(v, Path): setattr(args, k, Path(os.path.abspath(v)))
    elif isinstance(v, list) and v and all(isinstance(x, Path) for x in v): setattr(args, k, [Path(os.path.abspath(x)) for x in v])
  return args


def main(argv: list[str] | None = None) -> int:
  try: return _main(argv)
  except BrokenPipeError:
    # stdout closed early (status piped into head -1): what was done stays done; end quietly, as `yes | head` does
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def _main(argv: list[str] | None) -> int:
  parser = build_parser()
  args = absolute_paths(parser.parse_args(argv))
  try:
    require_repository(args.verb, args)
    return importlib.import_module(args._module).main(args) or 0
  except InputError as e:
    print(f"tinyperf {args.verb}: error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt as e:   # Ctrl-C, or SIGTERM/SIGHUP made one by stop_on_signals, which says which
    print(f"tinyperf {args.verb}: {str(e) or 'interrupted'}", file=sys.stderr)   # a bare Ctrl-C has no message
    return 130


if __name__ == "__main__":
  sys.exit(main())
