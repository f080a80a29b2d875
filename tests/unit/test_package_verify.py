"""`tinyperf package --verify`, the repository rules and the openssl round trip, without building a package: tarballs
(benign and malicious) are made here with tarfile, and the sha1 files the way `sha1sum` writes them."""
from __future__ import annotations
import gzip
import io
import os
import random
import re
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.ship import archive, package
from tinyperf.tooling.cli import main as cli
from tinyperf.tooling.common.errors import UserError

NAME = "mlperf_submission_tinycorp.tar.gz"


def sha1sum_line(path: Path) -> str:
  """The real sha1sum, run where pack_submission.sh runs it (the tarball's directory)."""
  return subprocess.run(["sha1sum", path.name], cwd=path.parent, capture_output=True, text=True, check=True).stdout


def make_tar(path: Path, entries: list[tarfile.TarInfo | tuple[str, bytes]], sha1: bool = True) -> Path:
  """A gzip tar of entries: (name, data) for a regular file, or a prepared TarInfo (links, devices, ...)."""
  with tarfile.open(path, "w:gz") as tar:
    for e in entries:
      if isinstance(e, tuple):
        ti = tarfile.TarInfo(e[0]); ti.size = len(e[1]); ti.mode = 0o644
        tar.addfile(ti, io.BytesIO(e[1]))
      else:
        tar.addfile(e)
  if sha1: path.with_name(NAME.replace(".tar.gz", ".sha1")).write_text(sha1sum_line(path))
  return path


def info(name: str, type_: bytes, **kw) -> tarfile.TarInfo:
  ti = tarfile.TarInfo(name); ti.type = type_
  for k, v in kw.items(): setattr(ti, k, v)
  return ti


GOOD = [("tinycorp/systems/x.json", b"{}"), ("tinycorp/results/x/resnet/result_0.txt", b"log\n")]


def verify(capsys, tarball: Path, *extra) -> tuple[int, str, str]:
  code = cli(["package", "--verify", str(tarball), *map(str, extra)])
  out, err = capsys.readouterr()
  return code, out, err


def test_good_tarball_is_listed_and_unpacked(capsys, tmp_path):
  setuid = tarfile.TarInfo("tinycorp/run.sh"); setuid.size = 3; setuid.mode = 0o4755
  tb = tmp_path / NAME
  with tarfile.open(tb, "w:gz") as tar:
    for n, d in GOOD:
      ti = tarfile.TarInfo(n); ti.size = len(d); tar.addfile(ti, io.BytesIO(d))
    tar.addfile(setuid, io.BytesIO(b"hi\n"))
  (tmp_path / "mlperf_submission_tinycorp.sha1").write_text(sha1sum_line(tb))
  code, out, err = verify(capsys, tb)
  assert code == 0, err
  dest = tmp_path / "mlperf_submission_tinycorp_unpacked"
  assert "sha1: ok" in out and "tinycorp/results/x/resnet/result_0.txt" in out and "3 files" in out
  assert (dest / "tinycorp/results/x/resnet/result_0.txt").read_bytes() == b"log\n"
  assert oct((dest / "tinycorp/run.sh").stat().st_mode & 0o7777) == "0o755"      # no setuid bit
  assert f"tinyperf check {dest / 'tinycorp'}" in out
  code, out, err = verify(capsys, tb)                                              # never into an existing directory
  assert code == 2 and str(dest) in err and "--into" in err     # the directory, and the flag that picks another


def test_check_hint_after_unpacking_is_pasteable_with_a_space_in_the_path(capsys, tmp_path):
  d = tmp_path / "sub mission"; d.mkdir()
  code, out, err = verify(capsys, make_tar(d / NAME, GOOD))
  assert code == 0, err
  assert f"tinyperf check '{d / 'mlperf_submission_tinycorp_unpacked' / 'tinycorp'}'" in out, out


@pytest.mark.parametrize("entry,needle", [
  (("/etc/evil", b"x"), "'/etc/evil'"),            # each: the member and what makes it unsafe, where a fact says it
  (("tinycorp/../../evil", b"x"), "'tinycorp/../../evil'"),
  (("../evil", b"x"), "'../evil'"),
  (info("tinycorp/link", tarfile.SYMTYPE, linkname="/etc/passwd"), "'tinycorp/link': a symbolic link -> '/etc/passwd'"),
  (info("tinycorp/hard", tarfile.LNKTYPE, linkname="tinycorp/systems/x.json"), "'tinycorp/hard': a hard link"),
  (info("tinycorp/dev", tarfile.CHRTYPE, devmajor=1, devminor=3), "'tinycorp/dev': a character device"),
  (info("tinycorp/blk", tarfile.BLKTYPE, devmajor=8, devminor=0), "'tinycorp/blk': a block device"),
  (info("tinycorp/fifo", tarfile.FIFOTYPE), "'tinycorp/fifo': a FIFO"),
  (("tinycorp/systems/x.json", b"replaced"), "'tinycorp/systems/x.json'"),
  (("tinycorp/systems/x.json/inner", b"x"), "'tinycorp/systems/x.json/inner'"),
  (("C:evil", b"x"), "'C:evil'"),
  (("tinycorp/results/" + "n" * 300, b"x"), r"\b300\b.*\b255\b"),     # it unpacked half, then failed
  (("tinycorp/" + "a/" * 2000 + "f", b"x"), r"\b2002\b.*\b32\b"),      # RecursionError in mkdir
  (("tinycorp/" + ("d" * 200 + "/") * 8 + "f", b"x"), r"\b1024\b"),
])
def test_malicious_tarballs_are_refused_and_nothing_is_written(capsys, tmp_path, entry, needle):
  work = tmp_path / "w"; work.mkdir()
  tb = make_tar(work / NAME, GOOD + [entry])
  before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
  code, out, err = verify(capsys, tb, "--into", tmp_path / "dest")
  assert code == 1, (out, err)
  assert "refused: 1 " in err and (needle in err or re.search(needle, err)), err
  assert not (tmp_path / "dest").exists() and not Path("/etc/evil").exists() and not (tmp_path / "evil").exists()
  assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_sha1_mismatch_and_name_mismatch(capsys, tmp_path):
  tb = make_tar(tmp_path / NAME, GOOD)
  sha = tmp_path / "mlperf_submission_tinycorp.sha1"
  good = sha.read_text()
  sha.write_text("0" * 40 + good[40:])
  code, out, err = verify(capsys, tb)
  assert code == 1 and "MISMATCH" in err and not (tmp_path / "mlperf_submission_tinycorp_unpacked").exists()
  sha.write_text(good.replace(NAME, "other.tar.gz"))
  code, out, err = verify(capsys, tb)
  assert code == 1 and "'other.tar.gz'" in err
  sha.write_text("not a sha1 line\n")
  assert verify(capsys, tb)[0] == 1
  sha.unlink()
  code, out, err = verify(capsys, tb)
  assert code == 2 and str(sha) in err and "Traceback" not in err


def test_not_a_tarball(capsys, tmp_path):
  tb = tmp_path / NAME
  tb.write_bytes(b"hello, not gzip")
  (tmp_path / "mlperf_submission_tinycorp.sha1").write_text(sha1sum_line(tb))
  code, out, err = verify(capsys, tb)
  assert code == 1 and str(tb) in err
  code, out, err = verify(capsys, tmp_path / "missing.tar.gz")
  assert code == 2 and str(tmp_path / "missing.tar.gz") in err


def with_sha1(path: Path, data: bytes) -> Path:
  path.write_bytes(data)
  path.with_name(NAME.replace(".tar.gz", ".sha1")).write_text(sha1sum_line(path))
  return path


def test_corrupted_tarball_whose_sha1_matches_is_refused_not_unpacked_in_part(capsys, tmp_path):
  """The sha1 proves only that the file is the one hashed: damage before hashing reaches the tar reader. tarfile ends
  its listing at the first header it cannot read and never checks the gzip CRC, so most flipped bytes once gave exit 0
  and a tree missing most of its files (and one a zlib.error traceback)."""
  noise = random.Random(0)
  members = GOOD + [(f"tinycorp/benchmarks/f{i}.py", (f"line {i}\n" * 4000).encode() + noise.randbytes(256)) for i in range(8)]
  good = make_tar(tmp_path / "good.tar.gz", members, sha1=False).read_bytes()
  for k in range(1, 12):
    off = len(good) * k // 12
    d = tmp_path / f"c{k}"; d.mkdir()
    bad = bytearray(good); bad[off:off + 4] = bytes(x ^ 0x5A for x in bad[off:off + 4])
    code, out, err = verify(capsys, with_sha1(d / NAME, bytes(bad)), "--into", d / "dest")
    assert code == 1 and "nothing was unpacked" in err, (off, out, err)
    assert "Traceback" not in err and not (d / "dest").exists()


def test_unreadable_tar_header_inside_a_sound_gzip_is_refused(capsys, tmp_path):
  raw = io.BytesIO()
  with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
    for n, d in GOOD:
      ti = tarfile.TarInfo(n); ti.size = len(d); tar.addfile(ti, io.BytesIO(d))
  data = bytearray(raw.getvalue())
  data[1024 + 148:1024 + 156] = b"9999999\0"     # the second member's header checksum: tarfile reads "end of archive"
  tb = with_sha1(tmp_path / NAME, gzip.compress(bytes(data)))
  _, out, err = refused_untouched(capsys, tmp_path, tb, "the archive is damaged", "not the end-of-archive blocks")
  assert "result_0.txt" not in out


def test_a_file_where_the_output_directory_goes_is_named(capsys, tmp_path):
  """mkdir says only "File exists": --into FILE/x was reported as "FILE/x already exists", a path that does not."""
  tb = make_tar(tmp_path / NAME, GOOD)
  (tmp_path / "f").write_text("keep")
  code, out, err = verify(capsys, tb, "--into", tmp_path / "f" / "x")
  assert code == 2 and f"--into {tmp_path / 'f' / 'x'}: {tmp_path / 'f'} " in err, err    # the flag, then the file
  code = cli(["package", "--org", "tinycorp", "--out", str(tmp_path / "f"), "--results", str(tmp_path)])
  err = capsys.readouterr().err
  assert code == 2 and f"--out {tmp_path / 'f'}:" in err, err
  assert (tmp_path / "f").read_text() == "keep"


def test_openssl_round_trip_and_cli_compatibility(capsys, tmp_path):
  """Our encryption is what `openssl enc -d -aes256` (default options, password from a file) decrypts, and the other
  way round: a tarball encrypted by the openssl CLI verifies here."""
  plain = make_tar(tmp_path / "plain.tar.gz", GOOD, sha1=False)
  pw = tmp_path / "pw"
  pw.write_text("correct horse battery staple\nsecond line is ignored\n")
  enc = tmp_path / NAME
  archive.openssl_enc(False, plain, enc, archive.read_passphrase(pw, confirm=False))
  assert enc.read_bytes()[:8] == b"Salted__"
  p = subprocess.run(["openssl", "enc", "-d", "-aes256", "-in", str(enc), "-pass", f"file:{pw}"], capture_output=True)
  assert p.returncode == 0 and p.stdout == plain.read_bytes(), p.stderr
  (tmp_path / "mlperf_submission_tinycorp.sha1").write_text(sha1sum_line(enc))
  code, out, err = verify(capsys, enc, "--passphrase-file", pw, "--into", tmp_path / "a")
  assert code == 0, err
  assert (tmp_path / "a/tinycorp/systems/x.json").read_bytes() == b"{}" and "correct horse" not in out + err
  bad = tmp_path / "bad"; bad.write_text("wrong\n")
  code, out, err = verify(capsys, enc, "--passphrase-file", bad, "--into", tmp_path / "b")
  assert code == 2 and str(enc) in err and not (tmp_path / "b").exists()
  # encrypted by the CLI exactly as pack_submission.sh does (default digest, salt), verified here
  cli_enc = tmp_path / "c" / NAME; cli_enc.parent.mkdir()
  subprocess.run(["openssl", "enc", "-e", "-aes256", "-in", str(plain), "-out", str(cli_enc), "-pass", f"file:{pw}"],
                 check=True, capture_output=True)
  (cli_enc.parent / "mlperf_submission_tinycorp.sha1").write_text(sha1sum_line(cli_enc))
  code, out, err = verify(capsys, cli_enc, "--passphrase-file", pw)
  assert code == 0, err


def test_passphrase_sources(tmp_path, monkeypatch):
  (tmp_path / "empty").write_text("\nsecret\n")
  with pytest.raises(UserError, match=re.escape(str(tmp_path / "empty"))): archive.read_passphrase(tmp_path / "empty", False)
  with pytest.raises(UserError, match=re.escape(str(tmp_path / "nope"))): archive.read_passphrase(tmp_path / "nope", False)
  monkeypatch.setattr("sys.stdin", io.StringIO(""))
  with pytest.raises(UserError, match="--passphrase-file"): archive.read_passphrase(None, True)
  answers = iter(["a", "b"])
  monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
  monkeypatch.setattr(archive.getpass, "getpass", lambda prompt: next(answers))
  with pytest.raises(UserError): archive.read_passphrase(None, True)          # two different answers
  answers = iter(["same", "same"])
  assert archive.read_passphrase(None, True) == b"same"


def test_passphrase_never_reaches_argv(tmp_path, monkeypatch):
  seen = []
  real = subprocess.run
  monkeypatch.setattr(archive.subprocess, "run", lambda cmd, **kw: seen.append(cmd) or real(cmd, **kw))
  plain = make_tar(tmp_path / "p.tar.gz", GOOD, sha1=False)
  archive.openssl_enc(False, plain, tmp_path / "e", b"s3cret-pass")
  assert seen and all("s3cret" not in " ".join(c) for c in seen) and any(a.startswith("fd:") for a in seen[0])


# ---------------------------------------------------------------------------------------------------------------------
# repository rules

def test_repo_rules_and_the_real_repo_checker(tmp_path):
  org = tmp_path / "tinycorp"
  (org / "benchmarks" / "has space").mkdir(parents=True)
  (org / "benchmarks" / ".dockerignore").write_text("x")
  (org / "benchmarks" / "ok.txt").write_text("x")
  (org / "benchmarks" / "link").symlink_to("ok.txt")
  with open(org / "benchmarks" / "big.bin", "wb") as f: f.truncate(51 * 2 ** 20)   # sparse: no disk used
  os.mkfifo(org / "benchmarks" / "fifo")
  problems = "\n".join(package.repo_rules(org))
  for needle in ("tinycorp/benchmarks/has space: the name contains whitespace",
                 "tinycorp/benchmarks/.dockerignore: the name starts with '.'",
                 "tinycorp/benchmarks/link: a symbolic link", "tinycorp/benchmarks/big.bin: 51.0 MiB, over the 50 MiB",
                 "tinycorp/benchmarks/fifo: not a regular file or directory"):
    assert needle in problems, problems
  assert "ok.txt" not in problems
  (org / "benchmarks" / "fifo").unlink()                     # repo_checker itself would block reading a FIFO
  res = mlperf_tools.repo_check(tmp_path, "tinycorp", "4.0.0")
  assert not res.passed
  text = "\n".join(res.errors)
  assert "git-unfriendly name" in text and "has space" in text and ".dockerignore" in text and "Files > 50MB" in text
  for p in ("has space", ".dockerignore", "link", "big.bin"):
    path = org / "benchmarks" / p
    path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
  assert package.repo_rules(org) == [] and mlperf_tools.repo_check(tmp_path, "tinycorp", "4.0.0").passed


# --- bounds: a tar bomb is refused from its headers, before its data is inflated or anything is written -------------

ZEROS = 16 * archive.MiB


def bomb(path: Path, members: list[tuple[str, int]], tail: list[tarfile.TarInfo] = ()) -> Path:
  """A gzip tar of members holding `size` zero bytes each, written as concatenated gzip members (which gzip readers
  join): a GiB of zeros costs ~1 MiB on disk and milliseconds to make. `tail`: members after them (never reached)."""
  chunk = gzip.compress(bytes(ZEROS), compresslevel=9)
  with open(path, "wb") as f:
    for name, size in members:
      ti = tarfile.TarInfo(name); ti.size = size; ti.mode = 0o644
      f.write(gzip.compress(ti.tobuf()))
      full, rest = divmod(size, ZEROS)
      f.write(chunk * full)
      if rest or size % 512: f.write(gzip.compress(bytes(rest + (-size % 512))))
    f.write(gzip.compress(b"".join(t.tobuf() for t in tail) + bytes(1024)))
  path.with_name(NAME.replace(".tar.gz", ".sha1")).write_text(sha1sum_line(path))
  return path


def refused_untouched(capsys, tmp_path, tb, *needles):
  t = time.monotonic()
  code, out, err = verify(capsys, tb, "--into", tmp_path / "dest")
  assert code == 1 and "nothing was unpacked" in err and "Traceback" not in err, (out, err)
  for n in needles: assert n in err, err
  assert not (tmp_path / "dest").exists()
  return time.monotonic() - t, out, err


def test_one_gib_of_zeros_in_a_one_mib_tarball(capsys, tmp_path):
  tb = bomb(tmp_path / NAME, [("tinycorp/systems/x.json", 2), ("tinycorp/zeros", 1 << 30)])
  assert tb.stat().st_size < 2 * archive.MiB
  took, _, err = refused_untouched(capsys, tmp_path, tb, "'tinycorp/zeros': 1073741824 bytes, over the 50 MiB")
  assert took < 10


def test_many_members_under_the_file_cap_add_up_over_the_total_cap(capsys, tmp_path):
  n = archive.MAX_UNPACKED_BYTES // archive.MAX_MEMBER_BYTES + 1
  link = info("tinycorp/late-link", tarfile.SYMTYPE, linkname="/etc/passwd")
  tb = bomb(tmp_path / NAME, [(f"tinycorp/z{i}", archive.MAX_MEMBER_BYTES) for i in range(n)], tail=[link])
  _, _, err = refused_untouched(capsys, tmp_path, tb, f"over {archive.MAX_UNPACKED_BYTES >> 20} MiB unpacked by "
                                f"member 'tinycorp/z{n - 1}'")
  assert "late-link" not in err          # reading stopped at the bound: the rest was never inflated


def test_too_many_members_stops_reading(capsys, tmp_path):
  n = archive.MAX_MEMBERS + 2_000         # 300,000 once took 83 s and 235 MB; reading now stops at the bound
  tb = tmp_path / NAME
  link = info("tinycorp/late-link", tarfile.SYMTYPE, linkname="/etc/passwd")
  # empty files tinycorp/000000 ... : one ustar header, its name digits and checksum patched (tobuf() is too slow)
  head = bytearray(tarfile.TarInfo("tinycorp/000000").tobuf(tarfile.USTAR_FORMAT))
  base = int(head[148:154], 8)
  def header(i: int) -> bytes:
    d = b"%06d" % i
    head[9:15] = d
    head[148:156] = b"%06o\0 " % (base + sum(d) - 6 * ord("0"))
    return bytes(head)
  with open(tb, "wb") as f:
    f.write(gzip.compress(b"".join(header(i) for i in range(n)) + link.tobuf() + bytes(1024), compresslevel=1))
  (tmp_path / NAME.replace(".tar.gz", ".sha1")).write_text(sha1sum_line(tb))
  took, _, err = refused_untouched(capsys, tmp_path, tb, f"more than {archive.MAX_MEMBERS} members")
  assert "late-link" not in err and "tinycorp/" not in err   # stopped at the bound; the members themselves are fine
  assert took < 30


@pytest.mark.parametrize("name", ["tinycorp/a\rb", "tinycorp/ok\nFAKE  tinycorp/x", "tinycorp/\x1b[2Jclear",
                                  "tinycorp/\u202etxt.exe", "tinycorp/del\x7f"])
def test_member_names_with_control_characters_are_refused_and_shown_escaped(capsys, tmp_path, name):
  tb = make_tar(tmp_path / NAME, GOOD + [(name, b"x")])
  _, out, err = refused_untouched(capsys, tmp_path, tb, "control character")
  assert not any(c in out + err for c in "\r\x1b\u202e\x7f") and not any(l.startswith("FAKE") for l in err.splitlines())
  assert repr(name) in err


def test_listing_escapes_what_it_prints():
  assert archive.shown("tinycorp/a\rb\x1b") == "tinycorp/a\\rb\\x1b"
  assert archive.shown("tinycorp/ü.txt") == "tinycorp/ü.txt"


@pytest.mark.parametrize("which", ["sha1", "tarball"])
def test_sha1_or_tarball_that_is_a_device_is_not_read(capsys, tmp_path, which):
  tb = make_tar(tmp_path / NAME, GOOD)
  victim = tmp_path / (NAME.replace(".tar.gz", ".sha1") if which == "sha1" else NAME)
  victim.unlink(); victim.symlink_to("/dev/zero")
  code, out, err = verify(capsys, tb)
  assert code == 2 and "character device" in err and "Traceback" not in err and str(victim) in err


def test_passphrase_file_is_read_bounded_and_may_be_a_pipe(tmp_path):
  zero = tmp_path / "pw"; zero.symlink_to("/dev/zero")
  with pytest.raises(UserError, match=r"\b1024 bytes"): archive.read_passphrase(zero, False)   # the bound it read to
  r, w = os.pipe()                                   # what --passphrase-file <(pass show x) hands over
  os.write(w, b"from a pipe\n"); os.close(w)
  try: assert archive.read_passphrase(Path(f"/dev/fd/{r}"), False) == b"from a pipe"
  finally: os.close(r)
