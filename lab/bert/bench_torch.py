"""PyTorch BERT-large pretraining step: the baseline `python -m lab.bench bert --against torch` compares tinygrad with.

Not part of the product (PyTorch is no dependency): it runs where PyTorch is installed, e.g. the GPU machines.
The same model as benchmarks/bert/model.py (post-LN BERT-large, GELU, MLM head tied to the word embeddings and
evaluated only at the masked positions, NSP head), the same batch, sequence length and predictions per sequence;
written here in plain torch (not transformers) so both sides compute the same thing: attention is
F.scaled_dot_product_attention (flash/memory-efficient kernels, attention dropout inside them), dropout 0.1 on the
hidden states and attention probabilities as ours and the MLPerf reference (--dropout 0 for a step without it),
autocast bf16 or fp16, fused AdamW standing in for LAMB (torch has no LAMB; LAMB adds one norm ratio per tensor, a
small cost), synthetic data already on the GPU.
Prints one JSON line per mode.

  python -m lab.bert.bench_torch --bs 96 --steps 20 --modes eager,compile
"""
from __future__ import annotations
import argparse
import json
import time


def make_bert(torch, layers: int, hidden: int, heads: int, inter: int, vocab: int = 30522, positions: int = 512,
              dropout: float = 0.1):
  nn, F = torch.nn, torch.nn.functional

  class Layer(nn.Module):
    def __init__(self):
      super().__init__()
      self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
      self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)
      self.up, self.down = nn.Linear(hidden, inter), nn.Linear(inter, hidden)
      self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):  # x (B, L, H), mask (B, 1, 1, L) additive
      B, L, H = x.shape
      q, k, v = self.qkv(x).view(B, L, 3, heads, H // heads).permute(2, 0, 3, 1, 4)   # 3 x (B, heads, L, H/heads)
      a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout if self.training else 0.0)
      x = self.ln1(x + self.drop(self.proj(a.transpose(1, 2).reshape(B, L, H))))
      return self.ln2(x + self.drop(self.down(F.gelu(self.up(x)))))

  class Bert(nn.Module):
    def __init__(self):
      super().__init__()
      self.word, self.pos, self.segment = nn.Embedding(vocab, hidden), nn.Embedding(positions, hidden), nn.Embedding(2, hidden)
      self.ln, self.drop = nn.LayerNorm(hidden, eps=1e-12), nn.Dropout(dropout)
      self.layers = nn.ModuleList([Layer() for _ in range(layers)])
      self.pool = nn.Linear(hidden, hidden)
      self.mlm_dense, self.mlm_ln = nn.Linear(hidden, hidden), nn.LayerNorm(hidden, eps=1e-12)
      self.mlm_bias = nn.Parameter(torch.zeros(vocab))
      self.nsp = nn.Linear(hidden, 2)

    def forward(self, ids, mask, seg, mlm_pos, mlm_ids, mlm_w, nsp_labels):
      B, L = ids.shape
      x = self.drop(self.ln(self.word(ids) + self.pos.weight[:L] + self.segment(seg)))
      mask_add = ((1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0)
      for layer in self.layers: x = layer(x, mask_add)
      # MLM only at the masked positions (B, P, H), decoder tied to the word embeddings
      picked = torch.gather(x, 1, mlm_pos[:, :, None].expand(-1, -1, x.shape[-1]))
      h = self.mlm_ln(F.gelu(self.mlm_dense(picked)))
      logits = (h @ self.word.weight.T + self.mlm_bias).float()                        # (B, P, vocab)
      tok = F.cross_entropy(logits.flatten(0, 1), mlm_ids.flatten(), reduction="none")
      mlm = (tok * mlm_w.flatten()).sum() / mlm_w.sum().clamp(min=1)
      nsp = F.cross_entropy(self.nsp(torch.tanh(self.pool(x[:, 0]))).float(), nsp_labels.flatten())
      return mlm + nsp

  return Bert()


def bench(mode: str, bs: int, steps: int, warmup: int, seq: int, preds: int, layers: int, dtype: str,
          device: str = "cuda", dropout: float = 0.1) -> dict:
  import torch
  torch.backends.cuda.matmul.allow_tf32 = True
  dev = torch.device(device)
  sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
  model = make_bert(torch, layers, 1024, 16, 4096, dropout=dropout).to(dev).train()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6, fused=dev.type == "cuda")
  amp = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
  scaler = torch.amp.GradScaler(dev.type, enabled=dtype == "fp16")
  g = torch.Generator(device=dev).manual_seed(0)
  batch = dict(ids=torch.randint(0, 30522, (bs, seq), device=dev, generator=g),
               mask=torch.ones((bs, seq), device=dev, dtype=torch.int32),
               seg=torch.randint(0, 2, (bs, seq), device=dev, generator=g),
               mlm_pos=torch.randint(0, seq, (bs, preds), device=dev, generator=g),
               mlm_ids=torch.randint(0, 30522, (bs, preds), device=dev, generator=g),
               mlm_w=torch.ones((bs, preds), device=dev), nsp_labels=torch.randint(0, 2, (bs, 1), device=dev, generator=g))

  def step(b):
    opt.zero_grad(set_to_none=True)
    with torch.autocast(dev.type, dtype=amp): loss = model(**b)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # global-norm clipping at 1.0, as ours
    scaler.step(opt); scaler.update()
    return loss

  fn = torch.compile(step) if mode == "compile" else step
  if dev.type == "cuda": torch.cuda.reset_peak_memory_stats()
  t0 = time.perf_counter()
  for _ in range(warmup): fn(batch)
  sync()
  warm_s = time.perf_counter() - t0
  times = []
  for _ in range(steps):
    t = time.perf_counter(); fn(batch); sync(); times.append(time.perf_counter() - t)
  med = sorted(times)[len(times) // 2]
  return {"framework": "torch", "torch": torch.__version__, "mode": mode, "dtype": dtype, "bs": bs, "gpus": 1,
          "seq": seq, "layers": layers, "dropout": dropout, "median_step_ms": med * 1e3, "seq_per_s": bs / med,
          "peak_mem_gb": torch.cuda.max_memory_allocated() / 1e9 if dev.type == "cuda" else None, "warmup_s": warm_s,
          "params": sum(p.numel() for p in model.parameters()),
          "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"}


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m lab.bert.bench_torch` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--bs", type=int, default=96)
  p.add_argument("--steps", type=int, default=20)
  p.add_argument("--warmup", type=int, default=5)
  p.add_argument("--seq", type=int, default=512)
  p.add_argument("--preds", type=int, default=76)
  p.add_argument("--layers", type=int, default=24)
  p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
  p.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout (0.1 as ours and MLPerf's)")
  p.add_argument("--modes", default="eager,compile")
  p.add_argument("--device", default="cuda", help="torch device (cpu: a correctness check of this script, not a figure)")
  return p


def main():
  a = build_parser().parse_args()
  for mode in a.modes.split(","):
    print(json.dumps(bench(mode, a.bs, a.steps, a.warmup, a.seq, a.preds, a.layers, a.dtype, a.device, a.dropout)), flush=True)


if __name__ == "__main__":
  main()
