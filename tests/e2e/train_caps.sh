#!/bin/sh
# train_caps.sh STOKE WORKDIR - issue 24 (4), what a newcomer met, run as they ran it:
# the validation model planned at --val-batch-size whatever the validation set holds;
# --batch-size 100000 on 1000 samples refused with a size the kernels take; a batch
# truly past the kernels' int range without the batch that fits; linear layers on
# images failing at the loss; and seconds of silence before the first progress line.
# Fashion-MNIST slices (skipped without it) and a small image folder (Pillow).
set -u
stoke=$1
work=$2
py=/usr/bin/python3
. "$(dirname "$0")/lib.sh"
need_fashion_mnist
unset BATCH_SIZE VAL_BATCH_SIZE ACCUMULATE EFFECTIVE_BATCH
export STOKE_TUNE=off
small="--model mlp --hidden 32 --limit 1000 --threads 2 --no-monitor --device cpu"
expect_line() {
    if grep -Eq -- "$2" "$out"; then ok "$1"; else fail "$1 (no line '$2')"; show "$out"; fi
}

# --- the validation model at min(val batch, validation samples): what --dry-run
# counts beside the training model is the same with the default 256 as with 30
beside() {
    "$stoke" train $small --val-limit 30 --memory-budget 1G --dry-run "$@" >"$out" 2>&1 ||
        { fail "dry run $*"; show "$out"; }
    sed -n 's/^largest batch within .* less \(.*\) for validation and the data held.*/\1/p' "$out"
}
a=$(beside)
b=$(beside --val-batch-size 30)
if [ -n "$a" ] && [ "$a" = "$b" ]; then
    ok "validation planned at its 30 samples, not at batch 256 ($a beside)"
else
    fail "validation plan: '$a' at the default val batch, '$b' at --val-batch-size 30"
fi

# --- a batch over the training samples: capped, and the batch line says so
"$stoke" train $small --batch-size 100000 --val-limit 10 --dry-run >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "--batch-size 100000 --limit 1000 runs" || { fail "--batch-size 100000 exit $rc"; show "$out"; }
expect_line "the cap said" "^batch: 1000 \(capped by the 1000 training samples; 100000 given \(flag\)\)$"
expect_line "planned at it" "^memory plan for batch 1000:$"

# --- a batch within the samples that the kernels cannot index: conv1's output is
# 4096 x 28 x 28 = 3211264 values a sample, so at most 668 samples fit an int
cat >"$work/wide.yaml" <<'EOF'
layers:
  - {type: conv2d, out: 4096, kernel: 3, padding: 1}
  - {type: global_avgpool}
  - {type: flatten}
  - {type: linear}
EOF
"$stoke" train --model "$work/wide.yaml" --limit 1000 --val-limit 10 --batch-size 1000 \
    --threads 2 --no-monitor --device cpu --epochs 1 >"$out" 2>&1
rc=$?
[ $rc -ne 0 ] && ok "a batch past the kernels' int range is refused" || { fail "wide conv at batch 1000 ran"; show "$out"; }
expect_line "the real quantity and limit" "conv1: its output at batch 1000 has 3211264000 values \(3211264 a sample\), more than the CPU kernels' int limit \(2147483647\)"
expect_line "the batch that fits" "the largest training batch the model's kernels take is 668 \(--batch-size 668\)"

# --- linear layers on images: refused at the first one, naming it and the fix
cat >"$work/noflat.yaml" <<'EOF'
layers:
  - {type: linear, out: 64}
  - {type: relu}
  - {type: linear, name: fc2}
EOF
"$stoke" train --model "$work/noflat.yaml" --limit 100 --threads 2 --no-monitor --dry-run >"$out" 2>&1
rc=$?
[ $rc -ne 0 ] && ok "linear on images refused" || { fail "linear on images ran"; show "$out"; }
expect_line "the layer, its line, its input and the flatten" "noflat.yaml:2:5: fc1: linear on a \(1, 28, 28\) input applies to its last axis only \(28 values\), not to the whole sample; add \`- \{type: flatten\}\` before it"
if grep -q "cross_entropy" "$out"; then fail "the loss still named"; show "$out"; fi

# --- the slow phases before the first progress line are said before they run
if "$py" -c "import PIL, numpy" 2>/dev/null; then
    "$py" - "$work" <<'PY' || fail "cannot write the image folder"
import os, sys, numpy as np
from PIL import Image
w, rng = sys.argv[1], np.random.default_rng(0)
for split, n in (("train", 8), ("val", 3)):
    for k, cls in enumerate(["cat", "dog"]):
        os.makedirs(f"{w}/photos/{split}/{cls}", exist_ok=True)
        for i in range(n):
            px = rng.integers(0, 60, (20, 24, 3), np.uint8) + 150 * k
            Image.fromarray(px.astype(np.uint8)).save(f"{w}/photos/{split}/{cls}/{i}.png")
PY
    imgs="--model mlp --hidden 8 --epochs 1 --batch-size 4 --threads 2 --no-monitor --device cpu"
    "$stoke" train --dataset "$work/photos" $imgs --augment --transforms rrc >"$out" 2>&1 ||
        { fail "train on photos with rrc"; show "$out"; }
    expect_line "normalize's statistics announced" "^preparing: the mean and std to normalize with, over 16 training images\.\.\.$"
    expect_line "the allocation announced, validation at its 6 samples" "^preparing: allocating the models: training .* at batch 4, validation .* at batch 6\.\.\.$"
    expect_line "the first step announced" "^training: 4 steps an epoch at batch 4; the first progress line follows the first step\.\.\.$"
    "$stoke" train --dataset "$work/photos" $imgs >"$out" 2>&1 || { fail "train on photos"; show "$out"; }
    expect_line "decoding into memory announced" "^preparing: decoding 16 images of $work/photos into memory\.\.\.$"
    expect_line "validation decoding announced" "^preparing: decoding 6 validation images into memory\.\.\.$"
else
    echo "skip: the image folder part (no Pillow / numpy for $py)"
fi
e2e_end
