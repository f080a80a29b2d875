"""BERT for MLPerf pretraining (masked LM + next-sentence prediction), written on tinygrad 0.14.0 (which ships no models).

Facts followed (the MLCommons reference's BERT-large: hidden 1024, intermediate 4096, 16 heads, 24 layers, vocab 30522,
2 token types, 512 positions, dropout 0.1, LayerNorm eps 1e-12):
  - embeddings: word + position + token type, LayerNorm, dropout;
  - encoder layer: Q/K/V -> scaled dot-product attention with the additive mask (1 - input_mask) * -10000 and attention
    dropout -> output dense -> dropout -> residual LayerNorm -> intermediate dense + exact erf GELU -> output dense ->
    dropout -> residual LayerNorm;
  - pooler: dense + tanh on token 0; NSP head: Linear(hidden, 2) on the pooled output;
  - MLM head: the MAX_PREDICTIONS masked positions are gathered (one-hot matmul), dense -> GELU -> LayerNorm, logits =
    matmul with the *tied* word-embedding matrix + a separate vocab-sized bias.
Initialisation: every dense kernel and embedding table 0.02 * truncated normal (+-2 std), biases 0, LayerNorm 1/0.

Precision: master weights are float32. Dense layers and attention matmuls compute in dtypes.default_float (fp16 under
DEFAULT_FLOAT=HALF); LayerNorm, GELU, the attention softmax, the logits and the losses compute in float32. (tinygrad's
own scaled_dot_product_attention casts the scores back to the input dtype before its softmax, so attention is written
out here; ATTENTION_SOFTMAX=HALF does as it does: 3.26 GiB less per GPU in the tinybox configs, docs/bert_train.md.)

State-dict names mirror the TF checkpoint's variable names ("bert/encoder/layer_3/attention/self/query/kernel" ->
"bert.encoder.layer.3.attention.self.query.weight"), see benchmarks/bert/convert.py. Linear weights are stored
(out, in) like torch; TF kernels are (in, out) and are transposed by the converter.

Upstream (tinycorp) bugs fixed here by following the MLCommons reference
(language_model/tensorflow/bert/run_pretraining.py), each commented at the code:
  - MLM loss masks by masked_lm_weights > 0 (upstream passed the weights as ignore_index, i.e. masked labels != weight,
    which also drops any real label equal to 1) and averages over real predictions;
  - NSP loss is the 2-way softmax cross entropy of the (B, 2) logits against the (B,) labels, the reference's
    get_next_sentence_output (upstream: BCE broadcast of the (B, 1) label over both logits);
  - NSP accuracy compares (B,) to (B,) (upstream compared (B,) with (B, 1): a B x B broadcast);
  - eval MLM accuracy is total correct / total real predictions over exactly EVAL_SAMPLES samples (eval_sums here,
    aggregation in benchmarks/bert/steps.py), not the mean of per-batch means over a wrapped-around iterator.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from tinygrad import Tensor, dtypes
from tinygrad.helpers import prod, USE_ATOMICS
from tinygrad.uop.ops import UOp, Ops, KernelInfo, AxisType
from tinygrad.nn.state import get_state_dict

from tinyperf.benchmarks.common.config import BERT_DROPOUT, bert_dropout

INIT_STD = 0.02
LN_EPS = 1e-12
MASK_ADD = -10000.0


@dataclass(frozen=True)
class BertConfig:
  layers: int = 24
  hidden: int = 1024
  heads: int = 16
  intermediate: int = 4096
  vocab: int = 30522
  max_positions: int = 512
  type_vocab: int = 2
  hidden_dropout: float = BERT_DROPOUT
  attention_dropout: float = BERT_DROPOUT
  half_softmax: bool = False      # ATTENTION_SOFTMAX=HALF: the softmax reads the scores in the compute dtype
  kernels: str = "tinygrad"       # KERNELS=triton: GEMMs, attention, add + LayerNorm as benchmarks/kernels' Triton

  @staticmethod
  def from_knobs(knobs: Mapping, layers: int | None = None, vocab: int = 30522) -> "BertConfig":
    """BERT_LAYERS/HIDDEN/HEADS/INTERMEDIATE from a platform config; `layers` overrides (INIT_BERT_LAYERS)."""
    return BertConfig(layers=int(layers if layers is not None else knobs["BERT_LAYERS"]), hidden=int(knobs["BERT_HIDDEN"]),
                      heads=int(knobs["BERT_HEADS"]), intermediate=int(knobs["BERT_INTERMEDIATE"]), vocab=vocab,
                      max_positions=max(512, int(knobs["MAX_SEQ_LEN"])),
                      hidden_dropout=bert_dropout(knobs), attention_dropout=bert_dropout(knobs),
                      half_softmax=knobs.get("ATTENTION_SOFTMAX", "FLOAT") == "HALF",
                      kernels=knobs.get("KERNELS", "tinygrad"))


def trunc_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  """Standard normal truncated to [-2, 2]: rejected draws are redrawn until none is left (exact truncated normal)."""
  z = rng.standard_normal(shape, dtype=np.float32)
  while (bad := np.abs(z) > 2.0).any(): z[bad] = rng.standard_normal(int(bad.sum()), dtype=np.float32)
  return z


def _param(shape: tuple[int, ...], rng: np.random.Generator | None, kind: str) -> Tensor:
  """float32 parameter: kind "normal" (0.02 * truncated normal), "zeros" or "ones", drawn on the host when rng is given;
  rng None -> an unallocated placeholder (Tensor.empty: no memory, no kernels) to count parameters, trace shapes, or
  be replaced by checkpoint weights."""
  if rng is None: return Tensor.empty(*shape, dtype=dtypes.float32)
  if kind == "normal": a = trunc_normal(rng, shape) * np.float32(INIT_STD)
  else: a = (np.zeros if kind == "zeros" else np.ones)(shape, np.float32)
  return Tensor(np.ascontiguousarray(a, dtype=np.float32))


def gelu(x: Tensor) -> Tensor:
  """Exact GELU x * 0.5 * (1 + erf(x / sqrt 2)), computed in float32, returned in x's dtype."""
  xf = x.float()
  # contiguous, as upstream's: otherwise tinygrad fuses the erf into the next matmul's loads and recomputes it once
  # per output column (cpu_smoke train step 1281 ms -> 433 ms on 2 cores, same losses)
  return (xf * 0.5 * (1.0 + (xf * (1.0 / math.sqrt(2.0))).erf())).cast(x.dtype).contiguous()


class Linear:
  """weight (out, in) float32 0.02 * truncated normal, bias (out,) zeros; computes in dtypes.default_float, with
  tinygrad's matmul or (kernels="triton") the Triton GEMM of benchmarks/kernels."""
  def __init__(self, cin: int, cout: int, rng: np.random.Generator | None = None, kernels: str = "tinygrad"):
    self.weight = _param((cout, cin), rng, "normal")
    self.bias = _param((cout,), rng, "zeros")
    self.kernels = kernels

  def __call__(self, x: Tensor) -> Tensor:  # (..., in) -> (..., out) default float
    df = dtypes.default_float
    if self.kernels == "triton":
      from tinyperf.benchmarks.kernels.matmul import linear   # imports Triton: only where the knob asks for it
      return linear(x.cast(df), self.weight.cast(df), self.bias.cast(df))
    return x.cast(df).linear(self.weight.cast(df).T, self.bias.cast(df))


class LayerNorm:
  """LayerNorm over the last axis in float32 (statistics and affine), output cast to dtypes.default_float. Given a
  residual, of dropout(x, dropout) + residual (added in default float): kernels="triton" fuses the dropout, the add and
  both passes into benchmarks/kernels' add_layernorm."""
  def __init__(self, dim: int, rng: np.random.Generator | None = None, eps: float = LN_EPS, kernels: str = "tinygrad"):
    self.eps = eps
    self.weight = _param((dim,), rng, "ones")
    self.bias = _param((dim,), rng, "zeros")
    self.kernels = kernels

  def __call__(self, x: Tensor, residual: Tensor | None = None, dropout: float = 0.0) -> Tensor:
    df = dtypes.default_float
    if residual is not None and self.kernels == "triton":
      from tinyperf.benchmarks.kernels.layernorm import add_layernorm   # imports Triton: only where the knob asks for it
      return add_layernorm(x.cast(df), residual.cast(df), self.weight, self.bias, self.eps, dropout)
    x = x.dropout(dropout)
    if residual is not None: x = x + residual
    return (x.float().layernorm(eps=self.eps) * self.weight + self.bias).cast(df)


def _backend(t: Tensor | UOp) -> str:
  """"CUDA", "AMD", "CPU", ... for a tensor on one device or on several of one kind."""
  return (t.device[0] if isinstance(t.device, tuple) else t.device).split(":")[0]


# One atomic float add per backend, in the C dialect its renderer writes ({0}: the address, {1}: the value). AMD's is
# the clang builtin tinygrad's HIP renderer compiles without headers; CUDA and NV (RTX 4090) share NVRTC's atomicAdd.
_C_ATOMIC_ADD = "__atomic_fetch_add({0}, {1}, __ATOMIC_RELAXED);"
ATOMIC_ADD = {"CPU": _C_ATOMIC_ADD, "NULL": _C_ATOMIC_ADD, "CUDA": "atomicAdd({0}, {1});", "NV": "atomicAdd({0}, {1});",
              "AMD": "__hip_atomic_fetch_add({0}, {1}, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);"}


def scatter_add_rows(backend: str, max_cols_per_block: int = 256):
  """Kernel (for Tensor.custom_kernel) that adds rows (..., H) into table (V, H) float32 at rows ids (...): one thread
  per (token, column), up to max_cols_per_block columns per workgroup (a power of two dividing H), one atomic add
  each. 16384 tokens x 1024 columns is 16.8 M adds, where the one-hot gradient is a 30522 x 16384 x 1024 reduction."""
  if backend not in ATOMIC_ADD:
    raise NotImplementedError(f"no atomic add known for tinygrad's {backend} backend: set USE_ATOMICS=0 for this "
                              "platform")
  def kernel(table: UOp, rows: UOp, ids: UOp) -> UOp:
    V, H = table.shape
    cols_per_block = math.gcd(H, max_cols_per_block)   # BERT-large 1024 -> 256; the cpu_smoke's 64 -> 64
    rows, ids = rows.reshape((ids.numel(), H)), ids.flatten()
    token, block = UOp.range(ids.numel(), 0), UOp.range(H // cols_per_block, 1)
    lane = UOp.range(cols_per_block, 2, AxisType.WEAK if backend in ("CPU", "NULL") else AxisType.LOCAL)
    col = block * cols_per_block + lane
    id_ = ids[token].load()
    # an id outside the table looked up a zero row (the one-hot matched nothing): it adds 0, at a clamped address
    value = ((id_ >= 0) & (id_ < V)).where(rows[token, col].load().cast(dtypes.float), 0.0)
    address = table.index(id_.clip(0, V - 1).cast(dtypes.weakint), col)
    add = UOp(Ops.CUSTOM, src=(address, value), arg=ATOMIC_ADD[backend])
    return add.end(token, block, lane).sink(arg=KernelInfo(name="embedding_scatter_add", opts_to_apply=()))
  return kernel


def _embedding_grad(grad_out: UOp, call: UOp) -> tuple:
  """d(table) for the lookup below: a zeroed float32 table per device, each device's tokens scatter-added into its own
  copy, then summed across devices (tinygrad's all-reduce). Summing partials, not scattering every token on every
  device, keeps the replicas bit-identical: atomic adds land in no fixed order."""
  table, ids = call.src[1:]
  V, H = table.shape
  devices = table.device
  grad = Tensor.zeros(V, H, dtype=dtypes.float32, device=devices).contiguous().uop
  if isinstance(devices, tuple): grad = grad.unshard(axis=0)            # (ndev * V, H): one private (V, H) per device
  grad = grad.custom_kernel(grad_out, ids, fxn=scatter_add_rows(_backend(table)))[0]
  if isinstance(devices, tuple): grad = Tensor(grad).reshape(len(devices), V, H).sum(0).uop
  return grad.cast(table.dtype), None


def _onehot_lookup(table: Tensor, ids: Tensor) -> Tensor:  # (V, H), (...) int -> (..., H)
  onehot = ids.unsqueeze(-1) == Tensor.arange(table.shape[0])  # (..., V) bool
  return onehot.unsqueeze(-1).where(table, 0).sum(-2)                            # exactly one row is selected


class Embedding:
  """Table (num, dim) float32 0.02 * truncated normal. Looked up by comparing the ids against an arange over the table
  and summing the selected row (no gather op): (..., ) int -> (..., dim) default float.

  The backward is where the two forms differ. USE_ATOMICS=0 (the reference's form) differentiates the one-hot sum: the
  table gradient is a (num, tokens) x (tokens, dim) reduction, 0.5 T multiply-adds at BERT-large's 30522 x 16384 x
  1024, which tinygrad 0.14 compiles to a plain reduction kernel: 72 ms of a 2-layer step's 318 on an H200
  (docs/PERFORMANCE.md). USE_ATOMICS=1 (a platform knob; always on CPU, where the one-hot form was most of the
  cpu_smoke step) scatter-adds each token's gradient row into the table with atomic adds: O(tokens * dim). Both give
  the same gradient up to float32 summation order."""
  def __init__(self, num: int, dim: int, rng: np.random.Generator | None = None):
    self.weight = _param((num, dim), rng, "normal")

  def __call__(self, ids: Tensor) -> Tensor:
    df = dtypes.default_float
    if USE_ATOMICS or _backend(self.weight) == "CPU":
      looked_up = _onehot_lookup(self.weight.as_param(0), ids.as_param(1))
      return Tensor.call(self.weight, ids, fxn=looked_up, grad_fxn=_embedding_grad).cast(df)
    return _onehot_lookup(self.weight.cast(df), ids)


class BertEmbeddings:
  def __init__(self, c: BertConfig, rng=None):
    self.word_embeddings = Embedding(c.vocab, c.hidden, rng)
    self.position_embeddings = Embedding(c.max_positions, c.hidden, rng)
    self.token_type_embeddings = Embedding(c.type_vocab, c.hidden, rng)
    self.LayerNorm = LayerNorm(c.hidden, rng, kernels=c.kernels)
    self.dropout = c.hidden_dropout

  def __call__(self, input_ids: Tensor, segment_ids: Tensor) -> Tensor:  # (B, L) int32 x2 -> (B, L, H)
    L = input_ids.shape[1]
    df = dtypes.default_float
    words = self.word_embeddings(input_ids)                                        # (B, L, H)
    # positions are arange(L): a slice of the table, no lookup
    pos = self.position_embeddings.weight[:L].cast(df).unsqueeze(0)                # (1, L, H)
    if self.token_type_embeddings.weight.shape[0] == 2:                             # two types: a select, no lookup
      tt = self.token_type_embeddings.weight.cast(df)
      types = (segment_ids.unsqueeze(-1) == 1).where(tt[1], tt[0])                 # (B, L, H)
    else:
      types = self.token_type_embeddings(segment_ids)
    return self.LayerNorm(words + pos, types).dropout(self.dropout)


class BertSelfAttention:
  def __init__(self, c: BertConfig, rng=None):
    assert c.hidden % c.heads == 0, f"hidden {c.hidden} not divisible by {c.heads} heads"
    self.heads = c.heads
    self.query, self.key, self.value = (Linear(c.hidden, c.hidden, rng, c.kernels) for _ in range(3))
    self.dropout, self.half_softmax, self.kernels = c.attention_dropout, c.half_softmax, c.kernels

  def __call__(self, x: Tensor, mask_add: Tensor) -> Tensor:  # x (B, L, H), mask_add (B, 1, 1, L) f32 -> (B, L, H)
    B, L, H = x.shape
    nh, d = self.heads, H // self.heads
    if self.kernels == "triton":   # one fused kernel each way: the (B, nh, L, L) scores never reach memory
      from tinyperf.benchmarks.kernels.attention import attention
      from tinyperf.benchmarks.kernels.matmul import linears
      # the three projections in one GEMM launch each way; the attention kernels read and write (B, L, nh, d), the
      # GEMMs' own layout: no transpose copy in forward or backward
      df, lins = dtypes.default_float, (self.query, self.key, self.value)
      qkv = linears(x.cast(df), [lin.weight.cast(df) for lin in lins], [lin.bias.cast(df) for lin in lins])
      q, k, v = (t.reshape(B, L, nh, d) for t in qkv)
      return attention(q, k, v, mask_add, self.dropout).reshape(B, L, H)
    q, k, v = (lin(x).reshape(B, L, nh, d).transpose(1, 2) for lin in (self.query, self.key, self.value))  # (B, nh, L, d)
    scores = q.matmul(k.transpose(-2, -1), dtype=dtypes.float32) * (1.0 / math.sqrt(d)) + mask_add         # (B, nh, L, L) f32
    # HALF: as tinygrad's scaled_dot_product_attention, so the backward keeps (B, nh, L, L) buffers in half, not float
    if self.half_softmax: scores = scores.cast(x.dtype)
    probs = scores.softmax(-1).cast(x.dtype).dropout(self.dropout)                   # softmax in f32 unless half_softmax
    return (probs @ v).transpose(1, 2).reshape(B, L, H)


class BertSelfOutput:
  """dense -> dropout -> LayerNorm(. + residual); also the FFN output block (BertOutput) with other widths."""
  def __init__(self, cin: int, c: BertConfig, rng=None):
    self.dense = Linear(cin, c.hidden, rng, c.kernels)
    self.LayerNorm = LayerNorm(c.hidden, rng, kernels=c.kernels)
    self.dropout = c.hidden_dropout

  def __call__(self, x: Tensor, residual: Tensor) -> Tensor:
    return self.LayerNorm(self.dense(x), residual, self.dropout)


class BertAttention:
  def __init__(self, c: BertConfig, rng=None):
    self.self = BertSelfAttention(c, rng)
    self.output = BertSelfOutput(c.hidden, c, rng)

  def __call__(self, x: Tensor, mask_add: Tensor) -> Tensor: return self.output(self.self(x, mask_add), x)


class BertIntermediate:
  def __init__(self, c: BertConfig, rng=None): self.dense = Linear(c.hidden, c.intermediate, rng, c.kernels)
  def __call__(self, x: Tensor) -> Tensor: return gelu(self.dense(x))          # (B, L, H) -> (B, L, I)


class BertLayer:
  def __init__(self, c: BertConfig, rng=None):
    self.attention = BertAttention(c, rng)
    self.intermediate = BertIntermediate(c, rng)
    self.output = BertSelfOutput(c.intermediate, c, rng)
    self.kernels = c.kernels

  def __call__(self, x: Tensor, mask_add: Tensor) -> Tensor:  # (B, L, H) -> (B, L, H)
    a = self.attention(x, mask_add)
    if self.kernels == "triton":   # dense + GELU + dense as one op: the GELU in the GEMMs' epilogues both ways
      from tinyperf.benchmarks.kernels import matmul   # imports Triton: only where the knob asks for it
      df, up, down = dtypes.default_float, self.intermediate.dense, self.output.dense
      h = matmul.ffn(a.cast(df), *(t.cast(df) for t in (up.weight, up.bias, down.weight, down.bias)))
      return self.output.LayerNorm(h, a, self.output.dropout)
    return self.output(self.intermediate(a), a)


class BertEncoder:
  def __init__(self, c: BertConfig, rng=None): self.layer = [BertLayer(c, rng) for _ in range(c.layers)]
  def __call__(self, x: Tensor, mask_add: Tensor) -> Tensor:
    for layer in self.layer: x = layer(x, mask_add)
    return x


class BertPooler:
  def __init__(self, c: BertConfig, rng=None): self.dense = Linear(c.hidden, c.hidden, rng, c.kernels)
  def __call__(self, x: Tensor) -> Tensor: return self.dense(x[:, 0]).tanh()  # (B, L, H) -> (B, H), token 0 ([CLS])


class BertModel:
  def __init__(self, c: BertConfig, rng=None):
    self.embeddings = BertEmbeddings(c, rng)
    self.encoder = BertEncoder(c, rng)
    self.pooler = BertPooler(c, rng)

  def __call__(self, input_ids: Tensor, segment_ids: Tensor, input_mask: Tensor) -> tuple[Tensor, Tensor]:
    """-> (sequence output (B, L, H), pooled output (B, H)), default float."""
    mask_add = ((1.0 - input_mask.float()) * MASK_ADD).reshape(input_mask.shape[0], 1, 1, input_mask.shape[1])
    seq = self.encoder(self.embeddings(input_ids, segment_ids), mask_add)
    return seq, self.pooler(seq)


class BertPredictionHeadTransform:
  def __init__(self, c: BertConfig, rng=None):
    self.dense = Linear(c.hidden, c.hidden, rng, c.kernels)
    self.LayerNorm = LayerNorm(c.hidden, rng)
  def __call__(self, x: Tensor) -> Tensor: return self.LayerNorm(gelu(self.dense(x)))


class BertLMPredictionHead:
  """transform -> logits = x @ word_embeddings^T + bias. The decoder weight is the word-embedding table, passed in at
  call time (not stored here, so the state dict holds it once); the bias (vocab,) is separate, float32 zeros."""
  def __init__(self, c: BertConfig, rng=None):
    self.transform = BertPredictionHeadTransform(c, rng)
    self.bias = _param((c.vocab,), rng, "zeros")
    self.kernels = c.kernels

  def __call__(self, x: Tensor, word_embeddings: Tensor) -> Tensor:  # (B, P, H) -> (B, P, V) float32
    h = self.transform(x)
    if self.kernels == "triton":   # the step's largest GEMMs (V = 30522): 83 ms forward as tinygrad's kernel at BEAM=0
      from tinyperf.benchmarks.kernels.matmul import gemm
      # the bias in the GEMM's epilogue, as a linear layer's: no pass of its own over the fp32 logits either way
      logits = gemm(h.reshape(-1, h.shape[-1]), word_embeddings.cast(h.dtype), trans_b=True, bias=self.bias,
                    out_dtype=dtypes.float32)
      return logits.reshape(*h.shape[:-1], -1)
    return h.matmul(word_embeddings.cast(h.dtype).T, dtype=dtypes.float32) + self.bias


class BertNSPHead:
  def __init__(self, c: BertConfig, rng=None):
    self.weight = _param((2, c.hidden), rng, "normal")   # TF: cls/seq_relationship/output_weights is (2, H) already
    self.bias = _param((2,), rng, "zeros")
  def __call__(self, pooled: Tensor) -> Tensor:  # (B, H) -> (B, 2) float32
    return pooled.float().linear(self.weight.T, self.bias)


class BertPreTrainingHeads:
  def __init__(self, c: BertConfig, rng=None):
    self.predictions = BertLMPredictionHead(c, rng)
    self.seq_relationship = BertNSPHead(c, rng)


class BertForPretraining:
  """c: shapes; rng: numpy generator for the initial weights, None = unallocated placeholders (shape-only model, or
  to be filled from a checkpoint by load_weights)."""
  def __init__(self, c: BertConfig, rng: np.random.Generator | None = None):
    self.config = c
    self.bert = BertModel(c, rng)
    self.cls = BertPreTrainingHeads(c, rng)

  def __call__(self, input_ids: Tensor, segment_ids: Tensor, input_mask: Tensor,
               masked_lm_positions: Tensor) -> tuple[Tensor, Tensor]:
    """input_ids, segment_ids, input_mask (B, L) int32; masked_lm_positions (B, P) int32
    -> (MLM logits (B, P, V) float32, NSP logits (B, 2) float32)."""
    if self.config.kernels == "triton":   # the kernels' dropout sites: one RNG draw for the whole forward
      from tinyperf.benchmarks.kernels.dropout import step_seeds
      with step_seeds(): seq, pooled = self.bert(input_ids, segment_ids, input_mask)
    else: seq, pooled = self.bert(input_ids, segment_ids, input_mask)             # (B, L, H), (B, H)
    L = seq.shape[1]
    pick = (masked_lm_positions.unsqueeze(-1) == Tensor.arange(L)).cast(seq.dtype)  # (B, P, L)
    masked = pick @ seq                                                            # (B, P, H): gather as a matmul
    mlm = self.cls.predictions(masked, self.bert.embeddings.word_embeddings.weight)
    return mlm, self.cls.seq_relationship(pooled)


# ------------------------------------------------------------------------------------------------ losses and metrics

def mlm_loss_sum(logits: Tensor, labels: Tensor, weights: Tensor, kernels: str = "tinygrad") -> tuple[Tensor, Tensor]:
  """Masked-LM cross entropy summed over real predictions, and their count.

  logits (B, P, V) float32, labels (B, P) int32, weights (B, P) float32 (1 real, 0 padding) -> (sum (), count ()) f32.
  Fix of the reference: a prediction counts when its weight is > 0 (upstream masked `labels != weights`).
  kernels="triton": the same -log_softmax(logits)[label] as benchmarks/kernels' xent kernels, one pass each way."""
  if kernels == "triton":
    from tinyperf.benchmarks.kernels.xent import softmax_nll   # imports Triton: only where the knob asks for it
    nll = softmax_nll(logits, labels)                                                        # (B, P)
  else:
    logp = logits.float().log_softmax(-1)                                                    # (B, P, V)
    onehot = labels.unsqueeze(-1) == Tensor.arange(logits.shape[-1])   # (B, P, V)
    nll = -onehot.where(logp, 0.0).sum(-1)                                                   # (B, P)
  real = weights > 0
  return real.where(nll, 0.0).sum(), real.float().sum()


def nsp_loss_sum(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
  """Next-sentence 2-way softmax cross entropy summed over valid samples, and their count.

  logits (B, 2) float32, labels (B, 1) or (B,) int32 in {0, 1}; -1 marks a padding sample (eval) -> (sum, count).
  The MLCommons reference's loss (language_model/tensorflow/bert/run_pretraining.py, get_next_sentence_output:
  log_softmax of the (B, 2) logits, one-hot labels, mean of -sum(one_hot * log_probs)). tinycorp's code differs: BCE of
  both logits against the broadcast label."""
  y = labels.reshape(-1)                                                                     # (B,)
  logp = logits.float().log_softmax(-1)                                                      # (B, 2)
  nll = -(y == 1).where(logp[:, 1], logp[:, 0])                                              # (B,)
  valid = y >= 0
  return valid.where(nll, 0.0).sum(), valid.float().sum()


def pretraining_loss(mlm_logits: Tensor, nsp_logits: Tensor, batch: Mapping[str, Tensor],
                     kernels: str = "tinygrad") -> tuple[Tensor, Tensor, Tensor]:
  """(total, mlm, nsp): each a mean over its real items; total = mlm + nsp (as the reference). kernels: the model's
  KERNELS (mlm_loss_sum)."""
  ms, mc = mlm_loss_sum(mlm_logits, batch["masked_lm_ids"], batch["masked_lm_weights"], kernels)
  ns, nc = nsp_loss_sum(nsp_logits, batch["next_sentence_labels"])
  mlm, nsp = ms / mc.maximum(1.0), ns / nc.maximum(1.0)
  return mlm + nsp, mlm, nsp


def eval_sums(mlm_logits: Tensor, nsp_logits: Tensor, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
  """Per-batch sums, to be added up over the whole eval set by the caller (accuracy = sum correct / sum count):
  mlm_correct, mlm_count (real predictions), nsp_correct, nsp_count (valid samples), mlm_loss_sum, nsp_loss_sum.
  Fix of the reference: NSP accuracy compares (B,) predictions with (B,) labels (upstream broadcast to B x B)."""
  labels, real = batch["masked_lm_ids"], batch["masked_lm_weights"] > 0
  mlm_correct = (real & (mlm_logits.argmax(-1) == labels)).float().sum()
  y = batch["next_sentence_labels"].reshape(-1)
  nsp_correct = ((y >= 0) & (nsp_logits.argmax(-1) == y)).float().sum()
  ms, mc = mlm_loss_sum(mlm_logits, labels, batch["masked_lm_weights"])
  ns, nc = nsp_loss_sum(nsp_logits, batch["next_sentence_labels"])
  return {"mlm_correct": mlm_correct, "mlm_count": mc, "nsp_correct": nsp_correct, "nsp_count": nc,
          "mlm_loss_sum": ms, "nsp_loss_sum": ns}


# ------------------------------------------------------------------------------------------------ build, place, count

def build_bert(knobs: Mapping, seed: int | None = None, layers: int | None = None, vocab: int = 30522) -> BertForPretraining:
  """Model from the config knobs, initialised on the host from numpy's default_rng(seed) (the same weights on every
  backend and device count; no init kernels to compile), or shape-only placeholders when seed is None."""
  return BertForPretraining(BertConfig.from_knobs(knobs, layers, vocab),
                            rng=None if seed is None else np.random.default_rng(seed))


def place_model(model, devices: Sequence[str]) -> None:
  """Replicate every weight on `devices` (pure data parallel, as upstream), in state-dict order."""
  devices = tuple(devices)
  for t in get_state_dict(model).values():
    t.to_(devices[0] if len(devices) == 1 else devices)
    t.realize()


def _matching(model, weights: Mapping[str, Tensor | np.ndarray], source: str) -> dict[str, Tensor]:
  """model state dict, after checking that `weights` has exactly its names and shapes (ValueError listing the
  missing, unexpected and mis-shaped names otherwise)."""
  sd = get_state_dict(model)
  missing, extra = sorted(sd.keys() - weights.keys()), sorted(weights.keys() - sd.keys())
  bad = [f"{k}: {tuple(weights[k].shape)} in {source}, model wants {sd[k].shape}" for k in sd
         if k in weights and tuple(weights[k].shape) != sd[k].shape]
  if missing or extra or bad:
    raise ValueError(f"{source} does not match the model: missing {missing}, unexpected {extra}, shape mismatches {bad}")
  return sd


def _host_tensor(w) -> Tensor:
  return w if isinstance(w, Tensor) else Tensor(np.ascontiguousarray(w, dtype=np.float32))


def load_weights(model, weights: Mapping[str, Tensor | np.ndarray], source: str = "checkpoint") -> None:
  """Replace every model tensor by the same-named entry of `weights` (float32, exact shapes). Raises ValueError
  listing missing, unexpected or mis-shaped names; nothing is changed then. Call before place_model."""
  for k, t in _matching(model, weights, source).items():
    t.replace(_host_tensor(weights[k]).to(t.device).cast(dtypes.float32).contiguous()).realize()


def assign_weights(model, weights: Mapping[str, Tensor | np.ndarray], source: str = "checkpoint") -> None:
  """load_weights into a placed model whose steps are already captured: each value is written into the existing
  buffer (replicated like it), so the JIT keeps replaying. Same checks, nothing changed on a mismatch."""
  for k, t in _matching(model, weights, source).items():
    first = t.device if isinstance(t.device, str) else t.device[0]   # cast on the model's device, not the host's
    t.assign(_host_tensor(weights[k]).to(first).cast(dtypes.float32).shard_like(t)).realize()


def count_parameters(model) -> int:
  """Parameters (every state-dict tensor; the tied decoder weight counts once), from shapes only."""
  return sum(prod(t.shape) for t in get_state_dict(model).values())


def bert_parameter_formula(c: BertConfig) -> int:
  """Closed form of count_parameters for a config (test cross-check; see the table in tests/unit/test_bert_model.py)."""
  H, I, V, P, T = c.hidden, c.intermediate, c.vocab, c.max_positions, c.type_vocab
  embeddings = (V + P + T) * H + 2 * H
  layer = 4 * (H * H + H) + 2 * H + (H * I + I) + (I * H + H) + 2 * H
  pooler = H * H + H
  mlm = (H * H + H) + 2 * H + V          # transform dense + LayerNorm + output bias (decoder weight tied)
  nsp = 2 * H + 2
  return embeddings + c.layers * layer + pooler + mlm + nsp
