"""PyTorch ResNet-50 train step: the baseline `python -m lab.bench resnet --against torch` compares tinygrad with.

Not part of the product (PyTorch is no dependency): it runs where PyTorch is installed, e.g. the GPU machines.
Same model (torchvision ResNet-50, 1000 classes), batch, image size and label smoothing as ours; bf16 autocast,
channels_last, SGD with momentum; synthetic data already on the GPU. Prints one JSON line per mode.

  python -m lab.resnet.bench_torch --bs 256 --steps 30 --modes eager,compile
"""
from __future__ import annotations
import argparse
import json
import time


def bench(mode: str, bs: int, steps: int, warmup: int, image_size: int, dtype: str) -> dict:
  import torch
  import torchvision
  torch.backends.cudnn.benchmark = True
  torch.backends.cuda.matmul.allow_tf32 = True
  torch.backends.cudnn.allow_tf32 = True
  dev = torch.device("cuda")
  model = torchvision.models.resnet50(num_classes=1000).to(dev).to(memory_format=torch.channels_last)
  opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
  loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
  amp = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
  scaler = torch.amp.GradScaler("cuda", enabled=dtype == "fp16")
  x = torch.randint(0, 255, (bs, 3, image_size, image_size), device=dev, dtype=torch.uint8)
  y = torch.randint(0, 1000, (bs,), device=dev)
  mean = torch.tensor([123.68, 116.78, 103.94], device=dev).view(1, 3, 1, 1)

  def step(x, y):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=amp):
      inp = (x.float() - mean).contiguous(memory_format=torch.channels_last)
      loss = loss_fn(model(inp).float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt); scaler.update()
    return loss

  fn = torch.compile(step) if mode == "compile" else step
  torch.cuda.reset_peak_memory_stats()
  t0 = time.perf_counter()
  for _ in range(warmup): fn(x, y)
  torch.cuda.synchronize()
  warm_s = time.perf_counter() - t0
  times = []
  for _ in range(steps):
    t = time.perf_counter(); fn(x, y); torch.cuda.synchronize(); times.append(time.perf_counter() - t)
  med = sorted(times)[len(times) // 2]
  return {"framework": "torch", "torch": torch.__version__, "mode": mode, "dtype": dtype, "bs": bs, "gpus": 1,
          "median_step_ms": med * 1e3, "img_per_s": bs / med, "peak_mem_gb": torch.cuda.max_memory_allocated() / 1e9,
          "warmup_s": warm_s, "gpu": torch.cuda.get_device_name(0)}


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m lab.resnet.bench_torch` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--bs", type=int, default=256)
  p.add_argument("--steps", type=int, default=30)
  p.add_argument("--warmup", type=int, default=10)
  p.add_argument("--image-size", type=int, default=224)
  p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
  p.add_argument("--modes", default="eager,compile")
  return p


def main():
  a = build_parser().parse_args()
  for mode in a.modes.split(","):
    print(json.dumps(bench(mode, a.bs, a.steps, a.warmup, a.image_size, a.dtype)), flush=True)


if __name__ == "__main__":
  main()
