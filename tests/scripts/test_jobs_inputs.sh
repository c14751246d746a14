#!/usr/bin/env bash
# Bad inputs refused where they enter, each error naming what is wrong: a run
# name that is not one path component (nothing written outside the project),
# an override blamed as the override, extra or missing command-line words,
# missing data with no `shards:` section blamed on the user's config, a first
# attempt that failed before any stage trained corrected without deleting the
# run (run.yaml re-frozen) while a run that trained refuses the same change,
# a missing checkpoint not called a teacher, a model given as its own teacher,
# and `kf --help` listing every mode. Tiny stages of 2 steps: seconds.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_jobs.sh
need_data
T=$(mktemp -d /tmp/kf-test-inputs.XXXXXX)
trap 'rm -rf "$T"' EXIT
tiny_config "$T/cfg.yaml" 2 2

# --- a run name is one safe path component: runs/../../esc would leave runs/
mkdir -p "$T/a/b"
out=$(cd "$T/a/b" && "$KF" jobs run "$T/cfg.yaml" name=../../esc 2>&1); rc=$?
check "name=../../esc: exit 1 naming the override and the name (got $rc: $out)" \
  bash -c '[ $1 -eq 1 ] && [[ "$2" == *"override '"'"'name=../../esc'"'"'"*"not a run name"* ]]' _ $rc "$out"
check "name=../../esc: nothing written (got: $(cd "$T" && find a))" \
  bash -c '[ -z "$(find "$1/a" -mindepth 1 ! -path "$1/a/b")" ] && [ ! -e "$1/esc" ]' _ "$T"
for n in . .. "a/b" "" "-x" "a b"; do
  out=$("$KF" jobs plan "$T/cfg.yaml" "name=$n" 2>&1); rc=$?
  check "name='$n' refused (got $rc: $out)" bash -c '[ $1 -eq 1 ] && [[ "$2" == *"name"* ]]' _ $rc "$out"
done
out=$("$KF" jobs plan "$T/cfg.yaml" name=run_2.b-c 2>&1); rc=$?
check "name=run_2.b-c accepted (got $rc: $out)" [ $rc -eq 0 ]

# --- an override that breaks a rule between two keys is named as the override
out=$("$KF" jobs plan "$T/cfg.yaml" model.heads=5 2>&1); rc=$?
check "model.heads=5: exit 1 naming the override, not the file (got $rc: $out)" \
  bash -c '[ $1 -eq 1 ] && [[ "$2" == *"override '"'"'model.heads=5'"'"'"* ]] && [[ "$2" != *"cfg.yaml:"* ]]' _ $rc "$out"
sed 's/seq_len: 128}/seq_len: 128, mask_id: 200}/' "$T/cfg.yaml" > "$T/mask.yaml"
out=$("$KF" jobs plan "$T/mask.yaml" model.vocab=100 2>&1); rc=$?
check "model.vocab=100 under a file's mask_id 200: exit 1 naming the file's key and the override (got $rc: $out)" \
  bash -c '[ $1 -eq 1 ] && [[ "$2" == *"mask.yaml:"*"model.mask_id"*"(with the override '"'"'model.vocab=100'"'"')"* ]]' _ $rc "$out"

# --- command-line words: the extra one named, an option taken for a value caught
out=$("$KF" jobs plan "$T/cfg.yaml" foo 2>&1); rc=$?
check "jobs plan CONFIG foo: exit 2 naming foo (got $rc: $out)" \
  bash -c '[ $1 -eq 2 ] && [[ "$2" == *"unexpected argument '"'"'foo'"'"'"* ]]' _ $rc "$out"
out=$("$KF" jobs status 2>&1); rc=$?
check "jobs status without RUN: exit 2, 'status needs RUN' (got $rc: $out)" \
  bash -c '[ $1 -eq 2 ] && [[ "$2" == *"status needs RUN"* ]]' _ $rc "$out"
out=$("$KF" train "$T/cfg.yaml" --stage --run-dir "$T/x" 2>&1); rc=$?
check "train --stage --run-dir X: exit 2, '--stage needs a value' (got $rc: $out)" \
  bash -c '[ $1 -eq 2 ] && [[ "$2" == *"--stage needs a value"* ]]' _ $rc "$out"

# --- missing data and no shards: section: the user's config is at fault, not run.yaml
sed "s#$DATA#$T/nodata#g" "$T/cfg.yaml" > "$T/nodata.yaml"
R=$T/run
out=$("$KF" jobs run "$T/nodata.yaml" --run-dir "$R" --no-sample 2>&1); rc=$?
check "missing data, no shards: section: exit 1 naming nodata.yaml and shards: (got $rc: $out)" \
  bash -c '[ $1 -eq 1 ] && [[ "$2" == *"nodata.yaml: no data manifest"*"no \`shards:\` section"* ]] && [[ "$2" != *run.yaml* ]]' _ $rc "$out"

# --- the corrected config replaces run.yaml: no stage had trained
out=$("$KF" jobs run "$T/cfg.yaml" --run-dir "$R" --no-sample 2>&1); rc=$?
check "corrected data.train after a failed first attempt: exit 0 (got $rc: $(tail -n 2 <<<"$out"))" [ $rc -eq 0 ]
check "corrected config: says it replaces run.yaml, naming data.train" \
  bash -c '[[ "$1" == *"no stage has trained yet"*"data.train: '"$T"'/nodata -> "* ]]' _ "$out"
check "corrected config: run.yaml holds the new data.train" grep -q "train: $DATA" "$R/run.yaml"
check "corrected config: every stage complete" test -f "$R/stages/k1/final/DONE"
# once a stage trained, the same kind of change is refused, saying why
out=$("$KF" jobs run "$T/nodata.yaml" --run-dir "$R" --no-sample 2>&1); rc=$?
check "data.train changed after training: exit 1 naming the stage that trained (got $rc: $out)" \
  bash -c '[ $1 -eq 1 ] && [[ "$2" == *"data.train"*"stage ar has final weights"* ]]' _ $rc "$out"

# --- a missing checkpoint is not a teacher; a model is not its own teacher
out=$("$KF" sample "$T/missing.safetensors" --bos 0 2>&1); rc=$?
check "sample missing.safetensors: exit 1 naming the file, not 'teacher' (got $rc: $out)" \
  bash -c '[ $1 -eq 1 ] && [[ "$2" == *"missing.safetensors: no such file"* ]] && [[ "$2" != *teacher* ]]' _ $rc "$out"
K1=$R/stages/k1/final
# (the evaluation itself may then fail: self-forcing supervision needs a smaller teacher)
out=$("$KF" eval "$K1" --data "$DATA" --teacher "$K1" --samples 1 --batch 1 2>&1 >/dev/null)
check "eval k1/final --teacher k1/final: warns (got: $out)" \
  bash -c '[[ "$1" == *"warning"*"same weights"* ]]' _ "$out"
out=$("$KF" eval "$K1" --data "$DATA" --teacher "$R/stages/ar/final" --samples 1 --batch 1 2>&1 >/dev/null); rc=$?
check "eval k1/final --teacher ar/final: no warning (got $rc: $out)" \
  bash -c '[ $1 -eq 0 ] && [[ "$2" != *"same weights"* ]]' _ $rc "$out"

# --- kf --help lists every mode of every command
out=$("$KF" --help)
for w in "eval" "--completions" "genppl" "--teacher" "import" "--out" "check RUN STAGE" "--only" "--force"; do
  check "kf --help mentions '$w'" bash -c '[[ "$1" == *"$2"* ]]' _ "$out" "$w"
done
finish
