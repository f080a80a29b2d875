"""BERT's clip + LAMB step alone, over BERT-large's 398 parameter tensors with fp16 gradients: tinygrad's path
(clip_and_unscale, an fp32 copy of each gradient, tinygrad's LAMB: what KERNELS=tinygrad runs) against FusedLAMB's
three kernels, each launched per 32 tensors of a size (benchmarks/kernels/lamb.py: what KERNELS=triton runs). First a
check line (both sides three steps from the same weights and gradients: the largest relative difference of weights
and moments, and of the norm), then one line per side: ms per replayed TinyJit call, the kernels it launches and the GB/s of the bytes the
fused plan must move (40 per parameter with fp16 gradients).
  DEV=CUDA python lab/scripts/bench_lamb.py [--layers 24] [--hidden 1024] [--intermediate 4096] [--vocab 30522]
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tinygrad import Context, GlobalCounters, Tensor, dtypes   # noqa: E402

from tinyperf.benchmarks.bert.model import BertConfig, BertForPretraining           # noqa: E402
from tinyperf.benchmarks.bert.optim import build_optimizer, clip_and_unscale, split_parameters   # noqa: E402
from tinyperf.benchmarks.kernels.lamb import FusedLAMB                               # noqa: E402
from lab.kernel_bench import jit_seconds, positive                                             # noqa: E402

CALLS, LOSS_SCALE, CLIP = 10, 2048.0, 1.0
HP = dict(lr=1.75e-4, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01)   # the 1xH200 config's LAMB


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--layers", type=positive, default=24)
  p.add_argument("--hidden", type=positive, default=1024)
  p.add_argument("--intermediate", type=positive, default=4096)
  p.add_argument("--vocab", type=positive, default=30522)
  return p


def side(cfg: BertConfig, impl: str):
  """(params, optimizer group, step(*grads) -> norm) of one side, the weights drawn from seed 0."""
  Tensor.manual_seed(0)
  decay, plain = split_parameters(BertForPretraining(cfg))
  params = [*decay.values(), *plain.values()]
  Tensor.realize(*params)
  opt = build_optimizer(list(decay.values()), list(plain.values()), **HP)
  fused = FusedLAMB(opt.optimizers, LOSS_SCALE, CLIP) if impl == "fused" else None

  @Context(TRAINING=1)
  def step(*grads: Tensor) -> Tensor:
    for p, g in zip(params, grads): p.grad = g.float()   # as the backward leaves them: fp16 results cast to fp32
    if fused is not None: done, norm = fused.schedule_step()
    else:
      clipped, norm = clip_and_unscale([p.grad for p in params], LOSS_SCALE, CLIP)
      for p, g in zip(params, clipped): p.grad = g.contiguous()
      done = opt.schedule_step()
    Tensor.realize(norm, *done)
    return norm
  return params, opt, step


def rel_diff(a: Tensor, b: Tensor) -> float:
  return ((a - b).abs().max() / b.abs().max().maximum(1e-30)).item()


def main():
  args = build_parser().parse_args()
  cfg = BertConfig(layers=args.layers, hidden=args.hidden, heads=max(1, args.hidden // 64),
                   intermediate=args.intermediate, vocab=args.vocab)
  sides = {impl: side(cfg, impl) for impl in ("tinygrad", "fused")}
  params = sides["tinygrad"][0]
  n = sum(p.numel() for p in params)
  Tensor.manual_seed(1)   # gradients of a loss scaled by LOSS_SCALE, their global norm 4 x CLIP: the clip acts
  grads = [(Tensor.randn(*p.shape) * (4 * CLIP * LOSS_SCALE / n ** 0.5)).cast(dtypes.half).realize() for p in params]

  norms = {impl: [s[2](*grads).item() for _ in range(3)] for impl, s in sides.items()}
  (pt, ot, _), (pf, of, _) = sides["tinygrad"], sides["fused"]
  state = lambda ps, o: [*ps, *(t for x in o.optimizers for t in (*x.m, *x.v))]
  check = {"check": "fused vs tinygrad, 3 steps", "tensors": len(params), "params": n,
           "weights_moments_max_rel_diff": max(rel_diff(a, b) for a, b in zip(state(pf, of), state(pt, ot))),
           "norm_max_rel_diff": max(abs(a - b) / b for a, b in zip(norms["fused"], norms["tinygrad"])),
           "norm": norms["tinygrad"][-1]}
  print(json.dumps(check), flush=True)

  for impl, (_, _, step) in sides.items():
    GlobalCounters.reset()
    step(*grads)   # uncaptured: counts the kernels one step launches
    kernels = GlobalCounters.kernel_count
    s = jit_seconds(step, *grads, calls=CALLS)
    print(json.dumps({"impl": impl, "tensors": len(params), "params": n, "ms": round(s * 1e3, 3), "kernels": kernels,
                      "gbs_of_fused_bytes": round(40 * n / s / 1e9, 1)}), flush=True)


if __name__ == "__main__":
  main()
