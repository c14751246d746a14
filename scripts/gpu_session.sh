#!/usr/bin/env bash
# scripts/gpu_session.sh — one call on a lent GPU machine (docs/cuda.md,
# "Running on a lent GPU machine"): every figure the CUDA backend owes, most
# valuable first, each step under its own time limit inside one deadline.
#
# On the build machine, once:
#   bash scripts/gpu_session.sh --pack DIR [--llmc BIN]
# DIR (e.g. carry/gpu, ignored by git) is what the call carries:
#   deps.tar.xz     include/ (lmdb.h, yaml.h, zlib.h, archive*.h, cblas.h, nccl.h)
#                   and lib/ (static liblmdb/libyaml/libz; libarchive and OpenBLAS
#                   as shared libraries with what they need beyond glibc and gcc's
#                   runtime), bin/make (for a machine without one), glibc.txt
#                   (the newest glibc symbol each one needs)
#   cuda-objs.tar.gz the CUDA objects `make cuda-check` builds (sm_90a and sm_80)
#                   with the hash of each one's sources: the GPU machine reuses
#                   those that still match, so its build compiles only the C
#   owt1024/        1024-token GPT-2 shards (configs/tiny-gpt2.yaml's owt-tiny),
#                   at least 128 validation samples (the decode step's prefixes)
#   llmc/train_gpt2cu  llm.c's trainer, when given (--llmc) or already there;
#                   built by hand, never committed (docs/cuda.md, Against llm.c)
# and it fails when DIR and the tree that travels exceed KF_CARRY_MAX_MIB
# (default 56; the device tool's limit is 64).
#
# On the GPU machine, in one call carrying DIR (timeout_s 600):
#   bash scripts/gpu_session.sh [--deps DIR] [--deadline S] [STEP...]
# (DIR default carry/gpu, absolute or relative; S default 570 seconds, a little
# under the call's limit.) Steps, in this order (default: all):
#   env             the GPU (its name picks the roofline's device), nvcc, gcc,
#                   glibc against the carried libraries', cuBLAS, NCCL, the link
#   build           build-cuda/kf and the GPU test programs, carried objects reused;
#                   ldd names each library missing at run time
#   ar-fp16 ar-bf16 the AR stage at 124M (12 x 768, V 50258, seq 1024, batch
#                   $BATCH, default 16): ms/step, tokens/s, MFU
#   llmc            llm.c's train_gpt2cu at the same B and T, bf16
#   decode          random-weight AR and PFLM(4) checkpoints at 124M, then
#                   `kf bench decode` in bf16 at batch 4/16/128, k = 2/3/4 vs AR
#   stages-fp16t stages-fp32t  AR, PFLM(1), PFLM(2), PFLM(4) on one batch, fp16,
#                   with a 16-bit and an fp32 teacher (the 1.5(k+1) goal)
#   ar-fp32         the AR stage in fp32
#   roofline roofline-decode  each op's measured time beside its estimate on
#                   this GPU: a training step (AR, PFLM(4)), a decode step (bf16)
#   test_cuda_mma test_cuda_ops test_cuda_train test_cuda_decode_ref
#   test_cuda_limits  the GPU test programs (`tests`: all five)
#   attention attention-simt  `kf bench attention`, tensor-core and SIMT
# env always runs, build when a step needs it (once: a failed build fails the
# steps that need it at once). Every kf command runs with resources.backend=cuda
# (or --backend cuda): no step falls back to the CPU. A step runs even when an
# earlier one failed; one that would start too close to the deadline is
# skipped. Under $OUT: gpu_session.log (the summary and each step's last lines),
# logs.tar.gz (every step's log and the decode table, packed after each step
# and on SIGTERM) and running.log (the step in progress, if cut off). The exit
# status is the number of steps that failed or were skipped. Environment:
# OUT, CUDA_HOME (/usr/local/cuda), KF_GPU_DEADLINE (570), BATCH (16), STEPS
# (10 timed steps a benchmark), DECODE_RUNS (2), LLMC_STEPS (30). `--step NAME`
# runs one step as the session's child does.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
self=$root/scripts/gpu_session.sh
usage() { sed -n '2,/^set -u/p' "$self" | sed '$d; s/^# \{0,1\}//'; }
abspath() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

# hash of the project sources an object was built from: every relative path
# its nvcc -MMD file names (CUDA's own headers are covered by nvcc's version)
src_hash() {
  awk '{ c = sub(/\\$/, ""); s = s " " $0; if (!c) exit }
       END { sub(/^[^:]*:/, "", s); n = split(s, a, " "); for (i = 1; i <= n; i++) if (a[i] !~ /^\//) print a[i] }' "$1" |
    LC_ALL=C sort -u | while read -r f; do
      echo "$(sha256sum <"$root/$f" 2>/dev/null | cut -d' ' -f1) $f"
    done | sha256sum | cut -d' ' -f1
}
# a Makefile variable as make computes it for a CUDA build
make_var() {
  make -s --no-print-directory -C "$root" CUDA=1 -f Makefile \
    -f <(printf 'kf-print-%%:\n\t@echo $($*)\n') "kf-print-$1"
}
# where a library the build or the programs need comes from
lib_hint() {
  case $1 in
    *nccl*) echo "NCCL: pip's nvidia-nccl-cu13, found by the env step" ;;
    *cuda*|*cublas*|*nvJit*) echo "the CUDA toolkit: ${CUDA_HOME:-/usr/local/cuda}/lib64" ;;
    *) echo "carried in $DEPS/deps.tar.xz: --pack" ;;
  esac
}
mib() { echo $((($1 + 1048575) / 1048576)); }

# ---------------- build machine: --pack ----------------
pack() {
  local out=$1 llmc=$2 tmp cuda_home=${CUDA_HOME:-/usr/local/cuda} rc=0
  mkdir -p "$out" && out=$(cd "$out" && pwd) || return 1
  tmp=$(mktemp -d) || return 1
  trap "rm -rf '$tmp'" EXIT
  cd "$root" || return 1
  # headers and libraries the link line needs beyond the CUDA toolkit; the
  # shared ones with what they load, less glibc and gcc's runtime
  local lib=/usr/lib/x86_64-linux-gnu inc=() libs=() so f stamp
  inc=(/usr/include/{lmdb.h,yaml.h,zlib.h,zconf.h,archive.h,archive_entry.h}
    /usr/include/x86_64-linux-gnu/{cblas.h,openblas_config.h} "$cuda_home/include/nccl.h")
  libs=("$lib"/{liblmdb.a,libyaml.a,libz.a,libarchive.so.13,libopenblas.so.0})
  for so in libarchive.so.13 libopenblas.so.0; do
    for f in $(ldd "$lib/$so" | awk '$3 ~ /^\// {print $3}'); do
      case ${f##*/} in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
        *) libs+=("$f") ;;
      esac
    done
  done
  # remade only when a file or this function changed (xz takes a while)
  stamp=$({ stat -L -c '%n %s %Y' "${inc[@]}" "${libs[@]}" && declare -f pack; } | sha256sum | cut -d' ' -f1) || return 1
  if [ -f "$out/deps.tar.xz" ] && [ "$(cat "$out/deps.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$out/deps.tar.xz: kept"
  else
    mkdir -p "$tmp/d/include" "$tmp/d/lib" "$tmp/d/bin" && cp -L "${inc[@]}" "$tmp/d/include/" && cp -L "${libs[@]}" "$tmp/d/lib/" || return 1
    # GNU make, used there only when the image has none (it needs glibc alone)
    cp -L "$(command -v make)" "$tmp/d/bin/make" || return 1
    ln -s libarchive.so.13 "$tmp/d/lib/libarchive.so" && ln -s libopenblas.so.0 "$tmp/d/lib/libopenblas.so" || return 1
    (cd "$tmp/d/lib" && for f in *.so.*; do
      echo "$f $(grep -ao 'GLIBC_2\.[0-9]*' "$f" | sort -uV | tail -n 1)"
    done) >"$tmp/d/glibc.txt"
    tar cf "$tmp/deps.tar" -C "$tmp/d" include lib bin glibc.txt && xz -T0 -c "$tmp/deps.tar" >"$out/deps.tar.xz.tmp" &&
      mv "$out/deps.tar.xz.tmp" "$out/deps.tar.xz" && echo "$stamp" >"$out/deps.stamp" || return 1
    echo "$out/deps.tar.xz: $(du -k "$out/deps.tar.xz" | cut -f1) KiB"
  fi

  # the CUDA objects (make cuda-check's, also make test's), each with its sources' hash
  if [ -x "$cuda_home/bin/nvcc" ]; then
    local objs o n=0
    nice make -j"$(nproc)" --no-print-directory cuda-check >"$tmp/make.log" 2>&1 ||
      { tail -n 20 "$tmp/make.log" >&2; echo "--pack: make cuda-check failed" >&2; return 1; }
    objs=$(for s in $(make_var CU_SRC) $(make_var CU_TESTS | sed 's|tests/\([^ ]*\)|tests/unit/\1.cu|g'); do
      echo "build-cuda/${s%.cu}.o"; done)
    mkdir -p "$tmp/o" || return 1
    {
      echo "nvcc $("$cuda_home/bin/nvcc" --version | grep -o 'release [0-9.]*')"
      echo "arch $(make_var CUDA_ARCH)"
      echo "cublas $(awk '/define CUBLAS_VER_(MAJOR|MINOR) /{printf "%s%s", s, $3; s="."}' "$cuda_home/include/cublas_api.h")"
      for o in $objs; do
        echo "obj $o $(src_hash "${o%.o}.d")"
        mkdir -p "$tmp/o/$(dirname "$o")" && cp "$o" "${o%.o}.d" "$tmp/o/$(dirname "$o")/" || return 1
        n=$((n + 1))
      done
    } >"$tmp/o/manifest.txt" || return 1
    tar czf "$out/cuda-objs.tar.gz.tmp" -C "$tmp/o" . && mv "$out/cuda-objs.tar.gz.tmp" "$out/cuda-objs.tar.gz" || return 1
    echo "$out/cuda-objs.tar.gz: $n objects, $(du -k "$out/cuda-objs.tar.gz" | cut -f1) KiB"
  else
    rm -f "$out/cuda-objs.tar.gz"
    echo "no nvcc at $cuda_home/bin: no CUDA objects packed (the GPU machine compiles them, minutes)"
  fi

  # 1024-token shards for the 124M steps, with a validation split of at least
  # 128 samples (the decode step's largest batch takes its prefixes there);
  # kept while made with the same arguments
  local sh=(shards.owt-tiny.seq_len=1024 shards.owt-tiny.valid.last=600) nv
  if [ -f "$out/owt1024/manifest.yaml" ] && [ "$(cat "$out/owt1024.args" 2>/dev/null)" = "${sh[*]}" ]; then
    echo "$out/owt1024: kept"
  elif [ -x bin/kf ] && [ -e data/text/owt-tiny/openwebtext.tar.xz ]; then
    rm -rf "$out/owt1024" "$out/owt1024.args"
    bin/kf shards build configs/tiny-gpt2.yaml --only owt-tiny "${sh[@]}" shards.owt-tiny.out="$out/owt1024" \
      >"$tmp/shards.log" 2>&1 || { tail -n 20 "$tmp/shards.log" >&2; return 1; }
    echo "${sh[*]}" >"$out/owt1024.args"
    echo "$out/owt1024: $(du -sk "$out/owt1024" | cut -f1) KiB"
  else
    echo "no bin/kf or data/text/owt-tiny: $out/owt1024 not made (the 124M steps will say so)"; rc=1
  fi
  nv=$(awk '/^  valid:/ {v = 1} v && /^    samples:/ {print $2; exit}' "$out/owt1024/manifest.yaml" 2>/dev/null)
  [ "${nv:-0}" -ge 128 ] || { echo "$out/owt1024: ${nv:-no} validation samples, the decode step needs 128" >&2; rc=1; }

  # llm.c's trainer, built by hand (docs/cuda.md)
  if [ -n "$llmc" ]; then
    mkdir -p "$out/llmc" && cp "$llmc" "$out/llmc/train_gpt2cu.tmp" &&
      mv "$out/llmc/train_gpt2cu.tmp" "$out/llmc/train_gpt2cu" || return 1
  fi
  if [ -x "$out/llmc/train_gpt2cu" ]; then
    echo "$out/llmc/train_gpt2cu: needs $(grep -ao 'GLIBC_2\.[0-9]*' "$out/llmc/train_gpt2cu" | sort -uV | tail -n 1);" \
      "$(ldd "$out/llmc/train_gpt2cu" | awk '/=>/ {print $1}' | grep -E 'cu|nccl|nvidia' | tr '\n' ' ')"
  else
    echo "no llm.c trainer in $out/llmc (--llmc BIN; docs/cuda.md, Against llm.c): the llmc step will fail"
  fi

  # what travels: the tree (tracked and untracked-not-ignored files) and DIR
  local tree dir total max=${KF_CARRY_MAX_MIB:-56}
  tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)
  dir=$(du -sb "$out" | cut -f1)
  total=$((tree + dir))
  if [ -n "$(git ls-files -co --exclude-standard -- "$out" 2>/dev/null | head -n 1)" ]; then
    echo "warning: $out is not ignored by git: it travels with the tree (counted once)"; total=$tree
  fi
  echo "carry: $(mib "$total") MiB (tree $(mib "$tree") MiB + $out $(mib "$dir") MiB), limit $max MiB"
  [ "$total" -le $((max * 1048576)) ] ||
    { echo "--pack: the carry is over $max MiB: leave something out" >&2; return 1; }
  return $rc
}

# ---------------- GPU machine: the steps ----------------
# Each runs as `bash gpu_session.sh --step NAME` under timeout, its output the
# step's log, with the variables the parent exported (env.sh after env).
shards() { [ -f "$DEPS/owt1024/manifest.yaml" ] || { echo "no $DEPS/owt1024 (made by --pack where data/text/owt-tiny exists)"; return 1; }; }
kf() { "$root/build-cuda/kf" "$@"; }
# kf bench train on configs/tiny-gpt2.yaml grown to 124M, on the carried shards,
# in precision phase $1; the rest are its arguments
bench_124m() {
  local p=$1; shift
  shards || return 1
  kf bench train configs/tiny-gpt2.yaml data.train="$DEPS/owt1024" data.valid="$DEPS/owt1024" \
    model.hidden=768 model.heads=12 model.blocks=12 model.seq_len=1024 resources.backend=cuda \
    defaults.batch="${BATCH:-16}" "defaults.precision=[{mode: $p}]" --steps "${STEPS:-10}" \
    --warmup 2 "$@"
}

step_env() {
  local smi cc name glibc mine need lib probs=() cuda_home=${CUDA_HOME:-/usr/local/cuda} e=$WORK/env.sh
  problem() { echo "$*"; probs+=("$*"); }
  : >"$e"
  smi=$(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm \
    --format=csv,noheader 2>&1) || problem "nvidia-smi failed: $(head -n 1 <<<"$smi")"
  smi=$(head -n 1 <<<"$smi")
  echo "GPU: $smi"
  name=${smi%%,*}
  cc=$(echo "$smi" | awk -F', *' '{print $4}' | tr -d ' .')
  case $name in
    *H200*) echo "export ROOFLINE=h200" >>"$e" ;;
    *H100*) echo "export ROOFLINE=h100" >>"$e" ;;
    *A100*) echo "export ROOFLINE=a100" >>"$e" ;;
    *) echo "the roofline has no device for '$name' (h100, h200, a100): the roofline step will fail" ;;
  esac
  case $cc in
    90) echo "export CUDA_ARCH='-gencode arch=compute_90a,code=sm_90a' GPU_SM=sm_90a" >>"$e" ;;
    [0-9][0-9]|1[0-9][0-9]) echo "export CUDA_ARCH='-gencode arch=compute_$cc,code=sm_$cc' GPU_SM=sm_$cc" >>"$e" ;;
    *) problem "no compute capability from nvidia-smi ('$cc')" ;;
  esac
  echo "nvcc: $("$cuda_home/bin/nvcc" --version 2>&1 | grep -o 'release [0-9.]*' || echo "not at $cuda_home/bin/nvcc")"
  echo "gcc: $(gcc --version 2>&1 | head -n 1)"
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  echo "glibc: ${glibc:-unknown}"

  # the carried libraries, unpacked outside the carried folder
  if [ -f "$DEPS/deps.tar.xz" ]; then
    # without xz on the machine, Python's lzma unpacks it
    mkdir -p "$WORK/deps" && { if command -v xz >/dev/null; then tar xJf "$DEPS/deps.tar.xz" -C "$WORK/deps"; else
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$DEPS/deps.tar.xz" "$WORK/deps"
    fi; } || problem "cannot unpack $DEPS/deps.tar.xz"
    while read -r lib need; do
      [ -n "$need" ] || continue
      mine=$(printf '%s\n%s\n' "${need#GLIBC_}" "$glibc" | sort -V | tail -n 1)
      [ "$mine" = "$glibc" ] || problem "carried $lib needs $need, this machine has glibc $glibc: repack on an older system"
    done <"$WORK/deps/glibc.txt"
    command -v make >/dev/null || { echo "no make here: the carried one"; echo "export PATH=\$PATH:$WORK/deps/bin" >>"$e"; }
    echo "export CPATH=$WORK/deps/include\${CPATH:+:\$CPATH} LIBRARY_PATH=$WORK/deps/lib\${LIBRARY_PATH:+:\$LIBRARY_PATH} LD_LIBRARY_PATH=$WORK/deps/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" >>"$e"
  else
    echo "no $DEPS/deps.tar.xz (make it with --pack $DEPS): the machine's own libraries and headers"
  fi
  if [ -x "$DEPS/llmc/train_gpt2cu" ]; then
    need=$(grep -ao 'GLIBC_2\.[0-9]*' "$DEPS/llmc/train_gpt2cu" | sort -uV | tail -n 1)
    mine=$(printf '%s\n%s\n' "${need#GLIBC_}" "$glibc" | sort -V | tail -n 1)
    [ "$mine" = "$glibc" ] || echo "carried llm.c trainer needs $need, this machine has glibc $glibc: the llmc step will fail"
  fi
  echo "export PATH=$cuda_home/bin:\$PATH LD_LIBRARY_PATH=$cuda_home/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" >>"$e"

  # NCCL from the Python packages (nvidia-nccl-cu13); nccl.h is carried
  local nccl dirs
  dirs=$(python3 -c 'import site; print(*site.getsitepackages())' 2>/dev/null)
  nccl=$(timeout 20 find -H "$cuda_home/lib64" /usr/lib/x86_64-linux-gnu /usr/local/lib /opt $dirs \
    -name libnccl.so.2 -print -quit 2>/dev/null)
  if [ -n "$nccl" ]; then
    mkdir -p "$WORK/nccl" && ln -sf "$nccl" "$WORK/nccl/libnccl.so" # the link name pip omits
    echo "export LIBRARY_PATH=$WORK/nccl:\$LIBRARY_PATH LD_LIBRARY_PATH=$(dirname "$nccl"):\$LD_LIBRARY_PATH" >>"$e"
    echo "NCCL: $nccl"
  else
    problem "NCCL: no libnccl.so.2 in CUDA's lib64, the system's or Python's packages: the build cannot link -lnccl"
  fi
  . "$e"

  # cuBLAS: the library, and its version against the one the carried objects saw
  local cb carried
  cb=$(awk '/define CUBLAS_VER_(MAJOR|MINOR) /{printf "%s%s", s, $3; s="."}' "$cuda_home/include/cublas_api.h" 2>/dev/null)
  carried=$(tar xzOf "$DEPS/cuda-objs.tar.gz" ./manifest.txt 2>/dev/null | awk '$1 == "cublas" {print $2}')
  echo "cuBLAS: headers ${cb:-missing}${carried:+ (the carried objects: $carried)}, library $(ls "$cuda_home"/lib64/libcublas.so.* 2>/dev/null | head -n 1 | grep . || echo missing)"
  [ -n "$cb" ] || problem "cuBLAS: no $cuda_home/include/cublas_api.h"
  [ -z "$carried" ] || [ "${carried%%.*}" = "${cb%%.*}" ] || problem "cuBLAS $cb here, $carried where the objects were built"
  # each library the link line names, linked alone: a missing one is named here
  for lib in yaml lmdb archive z openblas cudart cublas cublasLt nccl; do
    echo 'int main(void) { return 0; }' | gcc -x c - -o "$WORK/probe" -L"$cuda_home/lib64" -l$lib 2>/dev/null ||
      problem "missing library for the link: -l$lib ($(lib_hint "lib$lib"))"
  done
  [ ${#probs[@]} -eq 0 ] || { echo "${#probs[@]} problem(s), the first: ${probs[0]}"; return 1; }
}

# build-cuda/kf and the GPU test programs; the carried objects whose sources
# still hash the same are installed first, so make compiles only the rest
step_build() {
  local t=$WORK/objs want have o h n=0 used=0 miss=0 cuda_home=${CUDA_HOME:-/usr/local/cuda}
  [ -x "$cuda_home/bin/nvcc" ] || { echo "nvcc not found at $cuda_home/bin/nvcc (CUDA_HOME)"; return 1; }
  if [ -f "$DEPS/cuda-objs.tar.gz" ]; then
    mkdir -p "$t" && tar xzf "$DEPS/cuda-objs.tar.gz" -C "$t" || return 1
    want=$(awk '$1 == "nvcc" {print $2, $3}' "$t/manifest.txt")
    have=$("$cuda_home/bin/nvcc" --version | grep -o 'release [0-9.]*')
    if [ "$want" != "$have" ]; then
      echo "carried objects: built by nvcc $want, this machine has $have: all rebuilt"
    elif ! grep -q "^arch .*code=${GPU_SM:-none}\b" "$t/manifest.txt"; then
      echo "carried objects: no $GPU_SM code in them ($(grep '^arch' "$t/manifest.txt")): all rebuilt"
    else
      while read -r _ o h; do
        n=$((n + 1))
        if [ "$(src_hash "$t/${o%.o}.d")" = "$h" ]; then
          mkdir -p "$(dirname "$o")"
          cmp -s "$t/$o" "$o" || cp "$t/$o" "$o" || return 1 # newer than the sources: make keeps it
          used=$((used + 1))
        else
          echo "carried $o: its sources changed since --pack: rebuilt here"; miss=$((miss + 1))
        fi
      done < <(grep '^obj ' "$t/manifest.txt")
      echo "carried objects: $used of $n reused, $miss rebuilt"
    fi
  else
    echo "no $DEPS/cuda-objs.tar.gz: every CUDA object compiled here"
  fi
  make -j"$(nproc)" --no-print-directory MPI=0 CUDA=1 CUDA_HOME="$cuda_home" NVCC="$cuda_home/bin/nvcc" BUILD=build-cuda BIN=build-cuda/kf ${CUDA_ARCH:+CUDA_ARCH="$CUDA_ARCH"} \
    build-cuda/kf $(make_var GPU_TESTS | sed 's|[^ ]*|build-cuda/&|g') || { echo "the build failed"; return 1; }
  # every library the programs load, found here
  local bad=0
  for o in build-cuda/kf build-cuda/tests/test_cuda_*; do
    [ -x "$o" ] || continue
    while read -r lib; do
      echo "missing library at run time: $lib, needed by $o ($(lib_hint "$lib"))"; bad=1
    done < <(ldd "$o" | awk '/not found/ {print $1}')
  done
  return $bad
}

step_ar() { bench_124m "$1" --stage ar; }
step_stages() { bench_124m fp16 --stage ar --stage k1 --stage k2 --stage k4 defaults.teacher_precision="$1"; }

# llm.c's GPT-2 trainer at the same size, batch and sequence: synthetic tokens in
# its data format (a 256-int header: magic 20240520, version 1, token count;
# then uint16 tokens), random init (-e d12), bf16, no recomputation
step_llmc() {
  local bin=$DEPS/llmc/train_gpt2cu d=$WORK/llmc
  [ -x "$bin" ] || { echo "no $bin carried (docs/cuda.md, Against llm.c)"; return 1; }
  ldd "$bin" | awk '/not found/ {print "missing library at run time: " $1; bad = 1} END {exit bad}' || return 1
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

# The paper's Table 1 protocol at 124M: an AR and a PFLM(4) checkpoint, one
# training step each from random weights (throughput does not depend on them),
# then `kf bench decode` in bf16
step_decode() {
  local run=$WORK/decode-run
  shards || return 1
  local ov=(data.train="$DEPS/owt1024" data.valid="$DEPS/owt1024" model.hidden=768 model.heads=12
    model.blocks=12 model.seq_len=1024 defaults.batch=4 defaults.eval_batches=1 defaults.log_every=1
    resources.backend=cuda stages.0.steps=1)
  rm -rf "$run"
  kf train configs/tiny-gpt2.yaml --stage ar --run-dir "$run" "${ov[@]}" || return 1
  kf train configs/tiny-gpt2.yaml --stage k4 --run-dir "$run" "${ov[@]}" stages.3.steps=1 \
    stages.3.kind=distill_ar stages.3.teacher=ar stages.3.init=ar || return 1
  kf bench decode "$run/stages/ar/final" "$run/stages/k4/final" --data "$DEPS/owt1024" \
    --batch 4,16,128 --k 2,3,4 --runs "${DECODE_RUNS:-2}" --precision bf16 --backend cuda \
    --json "$LOGS/decode.json" --png "$LOGS/decode.png"
}

# each op measured beside its estimate on this GPU (training: one rank; decoding:
# bf16, cache 512); without a GPU the roofline only estimates ("dry"), a failure here
step_roofline() {
  local o=$WORK/roofline.out
  [ -n "${ROOFLINE:-}" ] || { echo "no roofline device for this GPU (the env step names it)"; return 1; }
  if [ "$1" = train ]; then
    kf bench train configs/gpt2-124m.yaml --roofline "$ROOFLINE" --stage ar --stage k4 \
      defaults.teacher_precision=bf16 resources.ranks=1 resources.backend=cuda
  else
    kf bench decode configs/gpt2-124m.yaml --roofline "$ROOFLINE" --precision bf16 resources.backend=cuda
  fi >"$o" 2>&1 || { cat "$o"; return 1; }
  cat "$o"
  ! grep -q 'dry: nothing computed' "$o" || { echo "the roofline ran dry: no CUDA device, nothing measured"; return 1; }
}
step_test() { KF_TEST_CUDA=1 KF_BIN=build-cuda/kf KF_TEST_BUILD=build-cuda "build-cuda/tests/$1"; }

# runs one step by name (the child's side)
step() {
  cd "$root" || return 1
  [ -f "$WORK/env.sh" ] && . "$WORK/env.sh"
  case $1 in
    env) step_env ;;
    build) step_build ;;
    ar-fp16|ar-bf16|ar-fp32) step_ar "${1#ar-}" ;;
    llmc) step_llmc ;;
    decode) step_decode ;;
    stages-fp16t|stages-fp32t) step_stages "${1:7:4}" ;;
    roofline) step_roofline train ;;
    roofline-decode) step_roofline decode ;;
    test_cuda_*) step_test "$1" ;;
    attention) kf bench attention ;;
    attention-simt) kf bench attention --simt ;;
    *) echo "unknown step $1"; return 2 ;;
  esac
}

# ---------------- the parent: order, limits, logs ----------------
# NAME:LIMIT (seconds), by value: the headline figures first
PLAN=(ar-fp16:90 ar-bf16:90 llmc:90 decode:300 stages-fp16t:150 stages-fp32t:150 ar-fp32:90
  roofline:120 roofline-decode:90 test_cuda_mma:30 test_cuda_ops:120 test_cuda_train:120 test_cuda_decode_ref:60
  test_cuda_limits:60 attention:60 attention-simt:60)
BUILD_LIMIT=240 ENV_LIMIT=60

session() {
  local deadline=$1; shift
  local out=${OUT:-/tmp/kf_gpu_session} want=("$@") plan=() p s n=0 fails=0 t0=$SECONDS
  # the steps asked for, in the plan's order
  [ ${#want[@]} -gt 0 ] || want=(all)
  for w in "${want[@]}"; do
    case " all tests env build ${PLAN[*]%%:*} " in
      *" $w "*) ;;
      *) echo "unknown step '$w' (--help lists them)" >&2; exit 2 ;;
    esac
  done
  # the session's files (unpacked libraries, checkpoints, logs), removed at the end
  export WORK LOGS
  WORK=$(mktemp -d /tmp/kf_gpu.XXXXXX) && LOGS=$WORK/logs && mkdir -p "$LOGS" "$out" || exit 1
  for p in "${PLAN[@]}"; do
    for w in "${want[@]}"; do
      if [ "$w" = all ] || [ "$w" = "${p%%:*}" ] || { [ "$w" = tests ] && [[ $p == test_cuda_* ]]; }; then
        plan+=("$p"); break
      fi
    done
  done
  for p in "${plan[@]}" "${want[@]}"; do # build when a step needs kf
    case ${p%%:*} in env|llmc) ;; *) plan=("build:$BUILD_LIMIT" "${plan[@]}"); break ;; esac
  done
  plan=("env:$ENV_LIMIT" "${plan[@]}")

  local log=$out/gpu_session.log summary=() cur= cur_pid= build_ok=
  : >"$log"
  note() { echo "$*" | tee -a "$log"; }
  pack_logs() { tar czf "$out/logs.tar.gz.tmp" -C "$LOGS" . 2>/dev/null && mv "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"; }
  finish() {
    note ""
    note "$(printf '%-21s %-7s %4s  %s' step result s reason)"
    for s in "${summary[@]}"; do note "$s"; done
    note "gpu_session: ${#summary[@]} steps, $fails failed or skipped, $((SECONDS - t0)) s of $deadline"
    pack_logs
    rm -rf "$WORK"
  }
  on_term() {
    note "!! SIGTERM during step ${cur:-none}: its log so far is $out/running.log"
    [ -n "$cur_pid" ] && kill -TERM "$cur_pid" 2>/dev/null
    [ -n "$cur" ] && { cp "$out/running.log" "$LOGS/$(printf %02d $n)-$cur.log" 2>/dev/null
      summary+=("$(printf '%-21s %-7s %4d  %s' "$cur" KILLED $((SECONDS - s)) 'SIGTERM')"); fails=$((fails + 1)); }
    finish
    exit 143
  }
  trap on_term TERM INT
  note "gpu_session $(date -u +%FT%TZ), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), deps $DEPS, deadline ${deadline}s"
  note "plan: ${plan[*]}"

  local name lim left rc reason result
  for p in "${plan[@]}"; do
    name=${p%%:*} lim=${p##*:} n=$((n + 1)) s=$SECONDS
    left=$((deadline - (SECONDS - t0) - 5))
    if [ "$left" -lt 10 ]; then
      reason="not started: ${left}s left before the deadline" rc=skip
    elif [ "$name" != env ] && [ "$name" != build ] && [ "$name" != llmc ] && [ "$build_ok" != 1 ]; then
      reason="not run: the build failed (see its log)" rc=nobuild
    else
      [ "$lim" -gt "$left" ] && lim=$left
      note "== $name (limit ${lim}s)"
      cur=$name s=$SECONDS
      timeout -k 5 "$lim" bash "$self" --step "$name" >"$out/running.log" 2>&1 &
      cur_pid=$!
      wait "$cur_pid"; rc=$?
      cur_pid= cur=
      mv "$out/running.log" "$LOGS/$(printf %02d $n)-$name.log"
      tail -n 15 "$LOGS/$(printf %02d $n)-$name.log" | sed 's/^/   | /' | tee -a "$log"
      case $rc in
        0) reason= ;;
        124|137) reason="timed out after ${lim}s" ;;
        *) reason=$(grep -v '^[[:space:]]*$' "$LOGS/$(printf %02d $n)-$name.log" | tail -n 1 | cut -c1-150) ;;
      esac
      [ "$name" = build ] && [ "$rc" = 0 ] && build_ok=1
    fi
    if [ "$rc" = 0 ]; then
      summary+=("$(printf '%-21s %-7s %4d' "$name" ok $((SECONDS - s)))")
    elif [ "$rc" = skip ] || [ "$rc" = nobuild ]; then
      # a step that never started shows "-" for its seconds: SECONDS can
      # tick between reading s and here even when nothing ran
      result=FAILED; [ "$rc" = skip ] && result=SKIPPED
      summary+=("$(printf '%-21s %-7s %4s  %s' "$name" $result - "$reason")"); fails=$((fails + 1))
    else
      summary+=("$(printf '%-21s %-7s %4d  %s' "$name" FAILED $((SECONDS - s)) "$reason")"); fails=$((fails + 1))
    fi
    note "   ${summary[-1]}"
    pack_logs
  done
  finish
  exit "$fails"
}

deps=carry/gpu deadline=${KF_GPU_DEADLINE:-570} llmc=
case ${1:-} in
  -h|--help) usage; exit 0 ;;
  --step) [ $# -eq 2 ] || exit 2; step "$2"; exit ;;
  --pack)
    [ $# -ge 2 ] || { echo "usage: $0 --pack DIR [--llmc BIN]" >&2; exit 2; }
    dir=$(abspath "$2"); shift 2
    if [ "${1:-}" = --llmc ] && [ $# -eq 2 ]; then llmc=$(abspath "$2"); shift 2; fi
    [ $# -eq 0 ] || { echo "usage: $0 --pack DIR [--llmc BIN]" >&2; exit 2; }
    pack "$dir" "$llmc"; exit ;;
esac
while [ $# -gt 0 ]; do
  case $1 in
    --deps) [ $# -ge 2 ] || { echo "$0: --deps needs a folder" >&2; exit 2; }; deps=$2; shift 2 ;;
    --deadline) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "$0: --deadline needs seconds" >&2; exit 2; }; deadline=$2; shift 2 ;;
    *) break ;;
  esac
done
export DEPS
DEPS=$(abspath "$deps")
session "$deadline" "$@"
