"""scripts/e2e_h200.sh's poll and collect, as typed on the leased machine from another directory with relative paths
(the run itself needs an H200: PERFORMANCE.md rows 15-17)."""
import os
import subprocess
import tarfile

from tests.conftest import REPO


def e2e(*args, cwd, **env):
  return subprocess.run([str(REPO / "scripts" / "e2e_h200.sh"), *args], cwd=cwd, capture_output=True, text=True,
                        timeout=60, env={**os.environ, **env})


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
  assert f"{tmp_path / 'd'} holds a corpus of TEXT=docstrings, not TEXT=synthetic" in r.stderr, r.stderr
  assert not (tmp_path / "j" / "run.log").exists()


def test_a_python_without_the_packages_is_refused_before_anything_runs(tmp_path):
  # a leased machine whose wheels did not travel: every step failed in seconds and the run still said "done"
  r = e2e(cwd=tmp_path, E2E="resnet", JOB="j", PYTHONPATH="", PATH=f"/usr/bin{os.pathsep}/bin")
  events = (tmp_path / "j" / "events").read_text()
  assert r.returncode == 2 and "cannot import: tinygrad mlperf_logging" in r.stderr and "Traceback" not in r.stderr, r
  assert "refused: e2e_h200.sh: python3" in events and events.rstrip().endswith("done")
  assert not (tmp_path / "j" / "data").exists() and not (tmp_path / "j" / "run.log").exists()
  typed = (tmp_path / "j" / "command").read_text()   # the command as typed, for scripts/e2e_record.py
  assert typed.startswith("E2E=resnet ") and typed.endswith(" JOB=j scripts/e2e_h200.sh\n"), typed
