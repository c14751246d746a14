# tests/scripts/lib_trainer.sh — shared set-up for the trainer's script tests
# (sourced, not run): a tiny synthetic corpus with its own WordPiece vocabulary
# (29 ids), its shard set, and a run config whose steps take milliseconds.
#   trainer_setup DIR        builds DIR/shards and writes DIR/cfg.yaml
#   same_weights A B         two stage directories hold identical weights
# (checks: lib_check.sh)
KF=${KF_BIN:-bin/kf}
. tests/scripts/lib_check.sh
export OMP_NUM_THREADS=1 KF_QUIET=${KF_QUIET:-0}
# Open MPI: run as root in containers, yield the CPU while waiting, loopback only.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1 \
       OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo \
       OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN="mpirun --allow-run-as-root --oversubscribe"

# Writes a deterministic corpus (a Markov chain over 20 words, so there is
# something to learn), its vocab.txt and DIR/cfg.yaml; builds DIR/shards.
trainer_setup() {
  local d=$1
  mkdir -p "$d/voc"
  local words="the a cat dog bird sees likes eats big small red blue and runs sleeps fast slowly home tree fish"
  { printf '[PAD]\n[unused0]\n[unused1]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n'; for w in $words; do echo "$w"; done; printf '.\n,\n'; } > "$d/voc/vocab.txt"
  awk -v words="$words" 'BEGIN { n = split(words, w, " "); s = 12345
      for (i = 0; i < 700; i++) { s = (s * 1103515245 + 12345) % 2147483648; len = 3 + s % 10
        k = 1 + s % 2; line = w[k]
        for (j = 1; j < len; j++) { s = (s * 1103515245 + 12345) % 2147483648; k = 1 + ((k * 7 + s % 3) % n); line = line " " w[k] }
        print line " ." } }' > "$d/text.txt"
  cat > "$d/cfg.yaml" <<YAML
name: trainer-test
shards:
  t:
    out: $d/shards
    tokenizer: bert
    vocab: $d/voc
    packing: pad
    seq_len: 16
    docs_per_shard: 200
    inputs:
      - {path: $d/text.txt, format: lines}
    valid: {last: 100}
data: {train: $d/shards, valid: $d/shards}
model: {hidden: 32, heads: 2, blocks: 2, vocab: 30, seq_len: 16}
defaults:
  batch: 8
  lr: 3.0e-3
  ema: 0.9
  checkpoint_every: 4
  keep_checkpoints: 3
  log_every: 1000
  eval_batches: 2
  precision: [{until_step: 6, mode: fp16}, {mode: fp32}]
  loss_scale: {init: 1.0e9, growth_interval: 2, backoff: 0.001}
stages:
  - {name: ar, kind: ar, steps: 12}
  - {name: k2, kind: distill_ar, teacher: ar, k: 2, steps: 6, tau: [0.5, 1.0]}
# a minute: on a loaded machine a rank can wait seconds for a starved peer or an
# fsync (4 s failed test_trainer_kill's reference run at load 20);
# test_trainer_deadrank shortens it to test the watchdog
resources: {backend: cpu, collective_timeout: 60}
YAML
  "$KF" shards build "$d/cfg.yaml" >/dev/null 2>&1 || { bad "shards build failed"; finish; exit 1; }
}

# same_weights A B: the weight files of two stage directories are byte-identical.
same_weights() {
  cmp -s "$1/final/model.safetensors" "$2/final/model.safetensors" &&
  cmp -s "$1/ckpt/$(cat "$1/ckpt/latest")/adam_v.safetensors" "$2/ckpt/$(cat "$2/ckpt/latest")/adam_v.safetensors" &&
  cmp -s "$1/ckpt/$(cat "$1/ckpt/latest")/model.safetensors" "$2/ckpt/$(cat "$2/ckpt/latest")/model.safetensors"
}
