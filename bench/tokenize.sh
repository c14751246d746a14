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
now() { date +%s.%N; }
kf_s=() tt_s=()
for r in $(seq 1 "$ROUNDS"); do
  t0=$(now); "$KF" tokenize gpt2 --vocab data/vocab/gpt2 <"$T/corpus.txt" >"$T/kf.ids"; t1=$(now)
  node tests/node/ref_tokenize.js tiktoken <"$T/corpus.txt" >"$T/tt.ids" 2>/dev/null; t2=$(now)
  cmp -s "$T/kf.ids" "$T/tt.ids" || { echo "round $r: ids differ between kf and tiktoken" >&2; exit 1; }
  k=$(echo "$t1 - $t0" | bc -l); t=$(echo "$t2 - $t1" | bc -l)
  kf_s+=("$k"); tt_s+=("$t")
  printf 'round %d: kf %.3f s (%.1f MB/s)   tiktoken %.3f s (%.1f MB/s)   ids identical\n' "$r" "$k" \
    "$(echo "$bytes / $k / 1000000" | bc -l)" "$t" "$(echo "$bytes / $t / 1000000" | bc -l)"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
km=$(median "${kf_s[@]}"); tm=$(median "${tt_s[@]}")
printf 'median: kf %.1f MB/s, tiktoken %.1f MB/s, kf/tiktoken = %.2fx (goal >= 3x)\n' \
  "$(echo "$bytes / $km / 1000000" | bc -l)" "$(echo "$bytes / $tm / 1000000" | bc -l)" "$(echo "$tm / $km" | bc -l)"
