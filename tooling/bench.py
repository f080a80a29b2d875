"""`tinyperf bench resnet --gpus N [--against torch]`: our tinygrad train step and a PyTorch one, side by side, one command.

Both sides run as processes on the same machine: the tinygrad side is the real training entrypoint in INIT phase with
BENCHMARK steps on fake data of the real shapes (so BEAM and the JIT behave as in a submission), the PyTorch side is
benchmarks/<bm>/bench_torch.py (PyTorch is only needed where this runs; it is no dependency of tinyperf).
Prints throughput, step time, memory and the ratios; --record appends every figure as one JSON line."""
from __future__ import annotations
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.config import ROOT, load_config
from tooling.errors import UserError

TAG = "tinyperf-bench "


def add_arguments(p: argparse.ArgumentParser):
  p.add_argument("benchmark", choices=("resnet",))
  p.add_argument("--gpus", type=int, default=1, help="GPUs for the tinygrad side (PyTorch runs on one)")
  p.add_argument("--platform", help="config to start from (default: <gpus>xH200)")
  p.add_argument("--bs", type=int, default=256, help="batch per GPU (default 256)")
  p.add_argument("--steps", type=int, default=20, help="timed steps per side (median reported)")
  p.add_argument("--beam", type=int, help="TRAIN_BEAM for the tinygrad side (default: the config's)")
  p.add_argument("--against", choices=("torch", "none"), default="torch")
  p.add_argument("--torch-modes", default="eager,compile")
  p.add_argument("--record", type=Path, help="append the JSON records to this file")


def _records(out: str) -> list[dict]:
  return [json.loads(line[line.index(TAG) + len(TAG):]) for line in out.splitlines() if TAG in line]


def run_tinygrad(args, extra_env: dict) -> dict:
  platform = args.platform or f"{args.gpus}xH200"
  cfg = load_config(args.benchmark, platform, environ={})
  env = {**os.environ, "PYTHONUNBUFFERED": "1", "GPUS": str(args.gpus), "BS": str(args.bs * args.gpus),
         "EVAL_BS": str(args.bs * args.gpus), **extra_env}
  if args.beam is not None: env["TRAIN_BEAM"] = str(args.beam)
  with tempfile.TemporaryDirectory() as tmp:
    cmd = [sys.executable, "-m", f"benchmarks.{args.benchmark}.train", "--platform", cfg.platform, "--phase", "init",
           "--seed", "0", "--results", tmp, "--benchmark-steps", str(args.steps)]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
  sys.stderr.write(proc.stderr[-3000:])
  recs = _records(proc.stdout)
  if proc.returncode != 0 or not recs:
    raise UserError(f"the tinygrad side failed (exit {proc.returncode}); its output ends with:\n{proc.stdout[-2000:]}")
  return {**recs[-1], "wall_s": time.time() - t0}


def run_torch(args) -> list[dict]:
  cmd = [sys.executable, "-m", f"benchmarks.{args.benchmark}.bench_torch", "--bs", str(args.bs), "--steps", str(args.steps),
         "--modes", args.torch_modes]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
  out = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
  if proc.returncode != 0 or not out:
    raise UserError(f"the PyTorch side failed (exit {proc.returncode}); is PyTorch installed here? {proc.stderr[-1500:]}")
  return out


def main(args) -> int:
  ours = run_tinygrad(args, {})
  theirs = run_torch(args) if args.against == "torch" else []
  unit = "img_per_s"
  per_gpu = ours[unit] / ours["gpus"]
  print(f"\n{'side':<28}{'GPUs':>5}{'batch':>7}{'step ms':>10}{'img/s':>10}{'img/s/GPU':>11}{'mem GB':>8}")
  print(f"{'tinygrad BEAM=' + str(ours['beam'].get('TRAIN_BEAM')):<28}{ours['gpus']:>5}{ours['bs']:>7}"
        f"{ours['median_step_ms']:>10.1f}{ours[unit]:>10.0f}{per_gpu:>11.0f}{ours['mem_used_gb']:>8.1f}")
  for t in theirs:
    print(f"{'torch ' + t['mode'] + ' ' + t['dtype']:<28}{1:>5}{t['bs']:>7}{t['median_step_ms']:>10.1f}{t[unit]:>10.0f}"
          f"{t[unit]:>11.0f}{t['peak_mem_gb']:>8.1f}")
  for t in theirs: print(f"ratio tinygrad/torch {t['mode']} per GPU: {per_gpu / t[unit]:.3f}")
  print(f"tinygrad init {ours['init_s']:.0f} s; projected time to train {ours['projected_minutes']:.0f} min "
        f"(train steps only, no eval or data loading)")
  if args.record:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(args.record, "a") as f:
      for r in [ours, *theirs]: f.write(json.dumps({"date": stamp, **r}) + "\n")
  return 0
