"""benchmarks/common/io.write_atomic: whole or nothing, never over an existing file, with the mode open() gives."""
import os
import re
import stat

import pytest

from tinyperf.benchmarks.common.io import InputError, atomic_file, write_atomic


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_written_file_has_the_mode_the_umask_gives(tmp_path, umask, mode):
  # mkstemp's 0600 made every result log unreadable to a teammate or reviewer on a shared results folder
  old = os.umask(umask)
  try: path = write_atomic(tmp_path / "result_0.txt", "log\n")
  finally: os.umask(old)
  assert stat.S_IMODE(path.stat().st_mode) == mode and path.read_text() == "log\n"


def test_a_mode_given_holds_whatever_the_umask(tmp_path):
  # manifests, shards and .sha1 files a container of another user reads: 0644 even under umask 077
  old = os.umask(0o077)
  try: path = write_atomic(tmp_path / "manifest.json", "{}\n", mode=0o644)
  finally: os.umask(old)
  assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_an_existing_file_is_kept_and_no_temp_file_is_left(tmp_path):
  path = write_atomic(tmp_path / "result_0.txt", b"first")
  with pytest.raises(InputError, match=re.escape(str(path))): write_atomic(path, b"second")
  assert path.read_bytes() == b"first" and [p.name for p in tmp_path.iterdir()] == ["result_0.txt"]
  write_atomic(path, b"second", overwrite=True)
  assert path.read_bytes() == b"second" and [p.name for p in tmp_path.iterdir()] == ["result_0.txt"]


def test_a_stream_that_fails_midway_leaves_nothing(tmp_path):
  with pytest.raises(RuntimeError):
    with atomic_file(tmp_path / "dump.jsonl", text=True) as f:
      f.write("{}\n")
      raise RuntimeError("the shard broke")
  assert not list(tmp_path.iterdir())
