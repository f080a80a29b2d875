"""The MLCommons tools for in-process tests, without a fresh interpreter per run.

tinyperf runs every mlperf_logging tool as `python -m mlperf_logging.<tool> ARGS` (tooling/common/mlperf_tools.py
run_tool). package_checker and result_summarizer import scipy (rcp_checker) before they check anything: about 2 CPU-s a
run of their 2.5-3.2, and the suite runs them some 130 times from tests that call check_path / the CLI's main() in
the pytest worker. A server process per worker imports the tools once and forks a child per run; the child runs the
tool's __main__ as `python -m` would (runpy, the run's argv, cwd and environment, its stdout/stderr, its exit code, a
traceback printed on a crash), so run_tool's own code (command line, scratch directory, --log_output, parsing, crash
detection, timeout) is what the tests exercise. Only tests/conftest.py's `tool_server` fixture routes through it;
every `tinyperf` subprocess (the CLI as users type it) still starts the tools as real subprocesses, as does a test
marked `real_tool_subprocess`.
"""
from __future__ import annotations
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

TOOLS = ("compliance_checker", "package_checker", "result_summarizer", "system_desc_checker", "repo_checker")

SERVER = r"""
import importlib, json, os, runpy, signal, socket, sys, traceback
for m in %(preload)r:   # what each tool's __main__ imports (its own import runs the tool: left to the child)
  try: importlib.import_module(m)
  except Exception: pass   # an import that fails here fails again in the child, where the run reports it
signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # children are reaped by the kernel
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sys.argv[1]); srv.listen(16)
srv.settimeout(5)
parent = os.getppid()
print("ready", flush=True)
while True:
  try: conn, _ = srv.accept()
  except socket.timeout:
    if os.getppid() != parent: sys.exit(0)   # the pytest worker is gone (killed): so is its server
    continue
  if os.fork():
    conn.close(); continue
  srv.close()
  conn.settimeout(None)
  signal.signal(signal.SIGCHLD, signal.SIG_DFL)
  f = conn.makefile("rwb")
  req = json.loads(f.readline())
  f.write(("%%d\n" %% os.getpid()).encode()); f.flush()
  os.chdir(req["cwd"])
  os.environ.clear(); os.environ.update(req["env"])
  for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
    out = os.open(path, os.O_WRONLY | os.O_TRUNC)
    os.dup2(out, fd); os.close(out)
  sys.argv = [req["module"]] + req["args"]
  sys.path[0] = req["cwd"]   # `python -m` puts the working directory first
  code = 0
  try:
    runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
  except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else (print(e.code, file=sys.stderr) or 1))
  except BaseException:
    traceback.print_exc(); code = 1
  try:
    import logging; logging.shutdown()
  except Exception: pass
  sys.stdout.flush(); sys.stderr.flush()
  f.write(("%%d\n" %% code).encode()); f.flush()
  os._exit(0)
""" % {"preload": ["mlperf_logging.compliance_checker.mlp_compliance", "mlperf_logging.package_checker.package_checker",
                    "mlperf_logging.result_summarizer.result_summarizer",
                    "mlperf_logging.system_desc_checker.system_desc_checker", "mlperf_logging.repo_checker.repo_checker"]}


class ToolServer:
  """One server per process (pytest worker); started on first use, stopped with stop()."""
  def __init__(self):
    self._proc: subprocess.Popen | None = None
    self._dir: tempfile.TemporaryDirectory | None = None
    self._lock = threading.Lock()
    self.runs = 0

  def _start(self) -> str:
    with self._lock:
      if self._proc is None or self._proc.poll() is not None:
        self._dir = tempfile.TemporaryDirectory(prefix="tinyperf-tool-server-")
        sock = os.path.join(self._dir.name, "s")
        self._proc = subprocess.Popen([sys.executable, "-c", SERVER, sock], stdout=subprocess.PIPE, text=True,
                                      stdin=subprocess.DEVNULL, cwd=self._dir.name)
        assert self._proc.stdout.readline().strip() == "ready", "the tool server did not start"
      return os.path.join(self._dir.name, "s")

  def stop(self):
    if self._proc is not None and self._proc.poll() is None:
      self._proc.kill(); self._proc.wait()
    if self._dir is not None: self._dir.cleanup()
    self._proc = self._dir = None

  @staticmethod
  def handles(cmd) -> bool:
    return (isinstance(cmd, (list, tuple)) and len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-m"
            and cmd[2] in {f"mlperf_logging.{t}" for t in TOOLS})

  def run(self, cmd, cwd=None, timeout=None, **kw) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, cwd=..., capture_output=True, text=True, timeout=..., encoding=..., errors=...) for a
    `python -m mlperf_logging.<tool>` command, answered by a forked child of the server."""
    sock = self._start()
    with tempfile.TemporaryDirectory(prefix="tinyperf-tool-run-") as d:
      out, err = Path(d, "stdout"), Path(d, "stderr")
      out.touch(); err.touch()
      req = {"module": cmd[2], "args": [str(a) for a in cmd[3:]], "cwd": os.path.abspath(cwd or os.getcwd()),
             "env": dict(kw.get("env") or os.environ), "stdout": str(out), "stderr": str(err)}
      with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(sock)
        s.settimeout(timeout)
        f = s.makefile("rwb")
        f.write((json.dumps(req) + "\n").encode()); f.flush()
        pid = int(f.readline())
        try:
          line = f.readline()
        except (socket.timeout, TimeoutError):
          try: os.kill(pid, signal.SIGKILL)
          except ProcessLookupError: pass
          raise subprocess.TimeoutExpired(list(cmd), timeout) from None
      if not line: raise RuntimeError(f"the tool server's child {pid} died running {cmd[2:]}")
      self.runs += 1
      enc, errors = kw.get("encoding") or "utf-8", kw.get("errors") or "strict"
      return subprocess.CompletedProcess(list(cmd), int(line), out.read_bytes().decode(enc, errors),
                                         err.read_bytes().decode(enc, errors))


class RoutedSubprocess:
  """Stands in for the `subprocess` module inside mlperf_tools: run() of a tool command goes to the server, anything
  else (and every other attribute) is the real module's."""
  def __init__(self, server: ToolServer): self._server = server
  def __getattr__(self, name): return getattr(subprocess, name)
  def run(self, cmd, *a, **kw):
    if not a and self._server.handles(cmd) and kw.get("capture_output") and kw.get("stdin") is None:
      return self._server.run(cmd, **{k: v for k, v in kw.items() if k not in ("capture_output", "text")})
    return subprocess.run(cmd, *a, **kw)
