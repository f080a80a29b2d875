"""lab.beamlog reads a DEBUG=2 BEAM log as tinygrad 0.14 writes it (lines shaped like those of the 2026-11-30 H200
run): the BEAM=0 first step, the search trace with its colored loop shapes, tqdm's progress, and a search cut short."""
import io
import math

from lab import beamlog

B, R, Y, C, E = "\x1b[34m", "\x1b[31m", "\x1b[33m", "\x1b[96m", "\x1b[0m"


def dims(*pairs):
  return " ".join(f"{color}{n:4d}{E}" for color, n in pairs)


STEM = dims((B, 256), (B, 64), (B, 112), (B, 112), (R, 3), (R, 7), (R, 7))       # 7x7 stem conv: 60.4 GFLOP
NORM = dims((B, 64), (R, 576))                                                   # a small reduction
CONV1 = dims((B, 256), (B, 256), (B, 3136), (R, 64))                              # a 1x1 conv: 26.3 GFLOP
LOG = "\n".join([
  "1.0 *** CUDA       1 copy   36.75 KB,    CUDA <- NPY                arg  2 mem   0.10 GB tm    852.33ms/   852.33ms "
  "(      0 GFLOPS    0|0      GB/s)",
  "1.1 \x1b[32m*** CUDA     268\x1b[0m E_8_32_4                      arg  1 mem   0.10 GB tm     59.49us/   952.63ms "
  "(      0 GFLOPS    0|0      GB/s)",
  f"1.2 *** CUDA     276 r{E}_{B}256{E}_8_7_7_2_16_4_4_4_3_7_7   arg  4 mem  16.87 GB tm   5512.58us/   988.92ms "
  "(  12949 GFLOPS  156|6294   GB/s)",
  "1.3 *** CUDA     278 r_256_16_16                          arg  2 mem  16.87 GB tm     41.25us/   989.01ms "
  "(      1 GFLOPS    0|1      GB/s)",
  "1.4 init train step 0: 41349.2 ms, loss 6.326",
  f"compiling:   0%|   | 0/369 [00:00<?, ?it/s]   0.00s:                from   1 ->   1 actions {STEM}",
  f"   0.61s:       394.85ms          1/  48         {dims((B, 256), (B, 32), (Y, 2))}\x1b[K",
  f"\r   2.10s:      3691.52us from  48 ->  48 actions\x1b[K {dims((B, 256), (C, 32))}",
  f"\r   9.40s:       857.00us from  20 ->  12 actions\x1b[K {dims((B, 256), (C, 32))}",
  f"compiling r_128_56_7 :   0%| | 1/369 [00:24<2:32:45,  0.04it/s]   0.00s:                from   1 ->   1 actions {NORM}",
  f"\r   1.00s:        20.00us from   5 ->   5 actions {NORM}",
  f"compiling r_64_576 :   1%| | 2/369 [01:05<2:30:00,  0.04it/s]   0.00s:                from   1 ->   1 actions {CONV1}",
  f"\r   3.00s:       900.00us from  30 ->  30 actions {CONV1}",
  "python -m lab.bench: error: the tinygrad side did not finish within --time-limit 660 s and was stopped",
])


def test_parse_reads_first_step_search_shapes_best_times_and_progress():
  log = beamlog.parse(LOG)
  assert [n for n, _, _ in log.step0] == ["E_8_32_4", "r_256_8_7_7_2_16_4_4_4_3_7_7", "r_256_16_16"]   # copies skipped
  name, us, gflop = log.step0[1]
  assert us == 5512.58 and math.isclose(gflop, 12949 * 5512.58e-6)
  assert [s.dims for s in log.searches] == [[256, 64, 112, 112, 3, 7, 7], [64, 576], [256, 256, 3136, 64]]
  assert all(s.reduce for s in log.searches)
  stem = log.searches[0]
  assert stem.best_us == 857.0 and stem.seconds == 9.4          # the best of all rounds, ms and us both read
  assert math.isclose(stem.gflop, 2 * 256 * 64 * 112 * 112 * 3 * 7 * 7 / 1e9)
  assert log.progress == (2, 369, 65.0)


def test_a_log_of_our_trainers_starts_with_the_search():
  """Our steps capture their first call: the search comes before "init train step 0" and no BEAM=0 step is logged. The
  captured step's own launches after the search are not a BEAM=0 step either."""
  lines = LOG.split("\n")
  ours = "\n".join(lines[5:13] + lines[1:4] + [lines[4]])   # the search, the captured step's launches, its line
  log = beamlog.parse(ours)
  assert log.step0 == [] and [s.dims for s in log.searches] == [s.dims for s in beamlog.parse(LOG).searches]


def test_report_leaves_out_the_search_that_was_cut_short():
  out = io.StringIO()
  res = beamlog.report(beamlog.parse(LOG), out=out)
  assert res["searched"] == 2                      # the 1x1 conv's search was still running when the log ends
  assert res["step0_launches"] == 3 and math.isclose(res["step0_ms"], (59.49 + 5512.58 + 41.25) / 1e3)
  assert math.isclose(res["big1_tflops"][1], 2 * 256 * 64 * 112 * 112 * 3 * 7 * 7 / 857e-6 / 1e12)
  assert "256 64 112 112 3 7 7" in out.getvalue() and "256 256 3136 64" not in out.getvalue()


def test_hours_in_progress_and_a_log_without_search():
  log = beamlog.parse("x init train step 0: 1 ms\ncompiling:  5%| | 20/369 [1:02:03<9:00:00, 0.01it/s]")
  assert log.progress == (20, 369, 3723.0) and log.searches == []
  assert "searched" not in beamlog.report(log, out=io.StringIO())


def test_missing_log_is_exit_2(tmp_path, capsys):
  assert beamlog.main([str(tmp_path / "nope.log")]) == 2
  assert "nope.log" in capsys.readouterr().err


def test_gzipped_log_reads_the_same_and_a_broken_one_is_exit_2(tmp_path, capsys):
  import gzip
  good, bad = tmp_path / "beam.log.gz", tmp_path / "cut.log.gz"
  good.write_bytes(gzip.compress(LOG.encode()))
  bad.write_bytes(gzip.compress(LOG.encode())[:40])
  assert beamlog.main([str(good)]) == 0
  assert "256 64 112 112 3 7 7" in capsys.readouterr().out
  assert beamlog.main([str(bad)]) == 2
  assert "cut.log.gz" in capsys.readouterr().err


def test_a_file_that_is_no_debug_log_is_exit_2(tmp_path, capsys):
  """An empty file, a bench log without DEBUG=2, binary data: each printed a breakdown of zeros with exit 0."""
  import gzip
  cases = {"empty.log": b"", "plain.log": b"init train step 0: 5493.1 ms, loss 1.392\n", "bin.log": bytes(range(256)) * 4,
           "bin.log.gz": gzip.compress(bytes(range(256)) * 4)}
  for name, data in cases.items():
    (tmp_path / name).write_bytes(data)
    assert beamlog.main([str(tmp_path / name)]) == 2, name
    out = capsys.readouterr()
    assert name in out.err and "DEBUG=2" in out.err and "Traceback" not in out.err and "BEAM=0 first step" not in out.out


GATHER = dims((B, 2048000), (R, 250), (R, 250))        # a gather written as a reduction: 256 "GFLOP" in 19 us


def search_log(stem_us: float, stem_s: float, conv_us: float, conv_s: float) -> str:
  return "\n".join([
    "1.4 init train step 0: 41349.2 ms, loss 6.326",
    f"compiling:   0%|   | 0/369 [00:00<?, ?it/s]   0.00s:                from   1 ->   1 actions {STEM}",
    f"\r   {stem_s:.2f}s:       {stem_us:.2f}us from  20 ->  12 actions\x1b[K {dims((B, 256), (C, 32))}",
    f"compiling x :   0%| | 1/369 [00:24<2:32:45,  0.04it/s]   0.00s:                from   1 ->   1 actions {GATHER}",
    f"\r   1.00s:        19.00us from   5 ->   5 actions {GATHER}",
    f"compiling y :   1%| | 2/369 [01:05<2:30:00,  0.04it/s]   0.00s:                from   1 ->   1 actions {CONV1}",
    f"\r   {conv_s:.2f}s:       {conv_us:.2f}us from  30 ->  30 actions {CONV1}",
    f"compiling z :   1%| | 3/369 [01:30<2:30:00,  0.04it/s]   0.00s:                from   1 ->   1 actions {NORM}",
  ])


def test_rates_leave_out_kernels_whose_loop_shape_count_exceeds_the_chip():
  out = io.StringIO()
  res = beamlog.report(beamlog.parse(search_log(857.0, 9.4, 900.0, 3.0)), out=out)
  assert res["searched"] == 3 and res["impossible"] == 1             # the gather's 13,000 "TFLOP/s" is not a rate
  assert "left out of the rates: 1" in out.getvalue()
  assert max(res["big1_tflops"]) < beamlog.PEAK_TFLOPS


def test_pair_compares_search_and_kernel_time_while_the_shapes_agree():
  a = beamlog.parse(search_log(857.0, 9.4, 900.0, 3.0))
  b = beamlog.parse(search_log(800.0, 20.0, 600.0, 6.0))
  out = io.StringIO()
  res = beamlog.pair(a, b, out=out)
  assert res["kernels"] == 3                                          # the 4th search (NORM) is unfinished in both
  assert res["search_s"] == (9.4 + 1.0 + 3.0, 20.0 + 1.0 + 6.0)
  assert res["kernel_us"] == (857.0 + 19.0 + 900.0, 800.0 + 19.0 + 600.0)
  other = beamlog.parse(search_log(857.0, 9.4, 900.0, 3.0).replace(STEM, NORM, 1))   # a different first kernel
  assert beamlog.pair(other, b, out=io.StringIO())["kernels"] == 0


def test_pair_wants_two_logs(tmp_path):
  import pytest
  log = tmp_path / "a.log"
  log.write_text(search_log(857.0, 9.4, 900.0, 3.0))
  with pytest.raises(SystemExit) as e:
    beamlog.main(["--pair", str(log)])
  assert e.value.code == 2
  assert beamlog.main(["--pair", str(log), str(log)]) == 0


def launch(dev: str, n: int, what: str, ms: float, gflops: int = 0) -> str:
  return (f"*** {dev:<8}{n:6d} {what:<45} arg  2 mem   0.74 GB tm   {ms * 1e3:9.2f}us/   250.62ms "
          f"(  {gflops:5d} GFLOPS    0|0      GB/s)")


def test_two_gpu_first_step_per_device_and_the_copies_between_them():
  text = "\n".join([
    launch("CUDA", 1, "copy  119.23 MB,    CUDA <- NPY       ", 94.3),
    launch("CUDA:1", 2, "copy  119.23 MB,  CUDA:1 <- CUDA     ", 155.8),     # the weights' broadcast: before the step
    launch("CUDA:1", 3, "copy    1.00 KB,  CUDA:1 <- PYTHON   ", 0.1),       # the batch: the step starts after it
    launch("CUDA", 4, "r_5087_64_2_16_3_4096_4", 111.6, 9000),
    launch("CUDA:1", 4, "r_5087_64_2_16_3_4096_4", 111.5, 9000),
    launch("CUDA:1", 5, "E_32_4", 0.5),
    launch("CUDA:1", 6, "copy    2.00 MB,  CUDA:1 <- CUDA     ", 1.5),
    launch("CUDA", 7, "copy      128 B,    CUDA <- CUDA:1   ", 0.5),
    "init train step 0: 20306.6 ms, loss 11.591",
  ])
  log = beamlog.parse(text)
  assert log.step0_devices == ["CUDA", "CUDA:1", "CUDA:1"]
  assert log.copies == [("CUDA:1", "CUDA", 2 * 2**20, 1500.0), ("CUDA", "CUDA:1", 128.0, 500.0)]
  out = io.StringIO()
  res = beamlog.report(log, out=out)
  assert res["copies"] == 2 and res["copy_ms"] == 2.0
  assert "CUDA:1: 2 launches, 112.0 ms; longest r_5087_64_2_16_3_4096_4 111.5 ms" in out.getvalue()


def test_compile_timeouts_and_the_swallowed_ones_are_counted():
  text = search_log(857.0, 9.4, 900.0, 3.0) + "\n".join([
    "", "   58.17s:        13.41ms          6/  23           14   14    8*** BEAM COMPILE TIMEOUT",
    "   60.00s:        13.41ms          7/  23           14   14    8*** BEAM COMPILE TIMEOUT",
    "1796013706.8 Exception ignored in: <function UOp.__del__ at 0x7fc8a8c9d4e0>",
    "1796013706.8 tinygrad.codegen.opt.search.TimeoutException: "])
  out = io.StringIO()
  res = beamlog.report(beamlog.parse(text), out=out)
  assert (res["compile_timeouts"], res["swallowed_timeouts"]) == (2, 1)
  assert "2 candidates' compiles timed out, 1 of the timeouts swallowed" in out.getvalue()
