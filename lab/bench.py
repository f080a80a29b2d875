"""`python -m lab.bench resnet|bert --gpus N [--against torch]`: our tinygrad train step and a PyTorch one, side by side, one command.

Both sides run as processes on the same machine: the tinygrad side is the real training entrypoint in INIT phase with
BENCHMARK steps on fake data of the real shapes (so BEAM and the JIT behave as in a submission), the PyTorch side is
lab/<bm>/bench_torch.py (PyTorch is only needed where this runs; it is no dependency of tinyperf).
Prints throughput, step time, memory and the ratios; --record appends every figure as one JSON line."""
from __future__ import annotations
import argparse
import fcntl
import json
import io
import math
import os
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tinyperf.benchmarks.common.config import ROOT, PlatformConfig, available_platforms, bert_dropout, coerce_knob, config_path
from tinyperf.benchmarks.common.rules import closed_model_changes
from tinyperf.benchmarks.registry import BENCHMARKS, SCHEMA, load_config
from tinyperf.tooling.common.errors import InputError, UserError, stop_on_signals

TAG = "tinyperf-bench "


class _Typed(argparse.Action):
  """Stores the flag's value and notes it in `typed`: a default that replaces an environment value is said as one."""
  def __call__(self, parser, namespace, value, option_string=None):
    setattr(namespace, self.dest, value)
    namespace.typed = namespace.typed | {self.dest}


def add_arguments(p: argparse.ArgumentParser):
  p.add_argument("benchmark", choices=tuple(BENCHMARKS))
  p.set_defaults(typed=frozenset())
  p.add_argument("--gpus", type=int, default=1, action=_Typed, help="GPUs for the tinygrad side (PyTorch runs on one)")
  p.add_argument("--platform", help="config to start from (default: <gpus>xH200)")
  p.add_argument("--bs", type=int, action=_Typed, help="batch per GPU (default: the platform config's)")
  p.add_argument("--steps", type=int, default=20, help="timed steps per side (median reported)")
  p.add_argument("--beam", type=int, help="TRAIN_BEAM for the tinygrad side (default: the config's)")
  p.add_argument("--against", choices=("torch", "none"), default="torch")
  p.add_argument("--torch-modes", default="eager,compile")
  p.add_argument("--record", type=Path, help="append the JSON records to this file")
  p.add_argument("--beam-cache", type=Path, help="sqlite file of BEAM search results: seeds the tinygrad side's kernel "
                 "cache and receives what it searched (also when stopped), so a search can go on across machines")
  p.add_argument("--dropout", type=float, help="bert: hidden and attention dropout on both sides (default 0.1, as in a "
                 "submission; 0 measures what dropout costs)")
  p.add_argument("--vary", metavar="KNOB=VALUE", help="run the tinygrad side a second time with one config knob changed "
                 "(e.g. USE_ATOMICS=1) and print the ratio: what one change buys, measured side by side")
  p.add_argument("--time-limit", type=float, help="stop the tinygrad side after this many seconds (with --beam-cache, "
                 "what it searched so far is kept)")


def _records(out: str) -> list[dict]:
  return [json.loads(line[line.index(TAG) + len(TAG):]) for line in out.splitlines() if TAG in line]


UNIT = {"resnet": "img_per_s", "bert": "seq_per_s"}


def platform(args) -> str:
  """--platform, or the H200 config of --gpus GPUs."""
  if args.platform: return args.platform
  name = f"{args.gpus}xH200"
  if not config_path(args.benchmark, name).is_file():   # --gpus 0 once read "unknown platform '0xH200'"
    gpus = [p.removesuffix("xH200") for p in available_platforms(args.benchmark) if p.endswith("xH200")]
    raise UserError(f"--gpus {args.gpus}: without --platform, bench starts from the {name} config, and there is none. "
                    f"Pass --gpus {' or '.join(gpus) or 'N'} (the H200 configs), or --platform (one of "
                    f"{', '.join(available_platforms(args.benchmark))}).")
  return name


def config(args):
  """The platform's config file as it is (no environment): bench's defaults (--bs), its vendor and name."""
  cfg = load_config(args.benchmark, platform(args), environ={})
  if args.bs is None: args.bs = cfg["BS"] // cfg["GPUS"]
  return cfg


def tinygrad_env(args, varied: dict) -> tuple[dict, dict]:
  """The tinygrad side's environment: this one with the knobs bench's flags set (--vary's last: it changes one of
  them), and for each of those knobs the flag that set it, for the config loader to name in an error."""
  config(args)   # --bs's default
  typed = getattr(args, "typed", None)   # None: args not from the parser, every flag counts as typed
  def said(flag: str, value) -> str:
    return f"--{flag} {value}" + ("" if typed is None or flag in typed else " (bench's default)")
  bs = said("bs", args.bs) + (f" x {said('gpus', args.gpus)}" if args.gpus != 1 else "")   # BS: the batch of all GPUs
  flags = {"GPUS": (args.gpus, said("gpus", args.gpus)), "BS": (args.bs * args.gpus, bs),
           "EVAL_BS": (args.bs * args.gpus, bs)}
  if args.beam is not None: flags["TRAIN_BEAM"] = (args.beam, f"--beam {args.beam}")
  if args.dropout is not None: flags["DROPOUT"] = (args.dropout, f"--dropout {args.dropout}")
  flags.update({k: (v, f"--vary {args.vary}") for k, v in varied.items()})
  env = {**os.environ, "PYTHONUNBUFFERED": "1", **{k: str(v) for k, (v, _) in flags.items()}}
  return env, {k: flag for k, (_, flag) in flags.items()}


def replaced_from_env(args, varied: dict) -> list[str]:
  """One line per value of the user's environment that a flag of bench replaces in the tinygrad side's environment
  (`BS=128 python -m lab.bench ... --bs 8` trains 8): the flag wins, said before the run as the entrypoint says its own
  overrides. A value the flag sets again, spelt alike or not (08 for 8), is not named."""
  said = {}
  for run in ({}, varied) if varied else ({},):
    env, given_as = tinygrad_env(args, run)
    for k, flag in given_as.items():
      mine = os.environ.get(k, "")
      if mine and _as_loaded(args, k, mine) != _as_loaded(args, k, env[k]):
        said[f"bench: {flag} replaces {k}={mine} from the environment"] = None
  if args.beam_cache and os.environ.get("CACHEDB"):   # the tinygrad side's kernel cache is a temp file then
    said[f"bench: --beam-cache {args.beam_cache} replaces CACHEDB={os.environ['CACHEDB']} from the environment"] = None
  return list(said)


def _as_loaded(args, key: str, value: str):
  """value as the config loader reads key from the environment; one it would refuse, as it is."""
  try: return coerce_knob(value, SCHEMA[args.benchmark][key], key, key, from_env=True)
  except InputError: return value


def tinygrad_config(args, varied: dict) -> PlatformConfig:
  """The config the tinygrad side will load, loaded here from the environment it will get: a value the config refuses
  is refused before any process starts (the child would refuse it only after its start, and name the environment
  variable bench set rather than the flag the user typed)."""
  env, given_as = tinygrad_env(args, varied)
  return load_config(args.benchmark, platform(args), environ=env, given_as=given_as)


def dropout(args, cfg) -> float:
  return args.dropout if args.dropout is not None else bert_dropout(cfg.knobs)


def run_tinygrad(args, varied: dict) -> dict:
  cfg = config(args)
  env, _ = tinygrad_env(args, varied)
  # SIGTERM arrives as a KeyboardInterrupt (stop_on_signals): stream_process stops the child's process group, the
  # finally below saves the BEAM cache one last time, and the with removes this folder
  with tempfile.TemporaryDirectory() as tmp:
    if args.beam_cache:   # a BEAM search continued from the searches saved by earlier runs of this command
      env["CACHEDB"] = str(Path(tmp) / "cache.db")
      seeded = seed_beam_cache(str(args.beam_cache), args.beam_cache, Path(env["CACHEDB"]))
      print(f"bench: {seeded} BEAM-searched kernels carried in from {args.beam_cache}", flush=True)
    cmd = [sys.executable, "-m", f"tinyperf.benchmarks.{args.benchmark}.train", "--platform", cfg.platform, "--phase", "init",
           "--seed", "0", "--work", tmp, "--benchmark-steps", str(args.steps)]
    t0, out, stop = time.time(), io.BytesIO(), threading.Event()
    saver = None
    if args.beam_cache:
      saver = threading.Thread(target=follow_beam_cache, args=(Path(env["CACHEDB"]), args.beam_cache),
                               kwargs={"stop": stop}, daemon=True)
      saver.start()
    try:
      from tinyperf.tooling.common.process import stream_process
      rc, stopped = stream_process(cmd, env, out, ROOT, time_limit=args.time_limit)
    finally:
      if saver:   # the last save after the saver's (both write dest's .tmp)
        stop.set(); saver.join()
        save_beam_cache(Path(env["CACHEDB"]), args.beam_cache)
  out = out.getvalue().decode(errors="replace")
  recs = _records(out)
  if stopped:
    raise UserError(f"the tinygrad side did not finish within --time-limit {args.time_limit:.0f} s and was stopped"
                    + (f"; the kernels it searched are saved in {args.beam_cache}: run the same command again to go on"
                       if args.beam_cache else ""))
  if rc != 0 or not recs:   # its output was streamed above as it came: the error names its last line, not all of it again
    last = next((line.strip() for line in reversed(out.splitlines()) if line.strip()), "(nothing)")
    why = f"failed (exit {rc})" if rc != 0 else "ended without a timing record"
    raise UserError(f"the tinygrad side {why}; its output is above, ending with: {last[-300:]}")
  return {**recs[-1], "wall_s": time.time() - t0, **({"dropout": dropout(args, cfg)} if args.benchmark == "bert" else {})}


# tinygrad's kernel cache (CACHEDB, sqlite) holds compiled programs (large: >100 MB for ResNet-50) and, in the
# beam_search_<version> tables, the chosen optimizations per kernel AST (small). Only the latter is carried between
# machines: with it, a later run compiles the chosen kernels without searching again.
def copy_beam_tables(src: Path, dst: Path) -> int:
  """Add src's beam_search tables to the sqlite file dst (created if missing); returns how many rows dst then has."""
  con = sqlite3.connect(dst)
  try:
    con.execute("ATTACH DATABASE ? AS src", (str(src),))
    tables = con.execute("SELECT name, sql FROM src.sqlite_master WHERE type='table' AND name LIKE 'beam_search%'").fetchall()
    for name, sql in tables:
      if not con.execute("SELECT 1 FROM main.sqlite_master WHERE name=?", (name,)).fetchone(): con.execute(sql)
      con.execute(f"INSERT OR REPLACE INTO main.\"{name}\" SELECT * FROM src.\"{name}\"")
    con.commit()
  finally:
    con.close()
  return beam_rows(dst, only=[name for name, _ in tables])


def seed_beam_cache(label: str, cache: Path, db: Path) -> int:
  """cache's BEAM results (if the file exists) into db, a fresh tinygrad CACHEDB; returns the rows carried in. label
  names cache in the error (`python -m lab.bench --beam-cache`, lab/scripts/upstream_beam.sh's CACHE)."""
  try:
    if not cache.is_file() or not copy_beam_tables(cache, db): return 0
    # tinygrad reads only its own version's table: rows of another version's are kept in the file, not searched again
    from tinygrad.helpers import VERSION
    ours = f"beam_search_{VERSION}"
    rows = beam_table_rows(cache)
    n = rows.get(ours, 0)
    others = sum(rows.values()) - n
    if others:
      print(f"{label}: {others} BEAM results come from another tinygrad version's search (not {ours}), which this "
            "tinygrad does not read: they stay in the file, and those kernels are searched again.", file=sys.stderr)
    return n
  except sqlite3.DatabaseError as e:
    raise UserError(f"{label}: not a BEAM cache that `python -m lab.bench --beam-cache` or lab/scripts/upstream_beam.sh wrote "
                    f"({e}). Pass another path (a missing file starts a new search) or remove this one; it was not "
                    "changed.") from None


def require_saving_folder(label: str, path: Path) -> None:
  """A file written at the end of a long run (a record, a BEAM cache) needs a folder to go to and must be a file it may
  write: checked before the run."""
  if path.is_dir():
    raise UserError(f"{label}: a directory, not a file, so what this run measures could not be saved. Pass a file's "
                    f"path (e.g. {path / ('beam.db' if 'cache' in label else 'perf.jsonl')}).")
  if not os.access(path.parent, os.W_OK):
    raise UserError(f"{label}: its folder {path.parent} does not exist or is not writable, so what this run measures "
                    "could not be saved. Create the folder or pass another path.")
  # by the mode bits, not os.access: root may write any file, but a file made read-only is one meant to stay as it is
  if path.exists() and not (path.stat().st_mode & 0o222 and os.access(path, os.W_OK)):
    # install, not cp: a copy cp makes of a read-only file is read-only too
    q = shlex.quote(str(path))
    raise UserError(f"{label}: the file is read-only, and this run would write into it. Pass a writable copy "
                    f"(install -m 644 {q} COPY), or make it writable (chmod u+w {q}); it was not changed.")


def beam_table_rows(db: Path) -> dict[str, int]:
  """Rows (searched kernel ASTs) per beam_search table of db; a table per tinygrad version (beam_search_<VERSION>)."""
  con = sqlite3.connect(db)
  try:
    names = [n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'beam_search%'")]
    return {n: con.execute(f"SELECT COUNT(*) FROM \"{n}\"").fetchone()[0] for n in names}
  finally:
    con.close()


def beam_rows(db: Path, only: list[str] | None = None) -> int:
  """How many kernels db's beam_search tables hold (one row per searched kernel AST); only: just these tables."""
  return sum(v for n, v in beam_table_rows(db).items() if only is None or n in only)


def save_beam_cache(cache_db: Path, dest: Path, quiet: bool = False) -> None:
  """Write cache_db's BEAM results to dest (a new file moved into place: an interrupted save leaves the old one)."""
  if not cache_db.is_file(): return
  tmp = dest.with_name(dest.name + ".tmp")
  # two runs saving into one dest (two benches, a bench and its periodic saver) would each merge the old dest and
  # replace it: the later replace drops what the other added. dest's folder is locked, as dest itself is replaced.
  folder = os.open(dest.parent, os.O_RDONLY)
  try:
    fcntl.flock(folder, fcntl.LOCK_EX)
    tmp.unlink(missing_ok=True)
    if dest.is_file(): copy_beam_tables(dest, tmp)
    n = copy_beam_tables(cache_db, tmp)
    os.replace(tmp, dest)
  finally:
    os.close(folder)
  if not quiet: print(f"bench: {n} BEAM-searched kernels saved in {dest}", flush=True)


# A search left running across device calls loses what it found since the last save when the machine is taken back: a
# save once a minute lost minutes of search (decisions.md). The cache is looked at every BEAM_SAVE_CHECK_S and
# saved when its beam_search tables changed, so a result reaches dest about that long after tinygrad writes it.
BEAM_SAVE_CHECK_S = 1.0


def beam_tables_state(db: Path) -> tuple:
  """What changes when tinygrad writes a search result: per beam_search table its rows and largest rowid (a result
  written again for a kernel already there replaces its row under a new rowid, past the largest, the latest's too)."""
  con = sqlite3.connect(db)
  try:
    names = sorted(n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'beam_search%'"))
    return tuple((n, *con.execute(f"SELECT COUNT(*), MAX(rowid) FROM \"{n}\"").fetchone()) for n in names)
  finally:
    con.close()


def follow_beam_cache(cache_db: Path, dest: Path, check_s: float = BEAM_SAVE_CHECK_S,
                      stop: threading.Event | None = None) -> None:
  """save_beam_cache each time cache_db's search results change, looking every check_s seconds, until stop is set
  (without one: until the process is killed). dest is left alone while nothing changes."""
  stop, saved = stop or threading.Event(), None
  while not stop.wait(check_s):
    try:
      if not cache_db.is_file(): continue
      state = beam_tables_state(cache_db)
      if state != saved:
        save_beam_cache(cache_db, dest, quiet=True)
        saved = state
    except sqlite3.OperationalError: pass    # the search holds its write lock just now: the next look saves it


# the models lab/<bm>/bench_torch.py builds: the closed ones, where the PyTorch side can follow BERT's depth
TORCH_SHAPES = {"resnet": BENCHMARKS["resnet"].closed_model,
                "bert": {k: v for k, v in BENCHMARKS["bert"].closed_model.items() if k != "BERT_LAYERS"}}


def torch_command(args) -> list[str]:
  """The PyTorch side's command, with the shapes the tinygrad side trains: the config with this environment's overrides
  (BERT_LAYERS=2 python -m lab.bench bert ... compares 2 layers with 2 layers). A model bench_torch cannot build is refused
  before anything runs: a ratio between two different models would be printed as if it were a speed-up."""
  cfg = config(args)
  shaped = tinygrad_config(args, {})
  differ = {k: v for k, v in closed_model_changes(shaped.spec, shaped.knobs).items() if k in TORCH_SHAPES[args.benchmark]}
  if differ:
    from_env = [k for k in differ if k in shaped.overridden]   # the rest come from the platform's config file
    raise UserError(f"--against torch: the tinygrad side would train {', '.join(f'{k}={v}' for k, v in differ.items())} "
                    f"(platform {cfg.platform}{' with this environment' if from_env else ''}), the PyTorch side only "
                    f"{', '.join(f'{k}={v}' for k, v in TORCH_SHAPES[args.benchmark].items())}. "
                    + (f"Unset {' '.join(from_env)}, or pass --against none." if from_env else "Pass --against none."))
  cmd = [sys.executable, "-m", f"lab.{args.benchmark}.bench_torch", "--bs", str(args.bs), "--steps", str(args.steps),
         "--modes", args.torch_modes]
  if args.benchmark == "bert":
    cmd += ["--seq", str(shaped["MAX_SEQ_LEN"]), "--preds", str(shaped["MAX_PREDICTIONS"]), "--layers",
            str(shaped["BERT_LAYERS"]), "--dropout", str(dropout(args, cfg))]
  return cmd


def run_torch(args, cmd: list[str]) -> list[dict]:
  # a process group of its own, as the tinygrad side's: SIGTERM (a KeyboardInterrupt, stop_on_signals) or Ctrl-C stops
  # what it started too (torch.compile's workers), not only the child as subprocess.run's kill did
  from tinyperf.tooling.common.process import stop_process_group
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
  try: stdout, stderr = proc.communicate()
  except BaseException:
    stop_process_group(proc)
    raise
  out = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
  if proc.returncode != 0 or not out:
    raise UserError(f"the PyTorch side failed (exit {proc.returncode}); is PyTorch installed here? {stderr[-1500:]}")
  return out


def vary(args) -> dict:
  """--vary KNOB=VALUE as an environment override of a knob of the benchmark's config schema; its value is checked
  with the rest of the second run's config (tinygrad_config), before anything runs."""
  if not args.vary: return {}
  key, sep, value = args.vary.partition("=")
  if not sep or key not in SCHEMA[args.benchmark]:
    raise UserError(f"--vary {args.vary}: give KNOB=VALUE with a knob of the {args.benchmark} config "
                    f"(benchmarks/common/config.py, benchmarks/{args.benchmark}/spec.py), e.g. --vary USE_ATOMICS=1.")
  return {key: value}


DEVICE_NODES = {"nv": "/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidiaN", "amd": "/dev/kfd, /dev/dri/renderD*"}


def gpu_name() -> str | None:
  """The first NVIDIA GPU's name and driver as nvidia-smi prints them, or None where it does not answer."""
  try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
  except (OSError, subprocess.SubprocessError): return None
  return smi[0] if smi else None


def require_gpus(args):
  """bench measures GPUs: refuse in one line before anything starts (no page-cache drop, no tinygrad device probe,
  which would fall back to the CPU and fail deep in a compile) when this machine does not show them."""
  from tinyperf.benchmarks.preflight import visible_gpus
  cfg = config(args)
  if cfg["vendor"] == "cpu": return   # cpu_smoke's toy models: the CPU step, for tests
  have, _ = visible_gpus(cfg["vendor"])
  if have < args.gpus:
    raise UserError(f"no GPU to measure: {cfg.platform} runs on {cfg['vendor'].upper()} GPUs (DEV={cfg['DEV']}) and this "
                    f"machine shows {have} ({DEVICE_NODES[cfg['vendor']]}); --gpus is {args.gpus}. Run it on the GPU "
                    f"machine, or pass --platform cpu_smoke --against none to try the command on the CPU.")


def main(args) -> int:
  stop_on_signals()   # SIGTERM (Slurm, docker stop, kill) must not leave the tinygrad side or its temp folder behind
  if args.dropout is not None and args.benchmark != "bert":   # its range is the config's DROPOUT knob's
    raise UserError(f"--dropout {args.dropout}: only `python -m lab.bench bert` takes it (ResNet has no dropout).")
  # each of these was found out only after INIT had run: --steps 0 times nothing, a limit <= 0 stops the run at once,
  # and the record and the search cache are written at the end
  if args.steps < 1: raise UserError(f"--steps {args.steps}: time at least one step (default 20).")
  if args.time_limit is not None and not 0 < args.time_limit < math.inf:
    raise UserError(f"--time-limit {args.time_limit:g}: give a number of seconds above 0, or leave it out for no limit.")
  for flag, path in (("--record", args.record), ("--beam-cache", args.beam_cache)):
    if path is not None: require_saving_folder(f"{flag} {path}", path)
  varied_env = vary(args)
  # what the tinygrad side's config loader would refuse (--bs 0, --gpus 0, --beam -1, a knob in this environment),
  # refused here, once, before anything starts
  tinygrad_config(args, {})
  if varied_env: tinygrad_config(args, varied_env)
  torch_cmd = torch_command(args) if args.against == "torch" else None
  require_gpus(args)
  for line in replaced_from_env(args, varied_env): print(line, flush=True)
  ours = run_tinygrad(args, {})
  ours_rows = [ours] + ([{**run_tinygrad(args, varied_env), "varied": args.vary}] if varied_env else [])
  theirs = run_torch(args, torch_cmd) if torch_cmd else []
  unit = UNIT[args.benchmark]
  per_gpu = ours[unit] / ours["gpus"]
  u = unit.split("_")[0]
  print(f"\n{'side':<28}{'GPUs':>5}{'batch':>7}{'step ms':>10}{u + '/s':>10}{u + '/s/GPU':>11}{'mem GB':>8}")
  for r in ours_rows:
    name = f"tinygrad BEAM={r['beam'].get('TRAIN_BEAM')}" + (f" {r['varied']}" if "varied" in r else "")
    print(f"{name:<28}{r['gpus']:>5}{r['bs']:>7}{r['median_step_ms']:>10.1f}{r[unit]:>10.0f}{r[unit] / r['gpus']:>11.0f}"
          f"{r['mem_used_gb']:>8.1f}")
  for r in ours_rows[1:]: print(f"ratio {r['varied']} / config: {r[unit] / ours[unit]:.3f}x throughput")
  for t in theirs:
    print(f"{'torch ' + t['mode'] + ' ' + t['dtype']:<28}{1:>5}{t['bs']:>7}{t['median_step_ms']:>10.1f}{t[unit]:>10.0f}"
          f"{t[unit]:>11.0f}{t['peak_mem_gb']:>8.1f}")
  for t in theirs: print(f"ratio tinygrad/torch {t['mode']} per GPU: {per_gpu / t[unit]:.3f}")
  projection = (f"projected time to train {ours['projected_minutes']:.0f} min (train steps only, no eval or data "
                "loading)" if ours.get("projected_minutes") is not None else
                f"no projected time to train: {ours.get('no_projection') or 'not in the record'}")
  print(f"tinygrad init {ours['init_s']:.0f} s; {projection}")
  for r in ours.get("ranked_beam") or []:   # what the step's figure stands on: how much of it was searched
    print(f"ranked BEAM: {r['searched']}/{r['kernels']} kernels given a search result ({r['cached']} of them from the "
          f"cache), {r['covered']:.1%} of the step's BEAM=0 time {r['step_beam0_s'] * 1e3:.1f} ms, {r['search_s']:.0f} s")
  if args.record:
    stamp, gpu = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), gpu_name()
    # the tinygrad rows name the card too (PyTorch's name theirs): a config called 1xH200 also runs on an H100
    ours_rows = [{**r, "gpu": gpu} if gpu else r for r in ours_rows]
    lines = "".join(json.dumps({"date": stamp, **r}) + "\n" for r in [*ours_rows, *theirs])
    # one write: a SIGTERM here (a KeyboardInterrupt between two statements) appends the whole set or nothing
    with open(args.record, "a") as f: f.write(lines)
  return 0


PROG = "python -m lab.bench"


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m lab.bench` (test_doc_commands checks the docs' commands with it)."""
  # no abbreviated flags: a flag cut short in the docs would still parse in their test
  p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0], allow_abbrev=False)
  add_arguments(p)
  return p


def cli(argv: list[str] | None = None) -> int:
  """The command line: bad input is one line and exit 2, a stop by signal exit 130, as tinyperf's verbs."""
  from tinyperf.tooling.cli import absolute_paths
  args = absolute_paths(build_parser().parse_args(argv))
  try: return main(args)
  except InputError as e:
    print(f"{PROG}: error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt as e:   # Ctrl-C, or SIGTERM/SIGHUP made one by stop_on_signals, which says which
    print(f"{PROG}: {str(e) or 'interrupted'}", file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(cli())
