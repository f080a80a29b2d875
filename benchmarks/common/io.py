"""Bad input and atomic files, shared by benchmarks/ and tooling/ (which may import tinyperf.benchmarks.common, never the reverse).

Anything raised as InputError is bad input or environment: entrypoints and the CLI print its message (one paragraph
naming the file and the fix) and exit 2, with no traceback."""
from __future__ import annotations
import contextlib
import hashlib
import os
import tempfile
from pathlib import Path


class InputError(Exception):
  """Bad input or environment: the message names the file (and line) and says how to fix it."""


def file_in_the_way(path: str | os.PathLike) -> Path | None:
  """The nearest existing ancestor of path when it is not a directory (mkdir then says only "File exists")."""
  for p in Path(path).parents:
    if p.exists(): return None if p.is_dir() else p
  return None


def require_dir_possible(path: str | os.PathLike, what: str) -> None:
  """InputError when a file stands where path's directories would go."""
  blocker = file_in_the_way(Path(path) / "_")
  if blocker is not None:
    which = "" if blocker == Path(path) else f" {blocker} is"
    raise InputError(f"{what} {path}:{which} a file, not a directory; move it away or choose another path.")


def new_file_mode() -> int:
  """The mode open() gives a new file: 0o666 less the umask (read from /proc: setting it to read it races threads)."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("Umask:"): return 0o666 & ~int(line.split()[1], 8)
  except OSError: pass
  mask = os.umask(0o022); os.umask(mask)
  return 0o666 & ~mask


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, overwrite: bool = False, text: bool = False, mode: int | None = None):
  """Open a file to write so that readers see either nothing or the whole file, with the mode open() would give it
  (mkstemp's is 0600: result logs that a teammate, reviewer or container of another user could not read), or MODE
  whatever the umask (0o644: read by a container of another user); the file appears with it. It is put in place when
  the block ends; an exception inside leaves nothing. text: a UTF-8 text stream, else bytes.

  With overwrite=False (the default for result files) an existing file is never replaced: InputError instead."""
  path = Path(path)
  if not overwrite and path.exists():
    raise InputError(f"{path} already exists and results are never overwritten; move it away or choose another path.")
  require_dir_possible(path.parent, "cannot write into")
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  try:
    os.fchmod(fd, new_file_mode() if mode is None else mode)
    with os.fdopen(fd, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as f:
      yield f
      f.flush(); os.fsync(f.fileno())
    if overwrite: os.replace(tmp, path)
    else: os.link(tmp, path)  # link() fails if the target appeared meanwhile: no silent overwrite race
  finally:
    if os.path.exists(tmp): os.unlink(tmp)


def write_atomic(path: str | os.PathLike, data: bytes | str, overwrite: bool = False, mode: int | None = None) -> Path:
  """DATA as the whole file at PATH, atomically (atomic_file)."""
  with atomic_file(path, overwrite, mode=mode) as f: f.write(data.encode() if isinstance(data, str) else data)
  return Path(path)


def two_sizes(a: int, b: int) -> tuple[str, str]:
  """Two byte counts in one unit (the larger's, bytes to GiB), with as many decimals as it takes for different counts
  to print different: "/dev/shm 0.00 GiB free, the loader rings need 0.00 GiB" refused with numbers that agreed."""
  unit, div = next(((u, d) for u, d in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)) if max(a, b) >= d), ("bytes", 1))
  if div == 1: return f"{a} bytes", f"{b} bytes"
  for dec in range(2, 11):
    fa, fb = f"{a / div:.{dec}f}", f"{b / div:.{dec}f}"
    if fa != fb or a == b: break
  return f"{fa} {unit}", f"{fb} {unit}"


def file_digest(path: str | os.PathLike, algo: str) -> str:
  """Hex digest of a file, read in chunks by hashlib: the one checksum helper (md5 of downloads and vocabs, sha1 of
  submission tarballs, sha256 of shards)."""
  with open(path, "rb") as f: return hashlib.file_digest(f, algo).hexdigest()
