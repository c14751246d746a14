#!/usr/bin/env bash
# Retention keeps the newest keep_checkpoints checkpoints that verify: the two
# runs that lost progress before (a corrupt checkpoint kept, the good one
# deleted; `latest` naming a deleted checkpoint, every resume from step 0),
# scaled down: checkpoint_every 5, preempted with --stop-at, one byte flipped
# in each file of the newest checkpoint. Then the stage finishes with weights
# bitwise those of an uninterrupted run.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_jobs.sh
need_data
T=$(mktemp -d /tmp/kf-test-retention.XXXXXX)
trap 'rm -rf "$T"' EXIT
tiny_config "$T/cfg.yaml" 12 1

# flip FILE OFFSET: xor one byte with 0x40
flip() {
  local b; b=$(od -An -tu1 -j"$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $((b ^ 64)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
corrupt_ckpt() { local f; for f in "$1"/*; do flip "$f" 40; done; }
train() { # RUN KEEP STOP-AT [more args]: kf train of stage ar, resumed
  local r=$1 keep=$2 stop=$3; shift 3
  "$KF" train "$T/cfg.yaml" --stage ar --run-dir "$r" --resume ${stop:+--stop-at "$stop"} \
    defaults.checkpoint_every=5 defaults.keep_checkpoints="$keep" "$@"
}
latest_is() { [ "$(cat "$1/latest" 2>/dev/null)" = "$2" ]; }

# --- the reference: uninterrupted
train "$T/ref" 2 "" > "$T/ref.log" 2>&1
check "uninterrupted run exits 0" [ $? -eq 0 ]

# --- keep 2: preempted at 6 (step-5, step-6), step-6 corrupted, resumed and
# preempted at 8: step-5 (good) is kept, step-6 moved to corrupt/
R=$T/keep2; C=$R/stages/ar/ckpt
train "$R" 2 6 > "$T/k2a.log" 2>&1; rc=$?
check "keep 2: preempted at 6 exits 75 (got $rc)" [ $rc -eq 75 ]
check "keep 2: step-5 and step-6 written" eval "[ -f $C/step-5/state.yaml ] && [ -f $C/step-6/state.yaml ]"
corrupt_ckpt "$C/step-6"
train "$R" 2 8 > "$T/k2b.log" 2>&1; rc=$?
check "keep 2: second preemption exits 75 (got $rc)" [ $rc -eq 75 ]
check "keep 2: the resume says step-6 does not verify and where it went" grep -q "step-6 does not verify.*moved to .*ckpt/corrupt/step-6" "$T/k2b.log"
check "keep 2: resumed from step-5" grep -q "resumed from .*/step-5 (step 5" "$T/k2b.log"
check "keep 2: good step-5 kept" test -f "$C/step-5/state.yaml"
check "keep 2: step-8 written" test -f "$C/step-8/state.yaml"
check "keep 2: corrupt step-6 not among the checkpoints" test ! -e "$C/step-6"
check "keep 2: corrupt step-6 in ckpt/corrupt/" test -f "$C/corrupt/step-6/state.yaml"
check "keep 2: latest names step-8" latest_is "$C" step-8
train "$R" 2 "" > "$T/k2c.log" 2>&1; rc=$?
check "keep 2: finishes (exit $rc)" [ $rc -eq 0 ]
check "keep 2: resumed from step-8" grep -q "resumed from .*/step-8 (step 8" "$T/k2c.log"
check "keep 2: final weights bitwise those of the uninterrupted run" cmp -s \
  "$R/stages/ar/final/model.safetensors" "$T/ref/stages/ar/final/model.safetensors"

# --- keep 1: preempted at 6 (step-6 only), corrupted: the resume starts at 0,
# is preempted at 4, and the next resume starts from step-4 (not 0 again)
R=$T/keep1; C=$R/stages/ar/ckpt
train "$R" 1 6 > "$T/k1a.log" 2>&1
corrupt_ckpt "$C/step-6"
train "$R" 1 4 > "$T/k1b.log" 2>&1; rc=$?
check "keep 1: preempted at 4 exits 75 (got $rc)" [ $rc -eq 75 ]
check "keep 1: no checkpoint verifies: starts at step 0" grep -q "no checkpoint to resume from" "$T/k1b.log"
check "keep 1: the new step-4 kept" test -f "$C/step-4/state.yaml"
check "keep 1: latest names step-4, which exists" eval "latest_is $C step-4 && [ -d $C/step-4 ]"
check "keep 1: corrupt step-6 moved aside" eval "[ ! -e $C/step-6 ] && [ -d $C/corrupt/step-6 ]"
train "$R" 1 "" > "$T/k1c.log" 2>&1; rc=$?
check "keep 1: finishes (exit $rc)" [ $rc -eq 0 ]
check "keep 1: resumed from step-4, not from 0" grep -q "resumed from .*/step-4 (step 4" "$T/k1c.log"
check "keep 1: final weights bitwise those of the uninterrupted run" cmp -s \
  "$R/stages/ar/final/model.safetensors" "$T/ref/stages/ar/final/model.safetensors"

# --- every checkpoint corrupt, `latest` pointing at one: removed, not followed
R=$T/none; C=$R/stages/ar/ckpt
train "$R" 2 6 > /dev/null 2>&1
corrupt_ckpt "$C/step-5"; corrupt_ckpt "$C/step-6"
train "$R" 2 2 > "$T/none.log" 2>&1
check "all corrupt: starts at step 0" grep -q "no checkpoint to resume from" "$T/none.log"
check "all corrupt: both moved aside" eval "[ -d $C/corrupt/step-5 ] && [ -d $C/corrupt/step-6 ]"
check "all corrupt: latest names the new step-2" latest_is "$C" step-2
finish
