"""`tinyperf render`: write every generated file from the configs (tooling/common/scripts.py's implementation scripts and
READMEs, tooling/common/compose_file.py's compose.yaml, the Dockerfiles); `--check` reports the stale ones."""
from __future__ import annotations
import argparse
from pathlib import Path

from tinyperf.benchmarks.common.config import ROOT, available_platforms
from tinyperf.benchmarks.registry import BENCHMARKS, load_config
from tinyperf.tooling.common.scripts import RENDERERS


def rendered_files() -> dict[Path, str]:
  """Every generated file and its text: implementation scripts/READMEs, compose.yaml, the Dockerfiles."""
  from tinyperf.tooling.common.compose_file import COMPOSE, render_compose
  from tinyperf.tooling.prep.compose import missing_image_dockerfiles
  from tinyperf.tooling.prep.images import rendered_dockerfiles
  out = {COMPOSE: render_compose(), **rendered_dockerfiles(), **missing_image_dockerfiles()}
  for b in BENCHMARKS:
    for p in available_platforms(b):
      cfg = load_config(b, p, environ={})  # the committed files reflect the config alone, never this shell's env
      for name, fn in RENDERERS.items(): out[cfg.path.parent / name] = fn(cfg)
  return out


def stale_files(files: dict[Path, str] | None = None) -> list[Path]:
  return [p for p, text in (files or rendered_files()).items() if not p.is_file() or p.read_text() != text]


def add_arguments(p: argparse.ArgumentParser):
  p.add_argument("--check", action="store_true", help="only report files that differ from their config (exit 1 if any)")


def main(args) -> int:
  files = rendered_files()
  if args.check:
    stale = stale_files(files)
    for p in stale: print(f"stale: {p.relative_to(ROOT)} (run `tinyperf render`)")
    if not stale: print(f"up to date: all {len(files)} rendered files match the configs and images.lock.json")
    return 1 if stale else 0
  wrote = 0
  for path, text in files.items():
    if path.is_file() and path.read_text() == text: continue
    path.write_text(text)
    if path.suffix == ".sh": path.chmod(0o755)
    print(f"wrote {path.relative_to(ROOT)}")
    wrote += 1
  if not wrote: print(f"nothing to write: all {len(files)} rendered files already match the configs")
  return 0
