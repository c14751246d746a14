#!/usr/bin/env bash
# kf on two real Slurm nodes: slurm/local-up.sh --netns 2
# starts slurmctld and munged plus one slurmd per node, each node in its own
# network namespace (kfsn-n1, kfsn-n2: a veth to a bridge in kfsn-ctl, where
# slurmctld and the clients run). A stage runs one rank per node, started by
# the wrapper with srun --mpi=pmix, MPI over TCP between the namespaces.
#  (a) the 2-node run gives weights bitwise identical to mpirun -np 2 here;
#  (b) every process of node n2 (slurmd, slurmstepd, rank 1) killed mid-step:
#      rank 0 on n1 exits within resources.collective_timeout, the job leaves
#      RUNNING when Slurm finds the node dead, every committed checkpoint
#      verifies and equals the uninterrupted run's (bytes lost: none); then
#      the node is brought back (slurm/local-node.sh), kf jobs resume gets the
#      stage going again and it ends bitwise identical to the uninterrupted run;
#  (c) the same with node n1 (the batch host, rank 0: the checkpoint writer)
#      killed while it writes a checkpoint: its renames are slowed by strace
#      (0.5 s each), so the kill lands inside the write, not by luck; and
#      then the requeued run is killed too (its step, once it trains), as a
#      requeued run on a node just back can fail: kf jobs resume again
#      submits a new job, which completes bitwise as uninterrupted.
# kf jobs status shows the failed node and the job's state throughout.
# Namespaces, veths and daemons are removed at exit, and a leftover from a
# crashed run at the next start (the lock makes the prefix ours).
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_jobs.sh      # KF (absolute), wait_until, job_field, checks
. tests/scripts/lib_trainer.sh   # trainer_setup, same_weights, MPIRUN (loopback)
CT=8             # resources.collective_timeout (s): above a barrier's wait in the slowed checkpoint (~2.5 s)
SLACK=4          # the watchdog's 0.5 s period, the step in flight, process exit
NODE_TIMEOUT=10  # SlurmdTimeout: Slurm calls a silent node DOWN after this (less risks a loaded node)
P=kfsn           # namespace prefix: kfsn-ctl, kfsn-n1, kfsn-n2
T=$(mktemp -d /tmp/kf-test-nodes.XXXXXX); chmod 711 "$T"   # munged: o+x on every directory above its socket
CL=$T/cluster
exec 8>/tmp/kf-test-slurm-nodes.lock
flock -w 600 8 || { bad "lock /tmp/kf-test-slurm-nodes.lock"; finish; exit 1; }
cleanup() {
  slurm/local-down.sh "$CL" >/dev/null 2>&1
  if [ $FAIL -eq 0 ] && [ -z "${KF_TEST_KEEP:-}" ]; then rm -rf "$T"; else echo "kept $T for inspection"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
export KF_SLURM_NETNS_PREFIX=$P
KF_SLURM_CPUS=4 KF_SLURM_NODE_TIMEOUT=$NODE_TIMEOUT slurm/local-up.sh --netns 2 "$CL" > "$T/up.log" 2>&1
check "two-node cluster up: $(tail -1 "$T/up.log")" grep -q "slurm up (nodes n1 n2)" "$T/up.log"
export SLURM_CONF=$CL/slurm.conf
ctl() { nsenter --net=/run/netns/$P-ctl "$@"; }

trainer_setup "$T"
sed -i '/name: k2/d' "$T/cfg.yaml"   # one stage
OV=(stages.0.steps=200 defaults.checkpoint_every=10 defaults.keep_checkpoints=100 defaults.log_every=1
    resources.ranks=2 resources.nodes=2 resources.collective_timeout=$CT resources.time_limit=10)
# MPI between the nodes: TCP on their veths only (no shared memory, no loopback)
NODE_MPI=(OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=kfeth OMPI_MCA_oob_tcp_if_include=kfeth)
submit() {  # RUN [ENV=VALUE...]: kf jobs submit, the job's environment from the submitting one
  local run=$1; shift
  ctl env "${NODE_MPI[@]}" "$@" "$KF" jobs submit "$T/cfg.yaml" --run-dir "$run" "${OV[@]}" > "$run.submit" 2>&1
}
# resume RUN: kf jobs resume with the submitting environment (sbatch passes
# the resuming shell's to the new job: without NODE_MPI its ranks would try
# each other's loopback and block in MPI's start-up)
resume() { ctl env "${NODE_MPI[@]}" "$KF" jobs resume "$1" >> "$1.resume" 2>&1; }
status_json() { ctl "$KF" jobs status "$1" --json; }
done_() { test -f "$1/stages/ar/final/DONE"; }
done_or_ended() { done_ "$1" || job_ended "$2"; }   # RUN JOB: the stage is complete or its job ended without it
# node_trainer NODE: pid of the kf train rank in the node's namespace
node_trainer() {
  local p
  for p in $(ip netns pids "$P-$1"); do
    [ "$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -d' ' -f1-2)" = "$KF train" ] && echo "$p"
  done
}
gone() { ! kill -0 "$1" 2>/dev/null; }
has_files() { [ -n "$(ls -A "$1" 2>/dev/null)" ]; }
export -f has_files
completed() { [ "$(job_field "$1" JobState)" = COMPLETED ]; }
requeued() { [ "$(job_field "$1" JobState)" = PENDING ] && [ "$(job_field "$1" Restarts)" = 1 ]; }
not_running() { [ "$(ctl scontrol show job -o "$1" | tr ' ' '\n' | sed -n 's/^JobState=//p')" != RUNNING ]; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc | awk '{printf "%.1f", $1}'; }

# verify_ckpts DIR REF: every committed checkpoint in DIR (step-N) against its
# state.yaml (size, sha256) and byte for byte against REF's step-N; prints
# "N checkpoints, B bytes, L bytes lost"
verify_ckpts() {
  local n=0 bytes=0 lost=0 d f name size sha
  for d in "$1"/step-*; do
    [[ "$(basename "$d")" =~ ^step-[0-9]+$ ]] || continue
    n=$((n + 1))
    while read -r name size sha; do
      f=$d/$name; bytes=$((bytes + size))
      if [ "$(stat -c %s "$f" 2>/dev/null)" != "$size" ] || [ "$(file_sha "$f" 2>/dev/null)" != "$sha" ] ||
         ! cmp -s "$f" "$2/$(basename "$d")/$name"; then lost=$((lost + size)); fi
    done < <(sed -n 's/^  - {name: "\([^"]*\)", bytes: \([0-9]*\), sha256: "\([0-9a-f]*\)"}$/\1 \2 \3/p' "$d/state.yaml")
  done
  echo "$n checkpoints, $bytes bytes, $lost bytes lost"
}
# release JOB: a job requeued after a node failure is held ~2 min (its
# BeginTime, set even before the scheduler names the reason); let it start now
# — 3 s after the requeue: slurmd refuses a start in the second of the requeue
# ("Job credential revoked")
release() {
  if [ "$(job_field "$1" JobState)" = PENDING ]; then
    sleep 3; ctl scontrol update JobId="$1" StartTime=now >/dev/null 2>&1
  fi
  return 0
}
job_field() { ctl scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# the uninterrupted reference: mpirun -np 2 on this host (loopback)
$MPIRUN -np 2 "$KF" train "$T/cfg.yaml" --stage ar --run-dir "$T/ref" "${OV[@]}" > "$T/ref.log" 2>&1 &
ref_pid=$!

# ---- (a) the same stage on two nodes
A=$T/a
submit "$A"; check "(a) submit exits 0: $(tail -1 "$A.submit")" [ -n "$(job_of "$A")" ]
ja=$(job_of "$A")
wait_until 120 done_ "$A"
wait $ref_pid; check "(a) reference mpirun -np 2 exits 0" [ $? -eq 0 ]
check "(a) stage complete on two nodes" done_ "$A"
# a rank that dies in MPI's start-up is launched again (test_slurm_launch): say so when it happened
echo "(a) launches: $(grep -c "running (pid" "$A/stages/ar/slurm.out")$(grep -m1 -B8 "launching again" "$A/stages/ar/slurm.out" | grep -E "SEGV|signal|exit code|Killed" | head -3 | sed 's/^/; /' | tr -d '\n')"
check "(a) one rank per node: NodeList n[1-2], 2 tasks (got $(job_field "$ja" NodeList), $(job_field "$ja" NumTasks))" \
  [ "$(job_field "$ja" NodeList),$(job_field "$ja" NumTasks)" = "n[1-2],2" ]
check "(a) ranks started with srun --mpi=pmix" grep -q "running (pid [0-9]*): srun --mpi=pmix -n 2" "$A/stages/ar/slurm.out"
check "(a) weights bitwise identical to mpirun -np 2" same_weights "$T/ref/stages/ar" "$A/stages/ar"

# kill_node NODE: SIGKILL to every process in the node's namespace
kill_node() { kill -9 $(ip netns pids "$P-$1"); }

# after_kill NAME RUN VICTIM SURVIVOR SURVIVOR_RANK_PID T0 JOB: what follows
# the kill in (b) and (c)
after_kill() {
  local name=$1 run=$2 victim=$3 survivor=$4 spid=$5 t0=$6 job=$7
  wait_until $((CT + SLACK + 10)) gone "$spid"
  local dt; dt=$(since "$t0")
  echo "($name) rank on $survivor exited ${dt} s after $victim was killed (collective_timeout $CT s)"
  check "($name) the rank on $survivor exits within collective_timeout + ${SLACK} s (took $dt s)" \
    awk -v d="$dt" -v b=$((CT + SLACK)) 'BEGIN { exit !(d <= b) }'
  wait_until 60 not_running "$job"
  local dj; dj=$(since "$t0")
  echo "($name) job $job left RUNNING ${dj} s after the kill (SlurmdTimeout $NODE_TIMEOUT s): $(job_field "$job" JobState)/$(job_field "$job" Reason)"
  check "($name) the job leaves RUNNING once Slurm finds $victim dead (took $dj s)" not_running "$job"
  local v; v=$(verify_ckpts "$run/stages/ar/ckpt" "$T/ref/stages/ar/ckpt")
  echo "($name) after the kill: $v; latest $(cat "$run/stages/ar/ckpt/latest")"
  check "($name) committed checkpoints intact and as uninterrupted ($v)" bash -c '[[ "$1" =~ ^[1-9][0-9]*\ checkpoints,\ [0-9]+\ bytes,\ 0\ bytes\ lost$ ]]' _ "$v"
  check "($name) latest names a committed checkpoint" test -f "$run/stages/ar/ckpt/$(cat "$run/stages/ar/ckpt/latest")/state.yaml"
}
# back NAME RUN VICTIM JOB [fail]: Slurm requeues the job; kf jobs resume
# keeps it and warns about the node; the node is brought back; the stage
# completes. With "fail", the requeued run's step is killed once it trains.
back() {
  local name=$1 run=$2 victim=$3 job=$4 fail=${5:-}
  wait_until 60 requeued "$job"   # NODE_FAIL + --requeue: Slurm requeues it once the step is gone
  check "($name) Slurm requeued job $job: $(job_field "$job" JobState), restarts $(job_field "$job" Restarts)" requeued "$job"
  status_json "$run" > "$T/$name.status-down.json"
  check "($name) kf jobs status: stage queued, restarts 1, failed node $victim out of service" \
    grep -q "\"state\":\"queued\".*\"restarts\":1.*\"down_nodes\":\[{\"node\":\"$victim\"" "$T/$name.status-down.json"
  resume "$run"
  check "($name) kf jobs resume exits 0 and keeps the requeued job: $(grep "^ar" "$run.resume")" \
    grep -qP "^ar\t$job\tkept \\(PENDING\\)" "$run.resume"
  check "($name) kf jobs resume warns that $victim is out of service" grep -q "warning: node $victim is out of service" "$run.resume"
  slurm/local-node.sh "$CL" "$victim" > "$T/$name.node.log" 2>&1; local rc=$?
  check "($name) $victim back in service (rc $rc): $(tail -1 "$T/$name.node.log")" [ $rc -eq 0 ]
  release "$job"
  if [ "$fail" = fail ]; then
    local t=$(date +%s)
    wait_until 60 bash -c '[ "$(stat -c %Y "$1/stages/ar/log.jsonl")" -gt "$2" ]' _ "$run" "$t"
    check "($name) the requeued run trains, and its step is killed" ctl scancel -s KILL "$job.0"
    rm -f "$T/slow"
  fi
  wait_until 120 done_or_ended "$run" "$job"
  if ! done_ "$run" && [ "$(job_field "$job" JobState)" = FAILED ]; then
    # the requeued run of the same job id on the node just back can fail
    # (docs/multinode.md, "Losing a node"): resumed again, as a user would
    echo "($name) the requeued job $job failed: $(grep -E 'CANCELLED|signal|Segmentation|Killed|trainer exited' \
      "$run/stages/ar/slurm.out" | tail -4 | tr '\n' ' ')- kf jobs resume again"
    resume "$run"
    wait_until 120 done_ "$run"
  fi
  [ "$fail" = fail ] && check "($name) kf jobs resume submitted a new job after the failed run: $(grep "^ar" "$run.resume" | tr '\t\n' '  ')" \
    bash -c '[ "$(grep -cP "^ar\t[0-9]+\tfirst$" "$1")" -eq 1 ]' _ "$run.resume"
  check "($name) stage complete after resume" done_ "$run"
  check "($name) resumed from a checkpoint" grep -q "ar: resumed from" "$run/stages/ar/slurm.out"
  check "($name) weights bitwise identical to the uninterrupted run" same_weights "$T/ref/stages/ar" "$run/stages/ar"
  wait_until 30 completed "$(awk '$1 == "ar" {print $2}' "$run.resume" | tail -1)"
  status_json "$run" > "$T/$name.status-done.json"
  check "($name) kf jobs status: complete, job COMPLETED, no node out of service" \
    grep -q '"state":"complete".*"slurm_state":"COMPLETED".*"down_nodes":\[\]' "$T/$name.status-done.json"
}

cat > "$T/kf-slow" <<EOF
#!/bin/bash
# kf with every rename (the checkpoint's commits) 0.5 s late while $T/slow
# exists: a wide write window, and a requeued run that is still training
# when its step is killed; the job resume submits after that runs plain kf
[ -e "$T/slow" ] || exec "$KF" "\$@"
exec strace -f -qq -o /dev/null --seccomp-bpf -e trace=rename,renameat,renameat2 \\
     -e inject=rename,renameat,renameat2:delay_enter=500000 "$KF" "\$@"
EOF
chmod +x "$T/kf-slow"

# ---- (b) node n2 killed mid-step: slowed like (c), so that a fast machine
# does not finish the 200 steps between the first checkpoint and the kill
B=$T/b
touch "$T/slow"
submit "$B" KF_BIN="$T/kf-slow"; jb=$(job_of "$B")
check "(b) submit exits 0" [ -n "$jb" ]
wait_until 60 test -s "$B/stages/ar/log.jsonl"   # training
status_json "$B" > "$T/b.status-run.json"
check "(b) status while running: running, job RUNNING on n[1-2]" \
  grep -q '"state":"running".*"slurm_state":"RUNNING".*"nodes":"n\[1-2\]"' "$T/b.status-run.json"
wait_until 60 test -e "$B/stages/ar/ckpt/latest"
r0=$(node_trainer n1); r1=$(node_trainer n2)
t0=$(now); kill_node n2
rm -f "$T/slow"   # the resumed run trains at full speed
check "(b) one rank in each node's namespace (n1: $r0, n2: $r1)" [ "$(wc -w <<<"$r0 $r1")" -eq 2 ]
after_kill b "$B" n2 n1 "$r0" "$t0" "$jb"
check "(b) rank 0 said why it ended" grep -qE "blocked for more than $CT s|failed: .*a rank died" "$B/stages/ar/slurm.out"
back b "$B" n2 "$jb"

# ---- (c) node n1 (rank 0, the checkpoint writer, the batch host) killed during a write
C=$T/c
touch "$T/slow"
submit "$C" KF_BIN="$T/kf-slow"; jc=$(job_of "$C")
check "(c) submit exits 0" [ -n "$jc" ]
wait_until 90 test -e "$C/stages/ar/ckpt/latest"     # step-10 committed
wait_until 60 has_files "$C/stages/ar/ckpt/step-20.tmp" # the next write is under way
r0=$(node_trainer n1); r1=$(node_trainer n2)
t0=$(now); kill_node n1
sleep 0.5   # the node's processes are gone (SIGKILL): the files stay as they were
inwrite=$(cd "$C/stages/ar/ckpt/step-20.tmp" 2>/dev/null && stat -c '%n (%s bytes)' .[!.]* * 2>/dev/null | tr '\n' ' ')
echo "(c) n1 killed during the write of step-20: step-20.tmp held ${inwrite:-nothing}"
check "(c) the kill landed inside the write (files in step-20.tmp, no step-20, latest step-10)" \
  bash -c 'has_files "$1/step-20.tmp" && ! test -e "$1/step-20" && [ "$(cat "$1/latest")" = step-10 ]' _ "$C/stages/ar/ckpt"
after_kill c "$C" n1 n2 "$r1" "$t0" "$jc"
back c "$C" n1 "$jc" fail
check "(c) the half-written step-20.tmp is gone after resume" bash -c '! test -e "$1/step-20.tmp"' _ "$C/stages/ar/ckpt"
finish
