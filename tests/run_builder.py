"""Build what `tinyperf run --results R` leaves behind, without training: R/results/<system>/<bm>/result_<i>.txt (real
mllog logs from mllog_builder), R/runs/<system>/<bm>/ledger.json (through tinyperf.tooling.common.ledger) and each attempt's raw console
output (provenance lines and tqdm progress with img_s, the way benchmarks/resnet/train.py prints them).

  root = make_runs(tmp, "resnet")                       # 5 finished runs, distinct seeds
  make_runs(tmp, "resnet", attempts=[dict(index=0, seed=1, status="failed"), dict(index=0, seed=2), ...])
"""
from __future__ import annotations
import json
from pathlib import Path

from tinyperf.benchmarks.common.runtime import metrics_path
from mllog_builder import T0_MS, systems_json, write_log
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common import results_tree as T

GIT_SHA = "0123456789abcdef0123456789abcdef01234567"


def default_seed(i: int) -> int: return (1_000_000_007 + 7919 * 104_729 * i) % 2 ** 31


def console_output(benchmark: str, seed: int) -> str:
  """Raw output of INIT + RUN as report reads it: the provenance lines (progress bars and the rest are for people)."""
  prov = (f"provenance: tinyperf=0.1.0, git_sha={GIT_SHA}, tinygrad=0.14.0, mlperf_logging=4.1.68, python=3.11.7, "
          f"image_digest=none (not in a tinyperf image)")
  return "\n".join([prov, "init took 95.0 s", prov, "epoch 1: eval loss 1.0000, top-1 0.1000 (target 0.759)"]) + "\n"


def metrics_output(benchmark: str, seed: int, epochs: int = 4, steps: int = 10, rate: float = 20000.0) -> str:
  """A RUN's metrics file (tinyperf.benchmarks.common.runtime.metric): one step record per train step, an eval per epoch."""
  out = []
  for e in range(1, epochs + 1):
    for s in range(steps):
      v = rate * (0.5 if s == 0 else 1.0) * (1 + 0.01 * ((seed + s) % 5))
      rec = (dict(epoch=e, step=s, steps=steps, unit="img") if benchmark == "resnet" else
             dict(step=(e - 1) * steps + s + 1, samples=((e - 1) * steps + s + 1) * 96, unit="seq"))
      out.append(json.dumps({"kind": "step", "loss": 3.2, "step_s": 0.1, "wait_s": 0.001, "rate": v, **rec}))
    out.append(json.dumps({"kind": "eval", "epoch": e, "accuracy": e / 10}))
  return "\n".join(out) + "\n"


def make_runs(root: str | Path, benchmark: str = "resnet", *, system: str = "tinybox_green", n: int | None = None,
              seeds: list | None = None, runs: list[dict] | None = None, attempts: list[dict] | None = None,
              outputs: bool = True, systems_dir: bool = True, **common) -> Path:
  """R = <root>/R with results/, runs/ (ledger + raw outputs) and, unless systems_dir=False, <root>/systems/<system>.json.

  attempts: one dict per ledger attempt, in ledger order: index, seed (default: distinct), status (default done),
  started (default: increasing with position), converged, log (write_log keywords for a finished run). Default: n
  finished runs 0..n-1. runs[i] / common: write_log keywords of run i / of every run."""
  root = Path(root)
  R = root / "R"
  n = n if n is not None else (5 if benchmark == "resnet" else 10)
  if attempts is None:
    attempts = [dict(index=i, seed=(seeds[i] if seeds else default_seed(i))) for i in range(n)]
  res_dir = R / "results" / system / benchmark
  run_dir = R / "runs" / system / benchmark
  res_dir.mkdir(parents=True, exist_ok=True); run_dir.mkdir(parents=True, exist_ok=True)
  ledger = run_dir / "ledger.json"
  for k, spec in enumerate(attempts):
    i = spec["index"]
    seed = spec.get("seed", default_seed(100 + k))
    status = spec.get("status", L.DONE)
    work = run_dir / f"run_{i}_{seed}"
    work.mkdir(parents=True, exist_ok=True)
    att = L.Attempt(index=i, seed=seed, status=status, started=1_700_000_000.0 + spec.get("started", k) * 10_000,
                    output=str(work / "output.log"))
    if outputs:
      (work / "output.log").write_text(console_output(benchmark, seed))
      metrics_path(work / T.RUN_LOG).write_text(metrics_output(benchmark, seed))
    if status == L.DONE:
      kw = dict(common)
      kw.setdefault("platform", system)
      kw.setdefault("run_minutes", (120.0 if benchmark == "resnet" else 220.0) + 0.5 * ((i * 7) % 5))
      if benchmark == "resnet": kw.setdefault("epochs", 35 + i % 3)
      else: kw.setdefault("evals", 16 + i % 3)
      if runs and i < len(runs) and runs[i]: kw.update(runs[i])
      kw.update(spec.get("log") or {})
      write_log(res_dir / f"result_{i}.txt", benchmark, seed=spec.get("logged_seed", seed),
                t0_ms=T0_MS + k * 10_000_000, **kw)
      att.result, att.finished = str(res_dir / f"result_{i}.txt"), att.started + 9000
      att.converged = spec.get("converged", kw.get("status", "success") == "success")
      att.exit_codes = {"init": 0, "run": 0 if att.converged else 1}
    L.add_attempt(ledger, att, nexp=max(n, *(a["index"] + 1 for a in attempts)))   # the set size `run` records
  if systems_dir:
    sd = root / "systems"
    sd.mkdir(exist_ok=True)
    (sd / f"{system}.json").write_text(json.dumps(systems_json(system), indent=2))
  return R
