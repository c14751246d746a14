#!/usr/bin/env python3
"""tools/tv_pairs.py — worst pairwise total-variation distance between the
joints of two sets of completions (`kf sample` JSONL).

For every pair of generated positions 0 <= i < j < --positions, the joint of
(x_i, x_j) over the completions of A is compared with that of B:
TV = 1/2 sum |p_A - p_B| over the token pairs. The result is the worst pair.
With --positions 4 this covers the 4 tokens of one PFLM(4) step, the two
steps of PFLM(2) and pairs across them. Completions shorter than --positions
(an early EOS) count their missing tokens as -1.

B may instead be the exact joint of tools/synth_lang.py's language
(--exact lang.json): each completion of A contributes the exact joint of the
next tokens given its prefix (synth_lang.next_pairs), so the sampling noise
is A's alone.

Usage: tools/tv_pairs.py A.jsonl (B.jsonl | --exact lang.json) [--positions P]
Prints one JSON object: {"tv": worst, "pair": [i, j], "n_a": ..., "n_b": ...}.
"""
import argparse
import itertools
import json
import sys
from collections import Counter, defaultdict

import synth_lang  # tools/: the languages and their exact joints


def read(path, P):
    """The first P completion tokens (-1 past the end) and the prefix of each line."""
    rows = []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                o = json.loads(line)
                c, pre = o["completion"], o["prefix"]
            except (ValueError, KeyError) as e:
                sys.exit(f"tv_pairs.py: {path}:{ln}: not a kf sample record ({e})")
            rows.append((tuple(pre), tuple(c[:P]) + (-1,) * max(0, P - len(c))))
    if not rows:
        sys.exit(f"tv_pairs.py: {path}: no completions")
    return rows


def empirical(rows, i, j):
    cnt = Counter((c[i], c[j]) for _, c in rows)
    n = len(rows)
    return {k: v / n for k, v in cnt.items()}


def exact_pairs(lang, rows, P):
    """{(i, j): {(token_i, token_j): p}}: the exact joint of each pair of the P
    next tokens, averaged over the prefixes of rows."""
    ids = lang["ids"]
    sym = {t: s for s, t in enumerate(ids)}
    ctx = Counter(synth_lang.state_key(lang, [sym[t] for t in pre if t in sym]) for pre, _ in rows)
    out = defaultdict(lambda: defaultdict(float))
    for key, m in ctx.items():
        try:
            pairs = synth_lang.next_pairs(lang, key, P)
        except ValueError as e:
            sys.exit(f"tv_pairs.py: prompt symbols {list(key)}: {e}")
        for ij, d in pairs.items():
            for (a, c), q in d.items():
                out[ij][(ids[a], ids[c])] += q * m / len(rows)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--exact", metavar="LANG_JSON")
    ap.add_argument("--positions", type=int, default=4)
    a = ap.parse_args()
    if (a.b is None) == (a.exact is None):
        ap.error("give either B.jsonl or --exact lang.json")
    if a.positions < 2:
        ap.error("--positions must be >= 2")
    P = a.positions
    A = read(a.a, P)
    if a.exact:
        exact = exact_pairs(synth_lang.load(a.exact), A, P)
        n_b = None
    else:
        B = read(a.b, P)
        n_b = len(B)
    worst, at = -1.0, None
    for i, j in itertools.combinations(range(P), 2):
        pa = empirical(A, i, j)
        if a.exact:
            pb = exact[(i, j)]
        else:
            pb = empirical(B, i, j)
        tv = 0.5 * sum(abs(pa.get(k, 0.0) - pb.get(k, 0.0)) for k in set(pa) | set(pb))
        if tv > worst:
            worst, at = tv, [i, j]
    print(json.dumps({"tv": round(worst, 4), "pair": at, "n_a": len(A), "n_b": n_b}))


if __name__ == "__main__":
    main()
