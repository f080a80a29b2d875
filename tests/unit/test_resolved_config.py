"""A run's resolved config.json (benchmarks/common/config.py write_resolved/load_resolved): written once by the launcher
when it claims a run, read by the run's trainer (benchmarks/common/rundir.py load_run_config) with the validator
config.yaml has, the environment overriding nothing any more."""
from __future__ import annotations
import json
import re

import pytest

from tinyperf.benchmarks.common.config import ConfigError, load_resolved, write_resolved
from tinyperf.benchmarks.registry import load_config, spec
from tinyperf.benchmarks.common.rundir import RunDir, load_run_config


def _resolved(tmp_path, environ=None, submitter="myorg"):
  cfg = load_config("resnet", "cpu_smoke", environ={"BS": "8", "EVAL_BS": "8", **(environ or {})})
  run = RunDir(tmp_path / "run_0_7")
  digest = write_resolved(cfg, run.config, submitter)
  return cfg, run, digest


def test_a_resolved_config_reads_back_as_written_with_its_hash_and_submitter(tmp_path):
  cfg, run, digest = _resolved(tmp_path, {"DIVISION": "open"})
  got, submitter, sha = load_resolved(run.config, spec("resnet"))
  assert (got.benchmark, got.platform, got.knobs, got.meta, submitter, sha) == \
         (cfg.benchmark, cfg.platform, cfg.knobs, cfg.meta, "myorg", digest)
  assert got.overridden == cfg.overridden and got["division"] == "open" and got["BS"] == 8
  assert got.path == cfg.path   # messages name the config.yaml a person edits


@pytest.mark.parametrize("edit, what", [
  (lambda d: d["knobs"].update(BS=16), "sha256"),                    # edited after it was written
  (lambda d: d.update(format="other"), "tinyperf-config-v1"),     # the format it must be
  (lambda d: d.pop("submitter"), "submitter"),
])
def test_an_edited_or_foreign_file_is_refused_naming_it(tmp_path, edit, what):
  _, run, _ = _resolved(tmp_path)
  doc = json.loads(run.config.read_text()); edit(doc); run.config.write_text(json.dumps(doc))
  with pytest.raises(ConfigError, match=what) as e: load_resolved(run.config, spec("resnet"))
  assert str(run.config) in str(e.value)


@pytest.mark.parametrize("knobs, what", [({"BS": 0}, "BS=0"), ({"BS": "8"}, "'8'"), ({"BS": 9}, "BS=9.*GPUS=2"),
                                         ({"NOPE": 1}, "NOPE")])
def test_its_knobs_meet_the_rules_config_yaml_does(tmp_path, knobs, what):
  """A hand-made file with a consistent hash still passes the same type, range and consistency checks."""
  from tinyperf.benchmarks.common.config import _resolved_hash
  _, run, _ = _resolved(tmp_path, {"GPUS": "2", "BS": "8"})
  doc = json.loads(run.config.read_text()); doc.pop("sha256"); doc["knobs"].update(knobs)
  run.config.write_text(json.dumps({**doc, "sha256": _resolved_hash(doc)}))
  with pytest.raises(ConfigError, match=what): load_resolved(run.config, spec("resnet"))


def test_unreadable_or_not_json_is_a_config_error(tmp_path):
  with pytest.raises(ConfigError, match=re.escape(str(tmp_path / "none.json"))): load_resolved(tmp_path / "none.json", spec("resnet"))
  (tmp_path / "bad.json").write_text("{")
  with pytest.raises(ConfigError, match=re.escape(str(tmp_path / "bad.json"))): load_resolved(tmp_path / "bad.json", spec("resnet"))


def test_a_run_folder_with_config_json_runs_with_it_and_ignores_the_environment(tmp_path, monkeypatch):
  """The launcher resolved the environment's overrides once: a knob set in the trainer's own environment no longer
  counts. Without config.json (the rendered scripts, development) the entrypoint resolves config.yaml + environment."""
  _, run, _ = _resolved(tmp_path)
  monkeypatch.setenv("BS", "16"); monkeypatch.setenv("EVAL_BS", "16")
  cfg, submitter = load_run_config(spec("resnet"), "cpu_smoke", work=run.path)
  assert (cfg["BS"], submitter) == (8, "myorg")
  cfg, submitter = load_run_config(spec("resnet"), "cpu_smoke", work=tmp_path / "elsewhere")
  assert (cfg["BS"], submitter) == (16, None)
  cfg, _ = load_run_config(spec("resnet"), "cpu_smoke", config=run.config, work=tmp_path / "elsewhere")   # --config F.json
  assert cfg["BS"] == 8
  with pytest.raises(ConfigError): load_run_config(spec("bert"), "cpu_smoke", work=run.path)


def test_report_takes_the_target_a_run_ran_with(tmp_path):
  """`tinyperf report` read the target from whichever platform config names the system; a run's config.json says what
  it trained to (an override included), as long as it is the one the ledger recorded."""
  from tinyperf.tooling.common import ledger as L
  from tinyperf.tooling.common.results_tree import ResultSet
  from tinyperf.tooling.ship.report import _target
  rs = ResultSet(tmp_path, "cpu_smoke", "resnet")
  run = rs.run(0, 7)
  sha = write_resolved(load_config("resnet", "cpu_smoke", environ={"TARGET": "0.5"}), run.config, "o")
  att = L.Attempt(index=0, seed=7, status=L.DONE, platform="cpu_smoke", config_sha256=sha)
  assert _target("cpu_smoke", "resnet", rs.ledger, {0: att}) == (0.5, "TARGET of the cpu_smoke config run 0 ran with")
  att.config_sha256 = "0" * 64   # not the file the ledger recorded: the system's platform config, as before
  assert _target("cpu_smoke", "resnet", rs.ledger, {0: att}) == (0.9, "TARGET of the cpu_smoke config")
