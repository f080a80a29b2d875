#!/bin/sh
# The steps every tinyperf image runs on top of its base image (Dockerfile.nv, Dockerfile.amd, Dockerfile.cpu share them,
# so the three images differ only in their base, nv's `kernels` step and their last lines). POSIX sh: the bases have no bash guarantee.
#   install.sh system   apt: Python 3.11 + venv, clang (tinygrad's CPU backend), CA certificates; the non-root user
#   install.sh python   /opt/tinyperf/venv with requirements.lock installed by hash (plus hash-pinned build tools)
#   install.sh kernels  nv: requirements-kernels.lock (Triton) into that venv, by hash
#   install.sh project  the tinyperf project itself, editable from /opt/tinyperf/src (no dependency resolution)
#   install.sh clean    remove the build files (the image's stage, which copies /opt/tinyperf from the build stage)
# Works on Debian bookworm (python3.11 is the default there) and Ubuntu 22.04 (python3.11 from universe), the bases of
# the CUDA 12.4 and ROCm 6.x images.
set -eu
BUILD=/opt/tinyperf/build
VENV=/opt/tinyperf/venv

# pip's options for the locked installs ($opts); an extra CA (TLS-intercepting proxies; docker/certs/README.md) is used
# by pip only, the trust store is not changed
pip_opts() {
  bundle=""
  if ls "$BUILD"/certs/*.crt >/dev/null 2>&1; then
    bundle="$BUILD/ca-bundle.pem"
    cat /etc/ssl/certs/ca-certificates.crt "$BUILD"/certs/*.crt > "$bundle"
    echo "install.sh: pip uses an extra CA bundle ($(ls "$BUILD"/certs/*.crt | wc -l) file(s) from docker/certs)"
  fi
  # --isolated: no pip.conf or PIP_* variable of the base image changes what is installed (so the CA goes in as --cert)
  opts="--isolated --disable-pip-version-check --no-cache-dir --timeout 120 --require-hashes --only-binary :all:"
  if [ -n "$bundle" ]; then opts="$opts --cert $bundle"; fi
}

[ $# -gt 0 ] || { echo "usage: install.sh system|python|kernels|project|clean ..." >&2; exit 2; }
for stage in "$@"; do
case "$stage" in
system)
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  # --force-unsafe-io: dpkg skips its fsync per unpacked file (an interrupted build is thrown away, never resumed);
  # the files installed are the same
  apt-get install -y --no-install-recommends -o Dpkg::Options::=--force-unsafe-io \
    python3.11 python3.11-venv clang ca-certificates
  apt-get clean
  rm -rf /var/lib/apt/lists/*
  python3.11 -c 'import sys; assert sys.version_info >= (3, 11), sys.version'
  command -v clang
  # the user runs are made as (the launcher may run as the host's UID instead; see tooling/common/container.py)
  if ! id tinyperf >/dev/null 2>&1; then
    if getent passwd 1000 >/dev/null; then
      echo "install.sh: UID 1000 is taken by $(getent passwd 1000 | cut -d: -f1) in this base; tinyperf gets another UID" >&2
      useradd --create-home --user-group --shell /bin/sh tinyperf
    else
      useradd --uid 1000 --create-home --user-group --shell /bin/sh tinyperf
    fi
  fi
  # AMD: /dev/kfd and /dev/dri/renderD* belong to the host's video/render groups; containers get the host's render GID
  # through group_add (compose.yaml: RENDER_GID), and `render` exists here so that the name is a valid default
  getent group render >/dev/null || groupadd --system render
  usermod -a -G video tinyperf 2>/dev/null || true
  ;;
python)
  python3.11 -m venv "$VENV"
  pip_opts
  # the lock's local-mirror lines (--find-links/--extra-index-url of the dev machines) mean nothing in here: drop them;
  # every file is still pinned by its hash
  grep -v -E '^--(find-links|extra-index-url|index-url)' "$BUILD/requirements.lock" > "$BUILD/requirements.image.lock"
  # shellcheck disable=SC2086  (word splitting of $opts is intended; no value has spaces)
  "$VENV/bin/pip" install $opts -r "$BUILD/build-requirements.lock"
  "$VENV/bin/pip" install $opts -r "$BUILD/requirements.image.lock"
  # the extra CA stays in this build stage until `project` removes $BUILD: `kernels` (nv) installs with it too
  ;;
kernels)
  # nv: Triton for KERNELS=triton, a step of its own after `python` (the Dockerfile copies its lock only there), so
  # every vendor built on one base shares the installed environment's layer
  pip_opts
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install $opts -r "$BUILD/requirements-kernels.lock"
  ;;
project)
  # editable, from the copied tree that stays in the image: tinyperf.benchmarks.common.config.ROOT is then /opt/tinyperf/src,
  # where the verbs that read repository files find them (run: systems/*.json; package: the implementation, tooling,
  # locks, Dockerfiles, compose.yaml it packs); bytecode compiled now, as the tree is read-only to the image's user
  cd /opt/tinyperf/src
  "$VENV/bin/pip" install --isolated --disable-pip-version-check --no-cache-dir --no-index --no-deps \
    --no-build-isolation -e .
  "$VENV/bin/pip" check
  "$VENV/bin/python" -m compileall -q /opt/tinyperf/src
  cd /
  root="$("$VENV/bin/python" -c 'from tinyperf.benchmarks.common.config import ROOT; print(ROOT)')"
  [ "$root" = /opt/tinyperf/src ] || { echo "install.sh: tinyperf resolves its repository to $root" >&2; exit 1; }
  # the extra CA came along with the source tree: the image copies /opt/tinyperf from this stage without it
  rm -rf "$BUILD" /opt/tinyperf/src/docker/certs/*.crt /opt/tinyperf/src/docker/certs/*.pem
  ;;
clean)
  # the image's own stage: only the system part ran here; the environment and project come from the build stage
  rm -rf "$BUILD"
  ;;
*) echo "install.sh: unknown stage $stage" >&2; exit 2 ;;
esac
done
