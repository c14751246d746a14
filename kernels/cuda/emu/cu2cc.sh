#!/bin/sh
# kernels/cuda/emu/cu2cc.sh IN.cu OUT.cc — the one source rewrite the CPU
# emulation harness needs (docs/cuda_emulation.md): g++ cannot parse a launch
# `k<<<grid, block, smem, stream>>>(args)` nor `extern __shared__ T name[];`,
# so these become EMU_LAUNCH(k, grid, block, smem, stream)(args) and a
# pointer to the launch's dynamic shared memory. Lines keep their numbers,
# and #line names the original file in messages and __FILE__.
set -eu
{
  printf '#line 1 "%s"\n' "$1"
  sed -E \
    -e 's/([A-Za-z_][A-Za-z0-9_]*(<[^<>]*>)?)<<<(.*)>>>\(/EMU_LAUNCH(\1, \3)(/' \
    -e 's/extern __shared__ (__align__\([0-9]+\) )?([A-Za-z_][A-Za-z0-9_ ]*[A-Za-z0-9_]) +([A-Za-z_][A-Za-z0-9_]*)\[\];/\2 *const \3 = (\2 *)emu::dyn_smem();/' \
    "$1"
} >"$2.tmp"
mv "$2.tmp" "$2"
