"""The docs are a manual: README + docs/ stay within 15,000 words (issue 44; measurements live in docs/perf's records and
on the perf-data branch, not in prose)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_WORDS = 15_000


def test_readme_and_docs_fit_a_manual():
  files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
  assert len(files) > 5, "the docs walk found almost nothing: it broke"
  words = {str(p.relative_to(ROOT)): len(p.read_text().split()) for p in files}
  total = sum(words.values())
  biggest = ", ".join(f"{k} {v}" for k, v in sorted(words.items(), key=lambda kv: -kv[1])[:4])
  assert total <= MAX_WORDS, f"README + docs hold {total} words (> {MAX_WORDS}); largest: {biggest}"
