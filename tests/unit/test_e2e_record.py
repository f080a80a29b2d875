"""scripts/e2e_record.py: a docs/perf record from what `scripts/e2e_h200.sh collect` brought back from the H200, typed
from another directory with relative paths. The job is a real one (PERFORMANCE.md row 21)."""
import json
import subprocess
import sys
import tarfile

from tests.conftest import REPO

JOB = REPO / "docs" / "perf" / "2026-12-03_resnet_e2e_open_job.tgz"
COMMAND = "E2E=resnet LOADER_RATE=0 TRAIN_BEAM=1 EPOCHS=5 EVAL_START_EPOCH=3 BUDGET_S=0 scripts/e2e_h200.sh"


def record(*args, cwd):
  return subprocess.run([sys.executable, str(REPO / "scripts" / "e2e_record.py"), *args], cwd=cwd, capture_output=True,
                        text=True, timeout=120)


def test_the_record_of_a_gpu_job_carries_its_machine_figures_and_verdict(tmp_path):
  (tmp_path / "job.tgz").write_bytes(JOB.read_bytes())
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
    (REPO / "docs" / "perf" / "2026-12-03_resnet_e2e_open_result.txt").read_bytes()
  # the committed record is this tool's, paths aside
  committed = json.loads((REPO / "docs" / "perf" / "2026-12-03_resnet_e2e_open.jsonl").read_text())
  strip = lambda d: {k: v for k, v in d.items() if k not in ("what", "result_log", "job")}
  assert strip(committed) == strip(rec)
  # a second record under the same name is refused, the first kept
  before = {p.name: p.read_bytes() for p in (tmp_path / "perf").iterdir()}
  r = record("job.tgz", "--record", "perf/resnet.jsonl", "--what", "again", "--command", COMMAND, cwd=tmp_path)
  assert r.returncode == 2 and "never overwritten" in r.stderr and "Traceback" not in r.stderr, r
  assert {p.name: p.read_bytes() for p in (tmp_path / "perf").iterdir()} == before


def test_bad_input_is_refused_with_exit_2_naming_it(tmp_path):
  (tmp_path / "job.tgz").write_bytes(JOB.read_bytes())
  r = record("job.tgz", "--record", "perf/x.jsonl", "--what", "w", cwd=tmp_path)
  assert r.returncode == 2 and "job.tgz has no command file" in r.stderr and "--command" in r.stderr, r
  with tarfile.open(JOB) as t, tarfile.open(tmp_path / "no_result.tgz", "w:gz") as out:   # a run that made no log
    for m in t.getmembers():
      if "result_" not in m.name: out.addfile(m, t.extractfile(m) if m.isfile() else None)
  r = record("no_result.tgz", "--record", "perf/x.jsonl", "--what", "w", "--command", COMMAND, cwd=tmp_path)
  assert r.returncode == 2 and "no_result.tgz holds no results/result_*.txt" in r.stderr, r
  r = record(".", "--record", "perf/x.jsonl", "--what", "w", "--command", COMMAND, cwd=tmp_path)   # a folder
  assert r.returncode == 2 and "is not the e2e.tgz that `scripts/e2e_h200.sh collect DIR` writes" in r.stderr, r
  r = record("job.tgz", "--record", "perf/x.json", "--what", "w", "--command", COMMAND, cwd=tmp_path)
  assert r.returncode == 2 and "a record is a .jsonl file" in r.stderr and "Traceback" not in r.stderr, r
  assert not (tmp_path / "perf").exists()
