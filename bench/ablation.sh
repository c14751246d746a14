#!/usr/bin/env bash
# bench/ablation.sh [RUN_DIR] [key=value...] — the paper's Table 2 ablation
# (`kf bench ablation` runs this). Trains configs/ablation.yaml (AR, the
# PFLM(2) teacher chain, and variants A, B, C of K-Forcing(k=4) from the same AR
# checkpoint for the same steps), then prints per-position validation NLL
# L_1..L_4 of each variant on its own supervision, the AR teacher's validation
# NLL as the reference row, and writes RUN_DIR/ablation.json.
# Overrides (e.g. stages.3.steps=300) are passed to `kf jobs run`.
set -euo pipefail
cd "$(dirname "$0")/.."
KF=${KF_BIN:-bin/kf}
RUN=${1:-runs/ablation}
shift || true
CFG=configs/ablation.yaml
DATA=data/shards/owt-tiny
SAMPLES=${ABLATION_SAMPLES:-64}
"$KF" jobs run "$CFG" --run-dir "$RUN" --no-sample "$@" >&2
S="$RUN/stages"
ev() { "$KF" eval "$@" --data "$DATA" --samples "$SAMPLES" --batch 8 --tau 1; }
{
  echo "{\"AR\": $(ev "$S/ar/final"),"
  echo " \"A\": $(ev "$S/varA/final" --teacher "$S/ar/final" --supervision noise_inversion_mtp),"
  echo " \"B\": $(ev "$S/varB/final" --teacher "$S/ar/final" --supervision noise_inversion_causal),"
  echo " \"C\": $(ev "$S/varC/final" --teacher "$S/k2/final" --supervision self_forcing)}"
} > "$RUN/ablation.json"
python3 - "$RUN/ablation.json" <<'PY' 2>/dev/null || cat "$RUN/ablation.json"
import json, sys
r = json.load(open(sys.argv[1]))
print("Per-position validation NLL, K-Forcing(k=4), OWT-like tiny shards (lower is better)")
print(f"{'variant':<34}{'L1':>8}{'L2':>8}{'L3':>8}{'L4':>8}{'avg':>8}{'block acc':>11}")
print(f"{'AR teacher (next token)':<34}{r['AR']['nll']:>8.3f}")
names = {"A": "(A) noise inversion + MTP", "B": "(B) noise inversion + causal",
         "C": "(C) self-forcing + causal"}
for v in "ABC":
    p = r[v]["nll_pos"]
    print(f"{names[v]:<34}" + "".join(f"{x:>8.3f}" for x in p) +
          f"{sum(p) / len(p):>8.3f}{r[v]['block_acc']:>11.3f}")
PY
