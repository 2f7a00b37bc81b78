#!/bin/sh
# train_batch.sh STOKE WORKDIR FAKEDIR SCENARIODIR STOKE_SEAMS - `stoke train --batch-size auto` on a slice of Debian's
# Fashion-MNIST: --dry-run says the batch found and plans at it, a budget and the
# safety factor shrink it, --limit caps it; a short run trains at it (its log's start
# record), reaching an effective batch by accumulation; an injected allocation failure
# (STOKE_SEAMS, tests/stoke_seams.c: stoke with the CPU allocator seam refusing blocks
# above REFUSE_ALLOC_ABOVE bytes) halves the batch, doubles the accumulation and
# completes. With the CUDA test doubles: the fit in a GPU's free memory, and a failure
# within training (the same executable with the trainer's fault seam: STEP_FAULT=N)
# ending with the losses of the run without it.
set -u
stoke=$1
work=$2
fake=${3:-}
scen=${4:-}
seams=${5:?the test-only stoke_seams (tests/seams.cmake)}
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
unset BATCH_SIZE ACCUMULATE EFFECTIVE_BATCH
# batch auto as the fit's rule decides it, not measured by trials (tests/e2e/tune.sh)
export STOKE_TUNE=off
small="--model mlp --hidden 64 --limit 1000 --val-limit 200 --threads 2 --no-monitor --device cpu"
expect_line() {
    if grep -Eq -- "$2" "$out"; then ok "$1"; else fail "$1 (no line '$2')"; show "$out"; fi
}

# --- dry run: the batch found (the CPU's starting point under the fit and the 50
# steps an epoch of 20,000 samples keeps), planned at
"$stoke" train $small --limit 20000 --batch-size auto --dry-run >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "dry run" || { fail "dry run exit $rc"; show "$out"; }
expect_line "the batch said, by the rule" "^batch: 256 \(auto: 256, the CPU's starting point \(.*; fit: 70% \(memory_safety\) of the .* fits 20000 \(capped by the 20000 samples\), rounded down to a power of two: 16384\)$"
expect_line "planned at it" "^memory plan for batch 256:$"
expect_line "trained at it" "^model: .* batch 256 x 1 accumulated = 256,"
# 1000 samples: at most 20 a batch keeps 50 optimizer steps an epoch
"$stoke" train $small --batch-size auto --dry-run >"$out" 2>&1
expect_line "50 steps an epoch" "^batch: 16 \(auto: 16 \(at most 20 keeps an epoch of 1000 samples at least 50 optimizer steps, a power of two\); fit: 70% .* fits 1000 \(capped by the 1000 samples\), rounded down to a power of two: 512\)$"
# a budget: the fit under the start; the plan's largest batch within the same share
# (an effective batch given: its steps are the user's, the fit alone bounds the batch)
"$stoke" train $small --batch-size auto --dry-run --memory-budget 12M --batch-pow2=false \
    --memory-safety 0.5 --effective-batch 4096 >"$out" 2>&1
b=$(sed -n 's/^batch: \([0-9]*\) (auto: 50% (memory_safety) of the 12.0 MB --memory-budget.* fits \([0-9]*\))$/\1 \2/p' "$out")
set -- $b
if [ $# -eq 2 ] && [ "$1" = "$2" ] && [ "$1" -lt 256 ] && [ "$1" -gt 0 ]; then
    ok "a budget's fit, not a power of two ($1)"
else
    fail "a budget's fit"; show "$out"
fi
"$stoke" train $small --batch-size 1 --dry-run --memory-budget 6M >"$out" 2>&1
half=$(sed -n 's/^largest batch within .*: \([0-9]*\).*/\1/p' "$out")
[ "$half" = "${1:-x}" ] && ok "the same fit as --dry-run's largest batch in half the budget" ||
    { fail "dry run's largest batch in 6 MB is $half, the fit ${1:-?}"; show "$out"; }
"$stoke" train $small --batch-size auto --dry-run --limit 100 >"$out" 2>&1
expect_line "--limit caps it" "^batch: 2 \(auto: 2 \(at most 2 keeps an epoch of 100 samples at least 50 optimizer steps, a power of two\); fit: .*fits 100 \(capped by the 100 samples\), rounded down to a power of two: 64\)$"

# --- a short run at it, reaching an effective batch of 500 by accumulation
"$stoke" train $small --batch-size auto --effective-batch 500 --epochs 1 \
    --log "$work/auto.jsonl" >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "a run at batch auto" || { fail "run exit $rc"; show "$out"; }
expect_line "the accumulation said" "^accumulate: 2 \(auto: effective_batch 500 at batch 256: 2 accumulated; 500 is not a multiple: the effective batch is 512\)$"
expect_line "applied" "^model: .* batch 256 x 2 accumulated = 512,"
if /usr/bin/python3 - "$work/auto.jsonl" <<'PY'; then ok "the log's start record: batch 256 x 2"; else fail "log"; show "$work/auto.jsonl"; fi
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
s = [x for x in r if x.get("type") == "start" or "accumulate" in x][0]
assert s["batch"] == 256 and s["accumulate"] == 2, s
PY

# --- an allocation refused above 1 MB: half the batch, twice the accumulation, done
REFUSE_ALLOC_ABOVE=1000000 "$seams" train $small \
    --batch-size 512 --epochs 1 >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "a run through allocation failures" || { fail "injected exit $rc"; show "$out"; }
expect_line "said" "^out of host memory \(.*cannot allocate .*\): batch [0-9]+ x [0-9]+ accumulated instead, the same effective batch$"
last=$(grep "accumulated instead" "$out" | tail -1 | sed 's/.*: batch \([0-9]*\) x \([0-9]*\) accumulated.*/\1 \2/')
set -- $last
[ $# -eq 2 ] && [ $(($1 * $2)) -eq 512 ] && ok "the same effective batch ($1 x $2)" ||
    { fail "effective batch after halving: $last"; show "$out"; }
expect_line "completed" "^done: 1 epoch, 2 steps"

# --- a GPU (the test doubles: nothing here claims a GPU's result)
if [ -n "$fake" ] && [ -f "$fake/fake_cudart/libcudart.so.13" ]; then
    use_gpu_doubles "$fake" "$scen"
    gpu="--model mlp --hidden 64 --limit 1000 --val-limit 200 --no-monitor --epochs 1"
    STOKE_FAKE_CUDA_MALLOC_LIMIT=20000000 "$stoke" train $gpu --batch-size auto --dry-run \
        >"$out" 2>&1
    expect_line "GPU: the fit in its free memory" \
        "^batch: [0-9]+ \(auto: (.*; fit: )?70% \(memory_safety\) of the 20.0 MB free on the GPU \(cudaMemGetInfo\) = 14.0 MB, .*fits [0-9]+"
    "$stoke" train $gpu --batch-size 128 --optimizer adamw --lr 0.01 >"$work/gpu-a.txt" 2>&1
    STEP_FAULT=2 "$seams" train $gpu --batch-size 128 --optimizer adamw \
        --lr 0.01 >"$out" 2>&1
    expect_line "GPU: halved within training" \
        "^out of GPU memory \(test fault: .*\): batch 64 x 2 accumulated instead"
    a=$(grep "^done:" "$work/gpu-a.txt" | sed 's/ in [0-9.]*s//')
    b=$(grep "^done:" "$out" | sed 's/ in [0-9.]*s//')
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "GPU: the same steps and losses ($b)" ||
        { fail "GPU: '$b' after halving, '$a' without"; show "$out"; }
fi
e2e_end
