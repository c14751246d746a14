#!/usr/bin/env bash
# The GPU test programs tests/unit/test_cuda_ops.c and test_cuda_train.c,
# unmodified, on the CPU under the CUDA emulation harness (kernels/cuda/emu,
# docs/cuda_emulation.md): every block's threads as fibers in each scheduling
# order — forward, reverse, and seeded random (KF_CUDA_EMU_SEED, default 1)
# under AddressSanitizer, the ASan build's checks being the plain one's —
# the two programs side by side; then
# test_cuda_limits (65536 blocks), test_kernels_table (every op slot of
# the CUDA backend filled), test_cuda_mma (the emulated PTX instructions
# against the PTX ISA's layouts) and test_cuda_graph (stream capture) once,
# test_cuda_decode_ref (attn_decode bitwise its predecessor's) in the three
# orders, the harness's own checks on kernels
# with deliberate bugs (emu_selftest), and NCCL's emulation under mpirun: 2
# ranks training on the emulated CUDA backend end bitwise equal to 1 rank
# accumulating the same 2 micro-batches, and to 2 ranks under ZeRO-1, the
# training step as CUDA graphs bitwise equal to KF_CUDA_GRAPHS=0 (ar with an
# fp16 phase, distill_ar and self_forcing with their teacher passes as
# graphs, the latter with weighted new positions; 2 ranks,
# all-reduce and ZeRO-1), and `kf bench train --roofline` timing
# each op of a step on the emulated GPU. Each program's own checks count here.
# `make test` builds the programs (make emu-tests); a missing one is a failure.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_trainer.sh
seed=${KF_CUDA_EMU_SEED:-1}

R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT

# start NAME BINARY ORDER: runs the program in the background, its output in
# $R/NAME.ORDER; waits first while two run (both cores of a CI machine, kept
# busy: each starts as soon as one ends, so the longest go first)
start() {
  local out="$R/$1.$3"
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  if [ ! -x "$2" ]; then echo "$2 not built (make emu-tests)" >"$out.log"; echo 127 >"$out.rc"; return; fi
  { s0=$SECONDS; KF_CUDA_EMU_ORDER=$3 ASAN_OPTIONS=detect_leaks=0 "$2" >"$out.log" 2>&1
    echo $? >"$out.rc"; echo $((SECONDS - s0)) >"$out.s"; } &
}
# collect NAME ORDER: adds the program's "N passed, N failed"; a crash or a
# missing result line is one more failure
collect() {
  local out="$R/$1.$2" rc line p=0 f=0
  rc=$(cat "$out.rc")
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out.log" | tail -n 1)
  if [ -n "$line" ]; then
    p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
  fi
  PASS=$((PASS + p)); FAIL=$((FAIL + f))
  echo "$1, order $2: ${line:-no result line}, rc $rc, $(cat "$out.s" 2>/dev/null || echo 0) s"
  if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
    [ "$f" -ne 0 ] || bad "$1, order $2: exit status $rc"
    grep -E 'FAIL|cuda-emu|ERROR|Sanitizer|SUMMARY|not built' "$out.log" | head -n 20
    tail -n 5 "$out.log"
  fi
}

asan="random:$seed"
for order in forward reverse; do
  start test_cuda_ops build-emu/tests/test_cuda_ops "$order"
  start test_cuda_train build-emu/tests/test_cuda_train "$order"
done
start "test_cuda_ops (ASan)" build-emu-asan/tests/test_cuda_ops "$asan"
start "test_cuda_train (ASan)" build-emu-asan/tests/test_cuda_train "$asan"
for order in forward reverse "random:$seed"; do # attn_decode against its predecessor
  start test_cuda_decode_ref build-emu/tests/test_cuda_decode_ref "$order"
done
for t in test_cuda_limits test_kernels_table test_cuda_mma test_cuda_graph; do
  start $t build-emu/tests/$t forward
done
wait
for order in forward reverse; do
  collect test_cuda_ops "$order"
  collect test_cuda_train "$order"
done
collect "test_cuda_ops (ASan)" "$asan"
collect "test_cuda_train (ASan)" "$asan"
for order in forward reverse "random:$seed"; do
  collect test_cuda_decode_ref "$order"
done
for t in test_cuda_limits test_kernels_table test_cuda_mma test_cuda_graph; do
  collect $t forward
done

# the harness's own checks: kernels/cuda/emu/emu_selftest.cu, one bug per case
ST=build-emu/emu_selftest
if [ -x "$ST" ]; then
  selftest() { # CASE REGEX: aborts saying REGEX in both orders
    local o out rc want=$2
    for o in forward reverse; do
      out=$(KF_CUDA_EMU_ORDER=$o "$ST" "$1" 2>&1); rc=$?
      check "emu_selftest $1 ($o): got rc $rc and '${out%%$'\n'*}', want an abort saying '$want'" \
        eval '[ "$rc" -ne 0 ] && grep -qE -- "$want" <<<"$out"'
    done
  }
  selftest divergent 'divergent barrier'
  selftest shfl 'exits while its warp waits|names lane 16, which has exited'
  selftest wmma 'not 32-byte aligned'
  selftest cp_async 'cp.async copies it never waited for'
  selftest launch 'block \(2048,1,1\)'
  selftest smem '65536 bytes of dynamic shared memory'
  selftest deadlock 'deadlock'
  ok_out=$(KF_CUDA_EMU_ORDER=reverse "$ST" ok 2>&1)
  check "emu_selftest ok: got '$ok_out', want 'ok: 64'" [ "$ok_out" = "ok: 64" ]
  rf=$(KF_CUDA_EMU_ORDER=forward "$ST" race 2>&1) rr=$(KF_CUDA_EMU_ORDER=reverse "$ST" race 2>&1)
  check "emu_selftest race: a read without its barrier gives '$rf' forward and '$rr' reverse, want them to differ" \
    [ "$rf" != "$rr" ]
else
  bad "$ST not built (make emu-tests)"
fi

# NCCL: mpirun -np 2 (MPI_Allreduce underneath) vs one rank, 2 micro-batches;
# ZeRO-1 (MPI_Reduce, MPI_Bcast; the checkpoint's shards by MPI_Send/MPI_Recv) vs the all-reduce
EMU_KF=build-emu/kf
if [ -x "$EMU_KF" ]; then
  T=$(mktemp -d /tmp/kf_emu_XXXXXX); trap 'rm -rf "$R" "$T"' EXIT
  KF=$EMU_KF trainer_setup "$T" # shards built by the same binary
  # emulated steps are slow: a generous collective timeout (cfg.yaml has 4 s)
  cuda=(resources.backend=cuda resources.collective_timeout=300 stages.0.steps=4)
  $MPIRUN -np 2 "$EMU_KF" train "$T/cfg.yaml" --stage ar --run-dir "$T/n2" "${cuda[@]}" 2>"$T/n2.err"; rc=$?
  check "emulated cuda, np=2: exits 0 (rc $rc): $(grep -m1 "error" "$T/n2.err")" [ $rc -eq 0 ]
  check "emulated cuda, np=2: reports 2 ranks" grep -q '2 ranks x 1 micro-batches x 4' "$T/n2.err"
  "$EMU_KF" train "$T/cfg.yaml" --stage ar --run-dir "$T/n1" "${cuda[@]}" defaults.micro_batch=4 2>"$T/n1.err"; rc=$?
  check "emulated cuda, np=1 with 2 micro-batches: exits 0 (rc $rc): $(tail -n 1 "$T/n1.err")" [ $rc -eq 0 ]
  check "emulated cuda: np=2 == np=1 x 2 micro-batches, bitwise" same_weights "$T/n2/stages/ar" "$T/n1/stages/ar"
  # ZeRO-1: ncclReduce per owner of each bucket (small buckets), ncclBroadcast
  # per shard; stopped at step 2 and resumed (the shards gathered to rank 0 for the
  # checkpoint, then taken from it)
  zero=(resources.zero1=true resources.bucket_mb=0.0005)
  $MPIRUN -np 2 "$EMU_KF" train "$T/cfg.yaml" --stage ar --run-dir "$T/z2" "${cuda[@]}" "${zero[@]}" \
    --stop-at 2 2>"$T/z2.err"; rc=$?
  check "emulated cuda, np=2 zero1 --stop-at 2: exits 75 (rc $rc): $(grep -m1 "error" "$T/z2.err")" [ $rc -eq 75 ]
  $MPIRUN -np 2 "$EMU_KF" train "$T/cfg.yaml" --stage ar --run-dir "$T/z2" "${cuda[@]}" "${zero[@]}" \
    --resume 2>"$T/z2.err"; rc=$?
  check "emulated cuda, np=2 zero1 resumed: exits 0 (rc $rc): $(grep -m1 "error" "$T/z2.err")" [ $rc -eq 0 ]
  check "emulated cuda: np=2 zero1 == np=2 all-reduce, bitwise" same_weights "$T/z2/stages/ar" "$T/n2/stages/ar"
  # same_run LABEL ST DIR0 DIR1: every checkpoint of stage ST in run DIR1
  # equals DIR0's, bitwise, and so does its log but for the timings
  nolat() { sed -E 's/,"(tokens_per_s|ms_step|ms_grad_wait|time)":[^,}]*//g' "$1"; }
  same_run() {
    local f st=$2 d0=$3 d1=$4
    for f in $(cd "$d0/stages/$st" && find . -name '*.safetensors' | sort); do
      check "$1: $f equals KF_CUDA_GRAPHS=0's, bitwise" cmp -s "$d0/stages/$st/$f" "$d1/stages/$st/$f"
    done
    check "$1: log (loss, grad_norm, lr, loss_scale, skips) equals KF_CUDA_GRAPHS=0's" \
      eval 'diff <(nolat "$d0/stages/$st/log.jsonl") <(nolat "$d1/stages/$st/log.jsonl")'
  }
  # launched LABEL ERR ST N L: stage ST ran N steps as graphs, L launches
  launched() {
    local want="$3: $4 steps ran as graphs ($5 graph launches)"
    check "$1: got '$(grep -ao "$3: [0-9]* steps ran as graphs.*" "$2")', want '$want'" \
      grep -aqF "$want" "$2"
  }
  # the training step as CUDA graphs (train.c) against KF_CUDA_GRAPHS=0, bitwise:
  # an fp16 phase whose first steps overflow (skipped, the scale backed off)
  # and whose scale then grows, an fp32 phase, a learning rate that changes
  # every step (warm-up), pad data (the attention's valid_len), 2
  # micro-batches; then a distill_ar stage with its teacher, and a
  # self_forcing one (cfg4.yaml: PFLM(4) from k2's teacher passes) whose new
  # positions weigh 0.5 (model_weight_dlogits: xent16's row weights in fp16,
  # the dlogits scaled in fp32), fp16 for 4 steps (2 skipped) then fp32, one
  # evaluation batch. Graphs: recorded on the 2nd step of each key
  # (precision), launched from the 3rd: ar 6 of its 10 steps (fp16 steps
  # 2-5, fp32 8-9), k2 2 of 4, k4 2 of 6 (fp16 steps 2-3; fp32 4 eager, 5
  # recorded); 3 launches a step (2 micro-batches, the update). The teacher
  # passes (sup_build_slot, whatever the student's precision): k2's 2 AR
  # passes one graph per micro-batch, launched on steps 2-3: 4 launches;
  # k4's 2 rounds one graph per micro-batch, launched on steps 2-4 (step 4's
  # fp32 student grows its buffers, so step 5 records them again): 6
  sed 's/^  - {name: k2, kind: distill_ar.*/&\n  - {name: k4, kind: self_forcing, teacher: k2, k: 4, steps: 6, tau: [0.5, 1.0], new_weight: 0.5, eval_batches: 1, precision: [{until_step: 4, mode: fp16}, {mode: fp32}]}/' \
    "$T/cfg.yaml" >"$T/cfg4.yaml"
  gr=(resources.backend=cuda stages.0.steps=10 stages.1.steps=4 defaults.warmup=100
    defaults.micro_batch=4)
  for s in ar:6:0 k2:2:4 k4:2:6; do
    IFS=: read -r st n tn <<<"$s"
    cfg=$T/cfg.yaml s0=$SECONDS
    [ "$st" = k4 ] && cfg=$T/cfg4.yaml
    "$EMU_KF" train "$cfg" --stage "$st" --run-dir "$T/gr1" "${gr[@]}" 2>"$T/gr1.err"; rc=$?
    check "emulated cuda graphs, $st: exits 0 (rc $rc): $(tail -n 1 "$T/gr1.err")" [ $rc -eq 0 ]
    KF_CUDA_GRAPHS=0 "$EMU_KF" train "$cfg" --stage "$st" --run-dir "$T/gr0" "${gr[@]}" \
      2>"$T/gr0.err"; rc=$?
    check "emulated cuda KF_CUDA_GRAPHS=0, $st: exits 0 (rc $rc): $(tail -n 1 "$T/gr0.err")" [ $rc -eq 0 ]
    same_run "emulated cuda graphs, $st" "$st" "$T/gr0" "$T/gr1"
    launched "emulated cuda graphs, $st" "$T/gr1.err" "$st" "$n" $((3 * n))
    tl=$(grep -ao "$st: the teacher's passes ran as graphs.*" "$T/gr1.err")
    want="$st: the teacher's passes ran as graphs ($tn graph launches)"
    [ "$tn" -eq 0 ] && want=""
    check "emulated cuda graphs, $st: teacher passes: got '$tl', want '$want'" [ "$tl" = "$want" ]
    check "emulated cuda KF_CUDA_GRAPHS=0, $st: no step ran as graphs" eval '! grep -q "ran as graphs" "$T/gr0.err"'
    echo "graphs vs KF_CUDA_GRAPHS=0, $st: $((SECONDS - s0)) s"
  done
  # several ranks as graphs against KF_CUDA_GRAPHS=0: 2 ranks of 2
  # micro-batches each, all-reduce and ZeRO-1, 4 fp16 steps (the first
  # skipped); steps 2-3 launch the first micro-batch and the update (the
  # last micro-batch drives the all-reduce: eager), ZeRO-1's update reading
  # the norm uploaded into ctl
  s0=$SECONDS
  for z in false true; do
    mr=("${cuda[@]}" defaults.micro_batch=2 resources.zero1=$z resources.bucket_mb=0.0005)
    for g in 1 0; do
      KF_CUDA_GRAPHS=$g $MPIRUN -np 2 "$EMU_KF" train "$T/cfg.yaml" --stage ar --run-dir "$T/m$z$g" \
        "${mr[@]}" 2>"$T/m$z$g.err"; rc=$?
      check "emulated cuda, np=2 zero1=$z KF_CUDA_GRAPHS=$g: exits 0 (rc $rc): $(grep -m1 "error" "$T/m$z$g.err")" [ $rc -eq 0 ]
    done
    same_run "emulated cuda graphs, np=2 zero1=$z" ar "$T/m${z}0" "$T/m${z}1"
    check "emulated cuda KF_CUDA_GRAPHS=0, np=2 zero1=$z: no step ran as graphs" \
      eval '! grep -q "ran as graphs" "$T/m${z}0.err"'
    launched "emulated cuda graphs, np=2 zero1=$z" "$T/m${z}1.err" ar 2 4
  done
  echo "graphs vs KF_CUDA_GRAPHS=0, 2 ranks: $((SECONDS - s0)) s"
  # the roofline on a "GPU": the step runs there and each op is timed beside its estimate
  # bench train reads the vocabulary of configs/tiny.yaml's shards: build them once
  [ -f data/shards/owt-tiny-bpe512/manifest.yaml ] ||
    "$EMU_KF" shards build configs/tiny.yaml >/dev/null 2>&1
  "$EMU_KF" bench train configs/tiny.yaml --roofline h100 --stage ar resources.backend=cuda \
    model.heads=3 defaults.micro_batch=2 >"$T/roof.out" 2>"$T/roof.err"; rc=$?
  check "emulated cuda roofline: exits 0 (rc $rc): $(tail -n 1 "$T/roof.err")" [ $rc -eq 0 ]
  check "emulated cuda roofline: timed on the GPU" grep -q 'run and timed on this GPU' "$T/roof.out"
  check "emulated cuda roofline: a measured column and step time" \
    eval "grep -q 'meas ms' '$T/roof.out' && grep -qE 'measured [0-9.]+ ms' '$T/roof.out'"
  # the decode roofline likewise: each step's ops run on the "GPU" and their time is printed
  "$EMU_KF" bench decode configs/tiny.yaml --roofline h100 --batch 2 --k 2 --cache-len 16 \
    resources.backend=cuda >"$T/droof.out" 2>"$T/droof.err"; rc=$?
  check "emulated cuda decode roofline: exits 0 (rc $rc): $(tail -n 1 "$T/droof.err")" [ $rc -eq 0 ]
  check "emulated cuda decode roofline: timed, a measured column" \
    eval "grep -q 'run and timed on this GPU' '$T/droof.out' && grep -q 'meas ms' '$T/droof.out'"
  check "emulated cuda decode roofline: AR and PFLM(2) rows with a measured time" \
    eval "[ \$(awk '\$1 == 2 && (\$2 == \"AR\" || \$2 == \"PFLM(2)\") && \$6 > 0' '$T/droof.out' | wc -l) -eq 2 ]"
else
  bad "$EMU_KF not built (make emu-tests)"
fi
finish
