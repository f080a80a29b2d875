"""Every `tinyperf ...` command a user reads (README, docs/, the generated implementation scripts and READMEs, compose.yaml)
parses with the real CLI parser: no doc names a verb, flag, choice or value that does not exist.

Commands in code blocks and scripts are what users paste: they are parsed as they stand (placeholders such as PATH or
<system> filled in), required arguments included. Commands quoted in prose (`tinyperf run ... --only-index I`) may leave
arguments out, so for those only required-ness is relaxed: unknown verbs, flags, choices and bad values still fail.
`tinyperf prep DATASET OPTIONS` passes OPTIONS to the dataset's own parser, which checks them too."""
from __future__ import annotations
import argparse
import contextlib
import functools
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks.common.config import ROOT
from tooling import cli
from tooling.prep import prep

# how a placeholder is filled in: by name where the parser checks the value (choices, int), else a plain word
PLACEHOLDERS = {"bm": "resnet", "benchmark": "resnet", "dataset": "imagenet", "platform": "cpu_smoke", "p": "cpu_smoke",
                "b": "resnet", "verb": "check", "step": "pretrain", "vendor": "nv", "n": "1", "i": "0", "s": "60", "gpus": "1", "index": "0"}
PLACEHOLDER = re.compile(r"^(<[^>]+>|[A-Z][A-Z0-9_]*)$")   # <system>, PATH, DIR, N (a real value has a lower-case letter)
LAUNCHERS = (["tinyperf"], ["python3", "-m", "tooling.cli"], ["python", "-m", "tooling.cli"], ["1", "-m", "tooling.cli"])


@dataclass
class Cmd:
  where: str        # file:line
  text: str         # as written (continuations joined)
  strict: bool      # a pasteable command (code block, script line): required arguments must be there


@functools.cache
def _parser(module: str | None, relaxed: bool) -> argparse.ArgumentParser:
  """tinyperf's parser (module None) or a prep dataset's, built once per variant: parsing does not change a parser."""
  p = cli.build_parser() if module is None else _prep_parser(module)
  if relaxed: _relax(p)
  return p


def _prep_parser(module: str) -> argparse.ArgumentParser:
  """The parser `python -m <module>` uses (tinyperf prep hands its options to it)."""
  if module == "benchmarks.bert.prep":
    from benchmarks.bert.prep import build_parser
    return build_parser()
  from benchmarks.resnet import prep as rp
  p = argparse.ArgumentParser(prog="tinyperf prep")
  rp.add_arguments(p)
  return p


def _steps(module: str) -> list[list[str]]:
  """The steps (subcommands) of a stepped dataset's parser, e.g. wiki's download, pretrain, ..."""
  sub = [a for a in _prep_parser(module)._actions if isinstance(a, argparse._SubParsersAction)]
  return [[c] for c in sub[0].choices] if sub and module.endswith("bert.prep") else []


def _relax(p: argparse.ArgumentParser):
  """Required arguments and option values become optional (in every subparser): prose names `--beam-cache` alone.
  Unknown verbs and flags, and given values (choices, types), are checked as before."""
  for a in p._actions:
    a.required = False
    if a.nargs is None and not isinstance(a, argparse._SubParsersAction): a.nargs = "?"
    if isinstance(a, argparse._SubParsersAction):
      for sp in a.choices.values(): _relax(sp)
  for g in p._mutually_exclusive_groups: g.required = False


def _shell_words(text: str) -> list[str] | None:
  # f-string fields in Python hints: {self.vendor} is a vendor, {n} a number
  s = re.sub(r"\{[^{}]*?(\w+)\}", lambda m: PLACEHOLDERS.get(m.group(1).lower(), "x"), text) if "${" not in text else text
  s = re.sub(r"\$\([^()]*\)", "1", s)                                      # $(nproc)
  for _ in range(3):
    s = re.sub(r"\$\{\w+:\+([^{}]*)\}", r"\1", s)                          # ${X:+--flag "$X"}: the flag is documented
    s = re.sub(r"\$\{\w+:-([^{}]*)\}", r"\1", s)                           # ${X:-default}
  s = re.sub(r"\$\{\w+\}|\$\w+", "1", s)                                   # $X, ${X}
  try: return shlex.split(s, comments=True)
  except ValueError: return None


def _argv(cmd: Cmd) -> tuple[list[str], bool] | str:
  """(argv for the tinyperf parser, elided) or why the text is not a command."""
  text = cmd.text
  while re.search(r"\[[^\[\]]*\]", text): text = re.sub(r"\[([^\[\]]*)\]", r"\1", text)   # [--out DIR]: optional
  words = _shell_words(text)
  if words is None: return "unbalanced quotes"
  while words and re.fullmatch(r"[A-Za-z_]\w*=\S*", words[0]): words = words[1:]   # VAR=value tinyperf ...
  for launcher in LAUNCHERS:
    if words[:len(launcher)] == launcher: words = words[len(launcher):]; break
  else: return "not a tinyperf command"
  elided, argv = False, []
  for w in words:
    if re.match(r"\d*>|<|&>", w): break                                     # > file, 2>&1: the shell's, not ours
    if w in ("...", "…"): elided = True; continue
    if "|" in w and not w.startswith("|"): w = w.split("|")[0]              # resnet|bert: one of them
    if PLACEHOLDER.match(w): w = PLACEHOLDERS.get(w.strip("<>").lower(), "x")
    argv.append(w)
  return argv, elided


def parse_error(cmd: Cmd) -> str | None:
  """None when the command parses with tinyperf's parser (and prep's dataset parser), else argparse's message."""
  got = _argv(cmd)
  if isinstance(got, str): return got
  argv, elided = got
  relaxed = elided or not cmd.strict
  def attempt(module, args):
    parser = _parser(module, relaxed)
    err = io.StringIO()
    try:
      with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()): return parser.parse_args(args), None
    except SystemExit as e:
      return None, (None if e.code == 0 else err.getvalue().strip().splitlines()[-1] if err.getvalue() else f"exit {e.code}")
  if elided and argv[:1] == ["prep"] and argv[1:2] and argv[1].startswith("-"):
    # `tinyperf prep ... --out DIR`: the dataset (and step) is left out; the flags must be those of one of them
    tries = [child[2:] for ns in (cli.build_parser().parse_args(["prep", d]) for d in prep.DATASETS)
             for child in [prep.command(ns)]]
    tries = [[m, *rest, *step] for m, *rest in tries for step in (_steps(m) or [[]])]
    return None if any(attempt(m, [*a, *argv[1:]])[1] is None for m, *a in tries) else \
      f"no dataset of `tinyperf prep` takes {' '.join(argv[1:])}"
  ns, error = attempt(None, argv)
  if error or ns is None: return error
  if ns.verb == "prep" and ns.dataset and ns.options:
    child = prep.command(ns)   # [python, -m, module, *args]
    _, error = attempt(child[2], child[3:])
  return error


# ------------------------------------------------------------------------------------------------------- extraction
# a span that holds a command, also after VAR=value words or another command (`cp A B && PARALLEL=15 tinyperf ...`)
INLINE = re.compile(r"`((?:[^`\s(][^`]*?\s&&\s+)?(?:[A-Za-z_]\w*=\S*\s+)*(?:tinyperf|python3? -m tooling\.cli) [^`]+)`")
# shell operators, a prompt, or a second command in the same line of a diagram
SEPARATORS = re.compile(r"\s(?:&&|\|\||;|\|)\s|^\s*\$\s|\s{4,}(?=tinyperf )")
COMMAND = re.compile(r"(?:[A-Za-z_]\w*=\S*\s+)*(?:tinyperf|python3? -m tooling\.cli)\s+(?![\w-]+:)")  # not `tinyperf check: error`


def _logical_lines(text: str):
  """(line number, line) with backslash continuations joined."""
  buf, start = "", 0
  for n, line in enumerate(text.splitlines(), 1):
    if not buf: start = n
    line = line.lstrip() if buf else line
    if line.rstrip().endswith("\\"): buf += line.rstrip()[:-1] + " "; continue
    yield start, buf + line
    buf = ""
  if buf: yield start, buf


def _code_commands(where: str, n: int, line: str) -> list[Cmd]:
  out = []
  for seg in SEPARATORS.split(line):
    seg = seg.strip().lstrip("(").strip()
    if COMMAND.match(seg + " "):
      out.append(Cmd(f"{where}:{n}", seg, strict=True))
  return out


def extract(where: str, text: str, kind: str) -> list[Cmd]:
  """kind: md (fenced blocks are code, backtick spans are prose), sh (lines are code, `...` in comments are prose),
  yaml (comment lines that start with a command are code), py (backtick spans in strings: hints in error messages)."""
  cmds, fenced = [], False
  for n, line in _logical_lines(text):
    if kind == "md" and line.lstrip().startswith("```"): fenced = not fenced; continue
    if kind == "md" and fenced or kind == "sh" and not line.lstrip().startswith("#"):
      cmds += _code_commands(where, n, line)
    elif kind == "yaml" and re.match(r"\s*#\s*tinyperf ", line):
      cmds += _code_commands(where, n, line.lstrip()[1:])
    cmds += [Cmd(f"{where}:{n}", c.text, strict=False) for m in INLINE.finditer(line) for c in _code_commands(where, n, m.group(1))]
  return cmds


def doc_files() -> list[tuple[Path, str]]:
  files = [(ROOT / "README.md", "md"), *((p, "md") for p in sorted((ROOT / "docs").glob("*.md")))]
  for p in sorted((ROOT / "benchmarks").glob("*/implementations/*/*")):
    if p.suffix in (".md", ".sh", ".yaml"): files.append((p, {".md": "md", ".sh": "sh", ".yaml": "yaml"}[p.suffix]))
  files += [(ROOT / "compose.yaml", "yaml"), (ROOT / "smoke.sh", "sh"), (ROOT / "test.sh", "sh")]
  # hints in error messages and help texts: `tinyperf ...` in the code's strings
  files += [(p, "py") for p in sorted([*ROOT.glob("tooling/**/*.py"), *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("scripts/*.py")])]
  return [(p, k) for p, k in files if p.is_file()]


def all_commands() -> list[Cmd]:
  return [c for p, kind in doc_files() for c in extract(str(p.relative_to(ROOT)), p.read_text(), kind)]


# ------------------------------------------------------------------------------------------------------------ tests
def test_every_documented_command_parses():
  cmds = all_commands()
  assert len(cmds) > 100, f"only {len(cmds)} commands extracted: the extraction broke"
  bad = [f"{c.where}: `{c.text}`: {err}" for c in cmds if (err := parse_error(c))]
  assert not bad, "documented tinyperf commands that the CLI rejects:\n" + "\n".join(bad)


def test_every_verb_is_documented():
  seen = {got[0][0] for c in all_commands() if not isinstance(got := _argv(c), str) and got[0]}
  assert set(cli.VERBS) <= seen, f"verbs no doc shows: {sorted(set(cli.VERBS) - seen)}"


@pytest.mark.parametrize("doc, kind", [
  ("```bash\ntinyperf run resnet --platform cpu_smoke --data d --made-up-flag\n```", "md"),   # unknown flag
  ("```\ntinyperf check PATH \\\n  --jsonn\n```", "md"),                                     # ... after a continuation
  ("Then `tinyperf chek PATH` says why.", "md"),                                             # unknown verb in prose
  ("Use `tinyperf run ... --only-index I --frobnicate`.", "md"),                            # elided, still unknown
  ("Row 3: `cp a.db b.db && PARALLEL=15 tinyperf bench resnet --beam-cahce b.db`", "md"),  # after another command
  ("`BERT_LAYERS=2 tinyperf bench bert --steps eight`", "md"),                               # after VAR=value
  ("tinyperf run resnet --platform cpu_smoke --data d --nexp two", "sh"),                    # bad int
  ("```\ntinyperf run resnet --platform cpu_smoke\n```", "md"),                              # --data is required
  ("python3 -m tooling.cli prep bert-checkpoint --out x", "sh"),                             # no such dataset
  ("python3 -m tooling.cli prep wiki pretrain --data d --wrkers 2", "sh"),                   # the dataset's parser
  ("#   tinyperf build --vendor nvidia", "yaml"),                                            # bad choice in a comment
  ("`tinyperf prep ... --outt DIR`", "md"),                                                   # no dataset takes it
  ('raise UserError(f"rebuild it with `tinyperf build --vendr {self.vendor}`")', "py"),       # a hint in the code
])
def test_a_wrong_command_fails(doc, kind):
  cmds = extract("doc", doc, kind)
  assert cmds and all(parse_error(c) for c in cmds), [(c.text, parse_error(c)) for c in cmds]


@pytest.mark.parametrize("doc, kind", [
  ("```\ntinyperf check out/results/<system>/resnet --json\n```", "md"),
  ("`tinyperf bench resnet|bert --gpus N --beam-cache FILE`", "md"),
  ('python3 -m tooling.cli prep wiki pretrain --data "$DATA_DIR" --workers "${WORKERS:-$(nproc)}"', "sh"),
  ("`tinyperf run ... --only-index I`", "md"),
  ('tinyperf check --json "$RES" > "$OUT/check.json" 2>&1', "sh"),
])
def test_a_right_command_passes(doc, kind):
  cmds = extract("doc", doc, kind)
  assert cmds and not [e for c in cmds if (e := parse_error(c))]


def test_readme_and_usage_say_what_is_pinned():
  """The docs' claim about the base images follows images.lock.json: 'not pinned yet' exactly while a digest is null."""
  from tooling.prep.images import load_lock
  unpinned = [v for v, e in load_lock()["images"].items() if not e.get("digest")]
  for doc in ("README.md", "docs/usage.md"):
    text = " ".join((ROOT / doc).read_text().lower().split())
    assert ("not pinned yet" in text or "no base image is pinned yet" in text) == bool(unpinned), (doc, unpinned)


def test_no_document_uses_a_deprecated_flag():
  """--backend, --no-container and --container-runtime still parse for one release (tooling/launch/run.py launch_mode), but
  what users read shows --scheduler and --runtime."""
  old = {"--backend", "--no-container", "--container-runtime"}
  bad = [f"{c.where}: `{c.text}`" for c in all_commands()
         if not isinstance(got := _argv(c), str) and old & {w.split("=")[0] for w in got[0]}]
  assert not bad, "documented commands with a deprecated flag:\n" + "\n".join(bad)
