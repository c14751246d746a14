#!/usr/bin/env bash
# A dead rank ends the job with a non-zero exit within a bound instead of a
# hang: (a) a rank killed with SIGKILL (mpirun notices), (b) a rank frozen
# with SIGSTOP, as on a lost node (the collective watchdog fires after
# resources.collective_timeout = 10 s), (c) the same under ZeRO-1, (d) a rank
# stopped before it starts MPI: the start-up is watched too. The stage then
# resumes and completes.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_trainer.sh
T=$(mktemp -d /tmp/kf_dead_XXXXXX)
frozen=
cleanup() { [ -n "$frozen" ] && kill -9 "$frozen" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
trainer_setup "$T"
C=$T/cfg.yaml
# 10 s: long enough that a loaded machine's stalls do not trip it before the kill
OV="stages.0.steps=400 defaults.batch=64 defaults.checkpoint_every=5 resources.collective_timeout=10"
BOUND=40   # seconds: timeout 10 s + watchdog period + teardown, with slack for a loaded machine

# wait_bounded LABEL: waits for the job $mp started at $t0 (it and its ranks
# killed if it outlives BOUND + 20 s, so a hang still ends the test) and
# checks that it failed within BOUND
wait_bounded() {
  ( sleep $((BOUND + 20)); pkill -9 -P $mp; kill -9 $mp ) 2>/dev/null & local guard=$!
  wait $mp; local rc=$? dt=$((SECONDS - t0))
  kill $guard 2>/dev/null
  check "$1: job exits non-zero (rc $rc)" [ $rc -ne 0 ]
  check "$1: within ${BOUND}s (took ${dt}s)" [ $dt -le $BOUND ]
}

start_and_wait() {  # starts the job in $1, waits for its first checkpoint
  $MPIRUN -np 2 "$KF" train "$C" --stage ar --run-dir "$1" $OV 2>"$1.err" &
  mp=$!
  check "$1: the first checkpoint is written" wait_until 600 test -f "$1/stages/ar/ckpt/latest"
}

# (a) SIGKILL
start_and_wait "$T/a"
victims=($(pgrep -P $mp)); t0=$SECONDS
kill -9 "${victims[1]}"
wait_bounded "killed rank"

# (b) SIGSTOP: the peer hangs without exiting
start_and_wait "$T/b"
victims=($(pgrep -P $mp)); frozen=${victims[1]}; t0=$SECONDS
kill -STOP "$frozen"
wait_bounded "frozen rank"
check "the watchdog says why" grep -q 'blocked for more than 10 s' "$T/b.err"
kill -9 "$frozen" 2>/dev/null; frozen=

# (c) SIGSTOP under ZeRO-1: its collectives (reduce-scatter, the norm's and
# the weights' all-gathers) are under the same watchdog
OV0=$OV; OV="$OV resources.zero1=true"
start_and_wait "$T/c"
victims=($(pgrep -P $mp)); frozen=${victims[1]}; t0=$SECONDS
kill -STOP "$frozen"
wait_bounded "frozen rank, zero1"
check "frozen rank, zero1: the watchdog says why ($(grep -o 'rank [0-9]/2: .* blocked' "$T/c.err"))" \
  grep -q 'blocked for more than 10 s' "$T/c.err"
kill -9 "$frozen" 2>/dev/null; frozen=
OV=$OV0

# (d) a rank that never starts (stopped before its MPI_Init, as a rank whose
# transport cannot reach the others): the start-up is under the watchdog too
cat > "$T/stop-rank1" <<'EOF'
#!/bin/bash
[ "${OMPI_COMM_WORLD_RANK:-}" = 1 ] && kill -STOP $$
exec "$@"
EOF
chmod +x "$T/stop-rank1"
t0=$SECONDS
$MPIRUN -np 2 "$T/stop-rank1" "$KF" train "$C" --stage ar --run-dir "$T/d" $OV 2>"$T/d.err" &
mp=$!
wait_bounded "rank stopped before MPI_Init"
check "rank stopped before MPI_Init: rank 0 names the start-up ($(grep -o 'rank [0-9]/2: .* blocked' "$T/d.err"))" \
  grep -q 'rank 0/2: MPI start-up (MPI_Init, MPI_Comm_split_type) blocked for more than 10 s' "$T/d.err"
check "rank stopped before MPI_Init: nothing trained" [ ! -e "$T/d/stages/ar/log.jsonl" ]

# resume after the failure completes, 5 steps past the newest checkpoint (a
# fixed step count raced the training: on an idle machine the job got past
# it before the rank froze, and the resume refused a checkpoint past the end)
last=$(sed 's/^step-//' "$T/b/stages/ar/ckpt/latest")
$MPIRUN -np 2 "$KF" train "$C" --stage ar --run-dir "$T/b" --resume $OV stages.0.steps=$((last + 5)) 2>"$T/r.err"; rc=$?
check "resume after a dead rank completes (rc $rc): $(tail -1 "$T/r.err")" [ $rc -eq 0 ]
check "it resumed from a checkpoint" grep -q 'resumed from' "$T/r.err"
finish
