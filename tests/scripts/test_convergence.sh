#!/usr/bin/env bash
# Self-forcing reproduces its AR teacher's joint on a stochastic synthetic
# language (tools/synth_lang.py, docs/convergence.md), through the real CLI:
# text -> `kf shards build` -> `kf jobs run` (AR -> PFLM(1) -> PFLM(2) ->
# PFLM(4), the default recipe) -> `kf sample` -> tools/tv_pairs.py. Each
# PFLM(k) decoding k tokens per step must come within the sampling-noise floor
# (the AR teacher against itself) + a margin of the teacher's samples (worst
# pairwise TV of 4 generated tokens); PFLM(4)'s samples with each position
# shuffled among the completions of one prompt (the distribution of each
# position kept, their joint destroyed: a student that never learnt the joint
# of its k positions) must not.
# The full curve over steps is bench/convergence.sh.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_check.sh
KF=${KF_BIN:-bin/kf}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
T=$(mktemp -d /tmp/kf-test-convergence.XXXXXX)
trap 'rm -rf "$T"' EXIT
MARGIN=0.05

python3 tools/synth_lang.py --out "$T/lang" --seed 1 --prefixes 2048 > "$T/gen.log" 2>&1
check "synth_lang.py: exit status 0 ($(tail -n 1 "$T/gen.log"))" test -s "$T/lang/prefixes.jsonl"
cat > "$T/synth.yaml" <<YAML
name: synth
shards:
  synth:
    out: $T/shards
    tokenizer: gpt2
    vocab: data/vocab/bytes
    packing: wrap
    seq_len: 32
    docs_per_shard: 200
    inputs: [{path: $T/lang/train.txt, format: lines}]
    valid: {last: 20}
data: {train: $T/shards, valid: $T/shards}
model: {hidden: 32, heads: 2, blocks: 4, vocab: 258, seq_len: 32}
defaults: {batch: 16, lr: 3.0e-3, warmup: 10, lr_decay: cosine, lr_min: 3.0e-4, ema: 0.95,
           checkpoint_every: 0, log_every: 100, eval_batches: 2, precision: [{mode: fp32}]}
resources: {ranks: 1, time_limit: "00:10:00", backend: cpu}
stages:
  - {name: ar, kind: ar, steps: 1000}
  - {name: k1, kind: distill_ar, teacher: ar, init: ar, k: 1, steps: 400, tau: [0.01, 1.0]}
  # the kept recipe (docs/convergence.md)
  - {name: k2, kind: self_forcing, teacher: k1, k: 2, steps: 400, batch: 32, lr: 1.0e-2, lr_min: 1.0e-3}
  - {name: k4, kind: self_forcing, teacher: k2, k: 4, steps: 400, batch: 32, lr: 1.0e-2, lr_min: 1.0e-3}
YAML
"$KF" jobs run "$T/synth.yaml" --run-dir "$T/run" --no-sample > "$T/run.log" 2>&1; rc=$?
check "kf jobs run: exit status got $rc want 0 ($(tail -n 1 "$T/run.log"))" test $rc -eq 0

sample() {  # STAGE K SEED OUT
  "$KF" sample "$T/run/stages/$1/final" --k "$2" --tau 1 --freq-penalty 0 \
    --prefix-file "$T/lang/prefixes.jsonl" --n-per-prefix 8 --max-new 4 --seed "$3" > "$4"
}
tv() { python3 tools/tv_pairs.py "$@" | sed 's/.*"tv": \([0-9.]*\).*/\1/'; }
within() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$@"; }
sample ar 1 1 "$T/ar.jsonl"
sample ar 1 2 "$T/ar2.jsonl"
floor=$(tv "$T/ar.jsonl" "$T/ar2.jsonl")
bound=$(python3 -c "print($floor + $MARGIN)")
# the floor itself is small: 16384 completions per side
check "noise floor (AR vs AR) got $floor want <= 0.06" within "$floor" 0.06
for st in k1 k2 k4; do
  k=${st#k}
  sample $st "$k" 1 "$T/$st.jsonl"
  got=$(tv "$T/$st.jsonl" "$T/ar.jsonl")
  echo "PFLM($k) at k=$k: worst pairwise TV $got (floor $floor, bound $bound)"
  check "PFLM($k) at k=$k: worst pairwise TV vs AR got $got want <= floor $floor + $MARGIN" \
    within "$got" "$bound"
done
# the negative control: k4's samples with each position shuffled among the
# completions of the same prompt (each position's distribution given the prompt
# kept, the joint of the positions destroyed)
python3 - "$T/k4.jsonl" "$T/k4-indep.jsonl" <<'PY'
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
got=$(tv "$T/k4-indep.jsonl" "$T/ar.jsonl")
echo "independent positions: worst pairwise TV $got"
check "independent positions: worst pairwise TV vs AR got $got want > $bound" \
  bash -c '! python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$1" "$2"' _ "$got" "$bound"
finish
