#!/usr/bin/env bash
# `kf tokenize` command line: --help, usage and input errors with their exit
# codes, line handling (empty lines, no final newline), decode round trips.
set -u
cd "$(dirname "$0")/../.."
KF=${KF_BIN:-bin/kf}
V=data/vocab/gpt2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; fi; }

"$KF" tokenize --help >"$T/help"; rc=$?
check "[ $rc -eq 0 ] && grep -q -- '--allow-special' '$T/help'" "--help: rc $rc"
"$KF" tokenize gpt2 </dev/null 2>"$T/err"; rc=$?
check "[ $rc -eq 2 ] && grep -q -- '--vocab' '$T/err'" "missing --vocab: rc $rc"
"$KF" tokenize gpt5 --vocab $V </dev/null 2>/dev/null; rc=$?
check "[ $rc -eq 2 ]" "unknown tokenizer: rc $rc"
"$KF" tokenize gpt2 --vocab $V --bogus </dev/null 2>/dev/null; rc=$?
check "[ $rc -eq 2 ]" "unknown option: rc $rc"
"$KF" tokenize gpt2 --vocab "$T/none" </dev/null 2>"$T/err"; rc=$?
check "[ $rc -eq 1 ] && grep -q '$T/none/vocab.json' '$T/err'" "missing vocab dir: rc $rc, $(cat "$T/err")"

# one output line per input line; empty lines give empty lines; no final newline is fine
printf 'hello world\n\n  two\tlines  \nlast without newline' >"$T/in"
"$KF" tokenize gpt2 --vocab $V <"$T/in" >"$T/ids"
check "[ \$(wc -l <'$T/ids') -eq 4 ] && [ -z \"\$(sed -n 2p '$T/ids')\" ]" "line structure: $(cat "$T/ids")"
"$KF" tokenize gpt2 --vocab $V --decode <"$T/ids" >"$T/back"
printf '\n' >>"$T/in"
check "cmp -s '$T/in' '$T/back'" "decode round trip"
: | "$KF" tokenize gpt2 --vocab $V >"$T/empty"
check "[ ! -s '$T/empty' ]" "empty input gives empty output"

# decode errors name the line
printf '15496 995\n15496 x\n' | "$KF" tokenize gpt2 --vocab $V --decode >/dev/null 2>"$T/err"; rc=$?
check "[ $rc -eq 1 ] && grep -q 'stdin:2' '$T/err'" "non-numeric id: rc $rc, $(cat "$T/err")"
printf '1\n2\n50257\n' | "$KF" tokenize gpt2 --vocab $V --decode >/dev/null 2>"$T/err"; rc=$?
check "[ $rc -eq 1 ] && grep -q '50257' '$T/err'" "out-of-range id: rc $rc, $(cat "$T/err")"

# a long line (bigger than the 8 MiB input block) survives intact
{ head -c 12000000 /dev/zero | tr '\0' 'a' | sed 's/aaaaaaa/aaaaaa /g'; echo; } >"$T/long"
"$KF" tokenize gpt2 --vocab $V <"$T/long" | "$KF" tokenize gpt2 --vocab $V --decode >"$T/long.back"
check "cmp -s '$T/long' '$T/long.back'" "12 MB line round trip"

# invalid UTF-8 is replaced and reported
printf 'a\x80b\n' | "$KF" tokenize gpt2 --vocab $V 2>"$T/err" >"$T/ids"; rc=$?
check "[ $rc -eq 0 ] && grep -q '1 invalid UTF-8' '$T/err'" "invalid UTF-8 report: $(cat "$T/err")"
check "[ \"\$('$KF' tokenize gpt2 --vocab $V --decode <'$T/ids')\" = \"\$(printf 'a\xef\xbf\xbdb')\" ]" "U+FFFD in decoded text"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
