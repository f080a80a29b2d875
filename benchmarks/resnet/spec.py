"""ResNet-50 v1.5 on ImageNet: the benchmark's record (benchmarks/common/spec.py), read by the config loader, the rules,
tooling/ and the renderers. Imports nothing heavy: tooling/ reads it on every command."""
from __future__ import annotations

from tinyperf.benchmarks.common.rules import IMAGENET_COUNTS
from tinyperf.benchmarks.common.spec import BenchmarkSpec, Knob

QUALITY_TARGET = 0.759   # top-1
# The stand-in data set of the CPU platform: what smoke.sh and the tests make (its NUM_CLASSES classes).
SMOKE_IMAGENET = "--train-per-class 160 --val-per-class 40 --size 48 --seed 0"
_TRAIN, _VAL = IMAGENET_COUNTS["train"], IMAGENET_COUNTS["val"]

KNOBS = {
  "BS": Knob(int, "global train batch size", range="[1,)"),
  "EVAL_BS": Knob(int, "global eval batch size", range="[1,)"),
  "LR": Knob(float, "LARS peak learning rate", range="(0,)"),
  "WARMUP_EPOCHS": Knob(int, "linear warm-up length in epochs", range="[0,)"),
  "EPOCHS": Knob(int, "schedule length in epochs (training stops earlier at the target)", range="[1,)"),
  "END_LR": Knob(float, "final learning rate of the polynomial decay", range="[0,)"),
  "DECAY": Knob(float, "LARS weight decay (1e-4 * 2^N for closed)", range="[0,)"),
  "MOMENTUM": Knob(float, "LARS and SGD momentum", range="[0,1)"),
  "LABEL_SMOOTHING": Knob(float, "label smoothing (0 or 0.1 in closed)", range="[0,1)"),
  "LOSS_SCALER": Knob(float, "static loss scale (128 for fp16: the v4.0 reviewed runs)", range="(0,)"),
  "TARGET": Knob(float, "top-1 accuracy that stops the run", range="(0,1]"),
  "EVAL_START_EPOCH": Knob(int, "eval offset: evals after epochs where (epoch - offset) % EVAL_FREQ == 0",
                           range="[0,)"),
  "EVAL_FREQ": Knob(int, "eval every N epochs", range="[1,)"),
  "EVAL_EVERY_EPOCH_FROM": Knob(int, "from this epoch on, eval after every epoch", range="[0,)"),
  "SYNCBN": Knob(int, "1 = BatchNorm statistics synced across devices, 0 = per device", range="[0,1]"),
  "IMAGE_SIZE": Knob(int, "train/eval crop size (224 for closed)", range="[1,)"),
  "NUM_CLASSES": Knob(int, "classifier width (1000 for closed)", range="[2,)"),
  "RESNET_WIDTH": Knob(int, "stem/first-stage width (64 = ResNet-50)", range="[1,)"),
  "RESNET_LAYERS": Knob(str, "bottleneck blocks per stage, comma separated (3,4,6,3 = ResNet-50)"),
  "SHM_RING_BATCHES": Knob(int, "batches held in the shared-memory ring per loader", range="[2,)"),
  "FEED_IMG_S_PER_GPU": Knob(float, "train img/s one GPU consumes at the speed expected on this platform (the "
                                    "loader must feed GPUS times this; source in the config's comment)", range="(0,)"),
  "LOADER_IMG_S_PER_CORE": Knob(float, "train img/s one CPU core of the loader delivers (lab.resnet."
                                       "bench_decode); sets the cores the platform needs (benchmarks/common/feeding.py)",
                                 range="(0,)"),
}


def rules(k: dict) -> list[tuple[tuple[str, ...], str]]:
  try: layers = [int(x) for x in k["RESNET_LAYERS"].split(",")]
  except ValueError: layers = []
  if not layers or min(layers) < 1:
    return [(("RESNET_LAYERS",), f"RESNET_LAYERS={k['RESNET_LAYERS']!r} must be positive integers, one per stage, "
                                 f"e.g. 3,4,6,3.")]
  return []


def prep_hint(q: str, platform: str) -> str:
  return f"tinyperf prep imagenet --out {q}` (or `tinyperf prep synthetic-imagenet --out {q}` for smoke runs)"


def init_steps(cfg, stand_in: bool, require) -> str:
  if stand_in:
    return f"""# stand-in data: learnable synthetic JPEGs in the ImageNet layout, {cfg['NUM_CLASSES']} classes (the set smoke.sh makes;
# the same arguments give the same bytes, and a finished set is left as it is)
python3 -m tinyperf.tooling.cli prep synthetic-imagenet --out "$DATA_DIR" --classes {cfg['NUM_CLASSES']} {SMOKE_IMAGENET}
python3 -m tinyperf.tooling.cli prep imagenet --verify "$DATA_DIR"
"""
  return """if [ ! -f "$DATA_DIR/manifest.json" ]; then   # prep writes the manifest last, after verifying the extraction
""" + require("VAL_LABELS", "the ILSVRC2012 validation ground truth, one wnid per line (docs/data.md)", "  ") + """\
  # the two ILSVRC2012 archives, downloaded (resumable, md5-checked) or taken from IMAGENET_TARS when it is set
  python3 -m tinyperf.tooling.cli prep imagenet --out "$DATA_DIR" --val-labels "$VAL_LABELS" ${IMAGENET_TARS:+--from-tars "$IMAGENET_TARS"}
fi
python3 -m tinyperf.tooling.cli prep imagenet --verify "$DATA_DIR"   # every image decoded, sizes against the manifest
"""


def readme(cfg, stand_in: bool) -> dict:
  data = ("stand-in data (`tinyperf prep synthetic-imagenet`)." if stand_in else
          "ILSVRC2012 with `tinyperf prep imagenet`. `VAL_LABELS=FILE` is the validation ground truth (one wnid "
          "per line, see docs/data.md); `IMAGENET_TARS=DIR` uses archives you already have instead of downloading.")
  problem = ("Image classification: ResNet-50 v1.5 trained from scratch on ImageNet-1k (ILSVRC2012) to "
             f"{QUALITY_TARGET * 100:.1f} % top-1. Every quality evaluation uses all 50,000 validation images.")
  dataset = {
    "Publication/Attribution": "ILSVRC2012: O. Russakovsky et al., *ImageNet Large Scale Visual Recognition "
                               "Challenge*, IJCV 2015.",
    "Data preprocessing": "`tinyperf prep imagenet` only extracts and verifies the JPEGs (class-per-directory layout "
                          "with a manifest); everything else happens on the clock. Train: the reference's random crop "
                          "(area 0.05-1 covering >= 10 % of the image, ratio 0.75-1.33, 100 tries, else the whole "
                          "image) resized to IMAGE_SIZE, bilinear, horizontal flip. Eval: resize the short "
                          "side to IMAGE_SIZE*256/224 (256 for 224), center crop. Per-channel mean subtracted on "
                          "device (no std division, as the reference).",
    "Training and test data separation": "ILSVRC2012's own split: the 1,281,167 training images train, the 50,000 "
                                         "validation images are the test set.",
    "Training data order": "Every epoch visits each training image once, in a permutation drawn from (seed, epoch); "
                           "each image's augmentation is drawn from (seed, epoch, file index).",
    "Test data order": "The validation images in manifest order.",
  }
  model = {
    "Publication/Attribution": "K. He, X. Zhang, S. Ren, J. Sun, *Deep Residual Learning for Image Recognition*, CVPR "
                               "2016; v1.5 puts the stride on the 3x3 convolution, as the MLPerf reference does.",
    "List of layers": "7x7/2 stem convolution, BatchNorm, ReLU, 3x3/2 max-pool; four stages of bottleneck blocks "
                      "(RESNET_LAYERS: 3,4,6,3 for ResNet-50); global average pool; a fully connected NUM_CLASSES-way "
                      "classifier. Convolutions are bias-free; BatchNorm statistics are per device unless SYNCBN=1.",
    "Weight and bias initialization": "Convolutions: He-normal truncated at 2 std. Classifier: weights N(0, 0.01), "
                                      "bias 0. BatchNorm: scale 1, shift 0.",
    "Loss function": "Softmax cross-entropy with label smoothing LABEL_SMOOTHING; padded samples are masked out.",
    "Optimizer": "LARS on convolution and classifier weights, SGD with momentum on BatchNorm parameters and biases; "
                 "polynomial decay (power 2) with linear warm-up. Under DEFAULT_FLOAT=HALF: fp16 compute with fp32 "
                 "master weights and a static loss scale (LOSS_SCALER).",
  }
  quality = {
    "Quality metric": "Top-1 accuracy on the validation set.",
    "Quality target": f"{cfg['TARGET']} (TARGET; MLPerf's is {QUALITY_TARGET:.3f}).",
    "Evaluation frequency": f"After epochs where (epoch - {cfg['EVAL_START_EPOCH']}) % {cfg['EVAL_FREQ']} == 0, and "
                            f"after every epoch from {cfg['EVAL_EVERY_EPOCH_FROM']} on.",
    "Evaluation thoroughness": "Every validation image at every evaluation.",
  }
  return dict(problem=problem, data=data, dataset=dataset, model=model, quality=quality)


SPEC = BenchmarkSpec(
  name="resnet", title="ResNet-50 v1.5 (ImageNet)", model="ResNet-50", ruleset="4.0.0", knobs=KNOBS,
  schedule=("WARMUP_EPOCHS", "EPOCHS"), rules=rules, triton=True,
  closed_model={"RESNET_LAYERS": "3,4,6,3", "RESNET_WIDTH": 64, "NUM_CLASSES": 1000},
  closed_samples={"train_samples": (_TRAIN, f"ImageNet-1k's {_TRAIN} train images"),
                  "eval_samples": (_VAL, f"ImageNet-1k's {_VAL} validation images")},
  quality_target=QUALITY_TARGET, quality_metric="eval top-1 accuracy", progress="epoch", throughput_unit="img",
  data_marker="manifest.json", prep_hint=prep_hint,
  data_dir_doc="the prepared ImageNet (`tinyperf prep imagenet`, or `tinyperf prep synthetic-imagenet` for smoke runs)",
  data_var="IMAGENET_DIR", data_var_cpu="SYNTHETIC_DIR",   # the CPU platform trains on the synthetic set (prep-synthetic)
  stand_in_setup="", loader_shm=True, min_free_gb=5, readme=readme, init_steps=init_steps)
