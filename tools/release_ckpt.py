#!/usr/bin/env python3
"""tools/release_ckpt.py — a kforcing checkpoint -> the released K-Forcing .ckpt.

The last step of `kf export CKPT --to release --out DIR` (which runs it; it
can be run by hand on any kforcing .safetensors checkpoint):

  python3 tools/release_ckpt.py DIR/model.safetensors DIR/pflm_k4_k4.ckpt

The released loader (K-Forcing utils/checkpoint.py) does
torch.load(path)["state_dict"], strips "backbone." from every key, infers
vocab, hidden and blocks from the shapes and the head count from
rotary_emb.inv_freq, then loads the dict into its AR class (strict) or its
MTP class (strict=False: a key it lacks would stay randomly initialised, so
the key set must be exactly the class's). This writes that file:

  {"state_dict": {"backbone.<name>": tensor, ...},       the released classes' keys,
                                                          in their state_dict order,
                                                          rotary_emb.inv_freq included
   "hyper_parameters": {"config": {"model": {...}}, "k": k_train, "mask_index": id},
   "kf_export": {source, weights, ...}}                   plain dicts, ints, strings

with the float32 tensors bitwise as in the input. Only plain containers are
pickled, so torch.load(..., weights_only=True) reads it too. The names and
order come from tools/ref_model.py's DDiT (registered as the released
modules are); rotary_emb.inv_freq is computed as the release computes it
(Rotary(head_dim), float32). A checkpoint the release cannot hold (MTP heads,
GPT-2 options) is refused, naming the option. Written to OUT.tmp, fsynced,
renamed.
"""
import argparse
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_model  # noqa: E402


def release_state_dict(path):
    """(state_dict without the "backbone." prefix, in the released order; meta)."""
    model, meta = ref_model.load_kf(path)
    return collections.OrderedDict((k, v.detach().clone()) for k, v in model.state_dict().items()), meta


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", help="kforcing checkpoint (.safetensors)")
    ap.add_argument("out", help="the .ckpt to write")
    ap.add_argument("--source", default="", help="recorded in kf_export.source")
    ap.add_argument("--weights", default="", help="recorded in kf_export.weights (ema|raw)")
    a = ap.parse_args(argv)
    try:
        state, meta = release_state_dict(a.src)
    except (ValueError, KeyError, RuntimeError) as e:
        sys.exit(f"release_ckpt: {a.src}: {e}")
    H, heads, blocks = int(meta["kf.hidden"]), int(meta["kf.heads"]), int(meta["kf.blocks"])
    k = int(meta["kf.k_train"])
    ck = {
        "state_dict": collections.OrderedDict(("backbone." + n, t) for n, t in state.items()),
        "hyper_parameters": {
            "config": {"model": {"hidden_size": H, "n_heads": heads, "n_blocks": blocks,
                                 "vocab_size": int(meta["kf.vocab"]), "length": int(meta["kf.seq_len"]),
                                 "causal": True}},
            "k": k, "mask_index": int(meta["kf.mask_id"]),
        },
        "kf_export": {"source": a.source, "weights": a.weights, "kind": meta["kf.kind"], "k_train": k},
    }
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(ck, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, a.out)
    print(f"{a.out}: {'MTP (PFLM)' if meta['kf.kind'] == 'pflm' else 'AR'} state_dict, {len(state)} tensors "
          f"(H={H} heads={heads} blocks={blocks} V={meta['kf.vocab']} k={k})")


if __name__ == "__main__":
    main()
