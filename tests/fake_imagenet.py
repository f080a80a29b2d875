"""Test helpers: a tiny fake ILSVRC2012 (train tar of per-class tars, flat val tar, labels file) and a local HTTP server
on 127.0.0.1 that serves files with Range support and can drop the connection midway or refuse with a status code."""
from __future__ import annotations
import hashlib
import io
import json
import os
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def jpeg_bytes(seed: int, w: int = 40, h: int = 30) -> bytes:
  rng = np.random.default_rng(seed)
  buf = io.BytesIO()
  Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)).save(buf, "JPEG", quality=85)
  return buf.getvalue()


def _add(tf: tarfile.TarFile, name: str, data: bytes):
  info = tarfile.TarInfo(name)
  info.size = len(data)
  info.mtime = 0
  tf.addfile(info, io.BytesIO(data))


def make_fake_ilsvrc(d: Path, wnids=("n01000003", "n01000001", "n01000002"), per_class: int = 4, val: int = 7) -> dict:
  """Writes ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar, val_labels.txt and checksums.json into d."""
  d.mkdir(parents=True, exist_ok=True)
  with tarfile.open(d / "ILSVRC2012_img_train.tar", "w") as outer:
    for k, wnid in enumerate(wnids):
      inner = io.BytesIO()
      with tarfile.open(fileobj=inner, mode="w") as tf:
        for i in range(per_class): _add(tf, f"{wnid}_{i + 1}.JPEG", jpeg_bytes(100 * k + i))
      _add(outer, f"{wnid}.tar", inner.getvalue())
  labels = [wnids[(3 * i + 1) % len(wnids)] for i in range(val)]
  with tarfile.open(d / "ILSVRC2012_img_val.tar", "w") as tf:
    for i in reversed(range(val)):  # tar order differs from name order: prep must sort by name
      _add(tf, f"ILSVRC2012_val_{i + 1:08d}.JPEG", jpeg_bytes(10_000 + i))
  (d / "val_labels.txt").write_text("".join(l + "\n" for l in labels))
  sums = {}
  for split in ("train", "val"):
    p = d / f"ILSVRC2012_img_{split}.tar"
    sums[split] = {"name": p.name, "size": p.stat().st_size, "md5": hashlib.md5(p.read_bytes()).hexdigest()}
  (d / "checksums.json").write_text(json.dumps(sums))
  return {"wnids": sorted(wnids), "labels": labels, "per_class": per_class, "val": val, "checksums": sums}


class FileServer:
  """Serves the files of `root` on 127.0.0.1 (a free port). drop_first: for these names the first GET sends the headers
  of the whole file and only the first half of the body, then closes. status: name -> HTTP code to answer with.
  requests: (path, Range header) of every GET, in order."""

  def __init__(self, root: Path, drop_first=(), status=None):
    self.root, self.drop = Path(root), set(drop_first)
    self.status = dict(status or {})
    self.requests: list[tuple[str, str | None]] = []
    srv = self

    class Handler(BaseHTTPRequestHandler):
      def log_message(self, *a): pass

      def do_GET(self):
        name = self.path.rsplit("/", 1)[-1]
        rng = self.headers.get("Range")
        srv.requests.append((name, rng))
        if name in srv.status:
          self.send_error(srv.status[name]); return
        p = srv.root / name
        if not p.is_file():
          self.send_error(404); return
        data = p.read_bytes()
        start = int(rng.split("=")[1].split("-")[0]) if rng else 0
        if rng and start >= len(data):
          self.send_response(416); self.send_header("Content-Range", f"bytes */{len(data)}"); self.end_headers(); return
        body = data[start:]
        self.send_response(206 if rng else 200)
        if rng: self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if name in srv.drop:
          srv.drop.discard(name)
          self.wfile.write(body[:len(body) // 2]); self.wfile.flush()
          self.close_connection = True
          return
        self.wfile.write(body)

    self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/data/"
    self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

  def __enter__(self):
    self.thread.start()
    return self

  def __exit__(self, *exc):
    self.httpd.shutdown()
    self.httpd.server_close()


def shm_entries(pid: int | None = None) -> list[str]:
  """Our loader's shared-memory segments (of one process when pid is given)."""
  from tinyperf.benchmarks.common.feeding import SHM_PREFIX
  prefix = SHM_PREFIX + (f"{pid}_" if pid is not None else "")
  try: return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))
  except FileNotFoundError: return []
