"""compose.yaml and `tinyperf compose` without a Docker engine: the services rendered from the configs (tooling/common/
compose_file.py), the host step that makes them runnable (tooling/prep/compose.py: .env, owned directories, the GPU
runtime) and the in-container entry step. (tests/unit/test_containers.py: the images and the container backend.)"""
from __future__ import annotations
import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tinyperf.benchmarks import preflight as PF
from tinyperf.benchmarks.common.config import available_platforms
from tinyperf.benchmarks.registry import BENCHMARKS, load_config
from tests.conftest import REPO, sh
from tinyperf.tooling.common import compose_file as CF
from tinyperf.tooling.prep import compose as CO, images as I
from tinyperf.tooling.common.errors import UserError


def tinyperf(*args, env=None, cwd=REPO):
  return sh([sys.executable, "-m", "tinyperf.tooling.cli", *args], cwd, {**os.environ, **(env or {})}, timeout=300)


# ------------------------------------------------------------------------------------------------------ rendering

def test_generated_files_match_configs_and_lock():
  r = tinyperf("render", "--check")
  assert r.returncode == 0, r.stdout + r.stderr
  from tinyperf.tooling.prep.render import rendered_files
  names = {p.name for p in rendered_files()}
  assert {"compose.yaml", "Dockerfile.nv", "Dockerfile.amd", "Dockerfile.cpu"} <= names


def test_compose_drift_is_detected(monkeypatch):
  """Changing a config knob that compose depends on (GPUS) must make the committed compose.yaml stale."""
  real = load_config
  def patched(b, p, environ=None, path=None):
    cfg = real(b, p, environ=environ, path=path)
    if p == "tinybox_green": cfg.knobs["GPUS"] = 3
    return cfg
  monkeypatch.setattr(CF, "load_config", patched)
  assert CF.render_compose() != CF.COMPOSE.read_text()


def _compose():
  return yaml.safe_load(CF.COMPOSE.read_text())["services"]


def test_compose_has_every_benchmark_platform_and_tool_service():
  s = _compose()
  for name in ("resnet-green", "resnet-red", "resnet-mi300x", "resnet-h200", "resnet-cpu", "bert-green", "bert-red",
               "bert-mi300x", "bert-h200", "bert-cpu", "prep-imagenet", "prep-synthetic", "prep-wiki", "prep-bert-ckpt",
               "check", "package"):
    assert name in s, name
  for b in BENCHMARKS:
    for p in available_platforms(b):
      cfg = load_config(b, p, environ={})
      svc = s[CF.service_name(cfg)]
      assert svc["command"][:5] == ["tinyperf", "run", b, "--platform", p]
      assert svc["image"] == f"${{TINYPERF_IMAGE_{cfg['vendor'].upper()}:-tinyperf:{cfg['vendor']}}}"
      assert svc["labels"]["io.tinyperf.time_limit_minutes"] == str(cfg["time_limit_minutes"])
      gpu = cfg["vendor"] in ("nv", "amd")
      assert svc["ulimits"] == ({"memlock": -1, "stack": 67108864} if gpu else {"stack": 67108864}) and svc["init"] is True
      data, res, cache = svc["volumes"]
      # long syntax: a missing bind source is refused, never created by the daemon as root
      assert all(v["type"] == "bind" for v in svc["volumes"]) and data["read_only"] is True and data["target"] == "/data"
      assert (res["source"], res["target"], cache["target"]) == ("${RESULTS_DIR:-./out}", "/results", "/cache")
      assert "read_only" not in res and "read_only" not in cache
      assert svc["entrypoint"] == ["python", "-m", "tinyperf.tooling.prep.compose", "--enter", "/results=RESULTS_DIR", "/cache=CACHE_DIR",
                                   "--"]
      assert svc["pull_policy"] == "never" and svc["build"]["dockerfile"] == f"Dockerfile.{cfg['vendor']}"
      shm = int(svc["shm_size"].rstrip("g")) * 2**30
      assert shm >= PF.shm_bytes_needed(cfg) * 1.25
      if cfg["vendor"] == "nv":
        dev = svc["deploy"]["resources"]["reservations"]["devices"]
        assert dev == [{"driver": "nvidia", "count": cfg["GPUS"], "capabilities": ["gpu", "compute", "utility"]}]
      elif cfg["vendor"] == "amd":
        assert svc["devices"] == ["/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri"]
        assert svc["group_add"][0] == "video" and "RENDER_GID" in svc["group_add"][1]
        assert svc["security_opt"] == ["seccomp=unconfined"]
      else:
        assert "deploy" not in svc and "devices" not in svc
  text = CF.COMPOSE.read_text()
  assert "privileged" not in text.replace("Nothing here is privileged", "")
  assert "cap_add" not in text and not re.search(r"^version:", text, re.M)


# ------------------------------------------------------------------------------------ `tinyperf compose`, entry step

def test_compose_tool_services_default_commands():
  s = _compose()
  assert s["check"]["command"] == ["/results"] and s["check"]["volumes"][0]["read_only"] is True
  assert s["package"]["command"][:2] == ["--results", "/results"] and "--org" not in s["package"]["command"]
  assert s["resnet-green"]["environment"]["SUBMISSION_ORG"] == "${ORG:-}"   # the submitter, asked for at the first run
  assert s["prep-synthetic"]["entrypoint"][-3:] == ["tinyperf", "prep", "synthetic-imagenet"]
  assert s["resnet-cpu"]["volumes"][0]["source"] == s["prep-synthetic"]["volumes"][0]["source"]
  for name, svc in s.items():
    assert svc["image"].startswith("${TINYPERF_IMAGE_") and svc["build"]["context"] == CF.MISSING_IMAGE, name
  for vendor in I.VENDORS:
    df = (REPO / CF.MISSING_IMAGE / f"Dockerfile.{vendor}").read_text()
    # the failing COPY is the first step after FROM scratch: no step before it commits an image (an ARG step left a
    # 0-byte `<none>` image behind on every daemon that ran it)
    steps = [l.split()[0] for l in df.splitlines() if l.strip() and not l.startswith("#")]
    assert steps == ["FROM", "COPY"] and "FROM scratch" in df and f"tinyperf build --vendor {vendor}" in df
  assert CF.MISSING_IMAGE in (REPO / ".dockerignore").read_text().split()   # keeps the image's build cache


def test_compose_prepare_writes_env_and_owned_dirs(tmp_path):
  (tmp_path / ".env").write_text("# mine\nFOO=bar\nRESULTS_DIR=res\n")
  warnings = []
  out = CO.prepare(["prep-synthetic", "resnet-cpu", "check"], cwd=tmp_path, environ={}, warnings=warnings)
  env = CO.read_env_file(tmp_path / ".env")
  assert env["FOO"] == "bar" and "# mine" in (tmp_path / ".env").read_text()   # the user's lines stay
  assert env["RESULTS_DIR"] == str(tmp_path / "res") == out["RESULTS_DIR"]       # relative: to the compose directory
  assert env["TINYPERF_UID"] == str(os.getuid()) and env["TINYPERF_GID"] == str(os.getgid())
  for d in ("res", "res/cache", "data/synthetic"):
    assert (tmp_path / d).is_dir() and (tmp_path / d).stat().st_uid == os.getuid(), d
  assert not warnings                                   # prep-synthetic created the data dir resnet-cpu reads
  CO.prepare(["resnet-green"], cwd=tmp_path, environ={"RESULTS_DIR": str(tmp_path / "r2")}, warnings=warnings)
  env = CO.read_env_file(tmp_path / ".env")   # exported values win, as in compose; the cache follows the results
  assert (env["RESULTS_DIR"], env["CACHE_DIR"]) == (str(tmp_path / "r2"), str(tmp_path / "r2/cache"))
  assert len(warnings) == 1 and "IMAGENET_DIR=" in warnings[0] and "prep-imagenet" in warnings[0]
  with pytest.raises(UserError, match=r"resnet-nope.*resnet-cpu"):   # the name asked for and the ones there are
    CO.prepare(["resnet-nope"], cwd=tmp_path, environ={})


def test_compose_prepare_points_bert_cpu_at_the_stand_in_corpus(tmp_path):
  """bert-cpu trains on `prep wiki corpus` data at cpu_smoke's shapes: the missing-WIKI_DIR hint must not send its user
  to prep-wiki's default (MLCommons' Wikipedia download, shards at 512/76 that cpu_smoke refuses)."""
  warnings = []
  CO.prepare(["bert-cpu"], cwd=tmp_path, environ={}, warnings=warnings)
  assert len(warnings) == 1 and f"WIKI_DIR={tmp_path / 'data/wiki'}" in warnings[0], warnings
  assert f"tinyperf prep wiki corpus --out {tmp_path / 'data/wiki'}" in warnings[0]
  assert "pretrain --data /data --platform cpu_smoke" in warnings[0]
  CO.prepare(["bert-green"], cwd=tmp_path, environ={}, warnings=warnings)   # closed: the download is right
  assert "corpus" not in warnings[1] and "`docker compose run --rm prep-wiki`" in warnings[1]


def test_compose_from_another_directory_says_where_relative_paths_go(tmp_path, monkeypatch, capsys):
  """`RESULTS_DIR=out tinyperf compose check` typed outside the clone: compose reads `out` from compose.yaml's
  directory, so tinyperf made the clone's out/ in silence and printed `docker compose run --rm check`, which finds no
  compose.yaml where the user is."""
  proj, elsewhere = tmp_path / "clone", tmp_path / "home"
  proj.mkdir(); elsewhere.mkdir()
  monkeypatch.chdir(elsewhere)
  monkeypatch.setattr(CO, "compose_dir", lambda: proj)
  monkeypatch.setattr(CO, "check_engine", lambda *a, **k: None)
  monkeypatch.setenv("RESULTS_DIR", "out")
  assert CO.main(argparse.Namespace(service=["check"])) == 0
  out = capsys.readouterr().out
  assert "RESULTS_DIR=out" in out and str(proj) in out and str(elsewhere / "out") in out
  assert f"ready: cd {proj} && docker compose run --rm check" in out
  monkeypatch.chdir(proj)   # from the clone, as the docs say: no warning, no cd
  assert CO.main(argparse.Namespace(service=["check"])) == 0
  out = capsys.readouterr().out
  assert "RESULTS_DIR=out" not in out and "ready: docker compose run --rm check" in out


def test_compose_prepare_refuses_a_dir_the_container_user_cannot_write(tmp_path):
  res = tmp_path / "res"; res.mkdir(); res.chmod(0o755)
  owner = res.stat().st_uid
  with pytest.raises(UserError) as e:
    CO.prepare(["resnet-cpu"], cwd=tmp_path, environ={"RESULTS_DIR": str(res), "TINYPERF_UID": str(owner + 4321),
                                                      "TINYPERF_GID": str(owner + 4321)})
  msg = str(e.value)
  assert f"RESULTS_DIR={res}" in msg and f"uid {owner}" in msg and f"TINYPERF_UID={owner + 4321}" in msg
  assert f"sudo chown -R {owner + 4321}:{owner + 4321} {res}" in msg and "/results" not in msg


def test_host_path_names_the_host_directory_behind_a_compose_mount(monkeypatch):
  from tinyperf.tooling.common.container import MOUNTS_ENV, host_path
  svc = _compose()["resnet-cpu"]["environment"]   # the mounts as compose.yaml gives them
  monkeypatch.setenv(MOUNTS_ENV, svc[MOUNTS_ENV])
  monkeypatch.setenv("TINYPERF_HOST_RESULTS_DIR", "/srv/out/")
  assert host_path("/results/results/cpu_smoke/resnet") == "/srv/out/results/cpu_smoke/resnet"
  assert host_path(Path("/results")) == "/srv/out"
  assert host_path("/resultsX/a") == "/resultsX/a"          # a sibling of the mount, not under it
  assert host_path("/cache/x.db") == "/cache/x.db"          # a mount whose host directory this service was not told
  monkeypatch.delenv(MOUNTS_ENV)                             # outside a compose service: the path as it is
  assert host_path("/results/results") == "/results/results" and host_path("out/r") == "out/r"


def test_compose_entry_step_names_the_host_dir(tmp_path):
  env = {**os.environ, "TINYPERF_HOST_RESULTS_DIR": "/srv/out", "TINYPERF_COMPOSE_SERVICE": "resnet-cpu"}
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.prep.compose", "--enter", f"{tmp_path}/missing=RESULTS_DIR", "--",
                      "echo", "ran"], cwd=REPO, capture_output=True, text=True, env=env)
  assert r.returncode == 2 and "ran" not in r.stdout
  assert "RESULTS_DIR" in r.stderr and "/srv/out" in r.stderr and f"TINYPERF_UID={os.getuid()}" in r.stderr
  assert "`tinyperf compose resnet-cpu`" in r.stderr and "sudo chown -R" in r.stderr and "Traceback" not in r.stderr
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.prep.compose", "--enter", f"{tmp_path}=RESULTS_DIR", "--", "echo", "ran"],
                     cwd=REPO, capture_output=True, text=True, env=env)
  assert r.returncode == 0 and r.stdout == "ran\n" and not list(tmp_path.iterdir())   # the probe is gone


def test_tinyperf_compose_cli_without_a_daemon(tmp_path):
  """The host step as typed, from the directory of compose.yaml: directories and .env first, then the engine checks
  (here: no daemon, exit 2 with the fix, no traceback)."""
  (tmp_path / "compose.yaml").write_text(CF.COMPOSE.read_text())
  r = tinyperf("compose", "resnet-cpu", "check", cwd=tmp_path, env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
  assert r.returncode == 2 and f"unix://{tmp_path}/none.sock" in r.stderr and "Traceback" not in r.stderr, r.stderr
  env = CO.read_env_file(tmp_path / ".env")
  assert env["RESULTS_DIR"] == str(tmp_path / "out") and (tmp_path / "out/cache").is_dir()
  r = tinyperf("compose", "resnet-nope", cwd=tmp_path)
  assert r.returncode == 2 and "resnet-nope" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_nv_service_is_refused_by_name_until_tinyperf_compose_found_the_gpu_runtime(tmp_path):
  """Without the NVIDIA runtime the daemon's only word was `could not select device driver "nvidia"`. Until `tinyperf
  compose` has found the runtime, an nv service asks for a runtime whose name (printed by the daemon's refusal, before
  anything runs) says what to do; once found, .env names the daemon's default runtime."""
  s = _compose()
  for name, svc in s.items():
    if svc["build"]["dockerfile"] == "Dockerfile.nv":
      assert svc["runtime"].startswith("${TINYPERF_NV_RUNTIME:-") and f"run tinyperf compose {name} first" in svc["runtime"]
    else:
      assert "runtime" not in svc, name
  class Engine:
    def __init__(self, runtimes): self.runtimes, self.images = runtimes, type("I", (), {"get": lambda self, ref: None})()
    def info(self): return {"Runtimes": self.runtimes, "CDISpecDirs": [], "DefaultRuntime": "runc"}
  env = tmp_path / ".env"
  with pytest.raises(UserError, match=r"runc.*nvidia-ctk"):
    CO.check_engine(["resnet-h200"], {}, environ={}, client=Engine({"runc": {}}), env_path=env)
  assert "TINYPERF_NV_RUNTIME" not in CO.read_env_file(env)
  CO.check_engine(["check"], {}, environ={}, client=Engine({"runc": {}}), env_path=env)   # no GPU service: no runtime
  assert "TINYPERF_NV_RUNTIME" not in CO.read_env_file(env)
  CO.check_engine(["resnet-h200"], {}, environ={}, client=Engine({"runc": {}, "nvidia": {}}), env_path=env)
  assert CO.read_env_file(env)["TINYPERF_NV_RUNTIME"] == "runc"
