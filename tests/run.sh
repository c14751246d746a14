#!/usr/bin/env bash
# Runs every test: the C test programs build/tests/test_* and the scripts
# tests/scripts/test_*.sh. Each prints "N passed, N failed" as its last such
# line; a program that crashes, prints no such line or ran no check at all
# ("0 passed, 0 failed": it tested nothing) counts as one failure.
# Usage: tests/run.sh [NAME-FILTER...]   (a test runs when its name contains any filter)
set -u
cd "$(dirname "$0")/.."
filters=("$@")
# skip NAME: a filter was given and NAME contains none of them
skip_name() {
  [ ${#filters[@]} -eq 0 ] && return 1
  local f; for f in "${filters[@]}"; do [[ "$1" == *"$f"* ]] && return 1; done
  return 0
}
total_p=0; total_f=0; failed_names=()
run_one() {
  local name=$1; shift
  local log; log=$(mktemp)
  local t0=$SECONDS
  "$@" >"$log" 2>&1; local rc=$?
  local line; line=$(grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  local p=0 f=0
  if [ -n "$line" ]; then
    p=$(sed -E 's/^([A-Za-z-]+: )?([0-9]+) passed, ([0-9]+) failed.*/\2/' <<<"$line")
    f=$(sed -E 's/^([A-Za-z-]+: )?([0-9]+) passed, ([0-9]+) failed.*/\3/' <<<"$line")
  fi
  local why=""
  if [ -z "$line" ]; then why="no \"N passed, N failed\" line"
  elif [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then why="it ran no check"
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then why="exit status $rc with no failed check"; fi
  [ -n "$why" ] && f=$((f + 1))
  total_p=$((total_p + p)); total_f=$((total_f + f))
  if [ "$f" -ne 0 ]; then
    failed_names+=("$name"); echo "---- $name FAILED (rc=$rc, $((SECONDS - t0))s${why:+: $why}) ----"; tail -n 40 "$log"
  else
    echo "ok   $name: $p checks ($((SECONDS - t0))s)"
  fi
  rm -f "$log"
}
# Tests named *cuda* need a GPU: they run only under `make test-cuda` (KF_TEST_CUDA=1)
# and are neither run nor counted otherwise.
# KF_TEST_EXCLUDE="NAME..." leaves those tests out (printed, not counted):
# make test-asan excludes the three long convergence runs, which under ASan take
# 20+ minutes each and run no code the other trainer tests do not.
skip_excluded() {
  local x; for x in ${KF_TEST_EXCLUDE:-}; do
    [[ "$1" == "$x" ]] && { echo "--   $1: excluded (KF_TEST_EXCLUDE), not run"; return 0; }
  done
  return 1
}
skip_gpu() { [[ "$1" == *cuda* && "${KF_TEST_CUDA:-0}" != 1 ]] && { echo "--   $1: needs a GPU (make test-cuda), not run"; return 0; }; return 1; }
for t in "${KF_TEST_BUILD:-build}"/tests/test_*; do
  [ -x "$t" ] || continue
  n=$(basename "$t"); skip_name "$n" && continue
  skip_gpu "$n" && continue
  skip_excluded "$n" && continue
  run_one "$n" "$t"
done
for t in tests/scripts/test_*.sh; do
  [ -f "$t" ] || continue
  n=$(basename "$t" .sh); skip_name "$n" && continue
  skip_gpu "$n" && continue
  skip_excluded "$n" && continue
  run_one "$n" bash "$t"
done
# CI machines differ (Zen 3: AVX2 + FMA; Zen 4: AVX-512 VNNI): on a CPU above
# AVX2 the kernel, model and decoding programs run again with the CPU kernels
# forced to AVX2 (KF_CPU_ISA), so the AVX2 code paths are tested wherever CI
# runs. `make test-isa ISA=LEVEL` runs the whole suite at one level.
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) "
if [[ -z "${KF_CPU_ISA:-}" && $flags == *" avx512f "* && $flags == *" avx2 "* && $flags == *" fma "* ]]; then
  for t in "${KF_TEST_BUILD:-build}"/tests/test_{kernels_cpu,model_,serving_,kforcing_decode,kforcing_forward}*; do
    [ -x "$t" ] || continue
    n="$(basename "$t")[avx2]"; skip_name "$n" && continue
    skip_excluded "$(basename "$t")" && continue
    run_one "$n" env KF_CPU_ISA=avx2 "$t"
  done
  # AVX-512 without VNNI has its own int8 screen (vpmaddubsw, 512 bits)
  t="${KF_TEST_BUILD:-build}/tests/test_kernels_cpu_head"; n="test_kernels_cpu_head[avx512]"
  if [[ $flags == *" avx512_vnni "* && -x "$t" ]] && ! skip_name "$n"; then
    run_one "$n" env KF_CPU_ISA=avx512 "$t"
  fi
fi
[ ${#failed_names[@]} -eq 0 ] || echo "failed: ${failed_names[*]}"
echo "$total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]
