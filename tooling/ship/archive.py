"""The submission tarball: written as MLCommons' pack script writes it (a gzip tar of ORG/, optionally through `openssl
enc -e -aes256`, and the `sha1sum` line of the final file), and `tinyperf package --verify`: the .sha1 checked, decrypted
if needed, every member checked before anything is unpacked into a directory that must not exist yet."""
from __future__ import annotations
import argparse
import getpass
import gzip
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tinyperf.benchmarks.common.io import file_digest, require_dir_possible
from tinyperf.tooling.common.errors import UserError
from tinyperf.tooling.common.safe_read import ENC_MAGIC, GZIP_MAGIC, MAX_TREE_DEPTH, MiB, read_bytes, require_regular

MAX_FILE_BYTES = 50 * MiB              # repo_checker's limit (its "50MB" is 50 MiB)
# --verify's bounds on an archive (docs/package.md): a resnet + bert package of one system is 201 members and 1.8 MB
# unpacked, so a package of every platform and benchmark stays far below them
MAX_MEMBERS = 10_000
MAX_NAME_BYTES = 255                   # one path component: NAME_MAX of every common file system
MAX_PATH_BYTES = 1024                  # a member's whole name, well under PATH_MAX with the destination in front
MAX_MEMBER_BYTES = MAX_FILE_BYTES      # what the repository rules allow one file
MAX_UNPACKED_BYTES = 256 * MiB
MAX_SHA1_BYTES = 4096                  # one `sha1sum` line
MAX_PASSPHRASE = 1024


def tarball_name(org: str) -> str: return f"mlperf_submission_{org}.tar.gz"
def sha1_name(org: str) -> str: return f"mlperf_submission_{org}.sha1"


def _walk_sorted(path: Path):
  yield path
  if path.is_dir() and not path.is_symlink():
    for child in sorted(path.iterdir(), key=lambda p: p.name):
      yield from _walk_sorted(child)


def write_tarball(org_dir: Path, dest: Path, mtime: int) -> None:
  """gzip'd tar of ORG/ with sorted members and normalised owners, times and modes: the same runs give the same bytes."""
  with open(dest, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as gz, \
       tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
    for p in _walk_sorted(org_dir):
      ti = tar.gettarinfo(str(p), arcname=p.relative_to(org_dir.parent).as_posix())
      ti.uid = ti.gid = 0
      ti.uname = ti.gname = ""
      ti.mtime = mtime
      if ti.isdir(): ti.mode = 0o755
      elif ti.isreg(): ti.mode = 0o755 if p.stat().st_mode & 0o111 else 0o644
      else: raise UserError(f"{p}: not a regular file or directory; it cannot go into a submission tarball.")
      if ti.isreg():
        with open(p, "rb") as f: tar.addfile(ti, f)
      else: tar.addfile(ti)


def read_passphrase(path: Path | None, confirm: bool) -> bytes:
  """From the first line of a file (what `-pass file:` reads), or typed twice at a prompt. Never echoed or logged."""
  if path is not None:
    try:   # a pipe is fine (--passphrase-file <(pass show x)); the read is bounded so /dev/zero is not
      with open(path, "rb") as f: data = f.read(4 * MAX_PASSPHRASE)
    except OSError as e:
      raise UserError(f"{path}: cannot read the passphrase file ({e.strerror or e}).") from None
    pw = data.split(b"\n", 1)[0].rstrip(b"\r")
    if not pw: raise UserError(f"{path}: the passphrase file's first line is empty; put the passphrase on it.")
  else:
    if not sys.stdin.isatty():
      raise UserError("no terminal to ask for the passphrase on; give it with --passphrase-file F (its first line).")
    first = getpass.getpass("passphrase: ")
    if not first: raise UserError("empty passphrase; the tarball would not be protected.")
    if confirm and getpass.getpass("passphrase again: ") != first:
      raise UserError("the two passphrases differ; nothing was written.")
    pw = first.encode()
  if len(pw) > MAX_PASSPHRASE: raise UserError(f"the passphrase is longer than {MAX_PASSPHRASE} bytes.")
  return pw


def openssl_path() -> str:
  exe = shutil.which("openssl")
  if exe is None:
    raise UserError("the openssl command is not installed; install it (e.g. apt-get install openssl) to "
                    "use --encrypt or to verify an encrypted tarball.")
  return exe


def openssl_enc(decrypt: bool, src: Path, dst: Path, passphrase: bytes) -> None:
  """`openssl enc -e|-d -aes256` with a password, as pack_submission.sh runs it: salted, EVP_BytesToKey with SHA-256
  (OpenSSL >= 1.1's default digest, made explicit so an OpenSSL 1.0 here still writes what OpenSSL 3 decrypts). The
  passphrase goes through a pipe (`-pass fd:N`), never the command line."""
  exe = openssl_path()
  r, w = os.pipe()
  try:
    os.write(w, passphrase + b"\n")
    os.close(w); w = -1
    cmd = [exe, "enc", "-d" if decrypt else "-e", "-aes256", "-md", "sha256", "-in", str(src), "-out", str(dst),
           "-pass", f"fd:{r}"]
    p = subprocess.run(cmd, pass_fds=(r,), capture_output=True, text=True, errors="replace")
  finally:
    os.close(r)
    if w >= 0: os.close(w)
  if p.returncode != 0:
    msg = " ".join(l.strip() for l in p.stderr.splitlines() if l.strip() and "deprecated key derivation" not in l)
    if decrypt and "bad decrypt" in p.stderr:
      raise UserError(f"{src}: openssl could not decrypt it: wrong passphrase, or not an `openssl enc -aes256` file.")
    raise UserError(f"openssl enc failed on {src}: {msg or f'exit {p.returncode}'}")


def sha1_of(path: Path) -> str: return file_digest(path, "sha1")


def sha1_line(path: Path) -> str:
  """What `sha1sum <name>` prints in the tarball's directory, which is what pack_submission.sh stores and compares."""
  return f"{sha1_of(path)}  {path.name}\n"


@dataclass
class Member:
  name: str            # normalised: no leading ./, no trailing /
  kind: str            # "dir" | "file"
  size: int
  executable: bool
  info: tarfile.TarInfo


def _kind(m: tarfile.TarInfo) -> str:
  if m.issym(): return "symbolic link"
  if m.islnk(): return "hard link"
  if m.ischr(): return "character device"
  if m.isblk(): return "block device"
  if m.isfifo(): return "FIFO"
  if m.issparse(): return "sparse file"
  if m.isdir(): return "dir"
  if m.isreg(): return "file"
  return f"type {m.type!r}"


def shown(name: str) -> str:
  """A member name as printed: control and format characters escaped, so a name cannot rewrite the listing."""
  return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def _bad_char(name: str) -> str | None:
  return next((c for c in name if unicodedata.category(c).startswith("C")), None)   # Cc, Cf (bidi), Cs, Co, Cn


def safe_members(tar: tarfile.TarFile) -> tuple[list[Member], list[str]]:
  """Every member checked before anything is written: regular files and directories with printable relative names that
  stay inside the destination; no links, devices, FIFOs, duplicates, or files used as directories; at most MAX_MEMBERS
  members, MAX_MEMBER_BYTES each and MAX_UNPACKED_BYTES in all. Reading stops at the first bound exceeded: skipping a
  member means decompressing it, so a tar bomb is refused from its headers, before its data is inflated."""
  members, problems, seen, total = [], [], {}, 0
  for i, m in enumerate(tar):   # streaming, not getmembers(): a 300,000-member archive stops at MAX_MEMBERS + 1
    if i >= MAX_MEMBERS:
      problems.append(f"more than {MAX_MEMBERS} members (a real submission has a few hundred); stopped reading")
      break
    total += max(m.size, 0)
    if m.size > MAX_MEMBER_BYTES:
      problems.append(f"{m.name!r}: {m.size} bytes, over the {MAX_MEMBER_BYTES // MiB} MiB a file of a "
                      f"submission may have; stopped reading")
      break
    if total > MAX_UNPACKED_BYTES:
      problems.append(f"over {MAX_UNPACKED_BYTES // MiB} MiB unpacked by member {m.name!r} (a real submission "
                      f"is a few MB); stopped reading")
      break
    name = m.name
    kind = _kind(m)
    bad = _bad_char(name)
    if bad is not None:
      problems.append(f"{name!r}: the name holds the control character {bad!r}; names in a submission are "
                      f"printable")
      continue
    label = repr(name)
    if kind not in ("dir", "file"):
      target = f" -> {m.linkname!r}" if m.issym() or m.islnk() else ""
      problems.append(f"{label}: a {kind}{target}; a submission holds only files and directories")
      continue
    if not name or name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\\" in name or "\x00" in name:
      problems.append(f"{label}: an absolute or non-POSIX path")
      continue
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if not parts or ".." in parts:
      problems.append(f"{label}: " + ("'..' leads out of the destination" if ".." in parts else "an empty name"))
      continue
    norm = "/".join(parts)
    long = next((p for p in parts if len(p.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES), None)
    if long is not None or len(parts) > MAX_TREE_DEPTH or len(norm.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
      # each was unpacked until the file system refused it (ENAMETOOLONG: half a tree), or raised RecursionError
      problems.append(f"{shown(norm[:80])}...: " + (
        f"a name of {len(long.encode('utf-8', 'surrogateescape'))} bytes, over the {MAX_NAME_BYTES} a file system allows"
        if long is not None else f"{len(parts)} levels deep, over {MAX_TREE_DEPTH}" if len(parts) > MAX_TREE_DEPTH
        else f"a path of over {MAX_PATH_BYTES} bytes (a real submission's are under 200)"))
      continue
    if norm in seen:
      problems.append(f"{label}: a second member with this name (it would replace the first)")
      continue
    seen[norm] = kind
    members.append(Member(norm, kind, m.size if kind == "file" else 0, bool(m.mode & 0o111), m))
  for mem in members:
    parent = str(PurePosixPath(mem.name).parent)
    while parent not in (".", ""):
      if seen.get(parent) == "file":
        problems.append(f"{mem.name!r}: its parent {parent!r} is a file in the archive")
        break
      parent = str(PurePosixPath(parent).parent)
  return members, problems


def damage(tar: tarfile.TarFile) -> str | None:
  """Why an archive whose members were all read is not whole, or None. tarfile ends its listing at the first header it
  cannot parse, as if the archive ended there, and never reads the gzip trailer (its CRC): what follows the
  end-of-archive blocks must be zeros up to a gzip stream that checks. Raises what a damaged stream raises."""
  f = tar.fileobj
  f.seek(tar.offset)
  left = MAX_UNPACKED_BYTES
  while chunk := f.read(MiB):
    if chunk.count(0) != len(chunk):
      return f"at byte {tar.offset} of the tar, where the member list ends, comes data, not the end-of-archive blocks"
    left -= len(chunk)
    if left < 0: return f"over {MAX_UNPACKED_BYTES // MiB} MiB of padding after the last member"
  return None


def extract(tar: tarfile.TarFile, members: list[Member], dest: Path) -> None:
  """Write the checked members under dest (which this call creates): directories, then files opened with O_EXCL and
  O_NOFOLLOW, modes 0755/0644 (no setuid bits, no owners)."""
  root = os.path.realpath(dest)
  for mem in members:
    target = dest.joinpath(*mem.name.split("/"))
    if not os.path.realpath(target).startswith(root + os.sep):
      raise UserError(f"{mem.name!r} resolves outside {dest}; refusing.")
    if mem.kind == "dir":
      target.mkdir(parents=True, exist_ok=True)
      target.chmod(0o755)
      continue
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mem.executable else 0o644)
    with os.fdopen(fd, "wb") as out, tar.extractfile(mem.info) as src:
      shutil.copyfileobj(src, out)


def verify(args: argparse.Namespace) -> int:
  tarball: Path = args.verify
  if not tarball.exists() and not tarball.is_symlink():
    raise UserError(f"{tarball}: no such file; give the mlperf_submission_<ORG>.tar.gz to verify.")
  require_regular(tarball, "submission tarball")
  default_sha = tarball.with_name(tarball.name[:-len(".tar.gz")] + ".sha1") if tarball.name.endswith(".tar.gz") \
    else tarball.with_name(tarball.name + ".sha1")
  sha_file = args.sha1 or default_sha
  if not sha_file.exists() and not sha_file.is_symlink():
    raise UserError(f"{sha_file}: no sha1 file next to the tarball (pack_submission.sh writes "
                    f"mlperf_submission_<ORG>.sha1); give it with --sha1 FILE.")
  want = read_bytes(sha_file, MAX_SHA1_BYTES, "sha1 file").decode("utf-8", "replace")
  got = sha1_line(tarball)
  m = re.fullmatch(r"([0-9a-f]{40})  (.+)\n?", want)
  if not m:
    print(f"sha1: {sha_file} is not one `sha1sum` line ('<40 hex digits>  <file name>')", file=sys.stderr)
    return 1
  if m.group(1) != got.split()[0]:
    print(f"sha1: MISMATCH: {sha_file} says {m.group(1)}, {tarball.name} has {got.split()[0]}: the tarball is not the "
          f"one that was packed (or is damaged)", file=sys.stderr)
    return 1
  if m.group(2) != tarball.name:
    print(f"sha1: {sha_file} names {m.group(2)!r} but the tarball is {tarball.name!r}; pack_submission.sh compares the "
          f"whole line, so rename the tarball back", file=sys.stderr)
    return 1
  print(f"sha1: ok ({got.strip()})")
  stem = tarball.name[:-len(".tar.gz")] if tarball.name.endswith(".tar.gz") else tarball.name
  dest = args.into or tarball.with_name(stem + "_unpacked")
  require_dir_possible(dest, "--into")
  if dest.exists() or dest.is_symlink():
    raise UserError(f"{dest} already exists; --verify unpacks only into a fresh directory. Remove it or pass "
                    f"--into NEW_DIR.")
  with open(tarball, "rb") as f: magic = f.read(8)
  with tempfile.TemporaryDirectory(prefix="tinyperf-verify-") as tmp:
    plain = tarball
    if magic == ENC_MAGIC:
      passphrase = read_passphrase(args.passphrase_file, confirm=False)
      plain = Path(tmp) / "plain.tar.gz"
      openssl_enc(True, tarball, plain, passphrase)
      print("decrypted with openssl enc -d -aes256")
    elif magic[:2] != GZIP_MAGIC:
      print(f"{tarball}: neither a gzip file nor an `openssl enc` file (starts with {magic!r})", file=sys.stderr)
      return 1
    try:
      tar = tarfile.open(plain, "r:gz")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
      print(f"{tarball}: not a readable gzip tar ({e}); nothing was unpacked.", file=sys.stderr)
      return 1
    with tar:
      try:
        members, problems = safe_members(tar)
        broken = None if problems else damage(tar)
      except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        broken = str(e)
      if broken:
        print(f"{tarball}: the archive is damaged ({broken}); nothing was unpacked. Ask the submitter for the tarball "
              f"again.", file=sys.stderr)
        return 1
      files = [x for x in members if x.kind == "file"]
      print(f"{len(files)} files, {len(members) - len(files)} directories, {sum(x.size for x in files)} bytes:")
      for x in members:
        print(f"  {'d' if x.kind == 'dir' else 'f'} {x.size:>10}  {shown(x.name)}{'/' if x.kind == 'dir' else ''}")
      tops = sorted({x.name.split('/')[0] for x in members})
      if problems:
        print(f"refused: {len(problems)} unsafe member(s); nothing was unpacked:", file=sys.stderr)
        for p in problems: print(f"  {p}", file=sys.stderr)
        return 1
      try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.mkdir()
      except FileExistsError:
        raise UserError(f"{dest} already exists; --verify unpacks only into a fresh directory. Remove it or pass "
                        f"--into NEW_DIR.") from None
      except OSError as e:
        raise UserError(f"cannot create {dest} ({e.strerror or e}); pass a writable --into.") from None
      try:
        extract(tar, members, dest)
      except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        print(f"{tarball}: unpacking failed ({e}); {dest} holds a partial copy", file=sys.stderr)
        return 1
  print(f"unpacked into {dest}: {', '.join(tops)}" + (f" (check it: tinyperf check {shlex.quote(str(dest / tops[0]))})" if len(tops) == 1
                                                      else ""))
  return 0
