"""The Slurm backend without a cluster: the sbatch script for each container runtime (checked by bash itself), the
states `tinyperf status` derives from a ledger, a submission record and squeue's answer, the ledger's cross-process
lock, and bad input that must fail before anything is submitted. tests/integration/test_slurm.py does the real thing
on a one-node cluster."""
from __future__ import annotations
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.registry import SCHEMA, load_config
from tests.conftest import REPO
from benchmarks.common.io import file_digest
from tooling.common import results_tree as T
from tooling.common import ledger as L
from tooling.launch import slurm as S, status as ST
from tooling.common.errors import InputError, UserError


def tinyperf(*args, env=None):
  return subprocess.run([sys.executable, "-m", "tooling.cli", *args], cwd=REPO, capture_output=True, text=True,
                        env={**os.environ, **(env or {})}, timeout=300)


def spec(**kw) -> dict:
  s = {"benchmark": "resnet", "platform": "tinybox_green", "nexp": 5, "data": "/shared/imagenet",
       "results": "/shared/out", "runtime": "docker", "image": None, "partition": "gpu", "sbatch_args": [],
       "no_check": False, "assume_shared": False, "knobs": {}, "python": "/shared/venv/bin/python", "repo": "/shared/tinyperf"}
  return {**s, **kw}


def render(cfg, sp, indices=(0, 1, 2, 3, 4)):
  return S.render_script(cfg, sp, list(indices), Path(sp["results"]) / "runs/tinybox_green/resnet/slurm", "abc123", 0.0)


def directives(text: str) -> list[str]:
  """The #SBATCH lines sbatch reads: those before the first line that is neither blank nor a comment."""
  out = []
  for line in text.splitlines()[1:]:
    if line.startswith("#SBATCH "): out.append(line[len("#SBATCH "):])
    elif line.strip() and not line.startswith("#"): break
  return out


def bash_ok(text: str, tmp_path: Path):
  f = tmp_path / "job.sbatch"; f.write_text(text)
  r = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
  assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------------------------------ the script

def test_script_docker_runtime_is_one_task_per_run_on_a_whole_node(tmp_path):
  cfg = load_config("resnet", "tinybox_green", environ={})
  text = render(cfg, spec(image="tinyperf:nv"))
  bash_ok(text, tmp_path)
  d = directives(text)
  assert "--array=0-4" in d and "--exclusive" in d and "--nodes=1" in d and "--ntasks=1" in d and "--mem=0" in d
  assert f"--gpus-per-node={cfg['GPUS']}" in d and cfg["GPUS"] == 6
  assert f"--time={cfg['time_limit_minutes'] + S.TIME_MARGIN_MIN}" in d and "--partition=gpu" in d
  assert "--job-name=tinyperf-resnet-tinybox_green" in d
  assert "--output=/shared/out/runs/tinybox_green/resnet/slurm/job_%A_%a.out" in d
  # the task is the local backend's own entrypoint, run from the submitting checkout with its Python, in the image
  cmd = next(l for l in text.splitlines() if "-m tooling.cli run" in l)
  assert cmd.startswith("/shared/venv/bin/python -m tooling.cli run resnet --platform tinybox_green --nexp 5 "
                        "--data /shared/imagenet --results /shared/out --image tinyperf:nv --only-index \"$SLURM_ARRAY_TASK_ID\"")
  assert "--runtime" not in cmd and "cd /shared/tinyperf" in text and "srun" not in text
  # a task Slurm requeues appends to its output and writes an exit record per attempt (named by SLURM_RESTART_COUNT)
  assert "--open-mode=append" in d and 'restart="${SLURM_RESTART_COUNT:-0}"' in text
  assert 'job_${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}.restart${restart}.exit' in text
  assert text.rstrip().endswith('exit "$rc"')


def test_script_host_runtime_and_knob_overrides(tmp_path):
  cfg = load_config("resnet", "cpu_smoke", environ={"BS": "32"})
  text = render(cfg, spec(platform="cpu_smoke", runtime="host", knobs={"BS": "32"}, no_check=True,
                          sbatch_args=["--account=mlperf", "--qos=high"]), indices=[1, 3, 4])
  bash_ok(text, tmp_path)
  d = directives(text)
  assert "--array=1,3-4" in d and "--account=mlperf" in d and "--qos=high" in d
  assert not [x for x in d if x.startswith("--gpus")], "a CPU platform asks for no GPUs"
  cmd = next(l for l in text.splitlines() if "-m tooling.cli run" in l)
  assert "--runtime host" in cmd and "--no-check" in cmd and "--image" not in cmd and "--org" not in cmd
  cmd = next(l for l in render(cfg, spec(org="myorg")).splitlines() if "-m tooling.cli run" in l)
  assert "--org myorg" in cmd   # each task records the submitter the submitting run settled on
  # the recorded override is exported; every other knob is cleared so the resubmitting shell cannot change the runs
  assert "export BS=32" in text
  unset = next(l for l in text.replace("\\\n", " ").splitlines() if l.startswith("unset ")).split()[1:]
  assert set(unset) == set(SCHEMA["resnet"]) - {"BS"}


def test_script_pyxis_runtime_runs_the_image_with_srun(tmp_path):
  cfg = load_config("bert", "2xH200", environ={})
  text = render(cfg, spec(benchmark="bert", platform="2xH200", runtime="pyxis", image="registry.example.com#tinyperf:nv",
                          nexp=10), indices=range(10))
  bash_ok(text, tmp_path)
  assert "--array=0-9" in directives(text) and "--gpus-per-node=2" in directives(text)
  lines = text.splitlines()
  k = next(i for i, l in enumerate(lines) if l.startswith("srun "))
  assert "--container-image='registry.example.com#tinyperf:nv'" in lines[k]
  assert "--container-mounts=/shared/imagenet:/shared/imagenet:ro,/shared/out:/shared/out" in lines[k]
  assert lines[k + 1].strip().startswith(f"{S.IMAGE_PYTHON} -m tooling.cli run bert --platform 2xH200 --nexp 10")
  assert "--runtime host" in lines[k + 1] and "cd /shared/tinyperf" not in text
  assert "export TINYPERF_SLURM_IMAGE='registry.example.com#tinyperf:nv'" in text


def test_a_record_from_before_runtime_reads_none_as_host(tmp_path):
  """slurm.json written by the --container-runtime releases says runtime "none": resubmitting reads it as host."""
  old = {"format": "tinyperf-slurm-v1", "jobs": [{"job_id": "7", "job_name": "tinyperf-resnet-cpu_smoke", "indices": [0],
                                                  "submitted": 0.0, "spec": spec(platform="cpu_smoke", runtime="none")}]}
  S.record_path(tmp_path).write_text(json.dumps(old))
  job_spec = S.load_record(tmp_path)["jobs"][0]["spec"]
  assert job_spec["runtime"] == "host"
  text = render(load_config("resnet", "cpu_smoke", environ={}), job_spec)
  assert "export TINYPERF_SLURM_RUNTIME=host" in text and "--runtime host --only-index" in text


@pytest.mark.parametrize("damage, needle", [
  (lambda j: j.clear(), "job 0: 'job_id' is missing"),
  (lambda j: j.update(indices="0"), "job 0: 'indices' is '0'"),
  (lambda j: j.update(indices=[5]), "indices [5] are not run numbers 0 to 1"),
  (lambda j: j.update(job_id="12; rm"), "not a Slurm job id"),
  (lambda j: j["spec"].pop("results"), "job 0 spec: 'results' is missing"),
  (lambda j: j["spec"].update(nexp=True), "job 0 spec: 'nexp' is True"),
  (lambda j: j.update(files="../.."), "job 0: files '../..' is not the name of a directory in slurm/"),
])
def test_a_damaged_record_is_bad_input(tmp_path, damage, needle):
  """A hand-edited slurm.json: status and --resume name the file and what is wrong (they ended in a KeyError or
  TypeError traceback)."""
  work = tmp_path / "out/runs/cpu_smoke/resnet"; work.mkdir(parents=True)
  job = {"job_id": "7", "job_name": "tinyperf-resnet-cpu_smoke", "indices": [0, 1], "submitted": 0.0,
         "spec": spec(platform="cpu_smoke", runtime="host", nexp=2)}
  damage(job)
  S.record_path(work).write_text(json.dumps({"format": "tinyperf-slurm-v1", "jobs": [job]}))
  for extra in ((), ("--resume",)):
    _bad(tinyperf("status", "--results", str(tmp_path / "out"), *extra), f"{work}/slurm.json", "unreadable", needle,
         "Restore it")


def test_array_spec():
  assert S.array_spec([0, 1, 2, 3, 4]) == "0-4"
  assert S.array_spec([4, 0, 2, 3]) == "0,2-4"
  assert S.array_spec([7]) == "7"
  for indices in ([0, 1, 2, 3, 4], [0, 2, 3, 4], [7], [0, 1, 2, 5, 7, 8]):   # read back as written
    assert S.array_indices(S.array_spec(indices)) == indices
  assert S.array_indices("") == [] and S.array_indices("0-2%4") == []


def test_parse_squeue():
  out = ("12|0|RUNNING|node07|None\n12|1|PENDING||Resources\n12|2-4|PENDING||Priority\n"  # unexpanded range: ignored
         "13|N/A|RUNNING|node01|None\n12|5|CANCELLED|node08|None\ngarbage\n")
  assert S.parse_squeue(out) == {("12", 0): ("RUNNING", "node07"), ("12", 1): ("PENDING", "Resources"),
                                 ("12", 5): ("CANCELLED", "None")}


# ------------------------------------------------------------------------------------------------------ the states

def _set(tmp_path, attempts, jobs):
  work = tmp_path / "runs" / "cpu_smoke" / "resnet"
  (work / "slurm").mkdir(parents=True)
  for a in attempts:   # a finished run's result file exists (status checks it)
    if a.status == L.DONE:
      res = tmp_path / "results" / "cpu_smoke" / "resnet" / f"result_{a.index}.txt"
      res.parent.mkdir(parents=True, exist_ok=True); res.write_text("log"); a.result = str(res)
  led = L.Ledger(work / "ledger.json"); led.attempts = attempts; led.save()
  rec = {"format": "tinyperf-slurm-v1", "jobs": [
    {"job_id": j, "job_name": "tinyperf-resnet-cpu_smoke", "indices": idx, "submitted": t, "spec": spec(nexp=n)}
    for j, idx, t, n in jobs]}
  S.record_path(work).write_text(json.dumps(rec))
  return work


def test_states_from_ledger_record_and_queue(tmp_path):
  t = time.time()
  work = _set(tmp_path, [
    L.Attempt(index=0, seed=10, status=L.DONE, converged=True, note="ACCEPTED", result="r0", slurm={"job": "5_0"}),
    L.Attempt(index=1, seed=11, status=L.RUNNING, slurm={"job": "5_1"}),           # its task was killed: stale
    L.Attempt(index=2, seed=12, status=L.RUNNING, slurm={"job": "5_2"}),           # running now
    L.Attempt(index=3, seed=13, status=L.INTERRUPTED, note="stopped by SIGTERM", slurm={"job": "5_3"}),
  ], [("5", [0, 1, 2, 3, 4], t - 100, 6)])
  (work / "slurm/job_5_3.exit").write_text("130\n")
  (work / "slurm/job_5_4.out").write_text("preflight: 4 passed, 1 failed\ntinyperf run: error: data is gone\n")
  (work / "slurm/job_5_4.exit").write_text("2\n")
  tasks = {("5", 2): ("RUNNING", "node3"), ("5", 0): ("COMPLETING", "node1"), ("5", 1): ("CANCELLED", "None"),
           ("9", 4): ("RUNNING", "x")}   # another result set's job: not ours
  st = ST.set_states(work, tasks)
  got = {r["index"]: (r["state"], r["detail"]) for r in st["runs"]}
  assert st["nexp"] == 6 and st["jobs"] == ["5"]
  assert got[0][0] == "done"                                  # the ledger wins over a task still completing
  assert got[1][0] == "failed" and "CANCELLED" in got[1][1] and "still running when the task was killed" in got[1][1]
  assert got[2] == ("running", "task 5_2 RUNNING on node3, seed 12")
  assert got[3][0] == "failed" and "exited 130" in got[3][1] and "SIGTERM" in got[3][1]
  assert got[4][0] == "failed" and "exited 2" in got[4][1] and "never started its run: " in got[4][1] \
    and "data is gone" in got[4][1]
  assert got[5] == ("missing", "")
  # resubmitted run 1 is pending in the new job even though the old attempt is stale
  rec = json.loads(S.record_path(work).read_text())
  rec["jobs"].append({"job_id": "6", "job_name": "tinyperf-resnet-cpu_smoke", "indices": [1, 5], "submitted": t,
                      "spec": spec(nexp=6)})
  S.record_path(work).write_text(json.dumps(rec))
  st = ST.set_states(work, {("6", 1): ("PENDING", "Resources")})
  got = {r["index"]: (r["state"], r["detail"]) for r in st["runs"]}
  assert got[1] == ("pending", "task 6_1 PENDING (Resources)")
  # a task that left nothing at all points at the likely cause: the results directory is not on the node
  assert got[5][0] == "failed" and "task 6_5 ended without an exit record" in got[5][1] and "no output at" in got[5][1]
  # Slurm unreachable: unfinished Slurm runs are unknown, never guessed
  st = ST.set_states(work, None)
  assert {r["index"]: r["state"] for r in st["runs"]} == {0: "done", 1: "unknown", 2: "unknown", 3: "unknown",
                                                          4: "unknown", 5: "unknown"}


def test_status_reads_each_job_from_its_own_directory(tmp_path):
  """Two jobs with one id (Slurm's counter restarted between them), each with its submission's directory: a run's
  state comes from the files of the job that ran it last, never from the other's."""
  work = _set(tmp_path, [], [("7", [0, 1], time.time() - 100, 2), ("7", [1], time.time() - 50, 2)])
  rec = json.loads(S.record_path(work).read_text())
  rec["jobs"][0]["files"], rec["jobs"][1]["files"] = "submission_1", "submission_2"
  S.record_path(work).write_text(json.dumps(rec))
  for files, index, rc in (("submission_1", 0, 2), ("submission_1", 1, 1), ("submission_2", 1, 130)):
    T.slurm_task_file(work, files, "7", index, "exit").parent.mkdir(exist_ok=True)
    T.slurm_task_file(work, files, "7", index, "exit").write_text(f"{rc}\n")
    T.slurm_task_file(work, files, "7", index, "out").write_text(f"task {index} of {files}\n")
  got = {r["index"]: r["detail"] for r in ST.set_states(work, {})["runs"]}
  assert "task 7_0 exited 2" in got[0] and "/slurm/submission_1/job_7_0.out" in got[0]
  assert "task 7_1 exited 130" in got[1] and "task 1 of submission_2" in got[1] and "/slurm/submission_2/job_7_1.out" in got[1]


def test_status_reads_the_last_attempt_of_a_requeued_task(tmp_path):
  """A task Slurm requeued (scontrol requeue, a node failure) ran again under the same job id and index: its output
  holds each attempt's start line and each attempt left an exit record of its own. Status reports the last attempt's
  exit (or its lack of one), names the earlier ones, and takes the ledger's note only from the last attempt's run;
  an exit record of a script from before per-attempt records is still read."""
  work = _set(tmp_path, [
    L.Attempt(index=1, seed=11, status=L.FAILED, note="run 1 failed at restart 1", slurm={"job": "7_1", "restart": 1}),
    L.Attempt(index=2, seed=12, status=L.FAILED, note="run 2 failed at restart 0", slurm={"job": "7_2"}),
    L.Attempt(index=3, seed=13, status=L.INTERRUPTED, note="stopped by SIGTERM", slurm={"job": "7_3"}),
  ], [("7", [0, 1, 2, 3], time.time() - 100, 4)])
  def started(index, *restarts, tail=""):   # the start line each attempt's script prints (render_script)
    (work / f"slurm/job_7_{index}.out").write_text("".join(
      f"==== tinyperf: Slurm task 7_{index}, restart {r} (SLURM_RESTART_COUNT={r or 'unset'}) on node1 at "
      f"2025-01-01T00:00:00Z ====\nrun output\n" for r in restarts) + tail)
  def exited(index, restart, rc): (work / f"slurm/job_7_{index}.restart{restart}.exit").write_text(f"{rc}\n")
  started(0, 0, 1); exited(0, 0, 1)                  # restart 1 was killed (node failure): no record of its own
  started(1, 0, 1); exited(1, 0, 2); exited(1, 1, 1)
  started(2, 0, 1, tail="tinyperf run: error: data is gone\n"); exited(2, 0, 1); exited(2, 1, 2)
  (work / "slurm/job_7_3.exit").write_text("130\n")   # written by a script from before per-attempt records
  got = {r["index"]: (r["state"], r["detail"]) for r in ST.set_states(work, {})["runs"]}
  assert all(state == "failed" for state, _ in got.values()), got
  assert got[0][1].startswith("task 7_0 ended without an exit record at restart 1 (cancelled, timed out or its node "
                              "failed; Slurm requeued it once; restart 0 exited 1)"), got[0][1]
  assert got[1][1].startswith("task 7_1 exited 1 at restart 1 (Slurm requeued it once; restart 0 exited 2)") \
    and "run 1 failed at restart 1" in got[1][1], got[1][1]
  # restart 1 of task 2 never started its run: the ledger's attempt is restart 0's, not the one that failed last
  assert got[2][1].startswith("task 7_2 exited 2 at restart 1 (") and "never started its run: tinyperf run: error: data is gone" \
    in got[2][1] and "failed at restart 0" not in got[2][1], got[2][1]
  assert got[3][1].startswith("task 7_3 exited 130;") and "SIGTERM" in got[3][1] and "restart" not in got[3][1], got[3][1]


def test_wait_says_why_runs_are_pending(tmp_path):
  """`status --wait` on held tasks printed only '3 pending' and blocked with no hint: its progress line gives squeue's
  reason, and for a held task the command that releases it (a user's hold, an administrator's)."""
  work = _set(tmp_path, [L.Attempt(index=4, seed=1, status=L.DONE, converged=True, note="ok", slurm={"job": "7_4"})],
              [("7", [0, 1, 2, 3, 4], time.time() - 100, 5)])
  st = ST.set_states(work, {("7", 0): ("PENDING", "JobHeldUser"), ("7", 1): ("PENDING", "JobHeldUser"),
                            ("7", 2): ("PENDING", "JobHeldAdmin"), ("7", 3): ("PENDING", "None")})
  assert ST.progress([st]) == (
    "resnet/cpu_smoke: 4 pending (runs 0, 1: JobHeldUser, held until `scontrol release 7_0,7_1`; run 2: JobHeldAdmin, "
    "held by a Slurm administrator until an operator runs `scontrol release 7_2`), 1 done")
  assert st["runs"][0]["detail"] == "task 7_0 PENDING (JobHeldUser, held until `scontrol release 7_0`)"
  st = ST.set_states(work, {("7", i): ("PENDING", "Priority") for i in range(4)})
  assert ST.progress([st]) == "resnet/cpu_smoke: 4 pending (runs 0, 1, 2, 3: Priority), 1 done"


def test_a_done_run_whose_task_still_writes_its_result_is_running(tmp_path):
  """The launcher records a run done before it copies the log to result_<i>.txt: in between, status (and --wait, which
  stops when nothing runs) must not call it broken while its task still runs; once the task has ended, it is."""
  work = _set(tmp_path, [L.Attempt(index=0, seed=10, status=L.DONE, converged=True, note="ACCEPTED", slurm={"job": "5_0"})],
              [("5", [0], time.time() - 100, 1)])
  led = L.Ledger(work / "ledger.json"); att = led.latest(0)
  log = led.run_dir(att).log                        # the run's own log, intact; result_0.txt not copied yet
  log.parent.mkdir(parents=True); log.write_text("log")
  att.sha256 = file_digest(log, "sha256"); L.update_attempt(work / "ledger.json", att)
  Path(att.result).unlink()
  (r,) = ST.set_states(work, {("5", 0): ("RUNNING", "node1")})["runs"]
  assert r["state"] == "running" and "writing its result" in r["detail"] and "problem" not in r and r["result"] is None
  for ended in ({("5", 0): ("COMPLETING", "node1")}, {}):
    (r,) = ST.set_states(work, ended)["runs"]
    assert r["state"] == "broken" and "NOT COPIED YET" in r["problem"]


def test_a_local_run_after_a_slurm_job(tmp_path):
  """Run 0 failed in Slurm job 5, then someone ran it locally: the local attempt is what counts. Its launcher (this
  process here) holds its claim: running; a launcher that is gone leaves a claim nobody holds: failed, said so."""
  work = _set(tmp_path, [L.Attempt(index=0, seed=1, status=L.FAILED, note="boom", slurm={"job": "5_0"}),
                         L.Attempt(index=0, seed=2, status=L.RUNNING, started=time.time(), owner=L.launcher()),
                         L.Attempt(index=1, seed=3, status=L.RUNNING, started=time.time(), owner={"pid": 9, "host": "h"})],
              [("5", [0], time.time() - 100, 1)])
  r, gone = ST.set_states(work, {})["runs"]
  assert (r["state"], r["job"], r["seed"]) == ("running", None, 2) and f"pid {L.launcher()['pid']}" in r["detail"]
  assert gone["state"] == "failed" and "launcher pid 9 on h is gone" in gone["detail"]


def test_states_of_a_local_set(tmp_path):
  work = _set(tmp_path, [L.Attempt(index=0, seed=1, status=L.DONE, converged=False, note="ok", result="r0"),
                         L.Attempt(index=1, seed=2, status=L.FAILED, note="exit codes {'init': 1}")], [])
  st = ST.set_states(work, {})
  assert [(r["state"], r["job"]) for r in st["runs"]] == [("done", None), ("failed", None)]
  assert "did NOT converge" in st["runs"][0]["detail"] and "init" in st["runs"][1]["detail"]


# ------------------------------------------------------------------------------------------------------- the lock

def test_ledger_lock_is_a_posix_lock_that_excludes_other_processes(tmp_path):
  """lockf, not flock: only POSIX record locks reach across nodes on NFS and Lustre. While another process holds the
  ledger lock, a POSIX lock attempt on the same file must fail."""
  import fcntl
  ledger = tmp_path / "ledger.json"
  holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from tooling.common import ledger as L
with L.Ledger.locked({str(ledger)!r}):
  print("locked", flush=True); time.sleep(30)
"""], cwd=REPO, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "locked"
    with open(ledger.with_suffix(".lock"), "a") as f:
      with pytest.raises(OSError):
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
  finally:
    holder.kill(); holder.wait()


def test_concurrent_writers_lose_no_attempt(tmp_path):
  """Eight processes append 25 attempts each through read-modify-write under the lock: all 200 survive."""
  ledger = tmp_path / "ledger.json"
  code = f"""
import sys
from tooling.common import ledger as L
w = int(sys.argv[1])
for k in range(25): L.add_attempt({str(ledger)!r}, L.Attempt(index=w, seed=w * 1000 + k))
"""
  procs = [subprocess.Popen([sys.executable, "-c", code, str(w)], cwd=REPO) for w in range(8)]
  assert all(p.wait(timeout=120) == 0 for p in procs)
  seeds = [a.seed for a in L.Ledger(ledger).attempts]
  assert sorted(seeds) == sorted(w * 1000 + k for w in range(8) for k in range(25))


# --------------------------------------------------------------------------------------------------- bad input

def _bad(r, *needles):
  assert r.returncode == 2, r.stdout + r.stderr
  assert r.stderr.startswith("tinyperf ") and "Traceback" not in r.stderr
  assert len(r.stderr.strip().splitlines()) == 1, r.stderr
  for n in needles: assert n in r.stderr, r.stderr


@pytest.fixture
def smoke_args(tmp_path):
  data = tmp_path / "data"; data.mkdir(); (data / "manifest.json").write_text("{}")
  return ["run", "resnet", "--platform", "cpu_smoke", "--nexp", "2", "--data", str(data), "--results", str(tmp_path / "out")]


def test_no_sbatch_on_path(smoke_args, tmp_path):
  """A machine without Slurm's commands: a clear message before anything is written (PATH holds only Python)."""
  r = tinyperf(*smoke_args, "--scheduler", "slurm", "--runtime", "host", env={"PATH": str(Path(sys.executable).parent)})
  _bad(r, "sbatch is not on PATH", "login node", "slurm-client", "Nothing was submitted")
  assert not (tmp_path / "out").exists()


def test_slurm_options_need_the_slurm_scheduler(smoke_args):
  _bad(tinyperf(*smoke_args, "--runtime", "host", "--partition", "gpu"), "--partition only apply to --scheduler slurm")


def test_bad_slurm_options(smoke_args, tmp_path):
  _bad(tinyperf(*smoke_args, "--scheduler", "slurm", "--runtime", "pyxis"), "needs --image", "enroot import")
  _bad(tinyperf(*smoke_args, "--scheduler", "slurm", "--only-index", "1"), "--only-index is what each array task runs",
       "Drop --only-index", "Nothing was submitted")
  _bad(tinyperf(*smoke_args, "--scheduler", "slurm", "--runtime", "host", "--sbatch-arg", "account=x"), "one sbatch option")
  _bad(tinyperf(*smoke_args, "--runtime", "host", "--only-index", "2"), "--only-index 2: runs are numbered 0 to 1")
  # options the bookkeeping relies on: --job-name=mine had status call a queued run failed and offer --resume
  for own, name in (("--job-name=mine", "job-name"), ("--job=mine", "job-name"), ("-Jmine", "job-name"), ("--job-name mine", "job-name"),
                    ("--array=0-9", "array"), ("-o/tmp/x.out", "output"), ("--error=e.txt", "error"), ("--part=gpu", "partition"),
                    ("--open-mode=truncate", "open-mode")):
    _bad(tinyperf(*smoke_args, "--scheduler", "slurm", "--runtime", "host", f"--sbatch-arg={own}"),
         f"tinyperf sets --{name} itself", "Drop this --sbatch-arg")
  S._check_sbatch_arg("--exclusive=user"); S._check_sbatch_arg("--time=60"); S._check_sbatch_arg("-A mlperf")
  assert not (tmp_path / "out").exists()


def test_results_in_memory_are_not_shared():
  """/dev/shm is tmpfs on Linux: refused before any Slurm command or directory is made."""
  fstype, mnt = S.mount_of(Path("/dev/shm/tinyperf-never-created/out"))
  assert fstype == "tmpfs" and mnt == "/dev/shm"
  with pytest.raises(UserError, match=r"is on tmpfs \(mounted at /dev/shm\), which exists on this machine only.*NFS"):
    S.check_shared(Path("/dev/shm/tinyperf-never-created/out"), "any", assume_shared=False)
  S.check_shared(Path("/dev/shm/x"), "any", assume_shared=True)   # the user says it is shared: believed
  assert not Path("/dev/shm/tinyperf-never-created").exists()


def test_results_on_a_local_disk():
  """A local disk (the repository's own filesystem) is fine when every node of the partition is this machine, and
  refused, naming the other nodes, when it is not."""
  import socket
  me = socket.gethostname()
  if S.mount_of(REPO)[0] in S.LOCAL_ONLY_FS | S.SHARED_FS: pytest.skip(f"the checkout is on {S.mount_of(REPO)[0]}, not a local disk")
  S.check_shared(REPO / "out", "one", False, nodes=[(me, me, "127.0.0.1")])
  with pytest.raises(UserError, match=r"on a local .* but partition gpu has nodes other than this machine \(gpu01, gpu02\)"
                                      r".*--assume-shared"):
    S.check_shared(REPO / "out", "gpu", False, nodes=[(me, me, "10.0.0.1"), ("gpu01", "gpu01", "10.0.0.2"),
                                                      ("gpu02", "gpu02", "10.0.0.3")])


def test_paths_sbatch_cannot_carry():
  with pytest.raises(UserError, match="'%'"): S._check_path_chars("/shared/out%A", "none")
  with pytest.raises(UserError, match="' '"): S._check_path_chars("/shared/my out", "docker")
  with pytest.raises(UserError, match="','"): S._check_path_chars("/shared/a,b", "pyxis")
  S._check_path_chars("/shared/a,b", "none")


@pytest.mark.parametrize("poll", ["-1", "nan", "inf", "0", "soon"])
def test_status_poll_must_be_a_sane_interval(tmp_path, poll):
  """--poll -1, nan or inf ended `status --wait` in a ValueError/OverflowError traceback at its first sleep, and 0
  polled squeue in a tight loop."""
  r = tinyperf("status", "--results", str(tmp_path), "--wait", f"--poll={poll}")
  assert r.returncode == 2 and "Traceback" not in r.stderr and "--poll" in r.stderr and "at least" in r.stderr, r.stderr


def test_status_without_result_sets(tmp_path):
  _bad(tinyperf("status", "--results", str(tmp_path)), "no result sets")
  (tmp_path / "afile").write_text("")   # it said "afile/runs: no result sets"
  _bad(tinyperf("status", "--results", str(tmp_path / "afile")), "afile: a file, not a directory")


# ------------------------------------------------------------------------------------ Slurm's commands, stood in for

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
  return subprocess.run([sys.executable, "-m", "tooling.cli", *args], cwd=cwd, capture_output=True, text=True,
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
  r = subprocess.run([sys.executable, "-m", "tooling.cli", "run", "resnet", "--platform", "cpu_smoke", "--nexp", "1",
                      "--data", "data", "--results", "out", "--scheduler", "slurm", "--runtime", "host", "--assume-shared"],
                     cwd=tmp_path, capture_output=True, text=True, timeout=300, preexec_fn=_no_write_over_1k,
                     env={**os.environ, **fake_slurm, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
                          "GIT_OPTIONAL_LOCKS": "0"})
  _bad(r, "cannot write the job script", "File too large", "Nothing was submitted")
  assert sorted(p.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("*")) == [Path("notes.txt")]


def _submission(monkeypatch, tmp_path):
  """cfg and spec of a cpu_smoke submission into tmp_path/out, with sinfo and sbatch answering in this process."""
  def slurm_cmd(*cmd, shown=None):
    return {"sinfo": "ci*\n", "sbatch": "7\n"}.get(cmd[0], "")
  monkeypatch.setattr(S, "_slurm", slurm_cmd); monkeypatch.setattr(S, "require", lambda *a: None)
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
  monkeypatch.setattr(S, "render_script", fails)   # after results/, runs/.../slurm/submission_1 and the locks exist
  with pytest.raises(type(error)) as got:
    S._check_and_submit(cfg, sp)
  assert got.value is error
  assert not (tmp_path / "out").exists()


def test_a_failure_once_sbatch_has_queued_the_job_removes_nothing(monkeypatch, tmp_path):
  """Once sbatch has answered with a job id the job's tasks will write into these folders: a record that cannot be
  written (disk full) removes nothing and names the job, and what to do about it: rerun, which adopts the job (its
  script was renamed before the record was written, so the rerun could not find it and submitted the runs again)."""
  cfg, sp = _submission(monkeypatch, tmp_path)
  real = S.write_atomic
  def full_at_the_record(path, text, **kw):
    if Path(path).name == T.SLURM_RECORD: raise OSError(28, "No space left on device", str(path))
    return real(path, text, **kw)
  monkeypatch.setattr(S, "write_atomic", full_at_the_record)
  with pytest.raises(S.MaybeSubmitted, match=r"Slurm job 7 is queued .*slurm\.json.*No space left on device.*rerun the "
                                             r"same command: it finds the job .*scancel 7"):
    S._check_and_submit(cfg, dict(sp))
  work = tmp_path / "out/runs/cpu_smoke/resnet"
  # the script keeps the name sbatch was given, the job's command in squeue (%o), so that the rerun adopts the job
  (kept,) = S.kept_scripts(work)
  assert kept.parent.name == "submission_1" and not (kept.parent / "job_7.sbatch").exists()
  monkeypatch.setattr(S, "write_atomic", real)   # space freed
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
  p = subprocess.Popen([sys.executable, "-m", "tooling.cli", "run", "resnet", "--platform", "cpu_smoke", "--nexp", "2",
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
  assert stderr.startswith("tinyperf run: interrupted while sbatch was submitting the job for runs [0, 1]: Slurm may "
                           "have queued it"), stderr
  for needle in ("has not recorded it", "squeue --me --name=tinyperf-resnet-cpu_smoke --format='%i %T %o'",
                 f"whose command is {script}", "Rerun the same command", "instead of submitting runs [0, 1] again",
                 "scancel <job id>", str(files)):
    assert needle in stderr, (needle, stderr)
  assert not (tmp_path / "out/runs/cpu_smoke/resnet/slurm.json").exists()
  # the script names its submission, as its file name does: what a rerun matches squeue's %o against
  token = script.name[len(".unsubmitted-"):-len(".sbatch")]
  assert f"\n{S.SUBMISSION_LINE}{token}\n" in script.read_text() and token.count("-") >= 2


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_while_sbatch_runs_is_handled_as_ctrl_c(sig, fake_slurm, tiny_data, tmp_path):
  # a closed SSH session or `kill` killed the submission outright: no message that Slurm may have queued the job
  rc, stderr = _ctrl_c_while("sbatch", fake_slurm, tiny_data, tmp_path, sig)
  assert rc == 130 and f"stopped by {sig}" in stderr and "Slurm may have queued it" in stderr, stderr
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
  real = S.write_atomic
  def ctrl_c_at_the_record(path, text, **kw):
    if Path(path).name == T.SLURM_RECORD: os.kill(os.getpid(), signal.SIGINT)
    return real(path, text, **kw)
  monkeypatch.setattr(S, "write_atomic", ctrl_c_at_the_record)
  try:
    with pytest.raises(KeyboardInterrupt) as got:
      S._check_and_submit(cfg, sp)
  finally:
    signal.signal(signal.SIGINT, old)
  work = tmp_path / "out/runs/cpu_smoke/resnet"
  assert str(got.value).startswith("interrupted after sbatch queued Slurm job 7 (runs [0]). The job is recorded"), got.value
  assert f"`tinyperf status --results {tmp_path / 'out'}` follows it, `scancel 7` cancels it" in str(got.value)
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
  monkeypatch.setattr(S, "_slurm", ctrl_c_in_sbatch)
  with pytest.raises(S.SubmitInterrupted):
    S._check_and_submit(cfg, dict(sp))
  (kept,) = S.kept_scripts(tmp_path / "out/runs/cpu_smoke/resnet")
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
  monkeypatch.setattr(S, "_slurm", slurm_cmd)


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
  assert "adopted Slurm job 12 (runs [0], PENDING, RUNNING)" in out and "not submitted again" in out, out
  assert "nothing to submit" in out and "runs [0] queued or running (12_0)" in out, out
  assert not [c for c in calls if c[0] == "sbatch"], calls
  (job,) = json.loads((work / T.SLURM_RECORD).read_text())["jobs"]
  script = work / "slurm/submission_1/job_12.sbatch"
  assert (job["job_id"], job["indices"], job["files"], job["script"]) == ("12", [0], "submission_1", str(script))
  assert job["job_name"] == "tinyperf-resnet-cpu_smoke" and job["spec"]["results"] == sp["results"]
  assert script.is_file() and not kept.exists() and S.kept_scripts(work) == []
  (run,) = ST.set_states(work, {("12", 0): ("RUNNING", "node1")})["runs"]
  assert (run["state"], run["job"]) == ("running", "12_0")


def test_a_local_run_refuses_while_a_stopped_submission_may_have_queued_its_job(monkeypatch, tmp_path):
  """A local `tinyperf run` of the set checked only the record for queued runs: the unrecorded job's runs would run
  twice. It refuses, naming the kept script and the Slurm rerun that records the job."""
  _, _, kept = _stopped_in_sbatch(monkeypatch, tmp_path)
  with pytest.raises(UserError, match=rf"{kept} is the script of a Slurm submission .* would do them twice.*Rerun that "
                                      r"`tinyperf run \.\.\. --scheduler slurm` command.*Nothing was run\."):
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
  assert f"{kept}: no Slurm job runs this script" in out and "removed it" in out and "submitted Slurm job 8" in out, out
  (job,) = json.loads((work / T.SLURM_RECORD).read_text())["jobs"]
  assert (job["job_id"], job["indices"]) == ("8", [0]) and Path(job["script"]).is_file()
  assert S.kept_scripts(work) == [] and "adopted" not in job


def test_a_rerun_refuses_when_squeue_cannot_say_whether_the_stopped_one_was_queued(fake_slurm, tiny_data, tmp_path):
  """squeue failing (controller down, an old Slurm without --me) must not be read as 'never queued': one paragraph
  naming the kept script and both ways out, exit 2, nothing submitted, the script kept; status shows the set and warns."""
  _ctrl_c_while("sbatch", fake_slurm, tiny_data, tmp_path)
  work = tmp_path / "out/runs/cpu_smoke/resnet"
  (kept,) = S.kept_scripts(work)
  bin_ = Path(fake_slurm["PATH"].split(os.pathsep)[0])
  (bin_ / "squeue").write_text("#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller' >&2\nexit 1\n")
  (bin_ / "sbatch").write_text("#!/bin/sh\necho sbatch must not run >&2\nexit 1\n")
  r = user(tmp_path, "run", "resnet", "--platform", "cpu_smoke", "--nexp", "2", "--data", "data", "--results", "out",
           "--scheduler", "slurm", "--runtime", "host", "--assume-shared", env=fake_slurm)
  _bad(r, f"{kept} is the script of an earlier submission that was stopped while sbatch ran",
       "Unable to contact slurm controller", "could run them twice", "Make `squeue --me` work here",
       f"remove {kept} and rerun", "Nothing was submitted")
  assert S.kept_scripts(work) == [kept] and not (work / T.SLURM_RECORD).exists()
  # status finds the set by its kept script alone and says what it is
  st = user(tmp_path, "status", "--results", "out", env=fake_slurm)
  assert st.returncode == 1 and f"WARNING: {kept}: a submission was stopped while sbatch ran" in st.stderr, \
    st.stdout + st.stderr
