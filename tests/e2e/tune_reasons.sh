#!/bin/sh
# tune_reasons.sh STOKE WORKDIR - what a newcomer met with auto settings (issue 24):
# a resumed run decides as the first run did, batch auto keeps enough steps an epoch
# and its reason reports the trials' own figures, a long reason is never cut mid-word,
# rules and measurements are told apart, and every flag train parses is in its help.
# No timing is judged: only that what is printed agrees with itself.
set -u
stoke=$1
work=$2
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
clear_config_env
# no bf16 kernels whatever the CPU: the precision rule is fp32, which trials keep
# without a reason of their own (the empty "(auto: )" a newcomer saw)
export STOKE_MAX_CPU_ISA=avx2
py=/usr/bin/python3

expect_line() {
    if grep -Eq -- "$2" "$out"; then ok "$1"; else fail "$1 (no line '$2')"; show "$out"; fi
}
expect_no_line() {
    if grep -Eq -- "$2" "$out"; then fail "$1 (a line '$2')"; show "$out"; else ok "$1"; fi
}

# --- every flag train parses is in its help: the keys are the parser's table
"$stoke" config show --json --limit 100 --val-limit 10 >"$work/keys.json" 2>"$out" ||
    { fail "config show --json"; show "$out"; }
"$stoke" train --help >"$work/help.txt" 2>&1
if $py - "$work/keys.json" "$work/help.txt" >"$out" 2>&1 <<'PY'
import json, re, sys
keys = json.load(open(sys.argv[1]))
help = open(sys.argv[2]).read()
missing = []
for k in keys:
    flag = "--no-monitor" if k == "monitor" else "--" + k.replace("_", "-")
    if not re.search(re.escape(flag) + r"(?![a-z0-9-])", help):
        missing.append(flag)
assert not missing, "not in stoke train --help: " + " ".join(missing)
assert len(keys) > 40, len(keys)
PY
then ok "every flag train parses is in its help"; else fail "train --help"; show "$out"; fi

# --- rules are not measurements: config show names the source as it is
"$stoke" config show --limit 100 --val-limit 10 >"$out" 2>&1
expect_line "device by a rule" "^device +(cpu|cuda:[0-9]+) +rule: ."
expect_line "workers by a rule" "^workers +[0-9]+ +rule: .{20,}"
expect_no_line "nothing said tuned" " tuned"
"$stoke" config show --json --limit 100 --val-limit 10 >"$work/show.json" 2>&1
if $py - "$work/show.json" >"$out" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("device", "workers", "threads", "prefetch", "precision"):
    assert d[k]["source"] == "rule" and d[k]["detail"], (k, d[k])
PY
then ok "config show --json: rule"; else fail "config show --json"; show "$out"; fi

# --- a long reason fits, or is cut visibly at a word: never "...samples), roun)"
"$stoke" train --batch-size auto --dry-run >"$out" 2>&1
expect_line "batch auto's reason ends whole" \
    "^batch: [0-9]+ \(.*fits [0-9]+( \(capped by the [0-9]+ samples\))?(, rounded down to a power of two: [0-9]+)?\)$"

# --- batch auto measured on 2000 samples: enough steps an epoch, and the decision
# reports the figures the trials printed
"$stoke" train --limit 2000 --val-limit 100 --epochs 1 --batch-size auto --precision auto \
    --no-monitor --checkpoint "$work/run.safetensors" >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "batch auto runs" || { fail "exit $rc"; show "$out"; }
cp "$out" "$work/first.txt"
expect_line "batch auto measured" "^batch: [0-9]+ \(auto: measured: samples/s by batch"
expect_line "the ceiling keeps 50 steps" "the ceiling 32, a power of two: at most 40 keeps an epoch of 2000 samples at least 50 optimizer steps\)\)$"
expect_no_line "no empty reason" "\((auto|cached|measured): *\)|: \)$"
if $py - "$work/first.txt" >"$out" 2>&1 <<'PY'
import re, sys
text = open(sys.argv[1]).read()
batch = int(re.search(r"^batch: (\d+) \(", text, re.M).group(1))
assert batch <= 40, "batch %d: fewer than 50 steps an epoch of 2000" % batch
steps = int(re.search(r"^done: 1 epoch, (\d+) steps", text, re.M).group(1))
assert steps >= 50, steps
# every batch the decision lists is a trial's figure, as the trial printed it
trials = {}
for m in re.finditer(r"^tune: trial \d+ \(\w+\): batch (\d+), (\d+) workers? \+ (\d+) threads?, "
                     r"prefetch \d+, \w+ -> (\d+) samples/s", text, re.M):
    trials.setdefault(int(m.group(1)), set()).add(int(m.group(4)))
line = re.search(r"^batch: .*$", text, re.M).group(0)
listed = re.findall(r" (\d+): (\d+)(?: \(fed \d+\))?;", line)
assert listed, line
for b, v in listed:
    assert int(v) in trials.get(int(b), ()), (b, v, trials)
tried = sorted(int(b) for b, _ in listed)
want = "(tried %d to %d;" % (tried[0], tried[-1]) if len(tried) > 1 else "(tried %d;" % tried[0]
assert want in line, (want, line)
PY
then ok "the decision's figures are the trials'"; else fail "the decision's figures"; show "$out"; fi

# --- a resumed run decides as the first did: its checkpoint is a source, nothing is
# measured that the first run left to the rules
"$stoke" train --resume "$work/run.safetensors" --epochs 2 --no-monitor >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "resume runs" || { fail "resume exit $rc"; show "$out"; }
expect_no_line "resume measures nothing" "^tune: "
expect_line "resume: precision with its reason" "^precision: fp32 \(.{10,}\)"
expect_no_line "resume: no empty reason" "\((auto|cached|measured): *\)|: \)$"
e2e_end
