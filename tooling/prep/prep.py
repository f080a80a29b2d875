"""`tinyperf prep DATASET ...`: make the data a benchmark reads.

The work is done by `python -m tinyperf.benchmarks.<bm>.prep` in a subprocess (tooling never imports training code); its exit
code is passed through: 0 ok, 1 `--verify` found problems, 2 bad input, 130 interrupted."""
from __future__ import annotations
import argparse
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from tinyperf.tooling.common.container import MOUNTS_ENV, host_paths_in

ROOT = Path(__file__).resolve().parents[1]
# dataset -> (module that prepares it, one-line help). A dataset whose module has several steps takes the step as its
# first option: `tinyperf prep wiki pretrain --data D` runs `python -m tinyperf.benchmarks.bert.prep pretrain --data D`.
DATASETS = {
  "imagenet": ("tinyperf.benchmarks.resnet.prep", "ILSVRC2012 for ResNet-50: download (resumable) or --from-tars, verify md5, "
               "extract per class, write manifest.json; or --verify DIR"),
  "synthetic-imagenet": ("tinyperf.benchmarks.resnet.prep", "learnable synthetic JPEGs in the ImageNet layout, for smoke runs"),
  "wiki": ("tinyperf.benchmarks.bert.prep", "BERT's Wikipedia: `wiki download|pretrain|eval|verify|dump|corpus ...` (MLCommons files "
           "through gdown, tokenised memory-mappable shards, the 10,000-sample eval set, a small real-text corpus)"),
}
STEPPED = {"wiki"}


def add_arguments(p: argparse.ArgumentParser):
  p.description = ("Prepare a data set. DATASET is one of: " + "; ".join(f"{k}: {v[1]}" for k, v in DATASETS.items())
                   + ". Options are the dataset's own: `tinyperf prep DATASET --help` lists them.")
  p.add_argument("dataset", choices=list(DATASETS), metavar="DATASET", help=", ".join(DATASETS))
  p.add_argument("options", nargs=argparse.REMAINDER, help="options of that dataset (see `tinyperf prep DATASET --help`)")


def command(args) -> list[str]:
  name = [] if args.dataset in STEPPED else [args.dataset]
  return [sys.executable, "-m", DATASETS[args.dataset][0], *name, *args.options]


def main(args) -> int:
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
  # the name the user typed, for the child's usage lines: `tinyperf prep wiki pretrain`, `tinyperf prep imagenet`
  env["TINYPERF_PREP_PROG"] = f"tinyperf prep {args.dataset}" if args.dataset in STEPPED else "tinyperf prep"
  # in a compose service, what the child prints (`wrote /data/manifest.json`) names the host directories behind the mounts
  relay = bool(os.environ.get(MOUNTS_ENV))
  pipe = subprocess.PIPE if relay else None
  proc = subprocess.Popen(command(args), env=env, stdout=pipe, stderr=pipe)
  pumps = [threading.Thread(target=_relay, args=(src, dst), daemon=True)
           for src, dst in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)) if src is not None]
  for t in pumps: t.start()
  try:
    code = proc.wait()
  except KeyboardInterrupt:  # the child got the same Ctrl-C: let it clean up and report
    code = proc.wait() or 130
  for t in pumps: t.join()
  return code


def _relay(src, dst):
  """Copy a child's output as it comes, piece by piece (a progress bar's \r updates too), with host_paths_in."""
  buf = b""
  while chunk := src.read1(65536):
    buf += chunk
    *pieces, buf = re.split(rb"(?<=[\r\n])", buf)
    if pieces: dst.write(host_paths_in(b"".join(pieces).decode("utf-8", "replace"))); dst.flush()
  if buf: dst.write(host_paths_in(buf.decode("utf-8", "replace"))); dst.flush()
