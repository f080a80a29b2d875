"""A Slurm submission against stand-ins of Slurm's commands: a job id handed out again, a requeued task, and whatever
stops a submission (a full disk, a bug, Ctrl-C, SIGTERM) before, during or after sbatch, then the rerun that adopts
or resubmits what the stopped one left."""
from __future__ import annotations
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinyperf.benchmarks.registry import load_config
from slurm_helpers import bad_input, spec, tinyperf
from tests.conftest import REPO
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.launch import slurm as S, slurm_cluster, slurm_record, slurm_script, status as ST
from tinyperf.tooling.common.errors import InputError, UserError


FAKE_SBATCH = r'''
"""sbatch as a one-node cluster whose controller runs every array task at once, in this process: the job id is
FAKE_SLURM_JOB_ID (a controller whose counter restarted hands out an id again), each task's output goes where the
script's --output says, opened as its --open-mode says (truncate unless it says append, as Slurm does), with the
variables Slurm sets. FAKE_SLURM_REQUEUES=n runs each task n more times, as Slurm does a requeued task (same job id
and index, SLURM_RESTART_COUNT set); FAKE_SLURM_TRAIN_<r> is attempt r's TINYPERF_TEST_TRAIN_MODULE."""
import os, re, subprocess, sys
script = sys.argv[-1]
text = open(script).read()
job = os.environ.get("FAKE_SLURM_JOB_ID", "7")
array = re.search(r"^#SBATCH --array=(\S+)", text, re.M).group(1)
output = re.search(r"^#SBATCH --output=(\S+)", text, re.M).group(1)
append = re.search(r"^#SBATCH --open-mode=append$", text, re.M) is not None
indices = [i for part in array.split(",") for i in (range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1))]
for i in indices:
  for restart in range(int(os.environ.get("FAKE_SLURM_REQUEUES", "0")) + 1):
    env = {**os.environ, "SLURM_JOB_ID": str(1000 + i), "SLURM_ARRAY_JOB_ID": job, "SLURM_ARRAY_TASK_ID": str(i),
           "SLURMD_NODENAME": "node1"}
    if restart: env["SLURM_RESTART_COUNT"] = str(restart)
    if f"FAKE_SLURM_TRAIN_{restart}" in env: env["TINYPERF_TEST_TRAIN_MODULE"] = env[f"FAKE_SLURM_TRAIN_{restart}"]
    with open(output.replace("%A", job).replace("%a", str(i)), "a" if append else "w") as out:
      subprocess.run(["bash", script], stdout=out, stderr=subprocess.STDOUT, env=env)
print(job)
'''


@pytest.fixture
def fake_slurm(tmp_path):
  """PATH with sinfo (one partition, ci), squeue (a controller that remembers no job) and FAKE_SBATCH."""
  bin_ = tmp_path / "fake-slurm-bin"; bin_.mkdir()
  (bin_ / "sinfo").write_text("#!/bin/sh\ncase \"$*\" in *--Node*) echo 'localhost|localhost|127.0.0.1';; *) echo 'ci*';; esac\n")
  (bin_ / "squeue").write_text("#!/bin/sh\nexit 0\n")
  (bin_ / "sbatch").write_text(f"#!{sys.executable}\n{FAKE_SBATCH}")
  for f in bin_.iterdir(): f.chmod(0o755)
  return {"PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"}


def user(cwd: Path, *args, env=None):
  """tinyperf as a user types it: from cwd, with relative paths, this checkout's code."""
  return subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *args], cwd=cwd, capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=300)


def _files(d: Path) -> dict[str, bytes]:
  return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
  d = tmp_path_factory.mktemp("slurm-data") / "data"
  r = tinyperf("prep", "synthetic-imagenet", "--out", str(d), "--classes", "4", "--train-per-class", "2",
               "--val-per-class", "1", "--size", "16", "--seed", "0")
  assert r.returncode == 0, r.stderr
  return d


def test_a_job_id_slurm_hands_out_again_overwrites_no_earlier_file(fake_slurm, tiny_data, tmp_path):
  """Slurm's job counter restarts when its state directory is wiped: a new job can get the id of an earlier one of the
  same result set. Its script, task output and exit record went to slurm/job_<id>*, replacing the earlier job's (the
  output file truncated by Slurm, the exit record by mv -f). Every file the first job left is still there, unchanged,
  and status reads the new job's."""
  (tmp_path / "data").symlink_to(tiny_data)
  submit = ["run", "resnet", "--platform", "cpu_smoke", "--nexp", "1", "--data", "data", "--results", "out",
            "--scheduler", "slurm", "--runtime", "host", "--assume-shared"]
  failing = {**fake_slurm, "TINYPERF_TEST_TRAIN_MODULE": "tests.no_such_trainer"}
  r = user(tmp_path, *submit, env=failing)
  assert r.returncode == 0 and "submitted Slurm job 7" in r.stdout, r.stdout + r.stderr
  slurm_files = tmp_path / "out/runs/cpu_smoke/resnet/slurm"
  first = _files(slurm_files)
  assert [n for n in first if n.endswith(".exit")] and [n for n in first if n.endswith(".out")], first.keys()
  st = user(tmp_path, "status", "--results", "out", env=fake_slurm)
  assert st.returncode == 1 and "task 7_0 exited 1" in st.stdout, st.stdout + st.stderr

  # the controller restarted: the resubmission is job 7 again, and this time its run finishes
  r = user(tmp_path, "status", "--results", "out", "--resume",
           env={**fake_slurm, "TINYPERF_TEST_TRAIN_MODULE": "tests.stand_in_train"})
  assert r.returncode == 0 and "submitted Slurm job 7" in r.stdout, r.stdout + r.stderr
  now = _files(slurm_files)
  assert {n: now.get(n) for n in first} == first, "the first job 7's script, output or exit record was overwritten"
  jobs = json.loads((tmp_path / "out/runs/cpu_smoke/resnet/slurm.json").read_text())["jobs"]
  assert [j["job_id"] for j in jobs] == ["7", "7"] and jobs[0]["script"] != jobs[1]["script"]
  assert all(Path(j["script"]).is_file() for j in jobs)
  assert "#SBATCH --array=0" in Path(jobs[1]["script"]).read_text()
  st = user(tmp_path, "status", "--results", "out", "--json", env=fake_slurm)
  assert st.returncode == 0 and json.loads(st.stdout)["sets"][0]["runs"][0]["state"] == "done", st.stdout + st.stderr


def test_a_requeued_task_loses_neither_output_nor_exit_status(fake_slurm, tiny_data, tmp_path):
  """Slurm requeues a task (scontrol requeue, a node failure) under the same job id and index: its second attempt
  truncated the .out (Slurm's default --open-mode) and replaced the .exit record, so the first attempt's failure was
  gone. Each attempt's output is kept, after a start line naming its SLURM_RESTART_COUNT, and each has its own exit
  record; the ledger says which attempt ran the run."""
  (tmp_path / "data").symlink_to(tiny_data)
  r = user(tmp_path, "run", "resnet", "--platform", "cpu_smoke", "--nexp", "1", "--data", "data", "--results", "out",
           "--scheduler", "slurm", "--runtime", "host", "--assume-shared",
           env={**fake_slurm, "FAKE_SLURM_REQUEUES": "1", "FAKE_SLURM_TRAIN_0": "tests.no_such_trainer",
                "FAKE_SLURM_TRAIN_1": "tests.stand_in_train"})
  assert r.returncode == 0 and "submitted Slurm job 7" in r.stdout, r.stdout + r.stderr
  files = tmp_path / "out/runs/cpu_smoke/resnet/slurm/submission_1"
  out = (files / "job_7_0.out").read_text()
  starts = [l for l in out.splitlines() if l.startswith("==== tinyperf: Slurm task 7_0, ")]
  assert [l.split(",")[1].split("(")[0].strip() for l in starts] == ["restart 0", "restart 1"], out
  assert "(SLURM_RESTART_COUNT=unset)" in starts[0] and "(SLURM_RESTART_COUNT=1)" in starts[1]
  first = out[out.index(starts[0]):out.index(starts[1])]
  assert "no_such_trainer" in first, first          # the first attempt's failure is still there
  work = files.parents[1]
  assert {k: p.read_text() for k, p in T.slurm_exit_records(work, "submission_1", "7", 0).items()} == {0: "1\n", 1: "0\n"}
  assert sorted(p.name for p in files.iterdir()) == ["job_7.sbatch", "job_7_0.out", "job_7_0.restart0.exit",
                                                     "job_7_0.restart1.exit"]
  led = L.Ledger(work / T.LEDGER).attempts
  assert [(a.status, a.slurm["job"], a.slurm.get("restart")) for a in led] == [(L.FAILED, "7_0", None), (L.DONE, "7_0", 1)]
  st = user(tmp_path, "status", "--results", "out", "--json", env=fake_slurm)
  assert st.returncode == 0 and json.loads(st.stdout)["sets"][0]["runs"][0]["state"] == "done", st.stdout + st.stderr


def _no_write_over_1k():
  import resource
  resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))   # a write past 1 KiB fails with EFBIG (Python ignores SIGXFSZ)


def test_a_submission_that_fails_after_making_its_folders_leaves_none(fake_slurm, tiny_data, tmp_path):
  """A write that fails once the submission has made its folders (a full disk, a quota; here a file-size limit on the
  script's write) ended in an OSError traceback and left results/, runs/, slurm/ and the locks behind: only a UserError
  cleaned up. Now: one paragraph naming the file and the fix, exit 2, and --results as it was."""
  (tmp_path / "data").symlink_to(tiny_data)
  (tmp_path / "out").mkdir(); (tmp_path / "out/notes.txt").write_text("mine")
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "run", "resnet", "--platform", "cpu_smoke", "--nexp", "1",
                      "--data", "data", "--results", "out", "--scheduler", "slurm", "--runtime", "host", "--assume-shared"],
                     cwd=tmp_path, capture_output=True, text=True, timeout=300, preexec_fn=_no_write_over_1k,
                     env={**os.environ, **fake_slurm, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
                          "GIT_OPTIONAL_LOCKS": "0"})
  bad_input(r, str(tmp_path / "out/runs/cpu_smoke/resnet/slurm"), "File too large")
  assert sorted(p.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("*")) == [Path("notes.txt")]


def _submission(monkeypatch, tmp_path):
  """cfg and spec of a cpu_smoke submission into tmp_path/out, with sinfo and sbatch answering in this process."""
  def slurm_cmd(*cmd, shown=None):
    return {"sinfo": "ci*\n", "sbatch": "7\n"}.get(cmd[0], "")
  monkeypatch.setattr(slurm_cluster, "slurm_command", slurm_cmd); monkeypatch.setattr(slurm_cluster, "require", lambda *a: None)
  (tmp_path / "data").mkdir(); (tmp_path / "data/manifest.json").write_text("{}")
  return load_config("resnet", "cpu_smoke", environ={}), spec(platform="cpu_smoke", runtime="host", nexp=1, partition=None,
    data=str(tmp_path / "data"), results=str(tmp_path / "out"), assume_shared=True)


@pytest.mark.parametrize("error", [InputError("a bad config"), RuntimeError("a bug"), KeyboardInterrupt()],
                         ids=["InputError", "RuntimeError", "KeyboardInterrupt"])
def test_whatever_ends_a_submission_before_sbatch_removes_what_it_made(monkeypatch, tmp_path, error):
  """The cleanup caught UserError only: an InputError, a bug or Ctrl-C after the folders were made left them. Any
  failure removes them, and the failure goes on unchanged."""
  cfg, sp = _submission(monkeypatch, tmp_path)
  def fails(*a, **kw): raise error
  monkeypatch.setattr(slurm_script, "render_script", fails)   # after results/, runs/.../slurm/submission_1 and the locks exist
  with pytest.raises(type(error)) as got:
    S._check_and_submit(cfg, sp)
  assert got.value is error
  assert not (tmp_path / "out").exists()


def test_a_failure_once_sbatch_has_queued_the_job_removes_nothing(monkeypatch, tmp_path):
  """Once sbatch has answered with a job id the job's tasks will write into these folders: a record that cannot be
  written (disk full) removes nothing and names the job, and what to do about it: rerun, which adopts the job (its
  script was renamed before the record was written, so the rerun could not find it and submitted the runs again)."""
  cfg, sp = _submission(monkeypatch, tmp_path)
  real = slurm_record.write_atomic
  def full_at_the_record(path, text, **kw):
    if Path(path).name == T.SLURM_RECORD: raise OSError(28, "No space left on device", str(path))
    return real(path, text, **kw)
  monkeypatch.setattr(slurm_record, "write_atomic", full_at_the_record)
  with pytest.raises(S.MaybeSubmitted, match=r"Slurm job 7 .*slurm\.json.*No space left on device.*\.unsubmitted-.*"
                                             r"scancel 7"):
    S._check_and_submit(cfg, dict(sp))
  work = tmp_path / "out/runs/cpu_smoke/resnet"
  # the script keeps the name sbatch was given, the job's command in squeue (%o), so that the rerun adopts the job
  (kept,) = slurm_record.kept_scripts(work)
  assert kept.parent.name == "submission_1" and not (kept.parent / "job_7.sbatch").exists()
  monkeypatch.setattr(slurm_record, "write_atomic", real)   # space freed
  calls = []
  _slurm_answering(monkeypatch, f"7|PENDING|{kept}\n", tasks="7|0|PENDING|(None)|None\n", calls=calls)
  assert S._check_and_submit(cfg, dict(sp)) == 0
  assert not [c for c in calls if c[0] == "sbatch"], calls
  (job,) = json.loads((work / T.SLURM_RECORD).read_text())["jobs"]
  assert job["job_id"] == "7" and (kept.parent / "job_7.sbatch").is_file() and not kept.exists()


def _ctrl_c_while(tool: str, fake_slurm: dict, tiny_data: Path, tmp_path: Path, sig: str = "SIGINT") -> tuple[int, str]:
  """`tinyperf run --scheduler slurm` whose stand-in `tool` sleeps, stopped by SIGINT to its process group as a
  terminal's Ctrl-C is (pytest's own SIGINT handling is not inherited): (exit status, stderr)."""
  import signal
  (tmp_path / "data").symlink_to(tiny_data)
  started = tmp_path / f"{tool}-started"
  (Path(fake_slurm["PATH"].split(os.pathsep)[0]) / tool).write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 60\n")
  p = subprocess.Popen([sys.executable, "-m", "tinyperf.tooling.cli", "run", "resnet", "--platform", "cpu_smoke", "--nexp", "2",
                        "--data", "data", "--results", "out", "--scheduler", "slurm", "--runtime", "host", "--assume-shared"],
                       cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                       env={**os.environ, **fake_slurm, "PYTHONPATH": str(REPO)},
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  try:
    t0 = time.time()
    while not started.exists():
      assert p.poll() is None and time.time() - t0 < 120, p.communicate()
      time.sleep(0.1)
    os.killpg(p.pid, getattr(signal, sig))
    stdout, stderr = p.communicate(timeout=60)
  finally:
    if p.poll() is None: os.killpg(p.pid, signal.SIGKILL); p.wait()
  assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stdout + stderr
  return p.returncode, stderr


def test_ctrl_c_while_sbatch_runs_says_the_job_may_be_queued_and_keeps_its_folder(fake_slurm, tiny_data, tmp_path):
  """Ctrl-C while sbatch ran ended in a bare 'tinyperf run: ' (exit 130): nothing said that Slurm may have queued the
  job, which no record names. Now one paragraph says so, how to find it (squeue, by the job name and its script), how
  to cancel it or let it run, and the submission's folder and script stay (its tasks would write there)."""
  rc, stderr = _ctrl_c_while("sbatch", fake_slurm, tiny_data, tmp_path)
  assert rc == 130, stderr
  files = tmp_path / "out/runs/cpu_smoke/resnet/slurm/submission_1"
  (script,) = files.glob(".unsubmitted-*.sbatch")      # kept: the job, if queued, runs it and writes here
  assert stderr.startswith("tinyperf run: interrupted"), stderr
  for needle in ("runs [0, 1]", "squeue --me --name=tinyperf-resnet-cpu_smoke --format='%i %T %o'", str(script),
                 "scancel <job id>", str(files)):
    assert needle in stderr, (needle, stderr)
  assert not (tmp_path / "out/runs/cpu_smoke/resnet/slurm.json").exists()
  # the script names its submission, as its file name does: what a rerun matches squeue's %o against
  token = script.name[len(".unsubmitted-"):-len(".sbatch")]
  assert f"\n{slurm_script.SUBMISSION_LINE}{token}\n" in script.read_text() and token.count("-") >= 2


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_while_sbatch_runs_is_handled_as_ctrl_c(sig, fake_slurm, tiny_data, tmp_path):
  # a closed SSH session or `kill` killed the submission outright: no message that Slurm may have queued the job
  rc, stderr = _ctrl_c_while("sbatch", fake_slurm, tiny_data, tmp_path, sig)
  assert rc == 130 and f"stopped by {sig}" in stderr and "squeue --me --name=tinyperf-resnet-cpu_smoke" in stderr, stderr
  assert list((tmp_path / "out/runs/cpu_smoke/resnet/slurm/submission_1").glob(".unsubmitted-*.sbatch"))


def test_ctrl_c_before_sbatch_removes_what_the_submission_made(fake_slurm, tiny_data, tmp_path):
  """Before sbatch nothing can be queued: Ctrl-C (here while sinfo answers) removes what the submission made and says
  it was interrupted (it printed 'tinyperf run: ' and nothing else)."""
  rc, stderr = _ctrl_c_while("sinfo", fake_slurm, tiny_data, tmp_path)
  assert (rc, stderr) == (130, "tinyperf run: interrupted\n")
  assert not (tmp_path / "out").exists()


def test_ctrl_c_once_sbatch_has_answered_waits_for_the_record(monkeypatch, tmp_path):
  """A Ctrl-C that lands while the queued job is being recorded is held until the record is written: the job is known
  to status and --resume, and the message names it and how to follow or cancel it. Nothing is removed."""
  import signal
  cfg, sp = _submission(monkeypatch, tmp_path)
  old = signal.signal(signal.SIGINT, signal.default_int_handler)
  real = slurm_record.write_atomic
  def ctrl_c_at_the_record(path, text, **kw):
    if Path(path).name == T.SLURM_RECORD: os.kill(os.getpid(), signal.SIGINT)
    return real(path, text, **kw)
  monkeypatch.setattr(slurm_record, "write_atomic", ctrl_c_at_the_record)
  try:
    with pytest.raises(KeyboardInterrupt) as got:
      S._check_and_submit(cfg, sp)
  finally:
    signal.signal(signal.SIGINT, old)
  work = tmp_path / "out/runs/cpu_smoke/resnet"
  assert str(got.value).startswith("interrupted") and "Slurm job 7 (runs [0])" in str(got.value), got.value
  assert f"`tinyperf status --results {tmp_path / 'out'}`" in str(got.value) and "`scancel 7`" in str(got.value)
  (job,) = json.loads((work / T.SLURM_RECORD).read_text())["jobs"]
  assert job["job_id"] == "7" and Path(job["script"]) == work / "slurm/submission_1/job_7.sbatch" and Path(job["script"]).is_file()



# ------------------------------------------------------------------ a rerun after a submission stopped in sbatch

def _stopped_in_sbatch(monkeypatch, tmp_path):
  """A cpu_smoke submission (one run) stopped by Ctrl-C while sbatch ran: its script is kept, no job is recorded.
  (cfg, spec, the kept script)."""
  cfg, sp = _submission(monkeypatch, tmp_path)
  def ctrl_c_in_sbatch(*cmd, shown=None):
    if cmd[0] == "sbatch": raise KeyboardInterrupt
    return {"sinfo": "ci*\n"}.get(cmd[0], "")
  monkeypatch.setattr(slurm_cluster, "slurm_command", ctrl_c_in_sbatch)
  with pytest.raises(S.SubmitInterrupted):
    S._check_and_submit(cfg, dict(sp))
  (kept,) = slurm_record.kept_scripts(tmp_path / "out/runs/cpu_smoke/resnet")
  assert not (tmp_path / "out/runs/cpu_smoke/resnet/slurm.json").exists()
  return cfg, sp, kept


def _slurm_answering(monkeypatch, squeue_me, tasks="", calls=None):
  """Slurm's commands in this process: `squeue --me` prints squeue_me (an exception is raised), the squeue of a job
  name prints tasks, and sbatch answers job 8."""
  def slurm_cmd(*cmd, shown=None):
    if calls is not None: calls.append(cmd)
    if cmd[0] == "squeue" and "--me" in cmd:
      if isinstance(squeue_me, Exception): raise squeue_me
      return squeue_me
    return {"sinfo": "ci*\n", "sbatch": "8\n", "squeue": tasks}[cmd[0]]
  monkeypatch.setattr(slurm_cluster, "slurm_command", slurm_cmd)


def test_a_rerun_adopts_the_job_slurm_queued_from_a_stopped_submission(monkeypatch, tmp_path, capsys):
  """A submission stopped while sbatch ran (Slurm queued its job; tinyperf has no id for it) was followed by a rerun
  that submitted the same runs again: two jobs writing one result index. The rerun finds the job in squeue by its
  command, the kept script, and records it as sbatch's answer would have; nothing is submitted, and status follows it."""
  cfg, sp, kept = _stopped_in_sbatch(monkeypatch, tmp_path)
  work = tmp_path / "out/runs/cpu_smoke/resnet"
  calls = []
  _slurm_answering(monkeypatch, f"12|RUNNING|{kept}\n12|PENDING|{kept}\n13|RUNNING|/elsewhere/job.sbatch\n",
                   tasks="12|0|RUNNING|node1|None\n", calls=calls)
  capsys.readouterr()
  assert S._check_and_submit(cfg, dict(sp)) == 0
  out = capsys.readouterr().out
  assert "Slurm job 12 (runs [0], PENDING, RUNNING)" in out and "submitted Slurm job" not in out, out
  assert "runs [0]" in out and "(12_0)" in out, out
  assert not [c for c in calls if c[0] == "sbatch"], calls
  (job,) = json.loads((work / T.SLURM_RECORD).read_text())["jobs"]
  script = work / "slurm/submission_1/job_12.sbatch"
  assert (job["job_id"], job["indices"], job["files"], job["script"]) == ("12", [0], "submission_1", str(script))
  assert job["job_name"] == "tinyperf-resnet-cpu_smoke" and job["spec"]["results"] == sp["results"]
  assert script.is_file() and not kept.exists() and slurm_record.kept_scripts(work) == []
  (run,) = ST.set_states(work, {("12", 0): ("RUNNING", "node1")})["runs"]
  assert (run["state"], run["job"]) == ("running", "12_0")


def test_a_local_run_refuses_while_a_stopped_submission_may_have_queued_its_job(monkeypatch, tmp_path):
  """A local `tinyperf run` of the set checked only the record for queued runs: the unrecorded job's runs would run
  twice. It refuses, naming the kept script and the Slurm rerun that records the job."""
  _, _, kept = _stopped_in_sbatch(monkeypatch, tmp_path)
  with pytest.raises(UserError, match=rf"{kept} .*`tinyperf run \.\.\. --scheduler slurm`.*squeue --me"):
    S.refuse_if_queued(T.ResultSet(tmp_path / "out", "cpu_smoke", "resnet"))


def test_a_rerun_submits_the_runs_when_slurm_never_queued_the_stopped_one(monkeypatch, tmp_path, capsys):
  """No job runs the kept script (sbatch was stopped before slurmctld took it): the script is removed, says so, and the
  runs are submitted as usual."""
  cfg, sp, kept = _stopped_in_sbatch(monkeypatch, tmp_path)
  work = tmp_path / "out/runs/cpu_smoke/resnet"
  _slurm_answering(monkeypatch, "13|RUNNING|/elsewhere/job.sbatch\n")
  capsys.readouterr()
  assert S._check_and_submit(cfg, dict(sp)) == 0
  out = capsys.readouterr().out
  assert f"{kept}:" in out and not kept.exists() and "submitted Slurm job 8" in out, out
  (job,) = json.loads((work / T.SLURM_RECORD).read_text())["jobs"]
  assert (job["job_id"], job["indices"]) == ("8", [0]) and Path(job["script"]).is_file()
  assert slurm_record.kept_scripts(work) == [] and "adopted" not in job


def test_a_rerun_refuses_when_squeue_cannot_say_whether_the_stopped_one_was_queued(fake_slurm, tiny_data, tmp_path):
  """squeue failing (controller down, an old Slurm without --me) must not be read as 'never queued': one paragraph
  naming the kept script and both ways out, exit 2, nothing submitted, the script kept; status shows the set and warns."""
  _ctrl_c_while("sbatch", fake_slurm, tiny_data, tmp_path)
  work = tmp_path / "out/runs/cpu_smoke/resnet"
  (kept,) = slurm_record.kept_scripts(work)
  bin_ = Path(fake_slurm["PATH"].split(os.pathsep)[0])
  (bin_ / "squeue").write_text("#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller' >&2\nexit 1\n")
  (bin_ / "sbatch").write_text("#!/bin/sh\necho sbatch must not run >&2\nexit 1\n")
  r = user(tmp_path, "run", "resnet", "--platform", "cpu_smoke", "--nexp", "2", "--data", "data", "--results", "out",
           "--scheduler", "slurm", "--runtime", "host", "--assume-shared", env=fake_slurm)
  bad_input(r, f"{kept} ", "Unable to contact slurm controller", "`squeue --me`", f"remove {kept} and rerun")
  assert slurm_record.kept_scripts(work) == [kept] and not (work / T.SLURM_RECORD).exists()
  # status finds the set by its kept script alone and says what it is
  st = user(tmp_path, "status", "--results", "out", env=fake_slurm)
  assert st.returncode == 1 and f"WARNING: {kept}:" in st.stderr, \
    st.stdout + st.stderr
