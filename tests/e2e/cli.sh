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

# A bad STOKE_MAX_CPU_ISA stops every command before it starts, naming the variable.
for cmd in probe train; do
    STOKE_MAX_CPU_ISA=avx3 "$stoke" "$cmd" >"$out" 2>&1
    got=$?
    if [ "$got" -eq 2 ] && grep -q "STOKE_MAX_CPU_ISA='avx3' is not a CPU ISA level; accepted values" "$out"; then
        echo "ok   $cmd-bad-isa-cap"
    else
        echo "FAIL $cmd-bad-isa-cap: exit $got"; sed 's/^/  | /' "$out"; fails=$((fails + 1))
    fi
done

# Output that cannot be written is an error, not exit 0 (/dev/full: every write fails
# with ENOSPC, as on a full disk), for every command through the one check in main.
for args in "--version" "help" "probe" "data --help"; do
    # shellcheck disable=SC2086 # args is a word list
    "$stoke" $args >/dev/full 2>"$out"
    got=$?
    if [ "$got" -eq 1 ] && grep -q "cannot write the standard output: No space left on device\|cannot write the report" "$out"; then
        echo "ok   stdout full: $args"
    else
        echo "FAIL stdout full: $args: exit $got"; sed 's/^/  | /' "$out"; fails=$((fails + 1))
    fi
done

# stoke ignores SIGXFSZ for its own writes (a file-size limit becomes a message); a
# command it starts gets the disposition stoke inherited: here the default, so `head`
# past `ulimit -f` dies of SIGXFSZ (128 + 25) as it would without stoke.
big=$(mktemp)
STOKE_NVML_LIBRARY=/nonexistent "$stoke" monitor --interval 0.05 -- \
    sh -c 'ulimit -f 1; head -c 4096 /dev/zero >"$0"' "$big" >"$out" 2>&1
got=$?
rm -f "$big"
if [ "$got" -eq 153 ]; then
    echo "ok   monitor-child-sigxfsz"
else
    echo "FAIL monitor-child-sigxfsz: exit $got, wanted 153"; sed 's/^/  | /' "$out"; fails=$((fails + 1))
fi

echo "$fails failed"
[ "$fails" -eq 0 ]
