"""`tinyperf run --scheduler slurm` and `tinyperf status` against a real Slurm cluster (no mocks): cpu_smoke runs as an
array job, a task killed with scancel, `--resume`, and bad input that a live cluster must refuse before submission.
The array/scancel/resume test runs the stand-in trainer (tests/stand_in_train.py: a valid MLPerf log in seconds; sbatch
hands the submitting shell's TINYPERF_TEST_TRAIN_MODULE to the tasks); the docker-runtime test is the one real toy-ResNet
run through Slurm.

Needs sbatch/squeue/sinfo talking to a cluster whose nodes see this machine's /tmp: `source scripts/ci_slurm.sh`
(root, Debian) makes a one-node cluster on localhost. Without one every test here skips with the reason; CI sets
TINYPERF_REQUIRE_SLURM=1, which turns the skip into a failure. On one node with --exclusive the array's tasks run one
after the other. The docker-runtime test also needs a Docker engine with a tinyperf CPU image already built
(TINYPERF_TEST_SLURM_IMAGE, else tinyperf:cpu or tinyperf-test:cpu): building one here would add minutes."""
from __future__ import annotations
import hashlib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.launch import slurm_cluster, slurm_record, status as ST
from tinyperf.tooling.launch.backends import TRAIN_MODULE_ENV

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("engines")]   # one worker: the Slurm docker-runtime test uses the CPU image the container tests build
TIMINGS: dict[str, float] = {}


def _unavailable(reason: str):
  if os.environ.get("TINYPERF_REQUIRE_SLURM") == "1": pytest.fail(reason)
  pytest.skip(reason)


def tinyperf(*args, env=None, timeout=600):
  return subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *map(str, args)], cwd=REPO, capture_output=True, text=True,
                        env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.fixture(scope="module")
def partition():
  if not shutil.which("sbatch"):
    _unavailable("sbatch is not on PATH; `source scripts/ci_slurm.sh` (root, Debian) starts a one-node cluster")
  r = subprocess.run(["sinfo", "--noheader", "--format=%P|%t"], capture_output=True, text=True, timeout=60)
  if r.returncode != 0: _unavailable(f"sinfo failed: {r.stderr.strip()}; is slurmctld up? (source scripts/ci_slurm.sh)")
  lines = [l.split("|") for l in r.stdout.split()]
  want = os.environ.get("TINYPERF_TEST_SLURM_PARTITION") or next((p.rstrip("*") for p, _ in lines if p.endswith("*")), None)
  if not any(p.rstrip("*") == want and s.rstrip("*~#") in ("idle", "mix", "alloc") for p, s in lines):
    _unavailable(f"no usable node in partition {want!r} (sinfo: {r.stdout.strip()})")
  yield want
  if TIMINGS: print("\nslurm test timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in TIMINGS.items()), file=sys.stderr)


@pytest.fixture(scope="module")
def smoke_data(tmp_path_factory):
  d = tmp_path_factory.mktemp("slurm") / "data"
  r = tinyperf("prep", "synthetic-imagenet", "--out", d, "--classes", "4", "--train-per-class", "160",
               "--val-per-class", "40", "--size", "48", "--seed", "0")
  assert r.returncode == 0, r.stderr
  return d


def _wait_for(pred, timeout: float, what: str, every: float = 2.0):
  t0 = time.time()
  while time.time() - t0 < timeout:
    v = pred()
    if v: return v
    time.sleep(every)
  raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _states(res: Path) -> dict[int, dict]:
  sets, _ = ST.collect(res)
  return {r["index"]: r for r in sets[0]["runs"]}


def _digest(p: Path): return hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns


def _alive_with(needle: str) -> list[str]:
  out = []
  for d in Path("/proc").iterdir():
    try: cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError: continue
    if needle in cmd and "pytest" not in cmd: out.append(f"{d.name}: {cmd[:200]}")
  return out


def _shared(path: Path) -> list[str]:
  # where /tmp is tmpfs (Debian 13's default), the one-node cluster still sees it: say so, as a user would
  return ["--assume-shared"] if slurm_cluster.mount_of(path)[0] in slurm_cluster.LOCAL_ONLY_FS else []


def _check_results(res: Path, n: int):
  for i in range(n):
    chk = tinyperf("check", res / f"results/cpu_smoke/resnet/result_{i}.txt")
    assert chk.returncode == 0 and "result log: ACCEPTED" in chk.stdout, chk.stdout + chk.stderr


def test_array_job_scancel_and_resume(partition, smoke_data, tmp_path):
  """Two cpu_smoke runs as one array job (bare Python on the node, the stand-in trainer, whose RUN sleeps 20 s). While
  they are queued, resubmitting submits nothing and a local run refuses. Task 1 is killed with scancel once its run has
  started: status says failed, run 0's result is untouched, and `status --resume --wait` redoes run 1 alone (fresh
  seed); both pass `tinyperf check`."""
  res = tmp_path / "res"
  work = res / "runs/cpu_smoke/resnet"
  cmd = ["run", "resnet", "--platform", "cpu_smoke", "--nexp", "2", "--data", smoke_data, "--results", res,
         "--scheduler", "slurm", "--partition", partition, *_shared(tmp_path), "--runtime", "host"]
  # sbatch exports the submitting environment to the tasks: the stand-in, and time in its RUN to scancel it
  stand_in = {TRAIN_MODULE_ENV: "tests.stand_in_train", "STAND_IN_RUN_S": "20"}
  t0 = time.time()
  r = tinyperf(*cmd, env=stand_in)
  assert r.returncode == 0 and "submitted Slurm job" in r.stdout, r.stdout + r.stderr
  (job,) = json.loads((work / "slurm.json").read_text())["jobs"]
  jid, script = job["job_id"], Path(job["script"])
  files = work / "slurm" / job["files"]   # the submission's own directory: a job id handed out again overwrites nothing
  assert job["indices"] == [0, 1] and job["files"] == "submission_1" and script == files / f"job_{jid}.sbatch"
  text = script.read_text()
  assert "#SBATCH --array=0-1" in text and "#SBATCH --exclusive" in text and f"#SBATCH --partition={partition}" in text
  assert " --runtime host " in text and "--only-index \"$SLURM_ARRAY_TASK_ID\"" in text

  # the same command again while both runs are queued or running: nothing new is submitted
  r = tinyperf(*cmd, env=stand_in)
  assert r.returncode == 0 and "nothing to submit" in r.stdout and "queued or running" in r.stdout, r.stdout + r.stderr
  assert len(json.loads((work / "slurm.json").read_text())["jobs"]) == 1
  # a local run of the same result set would do them twice: refused
  r = tinyperf(*cmd[:cmd.index("--scheduler")], "--runtime", "host", env=stand_in)
  assert r.returncode == 2 and "--wait" in r.stderr and "scancel" in r.stderr and "Traceback" not in r.stderr, r.stderr

  # run 0 finishes; run 1 starts (its attempt is in the ledger and its RUN has begun), then is cancelled
  def run1_started():
    st = _states(res)
    if st[0]["state"] != "done" or st[1]["state"] != "running": return None
    att = L.Ledger(work / "ledger.json").latest(1)
    if not att or att.slurm.get("job") != f"{jid}_1": return None
    return att if Path(att.output).is_file() and b"stand-in run" in Path(att.output).read_bytes() else None
  att1 = _wait_for(run1_started, 600, "run 0 done and run 1 inside its RUN")
  TIMINGS["run 0 + start of run 1"] = time.time() - t0
  assert att1.slurm["node"] and att1.slurm["runtime"] == "host"
  r0 = res / "results/cpu_smoke/resnet/result_0.txt"
  before = _digest(r0)
  subprocess.run(["scancel", f"{jid}_1"], check=True, timeout=60)
  _wait_for(lambda: _states(res)[1]["state"] == "failed", 180, "run 1 to be seen as failed after scancel")
  r = tinyperf("status", "--results", res)
  assert r.returncode == 1 and "--resume" in r.stdout, r.stdout + r.stderr
  line1 = next(l for l in r.stdout.splitlines() if l.strip().startswith("run 1 "))
  assert "failed" in line1 and f"task {jid}_1" in line1, r.stdout
  assert not list(files.glob(f"job_{jid}_1.*exit")), "a killed task leaves no exit record"
  assert (files / f"job_{jid}_0.restart0.exit").read_text().strip() == "0"
  # the killed run's training processes are gone with it
  _wait_for(lambda: not _alive_with(f"--seed {att1.seed} "), 60, f"run 1's processes (seed {att1.seed}) to end")
  led = L.Ledger(work / "ledger.json").attempts
  killed = [a for a in led if a.index == 1][0]
  # the launcher records SIGTERM when Slurm gives it time to; a stale 'running' is what SIGKILL leaves
  assert killed.status == L.INTERRUPTED and "SIGTERM" in killed.note or killed.status == L.RUNNING, killed

  t1 = time.time()
  r = tinyperf("status", "--results", res, "--resume", "--wait", "--poll", "5", timeout=600,
               env={**stand_in, "STAND_IN_RUN_S": "0"})   # the resubmitted task inherits this environment
  TIMINGS["resume run 1"] = time.time() - t1
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert "submitted Slurm job" in r.stdout and "runs [1] of 2" in r.stdout
  jobs = json.loads((work / "slurm.json").read_text())["jobs"]
  assert [j["indices"] for j in jobs] == [[0, 1], [1]] and "#SBATCH --array=1\n" in Path(jobs[1]["script"]).read_text()
  assert [j["files"] for j in jobs] == ["submission_1", "submission_2"]
  assert _digest(r0) == before, "a finished result is never touched by a resume"
  led = L.Ledger(work / "ledger.json").attempts
  assert [(a.index, a.status) for a in led][0] == (0, L.DONE) and [(a.index, a.status) for a in led][-1] == (1, L.DONE)
  assert len(led) == 3 and len({a.seed for a in led}) == 3
  assert [a.slurm["job"] for a in led] == [f"{jid}_0", f"{jid}_1", f"{jobs[1]['job_id']}_1"]
  _check_results(res, 2)
  # everything done: nothing left to submit, and status says so with exit 0
  r = tinyperf(*cmd, env=stand_in)
  assert r.returncode == 0 and "nothing to submit: 2 of 2 runs finished" in r.stdout, r.stdout + r.stderr
  r = tinyperf("status", "--results", res, "--json")
  assert r.returncode == 0 and [x["state"] for x in json.loads(r.stdout)["sets"][0]["runs"]] == ["done", "done"]


def test_a_requeued_task_keeps_its_first_attempt(partition, smoke_data, tmp_path):
  """`scontrol requeue` of a running task (what Slurm itself does after a node failure, with JobRequeue=1) runs it again
  under the same job id and index. Its second attempt truncated the task's .out (Slurm's default --open-mode) and took
  the one .exit name: the first attempt's output was gone. Now the output holds both attempts, each after a start line
  naming its SLURM_RESTART_COUNT; the killed attempt left no exit record and the second its own; the ledger has the
  interrupted attempt and the finished one, and status says done."""
  res = tmp_path / "res"
  work = res / "runs/cpu_smoke/resnet"
  r = tinyperf("run", "resnet", "--platform", "cpu_smoke", "--nexp", "1", "--data", smoke_data, "--results", res,
               "--scheduler", "slurm", "--partition", partition, *_shared(tmp_path), "--runtime", "host",
               env={TRAIN_MODULE_ENV: "tests.stand_in_train", "STAND_IN_RUN_S": "20"})
  assert r.returncode == 0 and "submitted Slurm job" in r.stdout, r.stdout + r.stderr
  (job,) = json.loads((work / "slurm.json").read_text())["jobs"]
  jid, files = job["job_id"], work / "slurm" / job["files"]
  try:
    def in_its_run():
      att = L.Ledger(work / "ledger.json").latest(0) if (work / "ledger.json").exists() else None
      return att if att and Path(att.output).is_file() and b"stand-in run" in Path(att.output).read_bytes() else None
    first = _wait_for(in_its_run, 600, "run 0 inside its RUN")
    subprocess.run(["scontrol", "requeue", f"{jid}_0"], check=True, timeout=60)
    # a requeued job becomes eligible 2 minutes later (Slurm's own delay): start it now
    _wait_for(lambda: slurm_cluster.queue(job["job_name"]).get((jid, 0), ("",))[0] == "PENDING", 120,
              "the task to be queued again")
    subprocess.run(["scontrol", "update", f"JobId={jid}_0", "StartTime=now"], check=True, timeout=60)
    r = tinyperf("status", "--results", res, "--wait", "--poll", "2", timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  finally:
    subprocess.run(["scancel", jid], timeout=60)
  out = (files / f"job_{jid}_0.out").read_text()
  starts = [k for k, l in enumerate(out.splitlines()) if l.startswith(f"==== tinyperf: Slurm task {jid}_0, restart ")]
  lines = out.splitlines()
  assert [lines[k].split(", ")[1].split(" (")[0] for k in starts] == ["restart 0", "restart 1"], out
  assert "(SLURM_RESTART_COUNT=1)" in lines[starts[1]], out
  assert any(f"(seed {first.seed})" in l for l in lines[starts[0]:starts[1]]), "the first attempt's output is kept"
  assert sorted(p.name for p in files.glob("*.exit")) == [f"job_{jid}_0.restart1.exit"]   # the killed one left none
  assert (files / f"job_{jid}_0.restart1.exit").read_text() == "0\n"
  led = L.Ledger(work / "ledger.json").attempts
  assert [(a.seed, a.slurm.get("restart")) for a in led][0] == (first.seed, None) and led[0].status in (L.INTERRUPTED, L.RUNNING)
  assert (led[-1].status, led[-1].slurm["job"], led[-1].slurm.get("restart")) == (L.DONE, f"{jid}_0", 1), led
  _check_results(res, 1)


def _jobs_running(prefix: Path) -> dict[str, set[str]]:
  """Job id -> commands of the user's jobs (any state squeue remembers) whose command, the script sbatch was given,
  is under prefix."""
  out = subprocess.run(["squeue", "--me", "--noheader", "--states=all", "--format=%F|%o"], capture_output=True,
                       text=True, timeout=60, check=True).stdout
  jobs = {}
  for line in out.splitlines():
    job, cmd = line.strip().split("|", 1)
    if cmd.startswith(f"{prefix}/"): jobs.setdefault(job, set()).add(cmd)
  return jobs


def test_a_submission_stopped_after_sbatch_queued_its_job_is_adopted_not_submitted_twice(partition, smoke_data, tmp_path):
  """Ctrl-C after the real sbatch had queued the job but before tinyperf had its id (its answer had not come back:
  here a wrapper runs the real sbatch, then waits as a slow answer would, and the Ctrl-C goes to the process group
  as a terminal's does). The rerun of the same command submitted the runs again: two jobs writing one result. Now it
  finds the job in squeue by its command (%o, the kept script's path), records it, submits nothing; the job (held
  until then) runs each run once."""
  import signal
  res, bin_ = tmp_path / "res", tmp_path / "bin"
  work = res / "runs/cpu_smoke/resnet"
  bin_.mkdir()
  answered = tmp_path / "sbatch-answered"   # the job id the real sbatch printed, which tinyperf never reads
  (bin_ / "sbatch").write_text(f"#!/bin/sh\n{shutil.which('sbatch')} \"$@\" > {answered}.tmp && mv {answered}.tmp "
                               f"{answered}\nexec sleep 300\n")
  (bin_ / "sbatch").chmod(0o755)
  cmd = ["run", "resnet", "--platform", "cpu_smoke", "--nexp", "1", "--data", smoke_data, "--results", res,
         "--scheduler", "slurm", "--partition", partition, *_shared(tmp_path), "--runtime", "host", "--sbatch-arg=--hold"]
  stand_in = {TRAIN_MODULE_ENV: "tests.stand_in_train", "STAND_IN_RUN_S": "0"}
  p = subprocess.Popen([sys.executable, "-m", "tinyperf.tooling.cli", *map(str, cmd)], cwd=REPO, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, start_new_session=True,
                       env={**os.environ, **stand_in, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"},
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  jid = None
  try:
    _wait_for(lambda: answered.exists() or p.poll() is not None, 300, "the real sbatch to queue the job")
    assert p.poll() is None, p.communicate()
    jid = answered.read_text().strip().split(";")[0]
    os.killpg(p.pid, signal.SIGINT)
    _, stderr = p.communicate(timeout=60)
    assert p.returncode == 130 and "Slurm may have queued it" in stderr and "Traceback" not in stderr, stderr
    assert not (work / "slurm.json").exists(), "tinyperf had no job id to record"
    (kept,) = slurm_record.kept_scripts(work)
    # what squeue's %o prints for a batch job: the script path exactly as sbatch was given it
    assert _jobs_running(res) == {jid: {str(kept)}}

    r = tinyperf(*cmd, env=stand_in)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"adopted Slurm job {jid} (runs [0], PENDING)" in r.stdout and "nothing to submit" in r.stdout, r.stdout
    (job,) = json.loads((work / "slurm.json").read_text())["jobs"]
    assert (job["job_id"], job["indices"]) == (jid, [0]) and Path(job["script"]).name == f"job_{jid}.sbatch"
    assert Path(job["script"]).is_file() and not slurm_record.kept_scripts(work)
    assert list(_jobs_running(res)) == [jid], "one job for the run, the adopted one"
    r = tinyperf("status", "--results", res)
    assert "run 0   pending  task " + f"{jid}_0 PENDING (JobHeldUser" in r.stdout and "WARNING" not in r.stderr, r.stdout + r.stderr

    subprocess.run(["scontrol", "release", jid], check=True, timeout=60)
    r = tinyperf("status", "--results", res, "--wait", "--poll", "2", timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  finally:
    if p.poll() is None: os.killpg(p.pid, signal.SIGKILL); p.wait()
    if jid: subprocess.run(["scancel", jid], timeout=60)
  led = L.Ledger(work / "ledger.json").attempts
  assert [(a.index, a.status, a.slurm["job"]) for a in led] == [(0, L.DONE, f"{jid}_0")], led
  _check_results(res, 1)
  r = tinyperf(*cmd, env=stand_in)
  assert r.returncode == 0 and "nothing to submit: 1 of 1 runs finished" in r.stdout, r.stdout + r.stderr
  assert list(_jobs_running(res)) == [jid]


def _cpu_image() -> str | None:
  try:
    import docker
    c = docker.DockerClient(base_url=os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock", timeout=60)
    c.ping()
  except Exception:
    return None
  for tag in filter(None, (os.environ.get("TINYPERF_TEST_SLURM_IMAGE"), "tinyperf:cpu", "tinyperf-test:cpu")):
    try:
      c.images.get(tag); return tag
    except Exception:
      pass
  return None


def test_array_job_docker_runtime(partition, smoke_data, tmp_path):
  """The one real toy-ResNet run through Slurm: an array task running its run in the platform's image on the node's
  Docker engine (the array of several tasks, scancel and resume are test_array_job_scancel_and_resume's)."""
  image = _cpu_image()
  if image is None:
    if os.environ.get("TINYPERF_REQUIRE_DOCKER") == "1":   # CI: the engine is up and test_containers.py left its image
      pytest.fail("TINYPERF_REQUIRE_DOCKER=1 but no tinyperf CPU image is on the engine (test_containers.py keeps "
                  "tinyperf-test:cpu when TINYPERF_REQUIRE_SLURM=1)")
    pytest.skip("no Docker engine with a tinyperf CPU image (TINYPERF_TEST_SLURM_IMAGE, tinyperf:cpu or "
                "tinyperf-test:cpu); `tinyperf build --vendor cpu` makes one. The docker sbatch script is unit-tested.")
  res = tmp_path / "res"
  t0 = time.time()
  r = tinyperf("run", "resnet", "--platform", "cpu_smoke", "--nexp", "1", "--data", smoke_data, "--results", res,
               "--scheduler", "slurm", "--partition", partition, *_shared(tmp_path), "--runtime", "docker",
               "--image", image)
  assert r.returncode == 0 and "docker runtime" in r.stdout, r.stdout + r.stderr
  r = tinyperf("status", "--results", res, "--wait", "--poll", "5", timeout=1800)
  TIMINGS["docker runtime, 1 real run"] = time.time() - t0
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  led = L.Ledger(res / "runs/cpu_smoke/resnet/ledger.json").attempts
  assert [(a.index, a.status, a.backend) for a in led] == [(0, L.DONE, "container")]
  assert all(a.image.startswith(image) and a.slurm["runtime"] == "docker" and a.slurm["image"] == image for a in led)
  assert all(a.slurm["job"].endswith("_0") and a.slurm["node"] for a in led)
  # a real run: INIT filled the kernel cache on the run's own volume, and the launcher's page-cache method is logged
  assert list((res / led[0].output).parent.glob("cache/tinygrad.db*"))
  assert f'"method": "{led[0].cache_drop}"' in (res / "results/cpu_smoke/resnet/result_0.txt").read_text()
  _check_results(res, 1)


def test_sbatch_arg_reaches_sbatch_verbatim(partition, smoke_data, tmp_path):
  """An --sbatch-arg value with spaces, quotes, a backslash and '#' is the one option sbatch gets (sbatch split it at
  the spaces and refused the job, or cut it at '#' silently); '--time 45' (option and value apart) still works.
  --hold keeps the job from running; it is cancelled."""
  res, comment = tmp_path / "res", "audit \"run\" #1, it's a\\b"
  r = tinyperf("run", "resnet", "--platform", "cpu_smoke", "--nexp", "1", "--data", smoke_data, "--results", res,
               "--scheduler", "slurm", "--partition", partition, *_shared(tmp_path), "--runtime", "host",
               "--sbatch-arg=--hold", f"--sbatch-arg=--comment={comment}", "--sbatch-arg=--time 45")
  assert r.returncode == 0 and "submitted Slurm job" in r.stdout, r.stdout + r.stderr
  (job,) = json.loads((res / "runs/cpu_smoke/resnet/slurm.json").read_text())["jobs"]
  try:
    q = subprocess.run(["squeue", "--noheader", f"--jobs={job['job_id']}", "--format=%l|%k"], capture_output=True,
                       text=True, timeout=60)
    assert q.stdout.strip() == f"45:00|{comment}", q.stdout + q.stderr   # an option and its value given apart work too
  finally:
    subprocess.run(["scancel", job["job_id"]], timeout=60)


def test_wait_names_a_held_run_and_the_command_that_releases_it(partition, smoke_data, tmp_path):
  """`status --wait` on a held task printed '1 pending' and blocked with no hint. Its progress line gives squeue's
  reason and the command that releases the task; typed in a shell, that command releases it (--begin keeps it queued,
  with the new reason)."""
  res = tmp_path / "res"
  r = tinyperf("run", "resnet", "--platform", "cpu_smoke", "--nexp", "1", "--data", smoke_data, "--results", res,
               "--scheduler", "slurm", "--partition", partition, *_shared(tmp_path), "--runtime", "host",
               "--sbatch-arg=--hold", "--sbatch-arg=--begin=now+1hour")
  assert r.returncode == 0 and "submitted Slurm job" in r.stdout, r.stdout + r.stderr
  (job,) = json.loads((res / "runs/cpu_smoke/resnet/slurm.json").read_text())["jobs"]
  jid, lines = job["job_id"], queue.Queue()
  wait = subprocess.Popen([sys.executable, "-m", "tinyperf.tooling.cli", "status", "--results", str(res), "--wait", "--poll", "1"],
                          cwd=REPO, stdout=subprocess.PIPE, text=True)
  threading.Thread(target=lambda: [lines.put(l) for l in wait.stdout], daemon=True).start()
  def line_with(needle):
    seen = []
    while not any(needle in l for l in seen): seen.append(lines.get(timeout=90))
    return seen[-1]
  try:
    held = line_with("pending (")
    assert held.endswith(f" resnet/cpu_smoke: 1 pending (run 0: JobHeldUser, held until `scontrol release {jid}_0`)\n"), held
    subprocess.run(held.split("`")[1], shell=True, check=True, timeout=60)
    line_with("1 pending (run 0: BeginTime)")
    assert wait.poll() is None, "--wait keeps waiting: it has no time limit of its own"
  finally:
    wait.kill(); wait.wait()
    subprocess.run(["scancel", jid], timeout=60)


def test_bad_input_on_a_live_cluster(partition, smoke_data, tmp_path):
  """Refused before submission, exit 2, one paragraph, nothing queued or recorded."""
  def jobs_named():
    return subprocess.run(["squeue", "--noheader", "--name=tinyperf-resnet-cpu_smoke", "--format=%i"], capture_output=True,
                          text=True, timeout=60).stdout.split()
  before = jobs_named()
  base = ["run", "resnet", "--platform", "cpu_smoke", "--nexp", "2", "--data", smoke_data, "--scheduler", "slurm",
          "--runtime", "host"]
  def bad(r, *needles):
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    for n in needles: assert n in r.stderr, r.stderr

  bad(tinyperf(*base, "--results", tmp_path / "a", "--partition", "no-such-partition"),
      "'no-such-partition'", partition)
  shm = Path("/dev/shm") / f"tinyperf-test-{os.getpid()}"
  bad(tinyperf(*base, "--results", shm / "out", "--partition", partition), str(shm / "out"), "tmpfs", "NFS")
  bad(tinyperf(*base, "--data", tmp_path / "no-data", "--results", tmp_path / "b", "--partition", partition),
      str(tmp_path / "no-data"))
  assert not shm.exists()
  # a request no node can satisfy: sbatch itself refuses it at submission, and nothing is left behind
  bad(tinyperf(*base, "--results", tmp_path / "c", "--partition", partition, *_shared(tmp_path),
              "--sbatch-arg=--gpus-per-node=1"),
      "sbatch", "--array=0-1 --nodes=1", f"--partition={partition} --gpus-per-node=1", "--sbatch-arg")
  assert not (tmp_path / "c").exists(), "a refused submission removes the directories and locks it created"
  # a first submission has no record for `status --resume` to resubmit: the message does not point there; what was
  # there before stays, and only that
  (tmp_path / "c/runs/cpu_smoke").mkdir(parents=True)
  r = tinyperf(*base, "--results", tmp_path / "c", "--partition", partition, *_shared(tmp_path), "--sbatch-arg=--gpus-per-node=1")
  assert "status --resume" not in r.stderr, r.stderr
  assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "c").rglob("*")) == [Path("c/runs"), Path("c/runs/cpu_smoke")]
  # two options in one --sbatch-arg would reach sbatch as one value: refused before anything is asked of Slurm
  bad(tinyperf(*base, "--results", tmp_path / "d", "--sbatch-arg=--account=a --qos=b"), "--sbatch-arg '--account=a --qos=b'")
  assert not (tmp_path / "d").exists()
  assert jobs_named() == before
