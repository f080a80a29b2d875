"""`tinyperf score`: result_summarizer's olympic rules, time to train, scaling.json."""
from __future__ import annotations
import json

import pytest

from mllog_builder import make_package, write_log
from tinyperf.tooling.cli import main as cli
from tinyperf.tooling.common.mllog_reader import read_log
from tinyperf.tooling.common.judge.score import olympic_mean, score_path, time_to_train_minutes


def test_olympic_mean_drops_fastest_and_slowest():
  assert olympic_mean([5.0, 1.0, 3.0, 2.0, 4.0], dropped=0) == pytest.approx(3.0)
  assert olympic_mean([1.0, 2.0, 3.0, 10.0], dropped=1) == pytest.approx(5.0)   # the dropped run was the slowest
  assert olympic_mean([1.0, 2.0, 3.0], dropped=2) is None
  assert olympic_mean([1.0, 2.0], dropped=0) is None


def _event(key, t, value=None, meta=None):
  return json.dumps({"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": key, "value": value,
                     "metadata": meta or {}})


def test_time_to_train_follows_result_summarizer(tmp_path):
  p = tmp_path / "r.txt"
  lines = [_event("submission_benchmark", 0, "bert"), _event("run_start", 60_000), _event("run_start", 120_000),
           _event("run_stop", 720_000, meta={"status": "success"}), _event("run_start", 900_000),
           _event("run_stop", 990_000, meta={"status": "success"})]
  p.write_text("".join(f":::MLLOG {l}\n" for l in lines))
  # the latest run_start before the first run_stop, as result_summarizer scans it
  assert time_to_train_minutes(read_log(p)) == pytest.approx(10.0)
  p.write_text("".join(f":::MLLOG {l}\n" for l in lines[:3]))
  assert time_to_train_minutes(read_log(p)) is None


def test_score_of_one_log(capsys, tmp_path):
  p = write_log(tmp_path / "result_0.txt", "resnet", run_minutes=99.5)
  (s,) = score_path(p)
  assert s.runs[0].minutes == pytest.approx(99.5) and s.runs[0].counted and s.score_minutes is None
  assert cli(["score", str(p)]) == 0
  assert "99.50" in capsys.readouterr().out


def test_package_score_scaling_and_json(capsys, tmp_path):
  org = make_package(tmp_path, "resnet", runs=[{"run_minutes": m} for m in (100, 110, 120, 130, 200)])
  (s,) = score_path(org)
  assert s.olympic_minutes == pytest.approx(120.0) and s.score_minutes == pytest.approx(120.0)
  notes = {r.file: r.note for r in s.runs}
  assert notes["result_0.txt"].startswith("fastest") and notes["result_4.txt"].startswith("slowest")
  (org / "results" / "tinybox_green" / "resnet" / "scaling.json").write_text('{"scaling_factor": 1.1}')
  (s,) = score_path(org)
  assert s.scaling_factor == pytest.approx(1.1) and s.score_minutes == pytest.approx(132.0)
  assert cli(["score", "--json", str(org)]) == 0
  (d,) = json.loads(capsys.readouterr().out)
  assert d["score_minutes"] == pytest.approx(132.0) and d["system"] == "tinybox_green" and d["benchmark"] == "resnet"


def test_two_dropped_runs_give_no_score(capsys, tmp_path):
  org = make_package(tmp_path, "resnet", runs=[{"run_stop": False}, {}, {"init_minutes": 45}, {}, {}])
  (s,) = score_path(org)
  assert s.dropped == 2 and s.score_minutes is None and s.olympic_minutes is None
  assert s.reason.startswith("no score: 2 of 5 runs dropped")
  assert cli(["score", str(org)]) == 1
  assert "no score: 2 of 5 runs dropped" in capsys.readouterr().out
