"""`tinyperf report`: PNGs that decode and are not blank, and a Markdown summary with scores, verdicts, seeds and
provenance, for run trees (with raw outputs) and packaged trees (without). Runs the real checkers per directory."""
from __future__ import annotations
import shutil

import pytest
from PIL import Image

from mllog_builder import write_log
from run_builder import GIT_SHA, default_seed, make_runs
from tinyperf.tooling.cli import main as cli

pytestmark = pytest.mark.integration
KINDS = ("accuracy", "time_to_train", "throughput")


def assert_real_png(path):
  assert path.stat().st_size > 10_000, path
  with Image.open(path) as im:
    assert im.format == "PNG" and im.size[0] >= 800 and im.size[1] >= 500
    rgb = im.convert("RGB")
    colors = rgb.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50, f"{path}: {len(colors or [])} colours"
    hist = rgb.convert("L").histogram()
    non_white = sum(hist[:250]) / sum(hist)
    assert non_white > 0.02, f"{path}: {non_white:.1%} non-white pixels"


def run(capsys, *argv):
  code = cli(["report", *map(str, argv)])
  out, err = capsys.readouterr()
  return code, out, err


def test_resnet_run_tree(capsys, tmp_path):
  R = make_runs(tmp_path, "resnet", runs=[{}, {"status": "aborted"}, {}, {}, {"init_minutes": 31}])
  code, out, err = run(capsys, R)
  assert code == 0, err
  d = R / "report"
  for k in KINDS: assert_real_png(d / f"tinybox_green_resnet_{k}.png")
  md = (d / "report.md").read_text()
  assert "**score: " in md and "accepted under olympic scoring" not in md     # two bad runs: rejected
  assert "REJECTED" in md and "NON-COMPLIANT" in md and "CHECK for 'init_stop' failed" in md
  for i in range(5): assert f"| `result_{i}.txt` | {default_seed(i)} |" in md
  assert f"git_sha={GIT_SHA}" in md and "result_0.txt, result_1.txt" in md
  for k in KINDS: assert f"](tinybox_green_resnet_{k}.png)" in md
  assert "target 0.759" in md or "accuracy target 0.759" in md
  # never overwritten silently
  code, out, err = run(capsys, R)
  assert code == 2 and "already exist" in err and "--force" in err
  assert run(capsys, R, "--force")[0] == 0


def test_bert_and_packaged_trees(capsys, tmp_path):
  R = make_runs(tmp_path, "bert", outputs=False)
  bench = R / "results" / "tinybox_green" / "bert"
  code, out, err = run(capsys, bench)
  assert code == 0, err
  rep = R / "report"                                     # the run directory's, not inside results/
  for k in KINDS: assert_real_png(rep / f"tinybox_green_bert_{k}.png")
  md = (rep / "report.md").read_text()
  assert "**score: " in md and "training samples" not in md     # the axis label lives in the PNG
  assert "not recorded (no raw output): result_0.txt" in md and "## bert on tinybox_green" in md
  # a submitter tree (what `package` writes): no ledger, and the report goes beside the tree, not into it
  org = tmp_path / "tinycorp"
  (org / "results" / "tinybox_green").mkdir(parents=True)
  shutil.copytree(bench, org / "results" / "tinybox_green" / "bert")
  shutil.copytree(tmp_path / "systems", org / "systems")
  code, out, err = run(capsys, org)
  assert code == 0, err
  md = (tmp_path / "tinycorp_report" / "report.md").read_text()
  assert "run ledger: none beside these results" in md and "check`: ACCEPTED" in md
  assert sorted(p.name for p in org.iterdir()) == ["results", "systems"]


def test_bad_input(capsys, tmp_path):
  code, out, err = run(capsys, tmp_path / "nope")
  assert code == 2 and str(tmp_path / "nope") in err and "Traceback" not in err
  p = write_log(tmp_path / "result_0.txt", "resnet")
  code, out, err = run(capsys, p)
  assert code == 2 and f"{p}:" in err and "Traceback" not in err
