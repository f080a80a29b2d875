"""`tinyperf package` end to end on run trees built from real mllog logs (tests/run_builder.py): assembled with the
ledger's first N finished runs, checked with the real checkers, packed (and encrypted) with real tar/openssl semantics,
then verified and unpacked. Each packing runs the whole `tinyperf check` (~5 s)."""
from __future__ import annotations
import filecmp
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import run_builder
from run_builder import default_seed, make_runs
from tests.conftest import REPO
from tinyperf.tooling.ship import archive, package
from tinyperf.tooling.ship import code as ship_code
from tinyperf.tooling.launch import sysinfo
from tinyperf.tooling.launch.run import LOCAL
from tinyperf.tooling.common.judge.check import check_path
from tinyperf.tooling.cli import main as cli

pytestmark = pytest.mark.integration
ORG = "tinycorp"
TAR, SHA = f"mlperf_submission_{ORG}.tar.gz", f"mlperf_submission_{ORG}.sha1"


@pytest.fixture(autouse=True)
def clone(tmp_path_factory, monkeypatch) -> Path:
  """A clean clone of this checkout's commit as the repository package reads its code from, and runs that recorded
  that commit: what a submitter packages (a developer's checkout may be dirty)."""
  head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
  dst = tmp_path_factory.mktemp("clone") / "repo"
  subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPO), str(dst)], check=True)
  subprocess.run(["git", "-C", str(dst), "checkout", "-q", "--detach", head], check=True)
  for k, v in (("user.email", "t@example.com"), ("user.name", "t")):
    subprocess.run(["git", "-C", str(dst), "config", k, v], check=True)
  monkeypatch.setattr(package, "ROOT", dst)
  monkeypatch.setattr(ship_code, "ROOT", dst)
  monkeypatch.setattr(run_builder, "GIT_SHA", head)
  return dst


def git(repo: Path, *args: str) -> str:
  return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def pack(capsys, tmp_path, R, out="out", *extra) -> tuple[int, str, str]:
  code = cli(["package", "--org", ORG, "--out", str(tmp_path / out), "--results", str(R),
              "--systems", str(tmp_path / "systems"), *map(str, extra)])
  o, e = capsys.readouterr()
  return code, o, e


def refused(capsys, tmp_path, R, *needles, code=2, out="out", fresh=True):
  got, o, e = pack(capsys, tmp_path, R, out)
  assert got == code, (o, e)
  assert "Traceback" not in e
  if code == 2: assert e.startswith("tinyperf package: error: ") and len(e.strip().splitlines()) == 1, e
  for n in needles: assert n in e, e
  d = tmp_path / out
  if fresh: assert not (d / TAR).exists() and not (d / SHA).exists() and not (d / ORG).exists()
  assert not d.exists() or not [p for p in d.iterdir() if p.name.startswith(".tinyperf-package-")]   # staging removed
  return o, e


def tree_files(root: Path) -> list[str]:
  return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


# Run in the unpacked implementation with the checkout out of reach (the editable install's finder and path removed):
# every module of the packaged code imports, from the package. Third-party modules missing here (Triton) are skipped.
IMPORT_ALL = r"""
import importlib, sys
from pathlib import Path
root = Path.cwd().resolve()
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
sys.path[:] = [str(root)] + [p for p in sys.path[1:] if "__editable__" not in p and p not in ("", ".")]
prefix = "tinyperf." if (root / "tinyperf" / "__init__.py").is_file() else ""
own = ("benchmarks", "tooling", "tinyperf")
bad, n = [], 0
for f in sorted([*root.glob("benchmarks/**/*.py"), *root.glob("tooling/**/*.py")]):
  parts = f.relative_to(root).with_suffix("").parts
  if "implementations" in parts: continue
  name = prefix + ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
  try: mod = importlib.import_module(name); n += 1
  except ModuleNotFoundError as e:
    if (e.name or "").split(".")[0] in own: bad.append(f"{name}: {e}")
    continue
  except Exception as e: bad.append(f"{name}: {type(e).__name__}: {e}"); continue
  if not Path(mod.__file__).resolve().is_relative_to(root): bad.append(f"{name} came from {mod.__file__}")
print(n, "modules imported")
sys.exit("\n".join(bad) if bad else 0)
"""


def test_packaged_code_imports_without_the_checkout(capsys, tmp_path):
  """A packaged implementation is self-contained: each of its modules imports with no checkout or editable install
  behind it (the registry needs the other benchmark's spec; the preflight, selfcheck and kernels ship too)."""
  R = make_runs(tmp_path, "resnet")
  code, out, err = pack(capsys, tmp_path, R)
  assert code == 0, out + err
  impl = tmp_path / "out" / ORG / "benchmarks" / "resnet" / "implementations" / "tinybox_green"
  for f in ("benchmarks/registry.py", "benchmarks/preflight.py", "benchmarks/selfcheck.py", "benchmarks/bert/spec.py",
            "benchmarks/kernels/matmul.py"):
    assert (impl / f).is_file(), f
  assert not (impl / "benchmarks" / "bert" / "model.py").exists()     # only the packaged benchmark's own code
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
  p = subprocess.run([sys.executable, "-c", IMPORT_ALL], cwd=impl, env=env, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0, p.stdout + p.stderr
  assert int(p.stdout.split()[0]) > 40, p.stdout


def test_package_verify_check_end_to_end(capsys, tmp_path):
  R = make_runs(tmp_path, "resnet")
  code, out, err = pack(capsys, tmp_path, R)
  assert code == 0, out + err
  d = tmp_path / "out"
  assert sorted(p.name for p in d.iterdir()) == sorted([ORG, TAR, SHA])
  assert "check: ACCEPTED" in out and "repo_checker 4.0.0: ALL CHECKS PASSED" in out
  assert "the first 5 finished runs in start order (never chosen by score)" in out
  # the .sha1 is exactly what `sha1sum` prints in that directory, so `sha1sum -c` and pack_submission.sh accept it
  sha = (d / SHA).read_text()
  assert sha == subprocess.run(["sha1sum", TAR], cwd=d, capture_output=True, text=True, check=True).stdout
  assert subprocess.run(["sha1sum", "-c", SHA], cwd=d, capture_output=True).returncode == 0
  # the real tar reads it; every member lies under ORG/
  names = subprocess.run(["tar", "-tzf", TAR], cwd=d, capture_output=True, text=True, check=True).stdout.split()
  assert names[0] == f"{ORG}/" and all(n.startswith(f"{ORG}/") for n in names)
  impl = f"{ORG}/benchmarks/resnet/implementations/tinybox_green/"
  for f in ("README.md", "run_and_time.sh", "dev_run.sh", "dev_beam.sh", "setup.sh", "init_datasets.sh",
            "pyproject.toml", "setup.py", "requirements.lock", "tinyperf/__init__.py",
            "benchmarks/resnet/train.py", "benchmarks/common/config.py", "tooling/cli.py",
            "benchmarks/resnet/implementations/tinybox_green/config.yaml", "systems/tinybox_green.json"):
    assert impl + f in names, f
  assert [f"{ORG}/results/tinybox_green/resnet/result_{i}.txt" in names for i in range(5)] == [True] * 5
  assert f"{ORG}/systems/tinybox_green.json" in names
  assert not [n for n in names if any(p.startswith(".") or p in ("tests", "__pycache__") for p in n.split("/"))]
  nested = impl + "benchmarks/resnet/implementations/"
  assert {n[len(nested):].split("/")[0] for n in names if n.startswith(nested) and n != nested} == {"tinybox_green"}
  assert not [n for n in names if n.startswith(impl + "benchmarks/bert/") and not n.endswith(("/bert/", "__init__.py", "spec.py"))]
  with tarfile.open(d / TAR) as tar:
    m = {x.name: x for x in tar.getmembers()}
    assert m[impl + "run_and_time.sh"].mode == 0o755 and m[impl + "README.md"].mode == 0o644
    assert {x.uid for x in m.values()} == {0} and len({x.mtime for x in m.values()}) == 1
  readme = (d / impl / "README.md").read_text()
  assert "first 5 finished runs in the order" in readme and "never chosen by score" in readme
  assert "| `result_4.txt` | 4 |" in readme and run_builder.GIT_SHA in readme     # the runs' provenance git_sha
  assert f"from the tinyperf repository at commit {run_builder.GIT_SHA}." in readme and "DIRTY" not in readme
  for script in ("run_and_time.sh", "setup.sh", "init_datasets.sh"):
    assert 'cd "$(dirname "${BASH_SOURCE[0]}")/."' in (d / impl / script).read_text()
    assert m[impl + script].mode == 0o755
  # verify: sha1, listing, unpack into a fresh directory; the unpacked tree is the packed one and passes the check
  code = cli(["package", "--verify", str(d / TAR), "--into", str(tmp_path / "unpacked")])
  out = capsys.readouterr().out
  assert code == 0 and "sha1: ok" in out and f"{ORG}/results/tinybox_green/resnet/result_0.txt" in out
  u = tmp_path / "unpacked" / ORG
  assert tree_files(u) == tree_files(d / ORG)
  assert not filecmp.dircmp(u, d / ORG).diff_files
  assert check_path(u).accepted
  # the packaged implementation is a repository root of its own: its modules, config and renderings are found there
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  impl_dir = tmp_path / "unpacked" / impl
  p = subprocess.run([sys.executable, "-c", "import tinyperf.benchmarks.common.config as c, tinyperf.benchmarks.registry as r, tinyperf.tooling.cli; print(c.ROOT); "
                      "print(r.load_config('resnet', 'tinybox_green').path)"], cwd=impl_dir, env=env,
                     capture_output=True, text=True)
  root = impl_dir.resolve()
  assert p.returncode == 0, p.stderr
  assert p.stdout.split() == [str(root), str(root / "benchmarks/resnet/implementations/tinybox_green/config.yaml")]
  for argv in (["-m", "tinyperf.tooling.cli", "render", "--check"], ["-m", "tinyperf.benchmarks.resnet.train", "--help"]):
    assert subprocess.run([sys.executable, *argv], cwd=impl_dir, env=env, capture_output=True).returncode == 0, argv
  # the same runs pack to the same bytes
  code, _, err = pack(capsys, tmp_path, R, "again")
  assert code == 0, err
  assert (tmp_path / "again" / SHA).read_text() == sha


def test_encrypted_package_decrypts_with_the_openssl_cli(capsys, tmp_path):
  R = make_runs(tmp_path, "resnet")
  pw = tmp_path / "pass"
  pw.write_text("a passphrase with spaces\n")
  code, out, err = pack(capsys, tmp_path, R, "out", "--encrypt", "--passphrase-file", pw)
  assert code == 0, out + err
  assert "a passphrase" not in out + err
  d = tmp_path / "out"
  data = (d / TAR).read_bytes()
  assert data[:8] == b"Salted__"
  assert (d / SHA).read_text().split()[0] == archive.sha1_of(d / TAR)          # sha1 of the encrypted file
  # what MLCommons does with it: openssl enc -d -aes256 (default key derivation), then tar
  dec = subprocess.run(["openssl", "enc", "-d", "-aes256", "-in", TAR, "-pass", f"file:{pw}"], cwd=d,
                       capture_output=True, check=True).stdout
  listing = subprocess.run(["tar", "-tz"], input=dec, capture_output=True, check=True).stdout.decode().split()
  assert f"{ORG}/results/tinybox_green/resnet/result_4.txt" in listing
  code = cli(["package", "--verify", str(d / TAR), "--passphrase-file", str(pw), "--into", str(tmp_path / "u")])
  assert code == 0 and check_path(tmp_path / "u" / ORG).accepted


def test_first_n_finished_runs_in_start_order_never_by_score(capsys, tmp_path):
  """7 finished runs and 2 crashed attempts: the package takes the first 5 to *start*, including one that did not
  converge, although the two left out are the fastest."""
  s = [default_seed(i) for i in range(20)]
  attempts = [
    dict(index=0, seed=s[0], status="failed", started=0),          # crashed: redone later with a new seed
    dict(index=1, seed=s[1], started=1),
    dict(index=2, seed=s[2], started=2, log=dict(status="aborted", epochs=37)),   # finished, did not converge
    dict(index=3, seed=s[3], started=3),
    dict(index=4, seed=s[4], status="interrupted", started=4),
    dict(index=5, seed=s[5], started=5),
    dict(index=0, seed=s[6], started=6),                             # the redo of run 0
    dict(index=4, seed=s[7], started=7, log=dict(run_minutes=90.0)),     # fast, but sixth to start
    dict(index=6, seed=s[8], started=8, log=dict(run_minutes=80.0)),     # fastest, seventh
  ]
  R = make_runs(tmp_path, "resnet", attempts=attempts)
  code, out, err = pack(capsys, tmp_path, R)
  assert code == 0, out + err
  res = tmp_path / "out" / ORG / "results" / "tinybox_green" / "resnet"
  logged = [json.loads(next(l for l in (res / f"result_{j}.txt").read_text().splitlines() if '"seed"' in l)
                       .split(":::MLLOG ", 1)[1])["value"] for j in range(5)]
  assert logged == [s[1], s[2], s[3], s[5], s[6]]
  assert f"not packaged (finished after the first 5; keep their logs): run 4 seed {s[7]}, run 6 seed {s[8]}" in out
  assert f"run 0 seed {s[0]} failed" in out and f"run 4 seed {s[4]} interrupted" in out
  assert "accepted under olympic scoring" in out      # the non-converged run counts as the dropped one


def test_missing_result_file_blocks_packing(capsys, tmp_path):
  R = make_runs(tmp_path, "resnet")
  (R / "results" / "tinybox_green" / "resnet" / "result_2.txt").unlink()
  refused(capsys, tmp_path, R, "result_2.txt: missing", "run 2")


def test_changed_result_file_blocks_packing(capsys, tmp_path):
  # `status` calls a result file edited after its run wrote it CHANGED (broken); package packed the edited file
  from tinyperf.benchmarks.common.io import file_digest
  from tinyperf.tooling.common import ledger as L
  R = make_runs(tmp_path, "resnet")
  res = R / "results" / "tinybox_green" / "resnet"
  with L.Ledger.locked(R / "runs" / "tinybox_green" / "resnet" / "ledger.json") as led:
    for a in led.attempts: a.sha256 = file_digest(res / f"result_{a.index}.txt", "sha256")   # as `tinyperf run` records
    led.save()
  with open(res / "result_2.txt", "a") as f: f.write("edited by hand\n")
  refused(capsys, tmp_path, R, "result_2.txt", "CHANGED since run 2", "tinyperf status")


def test_duplicate_seed_blocks_packing(capsys, tmp_path):
  R = make_runs(tmp_path, "resnet", seeds=[1_500_000_001, 1_600_000_003, 1_500_000_001, 1_700_000_009, 1_800_000_011])
  refused(capsys, tmp_path, R, "1500000001", "result_0.txt", "result_2.txt")


def test_log_seed_must_match_the_ledger(capsys, tmp_path):
  attempts = [dict(index=i, seed=default_seed(i)) for i in range(5)]
  attempts[3]["logged_seed"] = 77_777_777
  R = make_runs(tmp_path, "resnet", attempts=attempts)
  refused(capsys, tmp_path, R, "result_3.txt:", "77777777", str(default_seed(3)))   # the log, its seed, the one drawn


def test_too_few_finished_runs(capsys, tmp_path):
  R = make_runs(tmp_path, "resnet", attempts=[dict(index=i) for i in range(4)] + [dict(index=4, status="failed")])
  refused(capsys, tmp_path, R, "4 finished", "--nexp 5")


def test_failing_checks_refuse_to_pack(capsys, tmp_path):
  R = make_runs(tmp_path, "resnet", runs=[dict(init_minutes=31), dict(init_minutes=31)])
  o, _ = refused(capsys, tmp_path, R, "not packed", "nothing was written", code=1)
  assert "2 of 5 runs are non-compliant" in o and "init took 31.00 min" in o and "check: REJECTED" in o


def test_missing_systems_json_and_bad_input(capsys, tmp_path):
  R = make_runs(tmp_path, "resnet", systems_dir=False)
  (tmp_path / "systems").mkdir()
  refused(capsys, tmp_path, R, "systems/tinybox_green.json: missing", "tinyperf sysinfo")
  (tmp_path / "systems" / "tinybox_green.json").write_text('{"submitter": "x",\n')
  refused(capsys, tmp_path, R, "tinybox_green.json:2")
  for argv, needle in ((["package", "--org", ORG], "--out DIR"), (["package", "--org", "bad name", "--out", "x"], "--org 'bad name'"),
                       (["package", "--org", ORG, "--out", str(tmp_path / "o"), "--results", str(tmp_path / "nope")],
                        str(tmp_path / "nope")),
                       (["package", "--org", ORG, "--out", str(tmp_path / "o"), "--results", str(tmp_path / "systems/tinybox_green.json")],
                        f"{tmp_path / 'systems/tinybox_green.json'}:"),
                       (["package", "--org", ORG, "--out", str(tmp_path / "o"), "--results", str(tmp_path)],
                        "no run ledgers")):
    assert cli(argv) == 2
    e = capsys.readouterr().err
    assert needle in e and "Traceback" not in e, e


def test_unwritable_out_and_nothing_is_overwritten(capsys, tmp_path):
  R = make_runs(tmp_path, "resnet")
  (tmp_path / "afile").write_text("x")
  refused(capsys, tmp_path, R, str(tmp_path / "afile"), out="afile/sub")
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / SHA).write_text("keep")
  refused(capsys, tmp_path, R, str(tmp_path / "out" / SHA), fresh=False)
  assert (tmp_path / "out" / SHA).read_text() == "keep"
  (tmp_path / "out" / SHA).unlink()
  (tmp_path / "out" / ORG).mkdir()
  refused(capsys, tmp_path, R, f"out/{ORG}", fresh=False)
  assert not (tmp_path / "out" / TAR).exists()
  assert not any((tmp_path / "out" / ORG).iterdir())


def test_systems_json_from_the_run_directory_first(capsys, tmp_path, clone):
  """Without --systems: R/systems/<system>.json (what `tinyperf run` recorded) when it exists, else the repository's;
  a differing description that a later run left in R/systems/variants/ is reported loudly."""
  R = make_runs(tmp_path, "resnet", systems_dir=False)
  repo = clone / "systems" / "tinybox_green.json"
  code = cli(["package", "--org", ORG, "--out", str(tmp_path / "a"), "--results", str(R)])
  o, e = capsys.readouterr()
  assert code == 0, o + e
  assert f"systems/tinybox_green.json from {repo}" in o and "WARNING" not in e
  assert (tmp_path / "a" / ORG / "systems" / "tinybox_green.json").read_bytes() == repo.read_bytes()
  recorded = {**json.loads(repo.read_text()), "cooling": "liquid", "hw_notes": "recorded by tinyperf run"}
  first = sysinfo.record_run_system(R, "tinybox_green", recorded, LOCAL)
  variant = sysinfo.record_run_system(R, "tinybox_green", {**recorded, "cooling": "water"}, LOCAL)
  capsys.readouterr()
  code = cli(["package", "--org", ORG, "--out", str(tmp_path / "b"), "--results", str(R)])
  o, e = capsys.readouterr()
  assert code == 0, o + e
  assert f"systems/tinybox_green.json from {first}" in o
  assert "WARNING: 1 later `tinyperf run`" in e and str(variant) in e and f"uses {first}" in e
  assert (tmp_path / "b" / ORG / "systems" / "tinybox_green.json").read_bytes() == first.read_bytes()
  names = subprocess.run(["tar", "-tzf", TAR], cwd=tmp_path / "b", capture_output=True, text=True, check=True).stdout
  assert "variants" not in names


def test_only_tracked_files_of_the_commit_are_packed(capsys, tmp_path, clone):
  # untracked and git-ignored files of the checkout were copied into the submission (a build's extra CA, a key, a token)
  secrets = {"tooling/api_token.txt": "token", "tooling/server.key": "key", "docker/certs/proxy-extra.crt": "ca",
             "benchmarks/resnet/notes_untracked.py": "x = 1\n"}
  for rel, text in secrets.items(): (clone / rel).write_text(text)
  assert "proxy-extra.crt" not in git(clone, "status", "--porcelain")          # git-ignored, not only untracked
  R = make_runs(tmp_path, "resnet")
  code, out, err = pack(capsys, tmp_path, R)
  assert code == 0, out + err
  names = subprocess.run(["tar", "-tzf", TAR], cwd=tmp_path / "out", capture_output=True, text=True, check=True).stdout
  impl = f"{ORG}/benchmarks/resnet/implementations/tinybox_green/"
  assert impl + "tooling/cli.py" in names and impl + "docker/install.sh" in names
  for rel in secrets: assert rel.rsplit("/", 1)[1] not in names, rel
  tracked = set(git(clone, "ls-files").splitlines())
  shipped = {n[len(impl):] for n in names.split() if n.startswith(impl) and not n.endswith("/")}
  rendered = {"README.md", "compose.yaml", "run_and_time.sh", "dev_run.sh", "dev_beam.sh", "setup.sh", "init_datasets.sh"}
  assert shipped - tracked <= rendered, shipped - tracked      # every other file is a tracked file of the commit


def test_a_dirty_checkout_is_refused_or_named_dirty(capsys, tmp_path, clone):
  cli_py = clone / "tooling" / "cli.py"
  cli_py.write_text(cli_py.read_text() + "# edited after the runs\n")
  R = make_runs(tmp_path, "resnet")
  refused(capsys, tmp_path, R, "tooling/cli.py", "--allow-dirty", f"git checkout {run_builder.GIT_SHA}")
  code, out, err = pack(capsys, tmp_path, R, "dirty", "--allow-dirty")
  assert code == 0, out + err
  impl = tmp_path / "dirty" / ORG / "benchmarks/resnet/implementations/tinybox_green"
  assert "DIRTY" in (impl / "README.md").read_text() and "DIRTY" in err
  assert (impl / "tooling/cli.py").read_text().endswith("# edited after the runs\n")


def test_runs_of_other_or_uncommitted_code_are_refused(capsys, tmp_path, clone, monkeypatch):
  ran = run_builder.GIT_SHA
  # the checkout moved on after the runs: a commit that changes packaged code is not what made them
  (clone / "tooling" / "cli.py").write_text((clone / "tooling" / "cli.py").read_text() + "# later\n")
  git(clone, "commit", "-q", "-am", "later")
  R = make_runs(tmp_path, "resnet")
  refused(capsys, tmp_path, R, ran, "tooling/cli.py")
  git(clone, "checkout", "-q", "--detach", ran)            # the runs' commit checked out: packed, and labelled so
  code, out, err = pack(capsys, tmp_path, R, "ok")
  assert code == 0 and f"code: commit {ran}" in out, out + err
  # runs of uncommitted code, of a commit this clone lacks, of two commits
  monkeypatch.setattr(run_builder, "GIT_SHA", ran + "-dirty")
  refused(capsys, tmp_path, make_runs(tmp_path / "b", "resnet"), f"{ran}-dirty", "--allow-dirty")
  monkeypatch.setattr(run_builder, "GIT_SHA", "f" * 40)
  refused(capsys, tmp_path, make_runs(tmp_path / "c", "resnet"), "git fetch")
  R = make_runs(tmp_path / "d", "resnet")
  (R / "runs/tinybox_green/resnet" / f"run_3_{default_seed(3)}" / "output.log").write_text(
    run_builder.console_output("resnet", 1).replace("f" * 40, ran))
  refused(capsys, tmp_path, R, "f" * 40, ran)


def record_images(R: Path, sha: str, ids: dict[int, str], trees: dict[int, str] | None = None):
  """What the container backend records per attempt: the image's commit, the ID of the image that ran it and the hash
  of the code it holds (a compose service records no ID: it cannot see it)."""
  from tinyperf.tooling.common import ledger as L
  with L.Ledger.locked(R / "runs" / "tinybox_green" / "resnet" / "ledger.json") as led:
    for a in led.attempts:
      a.backend, a.image = "container", f"tinyperf:nv {ids.get(a.index, '')}".strip()
      a.provenance = {"TINYPERF_GIT_SHA": sha, L.IMAGE_ID: ids.get(a.index), L.IMAGE_DIGEST: None,
                      L.CODE_TREE: (trees or {}).get(a.index)}
    led.save()


def in_an_image(monkeypatch, tmp_path, sha: str, tree: str | None):
  """`tinyperf package` as the compose service runs it: in an image (no .git) built from commit sha holding code tree."""
  from tinyperf.benchmarks.common import runtime
  monkeypatch.setattr(ship_code, "_git", lambda *a, **k: None)
  monkeypatch.setenv("TINYPERF_IMAGE_VENDOR", "cpu")
  monkeypatch.setenv("TINYPERF_GIT_SHA", sha)
  monkeypatch.setattr(runtime, "ROOT", tmp_path / "image-root")
  (tmp_path / "image-root").mkdir(exist_ok=True)
  (tmp_path / "image-root" / runtime.IMAGE_CODE_FILE).unlink(missing_ok=True)
  if tree: (tmp_path / "image-root" / runtime.IMAGE_CODE_FILE).write_text(json.dumps({"code_tree": tree}))


def test_package_in_an_image_refuses_code_other_than_the_runs(capsys, tmp_path, monkeypatch):
  # compose `package` shipped the code of the image as it is now: an edited rebuild beside runs of the clean commit
  ran, tree, edited = run_builder.GIT_SHA, "sha256:" + "a" * 64, "sha256:" + "b" * 64
  R = make_runs(tmp_path, "resnet")
  record_images(R, ran, {}, {i: tree for i in range(5)})    # compose runs: no image ID, the code tree of their image
  in_an_image(monkeypatch, tmp_path, ran + "-dirty", tree)
  refused(capsys, tmp_path, R, f"{ran}-dirty", "tinyperf build")
  # an edited rebuild that says the runs' commit (a build labels its commit, not the edits): told apart by its code
  in_an_image(monkeypatch, tmp_path, ran, edited)
  refused(capsys, tmp_path, R, edited[:19], tree[:19], "--allow-dirty")      # the image's code, the runs' code
  in_an_image(monkeypatch, tmp_path, ran, None)             # an image `tinyperf build` did not make: no code to compare
  refused(capsys, tmp_path, R, tree[:19])
  code, out, err = pack(capsys, tmp_path, R, "dirty", "--allow-dirty")
  assert code == 0 and "DIRTY" in err, out + err
  in_an_image(monkeypatch, tmp_path, ran, tree)
  code, out, err = pack(capsys, tmp_path, R)
  assert code == 0, out + err
  readme = (tmp_path / "out" / ORG / "benchmarks/resnet/implementations/tinybox_green/README.md").read_text()
  assert f"at the image built from commit {ran}, code {tree}." in readme and f"| {ran} | none recorded | {tree} |" in readme


def test_runs_in_images_of_different_code_are_refused(capsys, tmp_path):
  a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
  R = make_runs(tmp_path, "resnet")
  record_images(R, run_builder.GIT_SHA + "-dirty", {}, {i: a if i < 3 else b for i in range(5)})
  for extra in ([], ["--allow-dirty"]):   # one implementation per package, whatever the flags
    got, o, e = pack(capsys, tmp_path, R, "out", *extra)
    assert got == 2 and "images of different code" in e and a[:19] in e and b[:19] in e, o + e


def test_runs_in_different_images_of_one_commit_are_named(capsys, tmp_path):
  a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
  R = make_runs(tmp_path, "resnet")
  record_images(R, run_builder.GIT_SHA, {i: a if i < 3 else b for i in range(5)})
  code, out, err = pack(capsys, tmp_path, R)
  assert code == 0, out + err
  assert "WARNING: the runs ran in different images" in err and a[:19] in err and b[:19] in err
