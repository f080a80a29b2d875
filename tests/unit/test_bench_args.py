"""`python -m lab.bench` refuses arguments that do not fit the benchmark before starting anything, names the environment
values its flags replace, and stops the PyTorch side's process group on SIGTERM (both sides stand-ins, no training)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinyperf.benchmarks.registry import load_config

from tests.conftest import REPO


def test_without_the_gpus_is_one_line_and_starts_nothing(tmp_path):
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--gpus", "64", "--platform", "tinybox_green"],
                     cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr   # no machine shows 64
  (line,) = r.stderr.strip().splitlines()
  assert "--platform cpu_smoke --against none" in line and "page cache" not in r.stderr


def test_an_abbreviated_flag_is_refused():
  # a flag cut short in the docs must not parse in their test
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--beam-cach", "x"], cwd=REPO, capture_output=True,
                     text=True, timeout=120)
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("argv", [["resnet", "--dropout", "0"], ["bert", "--dropout", "1.5"], ["bert", "--dropout", "-0.1"]])
def test_dropout_only_for_bert_and_only_a_probability(argv):
  r = subprocess.run([sys.executable, "-m", "lab.bench", *argv], cwd=REPO, capture_output=True, text=True,
                     timeout=120)
  assert r.returncode == 2 and "--dropout" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv, says", [(["--steps", "0"], "--steps 0: time at least one step"),
                                        (["--time-limit", "0"], "--time-limit 0: give a number of seconds above 0"),
                                        (["--time-limit", "-5"], "--time-limit -5: give a number of seconds above 0"),
                                        (["--time-limit", "inf"], "--time-limit inf: give a number of seconds above 0"),
                                        (["--record", "no-such-dir/r.jsonl"], "no-such-dir does not exist or is not writable"),
                                        (["--record", "docs"], "docs: a directory, not a file")])
def test_steps_time_limit_and_record_are_refused_before_init(argv, says):
  # each once ran INIT on the CPU first (about 20 s) and only then failed; --record with a traceback after the bench
  # (also onto a directory); --time-limit inf with an OverflowError traceback from the limit's timer thread
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--against", "none",
                      *argv], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
  assert "init took" not in r.stdout + r.stderr


@pytest.mark.parametrize("vary, names", [("USE_ATOMICS", "KNOB=VALUE"), ("NOT_A_KNOB=1", "NOT_A_KNOB"),
                                          ("USE_ATOMICS=2", "allowed: 0, 1"), ("BS=many", "must be int")])
def test_vary_takes_one_knob_of_the_config_with_a_valid_value(vary, names):
  r = subprocess.run([sys.executable, "-m", "lab.bench", "bert", "--against", "none", "--vary", vary],
                     cwd=REPO, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and f"--vary {vary}" in r.stderr and names in r.stderr, r.stderr
  assert "Traceback" not in r.stderr


def _bench_args(*argv):
  import argparse
  from lab.bench import add_arguments
  p = argparse.ArgumentParser(); add_arguments(p)
  return p.parse_args(list(argv))


def test_the_pytorch_side_trains_the_depth_the_tinygrad_side_trains(monkeypatch):
  from lab.bench import torch_command
  args = _bench_args("bert", "--gpus", "1", "--bs", "32")
  assert torch_command(args)[torch_command(args).index("--layers") + 1] == "24"
  monkeypatch.setenv("BERT_LAYERS", "2")   # as in `BERT_LAYERS=2 python -m lab.bench bert ...`: both sides 2 layers
  cmd = torch_command(args)
  assert cmd[cmd.index("--layers") + 1] == "2" and cmd[cmd.index("--seq") + 1] == "512"


@pytest.mark.parametrize("argv, env, named", [
    (["bert"], {"BERT_HIDDEN": "512", "BERT_HEADS": "8"}, "BERT_HIDDEN=512"),
    (["resnet", "--platform", "cpu_smoke"], {}, "RESNET_LAYERS=1,1")])
def test_a_model_the_pytorch_side_cannot_build_is_refused_before_anything_runs(argv, env, named):
  r = subprocess.run([sys.executable, "-m", "lab.bench", *argv], cwd=REPO, capture_output=True, text=True,
                     timeout=120, env={**os.environ, **env})
  assert r.returncode == 2 and "--against torch" in r.stderr and named in r.stderr and "--against none" in r.stderr, r.stderr
  assert "Traceback" not in r.stderr and "tinyperf-bench" not in r.stdout
  # what to unset is said only for what the environment set: cpu_smoke's toy model is its config file's
  assert ("Unset " + " ".join(env)) in r.stderr if env else "Unset" not in r.stderr, r.stderr


# imported first by every Python started with its folder on PYTHONPATH: an audit hook that writes down each process the
# CLI starts, so a test can see that a refusal came before the tinygrad side (or anything else) was started
WATCH_PROCESSES = """import os, sys
def _started(event, args):
  if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork", "os.system"):
    with open(os.environ["TEST_PROCESS_LOG"], "a") as f: f.write(f"{event} {args[:2]!r}\\n")
sys.addaudithook(_started)
"""


@pytest.mark.parametrize("argv, env, says", [
    (["--platform", "cpu_smoke", "--gpus", "0"], {}, "--gpus 0: GPUS=0 is out of range: it must be in [1,)"),
    (["--gpus", "0"], {}, "--gpus 0: without --platform, bench starts from the 0xH200 config, and there is none"),
    (["--platform", "cpu_smoke", "--bs", "0"], {}, "--bs 0: BS=0 is out of range: it must be in [1,)"),
    (["--platform", "cpu_smoke", "--beam", "-1"], {}, "--beam -1: TRAIN_BEAM=-1 is out of range: it must be in [0,)"),
    (["--platform", "cpu_smoke", "--gpus", "2", "--vary", "BS=33"], {}, "(BS comes from --vary BS=33; GPUS from --gpus 2.)"),
    # an environment override the config refuses: named as the config loader names it, with the flag it met
    (["--platform", "cpu_smoke", "--beam", "1"], {"BEAM_BUDGET_S": "10"},
     "cpu_smoke/config.yaml: BEAM_BUDGET_S bounds the BEAM search only with IGNORE_JIT_FIRST_BEAM=1"),
    (["--platform", "cpu_smoke", "--beam", "1"], {"BEAM_BUDGET_S": "10"},
     "(BEAM_BUDGET_S comes from the environment; TRAIN_BEAM from --beam 1.)"),
    (["--platform", "cpu_smoke"], {"BEAM_BUDGET_S": "10", "TRAIN_BEAM": "1"},
     "(BEAM_BUDGET_S, TRAIN_BEAM come from the environment.)")])
def test_a_value_the_tinygrad_sides_config_refuses_is_refused_before_any_process_starts(tmp_path, argv, env, says):
  # each was refused by the tinygrad side itself, after bench had started it: the message twice (the child's, then in
  # bench's "the tinygrad side failed"), naming the variable bench set (BS) instead of the flag typed (--bs); --gpus 0
  # without --platform read "unknown platform '0xH200'"; --vary was checked against the config file alone
  hook, log = tmp_path / "hook", tmp_path / "processes.log"
  hook.mkdir(); (hook / "sitecustomize.py").write_text(WATCH_PROCESSES)
  (tmp_path / "out").mkdir()
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--against", "none", "--steps", "1",
                      "--record", "out/bench.jsonl", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                     env={**os.environ, **env, "PYTHONPATH": f"{hook}{os.pathsep}{REPO}", "TEST_PROCESS_LOG": str(log)})
  assert r.returncode == 2 and r.stderr.count(says) == 1, r.stderr
  assert r.stderr.startswith("python -m lab.bench: error: ") and r.stderr.count("\n") == 1, r.stderr   # one paragraph
  assert not log.exists(), log.read_text()             # no tinygrad side, no watchdog: no process at all
  assert r.stdout == "" and not (tmp_path / "out" / "bench.jsonl").exists()


def test_a_failing_tinygrad_side_is_reported_once(tmp_path):
  # its output streams to the console as it comes; the error names its last line instead of printing the end again
  # (once 2000 characters of it, traceback and all, a second time under the one-paragraph error)
  (tmp_path / "sitecustomize.py").write_text(
    "import os, sys\nif '--phase' in sys.argv:   # the tinygrad side only, not bench itself\n"
    "  print('stand-in failure: the tinygrad side stops here', flush=True); os._exit(3)\n")
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--steps", "1",
                      "--against", "none"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                     env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
  both = r.stdout + r.stderr
  assert r.returncode == 2 and both.count("stand-in failure: the tinygrad side stops here") == 2, both   # streamed + named
  assert r.stderr == ("python -m lab.bench: error: the tinygrad side failed (exit 3); its output is above, ending with: "
                      "stand-in failure: the tinygrad side stops here\n"), r.stderr


# the tinygrad side without training (any Python started with '--phase' in its arguments): the environment it was
# given, and a timing record of the fields bench prints
STAND_IN_TINYGRAD = """import json, os, sys
if '--phase' in sys.argv:
  print('stand-in tinygrad side: ' + ' '.join(f'{k}={os.environ.get(k)}' for k in ('BS', 'EVAL_BS', 'GPUS', 'NOOPT')))
  print('tinyperf-bench ' + json.dumps({'img_per_s': 100.0, 'gpus': 1, 'bs': int(os.environ['BS']), 'median_step_ms': 80.0,
        'beam': {'TRAIN_BEAM': 0}, 'mem_used_gb': 0.1, 'init_s': 1.0, 'projected_minutes': 1.0}), flush=True)
  os._exit(0)
"""


def test_the_environment_values_bench_flags_replace_are_named_once_before_the_run(tmp_path):
  # BS=128 exported and --bs 8 trained 8 without a word; a value the flag sets again (EVAL_BS=8, GPUS=01) is not named
  (tmp_path / "sitecustomize.py").write_text(STAND_IN_TINYGRAD)
  env = {"BS": "128", "EVAL_BS": "8", "GPUS": "01", "NOOPT": "1", "CACHEDB": str(tmp_path / "mine.db")}
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--bs", "8",
                      "--steps", "1", "--against", "none", "--vary", "NOOPT=0", "--beam-cache", "beam.db"], cwd=tmp_path,
                     capture_output=True, text=True, timeout=120,
                     env={**os.environ, **env, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
  assert r.returncode == 0, r.stdout + r.stderr
  said = [line for line in r.stdout.splitlines() if "from the environment" in line]
  assert said == ["bench: --bs 8 replaces BS=128 from the environment",
                  "bench: --vary NOOPT=0 replaces NOOPT=1 from the environment",
                  f"bench: --beam-cache {tmp_path / 'beam.db'} replaces CACHEDB={tmp_path / 'mine.db'} from the environment"]
  assert r.stdout.index(said[-1]) < r.stdout.index("stand-in tinygrad side")   # before the run starts
  # the flags still win: BS from --bs, NOOPT from the environment in the first run and from --vary in the second
  assert [line for line in r.stdout.splitlines() if line.startswith("stand-in")] == [
    "stand-in tinygrad side: BS=8 EVAL_BS=8 GPUS=1 NOOPT=1", "stand-in tinygrad side: BS=8 EVAL_BS=8 GPUS=1 NOOPT=0"]
  # without --bs, bench's default (the config's) replaces BS, and is said to be one: no flag was typed
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--steps", "1",
                      "--against", "none"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                     env={**os.environ, "BS": "128", "GPUS": "2", "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
  assert r.returncode == 0, r.stdout + r.stderr
  bs = load_config("resnet", "cpu_smoke", environ={})["BS"]
  assert [line for line in r.stdout.splitlines() if "from the environment" in line] == [
    "bench: --gpus 1 (bench's default) replaces GPUS=2 from the environment",
    f"bench: --bs {bs} (bench's default) replaces BS=128 from the environment"]


# the PyTorch side without PyTorch (any Python started with '--modes' in its arguments): it starts a process of its own
# (as torch.compile starts its compile workers), says which processes and process group those are, and waits
STAND_IN_TORCH = """
if '--modes' in sys.argv:
  import subprocess, time
  worker = subprocess.Popen(['sleep', '300'])
  with open(os.environ['TEST_TORCH_PIDS'] + '.tmp', 'w') as f: f.write(f'{os.getpid()} {worker.pid} {os.getpgid(0)}')
  os.replace(os.environ['TEST_TORCH_PIDS'] + '.tmp', os.environ['TEST_TORCH_PIDS'])
  time.sleep(300)
"""


def _live(pids: set[int], pgid: int) -> list[int]:
  """Which of pids, or of the processes in group pgid, are still alive (a zombie waiting to be reaped is not)."""
  live = []
  for d in Path("/proc").iterdir():
    try:
      if not d.name.isdigit(): continue
      state, _, group = (d / "stat").read_text().rsplit(")", 1)[1].split()[:3]
      if state != "Z" and (int(d.name) in pids or int(group) == pgid): live.append(int(d.name))
    except OSError: pass   # it ended while being read
  return live


def test_sigterm_during_the_pytorch_side_stops_its_process_group_and_writes_no_record(tmp_path):
  """SIGTERM (Slurm, docker stop, kill) while the PyTorch side ran killed that child alone: what it had started (compile
  workers) went on running. Now its process group is stopped as the tinygrad side's is, and bench ends with the same
  line, exit 130, the --record file untouched (a record is appended whole at the end) and no temp folder left."""
  hook, tmp, pids = tmp_path / "hook", tmp_path / "tmp", tmp_path / "torch.pids"
  hook.mkdir(); tmp.mkdir()
  (hook / "sitecustomize.py").write_text(STAND_IN_TINYGRAD + STAND_IN_TORCH)
  # cpu_smoke with the closed ResNet-50's shapes: the model the PyTorch side builds (both sides are stand-ins)
  shapes = {"RESNET_LAYERS": "3,4,6,3", "RESNET_WIDTH": "64", "NUM_CLASSES": "1000"}
  p = subprocess.Popen([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--steps", "1",
                        "--record", "bench.jsonl"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       start_new_session=True, env={**os.environ, **shapes, "PYTHONPATH": f"{hook}{os.pathsep}{REPO}",
                                                    "TMPDIR": str(tmp), "TEST_TORCH_PIDS": str(pids)})
  torch_pgid = None
  try:
    deadline = time.time() + 60
    while not pids.exists():
      assert p.poll() is None and time.time() < deadline, "bench ended, or its PyTorch side never started"
      time.sleep(0.1)
    torch_pid, worker, torch_pgid = map(int, pids.read_text().split())
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    deadline = time.time() + 10                        # killed processes may take a moment to be reaped
    while (left := _live({torch_pid, worker}, torch_pgid)) and time.time() < deadline: time.sleep(0.2)
  finally:
    for group in {p.pid, torch_pgid} - {None}:   # whatever is left, so that a failure leaves no process behind
      try: os.killpg(group, signal.SIGKILL)
      except ProcessLookupError: pass
  assert p.returncode == 130 and err.splitlines() == ["python -m lab.bench: stopped by SIGTERM (scancel, a Slurm time limit, "
                                                      "or kill)"], err
  assert not left, f"the PyTorch side's processes {left} outlived bench"
  assert "stand-in tinygrad side" in out and not (tmp_path / "bench.jsonl").exists()
  assert list(tmp.iterdir()) == []                     # the tinygrad side's temp folder is gone


def test_a_stop_while_the_record_is_appended_leaves_the_file_as_it_was(tmp_path, monkeypatch):
  # the lines were written one by one: a SIGTERM (a KeyboardInterrupt, stop_on_signals) between two of them appended the
  # config's line without the --vary one. Here it arrives while the second line is made.
  import json
  from lab import bench
  record = tmp_path / "bench.jsonl"
  record.write_text('{"earlier": 1}\n')
  stand_in = {"img_per_s": 100.0, "gpus": 1, "bs": 64, "median_step_ms": 80.0, "beam": {"TRAIN_BEAM": 0},
              "mem_used_gb": 0.1, "init_s": 1.0, "projected_minutes": 1.0}
  monkeypatch.setattr(bench, "run_tinygrad", lambda args, varied: dict(stand_in))
  monkeypatch.setattr(bench, "stop_on_signals", lambda: None)   # this test's process keeps its own handlers
  dumps = json.dumps
  def stopped_at_the_varied_line(obj, *a, **kw):
    if isinstance(obj, dict) and "varied" in obj: raise KeyboardInterrupt("stopped by SIGTERM")
    return dumps(obj, *a, **kw)
  monkeypatch.setattr(json, "dumps", stopped_at_the_varied_line)
  args = _bench_args("resnet", "--platform", "cpu_smoke", "--steps", "1", "--against", "none", "--vary", "NOOPT=0",
                     "--record", str(record))
  with pytest.raises(KeyboardInterrupt): bench.main(args)
  assert record.read_text() == '{"earlier": 1}\n'
