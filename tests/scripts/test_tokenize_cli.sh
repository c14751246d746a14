#!/usr/bin/env bash
# `kf tokenize` command line: --help, usage and input errors with their exit
# codes, line handling (empty lines, no final newline), decode round trips.
set -u
cd "$(dirname "$0")/../.."
KF=${KF_BIN:-bin/kf}
V=data/vocab/gpt2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
. tests/scripts/lib_check.sh

"$KF" tokenize --help >"$T/help"; rc=$?
check "--help: rc $rc" eval "[ $rc -eq 0 ] && grep -q -- '--allow-special' '$T/help'"
"$KF" tokenize gpt2 </dev/null 2>"$T/err"; rc=$?
check "missing --vocab: rc $rc" eval "[ $rc -eq 2 ] && grep -q -- '--vocab' '$T/err'"
"$KF" tokenize gpt5 --vocab $V </dev/null 2>/dev/null; rc=$?
check "unknown tokenizer: rc $rc" eval "[ $rc -eq 2 ]"
"$KF" tokenize gpt2 --vocab $V --bogus </dev/null 2>/dev/null; rc=$?
check "unknown option: rc $rc" eval "[ $rc -eq 2 ]"
"$KF" tokenize gpt2 --vocab "$T/none" </dev/null 2>"$T/err"; rc=$?
check "missing vocab dir: rc $rc, $(cat "$T/err")" eval "[ $rc -eq 1 ] && grep -q '$T/none/vocab.json' '$T/err'"

# one output line per input line; empty lines give empty lines; no final newline is fine
printf 'hello world\n\n  two\tlines  \nlast without newline' >"$T/in"
"$KF" tokenize gpt2 --vocab $V <"$T/in" >"$T/ids"
check "line structure: $(cat "$T/ids")" eval "[ \$(wc -l <'$T/ids') -eq 4 ] && [ -z \"\$(sed -n 2p '$T/ids')\" ]"
"$KF" tokenize gpt2 --vocab $V --decode <"$T/ids" >"$T/back"
printf '\n' >>"$T/in"
check "decode round trip" eval "cmp -s '$T/in' '$T/back'"
: | "$KF" tokenize gpt2 --vocab $V >"$T/empty"
check "empty input gives empty output" eval "[ ! -s '$T/empty' ]"

# decode errors name the line
printf '15496 995\n15496 x\n' | "$KF" tokenize gpt2 --vocab $V --decode >/dev/null 2>"$T/err"; rc=$?
check "non-numeric id: rc $rc, $(cat "$T/err")" eval "[ $rc -eq 1 ] && grep -q 'stdin:2' '$T/err'"
printf '1\n2\n50257\n' | "$KF" tokenize gpt2 --vocab $V --decode >/dev/null 2>"$T/err"; rc=$?
check "out-of-range id: rc $rc, $(cat "$T/err")" eval "[ $rc -eq 1 ] && grep -q '50257' '$T/err'"

# a long line (bigger than the 8 MiB input block) survives intact
{ head -c 12000000 /dev/zero | tr '\0' 'a' | sed 's/aaaaaaa/aaaaaa /g'; echo; } >"$T/long"
"$KF" tokenize gpt2 --vocab $V <"$T/long" | "$KF" tokenize gpt2 --vocab $V --decode >"$T/long.back"
check "12 MB line round trip" eval "cmp -s '$T/long' '$T/long.back'"

# invalid UTF-8 is replaced and reported
printf 'a\x80b\n' | "$KF" tokenize gpt2 --vocab $V 2>"$T/err" >"$T/ids"; rc=$?
check "invalid UTF-8 report: $(cat "$T/err")" eval "[ $rc -eq 0 ] && grep -q '1 invalid UTF-8' '$T/err'"
check "U+FFFD in decoded text" eval "[ \"\$('$KF' tokenize gpt2 --vocab $V --decode <'$T/ids')\" = \"\$(printf 'a\xef\xbf\xbdb')\" ]"

finish
