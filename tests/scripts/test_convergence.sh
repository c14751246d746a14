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

. tools/synth_chain.sh
synth_setup "$T" 1000 400 0 2048 32 4 > "$T/gen.log" 2>&1
check "synth_setup: language and config written ($(tail -n 1 "$T/gen.log"))" test -s "$T/lang/prefixes.jsonl"
"$KF" jobs run "$T/synth.yaml" --run-dir "$T/run" --no-sample > "$T/run.log" 2>&1; rc=$?
check "kf jobs run: exit status got $rc want 0 ($(tail -n 1 "$T/run.log"))" test $rc -eq 0

sample() {  # STAGE K SEED OUT
  synth_sample "$T/run/stages/$1/final" "$2" "$3" "$T/lang/prefixes.jsonl" 8 "$4"
}
tv() { synth_tv "$@"; }
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
synth_shuffle "$T/k4.jsonl" "$T/k4-indep.jsonl"
got=$(tv "$T/k4-indep.jsonl" "$T/ar.jsonl")
echo "independent positions: worst pairwise TV $got"
check "independent positions: worst pairwise TV vs AR got $got want > $bound" \
  bash -c '! python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$1" "$2"' _ "$got" "$bound"
finish
