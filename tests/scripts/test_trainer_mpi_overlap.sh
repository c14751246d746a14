#!/usr/bin/env bash
# Gradient all-reduce overlapped with the backward (resources.bucket_mb), CPU
# backend under mpirun -np 2, whatever the bucket size (0: off; tiny, so that
# every part of the backward launches its own bucket; one bucket larger than
# the model): without accumulation the weights are bitwise those of one
# process accumulating the same micro-batches; with 2 micro-batches per rank
# (summed ((g0 + g1) + (g2 + g3)), which one process does not reproduce) they
# are bitwise those of the run without overlap. The PFLM student (distill_ar)
# adds the noise encoder, whose gradients are not adjacent to the
# embedding's: a bucket boundary the bucketing must handle.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_trainer.sh
T=$(mktemp -d /tmp/kf_overlap_XXXXXX); trap 'rm -rf "$T"' EXIT
trainer_setup "$T"
C=$T/cfg.yaml
AR="stages.0.steps=6 defaults.micro_batch"
K2="stages.1.steps=4 stages.1.teacher=$T/ref/stages/ar/final/model.safetensors defaults.micro_batch"

# reference: one process, 8 = 2 micro-batches x 4
for st in ar k2; do
  [ $st = ar ] && o=$AR || o=$K2
  "$KF" train "$C" --stage $st --run-dir "$T/ref" $o=4 2>/dev/null
  check "np=1 $st micro_batch 4 exits 0" [ $? -eq 0 ]
done

for mb in 0 0.0005 1000; do
  for st in ar k2; do
    [ $st = ar ] && o=$AR || o=$K2
    for micro in 4 2; do
      r=$T/n2-$mb-$micro
      $MPIRUN -np 2 "$KF" train "$C" --stage $st --run-dir "$r" $o=$micro resources.bucket_mb=$mb \
        2>"$r.$st.err"; rc=$?
      check "np=2 $st bucket_mb $mb micro_batch $micro exits 0 (rc $rc): $(tail -1 "$r.$st.err")" [ $rc -eq 0 ]
    done
    check "np=2 $st bucket_mb $mb == np=1, bitwise" same_weights "$T/n2-$mb-4/stages/$st" "$T/ref/stages/$st"
    [ $mb = 0 ] || check "np=2 $st bucket_mb $mb micro_batch 2 == no overlap, bitwise" \
      same_weights "$T/n2-$mb-2/stages/$st" "$T/n2-0-2/stages/$st"
  done
done
check "log records the exposed all-reduce time" grep -q '"ms_grad_wait"' "$T/n2-0.0005-4/stages/ar/log.jsonl"

"$KF" train "$C" --stage ar --run-dir "$T/bad" resources.bucket_mb=-1 2>"$T/bad.err"
check "a negative bucket_mb is refused" grep -q "bucket_mb" "$T/bad.err"
finish
