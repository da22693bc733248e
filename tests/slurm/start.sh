#!/usr/bin/env bash
# Start (idempotently) a real SLURM cluster on this machine for the tests: Debian's slurmctld + slurmd +
# munge, run as root without systemd. Stand-in GPUs (character devices) let jobs ask for what a GPU cluster
# offers (--gpus=8, --cpus-per-task=80, --mem 480000) on a small box: nothing is bound or limited
# (task/none, proctrack/linuxproc, SlurmdParameters=config_overrides). No accounting daemon: use
# `--slurm-status-command squeue` with Snakemake (MinJobAge keeps finished jobs visible to squeue).
#
#   tests/slurm/start.sh            # start or verify; prints the node table; exit 0 when ready
#   FAKE_NODES=1 tests/slurm/start.sh
#   tests/slurm/stop.sh             # stop the daemons it started
#
# Exit status 77: this machine cannot run SLURM (not root, or no apt-get to install it); tests skip on it.
#
# Environment: FAKE_NODES (default 2: two slurmd on this host, <host>-n1 and <host>-n2, so multi-node jobs
# are real; one-node jobs run on either), FAKE_CPUS (96 per node), FAKE_GPUS (8 per node), FAKE_GPU_TYPE (h100),
# FAKE_MEM_MB (512000), FAKE_PARTITION (gpu). A run with other values rewrites the config and restarts.
set -euo pipefail

NNODES="${FAKE_NODES:-2}"
CPUS="${FAKE_CPUS:-96}"
GPUS="${FAKE_GPUS:-8}"
GPU_TYPE="${FAKE_GPU_TYPE:-h100}"
MEM_MB="${FAKE_MEM_MB:-512000}"
PARTITION="${FAKE_PARTITION:-gpu}"
RUN=/run/grpoflow-slurm            # pid files of the daemons this script started
DEVDIR=/var/lib/grpoflow-slurm/gpu # stand-in GPU devices
HOST="$(hostname -s)"

skip() { echo "local SLURM unavailable: $*" >&2; exit 77; }
[[ "$(id -u)" == 0 ]] || skip "needs root (slurmd runs as root here)"

if [[ "$NNODES" == 1 ]]; then NODES=("$HOST"); else
  NODES=(); for ((i = 1; i <= NNODES; i++)); do NODES+=("$HOST-n$i"); done
fi
NODELIST="$(IFS=,; echo "${NODES[*]}")"

# ---- packages ----
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v sbatch >/dev/null; then
  # Normally installed before pytest started (make test); this covers a plain pytest or a run of this script alone,
  # serialised with any other install (requirements/test-system-packages says why).
  msg="$(bash "$(dirname "$0")/../../requirements/test-system-packages" \
    slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge 2>&1)" || skip "${msg##*test-system-packages: }"
fi

mkdir -p "$RUN" "$DEVDIR" /etc/slurm /var/spool/slurmctld /var/log/slurm /run/munge
for ((i = 0; i < GPUS; i++)); do  # gres/gpu wants real character devices
  [[ -c "$DEVDIR/gpu$i" ]] || { rm -f "$DEVDIR/gpu$i"; mknod "$DEVDIR/gpu$i" c 1 3; }
done

alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# ---- munge ----
chown munge:munge /run/munge; chmod 0755 /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged --force
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  cp /run/munge/munged.pid "$RUN/munged.pid"
fi
munge -n | unmunge >/dev/null || { echo "munge does not work" >&2; exit 1; }

# ---- config ----
node_lines=""
port=6818
for n in "${NODES[@]}"; do
  where=""
  [[ "$NNODES" != 1 ]] && where=" NodeHostname=$HOST Port=$port"
  node_lines+="NodeName=$n$where NodeAddr=127.0.0.1 CPUs=$CPUS Boards=1 SocketsPerBoard=2 CoresPerSocket=$((CPUS / 2)) ThreadsPerCore=1 RealMemory=$MEM_MB Gres=gpu:$GPU_TYPE:$GPUS Features=$GPU_TYPE State=UNKNOWN"$'\n'
  port=$((port + 1))
done
conf="# written by grpoflow tests/slurm/start.sh
ClusterName=grpoflowci
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
MinJobAge=3600
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=30
${node_lines}PartitionName=$PARTITION Nodes=$NODELIST Default=YES MaxTime=INFINITE State=UP"
gres="AutoDetect=off
NodeName=$NODELIST Name=gpu Type=$GPU_TYPE File=$DEVDIR/gpu[0-$((GPUS - 1))]"

changed=0
[[ "$(cat /etc/slurm/slurm.conf 2>/dev/null)" == "$conf" ]] || { printf '%s\n' "$conf" >/etc/slurm/slurm.conf; changed=1; }
[[ "$(cat /etc/slurm/gres.conf 2>/dev/null)" == "$gres" ]] || { printf '%s\n' "$gres" >/etc/slurm/gres.conf; changed=1; }
if ((changed)); then
  # A different cluster shape: restart from a clean state (old node names would linger in the saved state).
  "$(dirname "$0")/stop.sh" --keep-munge >/dev/null
  rm -rf /var/spool/slurmctld/*
fi

# ---- daemons ----
alive "$RUN/slurmctld.pid" || slurmctld -i
for n in "${NODES[@]}"; do
  mkdir -p "/var/spool/slurmd/$n"
  if ! alive "$RUN/slurmd-$n.pid"; then
    if [[ "$NNODES" == 1 ]]; then slurmd; else slurmd -N "$n"; fi
  fi
done

# ---- ready? ----
ready=0
for _ in $(seq 80); do
  states="$(sinfo -h -N -o %t 2>/dev/null | sort -u | tr '\n' ' ')"
  if [[ -n "$states" ]] && ! grep -qvE '^(idle|mix|alloc)[*~#]?$' <<<"$(sinfo -h -N -o %t)"; then ready=1; break; fi
  if grep -qE 'drain|down|inval' <<<"$states"; then scontrol update nodename="$NODELIST" state=resume 2>/dev/null || true; fi
  sleep 0.5
done
sinfo -N -o "%N %P %t %c %m %G"
if ((!ready)); then
  echo "SLURM node(s) not ready: ${states:-none}" >&2
  tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd-*.log >&2 || true
  exit 1
fi
echo "local SLURM ready: $NNODES node(s) x $CPUS CPUs, gpu:$GPU_TYPE:$GPUS, partition $PARTITION"
