"""The run ledger under attack: stale attempts, dead launchers, moved results roots, changed or deleted result files,
an exhausted seed space. Real files and real POSIX locks (a second process holds a claim)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO

from mllog_builder import write_log
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common.errors import UserError
from tinyperf.tooling.common.results_tree import refuse_unknown_results
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.launch.run import missed_target
from tinyperf.benchmarks.common.io import file_digest


def _ledger(root, attempts):
  path = root / "runs" / "sys1" / "resnet" / "ledger.json"
  nexp = max((a.index for a in attempts), default=0) + 1   # the set size `tinyperf run` records
  for a in attempts: L.add_attempt(path, a, nexp=nexp)
  return path


def _finished_log(led: L.Ledger, att: L.Attempt, status="success"):
  run = led.run_dir(att); run.path.mkdir(parents=True, exist_ok=True)
  write_log(run.log, "resnet", seed=att.seed, status=status)
  return run.log


def test_a_stale_later_attempt_never_hides_a_done_one(tmp_path):
  path = _ledger(tmp_path, [L.Attempt(index=0, seed=1, status=L.DONE), L.Attempt(index=0, seed=2, status=L.INTERRUPTED)])
  led = L.Ledger(path)
  assert led.latest(0).seed == 1 and led.pending(1) == []


def test_dead_launchers_running_attempt_is_interrupted_with_one_line(tmp_path):
  path = _ledger(tmp_path, [L.Attempt(index=0, seed=5, owner={"id": "x", "host": "h1", "pid": 999999})])
  (path.parent / "run_0_5").mkdir()
  (path.parent / "run_0_5" / L.CLAIM).write_text("")   # a claim file nobody holds: its owner died
  led = L.Ledger(path)
  assert led.claimed(1) == {}
  (msg,) = led.settle()
  assert "pid 999999 on h1" in msg and "interrupted" in msg and "\n" not in msg
  assert led.latest(0).status == L.INTERRUPTED and led.pending(1) == [0]


def test_a_live_claim_is_respected_and_taken_over_once_its_owner_dies(tmp_path):
  path = _ledger(tmp_path, [L.Attempt(index=0, seed=5, owner={"id": "other", "host": "h", "pid": 1})])
  work = path.parent / "run_0_5"; work.mkdir()
  holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, '.'); from tinyperf.tooling.common.ledger import Claim; "
                             f"c = Claim({str(work)!r}); print('held', flush=True); sys.stdin.read()"],
                            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    led = L.Ledger(path)
    assert list(led.claimed(1)) == [0] and led.settle() == []
  finally:
    holder.kill(); holder.wait()
  led = L.Ledger(path)
  assert led.claimed(1) == {} and led.settle() and led.latest(0).status == L.INTERRUPTED


def test_a_dead_launchers_finished_log_is_recorded_done_not_redone(tmp_path):
  path = _ledger(tmp_path, [L.Attempt(index=0, seed=7, owner={"id": "x", "host": "h", "pid": 999999})])
  led = L.Ledger(path)
  log = _finished_log(led, led.latest(0), status="aborted")
  (msg,) = led.settle()
  att = led.latest(0)
  assert msg.startswith("run 0 (seed 7):") and att.status == L.DONE and att.converged is False
  assert att.sha256 == file_digest(log, "sha256") and att.result.endswith("results/sys1/resnet/result_0.txt")
  assert led.pending(1) == [] and led.check_result(att)[0] == "copy"   # its copy is what is left to do


def test_result_file_missing_or_changed_is_reported(tmp_path):
  path = _ledger(tmp_path, [L.Attempt(index=0, seed=3)])
  led = L.Ledger(path)
  att = led.latest(0)
  log = _finished_log(led, att)
  res = tmp_path / "results" / "sys1" / "resnet" / "result_0.txt"; res.parent.mkdir(parents=True)
  res.write_bytes(log.read_bytes())
  att.status, att.result, att.sha256 = L.DONE, str(res), file_digest(log, "sha256")
  assert led.check_result(att) == ("ok", "")
  res.write_bytes(log.read_bytes() + b"\n")
  kind, msg = led.check_result(att)
  assert kind == "changed" and "CHANGED" in msg and str(res) in msg
  res.unlink()
  assert led.check_result(att)[0] == "copy"            # the run's own log is intact: run copies it again
  log.unlink()
  kind, msg = led.check_result(att)
  assert kind == "missing" and "MISSING" in msg and str(res) in msg


def test_restore_command_for_a_changed_result_is_pasteable_with_a_space_in_the_path(tmp_path):
  root = tmp_path / "my out"
  led = L.Ledger(_ledger(root, [L.Attempt(index=0, seed=3)]))
  att = led.latest(0)
  log = _finished_log(led, att)
  res = root / "results" / "sys1" / "resnet" / "result_0.txt"; res.parent.mkdir(parents=True)
  res.write_bytes(log.read_bytes() + b"edited\n")
  att.status, att.result, att.sha256 = L.DONE, str(res), file_digest(log, "sha256")
  kind, msg = led.check_result(att)
  assert kind == "changed" and f"`cp '{log}' '{res}'`" in msg, msg


def test_paths_are_stored_relative(tmp_path):
  res = tmp_path / "results" / "sys1" / "resnet" / "result_0.txt"
  path = _ledger(tmp_path, [L.Attempt(index=0, seed=3, status=L.DONE, result=str(res),
                                      output=str(tmp_path / "runs" / "sys1" / "resnet" / "run_0_3" / "output.log"))])
  raw = json.loads(path.read_text())["attempts"][0]
  assert raw["result"] == "results/sys1/resnet/result_0.txt" and raw["output"] == "runs/sys1/resnet/run_0_3/output.log"
  assert L.Ledger(path).latest(0).result == str(res)


def test_a_dangling_symlink_result_is_refused_before_the_run(tmp_path):
  (tmp_path / "result_0.txt").symlink_to(tmp_path / "nowhere")
  with pytest.raises(UserError) as e: refuse_unknown_results(tmp_path, tmp_path / "ledger.json", [0])
  assert str(tmp_path / "result_0.txt") in str(e.value) and str(tmp_path / "ledger.json") in str(e.value)


def test_finished_runs_that_missed_the_target_are_named(tmp_path):
  """`run` exits 1 for a closed set with such a run (they count and are never redone, but the result is not clean)."""
  path = _ledger(tmp_path, [L.Attempt(index=0, seed=1, status=L.DONE, converged=True),
                            L.Attempt(index=1, seed=2, status=L.DONE, converged=False),
                            L.Attempt(index=2, seed=3, status=L.FAILED, converged=False),
                            L.Attempt(index=2, seed=4, status=L.DONE, converged=True)])
  assert [a.seed for a in missed_target(path, 3)] == [2]
  assert missed_target(path, 3, only_index=0) == [] and [a.index for a in missed_target(path, 3, only_index=1)] == [1]


def test_status_hint_for_a_local_set_is_the_run_command(tmp_path):
  # a local set interrupted by Ctrl-C: `status --resume` only resubmits Slurm sets, so its hint must not be the way out
  # (it answered "not a Slurm set"); a --results path with a space is typed quoted
  root = tmp_path / "my out"
  _ledger(root, [L.Attempt(index=0, seed=1, status=L.INTERRUPTED, note="interrupted by the user (Ctrl-C)")])
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "status", "--results", "my out"], cwd=tmp_path,
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
  assert "--resume" not in r.stdout, r.stdout
  assert "`tinyperf run`" in r.stdout, r.stdout


def test_status_counts_the_runs_a_set_asked_for_not_only_those_it_started(tmp_path):
  # `tinyperf run --nexp 5` stopped between runs 1 and 2 left two attempts: status said "2 runs", all done, exit 0
  root = tmp_path / "out"
  path = _ledger(root, [L.Attempt(index=i, seed=i + 1) for i in range(2)])
  with L.Ledger.locked(path) as led:
    for att in led.attempts:
      log = _finished_log(led, att)
      res = root / "results" / "sys1" / "resnet" / f"result_{att.index}.txt"; res.parent.mkdir(parents=True, exist_ok=True)
      res.write_bytes(log.read_bytes())
      att.status, att.result, att.sha256 = L.DONE, str(res), file_digest(log, "sha256")
    led.nexp = 5
    led.save()
  assert L.Ledger(path).nexp == 5
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "status", "--results", "out", "--json"], cwd=tmp_path,
                     capture_output=True, text=True, timeout=120)
  st, = json.loads(r.stdout)["sets"]
  assert r.returncode == 1 and [x["state"] for x in st["runs"]] == ["done", "done", "missing", "missing", "missing"], r.stdout


# --- a hostile or broken ledger: bad input (exit 2) from every reader, bounded in time and memory ---------------------

def _status(root, timeout=60):
  return subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "status", "--results", str(root)], cwd=REPO,
                        capture_output=True, text=True, timeout=timeout)


def _one_done(root, **raw):
  """A ledger of one finished run whose attempt fields are then replaced by RAW (a hand edit)."""
  path = _ledger(root, [L.Attempt(index=0, seed=1, status=L.DONE, converged=True, result="results/sys1/resnet/result_0.txt")])
  doc = json.loads(path.read_text())
  doc["attempts"][0].update({k: v for k, v in raw.items() if k not in ("nexp", "attempts")})
  doc.update({k: v for k, v in raw.items() if k in ("nexp", "attempts")})
  path.write_text(json.dumps(doc))
  return path


@pytest.mark.parametrize("raw", [
  dict(index="0"), dict(seed=None), dict(index=True), dict(status="finished"), dict(status=5), dict(converged="no"),
  dict(owner=["pid", 1]), dict(slurm="job"), dict(started="yesterday"), dict(note=7), dict(result=5),
  dict(nexp=10 ** 9), dict(nexp="5"), dict(nexp=0), dict(nexp=None), dict(index=-1),
])
def test_a_ledger_of_valid_json_with_wrong_types_is_bad_input(tmp_path, raw):
  # each was a TypeError traceback in status, run or package, or (nexp 1e9) a status growing to gigabytes
  path = _one_done(tmp_path, **raw)
  r = _status(tmp_path)
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
  assert str(path) in r.stderr and "unreadable" in r.stderr, r.stderr


def test_a_ledger_without_its_set_size_is_bad_input(tmp_path):
  # every ledger `tinyperf run` writes records nexp; one without it was hand-made or damaged
  path = _one_done(tmp_path)
  doc = json.loads(path.read_text()); del doc["nexp"]; path.write_text(json.dumps(doc))
  r = _status(tmp_path)
  assert r.returncode == 2 and str(path) in r.stderr and "nexp" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_unreadable_result_file_is_named_by_run_not_a_traceback(tmp_path, capsys, monkeypatch):
  # a result file with mode 000 was a PermissionError traceback in run too; root ignores modes, so the read fails here
  from tinyperf.benchmarks.resnet.prep import main as prep_main
  from tinyperf.tooling.cli import main as cli
  from tinyperf.tooling.launch.backends import TRAIN_MODULE_ENV
  data, out = tmp_path / "data", tmp_path / "out"
  assert prep_main(["synthetic-imagenet", "--out", str(data), "--classes", "4", "--train-per-class", "1",
                    "--val-per-class", "1", "--size", "8", "--seed", "0"]) in (0, None)
  monkeypatch.setenv(TRAIN_MODULE_ENV, "tests.stand_in_train")
  for k in ("TINYPERF_IMAGE_VENDOR", "TINYPERF_CACHE_DIR"): monkeypatch.delenv(k, raising=False)
  run = ["run", "resnet", "--platform", "cpu_smoke", "--data", str(data), "--results", str(out), "--runtime", "host"]
  assert cli([*run, "--nexp", "1"]) == 0
  locked = T.result_dir(out, "cpu_smoke", "resnet") / "result_0.txt"
  def unreadable(path, *a, **k):
    if Path(path) == locked: raise PermissionError(13, "Permission denied", str(path))
    return file_digest(path, *a, **k)
  monkeypatch.setattr(L, "file_digest", unreadable)
  capsys.readouterr()
  assert cli([*run, "--nexp", "2"]) == 1
  o, e = capsys.readouterr()
  assert "Traceback" not in e and "permission denied" in (o + e).lower() and str(locked) in o + e, o + e
  assert [a.index for a in L.Ledger(out / "runs/cpu_smoke/resnet/ledger.json").attempts].count(0) == 1   # never redone


@pytest.mark.parametrize("kind", ["directory", "fifo", "dev_zero"])
def test_a_ledger_that_is_no_regular_file_is_bad_input_without_a_hang(tmp_path, kind):
  path = tmp_path / "runs" / "sys1" / "resnet" / "ledger.json"; path.parent.mkdir(parents=True)
  if kind == "directory": path.mkdir()
  elif kind == "fifo": os.mkfifo(path)
  else: path.symlink_to("/dev/zero")
  r = _status(tmp_path)
  assert r.returncode == 2 and "Traceback" not in r.stderr and str(path) in r.stderr, r.stderr


def test_a_tampered_result_path_is_refused_and_nothing_is_written_outside_the_results_tree(tmp_path):
  # run copies a finished run's intact log to its missing result file: the ledger's path decided where
  root = tmp_path / "R"
  path = _ledger(root, [L.Attempt(index=0, seed=3)])
  with L.Ledger.locked(path) as led:
    att = led.latest(0); log = _finished_log(led, att)
    att.status, att.result, att.sha256 = L.DONE, str(led._expected(att, "result")), file_digest(log, "sha256")
    led.save()
  from tinyperf.tooling.launch.run import verify_results
  for bad in ("../escaped.txt", str(tmp_path / "escaped.txt"), "results/sys1/resnet/../../../../escaped.txt"):
    doc = json.loads(path.read_text()); doc["attempts"][0]["result"] = bad; path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match=re.escape(bad)): verify_results(T.ResultSet.of_runs_dir(path.parent), fix=True)
    assert not (tmp_path / "escaped.txt").exists()


@pytest.mark.timeout(60)
def test_settling_a_ledger_of_65536_attempts_is_linear(tmp_path):
  # a settle under the ledger lock looked up each attempt's latest by a scan of all: 65,536 attempts hung `run`
  path = tmp_path / "runs" / "sys1" / "resnet" / "ledger.json"; path.parent.mkdir(parents=True)
  rows = [{"index": k % 5, "seed": k, "status": L.INTERRUPTED} for k in range(65536)]
  path.write_text(json.dumps({"format": "tinyperf-ledger-v1", "nexp": 5, "attempts": rows}))
  with L.Ledger.locked(path) as led:
    assert led.settle() == [] and led.pending(5) == [0, 1, 2, 3, 4]


def test_an_unreadable_result_file_is_named_by_status_not_a_traceback(tmp_path):
  from tests.unit.test_hostile_results import _unprivileged
  root = Path(tempfile.mkdtemp(prefix="tinyperf-perm-"))
  try:
    root.chmod(0o755)
    path = _ledger(root, [L.Attempt(index=0, seed=3)])
    with L.Ledger.locked(path) as led:
      att = led.latest(0); log = _finished_log(led, att)
      res = led._expected(att, "result"); res.parent.mkdir(parents=True); res.write_bytes(log.read_bytes())
      att.status, att.result, att.sha256 = L.DONE, str(res), file_digest(log, "sha256")
      led.save()
    for p in [root, *root.rglob("*")]: p.chmod(0o755 if p.is_dir() else 0o644)
    res.chmod(0)
    r = subprocess.run([*_unprivileged(), sys.executable, "-m", "tinyperf.tooling.cli", "status", "--results", str(root)], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "permission denied" in r.stdout + r.stderr and "broken" in r.stdout, r.stdout
  finally:
    shutil.rmtree(root)


@pytest.mark.timeout(20)
def test_a_fifo_at_the_ledgers_lock_is_bad_input_not_a_hang(tmp_path):
  path = tmp_path / "runs" / "sys1" / "resnet" / "ledger.json"; path.parent.mkdir(parents=True)
  os.mkfifo(L.Ledger.lock_path(path))   # opening it for writing waited for a reader forever
  with pytest.raises(UserError, match="ledger.lock"):
    with L.Ledger.locked(path): pass


def test_status_of_a_compose_set_after_a_kill_and_its_resume(tmp_path):
  """`docker kill` of a compose service: status told its user to rerun a `tinyperf run` command they never typed, and
  once the service had redone the run, the killed attempt was gone from status."""
  root = tmp_path / "out"
  owner = {"id": "x", "host": "h1", "pid": 999999, "compose_service": "resnet-cpu"}
  path = _ledger(root, [L.Attempt(index=0, seed=5, owner=owner)])
  (path.parent / "run_0_5").mkdir()
  st = lambda: subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "status", "--results", "out"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
  r = st()
  assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
  assert "`docker compose run --rm resnet-cpu`" in r.stdout and "tinyperf run" not in r.stdout, r.stdout
  # the service runs again: it settles the killed attempt (interrupted) and redoes the run with a new seed
  with L.Ledger.locked(path) as led:
    led.settle()
    att = L.Attempt(index=0, seed=6, owner=owner)
    led.attempts.append(att)
    log = _finished_log(led, att)
    res = root / "results" / "sys1" / "resnet" / "result_0.txt"; res.parent.mkdir(parents=True, exist_ok=True)
    res.write_bytes(log.read_bytes())
    att.status, att.result, att.sha256 = L.DONE, str(res), file_digest(log, "sha256")
    led.nexp = 1
    led.save()
  r = st()
  assert r.returncode == 0, r.stdout + r.stderr
  assert "earlier: seed 5, interrupted" in r.stdout, r.stdout
