"""Small synthetic BERT data for tests: a toy uncased vocab and results4-style text generated from it."""
from __future__ import annotations
import json
import random
from pathlib import Path

WORDS = ("the of and to in is was for on that with as by at from his he it an are were which be this has also "
         "or had its first not but one after new been have their who they two her she other time all may would "
         "city year state during there between into most more when over only three some world later school film "
         "river music war series known since team under about where being age north south history church game").split()
PUNCT = list(".,;:!?()'\"-")


def toy_vocab_lines() -> list[str]:
  lines = ["[PAD]"] + [f"[unused{i}]" for i in range(5)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  lines += PUNCT + list("abcdefghijklmnopqrstuvwxyz") + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
  lines += WORDS + ["##s", "##ed", "##ing", "cafe", "naive"]
  seen, out = set(), []
  for t in lines:
    if t not in seen: seen.add(t); out.append(t)
  return out


def write_vocab(d: Path, config_vocab_size: int | None = None) -> Path:
  lines = toy_vocab_lines()
  d.mkdir(parents=True, exist_ok=True)
  (d / "vocab.txt").write_text("\n".join(lines) + "\n")
  (d / "bert_config.json").write_text(json.dumps({"vocab_size": config_vocab_size or len(lines), "hidden_size": 128}))
  return d / "vocab.txt"


def sentence(rng: random.Random) -> str:
  n = rng.randint(4, 18)
  words = [rng.choice(WORDS) for _ in range(n)]
  if rng.random() < 0.3: words[rng.randrange(n)] = rng.choice(["Café", "NAÏVE", "x\u00a0y", "zz12", "\u4e2d\u6587"])
  words[0] = words[0].capitalize()
  return " ".join(words) + rng.choice([".", ".", "!", "?"]) + (" (see " + rng.choice(WORDS) + ")" if rng.random() < .2 else "")


def write_text(d: Path, parts: int = 3, docs_per_part: int = 30, seed: int = 0, eval_docs: int = 20) -> Path:
  """DIR/results4/part-0000K-of-0000P and eval.txt; documents of 3-40 sentences, some stray blank lines."""
  rng = random.Random(seed)
  res = d / "results4"
  res.mkdir(parents=True, exist_ok=True)
  def doc():
    return "\n".join(sentence(rng) for _ in range(rng.randint(3, 40))) + "\n\n" + ("\n" if rng.random() < .1 else "")
  for k in range(parts):
    (res / f"part-{k:05d}-of-{parts:05d}").write_text("".join(doc() for _ in range(docs_per_part)))
  (res / "eval.txt").write_text("".join(doc() for _ in range(eval_docs)))
  return d


def make_data_dir(d: Path, **kw) -> Path:
  write_vocab(d)
  return write_text(d, **kw)


# the row shape the data tests prepare at: short, so that preparing is quick and long documents get cut
SEQ_LEN, MAX_PREDICTIONS = 64, 10


def run_prep(*argv) -> int:
  """`python -m tinyperf.benchmarks.bert.prep ARGV` in this process, each argument made a string."""
  from tinyperf.benchmarks.bert import prep   # here: it needs HF tokenizers, which the callers skip without
  return prep.main([str(a) for a in argv])
