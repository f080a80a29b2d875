"""Slurm's own client commands (sbatch, squeue, sinfo) and what the cluster says through them: its partitions and their
nodes, the tasks squeue still knows, and whether the nodes can see a results directory."""
from __future__ import annotations
import re
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

from tinyperf.tooling.common.errors import UserError

# Where Slurm states (squeue %T) put a task. Anything else has ended: COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL,...
QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
# Filesystem types (as /proc/mounts names them) that only this machine can see, and ones made to be mounted by many.
LOCAL_ONLY_FS = {"tmpfs", "ramfs", "devtmpfs", "overlay", "aufs", "squashfs"}
SHARED_FS = {"nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cephfs", "fuse.ceph", "glusterfs", "fuse.glusterfs",
             "cifs", "smb3", "panfs", "wekafs", "afs", "ocfs2", "gfs2", "fuse.juicefs"}


# ------------------------------------------------------------------------------------------------- Slurm commands
def require(tool: str, then: str = ""):
  if not shutil.which(tool):
    raise UserError(f"{tool} is not on PATH: tinyperf submits and follows Slurm runs with Slurm's own commands (sbatch, "
                    f"squeue, sinfo). Run tinyperf on a login node of the cluster, or add Slurm's bin directory to PATH "
                    f"(Debian/Ubuntu: apt-get install slurm-client, plus the cluster's slurm.conf and munge key); or run "
                    f"on this machine with --scheduler local.{' ' + then if then else ''}")


class NoAnswer(UserError):
  """A Slurm command did not answer in time: unlike a refusal, it may have done what it was asked."""


def slurm_command(*cmd: str, shown: str | None = None) -> str:
  """Run one Slurm client command; any failure is a UserError carrying Slurm's own message."""
  require(cmd[0])
  shown = shown or shlex.join(cmd)
  try:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=120)
  except subprocess.TimeoutExpired:
    raise NoAnswer(f"`{shown}` did not answer in 120 s; is the Slurm controller up (`scontrol ping`)?") from None
  if r.returncode != 0:
    msg = " ".join((r.stderr.strip() or r.stdout.strip() or "no message").split())
    raise UserError(f"`{shown}` failed (exit {r.returncode}): {msg}")
  return r.stdout


def partitions() -> tuple[list[str], str | None]:
  """(every partition, the default one) as sinfo lists them; the default carries a '*' suffix."""
  names, default = [], None
  for line in slurm_command("sinfo", "--all", "--noheader", "--format=%P").split():
    name = line.rstrip("*")
    if line.endswith("*"): default = name
    if name not in names: names.append(name)
  return names, default


def check_partition(partition: str | None) -> str:
  names, default = partitions()
  if partition is None:
    if default is None:
      raise UserError(f"this cluster has no default partition; pass --partition (one of: {', '.join(names) or 'none'}). "
                      f"Nothing was submitted.")
    return default
  if partition not in names:
    raise UserError(f"partition {partition!r} is unknown to this cluster (sinfo lists: {', '.join(names) or 'none'}); "
                    f"pass one of those to --partition. Nothing was submitted.")
  return partition


def partition_nodes(partition: str) -> list[tuple[str, str, str]]:
  """(node name, hostname, address) of every node of a partition."""
  out = slurm_command("sinfo", "--noheader", "--Node", f"--partition={partition}", "--format=%N|%n|%o")
  return sorted({tuple(l.split("|")) for l in out.splitlines() if l.count("|") == 2})


def queue(job_name: str) -> dict[tuple[str, int], tuple[str, str]]:
  """(array job id, task index) -> (state, node or reason) for every task of jobs with this name that slurmctld still
  knows: queued and running ones, and those that ended less than MinJobAge (default 5 min) ago. Jobs are filtered by
  name rather than id because squeue refuses a job id it has forgotten."""
  return parse_squeue(slurm_command("squeue", "--noheader", "--array", "--states=all", f"--name={job_name}",
                              "--format=%F|%K|%T|%N|%r"))


def parse_squeue(out: str) -> dict[tuple[str, int], tuple[str, str]]:
  tasks = {}
  for line in out.splitlines():
    parts = line.strip().split("|")
    if len(parts) != 5 or not parts[1].isdigit(): continue  # not an array task
    job, index, state, nodes, reason = parts
    tasks[(job, int(index))] = (state, nodes if state in RUNNING else reason)
  return tasks


# ---------------------------------------------------------------------------------------------- the shared results
def mount_of(path: Path) -> tuple[str, str]:
  """(filesystem type, mount point) of the mount holding path, from /proc/mounts (the longest matching mount point;
  the last one listed wins when mounts are stacked)."""
  path, best = str(Path(path).resolve()), ("unknown", "/")
  try: lines = Path("/proc/mounts").read_text().splitlines()
  except OSError: return best
  best_len = -1
  for line in lines:
    f = line.split()
    if len(f) < 3: continue
    mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[1])  # /proc/mounts writes a space as \040
    if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= best_len:
      best, best_len = (f[2], mnt), len(mnt)
  return best


def _this_host(node: tuple[str, str, str]) -> bool:
  me = socket.gethostname()
  return bool({*node} & {me, me.split(".")[0], socket.getfqdn(), "localhost", "127.0.0.1", "::1"})


def check_shared(results: Path, partition: str, assume_shared: bool, nodes: list | None = None):
  """Refuse, before submitting, a results directory the nodes cannot write into. What can be told from here: memory and
  container filesystems are this machine's alone; NFS, Lustre, GPFS, ... are shared; a local disk is fine only when the
  partition's nodes are all this machine. Whether a shared filesystem is mounted at the same path on every node cannot
  be seen from here: a task on a node without it fails at once and `tinyperf status` says so. `nodes` (name, hostname,
  address) defaults to what sinfo lists for the partition."""
  if assume_shared: return
  fstype, mnt = mount_of(results)
  fix = "put --results on a filesystem that every node mounts at the same path (NFS, Lustre, GPFS, BeeGFS, ...)"
  if fstype in LOCAL_ONLY_FS:
    raise UserError(f"results directory {results} is on {fstype} (mounted at {mnt}), which exists on this machine only, "
                    f"so the compute nodes cannot write into it. Nothing was submitted: {fix}.")
  if fstype in SHARED_FS: return
  others = [n[0] for n in (partition_nodes(partition) if nodes is None else nodes) if not _this_host(n)]
  if others:
    names = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
    raise UserError(f"results directory {results} is on a local {fstype} filesystem (mounted at {mnt}), but partition "
                    f"{partition} has nodes other than this machine ({names}) "
                    f"that cannot see it. Nothing was submitted: {fix}, or pass --assume-shared if it is shared in a "
                    f"way tinyperf cannot tell (e.g. this machine exports it over NFS).")
