"""ResNet-50's convolutions through benchmarks/kernels/conv.py (KERNELS=triton) inside TinyJit, on one NVIDIA GPU.

For each distinct conv of ResNet-50 at --bs images of --res pixels (the stem, every bottleneck's 1x1 and 3x3 convs and
downsamples) and each of its forward, data gradient and weight gradient: tinygrad's own op (conv2d and its autograd)
and the Triton kernel at each tile of conv.TILES, REPS per replayed JIT call (median of the calls), TFLOP/s and the
largest difference from tinygrad's result of the same fp16 operands. One JSON line per measurement, then the fastest
tile per (kind, conv) (the table to put in conv_tiles.TUNED) and the whole network's sum of both sides.
  DEV=CUDA python lab/scripts/bench_conv.py [--bs 256 ...] [--platform 1xH200] [--tiles all|rule] [--only NAME]
  python lab/scripts/bench_conv.py --dry-run    # no GPU: the convs, tiles, grids and splits it would launch
23 distinct convs x 3 kinds x (1 + 4 tiles) measurements: `--tiles rule` (tile()'s choice alone) is the short run.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tinyperf.benchmarks.kernels import conv as cv   # noqa: E402
from lab.kernel_bench import jit_seconds, positive, tile_override   # noqa: E402

REPS, CALLS = 4, 5
KINDS = ("fwd", "dgrad", "wgrad")


def resnet50_convs(bs: int, res: int = 224) -> dict[cv.Shape, list[str]]:
  """Every conv of ResNet-50 (benchmarks/resnet/model.py's, shape-only) at bs images of res pixels: Shape -> the
  state-dict names of the convs that have it, in the order the forward meets them."""
  from tinyperf.benchmarks.resnet.model import ResNet
  model, out = ResNet(), {}
  def add(name, conv, h):
    K, C, R, S = conv.weight.shape
    s = cv.Shape(bs, C, h, h, K, R, S, conv.stride, conv.padding)
    out.setdefault(s, []).append(name)
    return s.P
  h = add("conv1", model.conv1, res)
  h = (h + 2 - 3) // 2 + 1                       # the stem's 3x3/2 max-pool after a zero pad of 1
  for i, stage in enumerate(model.stages()):
    for j, block in enumerate(stage):
      name = f"layer{i + 1}.{j}"
      if block.downsample: add(f"{name}.downsample.0", block.downsample[0], h)
      add(f"{name}.conv1", block.conv1, h)
      h2 = add(f"{name}.conv2", block.conv2, h)
      h = add(f"{name}.conv3", block.conv3, h2)
  return out


def kinds(names: list[str]) -> tuple[str, ...]:
  return KINDS[::2] if names == ["conv1"] else KINDS   # the stem's input is the image: no data gradient


def plan_rows(shapes: dict[cv.Shape, list[str]], tiles: str):
  for s, names in shapes.items():
    for kind in kinds(names):
      for t in (cv.TILES if tiles == "all" else (cv.tile(kind, s),)):
        launches = [cv.launch(kind, s, t, phase=ph) for ph in (s.phases if kind == "dgrad" else [(0, 0)])]
        yield {"conv": names[0], "count": len(names), "kind": kind, **vars(s), "tile": t,
               "programs": sum(g for _, g in launches), "launches": len(launches),
               "split": launches[0][0].get("SPLIT"), "gflop": round(s.flops / 1e9, 3)}


def step_time(fn, *args) -> float:
  """Median seconds of one fn call, REPS per replayed TinyJit call."""
  from tinygrad import Tensor
  return jit_seconds(lambda *a: Tensor.realize(*[fn(*a) for _ in range(REPS)]), *args, calls=CALLS, per_call=REPS)


def bench(s: cv.Shape, names: list[str], tiles: str, best: dict):
  from tinygrad import Tensor, dtypes
  x = Tensor.randn(s.N, s.C, s.H, s.W, dtype=dtypes.half).realize()
  w = (Tensor.randn(s.K, s.C, s.R, s.S, dtype=dtypes.half) * (2 / (s.C * s.R * s.S)) ** 0.5).realize()
  dy = Tensor.randn(s.N, s.K, s.P, s.Q, dtype=dtypes.half).realize()
  def ref_grad(x, w, dy, wrt): return (x.conv2d(w, stride=s.ST, padding=s.PAD).float() * dy.float()).sum().gradient(wrt)[0]
  ours = {"fwd": lambda x, w, dy: cv.conv2d(x, w, s.ST, s.PAD), "dgrad": lambda x, w, dy: cv.dgrad(dy, w, s),
          "wgrad": lambda x, w, dy: cv.wgrad(dy, x, s)}
  theirs = {"fwd": lambda x, w, dy: x.conv2d(w, stride=s.ST, padding=s.PAD),
            "dgrad": lambda x, w, dy: ref_grad(x, w, dy, x), "wgrad": lambda x, w, dy: ref_grad(x, w, dy, w)}
  head = {"conv": names[0], "count": len(names), **vars(s)}
  for kind in kinds(names):
    ref = theirs[kind](x, w, dy).float().realize()
    s_ref = step_time(theirs[kind], x, w, dy)
    print(json.dumps({**head, "kind": kind, "impl": "tinygrad", "ms": round(s_ref * 1e3, 4),
                      "tflops": round(s.flops / s_ref / 1e12, 1)}), flush=True)
    best[(kind, s)] = {**head, "kind": kind, "tinygrad_ms": round(s_ref * 1e3, 4)}
    for t in (cv.TILES if tiles == "all" else (cv.tile(kind, s),)):
      try:
        with tile_override(cv.TUNED, (kind, s), t):   # conv_tiles' entry put back after
          err = ((ours[kind](x, w, dy).float() - ref).abs().max() / ref.abs().max()).item()
          sec = step_time(ours[kind], x, w, dy)
      except Exception as e:   # a tile that does not fit (shared memory, registers) is reported, not fatal
        print(json.dumps({**head, "kind": kind, "tile": t, "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
        continue
      row = {**head, "kind": kind, "impl": "triton", "tile": t, "ms": round(sec * 1e3, 4),
             "tflops": round(s.flops / sec / 1e12, 1), "max_rel_diff_vs_tinygrad": err}
      print(json.dumps(row), flush=True)
      if sec * 1e3 < best[(kind, s)].get("ms", float("inf")): best[(kind, s)] |= {"tile": t, "ms": round(sec * 1e3, 4)}
    del ref


def build_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
  p.add_argument("--bs", type=positive, nargs="+", default=[256], help="images per step, one run per value")
  p.add_argument("--platform", default="1xH200", help="also measure this ResNet platform's per-GPU BS")
  p.add_argument("--res", type=positive, default=224, help="image side in pixels")
  p.add_argument("--tiles", choices=("all", "rule"), default="all",
                 help="every tile of conv.TILES, or tile()'s choice (conv_tiles' or the rule's)")
  p.add_argument("--only", metavar="NAME", help="only the conv of this state-dict name (e.g. layer2.0.conv2)")
  p.add_argument("--dry-run", action="store_true", help="print what would be launched; needs no GPU")
  return p


def main():
  p = build_parser()
  args = p.parse_args()
  from tinyperf.benchmarks.common.config import ConfigError
  from tinyperf.benchmarks.registry import load_config
  try: k = load_config("resnet", args.platform).knobs
  except (ConfigError, FileNotFoundError) as e: p.error(f"--platform {args.platform}: {e}")
  sizes = list(dict.fromkeys([*args.bs, k["BS"] // k["GPUS"]]))
  for bs in sizes:
    shapes = resnet50_convs(bs, args.res)
    if args.only:
      shapes = {s: names for s, names in shapes.items() if args.only in names}
      if not shapes: p.error(f"--only {args.only}: no conv of ResNet-50 has that name (e.g. conv1, layer2.0.conv2)")
    if args.dry_run:
      for row in plan_rows(shapes, args.tiles): print(json.dumps(row))
      continue
    best = {}
    for s, names in shapes.items(): bench(s, names, args.tiles, best)
    for row in best.values(): print(json.dumps({"best": row}), flush=True)
    total = {side: sum(r[f"{side}ms"] * r["count"] for r in best.values() if f"{side}ms" in r)
             for side in ("", "tinygrad_")}
    print(json.dumps({"bs": bs, "network_convs_triton_ms": round(total[""], 3),
                      "network_convs_tinygrad_ms": round(total["tinygrad_"], 3)}), flush=True)


if __name__ == "__main__":
  main()
