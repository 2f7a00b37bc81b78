#!/bin/sh
# train_flags.sh STOKE WORKDIR - `stoke train`'s run-control flags on a small slice of
# Debian's Fashion-MNIST with a small MLP (seconds each): the log's start record and
# `elapsed`, --eval-every (its records, no second evaluation at an epoch's end, and the
# same weights as without it), --target-accuracy (stopping within an epoch and at an
# epoch's end, the checkpoint there, the "not reached" ending, resuming past it),
# --hidden (the sizes reach the checkpoint and eval), and bad values of each.
set -u
stoke=$1
work=$2
py=/usr/bin/python3
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
# 1000 training samples (8 steps of 128 an epoch), 300 to validate on; fixed threads so
# that runs compare bit for bit.
small="--model mlp --hidden 64,32 --limit 1000 --val-limit 300 --threads 2 --no-monitor --precision fp32"
# check NAME PYTHON-CODE ARGS...: runs the code with sys.argv[1:] = ARGS and a helper
# recs(path) giving a log's records.
check() {
    name=$1 code=$2
    shift 2
    if "$py" - "$@" >"$work/py.txt" 2>&1 <<PY
import json, sys
def recs(path):
    return [json.loads(l) for l in open(path)]
$code
PY
    then ok "$name"; else fail "$name"; show "$work/py.txt"; fi
}

# --eval-every 4 over 2 epochs of 8 steps: evaluations at steps 4 and 12 within the
# epochs; steps 8 and 16 end an epoch, whose own evaluation is the only one there.
"$stoke" train $small --epochs 2 --eval-every 4 --log "$work/a.jsonl" --log-every 1 \
    --checkpoint "$work/a.safetensors" >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then ok "train --eval-every runs"; else fail "train --eval-every exit $rc"; show "$out"; fi
n=$(grep -c '^eval at step \(4\|12\) (epoch [12]/2, 50%) | val loss .* val acc .*%' "$out")
if [ "$n" -eq 2 ] && [ "$(grep -c '^eval at' "$out")" -eq 2 ]; then ok "eval lines"; else fail "eval lines ($n)"; show "$out"; fi
check "log: start record, elapsed, eval records" '
r = recs(sys.argv[1])
s = r[0]
assert s["type"] == "start", s
for k, v in (("model", "mlp"), ("hidden", "64,32"), ("batch", 128), ("epochs", 2),
             ("eval_every", 4), ("target_accuracy", None), ("threads", 2),
             ("precision", "fp32"), ("train_samples", 1000), ("val_samples", 300)):
    assert s.get(k, "missing") == v, (k, s.get(k, "missing"))
assert "resumed_step" not in s
assert [x["type"] for x in r].count("start") == 1
ev = [x for x in r if x["type"] == "eval"]
assert [(x["epoch"], x["step"], x["batch"]) for x in ev] == [(0, 4, 4), (1, 12, 4)], ev
for x in ev:
    assert x["val_samples"] == 300 and 0 <= x["val_acc"] <= 1 and x["val_loss"] > 0, x
ep = [x for x in r if x["type"] == "epoch"]
assert [x["step"] for x in ep] == [8, 16], ep
assert [x["step"] for x in r if x["type"] == "step"] == list(range(1, 17))
last = 0
for x in r[1:]:
    # the same clock as "time", counted from the start record: an identity of the
    # record, not a duration (each of the three values is printed to 0.001 s, so
    # they agree to within the rounding of three printed values)
    assert abs(x["time"] - x["elapsed"] - s["time"]) <= 3 * 0.0005 + 1e-9, x
    assert x["elapsed"] >= last, x
    last = x["elapsed"]
' "$work/a.jsonl"

# The evaluations do not change training: the same tensors, byte for byte, as a run
# without them; a run with another seed differs (so the comparison can fail).
"$stoke" train $small --epochs 2 --checkpoint "$work/b.safetensors" >"$out" 2>&1 || { fail "train without --eval-every"; show "$out"; }
"$stoke" train $small --epochs 2 --seed 2 --checkpoint "$work/s.safetensors" >"$out" 2>&1 || { fail "train --seed 2"; show "$out"; }
check "--eval-every leaves the weights bit-identical" '
import struct
def tensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    h = json.loads(blob[8:8 + n])
    h.pop("__metadata__")
    data = blob[8 + n:]
    return {k: (e["dtype"], e["shape"], data[e["data_offsets"][0]:e["data_offsets"][1]])
            for k, e in h.items()}
a, b, s = (tensors(p) for p in sys.argv[1:4])
assert a["fc1.weight"][1] == [64, 784] and a["fc2.weight"][1] == [32, 64], a["fc1.weight"][1]
assert any(k.startswith("optim.") for k in a)
assert a == b, [k for k in a if a[k] != b.get(k)]
assert a != s, "another seed gave the same weights"
' "$work/a.safetensors" "$work/b.safetensors" "$work/s.safetensors"
"$stoke" eval "$work/a.safetensors" --limit 300 >"$out" 2>&1
if [ $? -eq 0 ] && grep -q 'accuracy' "$out"; then ok "eval rebuilds the --hidden model"; else fail "eval of the --hidden checkpoint"; show "$out"; fi

# --target-accuracy within an epoch: evaluations every 2 steps, a target the first
# epoch reaches; the run stops at the first evaluation reaching it, with a checkpoint.
"$stoke" train $small --epochs 5 --eval-every 2 --target-accuracy 50% --log "$work/t.jsonl" \
    --log-every 1 --checkpoint "$work/t.safetensors" >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q '^target reached: val acc .*% >= 50.00% at step [0-9]* (epoch [1-5]/5, [0-9]*%), .*s after the start$' "$out" &&
    grep -q '^done: target val acc 50.00% reached at step [0-9]* (epoch [1-5]) in .*s, val loss .*checkpoint written' "$out"; then
    ok "target reached: printed"
else
    fail "target reached: exit $rc"; show "$out"
fi
check "target record at the first evaluation reaching it; nothing after" '
r = recs(sys.argv[1])
assert r[0]["target_accuracy"] == 0.5, r[0]
evals = [x for x in r if x["type"] in ("eval", "epoch")]
first = next(x for x in evals if x["val_acc"] >= 0.5)
t = r[-1]
assert t["type"] == "target", t
assert (t["step"], t["epoch"], t["val_acc"], t["target"]) == (first["step"], first["epoch"], first["val_acc"], 0.5), (t, first)
assert t["epoch_end"] == (first["type"] == "epoch")
assert t["elapsed"] == first["elapsed"]  # the same instant: the evaluation that reached it
assert max(x["step"] for x in r if x["type"] == "step") == t["step"]
assert t["step"] < 40
' "$work/t.jsonl"
tstep=$("$py" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["step"])' "$work/t.jsonl")
tepoch=$("$py" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["epoch"])' "$work/t.jsonl")
check "the checkpoint is at the target step" '
import struct
f = open(sys.argv[1], "rb")
n = struct.unpack("<Q", f.read(8))[0]
assert json.loads(f.read(n))["__metadata__"]["stoke.step"] == sys.argv[2]
' "$work/t.safetensors" "$tstep"
# Resuming past the target (0 turns it off) to the end of its epoch appends a start
# record naming the step.
"$stoke" train --resume "$work/t.safetensors" --target-accuracy 0 --epochs $((tepoch + 1)) \
    --log "$work/t.jsonl" >"$out" 2>&1
if [ $? -eq 0 ] && grep -q "^done: $((tepoch + 1)) epoch" "$out"; then ok "resume after the target"; else fail "resume after the target"; show "$out"; fi
check "resumed start record" '
r = recs(sys.argv[1])
s = [x for x in r if x["type"] == "start"]
assert len(s) == 2 and s[1]["resumed_step"] == int(sys.argv[2]), s
assert s[1]["resumed_epoch"] == int(sys.argv[3]) and s[1]["target_accuracy"] is None, s
assert r[-1]["type"] == "epoch" and r[-1]["epoch"] == int(sys.argv[3]), r[-1]
' "$work/t.jsonl" "$tstep" "$tepoch"

# At an epoch's end (no --eval-every): the epochs stop after the one that reached it.
"$stoke" train $small --epochs 5 --target-accuracy 0.5 --log "$work/e.jsonl" >"$out" 2>&1
check "target at an epoch's end" '
r = recs(sys.argv[1])
ep = [x for x in r if x["type"] == "epoch"]
t = r[-1]
assert t["type"] == "target" and t["epoch_end"] and t["epoch"] == ep[-1]["epoch"], (t, ep)
assert all(x["val_acc"] < 0.5 for x in ep[:-1]) and ep[-1]["val_acc"] >= 0.5
assert len(ep) < 5
' "$work/e.jsonl"
# Never reached: the run ends normally and says so.
"$stoke" train $small --epochs 1 --target-accuracy 0.999 >"$out" 2>&1
if [ $? -eq 0 ] && grep -q '^done: 1 epoch, 8 steps in .*; target val acc 99.90% not reached (best [0-9.]*%)$' "$out" &&
    ! grep -q '^target reached' "$out"; then
    ok "target not reached"
else
    fail "target not reached"; show "$out"
fi

# Bad values: usage errors naming the setting (exit 2), or errors at start-up (exit 1).
expect() { # expect NAME STATUS PATTERN ARGS...
    name=$1 want=$2 pattern=$3
    shift 3
    "$stoke" "$@" >"$out" 2>&1
    got=$?
    if [ $got -ne "$want" ] || ! grep -q -- "$pattern" "$out"; then
        fail "$name: exit $got (wanted $want), pattern '$pattern'"; show "$out"
    else
        ok "$name"
    fi
}
expect target-bare-90 2 "--target-accuracy: '90' is not a fraction in (0, 1\] such as 0.9, or a percentage such as 90%" train --target-accuracy 90
expect target-101pct 2 "--target-accuracy: '101%'" train --target-accuracy 101%
expect target-negative 2 "--target-accuracy: '-0.5'" train --target-accuracy -0.5
expect target-text 2 "--target-accuracy: 'high'" train --target-accuracy high
expect eval-every-negative 2 "--eval-every: '-1'" train --eval-every -1
expect hidden-empty-item 2 "hidden: '64,,32' is not a list of 1 to 16 sizes" train --hidden 64,,32
expect hidden-zero 2 "hidden: '0'" train --hidden 0
expect hidden-text 2 "hidden: 'wide'" train --hidden wide
expect hidden-cnn 1 "hidden (--hidden 64): only the mlp and actor-critic presets take hidden sizes, not model 'cnn'" \
    train --model cnn --hidden 64 --limit 10
printf 'model: mlp\n' >"$work/a.yaml"
expect hidden-file 1 "only the mlp and actor-critic presets" train --model "$work/a.yaml" --hidden 64 --limit 10
# Regression targets have no accuracy; a dataset without a validation set cannot be
# evaluated.
"$py" -c '
import numpy as np, sys
np.save(sys.argv[1] + "/x.npy", np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32))
np.save(sys.argv[1] + "/y.npy", np.random.default_rng(2).normal(size=(64,)).astype(np.float32))' "$work"
expect target-regression 1 "target_accuracy (--target-accuracy 0.9): model mlp has no accuracy metric" \
    train --model mlp --dataset "$work/x.npy" --val-dataset "$work/x.npy" --target-accuracy 0.9
expect eval-every-no-val 1 "eval_every (--eval-every): there is no validation set" \
    train --model mlp --dataset "$work/x.npy" --eval-every 5
"$stoke" train --help >"$out" 2>&1
if grep -q -- '--target-accuracy X' "$out" && grep -q -- '--eval-every N' "$out" && grep -q -- '--hidden N' "$out"; then
    ok "help lists the flags"
else
    fail "help"; show "$out"
fi

# A log that cannot be written is never lost without a word. /dev/full fails the first
# record: nothing is trained, exit 1. A file-size limit reached mid-run (stoke ignores
# SIGXFSZ, so the write fails with EFBIG) stops the log with a warning; training
# finishes, and the run exits 1 naming the cause. Output goes through a pipe: the limit
# would stop a file holding it too.
"$stoke" train $small --epochs 1 --log /dev/full >"$out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "log: cannot write to '/dev/full': No space left on device (before the first step" "$out" &&
   ! grep -q '^epoch' "$out"; then
    ok "a log on /dev/full is an error before training"
else
    fail "a log on /dev/full (exit $rc)"; show "$out"
fi
# A FIFO with no reader would block the log's open forever: an error instead.
mkfifo "$work/logfifo"
"$stoke" train $small --epochs 1 --log "$work/logfifo" >"$out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot open '$work/logfifo' for writing: a FIFO (named pipe) with no reader" "$out"; then
    ok "a log on a FIFO with no reader is an error, not a hang"
else
    fail "a log on a FIFO with no reader (exit $rc)"; show "$out"
fi
( ulimit -f 2
  "$stoke" train $small --epochs 1 --log "$work/lim.jsonl" --log-every 1 2>&1; echo "exit $?" ) | cat >"$out"
if grep -q "^warning: log: cannot write to '$work/lim.jsonl': File too large (the file size limit, ulimit -f); the log stops here" "$out" &&
   grep -q '^epoch 1/1 done' "$out" && grep -q "the log is incomplete: cannot write to '$work/lim.jsonl'" "$out" &&
   grep -q '^exit 1$' "$out"; then
    ok "a log that hits the file size limit: warned, training finishes, exit 1"
else
    fail "a log that hits the file size limit"; show "$out"
fi

# Image folders: a plain one (PATH/<class>/*.png, as `stoke data info PATH` reads it)
# is the training set itself (once only PATH/train/<class> worked); with train/ and
# val/ subfolders, val/ validates; a val/ whose classes differ is refused.
"$py" - "$work" <<'PY' || fail "cannot write the image folders"
import os, sys, numpy as np
from PIL import Image
w, rng = sys.argv[1], np.random.default_rng(0)
def folder(root, classes, n):
    for k, cls in enumerate(classes):
        os.makedirs(f"{root}/{cls}", exist_ok=True)
        for i in range(n):
            px = rng.integers(0, 60, (12, 10, 3), np.uint8) + 150 * k
            Image.fromarray(px.astype(np.uint8)).save(f"{root}/{cls}/{i}.png")
folder(f"{w}/plain", ["cat", "dog"], 6)
folder(f"{w}/split/train", ["cat", "dog"], 6)
folder(f"{w}/split/val", ["cat", "dog"], 3)
folder(f"{w}/odd/train", ["cat", "dog"], 4)
folder(f"{w}/odd/val", ["cat"], 2)
np.save(f"{w}/vec_x.npy", rng.random((8, 3), np.float32))
np.save(f"{w}/vec_y.npy", np.arange(8) % 2)
PY
imgs="--model mlp --hidden 8 --epochs 1 --batch-size 4 --threads 2 --no-monitor"
"$stoke" train --dataset "$work/plain" $imgs --checkpoint "$work/plain.safetensors" >"$out" 2>&1
if [ $? -eq 0 ] && grep -q "^dataset: $work/plain: 12 samples" "$out" && grep -q '^done: 1 epoch' "$out" &&
   grep -q "^validation: none" "$out"; then
    ok "train on a plain image folder"
else
    fail "train on a plain image folder"; show "$out"
fi
# predict on that folder (it has no test/ split): each class as its index and its
# folder's name, which the checkpoint keeps
"$stoke" predict "$work/plain.safetensors" "$work/plain" >"$work/predict.txt" 2>&1
if [ $? -eq 0 ] && [ "$(grep -c '^[0-9]*	[01] \(cat\|dog\)	label [01] \(cat\|dog\)$' "$work/predict.txt")" -eq 12 ] &&
   grep -q '	label 0 cat$' "$work/predict.txt" && grep -q '	label 1 dog$' "$work/predict.txt" &&
   ! grep -q '0 dog\|1 cat' "$work/predict.txt"; then
    ok "predict on an image folder names the classes"
else
    fail "predict on an image folder"; show "$work/predict.txt"
fi
"$stoke" train --dataset "$work/split" $imgs >"$out" 2>&1
if [ $? -eq 0 ] && grep -q "^dataset: $work/split: 12 samples" "$out" &&
   grep -q "^validation: $work/split (val split): 6 samples" "$out" && grep -q 'val acc' "$out"; then
    ok "train on an image folder with train/ and val/"
else
    fail "train on an image folder with train/ and val/"; show "$out"
fi
# --transforms rrc: RandomResizedCrop + flip for training, evaluation on centre crops
# (the saved model's eval uses the same); without --augment it is refused
"$stoke" train --dataset "$work/split" $imgs --augment --transforms rrc \
    --checkpoint "$work/rrc.safetensors" >"$out" 2>&1
if [ $? -eq 0 ] && grep -q "decoded from the originals every epoch" "$out" && grep -q "^transforms: random resized crop (scale 0.08-1, ratio 3/4-4/3, on the original images), horizontal flip, normalize" "$out" &&
   grep -q 'val acc' "$out" &&
   "$stoke" eval "$work/rrc.safetensors" --dataset "$work/split" --split val >"$work/eval.txt" 2>&1 &&
   grep -q "on .*split (val, 6 samples): loss" "$work/eval.txt"; then
    ok "train --augment --transforms rrc, and eval of its checkpoint"
else
    fail "train --augment --transforms rrc"; show "$out" "$work/eval.txt"
fi
# the color jitter presets: named in the log, and a typo is refused with the choices
"$stoke" train --dataset "$work/split" $imgs --augment --transforms rrc+jitter --max-steps 2 >"$out" 2>&1
if [ $? -eq 0 ] && grep -q "^transforms: random resized crop (.*on the original images), horizontal flip, color jitter (brightness, contrast, saturation 0.4), normalize" "$out"; then
    ok "train --transforms rrc+jitter"
else
    fail "train --transforms rrc+jitter"; show "$out"
fi
"$stoke" train --dataset "$work/split" $imgs --augment --transforms rrc+jiter >"$out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "rrc+jitter" "$out"; then
    ok "--transforms with a typo is refused, naming the choices"
else
    fail "--transforms rrc+jiter (exit $rc)"; show "$out"
fi
"$stoke" train --dataset "$work/split" $imgs --transforms rrc >"$out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "transforms (--transforms rrc) picks the augmentation, which is off: add --augment" "$out"; then
    ok "--transforms rrc without --augment is refused"
else
    fail "--transforms rrc without --augment (exit $rc)"; show "$out"
fi
# --augment on data that is not images: an error, not dropped without a word
"$stoke" train --dataset "$work/vec_x.npy" --augment $imgs >"$out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "augment (--augment): random crops and flips are for images, and .*vec_x.npy has samples of (3,)" "$out"; then
    ok "--augment on vectors is refused"
else
    fail "--augment on vectors (exit $rc)"; show "$out"
fi
"$stoke" train --dataset "$work/odd" $imgs >"$out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "odd/val has 1 class folders and .*odd/train 2: the class indices would not match" "$out"; then
    ok "image splits with different classes are refused"
else
    fail "image splits with different classes (exit $rc)"; show "$out"
fi

e2e_end
