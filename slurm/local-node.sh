#!/bin/bash
# Starts the slurmd of one node of the cluster made by slurm/local-up.sh BASE
# (in the node's network namespace with --netns) and waits until Slurm has it
# in service. It also brings a node back after it died (its processes
# killed, as when a machine is lost): the dead slurmd's step state is cleared
# first. Slurm 22.05's mpi/pmix leaves its stepd.slurm.pmix.JOB.STEP socket
# and pmix.JOB.STEP directory in the spool and spmix_appdir_UID_JOB.STEP in
# TmpFS, and the job requeued after the failure (same job and step ids) then
# fails on that node ("Cannot bind() UNIX socket ...: Address already in use",
# "Cannot create client cli tmpdir ...: File exists"). A real node keeps its
# spool across a reboot: clear the same there before slurmd starts. A node
# still DOWN after registering is resumed (scontrol update State=RESUME).
# Usage: slurm/local-node.sh BASE NODE
case "${1:-}" in -h|--help) sed -n "2,13p" "$0" | cut -c3-; exit 0 ;; esac
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BASE NODE" >&2; exit 2; }
B=$(cd "$1" && pwd); node=$2; S=$B/slurm
export SLURM_CONF=$B/slurm.conf
grep -q "^NodeName=$node " "$SLURM_CONF" || { echo "local-node: no node '$node' in $SLURM_CONF" >&2; exit 2; }
nss=(); [ -s "$B/netns" ] && mapfile -t nss < "$B/netns"
ctl=() in=()
if [ ${#nss[@]} -gt 0 ]; then   # the first is the controller's, then n1, n2, ...
  ctl=(nsenter --net=/run/netns/"${nss[0]}"); in=(nsenter --net=/run/netns/"${nss[0]%-ctl}-$node")
fi
pidf=$S/run/slurmd-$node.pid
if [ -s "$pidf" ] && [ "$(ps -o comm= -p "$(cat "$pidf")" 2>/dev/null)" = slurmd ]; then
  echo "local-node: slurmd of $node is running ($(cat "$pidf"))" >&2; exit 1
fi
mkdir -p "$S/spool/$node" "$S/tmp/$node"
rm -rf "$S/spool/$node"/stepd.slurm.pmix.* "$S/spool/$node"/pmix.* "$S/tmp/$node"/spmix_appdir_*
"${in[@]}" slurmd -f "$SLURM_CONF" -N "$node"   # -N: the node's name, not the hostname
state() { "${ctl[@]}" sinfo -h -N -n "$node" -o %t 2>/dev/null | head -1; }
for i in $(seq 150); do
  case "$(state)" in
    idle|mix|alloc|comp) exit 0 ;;
    down|down~|drain|drng) [ "$i" -eq 25 ] && "${ctl[@]}" scontrol update NodeName="$node" State=RESUME ;;
  esac
  sleep 0.2
done
echo "local-node: $node not in service after 30 s (state $(state))" >&2
tail -n 5 "$S/log/slurmd-$node.log" >&2
exit 1
