#!/usr/bin/env bash
# `kf export` (docs/export.md): a tiny chain (ar -> k2, and an MTP-head
# variant) is trained, then exported.
# release: the .ckpt written through tools/release_ckpt.py is read back three
#   independent ways: tools/convert_ckpt.py imports it (every tensor bitwise
#   the exported weights; k, seq_len, heads recovered); its state_dict keys
#   and shapes equal the released classes' (tests/golden/release_keys,
#   recorded from the release's AR and MTP classes); tools/ref_model.py loaded
#   from the .ckpt's state_dict gives logits within 1e-5 of kf's (`kf import
#   --probe --tol 1e-5`), AR and PFLM (a SingleForward pass with given noise).
#   The LM1B and OWT shapes: the golden lists equal the reference model's
#   state_dict at those sizes (the order release_ckpt.py writes), and a model
#   with their vocabularies round-trips with the mask id recovered.
# hf: config.json, tokenizer files and the model card; tools/hf_load.py reads
#   the folder: its logits match kf's within 1e-5, its greedy AR decoding is
#   `kf sample`'s at tau 1e-4, its PFLM decoding is seeded.
# Errors: an MTP-head PFLM, an unknown stage kind, raw weights of a final/,
#   an unknown format, an existing --out, a vocabulary the stage did not use.
# PyTorch (CPU) is Debian's python3-torch, /usr/bin/python3 (PYTHON overrides).
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-/usr/bin/python3}
export KF_PYTHON=$PY
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. tests/scripts/lib_trainer.sh
require_torch "$PY"

trainer_setup "$T"
# an MTP-head stage too (it cannot be exported to either layout)
sed -i 's/^  - {name: k2, kind: distill_ar.*/&\n  - {name: mtp, kind: noise_inversion_mtp, teacher: ar, k: 2, steps: 2, tau: [1.0, 1.0]}/' "$T/cfg.yaml"
for st in ar k2 mtp; do
  "$KF" train "$T/cfg.yaml" --stage $st --run-dir "$T/run" >"$T/train_$st.log" 2>&1 ||
    { bad "training stage $st: $(tail -3 "$T/train_$st.log")"; finish; exit 1; }
done
cp "$T/cfg.yaml" "$T/run/run.yaml"
S=$T/run/stages

# ---- release ----
for spec in "ar $S/ar ema tiny_ar" "k2 $S/k2 ema tiny_mtp" "k2raw $S/k2/ckpt/step-6 raw tiny_mtp"; do
  set -- $spec
  name=$1 src=$2 w=$3 golden=tests/golden/release_keys/$4.txt
  "$KF" export "$src" --weights "$w" --to release --out "$T/rel_$name" >"$T/out" 2>&1; rc=$?
  check "release $name: export rc $rc: $(cat "$T/out")" [ $rc -eq 0 ]
  ck=$(ls "$T/rel_$name"/*.ckpt 2>/dev/null | head -1)
  check "release $name: one .ckpt in the folder: $(ls "$T/rel_$name")" [ -n "$ck" ]
  [ -n "$ck" ] || continue
  # the weights the export started from, independently of the folder's copy
  want=$src/final/model.safetensors
  [ "$name" = k2raw ] && want=$src/model.safetensors
  check "release $name: DIR/model.safetensors holds the source weights" \
    "$PY" -c 'import sys; sys.path.insert(0, "tools"); import ref_model as r, torch
a, _ = r.read_safetensors(sys.argv[1]); b, _ = r.read_safetensors(sys.argv[2])
sys.exit(0 if list(a) == list(b) and all(torch.equal(a[k].view(torch.int32), b[k].view(torch.int32)) for k in a) else 1)' \
    "$want" "$T/rel_$name/model.safetensors"
  # 1. round trip through the importer (no --heads/--k-train/--seq-len: from the file)
  "$PY" tools/convert_ckpt.py "$ck" "$T/back_$name.safetensors" --mask-id 29 >"$T/out" 2>&1; rc=$?
  check "release $name: convert_ckpt rc $rc: $(cat "$T/out")" [ $rc -eq 0 ]
  "$PY" - "$want" "$T/back_$name.safetensors" >"$T/out" 2>&1 <<'EOF'
import sys, torch
sys.path.insert(0, "tools")
import ref_model as r
a, ma = r.read_safetensors(sys.argv[1])
b, mb = r.read_safetensors(sys.argv[2])
bad = [k for k in a if k not in b or a[k].shape != b[k].shape or not torch.equal(a[k].view(torch.int32), b[k].view(torch.int32))]
extra = [k for k in b if k not in a]
meta = [k for k in ("kf.hidden", "kf.heads", "kf.blocks", "kf.vocab", "kf.mask_id", "kf.seq_len", "kf.kind", "kf.k_train") if ma[k] != mb[k]]
print(f"{len(a)} tensors; not bitwise equal: {bad[:4]}; extra: {extra[:4]}; metadata differing: {[(k, ma[k], mb[k]) for k in meta]}")
sys.exit(1 if bad or extra or meta else 0)
EOF
  check "release $name: round trip bitwise: $(cat "$T/out")" [ $? -eq 0 ]
  # 2. key set, order and shapes against the released classes'
  "$PY" - "$ck" "$golden" >"$T/out" 2>&1 <<'EOF'
import sys, torch
ck = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
got = [(k[len("backbone."):] if k.startswith("backbone.") else "NO-PREFIX:" + k, list(v.shape), v.dtype)
       for k, v in ck["state_dict"].items()]
want = [(l.split()[0], [int(x) for x in l.split()[1:]], torch.float32) for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")]
if got != want:
    diff = [(g, w) for g, w in zip(got, want) if g != w][:3]
    print(f"got {len(got)} keys, want {len(want)}; first differences {diff}; "
          f"missing {sorted(set(w[0] for w in want) - set(g[0] for g in got))[:4]}")
    sys.exit(1)
print(f"{len(got)} keys as the released class")
EOF
  check "release $name: keys and shapes vs $golden: $(cat "$T/out")" [ $? -eq 0 ]
  # 3. the reference model built from the .ckpt's own state_dict vs kf's logits
  "$PY" - "$ck" "$T/probe_$name.safetensors" >"$T/out" 2>&1 <<'EOF'
import sys, torch
sys.path.insert(0, "tools")
import ref_model as r
ck = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
sd = {k[len("backbone."):]: v for k, v in ck["state_dict"].items()}
V, H = sd["vocab_embed.embedding"].shape
pflm = "noise_encoder.norm.weight" in sd
heads = H // (2 * sd["rotary_emb.inv_freq"].numel())
blocks = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
m = r.DDiT(H, heads, blocks, V, ck["hyper_parameters"]["mask_index"], pflm)
m.load_state_dict(sd, strict=True)
g = torch.Generator().manual_seed(7)
if pflm:
    n, k = 5, ck["hyper_parameters"]["k"]
    ids = torch.randint(0, V, (3, n + n * k), generator=g)
    z = torch.rand(3, n + n * k, generator=g, dtype=torch.float64)
    r.write_probe(sys.argv[2], m, ("single", n, k), ids, z, torch.tensor([1.0, 0.6, 0.1], dtype=torch.float64))
else:
    r.write_probe(sys.argv[2], m, ("ar", 14), torch.randint(0, V, (3, 14), generator=g))
EOF
  check "release $name: probe from the .ckpt: $(cat "$T/out")" [ $? -eq 0 ]
  "$KF" import "$want" --probe "$T/probe_$name.safetensors" --tol 1e-5 >"$T/out" 2>&1; rc=$?
  cat "$T/out"
  check "release $name: kf's logits within 1e-5 of the .ckpt's reference model (rc $rc)" \
    exits_saying $rc 0 "$T/out" 'max \|diff\|'
done
# the .ckpt of the EMA and of the raw weights differ (the flag chose them)
check "release: --weights raw and ema give different weights" \
  eval "! cmp -s '$T/rel_k2/model.safetensors' '$T/rel_k2raw/model.safetensors'"

# LM1B and OWT: the released classes' lists at full size equal the reference
# model's state_dict (what release_ckpt.py writes), in order
"$PY" - >"$T/out" 2>&1 <<'EOF'
import sys, torch
sys.path.insert(0, "tools")
import ref_model as r
torch.nn.init.kaiming_uniform_ = lambda t, *a, **k: t  # shapes only: skip the init
torch.nn.Linear.reset_parameters = lambda self: None
bad = []
for name, V in (("lm1b", 30522), ("owt", 50258)):
    for kind in ("ar", "mtp"):
        m = r.DDiT(768, 12, 12, V, -1, kind == "mtp")
        got = [(k, list(v.shape)) for k, v in m.state_dict().items()]
        want = [(l.split()[0], [int(x) for x in l.split()[1:]])
                for l in open(f"tests/golden/release_keys/{name}_{kind}.txt") if l.strip() and not l.startswith("#")]
        if got != want:
            bad.append(f"{name}_{kind}")
print("differ:", bad)
sys.exit(1 if bad else 0)
EOF
check "LM1B/OWT key lists: $(cat "$T/out")" [ $? -eq 0 ]
# a model with the LM1B (BERT) and OWT (GPT-2 + mask) vocabularies: the
# importer recovers the mask id from the vocabulary alone
for spec in "lm1b 30522 103" "owt 50258 50257"; do
  set -- $spec
  "$PY" - "$T/$1.safetensors" "$2" "$3" <<'EOF'
import sys, torch
sys.path.insert(0, "tools")
import ref_model as r
V, mask = int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(V)
m = r.DDiT(16, 1, 1, V, mask, True)
t = {k: torch.randn(v.shape) for k, v in m.state_dict().items() if k != "rotary_emb.inv_freq"}
r.write_safetensors(sys.argv[1], t, {"kf.hidden": 16, "kf.heads": 1, "kf.blocks": 1, "kf.vocab": V, "kf.mask_id": mask,
    "kf.seq_len": 128, "kf.k_train": 4, "kf.kind": "pflm", "kf.head": "shared", "format": "pt"})
EOF
  "$KF" export "$T/$1.safetensors" --to release --out "$T/rel_$1" >"$T/out" 2>&1; rc=$?
  check "$1 vocabulary: export rc $rc: $(cat "$T/out")" [ $rc -eq 0 ]
  "$PY" tools/convert_ckpt.py "$T/rel_$1/pflm_model_k4.ckpt" "$T/back_$1.safetensors" >"$T/out" 2>&1
  check "$1 vocabulary: mask id $3 and k 4 recovered: $(cat "$T/out")" grep -q "mask_id=$3 seq_len=128 k_train=4" "$T/out"
done

# ---- hf ----
"$KF" export "$S/k2" --to hf --vocab "$T/voc" --out "$T/hf_k2" >"$T/out" 2>&1; rc=$?
check "hf k2: export rc $rc: $(cat "$T/out")" [ $rc -eq 0 ]
"$KF" export "$S/ar" --to hf --vocab "$T/voc" --out "$T/hf_ar" >"$T/out" 2>&1; rc=$?
check "hf ar: export rc $rc: $(cat "$T/out")" [ $rc -eq 0 ]
for f in model.safetensors config.json vocab.txt tokenizer_config.json README.md; do
  check "hf k2: $f written" [ -s "$T/hf_k2/$f" ]
done
"$PY" - "$T/hf_k2/config.json" >"$T/out" 2>&1 <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "kforcing-ddit", "kind": "pflm", "hidden_size": 32, "num_attention_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 30, "k": 2, "mask_token_id": 29, "eos_token_id": 5,
        "bos_token_id": 4, "max_position_embeddings": 16, "tokenizer": "bert-uncased", "weights": "ema",
        "stage": "k2", "step": 6,
        "stage_chain": [{"name": "ar", "kind": "ar", "k": 1, "steps": 12}, {"name": "k2", "kind": "distill_ar", "k": 2, "steps": 6}]}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
print("differ (got, want):", bad)
sys.exit(1 if bad else 0)
EOF
check "hf k2: config.json: $(cat "$T/out")" [ $? -eq 0 ]
check "hf: vocab.txt copied" cmp -s "$T/voc/vocab.txt" "$T/hf_k2/vocab.txt"
# the card's validation row is the stage log's last validation
vl=$("$PY" -c 'import json,sys; print("%.4f" % [j for j in map(json.loads, open(sys.argv[1])) if "val_loss" in j][-1]["val_loss"])' "$S/k2/log.jsonl")
check "hf k2: model card stage table has k2's validation loss $vl: $(grep '^| k2' "$T/hf_k2/README.md")" \
  grep -q "^| k2 | distill_ar | 2 | 6 | $vl (step 6)" "$T/hf_k2/README.md"
check "hf k2: model card names the data and precision" \
  eval "grep -q 'data: \`$T/shards\`' '$T/hf_k2/README.md' && grep -q 'precision: fp16 until step 6, fp32' '$T/hf_k2/README.md'"
for name in ar k2; do
  "$PY" tools/hf_load.py "$T/hf_$name" --probe "$T/hfprobe_$name.safetensors" --seed 3 >"$T/out" 2>&1
  check "hf $name: hf_load.py probe: $(cat "$T/out")" [ $? -eq 0 ]
  "$KF" import "$T/hf_$name/model.safetensors" --probe "$T/hfprobe_$name.safetensors" --tol 1e-5 >"$T/out" 2>&1; rc=$?
  cat "$T/out"
  check "hf $name: kf's logits within 1e-5 of hf_load.py's model (rc $rc)" exits_saying $rc 0 "$T/out" 'max \|diff\|'
done
echo '{"prefix": [4, 9, 12]}' > "$T/pre.jsonl"
"$KF" sample "$S/ar/final" --prefix-file "$T/pre.jsonl" --max-new 12 --tau 0.0001 >"$T/kf.jsonl" 2>"$T/err"
"$PY" tools/hf_load.py "$T/hf_ar" --prefix 4,9,12 --max-new 12 --greedy >"$T/hf.jsonl" 2>&1
kfc=$("$PY" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["completion"])' "$T/kf.jsonl" 2>&1)
hfc=$("$PY" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["completion"])' "$T/hf.jsonl" 2>&1)
check "hf ar: hf_load.py greedy = kf sample at tau 1e-4 (hf $hfc, kf $kfc)" eval "[ '$hfc' = '$kfc' ] && [ -n '$hfc' ]"
for seed in 1 1 2; do
  "$PY" tools/hf_load.py "$T/hf_k2" --prefix 4,9 --max-new 8 --seed $seed >>"$T/pf.jsonl" 2>&1
done
"$PY" - "$T/pf.jsonl" >"$T/out" 2>&1 <<'EOF'
import json, sys
r = [json.loads(l)["completion"] for l in open(sys.argv[1])]
ok = all(len(c) == 8 and all(0 <= t < 29 for t in c) for c in r) and r[0] == r[1]
print(r)
sys.exit(0 if ok else 1)
EOF
check "hf k2: PFLM decoding gives 8 tokens, the same for the same seed: $(cat "$T/out")" [ $? -eq 0 ]

# ---- errors ----
"$KF" export "$S/mtp" --to release --out "$T/e1" >"$T/out" 2>&1; rc=$?
check "MTP-head PFLM to release refused (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" 'MTP heads.*cannot be exported to the released'
"$KF" export "$S/mtp" --to hf --vocab "$T/voc" --out "$T/e1" >"$T/out" 2>&1; rc=$?
check "MTP-head PFLM to hf refused (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" 'cannot be exported to the hf layout'
check "a refused export leaves no folder" eval "[ ! -e '$T/e1' ] && [ ! -e '$T/e1.tmp' ]"
cp -r "$S/ar/final" "$T/oddkind"
sed -i 's/^kind: "ar"/kind: "diffusion"/' "$T/oddkind/final.yaml"
"$KF" export "$T/oddkind" --to release --out "$T/e2" >"$T/out" 2>&1; rc=$?
check "unknown stage kind (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" "final.yaml: stage kind 'diffusion' is not one kf knows"
"$KF" export "$S/ar" --weights raw --to release --out "$T/e3" >"$T/out" 2>&1; rc=$?
check "raw weights of final/ (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" 'EMA weights only'
"$KF" export "$S/ar" --to tensorboard --out "$T/e4" >"$T/out" 2>&1; rc=$?
check "unknown format (rc $rc): $(cat "$T/out")" exits_saying $rc 2 "$T/out" 'unknown format'
"$KF" export "$S/ar" --to release --out "$T/rel_ar" >"$T/out" 2>&1; rc=$?
check "existing --out (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" 'pass --force'
"$KF" export "$S/ar" --to release --out "$T/rel_ar" --force >"$T/out" 2>&1; rc=$?
check "--force replaces it (rc $rc): $(cat "$T/out")" eval "[ $rc -eq 0 ] && [ ! -e '$T/rel_ar.old' ]"
"$KF" export "$S/ar" --to hf --out "$T/e5" >"$T/out" 2>&1; rc=$?
check "hf without --vocab (rc $rc): $(cat "$T/out")" exits_saying $rc 2 "$T/out" 'needs --vocab'
mkdir -p "$T/voc2" && sed 's/^fish$/trout/' "$T/voc/vocab.txt" > "$T/voc2/vocab.txt"
"$KF" export "$S/ar" --to hf --vocab "$T/voc2" --out "$T/e6" >"$T/out" 2>&1; rc=$?
check "a vocabulary the stage did not train on (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" 'is not the one stage'
"$KF" export --help >"$T/out" 2>&1; rc=$?
check "--help (rc $rc)" exits_saying $rc 0 "$T/out" '^usage: kf export'
"$KF" --help >"$T/out" 2>&1
check "kf --help lists export" grep -q '^  export ' "$T/out"

finish
