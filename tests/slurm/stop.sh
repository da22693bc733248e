#!/usr/bin/env bash
# Stop the local SLURM daemons tests/slurm/start.sh started (by their pid files only; idempotent).
#   tests/slurm/stop.sh [--keep-munge]
set -euo pipefail
RUN=/run/grpoflow-slurm

stop_pidfile() {
  local f="$1" pid
  [[ -s "$f" ]] || { rm -f "$f"; return 0; }
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "stopped $(basename "$f" .pid) ($pid)"
  fi
  rm -f "$f"
}

[[ -d "$RUN" ]] || exit 0
for f in "$RUN"/slurmd-*.pid "$RUN"/slurmctld.pid; do
  [[ -e "$f" ]] && stop_pidfile "$f"
done
if [[ "${1:-}" != "--keep-munge" && -e "$RUN/munged.pid" ]]; then
  stop_pidfile "$RUN/munged.pid"
fi
exit 0
