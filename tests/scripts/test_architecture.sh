#!/usr/bin/env bash
# docs/architecture.md's dependency rules hold in the code: every #include
# "DIR/FILE.h" between two folders of the project (a top-level folder, or
# one of trainer/'s and bench/'s subfolders; kernels/cuda counts as kernels)
# is an edge that the document's "Allowed includes" list permits, every
# folder with sources is in that list, and the list itself has no cycle.
# tests/ and tools/ may include anything and are not checked.
set -u
cd "$(dirname "$0")/../.."
. tests/scripts/lib_check.sh
DOC=docs/architecture.md
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# the folder of each path on stdin (see above)
folders() {
  awk '{ n = split($0, p, "/");
         if (n == 1) print "(root)";
         else if ((p[1] == "trainer" || p[1] == "bench") && n > 2) print p[1] "/" p[2];
         else print p[1] }'
}

# the allowed list: the lines "FOLDER: DEP DEP ..." between the markers
sed -n '/^<!-- allowed-includes begin -->/,/^<!-- allowed-includes end -->/p' "$DOC" |
  grep -E '^[a-z(][a-z/()]*:' >"$T/allowed"
check "$DOC has an allowed-includes list" test -s "$T/allowed"
while IFS=: read -r from deps; do
  for to in $deps; do echo "$from $to"; done
done <"$T/allowed" >"$T/edges_allowed"
cut -d: -f1 "$T/allowed" | sort >"$T/listed"

# the edges in the code, with one file that makes each (one grep over every
# source; a header not in the tree, such as emu's CUDA headers, is skipped)
git ls-files '*.c' '*.h' '*.cu' | grep -vE '^(tests|tools)/' >"$T/sources"
xargs grep -HoE '^#include "[A-Za-z0-9_/.]+"' <"$T/sources" |
  sed -E 's/^([^:]+):#include "(.*)"$/\1 \2/' >"$T/includes"
while read -r f inc; do [ -f "$inc" ] && echo "$f $inc"; done <"$T/includes" >"$T/found"
paste -d' ' <(cut -d' ' -f2 "$T/found" | folders) <(cut -d' ' -f1 "$T/found" | folders) \
  <(cut -d' ' -f1 "$T/found") | awk '$1 != $2 { print $2, $1, $3 }' >"$T/edges"
check "found the include edges" test -s "$T/edges"

# every edge allowed
while read -r from to f; do
  if grep -qx "$from $to" "$T/edges_allowed"; then ok
  else bad "$f includes $to/, but $DOC does not allow $from -> $to"; fi
done < <(sort -u -k1,2 "$T/edges")

# every folder with sources listed
folders <"$T/sources" | sort -u >"$T/folders"
while read -r d; do
  check "folder $d is in $DOC's allowed-includes list" grep -qx "$d" "$T/listed"
done <"$T/folders"

# the list has no cycle (tsort reports one)
if tsort "$T/edges_allowed" >/dev/null 2>"$T/tsort"; then ok
else bad "the allowed includes form a cycle: $(head -n 3 "$T/tsort")"; fi
finish
