#!/usr/bin/env bash
# scripts/gpu_session.sh on this GPU-less machine, with a fake nvidia-smi on
# PATH reporting an H200: --pack makes the carry within its size limit (the
# total checked against du here) and refuses one over it; the session (an
# absolute --deps path) reports the machine, picks the h200 roofline, reuses
# every carried CUDA object (their sources' hashes match), and then every step
# fails fast, each with its reason, none on the CPU; the summary and logs are
# under $OUT (at most 8 files), the whole run inside its deadline. A step that
# hangs (a carried llm.c trainer that sleeps) is cut at the deadline and the
# rest skipped; SIGTERM packs the logs; a carried object whose sources changed
# is not used; a build that fails (no nvcc) is tried once, and the steps that
# need it fail at once saying so.
# The carry is packed into build/gpu-session-carry (kept: --pack remakes its
# deps.tar.xz, a minute of xz, only when a library changed) and given by its
# absolute path. The build step reuses build-cuda (make cuda-check, part of
# make test): when that is not up to date, or there is no nvcc, the session
# runs with CUDA_HOME without nvcc, so its build fails fast instead.
set -u
cd "$(dirname "$0")/../.."
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. tests/scripts/lib_check.sh
S=scripts/gpu_session.sh

mkdir -p "$T/bin" "$T/nocuda"
cat >"$T/bin/nvidia-smi" <<'EOF'
#!/bin/sh
echo "NVIDIA H200, 580.159.04, 143771 MiB, 9.0, 1980 MHz"
EOF
chmod +x "$T/bin/nvidia-smi"
export PATH=$T/bin:$PATH

bash "$S" --help >"$T/help" 2>&1; rc=$?
check "--help: rc $rc, documents --pack and --deadline" \
  eval "[ $rc -eq 0 ] && grep -q -- '--pack DIR' '$T/help' && grep -q -- '--deadline S' '$T/help'"
bash "$S" --deps "$T" no-such-step >"$T/bad" 2>&1; rc=$?
check "an unknown step: rc $rc, $(cat "$T/bad")" exits_saying $rc 2 "$T/bad" "unknown step 'no-such-step'"

echo "[${SECONDS}s] --pack"
# ---- --pack ----
C=$PWD/build/gpu-session-carry
t0=$SECONDS
bash "$S" --pack "$C" >"$T/pack.out" 2>&1; rc=$?
check "pack: rc $rc: $(tail -n 3 "$T/pack.out")" eval "[ $rc -eq 0 ]"
echo "pack: $((SECONDS - t0)) s"
check "pack made deps.tar.xz and owt1024" eval "[ -f '$C/deps.tar.xz' ] && [ -f '$C/owt1024/manifest.yaml' ]"
check "deps carry nccl.h and each library's glibc need" \
  eval "tar tJf '$C/deps.tar.xz' | grep -q '^include/nccl.h$' && tar xJOf '$C/deps.tar.xz' glibc.txt | grep -q '^libarchive.so.13 GLIBC_2\.[0-9]*$'"
nvcc_here=0
[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] && nvcc_here=1
if [ $nvcc_here = 1 ]; then
  check "pack: the CUDA objects with their hashes" \
    eval "tar xzOf '$C/cuda-objs.tar.gz' ./manifest.txt | grep -q '^obj build-cuda/kernels/cuda/cuda_gemm.o [0-9a-f]\{64\}$'"
fi
# the size it reports, against the tree and the folder counted here
tree=$(git ls-files -co --exclude-standard | while read -r f; do [ -f "$f" ] && stat -c %s "$f"; done | awk '{s += $1} END {print s}')
dir=$(find "$C" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
got=$(sed -n 's/^carry: \([0-9]*\) MiB .*limit 56 MiB$/\1/p' "$T/pack.out")
check "pack reports the carry: got '$got', tree $tree + folder $dir bytes" \
  eval "[ -n '$got' ] && [ $(((tree + dir) / 1048576)) -le '${got:-0}' ] && [ '${got:-99}' -le $(((tree + dir + 2 * 1048576) / 1048576)) ]"
check "carry within 56 MiB ($got)" eval "[ '${got:-99}' -le 56 ]"
KF_CARRY_MAX_MIB=1 bash "$S" --pack "$C" >"$T/pack1.out" 2>&1; rc=$?
check "pack over the limit: rc $rc, $(tail -n 1 "$T/pack1.out")" exits_saying $rc 1 "$T/pack1.out" 'the carry is over 1 MiB'

echo "[${SECONDS}s] the session"
# ---- the session ----
steps=(env build ar-fp16 ar-bf16 llmc decode stages-fp16t stages-fp32t ar-fp32 roofline roofline-decode
  test_cuda_mma test_cuda_ops test_cuda_train test_cuda_decode_ref test_cuda_limits attention attention-simt)
built=0
if [ $nvcc_here = 1 ] && make -q CUDA=1 BUILD=build-cuda BIN=build-cuda/kf build-cuda/kf \
  $(printf 'build-cuda/tests/%s ' test_cuda_mma test_cuda_decode_ref test_cuda_ops test_cuda_train test_cuda_limits) 2>/dev/null; then
  built=1
  env_cuda=()
else
  env_cuda=(CUDA_HOME="$T/nocuda")
fi
echo "build-cuda up to date: $built"
t0=$SECONDS
env "${env_cuda[@]}" OUT="$T/out" timeout 400 bash "$S" --deps "$C" --deadline 300 >"$T/run.out" 2>&1; rc=$?
el=$((SECONDS - t0))
L=$T/out/gpu_session.log
check "session inside its deadline: $el s" eval "[ $el -lt 300 ]"
nfail=$(grep -cE '^[a-z0-9_-]+ +(FAILED|SKIPPED|KILLED) ' "$L")
check "exit status = steps failed ($rc vs $nfail)" eval "[ $rc -eq $nfail ] && [ $rc -gt 0 ]"
check "at most 8 files under \$OUT: $(ls "$T/out" | tr '\n' ' ')" eval "[ $(find "$T/out" -type f | wc -l) -le 8 ]"
check "no running.log left after a finished run" eval "[ ! -e '$T/out/running.log' ]"
mkdir -p "$T/logs" && tar xzf "$T/out/logs.tar.gz" -C "$T/logs"
check "the summary line" grep -q "^gpu_session: ${#steps[@]} steps, $rc failed or skipped" "$L"
i=0
for s in "${steps[@]}"; do
  i=$((i + 1))
  line=$(grep -E "^$s +(ok|FAILED|SKIPPED|KILLED) " "$L" | tail -n 1)
  secs=$(awk '{print $3}' <<<"$line")
  case $s in
    env) if [ $built = 1 ]; then
           check "env passes here: $line" eval "[[ '$line' == 'env '*' ok '* ]]"
         else # CUDA_HOME without CUDA: its libraries are missing for the link
           check "env names the CUDA runtime missing: $line" grep -q 'missing library for the link: -lcudart' "$T/logs/01-env.log"
         fi ;;
    build) if [ $built = 1 ]; then
             check "build reuses build-cuda: $line" eval "[[ '$line' == 'build '*' ok '* ]]"
           else
             check "build fails fast without nvcc: $line" eval "[[ '$line' == *FAILED*'nvcc not found at'* ]]"
           fi ;;
    *) check "$s fails with a reason: $line" eval "[[ '$line' =~ ^$s\ +FAILED\ +[0-9-]+\ +[^\ ] ]]" ;;
  esac
  [ "$s" = env ] || [ "$s" = build ] ||
    check "$s fails fast (${secs:-?} s)" eval "[ '${secs:-99}' = - ] || [ '${secs:-99}' -le 30 ]"
  if [ $built = 1 ] || [ $s = env ] || [ $s = build ] || [ $s = llmc ]; then
    check "$s has its log in logs.tar.gz" eval "[ -s '$T/logs/$(printf %02d $i)-$s.log' ]"
  fi
done
check "env names the H200 and the machine's glibc" \
  eval "grep -q '^GPU: NVIDIA H200, ' '$T/logs/01-env.log' && grep -q '^glibc: 2\.' '$T/logs/01-env.log'"
check "llmc: no trainer carried, said so" grep -q "no $C/llmc/train_gpt2cu carried" "$T/logs/05-llmc.log"
if [ $built = 1 ]; then
  check "build: every carried object reused" grep -qE '^carried objects: ([0-9]+) of \1 reused, 0 rebuilt$' "$T/logs/02-build.log"
  for i in 03-ar-fp16 04-ar-bf16 06-decode 07-stages-fp16t 08-stages-fp32t 09-ar-fp32; do
    check "$i: the CUDA backend refused, no CPU run" grep -q 'resources.backend is cuda, but' "$T/logs/$i.log"
  done
  check "roofline on the h200 (named by nvidia-smi), refused dry" \
    eval "grep -q '^roofline: H200 SXM' '$T/logs/10-roofline.log' && grep -q 'ran dry: no CUDA device' '$T/logs/10-roofline.log'"
  check "attention: needs the CUDA backend" grep -q 'needs the CUDA backend' "$T/logs/17-attention.log"
fi

echo "[${SECONDS}s] a carried object whose sources changed since --pack is not used"
# ---- a carried object whose sources changed since --pack is not used ----
if [ $built = 1 ]; then
  mkdir -p "$T/carry3/o" && ln -s "$C/deps.tar.xz" "$T/carry3/" && ln -s "$C/owt1024" "$T/carry3/"
  tar xzf "$C/cuda-objs.tar.gz" -C "$T/carry3/o"
  sed -i 's|^\(obj build-cuda/kernels/cuda/cuda_gemm.o \).*|\10000|' "$T/carry3/o/manifest.txt"
  tar czf "$T/carry3/cuda-objs.tar.gz" -C "$T/carry3/o" .
  OUT="$T/out4" bash "$S" --deps "$T/carry3" --deadline 120 build >"$T/run4.out" 2>&1; rc=$?
  mkdir -p "$T/logs4" && tar xzf "$T/out4/logs.tar.gz" -C "$T/logs4"
  check "changed sources: that object not reused" \
    grep -q '^carried build-cuda/kernels/cuda/cuda_gemm.o: its sources changed since --pack: rebuilt here$' "$T/logs4/02-build.log"
  check "changed sources: the others reused" grep -qE '^carried objects: ([0-9]+) of [0-9]+ reused, 1 rebuilt$' "$T/logs4/02-build.log"
  check "changed sources: the build passes (rc $rc)" eval "[ $rc -eq 0 ]"
fi

echo "[${SECONDS}s] a failed build is not retried: the steps after it fail at once"
CUDA_HOME="$T/nocuda" OUT="$T/out5" bash "$S" --deps "$C" --deadline 120 ar-fp16 attention >"$T/run5.out" 2>&1; rc=$?
L=$T/out5/gpu_session.log
check "no nvcc: the build fails saying so" grep -qE "^build +FAILED +[0-9]+ +nvcc not found at $T/nocuda/bin/nvcc" "$L"
check "no nvcc: ar-fp16 not run: $(grep '^ar-fp16 ' "$L")" grep -qE '^ar-fp16 +FAILED +- +not run: the build failed' "$L"
check "no nvcc: attention not run: $(grep '^attention ' "$L")" grep -qE '^attention +FAILED +- +not run: the build failed' "$L"
check "no nvcc: one build attempt" eval "[ $(grep -c '^== build' "$L") -eq 1 ] && [ $(grep -c '^== ' "$L") -eq 2 ]"
check "no nvcc: rc counts the failures ($rc)" eval "[ $rc -ge 3 ]"

echo "[${SECONDS}s] the deadline: a hanging step is cut, the rest skipped"
# ---- the deadline: a hanging step is cut, the rest skipped ----
# a carried "llm.c trainer" that hangs
mkdir -p "$T/carry2/llmc"
printf '#!/bin/sh\nexec sleep 300\n' >"$T/carry2/llmc/train_gpt2cu"
chmod +x "$T/carry2/llmc/train_gpt2cu"
t0=$SECONDS
env "${env_cuda[@]}" OUT="$T/out2" bash "$S" --deps "$T/carry2" --deadline 30 llmc attention >"$T/run2.out" 2>&1; rc=$?
el=$((SECONDS - t0))
L=$T/out2/gpu_session.log
check "deadline 30 s kept: $el s" eval "[ $el -le 30 ]"
check "the hanging step timed out: $(grep '^llmc ' "$L")" grep -qE '^llmc +FAILED +[0-9]+ +timed out after [0-9]+s' "$L"
check "the step after it skipped: $(grep '^attention ' "$L")" grep -qE '^attention +SKIPPED +- +not started: -?[0-9]+s left before the deadline' "$L"
check "rc counts both: $rc" eval "[ $rc -ge 2 ]"

echo "[${SECONDS}s] SIGTERM: the logs so far are packed"
# ---- SIGTERM: the logs so far are packed ----
OUT="$T/out3" bash "$S" --deps "$T/carry2" --deadline 200 llmc >"$T/run3.out" 2>&1 &
pid=$!
wait_until 60 grep -q '^== llmc' "$T/out3/gpu_session.log" 2>/dev/null
t0=$SECONDS
kill -TERM $pid
wait $pid; rc=$?
check "SIGTERM: rc $rc, ended in $((SECONDS - t0)) s" eval "[ $rc -eq 143 ] && [ $((SECONDS - t0)) -le 10 ]"
check "SIGTERM: named in the summary" grep -qE '^llmc +KILLED .*SIGTERM' "$T/out3/gpu_session.log"
check "SIGTERM: the step's log packed" eval "tar tzf '$T/out3/logs.tar.gz' | grep -q '02-llmc.log'"
finish
