"""Where `tinyperf run` runs: --scheduler and --runtime, and the run loop driven through the Backend interface by
HostBackend with the stand-in trainer (tests/stand_in_train.py)."""
from __future__ import annotations
import json

import pytest

from tinyperf.benchmarks.common.config import load_resolved
from tinyperf.benchmarks.common.rundir import RunDir
from tinyperf.benchmarks.registry import load_config, spec
from tinyperf.tooling import cli
from tinyperf.tooling.common import ledger as L
from tinyperf.tooling.common.results_tree import ResultSet
from tinyperf.tooling.launch.backends import HostBackend, TRAIN_MODULE_ENV
from tinyperf.tooling.launch.run import LOCAL, launch_mode


def mode(*flags: str) -> tuple[str, str]:
  args = cli.build_parser().parse_args(["run", "resnet", "--platform", "cpu_smoke", "--data", "d", *flags])
  return launch_mode(args)


def run_cli(tmp_path, *flags: str, capsys) -> tuple[int, str, str]:
  data = tmp_path / "data"; data.mkdir(exist_ok=True); (data / "manifest.json").write_text("{}")
  code = cli.main(["run", "resnet", "--platform", "cpu_smoke", "--nexp", "2", "--data", str(data), "--results",
                   str(tmp_path / "out"), *flags])
  out, err = capsys.readouterr()
  return code, out, err


# --------------------------------------------------------------------------------------------------------- the flags
@pytest.mark.parametrize("flags, want", [
  ((), ("local", "docker")),
  (("--runtime", "host"), ("local", "host")),
  (("--scheduler", "slurm"), ("slurm", "docker")),
  (("--scheduler", "slurm", "--runtime", "pyxis", "--image", "r#tinyperf:nv"), ("slurm", "pyxis")),
  (("--scheduler", "local", "--runtime", "docker", "--image", "tinyperf:cpu"), ("local", "docker")),
])
def test_flags(flags, want, capsys):
  assert mode(*flags) == want
  assert capsys.readouterr().err == ""


@pytest.mark.parametrize("flags, needles", [
  (("--runtime", "pyxis", "--image", "x.sqsh"), ["--runtime pyxis", "--scheduler slurm", "--runtime docker"]),
  (("--runtime", "host", "--image", "tinyperf:cpu"), ["--image tinyperf:cpu", "--runtime host"]),
  (("--scheduler", "slurm", "--runtime", "pyxis"), ["--image", "enroot import"]),
  (("--scheduler", "slurm", "--only-index", "1"), ["--only-index", "--scheduler slurm"]),
  (("--runtime", "host", "--partition", "gpu"), ["--partition", "--scheduler slurm"]),
  (("--nexp", "0"), ["--nexp 0"]),      # 0 once meant "the default", and 5 runs started
  (("--nexp", "-2"), ["--nexp -2"]),
])
def test_invalid_combinations_exit_2_with_one_paragraph(flags, needles, tmp_path, capsys):
  code, out, err = run_cli(tmp_path, *flags, capsys=capsys)
  lines = err.splitlines()
  assert code == 2 and len(lines) == 1 and lines[0].startswith("tinyperf run: error: "), err
  for n in needles: assert n in lines[0], err
  assert "Traceback" not in err and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------------ the backends
def test_host_backend_records_the_image_it_runs_in(tmp_path, monkeypatch):
  """A compose service (or a pyxis task) runs the host backend inside a tinyperf image: the ledger says container,
  with the image and its provenance from the image's environment; on a bare host, no image."""
  cfg = load_config("resnet", "cpu_smoke", environ={})
  for k in ("TINYPERF_IMAGE_VENDOR", "TINYPERF_IMAGE", *L.IMAGE_ENV): monkeypatch.delenv(k, raising=False)
  bare = HostBackend(cfg, tmp_path, ResultSet(tmp_path, "cpu_smoke", "resnet"), LOCAL)
  assert (bare.kind, bare.image_record(), bare.describe()) == ("host", (None, {}), "on this host (--runtime host)")
  monkeypatch.setenv("TINYPERF_IMAGE_VENDOR", "cpu"); monkeypatch.setenv("TINYPERF_GIT_SHA", "abc123")
  inside = HostBackend(cfg, tmp_path, ResultSet(tmp_path, "cpu_smoke", "resnet"), LOCAL)
  image, prov = inside.image_record()
  assert inside.kind == "container" and image.startswith("tinyperf:cpu (image ID not visible")
  assert prov["TINYPERF_GIT_SHA"] == "abc123" and set(prov) == {*L.IMAGE_ENV, L.CODE_TREE}
  # the image's code, by the hash `tinyperf build` put in its tree: a tag names every rebuild alike
  from tinyperf.benchmarks.common import runtime
  monkeypatch.setattr(runtime, "ROOT", tmp_path)
  (tmp_path / runtime.IMAGE_CODE_FILE).write_text(json.dumps({"code_tree": "sha256:" + "e" * 64}))
  assert inside.image_record()[1][L.CODE_TREE] == "sha256:" + "e" * 64


def test_container_backend_records_the_image_that_ran_each_attempt(tmp_path, monkeypatch):
  # only the tag and the base image's digest were recorded: a rebuild under the same tag was indistinguishable
  from types import SimpleNamespace
  from tinyperf.benchmarks.common import runtime
  from tinyperf.tooling.launch.backends import ContainerBackend
  image = SimpleNamespace(id="sha256:" + "c" * 64, short_id="sha256:cccccc",
                          labels={"io.tinyperf.vendor": "cpu", "io.tinyperf.code_tree": "sha256:" + "e" * 64},
                          attrs={"Config": {"Env": ["TINYPERF_GIT_SHA=abc123"]}, "RepoDigests": ["r/tinyperf@sha256:" + "d" * 64]})
  client = SimpleNamespace(images=SimpleNamespace(get=lambda tag: image), containers=SimpleNamespace(list=lambda **kw: []))
  b = ContainerBackend(load_config("resnet", "cpu_smoke", environ={}), "tinyperf:cpu", tmp_path,
                       ResultSet(tmp_path, "cpu_smoke", "resnet"), LOCAL,
                       client=client)
  ref, prov = b.image_record()
  assert ref == f"tinyperf:cpu {image.id}" and prov["TINYPERF_GIT_SHA"] == "abc123"
  assert prov[L.IMAGE_ID] == image.id and prov[L.IMAGE_DIGEST] == "r/tinyperf@sha256:" + "d" * 64
  assert prov[L.CODE_TREE] == "sha256:" + "e" * 64
  monkeypatch.setenv("TINYPERF_IMAGE", ref)          # what the backend hands each run's container
  assert runtime.provenance()["image"] == ref
  # knobs and the submitter reach a run in its config.json, never in the container's environment
  monkeypatch.setenv("SUBMISSION_ORG", "myorg")
  b.cfg = load_config("resnet", "cpu_smoke", environ={"BS": "8", "EVAL_BS": "8"})
  env = b._spec("n", ["true"], [], {}, "run", {}).environment
  assert not {"BS", "EVAL_BS", "SUBMISSION_ORG"} & set(env), env


def test_the_run_loop_through_the_host_backend(tmp_path, capsys, monkeypatch):
  """A real launcher (preflight, system record, ledger, check) on the host backend with the stand-in trainer; then the
  same command with --nexp 2 on the same results resumes it with the same backend and does only the run left."""
  from tinyperf.benchmarks.resnet.prep import main as prep_main
  data = tmp_path / "data"
  assert prep_main(["synthetic-imagenet", "--out", str(data), "--classes", "4", "--train-per-class", "1",
                    "--val-per-class", "1", "--size", "8", "--seed", "0"]) in (0, None)
  monkeypatch.setenv(TRAIN_MODULE_ENV, "tests.stand_in_train")
  for k in ("TINYPERF_IMAGE_VENDOR", "TINYPERF_CACHE_DIR"): monkeypatch.delenv(k, raising=False)
  out = tmp_path / "out"
  base = ["run", "resnet", "--platform", "cpu_smoke", "--data", str(data), "--results", str(out)]
  capsys.readouterr()
  monkeypatch.setenv("NUM_WORKERS", "3")   # an override of one knob for the runs
  assert cli.main([*base, "--nexp", "1", "--runtime", "host"]) == 0
  first = capsys.readouterr().out
  assert "resnet on cpu_smoke on this host (--runtime host): 1 runs, 0 already finished, running [0]" in first
  assert "host page cache: " in first and "check: compliant" in first
  assert cli.main([*base, "--nexp", "2", "--runtime", "host"]) == 0
  o = capsys.readouterr().out
  assert "2 runs, 1 already finished, running [1]" in o
  ledger = json.loads((out / "runs/cpu_smoke/resnet/ledger.json").read_text())
  attempts = ledger["attempts"]
  assert ledger["nexp"] == 2   # the set size the last run asked for (tinyperf status reads it)
  assert [(a["index"], a["status"], a["backend"], a["image"]) for a in attempts] == [(0, "done", "host", None),
                                                                                    (1, "done", "host", None)]
  assert all(a["cache_drop"] for a in attempts)
  # each run's config was resolved once, at its claim, into its folder: the ledger names the platform and the hash
  for a in attempts:
    run = RunDir(out / "runs/cpu_smoke/resnet" / f"run_{a['index']}_{a['seed']}")
    cfg, submitter, sha = load_resolved(run.config, spec("resnet"))
    assert (a["platform"], a["config_sha256"], submitter, cfg["NUM_WORKERS"]) == ("cpu_smoke", sha, "out", 3)
    assert run.cache_db.is_file() and run.log.is_file()   # the trainer's files, named by the run folder alone
  assert not list((out / "runs/cpu_smoke/resnet").glob(".preflight-*"))   # the preflight's resolution is removed
  assert sorted(p.name for p in (out / "results/cpu_smoke/resnet").iterdir()) == ["result_0.txt", "result_1.txt"]
  assert (out / "systems/cpu_smoke.json").is_file()


def test_every_backend_has_the_whole_interface(tmp_path):
  """The run loop calls only Backend's members; a backend missing one fails at its first run (ContainerBackend once
  lacked `kind`, found only by the docker tests). ContainerBackend is checked on the class: constructing it needs a
  daemon."""
  from tinyperf.tooling.launch.backends import Backend, ContainerBackend
  members = {n for n in vars(Backend) if not n.startswith("_")} | set(Backend.__annotations__)
  assert {"kind", "describe", "image_record", "detect_system", "drop_page_cache", "run_one"} <= members
  host = HostBackend(load_config("resnet", "cpu_smoke", environ={}), tmp_path, ResultSet(tmp_path, "cpu_smoke", "resnet"), LOCAL)
  for b in (host, ContainerBackend):
    missing = sorted(m for m in members if not hasattr(b, m))
    assert not missing, f"{b} lacks {missing}"
  assert (host.kind, ContainerBackend.kind) == ("host", "container")


def test_a_compose_service_names_the_host_directories_and_its_own_rerun_command(tmp_path, capsys, monkeypatch):
  """Inside a compose service the launcher sees /data and /results; what it prints must name the host directories
  behind them (docs/containers.md), and an unfinished set is redone by running the service again."""
  import shutil
  from tinyperf.benchmarks.resnet.prep import main as prep_main
  from tinyperf.tooling.common.container import MOUNTS_ENV, SERVICE_ENV
  from tinyperf.tooling.launch import backends
  data, broken, out = tmp_path / "data", tmp_path / "broken", tmp_path / "out"
  assert prep_main(["synthetic-imagenet", "--out", str(data), "--classes", "4", "--train-per-class", "1",
                    "--val-per-class", "1", "--size", "8", "--seed", "0"]) in (0, None)
  shutil.copytree(data, broken)
  next(broken.rglob("*.JPEG")).unlink()
  monkeypatch.setenv(TRAIN_MODULE_ENV, "tests.stand_in_train")
  for k in ("TINYPERF_IMAGE_VENDOR", "TINYPERF_CACHE_DIR"): monkeypatch.delenv(k, raising=False)
  monkeypatch.setattr(backends, "drop_host_page_cache", lambda *a: "posix_fadvise (this test drops nothing)")
  monkeypatch.setenv(MOUNTS_ENV, f"{data}=SYNTHETIC_DIR {broken}=IMAGENET_DIR {out}=RESULTS_DIR")
  for var, host in (("SYNTHETIC_DIR", "/home/me/data/synthetic"), ("IMAGENET_DIR", "/home/me/data/imagenet"),
                    ("RESULTS_DIR", "/home/me/out")):
    monkeypatch.setenv(f"TINYPERF_HOST_{var}", host)
  monkeypatch.setenv(SERVICE_ENV, "resnet-cpu")
  monkeypatch.setattr(L, "_ME", {})   # the launcher's owner record is made once per process
  base = ["run", "resnet", "--platform", "cpu_smoke", "--runtime", "host", "--results", str(out), "--nexp", "1"]
  capsys.readouterr()
  assert cli.main([*base, "--data", str(broken)]) == 2
  o, e = capsys.readouterr()
  assert "/home/me/data/imagenet/manifest.json" in e and str(broken) not in e, e
  assert "`docker compose run --rm resnet-cpu`" in e, e    # the command that reruns it, as the user typed it
  (broken / "manifest.json").unlink()   # not prepared at all: refused before the preflight, naming the host directory
  assert cli.main([*base, "--data", str(broken)]) == 2
  o, e = capsys.readouterr()
  assert "/home/me/data/imagenet" in e and str(broken) not in e, e
  assert cli.main([*base, "--data", str(data)]) == 0
  o, e = capsys.readouterr()
  assert "system description: wrote /home/me/out/systems/cpu_smoke.json" in o
  assert "output in /home/me/out/runs/cpu_smoke/resnet/run_0_" in o and "all 1 runs finished: /home/me/out/results" in o
  assert str(tmp_path) not in o + e, o + e
  (att,) = json.loads((out / "runs/cpu_smoke/resnet/ledger.json").read_text())["attempts"]
  assert att["owner"]["compose_service"] == "resnet-cpu"
  # the check and package services on the same mount
  cli.main(["check", str(out)])
  assert capsys.readouterr().out.startswith("tinyperf check /home/me/out  (results tree of `tinyperf run`)")
  assert cli.main(["package", "--results", str(out), "--org", "tinycorp", "--out", str(out / "submission")]) == 2
  e = capsys.readouterr().err
  assert "/home/me/out/runs/cpu_smoke/resnet/ledger.json: 1 " in e and str(tmp_path) not in e, e


def test_a_redone_run_replaces_the_kernel_cache_its_killed_attempt_left(tmp_path, monkeypatch):
  """A compose service keeps one kernel cache per run in CACHE_DIR: a killed attempt's stayed there for good."""
  from tinyperf.tooling.launch import backends
  cache = tmp_path / "cache"; cache.mkdir()
  killed = [cache / f"cpu_smoke_resnet_1_77.db{s}" for s in ("", "-wal", "-shm")]
  kept = [cache / "cpu_smoke_resnet_0_5.db", cache / "cpu_smoke_resnet_11_9.db", cache / "cpu_smoke_bert_1_3.db"]
  for p in killed + kept: p.write_bytes(b"x")
  monkeypatch.setenv("TINYPERF_CACHE_DIR", str(cache))
  seen = {}
  monkeypatch.setattr(backends, "host_run", lambda cfg, seed, data, run, out, cache_db=None, **kw:
                      (seen.setdefault("db", cache_db), ({"run": 0}, run.log))[1])
  b = HostBackend(load_config("resnet", "cpu_smoke", environ={}), tmp_path, ResultSet(tmp_path, "cpu_smoke", "resnet"), LOCAL)
  b.run_one(1, 88, RunDir(tmp_path), None, "none", None)
  assert seen["db"] == cache / "cpu_smoke_resnet_1_88.db"
  assert not any(p.exists() for p in killed) and all(p.exists() for p in kept)
