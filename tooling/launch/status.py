"""`tinyperf status`: where each run of every result set under --results stands, from its ledger and from Slurm.

  done      the run finished and its result file was written (converged or not: both count)
  running   its Slurm task is running (or, for a local set, the launcher that claimed it holds its claim)
  pending   its Slurm task is queued
  failed    it crashed, was interrupted, its launcher died, or its Slurm task ended without finishing it (scancel, time
            limit, node failure)
  broken    it finished, but its result file is missing or differs from the hash in the ledger (said loudly)
  missing   never run and not submitted
Slurm's view is read before the ledger, so a task that ends in between is seen as done rather than as lost. --resume
resubmits each Slurm set's failed and missing runs with the arguments of its last submission; --wait polls until no
Slurm run is pending or running (its progress line gives Slurm's reason for each pending run, and how to release a held
one; it has no time limit). Exit status: 0 when every run is done, 1 otherwise, 2 on bad input."""
from __future__ import annotations
import argparse
import json
import math
import sys
import time
from pathlib import Path

from tinyperf.tooling.common.container import compose_run
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common import results_tree as T
from tinyperf.tooling.launch import slurm, slurm_cluster, slurm_record, slurm_script
from tinyperf.tooling.launch.slurm_cluster import QUEUED, RUNNING
from tinyperf.benchmarks.common.io import require_dir_possible
from tinyperf.tooling.common.errors import UserError


MIN_POLL_S = 1.0   # each poll is an squeue call to slurmctld, which sites ask users not to run in a tight loop
# squeue %r of a held task, which stays pending until released however long --wait polls; a user's own hold is theirs
# to release, an administrator's (root's `scontrol hold`) only an operator's
HELD = {"JobHeldUser": "held until `scontrol release {}`",
        "JobHeldAdmin": "held by a Slurm administrator until an operator runs `scontrol release {}`"}


def _poll(text: str) -> float:
  try: s = float(text)
  except ValueError: s = math.nan
  if not (math.isfinite(s) and s >= MIN_POLL_S):
    raise argparse.ArgumentTypeError(f"{text!r}: the seconds between two polls of squeue, a number of at least "
                                     f"{MIN_POLL_S:g} (e.g. --poll 30)")
  return s


def add_arguments(p: argparse.ArgumentParser):
  p.add_argument("--results", type=Path, help="output root given to tinyperf run (default: ./out, or the one results "
                                              "directory in it, e.g. ./smoke.sh's out/smoke)")
  p.add_argument("--resume", action="store_true",
                 help="resubmit the failed and missing runs of every Slurm set (finished and queued runs are left alone)")
  p.add_argument("--wait", action="store_true", help="poll until no Slurm run is pending or running, then report")
  p.add_argument("--poll", type=_poll, default=30.0, metavar="S",
                 help=f"seconds between polls with --wait (default 30, at least {MIN_POLL_S:g})")
  p.add_argument("--json", action="store_true", help="print the states as JSON")


def result_sets(results: Path) -> list[Path]:
  """R/runs/<system>/<benchmark> directories with a ledger or a Slurm record."""
  require_dir_possible(results, "--results")
  # a first submission stopped while sbatch ran has left only its kept script (slurm_record.kept_scripts)
  sets = sorted({*T.run_roots(results), *(w for w in (results / T.RUNS).glob("*/*") if slurm_record.kept_scripts(w))})
  if not sets:
    raise UserError(f"{results / T.RUNS}: no result sets ({T.RUNS}/<system>/<benchmark>/{T.LEDGER} or "
                    f"{T.SLURM_RECORD}). Pass the --results directory that `tinyperf run` wrote to.")
  return sets


def _tail(path: Path, n: int = 1) -> str:
  try: lines = [l.strip() for l in path.read_text(errors="replace").splitlines() if l.strip()]
  except OSError: return ""
  return " | ".join(lines[-n:])


def _read(path: Path) -> str:
  try: return path.read_text(errors="replace").strip() or "(empty exit record)"
  except OSError as e: return f"(exit record unreadable: {e.strerror})"


def _ended_task(work: Path, job: dict, index: int, att: L.Attempt | None, tasks: dict) -> str:
  """Why a Slurm task that is no longer queued or running did not finish its run, from what it left behind."""
  jid = str(job["job_id"])
  task, out = f"{jid}_{index}", T.slurm_task_file(work, job["files"], jid, index, "out")
  # a task Slurm requeued ran more than once: its last attempt is the highest restart count that started (its output's
  # start lines) or left an exit record
  exits = T.slurm_exit_records(work, job["files"], jid, index)
  last = max([*exits, *slurm_script.task_restarts(out)], default=None)
  exit_file = exits.get(last) if last is not None else None
  at = requeued = ""
  if last:
    at = f" at restart {last}"
    requeued = f"Slurm requeued it {'once' if last == 1 else f'{last} times'}; " + ", ".join(
      f"restart {r} {'exited ' + _read(exits[r]) if r in exits else 'left no exit record'}" for r in range(last))
  why = []
  if exit_file: why.append(f"task {task} exited {_read(exit_file)}{at}" + (f" ({requeued})" if requeued else ""))
  elif (jid, index) in tasks:
    why.append(f"task {task}: Slurm says {tasks[(jid, index)][0]}, no exit record{at}" + (f" ({requeued})" if requeued else ""))
  else:
    why.append(f"task {task} ended without an exit record{at} (cancelled, timed out or its node failed"
               + (f"; {requeued})" if requeued else ")"))
  if att is not None and att.slurm.get("job") == task and att.slurm.get("restart", 0) == (last or 0):
    why.append(att.note if att.status != L.RUNNING else "its run was still running when the task was killed")
  elif out.exists():
    why.append(f"it never started its run: {_tail(out)}")
  else:
    why.append(f"no output at {out}: is {job['spec']['results']} mounted at the same path on the node?")
  return "; ".join(why) + (f" (see {out})" if out.exists() else "")


def set_states(work: Path, tasks: dict | None) -> dict:
  """The state of every run of one result set. `tasks` is slurm_cluster.queue()'s answer, read before the ledger is
  (None when Slurm could not be asked)."""
  rec = slurm_record.load_record(work)
  led = L.Ledger(work / T.LEDGER)
  jobs = rec["jobs"]
  nexp = max([j["spec"]["nexp"] for j in jobs] + [a.index + 1 for a in led.attempts] + [led.nexp])
  runs = []
  for i in range(nexp):
    att = led.latest(i)
    job = next((j for j in reversed(jobs) if i in j["indices"]), None)
    key = (str(job["job_id"]), i) if job else None
    local_after_job = att is not None and not att.slurm and (job is None or att.started > job["submitted"])
    r = {"index": i, "state": "missing", "detail": "", "job": f"{key[0]}_{i}" if key else None,
         "seed": att.seed if att else None, "result": att.result if att and att.status == L.DONE else None}
    if att is not None and att.status == L.DONE:
      kind, problem = led.check_result(att)
      r["state"] = "done" if kind == "ok" else "broken"
      r["detail"] = f"seed {att.seed}, {'converged' if att.converged else 'did NOT converge'}; check: {att.note}"
      if att.backend == "container":   # which image made it: a closed result must name its pinned base
        digest = (att.provenance or {}).get("TINYPERF_BASE_DIGEST")
        r["image"] = att.image
        r["detail"] += f"; image {att.image}" + (f", base {digest}" if digest else "")
      if kind == "copy": r["problem"] = f"NOT COPIED YET: {problem} by rerunning its `tinyperf run` command"
      elif kind != "ok": r["problem"] = problem
      if kind != "ok": r["detail"] += f"; {r['problem']}"
      # the launcher records done before it copies the result: while the attempt's task still runs, it is copying
      # (a `status --wait` that stopped here reported a broken run that was seconds from done)
      if (kind == "copy" and job and tasks and key in tasks and att.slurm.get("job") == r["job"]
          and tasks[key][0] in RUNNING - {"COMPLETING"}):
        r["state"], r["detail"] = "running", f"task {r['job']} finished its run (seed {att.seed}) and is writing its result"
        r.pop("problem"); r["result"] = None     # not there yet: status names a result only where one is
    elif job and tasks is not None and key in tasks and tasks[key][0] in QUEUED | RUNNING:
      state, where = tasks[key]
      r["state"] = "pending" if state in QUEUED else "running"
      ours = att is not None and att.slurm.get("job") == r["job"]  # the task has started its run (and drawn its seed)
      if state in QUEUED: r["reason"] = where
      r["detail"] = (f"task {r['job']} {state} ({_why_pending(where, [r['job']])})" if state in QUEUED else
                     f"task {r['job']} {state} on {where}" + (f", seed {att.seed}" if ours else ""))
    elif local_after_job:  # run by a local `tinyperf run`, after any Slurm job of this index (--wait does not wait for it)
      alive, svc = led.alive(att), att.owner.get("compose_service")
      r["job"], r["state"] = None, "running" if alive else "failed"
      nxt = f"`docker compose run --rm {svc}`" if svc else "`tinyperf run`"
      r["detail"] = (f"seed {att.seed}, {L.who(att)} is running it" if alive else
                     f"seed {att.seed}, {L.who(att)} is gone (killed?); the next {nxt} marks it interrupted "
                     f"and redoes it unless its log finished" if att.status == L.RUNNING else
                     f"seed {att.seed}, {att.status}: {att.note}")
    elif job and tasks is None:
      r["state"], r["detail"] = "unknown", "Slurm did not answer (see above)"
    elif job:
      r["state"], r["detail"] = "failed", _ended_task(work, job, i, att, tasks)
    # the attempts before the one that decides: a killed or failed attempt stays in view after its rerun
    r["earlier"] = [{"seed": a.seed, "status": a.status, "note": a.note} for a in led.attempts
                    if a.index == i and a is not att]
    runs.append(r)
  last = led.attempts[-1] if led.attempts else None
  return {"system": work.parent.name, "benchmark": work.name, "work": str(work), "nexp": nexp,
          "jobs": [str(j["job_id"]) for j in jobs], "runs": runs,
          "compose_service": last.owner.get("compose_service") if last else None}


def collect(results: Path) -> tuple[list[dict], list[str]]:
  states, warnings = [], []
  for work in result_sets(results):
    rec, tasks = slurm_record.load_record(work), {}
    for kept in slurm_record.kept_scripts(work):   # its job's runs show as missing, or as a stale attempt's, until recorded
      warnings.append(f"{kept}: a submission was stopped while sbatch ran, and Slurm may have queued a job from this "
                      f"script that no record names yet. Rerun that `tinyperf run ... --scheduler slurm` command: it "
                      f"records the job squeue lists with this command (%o), or submits the runs if there is none")
    if rec["jobs"]:
      try: tasks = slurm_cluster.queue(rec["jobs"][-1]["job_name"])
      except UserError as e:
        tasks = None
        warnings.append(f"{work}: cannot ask Slurm ({e}); the state of its unfinished runs is unknown")
    states.append(set_states(work, tasks))
  return states, warnings


def _why_pending(reason: str, tasks: list[str]) -> str:
  return f"{reason}, " + HELD[reason].format(",".join(tasks)) if reason in HELD else reason


def progress(states: list[dict]) -> str:
  """--wait's progress line: each set's counts, and Slurm's reason for its pending runs (None says nothing: not yet
  looked at by the scheduler)."""
  out = []
  for st in states:
    by_reason = {}
    for r in st["runs"]:
      if r["state"] == "pending" and r.get("reason", "None") != "None": by_reason.setdefault(r["reason"], []).append(r)
    why = "; ".join(f"run{'s' if len(rs) > 1 else ''} {', '.join(str(r['index']) for r in rs)}: "
                    f"{_why_pending(reason, [r['job'] for r in rs])}" for reason, rs in by_reason.items())
    out.append(f"{st['benchmark']}/{st['system']}: {_counts(st, why)}")
  return "; ".join(out)


def _counts(st: dict, pending_why: str = "") -> str:
  n = {}
  for r in st["runs"]: n[r["state"]] = n.get(r["state"], 0) + 1
  return ", ".join(f"{v} {k}" + (f" ({pending_why})" if k == "pending" and pending_why else "")
                   for k, v in n.items()) or "no runs"


def render(states: list[dict]) -> str:
  out = []
  for st in states:
    jobs = f", Slurm job{'s' if len(st['jobs']) > 1 else ''} {', '.join(st['jobs'])}" if st["jobs"] else ""
    out.append(f"{st['benchmark']} on {st['system']}: {st['nexp']} runs ({_counts(st)}){jobs}  [{st['work']}]")
    for r in st["runs"]:
      out.append(f"  run {r['index']:<3} {r['state']:<8} {r['detail']}" + (f"  -> {r['result']}" if r["result"] else ""))
      for e in r.get("earlier", []):
        out.append(f"  {'':<3}     earlier: seed {e['seed']}, {e['status']}" + (f": {e['note']}" if e["note"] else ""))
  return "\n".join(out)


def main(args) -> int:
  results = args.results = args.results or T.default_root()
  if args.resume:
    for work in result_sets(results):
      if not slurm_record.load_record(work)["jobs"]:
        print(f"{work}: not a Slurm set; rerun its `tinyperf run` command to redo unfinished runs")
        continue
      slurm.resubmit(work)
  states, warnings = collect(results)
  if args.wait:
    last = None
    while any(r["state"] in ("pending", "running") and r["job"] for st in states for r in st["runs"]):
      summary = progress(states)
      if summary != last: print(f"{time.strftime('%H:%M:%S')} {summary}", flush=True); last = summary
      time.sleep(args.poll)
      states, warnings = collect(results)
  for w in warnings: print(f"WARNING: {w}", file=sys.stderr)
  print(json.dumps({"sets": states, "warnings": warnings}, indent=1) if args.json else render(states))
  for st in states:
    for r in st["runs"]:
      if r["state"] == "broken":
        print(f"ERROR: {st['benchmark']} on {st['system']} run {r['index']}: {r['problem']}", file=sys.stderr)
  left = [r for st in states for r in st["runs"] if r["state"] != "done"]
  if left and not args.json and not args.resume:
    unfinished = [st for st in states if any(r["state"] in ("failed", "missing") for r in st["runs"])]
    if any(st["jobs"] for st in unfinished):
      print(f"`{slurm.resume_command(results)}` resubmits the failed and missing runs of "
            f"Slurm sets.")
    local = [st for st in unfinished if not st["jobs"]]   # --resume leaves a local set alone: its launcher redoes them
    for svc in sorted({st["compose_service"] for st in local if st["compose_service"]}):
      print(f"Rerun {compose_run(svc)} to redo the failed runs of its set (finished runs are kept).")
    if any(not st["compose_service"] for st in local):
      print("Rerun the same `tinyperf run` command to redo the failed runs of a local set (finished runs are kept).")
  # a kept script's job may still run unrecorded: not every run is known to be done
  return 1 if left or any(slurm_record.kept_scripts(Path(st["work"])) for st in states) else 0
