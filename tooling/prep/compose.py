"""compose.yaml, rendered from the platform configs (one service per benchmark x platform) plus prep/check/package;
`tinyperf compose SERVICE...`, the host step that makes those services runnable; and the in-container entry step.

Every value that depends on a platform comes from its config.yaml: the image (vendor), the GPU count (GPUS), /dev/shm
(the loader's ring sizes), the default number of runs, the time limit. `tinyperf render` writes the file and
`tinyperf render --check` (and tests/unit/test_containers.py) fail when it differs from the configs. The settings are
the ones tooling/launch/backends.py gives `tinyperf run`'s containers; inside, a service runs the host backend of `tinyperf
run` (`--runtime host`), so compose and the launcher share one code path from the entrypoint down.

Host directories: the bind mounts use the long syntax, so the daemon never creates a missing source (as root, which the
container's user then cannot write); `tinyperf compose SERVICE` creates them owned by the invoking user and writes
that user's UID/GID and the absolute directories to `.env`, which docker compose (v2 and 1.29) reads.

Missing images: compose 1.29's `run` pulls despite `pull_policy: never` (v2 honours it), so every service also has a
`build:` whose only step fails with the `tinyperf build` command to run (docker/missing-image/Dockerfile.<vendor>);
compose reaches it only when the image is not on the daemon.

Compose file format: the Compose Specification subset that Debian's docker-compose 1.29 reads (no `version:` key, GPUs
through deploy.resources.reservations.devices, no BuildKit-only build features); also valid for compose v2."""
from __future__ import annotations
import argparse
import os
import re
import shlex
import sys
from pathlib import Path
import yaml

from benchmarks.common.config import ROOT, available_platforms, PlatformConfig
from benchmarks.common.rules import required_runs
from benchmarks.preflight import shm_size_for
from benchmarks.registry import BENCHMARKS, load_config
from tooling.common.container import MOUNTS_ENV, SERVICE_ENV
from tooling.common.errors import UserError, write_atomic

COMPOSE = ROOT / "compose.yaml"
ENV_FILE = ".env"
# service suffix per platform; a platform not listed gets its lower-cased name
SHORT = {"tinybox_green": "green", "tinybox_red": "red", "tinybox_8xMI300X": "mi300x", "1xH200": "h200",
         "2xH200": "2xh200", "cpu_smoke": "cpu"}
# the host directories a service mounts: variable -> default (relative to the directory of compose.yaml)
DIRS = {"RESULTS_DIR": "./out", "CACHE_DIR": "./out/cache", "IMAGENET_DIR": "./data/imagenet", "WIKI_DIR": "./data/wiki",
        "IMAGENET_TARS": "./data/imagenet-tars", "SYNTHETIC_DIR": "./data/synthetic"}
IMAGE = "${{TINYPERF_IMAGE_{V}:-tinyperf:{v}}}"
USER = "${TINYPERF_UID:-1000}:${TINYPERF_GID:-1000}"
MISSING_IMAGE = "docker/missing-image"
SETUP = "tinyperf compose {service}"

HEADER = """\
# Generated from the platform configs by `tinyperf render`: edit benchmarks/*/implementations/*/config.yaml or
# tooling/prep/compose.py, not this file (`tinyperf render --check` fails on drift). docs/containers.md has the sequence:
#
#   tinyperf images pin                           # or build with --allow-unpinned (not for a closed result)
#   tinyperf build --vendor nv                    # images tinyperf:<vendor>; prep/check/package use tinyperf:cpu
#   tinyperf compose resnet-green                 # host dirs owned by you, .env (your UID, the dirs), image, GPU runtime
#   docker compose run --rm resnet-green          # v1: docker-compose run --rm resnet-green
#   docker compose run --rm check                 # every RESULTS_DIR/results/<system>/<bm>/result_<i>.txt
#
# Each benchmark service runs `tinyperf run <bm> --platform <p> --runtime host` inside its image: NEXP seeded INIT+RUN
# runs (default 5 resnet / 10 bert), each checked, in a resumable ledger under RESULTS_DIR/runs and results under
# RESULTS_DIR/results/<system>/<bm>/result_<i>.txt. INIT and RUN share tinygrad's kernel cache under CACHE_DIR.
# Knobs: NEXP=1 docker compose run --rm resnet-cpu; -e BS=768. Bind sources are never created by the daemon: a missing
# one ("bind source path does not exist") means `tinyperf compose SERVICE` was not run.
# A container cannot drop the host's page cache (the entrypoint falls back to posix_fadvise over the data set and
# records that); `tinyperf run <bm> --platform <p>` from the host drops it before every run and is the submission path.
# AMD services need the host's render group (RENDER_GID, written to .env by `tinyperf compose`). NVIDIA services need
# nvidia-container-toolkit on the host. Nothing here is privileged.
"""


def service_name(cfg: PlatformConfig) -> str:
  return f"{cfg.benchmark}-{SHORT.get(cfg.platform, cfg.platform.lower())}"


def _var(name: str) -> str: return f"${{{name}:-{DIRS[name]}}}"


def _bind(var: str, target: str, read_only: bool = False) -> dict:
  # long syntax: the engine refuses a missing source instead of creating it as root
  return {"type": "bind", "source": _var(var), "target": target, **({"read_only": True} if read_only else {})}


def _bound_var(bind: dict) -> str:
  """The variable naming a bind's host directory: RESULTS_DIR for ${RESULTS_DIR:-./out}."""
  return bind["source"][2:bind["source"].index(":-")]


def _entry(binds: list[dict]) -> list[str]:
  """The entry step: check the writable mounts, naming the host directories, then exec the command."""
  writable = [f"{b['target']}={_bound_var(b)}" for b in binds if not b.get("read_only")]
  return ["python", "-m", "tooling.prep.compose", "--enter", *writable, "--"]


# An nv service's runtime: the daemon's default, which `tinyperf compose` writes to .env once it has found the NVIDIA GPU
# runtime. Until then the default is a runtime no daemon has, whose name the daemon's refusal prints ("Unknown runtime
# specified ..."), before anything runs: without it the daemon's only word was `could not select device driver "nvidia"`.
NV_RUNTIME_VAR = "TINYPERF_NV_RUNTIME"
NV_RUNTIME = "${" + NV_RUNTIME_VAR + ":-the NVIDIA GPU runtime of this host is not checked - run tinyperf compose {service} first}"


def _gpu_settings(cfg: PlatformConfig) -> dict:
  if cfg["vendor"] == "nv":
    return {"runtime": NV_RUNTIME.replace("{service}", service_name(cfg)),
            "deploy": {"resources": {"reservations": {"devices": [
      {"driver": "nvidia", "count": cfg["GPUS"], "capabilities": ["gpu", "compute", "utility"]}]}}}}
  if cfg["vendor"] == "amd":
    return {"devices": ["/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri"],
            "group_add": ["video", "${RENDER_GID:-render}"],
            "security_opt": ["seccomp=unconfined"]}
  return {}


def _image(vendor: str) -> dict:
  image = IMAGE.format(V=vendor.upper(), v=vendor)
  return {"image": image, "pull_policy": "never",
          "build": {"context": MISSING_IMAGE, "dockerfile": f"Dockerfile.{vendor}"}}


MISSING_IMAGE_DOCKERFILE = """\
# Generated by `tinyperf render` (tooling/prep/compose.py). compose.yaml's `build:` for the {vendor} services: compose
# reaches it only when the service's image is not on the daemon (docker-compose 1.29's `run` would otherwise pull it from
# Docker Hub). Its one step fails at once, and the error names the command that builds the image. Nothing is pulled
# (scratch) and nothing is left behind: no step before the failing one commits an image (an ARG step left a 0-byte
# `<none>` image on every daemon that ran it).
FROM scratch
COPY ["image tinyperf:{vendor} (or the one TINYPERF_IMAGE_{V} names) is not on this Docker daemon. Build it with: tinyperf build --vendor {vendor}", "/"]
"""


def missing_image_dockerfiles() -> dict[Path, str]:
  from tooling.prep.images import VENDORS
  return {ROOT / MISSING_IMAGE / f"Dockerfile.{v}": MISSING_IMAGE_DOCKERFILE.format(vendor=v, V=v.upper())
          for v in VENDORS}


def _runtime_common(vendor: str = "cpu") -> dict:
  # GPU runtimes pin host memory (memlock unlimited, as NVIDIA's kits run); the CPU backend does not, and some
  # sandboxes (CI) may not raise the limit at all
  limits = {"memlock": -1, "stack": 67108864} if vendor in ("nv", "amd") else {"stack": 67108864}
  return {"init": True, "user": USER, "ulimits": limits}


def _environment(name: str, binds: list[dict], **extra) -> dict:
  # TINYPERF_HOST_<VAR>: the host directory behind each mount, for messages and records that must name it
  host = {f"TINYPERF_HOST_{_bound_var(b)}": b["source"] for b in binds}
  mounts = " ".join(f"{b['target']}={_bound_var(b)}" for b in binds)
  return {"HOME": "/tmp", "PYTHONUNBUFFERED": "1", SERVICE_ENV: name, MOUNTS_ENV: mounts, **extra, **host}


def benchmark_service(cfg: PlatformConfig) -> dict:
  b, v = cfg.benchmark, cfg["vendor"]
  data = cfg.spec.data_var_cpu if v == "cpu" else cfg.spec.data_var
  binds = [_bind(data, "/data", read_only=True), _bind("RESULTS_DIR", "/results"), _bind("CACHE_DIR", "/cache")]
  return {
    **_image(v),
    "entrypoint": _entry(binds),
    "command": ["tinyperf", "run", b, "--platform", cfg.platform, "--runtime", "host", "--nexp", f"${{NEXP:-{required_runs(b)}}}",
                "--data", "/data", "--results", "/results"],
    **_runtime_common(v),
    "network_mode": "none",
    "shm_size": shm_size_for(cfg),
    **_gpu_settings(cfg),
    # ORG=name: the submitter the runs record (tinyperf run's --org), asked for at the first run of a real platform
    "environment": _environment(service_name(cfg), binds, TINYPERF_CACHE_DIR="/cache", SUBMISSION_ORG="${ORG:-}",
                                TINYPERF_IMAGE=IMAGE.format(V=v.upper(), v=v)),
    "volumes": binds,
    "labels": {"io.tinyperf.benchmark": b, "io.tinyperf.platform": cfg.platform, "io.tinyperf.system": cfg["system"],
               "io.tinyperf.division": cfg["division"], "io.tinyperf.gpus": str(cfg["GPUS"]),
               "io.tinyperf.time_limit_minutes": str(cfg["time_limit_minutes"])},
  }


def tool_service(name: str, tool: list[str], command: list[str], binds: list[dict], network: str, doc: str = "") -> dict:
  return {**_image("cpu"), "entrypoint": _entry(binds) + tool, "command": command, **_runtime_common(),
          "network_mode": network, "environment": _environment(name, binds), "volumes": binds,
          "labels": {"io.tinyperf.tool": doc}}


def compose_dict(configs: list[PlatformConfig] | None = None) -> dict:
  """Services for `configs` (default: every platform config of this tree) plus the tool services."""
  if configs is None: configs = [load_config(b, p, environ={}) for b in BENCHMARKS for p in available_platforms(b)]
  services = {service_name(cfg): benchmark_service(cfg) for cfg in configs}
  tools = [
    # data preparation needs the network (downloads) and writes the data folders; the CPU image is enough
    ("prep-imagenet", ["tinyperf", "prep", "imagenet"], ["--out", "/data", "--from-tars", "/tars", "--val-labels",
     "/tars/val_labels.txt"], [_bind("IMAGENET_DIR", "/data"), _bind("IMAGENET_TARS", "/tars", True)], "host",
     "ILSVRC2012 from the official tars in IMAGENET_TARS (or override the command: --out /data to download)"),
    ("prep-synthetic", ["tinyperf", "prep", "synthetic-imagenet"], ["--out", "/data"],
     [_bind("SYNTHETIC_DIR", "/data")], "none", "learnable synthetic JPEGs for resnet-cpu in SYNTHETIC_DIR"),
    ("prep-wiki", ["tinyperf", "prep", "wiki"], ["download", "--out", "/data"], [_bind("WIKI_DIR", "/data")], "host",
     "BERT Wikipedia: download, then `docker compose run --rm prep-wiki pretrain --data /data` and `eval --data /data`"),
    ("prep-bert-ckpt", ["tinyperf", "prep", "wiki"], ["download", "--out", "/data", "--no-text"],
     [_bind("WIKI_DIR", "/data")], "host", "the MLCommons phase-1 BERT checkpoint, config and vocab only"),
    ("check", ["tinyperf", "check"], ["/results"], [_bind("RESULTS_DIR", "/results", True)], "none",
     "MLCommons checkers on every RESULTS_DIR/results/<system>/<bm> (or pass one log: /results/results/.../result_0.txt)"),
    ("package", ["tinyperf", "package"], ["--results", "/results", "--out", "/results/submission"], [_bind("RESULTS_DIR", "/results")], "none",
     "assemble, check and pack RESULTS_DIR/submission/mlperf_submission_<ORG>.tar.gz from RESULTS_DIR's runs (ORG: "
     "the submitter the runs recorded)"),
  ]
  for name, tool, command, binds, network, doc in tools:
    services[name] = tool_service(name, tool, command, binds, network, doc)
  return {"services": services}


def render_compose(configs: list[PlatformConfig] | None = None) -> str:
  return HEADER + yaml.safe_dump(compose_dict(configs), sort_keys=False, width=120, default_flow_style=False)


# ------------------------------------------------------------------------------------------- `tinyperf compose SERVICE`

VAR_RE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def compose_dir() -> Path:
  """The directory of the compose.yaml users run: the current one when it has ours, else the repository's."""
  return Path.cwd() if (Path.cwd() / "compose.yaml").is_file() else ROOT


def read_env_file(path: Path) -> dict[str, str]:
  env = {}
  if path.is_file():
    for line in path.read_text().splitlines():
      m = re.match(r"\s*(?:export\s+)?([A-Za-z_]\w*)=(.*)$", line)
      if m and not line.lstrip().startswith("#"): env[m.group(1)] = m.group(2).strip().strip("'\"")
  return env


def write_env_file(path: Path, values: dict[str, str]):
  """Set `values` in a compose .env file, keeping every other line (comments, the user's own variables)."""
  lines = path.read_text().splitlines() if path.is_file() else ["# written by `tinyperf compose`: docker compose reads "
                                                                "it; exported variables still win"]
  todo = dict(values)
  for i, line in enumerate(lines):
    m = re.match(r"\s*(?:export\s+)?([A-Za-z_]\w*)=", line)
    if m and m.group(1) in todo and not line.lstrip().startswith("#"): lines[i] = f"{m.group(1)}={todo.pop(m.group(1))}"
  lines += [f"{k}={v}" for k, v in todo.items()]
  write_atomic(path, "\n".join(lines) + "\n", overwrite=True)


def expand(value: str, env: dict[str, str]) -> str:
  """Compose's ${VAR:-default} interpolation (the only form compose.yaml uses)."""
  return VAR_RE.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


def _vendor(svc: dict) -> str: return svc["build"]["dockerfile"].rsplit(".", 1)[1]   # Dockerfile.<vendor>


def prepare(services: list[str], cwd: Path | None = None, environ: dict | None = None,
            warnings: list[str] | None = None) -> dict[str, str]:
  """The host side of `services`: the values compose needs, written to .env (the invoking user's UID/GID, absolute
  host directories), the writable directories created by this user, the read-only ones present. UserError naming the
  host directory and the fix. A data directory not prepared yet is a warning (appended to `warnings`)."""
  from tooling.common import container as C
  warnings = [] if warnings is None else warnings
  cwd, environ = cwd or compose_dir(), os.environ if environ is None else environ
  known = compose_dict()["services"]
  unknown = [s for s in services if s not in known]
  if unknown:
    raise UserError(f"no compose service {', '.join(unknown)}; the services are: {', '.join(known)}.")
  env_path = cwd / ENV_FILE
  # compose's precedence: the shell's variables, then .env, then the defaults in compose.yaml
  values = {**read_env_file(env_path), **{k: v for k, v in environ.items() if k in DIRS or k.startswith("TINYPERF_")}}
  out = {"TINYPERF_UID": values.get("TINYPERF_UID") or str(os.getuid()),
         "TINYPERF_GID": values.get("TINYPERF_GID") or str(os.getgid())}
  for var, default in DIRS.items(): out[var] = str((cwd / (values.get(var) or default)).resolve())
  here = Path.cwd().resolve()
  for var in DIRS:   # compose takes a relative path from compose.yaml's directory, not from where the user typed it
    given = environ.get(var)
    if given and not Path(given).is_absolute() and here != cwd.resolve():
      warnings.append(f"{var}={given} is relative: compose reads it from {cwd} (where compose.yaml is), so it is "
                      f"{out[var]}, not {here / given}. Give an absolute path if you meant the latter.")
  # the cache sits in the results directory unless placed elsewhere (compose 1.29 cannot nest ${} defaults)
  # (one .env wrote: a derived CACHE_DIR follows a new RESULTS_DIR)
  saved = read_env_file(env_path)
  if not values.get("CACHE_DIR") or (values["CACHE_DIR"] == saved.get("CACHE_DIR") and saved.get("RESULTS_DIR") and
                                     saved["CACHE_DIR"] == str(Path(saved["RESULTS_DIR"]) / "cache")):
    out["CACHE_DIR"] = str(Path(out["RESULTS_DIR"]) / "cache")
  gid = C.host_render_gid()
  if gid is not None and any(_vendor(known[s]) == "amd" for s in services): out["RENDER_GID"] = str(gid)
  uid, ugid = int(out["TINYPERF_UID"]), int(out["TINYPERF_GID"])
  for s in services:
    for b in known[s]["volumes"]:
      var = b["source"][2:b["source"].index(":-")]
      host = Path(out[var])
      if b.get("read_only") and var not in ("RESULTS_DIR", "CACHE_DIR"):   # data: prepared by a prep service
        if not host.is_dir():
          prep = {"SYNTHETIC_DIR": "prep-synthetic", "IMAGENET_DIR": "prep-imagenet", "WIKI_DIR": "prep-wiki"}.get(var)
          how = f" (`docker compose run --rm {prep}`, after `tinyperf compose {prep}`)" if prep else ""
          platform = known[s].get("labels", {}).get("io.tinyperf.platform")
          if var == "WIKI_DIR" and platform == "cpu_smoke":   # the stand-in corpus, not MLCommons' Wikipedia download
            how = (f" (on the host `tinyperf prep wiki corpus --out {shlex.quote(str(host))}`, then `tinyperf compose "
                   f"prep-wiki` and `docker compose run --rm prep-wiki pretrain --data /data --platform cpu_smoke`, "
                   f"the same with eval)")
          warnings.append(f"{s}: {var}={host} does not exist yet; prepare it first{how} or set {var} to the directory "
                          f"that holds it")
        continue
      try: host.mkdir(parents=True, exist_ok=True)
      except OSError as e:
        raise UserError(f"cannot create {var}={host} ({e.strerror}): create it yourself (`sudo mkdir -p {host} && "
                        f"sudo chown {uid}:{ugid} {host}`) or set {var} to a directory you own.") from None
      _check_writable(var, host, uid, ugid)
  write_env_file(env_path, out)
  return out


def check_engine(services: list[str], values: dict[str, str], environ: dict | None = None, client=None,
                 env_path: Path | None = None):
  """Each service's image is on the daemon and the host has its vendor's GPU runtime, or UserError with the fix
  (before compose would pull, or the daemon say `could not select device driver "nvidia"`). Where an nv service's
  runtime is there, the daemon's default runtime goes into .env as TINYPERF_NV_RUNTIME (NV_RUNTIME)."""
  import docker
  from tooling.common import container as C
  environ = os.environ if environ is None else environ
  known, c = compose_dict()["services"], client or C.connect()
  for s in services:
    image, vendor = expand(known[s]["image"], {**values, **environ}), _vendor(known[s])
    var = f"TINYPERF_IMAGE_{vendor.upper()}"
    try: c.images.get(image)
    except docker.errors.ImageNotFound:
      raise UserError(f"image {image} ({s}) is not on this Docker daemon ({C.daemon_address()}). Build it with "
                      f"`tinyperf build --vendor {vendor}`, or set {var} to an image that exists (`docker images`).") \
        from None
    C.check_gpu_runtime(c, vendor)
    if vendor == "nv":
      write_env_file(env_path or compose_dir() / ENV_FILE, {NV_RUNTIME_VAR: c.info().get("DefaultRuntime") or "runc"})


def _check_writable(var: str, host: Path, uid: int, gid: int):
  st = host.stat()
  ok = os.access(host, os.W_OK | os.X_OK) if uid == os.getuid() else (
    uid == 0 or (st.st_uid == uid and st.st_mode & 0o300 == 0o300) or (st.st_gid == gid and st.st_mode & 0o030 == 0o030)
    or st.st_mode & 0o003 == 0o003)
  if not ok:
    raise UserError(f"{var}={host} is owned by uid {st.st_uid} and not writable by TINYPERF_UID={uid}, the user the "
                    f"container runs as. Fix: `sudo chown -R {uid}:{gid} {shlex.quote(str(host))}`, or set {var} to a "
                    f"directory you own (then `tinyperf compose` again).")


def add_arguments(p: argparse.ArgumentParser) -> None:
  p.epilog = "Run it before `docker compose run --rm SERVICE` (and after changing RESULTS_DIR & co.). docs/containers.md."
  p.add_argument("service", nargs="+", metavar="SERVICE", help="compose services to prepare (e.g. resnet-green check)")


def main(args: argparse.Namespace) -> int:
  warnings: list[str] = []
  out = prepare(args.service, warnings=warnings)
  check_engine(args.service, read_env_file(compose_dir() / ENV_FILE))   # all of .env: it may name the images too
  where = compose_dir() / ENV_FILE
  print(f"{where}: TINYPERF_UID={out['TINYPERF_UID']} TINYPERF_GID={out['TINYPERF_GID']} RESULTS_DIR={out['RESULTS_DIR']}")
  for w in warnings: print(f"WARNING {w}")
  # compose finds compose.yaml (and .env) in the current directory: from elsewhere, the command must go there first
  cd = "" if Path.cwd().resolve() == compose_dir().resolve() else f"cd {shlex.quote(str(compose_dir()))} && "
  for s in args.service:
    print(f"ready: {cd}docker compose run --rm {s}    (compose v1: {cd}docker-compose run --rm {s})")
  return 0


# ------------------------------------------------------------------------------------------------ the entry step

def enter(argv: list[str]) -> int:
  """In the container: each writable mount (TARGET=VAR) must be writable by this user, else a message naming the host
  directory, TINYPERF_UID and the fix, exit 2; then exec the command."""
  sep = argv.index("--")
  for spec in argv[:sep]:
    target, var = spec.split("=", 1)
    probe = Path(target) / f".tinyperf-write-test-{os.getpid()}"
    try:
      probe.write_bytes(b""); probe.unlink()
    except OSError as e:
      host = os.environ.get(f"TINYPERF_HOST_{var}", var)
      svc = os.environ.get("TINYPERF_COMPOSE_SERVICE", "SERVICE")
      print(f"tinyperf: {var} ({host} on the host) is not writable by TINYPERF_UID={os.getuid()}, the user this container "
            f"runs as ({e.strerror}). Fix on the host: `{SETUP.format(service=svc)}` (creates the directories owned by "
            f"you and writes your UID to .env), or `sudo chown -R {os.getuid()}:{os.getgid()} "
            f"{shlex.quote(str(host))}`. Nothing was run.",
            file=sys.stderr)
      return 2
  cmd = argv[sep + 1:]
  os.execvp(cmd[0], cmd)


if __name__ == "__main__" and sys.argv[1:2] == ["--enter"]:
  sys.exit(enter(sys.argv[2:]))
