"""`python -m lab.bench --beam-cache`: only tinygrad's BEAM results travel between machines, and tinygrad reads them back."""
import os
import re
import subprocess
import sys

from tests.conftest import REPO
from lab.bench import copy_beam_tables, require_saving_folder, save_beam_cache


def tinygrad_cache(db, code: str) -> str:
  """Run code against tinygrad's own diskcache with CACHEDB=db (a fresh process: CACHEDB is read at import)."""
  r = subprocess.run([sys.executable, "-c", "from tinygrad.helpers import diskcache_put, diskcache_get\n" + code],
                     env={"CACHEDB": str(db), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)
  return r.stdout.strip()


def key(ast: bytes) -> str: return f"{{'ast': {ast!r}, 'amt': 2, 'allow_test_size': 1, 'device': 'CUDA', 'suffix': ''}}"


def test_beam_results_carry_over_and_compiled_programs_do_not(tmp_path):
  run1, run2, carried = tmp_path / "run1.db", tmp_path / "run2.db", tmp_path / "beam.db"
  tinygrad_cache(run1, f"diskcache_put('beam_search', {key(b'k1')}, ['opt-a'])\n"
                       "diskcache_put('compile_cuda', 'prog', b'x' * 100000)")
  save_beam_cache(run1, carried)
  assert carried.stat().st_size < 50000            # the compiled program stayed behind
  # the next machine: its fresh cache seeded from the carried file finds k1 without searching, and adds k2
  assert copy_beam_tables(carried, run2) == 1
  assert tinygrad_cache(run2, f"print(diskcache_get('beam_search', {key(b'k1')}))") == "['opt-a']"
  tinygrad_cache(run2, f"diskcache_put('beam_search', {key(b'k2')}, ['opt-b'])")
  save_beam_cache(run2, carried)
  both = tinygrad_cache(carried, f"print(diskcache_get('beam_search', {key(b'k1')}), diskcache_get('beam_search', {key(b'k2')}))")
  assert both == "['opt-a'] ['opt-b']"
  assert not carried.with_name("beam.db.tmp").exists()


def test_a_running_search_is_saved_with_each_result(tmp_path):
  """A search left running across device calls: dest follows each result while tinygrad's connection stays open (its
  writes sit in the WAL), is rewritten when a kernel's result is written again, and is left alone while nothing changes
  (a compiled program is no search result). A save once a minute lost two kernels found in the last minute of a call."""
  import pickle
  import sqlite3
  import threading
  import time
  from tinygrad.helpers import VERSION
  from lab.bench import follow_beam_cache
  run, carried, stop = tmp_path / "run.db", tmp_path / "beam.db", threading.Event()
  # one tinygrad process for the whole run, as the trainer is: each line of stdin is run, then "ok" printed
  live = subprocess.Popen([sys.executable, "-c", "import sys\nfrom tinygrad.helpers import diskcache_put\n"
                           "for line in sys.stdin: exec(line); print('ok', flush=True)"], env={"CACHEDB": str(run),
                          "PATH": "/usr/bin:/bin"}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

  def put(code: str) -> None:
    live.stdin.write(code + "\n"); live.stdin.flush()
    assert live.stdout.readline() == "ok\n"

  def saved() -> dict:
    """dest's search results, kernel -> chosen optimizations ({} before its first save)"""
    if not carried.is_file(): return {}
    con = sqlite3.connect(carried)
    try: return {ast: pickle.loads(val) for ast, val in con.execute(f"SELECT ast, val FROM beam_search_{VERSION}")}
    except sqlite3.OperationalError: return {}   # caught between a save's replace and this read
    finally: con.close()

  def wait_for(want: dict) -> None:
    deadline = time.time() + 20
    while saved() != want and time.time() < deadline: time.sleep(0.05)
    assert saved() == want

  saver = threading.Thread(target=follow_beam_cache, args=(run, carried, 0.05), kwargs={"stop": stop}, daemon=True)
  saver.start()
  try:
    put(f"diskcache_put('beam_search', {key(b'k1')}, ['opt-a'])")
    wait_for({b"k1": ["opt-a"]})
    put(f"diskcache_put('beam_search', {key(b'k2')}, ['opt-b'])")
    put(f"diskcache_put('beam_search', {key(b'k1')}, ['opt-c'])")   # searched again: same kernel, new result
    wait_for({b"k1": ["opt-c"], b"k2": ["opt-b"]})
    put(f"diskcache_put('beam_search', {key(b'k1')}, ['opt-d'])")   # again, now the latest row
    wait_for({b"k1": ["opt-d"], b"k2": ["opt-b"]})
    inode = carried.stat().st_ino
    put("diskcache_put('compile_cuda', 'prog', b'x' * 1000)")
    time.sleep(0.5)                              # ten looks with no new search result
    assert carried.stat().st_ino == inode        # each save replaces the file: this one was not saved again
  finally:
    stop.set(); saver.join(timeout=20); live.stdin.close(); live.wait(timeout=20)
  assert not saver.is_alive()


def test_two_runs_saving_into_one_cache_keep_both_searches(tmp_path):
  """Two benches given the same --beam-cache (or a bench and lab/scripts/upstream_beam.sh): each save merged the old file
  and replaced it, so the later replace dropped what the other had just added (and one's .tmp was the other's)."""
  from lab.bench import beam_rows
  runs = []
  for i in range(4):
    run = tmp_path / f"run{i}.db"
    tinygrad_cache(run, "\n".join(f"diskcache_put('beam_search', {key(f'r{i}k{j}'.encode())}, ['opt'])" for j in range(20)))
    runs.append(run)
  save = ("import sys\nfrom pathlib import Path\nfrom lab.bench import save_beam_cache\n"
          "for _ in range(10): save_beam_cache(Path(sys.argv[1]), Path(sys.argv[2]), quiet=True)")
  procs = [subprocess.Popen([sys.executable, "-c", save, str(run), str(tmp_path / "beam.db")], cwd=REPO,
                            stderr=subprocess.PIPE, text=True) for run in runs]
  errors = [p.communicate(timeout=120)[1] for p in procs]
  assert all(p.returncode == 0 for p in procs), errors
  assert beam_rows(tmp_path / "beam.db") == 4 * 20


def test_results_of_another_tinygrad_version_are_kept_but_not_counted_as_carried_in(tmp_path, capsys):
  """tinygrad reads only beam_search_<its VERSION>: a cache from another version's search once said "5 BEAM-searched
  kernels carried in" and then searched all of them again."""
  import sqlite3
  from lab.bench import beam_rows, seed_beam_cache
  cache = tmp_path / "beam.db"
  tinygrad_cache(cache, f"diskcache_put('beam_search', {key(b'k1')}, ['opt'])")
  con = sqlite3.connect(cache)
  con.execute("CREATE TABLE beam_search_21 (ast blob, val blob, PRIMARY KEY (ast))")
  con.executemany("INSERT INTO beam_search_21 VALUES (?, ?)", [(b"a", b"x"), (b"b", b"x")])
  con.commit(); con.close()
  assert seed_beam_cache("--beam-cache beam.db", cache, tmp_path / "run.db") == 1
  err = capsys.readouterr().err
  assert err.startswith("--beam-cache beam.db: 2 "), err     # the flag as given, and how many results it skips
  assert beam_rows(tmp_path / "run.db") == 3    # carried all the same: saved back with the rest


def test_missing_cache_db_saves_nothing(tmp_path):
  save_beam_cache(tmp_path / "never-written.db", tmp_path / "beam.db")
  assert not (tmp_path / "beam.db").exists()


def test_corrupt_beam_cache_is_a_clear_error_and_is_kept(tmp_path):
  bad = tmp_path / "beam.db"
  bad.write_bytes(b"this is not sqlite" * 100)
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--against", "none",
                      "--beam-cache", str(bad)], cwd=REPO, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and "Traceback" not in r.stderr
  assert f"{bad}: " in r.stderr
  assert bad.read_bytes() == b"this is not sqlite" * 100


def test_a_beam_cache_in_a_missing_folder_is_refused_before_the_search(tmp_path):
  r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--against", "none",
                      "--beam-cache", "no-such-dir/beam.db"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                     env={**os.environ, "PYTHONPATH": str(REPO)})
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
  assert f"{tmp_path}/no-such-dir/beam.db" in r.stderr, r.stderr
  assert "tinyperf-bench" not in r.stdout           # refused before the run


def test_a_beam_cache_that_cannot_be_replaced_is_refused_before_the_search(tmp_path):
  """A directory once ran the whole search and then failed to save it (IsADirectoryError); a read-only cache was
  replaced by a writable one."""
  (tmp_path / "adir").mkdir()
  ro = tmp_path / "r o.db"   # a space: the hint below is pasted into a shell
  copy_beam_tables(tmp_path / "none.db", ro)
  ro.chmod(0o444)
  before = ro.read_bytes()
  for name, says in (("adir", "adir: a directory, not a file"), ("r o.db", "r o.db: the file is read-only")):
    r = subprocess.run([sys.executable, "-m", "lab.bench", "resnet", "--platform", "cpu_smoke", "--against",
                        "none", "--beam-cache", name], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "tinyperf-bench" not in r.stdout
  assert ro.read_bytes() == before and ro.stat().st_mode & 0o777 == 0o444
  assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "none.db", "r o.db"]
  # the copy the error says to make, made as it says, is one the run takes (a `cp` of it was read-only again, and
  # refused: how a device lease of 2026-12-03 was lost)
  hint = re.search(r"Pass a writable copy \((.+?) COPY\)", r.stderr)[1]
  subprocess.run(f"{hint} copy.db", shell=True, cwd=tmp_path, check=True)
  require_saving_folder("--beam-cache copy.db", tmp_path / "copy.db")
  assert (tmp_path / "copy.db").read_bytes() == before


def test_time_limit_stops_the_whole_process_group(tmp_path):
  """What --time-limit relies on: the phase and the processes it started (BEAM's workers) are killed together."""
  import io
  import time
  from tinyperf.tooling.common.process import stream_process
  pidfile = tmp_path / "child.pid"
  out, t0 = io.BytesIO(), time.time()
  rc, stopped = stream_process(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; echo started; wait"], dict(os.environ), out,
                      tmp_path, time_limit=1.0)
  assert rc == -9 and stopped and time.time() - t0 < 30 and out.getvalue() == b"started\n"
  child = int(pidfile.read_text())
  time.sleep(0.2)
  state = open(f"/proc/{child}/stat").read().split()[2] if os.path.exists(f"/proc/{child}") else "gone"
  assert state in ("gone", "Z"), state     # the background sleep died with its group (a zombie at most)
