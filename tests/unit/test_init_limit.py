"""A closed INIT that cannot meet the 30-minute init limit is stopped, loudly, and RUN is never started."""
from __future__ import annotations
import io
import time

from benchmarks.common.config import load_config
from tooling import run


def test_init_over_its_limit_is_stopped_and_run_never_starts(monkeypatch, tmp_path, capsys):
  real = run.stream_process   # the real process handling; the phase itself is a stand-in that would run for a minute
  monkeypatch.setattr(run, "stream_process", lambda cmd, env, out, cwd, time_limit=None, **kw: real(["sleep", "60"], env, out,
                                                                                                   cwd, time_limit, **kw))
  out = io.BytesIO()
  t0 = time.time()
  codes, _ = run.host_run(load_config("resnet", "1xH200", environ={}), 7, tmp_path, tmp_path, out, init_limit_s=2)
  assert 2 <= time.time() - t0 < 30
  assert codes["init"] < 0 and "run" not in codes                 # killed; RUN was not started
  assert "INIT stopped after" in capsys.readouterr().err and b"INIT stopped after" in out.getvalue()


def test_closed_division_gets_the_limit_and_open_does_not(monkeypatch, tmp_path):
  seen = []
  monkeypatch.setattr(run, "stream_process", lambda cmd, env, out, cwd, time_limit=None, **kw: seen.append(time_limit) or (0, False))
  run.host_run(load_config("resnet", "1xH200", environ={}), 1, tmp_path, tmp_path, None)
  run.host_run(load_config("resnet", "cpu_smoke", environ={}), 1, tmp_path, tmp_path, None)
  assert seen == [run.CLOSED_INIT_STOP_S, None, None, None]       # closed INIT, closed RUN, open INIT, open RUN
