#!/usr/bin/env bash
# bench/decode_cpu.sh — what sets K-Forcing's decoding speed-up over AR on a CPU:
# `kf bench decode` (batch 16, k = 4, no frequency penalty: the fused argmax
# path of the main command's samples) on untrained models of several output
# layer and backbone sizes, at each SIMD level this CPU has (KF_CPU_ISA), one
# thread, timed by CPU time (CLOCK=wall for wall-clock; a shared machine's other
# jobs make wall-clock ratios vary by 2x from run to run). Speed does not depend on the weights, so each model is a 1-step AR
# stage and a 1-step PFLM(4) initialised from it. docs/decode_cpu.md has the
# figures and what they mean.
# usage: bench/decode_cpu.sh [SHARDS] [OUT_DIR]   (default: configs/tiny.yaml's shards; the
# model's vocabulary may exceed the shards': only prefixes are read)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-data/shards/owt-tiny-bytes}
OUT=${2:-$(mktemp -d /tmp/kf-bench-decode.XXXXXX)}
KF=${KF_BIN:-bin/kf}
LEVELS=${LEVELS:-"avx2 avx512 vnni"}
# name vocab hidden heads blocks (v258-96x4: configs/tiny.yaml; v50258-64x2: tiny-gpt2.yaml)
MODELS=${MODELS:-"v258-96x4 258 96 2 4
v4354-96x4 4354 96 2 4
v4354-64x2 4354 64 2 2
v8194-64x2 8194 64 2 2
v16386-64x2 16386 64 2 2
v32770-64x2 32770 64 2 2
v50258-64x2 50258 64 2 2
v8194-128x4 8194 128 2 4"}
mkdir -p "$OUT"
echo "shards $DATA, out $OUT; tokens/s (${CLOCK:-cpu} clock) at batch 16, one thread: AR / K-Forcing k=4 (ratio)"
printf '%-14s %6s %6s' model vocab params
for l in $LEVELS; do printf ' %19s' "$l AR/KF4 (x)"; done; echo
while read -r name V H NH L; do
  [ -n "$name" ] || continue
  cat >"$OUT/$name.yaml" <<YAML
name: $name
data: {train: $DATA, valid: $DATA}
model: {hidden: $H, heads: $NH, blocks: $L, vocab: $V, seq_len: 128}
defaults: {batch: 2, lr: 1.0e-3, checkpoint_every: 0, log_every: 1, eval_batches: 1, precision: [{mode: fp32}]}
resources: {ranks: 1, time_limit: "00:10:00"}
stages:
  - {name: ar, kind: ar, steps: 1}
  - {name: k4, kind: distill_ar, teacher: ar, init: ar, k: 4, steps: 1, tau: [0.01, 1.0]}
YAML
  for s in ar k4; do
    "$KF" train "$OUT/$name.yaml" --stage $s --run-dir "$OUT/$name" >"$OUT/$name-$s.log" 2>&1 ||
      { echo "$name: training stage $s failed: $(tail -n 2 "$OUT/$name-$s.log")" >&2; exit 1; }
  done
  params=$(grep -o '[0-9]* params' "$OUT/$name-ar.log" | head -n 1 | cut -d' ' -f1)
  printf '%-14s %6s %6s' "$name" "$V" "$params"
  for l in $LEVELS; do
    KF_CPU_ISA=$l OMP_NUM_THREADS=1 "$KF" bench decode "$OUT/$name/stages/ar/final" "$OUT/$name/stages/k4/final" \
      --data "$DATA" --batch 16 --k 4 --runs "${RUNS:-3}" --freq-penalty 0 --clock "${CLOCK:-cpu}" \
      --json "$OUT/$name-$l.json" --png "$OUT/$name-$l.png" >"$OUT/$name-$l.log" 2>&1 ||
      { echo "$name: bench decode at $l failed: $(tail -n 2 "$OUT/$name-$l.log")" >&2; exit 1; }
    node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).rows;
      const a = r.find((x) => x.method === "AR"), k = r.find((x) => x.k === 4);
      process.stdout.write(` ${a.tokens_per_s.toFixed(0).padStart(6)}/${k.tokens_per_s.toFixed(0).padStart(6)} (${(k.tokens_per_s / a.tokens_per_s).toFixed(2)})`)' \
      "$OUT/$name-$l.json"
  done
  echo
done <<<"$MODELS"
