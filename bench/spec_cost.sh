#!/usr/bin/env bash
# bench/spec_cost.sh — what ragged acceptance costs speculative decoding here
# (trainer/infer/speculative.h): every row decodes with its own KV caches,
# one sequence per pass, so a batch of B prefixes gets none of batching's
# amortisation. Measures, interleaved RUNS times on one machine, `kf sample`
# tokens/s of the AR checkpoint at --batch B and --batch 1 (what batching
# buys: the speed a per-row decoder gives up), and of speculative decoding
# with DRAFT (its rows always run one at a time), with its mean NFE and
# accepted drafts per iteration. Prints a table; one thread.
# usage: bench/spec_cost.sh AR_CKPT DRAFT_CKPT PREFIXES.jsonl [VOCAB_DIR]
# env: KF_BIN, RUNS (default 3), B (default 16), MAX_NEW (default 64)
set -euo pipefail
cd "$(dirname "$0")/.."
AR=$1 DRAFT=$2 PREFIXES=$3 VOCAB=${4:-data/vocab/bytes}
KF=${KF_BIN:-bin/kf}
RUNS=${RUNS:-3} B=${B:-16} MAX_NEW=${MAX_NEW:-64}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
OUT=$(mktemp -d /tmp/kf-spec-cost.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
run() { # NAME ARGS...: tokens/s of every batch, one number a line
    local name=$1
    shift
    "$KF" sample "$AR" --vocab "$VOCAB" --prefix-file "$PREFIXES" --max-new "$MAX_NEW" \
        --seed 1 "$@" >"$OUT/$name.jsonl"
    python3 - "$OUT/$name.jsonl" >>"$OUT/$name.tps" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# one tokens_per_s per batch: the mean over completions weights them alike
print(sum(r["tokens_per_s"] for r in rows) / len(rows))
EOF
}
for _ in $(seq "$RUNS"); do
    run ar_batch --batch "$B"
    run ar_one --batch 1
    run spec --batch "$B" --draft "$DRAFT"
done
python3 - "$OUT" "$B" <<'EOF'
import json, statistics, sys
out, B = sys.argv[1], sys.argv[2]
def med(n): return statistics.median(float(x) for x in open(f"{out}/{n}.tps"))
rows = [json.loads(l) for l in open(f"{out}/spec.jsonl")]
nfe = sum(r["nfe"] for r in rows) / len(rows)
acc = sum(r["accepted"] for r in rows) / sum(r["iters"] for r in rows)
ab, a1, sp = med("ar_batch"), med("ar_one"), med("spec")
print(f"AR --batch {B}: {ab:.1f} tok/s; AR --batch 1: {a1:.1f} tok/s "
      f"(batching buys {ab / a1:.2f}x, which per-row decoding gives up)")
print(f"speculative ({rows[0]['method']}, k {rows[0]['k']}): {sp:.1f} tok/s, "
      f"{sp / ab:.2f}x AR batched, {sp / a1:.2f}x AR one row; "
      f"NFE {nfe:.1f} per {len(rows[0]['completion'])} tokens, {acc:.2f} drafts accepted/iteration")
EOF
