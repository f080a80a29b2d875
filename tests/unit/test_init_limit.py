"""A closed INIT that cannot meet the 30-minute init limit is stopped, loudly; the limit ends at init_stop."""
from __future__ import annotations
import io
import time

from tinyperf.benchmarks.common.rundir import RunDir
from tinyperf.benchmarks.registry import load_config
from tinyperf.benchmarks.common.rules import CLOSED_INIT_STOP_S
from tinyperf.tooling.launch import backends

REAL_STREAM = backends.stream_process   # before any test patches it
INIT_STOP_LINE = ':::MLLOG {"namespace": "", "event_type": "INTERVAL_END", "key": "init_stop", "value": null}'


def _with_process(monkeypatch, script: str):
  """host_run's real process handling, with `sh -c script` standing in for the training process."""
  monkeypatch.setattr(backends, "stream_process", lambda cmd, env, out, cwd, time_limit=None, **kw:
                      REAL_STREAM(["sh", "-c", script], env, out, cwd, time_limit, **kw))


def test_init_over_its_limit_is_stopped_and_run_never_starts(monkeypatch, tmp_path, capsys):
  _with_process(monkeypatch, "echo init train step 0; sleep 60")
  out = io.BytesIO()
  t0 = time.time()
  codes, _ = backends.host_run(load_config("resnet", "1xH200", environ={}), 7, tmp_path, RunDir(tmp_path), out, init_limit_s=2)
  assert 2 <= time.time() - t0 < 30
  assert codes["init"] < 0 and "run" not in codes                 # killed during INIT
  assert "INIT stopped after" in capsys.readouterr().err and b"INIT stopped after" in out.getvalue()


def test_the_limit_ends_at_init_stop(monkeypatch, tmp_path, capsys):
  # the marker split over two writes, then a RUN longer than the INIT limit: it runs to its end
  half = len(INIT_STOP_LINE) // 2
  _with_process(monkeypatch, f"printf '%s' '{INIT_STOP_LINE[:half]}'; sleep 0.3; echo '{INIT_STOP_LINE[half:]}'; sleep 4; "
                             "echo trained; exit 1")
  out = io.BytesIO()
  codes, _ = backends.host_run(load_config("resnet", "1xH200", environ={}), 7, tmp_path, RunDir(tmp_path), out, init_limit_s=2)
  assert codes == {"run": 1} and out.getvalue().endswith(b"trained\n")
  assert "INIT stopped" not in capsys.readouterr().err


def test_closed_division_gets_the_limit_and_open_does_not(monkeypatch, tmp_path):
  seen = []
  monkeypatch.setattr(backends, "stream_process", lambda cmd, env, out, cwd, time_limit=None, **kw:
                      seen.append((cmd[cmd.index("--phase") + 1], time_limit, kw.get("limit_until"))) or (0, False))
  backends.host_run(load_config("resnet", "1xH200", environ={}), 1, tmp_path, RunDir(tmp_path), None)
  backends.host_run(load_config("resnet", "cpu_smoke", environ={}), 1, tmp_path, RunDir(tmp_path), None)
  assert seen == [("all", CLOSED_INIT_STOP_S, backends.INIT_STOP_MARK), ("all", None, backends.INIT_STOP_MARK)]


def test_a_crash_shows_its_last_lines_and_a_missed_target_does_not(monkeypatch, tmp_path):
  from tinyperf.tooling.launch.console import Console
  cfg = load_config("resnet", "cpu_smoke", environ={})
  stop = ':::MLLOG {"namespace": "", "time_ms": 2, "event_type": "INTERVAL_END", "key": "run_stop", "value": null, ' \
         '"metadata": {"status": "aborted"}}'
  for script, shown in (("echo 'Traceback: boom'; exit 1", True),                       # no run_stop: a crash
                        (f"echo 'target 0.9 not reached'; echo '{stop}' > {tmp_path}/mlperf.txt; exit 1", False)):
    _with_process(monkeypatch, script)
    out = io.StringIO()
    codes, _ = backends.host_run(cfg, 7, tmp_path, RunDir(tmp_path), io.BytesIO(), console=Console(out=out))
    assert codes == {"run": 1}
    assert ("INIT+RUN exited 1; its last" in out.getvalue()) is shown, out.getvalue()
