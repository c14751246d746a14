#!/usr/bin/env bash
# Data parallel on the CPU backend under mpirun: np=2 with per-rank batch B is
# bitwise equal to np=1 accumulating two micro-batches of B (AR and a
# distillation stage, so teacher targets do not depend on the rank count);
# a checkpoint written by 2 ranks resumes on 1 (same global batch); SIGUSR1
# to mpirun preempts every rank at the same step (exit 75).
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_trainer.sh
T=$(mktemp -d /tmp/kf_mpi_XXXXXX); trap 'rm -rf "$T"' EXIT
trainer_setup "$T"
C=$T/cfg.yaml

$MPIRUN -np 2 "$KF" train "$C" --stage ar --run-dir "$T/n2" 2>"$T/n2.err"; rc=$?
check "np=2 ar exits 0 (rc $rc): $(tail -1 "$T/n2.err")" [ $rc -eq 0 ]
check "np=2 reports 2 ranks" grep -q '2 ranks x 1 micro-batches x 4' "$T/n2.err"
"$KF" train "$C" --stage ar --run-dir "$T/n1" defaults.micro_batch=4 2>"$T/n1.err"; rc=$?
check "np=1 with 2 micro-batches exits 0 (rc $rc)" [ $rc -eq 0 ]
check "np=1 accumulates 2 micro-batches" grep -q '1 ranks x 2 micro-batches x 4' "$T/n1.err"
check "np=2 == np=1 x 2 micro-batches, bitwise (ar)" same_weights "$T/n2/stages/ar" "$T/n1/stages/ar"

$MPIRUN -np 2 "$KF" train "$C" --stage k2 --run-dir "$T/n2" 2>/dev/null; rc=$?
check "np=2 distill exits 0 (rc $rc)" [ $rc -eq 0 ]
"$KF" train "$C" --stage k2 --run-dir "$T/n1" defaults.micro_batch=4 2>/dev/null
check "np=2 == np=1 x 2 micro-batches, bitwise (distill_ar)" same_weights "$T/n2/stages/k2" "$T/n1/stages/k2"

# world-size change on resume: 2 ranks stop at step 5, 1 rank finishes
$MPIRUN -np 2 "$KF" train "$C" --stage ar --run-dir "$T/w" --stop-at 5 2>/dev/null; rc=$?
check "np=2 --stop-at exits 75 (rc $rc)" [ $rc -eq 75 ]
check "checkpoint has both ranks' files" [ -f "$T/w/stages/ar/ckpt/step-5/rank-00001.yaml" ]
check "state records world 2" grep -q '^world: 2' "$T/w/stages/ar/ckpt/step-5/state.yaml"
"$KF" train "$C" --stage ar --run-dir "$T/w" --resume defaults.micro_batch=4 2>"$T/w.err"; rc=$?
check "np=1 resumes a 2-rank checkpoint (rc $rc): $(tail -1 "$T/w.err")" [ $rc -eq 0 ]
check "... and ends bitwise equal" same_weights "$T/n1/stages/ar" "$T/w/stages/ar"

# SIGUSR1 to mpirun reaches every rank; they agree on one step
$MPIRUN -np 2 "$KF" train "$C" --stage ar --run-dir "$T/p" stages.0.steps=400 defaults.batch=64 2>/dev/null &
pid=$!
check "the preempted job logs 3 steps" wait_until 600 log_lines "$T/p/stages/ar/log.jsonl" 3
kill -USR1 $pid; wait $pid; rc=$?
check "preempted np=2 job exits 75 (rc $rc)" [ $rc -eq 75 ]
n=$(cat "$T/p/stages/ar/ckpt/latest" 2>/dev/null)
check "one checkpoint with both ranks ($n)" bash -c '[ -n "$1" ] && [ -f "$2/$1/rank-00001.yaml" ] && [ -f "$2/$1/state.yaml" ]' _ "$n" "$T/p/stages/ar/ckpt"
finish
