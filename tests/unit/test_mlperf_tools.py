"""Package-data queries and output parsing of the mlperf_logging wrappers."""
from __future__ import annotations

import pytest

from tinyperf.tooling.common import mlperf_tools as mt
from tinyperf.tooling.common.errors import ToolError


def test_accepting_rulesets_come_from_the_installed_package():
  resnet, bert = mt.accepting_rulesets("resnet", "closed"), mt.accepting_rulesets("bert", "closed")
  assert resnet[-1] == "4.0.0" and "4.1.0" not in resnet and "0.6.0" not in resnet
  assert bert[-1] == "5.0.0" and "5.1.0" not in bert      # 5.1.0 still ships closed_bert.yaml: a leftover
  assert set(resnet) <= set(bert) and "0.7.0" in resnet
  assert mt.accepting_rulesets("nosuchbench") == ()
  rulesets = mt.training_rulesets()
  assert list(rulesets) == sorted(rulesets, key=mt._version_key) and "6.1.0" in rulesets


def test_parse_records_keeps_multiline_messages():
  text = ("INFO - Running compliance on file: x\nWARNING -  CHECK for 'init_stop' failed in line 7:\n"
          ":::MLLOG {...}\nfailed test: a < b\n" + "-" * 30 + "\nRequired EXACTLY_ONE occurrence of 'seed' but found 2\n"
          "ERROR - FAILED\n")
  recs = mt.parse_records(text)
  assert [r.level for r in recs] == ["INFO", "WARNING", "ERROR"]
  msgs = mt.split_checker_messages(recs)
  assert [(m.key, m.checker_line, m.duplicate) for m in msgs] == [("init_stop", 7, False), ("seed", None, True)]
  assert msgs[0].rule == "CHECK for 'init_stop' failed: a < b"


def test_split_checker_messages_kinds():
  recs = [mt.Record("WARNING", " Required EXACTLY_ONE occurrence of 'run_stop' but found 0\n" + "-" * 30 +
                    "\nFailed checks for eval_accuracy : v['value'] >= 0.720\n" + "-" * 30 +
                    "\nRequired EXACTLY_ONE occurrence of 'global_batch_size' but found 2 with different values: [1, 2]")]
  msgs = mt.split_checker_messages(recs)
  assert [(m.key, m.duplicate) for m in msgs] == [("run_stop", False), ("eval_accuracy", False),
                                                  ("global_batch_size", False)]


def test_tools_never_write_to_the_working_directory(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  p = tmp_path / "x.txt"
  p.write_text(":::MLLOG {}\n")
  with pytest.raises(ToolError, match="KeyError: 'time_ms'"):   # the checker crashes on it: no verdict
    mt.compliance_check(p, "5.0.0")
  assert sorted(x.name for x in tmp_path.iterdir()) == ["x.txt"]
