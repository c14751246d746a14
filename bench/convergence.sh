#!/usr/bin/env bash
# bench/convergence.sh — how fast each stage of the chain reproduces its AR
# teacher's joint on a stochastic synthetic language (docs/convergence.md).
#
# Text (tools/synth_lang.py: a noisy second-order Markov chain over 8
# symbols) -> `kf shards build` -> `kf jobs run` (AR -> PFLM(1) -> PFLM(2) ->
# PFLM(4), a checkpoint every EVERY steps) -> `kf sample` of every checkpoint
# at its k (k1: 1, k2: 2, k4: 4), tau 1, no frequency penalty, from PREFIXES
# prompts x N completions of 4 tokens -> tools/tv_pairs.py: the worst pairwise
# TV of the 4 generated tokens against the AR teacher's own samples. The noise
# floor is the AR teacher against itself (another seed).
#
# usage: bench/convergence.sh OUT [key.path=value ...]
#   OUT         working directory (language, shards, run, samples, curve.jsonl,
#               curve.png); a finished run there is reused
#   overrides   passed to `kf jobs run` (a recipe: e.g. stages.3.lr=1e-3)
# environment: STEPS (every PFLM stage's steps, default 600), AR_STEPS (1000),
#   EVERY (checkpoint interval, 100), PREFIXES (2048), N (per prefix, 8),
#   HIDDEN (32), BLOCKS (4), KF (bin/kf)
# Output: curve.jsonl, one record per step: {"step", "k1", "k2", "k4" (TV at
# that step of each stage), "floor"}, its chart curve.png, and a summary: per
# stage the first checkpoint within floor + 0.05 of the teacher.
set -eu
case "${1:-}" in
  ""|-h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; [ -n "${1:-}" ]; exit ;;
esac
cd "$(dirname "$0")/.."
OUT=$1; shift
KF=${KF:-bin/kf}
STEPS=${STEPS:-600} AR_STEPS=${AR_STEPS:-1000} EVERY=${EVERY:-100}
PREFIXES=${PREFIXES:-2048} N=${N:-8} HIDDEN=${HIDDEN:-32} BLOCKS=${BLOCKS:-4}
mkdir -p "$OUT"
. tools/synth_chain.sh
synth_setup "$OUT" "$AR_STEPS" "$STEPS" "$EVERY" "$PREFIXES" "$HIDDEN" "$BLOCKS"
"$KF" jobs run "$OUT/synth.yaml" --run-dir "$OUT/run" --no-sample "$@" > "$OUT/run.log" 2>&1 ||
  { tail -n 20 "$OUT/run.log" >&2; exit 1; }

floor=$(synth_curve "$OUT" "$N")
echo "noise floor (AR vs AR, another seed): $floor"
python3 - "$OUT" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(f"{sys.argv[1]}/curve.jsonl")]
first = {}
for r in recs:
    print(f"step {r['step']:5d}  " + "  ".join(f"{st} {r.get(st, float('nan')):.3f}" for st in ("k1", "k2", "k4")))
    for st in ("k1", "k2", "k4"):
        if st in r and r[st] <= r["floor+0.05"]:
            first.setdefault(st, r["step"])
print("first step within floor + 0.05 = %.3f: " % recs[0]["floor+0.05"] +
      ", ".join(f"{st} {first.get(st, 'never')}" for st in ("k1", "k2", "k4")))
PY
"$KF" plot "$OUT/curve.jsonl" -o "$OUT/curve.png" --key k1 --key k2 --key k4 --key floor+0.05 \
  --title "worst pairwise TV vs the AR teacher's samples" > /dev/null
