"""Text available offline: a synthetic text, or docstrings of installed Python source (stdlib, numpy, ...).

`prep corpus` writes either as a small results4-style directory (one sentence per line, a blank line between
documents). The synthetic text (the default) is what the cpu_smoke run and the GPU end-to-end runs train on: a BERT
from random init reaches the masked-LM target on it in about ten steps (synthetic_documents). The docstrings are real
English, for the tokenizer parity test and benchmark (`prep corpus --text docstrings`). Source files are parsed with
`ast` (never imported: no side effects), visited in sorted path order, so the text is a pure function of the installed
files (i.e. of the Python/numpy versions; build_corpus records them and a sha256 per output file in MANIFEST.json).
"""
from __future__ import annotations
import ast
import hashlib
import inspect
import json
import re
import sys
import sysconfig
from pathlib import Path

from tinyperf.benchmarks.common.io import InputError, write_atomic

_SKIP_DIRS = {"test", "tests", "testing", "idlelib", "site-packages", "dist-packages", "__pycache__", "lib2to3",
              "turtledemo", "ensurepip", "_vendor", "vendor"}
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_CODEISH = re.compile(r"^\s*(>>>|\.\.\.|\$ |[-=~*^]{3,}\s*$|:\w+:|\.\. )")


def default_roots() -> list[Path]:
  roots = [Path(sysconfig.get_paths()["stdlib"])]
  try:
    import numpy
    roots.append(Path(numpy.__file__).parent)
  except ImportError:
    pass
  return roots


def _source_files(root: Path) -> list[Path]:
  files = []
  for p in sorted(root.rglob("*.py")):
    rel = p.relative_to(root).parts
    if any(part in _SKIP_DIRS or part.startswith("test_") for part in rel): continue
    files.append(p)
  return files


def _docstrings(tree: ast.AST) -> list[str]:
  out = []
  def visit(node):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      d = ast.get_docstring(node, clean=False)
      if d: out.append(inspect.cleandoc(d))
    for child in ast.iter_child_nodes(node): visit(child)
  visit(tree)
  return out


def sentences(doc: str) -> list[str]:
  """Prose sentences of one docstring: paragraphs without code/markup lines, re-flowed and split at sentence ends."""
  out = []
  for para in re.split(r"\n\s*\n", doc):
    lines = para.splitlines()
    if not lines or any(_CODEISH.match(l) for l in lines) or any(l.startswith(("    ", "\t")) for l in lines): continue
    text = " ".join(l.strip() for l in lines)
    for s in _SENT_SPLIT.split(text):
      s = s.strip()
      letters = sum(c.isalpha() for c in s)
      if len(s.split()) >= 4 and letters >= 0.6 * len(s): out.append(s)
  return out


def docstring_documents(roots: list[Path] | None = None, max_bytes: int | None = None) -> list[list[str]]:
  """One document (list of sentences) per source file with at least two prose sentences."""
  docs, total = [], 0
  for root in roots or default_roots():
    for path in _source_files(Path(root)):
      try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
      except (SyntaxError, ValueError, UnicodeDecodeError):
        continue
      sents = [s for d in _docstrings(tree) for s in sentences(d)]
      if len(sents) < 2: continue
      docs.append(sents)
      total += sum(len(s) + 1 for s in sents)
      if max_bytes is not None and total >= max_bytes: return docs
  return docs


def corpus_lines(roots: list[Path] | None = None, max_bytes: int | None = None) -> list[str]:
  """All sentences as a flat list of lines (the tokenizer corpus)."""
  return [s for d in docstring_documents(roots, max_bytes) for s in d]


# frequent English words that the BERT uncased vocab holds as single tokens; the first is the synthetic text's majority
SYNTHETIC_WORDS = ("the of and to in is was for on that with as by at from it his an were are which this be has or had "
                   "first not but after new who one their its also two been they").split()
SYNTHETIC_MAJORITY = 0.85


def synthetic_documents(max_bytes: int, seed: int = 0) -> list[list[str]]:
  """Documents of 10-40 sentences of 8-24 words. Each word is SYNTHETIC_WORDS[0] with probability SYNTHETIC_MAJORITY,
  else the next word of a cycle through the others that starts at a random place in each document. A model that
  predicts the majority word at every masked position scores about SYNTHETIC_MAJORITY, above BERT's 0.72 target,
  which a BERT from random init learns within tens of steps (the cpu_smoke model by step 10; on the docstrings it needed
  250 steps to reach 0.05, where the majority token scores 0.041): an end-to-end run then ends with run_stop success
  and a log the closed checker accepts on accuracy.
  Not a language; a test of the pipeline. A pure function of (max_bytes, seed)."""
  import numpy as np
  rng = np.random.default_rng(seed)
  others = SYNTHETIC_WORDS[1:]
  docs, total = [], 0
  while total < max_bytes:
    k = int(rng.integers(len(others)))
    doc = []
    for _ in range(int(rng.integers(10, 41))):
      words = []
      for is_majority in rng.random(int(rng.integers(8, 25))) < SYNTHETIC_MAJORITY:
        if is_majority: words.append(SYNTHETIC_WORDS[0])
        else: words.append(others[k % len(others)]); k += 1
      doc.append(" ".join(words))
    docs.append(doc)
    total += sum(len(s) + 1 for s in doc)
  return docs


def _render(docs: list[list[str]]) -> str:
  return "".join("\n".join(d) + "\n\n" for d in docs)


def build_corpus(out: str | Path, parts: int = 4, eval_every: int = 10, max_bytes: int | None = 3_000_000,
                 roots: list[Path] | None = None, text: str = "synthetic") -> dict:
  """Write OUT/results4/part-0000K-of-0000P (documents dealt round-robin) and OUT/results4/eval.txt (every
  eval_every-th document, disjoint from train) of TEXT: "synthetic" or "docstrings". Returns the manifest (also
  written to OUT/results4/MANIFEST.json)."""
  out = Path(out)
  res = out / "results4"
  if res.exists() and any(res.iterdir()):
    raise InputError(f"{res} already exists and is not empty; corpus never overwrites text. Remove it or choose "
                    f"another --out.")
  if parts < 1: raise InputError(f"--parts must be >= 1, got {parts}.")
  if text not in ("docstrings", "synthetic"): raise InputError(f"--text {text}: give docstrings or synthetic.")
  if text == "synthetic" and not max_bytes: raise InputError("--text synthetic needs --max-bytes (how much text to make).")
  docs = synthetic_documents(max_bytes) if text == "synthetic" else docstring_documents(roots, max_bytes)
  need = max(parts + 1, eval_every)   # one document per part, and eval.txt's (every eval_every-th) not empty
  if len(docs) < need:
    source = "synthetic text" if text == "synthetic" else f"Python docstrings found under {roots or default_roots()}"
    raise InputError(f"only {len(docs)} documents of {source}"
                    + (f" within --max-bytes {max_bytes}" if max_bytes is not None else "")
                    + f"; need at least {need} (one per part, and every {eval_every}th for eval.txt). Raise --max-bytes"
                    + (" or lower --parts." if parts + 1 > eval_every else "."))
  eval_docs = [d for i, d in enumerate(docs) if i % eval_every == eval_every - 1]
  train_docs = [d for i, d in enumerate(docs) if i % eval_every != eval_every - 1]
  files = {f"part-{k:05d}-of-{parts:05d}": _render(train_docs[k::parts]) for k in range(parts)}
  files["eval.txt"] = _render(eval_docs)
  if text == "synthetic":
    manifest = {"source": f"synthetic: {SYNTHETIC_MAJORITY:.0%} '{SYNTHETIC_WORDS[0]}', the rest cycling through "
                          f"{len(SYNTHETIC_WORDS) - 1} words (benchmarks/bert/corpus.py synthetic_documents, seed 0)"}
  else:
    manifest = {"source": "docstrings of installed Python sources (ast, sorted paths)",
                "roots": [str(r) for r in (roots or default_roots())]}
  manifest.update({"python": sys.version.split()[0], "documents": {"train": len(train_docs), "eval": len(eval_docs)},
                   "files": {}})
  try:
    import numpy
    manifest["numpy"] = numpy.__version__
  except ImportError:
    pass
  for name, text in files.items():
    data = text.encode("utf-8")
    write_atomic(res / name, data, mode=0o644)   # whatever the umask: containers of another user read it
    manifest["files"][name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}   # the bytes in hand
  write_atomic(res / "MANIFEST.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n", mode=0o644)
  return manifest
