#!/bin/bash
# Starts a throw-away single-node Slurm cluster (munged + slurmctld + slurmd)
# with every file under BASE, for tests. Usage: slurm/local-up.sh BASE
# KF_SLURM_CPUS sets the node's CPU count (default: nproc; more lets tiny
# test jobs share cores). Then: export SLURM_CONF=BASE/slurm.conf. Stop it with slurm/local-down.sh BASE
# (by PID file). Slurm's ports (6817/6818) are fixed: one cluster per machine.
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge
# (scripts/setup.sh installs them).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BASE" >&2; exit 2; }
B=$(mkdir -p "$1" && cd "$1" && pwd); S=$B/slurm; M=$B/munge
here=$(cd "$(dirname "$0")" && pwd)
for c in munged slurmctld slurmd sbatch; do
  command -v "$c" >/dev/null || { echo "local-up: $c not found (run scripts/setup.sh)" >&2; exit 1; }
done
"$here/local-down.sh" "$B" >/dev/null 2>&1 || true    # stale daemons from an earlier run
rm -rf "$S" "$M"; mkdir -p "$S"/{state,spool,log,run} "$M"
sed -e "s#@BASE@#$B#g" -e "s#@CPUS@#${KF_SLURM_CPUS:-$(nproc)}#g" "$here/local.conf.in" > "$B/slurm.conf"
export SLURM_CONF=$B/slurm.conf
chmod go+x "$B"; chmod 711 "$M"   # munged insists: socket dirs o+x, not group/other-writable
dd if=/dev/urandom of="$M/munge.key" bs=1024 count=1 status=none; chmod 400 "$M/munge.key"
munged --key-file="$M/munge.key" --socket="$M/munge.socket.2" --pid-file="$M/munged.pid" \
       --log-file="$M/munged.log" --seed-file="$M/munged.seed"
for i in $(seq 50); do munge -n -S "$M/munge.socket.2" >/dev/null 2>&1 && break; sleep 0.1; done
slurmctld -f "$SLURM_CONF"
for i in $(seq 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.1; done
slurmd -f "$SLURM_CONF" -N localhost     # the hostname differs; -N names the node 'localhost'
for i in $(seq 150); do [ "$(sinfo -h -n localhost -o %t)" = idle ] && break; sleep 0.2; done
if [ "$(sinfo -h -n localhost -o %t)" != idle ]; then tail "$S"/log/*.log >&2; exit 1; fi
echo "local-up: slurm up: export SLURM_CONF=$SLURM_CONF"
