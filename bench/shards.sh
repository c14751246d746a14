#!/usr/bin/env bash
# bench/shards.sh — `kf shards build --jobs N` scaling. Builds the embedded
# default's two sets (as configs/tiny.yaml: Brown sentences -> lm1b detok +
# GPT-2 + pad 128; nlp-corpus in OWT's nested tar.xz -> GPT-2 + wrap 128), with
# every input listed REPEAT times (default 4: ~60 MB of text, so start-up
# costs such as loading the vocabulary do not dominate), from scratch (into
# an empty output directory) with --jobs 1 and --jobs J (default 2),
# alternated ROUNDS times (default 7).
# Prints the best time of each, the speedup and MB of raw text per second per
# core, and checks both produced the same manifests. The speedup is given as
# best-of (best / best), median / median, and the median of each round's own
# ratio: the two runs of a round are seconds apart, so that one is the least
# disturbed by a VM whose speed drifts (seen here: the same binary 20% apart
# a minute later). Goal: speedup >= 1.8 for --jobs 2 on a 2-core
# machine.
# Usage: bench/shards.sh [J] [ROUNDS] [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/.."
KF=${KF_BIN:-bin/kf}
J=${1:-2}; ROUNDS=${2:-7}; REPEAT=${3:-4}
for f in data/text/brown.txt data/text/owt-tiny/openwebtext.tar.xz data/vocab/gpt2/vocab.json; do
  [ -f "$f" ] || { echo "bench/shards.sh: $f missing (run scripts/setup.sh)"; exit 1; }
done
T=$(mktemp -d /tmp/kf_bench_shards.XXXXXX)
trap 'rm -rf "$T"' EXIT
export KF_QUIET=1
rep() { local i; for ((i = 0; i < REPEAT; i++)); do printf '      - {path: %s, format: %s}\n' "$1" "$2"; done; }
cat > "$T/cfg.yaml" <<EOF
shards:
  lm1b:
    out: $T/out/lm1b
    tokenizer: gpt2
    vocab: data/vocab/gpt2
    packing: pad
    seq_len: 128
    detok: lm1b
    docs_per_shard: 2048
    inputs:
$(rep data/text/brown.txt lines)
    valid: {last: 2000}
  owt:
    out: $T/out/owt
    tokenizer: gpt2
    vocab: data/vocab/gpt2
    packing: wrap
    seq_len: 128
    docs_per_shard: 250
    inputs:
$(rep data/text/owt-tiny/openwebtext.tar.xz text)
    valid: {last: 500}
EOF
run() {  # JOBS -> seconds; the manifests stay in $T/jJOBS
  # from scratch: the last run's output is removed and synced first, untimed
  # (replacing existing shards would time their deletion too)
  rm -rf "$T/out"; sync -f "$T"
  local t0 t1; t0=$(date +%s.%N)
  "$KF" shards build "$T/cfg.yaml" --jobs "$1" >/dev/null
  t1=$(date +%s.%N)
  mkdir -p "$T/j$1"; cp "$T/out/lm1b/manifest.yaml" "$T/j$1/lm1b"; cp "$T/out/owt/manifest.yaml" "$T/j$1/owt"
  awk -v a="$t1" -v b="$t0" 'BEGIN {printf "%.3f", a - b}'
}
all1=(); allJ=()
for ((r = 1; r <= ROUNDS; r++)); do
  t1=$(run 1); tJ=$(run "$J")
  echo "round $r: --jobs 1 ${t1}s   --jobs $J ${tJ}s   ratio $(awk -v a="$t1" -v b="$tJ" 'BEGIN {printf "%.2f", a / b}')"
  all1+=("$t1"); allJ+=("$tJ")
done
best() { printf '%s\n' "$@" | sort -g | head -n 1; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
best1=$(best "${all1[@]}"); bestJ=$(best "${allJ[@]}")
med1=$(median "${all1[@]}"); medJ=$(median "${allJ[@]}")
ratios=(); for ((r = 0; r < ROUNDS; r++)); do ratios+=("$(awk -v a="${all1[r]}" -v b="${allJ[r]}" 'BEGIN {print a / b}')"); done
medr=$(median "${ratios[@]}")
for s in lm1b owt; do
  cmp -s "$T/j1/$s" "$T/j$J/$s" || { echo "manifests of $s differ between --jobs 1 and $J"; exit 1; }
done
mb=$(awk '/raw_bytes:/ {s += $2} END {print s / 1e6}' "$T/j1/lm1b" "$T/j1/owt")
awk -v mb="$mb" -v t1="$best1" -v tj="$bestJ" -v m1="$med1" -v mj="$medJ" -v mr="$medr" -v rounds="$ROUNDS" -v j="$J" -v cpus="$(nproc)" -v rep="$REPEAT" 'BEGIN {
  printf "text: %.1f MB (inputs x%d), CPUs available: %d, load: %s\n", mb, rep, cpus, "'"$(cut -d' ' -f1-3 /proc/loadavg)"'"
  printf "--jobs 1: %.3f s  %.2f MB/s  (%.2f MB/s per core)\n", t1, mb / t1, mb / t1
  printf "--jobs %d: %.3f s  %.2f MB/s  (%.2f MB/s per core)\n", j, tj, mb / tj, mb / tj / j
  printf "speedup: %.2fx median of %d rounds'"'"' ratios, %.2fx best-of, %.2fx median/median (goal >= 1.8x for --jobs 2)\n", mr, rounds, t1 / tj, m1 / mj
}'
