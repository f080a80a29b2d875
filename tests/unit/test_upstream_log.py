"""lab.upstream reads tinycorp's own train log: logs rebuilt from what the records behind PERFORMANCE.md's
tinycorp figures hold (the raw logs are on the perf-data branch), a run stopped before its first replayed step, a lease
cut short in the search, BERT's wording, and a log that is not there."""
from __future__ import annotations
import gzip
import json

import pytest

from tinyperf.benchmarks.common.config import ROOT
from lab import upstream

RECORDS = ["2026-12-02_upstream_resnet_beam1.jsonl", "2026-12-03_upstream_bert_ranked.jsonl",
           "2026-12-04_upstream_bert_ranked95.jsonl", "2026-12-04_upstream_bert_ranked999.jsonl"]


def _step(i: int, run: float, python: float, fetch: float, wait: float) -> str:
  return (f"{i:5} {run:7.2f} ms run, {python:7.2f} ms python, {fetch:6.2f} ms fetch data, {wait:7.2f} ms CUDA,  3.54 loss, "
          f"1.00 acc, 1.134265 LR, 17.15 GB used,  39256.08 GFLOPS\n")


def log_of(rec: dict) -> str:
  """tinycorp's train log as its trainer writes it, from a record's figures: steps 0 and 1 (INIT), the replayed steps'
  times, and (under our ranked search) the search's report line; python, fetch and wait as the record's medians."""
  noun = "global batch size" if rec["benchmark"] == "bert" else "batch size"
  text = f"training {rec['benchmark']}\ntraining on ['CUDA:0']\ntraining with {noun} {rec['bs']} for 37 epochs\n"
  text += _step(0, rec["step0_s"] * 1e3, rec["step0_s"] * 1e3 - 10, 11.88, 0.97)
  if "covered" in rec:
    text += (f"ranked BEAM 1: r_1536_8_32 1001.40 ms at BEAM=0, searched in 45.5 s, 17.6% of the step covered, 45 s spent\n"
             f"ranked BEAM: searched {rec['searched_kernels']}/{rec['total_kernels']} kernels holding "
             f"{rec['covered'] * 100:.1f}% of the step's BEAM=0 time\n")
  text += _step(1, rec["capture_step_s"] * 1e3, rec["capture_step_s"] * 1e3 - 1400, 1418.42, 1.21)
  for i, ms in enumerate(rec["step_ms"], 2):
    text += _step(i, ms, rec["median_python_ms"], rec["median_fetch_data_ms"], rec["median_device_wait_ms"])
  return text + "Estimated training time: 0h0m\n"


def _record(name: str) -> dict: return json.loads((ROOT / "docs" / "perf" / name).read_text())


@pytest.mark.parametrize("record", RECORDS)
def test_a_log_gives_its_recorded_figures(record, tmp_path, capsys):
  rec = _record(record)
  log = tmp_path / "u.log.gz"
  log.write_bytes(gzip.compress(log_of(rec).encode()))
  assert upstream.main([str(log), "--json"]) == 0
  s = json.loads(capsys.readouterr().out)
  assert (s["bs"], s["steps_logged"], s["replayed_steps"]) == (rec["bs"], 20, 18)
  # the record's figures are its step times' (median, rate) and steps 0 + 1 (INIT)
  for k in ("median_step_ms", "median_device_wait_ms", "init_s", "step0_s", "capture_step_s"):
    assert s[k] == rec[k], k
  assert s["items_per_s"] == rec.get("img_per_s", rec.get("seq_per_s")) and s["device"] == "CUDA"
  # the ranked runs' report line says how far the search got (row 18's plain search has no such line)
  if "covered" in rec:
    assert (s["searched"], s["kernels"], s["covered"]) == (rec["searched_kernels"], rec["total_kernels"], rec["covered"])
    assert "ranked_so_far" not in s               # a finished search's report line is the figure, not its last kernel
  else: assert "kernels" not in s


def test_a_run_stopped_before_its_first_replay_says_so_and_exits_1(tmp_path, capsys):
  text = log_of(_record(RECORDS[0]))
  log = tmp_path / "u.log"
  log.write_text(text[:text.index("\n    1 ")])                 # step 0 only: the search (step 1) did not finish
  assert upstream.main([str(log)]) == 1
  out = capsys.readouterr().out
  assert "1 steps logged, none replayed yet" in out and "rerun with the same CACHE" in out


# the last kernel line of three calls on tinycorp's BERT that the machine's return cut short (their logs are on the
# perf-data branch: 2026-12-03_upstream_bert_beam2_130.log.gz, _130_rerun.log.gz, 2026-12-04_upstream_bert_beam2_133.log.gz)
@pytest.mark.parametrize("last, got", [
  ("ranked BEAM 17: r_96_128_16_8_4_4_2_512 116.51 ms at BEAM=0, searched in 11.0 s, 87.7% of the step covered, 175 s spent",
   "given 17 kernels a result, 87.7% of the BEAM=0 step covered, 175 s spent"),
  ("ranked BEAM 21: r_8_32_32 95.10 ms at BEAM=0, searched in 20.3 s, 90.9% of the step covered, 65 s spent",
   "given 21 kernels a result, 90.9% of the BEAM=0 step covered, 65 s spent"),
  ("ranked BEAM 25: r_384_16_32 80.00 ms at BEAM=0, from the cache in 0.4 s, 93.9% of the step covered, 121 s spent",
   "given 25 kernels a result, 93.9% of the BEAM=0 step covered, 121 s spent")])
def test_a_lease_cut_short_in_the_search_says_how_far_the_ranked_search_got(last, got, tmp_path, capsys):
  """A log cut short in the capture step's search ends at a per-kernel line; the summary says how far it got."""
  log = tmp_path / "u.log"
  log.write_text("training with global batch size 96 for one epoch with 37500 steps\n" + _step(0, 200335.45, 199989.83, 344.82, 0.8)
                 + "ranked BEAM 1: r_1536_8_32 1001.40 ms at BEAM=0, from the cache in 0.9 s, 17.6% of the step covered, 0 s spent\n"
                 + last + "\n")
  assert upstream.main([str(log)]) == 1
  out = capsys.readouterr().out
  assert "none replayed yet" in out and got in out


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
  assert str(log) in err and "Traceback" not in err          # exit 2: bad input, not a log to run again (exit 1)
