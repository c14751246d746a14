#!/usr/bin/env bash
# The teacher chain: after `kf import NEW --stage k1 --force` a student
# trained under k1's old weights (k2) is stale, and status says so with both
# hashes; kf jobs run trains it again, saying why, keeping what it had in
# stages/k2/stale/1/. A stage whose teacher is stale is stale too. A teacher's
# final/ that does not verify: the error names the file and the command that
# mends it, and that command works. A stage of kind import (a checkpoint as
# its final weights) is the teacher of the next.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_jobs.sh
need_data
T=$(mktemp -d /tmp/kf-test-chain.XXXXXX)
trap 'rm -rf "$T"' EXIT
tiny_config "$T/cfg.yaml" 4 3
R=$T/run
states() { "$KF" jobs status "$R" --json | node -e '
  const s = JSON.parse(require("fs").readFileSync(0));
  process.stdout.write(s.stages.slice(1).map(r => r.name + "=" + r.state).join(" "))'; }
"$KF" jobs run "$T/cfg.yaml" --run-dir "$R" --no-sample > "$T/run1.log" 2>&1
check "chain ar -> k1 -> k2 complete" [ "$(states)" = "ar=complete k1=complete k2=complete" ]
k2_before=$(file_sha "$R/stages/k2/final/model.safetensors")

# --- downstream: ar's weights replaced; k1 stale, k2 stale because k1 is;
# ar's own weights imported back: nothing stale
cp "$R/stages/ar/final/model.safetensors" "$T/ar.safetensors"
"$KF" import "$R/stages/ar/ckpt/step-2/model.safetensors" --run-dir "$R" --stage ar --force > /dev/null 2>&1
check "ar replaced: k1 stale, k2 stale through k1 ($(states))" [ "$(states)" = "ar=complete k1=stale k2=stale" ]
check "status: k2's teacher k1 is stale" bash -c '"$1" jobs status "$2" | grep -q "^k2: stale: its teacher k1 is stale"' _ "$KF" "$R"
"$KF" import "$T/ar.safetensors" --run-dir "$R" --stage ar --force > /dev/null 2>&1
check "ar's own weights back: nothing stale ($(states))" [ "$(states)" = "ar=complete k1=complete k2=complete" ]

# --- replace k1's weights: k2 is stale
"$KF" import "$R/stages/k1/ckpt/step-2/model.safetensors" --run-dir "$R" --stage k1 --force > "$T/imp.log" 2>&1
check "import --force into k1 exits 0" [ $? -eq 0 ]
new=$(file_sha "$R/stages/k1/final/model.safetensors")
check "after the import: k1 complete, k2 stale ($(states))" [ "$(states)" = "ar=complete k1=complete k2=stale" ]
"$KF" jobs status "$R" > "$T/status.txt"
check "status says why, with k1's new hash" grep -q "^k2: stale: teacher k1's weights changed: .*k1's final weights are now ${new:0:12}" "$T/status.txt"
"$KF" jobs run "$T/cfg.yaml" --run-dir "$R" --no-sample > "$T/run2.log" 2>&1; rc=$?
check "rerun exits 0 (got $rc)" [ $rc -eq 0 ]
check "rerun skips ar and k1" eval "grep -q 'ar: complete, skipped' $T/run2.log && grep -q 'k1: complete, skipped' $T/run2.log"
check "rerun says k2 is stale and why" grep -q "k2: stale: teacher k1's weights changed.*training it again from step 0 (what it had is kept in $R/stages/k2/stale/1)" "$T/run2.log"
check "k2 trained again, under the new k1" grep -q "teacher_sha256: \"$new\"" "$R/stages/k2/final/final.yaml"
check "k2's old weights kept in stale/1" [ "$(file_sha "$R/stages/k2/stale/1/final/model.safetensors")" = "$k2_before" ]
check "k2 new weights differ from the old" [ "$(file_sha "$R/stages/k2/final/model.safetensors")" != "$k2_before" ]
check "everything complete again ($(states))" [ "$(states)" = "ar=complete k1=complete k2=complete" ]

# --- a teacher's final/ corrupted: the error names the file and the fix
rm -rf "$R/stages/k1/final"   # k1 must finish again, and needs its teacher ar
f=$R/stages/ar/final/model.safetensors
printf 'U' | dd of="$f" bs=1 seek=300 conv=notrunc status=none
"$KF" jobs run "$T/cfg.yaml" --run-dir "$R" --no-sample > "$T/run4.log" 2>&1; rc=$?
check "corrupt teacher: exit 1 (got $rc)" [ $rc -eq 1 ]
check "corrupt teacher: the error names the file" grep -q "ar: its final weights are damaged: .*$f" "$T/run4.log"
check "corrupt teacher: the error names the fix" grep -q "remove $R/stages/ar/final to retrain" "$T/run4.log"
check "corrupt teacher: no 'run again' promise without the fix" bash -c '! grep -q "run the same command again to resume" "$1"' _ "$T/run4.log"
rm -r "$R/stages/ar/final"
"$KF" jobs run "$T/cfg.yaml" --run-dir "$R" --no-sample > "$T/run5.log" 2>&1; rc=$?
check "the named fix works: exit 0 (got $rc)" [ $rc -eq 0 ]
check "ar finished again from its checkpoint, not from step 0" grep -q "ar: resumed from .*step-4 (step 4" "$T/run5.log"
check "ar's weights are the ones it had" [ "$(file_sha "$R/stages/ar/final/model.safetensors")" = "$(file_sha "$T/ar.safetensors")" ]
check "after the fix: all complete ($(states))" [ "$(states)" = "ar=complete k1=complete k2=complete" ]
# a stage of kind import registers a checkpoint as its final weights, and a
# later stage trains from them
sed -e "s|{name: ar, kind: ar, steps: 4}|{name: ar, kind: import, path: $R/stages/ar/final/model.safetensors}|" \
  -e '/name: k2/d' "$T/cfg.yaml" > "$T/imp.yaml"
"$KF" jobs run "$T/imp.yaml" --run-dir "$T/imp" --no-sample > "$T/imp.log" 2>&1; rc=$?
check "an import stage, then distill_ar from it: exit 0 (got $rc: $(tail -n 1 "$T/imp.log"))" [ $rc -eq 0 ]
check "the import stage has final weights" [ -f "$T/imp/stages/ar/final/DONE" ]
check "the stage after it trained" [ -f "$T/imp/stages/k1/final/DONE" ]
finish
