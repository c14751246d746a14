#!/bin/bash
# Starts a throw-away Slurm cluster (munged + slurmctld + slurmd) with every
# file under BASE, for tests. Usage: slurm/local-up.sh [--netns N] BASE
#
# Without --netns: one node, 'localhost' (127.0.0.1). Slurm's ports
# (6817/6818) are fixed: one such cluster per machine.
# With --netns N: N nodes n1..nN, each a slurmd in its own network namespace
# PREFIX-nI (address 10.87.0.1I on its veth 'kfeth'), and slurmctld and munged
# in PREFIX-ctl (10.87.0.1 on a bridge joining the veths), so nothing listens in
# the machine's own namespace (entered with nsenter --net: ip netns exec
# mounts another /sys, without the cgroup file system slurmd needs). PREFIX is
# $KF_SLURM_NETNS_PREFIX (default kfsn); namespaces named PREFIX-* left by a
# crashed run are removed (their processes killed) first, so hold a lock when
# several may run. Slurm's clients must run in PREFIX-ctl: nsenter --net=/run/netns/PREFIX-ctl sbatch ...
# KF_SLURM_CPUS sets each node's CPU count (default: nproc; more lets tiny
# test jobs share cores); KF_SLURM_NODE_TIMEOUT Slurm's SlurmdTimeout (default
# 300 s: a node silent that long is DOWN). Then: export SLURM_CONF=BASE/slurm.conf.
# slurm/local-node.sh BASE NODE restarts a node that died. Stop it with
# slurm/local-down.sh BASE. Needs root, iproute2 (--netns) and
# Debian's slurmctld, slurmd, slurm-client and munge (scripts/setup.sh).
case "${1:-}" in -h|--help) sed -n "2,20p" "$0" | cut -c3-; exit 0 ;; esac
set -euo pipefail
nodes=0
if [ "${1:-}" = --netns ]; then nodes=${2:-}; shift 2 || true; fi
if [ $# -ne 1 ] || ! [[ "$nodes" =~ ^[0-9]+$ ]] || [ "$nodes" -gt 9 ]; then
  echo "usage: $0 [--netns N (1-9)] BASE" >&2; exit 2
fi
B=$(mkdir -p "$1" && cd "$1" && pwd); S=$B/slurm; M=$B/munge
here=$(cd "$(dirname "$0")" && pwd)
for c in munged slurmctld slurmd sbatch; do
  command -v "$c" >/dev/null || { echo "local-up: $c not found (run scripts/setup.sh)" >&2; exit 1; }
done
"$here/local-down.sh" "$B" >/dev/null 2>&1 || true    # stale daemons from an earlier run
rm -rf "$S" "$M" "$B/netns"; mkdir -p "$S"/{state,spool,log,run,tmp} "$M"

P=${KF_SLURM_NETNS_PREFIX:-kfsn}
ctl=() names=(localhost)
if [ "$nodes" -gt 0 ]; then
  command -v ip >/dev/null || { echo "local-up: ip not found (apt-get install iproute2)" >&2; exit 1; }
  for ns in $(ip netns list | awk -v p="$P-" 'index($1, p) == 1 {print $1}'); do   # a crashed run's
    pids=$(ip netns pids "$ns"); [ -z "$pids" ] || kill -9 $pids
    ip netns del "$ns"
  done
  ip netns add "$P-ctl"; echo "$P-ctl" > "$B/netns"
  ip -n "$P-ctl" link set lo up
  ip -n "$P-ctl" link add br0 type bridge
  ip -n "$P-ctl" addr add 10.87.0.1/24 dev br0
  ip -n "$P-ctl" link set br0 up
  names=()
  for i in $(seq "$nodes"); do
    ns=$P-n$i; ip netns add "$ns"; echo "$ns" >> "$B/netns"
    ip link add "$P-v$i" netns "$P-ctl" type veth peer name kfeth netns "$ns"
    ip -n "$P-ctl" link set "$P-v$i" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "10.87.0.1$i/24" dev kfeth
    ip -n "$ns" link set kfeth up
    names+=("n$i")
  done
  ctl=(nsenter --net=/run/netns/"$P-ctl")
fi
cpus=${KF_SLURM_CPUS:-$(nproc)}
{
  sed -e "s#@BASE@#$B#g" -e "s#@SLURMD_TIMEOUT@#${KF_SLURM_NODE_TIMEOUT:-300}#g" \
      -e "s#@CTLHOST@#$([ "$nodes" -gt 0 ] && echo 'localhost(10.87.0.1)' || echo localhost)#" "$here/local.conf.in"
  for i in "${!names[@]}"; do
    addr=127.0.0.1; [ "$nodes" -gt 0 ] && addr=10.87.0.1$((i + 1))
    echo "NodeName=${names[$i]} NodeAddr=$addr CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=$(IFS=,; echo "${names[*]}") Default=YES MaxTime=INFINITE State=UP"
} > "$B/slurm.conf"
export SLURM_CONF=$B/slurm.conf
chmod go+x "$B"; chmod 711 "$M"   # munged insists: socket dirs o+x, not group/other-writable
dd if=/dev/urandom of="$M/munge.key" bs=1024 count=1 status=none; chmod 400 "$M/munge.key"
# (--netns: munged in the controller's namespace too, so that a crashed run's
# is removed with it; its socket is a file, reachable from every namespace)
"${ctl[@]}" munged --key-file="$M/munge.key" --socket="$M/munge.socket.2" --pid-file="$M/munged.pid" \
       --log-file="$M/munged.log" --seed-file="$M/munged.seed"
for i in $(seq 50); do munge -n -S "$M/munge.socket.2" >/dev/null 2>&1 && break; sleep 0.1; done
"${ctl[@]}" slurmctld -f "$SLURM_CONF"
for i in $(seq 100); do "${ctl[@]}" scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.1; done
for n in "${names[@]}"; do "$here/local-node.sh" "$B" "$n"; done
echo "local-up: slurm up (nodes ${names[*]}): export SLURM_CONF=$SLURM_CONF${ctl:+; clients: ${ctl[*]} CMD}"
