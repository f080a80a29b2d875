"""The Slurm backend without a cluster: the sbatch script for each container runtime (checked by bash itself), the
states `tinyperf status` derives from a ledger, a submission record and squeue's answer, the ledger's cross-process
lock, and bad input that must fail before anything is submitted. test_slurm_submit.py stops and reruns submissions
against stand-ins of Slurm's commands; tests/integration/test_slurm.py does the real thing on a one-node cluster."""
from __future__ import annotations
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tinyperf.benchmarks.registry import SCHEMA, load_config
from slurm_helpers import bad_input, spec, tinyperf
from tests.conftest import REPO
from tinyperf.benchmarks.common.io import file_digest
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.launch import slurm_cluster, slurm_record, slurm_script, status as ST
from tinyperf.tooling.common.errors import UserError


def render(cfg, sp, indices=(0, 1, 2, 3, 4)):
  return slurm_script.render_script(cfg, sp, list(indices), Path(sp["results"]) / "runs/tinybox_green/resnet/slurm", "abc123", 0.0)


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
  assert f"--time={cfg['time_limit_minutes'] + slurm_script.TIME_MARGIN_MIN}" in d and "--partition=gpu" in d
  assert "--job-name=tinyperf-resnet-tinybox_green" in d
  assert "--output=/shared/out/runs/tinybox_green/resnet/slurm/job_%A_%a.out" in d
  # the task is the local backend's own entrypoint, run from the submitting checkout with its Python, in the image
  cmd = next(l for l in text.splitlines() if "-m tinyperf.tooling.cli run" in l)
  assert cmd.startswith("/shared/venv/bin/python -m tinyperf.tooling.cli run resnet --platform tinybox_green --nexp 5 "
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
  cmd = next(l for l in text.splitlines() if "-m tinyperf.tooling.cli run" in l)
  assert "--runtime host" in cmd and "--no-check" in cmd and "--image" not in cmd and "--org" not in cmd
  cmd = next(l for l in render(cfg, spec(org="myorg")).splitlines() if "-m tinyperf.tooling.cli run" in l)
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
  assert lines[k + 1].strip().startswith(f"{slurm_script.IMAGE_PYTHON} -m tinyperf.tooling.cli run bert --platform 2xH200 --nexp 10")
  assert "--runtime host" in lines[k + 1] and "cd /shared/tinyperf" not in text
  assert "export TINYPERF_SLURM_IMAGE='registry.example.com#tinyperf:nv'" in text


@pytest.mark.parametrize("damage, needle", [
  (lambda j: j.clear(), "job 0: 'job_id' is missing"),
  (lambda j: j.update(indices="0"), "job 0: 'indices' is '0'"),
  (lambda j: j.update(indices=[5]), "indices [5] are not run numbers 0 to 1"),
  (lambda j: j.update(job_id="12; rm"), "not a Slurm job id"),
  (lambda j: j["spec"].pop("results"), "job 0 spec: 'results' is missing"),
  (lambda j: j["spec"].update(nexp=True), "job 0 spec: 'nexp' is True"),
  (lambda j: j.update(files="../.."), "job 0: files '../..'"),
  (lambda j: j.pop("files"), "job 0: 'files' is missing"),   # every submission has a directory of its own
])
def test_a_damaged_record_is_bad_input(tmp_path, damage, needle):
  """A hand-edited slurm.json: status and --resume name the file and what is wrong (they ended in a KeyError or
  TypeError traceback)."""
  work = tmp_path / "out/runs/cpu_smoke/resnet"; work.mkdir(parents=True)
  job = {"job_id": "7", "job_name": "tinyperf-resnet-cpu_smoke", "indices": [0, 1], "files": "submission_1",
         "submitted": 0.0, "spec": spec(platform="cpu_smoke", runtime="host", nexp=2)}
  damage(job)
  slurm_record.record_path(work).write_text(json.dumps({"format": "tinyperf-slurm-v1", "jobs": [job]}))
  for extra in ((), ("--resume",)):
    bad_input(tinyperf("status", "--results", str(tmp_path / "out"), *extra), f"{work}/slurm.json", "unreadable", needle,
         "Restore it")


def test_array_spec():
  assert slurm_script.array_spec([0, 1, 2, 3, 4]) == "0-4"
  assert slurm_script.array_spec([4, 0, 2, 3]) == "0,2-4"
  assert slurm_script.array_spec([7]) == "7"
  for indices in ([0, 1, 2, 3, 4], [0, 2, 3, 4], [7], [0, 1, 2, 5, 7, 8]):   # read back as written
    assert slurm_script.array_indices(slurm_script.array_spec(indices)) == indices
  assert slurm_script.array_indices("") == [] and slurm_script.array_indices("0-2%4") == []


def test_parse_squeue():
  out = ("12|0|RUNNING|node07|None\n12|1|PENDING||Resources\n12|2-4|PENDING||Priority\n"  # unexpanded range: ignored
         "13|N/A|RUNNING|node01|None\n12|5|CANCELLED|node08|None\ngarbage\n")
  assert slurm_cluster.parse_squeue(out) == {("12", 0): ("RUNNING", "node07"), ("12", 1): ("PENDING", "Resources"),
                                 ("12", 5): ("CANCELLED", "None")}


# ------------------------------------------------------------------------------------------------------ the states

def _set(tmp_path, attempts, jobs):
  work = tmp_path / "runs" / "cpu_smoke" / "resnet"
  (work / "slurm/submission_1").mkdir(parents=True)
  for a in attempts:   # a finished run's result file exists (status checks it)
    if a.status == L.DONE:
      res = tmp_path / "results" / "cpu_smoke" / "resnet" / f"result_{a.index}.txt"
      res.parent.mkdir(parents=True, exist_ok=True); res.write_text("log"); a.result = str(res)
  led = L.Ledger(work / "ledger.json"); led.attempts = attempts
  led.nexp = max([n for *_, n in jobs] + [a.index + 1 for a in attempts] + [1]); led.save()   # as `tinyperf run` records
  rec = {"format": "tinyperf-slurm-v1", "jobs": [
    {"job_id": j, "job_name": "tinyperf-resnet-cpu_smoke", "indices": idx, "files": "submission_1", "submitted": t,
     "spec": spec(nexp=n)} for j, idx, t, n in jobs]}
  slurm_record.record_path(work).write_text(json.dumps(rec))
  return work


def test_states_from_ledger_record_and_queue(tmp_path):
  t = time.time()
  work = _set(tmp_path, [
    L.Attempt(index=0, seed=10, status=L.DONE, converged=True, note="ACCEPTED", result="r0", slurm={"job": "5_0"}),
    L.Attempt(index=1, seed=11, status=L.RUNNING, slurm={"job": "5_1"}),           # its task was killed: stale
    L.Attempt(index=2, seed=12, status=L.RUNNING, slurm={"job": "5_2"}),           # running now
    L.Attempt(index=3, seed=13, status=L.INTERRUPTED, note="stopped by SIGTERM", slurm={"job": "5_3"}),
  ], [("5", [0, 1, 2, 3, 4], t - 100, 6)])
  (work / "slurm/submission_1/job_5_3.restart0.exit").write_text("130\n")
  (work / "slurm/submission_1/job_5_4.out").write_text("preflight: 4 passed, 1 failed\ntinyperf run: error: data is gone\n")
  (work / "slurm/submission_1/job_5_4.restart0.exit").write_text("2\n")
  tasks = {("5", 2): ("RUNNING", "node3"), ("5", 0): ("COMPLETING", "node1"), ("5", 1): ("CANCELLED", "None"),
           ("9", 4): ("RUNNING", "x")}   # another result set's job: not ours
  st = ST.set_states(work, tasks)
  got = {r["index"]: (r["state"], r["detail"]) for r in st["runs"]}
  assert st["nexp"] == 6 and st["jobs"] == ["5"]
  assert got[0][0] == "done"                                  # the ledger wins over a task still completing
  assert got[1][0] == "failed" and "CANCELLED" in got[1][1] and "5_1" in got[1][1]
  assert got[2] == ("running", "task 5_2 RUNNING on node3, seed 12")
  assert got[3][0] == "failed" and "exited 130" in got[3][1] and "SIGTERM" in got[3][1]
  assert got[4][0] == "failed" and "5_4 exited 2" in got[4][1] and "tinyperf run: error: data is gone" in got[4][1]
  assert got[5] == ("missing", "")
  # resubmitted run 1 is pending in the new job even though the old attempt is stale
  rec = json.loads(slurm_record.record_path(work).read_text())
  rec["jobs"].append({"job_id": "6", "job_name": "tinyperf-resnet-cpu_smoke", "indices": [1, 5], "files": "submission_2",
                      "submitted": t, "spec": spec(nexp=6)})
  slurm_record.record_path(work).write_text(json.dumps(rec))
  st = ST.set_states(work, {("6", 1): ("PENDING", "Resources")})
  got = {r["index"]: (r["state"], r["detail"]) for r in st["runs"]}
  assert got[1] == ("pending", "task 6_1 PENDING (Resources)")
  # a task that left nothing at all points at the likely cause: the results directory is not on the node
  assert got[5][0] == "failed" and "6_5" in got[5][1] and "submission_2/job_6_5.out" in got[5][1]   # the output it lacks
  # Slurm unreachable: unfinished Slurm runs are unknown, never guessed
  st = ST.set_states(work, None)
  assert {r["index"]: r["state"] for r in st["runs"]} == {0: "done", 1: "unknown", 2: "unknown", 3: "unknown",
                                                          4: "unknown", 5: "unknown"}


def test_status_reads_each_job_from_its_own_directory(tmp_path):
  """Two jobs with one id (Slurm's counter restarted between them), each with its submission's directory: a run's
  state comes from the files of the job that ran it last, never from the other's."""
  work = _set(tmp_path, [], [("7", [0, 1], time.time() - 100, 2), ("7", [1], time.time() - 50, 2)])
  rec = json.loads(slurm_record.record_path(work).read_text())
  rec["jobs"][0]["files"], rec["jobs"][1]["files"] = "submission_1", "submission_2"
  slurm_record.record_path(work).write_text(json.dumps(rec))
  for files, index, rc in (("submission_1", 0, 2), ("submission_1", 1, 1), ("submission_2", 1, 130)):
    T.slurm_task_file(work, files, "7", index, "exit", 0).parent.mkdir(exist_ok=True)
    T.slurm_task_file(work, files, "7", index, "exit", 0).write_text(f"{rc}\n")
    T.slurm_task_file(work, files, "7", index, "out").write_text(f"task {index} of {files}\n")
  got = {r["index"]: r["detail"] for r in ST.set_states(work, {})["runs"]}
  assert "task 7_0 exited 2" in got[0] and "/slurm/submission_1/job_7_0.out" in got[0]
  assert "task 7_1 exited 130" in got[1] and "task 1 of submission_2" in got[1] and "/slurm/submission_2/job_7_1.out" in got[1]


def test_status_reads_the_last_attempt_of_a_requeued_task(tmp_path):
  """A task Slurm requeued (scontrol requeue, a node failure) ran again under the same job id and index: its output
  holds each attempt's start line and each attempt left an exit record of its own. Status reports the last attempt's
  exit (or its lack of one), names the earlier ones, and takes the ledger's note only from the last attempt's run."""
  work = _set(tmp_path, [
    L.Attempt(index=1, seed=11, status=L.FAILED, note="run 1 failed at restart 1", slurm={"job": "7_1", "restart": 1}),
    L.Attempt(index=2, seed=12, status=L.FAILED, note="run 2 failed at restart 0", slurm={"job": "7_2"}),
    L.Attempt(index=3, seed=13, status=L.INTERRUPTED, note="stopped by SIGTERM", slurm={"job": "7_3"}),
  ], [("7", [0, 1, 2, 3], time.time() - 100, 4)])
  def started(index, *restarts, tail=""):   # the start line each attempt's script prints (render_script)
    (work / f"slurm/submission_1/job_7_{index}.out").write_text("".join(
      f"==== tinyperf: Slurm task 7_{index}, restart {r} (SLURM_RESTART_COUNT={r or 'unset'}) on node1 at "
      f"2025-01-01T00:00:00Z ====\nrun output\n" for r in restarts) + tail)
  def exited(index, restart, rc): (work / f"slurm/submission_1/job_7_{index}.restart{restart}.exit").write_text(f"{rc}\n")
  started(0, 0, 1); exited(0, 0, 1)                  # restart 1 was killed (node failure): no record of its own
  started(1, 0, 1); exited(1, 0, 2); exited(1, 1, 1)
  started(2, 0, 1, tail="tinyperf run: error: data is gone\n"); exited(2, 0, 1); exited(2, 1, 2)
  exited(3, 0, 130)                                  # one attempt: no restart named
  got = {r["index"]: (r["state"], r["detail"]) for r in ST.set_states(work, {})["runs"]}
  assert all(state == "failed" for state, _ in got.values()), got
  assert got[0][1].startswith("task 7_0 ") and "restart 1" in got[0][1] and "restart 0 exited 1" in got[0][1] \
    and "exited 1 at" not in got[0][1], got[0][1]
  assert got[1][1].startswith("task 7_1 exited 1 at restart 1") and "restart 0 exited 2" in got[1][1] \
    and "run 1 failed at restart 1" in got[1][1], got[1][1]
  # restart 1 of task 2 never started its run: the ledger's attempt is restart 0's, not the one that failed last
  assert got[2][1].startswith("task 7_2 exited 2 at restart 1") and "tinyperf run: error: data is gone" \
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
  assert r["state"] == "running" and "5_0" in r["detail"] and "problem" not in r and r["result"] is None
  for ended in ({("5", 0): ("COMPLETING", "node1")}, {}):
    (r,) = ST.set_states(work, ended)["runs"]
    assert r["state"] == "broken" and "result_0.txt" in r["problem"]


def test_a_local_run_after_a_slurm_job(tmp_path):
  """Run 0 failed in Slurm job 5, then someone ran it locally: the local attempt is what counts. Its launcher (this
  process here) holds its claim: running; a launcher that is gone leaves a claim nobody holds: failed, said so."""
  work = _set(tmp_path, [L.Attempt(index=0, seed=1, status=L.FAILED, note="boom", slurm={"job": "5_0"}),
                         L.Attempt(index=0, seed=2, status=L.RUNNING, started=time.time(), owner=L.launcher()),
                         L.Attempt(index=1, seed=3, status=L.RUNNING, started=time.time(), owner={"pid": 9, "host": "h"})],
              [("5", [0], time.time() - 100, 1)])
  r, gone = ST.set_states(work, {})["runs"]
  assert (r["state"], r["job"], r["seed"]) == ("running", None, 2) and f"pid {L.launcher()['pid']}" in r["detail"]
  assert gone["state"] == "failed" and "pid 9 on h" in gone["detail"]


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
from tinyperf.tooling.common import ledger as L
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
from tinyperf.tooling.common import ledger as L
w = int(sys.argv[1])
for k in range(25): L.add_attempt({str(ledger)!r}, L.Attempt(index=w, seed=w * 1000 + k), nexp=8)
"""
  procs = [subprocess.Popen([sys.executable, "-c", code, str(w)], cwd=REPO) for w in range(8)]
  assert all(p.wait(timeout=120) == 0 for p in procs)
  seeds = [a.seed for a in L.Ledger(ledger).attempts]
  assert sorted(seeds) == sorted(w * 1000 + k for w in range(8) for k in range(25))


# --------------------------------------------------------------------------------------------------- bad input

@pytest.fixture
def smoke_args(tmp_path):
  data = tmp_path / "data"; data.mkdir(); (data / "manifest.json").write_text("{}")
  return ["run", "resnet", "--platform", "cpu_smoke", "--nexp", "2", "--data", str(data), "--results", str(tmp_path / "out")]


def test_no_sbatch_on_path(smoke_args, tmp_path):
  """A machine without Slurm's commands: a clear message before anything is written (PATH holds only Python)."""
  r = tinyperf(*smoke_args, "--scheduler", "slurm", "--runtime", "host", env={"PATH": str(Path(sys.executable).parent)})
  bad_input(r, "sbatch", "PATH")
  assert not (tmp_path / "out").exists()


def test_slurm_options_need_the_slurm_scheduler(smoke_args):
  bad_input(tinyperf(*smoke_args, "--runtime", "host", "--partition", "gpu"), "--partition", "--scheduler slurm")


def test_bad_slurm_options(smoke_args, tmp_path):
  bad_input(tinyperf(*smoke_args, "--scheduler", "slurm", "--runtime", "pyxis"), "--image", "enroot import")
  bad_input(tinyperf(*smoke_args, "--scheduler", "slurm", "--only-index", "1"), "--only-index", "--scheduler slurm")
  bad_input(tinyperf(*smoke_args, "--scheduler", "slurm", "--runtime", "host", "--sbatch-arg", "account=x"),
            "--sbatch-arg 'account=x'", "--sbatch-arg=--account=mlperf")
  bad_input(tinyperf(*smoke_args, "--runtime", "host", "--only-index", "2"), "--only-index 2", "0 to 1")
  # options the bookkeeping relies on: --job-name=mine had status call a queued run failed and offer --resume
  for own, name in (("--job-name=mine", "job-name"), ("--job=mine", "job-name"), ("-Jmine", "job-name"), ("--job-name mine", "job-name"),
                    ("--array=0-9", "array"), ("-o/tmp/x.out", "output"), ("--error=e.txt", "error"), ("--part=gpu", "partition"),
                    ("--open-mode=truncate", "open-mode")):
    bad_input(tinyperf(*smoke_args, "--scheduler", "slurm", "--runtime", "host", f"--sbatch-arg={own}"),
         f"--sbatch-arg {own!r}", f"--{name}")
  slurm_script.check_sbatch_arg("--exclusive=user"); slurm_script.check_sbatch_arg("--time=60"); slurm_script.check_sbatch_arg("-A mlperf")
  assert not (tmp_path / "out").exists()


def test_results_in_memory_are_not_shared():
  """/dev/shm is tmpfs on Linux: refused before any Slurm command or directory is made."""
  fstype, mnt = slurm_cluster.mount_of(Path("/dev/shm/tinyperf-never-created/out"))
  assert fstype == "tmpfs" and mnt == "/dev/shm"
  with pytest.raises(UserError, match=r"/dev/shm/tinyperf-never-created/out .*tmpfs.*/dev/shm"):
    slurm_cluster.check_shared(Path("/dev/shm/tinyperf-never-created/out"), "any", assume_shared=False)
  slurm_cluster.check_shared(Path("/dev/shm/x"), "any", assume_shared=True)   # the user says it is shared: believed
  assert not Path("/dev/shm/tinyperf-never-created").exists()


def test_results_on_a_local_disk():
  """A local disk (the repository's own filesystem) is fine when every node of the partition is this machine, and
  refused, naming the other nodes, when it is not."""
  import socket
  me = socket.gethostname()
  if slurm_cluster.mount_of(REPO)[0] in slurm_cluster.LOCAL_ONLY_FS | slurm_cluster.SHARED_FS: pytest.skip(f"the checkout is on {slurm_cluster.mount_of(REPO)[0]}, not a local disk")
  slurm_cluster.check_shared(REPO / "out", "one", False, nodes=[(me, me, "127.0.0.1")])
  with pytest.raises(UserError, match=r"partition gpu .*gpu01, gpu02.*--assume-shared"):
    slurm_cluster.check_shared(REPO / "out", "gpu", False, nodes=[(me, me, "10.0.0.1"), ("gpu01", "gpu01", "10.0.0.2"),
                                                      ("gpu02", "gpu02", "10.0.0.3")])


def test_paths_sbatch_cannot_carry():
  with pytest.raises(UserError, match="'%'"): slurm_script.check_path_chars("/shared/out%A", "none")
  with pytest.raises(UserError, match="' '"): slurm_script.check_path_chars("/shared/my out", "docker")
  with pytest.raises(UserError, match="','"): slurm_script.check_path_chars("/shared/a,b", "pyxis")
  slurm_script.check_path_chars("/shared/a,b", "none")


@pytest.mark.parametrize("poll", ["-1", "nan", "inf", "0", "soon"])
def test_status_poll_must_be_a_sane_interval(tmp_path, poll):
  """--poll -1, nan or inf ended `status --wait` in a ValueError/OverflowError traceback at its first sleep, and 0
  polled squeue in a tight loop."""
  r = tinyperf("status", "--results", str(tmp_path), "--wait", f"--poll={poll}")
  assert r.returncode == 2 and "Traceback" not in r.stderr and f"--poll: '{poll}'" in r.stderr, r.stderr


def test_status_without_result_sets(tmp_path):
  bad_input(tinyperf("status", "--results", str(tmp_path)), str(tmp_path))
  (tmp_path / "afile").write_text("")   # it said "afile/runs: no result sets"
  bad_input(tinyperf("status", "--results", str(tmp_path / "afile")), f"{tmp_path / 'afile'}:")
