"""tooling.perf.upstream reads tinycorp's own train log: the real ones behind PERFORMANCE.md rows 18 and 24 (docs/perf),
a run stopped before its first replayed step, BERT's wording, and a log that is not there."""
from __future__ import annotations
import gzip
import json

import pytest

from benchmarks.common.config import ROOT
from tooling.perf import upstream

ROW18 = ROOT / "docs" / "perf" / "2026-12-02_upstream_resnet_beam1.log.gz"


@pytest.mark.parametrize("record", ["2026-12-02_upstream_resnet_beam1.jsonl", "2026-12-03_upstream_bert_ranked.jsonl",
                                    "2026-12-04_upstream_bert_ranked95.jsonl",
                                    "2026-12-04_upstream_bert_ranked999.jsonl"])
def test_a_stored_log_gives_its_recorded_figures(record, capsys):
  rec = json.loads((ROOT / "docs" / "perf" / record).read_text())
  assert upstream.main([str(ROOT / rec["log"]), "--json"]) == 0
  s = json.loads(capsys.readouterr().out)
  assert (s["bs"], s["steps_logged"], s["replayed_steps"]) == (rec["bs"], 20, 18)
  for k in ("median_step_ms", "median_device_wait_ms", "init_s", "step0_s", "capture_step_s"):
    assert s[k] == rec[k], k
  assert s["items_per_s"] == rec.get("img_per_s", rec.get("seq_per_s")) and s["device"] == "CUDA"
  # row 24 and the 81.7 % run before it ran under our ranked search: how far it got is read from the log (row 18's plain
  # search has no such line)
  if "covered" in rec:
    assert (s["searched"], s["kernels"], s["covered"]) == (rec["searched_kernels"], rec["total_kernels"], rec["covered"])
  else: assert "kernels" not in s


def test_a_run_stopped_before_its_first_replay_says_so_and_exits_1(tmp_path, capsys):
  text = gzip.decompress(ROW18.read_bytes()).decode()
  log = tmp_path / "u.log"
  log.write_text(text[:text.index("\n    1 ")])                 # step 0 only: the search (step 1) did not finish
  assert upstream.main([str(log)]) == 1
  out = capsys.readouterr().out
  assert "1 steps logged, none replayed yet" in out and "rerun with the same CACHE" in out


@pytest.mark.parametrize("log, got", [("2026-12-03_upstream_bert_beam2_130.log.gz", "given 17 kernels a result, 87.7%"
                                        " of the BEAM=0 step covered, 175 s spent"),
                                       ("2026-12-03_upstream_bert_beam2_130_rerun.log.gz", "given 21 kernels a result, "
                                        "90.9% of the BEAM=0 step covered, 65 s spent"),
                                       ("2026-12-04_upstream_bert_beam2_133.log.gz", "given 25 kernels a result, 93.9%"
                                        " of the BEAM=0 step covered, 121 s spent")])
def test_a_lease_cut_short_in_the_search_says_how_far_the_ranked_search_got(log, got, capsys):
  """The logs of calls on tinycorp's BERT that the machine's return cut short (PERFORMANCE.md) end at a per-kernel line
  of the capture step's search; the summary says how far it got (the figures PERFORMANCE.md quotes)."""
  assert upstream.main([str(ROOT / "docs" / "perf" / log)]) == 1
  out = capsys.readouterr().out
  assert "none replayed yet" in out
  assert got in out
  # a finished search's report line is the figure; the per-kernel lines before it are not repeated
  finished = gzip.decompress((ROOT / "docs/perf/2026-12-03_upstream_bert_ranked.log.gz").read_bytes()).decode()
  assert "ranked_so_far" not in upstream.summary(finished)


def test_bert_wording_and_no_bs_line():
  bert = ("training with global batch size 96 for one epoch with 10 steps\n" +
          "".join(f"{i:5} {ms:7.2f} ms run,   10.00 ms python,   5.00 ms fetch data,  {ms - 15:7.2f} ms CUDA, 9.9 loss, "
                  f"0.000175 LR, 30.00 GB used, 100.00 GFLOPS\n" for i, ms in enumerate([200000.0, 900000.0, 2000.0, 2100.0, 2200.0])))
  s = upstream.summary(bert)
  assert s["median_step_ms"] == 2100.0 and s["items_per_s"] == round(96e3 / 2100, 1) and s["init_s"] == 1100.0
  assert "items_per_s" not in upstream.summary(bert.split("\n", 1)[1])   # no batch-size line: no rate, no guess


def test_a_missing_log_is_one_line_and_exit_2(tmp_path, capsys):
  assert upstream.main([str(tmp_path / "nope.log")]) == 2
  err = capsys.readouterr().err
  assert "cannot read" in err and "nope.log" in err and "Traceback" not in err


def test_binary_data_is_not_a_log_to_rerun(tmp_path, capsys):
  """Binary data (a tarball, a cache db given by mistake) said "0 steps logged, ... rerun with the same CACHE", exit 1."""
  log = tmp_path / "u.db"
  log.write_bytes(b"SQLite format 3\x00" + bytes(4096))
  assert upstream.main([str(log)]) == 2
  err = capsys.readouterr().err
  assert "u.db" in err and "binary data, not a text log" in err and "Traceback" not in err
