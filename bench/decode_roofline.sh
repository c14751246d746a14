#!/usr/bin/env bash
# bench/decode_roofline.sh — where K-Forcing's decoding speed-up over AR is on a
# CPU: `kf bench decode` (k = 4, no frequency penalty: the fused argmax path)
# on untrained models of three sizes (the tiny model, whose weights fit
# in the caches; a mid-size one and the 124M GPT-2 shape, whose weights do
# not) at batch 1, 2, 4 and 16, one thread, CPU-time clock. Each run measures
# the machine's read bandwidth and one-thread GEMM peak and prints each
# method's fraction of its roofline (bench/roofline/decode_limits.h). Speed does
# not depend on the weights: each model is a 1-step AR stage and a 1-step
# PFLM(4) initialised from it. Prints a table; writes sweep.jsonl and the
# speed-up curve sweep.png (kf plot) to OUT_DIR. docs/decode_cpu.md has the
# figures and what they mean.
# usage: bench/decode_roofline.sh [SHARDS] [OUT_DIR]   (default: configs/tiny.yaml's
# shards; a model's vocabulary may exceed the shards': only prefixes are read)
# env: KF_BIN, KF_CPU_ISA (a SIMD level, default the CPU's best), RUNS (default 5),
#      BATCHES (default "1,2,4,16"), MODELS (lines "name vocab hidden heads blocks")
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-data/shards/owt-tiny-bpe512}
OUT=${2:-$(mktemp -d /tmp/kf-bench-roofline.XXXXXX)}
KF=${KF_BIN:-bin/kf}
BATCHES=${BATCHES:-1,2,4,16}
MODELS=${MODELS:-"tiny-v770-96x4 770 96 2 4
mid-v16386-384x6 16386 384 6 6
gpt2-124m 50258 768 12 12"}
mkdir -p "$OUT"
: >"$OUT/sweep.jsonl"
echo "shards $DATA, out $OUT; one thread, CPU-time clock, level ${KF_CPU_ISA:-native}"
printf '%-18s %10s %6s %9s %9s %7s %8s %8s\n' model params batch AR_tok/s KF4_tok/s ratio AR_roof KF4_roof
while read -r name V H NH L; do
  [ -n "$name" ] || continue
  cat >"$OUT/$name.yaml" <<YAML
name: $name
data: {train: $DATA, valid: $DATA}
model: {hidden: $H, heads: $NH, blocks: $L, vocab: $V, seq_len: 128}
defaults: {batch: 2, lr: 1.0e-3, checkpoint_every: 0, log_every: 1, eval_batches: 1, precision: [{mode: fp32}]}
resources: {ranks: 1, time_limit: "00:30:00"}
stages:
  - {name: ar, kind: ar, steps: 1}
  - {name: k4, kind: distill_ar, teacher: ar, init: ar, k: 4, steps: 1, tau: [0.01, 1.0]}
YAML
  for s in ar k4; do
    [ -f "$OUT/$name/stages/$s/final/DONE" ] && continue
    "$KF" train "$OUT/$name.yaml" --stage $s --run-dir "$OUT/$name" >"$OUT/$name-$s.log" 2>&1 ||
      { echo "$name: training stage $s failed: $(tail -n 2 "$OUT/$name-$s.log")" >&2; exit 1; }
  done
  params=$(grep -o '[0-9]* params' "$OUT/$name-ar.log" | head -n 1 | cut -d' ' -f1)
  OMP_NUM_THREADS=1 "$KF" bench decode "$OUT/$name/stages/ar/final" "$OUT/$name/stages/k4/final" \
    --data "$DATA" --batch "$BATCHES" --k 4 --runs "${RUNS:-5}" --freq-penalty 0 --clock cpu \
    --json "$OUT/$name.json" --png "$OUT/$name.png" >"$OUT/$name-bench.log" 2>&1 ||
    { echo "$name: bench decode failed: $(tail -n 2 "$OUT/$name-bench.log")" >&2; exit 1; }
  grep '^CPU limits' "$OUT/$name-bench.log" | sed "s/^/  $name: /"
  node -e 'const [file, name, params] = process.argv.slice(1);
    const r = JSON.parse(require("fs").readFileSync(file, "utf8")).rows;
    const fs = require("fs"), out = process.argv[4];
    for (const a of r.filter((x) => x.method === "AR")) {
      const k = r.find((x) => x.k === 4 && x.batch === a.batch), ratio = k.tokens_per_s / a.tokens_per_s;
      console.log(`${name.padEnd(18)} ${params.padStart(10)} ${String(a.batch).padStart(6)} ` +
        `${a.tokens_per_s.toFixed(1).padStart(9)} ${k.tokens_per_s.toFixed(1).padStart(9)} ` +
        `${ratio.toFixed(2).padStart(7)} ${a.roofline_fraction.toFixed(2).padStart(8)} ` +
        `${k.roofline_fraction.toFixed(2).padStart(8)}`);
      fs.appendFileSync(out, JSON.stringify({batch: a.batch, ["speedup_" + name]: +ratio.toFixed(3)}) + "\n");
    }' "$OUT/$name.json" "$name" "$params" "$OUT/sweep.jsonl"
done <<<"$MODELS"
"$KF" plot "$OUT/sweep.jsonl" -o "$OUT/sweep.png" --x batch \
  $(while read -r name _; do [ -n "$name" ] && printf -- '--key speedup_%s ' "$name"; done <<<"$MODELS") \
  --title "K-Forcing k=4 over AR, tokens/s ratio vs batch (CPU, one thread)" >/dev/null
echo "wrote $OUT/sweep.jsonl and $OUT/sweep.png"
