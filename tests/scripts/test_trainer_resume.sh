#!/usr/bin/env bash
# Single-process resume: stop (--stop-at, SIGUSR1) -> --resume ends bitwise
# identical to an uninterrupted run, across the fp16 -> fp32 switch; fp16
# overflow is skipped with backoff and the scale grows again; corrupt and
# partial checkpoints are skipped with a warning; a stale `latest` is
# repaired, and so is the log of a run killed before its first checkpoint; incompatible resumes and unasked restarts are refused; a
# distillation stage verifies its teacher.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_trainer.sh
T=$(mktemp -d /tmp/kf_resume_XXXXXX); trap 'rm -rf "$T"' EXIT
trainer_setup "$T"
C=$T/cfg.yaml

# A: uninterrupted
"$KF" train "$C" --stage ar --run-dir "$T/a" 2>"$T/a.err"; rc=$?
check "uninterrupted run exits 0 (rc $rc): $(tail -2 "$T/a.err")" [ $rc -eq 0 ]
check "completion marker" [ -f "$T/a/stages/ar/final/DONE" ]
L=$T/a/stages/ar/log.jsonl
check "12 step records" [ "$(grep -c '"loss"' "$L")" -eq 12 ]
check "fp16 overflow skipped" grep -q '"skipped":1' "$L"
check "phase fp16 then fp32 at step 7" bash -c "grep '\"step\":6,' '$L' | grep -q fp16 && grep '\"step\":7,' '$L' | grep -q fp32"
s1=$(grep '"step":1,' "$L" | sed 's/.*"loss_scale":\([^,]*\),.*/\1/')
s3=$(grep '"step":3,' "$L" | sed 's/.*"loss_scale":\([^,]*\),.*/\1/')
s6=$(grep '"step":6,' "$L" | sed 's/.*"loss_scale":\([^,]*\),.*/\1/')
check "backoff after overflow ($s1 -> $s3)" awk -v a="$s1" -v b="$s3" 'BEGIN { exit !(b < a) }'
check "growth after the interval ($s3 -> $s6)" awk -v a="$s3" -v b="$s6" 'BEGIN { exit !(b > a) }'
check "status done" grep -q 'state: done' "$T/a/stages/ar/status"

# B: stop at step 5 (fp16 phase), resume across the switch
"$KF" train "$C" --stage ar --run-dir "$T/b" --stop-at 5 2>/dev/null; rc=$?
check "--stop-at exits 75 (rc $rc)" [ $rc -eq 75 ]
check "preempted status" grep -q 'state: preempted' "$T/b/stages/ar/status"
check "checkpoint at the stop step" [ "$(cat "$T/b/stages/ar/ckpt/latest")" = step-5 ]
"$KF" train "$C" --stage ar --run-dir "$T/b" 2>"$T/b.err"; rc=$?
check "restart without --resume refused (rc $rc)" [ $rc -eq 1 ]
check "refusal says --resume" grep -q -- '--resume' "$T/b.err"
"$KF" train "$C" --stage ar --run-dir "$T/b" --resume 2>/dev/null; rc=$?
check "resume completes (rc $rc)" [ $rc -eq 0 ]
check "stop+resume is bitwise identical" same_weights "$T/a/stages/ar" "$T/b/stages/ar"
check "resumed log holds each step once" [ "$(grep -c '"loss"' "$T/b/stages/ar/log.jsonl")" -eq 12 ]

# C: corrupt newest + partial newer checkpoints are skipped with a warning
"$KF" train "$C" --stage ar --run-dir "$T/c" --stop-at 9 2>/dev/null
ck=$T/c/stages/ar/ckpt
printf 'garbage' | dd of="$ck/step-9/ema.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
mkdir -p "$ck/step-10.tmp" "$ck/step-11"
"$KF" train "$C" --stage ar --run-dir "$T/c" --resume 2>"$T/c.err"; rc=$?
check "resume past corrupt checkpoints (rc $rc)" [ $rc -eq 0 ]
check "warning names the corrupt one" grep -q 'checkpoint .*step-9 does not verify (.*sha256.*): moved to .*ckpt/corrupt/step-9' "$T/c.err"
check "warning names the partial one" grep -q 'checkpoint .*step-11 does not verify (.*): moved to .*ckpt/corrupt/step-11' "$T/c.err"
check "corrupt and partial moved aside" eval "[ -d $ck/corrupt/step-9 ] && [ -d $ck/corrupt/step-11 ] && [ ! -e $ck/step-9 ] && [ ! -e $ck/step-11 ]"
check "resumed from step-8" grep -q 'resumed from .*step-8' "$T/c.err"
check "corrupt-skip resume is bitwise identical" same_weights "$T/a/stages/ar" "$T/c/stages/ar"
check "log trimmed to the resumed step: 12 step records" [ "$(grep -c '"loss"' "$T/c/stages/ar/log.jsonl")" -eq 12 ]

# C2: a crash at the last step after step-12's rename but before `latest` and
# final/ were written: the resume finishes the stage and repairs `latest`
cp -r "$T/a" "$T/c2"; ck=$T/c2/stages/ar/ckpt
rm -rf "$T/c2/stages/ar/final"; printf 'step-8\n' > "$ck/latest"
"$KF" train "$C" --stage ar --run-dir "$T/c2" --resume 2>"$T/c2.err"; rc=$?
check "resume at the last step (rc $rc)" exits_saying $rc 0 "$T/c2.err" 'resumed from .*step-12'
check "latest points at the resumed step-12 ($(cat "$ck/latest"))" [ "$(cat "$ck/latest")" = step-12 ]
check "last-step resume is bitwise identical" same_weights "$T/a/stages/ar" "$T/c2/stages/ar"

# D: SIGUSR1 -> checkpoint + exit 75 at the next step boundary (slow steps via a bigger batch)
"$KF" train "$C" --stage ar --run-dir "$T/d" stages.0.steps=400 defaults.batch=64 2>/dev/null &
pid=$!
check "D: the run logs 3 steps" wait_until 600 log_lines "$T/d/stages/ar/log.jsonl" 3
kill -USR1 $pid; wait $pid; rc=$?
check "SIGUSR1 exits 75 (rc $rc)" [ $rc -eq 75 ]
n=$(sed 's/step-//' "$T/d/stages/ar/ckpt/latest" 2>/dev/null)
check "checkpoint at the step where it stopped (step-$n)" bash -c '[ -n "$1" ] && [ "$1" -lt 400 ]' _ "$n"

# D2: kill -9 before the first checkpoint: --resume starts at step 0 and the
# log holds each step once (the killed run's records are dropped)
"$KF" train "$C" --stage ar --run-dir "$T/d2" stages.0.steps=400 defaults.batch=64 defaults.checkpoint_every=1000 2>/dev/null &
pid=$!
check "D2: the run logs 3 steps" wait_until 600 log_lines "$T/d2/stages/ar/log.jsonl" 3
kill -9 $pid; wait $pid 2>/dev/null
"$KF" train "$C" --stage ar --run-dir "$T/d2" --resume stages.0.steps=20 defaults.batch=64 2>"$T/d2.err"; rc=$?
check "resume without a checkpoint starts over (rc $rc)" exits_saying $rc 0 "$T/d2.err" 'no checkpoint to resume from'
L=$T/d2/stages/ar/log.jsonl
check "its log holds steps 1..20 once each" [ "$(grep -c '"loss"' "$L") $(grep -o '"step":[0-9]*,"loss"' "$L" | sort -u | wc -l)" = "20 20" ]

# E: incompatible resumes are refused
"$KF" train "$C" --stage ar --run-dir "$T/b2" --stop-at 4 2>/dev/null
"$KF" train "$C" --stage ar --run-dir "$T/b2" --resume model.hidden=64 2>"$T/e.err"; rc=$?
check "different model shape refused (rc $rc)" exits_saying $rc 1 "$T/e.err" 'model shape'
"$KF" train "$C" --stage ar --run-dir "$T/b2" --resume defaults.batch=16 2>"$T/e.err"; rc=$?
check "different global batch refused (rc $rc)" exits_saying $rc 1 "$T/e.err" 'global batch'
mkdir -p "$T/other"; sed 's/^\(.*\) \.$/\1 , ./' "$T/text.txt" > "$T/other/text.txt"
sed -e "s#$T/shards#$T/other/shards#g" -e "s#$T/text.txt#$T/other/text.txt#" "$C" > "$T/other/cfg.yaml"
"$KF" shards build "$T/other/cfg.yaml" >/dev/null 2>&1
"$KF" train "$T/other/cfg.yaml" --stage ar --run-dir "$T/b2" --resume 2>"$T/e.err"; rc=$?
check "different dataset refused (rc $rc)" exits_saying $rc 1 "$T/e.err" 'dataset manifest'

# F: the next stage verifies its teacher (sha256) and never modifies it
sha_before=$(sha256sum "$T/a/stages/ar/final/model.safetensors")
"$KF" train "$C" --stage k2 --run-dir "$T/a" 2>"$T/f.err"; rc=$?
check "distill stage runs (rc $rc): $(tail -1 "$T/f.err")" [ $rc -eq 0 ]
check "teacher unchanged" [ "$sha_before" = "$(sha256sum "$T/a/stages/ar/final/model.safetensors")" ]
printf 'x' | dd of="$T/b/stages/ar/final/model.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
"$KF" train "$C" --stage k2 --run-dir "$T/b" 2>"$T/f.err"; rc=$?
check "modified teacher refused (rc $rc)" exits_saying $rc 1 "$T/f.err" 'sha256'
finish
