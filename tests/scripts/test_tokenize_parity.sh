#!/usr/bin/env bash
# Parity of `kf tokenize` with the real reference libraries, run at test time
# by tests/node/ref_tokenize.js (HuggingFace tokenizers via
# @anush008/tokenizers, and tiktoken): GPT-2 BPE and BERT WordPiece ids must be
# identical line for line on every paragraph of data/nlp-corpus (>= 5 MB) and
# on the tricky set of tests/node/tricky_text.js, and on every assigned code
# point in context (tests/node/codepoints_text.js). A missing reference
# (node, the npm packages, the data) is a failure, not a skip.
set -u
cd "$(dirname "$0")/../.."
KF=${KF_BIN:-bin/kf}
VOCAB=data/vocab/gpt2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. tests/scripts/lib_check.sh

# same_lines NAME EXPECTED ACTUAL: identical line by line (prints the first differences)
same_lines() {
  local name=$1 want=$2 got=$3
  local nw ng; nw=$(wc -l <"$want"); ng=$(wc -l <"$got")
  if [ "$nw" -ne "$ng" ]; then bad "$name: $nw reference lines, $ng from kf"; return; fi
  if [ "$nw" -eq 0 ]; then bad "$name: no output"; return; fi
  local ndiff
  ndiff=$(paste "$want" "$got" | awk -F '\t' '$1 != $2 { n++; if (n <= 3) printf "  line %d:\n    want %s\n    got  %s\n", NR, substr($1, 1, 300), substr($2, 1, 300) > "/dev/stderr" } END { print n + 0 }')
  if [ "$ndiff" -eq 0 ]; then ok; echo "$name: $nw lines identical"; else bad "$name: $ndiff of $nw lines differ"; fi
}

# --- references must exist ---
check "node not found (run scripts/setup.sh)" eval "command -v node >/dev/null"
check "npm packages missing in tests/node/node_modules (run scripts/setup.sh)" \
  eval "[ -d tests/node/node_modules/@anush008/tokenizers ] && [ -d tests/node/node_modules/tiktoken ]"
check "GPT-2 vocabulary missing in $VOCAB" eval "[ -f $VOCAB/vocab.json ] && [ -f $VOCAB/merges.txt ]"
check "$KF not built" eval "[ -x $KF ]"
[ "$FAIL" -eq 0 ] || { finish; exit 1; }

node tests/node/corpus_text.js data/nlp-corpus >"$T/corpus.txt" || bad "corpus_text.js failed"
node tests/node/tricky_text.js >"$T/tricky.txt" || bad "tricky_text.js failed"
node tests/node/codepoints_text.js >"$T/cps.txt" || bad "codepoints_text.js failed"
size=$(wc -c <"$T/corpus.txt")
check "nlp-corpus text is only $size bytes (want >= 5 MB)" eval "[ $size -ge 5000000 ]"
echo "corpus: $(wc -l <"$T/corpus.txt") lines, $size bytes"

ref() { node tests/node/ref_tokenize.js "$@" 2>>"$T/ref.log" || { bad "reference $1 failed: $(tail -n 3 "$T/ref.log")"; return 1; }; }

# --- GPT-2 ---
ref gpt2 $VOCAB <"$T/corpus.txt" >"$T/corpus.hf" &&
  "$KF" tokenize gpt2 --vocab $VOCAB <"$T/corpus.txt" >"$T/corpus.kf" &&
  same_lines "gpt2 corpus vs HF tokenizers" "$T/corpus.hf" "$T/corpus.kf"
ref gpt2 $VOCAB <"$T/tricky.txt" >"$T/tricky.hf" &&
  "$KF" tokenize gpt2 --vocab $VOCAB <"$T/tricky.txt" >"$T/tricky.kf" 2>"$T/tricky.err" &&
  same_lines "gpt2 tricky vs HF tokenizers" "$T/tricky.hf" "$T/tricky.kf"
ref gpt2 $VOCAB <"$T/cps.txt" >"$T/cps.hf" &&
  "$KF" tokenize gpt2 --vocab $VOCAB <"$T/cps.txt" >"$T/cps.kf" &&
  same_lines "gpt2 every code point vs HF tokenizers" "$T/cps.hf" "$T/cps.kf"
ref tiktoken <"$T/tricky.txt" >"$T/tricky.tt" && same_lines "gpt2 tricky vs tiktoken" "$T/tricky.tt" "$T/tricky.kf"
ref gpt2-special $VOCAB <"$T/tricky.txt" >"$T/tricky-sp.hf" &&
  "$KF" tokenize gpt2 --allow-special --vocab $VOCAB <"$T/tricky.txt" >"$T/tricky-sp.kf" 2>/dev/null &&
  same_lines "gpt2 --allow-special tricky vs HF" "$T/tricky-sp.hf" "$T/tricky-sp.kf"
# the replacement count kf reports = U+FFFD from node's decoder minus literal ones
nrep=$(node -e 'const b = require("fs").readFileSync(0); let lit = 0;
  for (let i = 0; i + 2 < b.length; i++) if (b[i] == 0xef && b[i + 1] == 0xbf && b[i + 2] == 0xbd) lit++;
  console.log([...b.toString("utf8")].filter((c) => c == "\ufffd").length - lit)' <"$T/tricky.txt")
check "gpt2: expected $nrep U+FFFD replacements reported, got: $(cat "$T/tricky.err")" eval "grep -q ': $nrep invalid UTF-8' '$T/tricky.err'"
check "--allow-special changed nothing" eval "! cmp -s '$T/tricky.kf' '$T/tricky-sp.kf'"
# decoding is the exact inverse on valid UTF-8
"$KF" tokenize gpt2 --decode --vocab $VOCAB <"$T/corpus.kf" >"$T/corpus.dec"
check "gpt2 --decode of the corpus ids is not the corpus" eval "cmp -s '$T/corpus.txt' '$T/corpus.dec'"

# --- BERT WordPiece on a test vocabulary built from the same text ---
mkdir -p "$T/bert"
cat "$T/corpus.txt" "$T/tricky.txt" | node tests/node/make_bert_vocab.js 6000 3000 >"$T/bert/vocab.txt" ||
  bad "make_bert_vocab.js failed"
ref bert "$T/bert" <"$T/corpus.txt" >"$T/bcorpus.hf" &&
  "$KF" tokenize bert --vocab "$T/bert" <"$T/corpus.txt" >"$T/bcorpus.kf" &&
  same_lines "bert corpus vs HF tokenizers" "$T/bcorpus.hf" "$T/bcorpus.kf"
ref bert-decode "$T/bert" <"$T/bcorpus.kf" >"$T/bcorpus.dec.hf" &&
  "$KF" tokenize bert --decode --vocab "$T/bert" <"$T/bcorpus.kf" >"$T/bcorpus.dec.kf" &&
  same_lines "bert --decode corpus vs HF" "$T/bcorpus.dec.hf" "$T/bcorpus.dec.kf"
ref bert "$T/bert" <"$T/tricky.txt" >"$T/btricky.hf" &&
  "$KF" tokenize bert --vocab "$T/bert" <"$T/tricky.txt" >"$T/btricky.kf" 2>/dev/null &&
  same_lines "bert tricky vs HF tokenizers" "$T/btricky.hf" "$T/btricky.kf"
ref bert "$T/bert" <"$T/cps.txt" >"$T/bcps.hf" &&
  "$KF" tokenize bert --vocab "$T/bert" <"$T/cps.txt" >"$T/bcps.kf" &&
  same_lines "bert every code point vs HF tokenizers" "$T/bcps.hf" "$T/bcps.kf"
ref bert-special "$T/bert" <"$T/tricky.txt" >"$T/btricky-sp.hf" &&
  "$KF" tokenize bert --allow-special --vocab "$T/bert" <"$T/tricky.txt" >"$T/btricky-sp.kf" 2>/dev/null &&
  same_lines "bert --allow-special tricky vs HF" "$T/btricky-sp.hf" "$T/btricky-sp.kf"
# the vocabulary really exercises WordPiece: continuation pieces and [UNK] both occur
unk=$(awk 'NR==2' "$T/bert/vocab.txt")
check "test vocab: [UNK] is not id 1" eval "[ '$unk' = '[UNK]' ]"
nunk=$(tr ' ' '\n' <"$T/bcorpus.kf" | grep -cx 1)
ncont=$(tr ' ' '\n' <"$T/bcorpus.kf" | awk 'NR==FNR { if (substr($0, 1, 2) == "##") c[NR - 1] = 1; next } ($0 in c) { n++ } END { print n + 0 }' "$T/bert/vocab.txt" -)
echo "bert corpus: $nunk [UNK], $ncont ## pieces"
check "test vocab too easy: $nunk [UNK], $ncont ## pieces" eval "[ $nunk -gt 100 ] && [ $ncont -gt 10000 ]"

finish
