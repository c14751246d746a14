#!/usr/bin/env bash
# The tree follows .clang-format: every tracked C, C++ and CUDA source is
# what clang-format 14 writes (one check per file; a failure shows the first
# lines clang-format would change). Generated files opt out with
# `clang-format off` (tokenize/unicode_tables.c). Fix with:
#   clang-format-14 -i FILE
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_check.sh
CF=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$CF" >/dev/null; then
  echo "FAIL: $CF is not installed (scripts/setup.sh installs clang-format-14)"
  echo "0 passed, 1 failed"
  exit 1
fi
formatted() {  # FILE: clang-format leaves it unchanged
  local d
  d=$(diff <("$CF" --style=file "$1") "$1") && return 0
  head -n 8 <<<"$d" | sed 's/^/    /'
  return 1
}
n=0
while IFS= read -r f; do
  n=$((n + 1))
  check "$f: differs from clang-format's output (clang-format-14 -i $f)" formatted "$f"
done < <(git ls-files '*.c' '*.h' '*.cc' '*.cu' '*.cuh')
check "sources found: got $n want > 100" test "$n" -gt 100
finish
