#!/usr/bin/env python3
"""tools/synth_lang.py — random stochastic languages with exactly computable joints.

Three kinds, each a pure function of its parameters and --seed (Python's
random.Random; no numpy, so any python3 runs it):

  markov  a Markov chain of order R (1..3) over S symbols: each context (the
          R previous symbols) puts its mass on a few successors chosen per
          context (Dirichlet(1) weights; --succ MIN,MAX of them), plus --noise
          spread uniformly (0: a sparse table). Documents and prompts are runs
          of the chain from its stationary distribution (Cesaro-averaged power
          iteration, so periodic or reducible tables are fine).
  hmm     a hidden Markov model: H hidden states, each moving to 2..3 others
          and emitting 1..3 of the S symbols (Dirichlet weights); runs start
          from the stationary hidden distribution, so the next tokens depend
          on the whole prompt through the filtered hidden state.
  pcfg    a small random acyclic probabilistic context-free grammar: N
          nonterminals, each with 2..3 rules of 1..3 items (a terminal or a
          later nonterminal), so its language is finite and is enumerated
          exactly; a document is a stream of independent sentences, each ended
          by the last symbol (the separator). Documents and prompts start at a
          sentence start.

The default (markov, order 2, 8 symbols, 2..3 successors, noise 0.05) is the
language of docs/convergence.md's first study, byte for byte at each seed.
--family SEED draws the kind, its parameters, tables and text from SEED (the
language family of bench/convergence_family.sh): markov 60% (order 1..3
uniform, 4..32 symbols, at most 4,096 contexts, noise 0), hmm 25% (4..16
symbols, 3..8 hidden states), pcfg 15% (4..12 symbols, 3..5 nonterminals).

Exact joints: next_pairs(lang, prefix, P) is the exact joint of every pair of
the P symbols after a prompt (tools/tv_pairs.py --exact reads lang.json and
calls it); state_key(lang, prefix) is what that joint depends on.

It writes, in OUT:
  train.txt       --docs lines of --doc-len symbols each (`kf shards build`,
                  format: lines, tokenizer gpt2 with data/vocab/bytes: one
                  token per symbol)
  prefixes.jsonl  --prefixes prompts {"prefix": [BOS, ids...]} of --prefix-len
                  symbols, each from a fresh run (byte-level GPT-2 ids,
                  BOS = <|endoftext|> 256)
  lang.json       the language (format kf-synth-lang, version 2): kind,
                  symbols, their token ids and the tables of its kind
Usage: tools/synth_lang.py --out DIR [--seed N] [--family SEED] [--kind K]
       [--order R] [--symbols S] [--succ MIN,MAX] [--noise E] [--hidden H]
       [--nonterminals N] [--docs D] [--doc-len L] [--prefixes P]
       [--prefix-len N] [--describe]
"""
import argparse
import itertools
import json
import os
import random
import sys
from collections import defaultdict

BOS = 256  # <|endoftext|> in data/vocab/bytes
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def byte_id(ch):
    """The byte-level GPT-2 id of a printable ASCII character ('!' = 0)."""
    return ord(ch) - ord("!")


def dirichlet_row(rng, S, succ, noise):
    """A distribution over S symbols: mass 1 - noise on the symbols of succ
    (Dirichlet(1) weights), noise spread uniformly."""
    w = [rng.expovariate(1.0) for _ in succ]
    row = [noise / S] * S
    for c, wc in zip(succ, w):
        row[c] += (1 - noise) * wc / sum(w)
    return row


def cesaro(step, v, iters=4000, tol=1e-13):
    """The Cesaro average of v, step(v), step(step(v)), ...: a stationary
    distribution of the linear map step even when the chain is periodic."""
    acc = list(v)
    for n in range(2, iters + 2):
        v = step(v)
        new = [(a * (n - 1) + b) / n for a, b in zip(acc, v)]
        diff = sum(abs(a - b) for a, b in zip(new, acc))
        acc = new
        if diff < tol and n > 50:
            break
    z = sum(acc)
    return [x / z for x in acc]


# ----- markov -----

def markov_make(rng, S, R, succ_lo, succ_hi, noise):
    """rows[ctx] (ctx = the R previous symbols, base S, oldest first)."""
    return [dirichlet_row(rng, S, rng.sample(range(S), rng.randint(succ_lo, succ_hi)), noise)
            for _ in range(S ** R)]


def markov_stationary(S, R, rows):
    def step(pi):
        nxt = [0.0] * len(pi)
        for ctx, m in enumerate(pi):
            if m:
                base = (ctx * S) % (S ** R)
                for c, q in enumerate(rows[ctx]):
                    if q:
                        nxt[base + c] += m * q
        return nxt
    return cesaro(step, [1.0 / S ** R] * S ** R)


def legacy_stationary_pairs(S, rows):
    """The first study's order-2 stationary distribution (plain power
    iteration), kept so that its languages stay the same at each seed."""
    pi = [[1.0 / (S * S)] * S for _ in range(S)]
    for _ in range(100000):
        nxt = [[0.0] * S for _ in range(S)]
        for a in range(S):
            for b in range(S):
                for c in range(S):
                    nxt[b][c] += pi[a][b] * rows[a * S + b][c]
        diff = sum(abs(nxt[a][b] - pi[a][b]) for a in range(S) for b in range(S))
        pi = nxt
        if diff < 1e-14:
            break
    z = sum(map(sum, pi))
    return [v / z for row in pi for v in row]


def draw(rng, probs):
    """An index drawn from probs by inverse CDF."""
    u, acc = rng.random() * sum(probs), 0.0
    for i, q in enumerate(probs):
        acc += q
        if u < acc:
            return i
    return len(probs) - 1


def markov_run(rng, lang, n):
    S, R, rows = len(lang["symbols"]), lang["order"], lang["rows"]
    ctx = draw(rng, lang["stationary"])
    x = [(ctx // S ** (R - 1 - i)) % S for i in range(R)]
    while len(x) < n:
        c = draw(rng, rows[ctx])
        x.append(c)
        ctx = (ctx * S + c) % (S ** R)
    return x[:n]


# ----- hmm -----

def hmm_make(rng, S, H):
    trans = [dirichlet_row(rng, H, rng.sample(range(H), min(H, rng.randint(2, 3))), 0.0)
             for _ in range(H)]
    emit = [dirichlet_row(rng, S, rng.sample(range(S), rng.randint(1, 3)), 0.0) for _ in range(H)]
    return trans, emit


def hmm_stationary(trans):
    H = len(trans)
    return cesaro(lambda v: [sum(v[h] * trans[h][g] for h in range(H)) for g in range(H)],
                  [1.0 / H] * H)


def hmm_run(rng, lang, n):
    trans, emit = lang["transition"], lang["emission"]
    h, x = draw(rng, lang["stationary"]), []
    while len(x) < n:
        x.append(draw(rng, emit[h]))
        h = draw(rng, trans[h])
    return x


# ----- pcfg -----

def pcfg_make(rng, S, N):
    """rules[i]: [[prob, [item, ...]], ...]; item >= 0 a terminal (0..S-2),
    item < 0 the nonterminal -item (> i). Terminal S-1 is the separator."""
    rules = []
    for i in range(N):
        rhs = []
        for _ in range(rng.randint(2, 3)):
            items = []
            for _ in range(rng.randint(1, 3)):
                if i < N - 1 and rng.random() < 0.5:
                    items.append(-rng.randint(i + 1, N - 1))
                else:
                    items.append(rng.randrange(S - 1))
            rhs.append(items)
        w = [rng.expovariate(1.0) for _ in rhs]
        rules.append([[wi / sum(w), items] for wi, items in zip(w, rhs)])
    return rules


def pcfg_sentences(rules, S):
    """Every sentence (a tuple of symbols ending with the separator) and its
    probability, or None when there are more than 20,000."""
    memo = {}

    def lang_of(i):
        if i in memo:
            return memo[i]
        out = defaultdict(float)
        for p, items in rules[i]:
            part = {(): p}
            for it in items:
                sub = {(it,): 1.0} if it >= 0 else lang_of(-it)
                if sub is None:
                    return None
                nxt = defaultdict(float)
                for a, pa in part.items():
                    for b, pb in sub.items():
                        nxt[a + b] += pa * pb
                part = nxt
                if len(part) > 20000:
                    return None
            for s, ps in part.items():
                out[s] += ps
        memo[i] = dict(out)
        return memo[i]
    top = lang_of(0)
    return None if top is None else {s + (S - 1,): p for s, p in top.items()}


def pcfg_run(rng, lang, n):
    sents, probs = lang["_sentences"], lang["_probs"]
    x = []
    while len(x) < n:
        x.extend(sents[draw(rng, probs)])
    return x[:n]


def pcfg_index(lang):
    """Adds the sentence list and the prefix table (partial sentence -> next
    symbol -> probability) that sampling and the exact joints read."""
    if "_next" in lang:
        return
    sents = sorted((tuple(s), p) for s, p in lang["sentences"])
    lang["_sentences"] = [s for s, _ in sents]
    lang["_probs"] = [p for _, p in sents]
    nxt = defaultdict(lambda: defaultdict(float))
    for s, p in sents:
        for t in range(len(s)):
            nxt[s[:t]][s[t]] += p
    lang["_next"] = {u: {c: q / sum(d.values()) for c, q in d.items()} for u, d in nxt.items()}


# ----- exact joints -----

def state_key(lang, prefix):
    """What the next symbols' distribution depends on, given the prompt's
    symbols: the last R (markov), the whole prompt (hmm), the symbols since
    the last separator (pcfg: prompts start at a sentence start)."""
    if lang["kind"] == "markov":
        return tuple(prefix[-lang["order"]:])
    if lang["kind"] == "hmm":
        return tuple(prefix)
    sep = len(lang["symbols"]) - 1
    last = max((i for i, c in enumerate(prefix) if c == sep), default=-1)
    return tuple(prefix[last + 1:])


def next_pairs(lang, key, P):
    """{(i, j): {(a, c): p}} for 0 <= i < j < P: the exact joint of the
    symbols at positions i and j after a prompt whose state_key is key.
    Raises ValueError when the prompt is impossible (hmm, pcfg)."""
    kind = lang["kind"]
    if kind == "hmm":
        return hmm_pairs(lang, key, P)
    win = {(key, ()): 1.0}
    S = len(lang["symbols"])
    for _ in range(P):
        nxt = defaultdict(float)
        for (st, w), q in win.items():
            if kind == "markov":
                ctx = 0
                for c in st:
                    ctx = ctx * S + c
                dist = enumerate(lang["rows"][ctx])
                for c, pc in dist:
                    if pc:
                        nxt[(st[1:] + (c,), w + (c,))] += q * pc
            else:
                pcfg_index(lang)
                if st not in lang["_next"]:
                    raise ValueError("the prompt has probability 0 under this language")
                for c, pc in lang["_next"][st].items():
                    nxt[((() if c == S - 1 else st + (c,)), w + (c,))] += q * pc
        win = nxt
    out = {}
    for i, j in itertools.combinations(range(P), 2):
        d = defaultdict(float)
        for (_, w), q in win.items():
            d[(w[i], w[j])] += q
        out[(i, j)] = d
    return out


def hmm_pairs(lang, prefix, P):
    trans, emit = lang["transition"], lang["emission"]
    H, S = len(trans), len(emit[0])

    def step(v):
        return [sum(v[h] * trans[h][g] for h in range(H)) for g in range(H)]
    b = list(lang["stationary"])  # hidden state before emitting prefix[0]
    for c in prefix:
        b = step([b[h] * emit[h][c] for h in range(H)])
        z = sum(b)
        if z == 0:
            raise ValueError("the prompt has probability 0 under this language")
        b = [x / z for x in b]
    before = [b]  # hidden distribution before emitting position t
    for _ in range(P - 1):
        before.append(step(before[-1]))
    out = {}
    for i, j in itertools.combinations(range(P), 2):
        d = {}
        for a in range(S):
            u = [before[i][h] * emit[h][a] for h in range(H)]
            if not any(u):
                continue
            for _ in range(j - i):
                u = step(u)
            for c in range(S):
                q = sum(u[h] * emit[h][c] for h in range(H))
                if q:
                    d[(a, c)] = q
        out[(i, j)] = d
    return out


# ----- the family -----

def family_params(seed):
    """The kind and parameters of family member `seed` (drawn from its own RNG)."""
    rng = random.Random(f"kf-synth-family-{seed}")
    u = rng.random()
    if u < 0.6:
        R = rng.randint(1, 3)
        S = rng.randint(4, min(32, int(round(4096 ** (1 / R)))))
        return {"kind": "markov", "order": R, "symbols": S, "succ": (2, 4), "noise": 0.0}
    if u < 0.85:
        return {"kind": "hmm", "symbols": rng.randint(4, 16), "hidden": rng.randint(3, 8)}
    return {"kind": "pcfg", "symbols": rng.randint(4, 12), "nonterminals": rng.randint(3, 5)}


def make_lang(rng, prm):
    kind, S = prm["kind"], prm["symbols"]
    syms = list(ALPHABET[:S])
    lang = {"format": "kf-synth-lang", "version": 2, "kind": kind, "symbols": syms,
            "ids": [byte_id(s) for s in syms]}
    if kind == "markov":
        R, (lo, hi) = prm["order"], prm["succ"]
        rows = markov_make(rng, S, R, lo, hi, prm["noise"])
        legacy = R == 2 and (lo, hi) == (2, 3) and prm["noise"] > 0
        pi = legacy_stationary_pairs(S, rows) if legacy else markov_stationary(S, R, rows)
        lang.update(order=R, noise=prm["noise"], rows=rows, stationary=pi)
    elif kind == "hmm":
        trans, emit = hmm_make(rng, S, prm["hidden"])
        lang.update(transition=trans, emission=emit, stationary=hmm_stationary(trans))
    else:
        while True:  # redraw until the finite language is small enough
            rules = pcfg_make(rng, S, prm["nonterminals"])
            sents = pcfg_sentences(rules, S)
            if sents is not None and sum(len(s) * p for s, p in sents.items()) <= 12:
                break
        lang.update(rules=rules, sentences=[[list(s), p] for s, p in sorted(sents.items())])
        pcfg_index(lang)
    return lang


def run(rng, lang, n):
    return {"markov": markov_run, "hmm": hmm_run, "pcfg": pcfg_run}[lang["kind"]](rng, lang, n)


def describe(lang):
    k = lang["kind"]
    S = len(lang["symbols"])
    if k == "markov":
        return f"markov order {lang['order']}, {S} symbols, noise {lang['noise']}"
    if k == "hmm":
        return f"hmm, {S} symbols, {len(lang['transition'])} hidden states"
    return f"pcfg, {S} symbols, {len(lang['rules'])} nonterminals, {len(lang['sentences'])} sentences"


def load(path):
    """A lang.json written by this tool (version 2), ready for next_pairs."""
    with open(path) as f:
        lang = json.load(f)
    if lang.get("format") != "kf-synth-lang" or lang.get("version") != 2:
        sys.exit(f"synth_lang.py: {path}: not a version-2 kf-synth-lang file")
    if lang["kind"] == "pcfg":
        pcfg_index(lang)
    return lang


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--family", type=int, metavar="SEED",
                    help="draw kind, parameters, tables and text from SEED (--seed unused)")
    ap.add_argument("--kind", choices=("markov", "hmm", "pcfg"), default="markov")
    ap.add_argument("--order", type=int, default=2)
    ap.add_argument("--symbols", type=int, default=8)
    ap.add_argument("--succ", default="2,3")
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--hidden", type=int, default=4)
    ap.add_argument("--nonterminals", type=int, default=4)
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--doc-len", type=int, default=500)
    ap.add_argument("--prefixes", type=int, default=1024)
    ap.add_argument("--prefix-len", type=int, default=8)
    ap.add_argument("--describe", action="store_true", help="print a one-line description")
    a = ap.parse_args()
    if a.family is not None:
        prm = family_params(a.family)
    else:
        try:
            lo, hi = (int(v) for v in a.succ.split(","))
        except ValueError:
            sys.exit("synth_lang.py: --succ is MIN,MAX")
        prm = {"kind": a.kind, "order": a.order, "symbols": a.symbols, "succ": (lo, hi),
               "noise": a.noise, "hidden": a.hidden, "nonterminals": a.nonterminals}
        if not 2 <= a.symbols <= len(ALPHABET):
            sys.exit(f"synth_lang.py: --symbols must be in [2, {len(ALPHABET)}]")
        if not 1 <= a.order <= 3 or a.symbols ** a.order > 1 << 16:
            sys.exit("synth_lang.py: --order must be in [1, 3], with symbols^order <= 65536")
        if not 1 <= lo <= hi <= a.symbols:
            sys.exit("synth_lang.py: --succ needs 1 <= MIN <= MAX <= symbols")
        if not 0 <= a.noise <= 1:
            sys.exit("synth_lang.py: --noise must be in [0, 1]")
        if a.hidden < 2 or a.nonterminals < 1 or (a.kind == "pcfg" and a.symbols < 3):
            sys.exit("synth_lang.py: --hidden >= 2, --nonterminals >= 1, pcfg: --symbols >= 3")
    if a.docs < 1 or a.doc_len < 2 or a.prefixes < 0 or a.prefix_len < 3:
        sys.exit("synth_lang.py: --docs >= 1, --doc-len >= 2, --prefixes >= 0, --prefix-len >= 3")
    rng = random.Random(a.seed if a.family is None else a.family)
    lang = make_lang(rng, prm)
    lang["seed"], lang["family"] = a.seed, a.family
    syms = lang["symbols"]
    os.makedirs(a.out, exist_ok=True)

    def write(name, text):  # atomic: temp, fsync, rename
        path = os.path.join(a.out, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)

    write("train.txt", "".join("".join(syms[s] for s in run(rng, lang, a.doc_len)) + "\n"
                               for _ in range(a.docs)))
    write("prefixes.jsonl", "".join(
        json.dumps({"prefix": [BOS] + [byte_id(syms[s]) for s in run(rng, lang, a.prefix_len)]}) + "\n"
        for _ in range(a.prefixes)))
    write("lang.json", json.dumps({k: v for k, v in lang.items() if not k.startswith("_")}) + "\n")
    if a.describe:
        print(describe(lang))


if __name__ == "__main__":
    main()
