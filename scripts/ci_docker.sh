#!/usr/bin/env bash
# Make a real Docker engine available for the container integration tests (tests/integration/test_containers.py) on a
# fresh Debian machine with no image registry: install the engine, docker-compose 1.29 and debootstrap from Debian's
# packages, start dockerd (no iptables, no bridge: what works unprivileged-ish in CI sandboxes; overlay2 storage where
# this kernel mounts overlayfs on /var/lib/docker's filesystem, else vfs, whose every build step copies the whole root
# filesystem: about a minute a step for the ~1 GB images), and import a minimal Debian bookworm base image built from
# Debian packages with debootstrap. TINYPERF_CI_STORAGE_DRIVER=vfs|overlay2 forces one.
#
# Usage (as root):   source scripts/ci_docker.sh     # exports the variables the tests read
#                    scripts/ci_docker.sh stop       # stop the dockerd this script started
# Exports: DOCKER_HOST, TINYPERF_TEST_BASE_IMAGE (the local base), TINYPERF_TEST_EXTRA_CA (CA bundle for pip in builds).
# Caches between CI steps and runs on the same machine: the debootstrap .debs and the rootfs tarball under
# $TINYPERF_CI_CACHE (default /var/cache/tinyperf-ci); the engine's own images stay in /var/lib/docker.
# Any failure leaves the variables unset, so the tests skip with the reason instead of failing obscurely.
set -uo pipefail
_tp_cache="${TINYPERF_CI_CACHE:-/var/cache/tinyperf-ci}"
_tp_base="${TINYPERF_TEST_BASE_IMAGE:-local/debian:bookworm}"
_tp_log="$_tp_cache/dockerd.log"

_tp_stop() {
  if [ -f "$_tp_cache/dockerd.pid" ]; then
    kill "$(cat "$_tp_cache/dockerd.pid")" 2>/dev/null && echo "ci_docker: stopped dockerd $(cat "$_tp_cache/dockerd.pid")"
    rm -f "$_tp_cache/dockerd.pid"
  fi
}

_tp_overlay_works() {
  # the probe dockerd's overlay2 needs: an overlayfs mount whose layers live on /var/lib/docker's filesystem
  mkdir -p /var/lib/docker
  local d; d=$(mktemp -d /var/lib/docker/.overlay-probe.XXXXXX) || return 1
  mkdir -p "$d/l" "$d/u" "$d/w" "$d/m"
  local ok=1
  mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" 2>/dev/null && { umount "$d/m"; ok=0; }
  rm -rf "$d"
  return $ok
}

_tp_start_dockerd() {
  echo "ci_docker: starting dockerd with $1 storage (log: $_tp_log)"
  # setsid: the daemon outlives this shell's job control but is stopped by `ci_docker.sh stop` (pid file)
  setsid dockerd --storage-driver="$1" --iptables=false --bridge=none >"$_tp_log" 2>&1 < /dev/null &
  echo $! > "$_tp_cache/dockerd.pid"
  local i
  for i in $(seq 60); do docker version >/dev/null 2>&1 && return 0; kill -0 "$(cat "$_tp_cache/dockerd.pid")" 2>/dev/null || break; sleep 1; done
  echo "ci_docker: dockerd ($1) did not come up; last lines of $_tp_log:" >&2; tail -20 "$_tp_log" >&2
  kill "$(cat "$_tp_cache/dockerd.pid")" 2>/dev/null; sleep 1
  return 1
}

_tp_setup() {
  local t0; t0=$(date +%s)
  if [ "$(id -u)" != 0 ]; then echo "ci_docker: needs root (installs packages, starts dockerd)" >&2; return 1; fi
  mkdir -p "$_tp_cache/debs"
  local need=()
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v docker-compose >/dev/null || need+=(docker-compose)
  [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
  if [ ${#need[@]} -gt 0 ]; then
    echo "ci_docker: installing ${need[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null) || {
      echo "ci_docker: apt-get install ${need[*]} failed" >&2; return 1; }
  fi
  export DOCKER_HOST="${DOCKER_HOST:-unix:///var/run/docker.sock}"
  if ! docker version >/dev/null 2>&1; then
    # a dockerd killed with its session leaves /var/run/docker.pid; if that pid now belongs to another process,
    # dockerd would refuse to start
    if [ -f /var/run/docker.pid ] && [ "$(cat "/proc/$(cat /var/run/docker.pid)/comm" 2>/dev/null)" != dockerd ]; then
      rm -f /var/run/docker.pid
    fi
    local driver="${TINYPERF_CI_STORAGE_DRIVER:-}"
    [ -n "$driver" ] || { _tp_overlay_works && driver=overlay2 || driver=vfs; }
    _tp_start_dockerd "$driver" || { [ "$driver" = overlay2 ] && [ -z "${TINYPERF_CI_STORAGE_DRIVER:-}" ] &&
      echo "ci_docker: dockerd with overlay2 failed; starting it with vfs" >&2 && _tp_start_dockerd vfs; } || return 1
  fi
  if ! docker image inspect "$_tp_base" >/dev/null 2>&1; then
    local tarball="$_tp_cache/debian-bookworm-minbase.tar"
    if [ ! -s "$tarball" ]; then
      local root="$_tp_cache/rootfs"
      rm -rf "$root"
      echo "ci_docker: debootstrap --variant=minbase bookworm (debs cached in $_tp_cache/debs)"
      debootstrap --variant=minbase --cache-dir="$_tp_cache/debs" bookworm "$root" http://deb.debian.org/debian \
        >"$_tp_cache/debootstrap.log" 2>&1 || { echo "ci_docker: debootstrap failed; see $_tp_cache/debootstrap.log" >&2; tail -5 "$_tp_cache/debootstrap.log" >&2; return 1; }
      rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
      tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
      rm -rf "$root"
    fi
    echo "ci_docker: importing $tarball as $_tp_base"
    docker import "$tarball" "$_tp_base" >/dev/null || { echo "ci_docker: docker import failed" >&2; return 1; }
  fi
  export TINYPERF_TEST_BASE_IMAGE="$_tp_base"
  # the builds' pip talks to PyPI through this machine's TLS setup: hand the host's CA bundle to the build
  [ -s /etc/ssl/certs/ca-certificates.crt ] && export TINYPERF_TEST_EXTRA_CA=/etc/ssl/certs/ca-certificates.crt
  echo "ci_docker: ready in $(( $(date +%s) - t0 )) s: DOCKER_HOST=$DOCKER_HOST base=$_tp_base ($(docker version -f '{{.Server.Version}}'), $(docker info -f '{{.Driver}}') storage)"
}

if [ "${1:-}" = stop ]; then _tp_stop
elif ! _tp_setup; then
  unset TINYPERF_TEST_BASE_IMAGE
  echo "ci_docker: setup failed; the container integration tests will skip" >&2
fi
# sourced: don't leave `set -u`/pipefail changes behind for the caller beyond what it had
true
