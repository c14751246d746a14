#!/bin/bash
# Stops the cluster started by slurm/local-up.sh BASE, by its PID files only.
# Usage: slurm/local-down.sh BASE
[ $# -eq 1 ] || { echo "usage: $0 BASE" >&2; exit 2; }
B=$1; S=$B/slurm; M=$B/munge
export SLURM_CONF=$B/slurm.conf
alive() { [ -s "$1" ] && [ "$(ps -o comm= -p "$(cat "$1")" 2>/dev/null)" = "$2" ]; }
# Cancel jobs first: job steps (slurmstepd) would outlive slurmd otherwise.
if alive "$S/run/slurmctld.pid" slurmctld && alive "$S/run/slurmd.pid" slurmd; then
  scancel --quiet --partition=debug 2>/dev/null
  for i in $(seq 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done   # pending/running/completing
fi
stop() {  # PIDFILE COMM
  alive "$1" "$2" || { rm -f "$1"; return 0; }
  local pid; pid=$(cat "$1"); kill -TERM "$pid"
  for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$1"; echo "local-down: stopped $2 ($pid)"
}
stop "$S/run/slurmd.pid" slurmd
stop "$S/run/slurmctld.pid" slurmctld
stop "$M/munged.pid" munged
exit 0
