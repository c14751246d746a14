#!/usr/bin/env bash
# The embedded default configs validate (`kf jobs plan`), and the closing
# samples of `kf jobs run` (jobs/sample.c): on a chain whose model
# context is 32 tokens (and 16: the prompts are cut to half of it) the run
# exits 0 with a quality table (tokens/s and x AR, Gen-PPL under the AR stage,
# entropy, distinct-2/3, length) for AR and every PFLM stage at each k, every
# completion fitting the context; a failure of the samples after complete
# stages is reported and the exit status stays 0.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_jobs.sh
T=$(mktemp -d /tmp/kf-test-samples.XXXXXX)
trap 'rm -rf "$T"' EXIT

# the embedded defaults validate: byte-level configs/tiny.yaml, GPT-2 tiny-gpt2.yaml
for c in tiny tiny-gpt2; do
  out=$("$KF" jobs plan configs/$c.yaml 2>&1); rc=$?
  dag=$(grep -cE '(ar -> k1|k1 -> k2|k2 -> k4)' <<<"$out")
  check "plan configs/$c.yaml: exit status got $rc want 0; DAG lines got $dag want 3" \
    bash -c '[ $1 -eq 0 ] && [ $2 -eq 3 ]' _ $rc "$dag"
done

# private shards of CTX-token samples (400 Brown sentences, GPT-2 vocabulary)
# and a 3-stage chain of a model with a context of CTX
head -n 400 data/text/brown.txt > "$T/text.txt"
config() {  # CTX
  cat > "$T/cfg$1.yaml" <<YAML
name: samples-test
shards:
  s:
    out: $T/shards$1
    tokenizer: gpt2
    vocab: data/vocab/gpt2
    packing: wrap
    seq_len: $1
    docs_per_shard: 100
    inputs: [{path: $T/text.txt, format: lines}]
    valid: {last: 40}
data: {train: $T/shards$1, valid: $T/shards$1}
model: {hidden: 32, heads: 2, blocks: 1, vocab: 50258, seq_len: $1}
defaults: {batch: 1, lr: 1.0e-3, checkpoint_every: 0, log_every: 1, eval_batches: 1,
           precision: [{mode: fp32}]}
resources: {ranks: 1, time_limit: "00:10:00"}
stages:
  - {name: ar, kind: ar, steps: 2}
  - {name: k1, kind: distill_ar, teacher: ar, k: 1, steps: 2, tau: [0.01, 1.0]}
  - {name: k2, kind: self_forcing, teacher: k1, k: 2, steps: 2}
YAML
}

# prefix + completion lengths of every line of a samples file, at most CTX
fits() {  # FILE CTX
  node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n");
    const worst = Math.max(...lines.map(l => { const o = JSON.parse(l); return o.prefix.length + o.completion.length; }));
    console.log(worst); process.exit(lines.length === 128 && worst <= +process.argv[2] ? 0 : 1);' "$1" "$2"
}

for ctx in 32 16; do
  R=$T/run$ctx
  config $ctx
  "$KF" jobs run "$T/cfg$ctx.yaml" --run-dir "$R" > "$T/out$ctx" 2> "$T/err$ctx"; rc=$?
  check "context $ctx: kf jobs run exit status: got $rc want 0 ($(tail -n 1 "$T/err$ctx"))" [ $rc -eq 0 ]
  hdr=$(grep -E '^model +k +tokens/s' "$T/out$ctx")
  check "context $ctx: table header: got '$hdr' want model, k, tokens/s, vs AR, Gen-PPL, entropy, dist-2, dist-3, length, words, w-dist" \
    bash -c '[[ "$1" =~ vs\ AR\ +Gen-PPL\ entropy\ dist-2\ dist-3\ length\ words\ w-dist ]]' _ "$hdr"
  for row in "ar +1" "k1 +1" "k2 +1" "k2 +2"; do
    line=$(grep -E "^$row +[0-9]+ +[0-9.]+x " "$T/out$ctx")
    # tokens/s, x AR, then seven figures (a Gen-PPL, entropy, distinct, length, words)
    check "context $ctx: row '$row': got '$line' want tokens/s, x AR and 7 numeric quality figures" \
      bash -c '[[ "$1" =~ x\ +[0-9.]+\ +[0-9.]+\ +[0-9.]+\ +[0-9.]+\ +[0-9.]+\ +[0-9.]+\ +[0-9.]+ ]]' _ "$line"
  done
  for f in ar-k1 k1-k1 k2-k1 k2-k2; do
    worst=$(fits "$R/samples/$f.jsonl" $ctx); frc=$?
    check "context $ctx: $f.jsonl: 128 completions, longest prefix + completion: got $worst want <= $ctx" [ $frc -eq 0 ]
  done
done
# the words and w-dist columns, recomputed here from the completions and the
# training split's text (each sample decoded by `kf shards inspect`, the
# blocks joined, split at <|endoftext|>): whole lower-case words (not touching
# a completion's start, nor its end unless it stopped at EOS), their share
# occurring >= 2 times in the training text, and distinct / all per prompt,
# averaged over the prompts
R32=$T/run32
words=$(node -e '
  const fs = require("fs"), cp = require("child_process");
  const [kf, shards, dir, table] = process.argv.slice(1);
  const n = +/train: (\d+) samples/.exec(cp.execFileSync(kf, ["shards", "inspect", shards]).toString())[1];
  let text = "";
  for (let i = 0; i < n; i++) {
    const t = cp.execFileSync(kf, ["shards", "inspect", shards, "--split", "train", "--index", String(i),
      "--decode", "--vocab", "data/vocab/gpt2"]).toString().replace(/\n$/, "");
    text += t.replace(/^<\|endoftext\|>/, "").replace(/<\|endoftext\|>$/, "");
  }
  const count = new Map();
  for (const doc of text.split("<|endoftext|>"))
    for (const w of doc.match(/[A-Za-z]+/g) || []) if (w === w.toLowerCase()) count.set(w, (count.get(w) || 0) + 1);
  let bad = 0;
  for (const row of fs.readFileSync(table, "utf8").split("\n").filter(l => /^(ar|k1|k2) +[0-9]+ /.test(l))) {
    const f = row.trim().split(/ +/), file = `${dir}/${f[0]}-k${f[1]}.jsonl`;
    let words = 0, known = 0; const groups = [];
    fs.readFileSync(file, "utf8").trim().split("\n").forEach((l, i) => {
      const o = JSON.parse(l), stopped = o.completion.includes(o.eos);
      const g = groups[Math.floor(i / 16)] ||= { n: 0, seen: new Set() };  /* the 16 of one prompt */
      for (const m of o.text.matchAll(/[A-Za-z]+/g)) {
        const end = m.index + m[0].length;
        if (m.index === 0 || (end === o.text.length && !stopped) || m[0] !== m[0].toLowerCase()) continue;
        words++; known += (count.get(m[0]) || 0) >= 2; g.n++; g.seen.add(m[0]);
      }
    });
    const used = groups.filter(g => g.n), dist = used.reduce((a, g) => a + g.seen.size / g.n, 0) / used.length;
    const want = `${(known / words).toFixed(2)} ${dist.toFixed(2)}`, got = `${f[9]} ${f[10]}`;
    if (got !== want || !words) { bad++; console.log(`${f[0]} k=${f[1]}: got ${got} want ${want} (${words} words)`); }
  }
  console.log(bad ? "mismatch" : "ok");' "$KF" "$T/shards32" "$R32/samples" "$R32/samples/table.txt" 2>&1)
check "words and w-dist columns recomputed from the completions and the training text: got '$words' want ok" \
  bash -c '[ "$1" = ok ]' _ "$words"

# a rerun of the complete run keeps the completions (same weights, same
# prompts) and prints the same table without sampling again
sums=$(sha256sum "$R32"/samples/*.jsonl)
"$KF" jobs run "$T/cfg32.yaml" --run-dir "$R32" > "$T/out32b" 2> "$T/err32b"; rc=$?
check "rerun: exit status got $rc want 0" [ $rc -eq 0 ]
check "rerun: no kf sample run, the sample files unchanged" \
  bash -c '[ "$(sha256sum "$1"/samples/*.jsonl)" = "$2" ]' _ "$R32" "$sums"
check "rerun: says the 4 rows kept earlier completions ($(grep kept "$T/out32b"))" \
  grep -q "4 of 4 rows kept the completions of an earlier run" "$T/out32b"
check "rerun: the same table" bash -c 'diff <(grep -E "^(ar|k1|k2) " "$1") <(grep -E "^(ar|k1|k2) " "$2")' _ "$T/out32" "$T/out32b"
# the table is saved beside the completions, and kf export's model card quotes it
check "samples/table.txt holds the printed table's rows" \
  bash -c 'diff <(grep -E "^(model|ar|k1|k2) " "$1") <(grep -E "^(model|ar|k1|k2) " "$2")' _ "$T/out32b" "$R32/samples/table.txt"
"$KF" export "$R32/stages/k2/final" --to hf --vocab data/vocab/gpt2 --out "$T/hf" > "$T/exp" 2>&1; rc=$?
check "export --to hf of the run's k2: exit $rc ($(tail -n 1 "$T/exp"))" [ $rc -eq 0 ]
check "the model card quotes the run's quality table (its k2 k=2 row)" \
  bash -c 'grep -q "^## Sample quality" "$1" && grep -qF "$(grep -E "^k2 +2 " "$2")" "$1"' _ "$T/hf/README.md" "$R32/samples/table.txt"
# weights that change (a retrained stage) are sampled again: a changed line's sha
sed -i '1s/"model_sha256": "[0-9a-f]*"/"model_sha256": "0"/' "$R32/samples/k2-k2.jsonl"
"$KF" jobs run "$T/cfg32.yaml" --run-dir "$R32" > "$T/out32c" 2> "$T/err32c"
check "a sample file from other weights is sampled again ($(grep kept "$T/out32c"))" \
  grep -q "3 of 4 rows kept" "$T/out32c"
# kf eval --completions on a sample file with the AR stage's final/ reproduces
# the table's figures: truncated at the eos the file records, like the table
js=$("$KF" eval --completions "$R32/samples/k2-k2.jsonl" --evaluator "$R32/stages/ar/final" 2>&1); rc=$?
row=$(grep -E "^k2 +2 " "$T/out32c")
got=$(node -e 'const o = JSON.parse(process.argv[1]);
  console.log(o.eos, o.gen_ppl.toFixed(o.gen_ppl < 1000 ? 1 : 0), o.entropy.toFixed(2), o.mean_len.toFixed(1))' "$js" 2>/dev/null)
want=$(awk '{print 50256, $5, $6, $9}' <<<"$row")
check "eval --completions k2-k2.jsonl --evaluator ar/final: exit $rc, eos/Gen-PPL/entropy/length got '$got' want '$want' (row '$row')" \
  bash -c '[ $1 -eq 0 ] && [ "$2" = "$3" ]' _ $rc "$got" "$want"
# a file without the eos field (older kf sample): the run's vocabulary gives it
sed 's/, "eos": [0-9]*//' "$R32/samples/k2-k2.jsonl" > "$T/noeos.jsonl"
js=$("$KF" eval --completions "$T/noeos.jsonl" --evaluator "$R32/stages/ar/final" 2>&1); rc=$?
got=$(node -e 'const o = JSON.parse(process.argv[1]);
  console.log(o.eos, o.gen_ppl.toFixed(o.gen_ppl < 1000 ? 1 : 0), o.entropy.toFixed(2), o.mean_len.toFixed(1))' "$js" 2>/dev/null)
check "eval --completions without eos in the file: exit $rc, the run's eos, got '$got' want '$want'" \
  bash -c '[ $1 -eq 0 ] && [ "$2" = "$3" ] && ! grep -q "\"eos\"" "$4"' _ $rc "$got" "$want" "$T/noeos.jsonl"
p16=$(node -e 'const l = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n");
  console.log(Math.max(...l.map(x => JSON.parse(x).prefix.length)))' "$R/samples/prefixes.jsonl" 2>/dev/null)
check "context 16: the longest prompt is cut to half the context: got $p16 tokens want 8" [ "$p16" = 8 ]

# a failure in the samples step: RUN/samples is a file, so nothing can be written there
R=$T/run32
rm -rf "$R/samples" && : > "$R/samples"
"$KF" jobs run "$T/cfg32.yaml" --run-dir "$R" > "$T/outf" 2> "$T/errf"; rc=$?
check "samples failing after complete stages: exit status got $rc want 0" [ $rc -eq 0 ]
msg=$(grep 'samples failed' "$T/errf")
check "samples failing: reported on stderr: got '$msg' want 'kf jobs: samples failed (the trained stages are complete): ...'" \
  bash -c '[[ "$1" == "kf jobs: samples failed (the trained stages are complete): "* ]]' _ "$msg"
finish
