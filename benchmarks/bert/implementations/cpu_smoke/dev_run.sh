#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# BERT-large pretraining (Wikipedia) on cpu_smoke: RUN phase only, for development (no INIT, so BEAM searches inside the run).
# Knobs from config.yaml (any one can be overridden by an environment variable of the same name):
#   DEV               = CPU
#   GPUS              = 1
#   DEFAULT_FLOAT     = FLOAT
#   TRAIN_BEAM        = 0
#   EVAL_BEAM         = 0
#   NUM_WORKERS       = 1
#   SEED_BITS         = 31
#   BS                = 16
#   EVAL_BS           = 16
#   LR                = 0.02
#   BETA1             = 0.9
#   BETA2             = 0.999
#   EPSILON           = 1e-06
#   DECAY             = 0.01
#   POLY_POWER        = 1.0
#   WARMUP_STEPS      = 20
#   TRAIN_STEPS       = 300
#   LOSS_SCALER       = 1.0
#   CLIP_NORM         = 1.0
#   TARGET            = 0.06
#   EVAL_SAMPLES      = 256
#   EVAL_STEP_FREQ    = 50
#   MAX_SEQ_LEN       = 64
#   MAX_PREDICTIONS   = 10
#   BERT_LAYERS       = 2
#   BERT_HIDDEN       = 64
#   BERT_HEADS        = 2
#   BERT_INTERMEDIATE = 256
#   INIT_BERT_LAYERS  = 2
#   INIT_CHECKPOINT   = 0
#   USE_ATOMICS       = 1
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the entrypoint is a module of this tree
: "${DATA_DIR:?set DATA_DIR to the prepared Wikipedia shards, eval set and checkpoint (tinyperf prep wiki download|pretrain|eval|checkpoint)}"
RESULTS_DIR="${RESULTS_DIR:-results/cpu_smoke/bert}"
# 31-bit seed from the OS entropy pool (not $RANDOM: 15 bits collide across runs)
SEED="${SEED:-$(python3 -c 'import os; print(int.from_bytes(os.urandom(4), "little") >> 1)')}"
# INIT fills this kernel/BEAM cache and RUN reuses it; one file per run so runs never share a search
export CACHEDB="${CACHEDB:-$RESULTS_DIR/cache/tinygrad_$SEED.db}"

python3 -m benchmarks.bert.train --platform cpu_smoke --phase run \
  --seed "$SEED" --data "$DATA_DIR" --results "$RESULTS_DIR" --log "$RESULTS_DIR/dev_$SEED.txt"
