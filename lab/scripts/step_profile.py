#!/usr/bin/env python3
"""Where a train step's time goes: every kernel of the captured TinyJit step timed alone, grouped into families.

  python3 lab/scripts/step_profile.py bert --platform 1xH200 --bs 96 --steps 3 --repeats 5 --out FILE.jsonl

Builds the benchmark's own Trainer (benchmarks/<bm>/train.py) from the platform config, with this environment's
overrides as in a run (KERNELS=triton, TRAIN_BEAM=2, BEAM_BUDGET_S; CACHEDB names the kernel cache, a BEAM cache from
perf-data included), and steps it with the benchmark's run_fake_steps: INIT's warm-up (the capture, and the search the
config asks for) and then --steps replays of the captured step, whose median is the end-to-end step (graph replay).
Then each item of the replayed step runs again alone, --repeats times, with the inputs and variables of the last replay;
its time is tinygrad's own launch timer (on a GPU the kernel's time between two events, without the launch gap), a copy's
the wall time between two device syncs. A graph batch (a CUDA graph of many kernels) is timed by its items, not as one.

Families: a Triton program (benchmarks/kernels) by its kernel symbol (gemm_kernel, attn_fwd_kernel, conv_wgrad_kernel,
add_ln_bwd_kernel, ...), another custom program by its name without the shape (the Triton kernels' tinygrad fallbacks),
tinygrad's own kernels by the prefix tinygrad names them with (r_: a reduce, E_: elementwise), copies on one device and
transfers between devices. FLOP and bytes are tinygrad's estimates (ALU ops, index arithmetic included, and buffer
traffic: upper bounds, as in lab/bert/step_cost.py). Several devices: an item's time is its slowest device's, its FLOP
and bytes all devices'.

Prints the families sorted by time (count, ms per step, share of the kernels' summed time, TFLOP/s, GB/s), the sum of
the kernel times beside the end-to-end step (their difference is what runs between kernels), the slowest single
kernels, then the 5 slowest of each tinygrad family (which of its hundreds of kernels hold its time), the kernels with
the most time summed over their runs, and the time of each tenth of the step's items. Appends one JSON line to --out:
date, device, versions, git sha, command, the config's knobs, families, top kernels, the top of each family, the 40
kernels with the most summed time, the tenths, step_ms. Exit 0; 2 on bad input."""
from __future__ import annotations
import argparse
import contextlib
import json
import os
import re
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tinyperf.benchmarks.common import runtime                                     # noqa: E402
from tinyperf.benchmarks.common.io import InputError                              # noqa: E402
from tinyperf.benchmarks.registry import BENCHMARKS, load_config                  # noqa: E402
from lab.bench import require_saving_folder                              # noqa: E402
from lab.scripts.loss_compare import device, require_device, versions    # noqa: E402
from tinyperf.tooling.common.errors import UserError                              # noqa: E402

PROG = "python3 lab/scripts/step_profile.py"
PROGRESS_S = 10.0   # a line at least this often while items are timed


def build_parser() -> argparse.ArgumentParser:
  """The parser (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0], allow_abbrev=False)
  p.add_argument("benchmark", choices=tuple(BENCHMARKS))
  p.add_argument("--platform", default="1xH200", help="config to start from (default 1xH200; cpu_smoke on the CPU)")
  p.add_argument("--bs", type=int, help="the step's batch, all GPUs together (default: the config's BS)")
  p.add_argument("--steps", type=int, default=3, help="replayed steps whose median is the end-to-end step (default 3)")
  p.add_argument("--repeats", type=int, default=5, help="times each kernel is run alone; its median counts (default 5)")
  p.add_argument("--top", type=int, default=15, help="single kernels listed, slowest first (default 15)")
  p.add_argument("--out", type=Path, required=True, help="append the JSON record to this file")
  return p


def check_args(args):
  """What would be found out only after the capture, refused first."""
  for flag, v in (("--steps", args.steps), ("--repeats", args.repeats), ("--top", args.top), ("--bs", args.bs)):
    if v is not None and v < 1: raise UserError(f"{flag} {v}: give a number of at least 1.")
  require_saving_folder(f"--out {args.out}", args.out)


@contextlib.contextmanager
def replays():
  """A list that receives (linear, var_vals, input buffers) of every TinyJit replay run inside the block: the captured
  step as it ran, the inputs the JIT copied (those it overwrites) included."""
  from tinygrad.engine import jit
  seen, run_linear = [], jit.run_linear
  def recorded(linear, var_vals=None, input_uops=(), **kw):
    if kw.get("jit"): seen.append((linear, dict(var_vals or {}), tuple(input_uops)))
    return run_linear(linear, var_vals, input_uops=input_uops, **kw)
  jit.run_linear = recorded
  try: yield seen
  finally: jit.run_linear = run_linear


def captured_step(benchmark: str, cfg, steps: int):
  """(trainer, its step timer, the last replay's (linear, var_vals, inputs)) after the benchmark's own warm-up and
  `steps` replays of its jitted train step."""
  if benchmark == "resnet":
    from tinyperf.benchmarks.common.rules import IMAGENET_COUNTS
    from tinyperf.benchmarks.resnet.train import Trainer, run_fake_steps, steps_per_epoch
    # the schedule of a run on ImageNet, as INIT without data builds it
    tr = Trainer(cfg, 0, steps_per_epoch(IMAGENET_COUNTS["train"], cfg["BS"]))
  else:
    from tinyperf.benchmarks.bert.train import Trainer, run_fake_steps
    tr = Trainer(cfg, 0)
  runtime.set_stage("capturing the train step (its first steps compile, and search where BEAM asks)")
  with replays() as seen:
    timer = run_fake_steps(tr, runtime.JIT_WARMUP_STEPS + steps, with_eval=False)
  if not seen or seen[-1][0] is not tr.train_step.captured.linear:
    raise RuntimeError("the train step's replays were not seen: tinygrad's TinyJit no longer runs run_linear(jit=True)")
  return tr, timer, seen[-1]


def is_graph(call) -> bool:
  from tinygrad.uop.ops import Ops
  return call.src[0].op is Ops.CUSTOM_FUNCTION and call.src[0].arg == "graph"


def items(linear) -> list:
  """The calls of a captured step in order, each graph batch replaced by the calls it batches."""
  return [c for call in linear.src for c in (call.src[0].src[0].src if is_graph(call) else (call,))]


def family(call, inputs) -> str:
  """What kind of work a call is (the module docstring's families)."""
  from tinygrad.engine.realize import resolve_params
  from tinygrad.helpers import ansistrip, to_tuple
  from tinygrad.uop.ops import Ops
  from tinyperf.benchmarks.kernels.program import SMEM
  ast = call.src[0]
  if ast.op is Ops.COPY:
    dest, src = resolve_params(call, inputs)[:2]
    return "copy" if to_tuple(dest.device) == to_tuple(src.device) else "transfer between devices"
  if ast.op is not Ops.PROGRAM: return f"other ({ast.op.name} {ast.arg})"
  name = ansistrip(ast.arg.name)
  if ast.src[-1].op is Ops.BINARY and ast.src[-1].arg in SMEM: return f"triton {name}"   # program.py registers each cubin
  prefix = name.split("_")[0]   # a kernel without ranges is named "r" or "E" alone
  if prefix == "r": return "tinygrad reduce (r_)"
  if prefix == "E": return "tinygrad elementwise (E_)"
  return f"custom {re.sub(r'(_[0-9]+)+$', '', name)}"


def describe(call, var_vals: dict, inputs) -> dict:
  """An item's name, family and tinygrad's estimates of its FLOP and bytes (all its devices together)."""
  from tinygrad.engine.realize import estimate_uop, get_call_kernels, get_call_name, resolve_params
  from tinygrad.helpers import ansistrip
  from tinygrad.uop.ops import sym_infer
  est, n = estimate_uop(call), len(get_call_kernels(call))
  return {"name": " ".join(ansistrip(get_call_name(call, resolve_params(call, inputs), var_vals)).split()),
          "family": family(call, inputs), "flop": n * int(sym_infer(est.ops, var_vals)),
          "bytes": n * int(sym_infer(est.mem, var_vals))}


def time_item(call, ctx, devices) -> float:
  """Seconds one call takes alone: tinygrad's launch timer (the slowest device's), else the wall time between syncs."""
  from tinygrad import Device
  from tinygrad.engine.realize import pm_exec
  for d in devices: Device[d].synchronize()
  t0 = time.perf_counter()
  ets = pm_exec.rewrite(call, ctx) or []
  if ets and all(et is not None for et in ets): return max(ets)
  for d in devices: Device[d].synchronize()
  return time.perf_counter() - t0


def profile(linear, var_vals: dict, inputs, devices, repeats: int, say=print) -> list[dict]:
  """One row per item of the captured step, in program order: describe()'s fields and its median ms over repeats."""
  from tinygrad.engine.realize import ExecContext
  calls = items(linear)
  ctx = ExecContext(var_vals, tuple(inputs), update_stats=False, jit=True, wait=True)
  times: list[list[float]] = [[] for _ in calls]
  last = time.monotonic()
  for r in range(repeats):
    for i, call in enumerate(calls):
      times[i].append(time_item(call, ctx, devices))
      if time.monotonic() - last >= PROGRESS_S:
        say(f"timing the step's {len(calls)} items alone: repeat {r + 1}/{repeats}, item {i + 1}", flush=True)
        last = time.monotonic()
  return [{"item": i, **describe(c, var_vals, inputs), "ms": statistics.median(t) * 1e3}
          for i, (c, t) in enumerate(zip(calls, times))]


def rates(flop: int, nbytes: int, ms: float) -> dict:
  return {"tflops": flop / ms / 1e9 if ms else 0.0, "gbs": nbytes / ms / 1e6 if ms else 0.0}


def summed(rows: list[dict], key: str) -> list[dict]:
  """The rows summed per value of key (count, ms, flop, bytes; the first row's family), the most time first."""
  out: dict[str, dict] = {}
  for r in rows:
    d = out.setdefault(r[key], {key: r[key], "family": r["family"], "count": 0, "ms": 0.0, "flop": 0, "bytes": 0})
    d["count"] += 1; d["ms"] += r["ms"]; d["flop"] += r["flop"]; d["bytes"] += r["bytes"]
  return sorted(out.values(), key=lambda d: -d["ms"])


def families(rows: list[dict]) -> list[dict]:
  """The rows summed per family, slowest family first; share: of all the rows' time."""
  total = sum(r["ms"] for r in rows)
  return [{**f, "share": f["ms"] / total if total else 0.0, **rates(f["flop"], f["bytes"], f["ms"])}
          for f in summed(rows, "family")]


def top(rows: list[dict], n: int) -> list[dict]:
  return [{k: r[k] for k in ("item", "name", "family", "ms")} | rates(r["flop"], r["bytes"], r["ms"])
          for r in sorted(rows, key=lambda r: -r["ms"])[:n]]


def top_per_family(rows: list[dict], n: int = 5) -> dict[str, list[dict]]:
  """Each family's n slowest kernels, slowest first."""
  return {f: top([r for r in rows if r["family"] == f], n) for f in dict.fromkeys(r["family"] for r in rows)}


def by_name(rows: list[dict], n: int = 40) -> list[dict]:
  """The n kernel names (a tinygrad name is its shape: one name, one kernel) that hold the most time over the step,
  with how often they run: where hundreds of small kernels add up (a bias gradient per dense layer, an optimizer's
  per-tensor kernels)."""
  return [{k: d[k] for k in ("name", "family", "count", "ms")} | rates(d["flop"], d["bytes"], d["ms"])
          for d in summed(rows, "name")[:n]]


def segments(rows: list[dict], k: int = 10) -> list[dict]:
  """The step in k runs of consecutive items (program order: forward, backward, then the optimizer's tail), the time
  of each."""
  cuts = [len(rows) * j // k for j in range(k + 1)]
  return [{"items": f"{a}-{b - 1}", "ms": sum(r["ms"] for r in rows[a:b])} for a, b in zip(cuts, cuts[1:]) if b > a]


def table(fams: list[dict], tops: list[dict], kernel_ms: float, step_ms: float, n_items: int, repeats: int,
          per_family: dict[str, list[dict]] | None = None, names: list[dict] | None = None,
          segs: list[dict] | None = None) -> str:
  lines = [f"{'family':<40}{'count':>7}{'ms/step':>11}{'share':>8}{'TFLOP/s':>10}{'GB/s':>9}"]
  lines += [f"{f['family'][:39]:<40}{f['count']:>7}{f['ms']:>11.3f}{f['share']:>8.1%}{f['tflops']:>10.2f}{f['gbs']:>9.1f}"
            for f in fams]
  gap = step_ms - kernel_ms
  lines += [f"kernels alone: {kernel_ms:.3f} ms ({n_items} items, median of {repeats} runs each); end-to-end step "
            f"(graph replay): {step_ms:.3f} ms; between kernels: {gap:.3f} ms ({gap / step_ms if step_ms else 0:.1%})",
            f"\nthe {len(tops)} slowest kernels",
            f"{'item':>6}  {'name':<44}{'family':<28}{'ms':>9}{'TFLOP/s':>10}{'GB/s':>9}"]
  def row(t: dict) -> str:
    return f"{t['item']:>6}  {t['name'][:43]:<44}{t['family'][:27]:<28}{t['ms']:>9.3f}{t['tflops']:>10.2f}{t['gbs']:>9.1f}"
  lines += [row(t) for t in tops]
  for fam, ts in (per_family or {}).items():
    if fam.startswith("tinygrad"): lines += [f"\nthe {len(ts)} slowest of {fam}"] + [row(t) for t in ts]
  if names:
    lines += [f"\nthe {len(names)} kernels with the most time over the step",
              f"{'count':>6}  {'name':<44}{'family':<28}{'ms':>9}{'TFLOP/s':>10}{'GB/s':>9}"]
    lines += [f"{t['count']:>6}  {t['name'][:43]:<44}{t['family'][:27]:<28}{t['ms']:>9.3f}{t['tflops']:>10.2f}"
              f"{t['gbs']:>9.1f}" for t in names]
  if segs: lines += ["\nms per tenth of the step's items: " + ", ".join(f"{g['items']} {g['ms']:.1f}" for g in segs)]
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  args.out = args.out.absolute()
  try:
    check_args(args)
    env = {**os.environ, **({"BS": str(args.bs), "EVAL_BS": str(args.bs)} if args.bs else {})}
    cfg = load_config(args.benchmark, args.platform, environ=env, given_as={"BS": f"--bs {args.bs}"} if args.bs else None)
    require_device(cfg)
  except InputError as e:
    print(f"{PROG}: error: {e}", file=sys.stderr)
    return 2
  runtime.apply_tinygrad_env(cfg, "init")   # DEV, DEFAULT_FLOAT, ...: before tinygrad's import
  runtime.start_heartbeat("building the model")
  for k, (old, new) in cfg.overridden.items(): print(f"override from environment: {k}={new} (config: {old})", flush=True)
  t0 = time.time()
  tr, timer, (linear, var_vals, inputs) = captured_step(args.benchmark, cfg, args.steps)
  runtime.set_stage("timing the step's kernels alone")
  rows = profile(linear, var_vals, inputs, tr.devices, args.repeats)
  fams, tops, per_family = families(rows), top(rows, args.top), top_per_family(rows)
  kernel_ms, step_ms = sum(r["ms"] for r in rows), timer.median() * 1e3
  names, segs = by_name(rows), segments(rows)
  print(table(fams, tops, kernel_ms, step_ms, len(rows), args.repeats, per_family, names[:15], segs), flush=True)
  rec = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "what": "step_profile", **device(), **versions(),
         "command": shlex.join(["python3", "lab/scripts/step_profile.py", *(sys.argv[1:] if argv is None else argv)]),
         "benchmark": args.benchmark, "platform": cfg.platform, "bs": cfg["BS"], "knobs": cfg.knobs,
         "kernels": runtime.provenance(cfg.knobs)["kernels"],   # KERNELS, also where the config leaves it unset
         "overrides": {k: env for k, (_, env) in cfg.overridden.items()}, "repeats": args.repeats,
         "step_ms": step_ms, "steps_ms": [t * 1e3 for t in timer.timed()], "kernel_ms": kernel_ms,
         "items": len(rows), "graph_batches": sum(1 for c in linear.src if is_graph(c)),
         "families": fams, "top_kernels": tops, "top_per_family": per_family, "by_name": names, "segments": segs,
         "wall_s": round(time.time() - t0, 1)}
  with open(args.out, "a") as f: f.write(json.dumps(rec) + "\n")
  print(f"record appended to {args.out}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
