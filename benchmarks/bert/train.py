"""BERT training entrypoint: `python -m tinyperf.benchmarks.bert.train --platform P --phase all|init|run --seed S --data D --work W`.

INIT (untimed, <= 30 min closed): submission info, page-cache drop, cache_clear, init_start, JIT + BEAM search of the
train and eval steps on fake data of the real shapes, the initial state put back, init_stop. RUN (timed): run_start,
seed, hyperparameters, initial weights (the phase-1 checkpoint is read on the clock), then blocks of training steps,
each followed by an eval on exactly EVAL_SAMPLES samples, until the masked-LM accuracy reaches TARGET; run_stop (status
aborted when the target is missed or anything fails after run_start). `--phase all` (what run_and_time.sh runs) does
both in one process with the full model, so RUN replays the kernels INIT captured; `init` alone compiles an
INIT_BERT_LAYERS-layer model (kernels repeat per layer) and `run` alone builds and compiles its own (development,
`python -m lab.bench`); they share only the kernel cache file CACHEDB. Every knob comes from the platform config
(benchmarks/bert/implementations/<platform>/config.yaml), env vars override single knobs.
Exit codes: 0 success (RUN: target reached), 1 target not reached or a training failure, 2 bad input.

Data directory D (python -m tinyperf.benchmarks.bert.prep): D/train/part-*.shard, D/eval.shard and, when the config's
INIT_CHECKPOINT is 1, D/bert-large.safetensors (prep checkpoint; --init-checkpoint overrides the path).
"""
from __future__ import annotations
import argparse
import math
import os
import shlex
import sys
from pathlib import Path

from tinyperf.benchmarks.common.config import BERT_DROPOUT, ClosedModelError, PlatformConfig, bert_dropout
from tinyperf.benchmarks.common.io import InputError
from tinyperf.benchmarks.common.rundir import RunDir
from tinyperf.benchmarks.common import beam, mlperf, runtime
from tinyperf.benchmarks.bert.spec import SPEC

VOCAB_SIZE = 30522          # the MLCommons uncased vocab (and the cpu_smoke one: the same bert-base-uncased vocab)
CHECKPOINT_NAME = "bert-large.safetensors"


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m tinyperf.benchmarks.bert.train` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog="python -m tinyperf.benchmarks.bert.train", description=__doc__.splitlines()[0])
  p.add_argument("--platform", required=True, help="implementation directory under benchmarks/bert/implementations")
  p.add_argument("--phase", required=True, choices=("all", "init", "run"),
                 help="all: INIT then RUN in one process (RUN replays what INIT compiled); init or run alone")
  p.add_argument("--seed", type=int, required=True, help="run seed (31-bit; the launcher draws it)")
  p.add_argument("--data", type=Path, help="prepared data directory (train/, eval.shard, bert-large.safetensors); "
                 "INIT never reads it (only drops it from the page cache)")
  runtime.add_run_arguments(p, "bert")
  p.add_argument("--init-checkpoint", type=Path, default=None,
                 help=f"initial weights (safetensors from prep checkpoint); default DATA/{CHECKPOINT_NAME}; used only "
                      f"when the config's INIT_CHECKPOINT is 1")
  return p


def eval_every_steps(knobs) -> int:
  """EVAL_STEP_FREQ, or with 0 the MLPerf interval FLOOR(0.05 * (230.23 * GBS + 3e6), 25000) samples, rounded *up* to
  whole steps. Source: training_rules.adoc (v5.0, BERT "Evaluation frequency"): the interval "may be rounded up to a whole batch". tinycorp's reviewed
  logs round down (1562 steps = 149,952 samples at GBS 96, under the 150,000 the rule sets); we follow the rule:
  1563 steps = 150,048 samples."""
  if knobs["EVAL_STEP_FREQ"] > 0: return int(knobs["EVAL_STEP_FREQ"])
  gbs = int(knobs["BS"])
  interval = math.floor(0.05 * (230.23 * gbs + 3_000_000) / 25_000) * 25_000
  return math.ceil(interval / gbs)


def log_hparams(cfg: PlatformConfig):
  from mlperf_logging.mllog import constants as C
  from tinyperf.benchmarks.bert.optim import lamb_hparams
  k = cfg.knobs
  mlperf.event(C.OPT_NAME, C.LAMB)  # "lamb": the reference logs FLAGS.optimizer, lower case (tinycorp: "LAMB"; unchecked)
  mlperf.event(C.GRADIENT_ACCUMULATION_STEPS, 1)
  for key, v in lamb_hparams(k).items(): mlperf.event(key, v)
  mlperf.event(C.MAX_SEQUENCE_LENGTH, k["MAX_SEQ_LEN"])
  mlperf.event("max_predictions_per_seq", k["MAX_PREDICTIONS"])
  # Both as the MLCommons reference logs them (language_model/tensorflow/bert/mlp_logging.py, mlperf_run_param_log):
  # eval_samples 10000, the fixed eval set (we evaluate exactly EVAL_SAMPLES samples; tinycorp's 10080 counts the 80
  # samples its last batch wraps around), and train_samples = train_batch_size * num_train_steps, the run's sample
  # budget, logged at the start (tinycorp logs the same 3,600,000 at GBS 96). Samples to converge are in the last
  # eval_accuracy's epoch_num, which the RCP checker reads by default.
  mlperf.event(C.EVAL_SAMPLES, k["EVAL_SAMPLES"])
  mlperf.event(C.TRAIN_SAMPLES, k["BS"] * k["TRAIN_STEPS"])


class Trainer:
  """Model, optimizer, schedule, dropout RNG and jitted steps for one process; shapes come from the config only.
  weights: state-dict name -> array to start from (a converted checkpoint); None = random init from the seed."""
  def __init__(self, cfg: PlatformConfig, seed: int, layers: int | None = None, weights=None):
    from tinyperf.benchmarks.bert.model import build_bert, load_weights, place_model
    from tinyperf.benchmarks.bert.optim import make_optimizer
    from tinyperf.benchmarks.bert.steps import DropoutRNG, StepState, make_steps
    self.cfg, self.k = cfg, cfg.knobs
    self.devices = runtime.devices(cfg)
    self.ranked = beam.from_knobs(self.k)   # BEAM_COVERAGE / BEAM_BUDGET_S: search the slowest kernels first
    self.model = build_bert(self.k, seed=None if weights is not None else seed, layers=layers, vocab=VOCAB_SIZE)
    if weights is not None: load_weights(self.model, weights, source="initial checkpoint")
    place_model(self.model, self.devices)
    self.rng = DropoutRNG(seed, self.devices)
    self.optimizer, self.scheduler = make_optimizer(self.model, self.k)
    self.state = StepState(self.scheduler, self.rng)       # what a training state holds besides model and optimizer
    self.train_step, self.eval_step = make_steps(self.model, self.optimizer, self.scheduler, self.k)

  def save(self, path: Path, step: int):
    from tinyperf.benchmarks.common.checkpoint import save_state
    save_state(path, self.model, self.optimizer, self.state, metadata={"step": str(step), "benchmark": "bert"})

  def load(self, path: Path) -> int:
    from tinyperf.benchmarks.common.checkpoint import load_state
    load_state(path, self.model, self.optimizer, self.state)
    return self.scheduler.steps_done()


def run_fake_steps(tr: Trainer, n: int, with_eval: bool = True) -> runtime.StepTimer:
  """JIT capture + BEAM search on fake data with the real shapes (what INIT is for)."""
  from tinyperf.benchmarks.bert.steps import fake_batch, to_device, read_eval
  k, timer = tr.k, runtime.StepTimer()
  with beam.beam_context(k, "TRAIN_BEAM", tr.ranked):
    batch = fake_batch(k["BS"], k["MAX_SEQ_LEN"], k["MAX_PREDICTIONS"])
    for i in range(n): runtime.timed_init_step(timer, i, lambda: tr.train_step(**to_device(batch, tr.devices))[0])
  if not with_eval: return timer
  with beam.beam_context(k, "EVAL_BEAM", tr.ranked):
    batch = fake_batch(k["EVAL_BS"], k["MAX_SEQ_LEN"], k["MAX_PREDICTIONS"])
    for i in range(min(n, 3)):
      t0 = runtime.now()
      read_eval(tr.eval_step(**to_device(batch, tr.devices)))
      print(f"init eval step {i}: {(runtime.now() - t0)*1e3:.1f} ms", flush=True)
  return timer


def init_phase(cfg: PlatformConfig, args) -> int:
  init(cfg, args, full_depth=bool(args.benchmark_steps))
  return 0


def init(cfg: PlatformConfig, args, full_depth: bool) -> Trainer:
  """INIT; returns the trainer with its steps captured and its state back at the seed's initial values.
  full_depth False: an INIT_BERT_LAYERS-layer model (enough to search every kernel; a RUN process compiles its own)."""
  from mlperf_logging.mllog import constants as C
  from tinyperf.benchmarks.common.checkpoint import restore_state, snapshot_state
  mlperf.log_submission_info(cfg)
  method = os.environ.get("TINYPERF_CACHE_DROPPED") or mlperf.drop_page_cache(
    [args.data] if args.data else [], mlperf.drops_host_cache(cfg))
  print(f"page cache dropped with {method}", flush=True)
  mlperf.event(C.CACHE_CLEAR, True, metadata={"method": method})
  mlperf.start(C.INIT_START)
  t0 = runtime.now()
  # the real shapes; without full_depth only INIT_BERT_LAYERS layers: every encoder layer runs the same kernels. A
  # BENCHMARK run times the whole model (its step time is what the projection and `python -m lab.bench` report), and so
  # does INIT for a RUN in this process (it replays the captured full-depth step).
  tr = Trainer(cfg, args.seed, layers=None if full_depth else cfg["INIT_BERT_LAYERS"])
  initial = snapshot_state(tr.model, tr.optimizer, tr.state)
  n = runtime.JIT_WARMUP_STEPS + (args.benchmark_steps or 1)  # captured on the 1st call, replayed from the 2nd
  # a BENCHMARK run stops after its train steps: warming up the eval step would only lengthen it
  timer = run_fake_steps(tr, n, with_eval=not args.benchmark_steps)
  restore_state(initial, tr.model, tr.optimizer, tr.state)   # the fake steps trained: RUN starts from the seed's init
  del initial
  if cfg.knobs.get("KERNELS") == "triton":   # the tiles that ran and what compiling them took, in the run's folder
    from tinyperf.benchmarks.kernels import program
    print(program.write_record(RunDir(args.work).kernels), flush=True)
  mlperf.event(C.INIT_STOP)
  init_s = runtime.now() - t0
  print(f"init took {init_s:.1f} s", flush=True)
  if args.benchmark_steps:
    print(timer.summary(cfg["BS"], cfg["TRAIN_STEPS"], "seq", runtime.no_projection(cfg)), flush=True)
    runtime.print_bench_record(cfg, timer, items_per_step=cfg["BS"], steps_to_train=cfg["TRAIN_STEPS"], unit="seq",
                               init_s=init_s, ranked_beam=tr.ranked and [r.summary() for r in tr.ranked.reports])
  return tr


def initial_weights(cfg: PlatformConfig, args):
  """The converted phase-1 checkpoint when the config says so (INIT_CHECKPOINT 1), else None (random init)."""
  if not cfg["INIT_CHECKPOINT"]: return None
  from tinygrad.nn.state import safe_load
  path = args.init_checkpoint or args.data / CHECKPOINT_NAME
  if not path.is_file():
    raise InputError(f"{path}: initial checkpoint not found (the config sets INIT_CHECKPOINT: 1). Convert the MLCommons "
                     f"TF checkpoint with `python -m tinyperf.benchmarks.bert.prep checkpoint --tf DIR --out "
                     f"{shlex.quote(str(path))}`, or pass --init-checkpoint FILE.")
  return safe_load(str(path))


def data_files(cfg: PlatformConfig, data: Path | None) -> tuple[list[Path], Path]:
  """(train shard paths, eval shard path) of a prepared data directory, by name only (nothing is read), or InputError
  with the prep commands: all_phases asks before INIT, so a wrong DATA_DIR is not found after a whole INIT."""
  from tinyperf.benchmarks.bert.data import train_shard_paths
  from tinyperf.benchmarks.bert.shard import ShardError
  if data is None: raise InputError("--data is required for the RUN phase (the prepared BERT data directory)")
  q = shlex.quote(str(data))   # pasted into a shell as printed
  prep = (f"`tinyperf prep wiki pretrain --data {q} --platform {cfg.platform}` and `tinyperf prep wiki eval --data "
          f"{q} --platform {cfg.platform}` (the platform's init_datasets.sh runs them), or point DATA_DIR (--data) "
          f"at the prepared directory. Nothing was run.")
  try:
    paths = train_shard_paths(data)
  except ShardError:
    raise InputError(f"{data / 'train'}: no train shards (part-*.shard). Prepare them: {prep}") from None
  ev = data / "eval.shard"
  if not ev.is_file(): raise InputError(f"{ev}: eval shard not found. Prepare it: {prep}")
  return paths, ev


def open_data(cfg: PlatformConfig, data: Path | None):
  """(train shard paths, eval shard path, vocab md5), validated against the config and the model's vocab."""
  from tinyperf.benchmarks.bert.shard import ShardError, read_header
  paths, ev = data_files(cfg, data)
  try:
    h = read_header(paths[0])
  except ShardError as e:
    raise InputError(str(e)) from None
  if h.get("vocab_size") != VOCAB_SIZE:
    raise InputError(f"{paths[0]}: made with a {h.get('vocab_size')}-token vocab, the model has {VOCAB_SIZE}. "
                     f"Prepare the data with the BERT uncased vocab.")
  return paths, ev, h.get("vocab_md5")


def evaluate(tr: Trainer, eval_path: Path, vocab_md5: str | None):
  from tinyperf.benchmarks.bert.steps import eval_set_batches, evaluate as run_eval
  k = tr.k
  with beam.beam_context(k, "EVAL_BEAM", tr.ranked):
    batches = eval_set_batches(eval_path, k["EVAL_BS"], k["EVAL_SAMPLES"], k["MAX_SEQ_LEN"], k["MAX_PREDICTIONS"],
                               vocab_md5)
    totals = run_eval(tr.eval_step, batches, tr.devices)
  if totals.sums["nsp_count"] != k["EVAL_SAMPLES"]:
    raise RuntimeError(f"eval saw {totals.sums['nsp_count']:.0f} samples, EVAL_SAMPLES is {k['EVAL_SAMPLES']}")
  return totals


def train(tr: Trainer, args, paths, eval_path, vocab_md5, start_step: int) -> tuple[bool, int]:
  """Blocks of training steps, each followed by an eval; returns (target reached, samples trained on)."""
  import time
  from mlperf_logging.mllog import constants as C
  from tinyperf.benchmarks.bert.data import train_batches
  from tinyperf.benchmarks.bert.steps import to_device
  k, gbs = tr.k, tr.k["BS"]
  every, total = eval_every_steps(k), k["TRAIN_STEPS"]
  timer, benchmark = runtime.StepTimer(), args.benchmark_steps
  it = train_batches(paths, gbs, k["MAX_SEQ_LEN"], k["MAX_PREDICTIONS"], seed=args.seed, skip_batches=start_step,
                     vocab_md5=vocab_md5)
  step = start_step
  print(f"training with global batch size {gbs}: {total} steps, eval every {every} steps ({every * gbs} samples) on "
        f"{k['EVAL_SAMPLES']} samples, target masked-LM accuracy {k['TARGET']}", flush=True)
  mlperf.start(C.BLOCK_START, step * gbs, metadata={C.SAMPLES_COUNT: step * gbs})
  t_block = time.perf_counter()
  while step < total:
    t0 = runtime.now()
    batch = next(it)
    wait = runtime.now() - t0
    with beam.beam_context(k, "TRAIN_BEAM", tr.ranked):
      loss, norm = tr.train_step(**to_device(batch, tr.devices))
    loss, norm = runtime.host_scalar(loss), runtime.host_scalar(norm)   # syncs: the step time includes the device
    timer.add(runtime.now() - t0 - wait, wait)
    if not math.isfinite(loss): raise FloatingPointError(f"loss is {loss} at step {step}")
    step += 1
    runtime.metric("step", step=step, samples=step * gbs, loss=loss, grad_norm=norm, step_s=timer.steps[-1], wait_s=wait,
                   rate=gbs / timer.steps[-1], unit="seq")
    if step % 10 == 0 or step <= 3 or benchmark:
      print(f"step {step}/{total}: loss {loss:.4f}, grad norm {norm:.3f}, lr {tr.scheduler.lr_at(step - 1):.3g}, "
            f"{timer.steps[-1]*1e3:.0f} ms, data {wait*1e3:.0f} ms", flush=True)
    if benchmark and timer.done(benchmark):
      print(timer.summary(gbs, total, "seq", runtime.no_projection(tr.cfg)), flush=True)
      return False, step * gbs
    if step % every and step != total: continue
    samples = step * gbs
    mlperf.end(C.BLOCK_STOP, samples, metadata={C.SAMPLES_COUNT: samples})
    mlperf.start(C.EVAL_START, samples, metadata={C.EPOCH_NUM: samples})
    t_eval = time.perf_counter()
    totals = evaluate(tr, eval_path, vocab_md5)
    mlperf.event(C.EVAL_ACCURACY, totals.mlm_accuracy, metadata={C.EPOCH_NUM: samples})
    runtime.metric("eval", step=step, samples=samples, accuracy=totals.mlm_accuracy, mlm_loss=totals.mlm_loss)
    mlperf.end(C.EVAL_STOP, samples, metadata={C.EPOCH_NUM: samples})
    print(f"eval at step {step} ({samples} samples): masked-LM accuracy {totals.mlm_accuracy:.4f} (target {k['TARGET']}), "
          f"MLM loss {totals.mlm_loss:.4f}, NSP accuracy {totals.nsp_accuracy:.4f}, NSP loss {totals.nsp_loss:.4f}; "
          f"block {time.perf_counter() - t_block:.1f} s, eval {time.perf_counter() - t_eval:.1f} s", flush=True)
    if args.ckpt:
      path = RunDir(args.work).checkpoint(f"bert_{args.seed}_s{step}.safetensors")
      tr.save(path, step)
      print(f"saved training state to {path}", flush=True)
    if totals.mlm_accuracy >= k["TARGET"]: return True, samples
    if step < total:
      mlperf.start(C.BLOCK_START, samples, metadata={C.SAMPLES_COUNT: samples})
      t_block = time.perf_counter()
  return False, step * gbs


def all_phases(cfg: PlatformConfig, args) -> int:
  """INIT then RUN in one process: RUN's steps are replays of what INIT captured on the full model."""
  check_dropout(cfg)   # before INIT: a closed run with the wrong model must not spend its INIT first
  data_files(cfg, args.data)   # nor one whose data is not there (file names only: no data is read before run_start)
  return run_phase(cfg, args, init(cfg, args, full_depth=True))


def check_dropout(cfg: PlatformConfig):
  if cfg["division"] == "closed" and bert_dropout(cfg.knobs) != BERT_DROPOUT:   # the model is fixed in closed; no key logs it
    raise ClosedModelError(f"{cfg.path}: DROPOUT={cfg['DROPOUT']} changes BERT-large's dropout ({BERT_DROPOUT}), which "
                           f"the closed division fixes. Unset DROPOUT for a closed run (it is for `python -m lab.bench "
                           f"bert --dropout`), or make the platform config's division open.")


def run_phase(cfg: PlatformConfig, args, tr: Trainer | None = None) -> int:
  from mlperf_logging.mllog import constants as C
  check_dropout(cfg)
  # The clock starts before any dataset access, and before the initial checkpoint is read. MLPerf lets model creation
  # and initialisation stay outside the timed run only inside the init allowance (init_start..init_stop); our RUN is a
  # separate process that starts after init_stop, so anything it does before run_start would be work outside both
  # windows. Loading the phase-1 checkpoint (and, in a RUN process of its own, building the model) therefore happens on
  # the clock, as upstream does.
  mlperf.start(C.RUN_START)
  print(runtime.RUN_STARTED, flush=True)
  runtime.set_stage("RUN (training; evaluating)")
  with mlperf.abort_on_failure():  # from here on, a failure still ends the log with run_stop aborted
    reached, samples = run_training(cfg, args, tr)
  if args.benchmark_steps: return 0  # a BENCHMARK run: no run_stop
  mlperf.end(C.RUN_STOP, metadata={C.STATUS: C.SUCCESS if reached else C.ABORTED})
  if not reached:
    print(f"\n{'!' * 100}\nRUN ABORTED: masked-LM accuracy target {cfg['TARGET']} not reached after {samples} samples "
          f"(TRAIN_STEPS {cfg['TRAIN_STEPS']})\n{'!' * 100}", file=sys.stderr, flush=True)
    return 1
  print(f"target reached after {samples} samples", flush=True)
  return 0


def run_training(cfg: PlatformConfig, args, tr: Trainer | None = None) -> tuple[bool, int]:
  """Everything of RUN between run_start and run_stop: (target reached, samples trained on).
  tr: INIT's trainer when both phases run in this process (the checkpoint is written into its weights), else RUN
  builds its own (and its JIT captures anew)."""
  from mlperf_logging.mllog import constants as C
  from tinyperf.benchmarks.bert.model import assign_weights
  mlperf.event(C.SEED, args.seed)
  paths, eval_path, vocab_md5 = open_data(cfg, args.data)
  log_hparams(cfg)
  weights = initial_weights(cfg, args)
  try:
    if tr is None: tr = Trainer(cfg, args.seed, weights=weights)
    elif weights is not None: assign_weights(tr.model, weights, source="initial checkpoint")
  except ValueError as e:
    raise InputError(str(e)) from None
  del weights
  start_step = 0
  if args.resume:
    start_step = tr.load(args.resume)
    print(f"resumed from {args.resume} at step {start_step}", flush=True)
  return train(tr, args, paths, eval_path, vocab_md5, start_step)


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  return runtime.run_entrypoint(SPEC, args, {"all": all_phases, "init": init_phase, "run": run_phase})


if __name__ == "__main__":
  sys.exit(main())
