"""tools/ref_gpt2.py — a reference GPT-2 and Gen-PPL in PyTorch, for the
parity tests of `kf eval genppl` (tests/scripts/test_genppl.sh).

Hugging Face transformers is not installable here, so this is an
independent implementation of its GPT2LMHeadModel forward (learned
positions, pre-LayerNorm blocks with biases, Conv1D weights [in, out],
tanh GELU, causal attention scaled by 1/sqrt(head_dim), tied head) and of
the Gen-PPL protocol (MDLM's compute_generative_perplexity with the paper's
EOS truncation; trainer/infer/genppl.h):

  make DIR [--variant ok|badkey|transposed|extrakey|untied]
      a random-initialised GPT-2 of the HF layout: DIR/config.json,
      DIR/model.safetensors (HF key names, "transformer." prefix as
      GPT2LMHeadModel.save_pretrained writes, lm_head.weight tied), and the
      GPT-2 vocab.json/merges.txt copied from --vocab-from. badkey renames one
      key; transposed stores the square Conv1D weights transposed (the
      mistake a loader with the wrong layout would make); extrakey adds a
      tensor GPT-2 has not; untied gives lm_head.weight its own values.
  probe DIR OUT   ids [2, 24] and the model's logits [2, 24, V] (float64
      forward, stored F32), the probe format `kf import --probe` reads
      (metadata probe.layout = "ar").
  genppl DIR FILE.jsonl --vocab GEN_DIR [--max-length N]
      Gen-PPL of kf-sample-style completions: ids truncated at the first EOS,
      special tokens dropped, decoded here (GPT-2 byte-level; BERT WordPiece
      with HF's clean_up_tokenization), re-tokenised by HF tokenizers (Node,
      tests/node/ref_tokenize.js), scored in float64 windows of the context.
      Prints {"tokens", "nll", "gen_ppl", "entropy"}.

Run with Debian's python3-torch: /usr/bin/python3 tools/ref_gpt2.py ...
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_model import write_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the model ----

def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    w = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).reshape(v["shape"])
        w[k[len("transformer."):] if k.startswith("transformer.") else k] = t.double()
    return cfg, w


def forward(cfg, w, ids):
    """Logits [B, L, V] in float64 for ids [B, L]."""
    H, nh = cfg["n_embd"], cfg["n_head"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    B, L = ids.shape
    x = w["wte.weight"][ids] + w["wpe.weight"][torch.arange(L)]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    for l in range(cfg["n_layer"]):
        p = lambda s: w[f"h.{l}.{s}"]  # noqa: E731
        h = F.layer_norm(x, (H,), p("ln_1.weight"), p("ln_1.bias"), eps)
        q, k, v = (h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")).split(H, dim=-1)
        q, k, v = (t.view(B, L, nh, H // nh).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(H // nh)
        a = s.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        a = a.transpose(1, 2).reshape(B, L, H)
        x = x + a @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = F.layer_norm(x, (H,), p("ln_2.weight"), p("ln_2.bias"), eps)
        f = F.gelu(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"), approximate="tanh")
        x = x + f @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = F.layer_norm(x, (H,), w["ln_f.weight"], w["ln_f.bias"], eps)
    return x @ w["wte.weight"].T


def make(a):
    os.makedirs(a.dir, exist_ok=True)
    H, nh, nl, npos, V = 32, 2, 2, 64, 50257
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": H, "n_head": nh,
           "n_layer": nl, "n_positions": npos, "n_ctx": npos, "vocab_size": V,
           "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
    g = torch.Generator().manual_seed(a.seed)
    r = lambda *s, scale=0.2: (scale * torch.randn(*s, generator=g)).float()  # noqa: E731
    w = {"transformer.wte.weight": r(V, H, scale=0.5), "transformer.wpe.weight": r(npos, H, scale=0.1)}
    for l in range(nl):
        p = f"transformer.h.{l}."
        w[p + "ln_1.weight"] = 1 + r(H, scale=0.1)
        w[p + "ln_1.bias"] = r(H, scale=0.1)
        w[p + "attn.c_attn.weight"] = r(H, 3 * H)
        w[p + "attn.c_attn.bias"] = r(3 * H, scale=0.1)
        w[p + "attn.c_proj.weight"] = r(H, H)
        w[p + "attn.c_proj.bias"] = r(H, scale=0.1)
        w[p + "ln_2.weight"] = 1 + r(H, scale=0.1)
        w[p + "ln_2.bias"] = r(H, scale=0.1)
        w[p + "mlp.c_fc.weight"] = r(H, 4 * H)
        w[p + "mlp.c_fc.bias"] = r(4 * H, scale=0.1)
        w[p + "mlp.c_proj.weight"] = r(4 * H, H)
        w[p + "mlp.c_proj.bias"] = r(H, scale=0.1)
    w["transformer.ln_f.weight"] = 1 + r(H, scale=0.1)
    w["transformer.ln_f.bias"] = r(H, scale=0.1)
    w["lm_head.weight"] = w["transformer.wte.weight"]
    if a.variant == "badkey":
        w["transformer.h.1.ln_2.b"] = w.pop("transformer.h.1.ln_2.bias")
    elif a.variant == "extrakey":
        w["transformer.h.0.attn.q_norm.weight"] = r(H)
    elif a.variant == "untied":
        w["lm_head.weight"] = r(V, H)
    elif a.variant == "transposed":
        for l in range(nl):
            k = f"transformer.h.{l}.attn.c_proj.weight"
            w[k] = w[k].T.contiguous()
    write_safetensors(os.path.join(a.dir, "model.safetensors"), w, {"format": "pt"})
    json.dump(cfg, open(os.path.join(a.dir, "config.json"), "w"), indent=2)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(a.vocab_from, f), os.path.join(a.dir, f))
    print(f"GPT-2 ({a.variant}) H={H} heads={nh} layers={nl} positions={npos} V={V} -> {a.dir}")


@torch.no_grad()
def probe(a):
    cfg, w = load(a.dir)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, cfg["vocab_size"], (2, 24), generator=g)
    logits = forward(cfg, w, ids)
    write_safetensors(a.out, {"ids": ids.to(torch.int32), "logits": logits.float()}, {"probe.layout": "ar"})
    print(f"probe: ids {list(ids.shape)}, logits {list(logits.shape)} -> {a.out}")


# ---- Gen-PPL ----

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


HF_CLEANUP = [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
              (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]


class Generator:
    """The generating model's tokenizer, for decoding only."""

    def __init__(self, d):
        if os.path.exists(os.path.join(d, "vocab.json")):
            self.kind = "gpt2"
            enc = json.load(open(os.path.join(d, "vocab.json"), encoding="utf-8"))
            self.tok = {i: t for t, i in enc.items()}
            self.special = {enc["<|endoftext|>"]}
            self.eos = enc["<|endoftext|>"]
            self.byte = {c: b for b, c in bytes_to_unicode().items()}
        else:
            self.kind = "bert"
            self.tok = dict(enumerate(open(os.path.join(d, "vocab.txt"), encoding="utf-8").read().split("\n")))
            inv = {t: i for i, t in self.tok.items()}
            self.special = {inv[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t in inv}
            self.eos = inv["[SEP]"]

    def text(self, prefix, completion):
        if completion and self.eos in completion:
            completion = completion[: completion.index(self.eos)]
        ids = [i for i in (prefix or []) + completion if i < len(self.tok) and i not in self.special]
        if self.kind == "gpt2":
            return bytes(self.byte[c] for i in ids for c in self.tok[i]).decode("utf-8", errors="replace")
        s = " ".join(self.tok[i] for i in ids).replace(" ##", "")
        for x, y in HF_CLEANUP:
            s = s.replace(x, y)
        return s


def hf_gpt2_encode(vocab_dir, texts):
    """HF tokenizers' GPT-2 encoding (Node reference) of each text (no newlines allowed)."""
    assert all("\n" not in t for t in texts)
    out = subprocess.run(["node", os.path.join(ROOT, "tests/node/ref_tokenize.js"), "gpt2", vocab_dir],
                         input="".join(t + "\n" for t in texts).encode(), capture_output=True, check=True)
    lines = out.stdout.decode().split("\n")[: len(texts)]
    return [[int(x) for x in line.split()] for line in lines]


@torch.no_grad()
def genppl(a):
    cfg, w = load(a.dir)
    gen = Generator(a.vocab)
    texts = []
    for line in open(a.file, encoding="utf-8"):
        if line.strip():
            o = json.loads(line)
            texts.append(gen.text(o.get("prefix"), o["completion"]))
    ids = hf_gpt2_encode(a.dir, texts)
    ctx = cfg["n_positions"]
    max_len = a.max_length or ctx
    nll, tokens, ent = 0.0, 0, []
    for t in ids:
        t = t[:max_len]
        if t:
            c = torch.tensor(t).bincount().double()
            p = c[c > 0] / len(t)
            ent.append(float(-(p * p.log()).sum()))
        for s in range(0, len(t), ctx):
            win = torch.tensor(t[s: s + ctx])[None]
            if win.shape[1] < 2:
                continue
            lg = forward(cfg, w, win)[0]
            nll += float(F.cross_entropy(lg[:-1], win[0, 1:], reduction="sum"))
            tokens += win.shape[1] - 1
    print(json.dumps({"tokens": tokens, "nll": nll / tokens, "gen_ppl": math.exp(nll / tokens),
                      "entropy": sum(ent) / len(ent), "texts": texts}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--variant", choices=["ok", "badkey", "transposed", "extrakey", "untied"], default="ok")
    m.add_argument("--vocab-from", default=os.path.join(ROOT, "data/vocab/gpt2"))
    m.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("probe")
    p.add_argument("dir")
    p.add_argument("out")
    g = sub.add_parser("genppl")
    g.add_argument("dir")
    g.add_argument("file")
    g.add_argument("--vocab", required=True)
    g.add_argument("--max-length", type=int, default=0)
    a = ap.parse_args()
    {"make": make, "probe": probe, "genppl": genppl}[a.cmd](a)


if __name__ == "__main__":
    main()
