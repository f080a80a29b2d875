#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# ResNet-50 v1.5 (ImageNet) on cpu_smoke: BEAM search + BENCHMARK steps only (INIT without the clock), printing step time.
# Knobs from config.yaml (any one can be overridden by an environment variable of the same name):
#   DEV                   = CPU
#   GPUS                  = 1
#   DEFAULT_FLOAT         = FLOAT
#   TRAIN_BEAM            = 0
#   EVAL_BEAM             = 0
#   NUM_WORKERS           = 1
#   SEED_BITS             = 31
#   BS                    = 64
#   EVAL_BS               = 64
#   LR                    = 2.0
#   WARMUP_EPOCHS         = 1
#   EPOCHS                = 8
#   END_LR                = 0.0001
#   DECAY                 = 0.0002
#   MOMENTUM              = 0.9
#   LABEL_SMOOTHING       = 0.1
#   LOSS_SCALER           = 1.0
#   TARGET                = 0.9
#   EVAL_START_EPOCH      = 0
#   EVAL_FREQ             = 1
#   EVAL_EVERY_EPOCH_FROM = 1
#   SYNCBN                = 0
#   IMAGE_SIZE            = 32
#   NUM_CLASSES           = 4
#   RESNET_WIDTH          = 8
#   RESNET_LAYERS         = 1,1,1,1
#   SHM_RING_BATCHES      = 4
#   FEED_IMG_S_PER_GPU    = 530.0
#   LOADER_IMG_S_PER_CORE = 3190.0
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the entrypoint is a module of this tree
: "${DATA_DIR:?set DATA_DIR to the prepared ImageNet (tinyperf prep imagenet, or tinyperf prep synthetic-imagenet for smoke runs)}"
RESULTS_DIR="${RESULTS_DIR:-results/cpu_smoke/resnet}"
# 31-bit seed from the OS entropy pool (not $RANDOM: 15 bits collide across runs)
SEED="${SEED:-$(python3 -c 'import os; print(int.from_bytes(os.urandom(4), "little") >> 1)')}"
# INIT fills this kernel/BEAM cache and RUN reuses it; one file per run so runs never share a search
export CACHEDB="${CACHEDB:-$RESULTS_DIR/cache/tinygrad_$SEED.db}"

export BENCHMARK="${BENCHMARK:-10}" DEBUG="${DEBUG:-2}"
python3 -m benchmarks.resnet.train --platform cpu_smoke --phase init \
  --seed "$SEED" --data "$DATA_DIR" --results "$RESULTS_DIR" --log "$RESULTS_DIR/dev_beam_$SEED.txt"
