#!/usr/bin/env python3
"""tools/hf_load.py — load a `kf export --to hf` folder in PyTorch and sample from it.

The folder holds config.json (model_type "kforcing-ddit"), model.safetensors
(the reference names, float32) and the tokenizer files; tools/ref_model.py is
the modelling code. load(DIR) returns the model (float32 by default) and the
config, after checking that config.json and the weights' metadata agree.

  python3 tools/hf_load.py DIR --prefix 4,7,9 --max-new 16 [--tau T] [--seed S] [--greedy] [--k K]
      prints one JSON line {"prefix": [...], "completion": [...]}
  python3 tools/hf_load.py DIR --probe P.safetensors
      reference logits for `kf import DIR/model.safetensors --probe P` (AR: a
      causal pass; PFLM: a SingleForward pass with seeded noise)

Sampling: an AR model draws one token per step by inverse CDF over the
softmax(logits / tau) in vocabulary order with u ~ U(0,1) from a seeded
torch.Generator (--greedy: the argmax). A PFLM (K-Forcing) model decodes k
tokens per pass as the released sampler does: the context, then k noise rows
(u_1..u_k, tau) at the next k positions, all causal; each output row's argmax
is the token (--freq-penalty P subtracts P x the count of each token generated
so far, as the release does). Needs torch only.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_model  # noqa: E402

CONFIG_TO_META = {"hidden_size": "kf.hidden", "num_attention_heads": "kf.heads", "num_hidden_layers": "kf.blocks",
                  "vocab_size": "kf.vocab", "mask_token_id": "kf.mask_id", "k": "kf.k_train",
                  "max_position_embeddings": "kf.seq_len"}


def load(d, dtype=torch.float32):
    """(model, config) from an exported folder; raises ValueError on a mismatch."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "kforcing-ddit":
        raise ValueError(f"{d}/config.json: model_type {cfg.get('model_type')!r} is not 'kforcing-ddit'")
    model, meta = ref_model.load_kf(os.path.join(d, "model.safetensors"))
    for key, mkey in CONFIG_TO_META.items():
        if int(cfg[key]) != int(meta[mkey]):
            raise ValueError(f"{d}: config.json {key} = {cfg[key]} but model.safetensors {mkey} = {meta[mkey]}")
    if (cfg["kind"] == "pflm") != (meta["kf.kind"] == "pflm"):
        raise ValueError(f"{d}: config.json kind {cfg['kind']} but model.safetensors kf.kind {meta['kf.kind']}")
    if int(cfg.get("noise_cycles", 0)) != int(meta.get("kf.noise_cycles", 0)):
        raise ValueError(f"{d}: config.json noise_cycles = {cfg.get('noise_cycles', 0)} but model.safetensors "
                         f"kf.noise_cycles = {meta.get('kf.noise_cycles', 0)}")
    return model.to(dtype).eval(), cfg


def _causal(L):
    return torch.ones(L, L, dtype=torch.bool).tril()


@torch.no_grad()
def sample(model, cfg, prefix, max_new, tau=1.0, seed=0, greedy=False, k=None, freq_penalty=0.0):
    """Token ids of one completion of prefix (a list of ids)."""
    g = torch.Generator().manual_seed(seed)
    ids = list(prefix)
    if cfg["kind"] == "ar":
        for _ in range(max_new):
            L = len(ids)
            logits = model(torch.tensor([ids]), torch.arange(L), _causal(L))[0, -1].double()
            if greedy:
                ids.append(int(logits.argmax()))
                continue
            p = torch.softmax(logits / tau, -1)
            u = torch.rand(1, generator=g, dtype=torch.float64)
            c = p.cumsum(-1)
            ids.append(min(int((c <= u).sum()), len(c) - 1))
        return ids[len(prefix):]
    k = k or int(cfg["k"])
    counts = torch.zeros(int(cfg["vocab_size"]), dtype=torch.float64)
    while len(ids) - len(prefix) < max_new:
        n, L = len(ids), len(ids) + k
        noise = torch.zeros(L, dtype=torch.bool)
        noise[n:] = True
        z = torch.zeros(1, L, dtype=torch.float64)
        z[0, n:] = torch.rand(k, generator=g, dtype=torch.float64)
        x = torch.tensor([ids + [0] * k])
        logits = model(x, torch.arange(L), _causal(L), noise, z, torch.tensor([tau], dtype=torch.float64))[0, n:]
        for j in range(min(k, max_new - (len(ids) - len(prefix)))):
            t = int((logits[j].double() - freq_penalty * counts).argmax())
            counts[t] += 1
            ids.append(t)
    return ids[len(prefix):]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--prefix", default="", help="comma-separated token ids")
    ap.add_argument("--max-new", type=int, default=16)
    ap.add_argument("--tau", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--k", type=int)
    ap.add_argument("--freq-penalty", type=float, default=0.0)
    ap.add_argument("--probe", help="write reference logits here instead of sampling")
    a = ap.parse_args(argv)
    try:
        model, cfg = load(a.dir)
    except (ValueError, KeyError, OSError, RuntimeError) as e:
        sys.exit(f"hf_load: {e}")
    if a.probe:
        V, g = int(cfg["vocab_size"]), torch.Generator().manual_seed(a.seed)
        if cfg["kind"] == "pflm":
            n, k = 6, int(cfg["k"])
            ids = torch.randint(0, V, (2, n + n * k), generator=g)
            z = torch.rand(2, n + n * k, generator=g, dtype=torch.float64)
            ref_model.write_probe(a.probe, model, ("single", n, k), ids, z, torch.tensor([1.0, 0.5], dtype=torch.float64))
        else:
            ref_model.write_probe(a.probe, model, ("ar", 12), torch.randint(0, V, (2, 12), generator=g))
        print(f"{a.probe}: reference logits of {a.dir}")
        return
    prefix = [int(t) for t in a.prefix.split(",") if t.strip()] or [int(cfg.get("bos_token_id", 0))]
    out = sample(model, cfg, prefix, a.max_new, a.tau, a.seed, a.greedy, a.k, a.freq_penalty)
    print(json.dumps({"prefix": prefix, "completion": out}))


if __name__ == "__main__":
    main()
