"""Bounded reads of user-supplied files: regular files only, never more than a cap, every refusal a UserError.

Every reader of results (logs, systems JSONs, scaling.json, run output, .sha1 files) goes through here, so a FIFO named
console.txt cannot hang `check`, a link to /dev/zero cannot fill memory, and a symlink loop or an unreadable directory
is named as such instead of a traceback or a misleading "no such file". The caps live here and nowhere else.
"""
from __future__ import annotations
import errno
import os
import stat
from pathlib import Path
from typing import Iterator

from tinyperf.tooling.common.errors import UserError

MiB = 2 ** 20
MAX_LOG_BYTES = 32 * MiB      # one MLPerf result log: real ones are 30 KB (ours) to a few MB (per-step loggers)
MAX_JSON_BYTES = 1 * MiB      # a systems JSON, scaling.json: a few KB
MAX_LINE_BYTES = 1 * MiB      # one line of a run's console output when streaming it (longer lines are cut)
GZIP_MAGIC = b"\x1f\x8b"       # a gzip stream: a submission tarball, a gzipped log
ENC_MAGIC = b"Salted__"        # what `openssl enc` with a password writes first (an encrypted tarball)


def shown(text: str) -> str:
  """Text read from a tree (a file name, a checker's message) as printed: control and format characters escaped, so a
  newline in a file name cannot forge a line of a report."""
  return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def kind_of(mode: int) -> str:
  if stat.S_ISREG(mode): return "regular file"
  if stat.S_ISDIR(mode): return "directory"
  if stat.S_ISLNK(mode): return "symbolic link"
  if stat.S_ISFIFO(mode): return "FIFO (named pipe)"
  if stat.S_ISCHR(mode): return "character device"
  if stat.S_ISBLK(mode): return "block device"
  if stat.S_ISSOCK(mode): return "socket"
  return "special file"


def os_error(path: str | os.PathLike, e: OSError, what: str = "read") -> UserError:
  """The one-paragraph message for an OSError met while reading user input."""
  if e.errno == errno.ELOOP:
    return UserError(f"{path}: a symbolic link loop (it never reaches a file); remove or fix the link.")
  if e.errno in (errno.EACCES, errno.EPERM):
    via = f" (at {e.filename})" if e.filename and str(e.filename) != str(path) else ""
    return UserError(f"{path}: permission denied{via}: it cannot be {what}. Fix the permissions of it and of the "
                     f"directories above it (chmod: read, and search for directories), or run as their owner.")
  if e.errno == errno.ENOENT and os.path.islink(path):
    return UserError(f"{path}: a dangling symbolic link (-> {os.readlink(path)}); restore its target or remove it.")
  return UserError(f"{path}: cannot be {what} ({e.strerror or e}).")


def stat_path(path: str | os.PathLike) -> os.stat_result:
  """os.stat (links followed) with every failure as a UserError naming the path."""
  try:
    return os.stat(path)
  except OSError as e:
    if e.errno == errno.ENOENT and not os.path.islink(path): raise UserError(f"{path}: no such file.") from None
    raise os_error(path, e) from None


def require_regular(path: str | os.PathLike, what: str = "file") -> os.stat_result:
  st = stat_path(path)
  if not stat.S_ISREG(st.st_mode):
    raise UserError(f"{path}: a {kind_of(st.st_mode)}, not a regular file; a {what} must be a regular file. Remove it "
                    f"or replace it with the real file.")
  return st


def _open_regular(path: str | os.PathLike, what: str) -> tuple[int, os.stat_result]:
  require_regular(path, what)
  try:
    # O_NONBLOCK: a FIFO swapped in after the stat above must not block the open; fstat then refuses it
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
  except OSError as e:
    raise os_error(path, e) from None
  st = os.fstat(fd)
  if not stat.S_ISREG(st.st_mode):
    os.close(fd)
    raise UserError(f"{path}: a {kind_of(st.st_mode)}, not a regular file; a {what} must be a regular file.")
  return fd, st


def read_bytes(path: str | os.PathLike, cap: int = MAX_LOG_BYTES, what: str = "result log") -> bytes:
  """The whole file, if it is a regular file of at most `cap` bytes; UserError otherwise."""
  fd, st = _open_regular(path, what)
  try:
    with os.fdopen(fd, "rb") as f:
      data = f.read(cap + 1)   # the size may grow after fstat: read one byte past the cap to know
  except OSError as e:
    raise os_error(path, e) from None
  if len(data) > cap:
    raise UserError(f"{path}: over {cap // MiB} MiB, too large for a {what} (tinyperf reads at most {cap // MiB} MiB "
                    f"of one; tooling/common/safe_read.py). It is not a {what}, or it is damaged; move it out of the way.")
  return data


def read_text(path: str | os.PathLike, cap: int = MAX_JSON_BYTES, what: str = "file") -> str:
  data = read_bytes(path, cap, what)
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError:
    raise UserError(f"{path}: not UTF-8 text; a {what} is UTF-8 text.") from None


def iter_lines(path: str | os.PathLike, what: str = "run output") -> Iterator[bytes]:
  """A (possibly large) console log line by line, \\r and \\n both ending a line (tqdm redraws with \\r), in bounded
  memory: a line longer than MAX_LINE_BYTES is cut."""
  fd, _ = _open_regular(path, what)
  with os.fdopen(fd, "rb") as f:
    tail = b""
    while True:
      try: chunk = f.read(MiB)
      except OSError as e: raise os_error(path, e) from None
      if not chunk: break
      parts = (tail + chunk).replace(b"\r", b"\n").split(b"\n")
      tail = parts.pop()[:MAX_LINE_BYTES]
      yield from (p[:MAX_LINE_BYTES] for p in parts)
    if tail: yield tail


def list_dir(path: str | os.PathLike) -> list[Path]:
  """A directory's entries, sorted; a permission error or a loop is bad input naming the directory."""
  try:
    return sorted(Path(path).iterdir())
  except OSError as e:
    raise os_error(path, e, "listed") from None


MAX_TREE_DEPTH = 32   # directories below a results directory: real trees nest two or three (power/<node>/...)


def walk_dirs(root: str | os.PathLike, is_dir) -> Iterator[Path]:
  """Every entry below root (list_dir's order and errors), without recursion: is_dir(entry) says whether to descend
  into it. A tree nested deeper than MAX_TREE_DEPTH is bad input (a recursive walk of 1,500 nested folders raised
  RecursionError)."""
  stack = [(Path(root), 0)]
  while stack:
    top, depth = stack.pop()
    for p in list_dir(top):
      yield p
      if is_dir(p):
        if depth + 1 > MAX_TREE_DEPTH:
          raise UserError(f"{root}: nested more than {MAX_TREE_DEPTH} directories deep (at {p}); a results directory "
                          f"holds result files and power/ logs a few levels down. Remove the nested folders.")
        stack.append((p, depth + 1))
