#!/usr/bin/env bash
# The same weights on every x86-64 CPU with FMA: an AR stage (fp16 then fp32
# phases) and a distillation stage (teacher passes) trained with the CPU
# kernels forced to each SIMD level this machine has (KF_CPU_ISA: avx2,
# avx512, vnni), with 1 and 2 OpenMP threads, and with OpenBLAS told to act as
# other CPUs (OPENBLAS_CORETYPE), end bitwise identical. The baseline level
# (CPUs without FMA round products separately) must agree with itself across
# thread counts. A CPU without AVX-512 runs the levels it has; every CI
# machine has AVX2 + FMA.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_trainer.sh
T=$(mktemp -d /tmp/kf_isa_XXXXXX); trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
trainer_setup "$T"
C=$T/cfg.yaml
printf '{"prefix": [4]}\n{"prefix": [4, 7, 9, 12]}\n' > "$T/prefixes.jsonl"

flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
has() { [[ $flags == *" $1 "* ]]; }
levels=(base)
has avx2 && has fma && levels+=(avx2)
has avx512f && has avx512vl && has avx512bw && has fma && levels+=(avx512)
has avx512f && has avx512vl && has avx512bw && has avx512_vnni && has fma && levels+=(vnni)
echo "levels on this CPU: ${levels[*]}"
check "this CPU has AVX2 + FMA (every CI machine does): ${levels[*]}" has avx2

# train RUN [ENV...]: both stages into $T/RUN with the given environment, then
# completions from each stage (AR sampling, K-Forcing argmax decoding) into
# $T/RUN/ar.ids and $T/RUN/k2.ids (ids only: tokens/s varies)
train() {
  local run=$1; shift
  env "$@" "$KF" train "$C" --stage ar --run-dir "$T/$run" 2>"$T/$run.err" &&
  env "$@" "$KF" train "$C" --stage k2 --run-dir "$T/$run" 2>>"$T/$run.err" || return 1
  local s
  for s in ar k2; do
    env "$@" "$KF" sample "$T/$run/stages/$s/final" --prefix-file "$T/prefixes.jsonl" --n-per-prefix 8 --max-new 10 2>>"$T/$run.err" |
      sed 's/"tokens_per_s":[^,}]*//' > "$T/$run/$s.ids" || return 1
    [ -s "$T/$run/$s.ids" ] || return 1
  done
}
# same_run A B: weights and completions of runs A and B are identical
same_run() {
  same_weights "$T/$1/stages/ar" "$T/$2/stages/ar" && same_weights "$T/$1/stages/k2" "$T/$2/stages/k2" &&
  cmp -s "$T/$1/ar.ids" "$T/$2/ar.ids" && cmp -s "$T/$1/k2.ids" "$T/$2/k2.ids"
}
check "native run exits 0: $(tail -1 "$T/native.err" 2>/dev/null)" train native
for lv in "${levels[@]}"; do
  for thr in 1 2; do
    r=$lv-t$thr
    train "$r" KF_CPU_ISA="$lv" OMP_NUM_THREADS=$thr; rc=$?
    check "KF_CPU_ISA=$lv, $thr threads exits 0 (rc $rc): $(tail -1 "$T/$r.err")" [ $rc -eq 0 ]
    if [ "$lv" != base ]; then
      check "KF_CPU_ISA=$lv, $thr threads: weights and completions bitwise equal to native" same_run native "$r"
    elif [ "$thr" = 2 ]; then
      check "KF_CPU_ISA=base: 2 threads bitwise equal to 1 thread" same_run base-t1 base-t2
    fi
  done
done
for ct in Haswell Zen SkylakeX; do
  train "ob-$ct" OPENBLAS_CORETYPE=$ct; rc=$?
  check "OPENBLAS_CORETYPE=$ct exits 0 (rc $rc)" [ $rc -eq 0 ]
  check "OPENBLAS_CORETYPE=$ct: weights and completions bitwise equal to native" same_run native "ob-$ct"
done

KF_CPU_ISA=sse9 "$KF" train "$C" --stage ar --run-dir "$T/bad" 2>"$T/bad.err"; rc=$?
check "an unknown KF_CPU_ISA fails naming it (rc $rc)" exits_saying $rc 1 "$T/bad.err" 'KF_CPU_ISA=sse9'
# the decode kernels' knobs take exactly their two values
for kv in KF_CPU_AVX2_BLOCK_ROWS=7 KF_CPU_AVX2_BLOCK_ROWS=12x KF_CPU_LONE_AHEAD=2 KF_CPU_LONE_AHEAD=on; do
  env "$kv" "$KF" train "$C" --stage ar --run-dir "$T/bad-knob" 2>"$T/bad.err"; rc=$?
  check "$kv fails naming it (rc $rc)" exits_saying $rc 1 "$T/bad.err" "$kv: expected"
done
# the output layer's screen knob, read where decoding packs that layer
for kv in KF_CPU_HEAD_SCREEN=no KF_CPU_HEAD_SCREEN=00; do
  env "$kv" "$KF" sample "$T/native/stages/k2/final" --prefix-file "$T/prefixes.jsonl" --max-new 2 \
    >/dev/null 2>"$T/bad.err"; rc=$?
  check "$kv fails naming it (rc $rc)" exits_saying $rc 1 "$T/bad.err" "$kv: expected"
done
finish
