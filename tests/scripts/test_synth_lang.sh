#!/usr/bin/env bash
# tools/synth_lang.py's exact joints agree with its own sampler: for one
# language of each kind (a sparse third-order Markov chain, an HMM, a PCFG,
# and the noisy second-order chain of docs/convergence.md's first study),
# 20,000 prompts of 3 symbols and their next 4 symbols are drawn by the
# generator's sampler (synth_lang.run) and scored with tools/tv_pairs.py
# --exact, which enumerates the joint (synth_lang.next_pairs: windows of the
# table, HMM forward filtering, the PCFG's sentence prefixes): the worst
# pairwise TV must be at the sampling noise. Controls that must fail: the
# same samples with each position shuffled across the samples, and (Markov
# chains, whose every prompt has a next-symbol row) against the exact joint
# of another language of the same size. A prompt impossible under the
# language is refused with a message naming it. Plus: the family's draws are
# a pure function of the seed. About 15 s of CPU, python only.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_check.sh
T=$(mktemp -d /tmp/kf-test-synth-lang.XXXXXX)
trap 'rm -rf "$T"' EXIT

# draw DIR N SHUFFLE: N samples {"prefix": [BOS, 3 ids], "completion": [4 ids]}
draw() {
  python3 - "$@" <<'PY'
import json, random, sys
sys.path.insert(0, "tools")
import synth_lang
d, n, shuffle = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
lang = synth_lang.load(f"{d}/lang.json")
rng, ids = random.Random(5), lang["ids"]
rows = [synth_lang.run(rng, lang, 7) for _ in range(n)]
if shuffle:  # each position permuted across the samples: marginals kept, joint gone
    cols = [[r[3 + i] for r in rows] for i in range(4)]
    for c in cols:
        rng.shuffle(c)
    rows = [r[:3] + [cols[i][m] for i in range(4)] for m, r in enumerate(rows)]
with open(f"{d}/s{int(shuffle)}.jsonl", "w") as f:
    for r in rows:
        f.write(json.dumps({"prefix": [256] + [ids[c] for c in r[:3]],
                            "completion": [ids[c] for c in r[3:]]}) + "\n")
PY
}
tv() { python3 tools/tv_pairs.py "$@" | sed 's/.*"tv": \([0-9.]*\).*/\1/'; }
le() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$@"; }

langs=("markov3:--kind markov --order 3 --symbols 5 --succ 2,3 --noise 0"
       "hmm:--kind hmm --symbols 6 --hidden 4"
       "pcfg:--kind pcfg --symbols 6 --nonterminals 4"
       "legacy:--symbols 8")
for spec in "${langs[@]}"; do
  name=${spec%%:*} args=${spec#*:}
  # shellcheck disable=SC2086
  python3 tools/synth_lang.py --out "$T/$name" --seed 3 --docs 1 --prefixes 0 $args > "$T/gen.log" 2>&1
  check "$name: synth_lang.py --seed 3 exits 0 ($(tail -n 1 "$T/gen.log"))" test -s "$T/$name/lang.json"
  # shellcheck disable=SC2086
  python3 tools/synth_lang.py --out "$T/$name-other" --seed 4 --docs 1 --prefixes 0 $args > /dev/null 2>&1
  draw "$T/$name" 20000 0
  draw "$T/$name" 20000 1
  got=$(tv "$T/$name/s0.jsonl" --exact "$T/$name/lang.json")
  check "$name: own samples vs the exact joint: worst pairwise TV got $got want <= 0.04" le "$got" 0.04
  if [ "$name" = markov3 ] || [ "$name" = legacy ]; then
    got=$(tv "$T/$name/s0.jsonl" --exact "$T/$name-other/lang.json")
    check "$name: samples vs another language's exact joint: TV got $got want > 0.1" le 0.1 "$got"
  else
    python3 tools/tv_pairs.py "$T/$name/s0.jsonl" --exact "$T/$name-other/lang.json" > /dev/null 2> "$T/err"
    check "$name: a prompt impossible under another language is refused ($(cat "$T/err"))" \
      grep -q "prompt symbols .*: the prompt has probability 0" "$T/err"
  fi
  if [ "$name" != pcfg ]; then  # (a PCFG's positions after a 3-symbol prompt can be near independent)
    got=$(tv "$T/$name/s1.jsonl" --exact "$T/$name/lang.json")
    check "$name: positions shuffled across samples vs the exact joint: TV got $got want > 0.06" le 0.06 "$got"
  fi
done
python3 tools/synth_lang.py --out "$T/f1" --family 1001 --docs 3 --prefixes 5 --describe > "$T/d1"
python3 tools/synth_lang.py --out "$T/f2" --family 1001 --docs 3 --prefixes 5 --describe > "$T/d2"
check "family 1001 drawn twice: same language and text" \
  eval "cmp -s '$T/f1/train.txt' '$T/f2/train.txt' && cmp -s '$T/f1/lang.json' '$T/f2/lang.json' && cmp -s '$T/d1' '$T/d2'"
finish
