#!/usr/bin/env bash
# Make a real one-node Slurm cluster on this machine for the Slurm integration tests (tests/integration/test_slurm.py):
# install slurm-wlm and munge from Debian, write /etc/slurm/slurm.conf for one node (this host, with the CPU count and
# memory `slurmd -C` detects), start munged, slurmctld and slurmd without systemd, and wait until `sinfo` shows the node
# idle. No slurmdbd: accounting is off, so `sacct` does not work here (tinyperf does not need it).
#
# Usage (as root):   source scripts/ci_slurm.sh     # exports the variables the tests read
#                    scripts/ci_slurm.sh stop       # stop the daemons this script started
# Exports: TINYPERF_TEST_SLURM_PARTITION (the partition the tests submit to).
# Any failure leaves the variable unset, so the tests skip with the reason (or fail, with TINYPERF_REQUIRE_SLURM=1).
set -uo pipefail
_ts_dir="${TINYPERF_CI_CACHE:-/var/cache/tinyperf-ci}/slurm"
_ts_conf=/etc/slurm/slurm.conf
_ts_part=ci
_ts_marker="# written by tinyperf scripts/ci_slurm.sh"

_ts_stop() {
  # only what this script started: a cluster configured by its slurm.conf, and a munged it started
  grep -qF "$_ts_marker" "$_ts_conf" 2>/dev/null || return 0
  # scontrol shutdown stops slurmctld and every slurmd it knows; the pid files catch a daemon that did not answer
  scontrol shutdown >/dev/null 2>&1 && sleep 2
  local f pid
  for f in "$_ts_dir/slurmd.pid" "$_ts_dir/slurmctld.pid" $([ -f "$_ts_dir/munged.ours" ] && echo /run/munge/munged.pid); do
    pid="$(cat "$f" 2>/dev/null)" || continue
    kill "$pid" 2>/dev/null && echo "ci_slurm: stopped $(basename "$f" .pid) $pid"
    rm -f "$f"
  done
  rm -f "$_ts_dir/munged.ours"
}

_ts_node_state() { sinfo -h -N -p "$_ts_part" -o '%T' 2>/dev/null | head -1; }

_ts_setup() {
  local t0; t0=$(date +%s)
  if [ "$(id -u)" != 0 ]; then echo "ci_slurm: needs root (installs packages, starts slurmctld/slurmd)" >&2; return 1; fi
  local need=()
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null || need+=(slurm-wlm)
  command -v munged >/dev/null || need+=(munge)
  if [ ${#need[@]} -gt 0 ]; then
    echo "ci_slurm: installing ${need[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null) || {
      echo "ci_slurm: apt-get install ${need[*]} failed" >&2; return 1; }
  fi
  mkdir -p "$_ts_dir/ctld" "$_ts_dir/spool"

  # munge: the key is made by the Debian package; the daemon runs as its own user (it refuses to run as root)
  [ -s /etc/munge/munge.key ] || mungekey --create >/dev/null || { echo "ci_slurm: mungekey failed" >&2; return 1; }
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
    runuser -u munge -- /usr/sbin/munged || { echo "ci_slurm: munged did not start" >&2; return 1; }
    touch "$_ts_dir/munged.ours"
    local i; for i in $(seq 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
    munge -n | unmunge >/dev/null || { echo "ci_slurm: munge does not answer" >&2; return 1; }
  fi

  if [ -f "$_ts_conf" ] && ! grep -qF "$_ts_marker" "$_ts_conf"; then
    echo "ci_slurm: $_ts_conf exists and was not written by this script; not touching a real cluster's config" >&2
    return 1
  fi
  local host node name
  host="$(hostname -s)"
  # the node line exactly as slurmd detects this machine (CPUs, sockets, cores, RealMemory), so slurmd accepts it
  node="$(slurmd -C | head -1)"
  case "$node" in NodeName=*CPUs=*RealMemory=*) ;; *) echo "ci_slurm: unexpected 'slurmd -C' output: $node" >&2; return 1;; esac
  name="${node%% *}"; name="${name#NodeName=}"
  cat > "$_ts_conf.tmp" <<EOF
$_ts_marker: a one-node cluster on this host for CI
ClusterName=tinyperf-ci
# the address is given: the CI machine's hostname may not resolve
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$_ts_dir/ctld
SlurmdSpoolDir=$_ts_dir/spool
SlurmctldPidFile=$_ts_dir/slurmctld.pid
SlurmdPidFile=$_ts_dir/slurmd.pid
SlurmctldLogFile=$_ts_dir/slurmctld.log
SlurmdLogFile=$_ts_dir/slurmd.log
# linuxproc: no cgroup setup needed in a CI sandbox; it still finds every descendant of a task for scancel
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MpiDefault=none
$node State=UNKNOWN
PartitionName=$_ts_part Nodes=$name Default=YES MaxTime=INFINITE State=UP
EOF
  sed -i 's/^NodeName=\([^ ]*\)/NodeName=\1 NodeAddr=127.0.0.1/' "$_ts_conf.tmp"
  mv "$_ts_conf.tmp" "$_ts_conf"

  if ! scontrol ping 2>/dev/null | grep -q UP; then
    echo "ci_slurm: starting slurmctld (log: $_ts_dir/slurmctld.log)"
    slurmctld -c || { echo "ci_slurm: slurmctld did not start" >&2; tail -20 "$_ts_dir/slurmctld.log" >&2; return 1; }
  else
    scontrol reconfigure >/dev/null 2>&1
  fi
  if ! { [ -f "$_ts_dir/slurmd.pid" ] && kill -0 "$(cat "$_ts_dir/slurmd.pid")" 2>/dev/null; }; then
    echo "ci_slurm: starting slurmd (log: $_ts_dir/slurmd.log)"
    slurmd || { echo "ci_slurm: slurmd did not start" >&2; tail -20 "$_ts_dir/slurmd.log" >&2; return 1; }
  fi
  local state i
  for i in $(seq 60); do
    state="$(_ts_node_state)"
    # a node left down/drained by an earlier session's state is put back into service
    case "$state" in idle|mixed|allocated) break;; down*|drain*) scontrol update NodeName="$name" State=RESUME >/dev/null 2>&1;; esac
    sleep 1
  done
  state="$(_ts_node_state)"
  case "$state" in idle|mixed|allocated) ;; *)
    echo "ci_slurm: node not idle after 60 s (state '$state'); last lines of the logs:" >&2
    tail -10 "$_ts_dir/slurmctld.log" "$_ts_dir/slurmd.log" >&2; return 1;;
  esac
  export TINYPERF_TEST_SLURM_PARTITION="$_ts_part"
  echo "ci_slurm: ready in $(( $(date +%s) - t0 )) s: $(sinfo -h -N -o '%N %P %T cpus=%c mem=%m')"
}

if [ "${1:-}" = stop ]; then _ts_stop
elif ! _ts_setup; then
  unset TINYPERF_TEST_SLURM_PARTITION
  echo "ci_slurm: setup failed; the Slurm integration tests will skip (fail with TINYPERF_REQUIRE_SLURM=1)" >&2
fi
true
