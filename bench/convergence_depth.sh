#!/usr/bin/env bash
# bench/convergence_depth.sh — the depth study of docs/convergence.md: the
# chain AR -> PFLM(1) -> PFLM(2) -> PFLM(4) (the self_forcing defaults) on a
# sharp Markov chain over 8 symbols of each ORDER, at each BLOCKSxHIDDEN, and
# the worst pairwise TV of every stage's last checkpoint against the AR
# teacher's samples, its noise floor and the teacher against the exact joint.
#
# usage: bench/convergence_depth.sh OUT [ORDER,BLOCKS,HIDDEN ...] [-- key.path=value ...]
#   OUT         working directory: OUT/oORDER-bBLOCKS/ per model (reused when done)
#   models      default: 1,1,64 1,2,44 1,4,32 1,6,28 3,1,64 3,2,44 3,4,32 3,6,28
#               (about the same 12*BLOCKS*HIDDEN^2 block parameters)
#   overrides   after --, passed to every `kf jobs run` (e.g. model.noise_cycles=0)
# environment: AR_STEPS (600), STEPS (every PFLM stage's, 300), PREFIXES
#   (2048), N (completions per prefix, 4), SEED (the language, 5), KF (bin/kf)
# Output: one table row per model on stdout, OUT/depth.jsonl and its chart
# OUT/depth.png (PFLM(4)'s TV minus the floor against blocks, per order).
set -eu
case "${1:-}" in
  ""|-h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; [ -n "${1:-}" ]; exit ;;
esac
cd "$(dirname "$0")/.."
OUT=$1; shift
MODELS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do MODELS+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ ${#MODELS[@]} -gt 0 ] || MODELS=(1,1,64 1,2,44 1,4,32 1,6,28 3,1,64 3,2,44 3,4,32 3,6,28)
export KF=${KF:-bin/kf} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} SEQ_LEN=16
AR_STEPS=${AR_STEPS:-600} STEPS=${STEPS:-300} PREFIXES=${PREFIXES:-2048} N=${N:-4} SEED=${SEED:-5}
. tools/synth_chain.sh
mkdir -p "$OUT"
: > "$OUT/rows.jsonl"
for m in "${MODELS[@]}"; do
  IFS=, read -r ord B H <<< "$m"
  d=$OUT/o$ord-b$B
  mkdir -p "$d"
  if [ ! -s "$d/curve.jsonl" ]; then
    synth_setup "$d" "$AR_STEPS" "$STEPS" "$STEPS" "$PREFIXES" "$H" "$B" --kind markov \
      --order "$ord" --symbols 8 --succ 2,3 --noise 0 --seed "$SEED" > "$d/lang.txt"
    "$KF" jobs run "$d/synth.yaml" --run-dir "$d/run" --no-sample "$@" > "$d/run.log" 2>&1 ||
      { echo "order $ord, $B blocks: kf jobs run failed:" >&2; tail -n 5 "$d/run.log" >&2; exit 1; }
    synth_curve "$d" "$N" > "$d/floor.txt"
  fi
  exact=$(synth_tv "$d/samples/ar.jsonl" --exact "$d/lang/lang.json")
  python3 - "$d/curve.jsonl" "$ord" "$B" "$H" "$exact" "$OUT/rows.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
o, b, h, ex = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
f = r["floor"]
with open(sys.argv[6], "a") as out:
    out.write(json.dumps({"order": o, "blocks": b, "excess": round(r["k4"] - f, 4)}) + "\n")
print(f"order {o}, {b} x {h}: floor {f:.3f}, AR vs exact {ex:.3f}, PFLM(1) {r['k1']:.3f}, "
      f"PFLM(2) {r['k2']:.3f}, PFLM(4) {r['k4']:.3f} ({r['k4'] - f:+.3f})")
PY
done
python3 - "$OUT" <<'PY'
import collections, json, sys
by = collections.defaultdict(dict)
for l in open(f"{sys.argv[1]}/rows.jsonl"):
    r = json.loads(l)
    by[r["blocks"]][f"order{r['order']}"] = r["excess"]
with open(f"{sys.argv[1]}/depth.jsonl", "w") as f:
    for b in sorted(by):
        f.write(json.dumps({"blocks": b, **by[b], "target": 0.05}) + "\n")
PY
"$KF" plot "$OUT/depth.jsonl" -o "$OUT/depth.png" --x blocks --key order1 --key order3 --key target \
  --title "PFLM(4): TV - noise floor by depth (matched parameters)" > /dev/null
