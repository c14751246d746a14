# tests/scripts/lib_check.sh — the script tests' check counting (sourced, not
# run; lib_jobs.sh and lib_trainer.sh source it too).
#   check MSG CMD [ARGS...]   one check: passes when CMD exits 0, else prints
#                             "FAIL [Ts] MSG". CMD is one command, so a compound
#                             condition goes in `eval "..."`, `bash -c` or a
#                             function: `check M [ a ] && [ b ]` would count [ a ]
#                             alone and leave [ b ] outside the count.
#   ok / bad MSG              count a pass / a failure directly
#   exits_saying RC WANT FILE REGEX
#                             RC is WANT and FILE matches REGEX (grep -E)
#   finish                    prints "N passed, N failed"; status 0 when none failed
#   wait_until SECONDS CMD... polls CMD every 0.2 s; false after SECONDS. Tests
#                             wait on a condition, never a fixed sleep, and give
#                             it minutes: a loaded machine is slow, not broken.
#   log_lines FILE N          FILE exists and holds at least N lines
#   require_torch PY          ends the test as one failure unless PY imports torch
#                             (Debian's python3-torch: a missing torch fails, never skips)
#   seed_random DEFAULT       seeds bash's RANDOM with $KF_TEST_SEED, else DEFAULT, and
#                             prints the seed (KF_TEST_SEED=N replays the draws)
#   churn_start / churn_stop  processes started and ended without pause on two
#                             cores, until stopped (or the test ends): a busy node,
#                             on which signals and child exits land at every instant
PASS=0; FAIL=0
ok()  { PASS=$((PASS + 1)); }
bad() { FAIL=$((FAIL + 1)); echo "FAIL [${SECONDS}s] $*"; }
check() { local msg=$1; shift; if "$@"; then ok; else bad "$msg"; fi; }
wait_until() {
  local end=$((SECONDS + $1)); shift
  while ! "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.2; done
}
log_lines() { [ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ]; }
exits_saying() { [ "$1" -eq "$2" ] && grep -qE -- "$4" "$3"; }
finish() { echo "$PASS passed, $FAIL failed"; [ "$FAIL" -eq 0 ]; }
require_torch() {
  local err
  if ! err=$("$1" -c 'import torch' 2>&1); then
    echo "FAIL: PyTorch is not importable by $1: $(tail -n 1 <<<"$err")"
    echo "0 passed, 1 failed"
    exit 1
  fi
}
seed_random() {
  local seed=${KF_TEST_SEED:-$1}
  RANDOM=$seed
  echo "  seed $seed (KF_TEST_SEED=$seed replays)"
}
CHURNERS=()
churn_start() { for _ in 1 2; do (while kill -0 $$ 2>/dev/null; do /bin/true; done) & CHURNERS+=($!); done; }
churn_stop() {
  [ ${#CHURNERS[@]} -gt 0 ] && { kill "${CHURNERS[@]}"; wait "${CHURNERS[@]}"; } 2>/dev/null
  CHURNERS=()
}
