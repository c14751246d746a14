#!/usr/bin/env bash
# `kf bench train --roofline DEVICE`: documented in --help; an unknown device
# is a usage error naming the valid ones; the 124M config's AR and PFLM(4)
# steps are estimated dry (no GPU, no shards) with the per-op table, the
# step's totals and its dominant ops, and the optimizer state per rank with
# and without ZeRO-1. The measured bench (a tiny model on shards built here)
# gives each stage's step against the AR step's, from its own table.
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
# measured: each stage's ms/step against the AR stage's, with the goal; the
# ratio is the table's own ms/step quotient (1 decimal there, so within 1%).
# With noise_cycles set (configs/tiny.yaml's 64), the stand-in teachers of
# k1 (an AR model) and k2 (a PFLM(1)) must fit the stages that load them.
"$KF" shards build configs/tiny-gpt2.yaml --only owt-tiny shards.owt-tiny.seq_len=64 \
  shards.owt-tiny.out="$T/owt" shards.owt-tiny.valid.last=20 >"$T/log" 2>&1; rc=$?
check "tiny shards: rc $rc, $(tail -n 2 "$T/log")" eval "[ $rc -eq 0 ]"
"$KF" bench train configs/tiny-gpt2.yaml data.train="$T/owt" data.valid="$T/owt" model.hidden=16 \
  model.heads=1 model.blocks=1 model.seq_len=64 model.noise_cycles=64 defaults.batch=2 --steps 2 \
  --warmup 0 --stage ar --stage k1 --stage k2 >"$T/m" 2>"$T/err"; rc=$?
check "measured ar, k1 and k2: rc $rc, $(tail -n 3 "$T/err")" eval "[ $rc -eq 0 ]"
check "measured: k1 against the AR step" grep -qE '^  k1 +distill_ar +[0-9.]+ ms +[0-9.]+x$' "$T/m"
check "measured: the AR step is 1.00x" grep -qE '^  ar +ar +[0-9.]+ ms +1.00x$' "$T/m"
check "measured: k2 against the AR step, with the 1.5(k+1) goal" \
  grep -qE '^  k2 +self_forcing .*x  \(goal <= 4.5x\)$' "$T/m"
ratio_matches() {
  awk '$1 == "ar" && NF > 8 { ar = $6 } $1 == "k2" && NF > 8 { k2 = $6 }
       $1 == "k2" && $2 == "self_forcing" && $4 == "ms" { got = $5 + 0 }
       END { want = k2 / ar; d = got - want; if (d < 0) d = -d
             print "got " got "x, want " want "x"; exit !(ar > 0 && d <= 0.01 * want) }' "$T/m"
}
check "measured: k2's ratio is its ms/step over AR's ($(ratio_matches))" eval "ratio_matches >/dev/null"
finish
