#!/usr/bin/env python3
"""The same training steps with KERNELS=tinygrad and KERNELS=triton from one seed: the two loss curves side by side.

  python3 lab/scripts/loss_compare.py bert [--platform 1xH200] [--bs 32] [--steps 20] [--seed 1] [--noise-floor]
    [--float-reference] --out FILE.jsonl

Each side is the benchmark's own Trainer (benchmarks/<bm>/train.py: model, optimizer, LR schedule, jitted train step)
built from the same seed, stepped on the same seeded synthetic batches, one side after the other in this process (the
model's weights are drawn on the host, so both start from the same numbers). Off CUDA the config refuses KERNELS=triton,
so the triton side is the same config with only the knob changed: it runs the kernels' tinygrad fallbacks (the same
layouts, gradient functions and fused ops), which checks the wiring on the CPU; on CUDA it runs the Triton kernels.
BERT runs without dropout (DROPOUT=0): the Triton kernels draw their masks in-kernel from another generator than
tinygrad's, so with dropout the two curves would differ by the masks, not by the kernels. BEAM stays 0: the steps are
called directly, outside INIT's search (the comparison is of the math, not of the speed).

Prints a line per step as it goes (and a heartbeat during a long compile), then a table: both losses, their absolute
and relative difference and the tolerance at that step; for BERT, how far each side's gradient norm before clipping is
from tinygrad's at the first steps (at step 0 the weights are the same: the gradients' own agreement), and the
parameters whose gradients on the first batch part most (each side's taken eagerly before its steps). Appends one JSON
line to --out: date, device, versions, git sha, command, both curves (BERT's gradient norms and per-parameter gradient
differences too), the largest differences, pass or fail. Exit 0 when every step is within the tolerance, 1 when one is
not, 2 on bad input.

The tolerance (TOLERANCE below) is relative, |triton - tinygrad| / |tinygrad|, and grows linearly with the step. At
step 0 both sides start from the same weights on the same batch and differ only in the order fp32 accumulators sum
fp16 products (GEMM, attention, conv: at most 6e-4 per element, docs/perf/*triton*.jsonl of 2026-12-04; a mean loss
averages that down); each update then carries the difference into the next step's weights. On the CPU at toy shapes
in HALF the fallbacks stayed within 3.5e-5 of tinygrad over 20 steps, without growth; a triton side from another seed
was 2.9e-3 (BERT) and 4.2e-3 (ResNet) off at step 0: a random-init loss sits near ln(classes) whatever the weights, so
a looser tolerance (2e-2) would pass a different model. The Triton kernels run only on CUDA: TRITON_INTERPRET=1
interprets a kernel called on host arrays (tests/unit/test_kernels*.py), not one inside a tinygrad graph.

--float-reference (BERT) also takes the first batch's gradients in float32 (KERNELS=tinygrad, DEFAULT_FLOAT=float32,
the same seed and batch) and prints each fp16 side's per-parameter distance to them: which side is nearer, where the two
part.

--noise-floor adds a third side: KERNELS=tinygrad again with its weights times (1 + u) before step 0, u uniform in
[-2^-11, 2^-11] per element (each weight rounded the other way in fp16). An Adam-type optimizer (BERT's LAMB) can
carry a change that small into a wandering curve; the noise side's rel diff to the tinygrad side measures that wander,
and the tolerance at step i becomes max(first + growth * i, NOISE_FACTOR * the largest noise rel diff up to i). At
step 0 the perturbation moved the toy losses by at most 3.5e-6 (CPU; another seed: 2.9e-3 or more), so step 0 keeps
the strict tolerance and --triton-seed 2 --noise-floor still fails there."""
from __future__ import annotations
import argparse
import dataclasses
import gc
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tinyperf.benchmarks.common import runtime                                     # noqa: E402
from tinyperf.benchmarks.common.io import InputError                              # noqa: E402
from tinyperf.benchmarks.registry import BENCHMARKS, load_config                  # noqa: E402
from lab.bench import DEVICE_NODES, gpu_name, require_saving_folder      # noqa: E402
from tinyperf.tooling.common.errors import UserError                              # noqa: E402

PROG = "python3 lab/scripts/loss_compare.py"
SIDES = ("tinygrad", "triton")
NOISE_SIDE = "noise_floor"   # --noise-floor: KERNELS=tinygrad from perturbed weights
FLOAT_SIDE = "float32"       # --float-reference: KERNELS=tinygrad in float32, the first batch's gradients only
# relative tolerance at step i: first + growth * i (why these values: the docstring above)
TOLERANCE = {"first": 1e-3, "growth": 2e-4}
TOLERANCE_WHY = ("the sides' fp32 accumulators sum fp16 products in another order (at most 6e-4 per element and op, "
                 "docs/perf/*triton*.jsonl), and each update carries that into the next step's weights")
# --noise-floor's tolerance is at least NOISE_FACTOR x the noise side's largest rel diff so far: one sample of a chaotic
# wander, while the triton side's rounding differences come at every step, not once: room for twice the wander
NOISE_FACTOR = 2
NOISE_U, NOISE_SEED = 2.0 ** -11, 11   # the perturbation's bound (relative, per element) and its numpy seed
NOISE_WHY = "uniform 2^-11 relative"
GRAD_WORST = 12   # BERT: the parameters printed whose first-batch gradients differ most between the sides


def tolerance(step: int, first: float, growth: float) -> float: return first + growth * step


def build_parser() -> argparse.ArgumentParser:
  """The parser (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0], allow_abbrev=False)
  p.add_argument("benchmark", choices=tuple(BENCHMARKS))
  p.add_argument("--platform", default="1xH200", help="config to start from (default 1xH200; cpu_smoke on the CPU)")
  p.add_argument("--bs", type=int, help="batch per step (default: the config's BS)")
  p.add_argument("--steps", type=int, default=20, help="train steps per side (default 20)")
  p.add_argument("--seed", type=int, default=1, help="seed of both models' weights and of the batches (default 1)")
  p.add_argument("--triton-seed", type=int, help="the triton side's weights from another seed (default --seed): "
                 "shows the check failing")
  p.add_argument("--rtol", type=float, default=TOLERANCE["first"], help="relative tolerance at step 0 (default "
                 f"{TOLERANCE['first']:g})")
  p.add_argument("--rtol-growth", type=float, default=TOLERANCE["growth"], help="added to the tolerance per step "
                 f"(default {TOLERANCE['growth']:g}: {tolerance(19, **TOLERANCE):g} at step 19)")
  p.add_argument("--noise-floor", action="store_true", help="a third side, KERNELS=tinygrad from weights perturbed by "
                 f"2^-11 relative: the tolerance is at least {NOISE_FACTOR}x its largest rel diff so far")
  p.add_argument("--float-reference", action="store_true", help="BERT: the first batch's gradients in float32 too "
                 "(KERNELS=tinygrad, DEFAULT_FLOAT=float32), and each side's per-parameter distance to them")
  p.add_argument("--out", type=Path, required=True, help="append the JSON record to this file")
  return p


def configs(args) -> dict:
  """Both sides' configs: the platform's with this environment's overrides, BS from --bs, BERT without dropout, and
  KERNELS per side; where the config refuses KERNELS=triton (not CUDA) the tinygrad side's with only the knob changed.
  With --float-reference also "float32": the tinygrad side's in float32 (DEFAULT_FLOAT=FLOAT)."""
  env = {**os.environ, **({"BS": str(args.bs), "EVAL_BS": str(args.bs)} if args.bs else {}), "KERNELS": "tinygrad"}
  if args.benchmark == "bert": env["DROPOUT"] = "0"
  base = load_config(args.benchmark, args.platform, environ=env)
  if base["DEV"] == "CUDA": triton = load_config(args.benchmark, args.platform, environ={**env, "KERNELS": "triton"})
  else: triton = dataclasses.replace(base, knobs={**base.knobs, "KERNELS": "triton"})
  out = {"tinygrad": base, "triton": triton}
  if args.float_reference: out[FLOAT_SIDE] = load_config(args.benchmark, args.platform, environ={**env, "DEFAULT_FLOAT": "FLOAT"})
  return out


def batches(benchmark: str, knobs: dict, seed: int, n: int) -> list:
  """n synthetic batches of the step's shapes, drawn from seed: the same numbers for both sides."""
  import numpy as np
  rng, B = np.random.default_rng(seed), knobs["BS"]
  if benchmark == "resnet":
    s = knobs["IMAGE_SIZE"]
    return [(rng.integers(0, 256, (B, s, s, 3), dtype=np.uint8), rng.integers(0, knobs["NUM_CLASSES"], B, dtype=np.int32))
            for _ in range(n)]
  from tinyperf.benchmarks.bert.steps import fake_batch
  from tinyperf.benchmarks.bert.train import VOCAB_SIZE
  L, P = knobs["MAX_SEQ_LEN"], knobs["MAX_PREDICTIONS"]
  out = []
  for _ in range(n):
    b = fake_batch(B, L, P)   # the loader's fields, shapes and dtypes
    b["input_ids"] = rng.integers(999, VOCAB_SIZE, (B, L), dtype=np.int32)   # past the vocab's special tokens
    b["segment_ids"][:, L // 2:] = 1
    b["masked_lm_positions"] = np.sort(rng.permuted(np.tile(np.arange(1, L, dtype=np.int32), (B, 1)), axis=1)[:, :P], 1)
    b["masked_lm_ids"] = rng.integers(999, VOCAB_SIZE, (B, P), dtype=np.int32)
    b["next_sentence_labels"] = rng.integers(0, 2, (B, 1), dtype=np.int32)
    out.append(b)
  return out


def perturb(model, seed: int) -> int:
  """Every float parameter of model times (1 + u), u uniform in [-NOISE_U, NOISE_U] per element drawn from seed on the
  host, assigned in place on the parameter's device(s) (the optimizer keeps its tensors). Returns how many changed."""
  import numpy as np
  from tinygrad import Tensor, dtypes
  from tinygrad.nn.state import get_parameters
  rng = np.random.default_rng(seed)
  # 2^-11 is fp16's unit roundoff: the fp32 masters compute in fp16, so this is each weight rounded the other way
  ps = list({id(p): p for p in get_parameters(model) if dtypes.is_float(p.dtype)}.values())   # a shared one once
  for p in ps:
    f = (1.0 + rng.uniform(-NOISE_U, NOISE_U, p.shape)).astype(np.float32)
    p.assign(p * Tensor(f).cast(p.dtype).shard_like(p))
  Tensor.realize(*ps)   # one schedule for all
  return len(ps)


def bert_grads(tr, batch: dict) -> dict:
  """Each parameter's gradient of the step's loss on batch (unscaled, fp32, on the host) by state-dict name, taken
  eagerly before any update: which tensor the two sides' gradients part on, where the loss curves and the global norm
  say only that they do."""
  import numpy as np
  from tinygrad import Context, Tensor
  from tinygrad.nn.state import get_state_dict
  from tinyperf.benchmarks.bert.model import pretraining_loss
  from tinyperf.benchmarks.bert.steps import to_device
  b, scale = to_device(batch, tr.devices), float(tr.k["LOSS_SCALER"])   # scaled as the step scales: no fp16 underflow
  with Context(TRAINING=1):
    tr.optimizer.zero_grad()
    mlm, nsp = tr.model(b["input_ids"], b["segment_ids"], b["input_mask"], b["masked_lm_positions"])
    loss, _, _ = pretraining_loss(mlm, nsp, b, tr.model.config.kernels)
    (loss * scale).backward()
  names = {id(t): n for n, t in get_state_dict(tr.model).items()}
  params = [p for p in tr.optimizer.params if p.grad is not None]
  grads = [p.grad.float() / scale for p in params]
  Tensor.realize(*grads)
  out = {names.get(id(p), f"param{i}"): g.numpy().astype(np.float64) for i, (p, g) in enumerate(zip(params, grads))}
  tr.optimizer.zero_grad()
  return out


def float_grads(cfg, seed: int, batch: dict) -> dict:
  """--float-reference: bert_grads of cfg (configs' float32 one) from the same seed and batch as the fp16 sides: what
  both approximate."""
  from tinygrad import Context
  from tinyperf.benchmarks.bert.train import Trainer
  runtime.set_stage("float32 reference: each parameter's gradient on the first batch")
  with Context(DEFAULT_FLOAT="float32"):   # tinygrad read DEFAULT_FLOAT at import: the fp16 sides' value
    tr = Trainer(cfg, seed)
    out = bert_grads(tr, batch)
  del tr
  gc.collect()
  return out


def grad_rel_diffs(ref: dict, other: dict) -> dict:
  """Per parameter: |other - ref| / |ref| (Frobenius norms; a zero ref gradient: |other|)."""
  import numpy as np
  out = {}
  for name, g in ref.items():
    d, n = float(np.linalg.norm(other[name] - g)), float(np.linalg.norm(g))
    out[name] = d / n if n else d
  return out


def curve(benchmark: str, cfg, seed: int, data: list, side: str,
          noise_seed: int | None = None) -> tuple[list, list, list | None, dict | None]:
  """(loss per step, seconds per step, BERT's gradient norm before clipping per step, else None, BERT's per-parameter
  gradients on the first batch before the first step (bert_grads), else None) of the benchmark's Trainer built from
  seed and stepped on data; with noise_seed, its weights perturbed first (perturb)."""
  runtime.set_stage(f"{side} side: building the model")
  if benchmark == "resnet":
    from tinyperf.benchmarks.common.rules import IMAGENET_COUNTS
    from tinyperf.benchmarks.resnet.steps import to_device
    from tinyperf.benchmarks.resnet.train import Trainer, steps_per_epoch
    # the schedule of a run on ImageNet, as INIT without data builds it
    tr = Trainer(cfg, seed, steps_per_epoch(IMAGENET_COUNTS["train"], cfg["BS"]))
    step = lambda b: tr.train_step(*to_device(*b, tr.devices))
  else:
    from tinyperf.benchmarks.bert.steps import to_device
    from tinyperf.benchmarks.bert.train import Trainer
    tr = Trainer(cfg, seed)
    step = lambda b: tr.train_step(**to_device(b, tr.devices))
  if noise_seed is not None:
    runtime.set_stage(f"{side} side: perturbing the weights")
    print(f"{side}: {perturb(tr.model, noise_seed)} weight tensors times (1 + u), |u| <= 2^-11", flush=True)
  grads = None
  if benchmark == "bert":
    runtime.set_stage(f"{side} side: each parameter's gradient on the first batch")
    grads = bert_grads(tr, data[0])
  losses, seconds, norms = [], [], [] if benchmark == "bert" else None
  for i, b in enumerate(data):
    runtime.set_stage(f"{side} side: step {i}" + (" (the JIT compiles its kernels)" if i < runtime.JIT_WARMUP_STEPS else ""))
    t0 = time.perf_counter()
    out = step(b)
    losses.append(runtime.host_scalar(out[0]))
    if norms is not None: norms.append(runtime.host_scalar(out[1]))   # BERT's step returns (loss, grad norm)
    seconds.append(time.perf_counter() - t0)
    print(f"{side} step {i}/{len(data)}: loss {losses[-1]:.6f} ({seconds[-1]:.1f} s)", flush=True)
  return losses, seconds, norms, grads


def rel_diff(x: float, y: float) -> float:
  diff = abs(y - x)
  return diff / abs(x) if x else (0.0 if diff == 0 else float("inf"))


def compare(a: list[float], b: list[float], first: float, growth: float, noise: list | None = None) -> list[dict]:
  """Per step: both losses, |b - a|, |b - a| / |a| and whether that is within the step's tolerance (a NaN never is).
  With noise (the noise side's losses): its rel diff to a, and the tolerance at least NOISE_FACTOR times the largest
  finite one so far ("from_noise" where that is the larger)."""
  rows, floor = [], 0.0
  for i, (x, y) in enumerate(zip(a, b)):
    rel, tol = rel_diff(x, y), tolerance(i, first, growth)
    row = {"step": i, "tinygrad": x, "triton": y, "abs_diff": abs(y - x), "rel_diff": rel}
    if noise is not None:
      row |= {"noise_floor": noise[i], "noise_rel_diff": (nrel := rel_diff(x, noise[i]))}
      if math.isfinite(nrel): floor = max(floor, nrel)   # a NaN or inf noise side widens nothing
      row["from_noise"] = NOISE_FACTOR * floor > tol
      tol = max(tol, NOISE_FACTOR * floor)
    rows.append(row | {"rtol": tol, "ok": rel <= tol})   # NaN compares False
  return rows


def device() -> dict:
  """The device the steps ran on: tinygrad's name, and the GPU's name and driver where nvidia-smi answers."""
  from tinygrad import Device
  out = {"device": Device.DEFAULT}
  if Device.DEFAULT == "CUDA" and (gpu := gpu_name()): out["gpu"] = gpu
  return out


def versions() -> dict:
  from importlib import metadata
  try: triton = metadata.version("triton")
  except metadata.PackageNotFoundError: triton = "not installed"
  return {**{k: v for k, v in runtime.provenance().items() if k in ("tinyperf", "git_sha", "tinygrad", "python")},
          "triton": triton}


def table(rows: list[dict]) -> str:
  """With a noise side: its rel diff to tinygrad's, and a * by a tolerance the noise floor set."""
  noise = "noise_rel_diff" in rows[0]
  lines = [f"{'step':>4} {'tinygrad':>12} {'triton':>12} {'abs diff':>10} {'rel diff':>10}" +
           (f" {'noise rel':>10}" if noise else "") + f" {'rtol':>8}{' ' if noise else ''}  ok"]
  for r in rows:
    nrel, mark = (f" {r['noise_rel_diff']:>10.3g}", "*" if r["from_noise"] else " ") if noise else ("", "")
    lines.append(f"{r['step']:>4} {r['tinygrad']:>12.6f} {r['triton']:>12.6f} {r['abs_diff']:>10.3g} "
                 f"{r['rel_diff']:>10.3g}{nrel} {r['rtol']:>8.3g}{mark}  "
                 f"{'yes' if r['ok'] else 'NO'}")
  if noise: lines.append(f"* the noise floor's: {NOISE_FACTOR} x the largest noise rel diff so far")
  return "\n".join(lines)


def require_device(cfg):
  """A GPU config on a machine without its GPUs is refused in one line (tinygrad would fail deep in its device probe)."""
  from tinyperf.benchmarks.preflight import visible_gpus
  if cfg["vendor"] == "cpu": return
  have, _ = visible_gpus(cfg["vendor"])
  if have < cfg["GPUS"]:
    raise UserError(f"{cfg.platform} runs on {cfg['vendor'].upper()} GPUs (DEV={cfg['DEV']}) and this machine shows {have} "
                    f"({DEVICE_NODES[cfg['vendor']]}). Run it on the GPU machine, or pass --platform cpu_smoke to check "
                    "the wiring on the CPU.")


def check_args(args):
  """What would be found out only after both sides trained, refused first."""
  if args.steps < 1: raise UserError(f"--steps {args.steps}: compare at least one step (default 20).")
  if args.bs is not None and args.bs < 1: raise UserError(f"--bs {args.bs}: give a batch of at least 1.")
  for flag, v in (("--rtol", args.rtol), ("--rtol-growth", args.rtol_growth)):
    if not 0 <= v < float("inf"): raise UserError(f"{flag} {v:g}: give a tolerance of 0 or more.")
  if args.float_reference and args.benchmark != "bert":
    raise UserError("--float-reference compares BERT's per-parameter gradients; ResNet's step has no such comparison.")
  require_saving_folder(f"--out {args.out}", args.out)


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  args.out = args.out.absolute()
  try:
    check_args(args)
    cfgs = configs(args)
    require_device(cfgs["tinygrad"])
  except InputError as e:
    print(f"{PROG}: error: {e}", file=sys.stderr)
    return 2
  runtime.apply_tinygrad_env(cfgs["tinygrad"], "init")   # DEV, DEFAULT_FLOAT, ...: the same for both sides
  runtime.start_heartbeat("starting")
  k = cfgs["tinygrad"].knobs
  data = batches(args.benchmark, k, args.seed, args.steps)
  seeds = {"tinygrad": args.seed, "triton": args.seed if args.triton_seed is None else args.triton_seed}
  sides = SIDES + ((NOISE_SIDE,) if args.noise_floor else ())
  if args.noise_floor: cfgs[NOISE_SIDE], seeds[NOISE_SIDE] = cfgs["tinygrad"], args.seed
  t0 = time.time()
  ref = float_grads(cfgs[FLOAT_SIDE], args.seed, data[0]) if args.float_reference else None
  runs, grad_diff, to_float = {}, {}, {}
  for side in sides:
    *runs[side], grads = curve(args.benchmark, cfgs[side], seeds[side], data, side,
                               NOISE_SEED if side == NOISE_SIDE else None)
    if grads is not None:   # BERT: the sides' gradients kept as diffs, only tinygrad's (and the float32 ones) on the host
      if ref is not None and side in SIDES: to_float[side] = grad_rel_diffs(ref, grads)
      if side == "tinygrad": tinygrad_grads = grads
      else: grad_diff[side] = grad_rel_diffs(tinygrad_grads, grads)
    gc.collect()   # a side's model, optimizer state and captured step leave the GPU before the next side's come
  noise = runs[NOISE_SIDE][0] if args.noise_floor else None
  rows = compare(runs["tinygrad"][0], runs["triton"][0], args.rtol, args.rtol_growth, noise)
  ok = all(r["ok"] for r in rows)
  worst = max(rows, key=lambda r: r["rel_diff"] / r["rtol"] if r["rtol"] else float("inf"))
  from_noise = [r["step"] for r in rows if r.get("from_noise")]
  print(table(rows))
  print(f"tolerance {args.rtol:g} + {args.rtol_growth:g} per step: {TOLERANCE_WHY}")
  if args.noise_floor:
    print(f"noise floor: the tolerance is at least {NOISE_FACTOR} x {NOISE_SIDE}'s largest rel diff so far "
          f"({NOISE_WHY} weights, seed {NOISE_SEED}); it set the tolerance at {len(from_noise)} of {len(rows)} steps")
  dev = device()
  triton_runs = "Triton kernels" if dev["device"] == "CUDA" else f"the kernels' tinygrad fallbacks ({dev['device']})"
  verdict = (f"{'PASS' if ok else 'FAIL'}: {args.benchmark} {cfgs['tinygrad'].platform}, {len(rows)} steps at BS "
             f"{k['BS']}, {k['DEFAULT_FLOAT']}; the triton side ran {triton_runs}; largest rel diff "
             f"{max(r['rel_diff'] for r in rows):.3g}; nearest its tolerance (or furthest over) at step {worst['step']}: "
             f"{worst['rel_diff']:.3g} of {worst['rtol']:.3g}" +
             (f"; the tolerance from the noise floor at steps {from_noise}" if from_noise else ""))
  norms = {side: runs[side][2] for side in sides} if args.benchmark == "bert" else None
  if norms:   # at step 0 both sides have the same weights: the gradients' agreement before any update carries it
    norm_rel = {side: [rel_diff(x, y) for x, y in zip(norms["tinygrad"], norms[side])] for side in sides[1:]}
    print("gradient norm before clipping, rel diff to tinygrad at steps 0, 1, 2: " +
          "; ".join(f"{side} " + ", ".join(f"{d:.3g}" for d in ds[:3]) for side, ds in norm_rel.items()))
  if grad_diff:   # the parameters whose gradients part most; with a noise side, most above its own diff there
    t, n = grad_diff["triton"], grad_diff.get(NOISE_SIDE)
    # a gradient that is rounding alone (the key bias's: softmax ignores a shift common to a row) parts on both sides
    part = (lambda name: t[name] / max(n[name], 1e-12)) if n else t.get
    worst_p = sorted(t, key=part, reverse=True)[:GRAD_WORST]
    print(f"first batch, per parameter |g_triton - g_tinygrad| / |g_tinygrad|, the {len(worst_p)} " +
          (f"furthest above {NOISE_SIDE}'s (beside)" if n else "largest") + f" of {len(t)}:")
    for name in worst_p: print(f"  {t[name]:10.3g}" + (f" {n[name]:10.3g}" if n else "") + f"  {name}")
  if to_float:   # which fp16 side is nearer the float32 gradients, where they part most
    tg, tt = to_float["tinygrad"], to_float["triton"]
    print(f"first batch, per parameter |g - g_float32| / |g_float32| (float32: KERNELS=tinygrad, DEFAULT_FLOAT=float32), "
          f"the {GRAD_WORST} largest of either side:\n  {'tinygrad':>10} {'triton':>10}")
    for name in sorted(tg, key=lambda k: -max(tg[k], tt[k]))[:GRAD_WORST]: print(f"  {tg[name]:10.3g} {tt[name]:10.3g}  {name}")
  print(verdict, flush=True)
  rec = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "what": "loss_compare", **dev, **versions(),
         "command": shlex.join(["python3", "lab/scripts/loss_compare.py", *(sys.argv[1:] if argv is None else argv)]),
         "benchmark": args.benchmark, "platform": cfgs["tinygrad"].platform, "bs": k["BS"], "steps": len(rows),
         "dtype": k["DEFAULT_FLOAT"], "seeds": seeds, "triton_side": triton_runs,
         "overrides": {key: env for key, (_, env) in cfgs["tinygrad"].overridden.items() if key != "KERNELS"},
         "tolerance": {"rtol_step0": args.rtol, "rtol_growth_per_step": args.rtol_growth, "why": TOLERANCE_WHY,
                       "rule": "linear", "rtol": [r["rtol"] for r in rows]},
         "loss": {side: runs[side][0] for side in sides}, "step_s": {side: runs[side][1] for side in sides},
         "abs_diff": [r["abs_diff"] for r in rows], "rel_diff": [r["rel_diff"] for r in rows],
         "max_abs_diff": max(r["abs_diff"] for r in rows), "max_rel_diff": max(r["rel_diff"] for r in rows),
         "failed_steps": [r["step"] for r in rows if not r["ok"]], "pass": ok, "wall_s": round(time.time() - t0, 1)}
  if norms: rec |= {"grad_norm": norms, "grad_norm_rel_diff": norm_rel, "grad_rel_diff": grad_diff}
  if to_float: rec["grad_rel_diff_to_float32"] = to_float
  if args.noise_floor:   # rule noise_floor: max(linear, factor x the largest noise_rel_diff up to the step)
    rec["tolerance"] |= {"rule": "noise_floor", "noise_floor_steps": from_noise}
    rec |= {"noise_rel_diff": [r["noise_rel_diff"] for r in rows],
            "noise": {"factor": NOISE_FACTOR, "perturbation": NOISE_WHY, "seed": NOISE_SEED}}
  with open(args.out, "a") as f: f.write(json.dumps(rec) + "\n")
  print(f"record appended to {args.out}", flush=True)
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
