#!/usr/bin/env bash
# Runs the suite RUNS times with every core kept busy beside it (stress-ng
# --cpu N, N = the core count), to find tests that depend on timing: a test
# must wait on conditions, never on how fast the machine is.
# Usage: tests/run_loaded.sh RUNS [NAME-FILTER...]   (make test-loaded RUNS=5)
# Prints each run's summary and ends with the totals over all runs.
set -u
cd "$(dirname "$0")/.."
runs=${1:?usage: tests/run_loaded.sh RUNS [NAME-FILTER...]}; shift
command -v stress-ng >/dev/null || { echo "stress-ng is not installed (scripts/setup.sh installs it)"; echo "0 passed, 1 failed"; exit 1; }
stress-ng --cpu "$(nproc)" --quiet &
load=$!
trap 'kill $load 2>/dev/null; wait $load 2>/dev/null; rm -f "$log"' EXIT
tp=0; tf=0; summary=()
log=$(mktemp)
for r in $(seq "$runs"); do
  t0=$SECONDS
  # tee to stdout and a file: `tee /dev/stderr` would reopen a redirected log
  # at offset 0 and overwrite it
  tests/run.sh "$@" 2>&1 | tee "$log"
  out=$(cat "$log")
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -n 1)
  p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
  [ -n "$line" ] || { p=0; f=1; }
  failed=$(grep '^failed: ' <<<"$out")
  summary+=("run $r: ${p} passed, ${f} failed in $((SECONDS - t0)) s ${failed}")
  tp=$((tp + p)); tf=$((tf + f))
done
echo "---- $runs runs beside stress-ng --cpu $(nproc) ----"
printf '%s\n' "${summary[@]}"
echo "$tp passed, $tf failed"
[ "$tf" -eq 0 ]
