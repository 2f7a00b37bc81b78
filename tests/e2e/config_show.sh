#!/bin/sh
# config_show.sh STOKE WORKDIR - `stoke config show` as a user runs it: each setting's
# value and source through the precedence (file < env < flag, and a checkpoint's),
# auto answered by the tuner, the JSON form, and every error path naming the key and
# its source (a file's line, the variable, the flag), hostile files refused cleanly.
set -u
stoke=$1
work=$2
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
# the environment of the machine running the test must not leak into the sources
clear_config_env
unset STOKE_FAIL_ALLOC_AT_STEP
# auto as the rules answer it (the measured answer, the cache's: tests/e2e/tune.sh)
export STOKE_TUNE=off
small="--limit 300 --val-limit 100"

# expect_line WHAT PATTERN: $out has a line matching PATTERN (grep -E)
expect_line() {
    if grep -Eq -- "$2" "$out"; then ok "$1"; else fail "$1 (no line '$2')"; show "$out"; fi
}
# expect_error WHAT RC PATTERN CMD...: CMD exits with RC (not a signal) and says PATTERN
expect_error() {
    what=$1 want=$2 pat=$3
    shift 3
    "$@" >"$out" 2>&1
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$what: exit $rc, want $want"; show "$out"
    elif ! grep -Fq -- "$pat" "$out"; then
        fail "$what: no '$pat'"; show "$out"
    elif [ "$(wc -c <"$out")" -gt 2000 ]; then
        fail "$what: a message of $(wc -c <"$out") bytes"
    else
        ok "$what"
    fi
}

# --- precedence: file < env < flag, each source shown with where it came from
cfg=$work/run.yaml
printf 'batch_size: 32\nprefetch: 4\nlr: 0.1\nepochs: 2\n' >"$cfg"
BATCH_SIZE=64 PREFETCH_FACTOR=6 "$stoke" config show --config "$cfg" $small --batch-size 16 \
    >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "config show runs" || { fail "config show exit $rc"; show "$out"; }
expect_line "flag beats env and file" "^batch_size +16 +flag --batch-size$"
expect_line "env beats file" "^prefetch +6 +env PREFETCH_FACTOR$"
expect_line "file beats default" "^lr +0.1 +file $cfg$"
expect_line "file value" "^epochs +2 +file $cfg$"
expect_line "default" "^optimizer +sgd +default$"
expect_line "flag --limit" "^limit +300 +flag --limit$"
BATCH_SIZE=64 "$stoke" config show --config "$cfg" $small >"$out" 2>&1
expect_line "env beats file (no flag)" "^batch_size +64 +env BATCH_SIZE$"
"$stoke" config show --config "$cfg" $small >"$out" 2>&1
expect_line "file alone" "^batch_size +32 +file $cfg$"
# the seeds' variables
VAL_BATCH_SIZE=80 NUM_WORKERS=1 ACCUMULATE=3 PRECISION=bf16 EPOCHS=4 LR=0.02 SEED=7 \
    "$stoke" config show $small >"$out" 2>&1
for want in "^val_batch_size +80 +env VAL_BATCH_SIZE$" "^workers +1 +env NUM_WORKERS$" \
    "^accumulate +3 +env ACCUMULATE$" "^precision +bf16 +env PRECISION$" \
    "^epochs +4 +env EPOCHS$" "^lr +0.02 +env LR$" "^seed +7 +env SEED$"; do
    expect_line "seed variable: $want" "$want"
done
AMP=false "$stoke" config show $small >"$out" 2>&1
expect_line "AMP" "^precision +fp32 +env AMP$"

# --- auto: the tuner's answer and its reason, from every source
"$stoke" config show $small >"$out" 2>&1
expect_line "workers left open: a rule, with its reason" "^workers +[0-9]+ +rule: .{20,}"
expect_line "device auto by default: a rule" "^device +(cpu|cuda:[0-9]+) +rule: ."
printf 'precision: auto\nthreads: auto\n' >"$work/auto.yaml"
NUM_WORKERS=auto "$stoke" config show --config "$work/auto.yaml" $small --prefetch auto \
    >"$out" 2>&1
expect_line "auto from env" "^workers +[0-9]+ +rule: .*\(auto from env NUM_WORKERS\)$"
expect_line "auto from a flag" "^prefetch +[0-9]+ +rule: .*\(auto from flag --prefetch\)$"
# the device's hardware profile (docs/profiles.md) is named where the value starts from it
expect_line "the profile in the reason" "^prefetch +[0-9]+ +rule: .*profile '[a-z0-9-]+' \("
expect_line "auto from a file (precision)" \
    "^precision +(fp32|bf16|fp16) +rule: .*\(auto from file $work/auto.yaml\)$"
expect_line "auto from a file (threads)" "^threads +[0-9]+ +rule: .*\(auto from file "
printf 'version: 1\nprofiles: [1]\n' >"$work/profiles.yaml"
expect_error "a bad STOKE_PROFILES file" 1 "$work/profiles.yaml:2:12: profiles: expected a mapping" \
    env STOKE_PROFILES="$work/profiles.yaml" "$stoke" config show $small
# batch_size auto: the finder's batch and its numbers, from every source
"$stoke" config show $small --batch-size auto >"$out" 2>&1
expect_line "batch auto from a flag" \
    "^batch_size +[0-9]+ +rule: .*memory_safety.*fits [0-9]+.*\(auto from flag --batch-size\)$"
expect_line "the safety factor's default" "^memory_safety +0.7 +default$"
expect_line "a power of two by default" "^batch_pow2 +true +default$"
BATCH_SIZE=auto "$stoke" config show $small --memory-safety 0.5 --batch-pow2=false >"$out" 2>&1
expect_line "batch auto from env" "^batch_size +[0-9]+ +rule: (.*fit: )?50% .*\(auto from env BATCH_SIZE\)$"
expect_line "memory_safety from a flag" "^memory_safety +0.5 +flag --memory-safety$"
expect_line "batch_pow2 from a flag" "^batch_pow2 +false +flag --batch-pow2$"
printf 'batch_size: auto\nmemory_safety: 90%%\n' >"$work/bauto.yaml"
"$stoke" config show $small --config "$work/bauto.yaml" >"$out" 2>&1
expect_line "batch auto from a file" "^batch_size +[0-9]+ +rule: (.*fit: )?90% .*\(auto from file $work/bauto.yaml\)$"
expect_line "memory_safety from a file" "^memory_safety +0.9 +file $work/bauto.yaml$"
# effective_batch: the accumulation that reaches it, and what is reached
"$stoke" config show $small --batch-size 32 --effective-batch 100 >"$out" 2>&1
expect_line "effective_batch from a flag" "^effective_batch +100 +flag --effective-batch$"
expect_line "accumulate from effective_batch" \
    "^accumulate +4 +rule: effective_batch 100 at batch 32: 4 accumulated; .*the effective batch is 128$"
EFFECTIVE_BATCH=96 "$stoke" config show $small --batch-size 32 >"$out" 2>&1
expect_line "effective_batch from env" "^effective_batch +96 +env EFFECTIVE_BATCH$"
expect_line "an exact effective batch" "^accumulate +3 +rule: effective_batch 96 at batch 32: 3 accumulated$"
"$stoke" config show $small --recompute auto >"$out" 2>&1
expect_line "recompute auto: a rule, when allocated" "^recompute +auto +rule: decided when"

# --- JSON: parses, every key, {value, source, detail}
NUM_WORKERS=auto "$stoke" config show --json --config "$cfg" $small --batch-size 16 \
    >"$work/show.json" 2>"$out"
if /usr/bin/python3 - "$work/show.json" "$cfg" <<'PY'; then ok "JSON: every key, sources"; else fail "JSON"; show "$work/show.json" "$out"; fi
import json, sys
o = json.load(open(sys.argv[1]))
keys = """dataset val_dataset model hidden epochs max_steps batch_size val_batch_size
accumulate limit val_limit workers prefetch threads loader_delay_us precision device recompute
optimizer lr momentum nesterov weight_decay clip_norm schedule warmup_steps step_size gamma min_lr augment transforms
seed checkpoint resume log report log_every eval_every target_accuracy dry_run memory_budget
monitor effective_batch memory_safety batch_pow2 tune""".split()
assert sorted(o) == sorted(keys), set(o) ^ set(keys)
for k, e in o.items():
    assert set(e) == {"value", "source", "detail"}, (k, e)
    assert e["source"] in ("default", "file", "env", "flag", "checkpoint", "rule", "measured", "cached"), (k, e)
assert o["batch_size"] == {"value": 16, "source": "flag", "detail": "--batch-size"}, o["batch_size"]
assert o["lr"] == {"value": 0.1, "source": "file", "detail": sys.argv[2]}, o["lr"]
w = o["workers"]
assert w["source"] == "rule" and isinstance(w["value"], int) and w["value"] >= 0, w
assert w["detail"].endswith("(auto from env NUM_WORKERS)") and len(w["detail"]) > 40, w
assert o["optimizer"] == {"value": "sgd", "source": "default", "detail": ""}
assert o["nesterov"]["value"] is False and o["seed"]["value"] == "1"
PY

# --- a checkpoint's settings, when resuming
"$stoke" train $small --epochs 1 --batch-size 50 --lr 0.03 --checkpoint "$work/c.safetensors" \
    --no-monitor >"$out" 2>&1 || { fail "train for a checkpoint"; show "$out"; }
"$stoke" config show --resume "$work/c.safetensors" >"$out" 2>&1
expect_line "checkpoint source" "^batch_size +50 +checkpoint $work/c.safetensors$"
expect_line "checkpoint's lr" "^lr +0.03 +checkpoint "
expect_line "--resume itself a flag" "^resume +$work/c.safetensors +flag --resume$"

# --- errors: the key and its source; a usage error is 2, a bad file or variable 1
printf 'epochs: 2\nbatch_size: 8\nbatch_sise: 8\n' >"$work/typo.yaml"
expect_error "unknown key in a file" 1 "typo.yaml:3:1: unknown setting 'batch_sise'" \
    "$stoke" config show --config "$work/typo.yaml"
expect_error "unknown flag" 2 "unknown option '--batch-sise'" \
    "$stoke" config show --batch-sise 8
printf 'lr: fast\n' >"$work/type.yaml"
expect_error "wrong type in a file" 1 "type.yaml:1:5: lr: 'fast' is not a number" \
    "$stoke" config show --config "$work/type.yaml"
printf 'epochs: 1\nbatch_size: 0\n' >"$work/range.yaml"
expect_error "out of range in a file" 1 "range.yaml:2:13: batch_size: '0' is not a whole number" \
    "$stoke" config show --config "$work/range.yaml"
expect_error "wrong type in env" 1 "environment BATCH_SIZE=many: batch_size: 'many'" \
    env BATCH_SIZE=many "$stoke" config show
expect_error "out of range in env" 1 "environment PREFETCH_FACTOR=5000: prefetch: '5000'" \
    env PREFETCH_FACTOR=5000 "$stoke" config show
expect_error "bad choice in env" 1 "environment PRECISION=fp64: precision: 'fp64'" \
    env PRECISION=fp64 "$stoke" config show
expect_error "AMP beside PRECISION" 1 "AMP=true and PRECISION=fp32: both set the precision" \
    env AMP=true PRECISION=fp32 "$stoke" config show
expect_error "wrong type as a flag" 2 "--workers: 'few' is not a whole number" \
    "$stoke" config show --workers few
expect_error "out of range as a flag" 2 "--val-batch-size: '0' is not a whole number" \
    "$stoke" config show --val-batch-size 0
expect_error "effective_batch beside accumulate" 1 \
    "effective_batch (flag) and accumulate (env) both set the accumulation: give one" \
    env ACCUMULATE=2 "$stoke" config show $small --effective-batch 64
expect_error "memory_safety 0 as a flag" 2 "--memory-safety: '0' is not a fraction in (0, 1]" \
    "$stoke" config show --memory-safety 0
printf 'memory_safety: 1.5\n' >"$work/safety.yaml"
expect_error "memory_safety above 1 in a file" 1 "safety.yaml:1:16: memory_safety: '1.5' is not a fraction" \
    "$stoke" config show --config "$work/safety.yaml"
expect_error "effective_batch out of range in env" 1 \
    "environment EFFECTIVE_BATCH=-3: effective_batch: '-3' is not a whole number" \
    env EFFECTIVE_BATCH=-3 "$stoke" config show
expect_error "batch_pow2 not a bool" 2 "--batch-pow2: 'sometimes' is not true or false" \
    "$stoke" config show --batch-pow2=sometimes
expect_error "batch auto: not even batch 1" 1 "batch_size auto: not even batch 1 fits" \
    "$stoke" config show $small --batch-size auto --memory-budget 1M
expect_error "auto where the tuner decides nothing" 2 "--epochs: 'auto' is for the settings" \
    "$stoke" config show --epochs auto
expect_error "a missing file" 1 "nope.yaml" "$stoke" config show --config "$work/nope.yaml"
expect_error "config alone" 2 "a subcommand is needed: show" "$stoke" config
expect_error "a bad subcommand" 2 "unknown subcommand 'shw'" "$stoke" config shw
expect_error "config show --help" 0 "usage: stoke config show" "$stoke" config show --help

# --- hostile files: refused with the file named, no crash, a bounded message
/usr/bin/python3 -c "print('epochs: ' + '[' * 100000 + ']' * 100000)" >"$work/deep.yaml"
expect_error "deep nesting" 1 "deep.yaml:1:" "$stoke" config show --config "$work/deep.yaml"
printf 'batch_size: 8\nepochs: 1\nbatch-size: 9\n' >"$work/dup.yaml"
expect_error "a duplicate key" 1 "dup.yaml:3:1: batch-size: key given twice (first at line 1" \
    "$stoke" config show --config "$work/dup.yaml"
/usr/bin/python3 -c "print('dataset: ' + 'x' * 1048576)" >"$work/big.yaml"
expect_error "a 1 MB value" 1 "big.yaml:1:10: dataset: 'xxxx" \
    "$stoke" config show --config "$work/big.yaml"
grep -q "(1048576 characters) is longer than 511" "$out" && ok "the 1 MB value's length said" ||
    { fail "the 1 MB value's length"; show "$out"; }
e2e_end
