#!/usr/bin/env bash
# scripts/gpu_session.sh — what one call on a lent GPU machine runs:
# unpacks the runtime libraries built binaries need (carry/cuda/libs.tar.xz, made
# on the build machine, since the GPU machine has no package registry), then
# runs the CUDA tests and benchmarks from carry/cuda/bin. Usage on that machine:
#   bash scripts/gpu_session.sh [tests] [bench-attention] [bench-attention-fp32]
#                                    [bench-train-124m] [NAME (kf bench NAME)]...
# Output goes to stdout and $OUT/gpu_session.log when OUT is set.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
log=${OUT:-/tmp}/gpu_session.log
mkdir -p carry/cuda/lib && tar xJf carry/cuda/libs.tar.xz -C carry/cuda/lib
nccl=$(find /usr /opt -name libnccl.so.2 2>/dev/null | head -n 1)
export LD_LIBRARY_PATH=$root/carry/cuda/lib:/usr/local/cuda/lib64${nccl:+:$(dirname "$nccl")}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  missing=$(ldd carry/cuda/bin/kf | grep 'not found'); [ -z "$missing" ] || echo "missing libraries: $missing"
  for what in "$@"; do
    case $what in
      tests) for t in carry/cuda/bin/test_cuda_*; do echo "== $t"; s=$SECONDS; "$t"; rc=$?; echo "($((SECONDS - s)) s, rc $rc)"; done ;;
      bench-attention) echo "== kf bench attention"; carry/cuda/bin/kf bench attention ;;
      bench-attention-fp32) echo "== kf bench attention --fp32"; carry/cuda/bin/kf bench attention --fp32 --max-k 1 ;;
      bench-train-124m) # the issue's 124M config (12 x 768, V = 50258, seq 1024) on the
        # 1024-token OWT-like shards built on the build machine into carry/cuda/owt1024
        echo "== kf bench train, 124M, batch ${BATCH:-16}, fp16 phase"
        carry/cuda/bin/kf bench train configs/tiny.yaml data.train=carry/cuda/owt1024 \
          data.valid=carry/cuda/owt1024 model.hidden=768 model.heads=12 model.blocks=12 \
          model.seq_len=1024 defaults.batch=${BATCH:-16} 'defaults.precision=[{mode: fp16}]' \
          'stages.1.precision=[{mode: fp16}]' 'stages.2.precision=[{mode: fp16}]' \
          'stages.3.precision=[{mode: fp16}]' --steps ${STEPS:-5} --warmup 2 ;;
      *) echo "== kf bench $what"; carry/cuda/bin/kf bench $what ;;
    esac
  done
} 2>&1 | tee "$log"
