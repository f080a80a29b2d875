"""The README's Quickstart #1 as a user types it, in a fresh `git clone`: `./smoke.sh` (its venv, synthetic ImageNet,
five real cpu_smoke ResNet runs, the check), then everything after it for real on the tree it made: the system
description the run recorded, `tinyperf report`, `tinyperf package` (division open), `tinyperf package --verify` into
a fresh directory, `tinyperf check` on the unpacked tree, and the packaged init_datasets.sh."""
from __future__ import annotations
import filecmp
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tinyperf.benchmarks.common.rules import required_runs
from tests.conftest import REPO, sh, user_env
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.ship import report
from tinyperf.tooling.cli import main as cli
from tinyperf.tooling.common.mllog_reader import read_log

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("clone")]   # one worker: these tests share one fresh clone and its venv (session fixtures are per worker)
ORG = "smoke"   # smoke.sh's default (OUT's name), not the entrypoint's: `run --org` must reach the logs
TAR, SHA = f"mlperf_submission_{ORG}.tar.gz", f"mlperf_submission_{ORG}.sha1"
NEXP = required_runs("resnet")   # smoke.sh runs the default set


def _cli(*args, timeout=1200, cwd=REPO):
  return subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                        timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def smoke(fresh_clone):
  t0 = time.time()
  p = sh(["./smoke.sh"], cwd=fresh_clone, env=user_env())
  took = time.time() - t0
  print(f"\n./smoke.sh in a fresh clone: {took:.0f} s", file=sys.stderr)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  R = fresh_clone / "out" / "smoke"
  ledger = json.loads((R / "runs/cpu_smoke/resnet/ledger.json").read_text())["attempts"]
  return SimpleNamespace(root=fresh_clone, data=R / "data", R=R, out=p.stdout, err=p.stderr, ledger=ledger, took=took,
                         res=R / "results/cpu_smoke/resnet", system=R / "systems/cpu_smoke.json")


def test_quickstart_console_is_quiet_and_ends_with_the_verdict(smoke):
  lines = smoke.out.strip().splitlines()
  assert re.fullmatch(r"SMOKE PASSED: 5/5 compliant, score \d+\.\d\d min, results in out/smoke", lines[-1]), lines[-1]
  assert ":::MLLOG" not in smoke.out + smoke.err
  assert "synthetic:" not in smoke.err and "img/s" in (smoke.R / "prep.log").read_text()   # prep's bar: in its log
  for i in range(NEXP):   # one line per phase and milestone of each run
    run = [l for l in lines if l.startswith(f"run {i} of {NEXP} (seed ")]
    assert any("INIT (untimed" in l for l in run) and any("init took" in l for l in run), run
    assert any("RUN (timed" in l for l in run) and any("top-1" in l for l in run), run
    assert any(re.search(r"converged in .* check: compliant", l) for l in run), run
  # a handful of lines per run, and the still-working lines of its silent stretches (INIT's compiles): no silence over 10 s
  assert len([l for l in lines if "still working" not in l]) < 20 + 10 * NEXP, smoke.out


def _logged_seed(path: Path) -> int:
  (seed,) = [e.value for e in read_log(path).all("seed")]
  return int(seed)


def test_five_runs_and_the_system_they_ran_on(smoke):
  led = smoke.ledger
  assert [(a["index"], a["status"], a["backend"]) for a in led] == [(i, "done", "host") for i in range(NEXP)]
  seeds = [a["seed"] for a in led]
  assert len(set(seeds)) == NEXP and all(0 <= s < 2 ** 31 for s in seeds)
  assert sorted(p.name for p in smoke.res.iterdir()) == [f"result_{i}.txt" for i in range(NEXP)]
  assert [_logged_seed(smoke.res / f"result_{i}.txt") for i in range(NEXP)] == seeds
  # the system description: this machine, and the repository's cpu_smoke.json for what cannot be detected
  assert f"system description: wrote {smoke.system}" in smoke.out
  sysjson = json.loads(smoke.system.read_text())
  repo = json.loads((REPO / "systems/cpu_smoke.json").read_text())
  assert (sysjson["status"], sysjson["division"]) == (repo["status"], "open")
  assert sysjson["submitter"] == ORG        # smoke.sh's --org names the submitter of the logs and of the machine record
  assert int(sysjson["host_processors_per_node"]) * int(sysjson["host_processor_vcpu_count"]) == os.cpu_count()
  assert sysjson["other_software_stack"]["python"] == platform.python_version()
  assert sysjson["accelerators_per_node"] == "0" and sysjson["sw_notes"] == "not run in a tinyperf image"
  for r in ("4.0.0", "5.0.0"):
    res = mlperf_tools.system_desc_check(smoke.system, r)
    assert res.passed, res.output
  assert not (smoke.R / "systems/variants").exists()


def test_report_on_the_five_runs(smoke):
  R = smoke.R
  (b,) = report.collect(R)
  assert [r.name for r in b.runs] == [f"result_{i}.txt" for i in range(NEXP)]
  assert [r.seed for r in b.runs] == [a["seed"] for a in smoke.ledger]
  for r in b.runs:
    assert r.converged and r.verdict == "compliant" and r.minutes > 0 and r.accuracy[-1][1] >= b.target == 0.9
    assert r.provenance and "git_sha=" in r.provenance[0] and "tinygrad=0.14.0" in r.provenance[0]
    assert r.step_unit == "img" and len(r.step_rate) >= 10 and all(v >= 0 for _, v in r.step_rate)
    assert [x for x, _ in r.throughput] == [float(e) for e in range(1, len(r.throughput) + 1)]
  middle = sorted(r.minutes for r in b.runs)[1:-1]
  assert b.accepted and b.score_minutes == pytest.approx(sum(middle) / len(middle), abs=0.01)   # olympic mean
  assert cli(["report", str(R)]) == 0
  md = (R / "report" / "report.md").read_text()
  assert "## resnet on cpu_smoke" in md and "provenance: tinyperf=" in md and "(TARGET of the cpu_smoke config" in md
  assert all(f"| `result_{i}.txt` | {a['seed']} |" in md for i, a in enumerate(smoke.ledger))
  for k in ("accuracy", "time_to_train", "throughput"): assert (R / "report" / f"cpu_smoke_resnet_{k}.png").stat().st_size > 10_000


def test_package_verify_and_check_the_unpacked_tree(smoke, tmp_path, capsys):
  out = tmp_path / "out"
  capsys.readouterr()
  code = cli(["package", "--org", ORG, "--out", str(out), "--results", str(smoke.R)])   # no --systems: R/systems
  o, e = capsys.readouterr()
  assert code == 0, o[-4000:] + e[-4000:]
  assert f"systems/cpu_smoke.json from {smoke.system}" in o and "check: ACCEPTED" in o and "WARNING" not in e
  assert "WARN" not in o, o   # a correct setup (run --org = package --org) warns about nothing
  assert "the first 5 finished runs in start order (never chosen by score)" in o
  tree = out / ORG
  assert (tree / "systems/cpu_smoke.json").read_bytes() == smoke.system.read_bytes()
  res = tree / "results/cpu_smoke/resnet"
  assert sorted(p.name for p in res.iterdir()) == [f"result_{i}.txt" for i in range(NEXP)]
  by_start = sorted(smoke.ledger, key=lambda a: a["started"])
  for j, a in enumerate(by_start):
    assert (res / f"result_{j}.txt").read_bytes() == (smoke.res / f"result_{a['index']}.txt").read_bytes()
  assert len({_logged_seed(res / f"result_{j}.txt") for j in range(NEXP)}) == NEXP
  impl = tree / "benchmarks/resnet/implementations/cpu_smoke"
  for name in ("run_and_time.sh", "setup.sh", "init_datasets.sh", "dev_run.sh", "dev_beam.sh"):
    assert os.access(impl / name, os.X_OK), name
  # what the receiver does: sha1, safe unpack into a fresh directory, the full check on the unpacked tree
  assert subprocess.run(["sha1sum", "-c", SHA], cwd=out, capture_output=True).returncode == 0
  fresh = tmp_path / "received"
  code = cli(["package", "--verify", str(out / TAR), "--into", str(fresh)])
  o, e = capsys.readouterr()
  assert code == 0 and "sha1: ok" in o, o + e
  u = fresh / ORG
  assert sorted(p.relative_to(u).as_posix() for p in u.rglob("*")) == \
    sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*"))
  assert not filecmp.dircmp(u, tree).diff_files
  p = _cli("check", u)
  assert p.returncode == 0 and "check: ACCEPTED" in p.stdout, p.stdout[-4000:] + p.stderr[-2000:]
  assert "systems: systems/cpu_smoke.json 4.0.0: passed" in p.stdout
  assert mlperf_tools.system_desc_check(u / "systems/cpu_smoke.json", "4.0.0").passed
  # the packaged init_datasets.sh makes the very data set the runs used (same arguments, same bytes)
  env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "DATA_DIR": str(tmp_path / "D2"),
         "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}   # python3 = this Python
  r = subprocess.run(["bash", str(u / "benchmarks/resnet/implementations/cpu_smoke/init_datasets.sh")], env=env,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert (tmp_path / "D2/manifest.json").read_bytes() == (smoke.data / "manifest.json").read_bytes()


def test_smoke_typed_from_another_directory_resumes_the_finished_tree(smoke):
  """`OUT=smoke ../smoke.sh` typed in out/: OUT is where it was typed (it was read from the checkout, so this started a
  second tree of five runs in <clone>/smoke); the finished tree is found, nothing runs again, the verdict is the same.
  Last in this module: it rewrites the tree's check.json."""
  before = json.loads((smoke.R / "runs/cpu_smoke/resnet/ledger.json").read_text())["attempts"]
  p = sh("OUT=smoke ../smoke.sh", cwd=smoke.root / "out", env=user_env(), timeout=900)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  last = p.stdout.strip().splitlines()[-1]
  # the verdict names the tree as it can be typed there: `smoke`, not the checkout's out/smoke
  assert re.fullmatch(r"SMOKE PASSED: 5/5 compliant, score \d+\.\d\d min, results in smoke", last), last
  assert json.loads((smoke.R / "runs/cpu_smoke/resnet/ledger.json").read_text())["attempts"] == before
  assert not (smoke.root / "smoke").exists()
  # the default OUT (the checkout's out/smoke) typed from the clone's parent: named as seen from there
  p = sh(f"./{smoke.root.name}/smoke.sh", cwd=smoke.root.parent, env=user_env(), timeout=900)
  last = p.stdout.strip().splitlines()[-1]
  assert p.returncode == 0 and last.endswith(f"results in {smoke.root.name}/out/smoke"), p.stdout[-3000:] + p.stderr[-3000:]
  assert json.loads((smoke.R / "runs/cpu_smoke/resnet/ledger.json").read_text())["attempts"] == before


def test_smoke_with_fewer_runs_than_a_set_judges_each_log_and_says_it_is_not_scored(fresh_clone, smoke):
  """NEXP=1: the check rejects a directory of one log (a set is five), which made every such smoke end FAILED; the
  verdict now judges the log and says the set is not scored. After `smoke`: it reuses the clone's venv."""
  p = sh("NEXP=1 OUT=one ./smoke.sh", cwd=fresh_clone, env=user_env(), timeout=900)
  last = p.stdout.strip().splitlines()[-1]
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  assert last == f"SMOKE PASSED: 1/1 compliant, not scored (a set of 1: MLPerf scores {NEXP}), results in one", last
