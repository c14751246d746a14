#!/usr/bin/env python3
"""tools/convert_ckpt.py — released PyTorch Lightning checkpoints -> kforcing safetensors.

Converts MDLM's AR OpenWebText checkpoint, MDLM's masked-diffusion
checkpoint (kuleshov-group/mdlm-owt) and K-Forcing's ar_openwebtxt.ckpt,
ar_best_lm1b.ckpt, pflm_owt_k4.ckpt, pflm_lm1b_k4.ckpt (or any checkpoint of
the same architecture) into the checkpoint `kf` loads (trainer/model/model.h,
trainer/model/model_io.c): float32 tensors with the reference names and the model
config in the safetensors metadata ("kf.hidden", "kf.heads", "kf.blocks",
"kf.vocab", "kf.mask_id", "kf.seq_len", "kf.kind", "kf.head", "kf.k_train").

  python3 tools/convert_ckpt.py pflm_owt_k4.ckpt pflm_owt_k4.safetensors
  kf import pflm_owt_k4.safetensors --run-dir RUN --stage k4

Weights: the EMA weights when the checkpoint has them (the ones MDLM's
evaluation uses), else the raw state_dict (--no-ema forces the raw weights;
K-Forcing's released loader, utils/checkpoint.py, reads the state_dict only,
so --no-ema reproduces its sampler when a checkpoint carries an EMA). MDLM
keeps its EMA outside the state_dict, as ExponentialMovingAverage.state_dict()
under checkpoint["ema"]: {"decay", "num_updates", "shadow_params": [...]},
shadow_params in the order of the LightningModule's parameters() — the
backbone's first (then e.g. the noise schedule's, ignored here). The list is
mapped onto the backbone's parameters in state_dict order with buffers (RoPE's
inv_freq) left out, and every shape is checked. A dict {name: tensor} under
"ema" is accepted too.

Config: hidden, vocab and blocks come from the tensor shapes; heads from the
RoPE buffer rotary_emb.inv_freq (head dim = 2 * its length), as the released
loader (K-Forcing utils/checkpoint.py) infers it; seq_len and k_train from the
checkpoint's hyper_parameters (config.model.length, k) when present. The
command line overrides all of these (a --heads that contradicts inv_freq is
warned about); without either: heads = hidden / 64 (the reference head dim),
seq_len 1024 for a GPT-2 vocabulary and 128 otherwise, k_train from a "_k<N>"
in the file name.
mask_id: the reference appends a mask token to GPT-2 (V = 50258, mask 50257);
bert-base-uncased has [MASK] = 103; --mask-id overrides (-1: none).

MDLM's diffusion DiT (a checkpoint with sigma_map.* and adaLN_modulation.*;
tools/ref_model.py MDLMDiT) is trained with time_conditioning off: MDLM
replaces sigma by zeros before the backbone, so its conditioning vector
c = silu(sigma_map(0)) and every adaLN output are constants of the weights.
They are folded, in float64, into the one model with biased LayerNorms
(kf.norm_bias 1) and bidirectional attention (kf.attn bidirectional):
norm1 weight * (1 + scale_msa), bias shift_msa; attn_out rows * gate_msa;
norm2 weight * (1 + scale_mlp), bias shift_mlp; mlp.2 rows and bias *
gate_mlp; norm_final weight * (1 + scale), bias shift. The mask logit, which
MDLM's SUBS parameterisation sets to -inf, is kf's -1000 (probability 0
either way).

--probe P.safetensors also runs tools/ref_model.py's PyTorch model on the
converted weights over a fixed input and writes its logits, so that
`kf import CKPT --probe P` checks our C implementation reproduces them.

Loading the pickle needs torch (scripts/setup.sh installs Debian's
python3-torch: run this with /usr/bin/python3 where another python3 comes first
on PATH). Checkpoints that pickled classes from packages not installed here
(omegaconf configs in hyper_parameters) load through a permissive unpickler
that turns unknown classes into plain placeholders.
"""
import argparse
import os
import pickle
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_model  # noqa: E402

BUFFERS = ("rotary_emb.inv_freq",)


class _Placeholder(dict):
    """Stands in for a pickled class whose module is missing (omegaconf ...)."""

    def __init__(self, *a, **k):
        super().__init__()

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.update(state)
        elif isinstance(state, tuple) and state and isinstance(state[-1], dict):
            self.update(state[-1])

    @classmethod
    def _new(cls, *a, **k):
        return cls()


class _PermissiveUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return _Placeholder


class _PermissivePickle:
    Unpickler = _PermissiveUnpickler
    load = pickle.load
    __name__ = "pickle"


def load_checkpoint(path):
    """A Lightning .ckpt, a torch state_dict file, or a safetensors state_dict
    (a Hugging Face snapshot directory holding model.safetensors, as
    PyTorchModelHubMixin saves kuleshov-group/mdlm-owt)."""
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    if path.endswith(".safetensors"):
        return {"state_dict": ref_model.read_safetensors(path)[0]}
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (ImportError, AttributeError, ModuleNotFoundError):
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_PermissivePickle)


def _unwrap(d):
    """An omegaconf node loaded as a _Placeholder keeps its state: a DictConfig
    its children under "_content", a ValueNode its value under "_val"."""
    while isinstance(d, _Placeholder) and ("_content" in d or "_val" in d):
        d = d.get("_content", d.get("_val"))
    return d


def _get(d, *keys):
    """d[k0][k1]... through dicts, attribute objects and omegaconf
    placeholders; None when absent."""
    for k in keys:
        d = _unwrap(d)
        if d is None:
            return None
        if isinstance(d, dict):
            d = d.get(k)
        else:
            d = getattr(d, k, None)
    return _unwrap(d)


def expected_names(H, blocks, pflm):
    """Our tensor names and order (trainer/model/model.h)."""
    names = ["vocab_embed.embedding"]
    for b in range(blocks):
        p = f"blocks.{b}."
        names += [p + "norm1.weight", p + "attn_qkv.weight", p + "attn_out.weight", p + "norm2.weight",
                  p + "mlp.0.weight", p + "mlp.0.bias", p + "mlp.2.weight", p + "mlp.2.bias"]
    names += ["output_layer.norm_final.weight", "output_layer.linear.weight", "output_layer.linear.bias"]
    if pflm:
        names += ["noise_encoder.combined_proj.weight", "noise_encoder.combined_proj.bias",
                  "noise_encoder.norm.weight", "noise_encoder.norm.bias",
                  "noise_encoder.mlp.0.weight", "noise_encoder.mlp.0.bias",
                  "noise_encoder.mlp.2.weight", "noise_encoder.mlp.2.bias"]
    return names


def fold_mdlm(state, blocks):
    """MDLM's diffusion DiT with its constant adaLN folded in: (tensors in
    kf's order with norm biases, description)."""
    d = {k: v.detach().to(torch.float64) for k, v in state.items() if torch.is_tensor(v)}
    freq_dim = d["sigma_map.mlp.0.weight"].shape[1]
    t_freq = torch.cat([torch.ones(freq_dim // 2), torch.zeros(freq_dim // 2)]).double()  # t = 0
    h = d["sigma_map.mlp.0.weight"] @ t_freq + d["sigma_map.mlp.0.bias"]
    h = torch.nn.functional.silu(h)
    c = torch.nn.functional.silu(d["sigma_map.mlp.2.weight"] @ h + d["sigma_map.mlp.2.bias"])
    out = {"vocab_embed.embedding": d["vocab_embed.embedding"]}
    for b in range(blocks):
        p = f"blocks.{b}."
        sh1, sc1, g1, sh2, sc2, g2 = (d[p + "adaLN_modulation.weight"] @ c + d[p + "adaLN_modulation.bias"]).chunk(6)
        out[p + "norm1.weight"] = d[p + "norm1.weight"] * (1 + sc1)
        out[p + "norm1.bias"] = sh1
        out[p + "attn_qkv.weight"] = d[p + "attn_qkv.weight"]
        out[p + "attn_out.weight"] = g1[:, None] * d[p + "attn_out.weight"]
        out[p + "norm2.weight"] = d[p + "norm2.weight"] * (1 + sc2)
        out[p + "norm2.bias"] = sh2
        out[p + "mlp.0.weight"] = d[p + "mlp.0.weight"]
        out[p + "mlp.0.bias"] = d[p + "mlp.0.bias"]
        out[p + "mlp.2.weight"] = g2[:, None] * d[p + "mlp.2.weight"]
        out[p + "mlp.2.bias"] = g2 * d[p + "mlp.2.bias"]
    shift, scale = (d["output_layer.adaLN_modulation.weight"] @ c + d["output_layer.adaLN_modulation.bias"]).chunk(2)
    out["output_layer.norm_final.weight"] = d["output_layer.norm_final.weight"] * (1 + scale)
    out["output_layer.norm_final.bias"] = shift
    out["output_layer.linear.weight"] = d["output_layer.linear.weight"]
    out["output_layer.linear.bias"] = d["output_layer.linear.bias"]
    return {k: v.to(torch.float32).contiguous() for k, v in out.items()}, \
        "adaLN folded at sigma = 0 (time conditioning off)"


def backbone_state(ck):
    """The backbone's state_dict (prefix stripped), in its original order."""
    sd = ck.get("state_dict", ck) if isinstance(ck, dict) else None
    if not isinstance(sd, dict):
        sys.exit("convert_ckpt: no state_dict in the checkpoint")
    out = {k[len("backbone."):]: v for k, v in sd.items() if k.startswith("backbone.")}
    if not out:
        out = {k: v for k, v in sd.items() if torch.is_tensor(v)}
    if "vocab_embed.embedding" not in out:
        sys.exit("convert_ckpt: no backbone.vocab_embed.embedding: not a DDiT checkpoint")
    return out


def apply_ema(state, ema):
    """Replaces state's parameters by the EMA's. Returns a description."""
    if isinstance(ema, dict) and "shadow_params" in ema:
        shadow = list(ema["shadow_params"])
        params = [k for k in state if not k.endswith(BUFFERS)]
        if len(shadow) < len(params):
            sys.exit(f"convert_ckpt: EMA has {len(shadow)} shadow params, the backbone {len(params)}")
        for k, s in zip(params, shadow):
            if tuple(s.shape) != tuple(state[k].shape):
                sys.exit(f"convert_ckpt: EMA shadow param for {k} has shape {tuple(s.shape)}, "
                         f"expected {tuple(state[k].shape)}: parameter order does not match")
            state[k] = s
        extra = len(shadow) - len(params)
        return f"EMA (shadow_params, {len(params)} mapped" + (f", {extra} non-backbone ignored)" if extra else ")")
    if isinstance(ema, dict) and all(torch.is_tensor(v) for v in ema.values()):
        n = 0
        for k, v in ema.items():
            k2 = k[len("backbone."):] if k.startswith("backbone.") else k
            if k2 in state:
                state[k2], n = v, n + 1
        return f"EMA (dict, {n} tensors)"
    sys.exit("convert_ckpt: checkpoint['ema'] has an unknown layout (expected shadow_params or a dict)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt", help="Lightning .ckpt, a torch state_dict file, a .safetensors "
                    "state_dict or a Hugging Face snapshot directory (model.safetensors)")
    ap.add_argument("out", help="output .safetensors")
    ap.add_argument("--no-ema", action="store_true", help="use the raw weights even when an EMA exists")
    ap.add_argument("--heads", type=int)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--k-train", type=int)
    ap.add_argument("--mask-id", type=int)
    ap.add_argument("--probe", help="also write reference logits of the converted model here")
    a = ap.parse_args(argv)

    ck = load_checkpoint(a.ckpt)
    state = backbone_state(ck)
    ema = ck.get("ema") if isinstance(ck, dict) else None
    source = "raw weights"
    if ema is not None and not a.no_ema:
        source = apply_ema(state, ema)
    elif ema is None:
        source = "raw weights (no EMA in the checkpoint)"

    V, H = state["vocab_embed.embedding"].shape
    blocks = 1 + max(int(m.group(1)) for k in state for m in [re.match(r"blocks\.(\d+)\.", k)] if m)
    if any(k.startswith("mtp_heads.") for k in state):
        sys.exit("convert_ckpt: MTP-head checkpoints are not a released format; not supported")
    pflm = any(k.startswith("noise_encoder.") for k in state)
    mdlm = "sigma_map.mlp.0.weight" in state and "blocks.0.adaLN_modulation.weight" in state
    if mdlm and pflm:
        sys.exit("convert_ckpt: a checkpoint with both adaLN modulation and a noise encoder")
    hp = ck.get("hyper_parameters") if isinstance(ck, dict) else None
    model_hp = _get(hp, "config", "model")
    inv_freq = state.get("rotary_emb.inv_freq")
    rope_heads = H // (2 * inv_freq.numel()) if inv_freq is not None and inv_freq.numel() else None
    heads = a.heads or rope_heads or _get(model_hp, "n_heads") or H // 64
    if rope_heads and heads != rope_heads:
        print(f"convert_ckpt: warning: --heads {heads} contradicts rotary_emb.inv_freq "
              f"(head dim {2 * inv_freq.numel()}, {rope_heads} heads)", file=sys.stderr)
    seq_len = a.seq_len or _get(model_hp, "length") or _get(hp, "config", "model", "length") or \
        (1024 if V >= 50257 else 128)
    k_train = 1
    if pflm:
        m = re.search(r"_k(\d+)", os.path.basename(a.ckpt))
        k_train = a.k_train or _get(hp, "k") or _get(hp, "config", "k") or (int(m.group(1)) if m else None)
        if not k_train:
            sys.exit("convert_ckpt: a PFLM checkpoint needs --k-train (no _k<N> in its name, none in hparams)")
    mask_id = a.mask_id if a.mask_id is not None else 50257 if V == 50258 else 103 if V == 30522 else -1
    if H % heads or (H // heads) % 2:
        sys.exit(f"convert_ckpt: hidden {H} does not split into {heads} heads of even size")
    if rope_heads:  # kf computes RoPE with base 10000 and does not store inv_freq
        want = ref_model.Rotary(H // rope_heads).inv_freq
        if not torch.allclose(inv_freq.double(), want.double(), rtol=1e-6, atol=0):
            sys.exit("convert_ckpt: rotary_emb.inv_freq is not RoPE's with base 10000")

    names = expected_names(H, blocks, pflm)
    if mdlm:
        names += ["sigma_map.mlp.0.weight", "sigma_map.mlp.0.bias", "sigma_map.mlp.2.weight",
                  "sigma_map.mlp.2.bias", "output_layer.adaLN_modulation.weight",
                  "output_layer.adaLN_modulation.bias"]
        names += [f"blocks.{b}.adaLN_modulation.{w}" for b in range(blocks) for w in ("weight", "bias")]
    missing = [n for n in names if n not in state]
    if missing:
        sys.exit(f"convert_ckpt: tensors missing from the checkpoint: {', '.join(missing[:8])}")
    ignored = [k for k in state if k not in names and not k.endswith(BUFFERS)]
    if mdlm:
        tensors, how = fold_mdlm(state, blocks)
        source += "; " + how
    else:
        tensors = {n: state[n].detach().to(torch.float32).contiguous() for n in names}
    meta = {"kf.hidden": H, "kf.heads": heads, "kf.blocks": blocks, "kf.vocab": V, "kf.mask_id": mask_id,
            "kf.seq_len": seq_len, "kf.kind": "pflm" if pflm else "ar", "kf.head": "shared",
            "kf.k_train": k_train, "format": "pt", "kf.source": os.path.basename(a.ckpt),
            "kf.weights": source}
    if mdlm:  # the format-2 architecture keys: biased norms, bidirectional attention
        meta.update({"kf.version": 2, "kf.pos": "rope", "kf.n_positions": 0, "kf.tied_head": 0,
                     "kf.norm_bias": 1, "kf.attn_bias": 0, "kf.attn": "bidirectional"})
    tmp = a.out + ".tmp"
    ref_model.write_safetensors(tmp, tensors, meta)
    os.replace(tmp, a.out)
    print(f"{a.out}: {'PFLM' if pflm else 'MDLM' if mdlm else 'AR'} H={H} heads={heads} blocks={blocks} V={V} "
          f"mask_id={mask_id} seq_len={seq_len} k_train={k_train}; {source}"
          + (f"; ignored {len(ignored)} tensors ({', '.join(ignored[:4])})" if ignored else ""))

    if a.probe:
        g = torch.Generator().manual_seed(0)
        if mdlm:  # the unfolded model, as MDLM runs it
            cond = state["sigma_map.mlp.0.weight"].shape[0]
            model = ref_model.MDLMDiT(H, heads, blocks, V, cond, mask_id)
            model.load_state_dict({k: v for k, v in state.items() if k in dict(model.state_dict())}, strict=True)
            ids = torch.randint(0, V, (2, 16), generator=g)
            ref_model.write_probe(a.probe, model, ("bidir", 16), ids)
            print(f"{a.probe}: reference logits for `kf import {a.out} --probe {a.probe}`")
            return
        model = ref_model.DDiT(H, heads, blocks, V, mask_id, pflm)
        model.load_state_dict({**tensors, "rotary_emb.inv_freq": model.rotary_emb.inv_freq}, strict=True)
        if pflm:
            n, k = 8, k_train
            ids = torch.randint(0, V, (2, n + n * k), generator=g)
            z = torch.rand(2, n + n * k, generator=g, dtype=torch.float64)
            tau = torch.tensor([1.0, 0.5], dtype=torch.float64)
            ref_model.write_probe(a.probe, model, ("single", n, k), ids, z, tau)
        else:
            ids = torch.randint(0, V, (2, 16), generator=g)
            ref_model.write_probe(a.probe, model, ("ar", 16), ids)
        print(f"{a.probe}: reference logits for `kf import {a.out} --probe {a.probe}`")


if __name__ == "__main__":
    main()
