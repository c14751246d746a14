#!/bin/bash
# Stops the cluster started by slurm/local-up.sh BASE: the daemons by their
# PID files, then (--netns) every process left in its namespaces (job steps),
# and removes the namespaces. Usage: slurm/local-down.sh BASE
case "${1:-}" in -h|--help) sed -n "2,4p" "$0" | cut -c3-; exit 0 ;; esac
[ $# -eq 1 ] || { echo "usage: $0 BASE" >&2; exit 2; }
B=$1; S=$B/slurm; M=$B/munge
export SLURM_CONF=$B/slurm.conf
nss=(); [ -s "$B/netns" ] && mapfile -t nss < "$B/netns"
ctl=(); [ ${#nss[@]} -gt 0 ] && ctl=(nsenter --net=/run/netns/"${nss[0]}")
alive() { [ -s "$1" ] && [ "$(ps -o comm= -p "$(cat "$1")" 2>/dev/null)" = "$2" ]; }
# Cancel jobs first: job steps (slurmstepd) would outlive slurmd otherwise.
if alive "$S/run/slurmctld.pid" slurmctld && compgen -G "$S/run/slurmd-*.pid" >/dev/null; then
  "${ctl[@]}" scancel --quiet --partition=debug 2>/dev/null
  for i in $(seq 100); do [ -z "$("${ctl[@]}" squeue -h 2>/dev/null)" ] && break; sleep 0.2; done   # pending/running/completing
fi
stop() {  # PIDFILE COMM
  alive "$1" "$2" || { rm -f "$1"; return 0; }
  local pid; pid=$(cat "$1"); kill -TERM "$pid"
  for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$1"; echo "local-down: stopped $2 ($pid)"
}
for f in "$S"/run/slurmd-*.pid; do [ -e "$f" ] && stop "$f" slurmd; done
stop "$S/run/slurmctld.pid" slurmctld
stop "$M/munged.pid" munged
for ns in "${nss[@]}"; do   # every process in them was started by this cluster
  pids=$(ip netns pids "$ns" 2>/dev/null); [ -z "$pids" ] || kill -9 $pids
  ip netns del "$ns" 2>/dev/null && echo "local-down: removed namespace $ns"
done
rm -f "$B/netns"
exit 0
