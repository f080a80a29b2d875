"""Bad input: one clear paragraph naming the file (and line), exit 2, no traceback."""
from __future__ import annotations
import json
import subprocess
import sys

import pytest

from conftest import REPO
from mllog_builder import make_package, write_log
from tinyperf.tooling.cli import main as cli


def run_cli(capsys, *argv) -> tuple[int, str, str]:
  code = cli(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


def assert_bad_input(capsys, path, *needles, verb="check"):
  code, out, err = run_cli(capsys, verb, str(path))
  assert code == 2, (out, err)
  assert err.startswith(f"tinyperf {verb}: error: ") and "Traceback" not in err
  assert len(err.strip().splitlines()) == 1, err          # one paragraph
  for n in needles: assert n in err, err
  return err


@pytest.mark.parametrize("verb", ["check", "score"])
def test_nonexistent_path(capsys, tmp_path, verb):
  assert_bad_input(capsys, tmp_path / "nope", str(tmp_path / "nope"), verb=verb)


def test_empty_directory(capsys, tmp_path):
  assert_bad_input(capsys, tmp_path, str(tmp_path))


def test_empty_results_directory_inside_a_tree(capsys, tmp_path):
  org = make_package(tmp_path, "resnet", n=5)
  (org / "results" / "tinybox_green" / "bert").mkdir()
  assert_bad_input(capsys, org, "results/tinybox_green/bert")


def test_binary_file(capsys, tmp_path):
  p = tmp_path / "result_0.txt"
  p.write_bytes(b":::MLLOG {}\n\x7fELF\x00\x01\x02")
  assert_bad_input(capsys, p, f"{p}:2:")


@pytest.mark.parametrize("verb", ["check", "score"])
def test_the_tarball_or_the_directory_around_the_submitter_tree_names_what_to_type(capsys, tmp_path, verb):
  """What a reviewer holds first: the tarball (it was "binary data ... point check at the text log"), package's --out
  and --verify's unpacked directory, which hold the submitter tree one level down."""
  org = make_package(tmp_path / "unpacked dir", "resnet", n=5)
  tb = tmp_path / "unpacked dir" / "mlperf_submission_tinycorp.tar.gz"
  for magic in (b"\x1f\x8b\x08\x00", b"Salted__\x01\x02"):
    tb.write_bytes(magic + b"\x00" * 64)
    assert_bad_input(capsys, tb, f"`tinyperf package --verify '{tb}'`", verb=verb)
  assert_bad_input(capsys, org.parent, f"`tinyperf check '{org}'`", verb=verb)
  tb.unlink()
  assert_bad_input(capsys, org.parent, f"`tinyperf check '{org}'`", verb=verb)


def test_non_utf8_file(capsys, tmp_path):
  p = write_log(tmp_path / "result_0.txt", "resnet")
  lines = p.read_bytes().splitlines(keepends=True)
  lines[3] = lines[3].replace(b"onprem", b"onpr\xe9m")
  p.write_bytes(b"".join(lines))
  assert_bad_input(capsys, p, f"{p}:4:")


def test_truncated_mllog_json(capsys, tmp_path):
  p = write_log(tmp_path / "result_0.txt", "resnet")
  lines = p.read_text().splitlines(keepends=True)
  lines[11] = lines[11][:60] + "\n"              # a run killed mid-write
  p.write_text("".join(lines))
  assert_bad_input(capsys, p, f"{p}:12:")


def test_a_line_cut_inside_a_string_reads_once_at(capsys, tmp_path):
  # json says "Unterminated string starting at"; the message went on " at column N": "starting at at column"
  p = write_log(tmp_path / "result_0.txt", "resnet")
  lines = p.read_text().splitlines(keepends=True)
  lines[11] = lines[11][:lines[11].index('"key": "') + 10] + "\n"
  p.write_text("".join(lines))
  assert_bad_input(capsys, p, f"{p}:12:", "Unterminated string starting at column")


def test_mllog_event_without_time_ms(capsys, tmp_path):
  p = tmp_path / "result_0.txt"
  p.write_text(':::MLLOG {"key": "submission_benchmark", "value": "bert", "metadata": {}}\n')
  assert_bad_input(capsys, p, f"{p}:1:", "time_ms")


def test_log_without_submission_benchmark(capsys, tmp_path):
  p = write_log(tmp_path / "result_0.txt", "bert", omit=("submission_benchmark",))
  assert_bad_input(capsys, p, str(p), "submission_benchmark")


def test_text_file_without_mllog_lines(capsys, tmp_path):
  p = tmp_path / "notes.txt"
  p.write_text("just some notes\n")
  assert_bad_input(capsys, p, str(p), "`:::MLLOG`")


def test_two_benchmarks_mixed_in_one_results_dir(capsys, tmp_path):
  org = make_package(tmp_path, "resnet", n=5)
  bdir = org / "results" / "tinybox_green" / "resnet"
  write_log(bdir / "result_5.txt", "bert")
  err = assert_bad_input(capsys, bdir, str(bdir), "result_0.txt", "'resnet'", "result_5.txt", "'bert'")
  assert "result_5.txt logs 'bert'" in err


def test_systems_json_that_does_not_parse(capsys, tmp_path):
  org = make_package(tmp_path, "resnet", n=5)
  sj = org / "systems" / "tinybox_green.json"
  sj.write_text(sj.read_text().replace('"division": "closed",', '"division": "closed"'))
  assert_bad_input(capsys, org, f"{sj}:4:")   # where the parser notices


def test_directory_that_is_neither(capsys, tmp_path):
  (tmp_path / "sub").mkdir()
  assert_bad_input(capsys, tmp_path, str(tmp_path), "results/<system>/<benchmark>")


def test_bad_input_exit_code_through_the_real_entry_point(tmp_path):
  """The installed entry point path: a subprocess, so a stray traceback or exit code 1 would show."""
  p = tmp_path / "result_0.txt"
  p.write_text(':::MLLOG {"namespace": "", "time_ms": 1, "key": "submission_benchmark", "value": "resn\n')
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", "check", str(p)], cwd=REPO, capture_output=True, text=True)
  assert r.returncode == 2 and "Traceback" not in r.stderr and f"{p}:1:" in r.stderr and r.stdout == ""


def test_output_into_a_pipe_whose_reader_left_ends_without_a_traceback(tmp_path):
  org = make_package(tmp_path, "resnet", n=5)
  r = subprocess.run(f"{sys.executable} -m tinyperf.tooling.cli score {org} | true", shell=True, cwd=REPO,
                     capture_output=True, text=True)
  assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr   # `true` has left before any output


def test_usage_error_exits_2(capsys):
  with pytest.raises(SystemExit) as e: cli(["check", "--ruleset"])
  assert e.value.code == 2
  assert "PATH" in capsys.readouterr().err


def test_json_flag_does_not_change_bad_input_handling(capsys, tmp_path):
  code, out, err = run_cli(capsys, "check", "--json", str(tmp_path / "missing"))
  assert code == 2 and out == "" and str(tmp_path / "missing") in err
  with pytest.raises(json.JSONDecodeError): json.loads(out)
