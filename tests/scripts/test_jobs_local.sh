#!/usr/bin/env bash
# kf jobs without Slurm: plan, the local runner (order, skipping completed
# stages, mpirun for --np 2, preemption and rerun), the frozen run.yaml
# (later config edits do not reach the run; incompatible changes are refused,
# naming the change), status --json, check, usage errors, and data built with
# other shard settings rebuilt rather than taken as complete.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_jobs.sh
need_data
T=$(mktemp -d /tmp/kf-test-jobs.XXXXXX)
trap 'rm -rf "$T"' EXIT

# --- usage
"$KF" jobs --help >/dev/null; check "jobs --help exits 0" [ $? -eq 0 ]
"$KF" jobs >/dev/null 2>&1; check "jobs without a command exits 2" [ $? -eq 2 ]
"$KF" jobs frobnicate >/dev/null 2>&1; check "unknown jobs command exits 2" [ $? -eq 2 ]
"$KF" jobs run --bogus x >/dev/null 2>&1; check "unknown option exits 2" [ $? -eq 2 ]

# --- plan: the paper-scale configs and strict validation
for c in lm1b owt; do
  out=$("$KF" jobs plan configs/$c.yaml 2>&1); rc=$?
  check "plan configs/$c.yaml exits 0" [ $rc -eq 0 ]
  check "plan $c: DAG ar -> k1 -> k2 -> k4" bash -c '[[ "$1" == *"ar -> k1"* && "$1" == *"k1 -> k2"* && "$1" == *"k2 -> k4"* ]]' _ "$out"
  check "plan $c: 8 ranks, 8 GPUs, 500000 steps" bash -c '[[ "$1" == *"8 rank(s)"* && "$1" == *"8 GPU(s)/node"* && "$1" == *"500000"* ]]' _ "$out"
done
check "plan owt: stage 0 is the imported MDLM checkpoint" bash -c '"$1" jobs plan configs/owt.yaml | grep -q "import data/ckpt/mdlm-ar-owt.safetensors"' _ "$KF"
# found by fuzz_rundir: a job count past int64_t (UBSan in the sanitizer suite)
out=$("$KF" jobs plan configs/tiny.yaml stages.0.steps=9000000000000000000 resources.time_limit=1 2>&1); rc=$?
row=$(grep '^0 ' <<<"$out")
check "plan: 9e18 steps in 1-minute jobs exits 0 (got $rc)" [ $rc -eq 0 ]
check "plan: 9e18 steps in 1-minute jobs needs 9.88P jobs (got: $row)" bash -c '[[ "$1" == *" 9.88P" ]]' _ "$row"
tiny_config "$T/cfg.yaml" 4
out=$("$KF" jobs plan "$T/cfg.yaml" model.hiden=3 2>&1); rc=$?
check "plan: an unknown override key exits 1 naming it" bash -c '[ $1 -eq 1 ] && [[ "$2" == *"unknown key '"'"'model.hiden'"'"'"* ]]' _ $rc "$out"
sed 's/lr: 1.0e-3/lr: fast/' "$T/cfg.yaml" > "$T/bad.yaml"
out=$("$KF" jobs plan "$T/bad.yaml" 2>&1); rc=$?
check "plan: a wrong type fails with FILE:LINE:COL ($out)" bash -c '[ $1 -eq 1 ] && [[ "$2" == *"bad.yaml:4:"*"lr"* ]]' _ $rc "$out"

# --- run: stages in order, each after its teacher
R=$T/run
"$KF" jobs run "$T/cfg.yaml" --run-dir "$R" --no-sample > "$T/run1.log" 2>&1; rc=$?
check "run tiny chain exits 0" [ $rc -eq 0 ]
for s in ar k1 k2; do check "run: stage $s complete" test -f "$R/stages/$s/final/DONE"; done
check "run: k1 finished after ar, k2 after k1" bash -c '[ ! "$1/stages/k1/final/DONE" -ot "$1/stages/ar/final/DONE" ] && [ ! "$1/stages/k2/final/DONE" -ot "$1/stages/k1/final/DONE" ]' _ "$R"
check "run: run.yaml frozen with its hash line" bash -c 'head -1 "$1/run.yaml" | grep -Eq "^# kf run config sha256: [0-9a-f]{64}$"' _ "$R"
check "check: ar complete (exit 0)" "$KF" jobs check "$R" ar
"$KF" jobs check "$R" nosuch >/dev/null 2>&1; check "check: unknown stage exits 2" [ $? -eq 2 ]
sha_before=$(file_sha "$R/stages/k2/final/model.safetensors")
"$KF" jobs run "$T/cfg.yaml" --run-dir "$R" --no-sample > "$T/run2.log" 2>&1; rc=$?
check "rerun exits 0" [ $rc -eq 0 ]
check "rerun: every stage skipped as complete" [ "$(grep -c 'complete, skipped' "$T/run2.log")" -eq 4 ]
check "rerun: no kf train started" bash -c '! grep -q "running .* train" "$1"' _ "$T/run2.log"
check "rerun: final weights untouched" [ "$(file_sha "$R/stages/k2/final/model.safetensors")" = "$sha_before" ]
# an import stage registers a checkpoint as its final weights
sed '/^stages:/,$d' "$T/cfg.yaml" > "$T/imp.yaml"
printf 'stages:\n  - {name: ar, kind: import, path: %s}\n' "$R/stages/ar/final/model.safetensors" >> "$T/imp.yaml"
"$KF" jobs run "$T/imp.yaml" --run-dir "$T/imp" --no-sample > "$T/imp.log" 2>&1; rc=$?
check "run: an import stage exits 0 (got $rc: $(tail -n 1 "$T/imp.log"))" [ $rc -eq 0 ]
check "run: the import stage has its final weights" test -f "$T/imp/stages/ar/final/DONE"
js=$("$KF" jobs status "$R" --json); rc=$?
check "status --json exits 0" [ $rc -eq 0 ]
check "status --json: 4 rows, all complete, steps 4/4" node -e '
  const s = JSON.parse(process.argv[1]);
  const ok = s.stages.length === 4 && s.stages.every(r => r.state === "complete") &&
             s.stages.slice(1).every(r => r.step === 4 && r.total === 4 && r.ckpt === "step-4");
  process.exit(ok ? 0 : 1);' "$js"
check "status table lists every stage" bash -c '[ "$("$1" jobs status "$2" | grep -cE "^(shards|ar|k1|k2) ")" -eq 4 ]' _ "$KF" "$R"

# --- the frozen config: edits do not reach the run; incompatible changes are refused
out=$("$KF" jobs run "$T/cfg.yaml" --run-dir "$R" model.hidden=64 2>&1); rc=$?
check "run with a changed model is refused naming the change" bash -c '[ $1 -eq 1 ] && [[ "$2" == *"model.hidden: 32 -> 64"* ]]' _ $rc "$out"
out=$("$KF" jobs resume "$R" --local stages.0.steps=8 2>&1); rc=$?
check "resume with changed steps is refused naming the change" bash -c '[ $1 -eq 1 ] && [[ "$2" == *"stages[0].steps: 4 -> 8"* ]]' _ $rc "$out"
h1=$(head -1 "$R/run.yaml")
out=$("$KF" jobs resume "$R" --local resources.time_limit=00:20:00 2>&1); rc=$?
check "resume with a new time limit (compatible) exits 0" [ $rc -eq 0 ]
check "compatible change recorded in run.yaml" bash -c '[ "$(head -1 "$1/run.yaml")" != "$2" ] && grep -q "00:20:00" "$1/run.yaml"' _ "$R" "$h1"
sed -i 's/steps: 4/steps: 5/' "$R/run.yaml"
out=$("$KF" jobs status "$R" 2>&1); rc=$?
check "a hand-edited run.yaml is refused" bash -c '[ $1 -eq 1 ] && [[ "$2" == *"changed after the run was made"* ]]' _ $rc "$out"

# --- preemption: USR1 to kf jobs run reaches the trainer (exit 75), a rerun resumes
P=$T/pre
tiny_config "$T/pre.yaml" 24 1
"$KF" jobs run "$T/pre.yaml" --run-dir "$P" --no-sample > "$T/pre1.log" 2>&1 &
pid=$!
wait_until 600 test -s "$P/stages/ar/log.jsonl"   # training (the trainer checkpoints on the signal)
kill -USR1 $pid; wait $pid; rc=$?
mkdir -p "$T/w" && cp "$P/run.yaml" "$T/w/"   # for the wrapper test below
check "USR1 to kf jobs run: exit 75 (preempted)" [ $rc -eq 75 ]
st=$("$KF" jobs status "$P" --json)
check "status after preemption: ar preempted with a checkpoint before step 24" node -e '
  const r = JSON.parse(process.argv[1]).stages[1];
  process.exit(r.state === "preempted" && r.ckpt_step > 0 && r.ckpt_step < 24 && r.status === "preempted" ? 0 : 1);' "$st"
"$KF" jobs run "$T/pre.yaml" --run-dir "$P" --no-sample stages.0.steps=25 > "$T/pre2.log" 2>&1; rc=$?
check "rerun with the preempted run's stages changed is refused" [ $rc -eq 1 ]
"$KF" jobs run "$T/pre.yaml" --run-dir "$P" --no-sample > "$T/pre3.log" 2>&1; rc=$?
check "rerun after preemption exits 0" [ $rc -eq 0 ]
check "rerun resumed ar from its checkpoint" grep -q "ar: resumed from" "$T/pre3.log"
check "rerun completed the stage" test -f "$P/stages/ar/final/DONE"
rm -rf "$P"

# --- the stage wrapper by hand, outside Slurm: a signal as soon as it runs (before
# the trainer starts) ends in exit 75 with a checkpoint, never a dead job
W=$T/w   # a copy of the preempted run's frozen run.yaml (24 steps), nothing trained yet
bash slurm/stage.sbatch "$W" ar > "$T/w1.log" 2>&1 &
pid=$!; wait_until 600 grep -q "start on" "$T/w1.log"; kill -USR1 $pid; wait $pid; rc=$?
check "wrapper signalled as it starts: exit 75, not killed" [ $rc -eq 75 ]
check "wrapper kept the early signal for the trainer" grep -q "got USR1" "$T/w1.log"
bash slurm/stage.sbatch "$W" ar > "$T/w2.log" 2>&1; rc=$?
check "wrapper run again: resumes and completes (exit 0)" bash -c '[ $1 -eq 0 ] && grep -q "ar: resumed from" "$2" && test -f "$3/stages/ar/final/DONE"' _ $rc "$T/w2.log" "$W"
bash slurm/stage.sbatch "$W" ar > "$T/w3.log" 2>&1; rc=$?
check "wrapper on a complete stage: nothing to do, exit 0" bash -c '[ $1 -eq 0 ] && grep -q "already complete" "$2"' _ $rc "$T/w3.log"

# --- --np 2: the stage runs under mpirun with 2 ranks
tiny_config "$T/np.yaml" 2 1
"$KF" jobs run "$T/np.yaml" --run-dir "$T/np" --np 2 --no-sample defaults.batch=2 > "$T/np.log" 2>&1; rc=$?
check "run --np 2 exits 0" [ $rc -eq 0 ]
check "run --np 2 launches mpirun -np 2" grep -q "running mpirun -np 2" "$T/np.log"
check "run --np 2: the trainer ran 2 ranks" grep -q "2 ranks" "$T/np.log"
check "run --np 2: stage complete" test -f "$T/np/stages/ar/final/DONE"

# --- missing data: kf jobs run builds the config's shards first (kf shards build RUN/run.yaml)
head -n 3000 data/text/brown.txt > "$T/small.txt"
tiny_config "$T/sh.yaml" 2 3
sed -i "s#$DATA#$T/shards#g" "$T/sh.yaml"
cat >> "$T/sh.yaml" <<YAML
shards:
  small:
    out: $T/shards
    tokenizer: gpt2
    vocab: data/vocab/gpt2
    packing: wrap
    seq_len: 128
    inputs: [{path: $T/small.txt, format: lines}]
    valid: {last: 300}
YAML
# (--no-sample: test_jobs_samples.sh runs the same chain, shards built first,
# to its completions and checks them)
"$KF" jobs run "$T/sh.yaml" --run-dir "$T/sh" --no-sample > "$T/sh.out" 2> "$T/sh.log"; rc=$?
check "run with missing data exits 0" [ $rc -eq 0 ]
check "run built the shards from the frozen run.yaml first" bash -c 'grep -q "shards: running .* shards build $1/run.yaml" "$2" && test -f "$3/manifest.yaml"' _ "$T/sh" "$T/sh.log" "$T/shards"
check "then trained every stage on them" test -f "$T/sh/stages/k2/final/DONE"

# --- data built with other shard settings (a shared data/ directory, an edited
# shards: section) does not pass for this config's: the run rebuilds it
old_hash=$(grep config_sha256 "$T/shards/manifest.yaml")
sed 's/valid: {last: 300}/valid: {last: 200}/' "$T/sh.yaml" > "$T/sh2.yaml"
"$KF" jobs run "$T/sh2.yaml" --run-dir "$T/sh2" --no-sample > /dev/null 2> "$T/sh2.log"; rc=$?
check "run over data built with other settings exits 0" [ $rc -eq 0 ]
check "that data is rebuilt, not skipped" bash -c '! grep -q "shards: complete, skipped" "$1" && grep -q "shards: running" "$1"' _ "$T/sh2.log"
check "its manifest records the new settings" bash -c '[ "$(grep config_sha256 "$1/manifest.yaml")" != "$2" ]' _ "$T/shards" "$old_hash"
check "the first run's status now shows its data stale" bash -c '"$1" jobs status "$2" | grep -Eq "^shards +shards +stale"' _ "$KF" "$T/sh"
"$KF" jobs run "$T/sh2.yaml" --run-dir "$T/sh2" --no-sample > /dev/null 2> "$T/sh2b.log"
check "data built with the current settings is skipped" grep -q "shards: complete, skipped" "$T/sh2b.log"

# --- submit needs Slurm
out=$(PATH=/nonexistent "$KF" jobs submit "$T/cfg.yaml" --run-dir "$T/nosl" 2>&1); rc=$?
check "submit without Slurm exits 1 saying so" bash -c '[ $1 -eq 1 ] && [[ "$2" == *"Slurm"* ]]' _ $rc "$out"
finish
