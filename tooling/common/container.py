"""The docker SDK side of tinyperf: connect, build with streamed progress, and run one container with its output streamed
to a host file. Everything that talks to the engine is here; tooling/prep/build.py and tooling/launch/backends.py decide what to run.

docker SDK 7.x facts this relies on: APIClient.build(decode=True) yields
dicts and does not raise on a failed step (an `error` event does); no BuildKit, so Dockerfiles use classic syntax;
detach + remove would drop the container (and its logs) on exit, so containers are removed here after the logs are
saved; DeviceRequest(count=N, capabilities=[["gpu"]]) is `--gpus N`."""
from __future__ import annotations
import os
import re
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tinyperf.tooling.common.errors import UserError

LABEL = "io.tinyperf"
# In a compose service (tooling/common/compose_file.py writes both): "TARGET=VAR ..." for its bind mounts, and
# TINYPERF_HOST_<VAR>, the host directory behind each, so that a message names the path the user can open
MOUNTS_ENV = "TINYPERF_MOUNTS"
SERVICE_ENV = "TINYPERF_COMPOSE_SERVICE"   # the compose service this container runs (compose.py sets it)


def compose_run(service: str) -> str:
  """The command a user types to run a compose service (again), in compose v2's and v1's spelling."""
  return f"`docker compose run --rm {service}` (compose v1: `docker-compose run --rm {service}`)"


def host_path(path) -> str:
  """A path as the user on the host names it: inside a compose service, one under a bind mount (/results/...) is given
  under the host directory behind the mount; anywhere else, the path as it is."""
  p = str(path)
  full = os.path.abspath(p)
  for spec in os.environ.get(MOUNTS_ENV, "").split():
    target, var = spec.split("=", 1)
    host = os.environ.get(f"TINYPERF_HOST_{var}")
    if host and (full == target or full.startswith(target.rstrip("/") + "/")):
      return host.rstrip("/") + full[len(target.rstrip("/")):]
  return p


def host_paths_in(text: str) -> str:
  """host_path for every path in a message written by code that cannot know the mounts (benchmarks/preflight.py): each
  mount target at the start of a path (/data, /data/..., not /database) becomes the host directory behind it."""
  for spec in os.environ.get(MOUNTS_ENV, "").split():
    target, var = spec.split("=", 1)
    host, target = os.environ.get(f"TINYPERF_HOST_{var}"), target.rstrip("/")
    if host and target:
      text = re.sub(rf"(?<![\w./-]){re.escape(target)}(?=/|[^\w./-]|\.(?!\w)|$)", lambda _: host.rstrip("/"), text)
  return text


ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")   # colour and cursor codes (pip, apt) in build output


def plain(text: str) -> str: return ANSI_RE.sub("", text)


def api_error(e: Exception, limit: int = 400) -> str:
  """What the daemon said, whole: an APIError's explanation is its cause ('... dial tcp: lookup registry-1.docker.io:
  no such host'), which its str() puts last after a URL, where a cut lost it. Longer than limit: cut at a word."""
  text = " ".join(plain(str(getattr(e, "explanation", None) or e or type(e).__name__)).split())
  return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def daemon_address() -> str:
  return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(timeout: int = 60, instead: str = ""):
  """A docker client that answered a ping, or UserError naming the daemon address and the fix. instead: what the
  calling verb can do without a daemon (a flag of that verb), offered as the last fix."""
  import docker
  import requests
  addr = daemon_address()
  try:
    # an explicit address: docker SDK 7.2's from_env() would follow the CLI's context instead
    client = docker.DockerClient(base_url=addr, timeout=timeout)
    client.ping()
    return client
  except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as e:
    why = api_error(e, 300)
    raise UserError(f"cannot reach the Docker daemon at {addr} ({why}); nothing was run. Start it (`sudo systemctl "
                    f"start docker`, or `dockerd &` as root), or point DOCKER_HOST at a running one"
                    f"{'; or ' + instead if instead else ''}.") from None


def get_image(client, tag: str, build_hint: str):
  import docker
  try:
    return client.images.get(tag)
  except docker.errors.ImageNotFound:
    raise UserError(f"image {tag} is not on this Docker daemon ({daemon_address()}); nothing was run. Build it with "
                    f"`{build_hint}` (or pass --image with one that exists: `docker images`).") from None


# ------------------------------------------------------------------------------------------------------------ build

@dataclass
class BuildResult:
  image_id: str
  steps: int
  seconds: float
  log_tail: list[str] = field(default_factory=list)


STEP_RE = re.compile(r"^Step (\d+)/(\d+) : (.*)")
LAYER_RE = re.compile(r"^ ---> ([0-9a-f]{12,64})$")   # the image a finished step left (not "Running in", "Using cache")
# a TLS-intercepting proxy: pip (and curl) inside the build do not trust the certificate it shows
TLS_RE = re.compile(r"CERTIFICATE_VERIFY_FAILED|certificate verify failed|SSLCertVerificationError|SSL certificate problem")
TLS_HINT = ("The build's downloads failed TLS verification: a proxy on this network probably re-signs HTTPS with its "
            "own CA. Give the build that CA's certificate (a PEM file, here proxy-ca.pem): `{command} --extra-ca "
            "proxy-ca.pem` (or TINYPERF_EXTRA_CA=proxy-ca.pem); docs/containers.md, 'Extra CA for TLS-intercepting "
            "proxies'.")
TLS_HINT_GIVEN = ("The build's downloads failed TLS verification although it was given --extra-ca: that file is not the "
                  "CA the proxy signs with (`openssl s_client -showcerts -connect pypi.org:443` shows the chain it "
                  "presents; give its last certificate).")


def build(client, context: Path, dockerfile: str, tag: str, buildargs: dict, labels: dict | None = None,
          nocache: bool = False, echo=print, command: str = "tinyperf build", files: list[str] | None = None,
          extra_files: dict[str, str] | None = None) -> BuildResult:
  """Classic build through the low-level API with each output line echoed as it arrives (colour codes removed). A
  failing step (which the SDK reports as an `error` event, not an exception) becomes UserError naming the step and its
  last output lines, and `command`'s --extra-ca where the output shows a TLS failure; the untagged image of its
  finished steps is removed. files: the build context is these files of `context` only (paths relative to it), not the
  whole folder; extra_files: {path: text} added to those files."""
  t0 = time.time()
  step, image_id, tail, partial, tls, layer = "", None, [], "", False, None
  kw = dict(dockerfile=dockerfile, tag=tag, buildargs=buildargs, labels=labels or {}, decode=True, rm=True,
            forcerm=True, pull=False, nocache=nocache, network_mode="host")
  if files is None: stream = client.api.build(path=str(context), **kw)
  else:
    from docker.utils.build import create_archive
    archive = create_archive(str(context), files=files, extra_files=list((extra_files or {}).items()))
    stream = client.api.build(fileobj=archive, custom_context=True, **kw)
  for ev in stream:
    if "stream" in ev:
      partial += ev["stream"]
      *lines, partial = partial.split("\n")
      for line in map(plain, lines):
        m = STEP_RE.match(line)
        if m: step = line
        lm, sm = LAYER_RE.match(line), STEP_RE.match(step)
        if lm and sm and int(sm.group(1)) > 1: layer = lm.group(1)   # step 1's is the base image: never ours to remove
        tls = tls or bool(TLS_RE.search(line))
        tail = (tail + [line])[-40:]
        echo(line)
        if line.startswith("Successfully built ") and not image_id: image_id = line.split()[-1]
    elif "aux" in ev and isinstance(ev["aux"], dict) and ev["aux"].get("ID"):
      image_id = ev["aux"]["ID"]
    elif "error" in ev or "errorDetail" in ev:
      msg = plain((ev.get("errorDetail") or {}).get("message") or ev.get("error") or "unknown build error")
      if partial: tail.append(plain(partial))
      tls = tls or bool(TLS_RE.search(msg + partial))
      shown = "\n".join("    " + x for x in tail[-15:] if x.strip())
      removed = _remove_unfinished(client, layer)
      raise UserError(f"building {tag} from {dockerfile} failed at {step or 'the first step'}:\n  {msg.strip()}\n"
                      f"  last output:\n{shown}\n" + ((TLS_HINT_GIVEN if "--extra-ca" in command else TLS_HINT.format(command=command)) + "\n" if tls else "") +
                      f"Fix the step (or its input) and rerun `{command}`." +
                      (f" (The untagged image of its finished steps, {removed}, was removed.)" if removed else ""))
    elif "status" in ev:  # base-image pulls
      echo(f"{ev.get('id', '')} {ev['status']} {ev.get('progress', '')}".strip())
  if not image_id:
    raise UserError(f"building {tag} from {dockerfile}: the daemon ended the build without an image ID or an error "
                    f"(last step: {step or 'none'}). Rerun; if it repeats, check the daemon log.")
  m = STEP_RE.match(step)
  return BuildResult(image_id=image_id, steps=int(m.group(2)) if m else 0, seconds=time.time() - t0, log_tail=tail)


def _remove_unfinished(client, layer: str | None) -> str:
  """A failed build leaves the image of its last finished step untagged (`<none>` in `docker images`, the base's size
  and more): remove it, and with it the untagged steps under it that no other image uses. Returns its ID, or ''."""
  if not layer: return ""
  try:
    if client.images.get(layer).tags: return ""
    client.images.remove(layer)
    return layer
  except Exception:   # in use, already gone, or the daemon refused: a leftover image is worth no second error
    return ""


# -------------------------------------------------------------------------------------------------------------- run

@dataclass
class RunSpec:
  """What one container needs. Built by tooling/launch/backends.py from a platform config (the same knobs compose is rendered from)."""
  image: str
  command: list[str]
  name: str
  mounts: list[tuple[str, str, bool]]          # (host path, container path, read_only)
  environment: dict
  vendor: str
  gpus: int
  shm_size: str
  user: str
  labels: dict = field(default_factory=dict)
  render_gid: int | None = None
  memlock: int | None = None                    # GPU vendors: RLIMIT_MEMLOCK bytes, -1 = unlimited (the default)


def host_render_gid() -> int | None:
  """GID owning the host's /dev/dri/renderD* nodes (the container user needs it; the group may not exist in the image)."""
  env = os.environ.get("TINYPERF_RENDER_GID") or os.environ.get("RENDER_GID")
  if env: return int(env)
  for n in sorted(Path("/dev/dri").glob("renderD*")) if Path("/dev/dri").is_dir() else []:
    return n.stat().st_gid
  return None


def check_gpu_runtime(client, vendor: str):
  """The host can give containers GPUs of this vendor, or UserError saying what is missing."""
  if vendor == "nv":
    info = client.info()
    runtimes = set((info.get("Runtimes") or {}).keys())
    cdi = [d for d in info.get("CDISpecDirs") or [] if Path(d).is_dir() and any(Path(d).glob("*nvidia*"))]
    if "nvidia" not in runtimes and not cdi:
      raise UserError(f"this Docker daemon has no NVIDIA GPU runtime (runtimes: {', '.join(sorted(runtimes)) or 'none'}; "
                      f"no NVIDIA CDI spec); nothing was run. Install nvidia-container-toolkit, run `sudo nvidia-ctk "
                      f"runtime configure --runtime=docker` and restart docker (`docker run --rm --gpus all <image> "
                      f"nvidia-smi` must work).")
  elif vendor == "amd":
    missing = [p for p in ("/dev/kfd", "/dev/dri") if not Path(p).exists()]
    if missing:
      raise UserError(f"this host has no AMD GPU device nodes ({', '.join(missing)} missing: the amdgpu kernel driver "
                      f"is not loaded); nothing was run. Install amdgpu-dkms (or load amdgpu) and check "
                      f"`ls /dev/kfd /dev/dri`.")


def memlock_limit() -> int:
  """RLIMIT_MEMLOCK for GPU containers: -1 (unlimited, what the GPU userspace wants for pinned host memory) when the
  host allows raising it, else the host's hard limit (sandboxes where even root may not raise it, e.g. CI), with a
  warning. TINYPERF_MEMLOCK (bytes, -1 = unlimited) overrides."""
  if os.environ.get("TINYPERF_MEMLOCK"): return int(os.environ["TINYPERF_MEMLOCK"])
  _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
  if hard == resource.RLIM_INFINITY: return -1
  probe = "import resource as r; r.setrlimit(r.RLIMIT_MEMLOCK, (r.RLIM_INFINITY, r.RLIM_INFINITY))"
  if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0: return -1
  print(f"WARNING: this host may not raise the locked-memory limit; GPU containers get {hard} bytes instead of "
        f"unlimited (set TINYPERF_MEMLOCK to override).", file=sys.stderr)
  return hard


def container_kwargs(spec: RunSpec) -> dict:
  """docker SDK containers.create() arguments; the same devices, limits and mounts compose.yaml gives the services."""
  import docker.types as T
  kw = dict(image=spec.image, command=spec.command, name=spec.name, detach=True, init=True, user=spec.user,
            environment=spec.environment, labels=spec.labels, shm_size=spec.shm_size, network_mode="none",
            working_dir="/tmp",
            mounts=[T.Mount(target=c, source=str(h), type="bind", read_only=ro) for h, c, ro in spec.mounts],
            ulimits=[T.Ulimit(name="stack", soft=67108864, hard=67108864)])
  if spec.vendor in ("nv", "amd"):  # pinned host memory for the GPU runtimes; the CPU backend does not lock memory
    m = spec.memlock if spec.memlock is not None else -1
    kw["ulimits"].insert(0, T.Ulimit(name="memlock", soft=m, hard=m))
  if spec.vendor == "nv":
    kw["device_requests"] = [T.DeviceRequest(driver="nvidia", count=spec.gpus, capabilities=[["gpu", "compute", "utility"]])]
  elif spec.vendor == "amd":
    kw["devices"] = ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    kw["group_add"] = ["video"] + ([str(spec.render_gid)] if spec.render_gid is not None else [])
    kw["security_opt"] = ["seccomp=unconfined"]
  return kw


class Running:
  """One started container: stream its output to a sink until it exits, then remove it. Ctrl-C (or any exception)
  kills and removes it before re-raising; a watchdog kills it after `limit_s`."""
  def __init__(self, client, spec: RunSpec):
    import docker
    self.client, self.spec, self.timed_out = client, spec, False
    try:
      self.container = client.containers.create(**container_kwargs(spec))
    except docker.errors.APIError as e:
      raise UserError(f"the Docker daemon refused to create container {spec.name} from {spec.image}: "
                      f"{e.explanation or e}. Nothing was run.") from None

  def run(self, sink, limit_s: float | None = None) -> int:
    import docker
    c = self.container
    timer = None
    try:
      try: c.start()
      except docker.errors.APIError as e:
        raise UserError(f"the Docker daemon could not start container {self.spec.name}: {e.explanation or e}. "
                        f"Nothing was run in it.") from None
      if limit_s:
        def kill():
          self.timed_out = True
          try: c.kill()
          except docker.errors.APIError: pass
        timer = threading.Timer(limit_s, kill); timer.daemon = True; timer.start()
      for chunk in c.logs(stream=True, follow=True, stdout=True, stderr=True):
        sink(chunk)
      return int(c.wait(timeout=60)["StatusCode"])
    finally:
      if timer: timer.cancel()
      self.remove()

  def remove(self):
    import docker
    try: self.container.remove(force=True)  # force: kills it first if it still runs (Ctrl-C)
    except docker.errors.NotFound: pass
    except docker.errors.APIError as e:
      if "already in progress" not in str(e): raise


def chown_tree(path: Path, uid: int, gid: int):
  """Make a directory the container's user writes into owned by that user (the launcher runs as root)."""
  for p in [path, *path.rglob("*")]:
    try: os.chown(p, uid, gid, follow_symlinks=False)
    except FileNotFoundError: pass
