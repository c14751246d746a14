#!/usr/bin/env python3
"""tools/synth_lang.py — a stochastic synthetic language with an exact joint.

A noisy second-order Markov chain over S symbols (the letters a, b, ...):
p(x_t | x_{t-2}, x_{t-1}) puts most of its mass on 2 or 3 successors chosen
per context (weights drawn from a Dirichlet), plus `noise` spread uniformly,
so every sequence has non-zero probability and the k tokens after a context
are genuinely random and dependent (not a permutation). The joint of any
window is exact: the stationary distribution over symbol pairs times the
transition probabilities (lang.json holds both; tools/tv_pairs.py --exact reads it).

Everything is a pure function of --seed (Python's random.Random; no numpy, so
any python3 runs it). It writes, in OUT:
  train.txt       --docs lines of --doc-len symbols each (`kf shards build`,
                  format: lines, tokenizer gpt2 with data/vocab/bytes: one
                  token per symbol)
  prefixes.jsonl  --prefixes prompts {"prefix": [BOS, ids...]} of --prefix-len
                  symbols, each from a fresh run of the chain (the same ids as
                  the shards: byte-level GPT-2 ids, BOS = <|endoftext|> 256)
  lang.json       the language: symbols, their token ids, the transition
                  table [S][S][S] and the stationary pair distribution
Usage: tools/synth_lang.py --out DIR [--seed N] [--symbols S] [--noise E]
       [--docs D] [--doc-len L] [--prefixes P] [--prefix-len N]
"""
import argparse
import json
import os
import random
import sys

BOS = 256  # <|endoftext|> in data/vocab/bytes


def byte_id(ch):
    """The byte-level GPT-2 id of a printable ASCII character ('!' = 0)."""
    return ord(ch) - ord("!")


def make_table(rng, S, noise):
    """p[a][b][c] = p(x_t = c | x_{t-2} = a, x_{t-1} = b)."""
    p = [[None] * S for _ in range(S)]
    for a in range(S):
        for b in range(S):
            succ = rng.sample(range(S), rng.randint(2, 3))
            w = [rng.expovariate(1.0) for _ in succ]  # Dirichlet(1, ..., 1)
            row = [noise / S] * S
            for c, wc in zip(succ, w):
                row[c] += (1 - noise) * wc / sum(w)
            p[a][b] = row
    return p


def stationary_pairs(p):
    """The stationary distribution pi[a][b] of the pair chain (a, b) -> (b, c)."""
    S = len(p)
    pi = [[1.0 / (S * S)] * S for _ in range(S)]
    for _ in range(100000):
        nxt = [[0.0] * S for _ in range(S)]
        for a in range(S):
            for b in range(S):
                for c in range(S):
                    nxt[b][c] += pi[a][b] * p[a][b][c]
        diff = sum(abs(nxt[a][b] - pi[a][b]) for a in range(S) for b in range(S))
        pi = nxt
        if diff < 1e-14:
            break
    z = sum(map(sum, pi))
    return [[v / z for v in row] for row in pi]


def draw(rng, probs):
    """An index drawn from probs by inverse CDF."""
    u, acc = rng.random() * sum(probs), 0.0
    for i, q in enumerate(probs):
        acc += q
        if u < acc:
            return i
    return len(probs) - 1


def run_chain(rng, p, pi2, n):
    """n symbols of the stationary chain."""
    S = len(p)
    first = draw(rng, [v for row in pi2 for v in row])
    x = [first // S, first % S]
    while len(x) < n:
        x.append(draw(rng, p[x[-2]][x[-1]]))
    return x[:n]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--symbols", type=int, default=8)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--doc-len", type=int, default=500)
    ap.add_argument("--prefixes", type=int, default=1024)
    ap.add_argument("--prefix-len", type=int, default=8)
    a = ap.parse_args()
    if not 2 <= a.symbols <= 26:
        sys.exit("synth_lang.py: --symbols must be in [2, 26]")
    if not 0 < a.noise <= 1:
        sys.exit("synth_lang.py: --noise must be in (0, 1]")
    if a.docs < 1 or a.doc_len < 2 or a.prefixes < 0 or a.prefix_len < 2:
        sys.exit("synth_lang.py: --docs >= 1, --doc-len >= 2, --prefixes >= 0, --prefix-len >= 2")
    rng = random.Random(a.seed)
    syms = [chr(ord("a") + i) for i in range(a.symbols)]
    p = make_table(rng, a.symbols, a.noise)
    pi2 = stationary_pairs(p)
    os.makedirs(a.out, exist_ok=True)

    def write(name, text):  # atomic: temp, fsync, rename
        path = os.path.join(a.out, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)

    write("train.txt", "".join("".join(syms[s] for s in run_chain(rng, p, pi2, a.doc_len)) + "\n"
                               for _ in range(a.docs)))
    write("prefixes.jsonl", "".join(
        json.dumps({"prefix": [BOS] + [byte_id(syms[s]) for s in run_chain(rng, p, pi2, a.prefix_len)]}) + "\n"
        for _ in range(a.prefixes)))
    write("lang.json", json.dumps({"format": "kf-synth-lang", "version": 1, "seed": a.seed,
                                   "noise": a.noise, "symbols": syms,
                                   "ids": [byte_id(s) for s in syms],
                                   "transition": p, "stationary_pairs": pi2}) + "\n")


if __name__ == "__main__":
    main()
