"""Download the MLCommons BERT files (Google-Drive ids from the MLCommons BERT dataset instructions) with gdown.

Every file is fetched into OUT/.download/<name> (gdown keeps its own <name>XXXXXXXX.part there and resumes it with an
HTTP Range request), md5-checked when an md5 is known, and only then renamed to OUT/<name>; a failed check deletes
the staged file, so nothing half written is ever under its final name. results_text.tar.gz is extracted into a
temporary directory, every part is checked against bert_reference_results_text_md5.txt, and only then is the
directory renamed to OUT/results4. A file already in place is skipped.
"""
from __future__ import annotations
import hashlib
import os
import re
import shutil
import tarfile
from pathlib import Path, PurePosixPath

from tinyperf.benchmarks.common.io import InputError, file_digest, write_atomic

GDRIVE_URL = "https://drive.google.com/uc?id={id}"
CHECKPOINT = "model.ckpt-28252"
# name -> (Google-Drive id, group)
FILES = {
  "bert_config.json": ("1fbGClQMi2CoMv7fwrwTC5YYPooQBdcFW", "base"),
  "vocab.txt": ("1USK108J6hMM_d27xCHi738qBL8_BT1u1", "base"),
  f"{CHECKPOINT}.data-00000-of-00001": ("1chiTBljF0Eh1U5pKs6ureVHgSbtU8OG_", "checkpoint"),
  f"{CHECKPOINT}.index": ("1Q47V3K3jFRkbJ2zGCrKkKk-n0fvMZsa0", "checkpoint"),
  f"{CHECKPOINT}.meta": ("1vAcVmXSLsLeQ1q7gvHnQUSth5W_f_pwv", "checkpoint"),
  "bert_reference_results_text_md5.txt": ("1tmMgLwoBvbEJEHXh77sqrXYw5RpqT8R_", "text"),
  "results_text.tar.gz": ("14xV2OUGSQDG_yDBrmbSdcDC-QGeqpfs_", "text"),
}
# md5 of single files, where a source we trust publishes one. None are published for these files (the extracted
# text is covered by bert_reference_results_text_md5.txt); tests and mirrors can pass their own.
KNOWN_MD5: dict[str, str] = {}
MD5_LIST, ARCHIVE, TEXT_DIR = "bert_reference_results_text_md5.txt", "results_text.tar.gz", "results4"
MAX_TEXT_MEMBERS, MAX_TEXT_DEPTH = 10_000, 16   # results_text.tar.gz: 502 files in one folder, an untrusted archive


def file_url(name: str, base_url: str | None) -> str:
  return f"{base_url.rstrip('/')}/{name}" if base_url else GDRIVE_URL.format(id=FILES[name][0])


def fetch(url: str, dest: Path, md5: str | None = None, retries: int = 3, quiet: bool = False) -> Path:
  """Download url to dest through a staged, resumable, verified file. Skips when dest exists."""
  if dest.exists(): return dest
  try:
    import gdown
    from gdown.exceptions import DownloadError, FileURLRetrievalError
  except ImportError:
    raise InputError("downloading needs the `gdown` package: pip install gdown") from None
  stage = dest.parent / ".download"
  stage.mkdir(parents=True, exist_ok=True)
  tmp = stage / dest.name
  if tmp.exists():   # finished earlier but not verified/renamed (killed in between)
    got = file_digest(tmp, "md5")
  else:   # hashed as the bytes arrive (gdown's hasher) instead of read back afterwards, as io.file_digest would
    h = hashlib.md5()
    try:
      gdown.download(url, str(tmp), quiet=quiet, resume=True, hasher=h, retries=retries, timeout=60,
                     use_cookies=False)
    except (DownloadError, FileURLRetrievalError, OSError) as e:
      raise InputError(f"{dest.name}: download from {url} failed ({str(e).strip().splitlines()[0] if str(e) else type(e).__name__}). "
                      f"The bytes received so far are kept under {stage} and the next run resumes them: rerun the "
                      f"same command (Google Drive rate-limits large files; try again later or use --base-url with "
                      f"a mirror).") from None
    if not tmp.exists():
      raise InputError(f"{dest.name}: gdown reported success but wrote no {tmp}; rerun.")
    got = h.hexdigest()
  if md5 and got != md5:
    tmp.unlink()
    raise InputError(f"{dest.name}: md5 {got} but {md5} expected: the download from {url} is corrupt and was "
                    f"deleted (nothing kept). Rerun to fetch it again.")
  os.replace(tmp, dest)
  try: stage.rmdir()
  except OSError: pass
  return dest


def read_md5_list(path: Path) -> dict[str, str]:
  """'<md5> ./<file>' lines -> {file name: md5}."""
  out = {}
  for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
    if not line.strip(): continue
    m = re.match(r"^([0-9a-fA-F]{32})\s+\*?(.+?)\s*$", line)
    if not m: raise InputError(f"{path}:{i}: not an '<md5>  <file>' line: {line[:80]!r}. Delete the file and rerun.")
    name = m.group(2)
    for prefix in ("./", f"{TEXT_DIR}/"):
      if name.startswith(prefix): name = name[len(prefix):]
    out[name] = m.group(1).lower()
  if not out: raise InputError(f"{path}: no md5 lines. Delete the file and rerun download.")
  return out


def extract_text(out: Path, keep_archive: bool = False, quiet: bool = False) -> Path:
  """results_text.tar.gz -> OUT/results4, verified against the md5 list before it appears under its name."""
  from tqdm import tqdm
  final, archive = out / TEXT_DIR, out / ARCHIVE
  if final.exists(): return final
  md5s = read_md5_list(out / MD5_LIST)
  tmp = out / f".{TEXT_DIR}.extracting"
  if tmp.exists(): shutil.rmtree(tmp)
  tmp.mkdir()
  try:
    with open(archive, "rb") as raw, tarfile.open(fileobj=raw, mode="r:*") as tar, \
         tqdm(total=archive.stat().st_size, unit="B", unit_scale=True, desc="extract", disable=quiet) as bar:
      for k, member in enumerate(tar):
        if k >= MAX_TEXT_MEMBERS or len(PurePosixPath(member.name).parts) > MAX_TEXT_DEPTH:   # deep: RecursionError
          raise tarfile.TarError(f"member {member.name[:80]!r}... is past {MAX_TEXT_MEMBERS} members or "
                                 f"{MAX_TEXT_DEPTH} directories deep; the text archive is a flat folder of ~500 files")
        tar.extract(member, tmp, filter="data")   # no absolute paths, no '..', no device files
        bar.update(raw.tell() - bar.n)   # compressed bytes consumed so far
  except (tarfile.TarError, EOFError, OSError) as e:
    shutil.rmtree(tmp, ignore_errors=True)
    bad = archive.with_name(archive.name + ".corrupt")
    os.replace(archive, bad)
    raise InputError(f"{archive}: cannot be extracted ({e}); moved to {bad} (nothing extracted kept). Rerun to "
                    f"download it again; delete {bad} once done.") from None
  found = [p for p in tmp.rglob("*") if p.is_file()]
  roots = {p.parent for p in found if p.name in md5s}
  if len(roots) != 1:
    shutil.rmtree(tmp, ignore_errors=True)
    raise InputError(f"{archive}: holds {len(found)} files but not one directory with the files listed in "
                    f"{out / MD5_LIST}; is this the MLCommons results_text archive? Nothing extracted was kept.")
  root = roots.pop()
  for name, want in tqdm(sorted(md5s.items()), unit="file", desc="md5", disable=quiet):
    p = root / name
    got = file_digest(p, "md5") if p.is_file() else "missing"
    if got != want:
      shutil.rmtree(tmp, ignore_errors=True)
      bad = archive.with_name(archive.name + ".corrupt")
      os.replace(archive, bad)
      raise InputError(f"{TEXT_DIR}/{name}: md5 {got}, {want} expected by {out / MD5_LIST}; the archive, corrupt, is "
                       f"now {bad} and nothing extracted was kept. Rerun to download it again.")
  os.replace(root, final)
  shutil.rmtree(tmp, ignore_errors=True)
  if not keep_archive: archive.unlink()
  return final


def write_checkpoint_index(out: Path):
  """The TF `checkpoint` file that makes the directory loadable as a checkpoint directory."""
  write_atomic(out / "checkpoint", f'model_checkpoint_path: "{CHECKPOINT}"\n'
                                   f'all_model_checkpoint_paths: "{CHECKPOINT}"\n', overwrite=True)


def download_all(out: Path, base_url: str | None = None, text: bool = True, checkpoint: bool = True,
                 keep_archive: bool = False, retries: int = 3, quiet: bool = False, md5: dict | None = None) -> Path:
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  md5 = {**KNOWN_MD5, **(md5 or {})}
  groups = {"base"} | ({"checkpoint"} if checkpoint else set()) | ({"text"} if text else set())
  for name, (_, group) in FILES.items():
    if group not in groups: continue
    if name == ARCHIVE and (out / TEXT_DIR).exists(): continue
    if not quiet: print(f"prep download: {name}")
    fetch(file_url(name, base_url), out / name, md5.get(name), retries=retries, quiet=quiet)
  if checkpoint: write_checkpoint_index(out)
  if text: extract_text(out, keep_archive=keep_archive, quiet=quiet)
  # the pair must belong together before anything is tokenised with it
  from tinyperf.benchmarks.bert.tokenizer import load_checked_vocab
  load_checked_vocab(out / "vocab.txt", out / "bert_config.json", config_required=True)
  if not quiet: print(f"prep download: done -> {out}")
  return out
