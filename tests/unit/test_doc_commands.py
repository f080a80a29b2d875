"""Every `tinyperf ...` command a user reads (README, docs/, the generated implementation scripts and READMEs, compose.yaml)
parses with the real CLI parser: no doc names a verb, flag, choice or value that does not exist.

Commands in code blocks and scripts are what users paste: they are parsed as they stand (placeholders such as PATH or
<system> filled in), required arguments included. Commands quoted in prose (`tinyperf run ... --only-index I`) may leave
arguments out, so for those only required-ness is relaxed: unknown verbs, flags, choices and bad values still fail.
`tinyperf prep DATASET OPTIONS` passes OPTIONS to the dataset's own parser, which checks them too.

The same files' commands that run this repository's other entry points are checked too (the second half of this file):
`python3 -m lab.bert.bench_torch --bs 32`, `DEV=CUDA python3 lab/scripts/bench_d2d_copy.py`, `E2E=bert
lab/scripts/e2e_h200.sh`. The module or script exists; a Python one's arguments parse with its own build_parser(); a shell
script is executable and reads each VAR= set before it, and names each literal argument (poll, --upgrade)."""
from __future__ import annotations
import argparse
import contextlib
import functools
import importlib
import importlib.util
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tinyperf.benchmarks.common.config import ROOT
from tinyperf.benchmarks.registry import ALL_KNOBS
from tinyperf.tooling import cli
from tinyperf.tooling.prep import prep

# how a placeholder is filled in: by name where the parser checks the value (choices, int), else a plain word
PLACEHOLDERS = {"bm": "resnet", "benchmark": "resnet", "dataset": "imagenet", "platform": "cpu_smoke", "p": "cpu_smoke",
                "b": "resnet", "verb": "check", "step": "pretrain", "vendor": "nv", "n": "1", "i": "0", "s": "60", "gpus": "1", "index": "0",
                "subcommand": "pretrain", "cmd": "synthetic-imagenet", "eval_samples": "1", "share": "0.9"}   # the prep modules' own
PLACEHOLDER = re.compile(r"^(<[^>]+>|[A-Z][A-Z0-9_]*)$")   # <system>, PATH, DIR, N (a real value has a lower-case letter)
LAUNCHERS = (["tinyperf"], ["python3", "-m", "tinyperf.tooling.cli"], ["python", "-m", "tinyperf.tooling.cli"], ["1", "-m", "tinyperf.tooling.cli"])


@dataclass
class Cmd:
  where: str        # file:line
  text: str         # as written (continuations joined)
  strict: bool      # a pasteable command (code block, script line): required arguments must be there


@functools.cache
def _parser(owner: str | None, relaxed: bool) -> argparse.ArgumentParser:
  """tinyperf's parser (owner None) or a module's or script's (a prep dataset's, the benches'), built once per variant:
  parsing does not change a parser."""
  p = cli.build_parser() if owner is None else _own_parser(owner)
  if relaxed: _relax(p)
  for q in _parsers(p): q.allow_abbrev = False   # flags in full: --mode for --modes parses until a --mode-x comes
  return p


def _parsers(p: argparse.ArgumentParser):
  """p and its subparsers, all the way down."""
  yield p
  for a in p._actions:
    if isinstance(a, argparse._SubParsersAction):
      for sp in a.choices.values(): yield from _parsers(sp)


def _own_parser(owner: str) -> argparse.ArgumentParser:
  """The parser `python -m <owner>` (a module) or `python3 <owner>` (a script's path) uses: its build_parser(), one owner
  per parser (tinyperf prep hands its options to the dataset module's)."""
  if owner.endswith(".py"):
    spec = importlib.util.spec_from_file_location(f"_doc_script_{Path(owner).stem}", ROOT / owner)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
  else:
    mod = importlib.import_module(owner)
  return mod.build_parser()


def _steps(module: str) -> list[list[str]]:
  """The steps (subcommands) of a stepped dataset's parser, e.g. wiki's download, pretrain, ..."""
  sub = [a for a in _own_parser(module)._actions if isinstance(a, argparse._SubParsersAction)]
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
  s = re.sub(r"\$\(\([^()]*\)\)", "1", s)                                  # $(( DEADLINE - 1 - 60 ))
  for _ in range(3):
    s = re.sub(r"\$\{\w+:\+([^{}]*)\}", r"\1", s)                          # ${X:+--flag "$X"}: the flag is documented
    s = re.sub(r"\$\{\w+:-([^{}]*)\}", r"\1", s)                           # ${X:-default}
  s = re.sub(r"\$\{\w+\}|\$\w+", "1", s)                                   # $X, ${X}
  try: return shlex.split(s, comments=True)
  except ValueError: return None


def _words(text: str) -> list[str] | None:
  """The shell words of a command (None: unbalanced quotes), optional parts [--out DIR] kept."""
  while re.search(r"\[[^\[\]]*\]", text): text = re.sub(r"\[([^\[\]]*)\]", r"\1", text)   # [--out DIR]: optional
  return _shell_words(text)


def _env(words: list[str]) -> tuple[list[str], list[str]]:
  """(the names of the VAR=value words that start a command, the words after them)."""
  names = []
  while words and re.fullmatch(r"[A-Za-z_]\w*=\S*", words[0]): names.append(words[0].split("=")[0]); words = words[1:]
  return names, words


def _args(words: list[str]) -> tuple[list[str], bool]:
  """(the arguments as a parser gets them, placeholders filled in; elided: `...` stands for some of them)."""
  elided, argv = False, []
  for w in words:
    if re.match(r"\d*>|<|&>", w) or w == "&": break                        # > file, 2>&1, &: the shell's, not ours
    if w in ("...", "…"): elided = True; continue
    if w.endswith(";"): argv.append(w[:-1]); break                           # `... --quiet; }`: the command ends
    if "|" in w and not w.startswith("|"): w = w.split("|")[0]              # resnet|bert: one of them
    if PLACEHOLDER.match(w): w = PLACEHOLDERS.get(w.strip("<>").lower(), "x")
    argv.append(w)
  return argv, elided


def _argv(cmd: Cmd) -> tuple[list[str], bool] | str:
  """(argv for the tinyperf parser, elided) or why the text is not a command."""
  words = _words(cmd.text)
  if words is None: return "unbalanced quotes"
  _, words = _env(words)                                                    # VAR=value tinyperf ...
  for launcher in LAUNCHERS:
    if words[:len(launcher)] == launcher: words = words[len(launcher):]; break
  else: return "not a tinyperf command"
  return _args(words)


def _parse(owner: str | None, args: list[str], relaxed: bool) -> tuple[argparse.Namespace | None, str | None]:
  """(namespace, None) when args parse with the owner's parser (None: tinyperf's), else (None, argparse's message)."""
  parser = _parser(owner, relaxed)
  err = io.StringIO()
  try:
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()): return parser.parse_args(args), None
  except SystemExit as e:
    return None, (None if e.code == 0 else err.getvalue().strip().splitlines()[-1] if err.getvalue() else f"exit {e.code}")


def parse_error(cmd: Cmd) -> str | None:
  """None when the command parses with tinyperf's parser (and prep's dataset parser), else argparse's message."""
  got = _argv(cmd)
  if isinstance(got, str): return got
  argv, elided = got
  relaxed = elided or not cmd.strict
  def attempt(module, args): return _parse(module, args, relaxed)
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
SEPARATORS = re.compile(r"\s(?:&&|\|\||;|\|)(?:\s|$)|^\s*\$\s|\s{4,}(?=tinyperf )")
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


def _code_commands(where: str, n: int, line: str, command: re.Pattern = COMMAND) -> list[Cmd]:
  out = []
  for seg in SEPARATORS.split(line):
    seg = seg.strip().lstrip("(").strip()
    if command.match(seg + " "):
      out.append(Cmd(f"{where}:{n}", seg, strict=True))
  return out


def extract(where: str, text: str, kind: str, command: re.Pattern = COMMAND, inline: re.Pattern = INLINE) -> list[Cmd]:
  """kind: md (fenced blocks are code, backtick spans are prose), sh (lines are code, `...` in comments are prose),
  yaml (comment lines that start with a command are code), py (backtick spans in strings: hints in error messages).
  command: what starts a command (tinyperf's by default); inline: a backtick span that holds one."""
  cmds, fenced, open_span = [], False, None
  for n, line in _logical_lines(text):
    if kind == "md" and line.lstrip().startswith("```"): fenced, open_span = not fenced, None; continue
    if kind == "md" and not fenced:                 # a prose span that the line break cuts goes on in the next line
      if open_span: n, line = open_span[0], open_span[1] + " " + line.lstrip()
      open_span = (n, line) if line.count("`") % 2 and not open_span else None
      if open_span: continue
    if kind == "md" and fenced or kind == "sh" and not line.lstrip().startswith("#"):
      cmds += _code_commands(where, n, line, command)
    elif kind == "yaml" and re.match(r"\s*#\s*tinyperf ", line):
      cmds += _code_commands(where, n, line.lstrip()[1:], command)
    cmds += [Cmd(f"{where}:{n}", c.text, strict=False) for m in inline.finditer(line)
             for part in re.split(r";\s", m.group(1)) for c in _code_commands(where, n, part, command)]   # `cp A B; X=1 cmd`
  return cmds


def doc_files() -> list[tuple[Path, str]]:
  files = [(ROOT / "README.md", "md"), *((p, "md") for p in sorted((ROOT / "docs").glob("*.md")))]
  for p in sorted((ROOT / "benchmarks").glob("*/implementations/*/*")):
    if p.suffix in (".md", ".sh", ".yaml"): files.append((p, {".md": "md", ".sh": "sh", ".yaml": "yaml"}[p.suffix]))
  files += [(ROOT / "compose.yaml", "yaml"), (ROOT / "smoke.sh", "sh"), (ROOT / "test.sh", "sh")]
  files += [(p, "sh") for p in sorted([*ROOT.glob("scripts/*.sh"), *ROOT.glob("lab/scripts/*.sh")])]
  # hints in error messages and help texts: `tinyperf ...` in the code's strings
  files += [(p, "py") for p in sorted([*ROOT.glob("tooling/**/*.py"), *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("lab/**/*.py")])]
  return [(p, k) for p, k in files if p.is_file()]


def all_commands(command: re.Pattern = COMMAND, inline: re.Pattern = INLINE) -> list[Cmd]:
  return [c for p, kind in doc_files() for c in extract(str(p.relative_to(ROOT)), p.read_text(), kind, command, inline)]


# ---------------------------------------------------------------------------- this repository's modules and scripts
# `python -m lab.beamlog LOG`, `DEV=NULL python -m lab.bert.step_cost --layers 2`, `python3
# lab/scripts/loader_rate.py DATA`, `E2E=bert VOCAB=FILE setsid nohup lab/scripts/e2e_h200.sh`, `bash scripts/env.sh`, and a
# script named alone in prose (`lab/scripts/upstream_beam.sh`, which must exist). tinyperf.tooling.cli is tinyperf's, checked above.
# VAR= before a Python command is not checked: tinygrad reads most of them (DEV, DEBUG, NULL_ALLOW_COPYOUT).
WRAPPERS = ("setsid", "nohup", "env", "time", "/usr/bin/time")
SHELLS = ("bash", "sh", "source", ".")            # they run a script without its executable bit
TOOL = re.compile(r"(?:(?:[A-Za-z_]\w*=\S*|setsid|nohup|env|time|/usr/bin/time(?:\s+-v)?)\s+)*"   # VAR=1 setsid ...
                  r"(?:python3?\s+-m\s+(?!tooling\.cli\b)(?:benchmarks|tooling|lab)\.\w"           # python -m MODULE
                  r"|(?:(?:python3?|bash|sh|source|\.)\s+)?(?:\./)?(?:lab/)?scripts/[\w-]+\.(?:py|sh)\s)")  # [bash] scripts/X.sh
TOOL_INLINE = re.compile(r"`([^`]+)`")          # any span: TOOL picks the commands
# a script that starts runs passes the knobs set before it on to them (benchmarks/common/config.py reads the environment)
STARTS_RUNS = re.compile(r"run_and_time\.sh|\btinyperf run\b|\blab\.bench\b")
# modules run with arguments that no argparse parser reads: what their arguments must look like, and why
NO_PARSER = {"tinyperf.tooling.prep.compose": (r"--enter( \S+)*", "compose.yaml's entrypoint: --enter TARGET=VAR... -- CMD")}


@dataclass
class Tool:
  env: list[str]      # VAR=value names before the command
  runner: str         # python, bash, ..., or "" (the script runs itself)
  target: str         # a module (lab.bert.bench_torch) or a script's path from the root (lab/scripts/e2e_h200.sh)
  argv: list[str]     # placeholders filled in
  words: list[str]    # the arguments as written
  elided: bool        # `...` stands for some arguments
  alone: bool         # named alone in prose: a reference, not a run


def tool(cmd: Cmd) -> Tool | str:
  """The command's parts, or why the text is not one."""
  words = _words(cmd.text)
  if words is None: return "unbalanced quotes"
  env = []
  while words and (words[0] in WRAPPERS or "=" in words[0]):            # VAR=1 setsid nohup env X=2 /usr/bin/time -v
    names, words = _env(words)
    env += names
    if words and words[0] in WRAPPERS: words = words[2:] if words[1:2] == ["-v"] else words[1:]
  runner = words.pop(0) if words and words[0] in ("python", "python3", *SHELLS) else ""
  if not words: return "no module or script"
  if runner.startswith("python") and words[0] == "-m": target, words = words[1], words[2:]
  else: target, words = words[0].removeprefix("./"), words[1:]
  argv, elided = _args(words)
  return Tool(env, runner, target, argv, words, elided, alone=not (env or runner or argv or elided) and not cmd.strict)


def _script_text(path: Path) -> str:
  """A shell script's code, its comment lines left out."""
  return "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))


def tool_error(cmd: Cmd) -> str | None:
  """None when the module or script exists and takes the command's arguments, else what is wrong."""
  t = tool(cmd)
  if isinstance(t, str): return t
  relaxed = t.elided or not cmd.strict
  if not t.target.endswith((".py", ".sh")):                                 # python -m MODULE
    path = ROOT / t.target.replace(".", "/")
    if not (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()):
      return f"no module {t.target} in the repository"
    if t.target in NO_PARSER:
      return None if not t.argv or re.fullmatch(NO_PARSER[t.target][0], " ".join(t.argv)) else \
        f"{t.target} takes {NO_PARSER[t.target][1]}"
    if not hasattr(importlib.import_module(t.target), "build_parser"):
      return f"{t.target} has no build_parser() to check its arguments with (or list it in NO_PARSER)"
    return _parse(t.target, t.argv, relaxed)[1]
  path = ROOT / t.target
  if not path.is_file(): return f"no script {t.target} in the repository"
  if t.alone: return None
  if t.target.endswith(".py"): return _parse(t.target, t.argv, relaxed)[1]
  if not t.runner and not os.access(path, os.X_OK): return f"{t.target} is not executable (chmod +x, or run it with bash)"
  code = _script_text(path)
  unread = [v for v in t.env if not re.search(rf"\b{v}\b", code) and not (v in ALL_KNOBS and STARTS_RUNS.search(code))]
  if unread: return f"{t.target} does not read {', '.join(unread)}"
  # its literal arguments (poll, stop, --verify): the script's code names each one
  unknown = [w for w in t.words if re.fullmatch(r"-{0,2}[a-z][\w-]*", w) and not re.search(rf"(?<![\w-]){w}(?![\w-])", code)]
  return f"{t.target} does not know {', '.join(unknown)}" if unknown else None


def all_tool_commands() -> list[Cmd]:
  return all_commands(TOOL, TOOL_INLINE)


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
  ("Row 3: `cp a.db b.db && PARALLEL=15 tinyperf check out --jsonn`", "md"),                # after another command
  ("`BERT_LAYERS=2 tinyperf run bert --nexp eight`", "md"),                                   # after VAR=value
  ("tinyperf run resnet --platform cpu_smoke --data d --nexp two", "sh"),                    # bad int
  ("```\ntinyperf run resnet --platform cpu_smoke\n```", "md"),                              # --data is required
  ("python3 -m tinyperf.tooling.cli prep bert-checkpoint --out x", "sh"),                             # no such dataset
  ("python3 -m tinyperf.tooling.cli prep wiki pretrain --data d --wrkers 2", "sh"),                   # the dataset's parser
  ("#   tinyperf build --vendor nvidia", "yaml"),                                            # bad choice in a comment
  ("`tinyperf prep ... --outt DIR`", "md"),                                                   # no dataset takes it
  ('raise UserError(f"rebuild it with `tinyperf build --vendr {self.vendor}`")', "py"),       # a hint in the code
  ("Rerun with `tinyperf check PATH\n--jsonn` to see why.", "md"),                            # a span the line break cuts
  ("```\ntinyperf check PATH --jso\n```", "md"),                                              # an abbreviated flag
])
def test_a_wrong_command_fails(doc, kind):
  cmds = extract("doc", doc, kind)
  assert cmds and all(parse_error(c) for c in cmds), [(c.text, parse_error(c)) for c in cmds]


@pytest.mark.parametrize("doc, kind", [
  ("```\ntinyperf check out/results/<system>/resnet --json\n```", "md"),
  ("`tinyperf run resnet|bert --platform P --data D`", "md"),
  ('python3 -m tinyperf.tooling.cli prep wiki pretrain --data "$DATA_DIR" --workers "${WORKERS:-$(nproc)}"', "sh"),
  ("`tinyperf run ... --only-index I`", "md"),
  ('tinyperf check --json "$RES" > "$OUT/check.json" 2>&1', "sh"),
  ('tinyperf prep wiki eval --data "$DATA" --platform 1xH200 &&', "sh"),
  ('  tinyperf prep wiki verify --data "$DATA" --quiet; } 2>&1 | stamp "$JOB/prep.log"', "sh"),
  ('tinyperf run bert --platform 1xH200 --data d --nexp $(( DEADLINE - $(date +%s) - 60 )) 2>&1', "sh"),
])
def test_a_right_command_passes(doc, kind):
  cmds = extract("doc", doc, kind)
  assert cmds and not [e for c in cmds if (e := parse_error(c))]


def test_readme_and_usage_say_what_is_pinned():
  """The docs' claim about the base images follows images.lock.json: 'not pinned yet' exactly while a digest is null."""
  from tinyperf.tooling.prep.images import load_lock
  unpinned = [v for v, e in load_lock()["images"].items() if not e.get("digest")]
  for doc in ("README.md", "docs/usage.md"):
    text = " ".join((ROOT / doc).read_text().lower().split())
    assert ("not pinned yet" in text or "no base image is pinned yet" in text) == bool(unpinned), (doc, unpinned)


# ---------------------------------------------------------------------------- this repository's modules and scripts
def test_every_documented_module_and_script_runs_as_written():
  cmds = all_tool_commands()
  kinds = {t.target.rsplit(".", 1)[-1] if t.target.endswith((".py", ".sh")) else "module"
           for c in cmds if not isinstance(t := tool(c), str)}
  assert len(cmds) > 100 and kinds == {"module", "py", "sh"}, f"{len(cmds)} commands of {kinds}: the extraction broke"
  bad = [f"{c.where}: `{c.text}`: {err}" for c in cmds if (err := tool_error(c))]
  assert not bad, "documented commands of this repository's modules and scripts that would not run as written:\n" + \
    "\n".join(bad)


@pytest.mark.parametrize("doc, kind", [
  ("`cp a.db b.db && PARALLEL=15 python -m lab.bench resnet --beam-cahce b.db`", "md"),   # after another command
  ("`python -m lab.beamlog LOG --pairs`", "md"),                                   # unknown flag
  ("```\npython3 -m lab.bert.bench_torch --bs 32 --modez eager\n```", "md"),        # ... in a code block
  ("`python -m lab.bert.bench_torchh --bs 32`", "md"),                               # no such module
  ("`python -m lab.bert.bench_torch --mode eager`", "md"),                           # --modes, abbreviated
  ("| 7 | ... | `python3 -m lab.bert.bench_torch --bs thirty-two` |", "md"),         # bad int, in a table
  ("`DEV=CUDA python3 lab/scripts/bench_d2d_copy.py --size-mb 4`", "md"),                       # a script's parser
  ("```\npython3 lab/scripts/e2e_summary.py\n```", "md"),                                       # RESULT_LOG is required
  ("`python3 scripts/loader_ratee.py DATA`", "md"),                                         # no such script
  ("`scripts/e2e_h300.sh`", "md"),                                                          # ... named alone
  ("`E2E=bert VOCABB=FILE lab/scripts/e2e_h200.sh`", "md"),                                     # a variable it never reads
  ("`lab/scripts/e2e_h200.sh pol`", "md"),                                                      # an argument it never reads
  ("`cp a b; UPSTREAM=u CACHE=c setsid nohup lab/scripts/upstream_beam.sh resnet 256 --fast &`", "md"),  # after `;`
  ("`/usr/bin/time -v python -m tinyperf.benchmarks.bert.prep pretrain --data D --quit`", "md"),     # a step's parser
  ("python3 -m tinyperf.benchmarks.registry sed resnet cpu_smoke", "sh"),                             # a generated script's line
  ("`python -m tinyperf.tooling.prep.compose --entre`", "md"),                                       # a NO_PARSER module
  ("On the smoke config `python -m tinyperf.benchmarks.resnet.train --platform cpu_smoke\n--phase sometimes` ran", "md"),
  ('raise SystemExit("time it with `python3 lab/scripts/loader_rate.py DATA --batchez 4`")', "py"),  # a hint in the code
])
def test_a_wrong_tool_command_fails(doc, kind):
  cmds = extract("doc", doc, kind, TOOL, TOOL_INLINE)
  assert cmds and all(tool_error(c) for c in cmds), [(c.text, tool_error(c)) for c in cmds]


@pytest.mark.parametrize("doc, kind", [
  ("`python -m lab.beamlog LOG[.gz]` reads it", "md"),
  ("`python -m lab.bench resnet|bert --gpus N --beam-cache FILE`", "md"),
  ('python3 -m lab.bench bert --gpus 2 --time-limit $(( DEADLINE - $(date +%s) - 60 )) 2>&1', "sh"),
  ("```\npython -m tinyperf.benchmarks.bert.prep pretrain --data data/wiki-smoke --platform cpu_smoke --workers 2\n```", "md"),
  ("`E2E=bert TRAIN_BEAM=2 VOCAB=.whl/vocab.txt lab/scripts/e2e_h200.sh`", "md"),              # TRAIN_BEAM: its runs' knob
  ("`UPSTREAM=.upstream CACHE=/tmp/u.db setsid nohup lab/scripts/upstream_beam.sh resnet 256 >/tmp/u.out 2>&1 &`", "md"),
  ("`source scripts/ci_docker.sh` (root; `scripts/ci_docker.sh stop` stops it)", "md"),
  ("```\nbash scripts/env.sh && source .venv/bin/activate\n```", "md"),
  ("`lab/scripts/e2e_h200.sh collect DIR` packs the logs", "md"),
  ("`python -m tinyperf.tooling.prep.compose --enter` checks the mounts", "md"),
  ("python3 -m tinyperf.benchmarks.registry seed resnet cpu_smoke", "sh"),
])
def test_a_right_tool_command_passes(doc, kind):
  cmds = extract("doc", doc, kind, TOOL, TOOL_INLINE)
  assert cmds and not [e for c in cmds if (e := tool_error(c))], [(c.text, tool_error(c)) for c in cmds]


def test_a_shell_script_run_by_its_path_must_be_executable(monkeypatch):
  """`scripts/X.sh` needs its executable bit; `bash scripts/X.sh` and `source scripts/X.sh` do not."""
  monkeypatch.setattr(os, "access", lambda path, mode: False)
  run, sourced = extract("doc", "```\nlab/scripts/e2e_h200.sh poll\nsource scripts/ci_docker.sh\n```", "md", TOOL, TOOL_INLINE)
  assert "not executable" in tool_error(run) and tool_error(sourced) is None
