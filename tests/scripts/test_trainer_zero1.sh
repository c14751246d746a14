#!/usr/bin/env bash
# ZeRO-1 (resources.zero1) on the CPU backend under mpirun -np 2: the
# gradients reduce-scattered in rank order, each rank updating its shard of
# the optimizer state, the weights all-gathered. The collectives alone
# (test_trainer_dist under mpirun), then training against the all-reduce run
# (fp16 then fp32 phases, 2 micro-batches per rank, clipping): the same
# weights, optimizer state and log (loss, grad_norm, loss_scale, skipped)
# bitwise, with the overlap in small buckets and without it, for a
# distillation stage, and over 8 ranks. Checkpoints keep the all-reduce's
# format: a ZeRO-1 run resumes as ZeRO-1, as an all-reduce run and on one
# rank, and an all-reduce checkpoint resumes as ZeRO-1, each ending bitwise
# where the uninterrupted run does. Last, kf jobs plan's memory per rank and
# a bad value refused.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_trainer.sh
T=$(mktemp -d /tmp/kf_zero1_XXXXXX); trap 'rm -rf "$T"' EXIT
trainer_setup "$T"
C=$T/cfg.yaml
S="stages.0.steps=10 defaults.checkpoint_every=5"
fields() { # the log without its timings
  sed -E 's/"(tokens_per_s|ms_step|ms_grad_wait|time)":[^,}]*,?//g' "$1"
}
same_log() { cmp -s <(fields "$1/log.jsonl") <(fields "$2/log.jsonl"); }
run2() { # run2 DIR ARGS...: np=2, rc in $rc
  local r=$1; shift
  $MPIRUN -np 2 "$KF" train "$C" --stage ar --run-dir "$r" $S "$@" 2>"$r.err"; rc=$?
}

# the collectives alone, on a million random floats per rank (test_trainer_dist.c)
DT=${KF_TEST_BUILD:-build}/tests/test_trainer_dist
out=$($MPIRUN -np 2 "$DT" 2>&1); rc=$?
check "np=2 $DT exits 0 (rc $rc): $(echo "$out" | grep -m1 FAIL)" [ $rc -eq 0 ]
check "np=2 $DT: both ranks pass every check" [ "$(echo "$out" | grep -c ' passed, 0 failed$')" -eq 2 ]

# all-reduce vs ZeRO-1, 2 ranks x 2 micro-batches of 2
run2 "$T/ar2" defaults.micro_batch=2
check "np=2 all-reduce exits 0 (rc $rc): $(tail -1 "$T/ar2.err")" [ $rc -eq 0 ]
for mb in 0 0.0005; do
  run2 "$T/z-$mb" defaults.micro_batch=2 resources.zero1=true resources.bucket_mb=$mb
  check "np=2 zero1 bucket_mb $mb exits 0 (rc $rc): $(tail -1 "$T/z-$mb.err")" [ $rc -eq 0 ]
  check "np=2 zero1 bucket_mb $mb says so" grep -q 'ZeRO-1' "$T/z-$mb.err"
  check "zero1 bucket_mb $mb == all-reduce: weights, EMA, moments, bitwise" \
    same_weights "$T/z-$mb/stages/ar" "$T/ar2/stages/ar"
  check "zero1 bucket_mb $mb == all-reduce: EMA and first moments of step 5, bitwise" \
    eval "cmp -s $T/z-$mb/stages/ar/ckpt/step-5/ema.safetensors $T/ar2/stages/ar/ckpt/step-5/ema.safetensors &&
          cmp -s $T/z-$mb/stages/ar/ckpt/step-5/adam_m.safetensors $T/ar2/stages/ar/ckpt/step-5/adam_m.safetensors"
  check "zero1 bucket_mb $mb == all-reduce: losses, norms, scales, skips, validation" \
    same_log "$T/z-$mb/stages/ar" "$T/ar2/stages/ar"
done
# the PFLM student (distill_ar): its noise encoder's gradients are not adjacent
# to the embedding's, a bucket boundary inside a shard
K2="stages.1.steps=4 stages.1.teacher=$T/ar2/stages/ar/final/model.safetensors defaults.micro_batch=2"
for z in false true; do
  $MPIRUN -np 2 "$KF" train "$C" --stage k2 --run-dir "$T/k2-$z" $K2 resources.zero1=$z \
    resources.bucket_mb=0.0005 2>"$T/k2-$z.err"; rc=$?
  check "np=2 distill_ar zero1 $z exits 0 (rc $rc): $(tail -1 "$T/k2-$z.err")" [ $rc -eq 0 ]
done
check "distill_ar: zero1 == all-reduce, bitwise" same_weights "$T/k2-true/stages/k2" "$T/k2-false/stages/k2"

# 8 ranks: the chain through all of them, and the last rank's shard empty
# (27006 parameters in shards of 4096)
for z in false true; do
  $MPIRUN -np 8 "$KF" train "$C" --stage ar --run-dir "$T/n8-$z" stages.0.steps=6 \
    resources.zero1=$z resources.bucket_mb=0.0005 2>"$T/n8-$z.err"; rc=$?
  check "np=8 zero1 $z exits 0 (rc $rc): $(tail -1 "$T/n8-$z.err")" [ $rc -eq 0 ]
done
check "np=8: zero1 == all-reduce, bitwise" same_weights "$T/n8-true/stages/ar" "$T/n8-false/stages/ar"

L=$T/ar2/stages/ar/log.jsonl
check "the run clips (a grad_norm above clip 1.0)" \
  eval "grep -oE '\"grad_norm\":[0-9.e+-]+' $L | awk -F: '\$2 > 1 { f = 1 } END { exit !f }'"
check "the run skips a non-finite fp16 step" grep -q '"skipped":1' "$L"
check "the run has fp16 and fp32 steps" eval "grep -q '\"phase\":\"fp16\"' $L && grep -q '\"phase\":\"fp32\"' $L"

# resume: a ZeRO-1 checkpoint of step 5 as ZeRO-1 and as all-reduce; an
# all-reduce one as ZeRO-1
for pair in "z z" "z ar" "ar z"; do
  set -- $pair
  r=$T/res-$1-$2
  o1=(defaults.micro_batch=2); [ $1 = z ] && o1+=(resources.zero1=true)
  o2=(defaults.micro_batch=2); [ $2 = z ] && o2+=(resources.zero1=true)
  run2 "$r" "${o1[@]}" --stop-at 5
  check "np=2 $1 --stop-at 5 exits 75 (rc $rc)" [ $rc -eq 75 ]
  run2 "$r" "${o2[@]}" --resume
  check "np=2 $2 resumes a $1 checkpoint (rc $rc): $(tail -1 "$r.err")" [ $rc -eq 0 ]
  check "... and ends bitwise as the uninterrupted run" same_weights "$r/stages/ar" "$T/ar2/stages/ar"
done

# a 2-rank ZeRO-1 checkpoint on 1 rank (no micro-batches inside a rank, so
# that one process accumulating them reproduces the 2 ranks' sum)
run2 "$T/n2" defaults.micro_batch=4 resources.zero1=true --stop-at 5
check "np=2 zero1 micro 4 --stop-at 5 exits 75 (rc $rc)" [ $rc -eq 75 ]
"$KF" train "$C" --stage ar --run-dir "$T/n2" $S defaults.micro_batch=4 --resume 2>"$T/n1.err"; rc=$?
check "np=1 resumes a 2-rank zero1 checkpoint (rc $rc): $(tail -1 "$T/n1.err")" [ $rc -eq 0 ]
"$KF" train "$C" --stage ar --run-dir "$T/n1" $S defaults.micro_batch=4 2>/dev/null
check "... and ends bitwise as one process does" same_weights "$T/n2/stages/ar" "$T/n1/stages/ar"

# kf jobs plan's memory per rank: 20 bytes per parameter, 8 + 12 / 8 over 8 ranks under ZeRO-1
mem() { "$KF" jobs plan configs/gpt2-124m.yaml "$@" | awk '$2 == "ar" { print $(NF-3) }'; }
a=$(mem) z=$(mem resources.zero1=true)
check "jobs plan: 124M AR memory per rank 3.24GB, got $a" [ "$a" = 3.24GB ]
check "jobs plan: ... 1.54GB under ZeRO-1 over 8 ranks, got $z" [ "$z" = 1.54GB ]

"$KF" train "$C" --stage ar --run-dir "$T/bad" resources.zero1=2 2>"$T/bad.err"
check "a non-boolean zero1 is refused" grep -q "zero1" "$T/bad.err"
finish
