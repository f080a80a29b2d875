"""What a person watching `tinyperf run` sees. A run's full output (MLLOG lines, progress bars, per-step lines) goes to
its output.log; the console gets one line per run and phase, the trainer's milestone lines (INIT time, each eval, the
end), and, when a phase fails, the last lines of its output. `--verbose` passes everything through as it comes."""
from __future__ import annotations
import re
import sys
import time
from collections import deque

# lines of the training entrypoints worth a person's eye (benchmarks/*/train.py print them)
MILESTONE = re.compile(r"^(init took|RUN \(timed\)|epoch \d+: eval|eval at step|target reached|target .* not reached|RUN ABORTED|"
                       r"training failed|override from environment|resumed from|INIT stopped|error:|still working:|"
                       r"kernels: \d+ compiled)")
TAIL_LINES = 25
QUIET_S = 9.0   # no silence over 10 s: a run that prints only what is not a milestone gets a line after this long


class Console:
  """Callable sink for a phase's output bytes (tooling/common/process.py stream_process, the container backend's stream)."""
  def __init__(self, verbose: bool = False, out=None):
    import threading
    self.verbose, self.out = verbose, out or sys.stdout
    self.prefix, self._partial, self.tail = "", b"", deque(maxlen=TAIL_LINES)
    self.said = self.fed = time.monotonic()
    self._lock = threading.Lock()
    # on the terminal, a thread calls tick() every second (a test calls it itself)
    if out is None and not verbose: threading.Thread(target=self._ticker, name="console-tick", daemon=True).start()

  def say(self, text: str):
    with self._lock:
      self.out.write(f"{self.prefix}{text}\n"); self.out.flush()
      self.said = time.monotonic()

  def _ticker(self):
    while True:
      time.sleep(1.0)
      self.tick()

  def tick(self):
    """A run printing only what is not a milestone (INIT's steps, a BEAM search's lines): after QUIET_S without a line,
    say so, with what it printed last. A run that printed nothing for as long has ended or is silent (the trainer
    itself then says it is still working, a milestone)."""
    now = time.monotonic()
    if self.verbose or not self.tail or now - self.said < QUIET_S or now - self.fed >= QUIET_S: return
    last = self.tail[-1]
    if ":::MLLOG" in last:   # the console never shows raw MLPerf log lines: name the event instead
      key = re.search(r'"key": "([^"]+)"', last)
      last = f"logged {key.group(1) if key else 'an MLPerf event'}"
    self.say(f"still working ({now - self.said:.0f} s since the last line): {last[:100]}")

  def __call__(self, chunk: bytes):
    if self.verbose:
      self.out.buffer.write(chunk) if hasattr(self.out, "buffer") else self.out.write(chunk.decode(errors="replace"))
      self.out.flush()
    self.fed = time.monotonic()
    lines = (self._partial + chunk).split(b"\n")
    self._partial = lines.pop()
    for raw in lines:
      line = raw.decode(errors="replace").split("\r")[-1].rstrip()   # a progress bar's last state
      if not line: continue
      self.tail.append(line)
      if self.verbose: continue
      if MILESTONE.match(line): self.say(line)

  def failed(self, what: str, log: str):
    """A phase ended badly: its last lines (where the error is), unless they were all shown already."""
    if self.verbose: return
    self.say(f"{what}; its last {len(self.tail)} lines (all of it: {log}):")
    for line in self.tail: self.out.write(f"    {line}\n")
    self.out.flush()
