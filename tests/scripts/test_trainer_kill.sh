#!/usr/bin/env bash
# kill -9 at random moments (np=2, 6 trials, checkpoints every step so many
# kills land inside a checkpoint write; one trial waits for a write in flight
# on purpose), then `--resume` until done: every run must end bitwise
# identical to an uninterrupted np=2 run.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_trainer.sh
T=$(mktemp -d /tmp/kf_kill_XXXXXX); trap 'rm -rf "$T"' EXIT
trainer_setup "$T"
C=$T/cfg.yaml
OV="stages.0.steps=16 defaults.checkpoint_every=1 defaults.keep_checkpoints=2"

t0=$(date +%s.%N)
$MPIRUN -np 2 "$KF" train "$C" --stage ar --run-dir "$T/ref" $OV 2>"$T/ref.err"; rc=$?
dur=$(echo "$(date +%s.%N) - $t0" | bc)
check "reference run exits 0 (rc $rc): $(tail -1 "$T/ref.err")" [ $rc -eq 0 ]

RANDOM=4242
midwrite=0
for trial in 1 2 3 4 5 6; do
  R=$T/r$trial; ck=$R/stages/ar/ckpt
  $MPIRUN -np 2 "$KF" train "$C" --stage ar --run-dir "$R" $OV 2>/dev/null &
  mp=$!
  if [ $trial -eq 6 ]; then
    # wait until a checkpoint write is in flight (a step-N.tmp exists), then kill
    when="once a write was in flight"; end=$((SECONDS + 60))
    while [ $SECONDS -lt $end ] && ! compgen -G "$ck/step-*.tmp" >/dev/null; do :; done
  else
    r=$((RANDOM % 900 + 50)); pause=$(echo "scale=3; $dur * $r / 1000" | bc); sleep "$pause"
    when="at $pause s of $dur s"
  fi
  inwrite=no; compgen -G "$ck/step-*.tmp" >/dev/null && { inwrite=yes; midwrite=$((midwrite + 1)); }
  victims=($(pgrep -P $mp))
  if [ ${#victims[@]} -gt 0 ]; then kill -9 "${victims[$((RANDOM % ${#victims[@]}))]}"; fi
  wait $mp; rc=$?
  last=$(cat "$ck/latest" 2>/dev/null || echo none)
  # resume (repeatedly, as a requeue would) until the stage completes
  rm -f "$T/resume.err"
  for _ in 1 2 3; do
    [ -f "$R/stages/ar/final/DONE" ] && break
    $MPIRUN -np 2 "$KF" train "$C" --stage ar --run-dir "$R" --resume $OV 2>"$T/resume.err"
  done
  echo "trial $trial: killed $when (mpirun rc $rc) after $last, during a checkpoint write: $inwrite"
  check "trial $trial: resumed run completes: $(tail -1 "$T/resume.err" 2>/dev/null)" [ -f "$R/stages/ar/final/DONE" ]
  check "trial $trial: bitwise identical to the uninterrupted run" same_weights "$T/ref/stages/ar" "$R/stages/ar"
done
echo "kills that interrupted a checkpoint write: $midwrite of 6"
check "at least one kill interrupted a checkpoint write" [ $midwrite -ge 1 ]
finish
