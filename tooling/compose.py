"""compose.yaml, rendered from the platform configs (one service per benchmark x platform) plus prep/check/package.

Every value that depends on a platform comes from its config.yaml: the image (vendor), the GPU count (GPUS), /dev/shm
(the loader's ring sizes), the default number of runs, the time limit. `tinyperf render` writes the file and
`tinyperf render --check` (and tests/unit/test_compose.py) fail when it differs from the configs. The settings are the
ones tooling/docker_run.py gives `tinyperf run`'s containers; inside, a service runs the host backend of `tinyperf run`
(`--no-container`), so compose and the launcher share one code path from the entrypoint down.

Compose file format: the Compose Specification subset that Debian's docker-compose 1.29 reads (no `version:` key, GPUs
through deploy.resources.reservations.devices, no BuildKit-only build features); also valid for compose v2."""
from __future__ import annotations
import yaml

from benchmarks.common.config import BENCHMARKS, ROOT, available_platforms, load_config, PlatformConfig
from benchmarks.common.preflight import shm_size_for

COMPOSE = ROOT / "compose.yaml"
# service suffix per platform; a platform not listed gets its lower-cased name
SHORT = {"tinybox_green": "green", "tinybox_red": "red", "tinybox_8xMI300X": "mi300x", "1xH200": "h200",
         "2xH200": "2xh200", "cpu_smoke": "cpu"}
NEXP = {"resnet": 5, "bert": 10}
DATA = {"resnet": "${IMAGENET_DIR:-./data/imagenet}", "bert": "${WIKI_DIR:-./data/wiki}"}
IMAGE = "${{TINYPERF_IMAGE_{V}:-tinyperf:{v}}}"
USER = "${TINYPERF_UID:-1000}:${TINYPERF_GID:-1000}"
RESULTS = "${RESULTS_DIR:-./out}"
CACHE = "${CACHE_DIR:-./out/cache}"

HEADER = """\
# Generated from the platform configs by `tinyperf render`: edit benchmarks/*/implementations/*/config.yaml or
# tooling/compose.py, not this file (`tinyperf render --check` fails on drift).
#
#   tinyperf build --vendor nv            # or amd / cpu: images tinyperf:<vendor> (compose never builds them)
#   export TINYPERF_UID=$(id -u) TINYPERF_GID=$(id -g)     # files in RESULTS_DIR belong to you (default 1000:1000)
#   IMAGENET_DIR=/data/imagenet RESULTS_DIR=$PWD/out docker-compose run --rm resnet-green
#   NEXP=1 docker-compose run --rm resnet-cpu              # fewer runs; knob overrides: -e BS=768
#
# Each benchmark service runs `tinyperf run <bm> --platform <p> --no-container` inside its image: NEXP seeded INIT+RUN
# runs (default 5 resnet / 10 bert), each checked, in a resumable ledger under RESULTS_DIR/runs and results under
# RESULTS_DIR/results/<system>/<bm>/result_<i>.txt. INIT and RUN share tinygrad's kernel cache under CACHE_DIR.
# A container cannot drop the host's page cache (the entrypoint falls back to posix_fadvise over the data set and
# records that); `tinyperf run <bm> --platform <p>` from the host drops it before every run and is the submission path.
# AMD services need the host's render group: export RENDER_GID=$(stat -c %g /dev/dri/renderD128) (preflight fails
# with the fix when /dev/kfd is not accessible).
# NVIDIA services need nvidia-container-toolkit on the host. Nothing here is privileged.
"""


def service_name(cfg: PlatformConfig) -> str:
  return f"{cfg.benchmark}-{SHORT.get(cfg.platform, cfg.platform.lower())}"


def _gpu_settings(cfg: PlatformConfig) -> dict:
  if cfg["vendor"] == "nv":
    return {"deploy": {"resources": {"reservations": {"devices": [
      {"driver": "nvidia", "count": cfg["GPUS"], "capabilities": ["gpu", "compute", "utility"]}]}}}}
  if cfg["vendor"] == "amd":
    return {"devices": ["/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri"],
            "group_add": ["video", "${RENDER_GID:-render}"],
            "security_opt": ["seccomp=unconfined"]}
  return {}


def _runtime_common(vendor: str = "cpu") -> dict:
  # GPU runtimes pin host memory (memlock unlimited, as NVIDIA's kits run); the CPU backend does not, and some
  # sandboxes (CI) may not raise the limit at all
  limits = {"memlock": -1, "stack": 67108864} if vendor in ("nv", "amd") else {"stack": 67108864}
  return {"init": True, "user": USER, "ulimits": limits}


def benchmark_service(cfg: PlatformConfig) -> dict:
  b, v = cfg.benchmark, cfg["vendor"]
  return {
    "image": IMAGE.format(V=v.upper(), v=v),
    "command": ["tinyperf", "run", b, "--platform", cfg.platform, "--no-container", "--nexp", f"${{NEXP:-{NEXP[b]}}}",
                "--data", "/data", "--results", "/results"],
    **_runtime_common(v),
    "network_mode": "none",
    "shm_size": shm_size_for(cfg),
    **_gpu_settings(cfg),
    "environment": {"HOME": "/tmp", "PYTHONUNBUFFERED": "1", "TINYPERF_CACHE_DIR": "/cache"},
    "volumes": [f"{DATA[b]}:/data:ro", f"{RESULTS}:/results", f"{CACHE}:/cache"],
    "labels": {"io.tinyperf.benchmark": b, "io.tinyperf.platform": cfg.platform, "io.tinyperf.system": cfg["system"],
               "io.tinyperf.division": cfg["division"], "io.tinyperf.gpus": str(cfg["GPUS"]),
               "io.tinyperf.time_limit_minutes": str(cfg["time_limit_minutes"])},
  }


def tool_service(entrypoint: list[str], command: list[str], volumes: list[str], network: str, image_vendor: str = "cpu",
                 doc: str = "") -> dict:
  return {"image": IMAGE.format(V=image_vendor.upper(), v=image_vendor), "entrypoint": entrypoint, "command": command,
          **_runtime_common(), "network_mode": network, "environment": {"HOME": "/tmp", "PYTHONUNBUFFERED": "1"},
          "volumes": volumes, "labels": {"io.tinyperf.tool": doc}}


def compose_dict(configs: list[PlatformConfig] | None = None) -> dict:
  """Services for `configs` (default: every platform config of this tree) plus the tool services."""
  if configs is None: configs = [load_config(b, p, environ={}) for b in BENCHMARKS for p in available_platforms(b)]
  services = {service_name(cfg): benchmark_service(cfg) for cfg in configs}
  # data preparation needs the network (downloads) and writes the data folders; the CPU image is enough
  services["prep-imagenet"] = tool_service(
    ["tinyperf", "prep", "imagenet"], ["--out", "/data", "--from-tars", "/tars", "--val-labels", "/tars/val_labels.txt"],
    [f"{DATA['resnet']}:/data", "${IMAGENET_TARS:-./data/imagenet-tars}:/tars:ro"], "host",
    doc="ILSVRC2012 from the official tars in IMAGENET_TARS (or override the command: --out /data to download)")
  services["prep-wiki"] = tool_service(
    ["tinyperf", "prep", "wiki"], ["download", "--out", "/data"], [f"{DATA['bert']}:/data"], "host",
    doc="BERT Wikipedia: download, then `docker-compose run prep-wiki pretrain --data /data` and `eval --data /data`")
  services["prep-bert-ckpt"] = tool_service(
    ["tinyperf", "prep", "wiki"], ["download", "--out", "/data", "--no-text"], [f"{DATA['bert']}:/data"], "host",
    doc="the MLCommons phase-1 BERT checkpoint, config and vocab only")
  services["check"] = tool_service(
    ["tinyperf", "check"], ["/results/results"], [f"{RESULTS}:/results:ro"], "none",
    doc="MLCommons checkers on RESULTS_DIR/results (or a submission tree: pass its path)")
  services["package"] = tool_service(
    ["tinyperf", "package"], ["--results", "/results"], [f"{RESULTS}:/results"], "none",
    doc="assemble, verify and pack the submission tarball from RESULTS_DIR")
  return {"services": services}


def render_compose(configs: list[PlatformConfig] | None = None) -> str:
  return HEADER + yaml.safe_dump(compose_dict(configs), sort_keys=False, width=120, default_flow_style=False)
