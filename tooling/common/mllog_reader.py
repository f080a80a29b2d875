"""A small reader for MLPerf result logs, for the checks the official tools do not make.

It keeps the compliance checker's view of a file (only lines containing `:::MLLOG `, everything up to the last token
stripped) and adds what the checker loses: the file line of every event, and a clear error (file:line) for input the
checker would crash on or silently mis-read (binary data, non-UTF-8 text, truncated JSON, events without time_ms/key).
"""
from __future__ import annotations
import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tinyperf.tooling.common.errors import UserError
from tinyperf.tooling.common.safe_read import ENC_MAGIC, GZIP_MAGIC, MAX_LOG_BYTES, read_bytes

TOKEN = ":::MLLOG "
REQUIRED_FIELDS = ("time_ms", "key", "value", "metadata")
# what the scoring and the checkers read as text: any other JSON type (a list, a number) would be compared, hashed or
# looked up as if it were a name, so it makes the file malformed
STRING_KEYS = ("submission_benchmark", "submission_division", "submission_org", "submission_platform",
               "submission_status")


@dataclass(frozen=True)
class Event:
  key: str
  value: object
  metadata: dict
  time_ms: int  # a finite integer: read_log refuses anything else
  line: int    # 1-based line in the file
  index: int   # 0-based position among the MLLOG lines: what the compliance checker calls "line N"
  text: str    # the line as the checker sees it: from the last `:::MLLOG ` on, whitespace trimmed


@dataclass
class MLLog:
  path: Path
  events: list[Event] = field(default_factory=list)

  def all(self, key: str) -> list[Event]: return [e for e in self.events if e.key == key]
  def first(self, key: str) -> Event | None: return next((e for e in self.events if e.key == key), None)
  def value(self, key: str, default=None):
    e = self.first(key)
    return default if e is None else e.value

  def by_index(self, index: int) -> Event | None:
    return self.events[index] if 0 <= index < len(self.events) else None

  def by_text(self, text: str) -> Event | None:
    text = text.strip()
    return next((e for e in self.events if e.text == text), None)

  # submission facts, first occurrence (the checker evaluates submission_* keys on their first occurrence only)
  @property
  def benchmark(self) -> str | None: return self.value("submission_benchmark")
  @property
  def division(self) -> str | None: return self.value("submission_division")
  @property
  def org(self) -> str | None: return self.value("submission_org")
  @property
  def platform(self) -> str | None: return self.value("submission_platform")


def _split_lines(text: str) -> list[str]:
  # The checker iterates a text-mode file: universal newlines, nothing else splits a line.
  return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _time_ms(v) -> int | None:
  """A JSON time_ms as int; None for bool, NaN, Infinity, strings, fractions (json.loads takes NaN and Infinity)."""
  if isinstance(v, bool): return None
  if isinstance(v, int): return v
  if isinstance(v, float) and math.isfinite(v) and v.is_integer(): return int(v)
  return None


def read_log(path: str | Path, require_benchmark: bool = True) -> MLLog:
  """Parse one result log; UserError (naming file and line) on anything the checkers cannot read reliably."""
  path = Path(path)
  data = read_bytes(path, MAX_LOG_BYTES, "result log")
  if data.startswith((GZIP_MAGIC, ENC_MAGIC)):
    raise UserError(f"{path}: a submission tarball (gzip or openssl-encrypted), not a result log. Unpack it with "
                    f"`tinyperf package --verify {shlex.quote(str(path))}` and check the directory it names.")
  if b"\x00" in data:
    line = data[:data.index(b"\x00")].count(b"\n") + 1
    raise UserError(f"{path}:{line}: binary data (NUL byte), not an MLPerf result log. Point check at the text log "
                    f"(result_<i>.txt) written by mllog.")
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b"\n") + 1
    raise UserError(f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); mllog writes "
                    f"UTF-8, so the file is corrupted or not a result log.") from None
  log = MLLog(path)
  for lineno, raw in enumerate(_split_lines(text), start=1):
    if TOKEN not in raw: continue
    body = raw[raw.rindex(TOKEN) + len(TOKEN):].strip()
    try:
      obj = json.loads(body)
    except json.JSONDecodeError as e:
      col = raw.rindex(TOKEN) + len(TOKEN) + e.pos + 1
      raise UserError(f"{path}:{lineno}: `:::MLLOG` line is not valid JSON ({e.msg.removesuffix(' at')} at column {col}): "
                      f"truncated or corrupted (a killed run, a full disk). Repair or drop the line only if you know why "
                      f"it broke.") from None
    if not isinstance(obj, dict) or any(k not in obj for k in REQUIRED_FIELDS):
      missing = [k for k in REQUIRED_FIELDS if not isinstance(obj, dict) or k not in obj]
      raise UserError(f"{path}:{lineno}: `:::MLLOG` event lacks {', '.join(missing)}; every event needs "
                      f"{', '.join(REQUIRED_FIELDS)} (mllog writes them all).")
    time_ms = _time_ms(obj["time_ms"])
    if time_ms is None:
      raise UserError(f"{path}:{lineno}: `:::MLLOG` event has time_ms {obj['time_ms']!r}, not a finite integer number "
                      f"of milliseconds. Rerun or restore the original log.")
    if not isinstance(obj["key"], str):
      raise UserError(f"{path}:{lineno}: `:::MLLOG` event key {obj['key']!r} is not a string.")
    if obj["key"] in STRING_KEYS and not isinstance(obj["value"], str):
      raise UserError(f"{path}:{lineno}: `:::MLLOG` {obj['key']} is {obj['value']!r}, not a string. Fix the line that "
                      f"logs it.")
    meta = obj["metadata"] if isinstance(obj["metadata"], dict) else {}
    log.events.append(Event(obj["key"], obj["value"], meta, time_ms, lineno, len(log.events), TOKEN + body))
  if require_benchmark:
    if not log.events:
      raise UserError(f"{path}: no `:::MLLOG` lines; this is not an MLPerf result log.")
    if not log.benchmark:
      raise UserError(f"{path}: no submission_benchmark event among its {len(log.events)} MLLOG lines, so neither the "
                      f"benchmark nor its ruleset is known. The run must log submission_benchmark (and "
                      f"submission_division) before init_start.")
  return log
