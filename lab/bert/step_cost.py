"""What one BERT train step asks of the GPU, counted without one: kernels, FLOP, bytes and memory by tinygrad's own
estimates.

Runs the real train step (model, LAMB, clipping, loss scale, dropout: tinyperf.benchmarks.bert.train.Trainer) once, as a
run's first step runs (captured, then the capture run), on any device; DEV=NULL compiles every kernel (KERNELS=triton's
for sm_90) and runs none, so it works on a laptop. Prints one JSON line per variant (set by environment knobs, e.g.
DROPOUT=0) and the difference to the first, so a change's predicted effect on a GPU (bytes / bandwidth, FLOP / rate) is
known before a device lease is spent on measuring it:

  DEV=NULL NULL_ALLOW_COPYOUT=1 python -m lab.bert.step_cost --layers 2 --variants "DROPOUT=0.1" "DROPOUT=0"

tinygrad counts FLOP as ALU ops (index arithmetic included) and bytes as each kernel's buffer traffic, so the figures
are upper bounds on work a perfect kernel would do, and comparable between variants.

peak_gib_per_gpu is the most any one of the config's GPUS devices held (tinygrad's count of allocated, not yet freed
buffers: model, optimizer state, the JIT's plan of the step's intermediates, the all-reduce's) while the model was
built and stepped once. Not counted: the driver's context and what tinygrad's allocator caches. On one H200 it matched
what ran: 24 layers at BS 96, tinygrad's kernels, counted 123.6 GiB in the uncaptured first step the JIT then began
with, which ran alone and died of GPU memory beside a process holding 22 GiB (docs/PERFORMANCE.md row 22); with
KERNELS=triton that first step counted 81.8 GiB, and an 80 GB H100 stopped at 78.55 GB used.
`--gpu-gib 24` names the variants whose peak exceeds a 24 GiB card:

  DEV=NULL NULL_ALLOW_COPYOUT=1 python -m lab.bert.step_cost --platform tinybox_green --layers 24 \
    --variants ATTENTION_SOFTMAX=FLOAT ATTENTION_SOFTMAX=HALF --gpu-gib 24"""
from __future__ import annotations
import argparse
import json
import os
import subprocess
import sys
import time


def one_step(platform: str, layers: int, uncaptured: bool = False) -> dict:
  from tinyperf.benchmarks.common.config import bert_dropout
  from tinyperf.benchmarks.registry import load_config
  from tinyperf.benchmarks.common.runtime import apply_tinygrad_env
  cfg = load_config("bert", platform)    # knobs overridden by the environment, as in a run (BS, DROPOUT, ...)
  apply_tinygrad_env(cfg, "init", keep_dev=True)   # the config's DEFAULT_FLOAT, USE_ATOMICS, ... on the caller's DEV
  from tinygrad import GlobalCounters, Tensor, dtypes
  from tinygrad.device import Buffer
  from tinygrad.helpers import USE_ATOMICS
  from tinyperf.benchmarks.bert.steps import fake_batch, to_device
  from tinyperf.benchmarks.bert.train import Trainer
  # GPU memory: tinygrad's own count of the buffers allocated and not freed, per device, at its highest
  peak: dict[str, int] = {}
  allocate = Buffer.allocate
  def counted(self, *args, **kwargs):
    out = allocate(self, *args, **kwargs)
    peak[self.device] = max(peak.get(self.device, 0), GlobalCounters.mem_used_per_device[self.device])
    return out
  Buffer.allocate = counted
  k, t0 = cfg.knobs, time.perf_counter()
  tr = Trainer(cfg, seed=0, layers=layers)
  batch = to_device(fake_batch(k["BS"], k["MAX_SEQ_LEN"], k["MAX_PREDICTIONS"]), tr.devices)
  Tensor.realize(*batch.values())
  GlobalCounters.reset()
  if uncaptured: tr.train_step.cnt = 0   # tinygrad's own start: the first call runs uncaptured
  loss, _ = tr.train_step(**batch)    # captured and run (or uncaptured): every kernel of the step, once
  loss.realize()
  return {"layers": layers, "bs": k["BS"], "first_call": "uncaptured" if uncaptured else "captured",
          "dropout": bert_dropout(k), "default_float": dtypes.default_float.name, "use_atomics": bool(USE_ATOMICS),
          "kernels": GlobalCounters.kernel_count, "gflop": GlobalCounters.global_ops / 1e9,
          "gbytes": GlobalCounters.global_mem / 1e9,
          "peak_gib_per_gpu": max(peak.get(d, 0) for d in tr.devices) / 2**30,
          "host_s": time.perf_counter() - t0}


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m lab.bert.step_cost` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--platform", default="1xH200")
  p.add_argument("--layers", type=int, default=2, help="encoder layers (every layer runs the same kernels)")
  p.add_argument("--bs", type=int, help="global batch (default: the config's)")
  p.add_argument("--variants", nargs="+", default=["DROPOUT=0.1", "DROPOUT=0"],
                 help="KNOB=VALUE[,KNOB=VALUE] per variant; each runs in a fresh process")
  p.add_argument("--gpu-gib", type=float, help="one GPU's memory: say which variants' peak exceeds it")
  p.add_argument("--uncaptured", action="store_true",
                 help="run the first call uncaptured, as tinygrad's TinyJit does (the trainers capture it)")
  p.add_argument("--one", help=argparse.SUPPRESS)   # internal: run one variant in this process
  return p


def main(argv=None) -> int:
  a = build_parser().parse_args(argv)
  if a.one is not None:
    print(json.dumps({"variant": a.one, **one_step(a.platform, a.layers, a.uncaptured)}), flush=True)
    return 0
  rows = []
  for v in a.variants:
    # JIT=2: no graph batches, so that kernels counts kernels, not graph launches
    env = {"JIT": "2", **os.environ, **({"BS": str(a.bs)} if a.bs else {}),
           **dict(kv.split("=", 1) for kv in v.split(",") if kv)}
    cmd = [sys.executable, "-m", "lab.bert.step_cost", "--platform", a.platform, "--layers", str(a.layers), "--one", v,
           *["--uncaptured"] * a.uncaptured]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
      print(f"variant {v} failed (exit {out.returncode}):\n{out.stderr[-2000:]}", file=sys.stderr)
      return 1
    rows.append(json.loads(lines[-1])); print(lines[-1], flush=True)
  base = rows[0]
  for r in rows[1:]:
    print(f"{r['variant']} vs {base['variant']}: kernels {r['kernels'] - base['kernels']:+d}, "
          f"GFLOP {r['gflop'] - base['gflop']:+.1f} ({r['gflop'] / base['gflop'] - 1:+.1%}), "
          f"GB {r['gbytes'] - base['gbytes']:+.2f} ({r['gbytes'] / base['gbytes'] - 1:+.1%}), "
          f"peak GiB per GPU {r['peak_gib_per_gpu'] - base['peak_gib_per_gpu']:+.2f}")
  for r in rows:
    if a.gpu_gib and r["peak_gib_per_gpu"] > a.gpu_gib:
      print(f"{r['variant']}: {r['peak_gib_per_gpu']:.2f} GiB per GPU at its peak: over {a.gpu_gib:g} GiB, this step "
            "does not fit", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
