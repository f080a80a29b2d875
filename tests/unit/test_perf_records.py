"""Every performance file the docs and records point a reader to is in the repository: a figure whose raw log or
BEAM cache lives anywhere else (a local branch, a leased machine's /tmp) is lost with it."""
from __future__ import annotations
import json
import re
from pathlib import Path

from benchmarks.common.config import ROOT

PERF = ROOT / "docs" / "perf"
NAMED = re.compile(r"docs/perf/([A-Za-z0-9_.\-]+[A-Za-z0-9_\-])")     # a file named in prose, a command or a comment
FILE_FIELDS = ("log", "beam_db", "result_log")                                    # the fields of a record that name a file


def _readers_texts() -> list[Path]:
  docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
  return docs + sorted((ROOT / "scripts").iterdir()) + sorted((ROOT / "benchmarks").rglob("config.yaml"))


def test_every_docs_perf_file_named_in_docs_scripts_and_configs_exists():
  missing = [f"{p.relative_to(ROOT)}: docs/perf/{m}" for p in _readers_texts() if p.is_file()
             for m in NAMED.findall(p.read_text(errors="replace")) if not (PERF / m).exists()]
  assert not missing, "named but not in the repository:\n" + "\n".join(missing)


def test_every_file_a_record_names_exists():
  missing = []
  for rec_file in sorted(PERF.glob("*.jsonl")):
    for n, line in enumerate(rec_file.read_text().splitlines(), 1):
      rec = json.loads(line)
      missing += [f"{rec_file.name}:{n} {k}={rec[k]}" for k in FILE_FIELDS
                  if isinstance(rec.get(k), str) and not (ROOT / rec[k]).exists()]
  assert not missing, "records naming files that are not in the repository:\n" + "\n".join(missing)


def test_the_pattern_takes_whole_file_names():
  # the pattern must catch the names the docs use: a name with its extension, not cut at a dot
  assert NAMED.findall("see `docs/perf/2026-12-01_resnet_beam_343.db`.") == ["2026-12-01_resnet_beam_343.db"]
  assert NAMED.findall("docs/perf/x.log.gz, then") == ["x.log.gz"]
