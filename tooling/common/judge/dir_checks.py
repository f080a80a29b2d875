"""The checks of one results/<system>/<benchmark> directory beyond package_checker's: result file names and count,
seeds across runs, dataset counts, hyperparameters that differ between runs, the log <-> directory <-> systems JSON
cross-checks of a submitter tree, and olympic scoring's tolerance of one failed run."""
from __future__ import annotations
import json
import shlex
from collections import Counter, defaultdict

from tinyperf.benchmarks.common.rules import (RANDOM_BITS, RESULT_GLOB, RESULT_NAME, SEED_BITS, SEED_EVIDENCE, beyond_rules,
                                     max_dropped_runs, required_runs, result_name)
from tinyperf.tooling.common import mlperf_tools
from tinyperf.tooling.common.mllog_reader import MLLog
from tinyperf.tooling.common.submission_tree import BenchDir, Target
from tinyperf.tooling.common.judge.file_checks import collision_probability, division_of
from tinyperf.tooling.common.judge.findings import FAIL, WARN, DirReport, Finding


def check_dir(t: Target, bd: BenchDir, dr: DirReport, strict: bool = False) -> None:
  """Every check of the directory, its files' reports already in dr.files."""
  _naming_check(bd, dr, strict)
  _seed_package_check(dr)
  _dataset_package_check(dr)
  _hparam_check(bd, dr, strict)
  _cross_checks(t, bd, dr, strict)
  _olympic(dr)


def _naming_check(bd: BenchDir, dr: DirReport, strict: bool = False) -> None:
  """package_checker counts the result_*.txt files and nothing else: the count is its rule (a failure); how they are
  numbered is ours (`tinyperf run` writes result_0..N-1), and a reviewer may only ask about a gap or an odd name."""
  required = required_runs(bd.benchmark)
  level = beyond_rules(strict)
  named, counted = {}, 0
  for log in bd.logs:
    m = RESULT_NAME.match(log.path.name)
    counted += bool(RESULT_GLOB.match(log.path.name))
    if m: named[int(m.group(1))] = log
    elif RESULT_GLOB.match(log.path.name):
      dr.findings.append(Finding(level, "result-files", f"{log.path.name}: the index is not a plain number "
                                 f"(result_<i>.txt, i = 0, 1, ...); package_checker counts it, a reviewer may ask what "
                                 f"it is", log.path.name))
    else:
      dr.findings.append(Finding(level, "result-files", f"{log.path.name} is a result log not named "
                                 f"result_<i>.txt (i = 0, 1, ...): package_checker and result_summarizer do not count "
                                 f"it, and a reviewer may ask why a run's log is left out", log.path.name))
  if required is not None and counted != required:
    dr.findings.append(Finding(FAIL, "result-files", f"{counted} result_*.txt files; a {bd.benchmark} package "
                               f"needs exactly {required} (package_checker's rule)", dr.rel))
  if named:
    first = min(named)
    missing = [i for i in range(first, max(named) + 1) if i not in named]
    if missing:
      dr.findings.append(Finding(level, "result-files", "result files are not numbered contiguously: missing "
                                 + ", ".join(result_name(i) for i in missing) + " (package_checker only counts the "
                                 "files; a reviewer may ask whether a run was left out)", dr.rel))
  for p in bd.other_files:
    dr.findings.append(Finding(WARN, "result-files", f"{p.name}: unknown entry in a results directory "
                               f"(package_checker warns); keep only result_<i>.txt, scaling.json, package_checker_params "
                               f"and power/", dr.rel))


def _dataset_package_check(dr: DirReport) -> None:
  """One line for the directory, instead of one per run, where runs warn about the same count (tinycorp's ten BERT
  logs all state eval_samples 10080)."""
  same = defaultdict(list)
  for fr in dr.files:
    for f in fr.findings:
      if f.check == "dataset" and f.level == WARN: same[f.message.split(":")[0]].append((fr, f))
  for head, found in same.items():
    if len(found) < 2: continue
    for fr, f in found: fr.findings.remove(f)
    names = [fr.name for fr, _ in found]
    dr.findings.append(Finding(WARN, "dataset", f"{head} in {len(found)} of {len(dr.files)} runs ({', '.join(names[:3])}"
                               f"{', ...' if len(names) > 3 else ''}):{found[0][1].message.split(':', 1)[1]}", dr.rel))


def _seed_package_check(dr: DirReport) -> None:
  closed = division_of(dr.division) == "closed"
  by_seed = defaultdict(list)
  for fr in dr.files:
    for s in fr.seeds: by_seed[s].append(fr.name)
  for s, names in by_seed.items():
    if len(names) > 1:
      dr.findings.append(Finding(FAIL if closed else WARN, "seed", f"seed {s} is logged by {len(names)} runs "
                                 f"({', '.join(names)}): every run needs its own seed (the seed checker rejects a seed "
                                 f"repeated on the same source line)", dr.rel))
  narrow = [(fr, f) for fr in dr.files for f in fr.findings if f.check == "seed-width"]
  if narrow:
    # one line for the directory instead of one per run
    for fr, f in narrow: fr.findings.remove(f)
    runs = len(dr.files)
    dr.findings.append(Finding(WARN, "seed-width", f"{len(narrow)} of {runs} runs log a seed that fits in {RANDOM_BITS} "
                               f"bits (bash $RANDOM's range 0..32767: "
                               f"{', '.join(f'{fr.name} {fr.seeds[0]}' for fr, _ in narrow[:3])}"
                               f"{', ...' if len(narrow) > 3 else ''}): {runs} such runs share a seed with probability "
                               f"{collision_probability(runs, RANDOM_BITS):.2%}, and a repeated seed fails the seed "
                               f"checker. Draw {SEED_BITS}-bit seeds (SEED_BITS={SEED_BITS})", dr.rel))
  firsts = [fr.seeds[0] for fr in dr.files if fr.seeds and fr.seeds[0] >= 0]
  if len(firsts) >= 2:
    width = max(max(firsts).bit_length(), 1)
    # N seeds drawn from SEED_BITS bits all fit in `width` bits with probability 2^-(N*(SEED_BITS-width))
    if RANDOM_BITS < width < SEED_BITS and len(firsts) * (SEED_BITS - width) >= SEED_EVIDENCE:
      dr.findings.append(Finding(WARN, "seed-width", f"all {len(firsts)} seeds fit in {width} bits (largest {max(firsts)}): "
                                 f"they look drawn from a {width}-bit range, where {len(firsts)} runs collide with "
                                 f"probability {collision_probability(len(firsts), width):.3%}. Draw {SEED_BITS}-bit "
                                 f"seeds", dr.rel))


TRAINING_STARTED = ("epoch_start", "block_start", "eval_start", "eval_accuracy", "run_stop")


def hyperparameters(log: MLLog, keys: frozenset[str]) -> dict[str, object]:
  """key -> first value of each MLPerf hyperparameter (`keys`: mlperf_tools.hyperparameter_keys) logged before the first
  epoch/block/eval: what a run was configured with. Vendor keys (s_optimizer) are a submitter's own notes, and keys
  logged later (BERT's train_samples: samples to converge) are results."""
  out = {}
  for e in log.events:
    if e.key in TRAINING_STARTED: break
    if e.key in keys and e.value is not None and e.key not in out: out[e.key] = e.value
  return out


def _same(a, b) -> bool: return a == b or json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN == NaN


def _hparam_check(bd: BenchDir, dr: DirReport, strict: bool = False) -> None:
  """One set, one configuration: olympic scoring averages runs of the same settings. No MLCommons tool compares runs,
  except that package_checker's RCP check cannot pass a closed set of two batch sizes (it crashes on one): that is a
  failure, any other disagreement a question for the reviewer."""
  if len(bd.logs) < 2: return
  keys = mlperf_tools.hyperparameter_keys(bd.benchmark, bd.ruleset)
  hp = [(log.path.name, hyperparameters(log, keys)) for log in bd.logs]
  for key in dict.fromkeys(k for _, h in hp for k in h):
    base = next((name, h[key]) for name, h in hp if key in h)
    for name, h in hp:
      if key not in h:
        msg = f"{key} is logged by {base[0]} ({base[1]!r}) but not by {name}"
      elif not _same(h[key], base[1]):
        msg = f"{key} is {base[1]!r} in {base[0]} but {h[key]!r} in {name}"
      else: continue
      rcp = key == "global_batch_size" and division_of(bd.division) == "closed"
      dr.findings.append(Finding(FAIL if rcp else beyond_rules(strict), "hyperparameters",
                                 f"runs of one set disagree on an MLPerf hyperparameter: {msg}. "
                                 + ("package_checker's RCP check cannot judge a closed set of two batch sizes; "
                                    if rcp else "A reviewer may ask why: olympic scoring averages runs of one "
                                    "configuration; ")
                                 + "rerun the odd run(s) with the set's settings or move them to their own set", dr.rel))
      break   # one finding per key names the first disagreement


def _olympic(dr: DirReport) -> None:
  n, bad = len(dr.files), [f for f in dr.files if not f.compliant]
  dr.noncompliant = len(bad)
  tolerated = max_dropped_runs(dr.benchmark)
  if len(bad) > tolerated:
    dr.findings.append(Finding(FAIL, "olympic", f"{len(bad)} of {n} runs are non-compliant "
                               f"({', '.join(f.name for f in bad)}); olympic scoring tolerates {tolerated}", dr.rel))


def summary(dr: DirReport) -> str:
  """The directory's one line, once all its findings are in: a tolerated run reads as accepted only when nothing else
  fails the set."""
  n, bad = len(dr.files), [f.name for f in dr.files if not f.compliant]
  others = sum(f.level == FAIL and f.check != "olympic" for f in dr.findings)
  if not bad: return f"{n} of {n} compliant"
  if len(bad) > max_dropped_runs(dr.benchmark): return f"{n - len(bad)} of {n} compliant: rejected"
  line = (f"{n - len(bad)} of {n} compliant: {'tolerated by' if others else 'accepted under'} olympic scoring "
          f"({', '.join(bad)} counts as the slowest run)")
  return line + (f"; {others} set-level failure{'s' if others != 1 else ''} above" if others else "")


def submitter(t: Target) -> str | None:
  """The submitter name the tree's logs and systems JSONs are compared with: a submitter directory's name; in the
  --results tree of `tinyperf run`, whose name is the user's choice, the name its logs agree on (the most common
  submission_org; None when none is logged)."""
  if not t.results_tree: return t.org
  orgs = Counter(e.value for bd in t.bench_dirs for log in bd.logs if (e := log.first("submission_org")) is not None)
  return orgs.most_common(1)[0][0] if orgs else None


def _cross_checks(t: Target, bd: BenchDir, dr: DirReport, strict: bool = False) -> None:
  """The log <-> directory <-> systems JSON names: no official tool compares them, a reviewer may ask (rules.beyond_rules)."""
  level = beyond_rules(strict)
  if bd.name != bd.benchmark:
    dr.findings.append(Finding(FAIL, "cross-check", f"directory is named {bd.name!r} but its logs are "
                               f"{bd.benchmark!r}; package_checker takes the benchmark from the directory name", dr.rel))
  for log in bd.logs:
    if (log.division or "") != bd.division:
      dr.findings.append(Finding(FAIL, "cross-check", f"logs division {log.division!r} but "
                                 f"{bd.logs[0].path.name} logs {bd.division!r}: one directory, one division",
                                 log.path.name))
  if not t.org_dir: return
  org = submitter(t)
  sysjson = t.systems.get(bd.system)
  if sysjson is None:
    dr.findings.append(Finding(FAIL, "cross-check", f"systems/{bd.system}.json is missing: package_checker and "
                               f"result_summarizer crash on results/{bd.system} without it", dr.rel))
  for log in bd.logs:
    e = log.first("submission_platform")
    if e is None:
      dr.findings.append(Finding(level, "cross-check", "no submission_platform logged; it should name the system "
                                 f"({bd.system})", log.path.name))
    elif e.value != bd.system:
      dr.findings.append(Finding(level, "cross-check", f"submission_platform is {e.value!r} but the run sits in "
                                 f"results/{bd.system}", log.path.name, e.line))
    e = log.first("submission_org")
    if e is None:
      dr.findings.append(Finding(level, "cross-check", f"no submission_org logged; it should be {org!r}" if org else
                                 "no submission_org logged; `tinyperf run --org NAME` logs the submitter's name",
                                 log.path.name))
    elif e.value != org and t.results_tree:
      dr.findings.append(Finding(level, "cross-check", f"submission_org is {e.value!r} but the other runs of this results "
                                 f"tree log {org!r}: a submission has one submitter, and `tinyperf package --org` packs "
                                 f"every run under that one name (`tinyperf run --org NAME` sets what a run logs)",
                                 log.path.name, e.line))
    elif e.value != org:
      dr.findings.append(Finding(level, "cross-check", f"submission_org is {e.value!r} but the submitter directory is "
                                 f"{org!r} (`tinyperf package --org {shlex.quote(str(e.value))}` packs it under a "
                                 f"directory of that name, as MLCommons expects)", log.path.name, e.line))
    if sysjson is not None and log.division and sysjson.get("division") != log.division:
      e = log.first("submission_division")
      dr.findings.append(Finding(level, "cross-check", f"logs division {log.division!r} but systems/{bd.system}.json says "
                                 f"{sysjson.get('division')!r} (package_checker runs the seed and RCP checks only when "
                                 f"the systems JSON says closed)", log.path.name, e.line if e else None))
