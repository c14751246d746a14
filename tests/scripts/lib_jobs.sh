# Sourced by tests/scripts/test_jobs_*.sh and test_slurm_*.sh (not a test itself):
# check counters, waiting, a tiny run config over the embedded shards, and a
# private Slurm cluster stopped by PID when the test exits.
KF=${KF_BIN:-bin/kf}
KF=$(cd "$(dirname "$KF")" && pwd)/$(basename "$KF")
export KF_BIN=$KF
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}   # tiny models: threads only add contention
source "$(dirname "${BASH_SOURCE[0]}")/lib_check.sh"
# A one-block, 32-wide model over the embedded OWT-like shards with stages
# ar -> k1 -> k2 (the first NSTAGES of them). Usage: tiny_config FILE [STEPS [NSTAGES]]
tiny_config() {
  local steps=${2:-4} n=${3:-3}
  {
    cat <<YAML
name: jobs-test
data: {train: $DATA, valid: $DATA}
model: {hidden: 32, heads: 2, blocks: 1, vocab: 50258, seq_len: 128}
defaults: {batch: 1, lr: 1.0e-3, checkpoint_every: 2, log_every: 1, eval_batches: 1,
           precision: [{mode: fp32}]}
resources: {ranks: 1, time_limit: "00:10:00", signal_lead: 30}
stages:
  - {name: ar, kind: ar, steps: $steps}
YAML
    [ "$n" -ge 2 ] && echo "  - {name: k1, kind: distill_ar, teacher: ar, k: 1, steps: $steps, tau: [0.01, 1.0]}"
    [ "$n" -ge 3 ] && echo "  - {name: k2, kind: self_forcing, teacher: k1, k: 2, steps: $steps}"
  } > "$1"
}
DATA=$(pwd)/data/shards/owt-tiny
need_data() {  # one build at a time: tests run side by side (make -j2 test)
  [ -f "$DATA/manifest.yaml" ] || {
    mkdir -p "$(dirname "$DATA")"
    flock "$DATA.lock" bash -c '[ -f "$1/manifest.yaml" ] || "$2" shards build configs/tiny-gpt2.yaml' \
      _ "$DATA" "$KF" >/dev/null 2>&1
  }
  [ -f "$DATA/manifest.yaml" ] || { bad "shards $DATA (kf shards build configs/tiny-gpt2.yaml) available"; finish; exit 1; }
}
file_sha() { sha256sum "$1" | cut -d' ' -f1; }

# slurm_up DIR: a private cluster under DIR (one per machine: Slurm's ports are
# fixed, so tests take a lock), stopped by slurm_down (call it from a trap).
slurm_up() {
  SLURM_BASE=$1
  exec 9>/tmp/kf-test-slurm.lock
  flock -w 600 9 || { bad "lock /tmp/kf-test-slurm.lock"; return 1; }
  SLURM_T0=$SECONDS
  KF_SLURM_CPUS=8 slurm/local-up.sh "$SLURM_BASE" >/dev/null || return 1   # tiny jobs side by side
  export SLURM_CONF=$SLURM_BASE/slurm.conf
}
slurm_down() { [ -n "${SLURM_BASE:-}" ] && slurm/local-down.sh "$SLURM_BASE" >/dev/null 2>&1; }
job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
job_state() { job_field "$1" JobState; }
job_of() { awk -v s="${2:-ar}" '$1 == s {print $2}' "$1.submit"; }   # RUN [STAGE]: its job in RUN.submit
job_ended() { local s; s=$(job_state "$1"); [ -n "$s" ] && ! [[ "$s" =~ ^(PENDING|RUNNING|COMPLETING|CONFIGURING)$ ]]; }
