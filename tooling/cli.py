"""tinyperf: one verb per job of an MLPerf Training submission (prep -> run -> check -> package).

Each verb lives in its own module with `add_arguments(parser)` and `main(args) -> int`; this file only wires them."""
from __future__ import annotations
import argparse
import importlib
import sys

from benchmarks.common.io import InputError

# verb -> (module, one-line help). Every verb module is imported to build --help, so verb modules keep heavy imports
# (docker, tinygrad, PIL) inside their functions: `tinyperf check` never pays for them.
VERBS = {
  "prep": ("tooling.prep", "prepare data: ImageNet (download/ingest, verify, extract) or a synthetic stand-in"),
  "check": ("tooling.check", "check result logs or a submission tree with the real MLCommons checkers (+ the traps they miss)"),
  "score": ("tooling.score", "time to train per run and the olympic mean, equal to result_summarizer's"),
  "run": ("tooling.run", "N seeded INIT+RUN runs of a benchmark on a platform, each checked, in a resumable ledger"),
  "status": ("tooling.status", "each run's state (done, running, pending, failed, missing) from the ledger and Slurm; "
             "--resume resubmits failed Slurm runs"),
  "bench": ("tooling.bench", "our tinygrad train step and PyTorch's, side by side on this machine's GPU(s)"),
  "render": ("tooling.render", "regenerate each implementation's scripts and README, compose.yaml and the Dockerfiles from "
             "the configs and images.lock.json"),
  "build": ("tooling.build", "build a vendor's image (nv, amd, cpu) with live progress, provenance and the base digest used"),
  "compose": ("tooling.compose", "prepare docker compose services: host directories owned by you, .env (your UID/GID, "
              "the directories), image present, GPU runtime; then `docker compose run --rm SERVICE`"),
  "images": ("tooling.images", "show the pinned base images, or pin their digests from the registry"),
  "package": ("tooling.package", "assemble ORG/{systems,benchmarks,results} from finished runs, check it, pack the "
              "(optionally encrypted) tarball + sha1; --verify checks and safely unpacks one"),
  "report": ("tooling.report", "PNG plots (accuracy, time to train, throughput) and a Markdown summary of a set of runs"),
  "sysinfo": ("tooling.sysinfo", "write systems/<system>.json from this machine (+ an overrides file), checked by system_desc_checker"),
}


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="tinyperf", description=__doc__.splitlines()[0])
  sub = p.add_subparsers(dest="verb", metavar="VERB", required=True)
  for verb, (mod, help_) in VERBS.items():
    sp = sub.add_parser(verb, help=help_, description=help_)
    importlib.import_module(mod).add_arguments(sp)
    sp.set_defaults(_module=mod)
  return p


def main(argv: list[str] | None = None) -> int:
  parser = build_parser()
  args = parser.parse_args(argv)
  try:
    return importlib.import_module(args._module).main(args) or 0
  except InputError as e:
    print(f"tinyperf {args.verb}: error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"tinyperf {args.verb}: interrupted", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
