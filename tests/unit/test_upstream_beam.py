"""lab/scripts/upstream_beam.sh, the carried BEAM search of tinycorp's code, with a stand-in for run_upstream.sh: it gets
the platform config's BEAM knobs and a kernel cache seeded from CACHE, the time limit stops it and everything it
started, and what it searched is saved to CACHE for the next call."""
from __future__ import annotations
import json
import os
import pickle
import sqlite3
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from tinyperf.benchmarks.common.beam import KERNELS_FORMAT
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
  r = subprocess.run([str(REPO / "lab" / "scripts" / "upstream_beam.sh"), "resnet", "256"], cwd=tmp_path, capture_output=True,
                     text=True, timeout=120, env={**os.environ, "UPSTREAM": "up", "CACHE": "cache.db", "TIME_LIMIT": "3",
                                                    "TRAIN_BEAM": "1"})   # as PERFORMANCE.md's row: the 1xH200 config has 0
  out = r.stdout + r.stderr
  assert r.returncode == 143 and time.time() - t0 < 60, out
  # the 1xH200 config's knobs, TRAIN_BEAM from the environment; tinycorp's log beside the cache (run_upstream.sh's default is in the machine's /tmp)
  assert f"fake got bm=resnet bs=256 TRAIN_BEAM=1 BEAM_UOPS_MAX=2000 PARALLEL=15 LOG={tmp_path}/cache.log" in out
  assert "2 searched kernels carried in" in out and "fake sees 2 searched" in out
  # the run names what produced it, for its record: this checkout's sha and the tinygrad it ran
  prov = json.loads(out.split("upstream_beam: provenance ", 1)[1].splitlines()[0])
  sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
  assert prov["git_sha"] == sha and prov["tinygrad"] == metadata.version("tinygrad") and prov["cores"] >= 1, prov
  assert "(exit 143)" in out, out     # the stop and its exit status are said, not only returned
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
  p = subprocess.Popen([str(REPO / "lab" / "scripts" / "upstream_beam.sh"), "resnet"], cwd=tmp_path, stdout=subprocess.DEVNULL,
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
  r = subprocess.run([str(REPO / "lab" / "scripts" / "upstream_beam.sh"), "resnet"], cwd=tmp_path, capture_output=True, text=True,
                     timeout=60, env={**os.environ, "UPSTREAM": str(tmp_path / "none"), "CACHE": str(tmp_path / "c.db")})
  assert r.returncode == 2 and f"{tmp_path}/none/run_upstream.sh" in r.stderr and "Traceback" not in r.stderr
  assert "UPSTREAM" in r.stderr and "upstream-mlperf" in r.stderr   # the fix: the variable and what it points at
  assert not (tmp_path / "c.db").exists()


def test_a_missing_argument_or_setting_is_bad_input(tmp_path):
  env = {k: v for k, v in os.environ.items() if k not in ("UPSTREAM", "CACHE")}
  for args, extra, why in ((["resnet"], {"CACHE": "c.db"}, "UPSTREAM"), (["bert", "96"], {"UPSTREAM": "up"}, "CACHE"),
                           ([], {"UPSTREAM": "up", "CACHE": "c.db"}, None)):     # the missing setting, named first
    r = subprocess.run([str(REPO / "lab" / "scripts" / "upstream_beam.sh"), *args], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, env={**env, **extra})
    said = r.stderr.split("Usage:")[0]
    assert r.returncode == 2 and ({why} if why else set()) == {v for v in ("UPSTREAM", "CACHE") if v in said}, r.stderr
    assert "UPSTREAM=DIR CACHE=FILE lab/scripts/upstream_beam.sh" in r.stderr     # the command line to type
    assert "line " not in r.stderr    # bash's own "line N:" wording was what the user saw before
  assert list(tmp_path.iterdir()) == []


def test_a_cache_it_could_not_save_into_is_refused_before_the_search(tmp_path):
  up = _stand_in(tmp_path, FAKE.replace("TABLE", TABLE))
  bad = tmp_path / "bad.db"; bad.write_bytes(b"not sqlite" * 100)
  for cache in (tmp_path / "no-such-dir" / "c.db", bad):
    r = subprocess.run([str(REPO / "lab" / "scripts" / "upstream_beam.sh"), "resnet"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "UPSTREAM": str(up), "CACHE": str(cache)})
    assert r.returncode == 2 and str(cache) in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (up / "child.pid").exists()       # nothing started
  assert bad.read_bytes() == b"not sqlite" * 100
  # the kernels file too: written after step 0 and the capture's timings, its folder is checked before them
  r = subprocess.run([str(REPO / "lab" / "scripts" / "upstream_beam.sh"), "resnet"], cwd=tmp_path, capture_output=True, text=True,
                     timeout=60, env={**os.environ, "UPSTREAM": str(up), "CACHE": "c.db", "BEAM_KERNELS_OUT": "no/k.pkl"})
  assert r.returncode == 2 and f"BEAM_KERNELS_OUT={tmp_path}/no/k.pkl" in r.stderr, r.stderr
  assert not (up / "child.pid").exists()


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
                           'python3 -c "import sys; print(\'other process ranked:\', \'tinyperf.benchmarks.common.beam\' in sys.modules)"\n'
                           'DEV=CPU python3 "$here/examples/mlperf/model_train.py" >"$LOG" 2>&1\n')
  (up / "examples" / "mlperf").mkdir(parents=True)
  (up / "examples" / "mlperf" / "model_train.py").write_text(TRAINER)
  r = subprocess.run([str(REPO / "lab" / "scripts" / "upstream_beam.sh"), "resnet", "8"], cwd=tmp_path, capture_output=True,
                     text=True, timeout=300, env={**os.environ, "UPSTREAM": "up", "CACHE": "c.db", "BEAM_BUDGET_S": "60",
                                                     "TRAIN_BEAM": "1"})
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


def test_kernels_a_run_wrote_are_searched_without_it_and_the_next_run_takes_the_results(tmp_path):
  """BEAM_KERNELS_OUT: the capture's kernels, written by a run that searched none of them (BEAM_BUDGET_S 0), are
  searched by lab.beam_kernels alone, with the config's BEAM knobs; the next run finds every result in the
  cache (the keys match: same AST, amount and device), so its search costs nothing."""
  up = _stand_in(tmp_path, '#!/usr/bin/env bash\nhere=$(cd "$(dirname "$0")" && pwd)\n'
                           'DEV=CPU python3 "$here/examples/mlperf/model_train.py" >"$LOG" 2>&1\n')
  (up / "examples" / "mlperf").mkdir(parents=True)
  (up / "examples" / "mlperf" / "model_train.py").write_text(TRAINER)
  env = {**os.environ, "UPSTREAM": "up", "CACHE": "c.db", "BEAM_BUDGET_S": "0", "BEAM_KERNELS_OUT": "k.pkl", "TRAIN_BEAM": "1"}
  def upstream_run() -> str:
    r = subprocess.run([str(REPO / "lab" / "scripts" / "upstream_beam.sh"), "resnet", "8"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return (tmp_path / "c.log").read_text()
  def rows() -> int:
    con = sqlite3.connect(tmp_path / "c.db")
    try: return con.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0]
    finally: con.close()
  log = upstream_run()
  assert "ranked BEAM: searched 0/1 kernels" in log and f"written to {tmp_path}/k.pkl" in log, log
  before = rows()    # kernels run outside the JIT capture get tinygrad's own search (the trainer sets BEAM globally)
  # as typed from another directory, with relative paths; the repository on PYTHONPATH, as the device command has it
  r = subprocess.run([sys.executable, "-m", "lab.beam_kernels", "k.pkl", "--cache", "c.db"], cwd=tmp_path,
                     capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
  assert r.returncode == 0, r.stdout + r.stderr
  assert "BEAM_UOPS_MAX=2000" in r.stdout                 # the knobs the trainer ran with (the 1xH200 ResNet config's)
  assert "ranked BEAM 1: " in r.stdout and "searched in" in r.stdout and "100.0% of the step covered" in r.stdout
  assert rows() == before + 1
  log = upstream_run()
  assert "from the cache" in log and "ranked BEAM: searched 1/1 kernels holding 100.0%" in log, log


def test_a_file_that_is_not_kernels_is_bad_input_and_the_cache_is_left_alone(tmp_path):
  cache = tmp_path / "c.db"; _cache(cache, ["kernel-a"])
  before = cache.read_bytes()
  (tmp_path / "k.pkl").write_bytes(b"SQLite format 3\x00" + bytes(100))
  for kernels, why in (("k.pkl", "k.pkl"), ("none.pkl", "none.pkl")):
    r = subprocess.run([sys.executable, "-m", "lab.beam_kernels", kernels, "--cache", "c.db"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and why in r.stderr and "BEAM_KERNELS_OUT=FILE" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
  assert cache.read_bytes() == before
  # a copy cut short after its header: the kernels do not read
  (tmp_path / "cut.pkl").write_bytes(pickle.dumps({"format": KERNELS_FORMAT, "tinygrad": metadata.version("tinygrad"),
                                                   "env": {}}) + b"\x80\x04")
  for args, why in ((["cut.pkl"], "cut.pkl"), (["k.pkl", "--coverage", "0"], "--coverage 0.0")):
    r = subprocess.run([sys.executable, "-m", "lab.beam_kernels", *args, "--cache", "c.db"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, r.stderr
  assert cache.read_bytes() == before


def test_a_python_without_tinygrad_is_told_where_to_run_it(tmp_path, monkeypatch, capsys):
  from lab import beam_kernels
  (tmp_path / "k.pkl").write_bytes(pickle.dumps({"format": KERNELS_FORMAT, "tinygrad": "0.14.0", "env": {}}))
  def no_package(name): raise metadata.PackageNotFoundError(name)
  monkeypatch.setattr(metadata, "version", no_package)
  monkeypatch.chdir(tmp_path)
  assert beam_kernels.main(["k.pkl", "--cache", "c.db"]) == 2
  err = capsys.readouterr().err
  assert "tinygrad" in err and "k.pkl" in err and "scripts/env.sh" in err, err
  assert not (tmp_path / "c.db").exists()
