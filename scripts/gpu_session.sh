#!/usr/bin/env bash
# scripts/gpu_session.sh — what one call on a lent GPU machine runs: builds
# the CUDA backend there with that machine's nvcc, then the benchmarks and
# `make test-cuda` (every test program, then the tests named *cuda*). Each
# step's output goes to its own log as it is made, a summary line per step to
# $OUT/gpu_session.log, and after each step every log is packed into
# $OUT/logs.tar.gz (the device tool brings back at most 8 files), so a call
# cut off at its time limit keeps everything that ran.
#
# The GPU machine has nvcc, gcc and the CUDA libraries, NCCL in its Python
# packages (nvidia-nccl-cu13), and no package registry. What the link line needs
# beyond that comes in one carried folder DEPS, made on the build machine:
#   bash scripts/gpu_session.sh --pack DEPS
# DEPS/deps.tar.xz holds include/ (lmdb.h, yaml.h, zlib.h, archive*.h, cblas.h)
# and lib/: liblmdb.a, libyaml.a, libz.a (static: nothing to install there),
# libarchive and OpenBLAS as shared libraries with every library they need
# outside glibc and gcc's runtime; DEPS/owt1024 holds 1024-token GPT-2 shards
# (configs/tiny-gpt2.yaml's owt-tiny) for the 124M training benchmarks.
#
# On the GPU machine, in one `run` call carrying DEPS (e.g. carry/gpu):
#   bash scripts/gpu_session.sh [--deps DEPS] [STEP...]
# STEP, each on the issue-18 model (12 x 768, V = 50258, sequence 1024,
# batch $BATCH, default 16):
#   bench-train-124m  the AR stage in fp16, bf16 and fp32 (tokens/s, MFU)
#   llmc              llm.c's train_gpt2cu, when DEPS/llmc/train_gpt2cu was
#                     carried (docs/cuda.md: built on the build machine, never
#                     committed), on synthetic tokens at the same B and T, bf16
#   bench-stages-124m AR, PFLM(1), PFLM(2), PFLM(4) on the same batch, fp16
#                     phase, with a 16-bit and an fp32 teacher (the 1.5(k+1) goal)
#   roofline-124m     `kf bench train --roofline` run on the GPU: each op's
#                     measured time beside its estimate (ar; k4, bf16 teacher)
#   tests             make test-cuda
#   bench-attention   the attention kernels, tensor-core and --simt
# or any `kf bench` NAME. Default: all six in the order above (the headline
# figures first: a call cut short keeps them). A step runs even when an
# earlier one failed; the exit status is the number of failed steps.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# ---- build machine: pack DEPS ----
pack() {
  local out=$1 tmp lib so dep
  tmp=$(mktemp -d) || return 1
  mkdir -p "$out" "$tmp/include" "$tmp/lib" || return 1
  for h in lmdb.h yaml.h zlib.h zconf.h archive.h archive_entry.h; do
    cp -L "/usr/include/$h" "$tmp/include/" || return 1
  done
  cp -L /usr/include/x86_64-linux-gnu/{cblas.h,openblas_config.h} "$tmp/include/" || return 1
  for a in liblmdb.a libyaml.a libz.a; do cp -L "/usr/lib/x86_64-linux-gnu/$a" "$tmp/lib/" || return 1; done
  for lib in libarchive.so.13 libopenblas.so.0; do
    so=/usr/lib/x86_64-linux-gnu/$lib
    cp -L "$so" "$tmp/lib/" || return 1
    ln -sf "$lib" "$tmp/lib/${lib%.so.*}.so"
    # what it needs, less glibc and gcc's runtime (on every machine with gcc)
    for dep in $(ldd "$so" | awk '$3 ~ /^\// {print $3}'); do
      case $(basename "$dep") in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
        *) cp -L "$dep" "$tmp/lib/" || return 1 ;;
      esac
    done
  done
  tar cJf "$out/deps.tar.xz.tmp" -C "$tmp" include lib && mv "$out/deps.tar.xz.tmp" "$out/deps.tar.xz" || return 1
  rm -rf "$tmp"
  echo "$out/deps.tar.xz: $(du -h "$out/deps.tar.xz" | cut -f1)"
  if [ -x bin/kf ] && [ -e data/text/owt-tiny/openwebtext.tar.xz ]; then
    rm -rf "$out/owt1024"
    bin/kf shards build configs/tiny-gpt2.yaml --only owt-tiny shards.owt-tiny.seq_len=1024 \
      shards.owt-tiny.out="$out/owt1024" shards.owt-tiny.valid.last=50 || return 1
    echo "$out/owt1024: $(du -sh "$out/owt1024" | cut -f1)"
  else
    echo "no bin/kf or data/text/owt-tiny: $out/owt1024 not made (bench-train-124m will say so)"
  fi
}

case ${1:-} in
  -h|--help) usage; exit 0 ;;
  --pack) [ $# -eq 2 ] || { echo "usage: $0 --pack DIR" >&2; exit 2; }; pack "$2"; exit ;;
esac

# ---- GPU machine ----
deps=carry/gpu
if [ "${1:-}" = --deps ]; then
  [ $# -ge 2 ] || { echo "$0: --deps needs a folder" >&2; exit 2; }
  deps=$2; shift 2
fi
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(bench-train-124m llmc bench-stages-124m roofline-124m tests bench-attention)
out=${OUT:-/tmp/kf_gpu_session}
logs=$(mktemp -d /tmp/kf_gpu_logs.XXXXXX) # the step logs, packed into $out after each step
mkdir -p "$out"
log=$out/gpu_session.log
: >"$log"
say() { echo "$*" | tee -a "$log"; }

say "gpu_session $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), steps: ${steps[*]}"
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1)"
say "$(command -v nvcc >/dev/null && nvcc --version | tail -n 1 || echo 'nvcc: not on PATH')"

# the carried libraries and headers, then NCCL from the Python packages:
# nvcc and gcc find them through CPATH / LIBRARY_PATH, the programs through
# LD_LIBRARY_PATH, so the Makefile's link line is unchanged
if [ -f "$deps/deps.tar.xz" ]; then
  mkdir -p "$deps/root" && tar xJf "$deps/deps.tar.xz" -C "$deps/root" || say "cannot unpack $deps/deps.tar.xz"
  export CPATH=$root/$deps/root/include${CPATH:+:$CPATH}
  export LIBRARY_PATH=$root/$deps/root/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$root/$deps/root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  say "no $deps/deps.tar.xz (make it with: $0 --pack $deps): using the machine's own libraries"
fi
cuda_home=${CUDA_HOME:-/usr/local/cuda}
export PATH=$cuda_home/bin:$PATH
export LD_LIBRARY_PATH=$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nccl=$(find / -name libnccl.so.2 -not -path '/proc/*' 2>/dev/null | head -n 1)
if [ -n "$nccl" ]; then
  ncdir=$(dirname "$nccl")
  mkdir -p /tmp/kf_nccl && ln -sf "$nccl" /tmp/kf_nccl/libnccl.so # the link name pip omits
  export LIBRARY_PATH=/tmp/kf_nccl${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$ncdir:$LD_LIBRARY_PATH
  [ -d "$ncdir/../include" ] && export CPATH=$(cd "$ncdir/../include" && pwd)${CPATH:+:$CPATH}
  say "NCCL: $nccl"
else
  say "NCCL: libnccl.so.2 not found (the CUDA build links -lnccl)"
fi
# nvcc builds for this GPU alone (the Makefile's default is sm_90a and sm_80):
# half the compile time, which is device time
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
case $cc in
  90) export CUDA_ARCH="-gencode arch=compute_90a,code=sm_90a" ;;
  [0-9][0-9]|1[0-9][0-9]) export CUDA_ARCH="-gencode arch=compute_$cc,code=sm_$cc" ;;
esac
say "CUDA_ARCH: ${CUDA_ARCH:-as the Makefile sets it}"
# each library the link line names, linked alone: a missing one is named here
# instead of somewhere in a long build log
for l in yaml lmdb archive z openblas cudart cublas cublasLt nccl; do
  echo 'int main(void) { return 0; }' | gcc -x c - -o /tmp/kf_probe -L"$cuda_home/lib64" -l$l 2>/dev/null ||
    say "missing library for the link: -l$l (carry it in $deps, see --pack)"
done

fails=0
# run NAME COMMAND...: output to the step's log, a summary line to the log
run() {
  local name=$1 s=$SECONDS rc; shift
  say "== $name: $*"
  "$@" >"$logs/$name.log" 2>&1; rc=$?
  say "   rc $rc, $((SECONDS - s)) s; last lines:"
  tail -n 15 "$logs/$name.log" | sed 's/^/   | /' | tee -a "$log"
  [ $rc -eq 0 ] || fails=$((fails + 1))
  tar czf "$out/logs.tar.gz.tmp" -C "$logs" . && mv "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"
}
kf=build-cuda/kf
shards=$deps/owt1024
# kf bench train on configs/tiny-gpt2.yaml grown to the issue's 124M model,
# on the carried shards, in precision phase $1; the rest are its arguments
bench_124m() {
  local p=$1; shift
  [ -d "$shards" ] || { echo "no $shards (made by --pack where data/text/owt-tiny exists)"; return 1; }
  "$kf" bench train configs/tiny-gpt2.yaml data.train="$shards" data.valid="$shards" \
    model.hidden=768 model.heads=12 model.blocks=12 model.seq_len=1024 \
    defaults.batch="${BATCH:-16}" "defaults.precision=[{mode: $p}]" --steps "${STEPS:-10}" \
    --warmup 2 "$@"
}
bench_train() { # the AR stage, each phase
  local p
  for p in fp16 bf16 fp32; do
    echo "-- precision $p, batch ${BATCH:-16}"
    bench_124m "$p" --stage ar || return 1
  done
}
bench_stages() { # every stage on the same batch, a 16-bit teacher then the default fp32 one
  local tp
  for tp in fp16 fp32; do
    echo "-- fp16 phase, teacher_precision $tp, batch ${BATCH:-16}"
    bench_124m fp16 --stage ar --stage k1 --stage k2 --stage k4 defaults.teacher_precision="$tp" ||
      return 1
  done
}
# llm.c's GPT-2 trainer at the same size, batch and sequence: synthetic tokens in
# its data format (a 256-int header: magic 20240520, version 1, token count;
# then uint16 tokens), random init (-e d12), bf16, no recomputation
llmc() {
  local bin=$deps/llmc/train_gpt2cu d=/tmp/kf_llmc
  [ -x "$bin" ] || { echo "no $bin carried (docs/cuda.md, Against llm.c)"; return 1; }
  mkdir -p "$d" || return 1
  python3 - "$d" <<'PY' || return 1
import random, struct, sys
for name, n in (("train", 4_000_000), ("val", 400_000)):
    rng = random.Random(1234 if name == "train" else 4321)
    with open(f"{sys.argv[1]}/{name}.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack(f"<{n}H", *(rng.randrange(50257) for _ in range(n))))
PY
  "$bin" -i "$d/train.bin" -j "$d/val.bin" -e d12 -b "${BATCH:-16}" -t 1024 -x "${LLMC_STEPS:-30}" \
    -r 0 -v 1000000 -m 1 -s 0
}
roofline() { # measured beside estimated on this GPU (resources.backend cuda, one rank)
  "$kf" bench train configs/gpt2-124m.yaml --roofline h100 --stage ar --stage k4 \
    defaults.teacher_precision=bf16 resources.ranks=1 resources.backend=cuda
}
need_kf() { [ -x "$kf" ] || run build make -j"$(nproc)" MPI=0 CUDA=1 BUILD=build-cuda BIN=$kf $kf; }
for step in "${steps[@]}"; do
  case $step in
    tests) run tests make -j"$(nproc)" MPI=0 test-cuda ;;
    bench-attention)
      need_kf
      run bench-attention "$kf" bench attention
      run bench-attention-simt "$kf" bench attention --simt ;;
    bench-train-124m) need_kf; run bench-train-124m bench_train ;;
    bench-stages-124m) need_kf; run bench-stages-124m bench_stages ;;
    roofline-124m) need_kf; run roofline-124m roofline ;;
    llmc) run llmc llmc ;;
    *) need_kf; run "bench-$step" "$kf" bench "$step" ;;
  esac
done
say "gpu_session: ${#steps[@]} steps, $fails failed"
exit "$fails"
