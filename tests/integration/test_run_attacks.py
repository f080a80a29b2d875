"""`tinyperf run` attacked as a clumsy or hostile user would: two launchers on one --results, kill -9, SIGHUP, a full
disk at the result write and mid-INIT, deleted/changed/symlinked result files, a run inside an image. The launcher is
real (`python -m tinyperf.tooling.cli run ... --runtime host`: preflight, system record, ledger, check); the trainer is the
stand-in (tests/stand_in_train.py, selected with TINYPERF_TEST_TRAIN_MODULE), so each run takes a second."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tinyperf.benchmarks.common.io import file_digest
from tinyperf.tooling.launch.backends import TRAIN_MODULE_ENV

pytestmark = pytest.mark.integration
BM, PLATFORM = "resnet", "cpu_smoke"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  d = tmp_path_factory.mktemp("attacks") / "data"
  r = subprocess.run([sys.executable, "-m", "tinyperf.benchmarks.resnet.prep", "synthetic-imagenet", "--out", str(d), "--classes",
                      "4", "--train-per-class", "2", "--val-per-class", "1", "--size", "16", "--seed", "0"],
                     cwd=REPO, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  return d


def _env(**kw):
  return {**os.environ, "PYTHONUNBUFFERED": "1", TRAIN_MODULE_ENV: "tests.stand_in_train", **kw}


def _cmd(data, out, nexp=1, extra=()):
  return [sys.executable, "-m", "tinyperf.tooling.cli", "run", BM, "--platform", PLATFORM, "--nexp", str(nexp), "--data",
          str(data), "--results", str(out), "--runtime", "host", *extra]


def _run(data, out, nexp=1, timeout=300, ns=(), **env):
  return subprocess.run([*ns, *_cmd(data, out, nexp)], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                        env=_env(**env))


def _start(data, out, nexp=1, ns=(), **env):
  return subprocess.Popen([*ns, *_cmd(data, out, nexp)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=_env(**env), start_new_session=True,
                          # a suite started in the background of a script inherits SIGINT ignored; a terminal has it
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _work(out): return out / "runs" / PLATFORM / BM
def _attempts(out): return json.loads((_work(out) / "ledger.json").read_text())["attempts"]
def _result(out, i): return out / "results" / PLATFORM / BM / f"result_{i}.txt"


def _wait_for(cond, timeout=120):
  t = time.time()
  while not cond():
    assert time.time() - t < timeout, "timed out"
    time.sleep(0.2)


def _gone(pid):
  try: os.kill(pid, 0)
  except ProcessLookupError: return True
  return open(f"/proc/{pid}/stat").read().split()[2] == "Z"   # a zombie waiting for its parent is dead too


def test_two_launchers_on_one_results_finish_every_run_exactly_once(data, tmp_path):
  out = tmp_path / "out"
  a = _start(data, out, nexp=3, STAND_IN_RUN_S="3")
  _wait_for(lambda: (_work(out) / "ledger.json").exists())   # A has claimed run 0
  b = _start(data, out, nexp=3, STAND_IN_RUN_S="3")
  (_, ae), (bo, be) = a.communicate(timeout=300), b.communicate(timeout=300)
  atts = _attempts(out)
  assert sorted(x["index"] for x in atts) == [0, 1, 2] and {x["status"] for x in atts} == {"done"}, atts
  assert len({x["seed"] for x in atts}) == 3
  for x in atts: assert file_digest(_result(out, x["index"]), "sha256") == x["sha256"]
  assert {a.returncode, b.returncode} <= {0, 1} and 0 in (a.returncode, b.returncode), ae + be
  assert "Traceback" not in ae + be
  if 1 in (a.returncode, b.returncode): assert re.search(r"\bpid \d+", ae + be), ae + be
  assert re.search(rf"\brun 0\b.*\bpid {a.pid}\b", bo), bo   # B said which run it left to A, and to whom
  r = _run(data, out, nexp=3)
  assert r.returncode == 0 and "3 already finished" in r.stdout and len(_attempts(out)) == 3


@pytest.mark.parametrize("sig,why", [(signal.SIGHUP, "SIGHUP"), (signal.SIGINT, "Ctrl-C")])
def test_sighup_or_ctrl_c_records_the_run_interrupted(data, tmp_path, sig, why):
  out = tmp_path / "out"
  p = _start(data, out, STAND_IN_RUN_S="60")
  _wait_for(lambda: any(b"stand-in run" in f.read_bytes() for f in _work(out).glob("run_0_*/output.log")))
  stand_in = int(next(_work(out).glob("run_0_*/output.log")).read_text().split("stand-in run: pid ")[1].split(",")[0])
  p.send_signal(sig)
  _, err = p.communicate(timeout=60)
  assert p.returncode == 130 and "Traceback" not in err
  (att,) = _attempts(out)
  assert att["status"] == "interrupted" and why in att["note"]
  _wait_for(lambda: _gone(stand_in), timeout=10)   # the run's processes went with it


@pytest.fixture
def private_shm():
  """(command prefix, /dev/shm as the test sees it) for a /dev/shm of this test's own: a mount namespace held by a
  `sleep` with a tmpfs there. Every launcher removes the rings of dead runs it finds, so one started by a test on
  another worker would take this test's leaked ring before this test's next start could (CI, stop 24)."""
  holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                             "mount -t tmpfs -o size=16m tmpfs /dev/shm && echo ok && exec sleep 600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  if holder.stdout.readline().strip() != "ok":
    holder.kill(); pytest.skip(f"cannot make a private /dev/shm here (needs root): {holder.communicate()[1].strip()}")
  yield ["nsenter", "-t", str(holder.pid), "-m", "--"], Path(f"/proc/{holder.pid}/root/dev/shm")
  holder.kill(); holder.wait()


def test_kill_9_of_the_launcher_takes_its_children_and_the_next_start_settles_it(data, tmp_path, private_shm):
  (ns, shm), out, child_pid = private_shm, tmp_path / "out", tmp_path / "child.pid"
  p = _start(data, out, ns=ns, STAND_IN_RUN_S="120", STAND_IN_CHILD=str(child_pid), STAND_IN_RING="1")
  _wait_for(lambda: child_pid.exists() and child_pid.read_text())
  out_log = next(_work(out).glob("run_0_*/output.log"))
  _wait_for(lambda: b"ring tinyperf_" in out_log.read_bytes())
  ring = out_log.read_text().split("ring ", 1)[1].split()[0]
  assert (shm / ring).exists() and not Path("/dev/shm", ring).exists()   # in the private /dev/shm only
  os.kill(p.pid, signal.SIGKILL); p.wait()
  grandchild = int(child_pid.read_text())
  _wait_for(lambda: _gone(grandchild), timeout=10)        # the watchdog killed the run's whole process group
  assert _attempts(out)[0]["status"] == "running"          # nobody recorded anything: the next start must
  assert (shm / ring).exists()                             # nobody removed the ring either
  r = _run(data, out, ns=ns)
  assert r.returncode == 0, r.stderr
  assert f"removed /dev/shm/{ring}" in r.stderr and not (shm / ring).exists(), r.stderr
  assert "pid " in r.stderr and "interrupted" in r.stderr, r.stderr    # the dead launcher, and the status recorded
  first, second = _attempts(out)
  assert first["status"] == "interrupted" and second["status"] == "done" and first["seed"] != second["seed"]


def _mount_tmpfs(where: Path, size: str):
  where.mkdir(parents=True, exist_ok=True)
  r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True)
  if r.returncode != 0: pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")


def test_disk_full_at_the_result_write_keeps_the_run_and_the_rerun_copies_it(data, tmp_path):
  out = tmp_path / "out"
  res_dir = _result(out, 0).parent
  _mount_tmpfs(res_dir, "4k")                               # too small for one result log
  try:
    r = _run(data, out)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert str(_result(out, 0)) in r.stderr, r.stderr             # the result log it could not write
    (att,) = _attempts(out)
    assert att["status"] == "done" and not os.path.lexists(_result(out, 0))
    st = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "status", "--results", str(out)], cwd=REPO,
                        capture_output=True, text=True)
    assert st.returncode == 1 and "NOT COPIED YET" in st.stdout
  finally:
    subprocess.run(["umount", str(res_dir)])
  r = _run(data, out)
  assert r.returncode == 0 and str(_result(out, 0)) in r.stderr, r.stderr
  (again,) = _attempts(out)
  assert again["seed"] == att["seed"] and file_digest(_result(out, 0), "sha256") == att["sha256"]


def test_disk_full_mid_init_is_one_message_and_the_run_is_redone(data, tmp_path):
  out = tmp_path / "out"
  (out / "results").mkdir(parents=True)
  _mount_tmpfs(_work(out), "64k")
  try:
    # the disk fills after preflight's free-space check (another job writing): that check is told to pass
    r = _run(data, out, STAND_IN_SPAM=str(400_000), TINYPERF_MIN_FREE_GB="0")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "No space left on device" in r.stderr, r.stderr
    subprocess.run(["mount", "-o", "remount,size=16m", str(_work(out))], check=True)
    r = _run(data, out, TINYPERF_MIN_FREE_GB="0")
    assert r.returncode == 0, r.stderr
    atts = _attempts(out)
    assert [a["status"] for a in atts] in (["failed", "done"], ["interrupted", "done"])
  finally:
    subprocess.run(["umount", str(_work(out))])


def test_a_crash_of_the_data_pipeline_during_run_is_a_failed_attempt_redone_on_rerun(data, tmp_path):
  # /dev/shm full (or a corrupt JPEG found late) after run_start: the log ends with run_stop aborted, which was
  # recorded as a finished run that missed the target, never redone; `run` exited 0 on an open config
  out = tmp_path / "out"
  r = _run(data, out, STAND_IN_CRASH="1")
  assert r.returncode == 1 and "[0]" in r.stderr, r.stderr            # the run not finished
  (att,) = _attempts(out)
  assert att["status"] == "failed" and "No space left on device" in att["note"], att
  assert not _result(out, 0).exists()
  r = _run(data, out)
  assert r.returncode == 0, r.stderr
  first, again = _attempts(out)
  assert first["status"] == "failed" and again["status"] == "done" and again["seed"] != first["seed"]


def test_a_set_of_a_billion_runs_is_refused_at_once(data, tmp_path):
  # it grew the launcher to 2.3 GB of pending run numbers, silently
  r = _run(data, tmp_path / "out", nexp=10 ** 9, timeout=60)
  assert r.returncode == 2 and "Traceback" not in r.stderr and "--nexp 1000000000" in r.stderr, r.stderr
  assert not (tmp_path / "out").exists()


def test_deleted_or_changed_result_files_are_said_loudly(data, tmp_path):
  """...and a run in a tinyperf image (a compose service) records backend container, the image and its digest."""
  out = tmp_path / "out"
  r = _run(data, out, nexp=2, TINYPERF_IMAGE_VENDOR="cpu", TINYPERF_IMAGE="tinyperf:cpu",
           TINYPERF_BASE_DIGEST="sha256:" + "ab" * 32)
  assert r.returncode == 0, r.stderr
  a0, a1 = _attempts(out)
  assert a0["backend"] == "container" and a0["image"] == "tinyperf:cpu" and a0["cache_drop"]
  assert a0["provenance"]["TINYPERF_BASE_DIGEST"] == "sha256:" + "ab" * 32
  assert a0["result"] == f"results/{PLATFORM}/{BM}/result_0.txt"   # relative to the results root: host paths on read
  _result(out, 1).unlink()                                          # its own log is still there: run copies it again
  r = _run(data, out, nexp=2)
  assert r.returncode == 0 and str(_result(out, 1)) in r.stderr and file_digest(_result(out, 1), "sha256") == a1["sha256"]
  _result(out, 1).unlink(); (_work(out) / f"run_1_{a1['seed']}" / "mlperf.txt").unlink()
  _result(out, 0).write_text(_result(out, 0).read_text() + "\n")
  st = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "status", "--results", str(out)], cwd=REPO,
                      capture_output=True, text=True)
  assert st.returncode == 1 and "MISSING" in st.stderr and "CHANGED" in st.stderr and "broken" in st.stdout
  assert str(_result(out, 0)) in st.stdout
  r = _run(data, out, nexp=2)
  assert r.returncode == 1 and "MISSING" in r.stderr and "CHANGED" in r.stderr and "Traceback" not in r.stderr
  assert len(_attempts(out)) == 2                                   # nothing redone, nothing overwritten


def test_a_dangling_symlink_at_a_result_is_refused_before_the_run(data, tmp_path):
  out = tmp_path / "out"
  _result(out, 0).parent.mkdir(parents=True)
  _result(out, 0).symlink_to(tmp_path / "nowhere")
  r = _run(data, out)
  assert r.returncode == 2 and str(_result(out, 0)) in r.stderr and "Traceback" not in r.stderr
  assert not (_work(out) / "ledger.json").exists() or _attempts(out) == []


def test_a_slurm_task_names_the_command_that_redoes_its_run(data, tmp_path):
  """A Slurm array task runs `tinyperf run ... --only-index I`, which nobody types: its failed run is redone with the
  set's `status --resume` (it said "rerun the same command"). The same run outside a task still says that."""
  out, task = tmp_path / "out space", {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_JOB_ID": "9", "SLURM_JOB_ID": "10",
                                       "TINYPERF_SLURM_RUNTIME": "host"}
  fail = {TRAIN_MODULE_ENV: "tests.no_such_trainer"}
  r = subprocess.run(_cmd(data, out, extra=("--only-index", "0")), cwd=REPO, capture_output=True, text=True,
                     timeout=300, env=_env(**task, **fail))
  assert r.returncode == 1 and f"`tinyperf status --results '{out}' --resume`" in r.stderr, r.stderr   # the set's fix
  r = subprocess.run(_cmd(data, out, extra=("--only-index", "0")), cwd=REPO, capture_output=True, text=True,
                     timeout=300, env=_env(**fail))
  assert r.returncode == 1 and "[0]" in r.stderr and "tinyperf status" not in r.stderr, r.stderr


def test_the_overrides_a_run_used_are_in_the_ledger(data, tmp_path):
  """A set whose runs differ in a knob is caught by `check` (hyperparameters); the ledger says which run was changed."""
  out = tmp_path / "R"
  p = _run(data, out, EVAL_BS="32")
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
  (a,) = _attempts(out)
  assert a["overrides"] == {"EVAL_BS": [64, 32]}


def test_org_reaches_the_logs_and_the_system_record(data, tmp_path):
  """`run --org demo` records demo as the systems JSON's submitter, as the logs' submission_org (the real entrypoint:
  test_report_smoke), so package --org demo and check warn about nothing."""
  out = tmp_path / "R"
  p = subprocess.run(_cmd(data, out, extra=("--org", "demo")), cwd=REPO, capture_output=True, text=True, timeout=300,
                     env=_env())
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
  assert json.loads((out / "systems" / f"{PLATFORM}.json").read_text())["submitter"] == "demo"


COUNTING = r"""
import atexit, collections, json, os, sys
seen = collections.Counter()
def hook(event, args):
  if event == "open" and isinstance(args[0], (str, os.PathLike)) and str(args[0]).endswith("config.yaml"): seen["yaml " + str(args[0])] += 1
  elif event == "subprocess.Popen": seen["argv " + " ".join(map(str, args[1] or ()))] += 1
sys.addaudithook(hook)
atexit.register(lambda: print("COUNTS " + json.dumps(seen), file=sys.stderr))
from tinyperf.tooling.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_one_launch_parses_each_config_once_and_preflights_once(data, tmp_path):
  """The launcher parses a platform's config.yaml once, runs one preflight, and hands each of the N runs its resolved
  config.json: no hop re-reads the YAML (issue 44's walk of --platform)."""
  out, nexp = tmp_path / "out", 3
  r = subprocess.run([sys.executable, "-c", COUNTING, *_cmd(data, out, nexp)[3:]], cwd=REPO, capture_output=True,
                     text=True, timeout=300, env=_env())
  assert r.returncode == 0, r.stderr
  counts = json.loads(r.stderr.rsplit("COUNTS ", 1)[1])
  yamls = {k: v for k, v in counts.items() if k.startswith("yaml ")}
  assert any(f"/{BM}/implementations/{PLATFORM}/config.yaml" in k for k in yamls), yamls
  assert set(yamls.values()) == {1}, yamls                       # each config file parsed once in this process
  argvs = [k for k in counts if k.startswith("argv ")]
  assert sum(counts[k] for k in argvs if "tinyperf.benchmarks.preflight" in k) == 1, argvs
  trainers = [k for k in argvs if "tests.stand_in_train" in k]
  assert sum(counts[k] for k in trainers) == nexp, argvs
  assert all("--work" in k and "--platform" in k for k in trainers)
  assert len(list(_work(out).glob("run_*/config.json"))) == nexp
