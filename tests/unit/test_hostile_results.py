"""Attacks on the readers of results (`check`, `score`, `report`, `package`): each test is one hostile or clumsy input,
and each must end in one paragraph naming the file and exit 2, or in a rejection: never a score, a traceback, a hang or
an unbounded read. docs/check.md ("Hostile input") is the table of these."""
from __future__ import annotations
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO
from mllog_builder import make_package, write_log
from run_builder import make_runs
from tinyperf.tooling.common.judge.check import check_path
from tinyperf.tooling.common.judge.dir_checks import _hparam_check
from tinyperf.tooling.common.judge.findings import DirReport
from tinyperf.tooling.common.judge.submission_checks import _oversized
from tinyperf.tooling.cli import main as cli
from tinyperf.tooling.common.mllog_reader import read_log
from tinyperf.tooling.ship.report import throughput_series
from tinyperf.tooling.common.safe_read import MAX_LOG_BYTES, MAX_TREE_DEPTH
from tinyperf.tooling.common.submission_tree import discover

BENCH = ("results", "tinybox_green", "resnet")


def bad_input(capsys, verb, path, *needles):
  code = cli([verb, str(path)])
  out, err = capsys.readouterr()
  assert code == 2, (out, err)
  assert err.startswith(f"tinyperf {verb}: error: ") and "Traceback" not in err and out == ""
  assert len(err.strip().splitlines()) == 1, err
  for n in needles: assert n in err, err
  return err


def set_event(path: Path, key: str, field: str, raw: str, nth: int = 0) -> None:
  """Rewrite one MLLOG event's field as raw JSON text (NaN, Infinity, true, "1", [..]): what a hand edit produces."""
  lines, seen = path.read_text().splitlines(keepends=True), 0
  for i, line in enumerate(lines):
    if f'"key": "{key}"' not in line: continue
    if seen == nth:
      head, body = line.split(":::MLLOG ", 1)
      obj = json.loads(body)
      obj[field] = "@@"
      lines[i] = head + ":::MLLOG " + json.dumps(obj).replace('"@@"', raw) + "\n"
      path.write_text("".join(lines))
      return
    seen += 1
  raise AssertionError(f"{key} not in {path}")


# --- numbers: a time that is not a finite integer never becomes a score --------------------------------------------

@pytest.mark.parametrize("key,raw", [("run_stop", "NaN"), ("run_stop", "Infinity"), ("run_stop", "-Infinity"),
                                     ("run_start", "true"), ("run_start", '"1700000000000"'), ("run_stop", "1.5"),
                                     ("run_stop", "null"), ("init_start", "[1]")])
@pytest.mark.parametrize("verb", ["check", "score"])
def test_time_ms_not_a_finite_integer_is_a_malformed_file(capsys, tmp_path, key, raw, verb):
  p = write_log(tmp_path / "result_0.txt", "resnet")
  set_event(p, key, "time_ms", raw)
  bad_input(capsys, verb, p, f"{p}:", "time_ms")
  assert "score" not in capsys.readouterr().out


def test_nan_run_stop_in_a_set_is_bad_input_not_score_nan(capsys, tmp_path):
  org = make_package(tmp_path, "resnet")
  p = org.joinpath(*BENCH, "result_2.txt")
  set_event(p, "run_stop", "time_ms", "NaN")
  for verb in ("check", "score"): bad_input(capsys, verb, org, f"{p}:", "time_ms nan")


def test_package_refuses_a_nan_run_stop_instead_of_packing_it(capsys, tmp_path):
  R = make_runs(tmp_path, "resnet")
  p = R / "results" / "tinybox_green" / "resnet" / "result_2.txt"
  set_event(p, "run_stop", "time_ms", "NaN")
  code = cli(["package", "--org", "tinycorp", "--out", str(tmp_path / "out"), "--results", str(R),
              "--systems", str(tmp_path / "systems")])
  err = capsys.readouterr().err
  assert code == 2 and f"{p}:" in err and "time_ms nan" in err and "Traceback" not in err   # the file, field and value
  assert not (tmp_path / "out").exists()


def test_integral_float_time_ms_is_accepted(tmp_path):
  p = write_log(tmp_path / "result_0.txt", "resnet")
  set_event(p, "run_stop", "time_ms", "1.7000072e12")
  assert read_log(p).first("run_stop").time_ms == 1_700_007_200_000


# --- type confusion in the values the tools read as names -----------------------------------------------------------

@pytest.mark.parametrize("key,raw", [("submission_division", '["open"]'), ("submission_benchmark", '{"b": 1}'),
                                     ("submission_org", "7"), ("submission_platform", "null")])
@pytest.mark.parametrize("verb", ["check", "score"])
def test_submission_value_not_a_string(capsys, tmp_path, key, raw, verb):
  p = write_log(tmp_path / "result_0.txt", "resnet")
  set_event(p, key, "value", raw)
  bad_input(capsys, verb, p, f"{p}:", key)


def test_seed_infinity_is_a_failed_run_not_a_traceback(tmp_path):
  p = write_log(tmp_path / "result_0.txt", "resnet")
  set_event(p, "seed", "value", "Infinity")
  report = check_path(p)
  assert not report.accepted and any(f.check == "seed" and "inf" in f.message for f in report.files[0].findings)


def test_seed_logged_as_a_padded_string(tmp_path):
  p = write_log(tmp_path / "result_0.txt", "resnet")
  set_event(p, "seed", "value", '" 42"')   # int() takes it; finding its line again once raised StopIteration
  (fr,) = check_path(p).files
  assert fr.seeds == [42] and any(f.check == "seed-width" for f in fr.findings)


def test_report_ignores_non_numeric_epoch_numbers(tmp_path):
  p = write_log(tmp_path / "result_0.txt", "resnet")
  set_event(p, "epoch_start", "metadata", '{"epoch_num": [1]}')
  set_event(p, "epoch_stop", "metadata", '{"epoch_num": [1]}')
  set_event(p, "epoch_start", "metadata", '{"epoch_num": NaN}', nth=1)
  series = throughput_series(read_log(p), "resnet")    # an unhashable epoch once raised TypeError here
  assert series and all(x >= 2 for x, _ in series)


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "true", '"2"', "-1", "0", "[1]"])
def test_scaling_json_not_a_finite_positive_number(capsys, tmp_path, raw):
  org = make_package(tmp_path, "resnet")
  sj = org.joinpath(*BENCH, "scaling.json")
  sj.write_text('{"scaling_factor": %s}' % raw)
  bad_input(capsys, "score", org.joinpath(*BENCH), str(sj))


# --- what sits in a results directory: only regular files are read, and never more than the cap ------------------

def run_cli(*argv, timeout=60):
  """The real entry point in a child: a hang shows as a timeout, a traceback in stderr."""
  return subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *argv], cwd=REPO, capture_output=True, text=True,
                        timeout=timeout)


def test_fifo_named_console_txt_does_not_hang_check(tmp_path):
  org = make_package(tmp_path, "resnet")
  fifo = org.joinpath(*BENCH, "console.txt")
  os.mkfifo(fifo)
  t = time.monotonic()
  r = run_cli("check", str(org.joinpath(*BENCH)))
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
  assert f"{fifo}: " in r.stderr and "FIFO" in r.stderr and time.monotonic() - t < 30


def test_fifo_as_the_log_itself(capsys, tmp_path):
  fifo = tmp_path / "result_0.txt"
  os.mkfifo(fifo)
  bad_input(capsys, "check", fifo, str(fifo), "FIFO")


def test_link_to_dev_zero_is_not_read(capsys, tmp_path):
  org = make_package(tmp_path, "resnet")
  junk = org.joinpath(*BENCH, "junk.log")
  junk.symlink_to("/dev/zero")
  bad_input(capsys, "check", org.joinpath(*BENCH), str(junk), "character device")
  bad_input(capsys, "check", junk, str(junk), "character device")


def test_result_log_over_the_size_cap(capsys, tmp_path):
  p = write_log(tmp_path / "result_0.txt", "resnet")
  with open(p, "ab") as f: f.truncate(MAX_LOG_BYTES + 1)     # sparse: no disk used, but too big to be a log
  bad_input(capsys, "check", p, str(p), f"over {MAX_LOG_BYTES >> 20} MiB")


def test_huge_console_log_beside_the_results_is_not_read(tmp_path):
  org = make_package(tmp_path, "resnet")
  big = org.joinpath(*BENCH, "console.log")
  with open(big, "wb") as f: f.truncate(4 * MAX_LOG_BYTES)
  (bd,) = discover(org.joinpath(*BENCH)).bench_dirs
  assert [p.name for p in bd.other_files] == ["console.log"] and len(bd.logs) == 5   # `check` warns: unknown entry
  assert _oversized(str(big.parent), ["console.log", "result_0.txt"]) == ["console.log"]   # kept from package_checker


def test_symlink_loop_is_named_a_loop(capsys, tmp_path):
  loop = tmp_path / "result_0.txt"
  loop.symlink_to(loop.name)
  bad_input(capsys, "check", loop, str(loop), "symbolic link loop")
  org = make_package(tmp_path / "p", "resnet")
  inner = org.joinpath(*BENCH, "result_5.txt")
  inner.symlink_to(inner.name)
  bad_input(capsys, "check", org, str(inner), "symbolic link loop")


def test_dangling_symlink_is_named(capsys, tmp_path):
  org = make_package(tmp_path, "resnet")
  link = org.joinpath(*BENCH, "result_5.txt")
  link.symlink_to("gone.txt")
  bad_input(capsys, "check", org, str(link), "dangling symbolic link")


def test_systems_json_that_is_a_fifo(capsys, tmp_path):
  org = make_package(tmp_path, "resnet")
  sj = org / "systems" / "tinybox_green.json"
  sj.unlink(); os.mkfifo(sj)
  bad_input(capsys, "check", org, str(sj), "FIFO")


def test_fifo_under_power_dir_is_refused_before_package_checker_copies_it(capsys, tmp_path):
  org = make_package(tmp_path, "resnet")
  (org.joinpath(*BENCH, "power")).mkdir()
  os.mkfifo(org.joinpath(*BENCH, "power", "node_0.txt"))
  bad_input(capsys, "check", org, "power/node_0.txt", "FIFO")


def test_directory_link_loop_under_power_is_refused_before_it_is_copied(capsys, tmp_path):
  org = make_package(tmp_path, "resnet")
  (org.joinpath(*BENCH, "power")).mkdir()
  org.joinpath(*BENCH, "power", "up").symlink_to("..")      # copytree would follow it forever
  bad_input(capsys, "check", org, "power/up", "symbolic link")


def _unprivileged() -> list[str]:
  """Root ignores permission bits: as root, run the child as nobody (util-linux setpriv)."""
  if os.geteuid() != 0: return []
  if not shutil.which("setpriv"): pytest.skip("running as root without setpriv: cannot test a permission error")
  return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.parametrize("target", ["bench", "org"])
def test_unsearchable_directory_is_bad_input(target):
  """As a user that lacks the permission (root ignores modes: as root, the child runs as nobody)."""
  base = Path(tempfile.mkdtemp(prefix="tinyperf-perm-"))
  try:
    base.chmod(0o755)
    org = make_package(base, "resnet")
    for p in [org, *org.rglob("*")]: p.chmod(0o755 if p.is_dir() else 0o644)
    locked = org.joinpath(*BENCH)
    locked.chmod(0o600)    # readable names, not searchable
    r = subprocess.run([*_unprivileged(), sys.executable, "-m", "tinyperf.tooling.cli", "check",
                        str(org if target == "org" else locked)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "permission denied" in r.stderr and str(locked) in r.stderr
  finally:
    for p in base.rglob("*"):
      if p.is_dir() and not p.is_symlink(): p.chmod(0o755)
    shutil.rmtree(base)


# --- one set, one configuration ---------------------------------------------------------------------------------------

def test_runs_of_one_set_with_different_batch_sizes_are_rejected(tmp_path):
  org = make_package(tmp_path, "resnet")
  set_event(org.joinpath(*BENCH, "result_3.txt"), "global_batch_size", "value", "768")
  report = check_path(org)
  (dr,) = report.dirs
  hp = [f for f in dr.findings if f.check == "hyperparameters"]
  assert not report.accepted and len(hp) == 1
  assert all(f in hp[0].message for f in ("global_batch_size", "1536", "result_0.txt", "768", "result_3.txt")), hp


def hparam_findings(bench_dir: Path) -> list[str]:
  """check's hyperparameter rule alone (the end-to-end test above runs the checkers)."""
  (bd,) = discover(bench_dir).bench_dirs
  dr = DirReport(str(bd.path), bd.rel, bd.system, bd.benchmark, bd.ruleset, bd.division)
  _hparam_check(bd, dr)
  return [f.message for f in dr.findings]


def test_a_hyperparameter_missing_from_one_run_is_a_disagreement(tmp_path):
  org = make_package(tmp_path, "bert", n=10)
  p = org.joinpath("results", "tinybox_green", "bert", "result_7.txt")
  p.write_text("".join(l for l in p.read_text().splitlines(keepends=True) if '"key": "opt_lamb_beta_2"' not in l))
  (msg,) = hparam_findings(p.parent)
  assert all(f in msg for f in ("opt_lamb_beta_2", "result_0.txt", "0.999", "result_7.txt")), msg


def test_identical_settings_and_per_run_values_do_not_trip_the_hyperparameter_check(tmp_path):
  # seeds, times and the number of evals (samples to converge) differ per run by nature
  org = make_package(tmp_path, "bert", n=10, runs=[{"evals": 3 + i % 3} for i in range(10)])
  assert hparam_findings(org.joinpath("results", "tinybox_green", "bert")) == []
  assert len({len(read_log(p).all("eval_accuracy")) for p in org.rglob("result_*.txt")}) == 3


@pytest.mark.parametrize("verb", ["check", "report"])
def test_a_results_tree_nested_1500_deep_is_bad_input_not_a_recursion_error(capsys, tmp_path, verb):
  org = make_package(tmp_path, "resnet")
  d = org.joinpath(*BENCH, "power")
  d.mkdir()
  cwd = os.getcwd()
  try:
    os.chdir(d)
    for _ in range(1500): os.mkdir("a"); os.chdir("a")   # os.makedirs recurses: one level at a time
  finally:
    os.chdir(cwd)
  try:
    bad_input(capsys, verb, org, str(org), str(MAX_TREE_DEPTH))      # the tree and the depth it may not pass
  finally:   # shutil.rmtree, and so pytest's cleanup of old temp folders, recurses: take the chain apart bottom up
    try:
      os.chdir(d)
      for _ in range(1500): os.chdir("a")
      for _ in range(1500): os.chdir(".."); os.rmdir("a")
    finally:
      os.chdir(cwd)


def test_the_second_of_two_packages_into_one_out_writes_nothing_and_says_why(capsys, tmp_path, monkeypatch):
  # both passed the up-front check; the loser's rename onto the winner's tinycorp/ was an OSError traceback
  from tinyperf.tooling.ship import package
  R, out = make_runs(tmp_path, "resnet"), tmp_path / "out"
  def other_package_wins(org_dir):   # while this one is checked, another `tinyperf package` publishes into --out
    (out / "tinycorp").mkdir(); (out / "tinycorp" / "theirs").write_text("x")
    (out / "mlperf_submission_tinycorp.tar.gz").write_bytes(b"theirs")
    return True, "checked"
  monkeypatch.setattr(package, "check_tree", other_package_wins)
  code = cli(["package", "--org", "tinycorp", "--out", str(out), "--results", str(R), "--systems", str(tmp_path / "systems"),
              "--allow-dirty"])   # the runs' made-up commit: the race is the point here, not the code
  err = capsys.readouterr().err
  assert code == 2 and str(out / "tinycorp") in err and "Traceback" not in err, err
  assert sorted(p.name for p in out.iterdir()) == ["mlperf_submission_tinycorp.tar.gz", "tinycorp"]
  assert [p.name for p in (out / "tinycorp").iterdir()] == ["theirs"]
  assert (out / "mlperf_submission_tinycorp.tar.gz").read_bytes() == b"theirs"


def test_package_names_a_result_file_it_cannot_read():
  # a result file with mode 000 was a PermissionError traceback (its sha256 against the ledger's)
  base = Path(tempfile.mkdtemp(prefix="tinyperf-perm-"))
  try:
    base.chmod(0o755)
    R = make_runs(base, "resnet")
    from tinyperf.tooling.common import ledger as L
    from tinyperf.benchmarks.common.io import file_digest
    with L.Ledger.locked(R / "runs" / "tinybox_green" / "resnet" / "ledger.json") as led:   # as `run` records them
      for a in led.attempts: a.sha256 = file_digest(a.result, "sha256")
      led.save()
    for p in [base, *base.rglob("*")]: p.chmod(0o755 if p.is_dir() else 0o644)
    locked = R / "results" / "tinybox_green" / "resnet" / "result_1.txt"
    locked.chmod(0)
    r = subprocess.run([*_unprivileged(), sys.executable, "-m", "tinyperf.tooling.cli", "package", "--org", "tinycorp", "--out",
                        str(base / "out"), "--results", str(R), "--systems", str(base / "systems")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "permission denied" in r.stderr and str(locked) in r.stderr and not (base / "out").exists()
  finally:
    shutil.rmtree(base)


def test_evicting_a_data_folder_nested_1200_deep_is_no_recursion_error(tmp_path):
  # the page-cache eviction walked the data folder with Path.rglob, which recursed: RecursionError past ~1,000 levels
  from tinyperf.benchmarks.common.mlperf import EVICT_MAX_DEPTH, evict_files
  (tmp_path / "top.bin").write_bytes(b"x")
  cwd = os.getcwd()
  try:
    os.chdir(tmp_path)
    for i in range(1200):
      os.mkdir("a"); os.chdir("a")
      if i == 10: open("shallow.bin", "wb").close()
    open("deep.bin", "wb").close()
    assert evict_files([tmp_path]) == 2          # top.bin and shallow.bin; deep.bin is past EVICT_MAX_DEPTH
    assert EVICT_MAX_DEPTH < 1200
  finally:   # taken apart bottom up: shutil.rmtree recurses too
    os.chdir(tmp_path)
    for _ in range(1200): os.chdir("a")
    os.remove("deep.bin")
    for i in reversed(range(1200)):
      os.chdir("..")
      if i == 10: os.remove("a/shallow.bin")
      os.rmdir("a")
    os.chdir(cwd)
