#!/usr/bin/env bash
# kf jobs on a real Slurm cluster (slurmctld + slurmd + munge started here, on
# this machine, and stopped by PID at exit):
#  (a) configs/tiny-gpt2.yaml (tiny overrides) end to end through kf jobs submit:
#      every stage starts after its teacher's job ended and trains from the
#      teacher's final weights (sha256 recorded in its checkpoint);
#  (b) scontrol requeue of a running stage: it resumes from its checkpoint and
#      ends with the same weights as an uninterrupted run;
#  (c) a time limit (1 min) shorter than the work with --signal=B:USR1: the
#      stage checkpoints, exits 75, requeues itself, and completes;
#  (d) kill -9 of a stage's trainer: the job fails, its dependents are
#      cancelled, and kf jobs resume completes the run from the checkpoint;
#  (e) data not built yet: a kf shards build job first, then a 2-rank stage
#      started by the wrapper with srun --mpi=pmix; and kf jobs cancel;
#  (g) scancel of a running stage: the job stays cancelled, its checkpoint kept.
# The scenarios share one cluster and run side by side (2 CPUs). A requeued
# job waits ~2 min (BeginTime) before Slurm restarts it; the test releases it
# at once with scontrol update StartTime=now.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_jobs.sh
need_data
T=$(mktemp -d /tmp/kf-test-slurm.XXXXXX); chmod 711 "$T"   # munged: o+x on every directory above its socket
trap 'slurm_down; if [ $FAIL -eq 0 ] && [ -z "${KF_TEST_KEEP:-}" ]; then rm -rf "$T"; else echo "kept $T for inspection"; fi' EXIT
slurm_up "$T/cluster" || { bad "local Slurm cluster starts"; finish; exit 1; }
ok "local Slurm cluster up"

# release_requeued JOB: a requeued job held for BeginTime starts now — after
# 3 s: a start in the second of the requeue is refused by slurmd ("Job
# credential revoked") and the job fails.
declare -A held_since
release_requeued() {
  if [ "$(job_state "$1")" = PENDING ] && [ "$(job_field "$1" Reason)" = BeginTime ]; then
    : "${held_since[$1]:=$SECONDS}"
    if [ $((SECONDS - held_since[$1])) -ge 3 ]; then
      scontrol update JobId="$1" StartTime=now >/dev/null 2>&1 && unset "held_since[$1]"
    fi
  fi
  return 0
}
stage_done() { test -f "$1/stages/$2/final/DONE"; }
submit() {  # RUN CONFIG [OVERRIDES...] -> prints "STAGE JOBID ..." lines into RUN.submit
  local run=$1 cfg=$2; shift 2
  "$KF" jobs submit "$cfg" --run-dir "$run" "$@" > "$run.submit" 2> "$run.submit.err"
}

# ---- (c) first: the sweep that sends --signal comes every 30 s from slurmctld's
# start, so a job started ~20 s after it gets USR1 ~10 s into its work.
C=$T/c
# ---- (a) configs/tiny-gpt2.yaml, every stage tiny
A=$T/a
tiny=(model.hidden=32 model.heads=2 model.blocks=1 defaults.batch=1 defaults.warmup=0
      defaults.checkpoint_every=2 defaults.eval_batches=1 defaults.log_every=1
      stages.0.steps=2 stages.1.steps=2 stages.2.steps=2 stages.3.steps=2)
cp configs/tiny-gpt2.yaml "$T/tiny.yaml"
submit "$A" "$T/tiny.yaml" "${tiny[@]}"; rc=$?
# editing the config after submit must not reach the run: point its data nowhere
sed -i 's#data/shards/owt-tiny#/nonexistent/owt-tiny#g; s#lr: 3.0e-3#lr: 9.0e-3#' "$T/tiny.yaml"
check "(a) kf jobs submit configs/tiny-gpt2.yaml exits 0" [ $rc -eq 0 ]
check "(a) one job per stage, chained afterok" bash -c '
  f=$1; [ "$(grep -c . "$f")" -ge 5 ] || exit 1
  prev=""; while IFS=$'"'"'\t'"'"' read -r st id dep; do
    [ "${st:0:1}" = "#" ] && continue
    if [ -n "$prev" ]; then [ "$dep" = "afterok:$prev" ] || exit 1; fi; prev=$id
  done < "$f"' _ "$A.submit"
check "(a) run.yaml frozen and one sbatch script per stage" bash -c '
  for s in ar k1 k2 k4; do grep -q -- "--signal=B:USR1@" "$1/slurm/$s.sbatch" || exit 1; done
  head -1 "$1/run.yaml" | grep -q "sha256"' _ "$A"

# ---- (b) one stage, requeued while running
B=$T/b
tiny_config "$T/b.yaml" 24 1
sed -i 's/checkpoint_every: 2/checkpoint_every: 4/' "$T/b.yaml"
submit "$B" "$T/b.yaml"; check "(b) submit exits 0" [ $? -eq 0 ]
jb=$(job_of "$B" ar)
# the uninterrupted reference, from the same frozen config, meanwhile
"$KF" train "$B/run.yaml" --stage ar --run-dir "$T/b-ref" > "$T/b-ref.log" 2>&1 &
ref_pid=$!
# ---- (d) two stages; the first one's trainer is killed
D=$T/d
tiny_config "$T/d.yaml" 24 2
sed -i 's/checkpoint_every: 2/checkpoint_every: 4/' "$T/d.yaml"
OMPI_MCA_mpi_yield_when_idle=1 submit "$D" "$T/d.yaml"; check "(d) submit exits 0" [ $? -eq 0 ]
check "(d) submit recorded its launch environment" grep -qx "OMPI_MCA_mpi_yield_when_idle=1" "$D/slurm/env"
jd=$(job_of "$D" ar); jd2=$(job_of "$D" k1)

# ---- (e) a stage with 2 ranks: the wrapper starts them with srun --mpi=pmix
# on data not built yet: the chain starts with a kf shards build job
M=$T/m
head -n 2000 data/text/brown.txt > "$T/small.txt"
tiny_config "$T/m.yaml" 2 1
sed -i "s#$DATA#$T/mshards#g" "$T/m.yaml"
cat >> "$T/m.yaml" <<YAML
shards:
  small: {out: $T/mshards, tokenizer: gpt2, vocab: data/vocab/gpt2, packing: wrap, seq_len: 128,
          inputs: [{path: $T/small.txt, format: lines}], valid: {last: 200}}
YAML
submit "$M" "$T/m.yaml" resources.ranks=2 defaults.batch=2; check "(e) submit with 2 ranks exits 0" [ $? -eq 0 ]
check "(e) missing data: a shards job first, the stage after it" bash -c '
  s=$(awk "\$1==\"shards\"{print \$2}" "$1"); a=$(awk "\$1==\"ar\"{print \$3}" "$1"); [ -n "$s" ] && [ "$a" = "afterok:$s" ]' _ "$M.submit"

# (b): requeue once a checkpoint exists
wait_until 120 test -e "$B/stages/ar/ckpt/latest"
check "(b) stage running with a checkpoint" [ "$(job_state "$jb")" = RUNNING ]
scontrol requeue "$jb"; check "(b) scontrol requeue accepted" [ $? -eq 0 ]

# (d): kill -9 the trainer (found among the job's processes) once it has a checkpoint
wait_until 120 test -e "$D/stages/ar/ckpt/latest"
tpid=""
for p in $(scontrol listpids "$jd" 2>/dev/null | awk 'NR > 1 {print $1}'); do
  tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q " train .*--stage ar" && tpid=$p
done
check "(d) trainer process found in job $jd" [ -n "$tpid" ]
[ -n "$tpid" ] && kill -9 "$tpid"

# (c): ~25 s of work at the speed (b) ran at here (median ms/step of its log),
# submitted ~20 s after slurmctld started: USR1 comes ~10 s into the work.
ms=$(node -e '
  const ms = require("fs").readFileSync(process.argv[1], "utf8").split("\n")
    .filter(l => l.includes("ms_step")).map(l => JSON.parse(l).ms_step).sort((a, b) => a - b);
  console.log(ms.length ? ms[ms.length >> 1] : 100);' "$B/stages/ar/log.jsonl" 2>/dev/null || echo 100)
c_steps=$(awk -v ms="$ms" 'BEGIN { n = int(25000 / ms); print (n < 100 ? 100 : n) }')
tiny_config "$T/c.yaml" "$c_steps" 1
sed -i 's/checkpoint_every: 2/checkpoint_every: 0/' "$T/c.yaml"   # only the preemption checkpoint
echo "(c) $c_steps steps at ~$ms ms/step"
while [ $((SECONDS - SLURM_T0)) -lt 20 ]; do sleep 0.2; done
submit "$C" "$T/c.yaml" resources.time_limit=1 resources.signal_lead=59; check "(c) submit (1 min limit, USR1 at 59 s) exits 0" [ $? -eq 0 ]
jc=$(job_of "$C" ar)

# drive everything to the end: release requeued jobs, resume (d) once it failed
resumed_d=0
all_done() {
  release_requeued "$jb"; release_requeued "$jc"
  [ $resumed_d = 1 ] && for s in ar k1; do release_requeued "$(job_of "$D" $s)"; done
  # once ar failed and Slurm dropped k1 (kill_invalid_depend), or after 15 s
  if [ $resumed_d = 0 ] && [ "$(job_state "$jd")" = FAILED ]; then
    st_k1=$(job_state "$jd2"); : ${d_failed_at:=$SECONDS}
    [ "$st_k1" = PENDING ] && [ $((SECONDS - d_failed_at)) -lt 15 ] && return 1
    "$KF" jobs status "$D" --json > "$T/d.status.json"
    "$KF" jobs resume "$D" > "$D.submit" 2> "$D.resume.err" && resumed_d=1
  fi
  stage_done "$A" k4 && stage_done "$B" ar && stage_done "$C" ar && stage_done "$D" k1 && stage_done "$M" ar
}
wait_until 240 all_done
check "(a) every stage of configs/tiny-gpt2.yaml complete" bash -c 'for s in ar k1 k2 k4; do test -f "$1/stages/$s/final/DONE" || exit 1; done' _ "$A"

# (a) order and teacher weights
prev=""
for s in ar k1 k2 k4; do
  j=$(job_of "$A" $s)
  if [ -n "$prev" ]; then
    pj=$(job_of "$A" $prev)
    check "(a) $s (job $j) started at/after $prev (job $pj) ended" \
      bash -c '[[ ! "$1" < "$2" ]]' _ "$(job_field "$j" StartTime)" "$(job_field "$pj" EndTime)"
    ts=$(file_sha "$A/stages/$prev/final/model.safetensors")
    ck=$(ls -d "$A/stages/$s/ckpt"/step-* | sort -V | tail -1)
    check "(a) $s trained from $prev's final weights (sha256 in its checkpoint)" grep -q "teacher_sha256: \"$ts\"" "$ck/state.yaml"
  fi
  check "(a) job of $s COMPLETED" [ "$(job_state "$j")" = COMPLETED ]
  prev=$s
done
js=$("$KF" jobs status "$A" --json)
check "(a) status --json: all complete with their Slurm jobs" node -e '
  const s = JSON.parse(process.argv[1]);
  process.exit(s.stages.length === 5 && s.stages.slice(1).every(r => r.state === "complete" && r.job_id && r.slurm_state === "COMPLETED") ? 0 : 1);' "$js"
check "(a) the config edited after submit did not reach the run" bash -c '
  grep -q "/nonexistent" "$2" && ! grep -q "/nonexistent" "$1/run.yaml" && grep -q "lr: 3.0e-3" "$1/run.yaml"' _ "$A" "$T/tiny.yaml"

# (b) resumed from its checkpoint, same weights as without the requeue
check "(b) job restarted once (SLURM_RESTART_COUNT 1 logged)" grep -q "restart count 1" "$B/stages/ar/slurm.out"
check "(b) trainer resumed from a checkpoint" grep -q "ar: resumed from" "$B/stages/ar/slurm.out"
wait $ref_pid
check "(b) final weights identical to an uninterrupted run" cmp -s "$B/stages/ar/final/model.safetensors" "$T/b-ref/stages/ar/final/model.safetensors"
check "(b) status reports the restart" bash -c '"$1" jobs status "$2" --json | grep -q "\"restarts\":[1-9]"' _ "$KF" "$B"

# (c) signalled, checkpointed, requeued itself, completed
check "(c) wrapper got USR1 and forwarded it" grep -q "got USR1, forwarding" "$C/stages/ar/slurm.out"
check "(c) trainer checkpointed and exited 75" grep -q "trainer exited with 75" "$C/stages/ar/slurm.out"
check "(c) job requeued itself" grep -q "requeueing (scontrol requeue $jc)" "$C/stages/ar/slurm.out"
check "(c) restarted and resumed from the checkpoint" bash -c 'grep -q "restart count [1-9]" "$1" && grep -q "ar: resumed from" "$1"' _ "$C/stages/ar/slurm.out"
check "(c) stage complete, job COMPLETED" bash -c 'test -f "$1/stages/ar/final/DONE" && [ "$2" = COMPLETED ]' _ "$C" "$(job_state "$jc")"

# (d) failed, dependents cancelled, resume completed the run
check "(d) killed stage's job FAILED and its dependent was cancelled" [ "${st_k1:-}" = CANCELLED ]
check "(d) status showed ar failed before resume" grep -q '"name":"ar","kind":"ar","state":"failed"' "$T/d.status.json"
check "(d) resume resubmitted ar and k1, re-chained" bash -c '
  a=$(awk "\$1==\"ar\"{print \$2}" "$1"); k=$(awk "\$1==\"k1\"{print \$3}" "$1"); [ -n "$a" ] && [ "$k" = "afterok:$a" ]' _ "$D.submit"
check "(d) resumed ar from its checkpoint" bash -c '[ "$(grep -c "ar: resumed from" "$1")" -ge 1 ]' _ "$D/stages/ar/slurm.out"
check "(d) run complete after resume" bash -c 'test -f "$1/stages/k1/final/DONE"' _ "$D"
check "(d) resume from a shell without the submission's OMPI_MCA_mpi_yield_when_idle warned: $(grep -c warning "$D.resume.err") warning(s)" \
  grep -q "warning: OMPI_MCA_mpi_yield_when_idle was '1' at the last submission, now unset" "$D.resume.err"
check "(d) the resume recorded the environment its jobs got" bash -c '! grep -q OMPI_MCA_mpi_yield_when_idle "$1/slurm/env"' _ "$D"
out=$("$KF" jobs resume "$D" 2>&1)
check "(d) resume of a complete run submits nothing" bash -c '[[ "$1" == *"nothing to submit"* ]]' _ "$out"

# (e) two ranks under srun
check "(e) shards built by their job" bash -c 'test -f "$1/mshards/manifest.yaml" && grep -q "shards build" "$2/stages/shards/slurm.out"' _ "$T" "$M"
check "(e) sbatch script asks for 2 tasks" grep -q -- "--ntasks=2" "$M/slurm/ar.sbatch"
check "(e) ranks started with srun --mpi=pmix -n 2" grep -q "running (pid [0-9]*): srun --mpi=pmix -n 2" "$M/stages/ar/slurm.out"
check "(e) the trainer ran 2 ranks and completed" bash -c 'grep -q "2 ranks" "$1/stages/ar/slurm.out" && test -f "$1/stages/ar/final/DONE"' _ "$M"

# cancel: a fresh submission cancelled while queued/running
E=$T/e
tiny_config "$T/e.yaml" 400 2
submit "$E" "$T/e.yaml"; check "cancel: submit exits 0" [ $? -eq 0 ]
out=$("$KF" jobs cancel "$E" 2>&1); rc=$?
check "cancel exits 0 (got $rc: $out)" [ $rc -eq 0 ]
check "cancel cancels both jobs, k1 before ar (got: $out)" bash -c '
  [ "$(grep -c cancelled <<<"$1")" -eq 2 ] && [ "$(cut -f1 <<<"$1" | tr "\n" " ")" = "k1 ar " ]' _ "$out"
# the first job cancelled by hand: Slurm cancels its dependents itself while
# kf jobs cancel runs; whichever wins, cancel exits 0 and nothing stays alive
F=$T/f
tiny_config "$T/f.yaml" 400 3
submit "$F" "$T/f.yaml"; check "cancel race: submit exits 0" [ $? -eq 0 ]
scancel "$(job_of "$F" ar)"
out=$("$KF" jobs cancel "$F" 2>&1); rc=$?
check "cancel race: exits 0 (got $rc: $out)" [ $rc -eq 0 ]
none_alive() { for s in ar k1 k2; do case $(job_state "$(job_of "$F" $s)") in PENDING | RUNNING | CONFIGURING | COMPLETING | REQUEUED) return 1 ;; esac; done; }
check "cancel race: no job of the run left alive" wait_until 60 none_alive
# scancel of a stage whose trainer runs: the TERM it sends looks like a
# preemption to the wrapper (the trainer checkpoints and exits 75), but the
# job must stay cancelled, not requeue itself (the cancel race above hits
# this only when the cancel lands after the job started). The trainer's own
# exit may be 75 or 143: slurmstepd signals every process of the job.
G=$T/g
tiny_config "$T/g.yaml" 400 1
submit "$G" "$T/g.yaml"; check "(g) submit exits 0" [ $? -eq 0 ]
jg=$(job_of "$G" ar)
check "(g) the stage's trainer runs" wait_until 120 grep -q "step 1/" "$G/stages/ar/slurm.out"
scancel "$jg"
check "(g) the trainer writes its checkpoint and exits" wait_until 60 bash -c '
  grep -q "checkpoint written" "$1" && grep -q "trainer exited with" "$1"' _ "$G/stages/ar/slurm.out"
sleep 5   # the wrapper's requeue, if it made one, has happened by now
gstate=$(job_state "$jg") grestarts=$(job_field "$jg" Restarts)
check "(g) the job stays cancelled (state $gstate, restarts $grestarts)" \
  bash -c '[ "$1" = CANCELLED ] && [ "$2" = 0 ]' _ "$gstate" "$grestarts"
check "(g) the wrapper does not requeue it" bash -c '! grep -q "requeueing (scontrol" "$1"' _ "$G/stages/ar/slurm.out"
check "(g) its checkpoint is kept" bash -c 'ls -d "$1"/stages/ar/ckpt/step-* >/dev/null 2>&1' _ "$G"
finish
