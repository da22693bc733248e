#!/usr/bin/env bash
# grpoflow's multi-node Ray launcher for verl inside a SLURM allocation (N nodes x 1 task x G GPUs).
#
#   ray_slurm.sh --nodes N --gpus-per-node G -- python -m verl.trainer.main_ppo ... trainer.nnodes=N
#
# 1. reads the job's node list (squeue + scontrol show hostnames: the Snakemake SLURM plugin strips
#    SLURM_JOB_NODELIST), the first node is the head;
# 2. starts one `ray start --block` per node, each in its own `srun --overlap` step pinned to that node (head
#    first, then the workers attach to it), with the environment of this script exported to every node;
# 3. waits until Ray reports N nodes and N x G GPUs;
# 4. runs the trainer on the head node with RAY_ADDRESS set (verl attaches instead of starting its own Ray);
# 5. always tears Ray down (trap on EXIT and on TERM/INT/USR1/USR2): trainer first, then every node's Ray, so a
#    failed, finished or preempted job never leaves Ray holding GPUs. Exit status: the trainer's.
#
# Environment knobs (all optional):
#   GRPOFLOW_PYTHON              python with ray and verl (default: python on PATH)
#   GRPOFLOW_RAY_PORT            head GCS port (default 6379)
#   GRPOFLOW_RAY_HEAD_IP         head address (default: first non-loopback IPv4 of the head node)
#   GRPOFLOW_RAY_HEAD_IFACE      or: the head node's interface whose IPv4 address to use (e.g. ib0 for InfiniBand; the
#                                first non-loopback address may be a management network the other nodes cannot reach).
#                                Per experiment (so per job, whichever node is the head): verl.env in the config
#   GRPOFLOW_RAY_CPUS_PER_NODE   CPUs Ray may use per node (default: the job's CPUs / nodes, from squeue)
#   GRPOFLOW_RAY_WAIT_S          how long to wait for all nodes and GPUs (default 600)
#   GRPOFLOW_RAY_TMPDIR          node-local dir for Ray's session files (default /tmp)
#   GRPOFLOW_RAY_START_ARGS      extra `ray start` arguments for every node (e.g. --object-store-memory=...)
#   GRPOFLOW_RAY_HEAD_ARGS       extra `ray start` arguments for the head only (e.g. --dashboard-port=8266)
#   GRPOFLOW_STOP_GRACE_S        seconds the trainer and Ray get to stop before being killed (default 60)
set -euo pipefail

log() { echo "[ray_slurm $(date +%H:%M:%S)] $*" >&2; }
die() { echo "grpoflow: error: $*" >&2; exit 1; }

NODES_EXPECTED=""
GPUS=""
while (($#)); do
  case "$1" in
    --nodes) NODES_EXPECTED="$2"; shift 2 ;;
    --gpus-per-node) GPUS="$2"; shift 2 ;;
    --) shift; break ;;
    *) die "ray_slurm.sh: unknown option $1 (usage: ray_slurm.sh --nodes N --gpus-per-node G -- TRAINER...)" ;;
  esac
done
(($#)) || die "ray_slurm.sh: no trainer command after --"
[[ -n "$GPUS" ]] || die "ray_slurm.sh: --gpus-per-node is required"
[[ -n "${SLURM_JOB_ID:-}" ]] || die "ray_slurm.sh runs inside a SLURM job (SLURM_JOB_ID is not set)"

PY="${GRPOFLOW_PYTHON:-python}"
PORT="${GRPOFLOW_RAY_PORT:-6379}"
WAIT_S="${GRPOFLOW_RAY_WAIT_S:-600}"
GRACE_S="${GRPOFLOW_STOP_GRACE_S:-60}"
TMP_ROOT="${GRPOFLOW_RAY_TMPDIR:-/tmp}"
# Token authentication: with a token file in ~/.ray (any local `ray.init()` writes one) Ray switches it on for
# the head but not for clients that do not ask for it, so decide here, for every node and the trainer alike: on,
# with a fresh token for this job shared through the environment (anyone who reaches the head's port could
# otherwise run code as you), unless RAY_AUTH_MODE / RAY_AUTH_TOKEN(_PATH) are set.
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"
if [[ "$RAY_AUTH_MODE" == token && -z "${RAY_AUTH_TOKEN:-}" && -z "${RAY_AUTH_TOKEN_PATH:-}" ]]; then
  RAY_AUTH_TOKEN="$("$PY" -c 'import secrets; print(secrets.token_hex(32))')"
  export RAY_AUTH_TOKEN
fi
# Ray drains a node for up to 30 s on SIGTERM (for Ray Serve requests); at teardown the trainer has already
# exited, so there is nothing to drain.
export RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="${RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S:-0}"
read -r -a EXTRA <<<"${GRPOFLOW_RAY_START_ARGS:-}"
read -r -a HEAD_EXTRA <<<"${GRPOFLOW_RAY_HEAD_ARGS:-}"

# ---- nodes ----------------------------------------------------------------------------------------------------
nodelist="$(squeue -h -j "$SLURM_JOB_ID" -o %N)" || die "squeue cannot read job $SLURM_JOB_ID's node list"
mapfile -t NODES < <(scontrol show hostnames "$nodelist")
N=${#NODES[@]}
((N > 0)) || die "job $SLURM_JOB_ID has no nodes (squeue said: '$nodelist')"
if [[ -n "$NODES_EXPECTED" && "$N" != "$NODES_EXPECTED" ]]; then
  die "the job has $N node(s) (${NODES[*]}) but trainer.nnodes = $NODES_EXPECTED: request resources.nodes = $NODES_EXPECTED (nodes: in the rule's resources)"
fi
HEAD="${NODES[0]}"
CPUS="${GRPOFLOW_RAY_CPUS_PER_NODE:-}"
if [[ -z "$CPUS" ]]; then
  total="$(squeue -h -j "$SLURM_JOB_ID" -o %C)"
  CPUS=$((total / N))
fi
log "job $SLURM_JOB_ID: $N node(s): ${NODES[*]}; head $HEAD; per node $GPUS GPU(s), $CPUS CPU(s); Ray auth: $RAY_AUTH_MODE"

# One task on one node; --overlap so it shares the job's resources with the other steps, all CPUs of the node's
# allocation (else a step gets 1 CPU), all of its memory (--mem=0); GPUs: a step gets all of the node's GRES.
on_node() {
  local node="$1"; shift
  srun --overlap --nodes=1 --ntasks=1 -w "$node" --cpus-per-task="$CPUS" --mem=0 --export=ALL --input=none \
    --kill-on-bad-exit=0 "$@"
}

# ---- teardown (always) ----------------------------------------------------------------------------------------
RAY_PIDS=()     # the `srun ... ray start --block` clients, one per node
OUT_PIDS=()     # their output prefixers
STEP_NAME="grpoflow-ray-$SLURM_JOB_ID"
FIFO_DIR="$(mktemp -d "${TMPDIR:-/tmp}/grpoflow-ray.XXXXXX")"
TRAINER_PID=""
WAITER_PID=""

wait_gone() {  # wait_gone SECONDS PID... : true when all exited in time
  local deadline=$((SECONDS + $1)); shift
  local pid
  for pid in "$@"; do
    while kill -0 "$pid" 2>/dev/null; do
      ((SECONDS < deadline)) || return 1
      sleep 0.5
    done
  done
}

teardown() {
  local rc=$?
  trap - EXIT TERM INT USR1 USR2
  set +e
  [[ -n "$WAITER_PID" ]] && kill "$WAITER_PID" 2>/dev/null
  if [[ -n "$TRAINER_PID" ]] && kill -0 "$TRAINER_PID" 2>/dev/null; then
    log "stopping the trainer (pid $TRAINER_PID)"
    kill -TERM -- "-$TRAINER_PID" 2>/dev/null || kill -TERM "$TRAINER_PID" 2>/dev/null
    wait_gone "$GRACE_S" "$TRAINER_PID" || kill -KILL -- "-$TRAINER_PID" 2>/dev/null
  fi
  if ((${#RAY_PIDS[@]})); then
    log "stopping Ray on ${#RAY_PIDS[@]} node(s)"
    # TERM to the tasks of the Ray steps (not to srun, which would abort the step and have SLURM kill Ray after
    # KillWait): `ray start --block` stops its node's processes, then each step ends by itself.
    local steps
    steps="$(squeue -h -s -j "$SLURM_JOB_ID" -o "%i %j" 2>/dev/null | awk -v p="$STEP_NAME" '$2 == p {print $1}')"
    [[ -n "$steps" ]] && scancel --signal=TERM $steps 2>/dev/null
    if ! wait_gone "$GRACE_S" "${RAY_PIDS[@]}"; then
      log "Ray did not stop within ${GRACE_S}s: aborting its job steps"
      kill -TERM "${RAY_PIDS[@]}" 2>/dev/null
      wait_gone 30 "${RAY_PIDS[@]}" || kill -KILL "${RAY_PIDS[@]}" 2>/dev/null
    fi
    wait "${RAY_PIDS[@]}" 2>/dev/null
    wait "${OUT_PIDS[@]}" 2>/dev/null  # the last lines of Ray's output, before ours
    log "Ray stopped"
  fi
  rm -rf "$FIFO_DIR"
  exit "$rc"
}
on_signal() {
  log "received SIG$1: shutting down"
  exit $((128 + $(kill -l "$1")))
}
trap teardown EXIT
for s in TERM INT USR1 USR2; do trap "on_signal $s" "$s"; done

# ---- start Ray ------------------------------------------------------------------------------------------------
if [[ -n "${GRPOFLOW_RAY_HEAD_IP:-}" ]]; then
  HEAD_IP="$GRPOFLOW_RAY_HEAD_IP"
elif [[ -n "${GRPOFLOW_RAY_HEAD_IFACE:-}" ]]; then
  HEAD_IP="$(on_node "$HEAD" ip -o -4 addr show dev "$GRPOFLOW_RAY_HEAD_IFACE" 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}' || true)"
  [[ -n "$HEAD_IP" ]] || die "no IPv4 address on interface $GRPOFLOW_RAY_HEAD_IFACE of the head node $HEAD (ip -o -4 addr): set verl.env.GRPOFLOW_RAY_HEAD_IFACE to one of its interfaces"
else
  ips="$(on_node "$HEAD" hostname -I 2>/dev/null || true)"
  HEAD_IP=""
  for ip in $ips; do
    if [[ "$ip" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ && "$ip" != 127.* ]]; then HEAD_IP="$ip"; break; fi
  done
  [[ -n "$HEAD_IP" ]] || HEAD_IP="$(on_node "$HEAD" hostname --ip-address | awk '{print $1}')"
fi
[[ -n "$HEAD_IP" ]] || die "cannot determine the head node's IP address; set GRPOFLOW_RAY_HEAD_IP"
ADDRESS="$HEAD_IP:$PORT"

start_ray() {  # start_ray INDEX NODE ARGS...
  local i="$1" node="$2"; shift 2
  local fifo="$FIFO_DIR/node$i"
  mkfifo "$fifo"
  sed -u "s/^/[ray $node] /" <"$fifo" >&2 &
  OUT_PIDS+=("$!")
  # A node-local session dir per node: also keeps two Ray nodes apart when they share a host.
  on_node "$node" --job-name="$STEP_NAME" "$PY" -m ray.scripts.scripts start --block --disable-usage-stats \
    --num-cpus="$CPUS" --num-gpus="$GPUS" --temp-dir="$TMP_ROOT/ray-$SLURM_JOB_ID-$i" "${EXTRA[@]}" "$@" >"$fifo" 2>&1 &
  RAY_PIDS+=("$!")
}

wait_cluster() {  # wait_cluster NODES GPUS: in the background, so a stop signal is handled at once
  "$PY" -m grpoflow.backends.verl.ray_cluster wait --address "$ADDRESS" --nodes "$1" --gpus "$2" --timeout "$WAIT_S" \
    --pids "${RAY_PIDS[@]}" &
  WAITER_PID=$!
  local rc=0
  wait "$WAITER_PID" || rc=$?
  WAITER_PID=""
  return "$rc"
}

log "starting the Ray head on $HEAD ($ADDRESS${GRPOFLOW_RAY_HEAD_IFACE:+, interface $GRPOFLOW_RAY_HEAD_IFACE})"
start_ray 0 "$HEAD" --head --node-ip-address="$HEAD_IP" --port="$PORT" "${HEAD_EXTRA[@]}"
wait_cluster 1 "$GPUS" || die "the Ray head on $HEAD did not come up (its output is above)"
for ((i = 1; i < N; i++)); do
  log "starting a Ray worker on ${NODES[$i]}"
  start_ray "$i" "${NODES[$i]}" --address="$ADDRESS"
done
wait_cluster "$N" $((N * GPUS)) || die "Ray did not reach $N node(s) x $GPUS GPU(s) (worker output is above)"

# ---- the trainer ----------------------------------------------------------------------------------------------
export RAY_ADDRESS="$ADDRESS"
log "running the trainer on $HEAD: $*"
setsid "$@" &
TRAINER_PID=$!
set +e
wait "$TRAINER_PID"
rc=$?
set -e
TRAINER_PID=""
log "trainer exited with status $rc"
exit "$rc"
