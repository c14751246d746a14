#!/usr/bin/env bash
# slurm/stage.sbatch launches a 2-rank stage again when its ranks died before
# all of them were through MPI's start-up (kf train's KF_LAUNCH_MARKER never
# written), at most KF_LAUNCH_RETRIES times, and never a run that started.
# A seeded random schedule (KF_TEST_SEED replays) of faults injected by a KF_BIN
# wrapper on one rank of chosen launches (srun steps): a signal (SEGV, KILL)
# or exit 1 before kf starts, as a rank crashing in PMIx or MPI_Init does, or
# after every rank is through the start-up (once the marker exists). Every
# case's outcome is predicted here, independently of the wrapper's code, from
# (when, failing launches, retries): the launches made (the fault log and the
# wrapper's "running" lines), complete or failed, and a complete stage's
# weights bitwise those of the run without faults.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_jobs.sh      # slurm_up, job_of, job_ended, wait_until, checks
. tests/scripts/lib_trainer.sh   # trainer_setup, same_weights
T=$(mktemp -d /tmp/kf-test-launch.XXXXXX); chmod 711 "$T"   # munged: o+x on every directory above its socket
trap 'slurm_down; if [ $FAIL -eq 0 ] && [ -z "${KF_TEST_KEEP:-}" ]; then rm -rf "$T"; else echo "kept $T for inspection"; fi' EXIT
slurm_up "$T/cluster" || { bad "local Slurm cluster starts"; finish; exit 1; }
ok "local Slurm cluster up"
trainer_setup "$T"
sed -i '/name: k2/d' "$T/cfg.yaml"   # one stage
OV=(stages.0.steps=40 resources.ranks=2 resources.collective_timeout=30)

# kf-fault: kf, except for kf train on rank FAULT_RANK of the launches listed in
# FAULT_LAUNCHES (1 = the job's first srun step), where it dies by FAULT_HOW
# (a signal name; exit1: exit 1) FAULT_WHEN (before kf runs, or after the marker)
cat > "$T/kf-fault" <<EOF
#!/bin/bash
launch=\$((\${SLURM_STEP_ID:-0} + 1)); rank=\${SLURM_PROCID:-0}
if [ "\$1" = train ] && [ "\$rank" = "\${FAULT_RANK:-}" ] && [[ ",\${FAULT_LAUNCHES:-}," == *",\$launch,"* ]]; then
  echo "launch \$launch rank \$rank \$FAULT_WHEN \$FAULT_HOW" >> "\$FAULT_LOG"
  if [ "\$FAULT_WHEN" = before ]; then
    [ "\$FAULT_HOW" = exit1 ] && exit 1
    kill -"\$FAULT_HOW" \$\$
  fi
  "$KF" "\$@" & kf=\$!
  for _ in \$(seq 3000); do [ -e "\$KF_LAUNCH_MARKER" ] || ! kill -0 \$kf 2>/dev/null && break; sleep 0.02; done
  cat "\$KF_LAUNCH_MARKER" > "\$FAULT_LOG.marker" 2>/dev/null
  kill -"\${FAULT_HOW/exit1/KILL}" \$kf; wait \$kf; rc=\$?
  [ "\$FAULT_HOW" = exit1 ] && exit 1
  exit \$rc
fi
exec "$KF" "\$@"
EOF
chmod +x "$T/kf-fault"

submit() {  # RUN [ENV=VALUE...]
  local run=$1; shift
  env "$@" "$KF" jobs submit "$T/cfg.yaml" --run-dir "$run" "${OV[@]}" > "$run.submit" 2>&1
}

seed_random 4242
N=6
WHENS=(before after); HOWS=(SEGV KILL exit1)
declare -A when how rank fails retries
for i in $(seq 1 $N); do
  when[$i]=${WHENS[RANDOM % 2]}; how[$i]=${HOWS[RANDOM % 3]}; rank[$i]=$((RANDOM % 2))
  retries[$i]=$((RANDOM % 3))
  # the first launch fails, and the next ones up to a random count (before)
  f=1; [ "${when[$i]}" = before ] && f=$((1 + RANDOM % 3))
  fails[$i]=$(seq -s, 1 $f)
done
# case 1 is always "before, first launch only, one retry" (what CI saw),
# case 2 a fault after start-up; case 0 has no fault: the reference
when[1]=before; fails[1]=1; retries[1]=1
when[2]=after; fails[2]=1
submit "$T/r0"; j0=$(job_of "$T/r0")
check "(0) submit without faults" [ -n "$j0" ]
for i in $(seq 1 $N); do
  submit "$T/r$i" KF_BIN="$T/kf-fault" FAULT_LOG="$T/r$i.faults" FAULT_RANK=${rank[$i]} FAULT_HOW=${how[$i]} \
    FAULT_WHEN=${when[$i]} FAULT_LAUNCHES=${fails[$i]} KF_LAUNCH_RETRIES=${retries[$i]}
  job[$i]=$(job_of "$T/r$i")
  echo "  case $i: rank ${rank[$i]} dies by ${how[$i]} ${when[$i]} start-up in launches ${fails[$i]}; KF_LAUNCH_RETRIES=${retries[$i]} (job ${job[$i]})"
  check "($i) submit" [ -n "${job[$i]}" ]
done
all_ended() { job_ended "$j0" || return 1; for i in $(seq 1 $N); do job_ended "${job[$i]}" || return 1; done; }
wait_until 600 all_ended
check "(0) the run without faults completes" test -f "$T/r0/stages/ar/final/DONE"
check "(0) one launch, no relaunch" bash -c '[ "$(grep -c "running (pid" "$1")" -eq 1 ] && ! grep -q "launching again" "$1"' _ "$T/r0/stages/ar/slurm.out"

for i in $(seq 1 $N); do
  out=$T/r$i/stages/ar/slurm.out
  nf=$(tr ',' '\n' <<<"${fails[$i]}" | grep -c .)
  # the prediction: a fault before start-up on launch L is relaunched while
  # L <= retries; a fault after start-up never is
  if [ "${when[$i]}" = before ]; then
    launches=$((nf < retries[$i] ? nf + 1 : retries[$i] + 1)); complete=$((nf <= retries[$i]))
  else
    launches=1; complete=0
  fi
  got_l=$(grep -c "running (pid" "$out" 2>/dev/null); got_f=$(grep -c . "$T/r$i.faults" 2>/dev/null)
  check "($i) launches: got $got_l, want $launches" [ "${got_l:-0}" -eq $launches ]
  check "($i) faults injected: got $got_f, want $((launches < nf ? launches : nf))" [ "${got_f:-0}" -eq $((launches < nf ? launches : nf)) ]
  check "($i) relaunch lines: got $(grep -c "launching again" "$out"), want $((launches - 1))" \
    [ "$(grep -c "launching again" "$out")" -eq $((launches - 1)) ]
  check "($i) the marker is removed" bash -c '! ls "$1"/slurm/ar.launched.* >/dev/null 2>&1' _ "$T/r$i"
  if [ $complete = 1 ]; then
    check "($i) complete, job $(job_state "${job[$i]}")" bash -c 'test -f "$1/stages/ar/final/DONE" && [ "$2" = COMPLETED ]' _ "$T/r$i" "$(job_state "${job[$i]}")"
    check "($i) weights bitwise those of the run without faults" same_weights "$T/r0/stages/ar" "$T/r$i/stages/ar"
  else
    check "($i) not complete, job $(job_state "${job[$i]}")" bash -c '! test -e "$1/stages/ar/final/DONE" && [ "$2" = FAILED ]' _ "$T/r$i" "$(job_state "${job[$i]}")"
    if [ "${when[$i]}" = before ]; then
      check "($i) says the ranks died in start-up in all $launches launches" grep -q "in all $launches launches" "$out"
    else
      check "($i) rank 0 wrote the marker once every rank started: $(cat "$T/r$i.faults.marker" 2>/dev/null)" \
        grep -qx "ranks 2" "$T/r$i.faults.marker"
      check "($i) a run that started is not relaunched, and says it exited" \
        bash -c '! grep -q "before all were through" "$1" && grep -q "not complete (trainer exit" "$1"' _ "$out"
    fi
  fi
done
finish
