"""What `tinyperf run` shows: milestones with the run's prefix, not MLLOG lines or progress bars; a failed phase's tail."""
from __future__ import annotations
import io

from tinyperf.tooling.launch.console import Console

OUTPUT = (b':::MLLOG {"key": "init_start", "value": null}\n'
          b"init train step 0: 48628.5 ms, loss 1.386\n"
          b"init took 95.2 s\n"
          b"epoch 1/8:  50%|#####     | 5/10\repoch 1/8: 100%|##########| 10/10\n"
          b"epoch 1: eval loss 1.1922, top-1 0.9062 (target 0.9)\n"
          b"Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n")


def feed(console: Console, data: bytes, size: int):
  for i in range(0, len(data), size): console(data[i:i + size])   # lines split across chunks, as a pipe delivers them


def test_quiet_console_shows_milestones_with_the_run_prefix():
  out = io.StringIO()
  c = Console(out=out); c.prefix = "run 0 of 5 (seed 7): "
  feed(c, OUTPUT, 7)
  assert out.getvalue().splitlines() == ["run 0 of 5 (seed 7): init took 95.2 s",
                                         "run 0 of 5 (seed 7): epoch 1: eval loss 1.1922, top-1 0.9062 (target 0.9)"]


def test_a_failed_phase_shows_its_last_lines_progress_bars_at_their_last_state():
  out = io.StringIO()
  c = Console(out=out)
  feed(c, OUTPUT, 5)
  c.failed("RUN exited 1", "output.log")
  text = out.getvalue()
  assert "RUN exited 1; its last 8 lines (all of it: output.log):" in text
  assert "    ValueError: boom" in text and "    epoch 1/8: 100%|##########| 10/10" in text and "50%" not in text


def test_verbose_passes_everything_through():
  out = io.StringIO()
  c = Console(verbose=True, out=out)
  feed(c, OUTPUT, 3)
  assert out.getvalue() == OUTPUT.decode()
  c.failed("RUN exited 1", "output.log")            # already shown in full: nothing repeated
  assert out.getvalue() == OUTPUT.decode()


def test_busy_output_that_shows_nothing_still_gets_a_line_every_few_seconds(monkeypatch):
  """A BEAM search or INIT prints lines the console filters out: the console was silent for 30-86 s. After QUIET_S
  without a line it says it is still working, and what the run printed last; the trainer's own heartbeat lines (a
  silent compile) are shown as they come."""
  from tinyperf.tooling.launch import console as K
  now = [100.0]
  monkeypatch.setattr(K.time, "monotonic", lambda: now[0])
  out = io.StringIO()
  c = Console(out=out); c.prefix = "run 0 of 5 (seed 7): "
  c(b"init train step 0: 48628.5 ms, loss 1.386\n")
  now[0] += K.QUIET_S - 2
  c(b"init train step 1: 400.1 ms, loss 1.386\n")
  c.tick()                                                  # not yet
  now[0] += 3
  c.tick()
  c.tick()                                                  # just said: nothing new
  now[0] += K.QUIET_S
  c.tick()                                                  # nothing printed since: the run is silent or over
  c(b"still working: INIT (compiling) (8 s since the last line, 30 s since the start)\n")
  assert out.getvalue().splitlines() == [
    "run 0 of 5 (seed 7): still working (10 s since the last line): init train step 1: 400.1 ms, loss 1.386",
    "run 0 of 5 (seed 7): still working: INIT (compiling) (8 s since the last line, 30 s since the start)"]


def test_still_working_never_shows_a_raw_mlperf_log_line(monkeypatch):
  # the Quickstart's console showed `still working (9 s ...): :::MLLOG {"namespace": ...`: it names the event instead
  from tinyperf.tooling.launch import console as K
  now = [100.0]
  monkeypatch.setattr(K.time, "monotonic", lambda: now[0])
  out = io.StringIO()
  c = Console(out=out)
  now[0] += K.QUIET_S - 1
  c(b':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "INTERVAL_START", "key": "init_start", "value": null}\n')
  now[0] += 2
  c.tick()
  assert ":::MLLOG" not in out.getvalue() and "logged init_start" in out.getvalue(), out.getvalue()
