#!/usr/bin/env bash
# `kf bench decode --roofline DEVICE`: documented in --help; bad arguments are
# usage errors saying what is wrong; one row per method and batch size, PFLM(k)
# at k tokens a step; on the tiny config (4 blocks, H 96, V 770, no QKV or
# projection-in bias, LayerNorm gains only) the bytes a step reads match the
# weights counted by hand, and attn_decode is priced at the cache length the
# step uploads (not the graph bucket's bound) with the split's scratch.
set -u
cd "$(dirname "$0")/../.."
KF=${KF_BIN:-bin/kf}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. tests/scripts/lib_check.sh

"$KF" bench decode --help >"$T/help"; rc=$?
check "--help: rc $rc" eval "[ $rc -eq 0 ]"
check "--help documents --roofline DEVICE and --cache-len" \
  eval "grep -q -- '--roofline DEVICE' '$T/help' && grep -q -- '--cache-len L' '$T/help'"

"$KF" bench decode configs/tiny.yaml --roofline h800 >"$T/out" 2>"$T/err"; rc=$?
check "unknown device: rc $rc, $(cat "$T/err")" exits_saying $rc 2 "$T/err" 'unknown device "h800" \(valid: h100, h200, a100\)'
"$KF" bench decode configs/tiny.yaml --roofline h100 --cache-len 126 >"$T/out" 2>"$T/err"; rc=$?
check "cache past the context: rc $rc, $(cat "$T/err")" exits_saying $rc 1 "$T/err" "context is 128 \(lower --cache-len\)"
"$KF" bench decode configs/tiny.yaml --roofline h100 --cache-len 32 --prefix-len 40 >"$T/out" 2>"$T/err"; rc=$?
check "prefix past the cache: rc $rc, $(cat "$T/err")" exits_saying $rc 1 "$T/err" "--prefix-len 40 exceeds the cache length 32"
"$KF" bench decode a.yaml b.yaml --roofline h100 >"$T/out" 2>"$T/err"; rc=$?
check "two configs: rc $rc, $(cat "$T/err")" exits_saying $rc 2 "$T/err" "--roofline takes one CONFIG, got 2"
"$KF" bench decode ck --data d --cache-len 5 >"$T/out" 2>"$T/err"; rc=$?
check "--cache-len without --roofline: rc $rc, $(cat "$T/err")" exits_saying $rc 2 "$T/err" "--cache-len applies to --roofline only"
"$KF" bench decode configs/tiny.yaml --roofline h100 --batch 0 >"$T/out" 2>"$T/err"; rc=$?
check "batch 0: rc $rc, $(cat "$T/err")" eval "[ $rc -eq 2 ]"

"$KF" bench decode configs/tiny.yaml --roofline h100 --batch 1,2 --k 2,4 --freq-penalty 0 \
  >"$T/out" 2>"$T/err"; rc=$?
check "tiny dry: rc $rc, $(tail -n 3 "$T/err")" eval "[ $rc -eq 0 ]"
check "header: device, cache of 64 rows (half of 128), dry" \
  grep -q '^decode roofline: H100 SXM, .* 4 x 96, V 770, fp32, at a cache of 64 rows (prefix 64).*dry: nothing computed$' "$T/out"
# a row: batch method tok cache est_ms tokens/s xAR  blocks_ms MB attn_ms MB out_ms MB bus_ms MB syncs top
for b in 1 2; do
  for m in 'AR 1' 'PFLM(2) 2' 'PFLM(4) 4'; do
    set -- $m
    check "batch $b $1: a row with $2 tokens a step" \
      eval "awk -v b=$b -v m='$1' -v k=$2 '\$1 == b && \$2 == m && \$3 == k { n++ } END { exit n != 1 }' '$T/out'"
  done
  check "batch $b AR: ratio 1.00x" eval "awk -v b=$b '\$1 == b && \$2 == \"AR\" && \$7 == \"1.00x\" { n++ } END { exit n != 1 }' '$T/out'"
done
col() { awk -v b="$1" -v m="$2" -v c="$3" '$1 == b && $2 == m { print $c }' "$T/out"; }
# The blocks' bytes grow with the rows a step feeds; at batch 0 they are the
# weights read once: 4 blocks x (12 H^2 + 4H + H (the MLP's biases) + 2H (two
# LayerNorm gains)) + H (the final LayerNorm's gain) floats
want=$(awk 'BEGIN { H = 96; print 4 * (4 * (12 * H * H + 7 * H) + H) / 1e6 }')
got=$(awk -v a="$(col 1 AR 9)" -v b="$(col 2 AR 9)" 'BEGIN { print 2 * a - b }')
check "AR blocks: weights read $got MB, by hand $want MB" \
  eval "awk -v g=$got -v w=$want 'BEGIN { exit !(g - w < 0.002 && w - g < 0.002) }'"
# the output layer's weights and bias: (V H + V) floats
want=$(awk 'BEGIN { print 4 * (770 * 96 + 770) / 1e6 }')
got=$(awk -v a="$(col 1 AR 13)" -v b="$(col 2 AR 13)" 'BEGIN { print 2 * a - b }')
check "AR output layer: weights read $got MB, by hand $want MB" \
  eval "awk -v g=$got -v w=$want 'BEGIN { exit !(g - w < 0.002 && w - g < 0.002) }'"
# AR batch 1: one query over T = 65 rows (the 64 cached and its own), 4
# blocks: q read and out written (2 x 96), K and V (2 x 65 x 96), and the
# split's scratch: 13 parts of ceil(65 / 16) = 5 rows, a record of 48 + 2
# floats per part and head, written and read (2 x 2 x 13 x 50)
want=$(awk 'BEGIN { printf "%.3f", 4 * 4 * (2 * 96 + 2 * 65 * 96 + 2 * 2 * 13 * 50) / 1e6 }')
check "AR attn_decode at the uploaded length with the split's scratch: $(col 1 AR 11) MB, by hand $want" \
  eval "[ '$(col 1 AR 11)' = '$want' ]"

# the 124M model: the figures docs/cuda.md quotes
"$KF" bench decode configs/gpt2-124m.yaml --roofline h100 --batch 1,16,128 --k 4 >"$T/g" 2>"$T/err"; rc=$?
check "124M dry: rc $rc, $(tail -n 3 "$T/err")" eval "[ $rc -eq 0 ]"
check "124M: 6 rows, cache 512" eval "[ \$(awk '\$4 == 512' '$T/g' | wc -l) -eq 6 ]"
check "124M: tokens/s = batch * k / step time (batch 16, PFLM(4))" \
  eval "awk '\$1 == 16 && \$2 == \"PFLM(4)\" { r = 16 * 4 / (\$5 / 1e3) / \$6; exit !(r > 0.999 && r < 1.001) }' '$T/g'"
finish
