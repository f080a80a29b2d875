"""`tinyperf build --vendor nv|amd|cpu` (or `--platform P`): build the image a platform runs in, with live progress.

The base comes from images.lock.json (tag@digest). A base without a digest, or any --base-image that is not pinned by
digest, is refused when the image serves a closed submission unless --allow-unpinned is given; the digest actually used
(the registry digest, or the local image ID of a base that has none) goes into the image's labels and environment and
into a build record, out/images/<build id>.json (--record), one per build identity: a hash of everything the build is
made from, of which the hash of the code (a label, and a file in the image's tree: runtime.IMAGE_CODE_FILE) is what
`tinyperf package` compares. --base-image replaces the vendor image (CI builds on a local Debian base); the vendor's
GPU-library selfcheck is then skipped, loudly, because that base cannot have them."""
from __future__ import annotations
import argparse
import fcntl
import hashlib
import json
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from tinyperf.benchmarks.common.config import ROOT
from tinyperf.benchmarks.common.runtime import IMAGE_CODE_FILE
from tinyperf.benchmarks.registry import BENCHMARKS, load_config
from tinyperf.tooling.common.errors import UserError, write_atomic
from tinyperf.tooling.common.provenance import git_revision
from tinyperf.tooling.prep import images as I


def add_arguments(p: argparse.ArgumentParser):
  g = p.add_mutually_exclusive_group(required=True)
  g.add_argument("--vendor", choices=I.VENDORS, help="which image: nv (CUDA), amd (ROCm), cpu")
  g.add_argument("--platform", help="the image of this platform's vendor (and its division decides pinning rules)")
  p.add_argument("--tag", help="image tag (default tinyperf:<vendor>, what `tinyperf run` and compose.yaml use)")
  p.add_argument("--base-image", help="build on this base instead of the locked vendor image (e.g. a locally imported "
                 "Debian for CI); the GPU-library selfcheck is skipped unless it is the vendor's repository")
  p.add_argument("--allow-unpinned", action="store_true",
                 help="build a closed-division image from a base without a digest (recorded in the image)")
  p.add_argument("--extra-ca", type=Path, default=os.environ.get("TINYPERF_EXTRA_CA") or None,
                 help="PEM CA certificate for pip inside the build (TLS-intercepting proxies; env TINYPERF_EXTRA_CA); "
                 "used by the build stage's pip only; the image neither trusts nor holds it")
  p.add_argument("--no-cache", action="store_true", help="rebuild every layer")
  p.add_argument("--record", type=Path, default=Path("out/images"),
                 help="folder for the build records, <build id>.json each (default out/images)")


def context_files(dockerfile: str) -> list[str]:
  """The image's build context: git's view of the checkout (its tracked files as they are now, never an untracked or
  ignored one: a key, a token, a local note), less what .dockerignore excludes, plus docker/certs/*.crt (the extra CA,
  which only the Dockerfile's build stage reads). Where ROOT is no git checkout (a packaged implementation, whose
  setup.sh builds its image) the folder's files, less .dockerignore."""
  from docker.utils.build import PatternMatcher, exclude_paths
  def git(*args):
    try: return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError): return None
  ignore = ROOT / ".dockerignore"
  patterns = [l.strip() for l in ignore.read_text().splitlines() if l.strip() and not l.startswith("#")] \
    if ignore.is_file() else []
  top, p = git("rev-parse", "--show-toplevel"), git("ls-files", "-z")
  if top is None or p is None or top.returncode or p.returncode or \
     Path(top.stdout.decode(errors="replace").strip()).resolve() != ROOT.resolve():
    print(f"NOTE: {ROOT} is not a git checkout: the build context is the whole folder (less .dockerignore), not git's "
          f"tracked files.", flush=True)
    names = exclude_paths(str(ROOT), patterns, dockerfile)
  else:
    skip = PatternMatcher(patterns)
    names = [n for n in p.stdout.decode("utf-8", "surrogateescape").split("\0") if n and not skip.matches(n)]
  files = {n for n in names if (ROOT / n).is_file() and not (ROOT / n).is_symlink()}
  files |= {c.relative_to(ROOT).as_posix() for c in (ROOT / "docker" / "certs").glob("*.crt") if c.is_file()}
  return sorted((files | {dockerfile}) - {IMAGE_CODE_FILE})


def code_tree(files: list[str]) -> str:
  """sha256 over the code an image gets (each context file's path, executable bit and content; the extra CA is no code
  and leaves no trace in the image): equal for every vendor's image built from one tree, so `tinyperf package` in the
  cpu image tells whether it holds the code of runs made in the nv one."""
  h = hashlib.sha256()
  for n in files:
    if n.startswith("docker/certs/") and n.endswith(".crt"): continue
    p = ROOT / n
    h.update(b"%s\0%d\0%s\n" % (n.encode("utf-8", "surrogateescape"), bool(p.stat().st_mode & 0o111),
                                  hashlib.sha256(p.read_bytes()).hexdigest().encode()))
  return "sha256:" + h.hexdigest()


def project_version() -> str:
  import tomllib
  return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def base_digest(client, ref: str) -> tuple[str, bool]:
  """(digest, pinned): the registry digest of the base this build will use, or its local image ID when the image has no
  registry digest (a locally imported base). Pulls the base first when the daemon lacks it, so the digest is exact."""
  import docker
  from tinyperf.tooling.common import container
  if "@sha256:" in ref: return ref.split("@", 1)[1], True
  try:
    img = client.images.get(ref)
  except docker.errors.ImageNotFound:
    print(f"pulling base {ref}", flush=True)
    try: img = client.images.pull(ref)
    except docker.errors.APIError as e:
      raise UserError(f"base image {ref} is not on this daemon and cannot be pulled ({container.api_error(e)}); "
                      f"nothing was built. Load it (`docker load`, `docker import`) or pass --base-image.") from None
  repo = ref.rsplit(":", 1)[0] if ":" in ref.split("/")[-1] else ref
  for d in img.attrs.get("RepoDigests") or []:
    if d.split("@")[0] == repo: return d.split("@", 1)[1], False
  return img.id, False   # local image ID (sha256 of its config): exact, but not a registry digest


def main(args) -> int:
  from tinyperf.tooling.common import container
  if args.platform:
    cfg = load_config(*_split_platform(args.platform))
    vendor, closed = cfg["vendor"], cfg["division"] == "closed"
    served = [f"{cfg.benchmark}/{cfg.platform}"]
  else:
    vendor = args.vendor
    cfgs = I.platforms_of(vendor)
    closed = any(c["division"] == "closed" for c in cfgs)
    served = [f"{c.benchmark}/{c.platform}" for c in cfgs if c["division"] == "closed"]
  lock = I.load_lock()
  entry = lock["images"][vendor]
  ref = args.base_image or I.base_ref(entry)
  pinned_ref = "@sha256:" in ref
  if closed and not pinned_ref and not args.allow_unpinned:
    why = "images.lock.json has no digest for it" if not args.base_image else "--base-image is not pinned by digest"
    raise UserError(f"base {ref} is not pinned ({why}) and the {vendor} image serves closed submissions "
                    f"({', '.join(served)}); nothing was built. Run `tinyperf images pin` on a machine with registry "
                    f"access, or pass a base as repository:tag@sha256:..., or --allow-unpinned for a non-submission build.")
  vendor_base = ref.split("@")[0].rsplit(":", 1)[0] == entry["repository"]
  tag = args.tag or I.DEFAULT_TAG.format(vendor=vendor)
  client = container.connect(timeout=3600)
  digest, _ = base_digest(client, ref)
  git_sha = git_revision()
  gpu_libs_checked = vendor_base and vendor != "cpu"
  # the labels io.tinyperf.base.pinned and io.tinyperf.gpu_libs_checked come from build args too (the Dockerfile's one
  # LABEL step): the SDK's labels= would add a step per label, each a full filesystem copy on a vfs engine
  buildargs = {"BASE_IMAGE": ref, "BASE_DIGEST": digest, "BASE_PINNED": "true" if pinned_ref else "false",
               "TINYPERF_VERSION": project_version(), "TINYPERF_GIT_SHA": git_sha, "TINYGRAD_VERSION": I.tinygrad_version(),
               "SELFCHECK_GPU_LIBS": "require" if vendor_base else "skip",
               "GPU_LIBS_CHECKED": "true" if gpu_libs_checked else "false"}
  if not vendor_base and vendor != "cpu":
    print(f"NOTE: {ref} is not the {vendor} vendor image ({entry['repository']}); the image's GPU-library check will be "
          f"SKIPPED and this image cannot run the {vendor.upper()} backend.", flush=True)
  dockerfile = I.dockerfile_path(vendor)
  if not dockerfile.is_file() or dockerfile.read_text() != I.render_dockerfile(vendor, lock):
    raise UserError(f"{dockerfile.name} differs from what images.lock.json and tooling/prep/images.py render; run "
                    f"`tinyperf render` (and commit) before building. Nothing was built.")
  if args.extra_ca and not Path(args.extra_ca).is_file():
    raise UserError(f"--extra-ca {args.extra_ca}: no such file. Pass a PEM CA certificate (or unset TINYPERF_EXTRA_CA).")
  with extra_ca_in_context(args.extra_ca) as ca_copy:
    files = context_files(dockerfile.name)
    tree = code_tree(files)
    # the build's identity: everything it is made from (code, base, Dockerfile, settings), so one id is one recipe and a
    # rebuild of another recipe never takes over its record; its code tree goes into the image's tree as a file
    buildargs["TINYPERF_CODE_TREE"] = tree
    recipe = json.dumps([dockerfile.read_text(), sorted(buildargs.items())]).encode()
    build_id = buildargs["TINYPERF_BUILD_ID"] = f"{vendor}-{hashlib.sha256(recipe).hexdigest()[:16]}"
    print(f"building {tag} ({build_id}) from {dockerfile.name} on {ref} ({digest}), git {git_sha}, code {tree}", flush=True)
    command = " ".join(["tinyperf build", f"--platform {args.platform}" if args.platform else f"--vendor {vendor}",
                        *([f"--base-image {args.base_image}"] if args.base_image else []),
                        *(["--allow-unpinned"] if args.allow_unpinned else []), *([f"--tag {args.tag}"] if args.tag else []),
                        *([f"--extra-ca {args.extra_ca}"] if args.extra_ca else [])])
    identity = json.dumps({"code_tree": tree, "git_sha": git_sha, "files": len(files)}, indent=1) + "\n"
    res = container.build(client, ROOT, dockerfile.name, tag, buildargs, nocache=args.no_cache, command=command,
                          echo=lambda line: print(line, flush=True), files=files, extra_files={IMAGE_CODE_FILE: identity})
  record = {"build_id": build_id, "code_tree": tree, "tag": tag, "image_id": res.image_id, "vendor": vendor,
            "dockerfile": dockerfile.name, "base_image": ref, "base_digest": digest, "base_pinned": pinned_ref,
            "gpu_libs_checked": gpu_libs_checked, "git_sha": git_sha, "tinyperf_version": buildargs["TINYPERF_VERSION"],
            "tinygrad_version": buildargs["TINYGRAD_VERSION"], "extra_ca": bool(ca_copy),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": round(res.seconds, 1)}
  path = save_record(args.record, record)
  print(f"built {tag} = {res.image_id} in {res.seconds:.0f} s ({res.steps} steps); base {ref} ({digest}); record {path}",
        flush=True)
  return 0


def save_record(folder: Path, record: dict) -> Path:
  """folder/<build id>.json, one per build identity: a build of another recipe never replaces it, and a rebuild of the
  same recipe (--no-cache) adds its image ID to `image_ids`, every image ever built with this identity."""
  path = Path(folder) / f"{record['build_id']}.json"
  try: old = json.loads(path.read_text()) if path.is_file() else {}
  except (OSError, ValueError): old = {}   # a damaged record of this recipe: this build's replaces it
  ids = [i for i in (old.get("image_ids") if isinstance(old, dict) and isinstance(old.get("image_ids"), list) else [])
         if isinstance(i, str)]
  record["image_ids"] = ids + [record["image_id"]] * (record["image_id"] not in ids)
  return write_atomic(path, json.dumps(record, indent=1) + "\n", overwrite=True)


@contextmanager
def extra_ca_in_context(extra_ca: str | None):
  """--extra-ca copied into docker/certs (the build context's CA folder) for the build, removed after. Builds running at
  once in one checkout (nv and amd side by side) share the copy: each holds a shared lock on the folder while it builds,
  and only the build that ends last (the one that then gets the lock alone) removes it; removing it under a build still
  packing its context failed that build."""
  if not extra_ca:
    yield False
    return
  certs = ROOT / "docker" / "certs"
  ca, want = certs / "tinyperf-build-extra.crt", Path(extra_ca).read_bytes()
  fd = os.open(certs, os.O_RDONLY)
  try:
    while True:
      fcntl.flock(fd, fcntl.LOCK_SH)   # while any build holds it shared, none removes the copy
      if ca.is_file() and ca.read_bytes() == want: break
      fcntl.flock(fd, fcntl.LOCK_EX)   # alone: no build is packing its context while the copy is written
      # 0644 as a plain copy: the build stage reads it (the image never holds it: Dockerfile.* build stage)
      if not (ca.is_file() and ca.read_bytes() == want): write_atomic(ca, want, overwrite=True, mode=0o644)
    try: yield True
    finally:
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        ca.unlink(missing_ok=True)
      except BlockingIOError: pass   # another build still uses it and removes it when it ends
  finally: os.close(fd)


def _split_platform(platform: str) -> tuple[str, str]:
  """--platform accepts `P` (the first registered benchmark's config decides) or `BENCHMARK/P`."""
  if "/" in platform: b, p = platform.split("/", 1); return b, p
  return next(iter(BENCHMARKS)), platform
