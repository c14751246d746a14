#!/usr/bin/env bash
# Released-checkpoint conversion: randomly initialised PyTorch
# models with the reference key names and architecture (tools/ref_model.py),
# written as PyTorch Lightning-style checkpoints (state_dict with "backbone."
# keys, MDLM-style EMA shadow_params), converted by tools/convert_ckpt.py, then
# `kf import --probe` checks that kf's logits for the same input (AR) and the
# same noise (PFLM, SingleForward layout) match PyTorch's EMA model to 1e-4.
# The reference logits come from the PyTorch model itself, not from the
# converter. Checks that must fail: the raw (non-EMA) weights against the EMA
# probe; a wrong head count. MDLM's diffusion DiT (adaLN, timestep embedder,
# bidirectional attention) the same way, its probe from the unfolded model,
# and causal and bidirectional probes refused by the other attention. Then
# `kf import` registers a converted checkpoint as a stage's final weights.
# PyTorch (CPU) is Debian's python3-torch (scripts/setup.sh), importable by
# /usr/bin/python3; PYTHON overrides. A Python without torch is a failure.
set -u
cd "$(dirname "$0")/../.."
KF=${KF_BIN:-bin/kf}
PY=${PYTHON:-/usr/bin/python3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. tests/scripts/lib_check.sh

require_torch "$PY"

# AR (V = 97 with mask 96) and PFLM(3) models; EMA weights differ from the raw ones.
PYTHONPATH=tools "$PY" - "$T" <<'EOF' || { echo "FAIL: building the PyTorch models"; echo "0 passed, 1 failed"; exit 1; }
import sys, copy, torch, ref_model
T = sys.argv[1]
torch.manual_seed(0)
for kind in ("ar", "pflm"):
    pflm = kind == "pflm"
    raw = ref_model.DDiT(64, 2, 2, 97, mask_id=96, pflm=pflm)
    ref_model.randomize(raw, 1)
    ema = copy.deepcopy(raw)
    ref_model.randomize(ema, 2)
    name = "pflm_toy_k3.ckpt" if pflm else "ar_toy.ckpt"
    torch.save(ref_model.lightning_checkpoint(raw, ema), f"{T}/{name}")
    g = torch.Generator().manual_seed(5)
    if pflm:
        n, k = 6, 3
        ids = torch.randint(0, 97, (3, n + n * k), generator=g)
        z = torch.rand(3, n + n * k, generator=g, dtype=torch.float64)
        tau = torch.tensor([1.0, 0.5, 0.05], dtype=torch.float64)
        ref_model.write_probe(f"{T}/{kind}_probe.safetensors", copy.deepcopy(ema), ("single", n, k), ids, z, tau)
    else:
        ids = torch.randint(0, 97, (3, 20), generator=g)
        ref_model.write_probe(f"{T}/{kind}_probe.safetensors", copy.deepcopy(ema), ("ar", 20), ids)
print("models written")
EOF

for kind in ar pflm; do
  src=$T/ar_toy.ckpt; [ $kind = pflm ] && src=$T/pflm_toy_k3.ckpt
  "$PY" tools/convert_ckpt.py "$src" "$T/$kind.safetensors" --heads 2 --seq-len 64 --mask-id 96 --probe "$T/${kind}_self.safetensors" >"$T/conv" 2>&1; rc=$?
  check "$kind: convert rc $rc: $(cat "$T/conv")" eval "[ $rc -eq 0 ] && grep -q 'EMA (shadow_params' '$T/conv'"
  cat "$T/conv"
  "$KF" import "$T/$kind.safetensors" --probe "$T/${kind}_probe.safetensors" >"$T/out" 2>&1; rc=$?
  cat "$T/out"
  check "$kind: kf logits vs PyTorch EMA model (rc $rc)" eval "[ $rc -eq 0 ] && grep -q 'max |diff|' '$T/out'"
  "$KF" import "$T/$kind.safetensors" --probe "$T/${kind}_self.safetensors" >"$T/out" 2>&1; rc=$?
  check "$kind: kf logits vs the converter's own probe (rc $rc): $(cat "$T/out")" eval "[ $rc -eq 0 ]"
  # must fail: raw weights against the EMA model's logits
  "$PY" tools/convert_ckpt.py "$src" "$T/${kind}_raw.safetensors" --heads 2 --seq-len 64 --mask-id 96 --no-ema >"$T/conv" 2>&1; rc=$?
  check "$kind: --no-ema conversion (rc $rc): $(cat "$T/conv")" eval "[ $rc -eq 0 ]"
  "$KF" import "$T/${kind}_raw.safetensors" --probe "$T/${kind}_probe.safetensors" >"$T/out" 2>&1; rc=$?
  cat "$T/out"
  check "$kind: raw weights pass the EMA probe (rc $rc)" eval "[ $rc -eq 1 ] && grep -q 'differ from the reference' '$T/out'"
done
# must fail: a wrong head count changes the attention (the converter warns that
# --heads contradicts rotary_emb.inv_freq, and writes what it was told)
"$PY" tools/convert_ckpt.py "$T/ar_toy.ckpt" "$T/ar_h1.safetensors" --heads 1 --seq-len 64 --mask-id 96 >"$T/conv" 2>&1; rc=$?
check "--heads 1 conversion (rc $rc): $(cat "$T/conv")" eval "[ $rc -eq 0 ] && grep -q 'contradicts rotary_emb.inv_freq' '$T/conv'"
"$KF" import "$T/ar_h1.safetensors" --probe "$T/ar_probe.safetensors" >"$T/out" 2>&1; rc=$?
check "a wrong head count passes the probe (rc $rc): $(cat "$T/out")" eval "[ $rc -eq 1 ] && grep -q 'differ from the reference' '$T/out'"
# without --heads the head count comes from rotary_emb.inv_freq (head dim 32 -> 2 heads)
"$PY" tools/convert_ckpt.py "$T/ar_toy.ckpt" "$T/ar_auto.safetensors" --seq-len 64 --mask-id 96 >"$T/conv" 2>&1; rc=$?
"$KF" import "$T/ar_auto.safetensors" --probe "$T/ar_probe.safetensors" >"$T/out" 2>&1; rc2=$?
check "heads from inv_freq (rc $rc, $rc2): $(cat "$T/conv" "$T/out")" eval "[ $rc -eq 0 ] && grep -q 'heads=2 ' '$T/conv' && [ $rc2 -eq 0 ]"
# a PFLM probe does not fit an AR checkpoint
"$KF" import "$T/ar.safetensors" --probe "$T/pflm_probe.safetensors" >"$T/out" 2>&1; rc=$?
check "PFLM probe on AR checkpoint (rc $rc): $(cat "$T/out")" eval "[ $rc -eq 1 ] && grep -q 'does not fit' '$T/out'"

# MDLM's diffusion DiT (adaLN modulation, a timestep embedder, bidirectional
# attention): the converter folds the sigma = 0 conditioning; the probe's
# logits come from the unfolded PyTorch model over a bidirectional pass.
PYTHONPATH=tools "$PY" - "$T" <<'EOF' || { echo "FAIL: building the MDLM model"; echo "0 passed, 1 failed"; exit 1; }
import sys, copy, torch, ref_model
T = sys.argv[1]
raw = ref_model.MDLMDiT(64, 2, 2, 97, 32, mask_id=96)
ref_model.randomize(raw, 3)
ema = copy.deepcopy(raw)
ref_model.randomize(ema, 4)
torch.save(ref_model.lightning_checkpoint(raw, ema), f"{T}/mdlm_toy.ckpt")
ids = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(6))
ref_model.write_probe(f"{T}/mdlm_probe.safetensors", copy.deepcopy(ema), ("bidir", 20), ids)
EOF
"$PY" tools/convert_ckpt.py "$T/mdlm_toy.ckpt" "$T/mdlm.safetensors" --heads 2 --seq-len 64 --mask-id 96 --probe "$T/mdlm_self.safetensors" >"$T/conv" 2>&1; rc=$?
check "mdlm: convert rc $rc: $(cat "$T/conv")" eval "[ $rc -eq 0 ] && grep -q 'MDLM H=64' '$T/conv' && grep -q 'adaLN folded' '$T/conv'"
"$KF" import "$T/mdlm.safetensors" --probe "$T/mdlm_probe.safetensors" >"$T/out" 2>&1; rc=$?
cat "$T/out"
check "mdlm: kf logits vs PyTorch's unfolded EMA DiT (rc $rc)" eval "[ $rc -eq 0 ] && grep -q 'max |diff|' '$T/out'"
"$KF" import "$T/mdlm.safetensors" --probe "$T/mdlm_self.safetensors" >"$T/out" 2>&1; rc=$?
check "mdlm: kf logits vs the converter's own probe (rc $rc): $(cat "$T/out")" eval "[ $rc -eq 0 ]"
"$PY" tools/convert_ckpt.py "$T/mdlm_toy.ckpt" "$T/mdlm_raw.safetensors" --heads 2 --seq-len 64 --mask-id 96 --no-ema >"$T/conv" 2>&1
"$KF" import "$T/mdlm_raw.safetensors" --probe "$T/mdlm_probe.safetensors" >"$T/out" 2>&1; rc=$?
check "mdlm: raw weights pass the EMA probe (rc $rc)" eval "[ $rc -eq 1 ] && grep -q 'differ from the reference' '$T/out'"
# the attention is the checkpoint's: a causal probe does not fit it, nor a bidirectional one an AR model
"$KF" import "$T/mdlm.safetensors" --probe "$T/ar_probe.safetensors" >"$T/out" 2>&1; rc=$?
check "causal probe on the MDLM checkpoint (rc $rc): $(cat "$T/out")" eval "[ $rc -eq 1 ] && grep -q 'does not fit' '$T/out'"
"$KF" import "$T/ar.safetensors" --probe "$T/mdlm_probe.safetensors" >"$T/out" 2>&1; rc=$?
check "bidirectional probe on the AR checkpoint (rc $rc): $(cat "$T/out")" eval "[ $rc -eq 1 ] && grep -q 'does not fit' '$T/out'"
# a run's mdlm stage takes it (norm biases and all); its ar stage does not
mkdir -p "$T/mrun"
printf '%s\n' "name: m" "data: {train: d, valid: d}" "model: {hidden: 64, heads: 2, blocks: 2, vocab: 97, seq_len: 64}" \
  "stages:" "  - {name: mdlm, kind: mdlm, steps: 10}" "  - {name: ar, kind: ar, steps: 10}" >"$T/mrun/run.yaml"
"$KF" import "$T/mdlm.safetensors" --run-dir "$T/mrun" --stage mdlm >"$T/out" 2>&1; rc=$?
check "mdlm: import as a run's mdlm stage (rc $rc): $(cat "$T/out")" eval "[ $rc -eq 0 ] && [ -f '$T/mrun/stages/mdlm/final/DONE' ]"
"$KF" import "$T/mdlm.safetensors" --run-dir "$T/mrun" --stage ar >"$T/out" 2>&1; rc=$?
check "mdlm: import as a run's ar stage (rc $rc): $(cat "$T/out")" eval "[ $rc -eq 1 ] && grep -q 'masked-diffusion' '$T/out'"

# register the converted AR checkpoint as a stage's final weights
"$KF" import "$T/ar.safetensors" --run-dir "$T/run" --stage ar --probe "$T/ar_probe.safetensors" >"$T/out" 2>&1; rc=$?
check "import into a run (rc $rc): $(cat "$T/out")" \
  eval "[ $rc -eq 0 ] && [ -f '$T/run/stages/ar/final/DONE' ] && [ -f '$T/run/stages/ar/final/model.safetensors' ]"

finish
