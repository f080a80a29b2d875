"""lab/scripts/e2e_h200.sh's poll and collect, as typed on the leased machine from another directory with relative paths
(the run itself needs an H200: PERFORMANCE.md rows 15-17)."""
import os
import subprocess
import tarfile
import time

from tests.conftest import REPO


def e2e(*args, cwd, **env):
  return subprocess.run([str(REPO / "lab" / "scripts" / "e2e_h200.sh"), *args], cwd=cwd, capture_output=True, text=True,
                        timeout=60, env={**os.environ, "TMPDIR": str(cwd), **env})   # the run lock: the test's own


def test_poll_and_collect_take_paths_relative_to_the_caller(tmp_path):
  job = tmp_path / "job"; (job / "data").mkdir(parents=True)
  (job / "run.log").write_text("starting\n1796200798.0 init took 861.0 s\n")
  (job / "data" / "big.shard").write_bytes(b"x" * 1000)
  (job / "events").write_text("1796199927 t=0s start bert\n")
  r = e2e("poll", cwd=tmp_path, E2E="bert", JOB="job")
  assert r.returncode == 0 and "run.log: 1796200798.0 init took 861.0 s" in r.stdout and "start bert" in r.stdout, r
  r = e2e("collect", "out", cwd=tmp_path, E2E="bert", JOB="job")
  assert r.returncode == 0, r.stderr
  with tarfile.open(tmp_path / "out" / "e2e.tgz") as tar:
    names = tar.getnames()
  assert "./run.log" in names and "./events" in names and not any("big.shard" in n for n in names)   # logs, not data


def test_a_rerun_refuses_a_corpus_of_another_text(tmp_path):
  # TEXT=synthetic over DATA prepared with the docstrings would have trained on the docstrings without a word
  (tmp_path / "d" / "results4").mkdir(parents=True)
  (tmp_path / "d" / "text").write_text("docstrings\n")
  r = e2e(cwd=tmp_path, E2E="bert", TEXT="synthetic", DATA="d", JOB="j", VOCAB="v",
          PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
  assert r.returncode == 2, r
  assert all(f in r.stderr for f in (str(tmp_path / "d"), "TEXT=docstrings", "TEXT=synthetic")), r.stderr
  assert not (tmp_path / "j" / "run.log").exists()


def test_a_python_without_the_packages_is_refused_before_anything_runs(tmp_path):
  # a leased machine whose wheels did not travel: every step failed in seconds and the run still said "done"
  r = e2e(cwd=tmp_path, E2E="resnet", KERNELS="triton", JOB="j", PYTHONPATH="", PATH=f"/usr/bin{os.pathsep}/bin")
  events = (tmp_path / "j" / "events").read_text()
  assert r.returncode == 2 and "tinygrad mlperf_logging" in r.stderr and "Traceback" not in r.stderr, r   # what is missing
  assert "refused: " in events and events.rstrip().endswith("done")
  assert not (tmp_path / "j" / "data").exists() and not (tmp_path / "j" / "run.log").exists()
  typed = (tmp_path / "j" / "command").read_text()   # the command as typed, for lab/scripts/e2e_record.py
  assert typed.startswith("E2E=resnet KERNELS=triton ") and typed.endswith(" JOB=j lab/scripts/e2e_h200.sh\n"), typed


def venv_path(*first):
  return os.pathsep.join([*map(str, first), str(REPO / ".venv" / "bin"), os.environ["PATH"]])


def test_a_second_run_on_the_machine_is_refused_while_the_first_holds_the_lock(tmp_path):
  # 2026-12-03: BERT started beside ResNet's run died of GPU memory in its step 0, 3.5 device-minutes lost
  lock = tmp_path / "e2e_h200.lock"
  lock.write_text(f"{tmp_path / 'job'}\n")   # what a running e2e_h200.sh writes into the lock it holds
  (tmp_path / "job").mkdir(); (tmp_path / "job" / "events").write_text("1 t=0s start resnet\n")
  holder = subprocess.Popen(["flock", str(lock), "sleep", "60"])
  try:
    for _ in range(100):   # until flock holds it
      if subprocess.run(["flock", "-n", str(lock), "true"]).returncode: break
      time.sleep(0.05)
    r = e2e(cwd=tmp_path, E2E="bert", JOB="b", PATH=venv_path())
    assert r.returncode == 2 and "Traceback" not in r.stderr, r
    assert f"JOB={tmp_path / 'job'}" in r.stderr, r.stderr          # the run that holds the machine
    events = (tmp_path / "b" / "events").read_text()
    assert "refused: " in events and events.rstrip().endswith("done")
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["events"]   # nothing else written
    # the running job's own folder again: its events and command are the running one's, left as they were
    r = e2e(cwd=tmp_path, E2E="resnet", JOB="job", PATH=venv_path())
    assert r.returncode == 2 and f"JOB={tmp_path / 'job'}" in r.stderr, r
    assert (tmp_path / "job" / "events").read_text() == "1 t=0s start resnet\n"
    assert not (tmp_path / "job" / "command").exists()
  finally:
    holder.kill(); holder.wait()


def test_a_gpu_another_process_holds_is_refused_and_the_lock_let_go(tmp_path):
  # no GPU here: an nvidia-smi that reports what the H200's did while ResNet's run held it
  bin_ = tmp_path / "bin"; bin_.mkdir()
  (bin_ / "nvidia-smi").write_text('#!/bin/sh\ncase "$1" in --query-compute-apps*) echo "4242, python3, 22451 MiB";; esac\n')
  (bin_ / "nvidia-smi").chmod(0o755)
  for job in ("j1", "j2"):   # the second is refused for the GPU too, not for a lock the first kept
    r = e2e(cwd=tmp_path, E2E="bert", JOB=job, PATH=venv_path(bin_))
    assert r.returncode == 2 and "4242, python3, 22451 MiB" in r.stderr, r      # the process nvidia-smi listed
    assert not (tmp_path / job / "data").exists() and not (tmp_path / job / "host.txt").exists()
  assert (tmp_path / "e2e_h200.lock").read_text() == f"{tmp_path / 'j2'}\n"
