"""Which JPEG decoder should the ResNet loader use? Measures img/s on one core for the train and eval pipelines.

  python -m lab.resnet.bench_decode [--images 200] [--rounds 3] [--out bench.json]

Corpus: JPEGs made from the real photos that ship in scikit-image's wheel (a bench-only dependency:
`pip install scikit-image`), cropped and resized to ImageNet-like sizes (short side 333-500, the usual 4:3 / 3:2 /
square shapes), with film-grain noise so files weigh about what ImageNet's do (~110 KB), quality 90, 4:2:0.
Methods (each optional library is skipped with a note when it is not installed):
  pillow          Pillow, full decode + one resize (tinyperf.benchmarks.resnet.data with draft=False)
  pillow-draft    Pillow, DCT-domain 1/2-1/4-1/8 decode when the crop allows it (the loader's default)
                  (run in a venv where pillow-simd replaces Pillow, with --corpus, these two measure pillow-simd)
  simplejpeg      simplejpeg decode (power-of-two downscale when legal) + Pillow resize
  turbojpeg       PyTurboJPEG on the system libturbojpeg (same downscale rule) + Pillow resize
Every method uses the loader's crop sampling and RNG, so all decode the same crops; "diff" is the mean absolute
difference to `pillow` in uint8 levels. Timing pins the process to one core; per image, each method runs --rounds
times interleaved with the others and its fastest run counts (robust on a machine shared with other jobs).
"""
from __future__ import annotations
import argparse
import io
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

from tinyperf.benchmarks.resnet.data import decode_eval, decode_train, eval_crop_box, image_rng, random_resized_crop_params

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "motorcycle_left", "motorcycle_right", "hubble_deep_field",
          "retina", "immunohistochemistry", "colorwheel")
SHAPES = ((500, 375), (375, 500), (500, 333), (333, 500), (500, 500), (400, 300), (480, 360))


def make_corpus(n: int, seed: int = 0) -> list[bytes]:
  try:
    import skimage.data as skd
  except ImportError:
    sys.exit("bench_decode needs scikit-image for its photos (bench-only dependency): pip install scikit-image")
  photos = []
  for name in PHOTOS:
    try: a = getattr(skd, name)()
    except Exception: continue  # noqa: BLE001 -- a photo that needs a download (pooch) is skipped
    if a.ndim == 3 and a.shape[2] >= 3 and min(a.shape[:2]) >= 256: photos.append(Image.fromarray(a[..., :3]).convert("RGB"))
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    src = photos[i % len(photos)]
    w, h = SHAPES[rng.integers(len(SHAPES))]
    if rng.random() < 0.3: w, h = int(w * 1.3), int(h * 1.3)  # some larger images, as in ImageNet's tail
    sw, sh = src.size
    f = rng.uniform(0.6, 1.0)
    cw, ch = int(sw * f), int(sh * f)
    x0, y0 = rng.integers(0, sw - cw + 1), rng.integers(0, sh - ch + 1)
    im = src.resize((w, h), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
    a = np.asarray(im).astype(np.float32) + rng.normal(0, 16, size=(h, w, 3))  # grain: realistic entropy per pixel
    buf = io.BytesIO()
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90, subsampling="4:2:0")
    out.append(buf.getvalue())
  return out


def _pow2_scale(crop_w: float, crop_h: float, size: int) -> int:
  return next((s for s in (8, 4, 2) if crop_w / s >= size and crop_h / s >= size), 1)


def _resize(arr: np.ndarray, scale: float, box, size: int) -> np.ndarray:
  l, t, r, b = box
  return np.asarray(Image.fromarray(arr).resize((size, size), Image.BILINEAR, box=(l / scale, t / scale, r / scale, b / scale)))


def methods(size: int) -> dict:
  """name -> (train(data, rng) -> array, eval(data) -> array) or a string saying why it is unavailable."""
  def pil(draft):
    return (lambda d, rng: decode_train(io.BytesIO(d), size, rng, draft=draft),
            lambda d: decode_eval(io.BytesIO(d), size, draft=draft))
  out = {"pillow": pil(False), "pillow-draft": pil(True)}

  def generic(header, decode):  # header(data) -> (w, h); decode(data, s) -> RGB array at 1/s
    def train(d, rng):
      w, h = header(d)
      l, t, cw, ch = random_resized_crop_params(w, h, rng)
      flip = rng.random() < 0.5
      s = _pow2_scale(cw, ch, size)
      a = decode(d, s)
      r = _resize(a, s, (l, t, l + cw, t + ch), size)
      return r[:, ::-1] if flip else r
    def ev(d):
      w, h = header(d)
      box = eval_crop_box(w, h, size)
      s = _pow2_scale(box[2] - box[0], box[3] - box[1], size)
      return _resize(decode(d, s), s, box, size)
    return train, ev

  try:
    import simplejpeg
    def sj_header(d): h, w, _, _ = simplejpeg.decode_jpeg_header(d); return w, h
    def sj_decode(d, s):
      if s == 1: return simplejpeg.decode_jpeg(d, colorspace="RGB")
      w, h = sj_header(d)
      return simplejpeg.decode_jpeg(d, colorspace="RGB", min_width=-(-w // s), min_height=-(-h // s))
    out[f"simplejpeg {simplejpeg.__version__}"] = generic(sj_header, sj_decode)
  except ImportError as e:
    out["simplejpeg"] = f"not installed ({e})"
  try:
    import turbojpeg
    tj = turbojpeg.TurboJPEG()
    def tj_header(d): w, h, _, _ = tj.decode_header(d); return w, h
    def tj_decode(d, s):
      return tj.decode(d, pixel_format=turbojpeg.TJPF_RGB, scaling_factor=None if s == 1 else (1, s))
    ver = getattr(turbojpeg, "__version__", "?")
    out[f"turbojpeg {ver}"] = generic(tj_header, tj_decode)
  except (ImportError, RuntimeError, OSError) as e:
    out["turbojpeg"] = f"not available ({e})"
  return out


def bench(corpus: list[bytes], size: int, rounds: int, seed: int = 0) -> dict:
  """Per image, every method runs `rounds` times back to back and the fastest run counts; img/s = images / sum of those
  minimum times. Interleaving per image and taking minima filters out the bursts of a shared machine far better than
  timing whole passes (whole-pass numbers moved by +-15 % between identical runs here)."""
  ms = {k: v for k, v in methods(size).items()}
  live = {k: v for k, v in ms.items() if not isinstance(v, str)}
  tmin = {k: {"train": 0.0, "eval": 0.0} for k in live}
  outs = {k: ([], []) for k in live}
  for i, d in enumerate(corpus):
    for phase in ("train", "eval"):
      best = {k: float("inf") for k in live}
      for _ in range(rounds):
        for name, (train, ev) in live.items():
          t = time.perf_counter()
          r = train(d, image_rng(seed, 0, i)) if phase == "train" else ev(d)
          best[name] = min(best[name], time.perf_counter() - t)
          if _ == 0: outs[name][0 if phase == "train" else 1].append(r)
      for k in live: tmin[k][phase] += best[k]
  base = tmin["pillow"]
  ref_train, ref_eval = outs["pillow"]
  results = {}
  for name, m in ms.items():
    if isinstance(m, str): results[name] = {"skipped": m}; continue
    tr, va = outs[name]
    results[name] = {
      "train_img_s": len(corpus) / tmin[name]["train"], "eval_img_s": len(corpus) / tmin[name]["eval"],
      "train_ratio": base["train"] / tmin[name]["train"], "eval_ratio": base["eval"] / tmin[name]["eval"],
      "train_diff": float(np.mean([np.abs(a.astype(np.int16) - b).mean() for a, b in zip(tr, ref_train)])),
      "eval_diff": float(np.mean([np.abs(a.astype(np.int16) - b).mean() for a, b in zip(va, ref_eval)]))}
  return results


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m lab.resnet.bench_decode` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog="python -m lab.resnet.bench_decode", description=__doc__.splitlines()[0])
  p.add_argument("--images", type=int, default=200, help="corpus size (default 200)")
  p.add_argument("--rounds", type=int, default=5, help="runs per image and method; the fastest counts (default 5)")
  p.add_argument("--size", type=int, default=224, help="crop size (default 224)")
  p.add_argument("--out", type=Path, help="also write the results as JSON here")
  p.add_argument("--save-corpus", type=Path, metavar="DIR", help="write the corpus JPEGs to DIR (to rerun elsewhere)")
  p.add_argument("--corpus", type=Path, metavar="DIR", help="use the JPEGs in DIR instead of making them (no "
                 "scikit-image needed, e.g. in a venv with pillow-simd)")
  return p


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  from tinyperf.benchmarks.common.feeding import host_cores
  host = host_cores()   # before pinning ourselves to one core
  try: os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})  # one core: the numbers are per core
  except (AttributeError, OSError): pass
  if args.corpus: corpus = [f.read_bytes() for f in sorted(args.corpus.glob("*.jpg"))][:args.images]
  else: corpus = make_corpus(args.images)
  if args.save_corpus:
    args.save_corpus.mkdir(parents=True, exist_ok=True)
    for i, d in enumerate(corpus): (args.save_corpus / f"{i:04d}.jpg").write_bytes(d)
  sizes = [Image.open(io.BytesIO(d)).size for d in corpus]
  info = {"images": len(corpus), "mean_kb": sum(map(len, corpus)) / len(corpus) / 1000,
          "mean_size": [float(np.mean([s[0] for s in sizes])), float(np.mean([s[1] for s in sizes]))],
          "pillow": Image.__version__, "python": platform.python_version(), "cpu": platform.processor() or platform.machine()}
  res = bench(corpus, args.size, args.rounds)
  print(f"corpus: {info['images']} JPEGs, mean {info['mean_size'][0]:.0f}x{info['mean_size'][1]:.0f}, "
        f"{info['mean_kb']:.0f} KB; Pillow {info['pillow']}; one core")
  print("| method | train img/s | x Pillow | eval img/s | x Pillow | mean abs diff train / eval (levels) |")
  print("|---|---|---|---|---|---|")
  for name, r in res.items():
    if "skipped" in r: print(f"| {name} | {r['skipped']} | | | | |"); continue
    print(f"| {name} | {r['train_img_s']:.0f} | {r['train_ratio']:.2f} | {r['eval_img_s']:.0f} | {r['eval_ratio']:.2f} "
          f"| {r['train_diff']:.2f} / {r['eval_diff']:.2f} |")
  budgets = feeding_lines(res["pillow-draft"]["train_img_s"], args.size, host)
  print(f"\nFeeding budget at the loader's measured train rate (pillow-draft, "
        f"{res['pillow-draft']['train_img_s']:.0f} img/s per core) and each config's FEED_IMG_S_PER_GPU:")
  for line in budgets: print(f"  {line}")
  if args.out: args.out.write_text(json.dumps({"info": info, "results": res, "feeding": budgets}, indent=1))
  return 0


def feeding_lines(per_core: float, size: int, host: int) -> list[str]:
  """For every ResNet platform: the cores it needs at `per_core` loader img/s measured at crop `size`
  (benchmarks/common/feeding.py), against `host` cores, and what its config states. A platform with another
  IMAGE_SIZE keeps its config's own rate (this run's does not apply to it)."""
  from tinyperf.benchmarks.common.config import available_platforms
  from tinyperf.benchmarks.registry import load_config
  from tinyperf.benchmarks.common.feeding import budget
  out = []
  for plat in available_platforms("resnet"):
    cfg = load_config("resnet", plat, environ={})
    if cfg["IMAGE_SIZE"] != size:
      out.append(f"{budget(cfg, host).line()} [IMAGE_SIZE {cfg['IMAGE_SIZE']}: the config's own loader rate; this "
                 f"run measured {size}]")
      continue
    out.append(f"{budget(cfg, host, per_core).line()} [config: {cfg['LOADER_IMG_S_PER_CORE']:.0f} img/s per core -> "
               f"{budget(cfg, host).needed} cores]")
  return out


if __name__ == "__main__":
  sys.exit(main())
