#!/usr/bin/env bash
# kf shards CLI: every input layout (line file, .txt directory, JSONL, plain
# tar, OpenWebText's nested tar.xz of xz tars), document/empty counts, config
# and input errors that fail before any work with FILE:LINE:COL, a truncated
# archive, --jobs independence, verify naming a corrupted sample, inspect and
# stats. Needs data/vocab/gpt2 (scripts/setup.sh).
set -u
cd "$(dirname "$0")/../.."
KF=${KF_BIN:-bin/kf}
. tests/scripts/lib_check.sh
T=$(mktemp -d /tmp/kf_test_pipeline_cli.XXXXXX)
trap 'rm -rf "$T"' EXIT
export KF_QUIET=1

# ---- inputs ----
mkdir -p "$T/in/docs/sub" "$T/owt/urlsf_subset00" "$T/owt/urlsf_subset01" "$T/outer"
printf 'first line .\nsecond line , with comma\n\nthird\nfourth "quoted" line\n' > "$T/in/lines.txt"
printf 'Document A.\nIt has two lines.\n' > "$T/in/docs/a.txt"
printf 'Document B.' > "$T/in/docs/b.txt"
printf 'Document C, nested.' > "$T/in/docs/sub/c.txt"
: > "$T/in/docs/empty.txt"
printf 'not a document' > "$T/in/docs/skip.md"
printf '{"text": "json one"}\n\n{"text": "json two", "id": 2}\n{"text": ""}\n{"text": "json three \\u00e9"}\n' > "$T/in/docs.jsonl"
words() { local i; for ((i = 0; i < $2; i++)); do printf '%s word%d ' "$1" $((i * 7 % 13)); done; }
words one 40 > "$T/owt/urlsf_subset00/0000001.txt"
words two 30 > "$T/owt/urlsf_subset00/0000002.txt"
words three 20 > "$T/owt/urlsf_subset01/0000003.txt"
det_tar() { tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 "$@"; }
for d in urlsf_subset00 urlsf_subset01; do det_tar -C "$T/owt/$d" -cf - . | xz -T1 > "$T/outer/${d}_data.xz"; done
det_tar -C "$T/outer" -cf - . | xz -T1 > "$T/in/openwebtext.tar.xz"
det_tar -C "$T/in/docs" -cf "$T/in/docs.tar" .

set_yaml() {  # NAME PACKING INPUT-FLOW-MAPPING [EXTRA-LINE]
  cat <<EOF
  $1:
    out: $T/out/$1
    tokenizer: gpt2
    vocab: data/vocab/gpt2
    packing: $2
    seq_len: 16
    docs_per_shard: 2
    inputs:
      - $3
${4:-}
EOF
}
{
  echo "name: cli-test"
  echo "shards:"
  set_yaml lines pad "{path: $T/in/lines.txt}" "    valid: {last: 1}"
  set_yaml dir pad "{path: $T/in/docs}"
  set_yaml jsonl pad "{path: $T/in/docs.jsonl}"
  set_yaml tar pad "{path: $T/in/docs.tar}"
  set_yaml owt wrap "{path: $T/in/openwebtext.tar.xz}" "    valid: {inputs: [{path: $T/in/docs}]}"
} > "$T/cfg.yaml"

"$KF" shards build "$T/cfg.yaml" --jobs 2 > "$T/build.log" 2>&1
rc=$?; check "build all layouts (log: $(tail -3 "$T/build.log"))" test $rc -eq 0
field() { sed -n "/^  $2:/,/shards:/p" "$T/out/$1/manifest.yaml" | grep -m1 "^    $3:" | awk '{print $2}'; }
expect() {  # SET SPLIT FIELD VALUE
  local got; got=$(field "$1" "$2" "$3")
  check "$1 $2 $3 = $4 (got '$got')" test "$got" = "$4"
}
expect lines train documents 3; expect lines valid documents 1; expect lines train empty_documents 1
expect dir train documents 3; expect dir train empty_documents 1
expect jsonl train documents 3; expect jsonl train empty_documents 2
expect tar train documents 3; expect tar train empty_documents 1
expect owt train documents 3; expect owt valid documents 3
# pad samples are the documents in input order: the valid split is the last line.
out=$("$KF" shards inspect "$T/out/lines" --split valid --index 0 --decode)
check "lines valid sample 0 decodes to the last line (got '$out')" test "$out" = '<|endoftext|>fourth "quoted" line<|endoftext|>'
out=$("$KF" shards inspect "$T/out/jsonl" --index 2 --decode)
check "jsonl sample 2 decodes with its \\u escape (got '$out')" test "$out" = '<|endoftext|>json three é<|endoftext|>'
out=$("$KF" shards inspect "$T/out/dir" --index 2 --decode)
check "directory order: sub/c.txt after b.txt (got '$out')" test "$out" = '<|endoftext|>Document C, nested.<|endoftext|>'

# Nested archives are decoded by the workers while the reader goes on: an
# outer tar mixing nested xz tars, a bare .xz and plain .txt members keeps
# input order (one document per pad sample) and gives the same manifest for
# any --jobs; a corrupt nested member fails naming it.
mkdir -p "$T/mixed/out"
want=
for m in a b c d e; do
  mkdir -p "$T/mixed/$m"
  printf 'doc %s one' $m > "$T/mixed/$m/0000001.txt"
  printf 'doc %s two' $m > "$T/mixed/$m/0000002.txt"
  [ $m = a ] && : > "$T/mixed/$m/0000003.txt"  # an empty document inside a nested archive
  det_tar -C "$T/mixed/$m" -cf - . | xz -T1 > "$T/mixed/out/${m}_data.xz"
  printf 'plain %s' $m > "$T/mixed/out/${m}_plain.txt"
  want="$want|doc $m one|doc $m two|plain $m"
done
want="${want#|}|bare xz"
printf 'bare xz' | xz -T1 > "$T/mixed/out/f_bare.xz"
det_tar -C "$T/mixed/out" -cf "$T/in/mixed.tar" .
printf 'shards:\n%s\n' "$(set_yaml mixed pad "{path: $T/in/mixed.tar}")" > "$T/mixed.yaml"
for j in 1 3; do
  "$KF" shards build "$T/mixed.yaml" --jobs $j --force > /dev/null 2>&1
  check "mixed nested archive builds with --jobs $j" test $? -eq 0
  cp "$T/out/mixed/manifest.yaml" "$T/mixed.j$j"
done
got=$(for ((i = 0; i < 16; i++)); do "$KF" shards inspect "$T/out/mixed" --index $i --decode; done |
      sed 's/<|endoftext|>//g' | paste -sd '|')
check "mixed nested archive: documents in input order (got '$got')" test "$got" = "$want"
expect mixed train empty_documents 1
check "mixed nested archive: same manifest for --jobs 1 and 3" cmp -s "$T/mixed.j1" "$T/mixed.j3"
head -c 100 "$T/mixed/out/c_data.xz" > "$T/mixed/c_data.xz.cut" && mv "$T/mixed/c_data.xz.cut" "$T/mixed/out/c_data.xz"
det_tar -C "$T/mixed/out" -cf "$T/in/mixed.tar" .
"$KF" shards build "$T/mixed.yaml" --jobs 2 > /dev/null 2> "$T/err.txt"
rc=$?; check "corrupt nested member fails ($(cat "$T/err.txt"))" test $rc -eq 1
check "corrupt nested member is named" grep -q "mixed.tar/./c_data.xz" "$T/err.txt"

# BERT WordPiece with a generated vocabulary: [CLS] ids [SEP] then [PAD] (id 0).
mkdir -p "$T/bert"
printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsees\na\ndog\n##s\n.\n' > "$T/bert/vocab.txt"
printf 'The cat sees a dog.\nThe dogs see cats\n' > "$T/bert/in.txt"
cat > "$T/bert.yaml" <<EOF
shards:
  b: {out: $T/out/bert, tokenizer: bert, vocab: $T/bert, packing: pad, seq_len: 10, inputs: [{path: $T/bert/in.txt}]}
EOF
"$KF" shards build "$T/bert.yaml" --jobs 1 > /dev/null 2>&1
out=$("$KF" shards inspect "$T/out/bert" --index 0 | tail -1)
check "bert pad sample 0 is [CLS] the cat sees a dog . [SEP] [PAD] [PAD] (got '$out')" test "$out" = "2 5 6 7 8 9 11 3 0 0"
out=$("$KF" shards inspect "$T/out/bert" --index 1 --decode --vocab "$T/bert")
check "bert sample 1 decodes with [UNK] and ## pieces (got '$out')" test "$out" = "[CLS] the dogs [UNK] cats [SEP]"

# --jobs does not change the manifest; a rebuild reuses every shard.
cp "$T/out/owt/manifest.yaml" "$T/owt.j2"
KF_QUIET=0 "$KF" shards build "$T/cfg.yaml" --only owt --jobs 1 > "$T/j1.log" 2>&1
check "rebuild with --jobs 1 gives the same manifest" cmp -s "$T/owt.j2" "$T/out/owt/manifest.yaml"
check "rebuild reuses finished shards" grep -q " 0 shards built" "$T/j1.log"

# verify / inspect / stats
check "verify ok" bash -c "'$KF' shards verify '$T/out/owt' > /dev/null"
check "inspect summary" bash -c "'$KF' shards inspect '$T/out/owt' | grep -q 'packing wrap'"
check "stats" bash -c "'$KF' shards stats '$T/out/owt' --top 3 | grep -q 'padding fraction 0.0000'"
"$KF" shards stats "$T/out/lines" > "$T/stats.txt"
check "pad stats show padding" grep -q "padding fraction 0\.[1-9]" "$T/stats.txt"

# Corrupt one id of train sample 1 of the owt set (every copy of its bytes in
# the file): verify must fail naming the shard and the sample.
ids=$("$KF" shards inspect "$T/out/owt" --index 1 | tail -1)
pat=$(echo "$ids" | awk '{for (i = 2; i <= 7; i++) printf "\\x%02x\\x%02x", $i % 256, int($i / 256)}')
shard="$T/out/owt/train/shard-00000.lmdb"
offs=$(LC_ALL=C grep -obUaP "$pat" "$shard" | cut -d: -f1)
check "found sample bytes in the shard" test -n "$offs"
for o in $offs; do printf '\x00' | dd of="$shard" bs=1 seek="$o" conv=notrunc status=none; done
"$KF" shards verify "$T/out/owt" > /dev/null 2> "$T/verify.err"
rc=$?; check "verify fails on corruption" test $rc -eq 1
check "verify names shard and sample ($(cat "$T/verify.err"))" grep -q "shard-00000.lmdb: sample 1:" "$T/verify.err"

# ---- errors: config problems fail before any work, with FILE:LINE:COL ----
cfg_err() {  # WHAT PATTERN YAML-BODY [OVERRIDE...]
  local what=$1 pat=$2 body=$3; shift 3
  printf '%s\n' "$body" > "$T/bad.yaml"
  rm -rf "$T/out/bad"
  "$KF" shards build "$T/bad.yaml" "$@" > /dev/null 2> "$T/err.txt"
  local rc=$?
  check "$what: exit 1 (got $rc)" test $rc -eq 1
  check "$what: message matches '$pat' ($(cat "$T/err.txt"))" grep -qE "$pat" "$T/err.txt"
  check "$what: no output written" test ! -e "$T/out/bad"
}
good="shards:
  bad:
    out: $T/out/bad
    tokenizer: gpt2
    vocab: data/vocab/gpt2
    packing: wrap
    seq_len: 16
    inputs: [{path: $T/in/lines.txt}]"
cfg_err "unknown key" "bad.yaml:9:5: unknown key 'shards.bad.colour'" "$good
    colour: red"
cfg_err "wrong type" "bad.yaml:7:14: key 'shards.bad.seq_len': expected an integer" "${good/seq_len: 16/seq_len: sixteen}"
cfg_err "missing field" "bad.yaml:3:5: missing required key 'shards.bad.packing'" "${good/    packing: wrap
/}"
cfg_err "bad enum" "bad.yaml:6:14: key 'shards.bad.packing': 'wrapped' is not one of" "${good/packing: wrap/packing: wrapped}"
cfg_err "missing input" "bad.yaml:8:.*nope.txt: No such file" "${good/lines.txt/nope.txt}"
cfg_err "bad override" "override 'shards.bad.seq_len=x'" "$good" shards.bad.seq_len=x
cfg_err "unknown override" "unknown key 'shards.bad.seqlen'" "$good" shards.bad.seqlen=8
"$KF" shards build "$T/bad.yaml" --jobs 0 > /dev/null 2>&1
check "--jobs 0 is a usage error" test $? -eq 2
"$KF" shards --help > /dev/null
check "--help exits 0" test $? -eq 0

# Bad input found while reading: a truncated archive and a bad JSONL line.
head -c 300 "$T/in/openwebtext.tar.xz" > "$T/in/trunc.tar.xz"
printf '%s\n' "${good/lines.txt/trunc.tar.xz}" > "$T/bad.yaml"
"$KF" shards build "$T/bad.yaml" > /dev/null 2> "$T/err.txt"
rc=$?; check "truncated archive fails ($(cat "$T/err.txt"))" test $rc -eq 1
check "truncated archive is named" grep -q "trunc.tar.xz" "$T/err.txt"
check "no manifest after a failed build" test ! -e "$T/out/bad/manifest.yaml"
printf '{"text": "ok"}\n{"text": 5}\n' > "$T/in/bad.jsonl"
printf '%s\n' "${good/lines.txt/bad.jsonl}" > "$T/bad.yaml"
"$KF" shards build "$T/bad.yaml" > /dev/null 2> "$T/err.txt"
check "non-string JSONL text fails with FILE:LINE ($(cat "$T/err.txt"))" grep -q "bad.jsonl:2: non-string field 'text'" "$T/err.txt"

# A vocabulary that fails to load (setup runs while the reader already
# reads): the error names the file and line, and an existing set is intact.
printf '%s\n' "$good" > "$T/bad.yaml"
"$KF" shards build "$T/bad.yaml" > /dev/null 2>&1
check "a good build of the set" test -s "$T/out/bad/manifest.yaml"
cp "$T/out/bad/manifest.yaml" "$T/bad.manifest"
mkdir -p "$T/badvocab" && cp data/vocab/gpt2/merges.txt "$T/badvocab/" && printf '{"a": 0,\n "b" 1}\n' > "$T/badvocab/vocab.json"
for j in 1 2; do
  "$KF" shards build "$T/bad.yaml" --jobs $j --force shards.bad.vocab="$T/badvocab" > /dev/null 2> "$T/err.txt"
  rc=$?; check "--jobs $j: a malformed vocab.json fails ($(cat "$T/err.txt"))" test $rc -eq 1
  check "--jobs $j: the error names vocab.json:2" grep -q "badvocab/vocab.json:2:" "$T/err.txt"
  check "--jobs $j: the old manifest is intact" cmp -s "$T/bad.manifest" "$T/out/bad/manifest.yaml"
done

# Inputs that can never train fail the build naming the split; mostly-binary
# input warns with the fraction and the file. (byte vocabulary: quick)
bset() {  # NAME INPUT PACKING [EXTRA]
  printf 'shards:\n  %s: {out: %s, tokenizer: gpt2, vocab: data/vocab/bytes, packing: %s, seq_len: 16, inputs: [{path: %s, format: lines}]%s}\n' \
    "$1" "$T/out/$1" "$3" "$2" "${4:-}" > "$T/$1.yaml"
}
: > "$T/in/empty.txt"
bset empty "$T/in/empty.txt" pad
"$KF" shards build "$T/empty.yaml" > /dev/null 2> "$T/err.txt"; rc=$?
check "empty corpus: exit 1 naming the train split ($(cat "$T/err.txt"))" \
  exits_saying $rc 1 "$T/err.txt" "shards.empty: the train split has 0 samples"
check "empty corpus: no manifest" test ! -e "$T/out/empty/manifest.yaml"
bset novalid "$T/in/lines.txt" pad ", valid: {last: 0}"
"$KF" shards build "$T/novalid.yaml" > /dev/null 2> "$T/err.txt"; rc=$?
check "valid: {last: 0}: exit 1 naming the key ($(cat "$T/err.txt"))" \
  exits_saying $rc 1 "$T/err.txt" "novalid.yaml:2:[0-9]+: key 'shards.novalid.valid.last': must be >= 1"
: > "$T/in/nothing.txt"
bset emptyvalid "$T/in/lines.txt" pad ", valid: {inputs: [{path: $T/in/nothing.txt, format: lines}]}"
"$KF" shards build "$T/emptyvalid.yaml" > /dev/null 2> "$T/err.txt"; rc=$?
check "an empty validation input: exit 1 naming the valid split ($(cat "$T/err.txt"))" \
  exits_saying $rc 1 "$T/err.txt" "shards.emptyvalid: the valid split has 0 samples"
head -c 2000000 /dev/zero | tr '\0' 'a' > "$T/in/long.txt"; echo >> "$T/in/long.txt"
bset long "$T/in/long.txt" pad ", valid: {last: 1}"
"$KF" shards build "$T/long.yaml" > /dev/null 2> "$T/err.txt"; rc=$?
check "one long line and valid: {last: 1}: exit 1, the train split empty ($(cat "$T/err.txt"))" \
  exits_saying $rc 1 "$T/err.txt" "training split would be empty"
# binary: bytes 0x80-0xff (most not valid UTF-8), one newline in 10
node -e 'const b = Buffer.alloc(20000); for (let i = 0; i < b.length; i++) b[i] = i % 10 ? 0x80 + (i * 37) % 128 : 10;
  require("fs").writeFileSync(process.argv[1], b)' "$T/in/garbage.bin"
bset garbage "$T/in/garbage.bin" wrap
"$KF" shards build "$T/garbage.yaml" > /dev/null 2> "$T/err.txt"; rc=$?
check "binary input: builds (exit $rc)" test $rc -eq 0
check "binary input: warns with the fraction and the file ($(grep -i warn "$T/err.txt"))" \
  grep -qE "warning: shards.garbage train: [3-9][0-9]% of the input bytes are invalid UTF-8 .* from $T/in/garbage.bin" "$T/err.txt"
"$KF" shards build "$T/cfg.yaml" --only lines --force > /dev/null 2> "$T/err.txt"
check "text input: no UTF-8 warning ($(grep -i warn "$T/err.txt"))" bash -c '! grep -qi "invalid UTF-8 (" "$1"' _ "$T/err.txt"
# decoding with another vocabulary than the set's says to give --vocab
"$KF" shards inspect "$T/out/garbage" --index 0 --decode > /dev/null 2> "$T/err.txt"; rc=$?
check "inspect --decode with the wrong default vocabulary: exit 1 suggesting --vocab ($(cat "$T/err.txt"))" \
  exits_saying $rc 1 "$T/err.txt" "data/vocab/gpt2 \(the default\): vocabulary sha256 .* give --vocab DIR"

finish
