"""`tinyperf report`'s readers: throughput from result-log timestamps, accuracy series, and the raw console output
(provenance lines) and the metrics file (per-step rates, INIT's ranked BEAM search) - no checkers; one plot."""
from __future__ import annotations

from mllog_builder import write_log
from run_builder import GIT_SHA, console_output, metrics_output
from tinyperf.tooling.ship import report
from tinyperf.tooling.common.mllog_reader import read_log


def test_throughput_and_output_parsing(tmp_path):
  log = read_log(write_log(tmp_path / "r.txt", "resnet", epochs=10, run_minutes=100.0))
  tp = report.throughput_series(log, "resnet")
  assert [x for x, _ in tp] == [float(e) for e in range(1, 11)]
  # 10 epochs in ~100 min: each epoch_start->epoch_stop is ~599.9 s for 1281167 samples
  assert all(abs(v - 1281167 / 599.8) < 5 for _, v in tp), tp
  blog = read_log(write_log(tmp_path / "b.txt", "bert", evals=4, run_minutes=40.0))
  btp = report.throughput_series(blog, "bert")
  assert len(btp) == 4 and btp[0][0] == 150016.0 and all(v > 0 for _, v in btp)
  assert [x for x, _ in report.accuracy_series(blog)] == [150016.0 * i for i in range(1, 5)]
  out = tmp_path / "output.log"
  out.write_text(console_output("resnet", 7))
  prov = report.read_provenance(out)
  assert len(prov) == 1 and GIT_SHA in prov[0]
  metrics = tmp_path / "mlperf.metrics.jsonl"
  metrics.write_text(metrics_output("resnet", 7, epochs=2, steps=4) + '{"kind": "step", "rat')   # cut by a kill
  rate, unit = report.read_step_rate(metrics)
  assert unit == "img" and [x for x, _ in rate] == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]
  assert rate[0][1] < rate[1][1]                     # the first step of an epoch at half rate, as written
  metrics.write_text(metrics_output("bert", 7, epochs=2, steps=3))
  rate, unit = report.read_step_rate(metrics)
  assert unit == "seq" and [x for x, _ in rate] == [96.0 * i for i in range(1, 7)]


def test_default_out_of_a_run_directory_that_records_its_system(tmp_path):
  """`tinyperf run` writes R/systems/<system>.json: R stays a run directory (its report goes to R/report), while a
  submitter tree (systems/ and results/, no runs/) gets <org>_report beside it, never inside what gets packed."""
  R, org = tmp_path / "R", tmp_path / "tinycorp"
  for d in (R / "results/cpu_smoke/resnet", R / "runs/cpu_smoke/resnet", R / "systems", org / "results/x/resnet",
            org / "systems"):
    d.mkdir(parents=True)
  assert report.default_out(R) == R / "report"
  assert report.default_out(R / "results/cpu_smoke/resnet") == R / "report"
  assert report.default_out(org) == tmp_path / "tinycorp_report"
  assert report.default_out(org / "results/x/resnet") == tmp_path / "tinycorp_report"
  # a symlinked directory keeps the name the user gave it (the report was named after the link's target)
  (tmp_path / "mine").symlink_to(org); (tmp_path / "latest").symlink_to(R)
  assert report.default_out(tmp_path / "mine") == tmp_path / "mine_report"
  assert report.default_out(tmp_path / "latest/results/cpu_smoke/resnet") == tmp_path / "latest/report"


def test_the_beam_search_plot_draws_what_the_metrics_file_holds(tmp_path):
  # one run with INIT's ranked search (two kernels), one without: a PNG either way
  runs = [report.RunData("result_0.txt", 1, 10.0, "compliant", True, True, "", "", beam_search=[(30.0, 0.2), (75.5, 0.41)]),
          report.RunData("result_1.txt", 2, 10.0, "compliant", True, True, "", "")]
  b = report.BenchData("1xH200", "resnet", "4.0.0", "closed", 0.759, "t", runs, None, "", 1.0, None, True, "", [], None)
  png = report.plot_beam_search(b)
  assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_time_to_train_bars_are_labelled_as_precisely_as_the_score_and_fill_the_plot():
  """The smoke set's runs take 0.09-0.21 min: its bars were labelled 0.1 and 0.2 under a mean of 0.14, and squashed into
  the bottom sixth of a y axis that started at 1 minute."""
  mins = [0.13, 0.15, 0.21, 0.15, 0.09]
  notes = ["", "", "slowest: not in the mean", "", "fastest: not in the mean"]
  runs = [report.RunData(f"result_{i}.txt", i, m, "compliant", True, True, n, "") for i, (m, n) in enumerate(zip(mins, notes))]
  b = report.BenchData("cpu_smoke", "resnet", "4.0.0", "open", 0.9, "t", runs, 0.1433, "", 1.0, None, True, "", [], None)
  plt, fig, ax = report.time_to_train_figure(b)
  labels = [t.get_text().split("\n")[0] for t in ax.texts]
  top = ax.get_ylim()[1]
  plt.close(fig)
  assert labels == ["0.13", "0.15", "0.21", "0.15", "0.09"]
  assert top < 2 * max(mins)
  assert report.plot_time_to_train(b)[:8] == b"\x89PNG\r\n\x1a\n"


def _bench(bm, runs, score=None, note=""):
  return report.BenchData("tinybox_green", bm, "4.0.0", "closed", 0.759, "t", runs, score, note, 1.0, None, True, "", [],
                          None)


def test_a_run_identical_to_another_is_still_seen_in_the_accuracy_plot():
  """Two runs with the same evals: the second was drawn exactly over the first, in the same style."""
  acc = [(1.0, 0.2), (5.0, 0.5), (9.0, 0.76)]
  runs = [report.RunData(f"result_{i}.txt", i, 10.0, "compliant", True, True, "", "",
                         accuracy=[(x, y + 0.01 * i) for x, y in acc]) for i in range(4)]
  runs[3].accuracy = list(acc)
  plt, fig, ax = report.accuracy_figure(_bench("resnet", runs))
  lines = [l for l in ax.get_lines() if l.get_label().startswith("result_")]
  labels = [l.get_label() for l in lines]
  looks = {(l.get_marker(), l.get_linestyle()) for l in lines}
  xlabel = ax.get_xlabel()
  plt.close(fig)
  assert len(looks) == 4                                                     # no two runs drawn alike
  assert "result_0.txt" in labels[3] and "result_0.txt" not in labels[2]    # the hidden one names what hides it
  assert "epoch" in xlabel


def test_throughput_is_one_panel_per_run_and_each_step_rate_lies_in_its_epoch():
  """Ten BERT runs on one axes were a smear; ResNet's step rates were shifted half an epoch against the epoch rates."""
  bert = [report.RunData(f"result_{i}.txt", i, 10.0, "compliant", True, True, "", "",
                         throughput=[(150016.0, 200.0), (300032.0, 210.0)],
                         step_rate=[(96.0 * k, 230.0) for k in range(1, 3000)], step_unit="seq") for i in range(10)]
  plt, fig, axes = report.throughput_figure(_bench("bert", bert))
  drawn = [ax for ax in fig.axes if ax.get_lines()]
  plt.close(fig)
  assert len(drawn) == 10 and all(len(ax.get_lines()) == 2 for ax in drawn)
  # ResNet: epoch 1's rate is held from 0 to 1 epochs completed, and its steps (0.25 .. 1.0) fall inside it
  resnet = [report.RunData("result_0.txt", 1, 10.0, "compliant", True, True, "", "",
                           throughput=[(1.0, 6000.0), (2.0, 6100.0)],
                           step_rate=[(e - 1 + s / 4, 7000.0) for e in (1, 2) for s in range(1, 5)], step_unit="img")]
  plt, fig, axes = report.throughput_figure(_bench("resnet", resnet))
  (ax,) = [a for a in fig.axes if a.get_lines()]
  steps, stamps = ax.get_lines()
  plt.close(fig)
  lo, hi = min(stamps.get_xdata()), max(stamps.get_xdata())
  assert (lo, hi) == (0.0, 2.0)
  assert all(lo < x <= hi for x in steps.get_xdata())
  assert report.plot_throughput(_bench("resnet", resnet))[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_set_without_a_score_marks_no_run_as_in_the_mean(tmp_path):
  """Two runs: score has no olympic mean; the report said 'no score: no score' and marked both bars 'in the mean'."""
  runs = [report.RunData(f"result_{i}.txt", i, 120.0 + i, "compliant", True, True, "", "") for i in range(2)]
  b = _bench("resnet", runs, None, "no score: 2 counted run(s) leave nothing after dropping the fastest and slowest")
  plt, fig, ax = report.time_to_train_figure(b)
  legend = [t.get_text() for t in ax.get_legend().get_texts()]
  plt.close(fig)
  assert not any("in the mean" in t for t in legend) and any("leave nothing" in t for t in legend)
  md = report.markdown(tmp_path, [b], {("tinybox_green", "resnet"): []})
  assert "no score: no score" not in md and "in the mean" not in md.split("| first failure |")[1]
