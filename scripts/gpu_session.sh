#!/usr/bin/env bash
# scripts/gpu_session.sh — what one call on a lent GPU machine runs: builds
# the CUDA backend there with that machine's nvcc (`make test-cuda`: build-cuda/,
# every test program, then the tests named *cuda*), then the benchmarks. Each
# step's output goes to its own file under $OUT (default /tmp/kf_gpu_session) as
# it is made, and a summary line per step to $OUT/gpu_session.log, so a call cut
# off at its time limit keeps everything that ran.
#
# The GPU machine has nvcc, gcc and the CUDA libraries, NCCL in its Python
# packages (nvidia-nccl-cu13), and no package registry. What the link line needs
# beyond that comes in one carried folder DEPS, made on the build machine:
#   bash scripts/gpu_session.sh --pack DEPS
# DEPS/deps.tar.xz holds include/ (lmdb.h, yaml.h, zlib.h, archive*.h, cblas.h)
# and lib/: liblmdb.a, libyaml.a, libz.a (static: nothing to install there),
# libarchive and OpenBLAS as shared libraries with every library they need
# outside glibc and gcc's runtime; DEPS/owt1024 holds 1024-token GPT-2 shards
# (configs/tiny-gpt2.yaml's owt-tiny) for the 124M training benchmark.
#
# On the GPU machine, in one `run` call carrying DEPS (e.g. carry/gpu):
#   bash scripts/gpu_session.sh [--deps DEPS] [STEP...]
# STEP: tests (make test-cuda), bench-attention (fp16 tensor-core and --simt
# kernels), bench-train-124m (12 x 768, V = 50258, sequence 1024, batch $BATCH,
# default 16; fp16 then fp32), or any `kf bench` NAME. Default: tests
# bench-attention bench-train-124m. A step runs even when an earlier one failed;
# the exit status is the number of failed steps.
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
[ ${#steps[@]} -gt 0 ] || steps=(tests bench-attention bench-train-124m)
out=${OUT:-/tmp/kf_gpu_session}
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
# each library the link line names, linked alone: a missing one is named here
# instead of somewhere in a long build log
for l in yaml lmdb archive z openblas cudart cublas cublasLt nccl; do
  echo 'int main(void) { return 0; }' | gcc -x c - -o /tmp/kf_probe -L"$cuda_home/lib64" -l$l 2>/dev/null ||
    say "missing library for the link: -l$l (carry it in $deps, see --pack)"
done

fails=0
# run NAME COMMAND...: output to $out/NAME.log, a summary line to the log
run() {
  local name=$1 s=$SECONDS rc; shift
  say "== $name: $*"
  "$@" >"$out/$name.log" 2>&1; rc=$?
  say "   rc $rc, $((SECONDS - s)) s; last lines:"
  tail -n 15 "$out/$name.log" | sed 's/^/   | /' | tee -a "$log"
  [ $rc -eq 0 ] || fails=$((fails + 1))
}
kf=build-cuda/kf
bench_train() { # the issue's 124M step, fp16 phase then fp32, on the carried shards
  local d=$deps/owt1024 p
  [ -d "$d" ] || { echo "no $d (made by --pack where data/text/owt-tiny exists)"; return 1; }
  for p in fp16 fp32; do
    echo "-- precision $p, batch ${BATCH:-16}"
    "$kf" bench train configs/tiny-gpt2.yaml --stage ar data.train="$d" data.valid="$d" \
      model.hidden=768 model.heads=12 model.blocks=12 model.seq_len=1024 \
      defaults.batch="${BATCH:-16}" "defaults.precision=[{mode: $p}]" \
      "stages.0.precision=[{mode: $p}]" --steps "${STEPS:-10}" --warmup 2 || return 1
  done
}
for step in "${steps[@]}"; do
  case $step in
    tests) run tests make -j"$(nproc)" MPI=0 test-cuda ;;
    bench-attention)
      [ -x "$kf" ] || run build make -j"$(nproc)" MPI=0 CUDA=1 BUILD=build-cuda BIN=$kf $kf
      run bench-attention "$kf" bench attention
      run bench-attention-simt "$kf" bench attention --simt ;;
    bench-train-124m)
      [ -x "$kf" ] || run build make -j"$(nproc)" MPI=0 CUDA=1 BUILD=build-cuda BIN=$kf $kf
      run bench-train-124m bench_train ;;
    *)
      [ -x "$kf" ] || run build make -j"$(nproc)" MPI=0 CUDA=1 BUILD=build-cuda BIN=$kf $kf
      run "bench-$step" "$kf" bench "$step" ;;
  esac
done
say "gpu_session: ${#steps[@]} steps, $fails failed"
exit "$fails"
