"""The images, compose.yaml and `tinyperf run`'s container backend against a real Docker engine (no mocks).

Needs a reachable daemon and a local base image: `source scripts/ci_docker.sh` provides both on a Debian machine
(DOCKER_HOST, TINYPERF_TEST_BASE_IMAGE, TINYPERF_TEST_EXTRA_CA). Without them every test here skips with the reason.
The images are built as tinyperf-test:<vendor> so a developer's own tinyperf:<vendor> images are never replaced."""
from __future__ import annotations
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("engines")]   # one worker: the Slurm docker-runtime test uses the CPU image the container tests build
BASE = os.environ.get("TINYPERF_TEST_BASE_IMAGE", "")
TAG = "tinyperf-test:{}"
TIMINGS: dict[str, float] = {}


def _client():
  import docker
  return docker.DockerClient(base_url=os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock", timeout=600)


def _unavailable(reason: str):
  # CI sets TINYPERF_REQUIRE_DOCKER=1: there a missing engine is a failure, never a silent skip
  if os.environ.get("TINYPERF_REQUIRE_DOCKER") == "1": pytest.fail(reason)
  pytest.skip(reason)


@pytest.fixture(scope="module")
def engine():
  try:
    c = _client(); c.ping()
  except Exception as e:
    _unavailable(f"no Docker daemon reachable at {os.environ.get('DOCKER_HOST') or 'unix:///var/run/docker.sock'} "
                 f"({type(e).__name__}); `source scripts/ci_docker.sh` (root) starts one")
  if not BASE:
    _unavailable("TINYPERF_TEST_BASE_IMAGE is not set (no local base image); `source scripts/ci_docker.sh` builds one")
  try: c.images.get(BASE)
  except Exception: _unavailable(f"base image {BASE} is not on the daemon; `source scripts/ci_docker.sh` imports it")
  yield c
  if TIMINGS:
    print("\ncontainer test timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in TIMINGS.items()), file=sys.stderr)
  # the CI engine stores every layer in full (vfs, ~1 GB each): leave no test image behind unless asked to, except the
  # CPU image when the Slurm layer runs next (tests/integration/test_slurm.py's docker runtime test uses it)
  keep_cpu = os.environ.get("TINYPERF_REQUIRE_SLURM") == "1"
  if os.environ.get("TINYPERF_TEST_KEEP_IMAGES") != "1":
    for v in ("nv", "amd", "broken") if keep_cpu else ("cpu", "nv", "amd", "broken"):
      try: c.images.remove(TAG.format(v), force=True)
      except Exception: pass
    try: c.images.prune(filters={"dangling": True})
    except Exception: pass


def tinyperf(*args, env=None, timeout=1800, check=False):
  t0 = time.time()
  r = subprocess.run([sys.executable, "-m", "tinyperf.tooling.cli", *args], cwd=REPO, capture_output=True, text=True,
                     env={**os.environ, **(env or {})}, timeout=timeout)
  if check: assert r.returncode == 0, f"tinyperf {' '.join(args)} -> {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
  r.seconds = time.time() - t0
  return r


def _build_args(vendor: str, record: Path, extra_ca: Path | None = None) -> tuple[list[str], dict]:
  args = ["build", "--vendor", vendor, "--base-image", BASE, "--tag", TAG.format(vendor), "--record", str(record)]
  if vendor != "cpu": args.append("--allow-unpinned")
  env = {}
  if os.environ.get("TINYPERF_TEST_EXTRA_CA"): env["TINYPERF_EXTRA_CA"] = os.environ["TINYPERF_TEST_EXTRA_CA"]
  extra_ca = extra_ca or BUILD_CA.get("path")   # the cpu image's: the other vendors reuse its layers
  if extra_ca: env["TINYPERF_EXTRA_CA"] = str(extra_ca)
  return args, env


# a self-signed certificate made for these tests (its key was never kept): every build here adds it to its extra CA, the
# same bytes each time so that the builds share their layers, and no layer of the image may hold it
MARKER_CA = """-----BEGIN CERTIFICATE-----
MIIDRTCCAi2gAwIBAgIUdxLx3p/Te5a82ihRxpLOwhXTSx0wDQYJKoZIhvcNAQEL
BQAwMTEvMC0GA1UEAwwmdGlueXBlcmYgdGVzdCBidWlsZCBDQSAobm8ga2V5IGV4
aXN0cykwIBcNMjYxMjA0MTUyNzA1WhgPMjEyNjExMTAxNTI3MDVaMDExLzAtBgNV
BAMMJnRpbnlwZXJmIHRlc3QgYnVpbGQgQ0EgKG5vIGtleSBleGlzdHMpMIIBIjAN
BgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA23yjtwQuUpbBt3uTmc8cxwtbJVai
grF/YDqMq1AsAy1+GfE+oyarGSYpX0HFS5Dr7Vap0rif1UXjpYA+LdtnmPRLf26V
fRqNMYHMfkwt1nYxIlc9VqwK8M5jc4Dr19C7zhmKwVaXsC0W4b/0H8W/DJtR5CYj
L/eXTqkqufeuUm/b6R+loM+7hwGPmGE8e6sWv8C3+2b/ruHnYGppQE5k6/tEfkWR
VE6cm/PzjgkMf4MQFRGsK2+NboKOjWQTuCF9kxC2a+VAEw3HXCkCEVBeOp6vt1L9
BN3dTyDpgK17mePv3L/Kki4B0em8k+UDievfwjtYIe3ARQWoifhhn7vynQIDAQAB
o1MwUTAdBgNVHQ4EFgQUAjt+QrxfhnXUAsZSHvJ2zWeTXe8wHwYDVR0jBBgwFoAU
Ajt+QrxfhnXUAsZSHvJ2zWeTXe8wDwYDVR0TAQH/BAUwAwEB/zANBgkqhkiG9w0B
AQsFAAOCAQEAQLT5YHU8fvo+rE9mO2KFyQ4J/PvwD5s2JuwRiIJVKu3z4cMa25g4
Itq0oxEfp/XvIatthFM9386XiagayOguk6mzP6rjIeNgNQyvwKTLVKlRU8FSHquK
Z52IDoJz31mKdEbt1K+FwtStHEUOO8p0kR3bHJIHUhJI5XqjQj+p5TaBvFJFXkdB
oA1N3bsin4LMZqdT6Ks6r9n4fNzzRcpmmTeiM9IgSLbKvkpbLDR8bxsyrBRFzjl3
7yv4KswKIeKE0cWnyKtRh28zj50jFQGRCyb2ZkYdk8eVv60/kB317D18vcu0anPy
zQJOPtMuu5CU8D0OqKjYseD5u0SxFv5cxQ==
-----END CERTIFICATE-----
"""


def marked_ca(folder: Path) -> Path:
  """An extra CA for a build: the host's bundle (TINYPERF_TEST_EXTRA_CA, what the build's pip needs here) plus
  MARKER_CA."""
  host = os.environ.get("TINYPERF_TEST_EXTRA_CA")
  ca = folder / "extra-ca.crt"
  ca.write_bytes((Path(host).read_bytes() + b"\n" if host else b"") + MARKER_CA.encode())
  return ca


def build(vendor: str, record: Path, extra_ca: Path | None = None) -> subprocess.CompletedProcess:
  args, env = _build_args(vendor, record, extra_ca)
  r = tinyperf(*args, env=env, timeout=3000, check=True)
  TIMINGS[f"build {vendor}"] = r.seconds
  return r


def build_concurrently(vendors: list[str], record: Path, timeout: float = 3000) -> dict[str, subprocess.CompletedProcess]:
  """`tinyperf build` for each vendor at once (on 2 cores the engine's filesystem copies for two builds overlap). Each
  starts once the one before it has handed its context to the daemon (its first `Step` line): a build copies the extra
  CA into docker/certs/ and removes it when it ends, and the next build's context must still hold it."""
  import threading
  t0, procs, outs, pumps = time.time(), {}, {}, []
  for vendor in vendors:
    args, env = _build_args(vendor, record)
    p = procs[vendor] = subprocess.Popen([sys.executable, "-m", "tinyperf.tooling.cli", *args], cwd=REPO, text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env})
    out, err, sent = outs[vendor] = ([], [], threading.Event())
    def pump(stream, lines, sent=None):
      for line in stream:
        lines.append(line)
        if sent and line.startswith("Step "): sent.set()
      if sent: sent.set()
    pumps += [threading.Thread(target=pump, args=(p.stdout, out, sent), daemon=True),
              threading.Thread(target=pump, args=(p.stderr, err), daemon=True)]
    pumps[-2].start(); pumps[-1].start()
    if not sent.wait(timeout):
      for q in procs.values(): q.kill()
      pytest.fail(f"tinyperf build --vendor {vendor} sent no build step in {timeout} s")
  res = {}
  for vendor, p in procs.items():
    try: p.wait(timeout=max(1, timeout - (time.time() - t0)))
    except subprocess.TimeoutExpired:
      for q in procs.values(): q.kill()
      raise
    TIMINGS[f"build {vendor}"] = time.time() - t0
  for th in pumps: th.join()
  for vendor, p in procs.items():
    r = res[vendor] = subprocess.CompletedProcess(p.args, p.returncode, "".join(outs[vendor][0]), "".join(outs[vendor][1]))
    assert r.returncode == 0, f"tinyperf build --vendor {vendor} -> {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
  return res


BUILD_CA: dict = {}   # the cpu image's extra CA and build record


@pytest.fixture(scope="module")
def cpu_image(engine, tmp_path_factory):
  rec = tmp_path_factory.mktemp("rec")
  BUILD_CA.update(path=marked_ca(rec))
  build("cpu", rec)
  (BUILD_CA["record"],) = rec.glob("cpu-*.json")   # <build id>.json
  return TAG.format("cpu")


@pytest.fixture(scope="module")
def smoke_data(tmp_path_factory):
  d = tmp_path_factory.mktemp("smoke") / "data"
  tinyperf("prep", "synthetic-imagenet", "--out", str(d), "--classes", "4", "--train-per-class", "160",
           "--val-per-class", "40", "--size", "48", "--seed", "0", check=True, timeout=600)
  return d


def test_failing_build_step_is_reported(engine, tmp_path):
  from tinyperf.tooling.common import container as C
  from tinyperf.tooling.common.errors import UserError
  import docker
  # step 2 commits an image (its own, never cached: a fresh value); step 3 fails
  (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\nENV TINYPERF_TEST_STEP={uuid.uuid4().hex}\n"
                                       f"RUN echo preparing && exit 3\n")
  lines = []
  with pytest.raises(UserError) as e:
    C.build(engine, tmp_path, "Dockerfile", "tinyperf-test:broken", {}, echo=lines.append)
  assert "Step 3/3 : RUN echo preparing && exit 3" in str(e.value) and "non-zero code: 3" in str(e.value)
  assert "preparing" in str(e.value)
  # the failed build left no untagged image of its finished steps (a `<none>` the size of the base), and the base stays
  (step2,) = [m.group(1) for line in lines[lines.index(next(l for l in lines if l.startswith("Step 2/3"))):]
              if (m := C.LAYER_RE.match(line))][:1]
  with pytest.raises(docker.errors.ImageNotFound): engine.images.get(step2)
  engine.images.get(BASE)


def test_build_nv_and_amd_dockerfiles_on_local_base(engine, tmp_path, cpu_image):
  """Everything above the base layer of both GPU Dockerfiles: packages, locked deps, project, provenance, selfcheck
  (whose GPU-library part is skipped loudly on a Debian base). Built at once, on the CPU image's cached layers (the
  steps up to the vendor's ENV are the same but for nv's Triton steps), so amd adds its own ENV, LABEL and selfcheck
  steps and nv also installs Triton into the shared environment."""
  cpu_labels = engine.images.get(cpu_image).labels
  for vendor, r in build_concurrently(["nv", "amd"], tmp_path).items():
    assert "selfcheck SKIPPED" in r.stdout and "CANNOT run" in r.stdout
    assert "selfcheck ok    clang + tinygrad CPU" in r.stdout and "selfcheck: 3 passed, 0 failed" in r.stdout
    (path,) = tmp_path.glob(f"{vendor}-*.json")
    rec = json.loads(path.read_text())
    img = engine.images.get(TAG.format(vendor))
    # one tree, three images: the same code hash (what package in the cpu image compares), a build id each
    assert rec["code_tree"] == img.labels["io.tinyperf.code_tree"] == cpu_labels["io.tinyperf.code_tree"]
    assert path.stem == rec["build_id"] == img.labels["io.tinyperf.build_id"] != cpu_labels["io.tinyperf.build_id"]
    assert rec["image_id"] in img.id and rec["base_image"] == BASE and rec["base_pinned"] is False
    base_id = engine.images.get(BASE).id
    assert rec["base_digest"] == base_id   # a locally imported base has no registry digest: its image ID is recorded
    labels, env = img.labels, dict(e.split("=", 1) for e in img.attrs["Config"]["Env"])
    assert labels["io.tinyperf.vendor"] == vendor and labels["org.opencontainers.image.base.digest"] == base_id
    assert labels["io.tinyperf.base.pinned"] == "false" and labels["io.tinyperf.gpu_libs_checked"] == "false"
    assert env["TINYPERF_BASE_DIGEST"] == base_id and env["TINYPERF_GIT_SHA"] == rec["git_sha"] != "unknown"
    assert env["TINYGRAD_VERSION"] == "0.14.0" and img.attrs["Config"]["User"] == "tinyperf"
  nv_env = dict(e.split("=", 1) for e in engine.images.get(TAG.format("nv")).attrs["Config"]["Env"])
  assert nv_env["TINYPERF_MIN_DRIVER"] == "550.54.15" and nv_env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
  out = engine.containers.run(TAG.format("nv"), ["sh", "-c", "id -u; python --version; which clang"], remove=True,
                              network_mode="none")
  uid, py, clang = out.decode().split("\n")[:3]
  assert uid != "0" and py.startswith("Python 3.11") and clang.endswith("clang")


def test_the_build_ca_never_leaves_the_build_stage(engine, cpu_image):
  # docker/certs was COPY'd into a layer of the image, where `docker save` showed the build's extra CA to anyone
  assert json.loads(BUILD_CA["record"].read_text())["extra_ca"] is True
  line, tail, size = MARKER_CA.splitlines()[5].encode(), b"", 0
  for chunk in engine.images.get(cpu_image).save(chunk_size=1 << 20):   # every layer, uncompressed
    buf = tail + chunk
    size += len(chunk)
    assert line not in buf, "the build's extra CA is in a layer of the image"
    tail = buf[-len(line):]
  assert size > 50 * 2**20      # the whole image was read, not an error page


def test_the_image_carries_its_code_identity_and_package_compares_it(engine, cpu_image, tmp_path, monkeypatch):
  """A compose service sees no image ID: it reads the code hash from a file `tinyperf build` put in the image's tree
  (the label says the same), and `tinyperf package` in the image refuses runs whose image held other code (an edited
  rebuild under the same tag, from the same commit)."""
  import run_builder
  from tinyperf.tooling.common import ledger as L
  img = engine.images.get(cpu_image)
  tree, build_id, sha = img.labels["io.tinyperf.code_tree"], img.labels["io.tinyperf.build_id"], _image_env(engine, cpu_image)["TINYPERF_GIT_SHA"]
  rec = json.loads(BUILD_CA["record"].read_text())
  assert (rec["build_id"], rec["code_tree"], rec["image_ids"][-1]) == (build_id, tree, img.id) and tree.startswith("sha256:")
  # what a run in the image prints in its provenance line
  prov = engine.containers.run(cpu_image, ["python", "-c", "from tinyperf.benchmarks.common.runtime import provenance as p; "
                               "import json; print(json.dumps(p()))"], remove=True, network_mode="none")
  prov = json.loads(prov.decode().strip().splitlines()[-1])
  assert (prov["code_tree"], prov["build"], prov["git_sha"]) == (tree, build_id, sha)
  monkeypatch.setattr(run_builder, "GIT_SHA", sha)
  def package_in_image(runs_tree: str) -> tuple[int, str]:
    root = tmp_path / runs_tree[7:15]
    R = run_builder.make_runs(root, "resnet")
    with L.Ledger.locked(R / "runs/tinybox_green/resnet/ledger.json") as led:   # as a compose run records them
      for a in led.attempts:
        a.backend, a.image = "container", "tinyperf:nv (image ID not visible inside the container)"
        a.provenance = {"TINYPERF_GIT_SHA": sha, L.CODE_TREE: runs_tree}
      led.save()
    c = engine.containers.run(cpu_image, ["tinyperf", "package", "--org", "tinycorp", "--results", "/r/R", "--out",
                              "/r/out", "--systems", "/r/systems"], volumes={str(root): {"bind": "/r", "mode": "rw"}},
                              user="0:0", network_mode="none", detach=True)
    try: rc, out = c.wait(timeout=600)["StatusCode"], c.logs().decode(errors="replace")
    finally: c.remove(force=True)
    return rc, out
  rc, out = package_in_image("sha256:" + "0" * 64)
  assert rc == 2 and tree[:19] in out and "--allow-dirty" in out, out[-3000:]
  rc, out = package_in_image(tree)
  assert rc == 0 and "check: ACCEPTED" in out, out[-3000:]


def test_compose_config_is_valid_for_compose_v1(engine, tmp_path):
  r = subprocess.run(["docker-compose", "-f", str(REPO / "compose.yaml"), "config", "--services"], capture_output=True,
                     text=True, cwd=tmp_path, env={**os.environ, "RENDER_GID": "993"})
  assert r.returncode == 0, r.stderr
  assert {"resnet-green", "resnet-red", "bert-mi300x", "resnet-cpu", "prep-wiki", "check"} <= set(r.stdout.split())
  r = subprocess.run(["docker-compose", "-f", str(REPO / "compose.yaml"), "config"], capture_output=True, text=True,
                     cwd=tmp_path)
  assert r.returncode == 0 and "privileged" not in r.stdout


def test_compose_run_without_its_image_or_gpu_runtime_says_what_to_do(engine, tmp_path):
  """`docker-compose run --rm resnet-h200` as typed, on this engine (no NVIDIA runtime): a missing image names the
  build command and leaves no `<none>` image behind; with an image, the refusal names `tinyperf compose` (the daemon
  alone said `could not select device driver "nvidia"`)."""
  if not BASE: _unavailable("TINYPERF_TEST_BASE_IMAGE is not set (scripts/ci_docker.sh imports a base)")
  if "nvidia" in (engine.info().get("Runtimes") or {}): pytest.skip("this engine has the NVIDIA runtime")
  for d in ("out/cache", "imagenet"): (tmp_path / d).mkdir(parents=True)
  env = {**os.environ, "COMPOSE_PROJECT_NAME": f"tinyperfnv{os.getpid()}", "RESULTS_DIR": str(tmp_path / "out"),
         "CACHE_DIR": str(tmp_path / "out/cache"), "IMAGENET_DIR": str(tmp_path / "imagenet")}
  env.pop("TINYPERF_NV_RUNTIME", None)
  # (empty ones only: builds running beside this test leave big ones for a while)
  dangling = lambda: {i.id for i in engine.images.list(filters={"dangling": True}) if not i.attrs.get("Size")}
  before = dangling()
  compose = lambda **extra: subprocess.run(["docker-compose", "run", "--rm", "-T", "resnet-h200"], cwd=REPO,
                                           capture_output=True, text=True, timeout=300, env={**env, **extra})
  try:
    r = compose(TINYPERF_IMAGE_NV=f"tinyperf-test-missing-{os.getpid()}:nv")
    assert r.returncode != 0 and "Build it with: tinyperf build --vendor nv" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not dangling() - before   # an ARG step before the failing COPY left a 0-byte image on every run
    r = compose(TINYPERF_IMAGE_NV=BASE)
    assert r.returncode != 0 and "run tinyperf compose resnet-h200 first" in r.stdout + r.stderr, r.stdout + r.stderr
  finally:
    subprocess.run(["docker-compose", "down", "--remove-orphans"], cwd=REPO, capture_output=True, env=env)


def _image_env(engine, image: str) -> dict:
  return dict(e.split("=", 1) for e in engine.images.get(image).attrs["Config"]["Env"])


def _wait_for(pred, timeout: float, what: str):
  t0 = time.time()
  while time.time() - t0 < timeout:
    v = pred()
    if v: return v
    time.sleep(1)
  raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _run_containers(engine, index: int):
  return engine.containers.list(filters={"label": [f"io.tinyperf.index={index}", "io.tinyperf.kind=run"]})


def test_run_container_backend_kill_and_resume(engine, cpu_image, smoke_data, tmp_path):
  """The one real toy-ResNet run through the container backend: `tinyperf run --nexp 1` in containers; the run's
  container is killed during its INIT; the same command then redoes it (fresh seed) and the result passes `tinyperf
  check`. That a resume keeps finished runs is the ledger's job, the same for every backend: the compose test below and
  tests/integration/test_run_attacks.py prove it with the stand-in trainer."""
  res = tmp_path / "res"
  cmd = [sys.executable, "-m", "tinyperf.tooling.cli", "run", "resnet", "--platform", "cpu_smoke", "--nexp", "1", "--data",
         str(smoke_data), "--results", str(res), "--image", cpu_image]
  t0 = time.time()
  log = open(tmp_path / "first.log", "w")
  proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True)
  try:
    (c,) = _wait_for(lambda: _run_containers(engine, 0), 1200, "run 0's container")
    work = _wait_for(lambda: list((res / "runs/cpu_smoke/resnet").glob("run_0_*/output.log")), 60, "run 0's output")[0]
    _wait_for(lambda: b"init_start" in work.read_bytes(), 600, "run 0 to be in its INIT phase (streamed to the host)")
    TIMINGS["start of run 0 (to INIT)"] = time.time() - t0
    subprocess.run(["docker", "kill", c.id], check=True, capture_output=True)
    rc = proc.wait(timeout=300)
  finally:
    if proc.poll() is None: proc.kill()
    log.close()
  first = (tmp_path / "first.log").read_text()
  assert rc == 1, first[-3000:]
  assert "host page cache: drop_caches" in first or "host page cache: " in first
  ledger = json.loads((res / "runs/cpu_smoke/resnet/ledger.json").read_text())["attempts"]
  assert [(a["index"], a["status"]) for a in ledger] == [(0, "failed")]
  assert "container exited 137" in ledger[0]["note"] and ledger[0]["exit_codes"]["container"] == 137
  assert not (res / "results/cpu_smoke/resnet/result_0.txt").exists()
  a0 = ledger[0]
  assert a0["backend"] == "container" and a0["image"].startswith(cpu_image) and a0["cache_drop"]
  assert a0["provenance"]["TINYPERF_GIT_SHA"] not in (None, "unknown")
  # the system the runs ran on, detected in a container of the run's image before anything was timed
  sysfile = res / "systems" / "cpu_smoke.json"
  sysjson = json.loads(sysfile.read_text())
  stack = sysjson["other_software_stack"]
  assert stack["image"] == a0["image"] and f"image {a0['image']}" in sysjson["sw_notes"]
  assert stack["base_image_digest"] == _image_env(engine, cpu_image)["TINYPERF_BASE_DIGEST"]
  os_name, py = engine.containers.run(cpu_image, ["sh", "-c", ". /etc/os-release; echo \"$PRETTY_NAME\"; python -c "
                                      "'import platform; print(platform.python_version())'"], remove=True,
                                      network_mode="none").decode().strip().split("\n")
  assert (sysjson["operating_system"], stack["python"]) == (os_name, py)
  assert sysjson["submitter"] == res.name   # cpu_smoke's submitter when none is given: the results folder's name
  from tinyperf.tooling.common import mlperf_tools
  assert mlperf_tools.system_desc_check(sysfile, "4.0.0").passed
  sys_before = sysfile.read_bytes()
  assert not _run_containers(engine, 0), "the killed container is removed"
  t1 = time.time()
  r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
  TIMINGS["resume run 0 (one real run)"] = time.time() - t1
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert "1 runs, 0 already finished, running [0]" in r.stdout
  assert "already describes this machine (unchanged)" in r.stdout and sysfile.read_bytes() == sys_before
  assert not (res / "systems" / "variants").exists()
  ledger = json.loads((res / "runs/cpu_smoke/resnet/ledger.json").read_text())["attempts"]
  assert [(a["index"], a["status"]) for a in ledger] == [(0, "failed"), (0, "done")]
  assert len({a["seed"] for a in ledger}) == 2 and all(0 <= a["seed"] < 2**31 for a in ledger)
  text = (res / "results/cpu_smoke/resnet/result_0.txt").read_text()
  assert f'"value": {ledger[1]["seed"]}' in text
  # INIT logs how the launcher dropped the host's page cache instead of dropping it again
  assert ledger[1]["cache_drop"] and f'"method": "{ledger[1]["cache_drop"]}"' in text
  # provenance reaches the run's console output; the cache volume was used by INIT and RUN
  out1 = (res / ledger[1]["output"]).read_text()   # stored relative to --results (host paths on read)
  assert "provenance: " in out1 and ledger[1]["provenance"]["TINYPERF_GIT_SHA"] in out1
  # the image that ran it, by ID (a rebuild moves the tag): in the ledger and in the run's provenance line
  image_id = engine.images.get(cpu_image).id
  assert ledger[1]["provenance"]["image_id"] == image_id and f"image={cpu_image} {image_id}" in out1
  labels = engine.images.get(cpu_image).labels
  assert ledger[1]["provenance"]["code_tree"] == labels["io.tinyperf.code_tree"]
  assert f"build={labels['io.tinyperf.build_id']}, code_tree={labels['io.tinyperf.code_tree']}" in out1
  assert list((res / ledger[1]["output"]).parent.glob("cache/tinygrad.db*"))
  chk = tinyperf("check", str(res / "results/cpu_smoke/resnet/result_0.txt"))
  assert chk.returncode == 0 and "result log: ACCEPTED" in chk.stdout, chk.stdout + chk.stderr


def test_ctrl_c_stops_and_removes_the_container(engine, cpu_image, smoke_data, tmp_path):
  res = tmp_path / "res"
  proc = subprocess.Popen([sys.executable, "-m", "tinyperf.tooling.cli", "run", "resnet", "--platform", "cpu_smoke", "--nexp",
                           "1", "--data", str(smoke_data), "--results", str(res), "--image", cpu_image], cwd=REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          # as from a terminal: a test run started in the background of a script inherits SIGINT
                          # ignored, and Python then installs no KeyboardInterrupt handler in the child
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  try:
    _wait_for(lambda: _run_containers(engine, 0), 600, "the run's container")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None: proc.kill()
  assert proc.returncode == 130, out[-3000:]
  assert "interrupted" in out
  assert not engine.containers.list(all=True, filters={"label": f"io.tinyperf.set={(res / 'runs/cpu_smoke/resnet').resolve()}"})
  ledger = json.loads((res / "runs/cpu_smoke/resnet/ledger.json").read_text())["attempts"]
  assert [(a["index"], a["status"]) for a in ledger] == [(0, "interrupted")]
  assert not (res / "results/cpu_smoke/resnet/result_0.txt").exists()


def test_bad_input_with_a_live_engine(engine, cpu_image, smoke_data, tmp_path):
  """Missing image and missing GPU runtime fail before anything runs, exit 2, with the command that fixes them."""
  r = tinyperf("run", "resnet", "--platform", "cpu_smoke", "--data", str(smoke_data), "--results", str(tmp_path / "a"),
               "--image", "tinyperf-test:does-not-exist")
  assert r.returncode == 2 and "tinyperf-test:does-not-exist" in r.stderr, r.stderr
  assert "tinyperf build --vendor cpu" in r.stderr and "Traceback" not in r.stderr
  r = tinyperf("run", "resnet", "--platform", "tinybox_green", "--data", str(smoke_data), "--results",
               str(tmp_path / "b"), "--image", cpu_image, "--org", "myorg")
  assert r.returncode == 2 and cpu_image in r.stderr and "tinybox_green" in r.stderr and "--image" in r.stderr, r.stderr
  info = engine.info()
  nv_image = [t for t in [TAG.format("nv")] if engine.images.list(name=t)]
  if "nvidia" not in (info.get("Runtimes") or {}) and nv_image:
    r = tinyperf("run", "resnet", "--platform", "tinybox_green", "--data", str(smoke_data), "--results",
                 str(tmp_path / "b"), "--image", nv_image[0], "--org", "myorg")
    assert r.returncode == 2 and "nvidia-ctk runtime configure" in r.stderr and "Traceback" not in r.stderr, r.stderr
  # preflight inside the container refuses a data set that does not match the config, before anything is timed
  bad = tmp_path / "bad"; shutil.copytree(smoke_data, bad)
  next((bad / "train").rglob("*.JPEG")).unlink()
  r = tinyperf("run", "resnet", "--platform", "cpu_smoke", "--nexp", "1", "--data", str(bad), "--results",
               str(tmp_path / "c"), "--image", cpu_image)
  assert r.returncode == 2 and "preflight failed" in r.stderr and "FAILED data" in r.stderr, r.stdout + r.stderr
  assert not (tmp_path / "c/runs/cpu_smoke/resnet/ledger.json").exists() or \
    json.loads((tmp_path / "c/runs/cpu_smoke/resnet/ledger.json").read_text())["attempts"] == []


USER_NAME, USER_UID = "tinyperf-ci", 1437   # a UID other than the image's 1000: ownership must come from the user


def _ensure_user() -> str:
  if os.geteuid() != 0: _unavailable("the fresh-clone compose test creates a user (useradd): run it as root")
  if subprocess.run(["id", USER_NAME], capture_output=True).returncode != 0:
    subprocess.run(["useradd", "--uid", str(USER_UID), "--create-home", "--groups", "docker", USER_NAME], check=True)
  return USER_NAME


def test_readme_compose_sequence_fresh_clone_as_user(engine, cpu_image, tmp_path):
  """docs/containers.md's sequence, as a non-root user in the docker group, on a fresh clone, through docker-compose
  1.29: tinyperf compose, prep-synthetic, resnet-cpu (docker kill mid-run, then the same command resumes and keeps the
  finished run, then the default 5-run set is completed), check (accepted), package. The build step reuses the CPU image the other tests build (TINYPERF_IMAGE_CPU). The service's
  trainer is the stand-in (tests/stand_in_train.py, mounted from the clone): everything else is the service's own
  (preflight, system record, ledger, page cache, kernel-cache volume, ownership, check); the real run through an image
  is test_run_container_backend_kill_and_resume's."""
  user = _ensure_user()
  home = Path(subprocess.run(["runuser", "-u", user, "--", "sh", "-c", "echo $HOME"], capture_output=True, text=True,
                             check=True).stdout.strip())
  clone = home / f"clone-{os.getpid()}"
  project = f"tinyperfclone{os.getpid()}"
  env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
         "DOCKER_HOST": os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), "TINYPERF_IMAGE_CPU": cpu_image,
         "COMPOSE_PROJECT_NAME": project,
         # creating a container on the CI engine (vfs: a full copy of the image) can take minutes on 2 busy cores
         "COMPOSE_HTTP_TIMEOUT": "900"}

  def as_user(*cmd, timeout=900, check=True, cwd=clone, extra=None):
    t0 = time.time()
    r = subprocess.run(["runuser", "-u", user, "--", "env", "-i", *[f"{k}={v}" for k, v in {**env, **(extra or {})}.items()],
                        *cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    r.seconds = time.time() - t0
    if check: assert r.returncode == 0, f"{' '.join(cmd)} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r

  t_all = time.time()
  try:
    # the checkout belongs to root: git's ownership check needs an exception, in the clone and its upload-pack
    as_user("git", "-c", "safe.directory=*", "clone", "-q", "--upload-pack", "git -c safe.directory=* upload-pack",
            str(REPO), str(clone), cwd=home)
    assert not (clone / "out").exists() and not (clone / ".env").exists()
    # tinyperf on the host, running the clone's code (python -m from the clone's root): this interpreter, or when the
    # user cannot execute it (e.g. under /root) the system's same-version Python with this venv's packages
    tp, tp_env = ["python", "-m", "tinyperf.tooling.cli"], {}
    if subprocess.run(["runuser", "-u", user, "--", "test", "-x", str(Path(sys.executable).resolve())]).returncode:
      system_py = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
      if not system_py.is_file(): _unavailable(f"user {user} cannot run {sys.executable} and there is no {system_py}")
      import site
      tp[0], tp_env = str(system_py), {"PYTHONPATH": site.getsitepackages()[0]}   # for tinyperf only: not compose
    r = as_user(*tp, "compose", "prep-synthetic", "resnet-cpu", "check", "package", extra=tp_env)
    assert f"TINYPERF_UID={USER_UID}" in r.stdout and "ready: docker compose run --rm resnet-cpu" in r.stdout
    assert "SYNTHETIC_DIR" not in r.stdout   # prep-synthetic creates the directory resnet-cpu reads: no warning
    dc = ["docker-compose"]
    # the stand-in trainer (writes a valid MLPerf log in seconds; its INIT creates the kernel cache file): the image has
    # no tests/, so the clone's is mounted; `run -v/-e` change this one container, not the service
    stand_in = ["-v", f"{clone / 'tests'}:/opt/tinyperf/stand-in/tests:ro", "-e", "PYTHONPATH=/opt/tinyperf/stand-in",
                "-e", "TINYPERF_TEST_TRAIN_MODULE=tests.stand_in_train",
                "-e", "SUBMISSION_ORG=tinycorp"]   # the submitter, as `ORG=tinycorp docker compose run` gives it
    # the smallest set cpu_smoke accepts (docs: plain `docker compose run --rm prep-synthetic` makes the default one)
    as_user(*dc, "run", "--rm", "-T", "prep-synthetic", "--out", "/data", "--classes", "4", "--train-per-class", "160",
            "--val-per-class", "40", "--size", "48", timeout=600)
    # run: NEXP=2; run 1's container is killed mid-run (its RUN sleeps 30 s); the same command then keeps run 0 and
    # redoes run 1
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(["runuser", "-u", user, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], "NEXP=2",
                              *dc, "run", "--rm", "-T", *stand_in, "-e", "STAND_IN_RUN_S=30", "resnet-cpu"], cwd=clone,
                             stdout=log, stderr=subprocess.STDOUT)
    runs = clone / "out/runs/cpu_smoke/resnet"
    try:
      out1 = _wait_for(lambda: list(runs.glob("run_1_*/output.log")), 900, "run 1's output")[0]
      _wait_for(lambda: b"stand-in run" in out1.read_bytes(), 120, "run 1's RUN phase")
      (c,) = engine.containers.list(filters={"label": [f"com.docker.compose.project={project}",
                                                       "com.docker.compose.service=resnet-cpu"]})
      TIMINGS["compose: prep + run 0 + start of run 1"] = time.time() - t_all
      subprocess.run(["docker", "kill", c.id], check=True, capture_output=True)
      rc = first.wait(timeout=300)
    finally:
      if first.poll() is None: first.kill()
      log.close()
    assert rc != 0, (tmp_path / "first.log").read_text()[-3000:]
    r0 = clone / "out/results/cpu_smoke/resnet/result_0.txt"
    before = (hashlib.sha256(r0.read_bytes()).hexdigest(), r0.stat().st_mtime_ns)
    t1 = time.time()
    r = as_user(*dc, "run", "--rm", "-T", *stand_in, "resnet-cpu", extra={"NEXP": "2"}, timeout=900)
    TIMINGS["compose: resume run 1"] = time.time() - t1
    assert "2 runs, 1 already finished, running [1]" in r.stdout, r.stdout[-3000:]
    assert "preflight: 6 passed, 0 failed" in r.stdout   # 6: resnet adds cores
    # what the service prints names the host directory (.env's RESULTS_DIR), not the container's /results
    assert f"all 2 runs finished: {clone}/out/results/cpu_smoke/resnet;" in r.stdout, r.stdout[-3000:]
    assert (hashlib.sha256(r0.read_bytes()).hexdigest(), r0.stat().st_mtime_ns) == before   # the finished run is kept
    ledger = json.loads((runs / "ledger.json").read_text())["attempts"]
    assert [(a["index"], a["status"]) for a in ledger] == [(0, "done"), (1, "interrupted"), (1, "done")], ledger
    assert {a["backend"] for a in ledger} == {"container"} and all(a["cache_drop"] for a in ledger), ledger
    digest = _image_env(engine, cpu_image)["TINYPERF_BASE_DIGEST"]
    assert all(a["provenance"]["TINYPERF_BASE_DIGEST"] == digest for a in ledger), ledger
    # the service sees no image ID, but the build and the code it holds (what `package` below compares)
    labels = engine.images.get(cpu_image).labels
    assert all((a["provenance"]["TINYPERF_BUILD_ID"], a["provenance"]["code_tree"]) ==
               (labels["io.tinyperf.build_id"], labels["io.tinyperf.code_tree"]) for a in ledger), ledger
    # status on the host: host paths (never the container's /results), the image and its base digest
    st = as_user(*tp, "status", "--results", "out", extra=tp_env)
    assert f"-> {clone}/out/results/cpu_smoke/resnet/result_0.txt" in st.stdout and "/results/results" not in st.stdout
    assert f"base {digest}" in st.stdout, st.stdout
    # check: the default command checks every RESULTS_DIR/results/<system>/<bm> (a resnet package needs 5 runs, so 2
    # are a verdict, not bad input); one log at a time is accepted
    r = as_user(*dc, "run", "--rm", "-T", "check", check=False, timeout=600)
    assert r.returncode == 1 and "2 result_*.txt files; a resnet package needs exactly 5" in r.stdout, \
      r.stdout[-3000:] + r.stderr[-3000:]
    for i in (0, 1):
      r = as_user(*dc, "run", "--rm", "-T", "check", f"/results/results/cpu_smoke/resnet/result_{i}.txt", timeout=600)
      assert "result log: ACCEPTED" in r.stdout, r.stdout[-3000:]
    # the README's plain command completes the default set (compose's NEXP: what the package checker requires), keeping
    # the two finished runs; then the default check accepts it and `package` writes the tarball into RESULTS_DIR
    r = as_user(*dc, "run", "--rm", "-T", *stand_in, "resnet-cpu", timeout=900)
    assert "5 runs, 2 already finished, running [2, 3, 4]" in r.stdout, r.stdout[-3000:]
    r = as_user(*dc, "run", "--rm", "-T", "check", check=False, timeout=600)
    assert r.returncode == 0 and "ACCEPTED" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    r = as_user(*dc, "run", "--rm", "-T", "package", check=False, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    tarball = clone / "out/submission/mlperf_submission_tinycorp.tar.gz"
    assert tarball.is_file() and tarball.with_suffix("").with_suffix(".sha1").is_file(), r.stdout[-3000:]
    assert f"wrote {clone}/out/submission/tinycorp/, {tarball} " in r.stdout, r.stdout[-3000:]
    assert list((clone / "out/cache").glob("cpu_smoke_resnet_*.db")), "the kernel cache lives on its volume"
    # a container cannot drop the host's page cache: the launcher evicts the data set instead, records that method and
    # tells the trainer (whose INIT logs it; the real runs' tests check the log)
    assert all(a["cache_drop"].startswith("posix_fadvise") for a in ledger), ledger
    assert "page cache dropped with posix_fadvise" in (clone / "out" / ledger[0]["output"]).read_text()
    # the service runs `tinyperf run --runtime host` in the image: the system it records is detected in there
    sysjson = json.loads((clone / "out/systems/cpu_smoke.json").read_text())
    assert sysjson["other_software_stack"]["base_image_digest"] == _image_env(engine, cpu_image)["TINYPERF_BASE_DIGEST"]
    assert sysjson["submitter"] == "tinycorp"   # the ORG the run service was given
    # everything on the host belongs to the user who typed the commands
    foreign = [p for p in [clone / "out", *(clone / "out").rglob("*"), clone / "data/synthetic", clone / ".env"]
               if p.lstat().st_uid != USER_UID]
    assert not foreign, f"not owned by uid {USER_UID}: {foreign[:5]}"
    TIMINGS["compose: fresh clone sequence"] = time.time() - t_all
  finally:
    subprocess.run(["docker-compose", "-p", project, "down", "--remove-orphans"], cwd=clone if clone.exists() else home,
                   capture_output=True, env={**os.environ, "COMPOSE_PROJECT_NAME": project})
    shutil.rmtree(clone, ignore_errors=True)
