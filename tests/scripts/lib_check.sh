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
#   require_torch PY          ends the test as one failure unless PY imports torch
#                             (Debian's python3-torch: a missing torch fails, never skips)
PASS=0; FAIL=0
ok()  { PASS=$((PASS + 1)); }
bad() { FAIL=$((FAIL + 1)); echo "FAIL [${SECONDS}s] $*"; }
check() { local msg=$1; shift; if "$@"; then ok; else bad "$msg"; fi; }
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
