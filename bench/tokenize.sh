#!/usr/bin/env bash
# GPT-2 encoding throughput, whole process against whole process:
#   kf tokenize gpt2 < corpus.txt > ids
#   node tests/node/ref_tokenize.js tiktoken < corpus.txt > ids   (tiktoken "gpt2", encode_ordinary per line)
# on the nlp-corpus text (~9 MB, one paragraph per line), alternated for
# ROUNDS rounds; the ids must be identical. Prints MB/s per run, the medians
# and the ratio. Single-threaded on both sides (kf tokenize is single-threaded;
# tiktoken's wasm runs on the node main thread).
# usage: bench/tokenize.sh [ROUNDS]   (default 5)
set -eu
cd "$(dirname "$0")/.."
KF=${KF_BIN:-bin/kf}
ROUNDS=${1:-5}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
node tests/node/corpus_text.js data/nlp-corpus >"$T/corpus.txt"
bytes=$(wc -c <"$T/corpus.txt")
echo "corpus: $(wc -l <"$T/corpus.txt") lines, $bytes bytes; $(nproc) CPUs; $(uname -m)"
# run OUT CMD...: wall seconds and CPU (user+sys) seconds of the whole process
run() {
  local out=$1; shift
  /usr/bin/time -f '%e %U %S' -o "$T/time" "$@" <"$T/corpus.txt" >"$out" 2>/dev/null
  awk '{ printf "%s %.3f", $1, $2 + $3 }' "$T/time"
}
kf_w=() kf_c=() tt_w=() tt_c=()
mbs() { echo "$bytes / $1 / 1000000" | bc -l; }
for r in $(seq 1 "$ROUNDS"); do
  read -r kw kc <<<"$(run "$T/kf.ids" "$KF" tokenize gpt2 --vocab data/vocab/gpt2)"
  read -r tw tc <<<"$(run "$T/tt.ids" node tests/node/ref_tokenize.js tiktoken)"
  cmp -s "$T/kf.ids" "$T/tt.ids" || { echo "round $r: ids differ between kf and tiktoken" >&2; exit 1; }
  kf_w+=("$kw"); kf_c+=("$kc"); tt_w+=("$tw"); tt_c+=("$tc")
  printf 'round %d: kf %.2f s wall (%.1f MB/s), %.2f s CPU   tiktoken %.2f s wall (%.1f MB/s), %.2f s CPU   ids identical\n' \
    "$r" "$kw" "$(mbs "$kw")" "$kc" "$tw" "$(mbs "$tw")" "$tc"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
kw=$(median "${kf_w[@]}"); tw=$(median "${tt_w[@]}"); kc=$(median "${kf_c[@]}"); tc=$(median "${tt_c[@]}")
printf 'median wall: kf %.1f MB/s, tiktoken %.1f MB/s, kf/tiktoken = %.2fx (goal >= 3x)\n' "$(mbs "$kw")" "$(mbs "$tw")" "$(echo "$tw / $kw" | bc -l)"
printf 'median CPU:  kf %.1f MB/s, tiktoken %.1f MB/s, kf/tiktoken = %.2fx\n' "$(mbs "$kc")" "$(mbs "$tc")" "$(echo "$tc / $kc" | bc -l)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
