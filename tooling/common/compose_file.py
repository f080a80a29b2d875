"""compose.yaml, rendered from the platform configs: one service per benchmark x platform, plus prep/check/package.

Every value that depends on a platform comes from its config.yaml: the image (vendor), the GPU count (GPUS), /dev/shm
(the loader's ring sizes), the default number of runs, the time limit. `tinyperf render` writes the file and
`tinyperf render --check` (and tests/unit/test_compose.py) fail when it differs from the configs. The settings are
the ones tooling/launch/backends.py gives `tinyperf run`'s containers; inside, a service runs the host backend of `tinyperf
run` (`--runtime host`), so compose and the launcher share one code path from the entrypoint down. The bind mounts use
the long syntax, so the daemon never creates a missing source (as root, which the container's user then cannot write).

Compose file format: the Compose Specification subset that Debian's docker-compose 1.29 reads (no `version:` key, GPUs
through deploy.resources.reservations.devices, no BuildKit-only build features); also valid for compose v2."""
from __future__ import annotations
import yaml

from tinyperf.benchmarks.common.config import ROOT, available_platforms, PlatformConfig
from tinyperf.benchmarks.common.rules import required_runs
from tinyperf.benchmarks.preflight import shm_size_for
from tinyperf.benchmarks.registry import BENCHMARKS, load_config
from tinyperf.tooling.common.container import MOUNTS_ENV, SERVICE_ENV

COMPOSE = ROOT / "compose.yaml"
# service suffix per platform; a platform not listed gets its lower-cased name
SHORT = {"tinybox_green": "green", "tinybox_red": "red", "tinybox_8xMI300X": "mi300x", "1xH200": "h200",
         "2xH200": "2xh200", "cpu_smoke": "cpu"}
# the host directories a service mounts: variable -> default (relative to the directory of compose.yaml)
DIRS = {"RESULTS_DIR": "./out", "CACHE_DIR": "./out/cache", "IMAGENET_DIR": "./data/imagenet", "WIKI_DIR": "./data/wiki",
        "IMAGENET_TARS": "./data/imagenet-tars", "SYNTHETIC_DIR": "./data/synthetic"}
IMAGE = "${{TINYPERF_IMAGE_{V}:-tinyperf:{v}}}"
USER = "${TINYPERF_UID:-1000}:${TINYPERF_GID:-1000}"
MISSING_IMAGE = "docker/missing-image"

HEADER = """\
# Generated from the platform configs by `tinyperf render`: edit benchmarks/*/implementations/*/config.yaml or
# tooling/common/compose_file.py, not this file (`tinyperf render --check` fails on drift). docs/containers.md has the sequence:
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
  return ["python", "-m", "tinyperf.tooling.prep.compose", "--enter", *writable, "--"]


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
