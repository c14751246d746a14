#!/usr/bin/env bash
# bench/shards.sh — `kf shards build --jobs N` scaling: builds the embedded
# default's shard sets (configs/tiny.yaml: LM1B-like pad + OWT-like wrap,
# ~15 MB of text) from scratch with --jobs 1 and --jobs J (default 2),
# alternated, ROUNDS times (default 3), into a temporary directory; prints the
# best time of each, the speedup and MB of raw text per second per core, and
# checks both produced the same manifests. Goal (issue 2): speedup >= 1.8 on
# the 2-core machine.
# Usage: bench/shards.sh [J] [ROUNDS] [CONFIG]
set -euo pipefail
cd "$(dirname "$0")/.."
KF=${KF_BIN:-bin/kf}
J=${1:-2}; ROUNDS=${2:-3}; CONFIG=${3:-configs/tiny.yaml}
T=$(mktemp -d /tmp/kf_bench_shards.XXXXXX)
trap 'rm -rf "$T"' EXIT
export KF_QUIET=1
sets=$(awk '/^shards:/ {s = 1; next} s && /^[^ #]/ {s = 0} s && /^  [A-Za-z0-9._-]+:/ {sub(":", "", $1); print $1}' "$CONFIG")
run() {  # JOBS -> seconds; output in $T/jJOBS
  local over=() s
  for s in $sets; do over+=("shards.$s.out=$T/j$1/$s"); done
  local t0 t1; t0=$(date +%s.%N)
  "$KF" shards build "$CONFIG" --jobs "$1" --force "${over[@]}" >/dev/null
  t1=$(date +%s.%N)
  awk -v a="$t1" -v b="$t0" 'BEGIN {printf "%.3f", a - b}'
}
best1=999999; bestJ=999999
for ((r = 1; r <= ROUNDS; r++)); do
  t1=$(run 1); tJ=$(run "$J")
  echo "round $r: --jobs 1 ${t1}s   --jobs $J ${tJ}s"
  best1=$(awk -v a="$best1" -v b="$t1" 'BEGIN {print (b < a ? b : a)}')
  bestJ=$(awk -v a="$bestJ" -v b="$tJ" 'BEGIN {print (b < a ? b : a)}')
done
mb=0
for s in $sets; do
  cmp -s "$T/j1/$s/manifest.yaml" "$T/j$J/$s/manifest.yaml" || { echo "manifests of $s differ between --jobs 1 and $J"; exit 1; }
  b=$(awk '/raw_bytes:/ {s += $2} END {print s}' "$T/j1/$s/manifest.yaml")
  mb=$(awk -v a="$mb" -v b="$b" 'BEGIN {print a + b / 1e6}')
done
awk -v mb="$mb" -v t1="$best1" -v tj="$bestJ" -v j="$J" -v cpus="$(nproc)" 'BEGIN {
  printf "text: %.1f MB (sets: %s)  machine: %d CPUs\n", mb, "'"$(echo $sets)"'", cpus
  printf "--jobs 1: %.3f s  %.2f MB/s  (%.2f MB/s per core)\n", t1, mb / t1, mb / t1
  printf "--jobs %d: %.3f s  %.2f MB/s  (%.2f MB/s per core)\n", j, tj, mb / tj, mb / tj / j
  printf "speedup: %.2fx (goal >= 1.8x for --jobs 2)\n", t1 / tj
}'
