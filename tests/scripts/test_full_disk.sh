#!/usr/bin/env bash
# Full disks: on a small tmpfs mounted by the test, a shard
# build, a checkpoint write (a training stage) and `kf sample > FILE` each
# fail with an error naming the path and "No space left on device" and exit
# non-zero; the shards and the checkpoint already there keep their sha256;
# after space is freed the same commands complete (the resumed stage
# bitwise identical to an uninterrupted one). Needs root for the mount (CI
# runs as root); without it the test fails, it never skips.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_trainer.sh
T=$(mktemp -d /tmp/kf_fulldisk_XXXXXX)
M=$T/mnt
mkdir -p "$M"
trap 'umount "$M" 2>/dev/null; rm -rf "$T"' EXIT
if ! mount -t tmpfs -o size=4m kf-full-disk "$M" 2>"$T/mount.err"; then
  bad "cannot mount a tmpfs at $M (root or CAP_SYS_ADMIN needed): $(cat "$T/mount.err")"
  finish; exit 1
fi
trainer_setup "$T"            # the training shards live off the tmpfs
# fill [KEEP]: takes every free byte of the tmpfs, then gives KEEP back
# (truncate's size suffixes: 16K, 64K)
fill() {
  dd if=/dev/zero of="$M/fill" bs=4k 2>/dev/null
  [ $# -eq 0 ] || truncate -s "-$1" "$M/fill"
}
unfill() { rm -f "$M/fill"; }
# sums DIR: sha256 of every file under DIR (the lock file aside), by name
sums() { (cd "$1" && find . -type f ! -name .build.lock | LC_ALL=C sort | xargs sha256sum); }
no_space() { grep -qE -- "$1.*No space left on device" "$2"; }

# ---- shard build ----
sed "s|out: $T/shards|out: $M/a|" "$T/cfg.yaml" >"$T/a.yaml"
sed "s|out: $T/shards|out: $M/b|" "$T/cfg.yaml" >"$T/b.yaml"
"$KF" shards build "$T/a.yaml" >/dev/null 2>"$T/a.err"; rc=$?
check "set a builds with space (rc $rc): $(tail -1 "$T/a.err")" [ $rc -eq 0 ]
sums "$M/a" >"$T/a.sum"
fill 16K
"$KF" shards build "$T/b.yaml" >/dev/null 2>"$T/b.err"; rc=$?
check "shard build on a full disk exits 1 (rc $rc)" [ $rc -eq 1 ]
check "its error names the shard path and ENOSPC: $(tail -1 "$T/b.err")" no_space "$M/b/" "$T/b.err"
"$KF" shards build "$T/a.yaml" >/dev/null 2>&1
check "set a: every file unchanged after both builds on the full disk" cmp -s "$T/a.sum" <(sums "$M/a")
check "set a still verifies" "$KF" shards verify "$M/a" >/dev/null 2>&1
unfill
"$KF" shards build "$T/b.yaml" >/dev/null 2>"$T/b.err"; rc=$?
check "set b builds once space is freed (rc $rc): $(tail -1 "$T/b.err")" [ $rc -eq 0 ]
check "set b verifies" "$KF" shards verify "$M/b" >/dev/null 2>&1
rm -rf "$M/a" "$M/b"

# ---- checkpoint write ----
R=$M/run; CK=$R/stages/ar/ckpt
"$KF" train "$T/cfg.yaml" --stage ar --run-dir "$T/ref" >/dev/null 2>&1  # uninterrupted, off the tmpfs
"$KF" train "$T/cfg.yaml" --stage ar --run-dir "$R" --stop-at 4 >/dev/null 2>"$T/t.err"; rc=$?
check "stage stops at step 4 with a checkpoint (rc $rc): $(tail -1 "$T/t.err")" [ $rc -eq 75 ]
sums "$CK/step-4" >"$T/ck.sum"
fill 64K                     # room for the log, not for the step-8 checkpoint (4 x 110 KB)
"$KF" train "$T/cfg.yaml" --stage ar --run-dir "$R" --resume >/dev/null 2>"$T/t.err"; rc=$?
check "checkpoint write on a full disk exits 1 (rc $rc)" [ $rc -eq 1 ]
check "its error names the checkpoint path and ENOSPC: $(tail -1 "$T/t.err")" no_space "$CK/step-8" "$T/t.err"
check "step-4 checkpoint unchanged" cmp -s "$T/ck.sum" <(sums "$CK/step-4")
check "no committed step-8" [ ! -e "$CK/step-8" ]
check "latest still names step-4" [ "$(cat "$CK/latest")" = step-4 ]
unfill
"$KF" train "$T/cfg.yaml" --stage ar --run-dir "$R" --resume >/dev/null 2>"$T/t.err"; rc=$?
check "resume completes once space is freed (rc $rc): $(tail -1 "$T/t.err")" [ $rc -eq 0 ]
check "completion marker" [ -f "$R/stages/ar/final/DONE" ]
check "resumed stage bitwise identical to the uninterrupted one" same_weights "$T/ref/stages/ar" "$R/stages/ar"
check "no partial step-8.tmp left" [ ! -e "$CK/step-8.tmp" ]

# ---- kf sample > FILE ----
S=("$KF" sample "$R/stages/ar/final" --bos 4 --max-new 8 --n-per-prefix 4)
fill
"${S[@]}" >"$M/out.jsonl" 2>"$T/s.err"; rc=$?
check "kf sample to a full disk exits 1 (rc $rc)" [ $rc -eq 1 ]
check "its error names the output file and ENOSPC: $(tail -1 "$T/s.err")" no_space "stdout \($M/out.jsonl\)" "$T/s.err"
unfill
"${S[@]}" >"$M/out.jsonl" 2>"$T/s.err"; rc=$?
check "kf sample completes once space is freed (rc $rc): $(tail -1 "$T/s.err")" [ $rc -eq 0 ]
check "4 completions written" [ "$(grep -c '"completion"' "$M/out.jsonl")" -eq 4 ]

finish
