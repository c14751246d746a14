#!/usr/bin/env bash
# kf jobs run's signal forwarding as a stage starts: seeded random schedules
# of one to three TERM/USR1/INT sent to `kf jobs run` 0-40 ms (half the
# cases 0-5 ms) after it says it runs the trainer (the trainer then is being
# exec'ed, loading its config or training), some with the machine loaded by
# process churn.
# Invariant, for every schedule: no signal kills the trainer; it checkpoints
# and exits 75, and kf jobs run says so and exits 75 (the runner starts a
# lone trainer with the signals blocked until its handlers are in place:
# PROC_HOLD_SIGNALS). The seed is printed; KF_TEST_SEED=N replays a draw of
# the schedules (their timing is the machine's).
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_check.sh
KF=${KF_BIN:-bin/kf}
. tests/scripts/lib_jobs.sh
T=$(mktemp -d /tmp/kf-test-runsig.XXXXXX)
trap '[ -n "${KF_TEST_KEEP:-}" ] || rm -rf "$T"' EXIT
seed_random 20261201
need_data
tiny_config "$T/c.yaml" 2000 1
# the moment kf jobs run logs the trainer's start, to a few ms (wait_until
# polls every 0.2 s, past the window that matters here)
see_start() {
  local end=$((SECONDS + 120))
  until grep -q "ar: running" "$1"; do [ $SECONDS -ge $end ] && return 1; sleep 0.002; done
}

for i in $(seq 12); do
  R=$T/run$i
  ms=$((RANDOM % 2 ? RANDOM % 6 : RANDOM % 41)); printf -v after '0.%03d' "$ms"
  nsig=$((RANDOM % 3 + 1)); load=$((RANDOM % 2))
  sigs=(); for _ in $(seq $nsig); do s=(TERM USR1 INT); sigs+=("${s[RANDOM % 3]}"); done
  what="case $i: ${sigs[*]} to kf jobs run $ms ms after it runs the trainer$([ $load = 1 ] && echo ', under churn')"
  [ $load = 1 ] && churn_start
  "$KF" jobs run "$T/c.yaml" --run-dir "$R" --no-sample > "$T/log$i" 2>&1 &
  pid=$!
  see_start "$T/log$i"
  sleep "$after"
  for s in "${sigs[@]}"; do kill -"$s" $pid 2>/dev/null; done
  wait $pid; rc=$?
  churn_stop
  check "$what: kf jobs run exits 75 (got $rc)" [ $rc -eq 75 ]
  check "$what: the trainer checkpointed and exited 75 ($(grep -m1 'kf jobs: ar: [ip]' "$T/log$i"))" \
    grep -q "ar: preempted with a checkpoint" "$T/log$i"
done
finish
