"""tools/ref_model.py — the reference model in PyTorch, for checking conversions.

An independent PyTorch implementation of the models kforcing trains
(docs/architecture.md "Reference model"; the released inference code,
alibaba-damo-academy/K-Forcing models/transformer.py, autoregressive.py (AR:
MDLM's causal DDiT) and pflm.py (MTP: the same blocks plus the
PointwiseNoiseEncoder)), with the released checkpoints' parameter names
(state_dict keys without the Lightning "backbone." prefix), registered in the
released modules' order (PFLM: noise_encoder before output_layer, as MTP
re-registers them), so parameters() orders an EMA's shadow_params alike:

  vocab_embed.embedding [V, H]; blocks.N.{norm1.weight, attn_qkv.weight,
  attn_out.weight, norm2.weight, mlp.0.weight/bias, mlp.2.weight/bias};
  output_layer.{norm_final.weight, linear.weight/bias}; rotary_emb.inv_freq
  (a buffer); PFLM: noise_encoder.{combined_proj, norm (LayerNorm with bias),
  mlp.0, mlp.2}.

LayerNorms without bias (eps 1e-5, fp32 or wider), RoPE rotate-half over the
whole head dim (base 10000, v untouched), tanh GELU in the blocks, erf GELU in
the noise encoder, the mask token's logit forced to -1000. Everything else runs
in the caller's dtype (float64 for probes), but two tables are computed as the
released code computes them, in float32: the RoPE angles (pos * inv_freq, both
float32, then cos/sin in float32) and the noise frequencies
10000^(-i/half) (float32, then the features in float64:
args = x * freq * 2*pi, [cos(z args), sin(z args), cos(tau args), sin(tau args)]).
With kf's noise_cycles = N >= 1 (kernels/noise_freq.h) z's frequencies are
2*pi*N^(i/(half-1)) instead, in float64, as kf computes them; tau's stay the
release's.

Row layouts (kforcing trainer/model/layout.h) are rebuilt here from their
definitions, not from kforcing's code: `ar` (causal over L tokens) and
`single` (SingleForward: n context tokens, then n groups of k noise rows; noise
j of group t sits at RoPE position t+1+j and sees context 0..t and its own
group's earlier rows).

MDLMDiT is MDLM's released diffusion backbone (kuleshov-group/mdlm
models/dit.py, the `mdlm-owt` checkpoint): the same blocks with adaLN
modulation from a conditioning vector c = silu(sigma_map(sigma)) (a
TimestepEmbedder: 256 sinusoidal features -> Linear -> SiLU -> Linear),
x = x + gate_msa * attn_out(attn(modulate(norm1(x), shift_msa, scale_msa)))
and likewise for the MLP, the final norm modulated by (shift, scale), and
bidirectional attention. MDLM trains it with time_conditioning off: sigma is
replaced by zeros, so c is a constant of the weights; the reference computes
it from sigma = 0 as MDLM does (tools/convert_ckpt.py folds it instead).
The probe layout `bidir` is layout_ar's rows with every row seeing every row.

Used by tests/scripts/test_convert.sh (random model -> Lightning-style
checkpoint -> tools/convert_ckpt.py -> `kf import --probe`), by
tools/convert_ckpt.py --probe, and the other way by tools/release_ckpt.py and
tools/hf_load.py (`kf export`; read_safetensors, load_kf). Needs torch (and
nothing else).
"""
import json
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.Module):
    """MDLM's LayerNorm: weight only, computed in (at least) fp32."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones([dim]))
        self.dim = dim

    def forward(self, x):
        dt = torch.float64 if x.dtype == torch.float64 else torch.float32
        return F.layer_norm(x.to(dt), [self.dim], eps=1e-5) * self.weight


class Rotary(nn.Module):
    def __init__(self, dim, base=10_000):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)))

    def cos_sin(self, pos, dtype):
        # float32 as released, even after .double() (the buffer's values are float32's)
        freqs = pos.float()[:, None] * self.inv_freq.float()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = LayerNorm(dim)
        self.attn_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attn_out = nn.Linear(dim, dim, bias=False)
        self.norm2 = LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x, cos, sin, allowed):
        B, L, H = x.shape
        qkv = self.attn_qkv(self.norm1(x).to(x.dtype)).view(B, L, 3, self.n_heads, H // self.n_heads)
        q, k, v = qkv.unbind(2)  # [B, L, heads, d]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        q = q * c + rotate_half(q) * s
        k = k * c + rotate_half(k) * s
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, L, d]
        att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        att = att.masked_fill(~allowed, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, L, H)
        x = x + self.attn_out(y)
        return x + self.mlp(self.norm2(x).to(x.dtype))


class NoiseEncoder(nn.Module):
    def __init__(self, dim, cycles=0):
        super().__init__()
        self.dim = dim
        self.cycles = cycles
        self.combined_proj = nn.Linear(2 * dim, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def features(self, v, cycles=0):
        half = self.dim // 2
        if cycles:  # one to `cycles` cycles over [0, 1], geometric, float64
            i = torch.arange(half, dtype=torch.float64)
            freqs = 2.0 * math.pi * (float(cycles) ** (i / (half - 1)) if half > 1 else torch.ones(1))
            a = v.to(torch.float64)[..., None] * freqs
        else:
            freqs = torch.pow(10000, -torch.arange(half).div(half))  # float32, as released
            a = v.to(torch.float64)[..., None] * freqs * 2.0 * math.pi
        return torch.cat([a.cos(), a.sin()], dim=-1)

    def forward(self, z, tau):
        feats = torch.cat([self.features(z, self.cycles), self.features(tau)], dim=-1)
        c = self.combined_proj(feats.to(self.combined_proj.weight.dtype))
        return c + self.mlp(self.norm(c))


class OutputLayer(nn.Module):
    def __init__(self, dim, vocab):
        super().__init__()
        self.norm_final = LayerNorm(dim)
        self.linear = nn.Linear(dim, vocab)
        self.linear.weight.data.zero_()
        self.linear.bias.data.zero_()

    def forward(self, x):
        return self.linear(self.norm_final(x).to(x.dtype))


class DDiT(nn.Module):
    """Causal DDiT backbone; pflm=True adds the noise encoder."""

    def __init__(self, hidden, heads, blocks, vocab, mask_id=-1, pflm=False, noise_cycles=0):
        super().__init__()
        self.mask_id = mask_id
        self.vocab_embed = nn.Module()
        self.vocab_embed.embedding = nn.Parameter(torch.empty(vocab, hidden))
        nn.init.kaiming_uniform_(self.vocab_embed.embedding, a=math.sqrt(5))
        self.rotary_emb = Rotary(hidden // heads)
        self.blocks = nn.ModuleList([Block(hidden, heads) for _ in range(blocks)])
        if pflm:
            self.noise_encoder = NoiseEncoder(hidden, noise_cycles)
        self.output_layer = OutputLayer(hidden, vocab)

    def forward(self, ids, pos, allowed, noise=None, z=None, tau=None):
        """ids [B, L]; pos [L] RoPE positions; allowed [L, L] bool (query, key);
        noise [L] bool rows embedded from (z [B, L], tau [B]) instead of ids.
        Returns logits [B, L, V]."""
        x = self.vocab_embed.embedding[ids]
        if noise is not None and bool(noise.any()):
            e = self.noise_encoder(z, tau[:, None].expand_as(z)).to(x.dtype)
            x = torch.where(noise[None, :, None], e, x)
        cos, sin = self.rotary_emb.cos_sin(pos, x.dtype)
        for b in self.blocks:
            x = b(x, cos, sin, allowed)
        out = self.output_layer(x)
        if self.mask_id >= 0:
            out[:, :, self.mask_id] = -1000.0
        return out


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden, freq_dim=256):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t):
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.mlp(emb.to(self.mlp[0].weight.dtype))


class DiTBlock(Block):
    def __init__(self, dim, n_heads, cond_dim):
        super().__init__(dim, n_heads)
        self.adaLN_modulation = nn.Linear(cond_dim, 6 * dim)

    def forward(self, x, cos, sin, allowed, c=None):
        sh1, sc1, g1, sh2, sc2, g2 = self.adaLN_modulation(c).chunk(6, dim=-1)
        B, L, H = x.shape
        h = modulate(self.norm1(x).to(x.dtype), sh1, sc1)
        qkv = self.attn_qkv(h).view(B, L, 3, self.n_heads, H // self.n_heads)
        q, k, v = qkv.unbind(2)
        cc, s = cos[None, :, None, :], sin[None, :, None, :]
        q = q * cc + rotate_half(q) * s
        k = k * cc + rotate_half(k) * s
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = ((q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, L, H)
        x = x + g1[:, None] * self.attn_out(y)
        return x + g2[:, None] * self.mlp(modulate(self.norm2(x).to(x.dtype), sh2, sc2))


class DiTFinal(OutputLayer):
    def __init__(self, dim, vocab, cond_dim):
        super().__init__(dim, vocab)
        self.adaLN_modulation = nn.Linear(cond_dim, 2 * dim)

    def forward(self, x, c=None):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=-1)
        return self.linear(modulate(self.norm_final(x).to(x.dtype), shift, scale))


class MDLMDiT(nn.Module):
    """MDLM's diffusion DiT (time conditioning off: sigma = 0), registered in
    its modules' order, so parameters() orders an EMA's shadow_params alike."""

    def __init__(self, hidden, heads, blocks, vocab, cond_dim, mask_id=-1):
        super().__init__()
        self.mask_id = mask_id
        self.vocab_embed = nn.Module()
        self.vocab_embed.embedding = nn.Parameter(torch.empty(vocab, hidden))
        nn.init.kaiming_uniform_(self.vocab_embed.embedding, a=math.sqrt(5))
        self.sigma_map = TimestepEmbedder(cond_dim)
        self.rotary_emb = Rotary(hidden // heads)
        self.blocks = nn.ModuleList([DiTBlock(hidden, heads, cond_dim) for _ in range(blocks)])
        self.output_layer = DiTFinal(hidden, vocab, cond_dim)

    def forward(self, ids, pos, allowed, noise=None, z=None, tau=None):
        x = self.vocab_embed.embedding[ids]
        sigma = torch.zeros(ids.shape[0], dtype=x.dtype)  # time_conditioning: False
        c = F.silu(self.sigma_map(sigma)).to(x.dtype)
        cos, sin = self.rotary_emb.cos_sin(pos, x.dtype)
        for b in self.blocks:
            x = b(x, cos, sin, allowed, c)
        out = self.output_layer(x, c)
        if self.mask_id >= 0:  # SUBS: the mask is never predicted (kf: logit -1000)
            out[:, :, self.mask_id] = -1000.0
        return out


# ---- row layouts (trainer/model/layout.h, rebuilt from the definitions) ----

def layout_ar(L):
    """Causal over L tokens: (pos, allowed, noise, out_rows)."""
    allowed = torch.ones(L, L, dtype=torch.bool).tril()
    return torch.arange(L), allowed, torch.zeros(L, dtype=torch.bool), list(range(L))


def layout_bidir(L):
    """A masked-diffusion model's pass: L token rows, each seeing every row."""
    return torch.arange(L), torch.ones(L, L, dtype=torch.bool), torch.zeros(L, dtype=torch.bool), list(range(L))


def layout_single(n, k):
    """SingleForward: n context rows, then n groups of k noise rows."""
    L = n + n * k
    pos = torch.zeros(L, dtype=torch.long)
    noise = torch.zeros(L, dtype=torch.bool)
    allowed = torch.zeros(L, L, dtype=torch.bool)
    pos[:n] = torch.arange(n)
    allowed[:n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
    for t in range(n):
        for j in range(k):
            r = n + t * k + j
            pos[r] = t + 1 + j
            noise[r] = True
            allowed[r, : t + 1] = True              # context 0..t (staircase)
            allowed[r, n + t * k: r + 1] = True     # own group, causally
    return pos, allowed, noise, list(range(n, L))


# ---- files ----

def write_safetensors(path, tensors, metadata=None):
    """Minimal safetensors writer (tensors: name -> torch tensor, in order)."""
    names = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32", torch.uint8: "U8"}
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        b = t.numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """Reads a safetensors file: ({name: tensor} in file order, metadata dict).
    The tensors are copies of the stored bytes (bitwise; F32 F64 I32 U8)."""
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "U8": torch.uint8}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if h["dtype"] not in dtypes:
            raise ValueError(f"{path}: tensor {name} has dtype {h['dtype']}, not one of {sorted(dtypes)}")
        a, b = h["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=dtypes[h["dtype"]]) if b > a else \
            torch.empty(0, dtype=dtypes[h["dtype"]])
        out[name] = t.reshape(h["shape"])
    return out, meta


def load_kf(path):
    """A kforcing checkpoint (trainer/model/model_io.c) as a float32 DDiT with
    its config: (model, meta). Only the default architecture (what
    tools/ref_model.py implements: RoPE, no biases, untied, shared head; the
    noise encoder's frequencies the release's or kf.noise_cycles')."""
    tensors, meta = read_safetensors(path)
    for key, want in (("kf.pos", "rope"), ("kf.head", "shared"), ("kf.tied_head", "0"),
                      ("kf.norm_bias", "0"), ("kf.attn_bias", "0"), ("kf.attn", "causal")):
        if meta.get(key, want) != want:
            raise ValueError(f"{path}: {key} = {meta[key]}: the reference model holds only {key} = {want}")
    model = DDiT(int(meta["kf.hidden"]), int(meta["kf.heads"]), int(meta["kf.blocks"]), int(meta["kf.vocab"]),
                 int(meta["kf.mask_id"]), meta["kf.kind"] == "pflm", int(meta.get("kf.noise_cycles", 0)))
    model.load_state_dict({**tensors, "rotary_emb.inv_freq": model.rotary_emb.inv_freq}, strict=True)
    return model, meta


@torch.no_grad()
def write_probe(path, model, layout, ids, z=None, tau=None):
    """Runs model (in float64) over one layout and records input and logits
    in the probe format `kf import --probe` reads (trainer/cli/cli_import.c).
    layout: ("ar", L), ("bidir", L) or ("single", n, k); ids [B, L] int; z [B, L], tau [B]."""
    m = model.double()
    if layout[0] in ("ar", "bidir"):
        pos, allowed, noise, out = (layout_ar if layout[0] == "ar" else layout_bidir)(layout[1])
        meta = {"probe.layout": layout[0]}
    else:
        pos, allowed, noise, out = layout_single(layout[1], layout[2])
        meta = {"probe.layout": "single", "probe.n": layout[1], "probe.k": layout[2]}
    B, L = ids.shape
    assert L == len(pos), "ids do not fit the layout"
    if z is None:
        z = torch.zeros(B, L, dtype=torch.float64)
        tau = torch.ones(B, dtype=torch.float64)
    logits = m(ids.long(), pos, allowed, noise if noise.any() else None, z, tau)[:, out, :]
    write_safetensors(path, {"ids": ids.to(torch.int32), "z": z.to(torch.float64),
                             "tau": tau.to(torch.float64), "logits": logits.to(torch.float32)}, meta)


def randomize(model, seed):
    """Random weights for a conversion test (seeded): LayerNorm weights near 1,
    embeddings N(0, 1), everything else 0.1 N(0, 1), adaLN and output layers
    included, so no part of the model is left at its zero initialisation."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.copy_(1 + 0.1 * r if n.endswith("norm1.weight") or n.endswith("norm2.weight")
                    or n.endswith("norm_final.weight") or n.endswith("norm.weight") else
                    (r if "embedding" in n else 0.1 * r))


def lightning_checkpoint(model, ema_model=None, hparams=None):
    """A PyTorch Lightning-style checkpoint dict as MDLM / K-Forcing save them:
    state_dict with a "backbone." prefix (buffers included), and the EMA as
    MDLM's ExponentialMovingAverage.state_dict(): shadow_params in
    backbone.parameters() order."""
    ck = {"epoch": 0, "global_step": 1000, "pytorch-lightning_version": "2.0.0",
          "state_dict": {"backbone." + k: v.clone() for k, v in model.state_dict().items()},
          "loops": {}, "optimizer_states": [], "lr_schedulers": []}
    if ema_model is not None:
        ck["ema"] = {"decay": 0.9999, "num_updates": 1000,
                     "shadow_params": [p.detach().clone() for p in ema_model.parameters()]}
    if hparams is not None:
        ck["hyper_parameters"] = hparams
    return ck
