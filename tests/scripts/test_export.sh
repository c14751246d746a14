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
#   `kf sample`'s at tau 1e-4, its PFLM decoding is seeded. The chain runs
#   with the release's noise encoder (noise_cycles 0, which the release
#   layout needs); a second one with kf's default (64) goes to hf, and its
#   logits match too, and to release, which refuses it.
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
cp "$T/cfg.yaml" "$T/cfg64.yaml"   # kf's default noise encoder (64)
sed -i 's/^model: {\(.*\)}$/model: {\1, noise_cycles: 0}/' "$T/cfg.yaml"
# an MTP-head stage too (it cannot be exported to either layout)
sed -i 's/^  - {name: k2, kind: distill_ar.*/&\n  - {name: mtp, kind: noise_inversion_mtp, teacher: ar, k: 2, steps: 2, tau: [1.0, 1.0]}/' "$T/cfg.yaml"
for spec in "cfg run ar" "cfg run k2" "cfg run mtp" "cfg64 run64 ar" "cfg64 run64 k2"; do
  set -- $spec
  "$KF" train "$T/$1.yaml" --stage $3 --run-dir "$T/$2" >"$T/train_$2_$3.log" 2>&1 ||
    { bad "training $2 stage $3: $(tail -3 "$T/train_$2_$3.log")"; finish; exit 1; }
done
cp "$T/cfg.yaml" "$T/run/run.yaml"
cp "$T/cfg64.yaml" "$T/run64/run.yaml"
S=$T/run/stages S64=$T/run64/stages
check "the second chain's PFLM has kf's default encoder (64)" \
  grep -q '"kf.noise_cycles":"64"' "$S64/k2/final/model.safetensors"

# Python checks print "ok MSG" or "FAIL MSG" lines; each counts once. One
# interpreter per block: importing torch takes seconds on a loaded machine.
pychecks() {
  local out rc line
  out=$("$PY" - "$@" 2>&1); rc=$?
  while IFS= read -r line; do
    case $line in "ok "*) ok ;; "FAIL "*) bad "${line#FAIL }" ;; esac
  done <<<"$out"
  [ $rc -eq 0 ] || bad "python exited $rc: $(tail -n 4 <<<"$out")"
}

# ---- release ----
for spec in "ar $S/ar ema tiny_ar $S/ar/final/model.safetensors" \
            "k2 $S/k2 ema tiny_mtp $S/k2/final/model.safetensors" \
            "k2raw $S/k2/ckpt/step-6 raw tiny_mtp $S/k2/ckpt/step-6/model.safetensors"; do
  set -- $spec
  name=$1 src=$2 w=$3 golden=tests/golden/release_keys/$4.txt want=$5
  "$KF" export "$src" --weights "$w" --to release --out "$T/rel_$name" >"$T/out" 2>&1; rc=$?
  check "release $name: export rc $rc: $(cat "$T/out")" [ $rc -eq 0 ]
  ck=$(ls "$T/rel_$name"/*.ckpt 2>/dev/null | head -1)
  check "release $name: one .ckpt in the folder: $(ls "$T/rel_$name")" [ -n "$ck" ]
  [ -n "$ck" ] || continue
  # want: the weights the export started from, read independently of the folder
  pychecks "$name" "$ck" "$want" "$T/rel_$name/model.safetensors" "$golden" "$T/probe_$name.safetensors" \
    "$T/back_$name.safetensors" <<'EOF'
import sys, io, contextlib, torch
sys.path.insert(0, "tools")
import convert_ckpt, ref_model as r
name, ck_path, want, copy, golden, probe, back = sys.argv[1:]
def check(cond, msg):
    print(("ok " if cond else "FAIL ") + f"release {name}: {msg}")
def differing(a, b):
    return [k for k in a if k not in b or a[k].shape != b[k].shape
            or not torch.equal(a[k].view(torch.int32), b[k].view(torch.int32))] + [k for k in b if k not in a]
src, msrc = r.read_safetensors(want)
d = differing(src, r.read_safetensors(copy)[0])
check(not d, f"DIR/model.safetensors holds the source weights (differing: {d[:4]})")
# 1. round trip through the importer (no --heads/--k-train/--seq-len: from the file)
with contextlib.redirect_stdout(io.StringIO()):
    convert_ckpt.main([ck_path, back, "--mask-id", "29"])
b, mb = r.read_safetensors(back)
d = differing(src, b)
check(not d, f"round trip: {len(src)} tensors bitwise equal (differing: {d[:4]})")
meta = [(k, msrc[k], mb[k]) for k in ("kf.hidden", "kf.heads", "kf.blocks", "kf.vocab", "kf.mask_id",
                                      "kf.seq_len", "kf.kind", "kf.k_train") if msrc[k] != mb[k]]
check(not meta, f"round trip: config recovered (differing: {meta})")
# 2. key set, order, shapes and dtype against the released classes'
ck = torch.load(ck_path, map_location="cpu", weights_only=True)
got = [(k[len("backbone."):] if k.startswith("backbone.") else "NO-PREFIX:" + k, list(v.shape), v.dtype)
       for k, v in ck["state_dict"].items()]
exp = [(l.split()[0], [int(x) for x in l.split()[1:]], torch.float32)
       for l in open(golden) if l.strip() and not l.startswith("#")]
diff = [(g, e) for g, e in zip(got, exp) if g != e][:3]
check(got == exp, f"keys and shapes vs {golden}: got {len(got)} keys, want {len(exp)}; first differences {diff}")
# 3. the reference model built from the .ckpt's own state_dict: its logits (kf import --probe below)
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
    r.write_probe(probe, m, ("single", n, k), ids, z, torch.tensor([1.0, 0.6, 0.1], dtype=torch.float64))
else:
    r.write_probe(probe, m, ("ar", 14), torch.randint(0, V, (3, 14), generator=g))
EOF
  "$KF" import "$want" --probe "$T/probe_$name.safetensors" --tol 1e-5 >"$T/out" 2>&1; rc=$?
  cat "$T/out"
  check "release $name: kf's logits within 1e-5 of the .ckpt's reference model (rc $rc)" \
    exits_saying $rc 0 "$T/out" 'max \|diff\|'
done
# the flag chose the weights: the EMA's and the raw ones differ
check "release: --weights raw and ema give different weights" \
  eval "! cmp -s '$T/rel_k2/model.safetensors' '$T/rel_k2raw/model.safetensors'"

# LM1B and OWT: the released classes' lists at full size equal the reference
# model's state_dict (what release_ckpt.py writes), in order; and models with
# their vocabularies (BERT; GPT-2 + mask), exported, come back through the
# importer with the mask id it infers from the vocabulary alone
pychecks "$T" <<'EOF'
import sys, torch
sys.path.insert(0, "tools")
import ref_model as r
T = sys.argv[1]
init, reset = torch.nn.init.kaiming_uniform_, torch.nn.Linear.reset_parameters
torch.nn.init.kaiming_uniform_ = lambda t, *a, **k: t  # shapes only: skip the init
torch.nn.Linear.reset_parameters = lambda self: None
for name, V in (("lm1b", 30522), ("owt", 50258)):
    for kind in ("ar", "mtp"):
        m = r.DDiT(768, 12, 12, V, -1, kind == "mtp")
        got = [(k, list(v.shape)) for k, v in m.state_dict().items()]
        want = [(l.split()[0], [int(x) for x in l.split()[1:]])
                for l in open(f"tests/golden/release_keys/{name}_{kind}.txt") if l.strip() and not l.startswith("#")]
        print(("ok " if got == want else "FAIL ")
              + f"{name}_{kind}: reference state_dict = the released class's ({len(got)} vs {len(want)} keys)")
        del m
torch.nn.init.kaiming_uniform_, torch.nn.Linear.reset_parameters = init, reset
for name, V, mask in (("lm1b", 30522, 103), ("owt", 50258, 50257)):
    torch.manual_seed(V)
    m = r.DDiT(16, 1, 1, V, mask, True)
    t = {k: torch.randn(v.shape) for k, v in m.state_dict().items() if k != "rotary_emb.inv_freq"}
    r.write_safetensors(f"{T}/{name}.safetensors", t, {
        "kf.hidden": 16, "kf.heads": 1, "kf.blocks": 1, "kf.vocab": V, "kf.mask_id": mask, "kf.seq_len": 128,
        "kf.k_train": 4, "kf.kind": "pflm", "kf.head": "shared", "format": "pt"})
EOF
for name in lm1b owt; do
  "$KF" export "$T/$name.safetensors" --to release --out "$T/rel_$name" >"$T/out" 2>&1; rc=$?
  check "$name vocabulary: export rc $rc: $(cat "$T/out")" [ $rc -eq 0 ]
done
pychecks "$T" <<'EOF'
import sys, io, contextlib, torch
sys.path.insert(0, "tools")
import convert_ckpt, ref_model as r
T = sys.argv[1]
for name, mask in (("lm1b", 103), ("owt", 50257)):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        convert_ckpt.main([f"{T}/rel_{name}/pflm_model_k4.ckpt", f"{T}/back_{name}.safetensors"])
    a, b = r.read_safetensors(f"{T}/{name}.safetensors")[0], r.read_safetensors(f"{T}/back_{name}.safetensors")[0]
    same = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    print(("ok " if f"mask_id={mask} seq_len=128 k_train=4" in out.getvalue() and same else "FAIL ")
          + f"{name} vocabulary: mask id {mask}, k 4, weights recovered: {out.getvalue().strip()}")
EOF

# ---- hf ----
"$KF" export "$S/k2" --to hf --vocab "$T/voc" --out "$T/hf_k2" >"$T/out" 2>&1; rc=$?
check "hf k2: export rc $rc: $(cat "$T/out")" [ $rc -eq 0 ]
"$KF" export "$S/ar" --to hf --vocab "$T/voc" --out "$T/hf_ar" >"$T/out" 2>&1; rc=$?
check "hf ar: export rc $rc: $(cat "$T/out")" [ $rc -eq 0 ]
"$KF" export "$S64/k2" --to hf --vocab "$T/voc" --out "$T/hf_k2nc" >"$T/out" 2>&1; rc=$?
check "hf k2 with noise_cycles 64: export rc $rc: $(cat "$T/out")" [ $rc -eq 0 ]
for f in model.safetensors config.json vocab.txt tokenizer_config.json README.md; do
  check "hf k2: $f written" [ -s "$T/hf_k2/$f" ]
done
check "hf: vocab.txt copied" cmp -s "$T/voc/vocab.txt" "$T/hf_k2/vocab.txt"
cp -r "$T/hf_k2" "$T/hf_k2_bad"
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$T/hf_k2_bad/config.json"
echo '{"prefix": [4, 9, 12]}' > "$T/pre.jsonl"
"$KF" sample "$S/ar/final" --prefix-file "$T/pre.jsonl" --max-new 12 --tau 0.0001 >"$T/kf.jsonl" 2>"$T/err"
pychecks "$T" "$S" <<'EOF'
import io, json, sys, contextlib
sys.path.insert(0, "tools")
import hf_load
T, S = sys.argv[1:]
def check(cond, msg):
    print(("ok " if cond else "FAIL ") + msg)
c = json.load(open(f"{T}/hf_k2/config.json"))
want = {"model_type": "kforcing-ddit", "kind": "pflm", "hidden_size": 32, "num_attention_heads": 2,
        "num_hidden_layers": 2, "vocab_size": 30, "k": 2, "mask_token_id": 29, "eos_token_id": 5,
        "bos_token_id": 4, "max_position_embeddings": 16, "tokenizer": "bert-uncased", "weights": "ema",
        "stage": "k2", "step": 6, "noise_cycles": 0, "kforcing_export_version": 2,
        "stage_chain": [{"name": "ar", "kind": "ar", "k": 1, "steps": 12},
                        {"name": "k2", "kind": "distill_ar", "k": 2, "steps": 6}]}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
check(not bad, f"hf k2: config.json fields (differ, got vs want: {bad})")
card = open(f"{T}/hf_k2/README.md").read()
for st, kind, k, steps in (("ar", "ar", 1, 12), ("k2", "distill_ar", 2, 6)):
    v = [j for j in map(json.loads, open(f"{S}/{st}/log.jsonl")) if "val_loss" in j][-1]
    row = f"| {st} | {kind} | {k} | {steps} | {v['val_loss']:.4f} (step {v['step']}) | {v['val_loss_ema']:.4f} |"
    check(row in card, f"hf k2: model card row {row}")
check(f"data: `{T}/shards`" in card and "precision: fp16 until step 6, fp32" in card and "weights: ema" in card,
      "hf k2: model card names data, precision and weights")
def run(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        hf_load.main(argv)
    return out.getvalue()
c = json.load(open(f"{T}/hf_k2nc/config.json"))
check(c.get("noise_cycles") == 64, f"hf k2 with noise_cycles 64: config.json noise_cycles {c.get('noise_cycles')}")
for name in ("ar", "k2", "k2nc"):
    run([f"{T}/hf_{name}", "--probe", f"{T}/hfprobe_{name}.safetensors", "--seed", "3"])
kf = json.loads(open(f"{T}/kf.jsonl").readline())["completion"]
hf = json.loads(run([f"{T}/hf_ar", "--prefix", "4,9,12", "--max-new", "12", "--greedy"]))["completion"]
check(hf == kf and len(hf) == 12, f"hf ar: hf_load.py greedy = kf sample at tau 1e-4 (hf {hf}, kf {kf})")
pf = [json.loads(run([f"{T}/hf_k2", "--prefix", "4,9", "--max-new", "9", "--seed", s]))["completion"]
      for s in ("1", "1", "2")]
check(all(len(p) == 9 and all(0 <= t < 29 for t in p) for p in pf) and pf[0] == pf[1],
      f"hf k2: PFLM decoding gives 9 tokens (k 2: 5 passes), the same for the same seed: {pf}")
try:
    hf_load.load(f"{T}/hf_k2_bad")
    check(False, "hf: a folder whose config.json contradicts its weights loads")
except ValueError as e:
    check("num_hidden_layers" in str(e), f"hf: a config.json that contradicts the weights is refused: {e}")
EOF
for name in ar k2 k2nc; do
  "$KF" import "$T/hf_$name/model.safetensors" --probe "$T/hfprobe_$name.safetensors" --tol 1e-5 >"$T/out" 2>&1; rc=$?
  cat "$T/out"
  check "hf $name: kf's logits within 1e-5 of hf_load.py's model (rc $rc)" exits_saying $rc 0 "$T/out" 'max \|diff\|'
done

# ---- errors ----
"$KF" export "$S64/k2" --to release --out "$T/e0" >"$T/out" 2>&1; rc=$?
check "noise_cycles 64 to release refused (rc $rc): $(cat "$T/out")" \
  exits_saying $rc 1 "$T/out" 'noise_cycles 64 cannot be exported to the released.*model.noise_cycles: 0'
check "the refused release export leaves no folder" eval "[ ! -e '$T/e0' ] && [ ! -e '$T/e0.tmp' ]"
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
"$KF" export "$S/ar/final" --to release --no-ckpt --out "$T/nock" >"$T/out" 2>&1; rc=$?
check "--no-ckpt: model.safetensors only, and the command (rc $rc): $(cat "$T/out"; ls "$T/nock")" \
  eval "[ $rc -eq 0 ] && [ \"\$(ls '$T/nock')\" = model.safetensors ] && grep -q 'tools/release_ckpt.py' '$T/out'"
mkdir -p "$T/empty"
"$KF" export "$T/empty" --to release --out "$T/e7" >"$T/out" 2>&1; rc=$?
check "a directory that is no checkpoint (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" 'neither a stage directory'
cp -r "$S/k2/ckpt/step-6" "$T/badstep"
printf 'X' | dd of="$T/badstep/ema.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
"$KF" export "$T/badstep" --to release --out "$T/e8" >"$T/out" 2>&1; rc=$?
check "a step-N checkpoint that does not verify (rc $rc): $(cat "$T/out")" exits_saying $rc 1 "$T/out" 'sha256|ema.safetensors'
"$KF" export --help >"$T/out" 2>&1; rc=$?
check "--help (rc $rc)" exits_saying $rc 0 "$T/out" '^usage: kf export'
"$KF" --help >"$T/out" 2>&1
check "kf --help lists export" grep -q '^  export ' "$T/out"

finish
