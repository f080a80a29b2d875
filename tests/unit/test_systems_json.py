"""systems/*.json: the real system_desc_checker (4.0.0 and 5.0.0) accepts each, and the values are the agreed ones."""
from __future__ import annotations
import json

import pytest

from conftest import REPO
from tinyperf.benchmarks.common.config import PLATFORMS
from tinyperf.tooling.common import mlperf_tools

SYSTEMS = REPO / "systems"
STATUS = "Available on-premise"


def load(name): return json.loads((SYSTEMS / f"{name}.json").read_text())


def test_one_systems_json_per_platform():
  assert sorted(p.stem for p in SYSTEMS.glob("*.json")) == sorted(PLATFORMS)


@pytest.mark.parametrize("ruleset", ["4.0.0", "5.0.0"])
@pytest.mark.parametrize("name", PLATFORMS)
def test_system_desc_checker_passes(name, ruleset):
  res = mlperf_tools.system_desc_check(SYSTEMS / f"{name}.json", ruleset)
  assert res.passed and res.reasons == [], res.output
  assert f"System description checker passed for {load(name)['system_name']}" in res.output


def test_the_checker_wrapper_can_fail(tmp_path):
  """Negative control for the test above: the wrapper reports the checker's reasons (status replaces the list)."""
  data = load("tinybox_green")
  del data["cooling"]
  (tmp_path / "a.json").write_text(json.dumps(data))
  res = mlperf_tools.system_desc_check(tmp_path / "a.json", "5.0.0")
  assert not res.passed and res.reasons == ["Missing field cooling"]
  (tmp_path / "b.json").write_text(json.dumps(dict(data, status="available")))
  res = mlperf_tools.system_desc_check(tmp_path / "b.json", "4.0.0")
  assert not res.passed and len(res.reasons) == 1 and "non valid value: available" in res.reasons[0]


@pytest.mark.parametrize("name", PLATFORMS)
def test_agreed_values(name):
  d = load(name)
  assert len(d) == 33
  assert d["status"] == STATUS and d["framework"] == "tinygrad 0.14.0 (PyPI)" and d["submitter"] == "tinycorp"
  assert d["division"] == ("open" if name == "cpu_smoke" else "closed")
  for f in ("number_of_nodes", "host_processors_per_node", "accelerators_per_node"):
    int(d[f])   # result_summarizer and package_checker need int-able counts
  assert "3.11" in d["other_software_stack"]["python"]


def test_tinybox_and_h200_facts():
  g, r, mi = load("tinybox_green"), load("tinybox_red"), load("tinybox_8xMI300X")
  assert (g["accelerators_per_node"], g["accelerator_model_name"]) == ("6", "NVIDIA GeForce RTX 4090")
  assert (r["accelerators_per_node"], r["accelerator_model_name"]) == ("6", "AMD Radeon RX 7900 XTX")
  assert (mi["accelerators_per_node"], mi["host_processors_per_node"]) == ("8", "2")
  for n in (1, 2):
    h = load(f"{n}xH200")
    assert h["accelerators_per_node"] == str(n) and h["accelerator_model_name"] == "NVIDIA H200 141GB HBM3e"
    assert h["host_processor_model_name"] == "" and "tinyperf sysinfo" in h["hw_notes"]
  assert load("cpu_smoke")["accelerators_per_node"] == "0"
