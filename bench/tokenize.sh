#!/usr/bin/env bash
# GPT-2 encoding throughput, whole process against whole process:
#   kf tokenize gpt2 < corpus.txt > ids
#   node tests/node/ref_tokenize.js tiktoken < corpus.txt > ids   (tiktoken "gpt2", encode_ordinary per line)
# on the nlp-corpus text (~9 MB, one paragraph per line), alternated for
# ROUNDS rounds; the ids must be identical. Prints wall and CPU (user+sys)
# time per run, the medians and the ratios; CPU time is the fairer figure on
# a loaded machine. Both sides are single-threaded (kf tokenize is; tiktoken's
# wasm runs on node's main thread).
# usage: bench/tokenize.sh [ROUNDS]   (default 5)
set -eu
cd "$(dirname "$0")/.."
KF=${KF_BIN:-bin/kf}
ROUNDS=${1:-5}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
node tests/node/corpus_text.js data/nlp-corpus >"$T/corpus.txt"
bytes=$(wc -c <"$T/corpus.txt")
echo "corpus: $(wc -l <"$T/corpus.txt") lines, $bytes bytes; $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
# run OUT CMD...: prints "wall cpu" seconds of the whole process
run() {
  local out=$1; shift
  local TIMEFORMAT='%R %U %S'
  { time "$@" <"$T/corpus.txt" >"$out" 2>/dev/null; } 2>"$T/time"
  awk '{ printf "%s %.3f", $1, $2 + $3 }' "$T/time"
}
mbs() { awk -v b="$bytes" -v s="$1" 'BEGIN { printf "%.1f", b / s / 1e6 }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
kf_w=() kf_c=() tt_w=() tt_c=()
for r in $(seq 1 "$ROUNDS"); do
  read -r kw kc <<<"$(run "$T/kf.ids" "$KF" tokenize gpt2 --vocab data/vocab/gpt2)"
  read -r tw tc <<<"$(run "$T/tt.ids" node tests/node/ref_tokenize.js tiktoken)"
  cmp -s "$T/kf.ids" "$T/tt.ids" || { echo "round $r: ids differ between kf and tiktoken" >&2; exit 1; }
  kf_w+=("$kw"); kf_c+=("$kc"); tt_w+=("$tw"); tt_c+=("$tc")
  echo "round $r: kf ${kw} s wall ($(mbs "$kw") MB/s), ${kc} s CPU   tiktoken ${tw} s wall ($(mbs "$tw") MB/s), ${tc} s CPU   ids identical"
done
kw=$(median "${kf_w[@]}"); tw=$(median "${tt_w[@]}"); kc=$(median "${kf_c[@]}"); tc=$(median "${tt_c[@]}")
echo "median wall: kf $(mbs "$kw") MB/s, tiktoken $(mbs "$tw") MB/s, kf/tiktoken = $(ratio "$tw" "$kw")x (goal >= 3x)"
echo "median CPU:  kf $(mbs "$kc") MB/s, tiktoken $(mbs "$tc") MB/s, kf/tiktoken = $(ratio "$tc" "$kc")x"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
