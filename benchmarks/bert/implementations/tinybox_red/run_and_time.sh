#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# BERT-large pretraining (Wikipedia) on tinybox_red: one timed run, INIT then RUN, appending to one result log.
# Knobs from config.yaml (any one can be overridden by an environment variable of the same name):
#   DEV                    = AMD
#   GPUS                   = 6
#   DEFAULT_FLOAT          = HALF
#   TRAIN_BEAM             = 5
#   EVAL_BEAM              = 5
#   IGNORE_JIT_FIRST_BEAM  = 1
#   BEAM_UOPS_MAX          = 8000
#   BEAM_UPCAST_MAX        = 256
#   BEAM_LOCAL_MAX         = 1024
#   BEAM_MIN_PROGRESS      = 5.0
#   HCQDEV_WAIT_TIMEOUT_MS = 100000
#   NUM_WORKERS            = 0
#   SEED_BITS              = 31
#   BS                     = 96
#   EVAL_BS                = 96
#   LR                     = 0.000175
#   BETA1                  = 0.9
#   BETA2                  = 0.999
#   EPSILON                = 1e-06
#   DECAY                  = 0.01
#   POLY_POWER             = 1.0
#   WARMUP_STEPS           = 1
#   TRAIN_STEPS            = 37500
#   LOSS_SCALER            = 2048.0
#   CLIP_NORM              = 1.0
#   TARGET                 = 0.72
#   EVAL_SAMPLES           = 10000
#   EVAL_STEP_FREQ         = 0
#   MAX_SEQ_LEN            = 512
#   MAX_PREDICTIONS        = 76
#   BERT_LAYERS            = 24
#   BERT_HIDDEN            = 1024
#   BERT_HEADS             = 16
#   BERT_INTERMEDIATE      = 4096
#   INIT_BERT_LAYERS       = 2
#   INIT_CHECKPOINT        = 1
#   SUM_DTYPE              = HALF
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the entrypoint is a module of this tree
: "${DATA_DIR:?set DATA_DIR to the prepared Wikipedia shards, eval set and checkpoint (tinyperf prep wiki download|pretrain|eval|checkpoint)}"
RESULTS_DIR="${RESULTS_DIR:-results/tinybox_red/bert}"
# 31-bit seed from the OS entropy pool (not $RANDOM: 15 bits collide across runs)
SEED="${SEED:-$(python3 -c 'import os; print(int.from_bytes(os.urandom(4), "little") >> 1)')}"
# INIT fills this kernel/BEAM cache and RUN reuses it; one file per run so runs never share a search
export CACHEDB="${CACHEDB:-$RESULTS_DIR/cache/tinygrad_$SEED.db}"

python3 -m benchmarks.bert.train --platform tinybox_red --phase init \
  --seed "$SEED" --data "$DATA_DIR" --results "$RESULTS_DIR"
python3 -m benchmarks.bert.train --platform tinybox_red --phase run \
  --seed "$SEED" --data "$DATA_DIR" --results "$RESULTS_DIR"
