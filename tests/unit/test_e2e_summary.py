"""lab/scripts/e2e_summary.py: the end-to-end figures (INIT, RUN step 0 vs steady, evals) read from a result log and the
metrics file beside it."""
import importlib.util
import json

from tinyperf.benchmarks.common.runtime import metrics_path
from mllog_builder import REPO, write_log

spec = importlib.util.spec_from_file_location("e2e_summary", REPO / "lab" / "scripts" / "e2e_summary.py")
e2e_summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(e2e_summary)


def test_bert_log_with_metrics(tmp_path):
  log = write_log(tmp_path / "result_bert_1.txt", "bert", init_minutes=1.5, run_minutes=10, evals=2,
                  status="aborted")
  steps = [80.0, 2.1, 2.0, 2.2, 2.0]
  with open(metrics_path(log), "w") as f:
    for i, s in enumerate(steps):
      f.write(json.dumps({"kind": "step", "step": i + 1, "step_s": s, "wait_s": 0.001 * (i + 1), "unit": "seq"}) + "\n")
    f.write(json.dumps({"kind": "eval", "step": 6, "accuracy": 0.05}) + "\n")
    f.write(json.dumps({"kind": "beam", "time": 1.0, "kernels": 149, "searched": 12, "covered": 0.61, "step_beam0_s": 2.1,
                        "search_s": 300.2, "stopped": "budget"}) + "\n")
    f.write("not json\n")
  r = e2e_summary.summarize(log)
  assert r["benchmark"] == "bert" and r["run_stop"] == "aborted"
  assert r["init_s"] == 90.0 and r["run_s"] == 600.0
  assert len(r["evals_s"]) == 2 and r["evals_s"][0] == 0.05 and r["eval_accuracy"][-1] == 0.7215
  assert r["steps"] == 5 and (r["step0_s"], r["step1_s"], r["step2_s"]) == (80.0, 2.1, 2.0)
  assert r["steady_step_s"] == 2.05                     # median of the steps after the JIT's capture step
  assert r["step0_over_steady"] == 39.0 and r["items_per_s"] == round(256 / 2.05, 1) and r["unit"] == "seq"
  assert r["wait_median_s"] == 0.003 and r["wait_max_s"] == 0.005
  assert r["ranked_beam"] == [{"kernels": 149, "searched": 12, "covered": 0.61, "step_beam0_s": 2.1, "search_s": 300.2,
                               "stopped": "budget"}]


def test_without_metrics_file_the_log_figures_remain(tmp_path, capsys):
  log = write_log(tmp_path / "result_resnet_1.txt", "resnet", init_minutes=1, run_minutes=5, epochs=4)
  r = e2e_summary.summarize(log)
  assert r["steps"] == 0 and "steady_step_s" not in r and "ranked_beam" not in r and r["run_stop"] == "success" and r["init_s"] == 60.0
  assert e2e_summary.main([str(log)]) == 0 and json.loads(capsys.readouterr().out)["global_batch_size"] == 1536
  assert e2e_summary.main([str(tmp_path / "missing.txt")]) == 2


def test_init_is_judged_against_the_closed_limit_whatever_the_log_says(tmp_path):
  # an open e2e run (DIVISION=open) is allowed 240 min by the checker; the figure issue 20 wants is the closed 30
  near = e2e_summary.summarize(write_log(tmp_path / "result_0.txt", "bert", division="open", init_minutes=29.9))
  over = e2e_summary.summarize(write_log(tmp_path / "result_1.txt", "bert", division="open", init_minutes=30.5))
  assert near["division"] == over["division"] == "open"
  assert near["init_within_closed_limit"] is True and over["init_within_closed_limit"] is False
  gpu = e2e_summary.summarize(REPO / "docs" / "perf" / "2026-12-03_bert_e2e_synthetic_result.txt")   # row 20's log
  assert gpu["init_s"] == 1247.6 and gpu["init_within_closed_limit"] and gpu["run_stop"] == "success"
