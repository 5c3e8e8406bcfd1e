#!/usr/bin/env bash
# Stop the daemons scripts/slurm/up.sh started in DIR (by the pids in its pid files); jobs still running die with slurmd.
set -uo pipefail
dir=${1:?usage: down.sh DIR}
for name in slurmd slurmctld munged; do
    pidfile="$dir/$name.pid"
    [[ -s $pidfile ]] || continue
    pid=$(<"$pidfile")
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
done
