"""Pretraining instances from results4-style text, equal to the MLCommons reference `create_pretraining_data.py`.

One part = one run of the reference with a fresh random.Random(seed) (MLCommons runs it once per part file and once
for eval.txt, all with --random_seed=12345). docs/bert_data.md describes the algorithm; in short, every random call of
the reference is made here too, on the same generator, in the same order:
  * reading: lines split on "\\n" with every "\\r" deleted (TF's line reader), str.strip()ped; an empty line starts a
    new document; a line that tokenises to nothing is skipped; empty documents are dropped.
  * shuffle(documents); then dupe_factor passes over all documents, per document: random() < short_seq_prob ->
    randint(2, max_seq_len - 3) as the target length; sentences accumulate into a chunk until the target or the
    document end; A = the first randint(1, len-1) chunk sentences (no draw for a 1-sentence chunk); B = the rest, or
    (chunk of one sentence, or random() < 0.5) a random other document (up to 10 randint draws) from a random sentence
    (randint, drawn even when the document has one sentence), with the unused chunk sentences put back; the longer side
    loses one token per random() (front if < 0.5) until A+B fits; then the instance is masked at once: shuffle(all
    positions but [CLS]/[SEP]), n = min(max_predictions, max(1, round(len * masked_lm_prob))) (half to even), and per
    chosen position random() < 0.8 -> [MASK], else random() < 0.5 -> kept, else randint over the whole vocab;
  * finally shuffle(instances): records are written in that order.
create_instances_reference is that algorithm written plainly on lists (the oracle); create_instances makes the same
random calls with less Python per call and keeps instances as token ranges plus masking codes (materialize turns them
into the seven arrays). tests/unit/test_bert_data_reference.py checks both against the reference's own output (the
fixtures in ../shared/fixtures/bert_reference/).
"""
from __future__ import annotations
import bisect
import random
import time
import unicodedata
from array import array
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tinyperf.benchmarks.bert.shard import GENERATOR, ShardWriter
from tinyperf.benchmarks.bert.tokenizer import CLS, MASK, SEP
from tinyperf.benchmarks.common.io import InputError, file_digest

WRITE_CHUNK = 1024          # instances materialised (and written) at a time: bounds memory
LINES_PER_BATCH = 20000     # lines tokenised per call (reference reader)
READ_BATCH_BYTES = 1 << 19  # text tokenised per call (fast reader; 256 KB-1 MB measured best, larger is slower)
MAX_LINE_CHARS = 1 << 20    # one line is one paragraph: Wikipedia's longest are tens of KB; a 30 MB line took 2.5 GB
POS_SHIFT = 32              # create_instances packs a masked position and its new id (+1) as pos << 32 | id + 1


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


@dataclass
class Documents:
  tokens: np.ndarray       # (T,) int32, all sentences of the part back to back
  sent_starts: list[int]   # S+1 offsets into tokens
  doc_starts: list[int]    # D+1 offsets into sentences
  lines: int = 0

  @property
  def num_docs(self) -> int: return len(self.doc_starts) - 1


def _open_text(path):
  # newline="\n": split on "\n" only, as TF's GFile.readline; the caller deletes every "\r" (TF's reader drops them)
  return open(path, "r", encoding="utf-8", errors="replace", newline="\n")


def _line_batches(f, path, batch_chars: int):
  """The lines of an open text part, about batch_chars at a time; a line over MAX_LINE_CHARS is bad input (read no
  further than that: memory stays bounded whatever the file holds)."""
  lineno = 0
  while True:
    lines, size = [], 0
    while size < batch_chars:
      line = f.readline(MAX_LINE_CHARS + 1)
      if not line: break
      lineno += 1
      if len(line) > MAX_LINE_CHARS:
        raise InputError(f"{path}: line {lineno} is over {MAX_LINE_CHARS:,} characters; a text part holds one paragraph "
                         f"a line (Wikipedia's longest are tens of KB). It is not a Wikipedia text part, or it is damaged: "
                         f"remake it (prep download / prep corpus).")
      lines.append(line); size += len(line)
    if not lines: return
    yield lines


def read_documents(path: str | Path, tokenizer, batch_bytes: int = READ_BATCH_BYTES) -> Documents:
  """Tokenise one text file. Memory: the file's text one batch of lines (about batch_bytes) at a time, plus its tokens
  (4 bytes each). Same Documents as read_documents_reference: every line (blank ones included, which give no tokens)
  goes to the tokenizer in one batch, and the sentence and document offsets are computed with numpy."""
  lens_parts, blank_parts, ids_parts = [], [], []
  nlines = 0
  with _open_text(path) as f:
    for lines in _line_batches(f, path, batch_bytes):
      nlines += len(lines)
      lines = [line.replace("\r", "").strip() for line in lines]
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
  with _open_text(path) as f:
    for line in f:
      nlines += 1
      line = line.replace("\r", "").strip()
      batch.append(line if line else None)
      if len(batch) >= lines_per_batch: flush(batch); batch = []
  if batch: flush(batch)
  sent_starts, doc_starts = [0], [0]
  for b in breaks:
    if b is None:
      if len(sent_starts) - 1 > doc_starts[-1]: doc_starts.append(len(sent_starts) - 1)
    else:
      sent_starts.append(sent_starts[-1] + b)
  if len(sent_starts) - 1 > doc_starts[-1]: doc_starts.append(len(sent_starts) - 1)
  tokens = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int32)
  assert len(tokens) == sent_starts[-1]
  return Documents(tokens, sent_starts, doc_starts, nlines)


# ---------------------------------------------------------------------------------------------------- the oracle

def create_instances_reference(docs: Documents, p: Params, rng: random.Random, vocab: dict) -> list[tuple]:
  """The reference algorithm on lists of token ids, with the generator's own methods: the oracle.
  -> instances in output order, each (tokens, segment_ids, masked positions, masked labels, is_random_next)."""
  ss, ds = docs.sent_starts, docs.doc_starts
  tok = docs.tokens.tolist()
  documents = [[tok[ss[s]:ss[s + 1]] for s in range(ds[d], ds[d + 1])] for d in range(docs.num_docs)]
  cls, sep, mask = vocab[CLS], vocab[SEP], vocab[MASK]
  words = list(vocab.values())   # the reference's vocab_words (dict order), as ids
  max_tokens = p.max_seq_len - 3
  rng.shuffle(documents)
  instances = []
  for _ in range(p.dupe_factor):
    for di, document in enumerate(documents):
      target = max_tokens
      if rng.random() < p.short_seq_prob: target = rng.randint(2, max_tokens)
      chunk, length, i = [], 0, 0
      while i < len(document):
        chunk.append(document[i]); length += len(document[i])
        if i == len(document) - 1 or length >= target:
          a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
          a = [t for s in chunk[:a_end] for t in s]
          b = []
          if len(chunk) == 1 or rng.random() < 0.5:
            nsp = 1
            for _ in range(10):
              ri = rng.randint(0, len(documents) - 1)
              if ri != di: break
            other = documents[ri]
            for s in other[rng.randint(0, len(other) - 1):]:
              b += s
              if len(b) >= target - len(a): break
            i -= len(chunk) - a_end
          else:
            nsp = 0
            b = [t for s in chunk[a_end:] for t in s]
          while len(a) + len(b) > max_tokens:
            side = a if len(a) > len(b) else b
            if rng.random() < 0.5: del side[0]
            else: side.pop()
          tokens = [cls] + a + [sep] + b + [sep]
          segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
          cand = [k for k in range(len(tokens)) if k not in (0, len(a) + 1, len(tokens) - 1)]
          rng.shuffle(cand)
          out, masked = list(tokens), []
          for k in cand[:min(p.max_predictions, max(1, int(round(len(tokens) * p.masked_lm_prob))))]:
            if rng.random() < 0.8: new = mask
            elif rng.random() < 0.5: new = tokens[k]
            else: new = words[rng.randint(0, len(words) - 1)]
            out[k] = new
            masked.append((k, tokens[k]))
          masked.sort()
          instances.append((out, segments, [k for k, _ in masked], [t for _, t in masked], nsp))
          chunk, length = [], 0
        i += 1
  rng.shuffle(instances)
  return instances


def reference_features(instances: list[tuple], p: Params) -> dict[str, np.ndarray]:
  """create_instances_reference's instances -> the seven zero-padded feature arrays (the reference's writer)."""
  C, L, P = len(instances), p.max_seq_len, p.max_predictions
  f = {k: np.zeros((C, w), np.int64) for k, w in (("input_ids", L), ("input_mask", L), ("segment_ids", L),
                                                  ("masked_lm_positions", P), ("masked_lm_ids", P),
                                                  ("masked_lm_weights", P))}
  f["next_sentence_labels"] = np.zeros(C, np.int64)
  for r, (tokens, segments, positions, labels, nsp) in enumerate(instances):
    n, k = len(tokens), len(positions)
    f["input_ids"][r, :n] = tokens; f["input_mask"][r, :n] = 1; f["segment_ids"][r, :n] = segments
    f["masked_lm_positions"][r, :k] = positions; f["masked_lm_ids"][r, :k] = labels; f["masked_lm_weights"][r, :k] = 1
    f["next_sentence_labels"][r] = nsp
  return f


# ---------------------------------------------------------------------------------------------------- fast path

@dataclass
class Instances:
  """Instances in output order: spans (N, 5) = (a_start, a_end, b_start, b_end, is_random_next), token offsets into
  Documents.tokens; masking of row r: codes[starts[r]:starts[r] + counts[r]], each position << POS_SHIFT | (new id
  + 1), where new id -1 means the original token is kept, sorted by position."""
  spans: np.ndarray
  starts: np.ndarray
  counts: np.ndarray
  codes: np.ndarray

  def __len__(self): return len(self.spans)

  def take(self, rows) -> "Instances":
    """These rows, with their codes copied out back to back in row order (what materialize reads)."""
    rows = np.asarray(rows, np.int64)
    n = self.counts[rows]
    starts = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
    idx = np.repeat(self.starts[rows] - starts, n) + np.arange(int(n.sum()), dtype=np.int64)
    return Instances(self.spans[rows], starts, n, self.codes[idx])


def _plain_random(rng) -> bool:
  """create_instances inlines Random.randint/shuffle (randrange -> _randbelow -> getrandbits); only valid for a
  generator whose methods are Python's own."""
  t = type(rng)
  return (t._randbelow is random.Random._randbelow_with_getrandbits and t.randint is random.Random.randint
          and t.randrange is random.Random.randrange and t.shuffle is random.Random.shuffle)


def create_instances(docs: Documents, p: Params, rng: random.Random, vocab: dict) -> Instances:
  """create_instances_reference's instances, from the very same random calls in the same order, with less Python per
  call: a chunk's end is one bisect over the sentence offsets, randint(a, b) and shuffle are inlined as Python's own
  a + _randbelow(b - a + 1) (getrandbits(k) until the value is below the bound), and an instance is kept as token
  ranges and masking codes instead of lists of tokens."""
  if not _plain_random(rng): raise ValueError("create_instances needs a plain random.Random (see _plain_random)")
  max_tokens, P, prob = p.max_seq_len - 3, p.max_predictions, p.masked_lm_prob
  D, ss, ds = docs.num_docs, docs.sent_starts, docs.doc_starts
  mask_id = vocab[MASK]
  words = list(vocab.values())
  V, kV = len(words), len(words).bit_length()
  rand, bits, bisect_left = rng.random, rng.getrandbits, bisect.bisect_left
  blen = [n.bit_length() for n in range(p.max_seq_len + 1)]
  # how many positions get masked, by sequence length: Python's round (half to even) of the same float product
  n_pred = [min(P, max(1, int(round(n * prob)))) for n in range(p.max_seq_len + 1)]
  order = list(range(D))
  _shuffle(order, bits)
  spans, codes, counts = array("q"), array("q"), array("q")
  span, code_extend, count = spans.extend, codes.extend, counts.append
  short, kD, kT = p.short_seq_prob, D.bit_length(), (max_tokens - 1).bit_length()
  for _ in range(p.dupe_factor if D else 0):
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
          m = r1 - r0; k = m.bit_length(); r = bits(k)    # randint(0, r1 - r0 - 1): draws even when m == 1
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
        span((a_s, a_e, b_s, b_e, nsp))
        # masking: shuffle the candidate positions (all but [CLS] and the two [SEP]s), take the first n
        cand = [*range(1, la + 1), *range(la + 2, la + lb + 2)]
        for x in range(la + lb - 1, 0, -1):
          m = x + 1; k = blen[m]; y = bits(k)
          while y >= m: y = bits(k)
          cand[x], cand[y] = cand[y], cand[x]
        chosen = cand[:n_pred[la + lb + 3]]
        for t, pos in enumerate(chosen):
          if rand() < 0.8: new = mask_id
          elif rand() < 0.5: new = -1
          else:                                            # randint(0, V - 1) over the whole vocab
            r = bits(kV)
            while r >= V: r = bits(kV)
            new = words[r]
          chosen[t] = pos << POS_SHIFT | new + 1
        chosen.sort()
        code_extend(chosen); count(len(chosen))
        cs = i + 1
  perm = list(range(len(counts)))
  _shuffle(perm, bits)
  perm = np.asarray(perm, np.int64)
  counts = np.frombuffer(counts, np.int64)
  starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
  return Instances(np.frombuffer(spans, np.int64).reshape(-1, 5)[perm], starts[perm], counts[perm],
                   np.frombuffer(codes, np.int64))


def _shuffle(x: list, bits):
  """Random.shuffle(x) with its _randbelow inlined: the same swaps from the same getrandbits calls."""
  for i in reversed(range(1, len(x))):
    n = i + 1; k = n.bit_length(); j = bits(k)
    while j >= n: j = bits(k)
    x[i], x[j] = x[j], x[i]


def id_dtype(vocab_size: int):
  """Token ids as the shard stores them (shard.field_layout): uint16 up to 65,536 tokens, int32 above."""
  return np.uint16 if vocab_size <= 65536 else np.int32


def materialize(tokens: np.ndarray, inst: Instances, p: Params, special: dict,
                vocab_size: int) -> dict[str, np.ndarray]:
  """Instances (as Instances.take returns them: codes in row order) -> the seven feature arrays. tokens: the part's
  tokens already in id_dtype(vocab_size)."""
  C, L, P = len(inst), p.max_seq_len, p.max_predictions
  a_s, a_e, b_s, b_e, nsp = inst.spans.T
  la, lb = a_e - a_s, b_e - b_s
  n = la + lb + 3
  ids = np.zeros((C, L), id_dtype(vocab_size))
  mask, segment = np.zeros((C, L), np.uint8), np.zeros((C, L), np.uint8)
  for row, mrow, srow, A0, A1, B0, B1, na, nn in zip(ids, mask, segment, a_s.tolist(), a_e.tolist(), b_s.tolist(),
                                                      b_e.tolist(), la.tolist(), n.tolist()):
    row[1:1 + na] = tokens[A0:A1]
    row[2 + na:nn - 1] = tokens[B0:B1]
    mrow[:nn] = 1
    srow[2 + na:nn] = 1
  rows = np.arange(C)
  ids[:, 0] = special[CLS]
  ids[rows, la + 1] = special[SEP]
  ids[rows, n - 1] = special[SEP]
  k = inst.counts
  weights = np.arange(P)[None] < k[:, None]
  pos = (inst.codes >> POS_SHIFT).astype(np.int64)
  new = (inst.codes & ((1 << POS_SHIFT) - 1)) - 1
  flat = np.repeat(rows, k) * L + pos                     # row-major: rows in order, positions ascending
  positions = np.zeros((C, P), np.uint16)
  positions[weights] = pos
  labels = np.zeros((C, P), ids.dtype)
  ids_flat = ids.ravel()
  labels[weights] = ids_flat[flat]
  ids_flat[flat] = np.where(new < 0, ids_flat[flat], new)
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segment, "masked_lm_positions": positions,
          "masked_lm_ids": labels, "masked_lm_weights": weights.view(np.uint8),
          "next_sentence_labels": nsp.astype(np.uint8)}


def write_shard(out: Path, docs: Documents, inst, p: Params, part: str, source: Path, vocab: dict, vocab_md5: str,
                extra: dict | None = None) -> Path:
  """Write instances (an Instances, or create_instances_reference's list) as a shard, WRITE_CHUNK rows at a time."""
  special = {t: vocab[t] for t in (CLS, SEP, MASK)}
  meta = {**(extra or {}), "kind": "eval" if part == "eval" else "train", "part": part, "source": source.name,
          "source_sha256": file_digest(source, "sha256"), "vocab_md5": vocab_md5, "unicode_version": unicodedata.unidata_version,
          "generator": GENERATOR, "cls_id": special[CLS], "sep_id": special[SEP], "mask_id": special[MASK],
          **{k: v for k, v in asdict(p).items() if k not in ("max_seq_len", "max_predictions")}}
  with ShardWriter(out, meta, len(inst), p.max_seq_len, p.max_predictions, len(vocab)) as w:
    if isinstance(inst, Instances):
      tokens = docs.tokens.astype(id_dtype(len(vocab)))
      for s in range(0, len(inst), WRITE_CHUNK):
        w.write(materialize(tokens, inst.take(np.arange(s, min(s + WRITE_CHUNK, len(inst)))), p, special, len(vocab)))
    else:
      for s in range(0, len(inst), WRITE_CHUNK):
        w.write(reference_features(inst[s:s + WRITE_CHUNK], p))
    return w.close()


def part_instances(docs: Documents, p: Params, vocab: dict, reference: bool = False):
  """One run of the reference generator on a part: a fresh random.Random(seed), whatever the part."""
  make = create_instances_reference if reference else create_instances
  return make(docs, p, random.Random(p.seed), vocab)


def make_part_shard(source: Path, out: Path, part: str, p: Params, tokenizer, vocab: dict, vocab_md5: str,
                    reference: bool = False) -> dict:
  """Tokenise one text part and write its shard. Returns statistics. reference=True runs the reference
  implementation of every step after tokenising (the oracle; same bytes, slower)."""
  t0 = time.perf_counter()
  docs = (read_documents_reference if reference else read_documents)(source, tokenizer)
  t1 = time.perf_counter()
  inst = part_instances(docs, p, vocab, reference)
  if not len(inst):   # an empty part made a shard of no rows that verify passed ("0 problem(s)")
    raise InputError(f"{source}: no training instances in it (empty, or no tokenisable text). Remake the text parts "
                     f"(prep download, or prep corpus with a larger --max-bytes), or leave this part out with --parts.")
  t2 = time.perf_counter()
  write_shard(out, docs, inst, p, part, source, vocab, vocab_md5)
  t3 = time.perf_counter()
  return {"part": part, "instances": len(inst), "tokens": int(len(docs.tokens)), "documents": docs.num_docs,
          "lines": docs.lines, "tokenize_s": t1 - t0, "instances_s": t3 - t1, "create_s": t2 - t1, "write_s": t3 - t2}


def eval_pick(n: int, want: int) -> np.ndarray:
  """The reference's pick_eval_samples: record i is input int(i * (n / want)) (float division, as it computes it).
  With fewer inputs than wanted (small corpora only) it would repeat records; we keep each once instead."""
  if n <= want: return np.arange(n, dtype=np.int64)
  ratio = n / want
  return np.array([int(i * ratio) for i in range(want)], dtype=np.int64)


def make_eval_shard(source: Path, out: Path, p: Params, tokenizer, vocab: dict, vocab_md5: str,
                    samples: int = 10000, reference: bool = False) -> dict:
  t0 = time.perf_counter()
  docs = (read_documents_reference if reference else read_documents)(source, tokenizer)
  inst = part_instances(docs, p, vocab, reference)
  if not len(inst):   # an empty eval shard passed verify; the run refused it at its first eval, after INIT
    from tinyperf.benchmarks.common.io import InputError
    raise InputError(f"{source}: no eval instances in it (no tokenisable text). An eval set needs text: remake the "
                     f"corpus with more of it (prep corpus --max-bytes), or use the MLCommons eval.txt (prep download).")
  pick = eval_pick(len(inst), samples)
  picked = [inst[i] for i in pick] if reference else inst.take(pick)
  write_shard(out, docs, picked, p, "eval", source, vocab, vocab_md5,
              {"eval_samples": samples, "eval_candidates": len(inst)})
  return {"part": "eval", "candidates": len(inst), "instances": len(picked), "tokens": int(len(docs.tokens)),
          "documents": docs.num_docs, "seconds": time.perf_counter() - t0}
