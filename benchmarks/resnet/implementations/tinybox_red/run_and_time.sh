#!/usr/bin/env bash
# Generated from config.yaml by `tinyperf render`: edit the config, not this file.
# ResNet-50 v1.5 (ImageNet) on tinybox_red: one timed run, INIT then RUN, appending to one result log.
# Knobs from config.yaml (any one can be overridden by an environment variable of the same name):
#   DEV                   = AMD
#   GPUS                  = 6
#   DEFAULT_FLOAT         = HALF
#   TRAIN_BEAM            = 4
#   EVAL_BEAM             = 0
#   IGNORE_JIT_FIRST_BEAM = 1
#   BEAM_UOPS_MAX         = 2000
#   BEAM_UPCAST_MAX       = 96
#   BEAM_LOCAL_MAX        = 1024
#   BEAM_MIN_PROGRESS     = 5.0
#   BEAM_PADTO            = 0
#   NUM_WORKERS           = 0
#   SEED_BITS             = 31
#   BS                    = 1536
#   EVAL_BS               = 192
#   LR                    = 7.2
#   WARMUP_EPOCHS         = 2
#   EPOCHS                = 37
#   END_LR                = 0.0001
#   DECAY                 = 0.0002
#   MOMENTUM              = 0.9
#   LABEL_SMOOTHING       = 0.1
#   LOSS_SCALER           = 128.0
#   TARGET                = 0.759
#   EVAL_START_EPOCH      = 3
#   EVAL_FREQ             = 4
#   EVAL_EVERY_EPOCH_FROM = 33
#   SYNCBN                = 0
#   IMAGE_SIZE            = 224
#   NUM_CLASSES           = 1000
#   RESNET_WIDTH          = 64
#   RESNET_LAYERS         = 3,4,6,3
#   SHM_RING_BATCHES      = 32
#   FEED_IMG_S_PER_GPU    = 730.0
#   LOADER_IMG_S_PER_CORE = 315.0
set -euo pipefail
# relative paths are the caller's: made absolute before the script moves to the repository root
for v in DATA_DIR RESULTS_DIR CACHEDB; do if [ -n "${!v:-}" ] && [ "${!v#/}" = "${!v}" ]; then printf -v "$v" '%s' "$PWD/${!v}"; fi; done
cd "$(dirname "${BASH_SOURCE[0]}")/../../../.."   # repository root: the entrypoint is a module of this tree
: "${DATA_DIR:?set DATA_DIR to the prepared ImageNet (tinyperf prep imagenet, or tinyperf prep synthetic-imagenet for smoke runs)}"
RESULTS_DIR="${RESULTS_DIR:-results/tinybox_red/resnet}"
# 31-bit seed from the OS entropy pool (not $RANDOM: 15 bits collide across runs)
SEED="${SEED:-$(python3 -c 'import os; print(int.from_bytes(os.urandom(4), "little") >> 1)')}"
# INIT fills this kernel/BEAM cache and RUN reuses it; one file per run so runs never share a search
export CACHEDB="${CACHEDB:-$RESULTS_DIR/cache/tinygrad_$SEED.db}"

python3 -m benchmarks.resnet.train --platform tinybox_red --phase init \
  --seed "$SEED" --data "$DATA_DIR" --results "$RESULTS_DIR"
python3 -m benchmarks.resnet.train --platform tinybox_red --phase run \
  --seed "$SEED" --data "$DATA_DIR" --results "$RESULTS_DIR"
