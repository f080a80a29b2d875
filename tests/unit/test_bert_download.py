"""prep download against a local HTTP server on 127.0.0.1 (never the internet): resume after an interrupted
transfer (HTTP Range through gdown), md5 failures keep nothing, verified extraction of results_text."""
from __future__ import annotations
import hashlib
import io
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("gdown", reason="prep download needs gdown (pip install gdown)")

from tinyperf.benchmarks.bert import download, prep
from bert_helpers import toy_vocab_lines, write_text

VOCAB = ("\n".join(toy_vocab_lines()) + "\n").encode()


class Server:
  """Serves self.files by name; Range: bytes=N- supported; names in self.cut get their first full response cut
  after half the body (Content-Length promises the whole file)."""

  def __init__(self):
    self.files: dict[str, bytes] = {}
    self.cut: set[str] = set()
    self.log: list[tuple[str, str | None]] = []
    srv = self

    class H(BaseHTTPRequestHandler):
      def log_message(self, *a): pass
      def do_GET(self):
        name = self.path.lstrip("/")
        rng = self.headers.get("Range")
        srv.log.append((name, rng))
        if name not in srv.files:
          self.send_response(404); self.end_headers(); return
        data, start = srv.files[name], 0
        if rng and rng.startswith("bytes="):
          start = int(rng[6:].split("-")[0])
          self.send_response(206)
          self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
          self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        body = data[start:]
        if name in srv.cut and start == 0:
          srv.cut.discard(name)
          self.wfile.write(body[:len(body) // 2]); self.wfile.flush()
          self.close_connection = True
          self.connection.shutdown(2)
          return
        self.wfile.write(body)

    self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
    self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
    self.thread.start()

  def close(self):
    self.httpd.shutdown(); self.httpd.server_close()


@pytest.fixture
def server():
  s = Server()
  yield s
  s.close()


def _tar(files: dict[str, bytes]) -> bytes:
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as t:
    for name, data in files.items():
      ti = tarfile.TarInfo(name); ti.size = len(data)
      t.addfile(ti, io.BytesIO(data))
  return buf.getvalue()


def _publish(server: Server, corrupt_part: bool = False):
  parts = {f"results4/part-{k:05d}-of-00002": (f"Doc {k} line one.\nLine two.\n\n" * 2000).encode() for k in range(2)}
  parts["results4/eval.txt"] = b"Eval doc.\nSecond line.\n"
  md5 = "".join(f"{hashlib.md5(d).hexdigest()}  ./{n.split('/', 1)[1]}\n" for n, d in parts.items())
  if corrupt_part: parts["results4/part-00001-of-00002"] += b"x"
  server.files.update({"bert_config.json": b'{"vocab_size": %d}' % len(toy_vocab_lines()), "vocab.txt": VOCAB,
                       "model.ckpt-28252.data-00000-of-00001": bytes(range(256)) * 16000,
                       "model.ckpt-28252.index": b"index", "model.ckpt-28252.meta": b"meta",
                       "bert_reference_results_text_md5.txt": md5.encode(), "results_text.tar.gz": _tar(parts)})


def test_interrupted_transfer_resumes(server, tmp_path, capsys):
  _publish(server)
  server.cut.add("model.ckpt-28252.data-00000-of-00001")
  out = tmp_path / "wiki"
  assert prep.main(["download", "--out", str(out), "--base-url", server.url, "--retries", "0", "--quiet"]) == 2
  err = capsys.readouterr().err
  assert "model.ckpt-28252.data-00000-of-00001" in err      # the file cut short; the rerun below resumes it
  assert not (out / "model.ckpt-28252.data-00000-of-00001").exists()
  partial = list((out / ".download").glob("model.ckpt-28252.data-00000-of-00001*.part"))
  assert len(partial) == 1 and 0 < partial[0].stat().st_size < 4096000
  have = partial[0].stat().st_size
  assert (out / "vocab.txt").read_bytes() == VOCAB   # earlier files finished and stay
  assert prep.main(["download", "--out", str(out), "--base-url", server.url, "--quiet"]) == 0
  data_req = [r for n, r in server.log if n == "model.ckpt-28252.data-00000-of-00001"]
  assert data_req[-1] == f"bytes={have}-", data_req
  assert (out / "model.ckpt-28252.data-00000-of-00001").read_bytes() == server.files["model.ckpt-28252.data-00000-of-00001"]
  assert sorted(p.name for p in (out / "results4").iterdir()) == ["eval.txt", "part-00000-of-00002", "part-00001-of-00002"]
  assert 'model_checkpoint_path: "model.ckpt-28252"' in (out / "checkpoint").read_text()
  assert not (out / "results_text.tar.gz").exists() and not (out / ".download").exists()
  # everything in place: a rerun fetches nothing
  n = len(server.log)
  assert prep.main(["download", "--out", str(out), "--base-url", server.url, "--quiet"]) == 0
  assert len(server.log) == n


def test_md5_failure_keeps_nothing(server, tmp_path):
  _publish(server)
  out = tmp_path / "wiki"
  with pytest.raises(prep.InputError, match=rf"vocab.txt\b.*{hashlib.md5(VOCAB).hexdigest()}.*{'0' * 32}"):   # got, wanted
    download.download_all(out, base_url=server.url, text=False, checkpoint=False, quiet=True,
                          md5={"vocab.txt": "0" * 32})
  assert not (out / "vocab.txt").exists()
  assert not list((out / ".download").glob("vocab.txt*")) if (out / ".download").exists() else True
  ok = hashlib.md5(VOCAB).hexdigest()
  download.download_all(out, base_url=server.url, text=False, checkpoint=False, quiet=True, md5={"vocab.txt": ok})
  assert (out / "vocab.txt").read_bytes() == VOCAB


def test_corrupt_text_part_keeps_nothing_extracted(server, tmp_path, capsys):
  _publish(server, corrupt_part=True)
  out = tmp_path / "wiki"
  assert prep.main(["download", "--out", str(out), "--base-url", server.url, "--no-checkpoint", "--quiet"]) == 2
  err = capsys.readouterr().err
  assert "results4/part-00001-of-00002: md5" in err         # the part, and the check it failed
  assert not (out / "results4").exists() and not list(out.glob(".results4*"))
  assert (out / "results_text.tar.gz.corrupt").exists() and not (out / "results_text.tar.gz").exists()
  _publish(server)   # fixed upstream: a rerun downloads the archive again
  assert prep.main(["download", "--out", str(out), "--base-url", server.url, "--no-checkpoint", "--quiet"]) == 0
  assert (out / "results4" / "part-00001-of-00002").is_file()


def test_a_text_archive_with_a_2000_deep_member_is_refused_not_a_recursion_error(server, tmp_path, capsys):
  _publish(server)
  deep = "results4/" + "d/" * 2000 + "x.txt"
  server.files["results_text.tar.gz"] = _tar({deep: b"x", "results4/eval.txt": b"Eval doc.\n"})
  out = tmp_path / "wiki"
  assert prep.main(["download", "--out", str(out), "--base-url", server.url, "--no-checkpoint", "--quiet"]) == 2
  err = capsys.readouterr().err
  assert "results_text.tar.gz" in err and str(download.MAX_TEXT_DEPTH) in err and "Traceback" not in err
  assert not (out / "results4").exists() and not list(out.glob(".results4*"))


def test_vocab_config_mismatch_after_download(server, tmp_path, capsys):
  _publish(server)
  server.files["bert_config.json"] = b'{"vocab_size": 30522}'
  out = tmp_path / "wiki"
  assert prep.main(["download", "--out", str(out), "--base-url", server.url, "--no-text", "--no-checkpoint",
                    "--quiet"]) == 2
  err = capsys.readouterr().err
  assert "bert_config.json" in err and "30522" in err, err


def test_drive_urls():
  assert download.file_url("vocab.txt", None) == "https://drive.google.com/uc?id=1USK108J6hMM_d27xCHi738qBL8_BT1u1"
  assert download.file_url("vocab.txt", "http://127.0.0.1:1/x/") == "http://127.0.0.1:1/x/vocab.txt"
  assert len(download.FILES) == 7


def _tinyperf(cwd, *args):
  import os
  import subprocess
  import sys
  from conftest import REPO
  return subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *args], cwd=cwd, capture_output=True, text=True,
                        timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})


def _hint_commands(err: str) -> list[list[str]]:
  """The `tinyperf ...` commands a message names, each parsed as a user pastes it (the real parsers, strictly)."""
  import shlex
  from tests.unit.test_doc_commands import extract, parse_error
  cmds = extract("stderr", f"```\n{chr(10).join(c for c in err.split('`')[1::2] if c.startswith('tinyperf '))}\n```", "md")
  assert cmds, err
  for c in cmds: assert parse_error(c) is None, (c.text, parse_error(c))
  return [shlex.split(c.text) for c in cmds]


def test_a_missing_vocab_names_the_download_that_fetches_it(server, tmp_path):
  """The user's path: `tinyperf prep wiki pretrain` from another directory, relative paths, a data directory with the
  text but no vocab.txt (and a space in its name). The hint is a command that exists, pastes as printed, and fetches
  what is missing and only that (it named the full download: the text archive and the phase-1 checkpoint, gigabytes);
  with it done, the same pretrain gets past the vocab. A --vocab path not named vocab.txt, which no download makes, is
  told to check the path; a directory given as --vocab is named as one (it said "not found")."""
  _publish(server)
  data = write_text(tmp_path / "my data", parts=1, docs_per_part=4)
  r = _tinyperf(tmp_path, "prep", "wiki", "pretrain", "--data", "my data", "--quiet")
  assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert "my data/vocab.txt" in r.stderr, r.stderr
  (cmd,) = _hint_commands(r.stderr)
  assert cmd == ["tinyperf", "prep", "wiki", "download", "--out", "my data", "--no-text", "--no-checkpoint"], cmd
  got = _tinyperf(tmp_path, *cmd[1:], "--base-url", server.url, "--quiet")   # the mirror stands in for Google Drive
  assert got.returncode == 0, got.stderr
  assert sorted({n for n, _ in server.log}) == ["bert_config.json", "vocab.txt"]
  assert (data / "vocab.txt").read_bytes() == VOCAB
  r = _tinyperf(tmp_path, "prep", "wiki", "pretrain", "--data", "my data", "--quiet")
  assert r.returncode == 0 and list((data / "train").glob("*.shard")), r.stderr

  r = _tinyperf(tmp_path, "prep", "wiki", "pretrain", "--data", "my data", "--vocab", "missing.txt")
  assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert "missing.txt" in r.stderr and "--vocab" in r.stderr, r.stderr
  (cmd,) = _hint_commands(r.stderr)
  assert cmd[:4] == ["tinyperf", "prep", "wiki", "download"] and "DIR/vocab.txt" in r.stderr, r.stderr
  r = _tinyperf(tmp_path, "prep", "wiki", "pretrain", "--data", "my data", "--vocab", "my data")
  assert r.returncode == 2 and "--vocab 'my data/vocab.txt'" in r.stderr, r.stderr     # the flag as it should be
