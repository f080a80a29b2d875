"""Every performance file the docs and records point a reader to exists: a small record or result log in docs/perf, or a
binary artifact (raw log, BEAM cache, job archive) listed with its sha256 in docs/perf/README.md and kept on the
perf-data branch. A figure whose raw data lives anywhere else (a local branch, a leased machine's /tmp) is lost with it.
PERFORMANCE.md's table cites records that exist and hold the figures it quotes."""
from __future__ import annotations
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from tinyperf.benchmarks.common.config import ROOT

PERF = ROOT / "docs" / "perf"
NAMED = re.compile(r"docs/perf/([A-Za-z0-9_.\-]+[A-Za-z0-9_\-])")     # a file named in prose, a command or a comment
FILE_FIELDS = ("log", "beam_db", "result_log", "job")                               # the fields of a record that name a file
LISTED = re.compile(r"^- `([A-Za-z0-9_.\-]+)` ([0-9a-f]{64})$", re.M)              # docs/perf/README.md's perf-data list
BINARY = (".db", ".pkl", ".tgz", ".gz")


def perf_data() -> dict[str, str]:
  return dict(LISTED.findall((PERF / "README.md").read_text()))


def _known(name: str) -> bool: return (PERF / name).exists() or name in perf_data()


def _readers_texts() -> list[Path]:
  docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
  return docs + sorted((ROOT / "lab" / "scripts").iterdir()) + sorted((ROOT / "benchmarks").rglob("config.yaml"))


def test_docs_perf_holds_no_binary_artifact():
  binaries = sorted(p.name for p in PERF.iterdir() if p.name.endswith(BINARY))
  assert not binaries, f"binary artifacts belong on the perf-data branch (list them in docs/perf/README.md): {binaries}"


def test_every_docs_perf_file_named_in_docs_scripts_and_configs_exists():
  missing = [f"{p.relative_to(ROOT)}: docs/perf/{m}" for p in _readers_texts() if p.is_file()
             for m in NAMED.findall(p.read_text(errors="replace")) if not _known(m)]
  assert not missing, "named but neither in docs/perf nor on perf-data:\n" + "\n".join(missing)


def test_every_file_a_record_names_exists():
  missing = []
  for rec_file in sorted(PERF.glob("*.jsonl")):
    for n, line in enumerate(rec_file.read_text().splitlines(), 1):
      rec = json.loads(line)
      missing += [f"{rec_file.name}:{n} {k}={rec[k]}" for k in FILE_FIELDS
                  if isinstance(rec.get(k), str) and not ((ROOT / rec[k]).exists()
                                                          or (rec[k].startswith("docs/perf/") and _known(rec[k][10:])))]
  assert not missing, "records naming files that are neither in docs/perf nor on perf-data:\n" + "\n".join(missing)


def test_the_perf_data_list_matches_the_branch_where_it_is_fetched():
  """Where the perf-data branch is at hand (a clone that fetched it), every listed file is on it with that sha256."""
  listed = perf_data()
  assert listed and all(n.endswith(BINARY) for n in listed)
  ref = next((r for r in ("perf-data", "origin/perf-data") if subprocess.run(
    ["git", "rev-parse", "--verify", "-q", r], cwd=ROOT, capture_output=True).returncode == 0), None)
  if ref is None: pytest.skip("the perf-data branch is not fetched here (git fetch origin perf-data:perf-data)")
  wrong = []
  for name, sha in listed.items():
    r = subprocess.run(["git", "show", f"{ref}:perf/{name}"], cwd=ROOT, capture_output=True)
    if r.returncode != 0 or hashlib.sha256(r.stdout).hexdigest() != sha: wrong.append(name)
  assert not wrong, f"not on {ref} as listed: {wrong}"


def test_the_table_cites_records_that_hold_its_figures():
  """Each row of PERFORMANCE.md's current table names one or more records in docs/perf; every bold figure in ms or s
  (`**309.0 ms**`) is in one of them, as written there or in seconds, to the figure's decimals."""
  rows = [l for l in (ROOT / "docs" / "PERFORMANCE.md").read_text().splitlines()
          if l.startswith("| ") and "docs/perf/" in l]
  assert len(rows) >= 4, "the current table: one row per workload, each citing its record"
  for row in rows:
    recs = [PERF / m for m in NAMED.findall(row) if m.endswith(".jsonl")]
    assert recs and all(r.exists() for r in recs), row
    nums = [float(n) for r in recs for n in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?", r.read_text())]
    figures = re.findall(r"\*\*(\d+(?:\.\d+)?) (ms|s)\*\*", row)
    assert figures, f"a row without a bold figure in ms or s: {row[:80]}"
    for fig, unit in figures:
      half = 0.5 * 10 ** -len(fig.partition(".")[2]) + 1e-9              # 2510.35 is 2510.4 to one decimal
      held = nums + [n * 1000 for n in nums if unit == "ms"]
      assert any(abs(n - float(fig)) <= half for n in held), f"{fig} {unit} is in none of {[r.name for r in recs]}"


def test_the_pattern_takes_whole_file_names():
  # the pattern must catch the names the docs use: a name with its extension, not cut at a dot
  assert NAMED.findall("see `docs/perf/2026-12-01_resnet_beam_343.db`.") == ["2026-12-01_resnet_beam_343.db"]
  assert NAMED.findall("docs/perf/x.log.gz, then") == ["x.log.gz"]
