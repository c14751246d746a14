#!/usr/bin/env bash
# kf shards build survives kill -9 at any moment: each trial kills a build
# twice at random points, checks that no manifest (or only the finished one)
# is visible in between, reruns to completion and compares the manifest byte
# for byte with an uninterrupted build, checks finished shards were reused,
# and verifies every shard. Then, under strace, that every shard is fsynced
# before the manifest is renamed into place (power-loss safety: shards are
# not synced one by one while they are written). Needs data/vocab/gpt2,
# data/text/brown.txt (scripts/setup.sh) and strace.
set -u
cd "$(dirname "$0")/../.."
KF=${KF_BIN:-bin/kf}
. tests/scripts/lib_check.sh
T=$(mktemp -d /tmp/kf_test_pipeline_resume.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$T"' EXIT
export KF_QUIET=1

check "brown corpus present (scripts/setup.sh)" test -s data/text/brown.txt
head -n 16000 data/text/brown.txt > "$T/in.txt"
cat > "$T/cfg.yaml" <<EOF
shards:
  resume:
    out: $T/ref
    tokenizer: gpt2
    vocab: data/vocab/gpt2
    packing: wrap
    seq_len: 64
    detok: lm1b
    docs_per_shard: 400
    inputs: [{path: $T/in.txt}]
    valid: {last: 1000}
EOF
now() { date +%s.%N; }
t0=$(now)
"$KF" shards build "$T/cfg.yaml" --jobs 2 2> "$T/ref.log"
check "reference build ($(tail -2 "$T/ref.log"))" test -s "$T/ref/manifest.yaml"
tref=$(awk -v a="$(now)" -v b="$t0" 'BEGIN {printf "%.3f", a - b}')
echo "reference build: ${tref}s"

# A kill point as a fraction (in percent) of the reference time.
kill_at() {  # PERCENT
  local delay; delay=$(awk -v t="$tref" -v p="$1" 'BEGIN {printf "%.3f", t * p / 100}')
  "$KF" shards build "$T/cfg.yaml" --jobs 2 shards.resume.out="$T/run" 2>> "$T/run.log" &
  pid=$!
  sleep "$delay"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  pid=
  # In between, a reader sees either no manifest or the finished one.
  if [ -e "$T/run/manifest.yaml" ]; then
    check "manifest after a kill at ${1}% is the complete one" cmp -s "$T/ref/manifest.yaml" "$T/run/manifest.yaml"
  else
    check "no manifest after a kill at ${1}%" test ! -e "$T/run/manifest.yaml"
  fi
}
reused_any=0
for trial in 1 2 3 4 5; do
  rm -rf "$T/run"
  case $trial in
    1) a=3; b=10 ;;              # early: during startup / the first shards
    5) a=80; b=95 ;;             # late: near the manifest write
    *) a=$((RANDOM % 90 + 5)); b=$((RANDOM % 90 + 5)) ;;
  esac
  kill_at "$a"
  kill_at "$b"
  done_before=$(ls "$T/run/train" "$T/run/valid" 2>/dev/null | grep -c '\.lmdb$')
  KF_QUIET=0 "$KF" shards build "$T/cfg.yaml" --jobs 2 shards.resume.out="$T/run" 2> "$T/rerun.log"
  rc=$?
  check "trial $trial (kills at $a%, $b%): rerun succeeds" test $rc -eq 0
  check "trial $trial: manifest equals the uninterrupted build's" cmp -s "$T/ref/manifest.yaml" "$T/run/manifest.yaml"
  reused=$(grep -o '[0-9]* reused' "$T/rerun.log" | awk '{s += $1} END {print s + 0}')
  [ "$done_before" -gt 0 ] && [ "$reused" -gt 0 ] && reused_any=1
  echo "trial $trial: kills at $a% and $b%, $done_before shard files were left, rerun reused $reused"
  check "trial $trial: no temp files left" test -z "$(find "$T/run" -name '*.tmp*')"
  check "trial $trial: verify" "$KF" shards verify "$T/run" > /dev/null
done
check "some rerun reused shards finished before a kill" test $reused_any -eq 1

# Durability order: each shard file's fsync precedes the manifest's rename.
if command -v strace >/dev/null; then
  strace -f -qq -y -e trace=fsync,fdatasync,rename,renameat,renameat2 -o "$T/strace.log" \
    "$KF" shards build "$T/cfg.yaml" --jobs 2 --force shards.resume.out="$T/run" 2>/dev/null
  check "build under strace" test -s "$T/run/manifest.yaml"
  mline=$(grep -n 'rename.*manifest\.yaml"' "$T/strace.log" | tail -n 1 | cut -d: -f1)
  check "the manifest's rename is in the trace" test -n "$mline"
  nshards=$(ls "$T/run/train" "$T/run/valid" | grep -c '\.lmdb$')
  # a call line (a failed fsync fails the build: no manifest); threads' calls
  # may be split into "<unfinished ...>" and "resumed" lines
  synced=$(head -n "${mline:-0}" "$T/strace.log" | grep -E 'f(data)?sync\([0-9]+<[^>]*/shard-[0-9]+\.lmdb>' |
           grep -oE '<[^>]*/shard-[0-9]+\.lmdb>' | sort -u | wc -l)
  echo "durability: $synced of $nshards shard files fsynced before the manifest's rename"
  check "every shard fsynced before the manifest ($synced of $nshards)" test "$synced" -eq "$nshards" -a "$nshards" -gt 0
else
  check "strace installed (scripts/setup.sh)" false
fi

finish
