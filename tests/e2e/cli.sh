#!/bin/sh
# cli.sh STOKE - `stoke` itself: help, version, unknown commands, per-command help.
set -u
stoke=$1
fails=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

expect() { # expect NAME WANTED_STATUS PATTERN -- ARGS...
    name=$1 want=$2 pattern=$3
    shift 4
    "$stoke" "$@" >"$out" 2>&1
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL $name: exit $got, wanted $want"; sed 's/^/  | /' "$out"; fails=$((fails + 1))
    elif ! grep -q -- "$pattern" "$out"; then
        echo "FAIL $name: output lacks '$pattern'"; sed 's/^/  | /' "$out"; fails=$((fails + 1))
    else
        echo "ok   $name"
    fi
}

expect version 0 '^stoke [0-9][0-9.]*$' -- --version
expect help 0 'usage: stoke <command>' -- help
expect help-lists-probe 0 '  probe ' -- help
expect help-lists-monitor 0 '  monitor ' -- --help
expect no-args 2 'usage: stoke' --
expect unknown 2 "unknown command 'frobnicate'" -- frobnicate
expect help-unknown 2 "unknown command 'frobnicate'" -- help frobnicate
for cmd in probe monitor data train eval predict; do
    expect "$cmd-help" 0 "stoke $cmd" -- "$cmd" --help
    expect "help-$cmd" 0 "stoke $cmd" -- help "$cmd"
    expect "$cmd-bad-option" 2 "stoke $cmd" -- "$cmd" --no-such-option
done

echo "$fails failed"
[ "$fails" -eq 0 ]
