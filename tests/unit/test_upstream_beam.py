"""scripts/upstream_beam.sh, the carried BEAM search of tinycorp's code, with a stand-in for run_upstream.sh: it gets
the platform config's BEAM knobs and a kernel cache seeded from CACHE, the time limit stops it and everything it
started, and what it searched is saved to CACHE for the next call."""
from __future__ import annotations
import json
import os
import sqlite3
import subprocess
import time
from importlib import metadata
from pathlib import Path

from tests.conftest import REPO
from tinygrad.helpers import VERSION

TABLE = f"beam_search_{VERSION}"   # the table tinygrad reads: another version's is not carried in

FAKE = """#!/usr/bin/env bash
# stand-in for run_upstream.sh: report what it got, "search" one kernel into the cache, then run on (with a child)
echo "fake got bm=$1 bs=${2:-} TRAIN_BEAM=$TRAIN_BEAM BEAM_UOPS_MAX=$BEAM_UOPS_MAX PARALLEL=$PARALLEL LOG=$LOG"
python3 -c 'import os, sqlite3; c = sqlite3.connect(os.environ["CACHEDB"])
print("fake sees", c.execute("SELECT COUNT(*) FROM TABLE").fetchone()[0], "searched")
c.execute("INSERT INTO TABLE VALUES (?, ?)", ("kernel-new", b"opts")); c.commit()'
printf 'training with batch size 256 for 37 epochs\n' > "$LOG"   # tinycorp's step lines: INIT's two, then a replay
for ms in 46000.0 900000.0 390.5; do printf '    0 %s ms run,   30.00 ms python,  30.00 ms fetch data,  300.00 ms CUDA, 7.0 loss\n' $ms >> "$LOG"; done
sleep 300 & echo "child $!" > "$(dirname "$0")/child.pid"
wait
"""


def _stand_in(tmp_path: Path, script: str) -> Path:
  """UPSTREAM with `script` as its run_upstream.sh."""
  up = tmp_path / "up"; up.mkdir(exist_ok=True)
  (up / "run_upstream.sh").write_text(script); (up / "run_upstream.sh").chmod(0o755)
  return up


def _cache(path: Path, keys: list[str]):
  con = sqlite3.connect(path)
  con.execute(f"CREATE TABLE {TABLE} (key text PRIMARY KEY, val blob)")
  con.executemany(f"INSERT INTO {TABLE} VALUES (?, ?)", [(k, b"opts") for k in keys])
  con.commit(); con.close()


def test_the_time_limit_stops_the_run_and_its_search_is_kept(tmp_path):
  up = _stand_in(tmp_path, FAKE.replace("TABLE", TABLE))
  cache = tmp_path / "cache.db"; _cache(cache, ["kernel-a", "kernel-b"])
  t0 = time.time()
  # as typed from another directory, with paths relative to it (the script itself works from the repository root)
  r = subprocess.run([str(REPO / "scripts" / "upstream_beam.sh"), "resnet", "256"], cwd=tmp_path, capture_output=True,
                     text=True, timeout=120, env={**os.environ, "UPSTREAM": "up", "CACHE": "cache.db", "TIME_LIMIT": "3"})
  out = r.stdout + r.stderr
  assert r.returncode == 143 and time.time() - t0 < 60, out
  # the 1xH200 config's knobs; tinycorp's log beside the cache (run_upstream.sh's default is in the machine's /tmp)
  assert f"fake got bm=resnet bs=256 TRAIN_BEAM=1 BEAM_UOPS_MAX=2000 PARALLEL=15 LOG={tmp_path}/cache.log" in out
  assert "2 searched kernels carried in" in out and "fake sees 2 searched" in out
  # the run names what produced it, for its record: this checkout's sha and the tinygrad it ran
  prov = json.loads(out.split("upstream_beam: provenance ", 1)[1].splitlines()[0])
  sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
  assert prov["git_sha"] == sha and prov["tinygrad"] == metadata.version("tinygrad") and prov["cores"] >= 1, prov
  assert "time limit reached" in out
  assert "stopped at the time limit or by a signal (exit 143); rerun to go on" in out, out
  # stopped after its steps, the figure is still printed, read from tinycorp's log
  assert "upstream: median of 1 replayed steps 390.5 ms = 655.6 items/s at BS 256" in out, out
  con = sqlite3.connect(cache)
  assert {k for (k,) in con.execute(f"SELECT key FROM {TABLE}")} == {"kernel-a", "kernel-b", "kernel-new"}
  con.close()
  child = int((up / "child.pid").read_text().split()[1])    # the run's own children went with it
  for _ in range(50):
    if not Path(f"/proc/{child}").exists(): break
    time.sleep(0.1)
  assert not Path(f"/proc/{child}").exists()


def test_the_search_reaches_cache_while_it_runs(tmp_path):
  """Started detached across device calls, the run may outlive the machine: CACHE follows it, not only at the end, and
  by default within seconds of a result (a save once a minute lost the last minute's kernels of a call)."""
  up = _stand_in(tmp_path, FAKE.replace("TABLE", TABLE))
  cache = tmp_path / "cache.db"; _cache(cache, ["kernel-a"])
  p = subprocess.Popen([str(REPO / "scripts" / "upstream_beam.sh"), "resnet"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env={**os.environ, "UPSTREAM": str(up), "CACHE": str(cache),
                                                        "TIME_LIMIT": "61.7"})
  try:
    keys, deadline = set(), time.time() + 40
    while "kernel-new" not in keys and time.time() < deadline:
      time.sleep(0.2)
      try:
        con = sqlite3.connect(cache); keys = {k for (k,) in con.execute(f"SELECT key FROM {TABLE}")}; con.close()
      except sqlite3.OperationalError: pass     # caught between the save's replace and our read
    assert keys == {"kernel-a", "kernel-new"} and p.poll() is None   # saved while the run still goes on
  finally:
    p.terminate(); rc = p.wait(timeout=30)
  # stopped by hand: the run, its children and the time-limit timer go with it
  assert rc == 143
  child = int((up / "child.pid").read_text().split()[1])
  for _ in range(50):
    if not Path(f"/proc/{child}").exists() and subprocess.run(["pgrep", "-f", "sleep 61.7"]).returncode == 1: break
    time.sleep(0.1)
  assert not Path(f"/proc/{child}").exists()
  assert subprocess.run(["pgrep", "-f", "sleep 61.7"]).returncode == 1


def test_a_missing_upstream_copy_is_bad_input(tmp_path):
  r = subprocess.run([str(REPO / "scripts" / "upstream_beam.sh"), "resnet"], cwd=tmp_path, capture_output=True, text=True,
                     timeout=60, env={**os.environ, "UPSTREAM": str(tmp_path / "none"), "CACHE": str(tmp_path / "c.db")})
  assert r.returncode == 2 and "run_upstream.sh not found" in r.stderr and "Traceback" not in r.stderr
  assert "Set UPSTREAM to a copy of ../shared/upstream-mlperf" in r.stderr   # the fix, not only the failure
  assert not (tmp_path / "c.db").exists()


def test_a_missing_argument_or_setting_is_bad_input(tmp_path):
  env = {k: v for k, v in os.environ.items() if k not in ("UPSTREAM", "CACHE")}
  for args, extra, why in ((["resnet"], {"CACHE": "c.db"}, "UPSTREAM is not set"),
                           (["bert", "96"], {"UPSTREAM": "up"}, "CACHE is not set"),
                           ([], {"UPSTREAM": "up", "CACHE": "c.db"}, "no benchmark given")):
    r = subprocess.run([str(REPO / "scripts" / "upstream_beam.sh"), *args], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, env={**env, **extra})
    assert r.returncode == 2 and why in r.stderr and "Usage: UPSTREAM=DIR CACHE=FILE" in r.stderr, r.stderr
    assert "line " not in r.stderr    # bash's own "line N:" wording was what the user saw before
  assert list(tmp_path.iterdir()) == []


def test_a_cache_it_could_not_save_into_is_refused_before_the_search(tmp_path):
  up = _stand_in(tmp_path, FAKE.replace("TABLE", TABLE))
  bad = tmp_path / "bad.db"; bad.write_bytes(b"not sqlite" * 100)
  for cache, why in ((tmp_path / "no-such-dir" / "c.db", "does not exist or is not writable"), (bad, "not a BEAM cache")):
    r = subprocess.run([str(REPO / "scripts" / "upstream_beam.sh"), "resnet"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "UPSTREAM": str(up), "CACHE": str(cache)})
    assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (up / "child.pid").exists()       # nothing started
  assert bad.read_bytes() == b"not sqlite" * 100


TRAINER = """import os, sys
from tinygrad import Tensor, TinyJit
from tinygrad.helpers import BEAM
BEAM.value = int(os.environ["TRAIN_BEAM"])   # as tinycorp's trainer sets it
@TinyJit
def step(x): return (x * 2 + 1).sum().realize()
x = Tensor.ones(64).contiguous().realize()
for i in range(4):
  step(x)
  print(f"{i:5} 10.00 ms run,  1.00 ms python,  1.00 ms fetch data,  8.00 ms CPU", flush=True)
"""


def test_tinycorps_trainer_gets_our_ranked_search(tmp_path):
  """The config's ranked search (BEAM_COVERAGE, BEAM_BUDGET_S) reaches a trainer that is not ours: a real tinygrad JIT
  on the CPU as tinycorp's model_train.py would run it, its capture searched by benchmarks/common/beam.py, which says so
  in the log; other Python processes (BEAM's workers, our scripts) start without it."""
  up = _stand_in(tmp_path, '#!/usr/bin/env bash\nhere=$(cd "$(dirname "$0")" && pwd)\n'
                           'python3 -c "import sys; print(\'other process ranked:\', \'benchmarks.common.beam\' in sys.modules)"\n'
                           'DEV=CPU python3 "$here/examples/mlperf/model_train.py" >"$LOG" 2>&1\n')
  (up / "examples" / "mlperf").mkdir(parents=True)
  (up / "examples" / "mlperf" / "model_train.py").write_text(TRAINER)
  r = subprocess.run([str(REPO / "scripts" / "upstream_beam.sh"), "resnet", "8"], cwd=tmp_path, capture_output=True,
                     text=True, timeout=300, env={**os.environ, "UPSTREAM": "up", "CACHE": "c.db", "BEAM_BUDGET_S": "60"})
  out = r.stdout + r.stderr
  assert r.returncode == 0, out
  assert "run_upstream.sh exit 0\n" in out and "rerun to go on" not in out, out   # a finished run is not a stopped one
  assert "BEAM_BUDGET_S=60.0" in out and "other process ranked: False" in out
  log = (tmp_path / "c.log").read_text()
  assert "ranked BEAM: searched 1/1 kernels holding 100.0% of the step's BEAM=0 time" in log, log
  assert "ranked BEAM searched 1/1 kernels holding 100.0% of the BEAM=0 step" in out   # the summary reads it back
  con = sqlite3.connect(tmp_path / "c.db")
  assert con.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0] >= 1    # the ranked search's result, kept
  con.close()
