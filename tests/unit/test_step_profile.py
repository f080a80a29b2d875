"""lab/scripts/step_profile.py on the CPU at toy shapes: each benchmark's captured train step, every item timed alone and
in exactly one family whose times add up to the items' total, the record's fields; a graph batch is timed by its items;
the families' names; bad input refused in one line before anything is built (exit 2)."""
import subprocess

import pytest

from tests.conftest import REPO
from tests.lab_helpers import run_toy

SCRIPT = REPO / "lab" / "scripts" / "step_profile.py"
RECORD_FIELDS = {"date", "device", "tinygrad", "git_sha", "command", "benchmark", "platform", "knobs", "kernels",
                 "families", "top_kernels", "step_ms", "kernel_ms", "items", "repeats"}


def profile_run(tmp_path, benchmark: str, *flags: str) -> tuple[subprocess.CompletedProcess, dict | None]:
  return run_toy(SCRIPT, tmp_path, benchmark, *flags, timeout=300)


@pytest.mark.parametrize("benchmark", ["resnet", "bert"])
def test_every_item_of_the_step_is_timed_in_one_family(tmp_path, benchmark):
  r, rec = profile_run(tmp_path, benchmark, "--steps", "1", "--repeats", "2", "--top", "5")
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  assert RECORD_FIELDS <= set(rec), RECORD_FIELDS - set(rec)
  assert rec["benchmark"] == benchmark and rec["device"] == "CPU" and rec["repeats"] == 2
  assert rec["kernels"] == "tinygrad" and "TRAIN_BEAM" in rec["knobs"] and rec["knobs"]["BS"] == 4
  assert rec["command"].startswith("python3 lab/scripts/step_profile.py") and rec["git_sha"]
  fams = rec["families"]
  assert len({f["family"] for f in fams}) == len(fams) and {"tinygrad reduce (r_)", "tinygrad elementwise (E_)"} <= \
    {f["family"] for f in fams}
  assert sum(f["count"] for f in fams) == rec["items"] > 50   # a toy step still has dozens of kernels
  assert sum(f["ms"] for f in fams) == pytest.approx(rec["kernel_ms"], rel=1e-9) and rec["kernel_ms"] > 0
  assert sum(f["share"] for f in fams) == pytest.approx(1.0)
  assert [f["ms"] for f in fams] == sorted((f["ms"] for f in fams), reverse=True)
  assert all(f["flop"] > 0 and f["tflops"] > 0 for f in fams if f["family"].startswith("tinygrad reduce"))
  tops = rec["top_kernels"]
  assert len(tops) == 5 and [t["ms"] for t in tops] == sorted((t["ms"] for t in tops), reverse=True)
  assert tops[0]["ms"] <= max(f["ms"] for f in fams) and len({t["item"] for t in tops}) == 5
  assert rec["step_ms"] > 0 and len(rec["steps_ms"]) == 1
  assert "end-to-end step (graph replay)" in r.stdout and "slowest kernels" in r.stdout
  per = rec["top_per_family"]   # each family's slowest: its own kernels, at most 5, the family's slowest first
  assert set(per) == {f["family"] for f in fams}
  for f in fams:
    ts = per[f["family"]]
    assert 0 < len(ts) == min(5, f["count"]) and {t["family"] for t in ts} == {f["family"]}
    assert [t["ms"] for t in ts] == sorted((t["ms"] for t in ts), reverse=True) and sum(t["ms"] for t in ts) <= f["ms"]
  assert "slowest of tinygrad elementwise (E_)" in r.stdout
  names = rec["by_name"]   # kernels summed over their runs: every name once, the most time first, counts of runs
  assert 0 < len(names) <= 40 and len({t["name"] for t in names}) == len(names)
  assert [t["ms"] for t in names] == sorted((t["ms"] for t in names), reverse=True)
  assert names[0]["ms"] >= tops[0]["ms"] and sum(t["count"] for t in names) <= rec["items"]
  segs = rec["segments"]   # the tenths of the step in program order cover every item once
  assert len(segs) == 10 and segs[0]["items"].startswith("0-") and segs[-1]["items"].endswith(f"-{rec['items'] - 1}")
  assert sum(g["ms"] for g in segs) == pytest.approx(rec["kernel_ms"], rel=1e-9)
  assert "kernels with the most time over the step" in r.stdout and "ms per tenth" in r.stdout


def test_a_graph_batch_is_timed_by_its_items():
  """On a GPU the captured step is mostly graph batches (CUDA graphs), which the CPU does not make: one is made here from
  a captured toy step (a kernel, a transfer to a second device, a reduce) as tinygrad's graph_split_rewrite makes one,
  and the profile runs its items one by one."""
  from tinygrad import Tensor, TinyJit
  from tinygrad.engine.jit import create_graph_call
  from lab.scripts import step_profile as sp
  @TinyJit
  def step(a: Tensor) -> Tensor: return ((a + 1).contiguous().to("CPU:1") * 2).sum(0).realize()
  a = Tensor.rand(8, 8, device="CPU").realize()
  with sp.replays() as seen:
    for _ in range(3): step(a)
  linear, var_vals, inputs = seen[-1]
  calls = list(linear.src)
  graphed = linear.replace(src=(create_graph_call(calls),))
  assert sp.is_graph(graphed.src[0]) and sp.items(graphed) == calls
  rows = sp.profile(graphed, var_vals, inputs, ["CPU", "CPU:1"], repeats=2, say=lambda *a, **k: None)
  assert [r["item"] for r in rows] == list(range(len(calls))) and all(r["ms"] > 0 for r in rows)
  assert [r["family"] for r in rows] == ["tinygrad elementwise (E_)", "transfer between devices", "tinygrad reduce (r_)"]
  assert rows[1]["name"] == "copy 256 B, CPU:1 <- CPU" and rows[1]["bytes"] == 256
  assert [f["count"] for f in sp.families(rows)] == [1, 1, 1]


def test_families_by_what_made_the_kernel(monkeypatch):
  from tinygrad.uop.ops import Ops, ProgramInfo, UOp
  from tinyperf.benchmarks.kernels import program
  from lab.scripts import step_profile as sp
  def prog(name: str, binary: bytes = b"cubin") -> UOp:
    return UOp(Ops.PROGRAM, src=(UOp(Ops.BINARY, arg=binary),), arg=ProgramInfo(name=name)).call()
  monkeypatch.setitem(program.SMEM, b"triton cubin", 0)   # program.py registers every Triton kernel's cubin
  assert sp.family(prog("gemm_kernel", b"triton cubin"), ()) == "triton gemm_kernel"
  assert sp.family(prog("gemm_96_1024_4096"), ()) == "custom gemm"   # a fallback: its name without the shape
  assert sp.family(prog("r_32_16_4"), ()) == sp.family(prog("r"), ()) == "tinygrad reduce (r_)"
  assert sp.family(prog("E_4_8"), ()) == sp.family(prog("E"), ()) == "tinygrad elementwise (E_)"


@pytest.mark.parametrize("flags", [["--platform", "nosuch"], ["--repeats", "0"], ["--steps", "0"],
                                   ["--out", "/nonexistent-dir/x.jsonl"], ["--platform", "1xH200"]])
def test_bad_input_is_refused_before_anything_is_built(tmp_path, flags):
  from tinyperf.benchmarks.preflight import visible_gpus
  if "1xH200" in flags and visible_gpus("nv")[0]: pytest.skip("this machine has the GPU 1xH200 runs on")
  r, rec = profile_run(tmp_path, "resnet", *flags)
  assert r.returncode == 2 and rec is None and "Traceback" not in r.stderr and r.stderr.count("\n") <= 2, r.stderr
  assert "init train step" not in r.stdout   # nothing was built or stepped
