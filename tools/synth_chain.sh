# tools/synth_chain.sh — sourced by bench/convergence.sh,
# bench/convergence_family.sh, bench/convergence_depth.sh,
# tests/scripts/test_convergence.sh and test_convergence_family.sh, so the
# curves and the test run one chain: a synthetic language
# (tools/synth_lang.py), its config for `kf jobs run` (AR -> PFLM(1) ->
# PFLM(2) -> PFLM(4); the self_forcing stages take their kind's defaults,
# common/runconfig.h), sampling at tau 1 and the worst pairwise TV.
# Reads KF (the kf binary) at call time.

# synth_setup OUT AR_STEPS STEPS EVERY PREFIXES HIDDEN BLOCKS [LANG_ARG...]:
# writes OUT/lang (train.txt, prefixes.jsonl, lang.json; LANG_ARGs go to
# tools/synth_lang.py, default --seed 1) and OUT/synth.yaml (shards in
# OUT/shards; a checkpoint every EVERY steps, 0: the final one only;
# SEQ_LEN tokens per sample, default 32). The AR and PFLM(1) stages run at
# lr 3e-3 -> 3e-4, batch 16; PFLM(1) at tau 1.
synth_setup() {
  local out=$1 ar_steps=$2 steps=$3 every=$4 prefixes=$5 hidden=$6 blocks=$7
  shift 7
  [ $# -gt 0 ] || set -- --seed 1
  local seq=${SEQ_LEN:-32}
  python3 tools/synth_lang.py --out "$out/lang" --prefixes "$prefixes" --describe "$@" || return
  cat > "$out/synth.yaml" <<YAML
name: synth
shards:
  synth:
    out: $out/shards
    tokenizer: gpt2
    vocab: data/vocab/bytes
    packing: wrap
    seq_len: $seq
    docs_per_shard: 200
    inputs: [{path: $out/lang/train.txt, format: lines}]
    valid: {last: 20}
data: {train: $out/shards, valid: $out/shards}
model: {hidden: $hidden, heads: 2, blocks: $blocks, vocab: 258, seq_len: $seq}
defaults: {warmup: 10, checkpoint_every: $every, keep_checkpoints: 1000, log_every: 100,
           eval_batches: 2, precision: [{mode: fp32}]}
resources: {ranks: 1, time_limit: "02:00:00", backend: cpu}
stages:
  - {name: ar, kind: ar, steps: $ar_steps, batch: 16, lr: 3.0e-3, lr_decay: cosine, lr_min: 3.0e-4, ema: 0.95}
  # tau 1, the temperature the chain is sampled and scored at (the paper's
  # main recipe); the self_forcing stages inherit it (docs/convergence.md,
  # "Training at the sampling temperature")
  - {name: k1, kind: distill_ar, teacher: ar, init: ar, k: 1, steps: $steps, tau: [1.0, 1.0],
     batch: 16, lr: 3.0e-3, lr_decay: cosine, lr_min: 3.0e-4, ema: 0.95}
  # self_forcing: the kind's default recipe (docs/convergence.md)
  - {name: k2, kind: self_forcing, teacher: k1, k: 2, steps: $steps}
  - {name: k4, kind: self_forcing, teacher: k2, k: 4, steps: $steps}
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

# synth_shuffle IN.jsonl OUT.jsonl: the samples with each generated position
# permuted among the completions of the same prompt (each position's
# distribution given the prompt kept, the joint of the positions destroyed):
# the tests' control of a student that never learnt the joint.
synth_shuffle() {
  python3 - "$1" "$2" <<'PY'
import collections, json, random, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rng = random.Random(7)
groups = collections.defaultdict(list)
for r in rows:
    groups[tuple(r["prefix"])].append(r)
with open(sys.argv[2], "w") as f:
    for g in groups.values():
        cols = [[(r["completion"] + [-1] * 4)[i] for r in g] for i in range(4)]
        for c in cols:
            rng.shuffle(c)
        for n, r in enumerate(g):
            r["completion"] = [cols[i][n] for i in range(4)]
            f.write(json.dumps(r) + "\n")
PY
}

# synth_curve OUT N: samples the AR teacher twice (the noise floor) and every
# checkpoint of k1, k2 and k4 at its k (N completions per prefix of
# OUT/lang/prefixes.jsonl), scores each against the teacher's samples and
# writes OUT/curve.jsonl, one record per step {"step", "k1", "k2", "k4",
# "floor", "floor+0.05"}; prints the noise floor.
synth_curve() {
  local out=$1 n=$2 st k d s
  mkdir -p "$out/samples"
  synth_sample "$out/run/stages/ar/final" 1 1 "$out/lang/prefixes.jsonl" "$n" "$out/samples/ar.jsonl" || return
  synth_sample "$out/run/stages/ar/final" 1 2 "$out/lang/prefixes.jsonl" "$n" "$out/samples/ar-seed2.jsonl" || return
  local floor
  floor=$(synth_tv "$out/samples/ar.jsonl" "$out/samples/ar-seed2.jsonl") || return
  : > "$out/curve.tsv"
  for st in k1 k2 k4; do
    k=${st#k}
    for d in "$out"/run/stages/$st/ckpt/step-*; do
      [ -d "$d" ] || continue
      s=${d##*step-}
      synth_sample "$d" "$k" 1 "$out/lang/prefixes.jsonl" "$n" "$out/samples/$st-$s.jsonl" || return
      printf '%s\t%s\t%s\n' "$st" "$s" "$(synth_tv "$out/samples/$st-$s.jsonl" "$out/samples/ar.jsonl")" >> "$out/curve.tsv"
    done
  done
  python3 - "$out" "$floor" <<'PY'
import collections, json, sys
out, floor = sys.argv[1], float(sys.argv[2])
rows = collections.defaultdict(dict)
for line in open(f"{out}/curve.tsv"):
    st, s, tv = line.split()
    rows[int(s)][st] = float(tv)
with open(f"{out}/curve.jsonl.tmp", "w") as f:
    for s in sorted(rows):
        f.write(json.dumps({"step": s, **rows[s], "floor": floor, "floor+0.05": round(floor + 0.05, 4)}) + "\n")
import os
os.replace(f"{out}/curve.jsonl.tmp", f"{out}/curve.jsonl")
PY
  echo "$floor"
}
