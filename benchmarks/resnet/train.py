"""ResNet-50 training entrypoint: `python -m tinyperf.benchmarks.resnet.train --platform P --phase all|init|run --seed S --data D --work W`.

INIT (untimed, <= 30 min closed): submission info, page-cache drop, cache_clear, init_start, model and optimizer from
the seed, JIT capture + BEAM search on fake data of the real shapes, the initial state put back, init_stop. RUN (timed):
run_start, seed, hyperparameters, epochs with evals on real data, run_stop (status aborted when the target is missed or
anything fails after run_start: mlperf.abort_on_failure). `--phase all` (what run_and_time.sh runs) does both in one
process, so RUN replays the kernels INIT captured from its first step; `init` and `run` alone are separate processes
sharing only the kernel cache file CACHEDB (`python -m lab.bench`, development), and RUN then compiles again on the clock.
Every knob comes from the platform config (benchmarks/resnet/implementations/<platform>/config.yaml), env vars override
single knobs. Exit codes: 0 success (RUN: target reached), 1 target not reached or a training failure, 2 bad input.
"""
from __future__ import annotations
import argparse
import math
import os
import sys
from pathlib import Path

from tinyperf.benchmarks.common.config import PlatformConfig
from tinyperf.benchmarks.common.io import InputError
from tinyperf.benchmarks.common.rules import IMAGENET_COUNTS
from tinyperf.benchmarks.common.rundir import RunDir
from tinyperf.benchmarks.common import beam, mlperf, runtime
from tinyperf.benchmarks.resnet.spec import SPEC


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m tinyperf.benchmarks.resnet.train` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog="python -m tinyperf.benchmarks.resnet.train", description=__doc__.splitlines()[0])
  p.add_argument("--platform", required=True, help="implementation directory under benchmarks/resnet/implementations")
  p.add_argument("--phase", required=True, choices=("all", "init", "run"),
                 help="all: INIT then RUN in one process (RUN replays what INIT compiled); init or run alone")
  p.add_argument("--seed", type=int, required=True, help="run seed (31-bit; the launcher draws it)")
  p.add_argument("--data", type=Path, help="prepared ImageNet directory (with manifest.json); INIT without it assumes "
                 "ImageNet-1k's sizes (for BENCHMARK runs on fake data)")
  runtime.add_run_arguments(p, "resnet")
  return p


def steps_per_epoch(n: int, bs: int) -> int: return math.ceil(n / bs)


def should_eval(epoch: int, k) -> bool:
  """epoch is 1-based. Every EVAL_FREQ epochs from the offset, and every epoch from EVAL_EVERY_EPOCH_FROM on (the clock
  stops at the first eval that reaches the target, so late epochs are all evaluated)."""
  return (epoch - k["EVAL_START_EPOCH"]) % k["EVAL_FREQ"] == 0 or epoch >= k["EVAL_EVERY_EPOCH_FROM"]


def log_hparams(cfg: PlatformConfig, manifest):
  from mlperf_logging.mllog import constants as C
  from tinyperf.benchmarks.resnet.optim import lars_hparams
  mlperf.event(C.GLOBAL_BATCH_SIZE, cfg["BS"])
  # the split sizes, at the start of the run: as the MLCommons reference (image_classification/tensorflow2/
  # resnet_ctl_imagenet_main.py: NUM_IMAGES train / validation) and the reviewed v4.0 logs (1281167 / 50000)
  mlperf.event(C.TRAIN_SAMPLES, len(manifest["train"]))
  mlperf.event(C.EVAL_SAMPLES, len(manifest["val"]))
  mlperf.event(C.GRADIENT_ACCUMULATION_STEPS, 1)
  mlperf.event(C.OPT_NAME, C.LARS)  # "lars": training_rules.adoc opt_name "lars" or "sgd"; reference and v4.0 logs agree
  for k, v in lars_hparams(cfg.knobs).items(): mlperf.event(k, v)


class Trainer:
  """Model, optimizer, schedule and jitted steps for one process; shapes come from the config only."""
  def __init__(self, cfg: PlatformConfig, seed: int, spe: int):
    from tinyperf.benchmarks.resnet.model import make_model
    from tinyperf.benchmarks.resnet.optim import make_optimizer
    from tinyperf.benchmarks.resnet.steps import make_steps
    self.cfg, self.k, self.spe = cfg, cfg.knobs, spe
    self.devices = runtime.devices(cfg)
    self.ranked = beam.from_knobs(self.k)   # BEAM_COVERAGE / BEAM_BUDGET_S: search the slowest kernels first
    self.model = make_model(self.k, self.devices, seed)
    self.optimizer, self.scheduler = make_optimizer(self.model, self.k, spe)
    self.train_step, self.eval_step = make_steps(self.model, self.optimizer, self.scheduler, self.k, self.devices)

  def fake_batch(self, bs: int):
    import numpy as np
    s = self.k["IMAGE_SIZE"]
    return np.zeros((bs, s, s, 3), np.uint8), np.zeros((bs,), np.int32)


def run_fake_steps(tr: Trainer, n: int, with_eval: bool = True):
  """JIT capture + BEAM search on fake data with the real shapes (what INIT is for)."""
  from tinyperf.benchmarks.resnet.steps import to_device
  timer = runtime.StepTimer()
  with beam.beam_context(tr.k, "TRAIN_BEAM", tr.ranked):
    x, y = tr.fake_batch(tr.k["BS"])
    for i in range(n): runtime.timed_init_step(timer, i, lambda: tr.train_step(*to_device(x, y, tr.devices))[0])
  if not with_eval: return timer
  with beam.beam_context(tr.k, "EVAL_BEAM", tr.ranked):
    x, y = tr.fake_batch(tr.k["EVAL_BS"])
    for i in range(min(n, 3)):
      runtime.host_scalar(tr.eval_step(*to_device(x, y, tr.devices))[0])
  return timer


def init_phase(cfg: PlatformConfig, args) -> int:
  init(cfg, args)
  return 0


def init(cfg: PlatformConfig, args) -> Trainer:
  """INIT; returns the trainer with its steps captured and its state back at the seed's initial values."""
  from mlperf_logging.mllog import constants as C
  from tinyperf.benchmarks.common.checkpoint import restore_state, snapshot_state
  from tinyperf.benchmarks.resnet.data import load_manifest
  mlperf.log_submission_info(cfg)
  # the train-set size fixes the LR schedule's constants, which are compiled into the step kernels that INIT searches:
  # read it from the manifest (no image is opened) so that RUN finds the same kernels in the cache
  num_train = len(load_manifest(args.data, check_files=False)["train"]) if args.data else IMAGENET_COUNTS["train"]
  method = os.environ.get("TINYPERF_CACHE_DROPPED") or mlperf.drop_page_cache(
    [args.data] if args.data else [], mlperf.drops_host_cache(cfg))
  print(f"page cache dropped with {method}", flush=True)
  mlperf.event(C.CACHE_CLEAR, True, metadata={"method": method})
  mlperf.start(C.INIT_START)
  spe = steps_per_epoch(num_train, cfg["BS"])
  t0 = runtime.now()
  tr = Trainer(cfg, args.seed, spe)
  initial = snapshot_state(tr.model, tr.optimizer, tr.scheduler)
  n = runtime.JIT_WARMUP_STEPS + (args.benchmark_steps or 1)  # captured on the 1st call, replayed from the 2nd
  # a BENCHMARK run stops after its train steps: warming up the eval step would only lengthen it
  timer = run_fake_steps(tr, n, with_eval=not args.benchmark_steps)
  restore_state(initial, tr.model, tr.optimizer, tr.scheduler)   # the fake steps trained: RUN starts from the seed's init
  del initial
  if cfg.knobs.get("KERNELS") == "triton":   # the tiles that ran and what compiling them took, in the run's folder
    from tinyperf.benchmarks.kernels import program
    print(program.write_record(RunDir(args.work).kernels), flush=True)
  mlperf.event(C.INIT_STOP)
  init_s = runtime.now() - t0
  print(f"init took {init_s:.1f} s", flush=True)
  if args.benchmark_steps:
    print(timer.summary(cfg["BS"], spe * cfg["EPOCHS"], "img", runtime.no_projection(cfg)), flush=True)
    runtime.print_bench_record(cfg, timer, items_per_step=cfg["BS"], steps_to_train=spe * cfg["EPOCHS"], unit="img",
                               init_s=init_s, ranked_beam=tr.ranked and [r.summary() for r in tr.ranked.reports])
  return tr


def evaluate(tr: Trainer, manifest, seed: int, epoch: int) -> tuple[float, float]:
  from tinyperf.benchmarks.resnet.data import batches
  from tinyperf.benchmarks.resnet.steps import to_device
  k = tr.k
  loss_sum, correct, seen = 0.0, 0, 0
  with beam.beam_context(k, "EVAL_BEAM", tr.ranked):
    val = manifest["val"]
    for x, y, n_real in batches(val.files, val.labels, k["EVAL_BS"], train=False, seed=seed, epoch=epoch,
                                image_size=k["IMAGE_SIZE"], num_workers=k["NUM_WORKERS"], ring_batches=k["SHM_RING_BATCHES"],
                                shards=len(tr.devices)):
      l, c, n = tr.eval_step(*to_device(x, y, tr.devices))
      loss_sum += runtime.host_scalar(l)
      correct, seen = correct + int(runtime.host_scalar(c)), seen + int(runtime.host_scalar(n))
  if seen != len(manifest["val"]):
    raise RuntimeError(f"eval saw {seen} real samples, the manifest lists {len(manifest['val'])}")
  return loss_sum / seen, correct / seen


def train_epoch(tr: Trainer, train, seed: int, e: int, spe: int, timer: runtime.StepTimer, benchmark: int) -> bool:
  """One epoch of jitted train steps on real data. Returns True when BENCHMARK steps are done (stop the run)."""
  from tinygrad import GlobalCounters
  from tqdm import tqdm
  from tinyperf.benchmarks.resnet.data import batches
  from tinyperf.benchmarks.resnet.steps import to_device
  k = tr.k
  first, t_epoch = len(timer.steps), runtime.now()
  with batches(train.files, train.labels, k["BS"], train=True, seed=seed, epoch=e, image_size=k["IMAGE_SIZE"],
               num_workers=k["NUM_WORKERS"], ring_batches=k["SHM_RING_BATCHES"], shards=len(tr.devices)) as it, \
       tqdm(total=spe, desc=f"epoch {e+1}/{k['EPOCHS']}", unit="step", disable=bool(benchmark), dynamic_ncols=True) as bar, \
       beam.beam_context(k, "TRAIN_BEAM", tr.ranked):
    for i, (x, y, _) in enumerate(it):
      t0 = runtime.now()
      loss, _ = tr.train_step(*to_device(x, y, tr.devices))
      loss = runtime.host_scalar(loss)  # syncs: the step time includes the device
      timer.add(runtime.now() - t0, it.last_wait_s)
      if not math.isfinite(loss): raise FloatingPointError(f"loss is {loss} at epoch {e+1} step {i}")
      runtime.metric("step", epoch=e + 1, step=i, steps=spe, loss=loss, step_s=timer.steps[-1], wait_s=it.last_wait_s,
                     rate=k["BS"] / timer.steps[-1], unit="img")
      bar.update(1)
      bar.set_postfix(loss=f"{loss:.3f}", img_s=f"{k['BS']/timer.steps[-1]:.0f}", wait_ms=f"{it.last_wait_s*1e3:.0f}",
                      mem_gb=f"{GlobalCounters.mem_used/1e9:.1f}")
      if benchmark and timer.done(benchmark): break
  print(runtime.epoch_summary(e + 1, timer, first, k["BS"], runtime.now() - t_epoch, "img"), flush=True)
  return bool(benchmark and timer.done(benchmark))


def print_feeding_budget(cfg: PlatformConfig, host: int | None = None):
  """The cores this platform's loader needs against the cores this process may use (host: for tests); a loud
  warning on stderr when short."""
  from tinyperf.benchmarks.common.feeding import banner, budget, host_cores
  b = budget(cfg, host_cores() if host is None else host)
  print(f"feeding budget: {b.line()}", flush=True)
  if b.warnings(): print(banner(b.warnings()), file=sys.stderr, flush=True)
  return b


def all_phases(cfg: PlatformConfig, args) -> int:
  """INIT then RUN in one process: RUN's steps are replays of what INIT captured."""
  return run_phase(cfg, args, init(cfg, args))


def run_phase(cfg: PlatformConfig, args, tr: Trainer | None = None) -> int:
  from mlperf_logging.mllog import constants as C
  k = cfg.knobs
  print_feeding_budget(cfg)  # before the clock: host facts only
  mlperf.start(C.RUN_START)  # the clock starts before any dataset access
  print(runtime.RUN_STARTED, flush=True)
  runtime.set_stage("RUN (training; evaluating)")
  with mlperf.abort_on_failure():  # from here on, a failure still ends the log with run_stop aborted
    status = run_training(cfg, args, tr)
  if status is None: return 0  # a BENCHMARK run: no run_stop
  mlperf.end(C.RUN_STOP, metadata={C.STATUS: status})
  if status != C.SUCCESS: print(f"target {k['TARGET']} not reached in {k['EPOCHS']} epochs", file=sys.stderr)
  return 0 if status == C.SUCCESS else 1


def run_training(cfg: PlatformConfig, args, tr: Trainer | None = None) -> str | None:
  """Everything of RUN between run_start and run_stop; returns the run_stop status (None for a BENCHMARK run).
  tr: INIT's trainer when both phases run in this process, else RUN builds its own (and its JIT captures anew)."""
  from mlperf_logging.mllog import constants as C
  from tinyperf.benchmarks.resnet.data import load_manifest
  from tinyperf.benchmarks.common.checkpoint import save_state, load_state
  k = cfg.knobs
  mlperf.event(C.SEED, args.seed)
  if args.data is None: raise InputError("--data is required for the RUN phase (the prepared ImageNet directory)")
  manifest = load_manifest(args.data)
  spe = steps_per_epoch(len(manifest["train"]), k["BS"])
  log_hparams(cfg, manifest)
  if tr is None: tr = Trainer(cfg, args.seed, spe)
  elif tr.spe != spe:   # the schedule's constants are compiled into the captured step
    raise RuntimeError(f"INIT compiled the schedule for {tr.spe} steps per epoch, the data has {spe}")
  start_epoch = 0
  if args.resume:
    load_state(args.resume, tr.model, tr.optimizer, tr.scheduler)
    start_epoch = tr.scheduler.steps_done() // spe
    print(f"resumed from {args.resume} at epoch {start_epoch + 1}", flush=True)
  timer, benchmark = runtime.StepTimer(), args.benchmark_steps
  for e in range(start_epoch, k["EPOCHS"]):
    epoch = e + 1
    mlperf.start(C.EPOCH_START, epoch, metadata={C.EPOCH_NUM: epoch})
    if train_epoch(tr, manifest["train"], args.seed, e, spe, timer, benchmark):
      print(timer.summary(k["BS"], spe * k["EPOCHS"], "img", runtime.no_projection(cfg)), flush=True)
      return None
    mlperf.event(C.EPOCH_STOP, epoch, metadata={C.EPOCH_NUM: epoch})
    if not should_eval(epoch, k): continue
    mlperf.start(C.EVAL_START, epoch, metadata={C.EPOCH_NUM: epoch})
    eval_loss, top1 = evaluate(tr, manifest, args.seed, e)
    mlperf.event(C.EVAL_ACCURACY, top1, metadata={C.EPOCH_NUM: epoch})
    mlperf.end(C.EVAL_STOP, epoch, metadata={C.EPOCH_NUM: epoch})
    print(f"epoch {epoch}: eval loss {eval_loss:.4f}, top-1 {top1:.4f} (target {k['TARGET']})", flush=True)
    runtime.metric("eval", epoch=epoch, loss=eval_loss, accuracy=top1)
    if args.ckpt:
      path = save_state(RunDir(args.work).checkpoint(f"resnet_{args.seed}_e{epoch}.safetensors"), tr.model, tr.optimizer,
                        tr.scheduler)
      print(f"saved training state to {path}", flush=True)
    if top1 >= k["TARGET"]: return C.SUCCESS
  return C.ABORTED


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  return runtime.run_entrypoint(SPEC, args, {"all": all_phases, "init": init_phase, "run": run_phase})


if __name__ == "__main__":
  sys.exit(main())
