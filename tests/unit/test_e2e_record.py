"""lab/scripts/e2e_record.py: a docs/perf record from what `lab/scripts/e2e_h200.sh collect` brought back from the H200, typed
from another directory with relative paths. The job is rebuilt from a real one (PERFORMANCE.md's ResNet end-to-end
row, logged open): its committed result log and what its record holds (the archive itself is on the perf-data
branch)."""
import io
import json
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import REPO

PERF = REPO / "docs" / "perf"
COMMAND = "E2E=resnet LOADER_RATE=0 TRAIN_BEAM=1 EPOCHS=5 EVAL_START_EPOCH=3 BUDGET_S=0 scripts/e2e_h200.sh"   # as typed then


def job_of(rec: dict, result_log: bytes, sha: str | None = None, provenance: str = "", loader: str = "") -> bytes:
  """The e2e.tgz `lab/scripts/e2e_h200.sh collect` writes, from a record: host facts, events, run.log's INIT step 0, the
  result log, and a metrics file whose steps, waits and ranked-BEAM line give the record's figures. sha: the host's sha
  line (default: git's 40 digits); provenance: run.log's provenance line, if any; loader: loader.log, if any."""
  steady = rec["steady_step_s"]
  steps = [rec["step0_s"], rec["step1_s"], rec["step2_s"]] + [steady] * (rec["steps"] - 3)
  waits = [rec["wait_max_s"]] + [rec["wait_median_s"]] * (rec["steps"] - 1)
  metrics = [{"kind": "beam", "time": 1796289818.9, **b} for b in rec["ranked_beam"]]
  metrics += [{"kind": "step", "time": 1796289845.5 + i, "epoch": 1, "step": i, "step_s": s, "wait_s": w, "unit": rec["unit"]}
              for i, (s, w) in enumerate(zip(steps, waits))]
  files = {"host.txt": f"{rec['gpu']}, {rec['driver']}, 143771 MiB\n{rec['cores']}\nPython {rec['python']}\n"
                       f"tinygrad {rec['tinygrad']} mlperf-logging {rec['mlperf_logging']} pillow {rec['pillow']} "
                       f"numpy {rec['numpy']}\n{sha or rec['git'] + '0' * 33}\n",
           "events": "1796289126 t=0s start resnet\n1796289915 t=789s done\n",
           "run.log": provenance + f"1796289209.6 init train step 0: {rec['init_step0_s'] * 1000:.1f} ms, loss 6.996\n",
           "results/result_resnet_1.txt": result_log,
           "results/result_resnet_1.metrics.jsonl": "".join(json.dumps(m) + "\n" for m in metrics),
           **({"loader.log": loader} if loader else {})}
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as t:
    for name, data in files.items():
      data = data.encode() if isinstance(data, str) else data
      info = tarfile.TarInfo("./" + name); info.size = len(data)
      t.addfile(info, io.BytesIO(data))
  return buf.getvalue()


@pytest.fixture
def job(tmp_path):
  (tmp_path / "job.tgz").write_bytes(job_of(json.loads((PERF / "2026-12-03_resnet_e2e_open.jsonl").read_text()),
                                            (PERF / "2026-12-03_resnet_e2e_open_result.txt").read_bytes()))
  return tmp_path / "job.tgz"


def record(*args, cwd):
  return subprocess.run([sys.executable, str(REPO / "lab" / "scripts" / "e2e_record.py"), *args], cwd=cwd, capture_output=True,
                        text=True, timeout=120)


def test_the_record_of_a_gpu_job_carries_its_machine_figures_and_verdict(tmp_path, job):
  r = record("job.tgz", "--record", "perf/resnet.jsonl", "--what", "ResNet-50 end to end", "--command", COMMAND, cwd=tmp_path)
  assert r.returncode == 0, r.stderr
  rec = json.loads((tmp_path / "perf" / "resnet.jsonl").read_text())
  assert (rec["gpu"], rec["driver"], rec["cores"], rec["tinygrad"], rec["mlperf_logging"], rec["git"], rec["date"]) == \
    ("NVIDIA H200", "580.159.04", 16, "0.14.0", "4.1.68", "df953fc", "2026-12-03")
  assert (rec["init_s"], rec["init_step0_s"], rec["searched_kernels"], rec["total_kernels"]) == (697.2, 54.72, 11, 369)
  assert rec["command"] == COMMAND and rec["machine"] == "1xH200" and rec["items_per_s"] == 328.1
  assert rec["check"]["verdict"] == "REJECTED" and rec["check"]["division"] == "open"
  assert rec["check"]["failures"] == ["Failed checks for eval_accuracy : v['value'] < 1.0 (line 31)"]
  assert (tmp_path / "perf" / "resnet_result.txt").read_bytes() == \
    (PERF / "2026-12-03_resnet_e2e_open_result.txt").read_bytes()
  # the committed record is this tool's, paths aside
  committed = json.loads((PERF / "2026-12-03_resnet_e2e_open.jsonl").read_text())
  strip = lambda d: {k: v for k, v in d.items() if k not in ("what", "result_log", "job")}
  assert strip(committed) == strip(rec)
  # a second record under the same name is refused, the first kept
  before = {p.name: p.read_bytes() for p in (tmp_path / "perf").iterdir()}
  r = record("job.tgz", "--record", "perf/resnet.jsonl", "--what", "again", "--command", COMMAND, cwd=tmp_path)
  assert r.returncode == 2 and "never overwritten" in r.stderr and "Traceback" not in r.stderr, r
  assert {p.name: p.read_bytes() for p in (tmp_path / "perf").iterdir()} == before


def test_a_short_sha_the_kernels_knob_and_the_loader_rates_are_in_the_record(tmp_path):
  """On a leased machine the tree's .git may be stale, so e2e_h200.sh writes TINYPERF_GIT_SHA as given, often 7 digits:
  the record names it (it was left out), and the cores line beside it stays the cores. The KERNELS knob comes from the
  run's provenance line and the loader's rates from loader.log (a run without them gets neither field)."""
  rec = json.loads((PERF / "2026-12-03_resnet_e2e_open.jsonl").read_text())
  line = "1796678747.5 provenance: tinyperf=not installed, git_sha=a58dfef, tinygrad=0.14.0, kernels=triton\n"
  rates = [{"loader_workers": 1, "img_per_s": 356.0}, {"loader_workers": 16, "img_per_s": 4628.0}]
  loader = "".join(json.dumps(r) + "\n" for r in rates) + "Traceback (a line that is no rate)\n"
  for sha, provenance, loader_log, kernels, loader_rates in (("a58dfef", line, loader, "triton", rates),
                                                             ("1234567", "", "", None, None)):
    log = (PERF / "2026-12-03_resnet_e2e_open_result.txt").read_bytes()
    (tmp_path / f"{sha}.tgz").write_bytes(job_of(rec, log, sha, provenance, loader_log))
    r = record(f"{sha}.tgz", "--record", f"perf/{sha}.jsonl", "--what", "w", "--command", COMMAND, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = json.loads((tmp_path / "perf" / f"{sha}.jsonl").read_text())
    assert (got["git"], got["cores"], got.get("kernels"), got.get("loader_rates")) == (sha, 16, kernels, loader_rates)


def test_bad_input_is_refused_with_exit_2_naming_it(tmp_path, job):
  r = record("job.tgz", "--record", "perf/x.jsonl", "--what", "w", cwd=tmp_path)
  assert r.returncode == 2 and "job.tgz" in r.stderr and "--command" in r.stderr, r      # the archive and the flag
  with tarfile.open(job) as t, tarfile.open(tmp_path / "no_result.tgz", "w:gz") as out:   # a run that made no log
    for m in t.getmembers():
      if "result_" not in m.name: out.addfile(m, t.extractfile(m) if m.isfile() else None)
  r = record("no_result.tgz", "--record", "perf/x.jsonl", "--what", "w", "--command", COMMAND, cwd=tmp_path)
  assert r.returncode == 2 and "no_result.tgz" in r.stderr and "results/result_*.txt" in r.stderr, r
  r = record(".", "--record", "perf/x.jsonl", "--what", "w", "--command", COMMAND, cwd=tmp_path)   # a folder
  assert r.returncode == 2 and "`lab/scripts/e2e_h200.sh collect DIR`" in r.stderr, r   # the command that makes one
  r = record("job.tgz", "--record", "perf/x.json", "--what", "w", "--command", COMMAND, cwd=tmp_path)
  assert r.returncode == 2 and "perf/x.json" in r.stderr and ".jsonl" in r.stderr and "Traceback" not in r.stderr, r
  assert not (tmp_path / "perf").exists()
