"""One run's work folder W, the entrypoint's `--work`: the one place that names the files a run writes and reads there.

  W/mlperf.txt                 the MLPerf log (`--log` puts it elsewhere: the rendered scripts name it per seed)
  W/mlperf.metrics.jsonl       RUN's training metrics, beside the log (`<log stem>.metrics.jsonl`)
  W/cache/tinygrad.db          tinygrad's kernel/BEAM cache (CACHEDB, tinygrad's own variable, puts it elsewhere)
  W/cache/triton/              Triton's compiled kernels (KERNELS=triton): beside CACHEDB wherever that is (triton_cache),
                               unless TRITON_CACHE_DIR, Triton's own variable, names another place
  W/kernels.json               KERNELS=triton: each Triton kernel INIT compiled, its tile, compile time and cache hit
  W/config.json                the resolved config `tinyperf run` wrote when it claimed the run (knobs after overrides,
                               platform, submitter, sha256): what preflight and the trainer run with
  W/output.log, W/exit_codes.json   the launcher's: the run's whole console output, the exit codes of its processes
  W/ckpt/                      training-state checkpoints (CKPT=1)

`tinyperf run` makes W = R/runs/<system>/<bm>/run_<i>_<seed>/ (tooling/common/results_tree.py); imports nothing of
tooling or tinygrad."""
from __future__ import annotations
from dataclasses import dataclass
from pathlib import Path

from tinyperf.benchmarks.common.config import ConfigError, PlatformConfig, load_config, load_resolved
from tinyperf.benchmarks.common.spec import BenchmarkSpec

RUN_LOG = "mlperf.txt"
OUTPUT_LOG = "output.log"
CACHE = "cache"
CONFIG_JSON = "config.json"
EXIT_CODES = "exit_codes.json"
KERNELS_RECORD = "kernels.json"
TRITON_CACHE = "triton"


def metrics_path(log: Path) -> Path:
  """Where a run's training metrics go: beside its MLPerf log, <log stem>.metrics.jsonl."""
  return log.with_name(f"{log.stem}.metrics.jsonl")


def triton_cache(cache_db: Path) -> Path:
  """Triton's disk cache of compiled kernels: a folder beside tinygrad's kernel cache file, so it lives (and is kept
  across runs or not) where that cache does."""
  return cache_db.parent / TRITON_CACHE


@dataclass(frozen=True)
class RunDir:
  path: Path

  @property
  def log(self) -> Path: return self.path / RUN_LOG
  @property
  def metrics(self) -> Path: return metrics_path(self.log)
  @property
  def output(self) -> Path: return self.path / OUTPUT_LOG
  @property
  def cache(self) -> Path: return self.path / CACHE
  @property
  def cache_db(self) -> Path: return self.cache / "tinygrad.db"
  @property
  def config(self) -> Path: return self.path / CONFIG_JSON
  @property
  def exit_codes(self) -> Path: return self.path / EXIT_CODES
  @property
  def kernels(self) -> Path: return self.path / KERNELS_RECORD
  def checkpoint(self, name: str) -> Path: return self.path / "ckpt" / name



def load_run_config(spec: BenchmarkSpec, platform: str, config: Path | None = None,
                    work: Path | None = None) -> tuple[PlatformConfig, str | None]:
  """(config, submitter) a process of a run works with: a resolved config.json (--config FILE.json, or the one the
  launcher left in the work folder) as written; else the platform's config.yaml (--config: another YAML file) with the
  environment's overrides and no submitter (the caller's SUBMISSION_ORG). Resolving happens once, in the launcher."""
  resolved = config if config is not None and config.suffix == ".json" else None
  if config is None and work is not None and RunDir(work).config.is_file(): resolved = RunDir(work).config
  if resolved is None: return load_config(spec, platform, path=config), None
  cfg, submitter, _ = load_resolved(resolved, spec)
  if cfg.platform != platform:
    raise ConfigError(f"{resolved}: the resolved config of {cfg.benchmark} on {cfg.platform}, not {spec.name} on "
                      f"{platform}; pass the --platform it was written for, or another work folder.")
  return cfg, submitter
