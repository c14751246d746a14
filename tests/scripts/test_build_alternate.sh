#!/usr/bin/env bash
# The build in one tree, without `make clean`: `make`, `make
# CUDA=1`, `make` again each succeed, bin/kf follows the last one (linked
# against the CUDA runtime or not) and the last step compiles nothing; editing
# kernels/kernels.h rebuilds the .cu objects (nvcc dependency files). Runs in
# a copy of the tree that reuses this tree's build/ and build-cuda/ (`make
# test` made them; times kept), so only links happen. Without nvcc the CUDA
# steps are left out.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_check.sh
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
git ls-files -z --cached --others --exclude-standard | xargs -0 cp -a --parents -t "$T"
for d in build build-cuda; do [ -d "$d" ] && cp -a "$d" "$T/"; done
nvcc=0
[ -x /usr/local/cuda/bin/nvcc ] && nvcc=1
if [ "$nvcc" = 1 ] && [ ! -f build-cuda/libkf.a ]; then
  bad "build-cuda/ missing: run make test (or make cuda-check) first"; finish; exit 1
fi
cd "$T"
cudart() { ldd bin/kf | grep -q libcudart; }
no_cudart() { ! cudart; }

check "make (CPU) fails" eval "make -j2 >log1 2>&1"
check "make (CPU): bin/kf is not build/kf" cmp -s bin/kf build/kf
check "make (CPU): bin/kf links the CUDA runtime" no_cudart
if [ "$nvcc" = 1 ]; then
  check "make CUDA=1 after make fails" eval "make -j2 CUDA=1 >log2 2>&1"
  check "make CUDA=1: bin/kf is not build-cuda/kf" cmp -s bin/kf build-cuda/kf
  check "make CUDA=1: bin/kf lacks the CUDA runtime" cudart
  check "make after make CUDA=1 fails" eval "make -j2 >log3 2>&1"
  check "make after make CUDA=1: bin/kf is not build/kf" cmp -s bin/kf build/kf
  check "make after make CUDA=1: bin/kf links the CUDA runtime" no_cudart
  check "make after make CUDA=1 compiled something" eval "! grep -qE ' -c ' log3"
  touch kernels/kernels.h
  check "kernels.h edited: make CUDA=1 would not rebuild cuda_gemm.cu" \
    eval "make -n CUDA=1 | grep -qE 'nvcc .*kernels/cuda/cuda_gemm.cu'"
fi
[ "$FAIL" -eq 0 ] || tail -n 20 log1 log2 log3 2>/dev/null
finish
