"""The preflight's data check, where the run runs: a ResNet data set must hold both splits the run reads, a BERT one its
train shards and eval set."""
import pytest

from tinyperf.benchmarks import preflight as PF
from tinyperf.benchmarks.registry import load_config
from tinyperf.benchmarks.resnet.prep import synthetic_imagenet
from tinyperf.tooling.common.errors import UserError
from tinyperf.tooling.common.dataset import check_prepared


def test_a_data_set_without_val_images_fails_the_preflight(tmp_path, capsys):
  # it passed, and the run failed only after INIT, at the first eval, leaving a non-compliant log among the results
  cfg = load_config("resnet", "cpu_smoke", environ={})
  for val, ok in ((0, False), (1, True)):
    data = tmp_path / f"val{val}"
    synthetic_imagenet(data, classes=cfg["NUM_CLASSES"], train_per_class=1, val_per_class=val, size=8)
    pf = PF.Preflight(cfg, data, tmp_path)
    pf.dataset()
    (name, passed, detail), = pf.results
    assert (name, passed) == ("data", ok), detail
    if not ok: assert "'val'" in detail and "--val-per-class" in detail     # the split, and the flag that makes it



def test_a_bert_data_set_without_its_eval_shard_fails_the_preflight(tmp_path):
  cfg = load_config("bert", "cpu_smoke", environ={})
  (tmp_path / "train").mkdir()
  def check():
    pf = PF.Preflight(cfg, tmp_path, tmp_path)
    pf.dataset()
    (name, passed, detail), = pf.results
    return passed, detail
  passed, detail = check()
  assert not passed and str(tmp_path / "train") in detail   # names the empty folder
  (tmp_path / "train" / "part-00000.shard").write_bytes(b"")   # the preflight counts shards; the loader reads them
  passed, detail = check()
  assert not passed and f"prep wiki eval --data {tmp_path}" in detail   # names the command that makes it
  (tmp_path / "eval.shard").write_bytes(b"")
  assert check() == (True, "1 train shards + eval.shard")

def test_the_host_side_check_says_whether_data_is_missing_or_a_file(tmp_path):
  # `--data afile` said the directory "does not exist", which sends the user looking for a typo in a path that is there
  cfg = load_config("resnet", "cpu_smoke", environ={})
  (tmp_path / "afile").write_text("x")
  for name, said in (("afile", "is a file, not a directory"), ("nothing", "does not exist")):
    with pytest.raises(UserError, match=said):
      check_prepared(cfg, tmp_path / name)


def test_the_host_side_check_names_runnable_bert_prep_commands(tmp_path):
  # it said `tinyperf prep wiki pretrain/eval --data D`: no such command, and without --platform cpu_smoke prep makes
  # 512/76 shards that the cpu_smoke run then refuses
  cfg = load_config("bert", "cpu_smoke", environ={})
  with pytest.raises(UserError) as e:
    check_prepared(cfg, tmp_path)
  msg = str(e.value)
  assert f"`tinyperf prep wiki pretrain --data {tmp_path} --platform cpu_smoke`" in msg, msg
  assert f"`tinyperf prep wiki eval --data {tmp_path} --platform cpu_smoke`" in msg and "pretrain/eval" not in msg


def test_resnet_data_hints_paste_into_a_shell_as_printed(tmp_path):
  """The prep commands a ResNet data error prints, for a data directory with a space in its name: pasted as printed,
  `--out my data` made two arguments (prep wrote to ./my and refused `data`)."""
  import shlex
  import subprocess
  import sys
  from tinyperf.benchmarks.resnet.data import DataError, load_manifest
  data = tmp_path / "my data"
  data.mkdir()
  with pytest.raises(DataError) as e:
    load_manifest(data)
  cmd = str(e.value).split("`tinyperf prep synthetic-imagenet ")[1].split("`")[0]
  assert shlex.split(cmd) == ["--out", str(data)], e.value
  # and what it says to run makes the data this check then accepts
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "prep", "synthetic-imagenet", *shlex.split(cmd), "--classes",
                      "2", "--train-per-class", "1", "--val-per-class", "1", "--size", "8"], capture_output=True,
                     text=True, timeout=300)
  assert r.returncode == 0, r.stdout[-800:] + r.stderr[-800:]
  assert load_manifest(data).num_classes == 2
