"""`tinyperf sysinfo`: write systems/<system>.json from the machine it runs on.

Detected: CPU model, sockets, cores and vCPUs per socket, frequency, caches, memory, accelerators (nvidia-smi, else
rocm-smi, else none) with their count, model, memory, clock, driver and interconnect, the CUDA or ROCm version, the OS,
kernel, Python, tinygrad and mlperf-logging versions, the tinyperf commit and the base-image digest
(TINYPERF_BASE_DIGEST). What a machine cannot tell about itself (submitter, division, status, storage, cooling,
networking, memory configuration, marketing names) comes from an overrides file (YAML or JSON), which wins over detection.

The result is validated with the real system_desc_checker for every ruleset the system is used with (from the platform
configs that name it, or --ruleset) before anything is written, and an existing file is never replaced without --force.

`tinyperf run` records the machine its runs ran on as RESULTS/systems/<system>.json (record_run_system): detected in
the run's container (`python -m tinyperf.tooling.launch.sysinfo --detect-json FILE`, with the image in TINYPERF_IMAGE) or on the host
with --runtime host, layered over the repository's systems/<system>.json and under --system-overrides.

Detection (tooling/launch/sysinfo_detect.py) reads through a Probe (files, commands, environment), so tests feed
it recorded outputs."""
from __future__ import annotations
import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from tinyperf.benchmarks.common.config import ROOT, available_platforms, load_yaml
from tinyperf.benchmarks.registry import BENCHMARKS, load_config
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common.container import host_path
from tinyperf.tooling.common.errors import UserError, write_atomic
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.launch.scheduler import Scheduler
from tinyperf.tooling.launch.sysinfo_detect import detect

# The fields system_desc_checker requires (presence only), in its order.
FIELDS = (
  "submitter", "division", "status", "system_name", "number_of_nodes",
  "host_processors_per_node", "host_processor_model_name", "host_processor_core_count", "host_processor_vcpu_count",
  "host_processor_frequency", "host_processor_caches", "host_processor_interconnect", "host_memory_capacity",
  "host_storage_type", "host_storage_capacity", "host_networking", "host_networking_topology",
  "host_memory_configuration",
  "accelerators_per_node", "accelerator_model_name", "accelerator_host_interconnect", "accelerator_frequency",
  "accelerator_on-chip_memories", "accelerator_memory_configuration", "accelerator_memory_capacity",
  "accelerator_interconnect", "accelerator_interconnect_topology",
  "cooling", "hw_notes", "framework", "other_software_stack", "operating_system", "sw_notes",
)
# In the submission rules' table but not required by the tool: accepted in an overrides file.
OPTIONAL_FIELDS = ("system_type", "host_network_card_count")
# For rulesets >= 4.0 the checker accepts exactly these status strings (the log's submission_status is another thing).
STATUS_VALUES = ("Available on-premise", "Available cloud", "Research, Development, or Internal (RDI)", "Preview")
DIVISIONS = ("closed", "open")
COUNT_FIELDS = ("number_of_nodes", "host_processors_per_node", "accelerators_per_node")
# Never detected; the overrides file supplies them (an empty string means "unknown" to the checker).
MUST_OVERRIDE = ("submitter", "division", "status")


# ---------------------------------------------------------------------------------------------------------------------
# overrides and merging

def load_overrides(path: Path) -> dict:
  """An overrides file (YAML, or JSON, which YAML reads too) of systems-JSON fields. Unknown keys are refused (a typo
  would otherwise add a field and leave the intended one empty); scalars become strings."""
  path = Path(path)
  try:
    text = path.read_text(encoding="utf-8")
  except FileNotFoundError:
    raise UserError(f"{path}: overrides file not found. Give a YAML or JSON file of systems-JSON fields "
                    f"(submitter, division, status, cooling, ...).") from None
  except (OSError, UnicodeDecodeError) as e:
    raise UserError(f"{path}: cannot read the overrides file ({e}).") from None
  try:
    data = json.loads(text) if path.suffix == ".json" else load_yaml(path, text)   # aliases, keys written twice: refused
  except json.JSONDecodeError as e:
    raise UserError(f"{path}:{e.lineno}: the overrides file is not valid JSON ({e.msg}, column {e.colno}). Fix the "
                    f"syntax.") from None
  if data is None: return {}
  if not isinstance(data, dict):
    raise UserError(f"{path}: the overrides file must be a mapping of systems-JSON fields to values, got "
                    f"{type(data).__name__}.")
  known = set(FIELDS) | set(OPTIONAL_FIELDS)
  unknown = sorted(str(k) for k in data if k not in known)
  if unknown:
    raise UserError(f"{path}: unknown field(s) {', '.join(unknown)}. A systems JSON has these fields: "
                    f"{', '.join(FIELDS + OPTIONAL_FIELDS)}.")
  out = {}
  for k, v in data.items():
    if k == "other_software_stack" and isinstance(v, dict):
      out[k] = {str(a): _scalar(path, f"other_software_stack.{a}", b) for a, b in v.items()}
    else:
      out[k] = _scalar(path, k, v)
  return out


def _scalar(path: Path, key: str, v) -> str:
  if v is None: return ""
  if isinstance(v, bool):
    raise UserError(f"{path}: {key} is the YAML boolean {v} (yes/no/on/off/true/false are booleans); quote it if you "
                    f"mean the text.")
  if isinstance(v, (int, float)): return str(v)
  if isinstance(v, str): return v
  raise UserError(f"{path}: {key} must be a text value, got a {type(v).__name__}"
                  + (" (only other_software_stack may be a mapping)" if isinstance(v, dict) else "") + ".")


def merge(detected: dict, overrides: dict, system: str, notes: list[str], base: dict | None = None) -> dict:
  """All required fields in the checker's order. Layers, lowest first: `base` (an existing systems JSON, for what
  detection does not find), detection (every field it found; hw_notes from its notes), overrides (always win).
  other_software_stack merges key by key in the same order."""
  out = {k: "" for k in FIELDS}
  out["system_name"] = system
  for k, v in (base or {}).items():
    if k in out or k in OPTIONAL_FIELDS: out[k] = v
  for k, v in detected.items():
    if k not in out or v in ("", None): continue
    if k == "other_software_stack" and isinstance(v, dict) and isinstance(out[k], dict): out[k] = {**out[k], **v}
    else: out[k] = v
  if notes: out["hw_notes"] = "Detected by tinyperf sysinfo: " + "; ".join(notes) + "."
  for k, v in overrides.items():
    if k == "other_software_stack" and isinstance(v, dict):
      out[k] = {**(out.get(k) or {}), **v}
    else:
      out[k] = v
  return out


# ---------------------------------------------------------------------------------------------------------------------
# validation

def validate(data: dict, rulesets: list[str], where: str) -> None:
  """Our checks (the values system_desc_checker does not look at but package_checker and result_summarizer need), then
  the real system_desc_checker for each ruleset. UserError naming the field and the allowed values."""
  problems = []
  for k in MUST_OVERRIDE:
    if data.get(k, "") == "":
      allowed = {"status": STATUS_VALUES, "division": DIVISIONS}.get(k)
      problems.append(f"{k} is empty and cannot be detected: set it in the overrides file"
                      + (f" (one of: {', '.join(repr(a) for a in allowed)})" if allowed else ""))
  if data.get("division") and data["division"] not in DIVISIONS:
    problems.append(f"division is {data['division']!r}; it must be one of: 'closed', 'open' (package_checker runs the "
                    f"seed and RCP checks only for 'closed')")
  for k in COUNT_FIELDS:
    try: int(data.get(k, ""))
    except (TypeError, ValueError):
      problems.append(f"{k} is {data.get(k)!r}; it must be an integer string (result_summarizer calls int() on it)")
  if not problems:
    with tempfile.TemporaryDirectory(prefix="tinyperf-sysinfo-") as tmp:
      p = Path(tmp) / "system.json"
      p.write_text(json.dumps(data, indent=2))
      for r in rulesets:
        res = mlperf_tools.system_desc_check(p, r)
        if res.passed: continue
        for reason in res.reasons or ["system_desc_checker did not report a pass"]:
          m = re.match(r"Field (\S+) contains a non valid value: (.*), must be one of (\[.*\])$", reason, re.S)
          if m:
            problems.append(f"{m.group(1)} is {m.group(2)!r}; system_desc_checker {r} allows only one of: "
                            f"{m.group(3).strip('[]')}")
          else:
            problems.append(f"system_desc_checker {r}: {reason}")
  if problems:
    raise UserError(f"{where}: the system description is not valid: " + "; ".join(dict.fromkeys(problems)) + ".")


# ---------------------------------------------------------------------------------------------------------------------
# the description `tinyperf run` records for its runs

def run_description(cfg, detected: dict, notes: list[str], overrides: dict, overrides_path: Path | None,
                    results: Path, scheduler: Scheduler) -> dict:
  """The systems JSON of the machine the runs of `cfg` run on: the repository's systems/<system>.json (for what no
  machine can tell about itself: submitter, status, storage, cooling, marketing names) under what detection found, under
  the overrides; the division is the config's. Validated like `tinyperf sysinfo`; UserError naming the field and the
  fix that applies where it runs (results: the runs' --results, for a Slurm task's `status --resume`; scheduler: the
  one whose hints it gives)."""
  from tinyperf.tooling.common.submission_tree import read_systems_json
  system = cfg["system"]
  base_path = T.systems_json(ROOT, system)
  base = read_systems_json(base_path) if base_path.is_file() else {}
  data = merge({**detected, "division": cfg["division"]}, overrides, system, notes, base)
  rulesets, _ = rulesets_for(system, cfg.platform, loaded=cfg)
  where = overrides_path or (base_path if base else f"the detected description of system {system}")
  try:
    validate(data, rulesets, str(where))
  except UserError as e:
    raise UserError(f"{e} `tinyperf run` records this description with the runs: "
                    f"{scheduler.overrides_hint(results, overrides_path)}. Nothing was run.") from None
  return data


def _differences(old: dict, new: dict) -> list[str]:
  out = []
  for k in dict.fromkeys([*old, *new]):
    a, b = old.get(k), new.get(k)
    if a == b: continue
    if isinstance(a, dict) and isinstance(b, dict):
      out += [f"{k}.{x}: {a.get(x)!r} -> {b.get(x)!r}" for x in dict.fromkeys([*a, *b]) if a.get(x) != b.get(x)]
    else:
      out.append(f"{k}: {a!r} -> {b!r}")
  return out


def record_run_system(results: Path, system: str, data: dict, scheduler: Scheduler) -> Path:
  """Write RESULTS/systems/<system>.json (where `tinyperf package` looks first). An existing file is never replaced:
  the same description leaves it as it is; a different one (another machine, driver, image or commit than the earlier
  runs of this results directory) is kept, and the new one goes to RESULTS/systems/variants/<system>-<UTC time>.json
  with a loud warning naming every differing field. Refusing instead would block resuming a half-finished set of runs
  (a reboot into a new kernel is enough to differ), while this keeps both descriptions for the reviewer."""
  # Slurm array tasks on several nodes start together: compare-then-write happens under a lock across nodes, or the
  # second writer would find the first one's file appearing under it
  from tinyperf.tooling.common.ledger import file_lock
  try:
    with file_lock(T.systems_lock(Path(results))):
      return _record_run_system(Path(results), system, data, scheduler)
  except OSError as e:   # the lock's directory: the same cause and fix as an unwritable systems/ (writes raise UserError)
    raise UserError(f"cannot write the system description {T.systems_json(Path(results), system)} "
                    f"({e.strerror or e}); make {results} writable and {scheduler.redo_hint(results)}. Nothing was run.") from None


def _record_run_system(results: Path, system: str, data: dict, scheduler: Scheduler) -> Path:
  target = T.systems_json(results, system)
  text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"

  def write(path: Path):
    try:
      write_atomic(path, text, mode=0o644)
    except OSError as e:
      raise UserError(f"cannot write the system description {path} ({e.strerror or e}); make {path.parent} writable "
                      f"and {scheduler.redo_hint(results)}. Nothing was run.") from None
  if not target.exists():
    write(target)
    print(f"system description: wrote {host_path(target)} (system_desc_checker passed)", flush=True)
    return target
  try:
    old = json.loads(target.read_text(encoding="utf-8"))
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    old = {"(unreadable)": str(e)}
  if old == data:
    print(f"system description: {host_path(target)} already describes this machine (unchanged)", flush=True)
    return target
  stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
  variant = T.variants_dir(results) / f"{system}-{stamp}.json"
  n = 1
  while variant.exists():
    n += 1
    variant = T.variants_dir(results) / f"{system}-{stamp}-{n}.json"
  write(variant)
  diffs = _differences(old if isinstance(old, dict) else {}, data)
  print(f"\nWARNING: {host_path(target)} describes a different system than the one these runs are made on; the runs "
        f"in {host_path(results)} were not all made on the same machine and software. It is kept (it describes the "
        f"earlier runs, and `tinyperf package` uses it); this machine's description is {host_path(variant)}. "
        f"Differences (old -> new):\n  " + "\n  ".join(diffs) + f"\nReview both before packaging: if the new one is "
        f"right for every run, move it over {host_path(target)}.\n", file=sys.stderr, flush=True)
  return variant


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m tinyperf.tooling.launch.sysinfo` (detect_main; `tinyperf sysinfo`'s options are add_arguments';
  test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog="python -m tinyperf.tooling.launch.sysinfo", description=detect_main.__doc__.splitlines()[0])
  p.add_argument("--detect-json", type=Path, required=True, help="where to write {fields, notes}")
  return p


def detect_main(argv: list[str] | None = None) -> int:
  """`python -m tinyperf.tooling.launch.sysinfo --detect-json FILE`: this machine's facts as JSON, for `tinyperf run` (which runs it in
  the run's container and merges and validates the result on the host)."""
  args = build_parser().parse_args(argv)
  fields, notes = detect()
  write_atomic(args.detect_json, json.dumps({"fields": fields, "notes": notes}, indent=2, ensure_ascii=False) + "\n",
               overwrite=True)
  print(f"sysinfo: {fields.get('accelerators_per_node')} x {fields.get('accelerator_model_name')}; "
        f"{fields.get('host_processor_model_name', '?')}; {fields.get('operating_system', '?')}")
  return 0


# ---------------------------------------------------------------------------------------------------------------------
# CLI

def rulesets_for(system: str, platform: str | None, loaded=None) -> tuple[list[str], str | None]:
  """The rulesets the system is checked with (those of the platform configs that name it) and their division.
  loaded: a PlatformConfig the caller holds already (`tinyperf run`'s), used instead of loading its file again."""
  rulesets, divisions = [], set()
  for bm in BENCHMARKS:
    for p in available_platforms(bm):
      if platform and p != platform: continue
      cfg = loaded if loaded and (loaded.benchmark, loaded.platform) == (bm, p) else load_config(bm, p, environ={})
      if cfg["system"] != system and not platform: continue
      rulesets.append(cfg["ruleset"]); divisions.add(cfg["division"])
  return sorted(set(rulesets)), (divisions.pop() if len(divisions) == 1 else None)


def add_arguments(p: argparse.ArgumentParser) -> None:
  p.epilog = "exit status: 0 written, 2 bad input (invalid overrides or values, existing file without --force)."
  p.add_argument("--system", help="system name: the systems/<system>.json stem and results/<system> directory "
                                  "(default: the --platform config's system)")
  p.add_argument("--platform", help="implementation whose config.yaml gives the system, division and rulesets")
  p.add_argument("--overrides", type=Path, help="YAML or JSON file of fields that cannot be detected "
                                                "(submitter, division, status, storage, cooling, ...); wins over detection")
  p.add_argument("--out", type=Path, help="write here instead of systems/<system>.json in the repository")
  p.add_argument("--ruleset", action="append", help="validate against this ruleset (repeatable; default: those of the "
                                                    "configs naming the system, else resnet's and bert's)")
  p.add_argument("--force", action="store_true", help="replace an existing file")


def sysinfo_base(system: str) -> dict:
  """What detection cannot tell, when no overrides file says it: the description `tinyperf run` recorded for this system
  under the default results directory (its submitter is the runs'), else the repository's systems/<system>.json less
  its submitter (tinycorp's: a submitter names themselves, in the overrides file)."""
  from tinyperf.tooling.common.submission_tree import read_systems_json
  recorded = T.systems_json(T.default_root(quiet=True), system)
  if recorded.is_file(): return read_systems_json(recorded)
  repo = T.systems_json(ROOT, system)
  return {k: v for k, v in read_systems_json(repo).items() if k != "submitter"} if repo.is_file() else {}


def main(args: argparse.Namespace) -> int:
  if not args.system and not args.platform:
    raise UserError("give --system NAME (the systems/<NAME>.json stem) or --platform P (its config names the system).")
  system = args.system
  if args.platform:
    cfgs = [load_config(bm, args.platform, environ={}) for bm in BENCHMARKS if args.platform in available_platforms(bm)]
    if not cfgs:
      raise UserError(f"unknown platform {args.platform!r}: no benchmarks/*/implementations/{args.platform}/config.yaml.")
    system = system or cfgs[0]["system"]
  if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", system):
    raise UserError(f"system name {system!r} is not git-friendly: use letters, digits and _ . + - (no spaces, no "
                    f"leading dot); it names systems/<system>.json and results/<system>/.")
  out = args.out or T.systems_json(ROOT, system)
  if out.exists() and not args.force:
    raise UserError(f"{out} already exists; sysinfo never replaces a systems JSON silently. Pass --force to replace "
                    f"it, or --out FILE to write elsewhere.")
  overrides = load_overrides(args.overrides) if args.overrides else {}
  rulesets, division = rulesets_for(system, args.platform)
  rulesets = args.ruleset or rulesets or sorted({s.ruleset for s in BENCHMARKS.values()})
  for r in rulesets:
    if r not in mlperf_tools.training_rulesets():
      raise UserError(f"--ruleset {r}: not a ruleset of the installed mlperf_logging "
                      f"({', '.join(mlperf_tools.training_rulesets())}).")
  detected, notes = detect()
  if division and "division" not in overrides: detected["division"] = division
  data = merge(detected, overrides, system, notes, sysinfo_base(system))
  validate(data, rulesets, str(args.overrides or out))
  try:
    write_atomic(out, json.dumps(data, indent=2, ensure_ascii=False) + "\n", overwrite=args.force)
  except OSError as e:
    raise UserError(f"cannot write {out} ({e.strerror or e}); choose a writable --out.") from None
  empty = [k for k in FIELDS if data[k] == ""]
  print(f"wrote {out} (system_desc_checker {', '.join(rulesets)}: passed)")
  print(f"  {data['accelerators_per_node']} x {data['accelerator_model_name']}; {data['host_processors_per_node']} x "
        f"{data['host_processor_model_name'] or '?'}; {data['framework']}")
  if overrides: print(f"  from {args.overrides}: {', '.join(overrides)}")
  if empty: print(f"  unknown (empty; set them in an overrides file): {', '.join(empty)}")
  return 0


if __name__ == "__main__":
  sys.exit(detect_main())
