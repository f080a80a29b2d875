"""An error message says what went wrong and the fix in at most two sentences; longer explanations live in
docs/hardening.md (issue 44). Read from the AST: the literal parts of each raised error's message in tooling/ and
benchmarks/, a formatted value counting as one word."""
import ast
import re

import pytest

from conftest import REPO

TREES = ("tooling", "benchmarks")
MAX_SENTENCES = 2
# a sentence ends at . ! or ? (after a closing quote or bracket) followed by a space and a capital, a backtick or a value
SENTENCE_END = re.compile(r"[.!?][\"')\]]?\s+(?=[A-Z`\x00])")
VALUE = "\x00"


def message_text(node: ast.expr) -> str | None:
  """The message literal with each formatted value as VALUE; None where the message is no literal (a variable, a call)."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str): return node.value
  if isinstance(node, ast.JoinedStr):
    return "".join(v.value if isinstance(v, ast.Constant) else VALUE for v in node.values)
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
    left, right = message_text(node.left), message_text(node.right)
    if left is not None or right is not None: return (left or VALUE) + (right or VALUE)
  return None


def error_name(call: ast.Call) -> str:
  f = call.func
  return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def error_messages(tree: ast.AST):
  """(line, text) of the first argument of every call of a class named *Error and of every raised call."""
  raised = {id(n.exc) for n in ast.walk(tree) if isinstance(n, ast.Raise) and n.exc is not None}
  for n in ast.walk(tree):
    if isinstance(n, ast.Call) and n.args and (id(n) in raised or error_name(n).endswith("Error")):
      text = message_text(n.args[0])
      if text is not None: yield n.lineno, text


def sentences(text: str) -> int:
  return len(SENTENCE_END.findall(re.sub(r"\b(e\.g|i\.e|etc)\.", "", text.strip()))) + 1   # no sentence ends there


def long_messages() -> list[str]:
  found = []
  for tree in TREES:
    for path in sorted((REPO / tree).rglob("*.py")):
      for line, text in error_messages(ast.parse(path.read_text(), str(path))):
        if sentences(text) > MAX_SENTENCES: found.append(f"{path.relative_to(REPO)}:{line}: {text[:100]!r}")
  return found


def test_no_error_message_holds_more_than_two_sentences():
  found = long_messages()
  assert not found, "error messages of more than two sentences (say what went wrong and the fix; the why goes to " \
                    "docs/hardening.md):\n" + "\n".join(found)


@pytest.mark.parametrize("source, count", [
  ('raise UserError("a is bad. Rerun with --x.")', 0),
  ('raise UserError(f"{p}: bad. Do {x}. Then {y}.")', 1),
  ('raise UserError("One. " f"Two {v}. " "Three.")', 1),
  ('err = InputError("bad, e.g. this. Fix it. Really. Now.")', 1),
  ('raise UserError(f"{n} files are missing, e.g. {f}. Restore them.")', 0),
  ('raise ValueError(msg)', 0),
])
def test_the_guard_counts_sentences_of_literals_and_f_strings(source, count):
  assert sum(sentences(t) > MAX_SENTENCES for _, t in error_messages(ast.parse(source))) == count
