# tools/synth_chain.sh — sourced by bench/convergence.sh and
# tests/scripts/test_convergence.sh, so the curve and the test run one chain:
# the synthetic language (tools/synth_lang.py), its config for `kf jobs run`
# (AR -> PFLM(1) -> PFLM(2) -> PFLM(4), the kept recipe of
# docs/convergence.md), sampling at tau 1 and the worst pairwise TV.
# Reads KF (the kf binary) at call time.

# synth_setup OUT AR_STEPS STEPS EVERY PREFIXES HIDDEN BLOCKS: writes
# OUT/lang (train.txt, prefixes.jsonl) and OUT/synth.yaml (shards in
# OUT/shards; a checkpoint every EVERY steps, 0: the final one only).
synth_setup() {
  local out=$1 ar_steps=$2 steps=$3 every=$4 prefixes=$5 hidden=$6 blocks=$7
  python3 tools/synth_lang.py --out "$out/lang" --seed 1 --prefixes "$prefixes" || return
  cat > "$out/synth.yaml" <<YAML
name: synth
shards:
  synth:
    out: $out/shards
    tokenizer: gpt2
    vocab: data/vocab/bytes
    packing: wrap
    seq_len: 32
    docs_per_shard: 200
    inputs: [{path: $out/lang/train.txt, format: lines}]
    valid: {last: 20}
data: {train: $out/shards, valid: $out/shards}
model: {hidden: $hidden, heads: 2, blocks: $blocks, vocab: 258, seq_len: 32}
defaults: {batch: 16, lr: 3.0e-3, warmup: 10, lr_decay: cosine, lr_min: 3.0e-4, ema: 0.95,
           checkpoint_every: $every, keep_checkpoints: 1000, log_every: 100, eval_batches: 2,
           precision: [{mode: fp32}]}
resources: {ranks: 1, time_limit: "02:00:00", backend: cpu}
stages:
  - {name: ar, kind: ar, steps: $ar_steps}
  - {name: k1, kind: distill_ar, teacher: ar, init: ar, k: 1, steps: $steps, tau: [0.01, 1.0]}
  # the kept recipe (docs/convergence.md): self-forcing at a 3x higher rate
  # and twice the batch of the other stages
  - {name: k2, kind: self_forcing, teacher: k1, k: 2, steps: $steps, batch: 32, lr: 1.0e-2, lr_min: 1.0e-3}
  - {name: k4, kind: self_forcing, teacher: k2, k: 4, steps: $steps, batch: 32, lr: 1.0e-2, lr_min: 1.0e-3}
YAML
}

# synth_sample CKPT K SEED PREFIX_FILE N OUT: N completions of 4 tokens per
# prefix, k tokens per step, tau 1, no frequency penalty.
synth_sample() {
  "$KF" sample "$1" --k "$2" --tau 1 --freq-penalty 0 --prefix-file "$4" \
    --n-per-prefix "$5" --max-new 4 --seed "$3" > "$6"
}

# synth_tv A.jsonl B.jsonl: prints the worst pairwise TV between the two.
synth_tv() { python3 tools/tv_pairs.py "$@" | sed 's/.*"tv": \([0-9.]*\).*/\1/'; }
