#!/usr/bin/env bash
# Gen-PPL under a Hugging Face GPT-2 ("the paper's quality metric"):
# tools/ref_gpt2.py builds a random-initialised GPT-2 in HF's layout
# (config.json, model.safetensors with HF key names and Conv1D weights) and is
# the reference: its own PyTorch forward, decoding, and HF tokenizers' GPT-2
# encoding (Node). kf runs it as the one model (trainer/model/model_hf.h). Checks:
#   - the model's logits match the reference's to 1e-5 (`kf import DIR --probe`),
#     also from the checkpoint `kf import DIR --out` writes;
#   - must fail: a renamed key (the error names it), Conv1D weights stored
#     transposed (logits differ), a key GPT-2 does not have, an untied lm_head;
#   - an imported checkpoint as the evaluator scores as the HF directory does;
#   - the Gen-PPL and entropy of GPT-2-id completions (EOS truncation, BOS and
#     mask ids dropped, texts longer than the 64-token context scored in
#     windows) and of BERT-id (LM1B) completions, detokenised and
#     re-tokenised with GPT-2, match the reference's;
#   - --max-length truncates as the reference does.
# PyTorch (CPU) is Debian's python3-torch, importable by /usr/bin/python3
# (PYTHON overrides). A Python without torch is a failure, not a skip.
set -u
cd "$(dirname "$0")/../.."
KF=${KF_BIN:-bin/kf}
PY=${PYTHON:-/usr/bin/python3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. tests/scripts/lib_check.sh

require_torch "$PY"

for v in ok badkey transposed extrakey untied; do
  "$PY" tools/ref_gpt2.py make "$T/$v" --variant $v >/dev/null || bad "making the $v GPT-2"
done
"$PY" tools/ref_gpt2.py probe "$T/ok" "$T/probe.safetensors" >/dev/null || bad "writing the probe"

# logits of the one model (kf import maps the HF checkpoint into it): parity
# to 1e-5, and the two layouts that must fail
"$KF" import "$T/ok" --probe "$T/probe.safetensors" --tol 1e-5 >"$T/out" 2>&1; rc=$?
cat "$T/out"
check "logits match the PyTorch reference to 1e-5 (rc $rc)" exits_saying $rc 0 "$T/out" 'max \|diff\| [0-9.e-]+ '
"$KF" import "$T/badkey" --probe "$T/probe.safetensors" >"$T/out" 2>&1; rc=$?
check "a renamed key fails naming it (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" "no tensor 'h.1.ln_2.bias'"
"$KF" import "$T/transposed" --probe "$T/probe.safetensors" >"$T/out" 2>&1; rc=$?
check "transposed Conv1D weights fail the probe (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" 'differ from the reference'
"$KF" import "$T/extrakey" --probe "$T/probe.safetensors" >"$T/out" 2>&1; rc=$?
check "a key GPT-2 does not have fails naming it (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" "tensor 'transformer.h.0.attn.q_norm.weight' is not part of a GPT-2"
"$KF" import "$T/untied" --probe "$T/probe.safetensors" >"$T/out" 2>&1; rc=$?
check "an lm_head that is not wte fails (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" 'lm_head.weight differs from wte.weight'
# kf import --out: a kforcing checkpoint (format version 2, GPT-2 options) with the same logits
"$KF" import "$T/ok" --out "$T/gpt2.safetensors" >"$T/out" 2>&1; rc=$?
check "kf import DIR --out exits 0 (rc $rc): $(cat "$T/out")" [ $rc -eq 0 ]
"$KF" import "$T/gpt2.safetensors" --probe "$T/probe.safetensors" --tol 1e-5 >"$T/out" 2>&1; rc=$?
check "the written checkpoint reproduces the reference logits (rc $rc): $(cat "$T/out")" exits_saying $rc 0 "$T/out" 'max \|diff\| [0-9.e-]+ '
# a GPT-2 is an evaluator, not a stage of a run (whose model is the default architecture)
mkdir -p "$T/run"
printf 'name: t\ndata: {train: %s/data, valid: %s/data}\nmodel: {hidden: 32, heads: 2, blocks: 2, vocab: 50257, seq_len: 64}\nstages:\n  - {name: ar, kind: ar, steps: 10}\n' "$T" "$T" >"$T/run/run.yaml"
"$KF" import "$T/ok" --run-dir "$T/run" --stage ar >"$T/out" 2>&1; rc=$?
check "a GPT-2 registered as a run's stage is refused (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" 'architecture options'
check "... and nothing is written" [ ! -e "$T/run/stages/ar/final" ]
mkdir -p "$T/imported"
cp "$T/ok/vocab.json" "$T/ok/merges.txt" "$T/imported/" && cp "$T/gpt2.safetensors" "$T/imported/model.safetensors"

# GPT-2-id completions (OWT-style): prefix with a BOS, EOS then junk, a mask id
# (50257), one completion longer than the context (windows)
long=$(printf 'The committee said in a statement that the new rules would take effect next year, and that the changes were needed to protect consumers from rising prices. Officials also noted that several members had raised concerns about the cost of the program, which is expected to exceed earlier estimates by a wide margin over the coming decade, according to people familiar with the matter.\n' |
  "$KF" tokenize gpt2 --vocab data/vocab/gpt2 | tr ' ' ',')
a=$(printf 'The city council voted on Tuesday to approve\n' | "$KF" tokenize gpt2 --vocab data/vocab/gpt2 | tr ' ' ',')
b=$(printf ' the budget, which includes money for schools.\n' | "$KF" tokenize gpt2 --vocab data/vocab/gpt2 | tr ' ' ',')
c=$(printf 'Scientists say the new study shows that\n' | "$KF" tokenize gpt2 --vocab data/vocab/gpt2 | tr ' ' ',')
d=$(printf ' the drug works well in mice\n' | "$KF" tokenize gpt2 --vocab data/vocab/gpt2 | tr ' ' ',')
cat >"$T/owt.jsonl" <<EOF
{"prefix": [50256,$a], "completion": [$b,50256,11,12,13], "k": 4}
{"prefix": [$c], "completion": [$d,50257,13,50256]}

{"prefix": [50256], "completion": [$long]}
EOF
"$PY" tools/ref_gpt2.py genppl "$T/ok" "$T/owt.jsonl" --vocab data/vocab/gpt2 >"$T/ref" || bad "reference genppl (owt)"
"$KF" eval genppl "$T/owt.jsonl" --evaluator "$T/ok" --vocab data/vocab/gpt2 --batch 2 --json "$T/kf.json" >"$T/out" 2>"$T/err"; rc=$?
cat "$T/out"; head -c 300 "$T/ref"; echo
check "genppl owt exits 0 (rc $rc): $(cat "$T/err")" [ $rc -eq 0 ]
# agree: field $1 relative tolerance $2 between kf's JSON line and the reference's
agree() {
  "$PY" -c 'import json,sys; k=json.load(open(sys.argv[1])); r=json.loads(open(sys.argv[2]).read()); f=sys.argv[3]; t=float(sys.argv[4])
print(f"{f}: got {k[f]} want {r[f]}"); sys.exit(0 if abs(k[f]-r[f]) <= t*max(1,abs(r[f])) else 1)' "$1" "$2" "$3" "$4"
}
check "owt: scored tokens equal the reference's" agree "$T/out" "$T/ref" tokens 0
check "owt: mean NLL matches the reference to 1e-6" agree "$T/out" "$T/ref" nll 1e-6
check "owt: Gen-PPL matches the reference to 1e-5" agree "$T/out" "$T/ref" gen_ppl 1e-5
check "owt: entropy matches the reference to 1e-9" agree "$T/out" "$T/ref" entropy 1e-9
check "--json written" cmp -s "$T/kf.json" "$T/out"
"$KF" eval genppl "$T/owt.jsonl" --evaluator "$T/imported" --vocab data/vocab/gpt2 --batch 2 >"$T/outi" 2>"$T/err"; rc=$?
check "an imported checkpoint as the evaluator exits 0 (rc $rc): $(cat "$T/err")" [ $rc -eq 0 ]
check "an imported checkpoint as the evaluator: the same NLL as the HF directory" agree "$T/outi" "$T/out" nll 0
"$PY" tools/ref_gpt2.py genppl "$T/ok" "$T/owt.jsonl" --vocab data/vocab/gpt2 --max-length 20 >"$T/ref20" || bad "reference genppl --max-length"
"$KF" eval genppl "$T/owt.jsonl" --evaluator "$T/ok" --vocab data/vocab/gpt2 --max-length 20 >"$T/out20" 2>/dev/null
check "--max-length 20: tokens equal the reference's" agree "$T/out20" "$T/ref20" tokens 0
check "--max-length 20: Gen-PPL matches" agree "$T/out20" "$T/ref20" gen_ppl 1e-5
# a text longer than the 64-token context: scored in windows, each restarting the context
"$PY" tools/ref_gpt2.py genppl "$T/ok" "$T/owt.jsonl" --vocab data/vocab/gpt2 --max-length 150 >"$T/ref150" || bad "reference genppl --max-length 150"
"$KF" eval genppl "$T/owt.jsonl" --evaluator "$T/ok" --vocab data/vocab/gpt2 --max-length 150 --batch 3 >"$T/out150" 2>/dev/null
check "windows (--max-length 150 > context 64): tokens equal the reference's" agree "$T/out150" "$T/ref150" tokens 0
check "windows: mean NLL matches the reference to 1e-6" agree "$T/out150" "$T/ref150" nll 1e-6

# BERT-id completions (LM1B-style): [CLS] prefix, [SEP] then junk, [MASK];
# decoded with WordPiece + HF's cleanup ("do n ' t" spacing), re-tokenised with GPT-2
mkdir -p "$T/bert"
printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]' the man "'" s dog did n '##t' go home . , he said it was fine '!' '?' walk '##ing' t >"$T/bert/vocab.txt"
cat >"$T/lm1b.jsonl" <<'EOF'
{"prefix": [2, 5, 6, 7, 8, 9], "completion": [10, 11, 7, 26, 13, 14, 15, 3, 17, 18]}
{"prefix": [2, 17, 18, 19, 20, 21], "completion": [22, 4, 5, 9, 24, 25, 16, 23, 3, 3, 0, 0]}
EOF
"$PY" tools/ref_gpt2.py genppl "$T/ok" "$T/lm1b.jsonl" --vocab "$T/bert" >"$T/refb" || bad "reference genppl (lm1b)"
"$KF" eval genppl "$T/lm1b.jsonl" --evaluator "$T/ok" --vocab "$T/bert" >"$T/outb" 2>"$T/err"; rc=$?
cat "$T/outb"; cat "$T/refb"
check "genppl lm1b exits 0 (rc $rc): $(cat "$T/err")" [ $rc -eq 0 ]
check "lm1b: scored tokens equal the reference's (same re-tokenised text)" agree "$T/outb" "$T/refb" tokens 0
check "lm1b: mean NLL matches the reference to 1e-6" agree "$T/outb" "$T/refb" nll 1e-6
check "lm1b: Gen-PPL matches the reference to 1e-5" agree "$T/outb" "$T/refb" gen_ppl 1e-5
check "lm1b: entropy matches the reference" agree "$T/outb" "$T/refb" entropy 1e-9

# the same samples as text (the release's output: decoded, EOS kept) score the same
cat >"$T/text.jsonl" <<'EOF'
{"prefix": "The city council voted on Tuesday to approve", "completion": " the budget, which includes money for schools.<|endoftext|>,-."}
{"prefix": "Scientists say the new study shows that", "completion": " the drug works well in mice."}
EOF
head -n 2 "$T/owt.jsonl" >"$T/owt2.jsonl"
"$KF" eval genppl "$T/owt2.jsonl" --evaluator "$T/ok" --vocab data/vocab/gpt2 >"$T/ids.out" 2>/dev/null
"$KF" eval genppl "$T/text.jsonl" --evaluator "$T/ok" >"$T/text.out" 2>"$T/err"; rc=$?
check "text samples exit 0 (rc $rc): $(cat "$T/err")" [ $rc -eq 0 ]
check "text samples: the ids' tokens" agree "$T/text.out" "$T/ids.out" tokens 0
check "text samples: the ids' NLL" agree "$T/text.out" "$T/ids.out" nll 1e-12

# usage errors
"$KF" eval genppl "$T/lm1b.jsonl" --evaluator "$T/ok" >"$T/out" 2>&1; rc=$?
check "id arrays without --vocab exit 1 saying so (rc $rc)" exits_saying $rc 1 "$T/out" 'need --vocab'
"$KF" eval genppl "$T/lm1b.jsonl" >"$T/out" 2>&1; rc=$?
check "no --evaluator is a usage error (rc $rc)" [ $rc -eq 2 ]
"$KF" eval genppl --help >/dev/null; check "genppl --help exits 0" [ $? -eq 0 ]
finish
