"""Images and the container backend without a Docker engine: the Dockerfiles and image lock, the arguments handed to the
docker SDK, build-error handling, preflight on a fake /dev and /sys, bad input that must fail before anything runs, and
what an image is built from. (tests/unit/test_compose.py: compose.yaml and `tinyperf compose`;
tests/integration/test_containers.py does the same things against a real engine.)"""
from __future__ import annotations
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tinyperf.benchmarks.registry import load_config
from tinyperf.benchmarks import preflight as PF
from tests.conftest import REPO
from tinyperf.tooling.prep import images as I
from tinyperf.tooling.common import container as C
from tinyperf.tooling.common.errors import UserError


def tinyperf(*args, env=None, cwd=REPO):
  return subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *args], cwd=cwd, capture_output=True, text=True,
                        env={**os.environ, **(env or {})}, timeout=300)


# --------------------------------------------------------------------------------------------------------- images

def test_dockerfiles_share_layers_and_use_classic_syntax():
  texts = {v: I.dockerfile_path(v).read_text() for v in I.VENDORS}
  lock = I.load_lock()
  for v, t in texts.items():
    assert f"ARG BASE_IMAGE={I.base_ref(lock['images'][v])}\n" in t
    assert "--mount" not in t and "<<" not in t and "# syntax=" not in t, "BuildKit-only syntax"
    assert "USER tinyperf" in t and "selfcheck --vendor " + v in t
  # nv's build stage adds Triton (KERNELS=triton) in two steps of its own after the installed environment, whose layer
  # every vendor built on one base then shares (with Triton's lock in the first COPY, nv installed it all again); every
  # step else is the same
  triton = "COPY requirements-kernels.lock /opt/tinyperf/build/\nRUN sh /opt/tinyperf/build/install.sh kernels\n"
  shared = "COPY docker/ requirements.lock /opt/tinyperf/build/\nRUN sh /opt/tinyperf/build/install.sh system python\n"
  assert shared + triton in texts["nv"] and all(triton not in texts[v] for v in ("amd", "cpu"))
  body = lambda t: t[t.index("FROM ${BASE_IMAGE}"):t.index("TINYPERF_IMAGE_VENDOR")].replace(triton, "")
  assert body(texts["nv"]) == body(texts["amd"]) == body(texts["cpu"]) and shared in body(texts["cpu"])


class FakeRegistryData:
  def __init__(self, id): self.id = id


class FakeImages:
  def __init__(self, answer): self.answer = answer
  def get_registry_data(self, ref):
    if isinstance(self.answer, Exception): raise self.answer
    return FakeRegistryData(self.answer)


class FakeClient:
  def __init__(self, answer): self.images = FakeImages(answer)


def test_images_pin_fills_lock(tmp_path):
  lock = tmp_path / "images.lock.json"
  lock.write_text(I.LOCK.read_text())
  digest = "sha256:" + "ab" * 32
  got = I.pin(["nv"], client=FakeClient(digest), lock_path=lock)
  assert got == {"nv": digest}
  data = I.load_lock(lock)
  assert data["images"]["nv"]["digest"] == digest and data["images"]["nv"]["pinned_at"]
  assert I.base_ref(data["images"]["nv"]).endswith("@" + digest)
  assert "FROM" in I.render_dockerfile("nv", data) and f"@{digest}" in I.render_dockerfile("nv", data)


def test_images_pin_without_registry_changes_nothing(tmp_path):
  lock = tmp_path / "images.lock.json"
  lock.write_text(I.LOCK.read_text())
  before = lock.read_text()
  with pytest.raises(UserError, match=r"nvidia/cuda:12\.4\.1-runtime-ubuntu22\.04 .*no route to registry.*images\.lock\.json"):
    I.pin(["nv"], client=FakeClient(RuntimeError("no route to registry")), lock_path=lock)
  assert lock.read_text() == before


def test_build_refuses_unpinned_base_for_closed(tmp_path):
  lock = I.load_lock()
  if lock["images"]["nv"]["digest"]: pytest.skip("the nv base is pinned in this checkout")
  r = tinyperf("build", "--vendor", "nv", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
  assert r.returncode == 2, r.stderr
  assert "tinyperf images pin" in r.stderr and "--allow-unpinned" in r.stderr and "Traceback" not in r.stderr
  r = tinyperf("build", "--vendor", "nv", "--base-image", "local/debian:bookworm", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
  assert r.returncode == 2 and "local/debian:bookworm" in r.stderr and "--base-image" in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------------ SDK arguments

def _spec(vendor, gpus=6):
  return C.RunSpec(image="img", command=["true"], name="n", mounts=[("/d", "/data", True), ("/w", "/work", False)],
                   environment={"A": "1"}, vendor=vendor, gpus=gpus, shm_size="11g", user="1000:1000", render_gid=993)


def test_container_kwargs_per_vendor():
  nv = C.container_kwargs(_spec("nv", 6))
  (req,) = nv["device_requests"]
  assert req["Count"] == 6 and req["Driver"] == "nvidia" and ["gpu", "compute", "utility"] in req["Capabilities"]
  amd = C.container_kwargs(_spec("amd"))
  assert amd["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
  assert amd["group_add"] == ["video", "993"] and amd["security_opt"] == ["seccomp=unconfined"]
  cpu = C.container_kwargs(_spec("cpu"))
  for kw in (nv, amd, cpu):
    assert "privileged" not in kw and "cap_add" not in kw
    assert kw["shm_size"] == "11g" and kw["init"] is True and kw["user"] == "1000:1000" and kw["detach"] is True
    assert "auto_remove" not in kw and "remove" not in kw   # logs are saved before the launcher removes it
    want = {"stack": 67108864} if kw is cpu else {"memlock": -1, "stack": 67108864}
    assert {u["Name"]: u["Soft"] for u in kw["ulimits"]} == want
    ro = {m["Target"]: m["ReadOnly"] for m in kw["mounts"]}
    assert ro == {"/data": True, "/work": False}


class FakeAPI:
  def __init__(self, events): self.events = events
  def build(self, **kw):
    assert kw["decode"] is True and kw["network_mode"] == "host"
    yield from self.events


class FakeBuildClient:
  def __init__(self, events): self.api = FakeAPI(events)


def test_build_error_event_names_the_failing_step(tmp_path):
  events = [{"stream": "Step 1/3 : FROM base\n"}, {"stream": " ---> abc\n"}, {"stream": "Step 2/3 : RUN pip install x\n"},
            {"stream": "ERROR: No matching distribution found for x\n"},
            {"error": "The command '/bin/sh -c pip install x' returned a non-zero code: 1",
             "errorDetail": {"code": 1, "message": "The command '/bin/sh -c pip install x' returned a non-zero code: 1"}}]
  with pytest.raises(UserError) as e:
    C.build(FakeBuildClient(events), tmp_path, "Dockerfile", "t", {}, echo=lambda l: None)
  msg = str(e.value)
  assert "Step 2/3 : RUN pip install x" in msg and "non-zero code: 1" in msg and "No matching distribution" in msg


class FakeBuiltImages:
  """The daemon's images after a build: the base (tagged) and what the build's steps left (untagged)."""
  def __init__(self, tags): self.tags, self.removed = tags, []
  def get(self, ref): return type("Image", (), {"tags": self.tags[ref]})()
  def remove(self, ref): self.removed.append(ref)


def test_a_tls_failure_in_the_build_points_at_extra_ca_without_colour_codes(tmp_path):
  red = "\x1b[31m"
  events = [{"stream": "Step 1/4 : FROM base\n"}, {"stream": " ---> 0123456789ab\n"}, {"stream": "Step 2/4 : ENV A=1\n"},
            {"stream": " ---> Running in 1111aaaa2222\n"}, {"stream": " ---> 89abcdef0123\n"},
            {"stream": "Step 3/4 : RUN pip install x\n"},
            {"stream": f"{red}WARNING: Retrying after connection broken by 'SSLError(SSLCertVerificationError(1, "
                       f"'[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in "
                       f"certificate chain'))'\x1b[0m\n"}]
  events += [{"stream": f"{red}noise {i}\x1b[0m\n"} for i in range(50)]   # the TLS line scrolled out of the tail
  events += [{"stream": f"{red}ERROR: No matching distribution found for x\x1b[0m\n"},
             {"error": "The command '/bin/sh -c pip install x' returned a non-zero code: 1"}]
  client, echoed = FakeBuildClient(events), []
  client.images = FakeBuiltImages({"89abcdef0123": [], "0123456789ab": ["base:latest"]})
  with pytest.raises(UserError) as e:
    C.build(client, tmp_path, "Dockerfile.cpu", "t", {}, echo=echoed.append, command="tinyperf build --vendor cpu")
  msg = str(e.value)
  assert "`tinyperf build --vendor cpu --extra-ca proxy-ca.pem`" in msg and "Step 3/4 : RUN pip install x" in msg
  assert "\x1b" not in msg and not any("\x1b" in line for line in echoed)
  # the finished steps' untagged image (a `<none>` of the base's size) is removed; the base is not
  assert client.images.removed == ["89abcdef0123"]
  with pytest.raises(UserError) as e:   # a CA was given, and it is not the one the proxy signs with
    C.build(FakeBuildClient(events), tmp_path, "Dockerfile.cpu", "t", {}, echo=echoed.append,
            command="tinyperf build --vendor cpu --extra-ca mine.pem")
  assert "`tinyperf build --vendor cpu --extra-ca mine.pem`" in str(e.value) and "proxy-ca.pem" not in str(e.value)
  client = FakeBuildClient(events[:6] + [{"error": "no space left on device"}])
  client.images = FakeBuiltImages({"89abcdef0123": [], "0123456789ab": ["base:latest"]})
  with pytest.raises(UserError) as e: C.build(client, tmp_path, "Dockerfile.cpu", "t", {}, echo=echoed.append)
  assert "--extra-ca" not in str(e.value)


def test_a_failed_pull_of_the_base_keeps_the_daemons_whole_reason(monkeypatch):
  import docker
  from tinyperf.tooling.prep import build
  why = ('Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such '
         'host')
  class Images:
    def get(self, ref): raise docker.errors.ImageNotFound("no such image")
    def pull(self, ref):
      raise docker.errors.APIError("500 Server Error for http+docker://localhost/v1.41/images/create?tag=bookworm-slim&"
                                   "fromImage=debian: Internal Server Error", explanation=why)
  with pytest.raises(UserError) as e: build.base_digest(type("Client", (), {"images": Images()})(), "debian:bookworm-slim")
  assert "debian:bookworm-slim" in str(e.value) and f"({why})" in str(e.value)   # the image and the whole reason


def test_build_success_takes_the_image_id_and_no_id_is_an_error(tmp_path):
  ok = [{"stream": "Step 1/1 : FROM base\n"}, {"aux": {"ID": "sha256:" + "cd" * 32}}, {"stream": "Successfully built cdcd\n"}]
  res = C.build(FakeBuildClient(ok), tmp_path, "Dockerfile", "t", {}, echo=lambda l: None)
  assert res.steps == 1 and res.image_id.startswith("sha256:cdcd") or res.image_id == "cdcd"
  with pytest.raises(UserError, match=r"t from Dockerfile: .*Step 1/1 : FROM base"):
    C.build(FakeBuildClient([{"stream": "Step 1/1 : FROM base\n"}]), tmp_path, "Dockerfile", "t", {}, echo=lambda l: None)


# ----------------------------------------------------------------------------------------------------- preflight

def _sysroot(tmp_path, nv_gpus=0, driver=None, kfd_gpus=0, cwsr=None):
  root = tmp_path / "root"
  (root / "dev").mkdir(parents=True)
  if nv_gpus:
    for n in ["nvidiactl", "nvidia-uvm", *[f"nvidia{i}" for i in range(nv_gpus)]]: (root / "dev" / n).write_text("")
  if driver:
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver}  Thu\n")
  if kfd_gpus:
    (root / "dev/kfd").write_text(""); (root / "dev/dri").mkdir(); (root / "dev/dri/renderD128").write_text("")
    for i in range(kfd_gpus + 1):   # node 0 is the CPU
      d = root / f"sys/class/kfd/kfd/topology/nodes/{i}"; d.mkdir(parents=True)
      (d / "properties").write_text(f"cpu_cores_count 0\nsimd_count {0 if i == 0 else 192}\n")
  if cwsr is not None:
    d = root / "sys/module/amdgpu/parameters"; d.mkdir(parents=True); (d / "cwsr_enable").write_text(f"{cwsr}\n")
  return root


def _run_pf(cfg, root, tmp_path, monkeypatch, data=None):
  monkeypatch.setattr(PF.Preflight, "dataset", lambda self: self.record("data", True, "skipped in this test"))
  monkeypatch.setattr(PF.Preflight, "shm", lambda self: None)
  work = tmp_path / "work"; work.mkdir(exist_ok=True)
  pf = PF.Preflight(cfg, data, work, sysroot=str(root))
  return pf.run(), {n: (ok, d) for n, ok, d in pf.results}


def test_preflight_nv_gpu_count_and_driver(tmp_path, monkeypatch, capsys):
  cfg = load_config("resnet", "tinybox_green", environ={})
  monkeypatch.setenv("TINYPERF_MIN_DRIVER", "550.54.15")
  monkeypatch.setenv("TINYPERF_MIN_FREE_GB", "0")
  rc, res = _run_pf(cfg, _sysroot(tmp_path, nv_gpus=6, driver="550.54.15"), tmp_path, monkeypatch)
  assert rc == 0, res
  rc, res = _run_pf(cfg, _sysroot(tmp_path / "b", nv_gpus=4, driver="535.104.05"), tmp_path, monkeypatch)
  assert rc == 2
  assert not res["gpus"][0] and "4 NV GPU(s) visible, config GPUS=6" in res["gpus"][1]
  assert not res["driver"][0] and "535.104.05, image needs >= 550.54.15" in res["driver"][1]
  rc, res = _run_pf(cfg, _sysroot(tmp_path / "c"), tmp_path, monkeypatch)
  assert rc == 2 and not res["gpus"][0] and "/dev/nvidiactl" in res["gpus"][1]   # the device nodes it lacks


def test_preflight_amd_count_and_cwsr(tmp_path, monkeypatch):
  cfg = load_config("resnet", "tinybox_red", environ={})
  monkeypatch.setenv("TINYPERF_MIN_FREE_GB", "0")
  monkeypatch.setattr(os, "access", lambda p, m: True)
  rc, res = _run_pf(cfg, _sysroot(tmp_path, kfd_gpus=6, cwsr=0), tmp_path, monkeypatch)
  assert rc == 0, res
  rc, res = _run_pf(cfg, _sysroot(tmp_path / "b", kfd_gpus=6, cwsr=1), tmp_path, monkeypatch)
  assert rc == 2 and not res["cwsr"][0] and "cwsr_enable=1" in res["cwsr"][1] and "modprobe.d" in res["cwsr"][1]


def test_preflight_data_disk_shm_on_this_machine(tmp_path, monkeypatch):
  cfg = load_config("resnet", "cpu_smoke", environ={})
  work = tmp_path / "w"; work.mkdir()
  pf = PF.Preflight(cfg, tmp_path / "missing", work)
  assert pf.run() == 2
  res = {n: (ok, d) for n, ok, d in pf.results}
  assert not res["data"][0] and str(tmp_path / "missing") in res["data"][1] and "tinyperf prep" in res["data"][1]
  assert res["gpus"][0] and res["disk"][0]
  monkeypatch.setattr(PF.shutil, "disk_usage", lambda p: type("U", (), {"free": 2**20})())
  pf = PF.Preflight(cfg, tmp_path / "missing", work); pf.run()
  res = {n: (ok, d) for n, ok, d in pf.results}
  assert not res["shm"][0] and "--shm-size=" in res["shm"][1]
  assert not res["disk"][0]
  # an empty /dev/shm against rings of 1.5 MiB: it said "0.00 GiB free, the loader rings need 0.00 GiB"
  monkeypatch.setattr(PF.shutil, "disk_usage", lambda p: type("U", (), {"free": 0})())
  pf = PF.Preflight(cfg, tmp_path / "missing", work); pf.run()
  (free, need), = [re.findall(r"(\d+(?:\.\d+)? \w+) free, the loader rings need (\d+(?:\.\d+)? \w+)", d)[0]
                   for n, ok, d in pf.results if n == "shm"]
  assert free == "0.00 MiB" and need == "1.50 MiB"


# -------------------------------------------------------------------------------------------- bad input, no engine

@pytest.fixture
def smoke_data(tmp_path):
  d = tmp_path / "data"; d.mkdir()
  (d / "manifest.json").write_text("{}")   # the host-side check looks for it; the container verifies it
  return d


def _dead_socket(tmp_path) -> str:
  """A socket file nothing listens on: what a stopped dockerd leaves behind."""
  path = tmp_path / "docker.sock"
  s = socket.socket(socket.AF_UNIX); s.bind(str(path)); s.close()
  return f"unix://{path}"


def test_run_with_stopped_daemon_is_a_clear_error(tmp_path, smoke_data):
  host = _dead_socket(tmp_path)
  r = tinyperf("run", "resnet", "--platform", "cpu_smoke", "--nexp", "1", "--data", str(smoke_data), "--results",
               str(tmp_path / "out"), env={"DOCKER_HOST": host})
  assert r.returncode == 2, r.stderr
  assert host in r.stderr and "DOCKER_HOST" in r.stderr and "--runtime host" in r.stderr
  assert "Traceback" not in r.stderr
  assert not list((tmp_path / "out").rglob("*")), "nothing may be created before the engine answers"


def test_build_with_stopped_daemon_offers_only_its_own_fixes(tmp_path):
  host = _dead_socket(tmp_path)
  r = tinyperf("build", "--vendor", "cpu", "--record", str(tmp_path / "rec"), env={"DOCKER_HOST": host})
  assert r.returncode == 2 and host in r.stderr and "DOCKER_HOST" in r.stderr, r.stderr
  assert "--runtime" not in r.stderr and "Traceback" not in r.stderr   # a flag of `run`, not of `build`


@pytest.mark.parametrize("case", ["platform", "data", "unverified", "results"])
def test_run_bad_input_exits_2_before_anything(tmp_path, smoke_data, case):
  args = {"platform": "cpu_smoke", "data": str(smoke_data), "results": str(tmp_path / "out")}
  want = ""
  if case == "platform": args["platform"], want = "tinybox_blue", "Valid platforms: 1xH200, 2xH200, cpu_smoke"
  if case == "data": args["data"], want = str(tmp_path / "nope"), str(tmp_path / "nope")
  if case == "unverified":
    d = tmp_path / "raw"; d.mkdir(); args["data"], want = str(d), f"tinyperf prep imagenet --out {d}"
  if case == "results":
    f = tmp_path / "file"; f.write_text("x"); args["results"], want = str(f / "sub"), str(f)
  r = tinyperf("run", "resnet", "--platform", args["platform"], "--data", args["data"], "--results", args["results"],
               env={"DOCKER_HOST": _dead_socket(tmp_path)})
  assert r.returncode == 2 and want in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_no_gpu_runtime_is_a_clear_error():
  class Info:
    def info(self): return {"Runtimes": {"runc": {}}, "CDISpecDirs": []}
  with pytest.raises(UserError, match=r"runc.*nvidia-ctk runtime configure"):
    C.check_gpu_runtime(Info(), "nv")
  if not Path("/dev/kfd").exists():
    with pytest.raises(UserError, match="/dev/kfd"):
      C.check_gpu_runtime(Info(), "amd")
  C.check_gpu_runtime(Info(), "cpu")


# --------------------------------------------------------------------------------------- what an image is built from

def test_builds_at_once_share_the_extra_ca_copy(tmp_path, monkeypatch):
  # nv and amd built side by side in one checkout with --extra-ca: the copy in docker/certs stays while any build packs
  # its context, and the build that ends last removes it (the first to end removed it under the other: CI, 2026-12-02)
  from tinyperf.tooling.prep import build
  monkeypatch.setattr(build, "ROOT", tmp_path)
  (tmp_path / "docker" / "certs").mkdir(parents=True)
  ca = tmp_path / "proxy-ca.pem"
  ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
  copy = tmp_path / "docker" / "certs" / "tinyperf-build-extra.crt"
  with build.extra_ca_in_context(str(ca)) as first:
    with build.extra_ca_in_context(str(ca)) as second:
      assert first and second and copy.read_bytes() == ca.read_bytes() and copy.stat().st_mode & 0o777 == 0o644
    assert copy.read_bytes() == ca.read_bytes()     # the second build ended; the first still uses the copy
  assert not copy.exists()
  with build.extra_ca_in_context(None) as none: assert not none and not copy.exists()


def test_build_context_is_gits_view_plus_the_build_ca(tmp_path, monkeypatch):
  # the whole checkout went to the daemon: untracked and git-ignored files (a token, a key) landed in the image
  import io
  import tarfile
  from tinyperf.tooling.prep import build
  def git(*a): subprocess.run(["git", "-C", str(tmp_path), *a], capture_output=True, check=True)
  for rel, text in {"Dockerfile.cpu": "FROM x\n", "tooling/cli.py": "x = 1\n", "tests/test_x.py": "", ".gitignore": "*.key\n",
                    ".dockerignore": "tests\n", "docker/certs/.gitignore": "*.crt\n"}.items():
    (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True); (tmp_path / rel).write_text(text)
  monkeypatch.setattr(build, "ROOT", tmp_path)
  # no checkout (an unpacked package's setup.sh): the folder less .dockerignore
  assert set(build.context_files("Dockerfile.cpu")) == {"Dockerfile.cpu", "tooling/cli.py", ".gitignore", ".dockerignore",
                                                        "docker/certs/.gitignore"}
  git("init", "-q"); git("add", "-A")
  for rel in ("tooling/api_token.txt", "tooling/server.key", "docker/certs/proxy.crt"): (tmp_path / rel).write_text("secret")
  files = build.context_files("Dockerfile.cpu")
  assert set(files) == {"Dockerfile.cpu", "tooling/cli.py", ".gitignore", ".dockerignore", "docker/certs/.gitignore",
                        "docker/certs/proxy.crt"}
  sent = {}
  class API:
    def build(self, **kw):
      sent.update(kw); yield {"aux": {"ID": "sha256:" + "ab" * 32}}
  C.build(type("Client", (), {"api": API()})(), tmp_path, "Dockerfile.cpu", "t", {}, echo=lambda l: None, files=files,
          extra_files={".tinyperf-code.json": "{}\n"})
  assert sent["custom_context"] is True and "path" not in sent
  with tarfile.open(fileobj=io.BytesIO(sent["fileobj"].read())) as tar:
    assert sorted(m.name for m in tar if m.isfile()) == sorted([*files, ".tinyperf-code.json"])


def test_the_code_tree_names_the_code_an_image_gets(tmp_path, monkeypatch):
  # compose runs recorded their image by tag only: an image rebuilt from edited code under that tag was the same name
  from tinyperf.tooling.prep import build
  monkeypatch.setattr(build, "ROOT", tmp_path)
  for rel in ("tooling/cli.py", "run.sh", "docker/certs/proxy.crt"): (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
  (tmp_path / "tooling/cli.py").write_text("x = 1\n"); (tmp_path / "run.sh").write_text("echo\n")
  files = ["run.sh", "tooling/cli.py"]
  tree = build.code_tree(files)
  assert tree.startswith("sha256:") and len(tree) == 71
  (tmp_path / "docker/certs/proxy.crt").write_text("a CA")   # the build's extra CA is no code (and leaves no trace)
  assert build.code_tree([*files, "docker/certs/proxy.crt"]) == tree
  (tmp_path / "run.sh").chmod(0o755)
  assert build.code_tree(files) != tree
  (tmp_path / "run.sh").chmod(0o644); (tmp_path / "tooling/cli.py").write_text("x = 2\n")
  assert build.code_tree(files) not in (tree, build.code_tree(["tooling/cli.py"]))


def test_a_build_record_per_build_identity(tmp_path):
  # out/images/<vendor>.json was overwritten by every build: the record of the image that made the runs was gone
  from tinyperf.tooling.prep import build
  one, other = {"build_id": "cpu-" + "1" * 16, "image_id": "sha256:a"}, {"build_id": "cpu-" + "2" * 16, "image_id": "sha256:b"}
  p1, p2 = build.save_record(tmp_path, dict(one)), build.save_record(tmp_path, dict(other))
  assert p1 != p2 and json.loads(p1.read_text())["image_ids"] == ["sha256:a"]
  build.save_record(tmp_path, {**one, "image_id": "sha256:c"})   # the same recipe rebuilt (--no-cache): both images named
  build.save_record(tmp_path, {**one, "image_id": "sha256:c"})
  assert json.loads(p1.read_text())["image_ids"] == ["sha256:a", "sha256:c"]
  assert json.loads(p2.read_text())["image_ids"] == ["sha256:b"]


def test_runs_in_an_image_record_the_code_it_holds(tmp_path, monkeypatch):
  # the file, not a variable that a compose `environment:` could set
  from tinyperf.benchmarks.common import runtime
  tree = "sha256:" + "e" * 64
  monkeypatch.setattr(runtime, "ROOT", tmp_path)
  (tmp_path / runtime.IMAGE_CODE_FILE).write_text(json.dumps({"code_tree": tree, "git_sha": "abc"}))
  monkeypatch.delenv("TINYPERF_IMAGE_VENDOR", raising=False)
  assert runtime.image_code() == {} and "code_tree" not in runtime.provenance()   # a checkout: a stray file names no image
  monkeypatch.setenv("TINYPERF_IMAGE_VENDOR", "cpu"); monkeypatch.setenv("TINYPERF_BUILD_ID", "cpu-" + "1" * 16)
  prov = runtime.provenance()
  assert prov["code_tree"] == tree and prov["build"] == "cpu-" + "1" * 16
  (tmp_path / runtime.IMAGE_CODE_FILE).write_text("[" * 10_000)   # damaged: no hash, no crash
  assert runtime.image_code() == {}


@pytest.mark.parametrize("vendor", I.VENDORS)
def test_the_image_stage_never_copies_the_build_ca(vendor):
  # docker/certs (the build's extra CA) was COPY'd into a layer of the image; only the build stage may read it now
  df = I.render_dockerfile(vendor)
  froms = [i for i, l in enumerate(df.splitlines()) if l.startswith("FROM ")]
  assert len(froms) == 2 and " AS build" in df.splitlines()[froms[0]]
  image = [l for l in df.splitlines()[froms[1]:] if l.startswith(("COPY", "ADD"))]
  assert image == ["COPY docker/install.sh /opt/tinyperf/build/", "COPY --from=build /opt/tinyperf /opt/tinyperf"]
  install = (REPO / "docker/install.sh").read_text()
  assert "rm -rf \"$BUILD\" /opt/tinyperf/src/docker/certs/*.crt" in install   # the source tree it copies has none
