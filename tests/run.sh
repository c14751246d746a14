#!/usr/bin/env bash
# Runs every test: the C test programs build/tests/test_* and the scripts
# tests/scripts/test_*.sh. Each prints "N passed, N failed" as its last such
# line; a program that crashes, prints no such line or ran no check at all
# ("0 passed, 0 failed": it tested nothing) counts as one failure.
# Each test's wall and CPU time (user + sys of it and its children) is printed
# beside its result, and the slowest by CPU at the end: CPU seconds budget CI's
# 2 cores, whatever else the machine runs.
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
total_p=0; total_f=0; failed_names=(); times=()
# KF_TEST_JOBS=N runs up to N tests at once (make test passes make's -j);
# each test's output is kept apart and printed when it ends.
jobs=${KF_TEST_JOBS:-1}
R=$(mktemp -d); trap 'rm -rf "$R"' EXIT
started=0; ended=0; T0=$SECONDS
# run_one NAME CMD...: starts the test once fewer than $jobs run; its wall
# time and its CPU time (user + sys of the test and every child it waited
# for; not daemons it leaves to init, such as slurmd's jobs) go to $R/K.time
run_one() {
  local name=$1; shift
  while [ $((started - ended)) -ge "$jobs" ]; do wait -n; report_done; done
  local k=$started; started=$((started + 1))
  echo "$name" >"$R/$k.name"
  ( TIMEFORMAT='%R %U %S'
    { time "$@" >"$R/$k.log" 2>&1; echo $? >"$R/$k.rc"; } 2>"$R/$k.time"
    touch "$R/$k.done" ) &
}
# report_done: counts and prints each test that has ended since the last call
report_done() {
  local k
  for ((k = 0; k < started; k++)); do
    [ -f "$R/$k.done" ] && [ ! -f "$R/$k.seen" ] && report "$k"
  done
}
report() {
  local k=$1 name rc log=$R/$1.log wall u s cpu
  name=$(cat "$R/$k.name"); rc=$(cat "$R/$k.rc")
  read -r wall u s <"$R/$k.time"
  cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.1f", u + s }')
  wall=$(awk -v w="$wall" 'BEGIN { printf "%.1f", w }')
  times+=("$cpu $wall $name")
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
    failed_names+=("$name"); echo "---- $name FAILED (rc=$rc, ${wall}s, cpu ${cpu}s${why:+: $why}) ----"; tail -n 40 "$log"
  else
    echo "ok   $name: $p checks (${wall}s, cpu ${cpu}s)"
  fi
  rm -f "$log"; touch "$R/$k.seen"; ended=$((ended + 1))
}
# Tests named *cuda* need a GPU: they run only under `make test-cuda` (KF_TEST_CUDA=1)
# and are neither run nor counted otherwise.
# KF_TEST_EXCLUDE="NAME..." leaves those tests out (printed, not counted):
# make test-asan excludes the long convergence runs, which under ASan take
# 20+ minutes each and run no code the other trainer tests do not.
skip_excluded() {
  local x; for x in ${KF_TEST_EXCLUDE:-}; do
    [[ "$1" == "$x" ]] && { echo "--   $1: excluded (KF_TEST_EXCLUDE), not run"; return 0; }
  done
  return 1
}
skip_gpu() { [[ "$1" == *cuda* && "${KF_TEST_CUDA:-0}" != 1 ]] && { echo "--   $1: needs a GPU (make test-cuda), not run"; return 0; }; return 1; }
# the scripts first: most of the long tests are scripts, and started early they
# do not end last, alone on one core, when tests run side by side
for t in tests/scripts/test_*.sh; do
  [ -f "$t" ] || continue
  n=$(basename "$t" .sh); skip_name "$n" && continue
  skip_gpu "$n" && continue
  skip_excluded "$n" && continue
  run_one "$n" bash "$t"
done
for t in "${KF_TEST_BUILD:-build}"/tests/test_*; do
  [ -x "$t" ] || continue
  n=$(basename "$t"); skip_name "$n" && continue
  skip_gpu "$n" && continue
  skip_excluded "$n" && continue
  run_one "$n" "$t"
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
# AVX2's decode-time linear layers block 7-12 rows in one block or two
# (cpu_avx2_block_rows): the packed-linear test runs both ways
t="${KF_TEST_BUILD:-build}/tests/test_kernels_cpu_linear_packed"
if [[ -z "${KF_CPU_ISA:-}" && $flags == *" avx2 "* && $flags == *" fma "* && -x "$t" ]]; then
  for r in 6 12; do
    n="test_kernels_cpu_linear_packed[avx2,block$r]"; skip_name "$n" && continue
    skip_excluded "$(basename "$t")" && continue
    run_one "$n" env KF_CPU_ISA=avx2 KF_CPU_AVX2_BLOCK_ROWS=$r "$t"
  done
fi
while [ "$ended" -lt "$started" ]; do wait -n; report_done; done
# the slowest tests by CPU time, the figure that budgets CI's 2 cores
# (KF_TEST_TOP=N lines, default 20; wall times depend on the machine's load)
if [ ${#times[@]} -gt 0 ]; then
  echo "---- slowest by CPU (user+sys s, wall s) of ${#times[@]} tests; all: $(printf '%s\n' "${times[@]}" |
    awk '{ c += $1; w += $2 } END { printf "cpu %.0f s, wall %.0f s", c, w }') in $((SECONDS - T0)) s with $jobs at once ----"
  printf '%s\n' "${times[@]}" | sort -k1,1 -rn | head -n "${KF_TEST_TOP:-20}" |
    awk '{ printf "%8.1f %8.1f  %s\n", $1, $2, $3 }'
fi
[ ${#failed_names[@]} -eq 0 ] || echo "failed: ${failed_names[*]}"
echo "$total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]
