"""Build small MLPerf result logs with the real mllog API, and submission trees out of them, for tests.

One logging.Logger per file, handed to mllog.config(logger=...): mllog's logger is a process-wide singleton and
config(filename=...) only ever *adds* file handlers, so calling it twice would write every line to both files.
Every event is logged from one source line (_Writer.__call__), so mllog's metadata file:lineno of the seed is the same
in every run, like a real training script's, and the seed checker can match repeated seeds.

  write_log(path, "resnet", seed=123456789, init_minutes=31)   # one log, defaults compliant (resnet 4.0.0 / bert 5.0.0)
  make_package(tmp, "resnet", seeds=[...], runs=[{...}, ...])   # <tmp>/tinycorp/{systems,results/<system>/<bm>}
  read_events(path); relabel_log(src, dst, edit)                  # a real run's events; a copy with events edited
"""
from __future__ import annotations
import json
import logging
import shutil
import uuid
from pathlib import Path

from mlperf_logging import mllog
from mlperf_logging.mllog import constants as C

REPO = Path(__file__).resolve().parents[1]
T0_MS = 1_700_000_000_000

RESNET_HPARAMS = [
  (C.GLOBAL_BATCH_SIZE, 1536), (C.TRAIN_SAMPLES, 1281167), (C.EVAL_SAMPLES, 50000), (C.GRADIENT_ACCUMULATION_STEPS, 1),
  (C.OPT_NAME, C.LARS), (C.LARS_OPT_BASE_LEARNING_RATE, 7.2), (C.LARS_OPT_END_LR, 0.0001),
  (C.LARS_OPT_LR_DECAY_POLY_POWER, 2), (C.LARS_OPT_LR_DECAY_STEPS, 37), (C.LARS_EPSILON, 0.0),
  (C.LARS_OPT_LEARNING_RATE_WARMUP_EPOCHS, 2), (C.LARS_OPT_MOMENTUM, 0.9), (C.LARS_OPT_WEIGHT_DECAY, 0.0002),
]
BERT_HPARAMS = [
  (C.GLOBAL_BATCH_SIZE, 256), (C.GRADIENT_ACCUMULATION_STEPS, 1), (C.OPT_BASE_LR, 0.00035), (C.OPT_LAMB_EPSILON, 1e-6),
  (C.OPT_LR_TRAINING_STEPS, 12000), (C.OPT_LR_WARMUP_STEPS, 0), (C.NUM_WARMUP_STEPS, 0), (C.START_WARMUP_STEP, 0),
  (C.OPT_LAMB_BETA_1, 0.9), (C.OPT_LAMB_BETA_2, 0.999), (C.OPT_LAMB_WEIGHT_DECAY, 0.01), (C.EVAL_SAMPLES, 10000),
  (C.TRAIN_SAMPLES, 256 * 12000),
]
BERT_EVAL_INTERVAL = 150016   # samples between evals (586 steps of 256)


class _Writer:
  def __init__(self, path: Path, t0: int):
    # a name of its own: mllog.config refuses the logger it already has, and a counter restarts in a second copy of this
    # module (imported as mllog_builder and as tests.mllog_builder in one pytest worker: flaky ValueError)
    self.logger = logging.getLogger(f"tinyperf-test-mllog-{uuid.uuid4().hex}")
    self.logger.propagate = False
    self.logger.setLevel(logging.INFO)
    self.handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    self.logger.addHandler(self.handler)
    mllog.config(logger=self.logger)
    self.ml = mllog.get_mllogger()
    self.t = t0

  def __call__(self, key, value=None, metadata=None, at: float | None = None, kind: str = "event"):
    if at is not None: self.t = int(at)
    getattr(self.ml, kind)(key=key, value=value, metadata=metadata, time_ms=self.t)

  def close(self):
    self.handler.close()
    self.logger.removeHandler(self.handler)


def write_log(path: str | Path, benchmark: str = "resnet", *, seed: int | str | None = 1_234_567_891,
              division: str = "closed", org: str = "tinycorp", platform: str = "tinybox_green",
              submission_status: str | None = "onprem", init_minutes: float = 20.0, run_minutes: float | None = None,
              run_stop: bool = True, status: str = C.SUCCESS, epochs: int = 36, evals: int = 17,
              duplicate: str | None = None, division_after_init: bool = False, omit: tuple[str, ...] = (),
              t0_ms: int = T0_MS) -> Path:
  """One compliant closed log by default (resnet for ruleset 4.0.0, bert for 5.0.0); the keywords break it.

  epochs: resnet epochs to converge (eval every 4 epochs from epoch 1, and at the last). evals: bert evals until the
  target. duplicate: a key logged twice with the same value. omit: keys not logged at all."""
  path = Path(path)
  run_minutes = run_minutes if run_minutes is not None else (120.0 if benchmark == "resnet" else 220.0)
  w = _Writer(path, t0_ms)
  try:
    def ev(key, value=None, metadata=None, at=None, kind="event"):
      if key in omit: return
      w(key, value, metadata, at, kind)
      if key == duplicate: w(key, value, metadata, None, kind)

    ev(C.SUBMISSION_ORG, org)
    ev(C.SUBMISSION_PLATFORM, platform)
    if not division_after_init: ev(C.SUBMISSION_DIVISION, division)
    if submission_status: ev(C.SUBMISSION_STATUS, submission_status)
    ev(C.SUBMISSION_BENCHMARK, benchmark)
    ev(C.CACHE_CLEAR, True)
    init_start = t0_ms + 1000
    ev(C.INIT_START, at=init_start, kind="start")
    ev(C.INIT_STOP, at=init_start + init_minutes * 60000)
    if division_after_init: ev(C.SUBMISSION_DIVISION, division)
    run_start = w.t + 5000
    run_end = run_start + run_minutes * 60000
    ev(C.RUN_START, at=run_start, kind="start")
    if seed is not None: ev(C.SEED, seed)
    if benchmark == "resnet":
      for k, v in RESNET_HPARAMS: ev(k, v)
      step = (run_end - run_start - 1000) / epochs
      for e in range(1, epochs + 1):
        t = run_start + 500 + (e - 1) * step
        ev(C.EPOCH_START, metadata={C.EPOCH_NUM: e}, at=t, kind="start")
        ev(C.EPOCH_STOP, metadata={C.EPOCH_NUM: e}, at=t + step - 200, kind="end")
        if (e - 1) % 4 == 0 or e == epochs:
          acc = 0.7601 if e == epochs else round(0.2 + 0.5 * e / epochs, 4)
          ev(C.EVAL_START, metadata={C.EPOCH_NUM: e}, at=t + step - 150, kind="start")
          ev(C.EVAL_ACCURACY, acc, metadata={C.EPOCH_NUM: e}, at=t + step - 100)
          ev(C.EVAL_STOP, metadata={C.EPOCH_NUM: e}, at=t + step - 50, kind="end")
    else:
      for k, v in BERT_HPARAMS: ev(k, v)
      ev(C.EPOCH_START, metadata={C.EPOCH_NUM: 0}, at=run_start + 500, kind="start")
      step = (run_end - run_start - 1000) / evals
      for i in range(1, evals + 1):
        samples = i * BERT_EVAL_INTERVAL
        t = run_start + 500 + i * step
        acc = 0.7215 if i == evals else round(0.4 + 0.3 * i / evals, 4)
        ev(C.EVAL_START, metadata={C.EPOCH_NUM: samples}, at=t - 150, kind="start")
        ev(C.EVAL_STOP, samples, metadata={C.EPOCH_NUM: samples}, at=t - 100, kind="end")
        ev(C.EVAL_ACCURACY, acc, metadata={C.EPOCH_NUM: samples}, at=t - 50)
      ev(C.EPOCH_STOP, evals * BERT_EVAL_INTERVAL, metadata={C.EPOCH_NUM: evals * BERT_EVAL_INTERVAL}, at=run_end - 10)
    if run_stop: ev(C.RUN_STOP, metadata={C.STATUS: status}, at=run_end, kind="end")
  finally:
    w.close()
  return path


def systems_json(system: str = "tinybox_green", **overrides) -> dict:
  """The repository's systems/<system>.json with fields overridden."""
  data = json.loads((REPO / "systems" / f"{system}.json").read_text())
  data.update(overrides)
  return data


def make_package(root: str | Path, benchmark: str = "resnet", *, org: str = "tinycorp", system: str = "tinybox_green",
                 n: int | None = None, seeds: list | None = None, runs: list[dict] | None = None,
                 names: list[str] | None = None, system_overrides: dict | None = None, **common) -> Path:
  """<root>/<org>/{systems/<system>.json, results/<system>/<benchmark>/result_<i>.txt}; returns the org directory.

  n defaults to the required count (resnet 5, bert 10); seeds default to distinct 31-bit values; runs[i] holds
  write_log keywords for run i on top of `common`; names overrides the file names."""
  n = n if n is not None else (5 if benchmark == "resnet" else 10)
  seeds = seeds if seeds is not None else [(1_000_000_007 + 7919 * 104_729 * i) % 2 ** 31 for i in range(n)]
  org_dir = Path(root) / org
  (org_dir / "systems").mkdir(parents=True, exist_ok=True)
  (org_dir / "systems" / f"{system}.json").write_text(json.dumps(systems_json(system, **(system_overrides or {})), indent=2))
  bdir = org_dir / "results" / system / benchmark
  bdir.mkdir(parents=True, exist_ok=True)
  for i in range(n):
    kw = dict(common)
    kw.setdefault("platform", system)
    kw.setdefault("org", org)
    kw.setdefault("run_minutes", (120.0 if benchmark == "resnet" else 220.0) + 0.5 * ((i * 7) % 5))
    if benchmark == "resnet": kw.setdefault("epochs", 35 + i % 3)
    else: kw.setdefault("evals", 16 + i % 3)
    if runs and i < len(runs): kw.update(runs[i])
    name = names[i] if names else f"result_{i}.txt"
    write_log(bdir / name, benchmark, seed=seeds[i], t0_ms=T0_MS + i * 10_000_000, **kw)
  return org_dir


def copy_tree(src: Path, dst_root: Path) -> Path:
  dst = Path(dst_root) / Path(src).name
  shutil.copytree(src, dst)
  return dst


MARK = ":::MLLOG "


def read_events(path: Path) -> list[dict]:
  """The MLLOG events of a log, in order (other console lines skipped)."""
  return [json.loads(l.split(MARK, 1)[1]) for l in Path(path).read_text().splitlines() if MARK in l]


def relabel_log(src: Path, dst: Path, edit) -> Path:
  """Copy a log to dst (parents made), calling edit(event) on every MLLOG event to change it in place; other lines as
  they were. Tests use it to check a real run's sequence under other submission fields (e.g. closed division)."""
  lines = []
  for l in Path(src).read_text().splitlines():
    if MARK in l:
      e = json.loads(l.split(MARK, 1)[1])
      edit(e)
      l = MARK + json.dumps(e)
    lines.append(l)
  Path(dst).parent.mkdir(parents=True, exist_ok=True)
  Path(dst).write_text("\n".join(lines) + "\n")
  return Path(dst)
