"""Pretraining instances from results4-style text (create_pretraining_data semantics), written as shards.

Per part (docs/bert_data.md has the full description and where we deviate from upstream):
  * documents: one sentence per line, blank line = document break; a line that tokenises to nothing is skipped;
    empty documents are dropped. Tokens of a part live in one flat int32 array; a sentence is a [start, end) range.
  * instances (random.Random, seeded per part): documents shuffled; dupe_factor passes over all documents; per
    document a target length (max_seq_len - 3, or with prob short_seq_prob a random length in [2, max]); sentences
    accumulate into a chunk until the target or the document end; A = the first randint(1, len-1) chunk sentences;
    B = the rest, or (chunk of one sentence, or prob 0.5) text from a random other document starting at a random
    sentence, long enough for the remaining target, with the unused chunk sentences put back; the longer side is
    trimmed one token at a time from a random end until A+B fits; finally all instances are shuffled.
    Every instance is a contiguous token range for A and for B, so instances are 5 integers until written.
  * masking (numpy RandomState, seeded per part, drawn in fixed chunks of MASK_CHUNK instances in output order):
    candidates are all positions but [CLS]/[SEP]; n = min(max_predictions, max(1, round(len * 0.15))) of them,
    uniformly without replacement, sorted; each becomes [MASK] (80 %), stays (10 %) or a uniformly random vocab id
    (10 %). Labels are the original ids.
Same seed + same text + same vocab -> byte-identical shards, whatever the number of workers (a part is always
processed whole by one worker; streams are derived from (seed, part) only).
"""
from __future__ import annotations
import bisect
import hashlib
import random
import time
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from benchmarks.bert.shard import ShardWriter
from benchmarks.bert.tokenizer import CLS, MASK, SEP
from benchmarks.common.io import InputError

MASK_CHUNK = 1024        # instances materialised (and masked) at a time: bounds memory, fixes the random stream
LINES_PER_BATCH = 20000  # lines tokenised per call (reference)
READ_BATCH_BYTES = 1 << 19  # text tokenised per call (fast path; 256 KB-1 MB measured best, larger is slower)
ROW_LOOP_MIN_LEN = 192      # materialize: from this max_seq_len on, a Python loop over rows beats whole-array passes


@dataclass(frozen=True)
class Params:
  max_seq_len: int = 512
  max_predictions: int = 76
  dupe_factor: int = 10
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  seed: int = 12345

  def check(self):
    if self.max_seq_len < 8 or self.max_seq_len > 65535:
      raise InputError(f"max_seq_len must be in [8, 65535], got {self.max_seq_len}.")
    if not 1 <= self.max_predictions <= self.max_seq_len - 3:
      raise InputError(f"max_predictions must be in [1, max_seq_len-3], got {self.max_predictions}.")
    if self.dupe_factor < 1: raise InputError(f"dupe_factor must be >= 1, got {self.dupe_factor}.")
    if not 0 < self.masked_lm_prob < 1: raise InputError(f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}.")
    if not 0 <= self.short_seq_prob <= 1: raise InputError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}.")


def derive_seed(seed: int, part: str, stream: str, nbytes: int = 8) -> int:
  """Independent, stable stream seeds per (seed, part, stream)."""
  return int.from_bytes(hashlib.sha256(f"tinyperf-bert:{seed}:{part}:{stream}".encode()).digest()[:nbytes], "little")


@dataclass
class Documents:
  tokens: np.ndarray       # (T,) int32, all sentences of the part back to back
  sent_starts: list[int]   # S+1 offsets into tokens
  doc_starts: list[int]    # D+1 offsets into sentences
  lines: int = 0

  @property
  def num_docs(self) -> int: return len(self.doc_starts) - 1


def read_documents(path: str | Path, tokenizer, batch_bytes: int = READ_BATCH_BYTES) -> Documents:
  """Tokenise one text file. Memory: the file's text one batch of lines (about batch_bytes) at a time, plus its tokens
  (4 bytes each). Same Documents as read_documents_reference: every line (blank ones included, which give no tokens)
  goes to the tokenizer in one batch, and the sentence and document offsets are computed with numpy."""
  lens_parts, blank_parts, ids_parts = [], [], []
  nlines = 0
  with open(path, "r", encoding="utf-8", errors="replace", newline=None) as f:
    while True:
      lines = f.readlines(batch_bytes)
      if not lines: break
      nlines += len(lines)
      lines = [line.strip() for line in lines]
      ids, lens = tokenizer.encode_lines_flat(lines)
      ids_parts.append(ids); lens_parts.append(lens)
      blank_parts.append(np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) == 0)
  lens = np.concatenate(lens_parts) if lens_parts else np.zeros(0, np.int64)
  blank = np.concatenate(blank_parts) if blank_parts else np.zeros(0, bool)
  sentence = lens > 0                                  # a line that tokenises to nothing is skipped
  sent_starts = np.concatenate([[0], np.cumsum(lens[sentence])])
  before = np.cumsum(sentence)[blank]                  # sentences before each blank line: document breaks
  doc_starts = np.unique(np.concatenate([[0], before, [len(sent_starts) - 1]]))
  tokens = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int32)
  assert len(tokens) == sent_starts[-1]
  return Documents(tokens, sent_starts.tolist(), doc_starts.tolist(), nlines)


def read_documents_reference(path: str | Path, tokenizer, lines_per_batch: int = LINES_PER_BATCH) -> Documents:
  """Tokenise one text file line by line (the reference's reading loop). Memory: the file's text one batch of lines
  at a time, plus its tokens (4 bytes each)."""
  path = Path(path)
  ids_parts, breaks = [], []   # breaks: sentence lengths in order, None where a blank line is
  nlines = 0

  def flush(batch):
    ids, lens = tokenizer.encode_lines_flat([b for b in batch if b is not None])
    # keep blank lines (None) in place; drop lines that tokenise to nothing
    k = 0
    for b in batch:
      if b is None: breaks.append(None); continue
      n = int(lens[k]); k += 1
      if n: breaks.append(n)
    ids_parts.append(ids)

  batch = []
  with open(path, "r", encoding="utf-8", errors="replace", newline=None) as f:
    for line in f:
      nlines += 1
      line = line.strip()
      batch.append(line if line else None)
      if len(batch) >= lines_per_batch: flush(batch); batch = []
  if batch: flush(batch)
  # breaks is a sequence of sentence lengths and None (= blank line); build offsets
  sent_starts, doc_starts = [0], [0]
  for b in breaks:
    if b is None:
      if sent_starts and len(sent_starts) - 1 > doc_starts[-1]: doc_starts.append(len(sent_starts) - 1)
    else:
      sent_starts.append(sent_starts[-1] + b)
  if len(sent_starts) - 1 > doc_starts[-1]: doc_starts.append(len(sent_starts) - 1)
  tokens = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int32)
  assert len(tokens) == sent_starts[-1]
  return Documents(tokens, sent_starts, doc_starts, nlines)


def create_instances_reference(docs: Documents, p: Params, rng: random.Random) -> np.ndarray:
  """The reference algorithm, written plainly (one sentence and one trimmed token per loop step): the oracle that
  create_instances must equal. -> (N, 5) int64 array of (a_start, a_end, b_start, b_end, is_random_next), token
  offsets into docs.tokens."""
  max_tokens = p.max_seq_len - 3
  D, ss, ds = docs.num_docs, docs.sent_starts, docs.doc_starts
  if D == 0: return np.zeros((0, 5), np.int64)
  order = list(range(D))
  rng.shuffle(order)
  out = []
  rand, randint = rng.random, rng.randint
  for _ in range(p.dupe_factor):
    for di in range(D):
      s0, s1 = ds[order[di]], ds[order[di] + 1]
      target = max_tokens
      if rand() < p.short_seq_prob: target = randint(2, max_tokens)
      chunk_start, cur_len, i = s0, 0, s0
      while i < s1:
        cur_len += ss[i + 1] - ss[i]
        if i == s1 - 1 or cur_len >= target:
          n_chunk = i - chunk_start + 1
          a_end = randint(1, n_chunk - 1) if n_chunk >= 2 else 1
          a_s, a_e = ss[chunk_start], ss[chunk_start + a_end]
          if n_chunk == 1 or rand() < 0.5:
            nsp = 1
            target_b = target - (a_e - a_s)
            for _ in range(10):
              ri = randint(0, D - 1)
              if ri != di: break
            r0, r1 = ds[order[ri]], ds[order[ri] + 1]
            j = r0 + randint(0, r1 - r0 - 1)
            b_s = ss[j]
            # first sentence end at or past b_s + target_b (at least one sentence), capped at the document end
            k = bisect.bisect_left(ss, b_s + target_b, j + 1, r1)
            b_e = ss[k]
            i -= n_chunk - a_end   # unused sentences go back
          else:
            nsp = 0
            b_s, b_e = a_e, ss[i + 1]
          la, lb = a_e - a_s, b_e - b_s
          while la + lb > max_tokens:
            if la > lb:
              if rand() < 0.5: a_s += 1
              else: a_e -= 1
              la -= 1
            else:
              if rand() < 0.5: b_s += 1
              else: b_e -= 1
              lb -= 1
          out.append((a_s, a_e, b_s, b_e, nsp))
          chunk_start, cur_len = i + 1, 0
        i += 1
  rng.shuffle(out)
  return np.asarray(out, dtype=np.int64).reshape(-1, 5)


def _plain_random(rng) -> bool:
  """create_instances inlines Random.randint (randrange -> _randbelow -> getrandbits); only valid for a generator
  whose methods are Python's own."""
  t = type(rng)
  return (t._randbelow is random.Random._randbelow_with_getrandbits and t.randint is random.Random.randint
          and t.randrange is random.Random.randrange and t.shuffle is random.Random.shuffle)


def create_instances(docs: Documents, p: Params, rng: random.Random) -> np.ndarray:
  """create_instances_reference with less Python per instance and the very same random calls in the same order:
  a chunk's end is one bisect over the sentence offsets instead of a loop over its sentences, and randint(a, b) is
  inlined as Python's own a + _randbelow(b - a + 1) (getrandbits(k) until the value is below the bound), which
  consumes the generator exactly as randint does. tests/unit/test_bert_data.py checks equality with the reference."""
  if not _plain_random(rng): return create_instances_reference(docs, p, rng)
  max_tokens = p.max_seq_len - 3
  D, ss, ds = docs.num_docs, docs.sent_starts, docs.doc_starts
  if D == 0: return np.zeros((0, 5), np.int64)
  rand, bits, bisect_left = rng.random, rng.getrandbits, bisect.bisect_left
  order = list(range(D))
  _shuffle(order, bits)
  out = []
  append = out.append
  short, kD, kT = p.short_seq_prob, D.bit_length(), (max_tokens - 1).bit_length()
  for _ in range(p.dupe_factor):
    for di in range(D):
      od = order[di]
      s0, s1 = ds[od], ds[od + 1]
      target = max_tokens
      if rand() < short:                                   # randint(2, max_tokens)
        r = bits(kT)
        while r >= max_tokens - 1: r = bits(kT)
        target = 2 + r
      cs = s0
      while cs < s1:
        # chunk = sentences cs..i: i is the first sentence whose end reaches ss[cs] + target, or the document's last
        i = bisect_left(ss, ss[cs] + target, cs + 1, s1) - 1
        n_chunk = i - cs + 1
        if n_chunk >= 2:                                   # randint(1, n_chunk - 1)
          m = n_chunk - 1; k = m.bit_length(); r = bits(k)
          while r >= m: r = bits(k)
          a_end = 1 + r
        else:
          a_end = 1
        a_s, a_e = ss[cs], ss[cs + a_end]
        if n_chunk == 1 or rand() < 0.5:
          nsp = 1
          target_b = target - (a_e - a_s)
          for _ in range(10):                              # randint(0, D - 1), up to 10 tries for another document
            ri = bits(kD)
            while ri >= D: ri = bits(kD)
            if ri != di: break
          r0, r1 = ds[order[ri]], ds[order[ri] + 1]
          m = r1 - r0; k = m.bit_length(); r = bits(k)    # randint(0, r1 - r0 - 1)
          while r >= m: r = bits(k)
          j = r0 + r
          b_s = ss[j]
          b_e = ss[bisect_left(ss, b_s + target_b, j + 1, r1)]
          i -= n_chunk - a_end                             # unused sentences go back
        else:
          nsp = 0
          b_s, b_e = a_e, ss[i + 1]
        la, lb = a_e - a_s, b_e - b_s
        for _ in range(la + lb - max_tokens):              # one random() per trimmed token, as in the reference
          if la > lb:
            if rand() < 0.5: a_s += 1
            else: a_e -= 1
            la -= 1
          else:
            if rand() < 0.5: b_s += 1
            else: b_e -= 1
            lb -= 1
        append((a_s, a_e, b_s, b_e, nsp))
        cs = i + 1
  _shuffle(out, bits)
  return np.asarray(out, dtype=np.int64).reshape(-1, 5)


def _shuffle(x: list, bits):
  """Random.shuffle(x) with its _randbelow inlined: the same swaps from the same getrandbits calls."""
  for i in reversed(range(1, len(x))):
    n = i + 1; k = n.bit_length(); j = bits(k)
    while j >= n: j = bits(k)
    x[i], x[j] = x[j], x[i]


def id_dtype(vocab_size: int):
  """Token ids as the shard stores them (shard.field_layout): uint16 up to 65,536 tokens, int32 above."""
  return np.uint16 if vocab_size <= 65536 else np.int32


def materialize(tokens: np.ndarray, inst: np.ndarray, p: Params, special: dict, vocab_size: int,
                rs: np.random.RandomState) -> dict[str, np.ndarray]:
  """materialize_reference's bytes with far fewer full-width array passes. tokens: the part's tokens already in
  id_dtype(vocab_size). Layout: for long rows (max_seq_len >= ROW_LOOP_MIN_LEN) one pass over the rows fills ids,
  input_mask and segment_ids by slicing and marks the keys of [SEP] and padding; short rows are cheaper as whole-array
  expressions. Masking: the same subset as the reference's (the k smallest of the per-position keys among body
  positions; a key's low bits are its position), found with np.partition on the key values instead of argpartition:
  the first k of the P smallest keys are chosen, and their positions are read off their low bits and sorted. The
  random stream is drawn with the same calls in the same order (keys, then the two uniforms, then the random ids)."""
  C, L, P = len(inst), p.max_seq_len, p.max_predictions
  a_s, a_e, b_s, b_e, nsp = inst.T
  la, lb = a_e - a_s, b_e - b_s
  n = la + lb + 3
  bits = max(1, (L - 1).bit_length())
  pos = np.arange(L, dtype=np.int32)
  big_pos = (1 << 30) + pos
  keys = rs.randint(0, 1 << (30 - bits), size=(C, L), dtype=np.int32)
  keys <<= bits
  keys |= pos
  # [CLS], the [SEP]s and padding get key 2^30 + position, as in the reference: above every body key, so they are
  # chosen only when k exceeds the body (masked_lm_prob above about 0.5 on the shortest rows), and then in the same order
  big = 1 << 30
  if L >= ROW_LOOP_MIN_LEN:
    ids = np.zeros((C, L), id_dtype(vocab_size))
    mask, segment = np.zeros((C, L), np.uint8), np.zeros((C, L), np.uint8)
    for row, mrow, srow, krow, A0, A1, B0, B1, na, nn in zip(ids, mask, segment, keys, a_s.tolist(), a_e.tolist(),
                                                             b_s.tolist(), b_e.tolist(), la.tolist(), n.tolist()):
      row[1:1 + na] = tokens[A0:A1]
      row[2 + na:nn - 1] = tokens[B0:B1]
      mrow[:nn] = 1
      srow[2 + na:nn] = 1
      krow[1 + na] = big + 1 + na
      krow[nn - 1:] = big_pos[nn - 1:]
  else:
    la2, lb2 = la[:, None], lb[:, None]
    in_a = (pos >= 1) & (pos <= la2)
    in_b = (pos >= la2 + 2) & (pos < la2 + 2 + lb2)
    body = in_a | in_b
    src = np.where(in_a, a_s[:, None] - 1 + pos, b_s[:, None] - la2 - 2 + pos)
    ids = np.where(body, tokens[np.where(body, src, 0)] if len(tokens) else 0, 0).astype(id_dtype(vocab_size))
    mask = (pos < n[:, None]).view(np.uint8)
    segment = ((pos >= la2 + 2) & (pos < n[:, None])).view(np.uint8)
    keys = np.where(body, keys, big + pos)
  rows = np.arange(C)
  ids[:, 0] = special[CLS]
  ids[rows, la + 1] = special[SEP]
  ids[rows, n - 1] = special[SEP]
  keys[:, 0] = big   # + position 0
  k = np.minimum(P, np.maximum(1, np.round(n * p.masked_lm_prob).astype(np.int64)))
  smallest = np.sort(np.partition(keys, P - 1, axis=1)[:, :P], axis=1)   # the P smallest keys, ascending
  weights = np.arange(P)[None] < k[:, None]                              # the first k of them are chosen
  positions = np.sort(np.where(weights, smallest & ((1 << bits) - 1), L), axis=1)
  positions[~weights] = 0
  flat = (rows[:, None] * L + positions)[weights]                        # row-major: rows in order, positions ascending
  ids_flat = ids.ravel()
  labels = np.zeros((C, P), ids.dtype)
  labels[weights] = ids_flat[flat]
  u_mask, u_keep = rs.random_sample((C, P)), rs.random_sample((C, P))
  random_ids = rs.randint(0, vocab_size, size=(C, P))
  new = np.where(u_mask < 0.8, special[MASK], np.where(u_keep < 0.5, labels, random_ids))
  ids_flat[flat] = new[weights]
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segment, "masked_lm_positions": positions.astype(np.uint16),
          "masked_lm_ids": labels, "masked_lm_weights": weights.view(np.uint8), "next_sentence_labels": nsp.astype(np.uint8)}


def materialize_reference(docs: Documents, inst: np.ndarray, p: Params, special: dict, vocab_size: int,
                          rs: np.random.RandomState) -> dict[str, np.ndarray]:
  """Instances (C, 5) -> feature arrays with masking; consumes a fixed amount of rs per row. The reference: every
  step is a full (C, max_seq_len) array expression; materialize must give the same bytes."""
  C, L, P = len(inst), p.max_seq_len, p.max_predictions
  i32 = np.int32
  a_s, a_e, b_s, b_e, nsp = (inst[:, k:k + 1] for k in range(5))
  la, lb = (a_e - a_s).astype(i32), (b_e - b_s).astype(i32)
  n = la + lb + 3
  pos = np.arange(L, dtype=i32)[None]
  in_a = (pos >= 1) & (pos <= la)
  in_b = (pos >= la + 2) & (pos < la + 2 + lb)
  body = in_a | in_b
  src = np.where(in_a, a_s - 1 + pos, b_s - la - 2 + pos)
  ids = np.where(body, docs.tokens[np.where(body, src, 0)], 0).astype(i32) if len(docs.tokens) else np.zeros((C, L), i32)
  ids[:, 0] = special[CLS]
  rows = np.arange(C)
  ids[rows, la[:, 0] + 1] = special[SEP]
  ids[rows, n[:, 0] - 1] = special[SEP]
  mask = pos < n
  segment = in_b | (pos == n - 1)
  # masking: the k smallest of per-position random keys pick a uniform subset of the candidates. Keys are made
  # unique per row (random high bits, position in the low bits), so any selection algorithm gives the same set.
  bits = max(1, (L - 1).bit_length())
  keys = (rs.randint(0, 1 << (30 - bits), size=(C, L), dtype=i32) << bits) | pos
  keys = np.where(body, keys, (1 << 30) + pos)
  sel = np.argpartition(keys, P - 1, axis=1)[:, :P]
  chosen = np.take_along_axis(sel, np.argsort(np.take_along_axis(keys, sel, 1), axis=1), 1)
  k = np.minimum(P, np.maximum(1, np.round(n[:, 0] * p.masked_lm_prob).astype(np.int64)))
  take = np.arange(P)[None] < k[:, None]
  positions = np.sort(np.where(take, chosen, L), axis=1)
  weights = positions < L
  positions = np.where(weights, positions, 0)
  labels = np.where(weights, ids[rows[:, None], positions], 0)
  u_mask, u_keep = rs.random_sample((C, P)), rs.random_sample((C, P))
  random_ids = rs.randint(0, vocab_size, size=(C, P))
  new = np.where(u_mask < 0.8, special[MASK], np.where(u_keep < 0.5, labels, random_ids))
  r_idx, c_idx = np.nonzero(weights)
  ids[r_idx, positions[r_idx, c_idx]] = new[r_idx, c_idx]
  return {"input_ids": ids, "input_mask": mask.astype(np.uint8), "segment_ids": segment.astype(np.uint8),
          "masked_lm_positions": positions, "masked_lm_ids": labels, "masked_lm_weights": weights.astype(np.uint8),
          "next_sentence_labels": nsp[:, 0].astype(np.uint8)}


def _sha256(path: Path) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""): h.update(block)
  return h.hexdigest()


def write_shard(out: Path, docs: Documents, inst: np.ndarray, p: Params, part: str, source: Path, vocab: dict,
                vocab_md5: str, extra: dict | None = None, reference: bool = False) -> Path:
  special = {t: vocab[t] for t in (CLS, SEP, MASK)}
  meta = {**(extra or {}), "kind": "eval" if part == "eval" else "train", "part": part, "source": source.name,
          "source_sha256": _sha256(source), "vocab_md5": vocab_md5, "unicode_version": unicodedata.unidata_version,
          "cls_id": special[CLS], "sep_id": special[SEP], "mask_id": special[MASK],
          **{k: v for k, v in asdict(p).items() if k not in ("max_seq_len", "max_predictions")}}
  rs = np.random.RandomState(np.frombuffer(derive_seed(p.seed, part, "masking", 16).to_bytes(16, "little"), np.uint32))
  with ShardWriter(out, meta, len(inst), p.max_seq_len, p.max_predictions, len(vocab)) as w:
    if reference:
      for s in range(0, len(inst), MASK_CHUNK):
        w.write(materialize_reference(docs, inst[s:s + MASK_CHUNK], p, special, len(vocab), rs))
    else:
      tokens = docs.tokens.astype(id_dtype(len(vocab)))
      for s in range(0, len(inst), MASK_CHUNK):
        w.write(materialize(tokens, inst[s:s + MASK_CHUNK], p, special, len(vocab), rs))
    return w.close()


def make_part_shard(source: Path, out: Path, part: str, p: Params, tokenizer, vocab: dict, vocab_md5: str,
                    reference: bool = False) -> dict:
  """Tokenise one text part and write its shard. Returns statistics. reference=True runs the reference
  implementation of every step after tokenising (the oracle; same bytes, slower)."""
  t0 = time.perf_counter()
  docs = (read_documents_reference if reference else read_documents)(source, tokenizer)
  t1 = time.perf_counter()
  make = create_instances_reference if reference else create_instances
  inst = make(docs, p, random.Random(derive_seed(p.seed, part, "instances")))
  t2 = time.perf_counter()
  write_shard(out, docs, inst, p, part, source, vocab, vocab_md5, reference=reference)
  t3 = time.perf_counter()
  return {"part": part, "instances": len(inst), "tokens": int(len(docs.tokens)), "documents": docs.num_docs,
          "lines": docs.lines, "tokenize_s": t1 - t0, "instances_s": t3 - t1, "create_s": t2 - t1, "write_s": t3 - t2}


def eval_pick(n: int, want: int) -> np.ndarray:
  """Indices int(k*n/want) for k < want: evenly spaced; all of them when n <= want."""
  if n <= want: return np.arange(n, dtype=np.int64)
  return np.array([k * n // want for k in range(want)], dtype=np.int64)


def make_eval_shard(source: Path, out: Path, p: Params, tokenizer, vocab: dict, vocab_md5: str,
                    samples: int = 10000, reference: bool = False) -> dict:
  t0 = time.perf_counter()
  docs = (read_documents_reference if reference else read_documents)(source, tokenizer)
  make = create_instances_reference if reference else create_instances
  inst = make(docs, p, random.Random(derive_seed(p.seed, "eval", "instances")))
  picked = inst[eval_pick(len(inst), samples)]
  write_shard(out, docs, picked, p, "eval", source, vocab, vocab_md5,
              {"eval_samples": samples, "eval_candidates": len(inst)}, reference=reference)
  return {"part": "eval", "candidates": len(inst), "instances": len(picked), "tokens": int(len(docs.tokens)),
          "documents": docs.num_docs, "seconds": time.perf_counter() - t0}
