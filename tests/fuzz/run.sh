#!/usr/bin/env bash
# Runs the libFuzzer harnesses built by `make fuzz` (build-fuzz/fuzz/fuzz_*):
# each replays its committed corpus (tests/fuzz/corpus/NAME/) and then fuzzes
# for FUZZ_SECONDS seconds (default 60; 0: replay only) from a scratch copy
# of it, one job; FUZZ_JOBS=N harnesses at once (make test-fuzz passes make's
# -j: libFuzzer's one job keeps one core busy, so each harness gets the same
# FUZZ_SECONDS of one core as when they run one at a time).
# One check per harness: no crash, sanitizer report, leak, hang or timeout.
# A finding's input is kept under build-fuzz/findings/NAME/ (commit it to the
# corpus once fixed: see docs/fuzzing.md).
# Usage: tests/fuzz/run.sh [NAME-FILTER...]; ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
secs=${FUZZ_SECONDS:-60}
pass=0; fail=0
jobs=${FUZZ_JOBS:-1}
R=$(mktemp -d); trap 'rm -rf "$R"' EXIT
# fuzz_one NAME BIN: one harness; its report in $R/NAME.out, its result
# (pass or fail) in $R/NAME.res
fuzz_one() {
  local name=$1 bin=$2 out=$R/$1.out
  local corpus=tests/fuzz/corpus/$name
  local work; work=$(mktemp -d); local found=build-fuzz/findings/$name
  mkdir -p "$found"
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
  local dict
  case $name in
    fuzz_json|fuzz_prefixes) dict=(-dict=tests/fuzz/json.dict) ;;
    fuzz_config|fuzz_rundir|fuzz_manifest|fuzz_ckpt_state) dict=(-dict=tests/fuzz/yaml.dict) ;;
    *) dict=() ;;
  esac
  local log; log=$(mktemp)
  # -max_total_time ends fuzzing cleanly; `timeout` is a backstop for a hang
  # libFuzzer itself cannot report. -timeout=30: one input taking 30 s is a
  # hang (the slowest seen takes well under 1 s, so a loaded machine is no
  # false alarm).
  local limit=(-max_total_time="$secs"); [ "$secs" = 0 ] && limit=(-runs=0) # 0 = replay only
  timeout $((secs + 120)) "$bin" "${dict[@]}" "${limit[@]}" -timeout=30 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$found/" "$work" >"$log" 2>&1
  local rc=$?
  local stats cov
  stats=$(grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" | sed 's/stat:://' | tr -s ' \n' ' ')
  cov=$(grep -E '^#[0-9]+.*(DONE|INITED)' "$log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+')
  if [ $rc -eq 0 ]; then
    echo pass >"$R/$name.res"; echo "ok   $name: ${secs}s, $stats$cov" >"$out"
  else
    echo fail >"$R/$name.res"
    { echo "---- $name FAILED (rc=$rc): libFuzzer found a crash, leak, hang or timeout"
      grep -E 'ERROR|SUMMARY|invariant|Test unit written|==[0-9]+==' "$log" | head -n 20
      tail -n 30 "$log"; } >"$out"
  fi
  rm -rf "$work" "$log"
}
names=()
for src in tests/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c); bin=build-fuzz/fuzz/$name
  if [ $# -gt 0 ]; then
    hit=0; for f in "$@"; do [[ "$name" == *"$f"* ]] && hit=1; done
    [ $hit = 1 ] || continue
  fi
  names+=("$name")
  if [ ! -x "$bin" ]; then
    echo fail >"$R/$name.res"; echo "---- $name FAILED: $bin is not built (make fuzz)" >"$R/$name.out"; continue
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  fuzz_one "$name" "$bin" &
done
wait
for name in "${names[@]}"; do
  cat "$R/$name.out"
  if [ "$(cat "$R/$name.res" 2>/dev/null)" = pass ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
[ $((pass + fail)) -gt 0 ] || { fail=1; echo "---- no harness matches: $*"; }
echo "fuzz: $pass passed, $fail failed"
[ $fail -eq 0 ]
