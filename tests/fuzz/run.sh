#!/usr/bin/env bash
# Runs the libFuzzer harnesses built by `make fuzz` (build-fuzz/fuzz/fuzz_*):
# each replays its committed corpus (tests/fuzz/corpus/NAME/) and then fuzzes
# for FUZZ_SECONDS seconds (default 60; 0: replay only) from a scratch copy
# of it, one job.
# One check per harness: no crash, sanitizer report, leak, hang or timeout.
# A finding's input is kept under build-fuzz/findings/NAME/ (commit it to the
# corpus once fixed: see docs/fuzzing.md).
# Usage: tests/fuzz/run.sh [NAME-FILTER...]; ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
secs=${FUZZ_SECONDS:-60}
pass=0; fail=0
for src in tests/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c); bin=build-fuzz/fuzz/$name
  if [ $# -gt 0 ]; then
    hit=0; for f in "$@"; do [[ "$name" == *"$f"* ]] && hit=1; done
    [ $hit = 1 ] || continue
  fi
  if [ ! -x "$bin" ]; then
    fail=$((fail + 1)); echo "---- $name FAILED: $bin is not built (make fuzz)"; continue
  fi
  corpus=tests/fuzz/corpus/$name
  work=$(mktemp -d); found=build-fuzz/findings/$name
  mkdir -p "$found"
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
  case $name in
    fuzz_json|fuzz_prefixes) dict=(-dict=tests/fuzz/json.dict) ;;
    fuzz_config|fuzz_rundir|fuzz_manifest|fuzz_ckpt_state) dict=(-dict=tests/fuzz/yaml.dict) ;;
    *) dict=() ;;
  esac
  log=$(mktemp)
  # -max_total_time ends fuzzing cleanly; `timeout` is a backstop for a hang
  # libFuzzer itself cannot report. -timeout=30: one input taking 30 s is a
  # hang (the slowest seen takes well under 1 s, so a loaded machine is no
  # false alarm).
  limit=(-max_total_time="$secs"); [ "$secs" = 0 ] && limit=(-runs=0) # 0 = replay only
  timeout $((secs + 120)) "$bin" "${dict[@]}" "${limit[@]}" -timeout=30 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$found/" "$work" >"$log" 2>&1
  rc=$?
  stats=$(grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" | sed 's/stat:://' | tr -s ' \n' ' ')
  cov=$(grep -E '^#[0-9]+.*(DONE|INITED)' "$log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+')
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1)); echo "ok   $name: ${secs}s, $stats$cov"
  else
    fail=$((fail + 1)); echo "---- $name FAILED (rc=$rc): libFuzzer found a crash, leak, hang or timeout"
    grep -E 'ERROR|SUMMARY|invariant|Test unit written|==[0-9]+==' "$log" | head -n 20
    tail -n 30 "$log"
  fi
  rm -rf "$work" "$log"
done
[ $((pass + fail)) -gt 0 ] || { fail=1; echo "---- no harness matches: $*"; }
echo "fuzz: $pass passed, $fail failed"
[ $fail -eq 0 ]
