#!/usr/bin/env bash
# bench/convergence_family.sh — the chain AR -> PFLM(1) -> PFLM(2) -> PFLM(4)
# on N random languages of tools/synth_lang.py's family (docs/convergence.md):
# for each family seed, the language -> `kf shards build` -> `kf jobs run` (a
# checkpoint every EVERY steps) -> `kf sample` of every checkpoint at its k,
# tau 1, no frequency penalty -> tools/tv_pairs.py: the worst pairwise TV of
# the 4 generated tokens against the AR teacher's own samples, and the noise
# floor (the teacher against itself, another seed).
#
# usage: bench/convergence_family.sh OUT SEED... [-- key.path=value ...]
#   OUT         working directory: OUT/lang-SEED/ per language (language,
#               shards, run, samples, curve.jsonl); a finished run is reused
#   SEED...     family seeds (tools/synth_lang.py --family)
#   overrides   after --, passed to every `kf jobs run` (a recipe: e.g.
#               stages.3.lr=1e-3); none: the self_forcing kind's defaults
# environment: STEPS (every PFLM stage's steps, 1000), AR_STEPS (1000), EVERY
#   (checkpoint interval, 250), PREFIXES (2048), N (completions per prefix,
#   8: 16,384 samples per model), HIDDEN (32), BLOCKS (4), SEQ_LEN (tokens
#   per training sample, 32), JOBS (languages trained at once, 1), KF (bin/kf)
# Output: OUT/summary.tsv (seed, language, floor, then per stage and
# checkpoint the TV minus the floor), OUT/summary.jsonl (per language, in
# order of PFLM(4)'s excess: each stage's TV minus the floor at its last
# checkpoint) and its chart OUT/summary.png, and on stdout the table and, per
# stage at its last checkpoint, the median and worst excess over the floor.
set -eu
case "${1:-}" in
  ""|-h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; [ -n "${1:-}" ]; exit ;;
esac
cd "$(dirname "$0")/.."
OUT=$1; shift
SEEDS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do SEEDS+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ ${#SEEDS[@]} -gt 0 ] || { echo "convergence_family.sh: no family seeds" >&2; exit 2; }
export KF=${KF:-bin/kf} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
STEPS=${STEPS:-1000} AR_STEPS=${AR_STEPS:-1000} EVERY=${EVERY:-250}
PREFIXES=${PREFIXES:-2048} N=${N:-8} HIDDEN=${HIDDEN:-32} BLOCKS=${BLOCKS:-4} JOBS=${JOBS:-1}
. tools/synth_chain.sh

one() {  # SEED overrides...: trains and scores one language
  local seed=$1 d=$OUT/lang-$1
  shift
  mkdir -p "$d"
  synth_setup "$d" "$AR_STEPS" "$STEPS" "$EVERY" "$PREFIXES" "$HIDDEN" "$BLOCKS" --family "$seed" \
    > "$d/lang.txt" || return
  "$KF" jobs run "$d/synth.yaml" --run-dir "$d/run" --no-sample "$@" > "$d/run.log" 2>&1 ||
    { echo "seed $seed: kf jobs run failed:" >&2; tail -n 5 "$d/run.log" >&2; return 1; }
  synth_curve "$d" "$N" > "$d/floor.txt"
}

fail=0
for seed in "${SEEDS[@]}"; do
  one "$seed" "$@" &
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || fail=1; done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || fail=1; done
python3 - "$OUT" "${SEEDS[@]}" <<'PY'
import json, statistics, sys
out, seeds = sys.argv[1], sys.argv[2:]
rows, last = [], {"k1": [], "k2": [], "k4": []}
for seed in seeds:
    try:
        recs = [json.loads(l) for l in open(f"{out}/lang-{seed}/curve.jsonl")]
    except OSError:
        print(f"seed {seed}: no curve"); continue
    desc = open(f"{out}/lang-{seed}/lang.txt").read().strip()
    floor = recs[0]["floor"]
    cells = []
    for st in ("k1", "k2", "k4"):
        pts = [(r["step"], r[st]) for r in recs if st in r]
        cells += [f"{st}@{s}={tv - floor:+.3f}" for s, tv in pts]
        if pts:
            last[st].append((pts[-1][1] - floor, seed))
    rows.append(f"{seed}\t{desc}\t{floor:.3f}\t" + "\t".join(cells))
with open(f"{out}/summary.tsv", "w") as f:
    f.write("\n".join(rows) + "\n")
print("seed\tlanguage\tfloor\tTV - floor per stage@step")
print("\n".join(rows))
order = sorted(last["k4"])
with open(f"{out}/summary.jsonl", "w") as f:
    for rank, (_, seed) in enumerate(order, 1):
        rec = {"language": rank, "seed": int(seed), "target": 0.05}
        for st in ("k1", "k2", "k4"):
            rec[st] = round(dict((s, x) for x, s in last[st])[seed], 4)
        f.write(json.dumps(rec) + "\n")
for st, v in last.items():
    if v:
        print(f"{st} last checkpoint, TV - floor: median {statistics.median(x for x, _ in v):.3f}, "
              f"worst {max(v)[0]:.3f} (seed {max(v)[1]}), over {len(v)} languages")
PY
"$KF" plot "$OUT/summary.jsonl" -o "$OUT/summary.png" --x language --key k1 --key k2 --key k4 \
  --key target --title "TV - noise floor at the last checkpoint, languages by PFLM(4)" > /dev/null
exit $fail
