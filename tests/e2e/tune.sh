#!/bin/sh
# tune.sh STOKE WORKDIR - `stoke tune` and `auto` in `stoke train` as a user runs them
# on Fashion-MNIST: the trials printed, the choice consistent with what the trials
# measured, the settings file train reads, the cache a later run starts from (and a
# corrupt or unwritable one), the grid, and every error path. No timing is judged:
# only that the choice follows from the numbers the trials printed.
set -u
stoke=$1
work=$2
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
clear_config_env
py=/usr/bin/python3
small="--limit 2048 --val-limit 100"
fast="--trial-seconds 0.1"

expect_line() {
    if grep -Eq -- "$2" "$out"; then ok "$1"; else fail "$1 (no line '$2')"; show "$out"; fi
}
expect_no_line() {
    if grep -Eq -- "$2" "$out"; then fail "$1 (a line '$2')"; show "$out"; else ok "$1"; fi
}
expect_error() {
    what=$1 want=$2 pat=$3
    shift 3
    "$@" >"$out" 2>&1
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$what: exit $rc, want $want"; show "$out"
    elif ! grep -Fq -- "$pat" "$out"; then
        fail "$what: no '$pat'"; show "$out"
    else
        ok "$what"
    fi
}

# --- stoke tune: every trial printed, the choice, the file, the cache
"$stoke" tune $small $fast --output "$work/tuned.yaml" >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "tune runs" || { fail "tune exit $rc"; show "$out"; }
expect_line "trials printed" "^trial 1 \(start\): batch [0-9]+, [0-9]+ workers? \+ [0-9]+ threads?, prefetch [0-9]+, fp32 -> [0-9]+ samples/s, data wait [0-9.]+%"
expect_line "the choice" "^[0-9]+ trials in [0-9.]+ s\. Chosen: batch [0-9]+, "
expect_line "why the batch" "^  batch_size: samples/s by batch as the trials measured them \(fed: "
expect_line "why the workers" "^  workers: samples/s by loader workers \+ compute threads: "
expect_line "the file written" "^written: $work/tuned.yaml \(stoke train --config"
expect_line "cached" "^cached: $work/cache/tune/[0-9a-f]{16}\.yaml"
cp "$out" "$work/tune.txt"

# the file is a settings file train reads: every value from it
"$stoke" config show --config "$work/tuned.yaml" $small >"$out" 2>&1
for k in batch_size workers prefetch threads precision; do
    expect_line "$k read from the file" "^$k +[0-9a-z]+ +file $work/tuned.yaml$"
done
# and it is what tune chose
chosen=$(sed -n 's/.*Chosen: batch \([0-9]*\), \([0-9]*\) loader workers\{0,1\}, \([0-9]*\) compute threads\{0,1\}, prefetch \([0-9]*\), \([a-z0-9]*\):.*/\1 \2 \3 \4 \5/p' "$work/tune.txt")
set -- $chosen
if [ $# -eq 5 ] && grep -q "^batch_size: $1$" "$work/tuned.yaml" && grep -q "^workers: $2$" "$work/tuned.yaml" &&
    grep -q "^threads: $3$" "$work/tuned.yaml" && grep -q "^prefetch: $4$" "$work/tuned.yaml" &&
    grep -q "^precision: $5$" "$work/tuned.yaml"; then
    ok "the file holds the choice printed"
else
    fail "the file is not the choice '$chosen'"; show "$work/tuned.yaml"
fi
tb=$1

# --- JSON: the choice follows from the trials' own numbers
"$stoke" tune $small $fast --json --no-cache --output "$work/tuned2.yaml" >"$work/tune.json" 2>"$out"
rc=$?
[ $rc -eq 0 ] && ok "tune --json runs" || { fail "tune --json exit $rc"; show "$out"; }
if "$py" - "$work/tune.json" <<'EOF' >"$out" 2>&1; then ok "JSON: schema and a choice the trials support"; else fail "JSON"; show "$out"; fi
import json, sys
d = json.load(open(sys.argv[1]))
keys = ("batch_size", "workers", "prefetch", "threads", "precision")
num = ("steps", "seconds", "samples_per_s", "data_wait_pct", "step_ms", "produce_ms",
       "produce_p95_ms", "memory_bytes")
assert d["trials"] and not d["grid"] and d["seconds"] > 0
for t in d["trials"]:
    assert t["stage"] in ("start", "precision", "batch", "workers", "prefetch", "confirm"), t
    assert all(k in t for k in keys), t
    if t["ran"]:
        assert all(isinstance(t[k], (int, float)) and t[k] >= 0 for k in num), t
        assert t["finite"] is True, t
    else:
        assert t["error"], t
c = d["chosen"]
pt = lambda t: tuple(t[k] for k in keys)
same = [t for t in d["trials"] if pt(t) == pt(c)]
assert len(same) == 1 and same[0]["samples_per_s"] == c["samples_per_s"], (same, c)
# the split: no other workers count at the chosen batch measured 3% more than the choice
rivals = [t for t in d["trials"] if t["ran"] and t["batch_size"] == c["batch_size"]
          and t["prefetch"] == c["prefetch"] and t["stage"] == "workers"]
for t in rivals:
    assert t["samples_per_s"] <= c["samples_per_s"] * 1.031 or t["workers"] > c["workers"], (t, c)
# the batch: the smallest of those tried whose fed rate is within 5% of the fastest
assert set(d["why"]) == set(keys), d["why"]
assert "smallest within 5%" in d["why"]["batch_size"], d["why"]
assert len(d["trials"]) < 40
EOF

# --- auto in train: the cache answers (no trial), and says so
"$stoke" config show $small --batch-size "$tb" --workers auto --threads auto --prefetch auto \
    --precision auto >"$out" 2>&1
expect_line "config show: workers cached" "^workers +[0-9]+ +cached: measured by an earlier run's trials .*\(auto from flag --workers\)$"
expect_line "config show: precision cached" "^precision +[a-z0-9]+ +cached: "
"$stoke" train $small --batch-size "$tb" --workers auto --threads auto --prefetch auto \
    --precision auto --max-steps 3 --no-monitor >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "train from the cache" || { fail "train exit $rc"; show "$out"; }
expect_no_line "no trial run" "^tune: trial"
expect_line "the threads line says cached" "^threads: .*cached: measured by an earlier run"

# a slowed loader (bench's robustness knob) is another key: its trials are its own
"$stoke" config show $small --batch-size "$tb" --workers auto --loader-delay-us 500 >"$out" 2>&1
expect_line "a slowed loader: not the cache's" "^workers +[0-9]+ +rule: auto, not measured yet"

# a setting given that differs from the cached one: measured again, said why
"$stoke" config show $small --batch-size $((tb * 2)) --workers auto >"$out" 2>&1
expect_line "another batch: not the cache's" "^workers +[0-9]+ +rule: auto, not measured yet \(.*measured with another batch_size"

# a miss in train: trials first, printed as the run's lines, then cached
"$stoke" train --limit 1024 --val-limit 100 --workers auto --max-steps 3 --no-monitor \
    >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "train measures its auto settings" || { fail "train exit $rc"; show "$out"; }
expect_line "the trials as the run's lines" "^tune: trial 1 \(start\): "
expect_line "and their verdict" "^tune: [0-9]+ trials in [0-9.]+ s: [0-9]+ samples/s$"
expect_line "the workers line says measured" "loader workers? \(measured: samples/s by loader"
"$stoke" train --limit 1024 --val-limit 100 --workers auto --max-steps 3 --no-monitor \
    >"$out" 2>&1
expect_no_line "the next run starts tuned" "^tune: trial"

# batch auto measured too, and an effective batch reached by accumulation at it
"$stoke" train --limit 1024 --val-limit 100 --batch-size auto --effective-batch 512 \
    --workers auto --max-steps 2 --no-monitor >"$out" 2>&1
expect_line "batch auto measured" "^batch: [0-9]+ \(auto: measured: samples/s by batch as the trials measured them"
expect_line "the effective batch at it" "^accumulate: [0-9]+ \(auto: effective_batch 512 at batch "
# tune: cache answers from the cache or leaves auto to the rules; off never measures
"$stoke" train --limit 700 --val-limit 100 --workers auto --tune cache --max-steps 2 \
    --no-monitor >"$out" 2>&1
expect_no_line "tune cache: no trials" "^tune: "
expect_line "tune cache: the rule, and why" "loader workers? \(auto, not measured yet \(not measured before; tune: cache runs no trials\): the rule: "
STOKE_TUNE=off "$stoke" train --limit 1024 --val-limit 100 --workers auto --max-steps 2 \
    --no-monitor >"$out" 2>&1
expect_no_line "tune off: no trials" "^tune: "
expect_no_line "tune off: not the cache" "\\(cached: "

# a corrupt cache entry: measured again, never a crash, rewritten whole
for f in "$work"/cache/tune/*.yaml; do printf 'workers: [1\n\001\377' >"$f"; done
"$stoke" train --limit 1024 --val-limit 100 --workers auto --max-steps 3 --no-monitor \
    >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "a corrupt cache is measured again" || { fail "exit $rc"; show "$out"; }
expect_line "and says why" "^tune: measuring workers by short trials \(.*yaml"
newest=$(ls -t "$work"/cache/tune/*.yaml | head -n 1)
if "$stoke" config show --config "$newest" --limit 10 >/dev/null 2>&1 && grep -q '^# key: ' "$newest"; then
    ok "the entry is whole again"
else
    fail "the cache entry left corrupt"; show "$newest"
fi

# an unwritable cache: the run goes on and says so
STOKE_CACHE_DIR=/proc/stoke-no-such-dir "$stoke" train --limit 512 --val-limit 100 \
    --workers auto --max-steps 2 --no-monitor >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "an unwritable cache is not fatal" || { fail "exit $rc"; show "$out"; }
expect_line "and is said" "cache not written: .*stoke-no-such-dir"

# --- the grid: every combination, the fastest, not cached
"$stoke" tune --limit 1024 --val-limit 100 --batch-size 64 --precision fp32 --trial-seconds 0.05 \
    --grid --json --output "$work/grid.yaml" >"$work/grid.json" 2>"$out"
rc=$?
[ $rc -eq 0 ] && ok "tune --grid runs" || { fail "grid exit $rc"; show "$out"; }
if "$py" - "$work/grid.json" <<'EOF' >"$out" 2>&1; then ok "grid: every point, the fastest chosen"; else fail "grid"; show "$out"; fi
import json, os, sys
d = json.load(open(sys.argv[1]))
cpus = len(os.sched_getaffinity(0))
assert d["grid"] and d["cache"] == "" or d["grid"], d
pts = {(t["workers"], t["threads"], t["prefetch"]) for t in d["trials"]}
assert len(pts) == len(d["trials"]) == (cpus + 1) * cpus * 3, (len(pts), len(d["trials"]), cpus)
best = max(t["samples_per_s"] for t in d["trials"] if t["ran"])
assert d["chosen"]["samples_per_s"] == best
EOF

# --- errors
expect_error "nothing to tune" 1 "nothing to tune" "$stoke" tune $small --batch-size 64 \
    --workers 1 --prefetch 2 --threads 1 --precision fp32
expect_error "--trial-seconds 0" 2 "--trial-seconds needs seconds" "$stoke" tune --trial-seconds 0
expect_error "--trial-seconds junk" 2 "--trial-seconds needs seconds" "$stoke" tune --trial-seconds 1e999
expect_error "--output without a name" 2 "--output needs a value" "$stoke" tune --output
expect_error "--dry-run" 2 "tune measures by training" "$stoke" tune --dry-run
expect_error "--resume" 2 "a resumed run keeps" "$stoke" tune --resume "$work/none.safetensors"
expect_error "an unknown option" 2 "--bogus" "$stoke" tune --bogus
expect_error "a missing dataset" 1 "no-such-data" "$stoke" tune --dataset "$work/no-such-data"
expect_error "an unwritable output" 1 "$work/no/dir/t.yaml" "$stoke" tune $small $fast \
    --precision fp32 --batch-size 64 --output "$work/no/dir/t.yaml"
[ ! -e "$work/no/dir/t.yaml" ] && ok "nothing half-written" || fail "a partial output"
# a run that diverges in every trial: said, with the step that stopped it
expect_error "every trial diverges" 1 "is not finite" "$stoke" tune --limit 512 --val-limit 100 \
    --lr 1000 --momentum 0.99 --batch-size 64 --precision fp32 --prefetch 2 --threads 1 \
    --trial-seconds 0.05 --no-cache
"$stoke" tune --help >"$out" 2>&1 && grep -q "usage: stoke tune" "$out" && ok "help" || fail "help"
e2e_end
