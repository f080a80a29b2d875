"""lab/scripts/kernels_h200.sh on the CPU: start, poll and collect with a stand-in python3 on PATH that prints a JSON line
per call (and fails for loss_compare.py bert), the lock, STEPS and bad input (the measurements themselves need an H200)."""
import json
import os
import signal
import subprocess
import tarfile
import time

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "lab" / "scripts" / "kernels_h200.sh"
STAND_IN = """#!/bin/sh
case "$*" in
  -c*) exit 0 ;;
  *loss_compare.py\\ bert*) echo "out of tolerance" >&2; exit 1 ;;
  *) echo "{\\"argv\\": \\"$*\\", \\"kernels\\": \\"${KERNELS:-}\\", \\"cachedb\\": \\"${CACHEDB:-}\\", \\"budget\\": \\"${BEAM_BUDGET_S:-}\\"}"; echo "a progress line" ;;
esac
"""


def kernels(*args, cwd, **env):
  bin_ = cwd / "bin"
  if not bin_.exists():
    bin_.mkdir(); (bin_ / "python3").write_text(STAND_IN); (bin_ / "python3").chmod(0o755)
  return subprocess.run([str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                        env={**os.environ, "TMPDIR": str(cwd), "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", **env})


def wait_done(job):
  for _ in range(300):
    if (job / "events").is_file() and (job / "events").read_text().rstrip().endswith(" done"): return
    time.sleep(0.1)
  raise AssertionError(f"no 'done' in {job / 'events'}")


def steps_tsv(job) -> dict[str, str]:
  return {line.split("\t")[0]: line.split("\t")[1] for line in (job / "steps.tsv").read_text().splitlines()}


def test_a_failing_step_is_recorded_and_the_next_runs_and_collect_packs_one_tgz_and_a_summary(tmp_path):
  (tmp_path / "b.db").write_bytes(b"seed")
  r = kernels("start", cwd=tmp_path, JOB="job", CACHE="b.db", STEPS="2,3")
  assert r.returncode == 0 and "step_profile_bert" in r.stdout and "layernorm" not in r.stdout, r   # the plan
  job = tmp_path / "job"
  wait_done(job)
  assert steps_tsv(job) == {"loss_compare_bert": "exit 1", "loss_compare_resnet": "ok", "step_profile_bert": "ok"}
  profile = json.loads((job / "step_profile_bert.jsonl").read_text())   # the stand-in's line, taken from the log
  assert profile["kernels"] == "triton" and profile["cachedb"] == str(job / "bert_beam.db"), profile
  assert (job / "bert_beam.db").read_bytes() == b"seed"                # the caller's cache, copied
  assert "out of tolerance" in (job / "loss_compare_bert.log").read_text()
  r = kernels("poll", cwd=tmp_path, JOB="job")
  assert r.returncode == 0 and "loss_compare_bert" in r.stdout and "exit 1" in r.stdout, r
  r = kernels("collect", "out", cwd=tmp_path, JOB="job")
  assert r.returncode == 0, r.stderr
  assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["kernels.tgz", "summary.txt"]
  summary = (tmp_path / "out" / "summary.txt").read_text()
  assert "exit 1" in summary and "job done" in summary and "bench_conv" not in summary, summary   # only the steps run
  with tarfile.open(tmp_path / "out" / "kernels.tgz") as tar:
    names = set(tar.getnames())
  assert {"./loss_compare_bert.log", "./step_profile_bert.jsonl", "./bert_beam.db", "./events"} <= names, names


def test_steps_selects_and_the_resnet_side_by_side_differs_only_in_kernels(tmp_path):
  r = kernels("start", cwd=tmp_path, JOB="job", STEPS="5")   # no CACHE: steps 3 and 4 are not asked for
  assert r.returncode == 0, r
  wait_done(tmp_path / "job")
  assert steps_tsv(tmp_path / "job") == {"bench_resnet_triton": "ok", "bench_resnet_tinygrad": "ok"}
  sides = [json.loads((tmp_path / "job" / f"bench_resnet_{k}.jsonl").read_text()) for k in ("triton", "tinygrad")]
  assert [s["kernels"] for s in sides] == ["triton", "tinygrad"]
  assert sides[0]["argv"].replace("triton", "X") == sides[1]["argv"].replace("tinygrad", "X")


def test_without_a_seed_cache_the_bert_steps_search_from_an_empty_one_for_bert_beam_s(tmp_path):
  r = kernels("start", cwd=tmp_path, JOB="job", STEPS="3,4", BERT_BEAM_S="30", BERT_BS="64")
  assert r.returncode == 0, r
  job = tmp_path / "job"
  wait_done(job)
  assert steps_tsv(job) == {"step_profile_bert": "ok", "bench_bert_triton": "ok"}
  profile, bench = (json.loads((job / f"{n}.jsonl").read_text()) for n in ("step_profile_bert", "bench_bert_triton"))
  assert profile["cachedb"] == str(job / "bert_beam.db") and not (job / "bert_beam.db").exists()   # nothing copied
  assert f"--beam-cache {job / 'bert_beam.db'}" in bench["argv"]
  assert (profile["budget"], bench["budget"]) == ("30", "0")   # the search, then the step with what it found
  assert "--bs 64" in profile["argv"] and "--bs 64" in bench["argv"]   # BERT_BS reaches both


def test_a_step_whose_estimate_the_budget_cannot_hold_is_skipped_and_the_job_ends(tmp_path):
  r = kernels("start", cwd=tmp_path, JOB="job", STEPS="1,6", BUDGET_S="0")
  assert r.returncode == 0, r
  wait_done(tmp_path / "job")
  assert all(s.startswith("skipped") for s in steps_tsv(tmp_path / "job").values())
  assert not (tmp_path / "job" / "layernorm.log").exists()


def test_dry_run_prints_the_selected_commands_and_runs_nothing(tmp_path):
  r = kernels("start", cwd=tmp_path, JOB="job", STEPS="1,6", DRY_RUN="1")
  assert r.returncode == 0, r
  assert "lab/scripts/bench_layernorm.py" in r.stdout and "bench_conv.py --tiles all --bs 256" in r.stdout, r.stdout
  assert "loss_compare" not in r.stdout and not (tmp_path / "job").exists()


@pytest.mark.parametrize("args, env", [(("start",), {"STEPS": "9"}), (("start",), {"STEPS": "1;3"}),
                                       (("start",), {"STEPS": "4", "BERT_BEAM_S": "4m"}),
                                       (("start",), {"STEPS": "3", "BERT_BS": "0"}),
                                       (("start",), {"STEPS": "3", "CACHE": "missing.db"}),
                                       (("start",), {"STEPS": "1", "BUDGET_S": "ten"}),
                                       (("collect",), {}), (("poll",), {}), (("go",), {})])
def test_bad_input_exits_2_before_anything_runs(tmp_path, args, env):
  r = kernels(*args, cwd=tmp_path, JOB="job", **env)
  assert r.returncode == 2 and r.stderr.strip() and "Traceback" not in r.stderr, r
  assert not (tmp_path / "job").exists()


def test_a_second_start_is_refused_while_a_job_holds_the_lock(tmp_path):
  lock = tmp_path / "kernels_h200.lock"
  lock.write_text(f"{tmp_path / 'first'}\n")   # what a running job writes into the lock it holds
  holder = subprocess.Popen(["flock", str(lock), "sleep", "60"], start_new_session=True)   # sleep holds it too
  try:
    for _ in range(100):   # until flock holds it
      if subprocess.run(["flock", "-n", str(lock), "true"]).returncode: break
      time.sleep(0.05)
    r = kernels("start", cwd=tmp_path, JOB="second", STEPS="1")
    assert r.returncode == 2 and f"JOB={tmp_path / 'first'}" in r.stderr, r
    assert not (tmp_path / "second").exists()
  finally:
    os.killpg(holder.pid, signal.SIGKILL); holder.wait()
  r = kernels("start", cwd=tmp_path, JOB="second", STEPS="1")   # the lock let go: it starts
  assert r.returncode == 0, r
  wait_done(tmp_path / "second")
