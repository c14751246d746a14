#!/usr/bin/env bash
# `kf bench train --roofline DEVICE`: documented in --help; an unknown device
# is a usage error naming the valid ones; the 124M config's AR and PFLM(4)
# steps are estimated dry (no GPU, no shards) with the per-op table, the
# step's totals and its dominant ops, and the optimizer state per rank with
# and without ZeRO-1.
set -u
cd "$(dirname "$0")/../.."
KF=${KF_BIN:-bin/kf}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. tests/scripts/lib_check.sh

"$KF" bench train --help >"$T/help"; rc=$?
check "--help: rc $rc" eval "[ $rc -eq 0 ]"
check "--help documents --roofline DEVICE" grep -q -- '--roofline DEVICE' "$T/help"

"$KF" bench train configs/gpt2-124m.yaml --roofline h800 >"$T/out" 2>"$T/err"; rc=$?
check "unknown device: rc $rc, $(cat "$T/err")" exits_saying $rc 2 "$T/err" 'unknown device "h800" \(valid: h100, h200, a100\)'
"$KF" bench train configs/gpt2-124m.yaml --roofline h100 --stage nope >"$T/out" 2>"$T/err"; rc=$?
check "unknown stage: rc $rc, $(cat "$T/err")" exits_saying $rc 1 "$T/err" "no stage named 'nope'"

"$KF" bench train configs/gpt2-124m.yaml --roofline h100 --stage ar --stage k4 >"$T/out" 2>"$T/err"; rc=$?
check "124M AR and PFLM(4) dry: rc $rc, $(tail -n 3 "$T/err")" eval "[ $rc -eq 0 ]"
check "two stages estimated" eval "[ \$(grep -c '^step: estimated' '$T/out') -eq 2 ]"
check "AR stage header" grep -q '^stage ar (ar, k 1): 12 x 768, V 50258, batch 16 x 1024, fp16 phase' "$T/out"
check "k4 stage has teacher passes" eval "grep -A40 '^stage k4' '$T/out' | grep -qE '^parts: teacher passes [1-9]'"
check "per-op rows: the linear layers and attention" \
  eval "grep -q '^linear_act ' '$T/out' && grep -q '^linear_bwd ' '$T/out' && grep -q '^attn_bwd ' '$T/out'"
check "dominant ops listed" grep -q '^dominant ops' "$T/out"
check "k4 against the AR step, with the 1.5(k+1) goal" grep -qE '^  k4 +self_forcing .*x  \(goal <= 7.5x\)' "$T/out"
# the model FLOPs of the AR step: 6 * 16368 rows * (12 blocks of 12H^2+5H, plus HV+V) + attention
check "AR model FLOPs 13.07 TFLOP" grep -q 'model FLOPs (6 N tokens + attention) 13.07 TFLOP' "$T/out"
check "AR optimizer state whole: 124.4M params x 12 bytes" grep -q '^optimizer state (AdamW moments, EMA): 1.95 GB per rank$' "$T/out"

# ZeRO-1 over the config's 8 ranks: the first rank's shard of the optimizer state
"$KF" bench train configs/gpt2-124m.yaml --roofline h100 --stage ar resources.zero1=true >"$T/z" 2>"$T/err"; rc=$?
check "124M AR ZeRO-1 dry: rc $rc, $(tail -n 3 "$T/err")" eval "[ $rc -eq 0 ]"
check "ZeRO-1: an eighth of the optimizer state per rank" \
  grep -q '^optimizer state (AdamW moments, EMA): 0.24 GB per rank (ZeRO-1 over 8 ranks; 1.95 GB with the all-reduce)$' "$T/z"
check "ZeRO-1: AdamW over the shard" eval "grep -qE '^adamw +1 +0.3 ' '$T/z'"
finish
