#!/bin/sh
# train_recompute.sh STOKE WORKDIR - `stoke train --recompute` (gradient checkpointing)
# on a small slice of Debian's Fashion-MNIST: the transformer and the resnet (batch
# norm) presets give the same step losses and final validation with it as without it
# (fixed threads: bit for bit), the setup line names the segments and the smaller
# activations, --dry-run's plan shrinks and its largest batch grows, the memory check
# names it, the environment and a bad value, and auto turning it on when the models do
# not fit the budget. With FAKEDIR and SCENARIODIR (train_cuda.sh's test doubles): on a
# GPU whose memory holds the models only with it, auto turns it on instead of halving
# the batch, and the run's losses are those of a GPU with room to spare.
set -u
stoke=$1
work=$2
fake=${3:-}
scenarios=${4:-}
py=/usr/bin/python3
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
small="--limit 512 --val-limit 128 --val-batch-size 32 --threads 2 --no-monitor --precision fp32 --epochs 1"

# same_losses NAME A B: the step records' losses and the last epoch record's val_loss
same_losses() {
    if "$py" - "$2" "$3" >"$work/py.txt" 2>&1 <<'PY'
import json, sys
def losses(path):
    r = [json.loads(l) for l in open(path)]
    steps = [x["loss"] for x in r if x["type"] == "step"]
    ep = [x for x in r if x["type"] == "epoch"]
    return steps, ep[-1]["val_loss"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a[0]) >= 4, a
assert a == b, (a, b)
PY
    then ok "$1"; else fail "$1"; show "$work/py.txt"; fi
}

for model in transformer resnet; do
    "$stoke" train --model $model $small --log "$work/$model-off.jsonl" --log-every 1 \
        >"$work/$model-off.txt" 2>&1 || { fail "$model without --recompute"; show "$work/$model-off.txt"; }
    "$stoke" train --model $model $small --recompute --log "$work/$model-on.jsonl" --log-every 1 \
        >"$out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then ok "$model --recompute runs"; else fail "$model --recompute exit $rc"; show "$out"; fi
    if grep -q "^recompute: on (flag; [0-9]* segments, activations .* -> .* per batch of 128, recomputed in backward)" "$out"; then
        ok "$model: recompute line"
    else
        fail "$model: recompute line"; show "$out"
    fi
    if grep -q "^recompute" "$work/$model-off.txt"; then fail "$model: a recompute line without it"; fi
    same_losses "$model: the same losses with and without --recompute" \
        "$work/$model-off.jsonl" "$work/$model-on.jsonl"
done

# --dry-run: smaller activations, and a larger batch within one budget
budget="--memory-budget 120M"
"$stoke" train --model transformer $small --dry-run $budget >"$work/dry-off.txt" 2>&1
"$stoke" train --model transformer $small --dry-run $budget --recompute on >"$work/dry-on.txt" 2>&1
if "$py" - "$work/dry-off.txt" "$work/dry-on.txt" >"$work/py.txt" 2>&1 <<'PY'
import re, sys
def plan(path):
    t = open(path).read()
    act = int(re.search(r"activations +(\d+) bytes", t).group(1))
    big = int(re.search(r"largest batch within .*: (\d+)", t).group(1))
    return act, big, "(recompute: " in t
off, on = plan(sys.argv[1]), plan(sys.argv[2])
assert on[0] < off[0] and on[1] > off[1] and on[2] and not off[2], (off, on)
PY
then ok "dry-run: smaller plan, larger batch"; else fail "dry-run plans"; show "$work/py.txt" "$work/dry-on.txt"; fi

if "$stoke" train --help | grep -q -- "--recompute \[M\]"; then ok "--help names --recompute"; else fail "--help"; fi
# a config file, the environment, and the flag over them
printf 'recompute: on\n' >"$work/cfg.yaml"
"$stoke" train --model transformer $small --dry-run --config "$work/cfg.yaml" >"$out" 2>&1
if grep -q "^recompute: on (file;" "$out"; then ok "config key recompute"; else fail "config key"; show "$out"; fi
STOKE_RECOMPUTE=on "$stoke" train --model transformer $small --dry-run >"$out" 2>&1
if grep -q "^recompute: on (env;" "$out"; then ok "STOKE_RECOMPUTE=on"; else fail "STOKE_RECOMPUTE=on"; show "$out"; fi
STOKE_RECOMPUTE=on "$stoke" train --model transformer $small --dry-run --recompute off >"$out" 2>&1
# (the MFU line may name the peak cache's path, which is under this test's folder)
if ! grep -v "^MFU: " "$out" | grep -q "recompute"; then ok "--recompute off over the environment"; else fail "--recompute off"; show "$out"; fi
"$stoke" train --model transformer $small --recompute=maybe >"$out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "recompute: 'maybe' is not one of off on auto" "$out"; then
    ok "a bad --recompute"
else
    fail "a bad --recompute (exit $rc)"; show "$out"
fi

# without it the memory check refuses, naming the batch --recompute would fit
"$stoke" train --model transformer $small $budget >"$out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "the largest training batch that fits is [0-9]* (--batch-size [0-9]*), or [0-9]* with --recompute" "$out"; then
    ok "the memory check names --recompute"
else
    fail "the memory check (exit $rc)"; show "$out"
fi
# auto: the budget holds the models with it but not without (the dry-run above)
"$stoke" train --model transformer $small $budget --log "$work/auto.jsonl" --log-every 1 \
    --recompute auto >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^recompute: on (auto: the models did not fit without it;" "$out"; then
    ok "auto: on when the models do not fit"
else
    fail "auto (exit $rc)"; show "$out"
fi
same_losses "auto: the same losses" "$work/transformer-off.jsonl" "$work/auto.jsonl"
"$stoke" train --model transformer $small --recompute auto --dry-run >"$out" 2>&1
if ! grep -v "^MFU: " "$out" | grep -q "recompute"; then ok "auto: off when everything fits"; else fail "auto when it fits"; show "$out"; fi

if [ -n "$fake" ]; then
    use_gpu_doubles "$fake" "$scenarios"
    # unfused: the mlp's linear -> relu chains fused keep no pre-activation, which
    # leaves recompute nothing to drop
    export STOKE_NO_FUSION=1
    gpu="--model mlp --device cuda --limit 640 --val-limit 300 --epochs 1 --batch-size 128 --precision fp32 --log-every 1"
    # the mlp's plans: 18.6 MB without, 18.1 MB with; 90% of 20.4 MB lies between
    STOKE_FAKE_CUDA_MALLOC_LIMIT=20400000 "$stoke" train $gpu --recompute auto \
        --log "$work/gpu-auto.jsonl" >"$out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "^recompute: on (auto: the plan needs .* MB of GPU memory without it" "$out" &&
        ! grep -q "accumulated instead" "$out"; then
        ok "GPU auto: recompute instead of a smaller batch"
    else
        fail "GPU auto (exit $rc)"; show "$out"
    fi
    STOKE_FAKE_CUDA_MALLOC_LIMIT=20400000 "$stoke" train $gpu >"$work/gpu-off.txt" 2>&1
    if grep -q "accumulated instead" "$work/gpu-off.txt"; then ok "GPU off: the batch halves"; else fail "GPU off"; show "$work/gpu-off.txt"; fi
    "$stoke" train $gpu --log "$work/gpu-roomy.jsonl" >"$work/gpu-roomy.txt" 2>&1 ||
        { fail "GPU with room"; show "$work/gpu-roomy.txt"; }
    same_losses "GPU auto: the losses of a GPU with room" "$work/gpu-roomy.jsonl" "$work/gpu-auto.jsonl"
fi
e2e_end
