"""`tinyperf bench` refuses arguments that do not fit the benchmark before starting anything."""
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.parametrize("argv", [["resnet", "--dropout", "0"], ["bert", "--dropout", "1.5"], ["bert", "--dropout", "-0.1"]])
def test_dropout_only_for_bert_and_only_a_probability(argv):
  r = subprocess.run([sys.executable, "-m", "tooling.cli", "bench", *argv], cwd=REPO, capture_output=True, text=True,
                     timeout=120)
  assert r.returncode == 2 and "--dropout" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("vary, names", [("USE_ATOMICS", "KNOB=VALUE"), ("NOT_A_KNOB=1", "NOT_A_KNOB"),
                                          ("USE_ATOMICS=2", "allowed: 0, 1"), ("BS=many", "must be int")])
def test_vary_takes_one_knob_of_the_config_with_a_valid_value(vary, names):
  r = subprocess.run([sys.executable, "-m", "tooling.cli", "bench", "bert", "--against", "none", "--vary", vary],
                     cwd=REPO, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and f"--vary {vary}" in r.stderr and names in r.stderr, r.stderr
  assert "Traceback" not in r.stderr
