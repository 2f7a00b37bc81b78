#!/bin/sh
# data_options.sh STOKE WORK - `stoke data info` with the options for HDF5 dataset
# names, image size and channels, and regression targets, on files written here by
# h5py, Pillow and numpy; and the usage errors of those options.
set -u
stoke=$1 work=$2
py=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

$py - "$work" <<'EOF_PY' || { echo "cannot write fixtures" >&2; exit 1; }
import sys, os, h5py, numpy as np
from PIL import Image
w = sys.argv[1]
with h5py.File(f"{w}/named.h5", "w") as f:
    f.create_dataset("features", data=np.zeros((6, 3), np.float32))
    f.create_dataset("pixels", data=np.arange(5 * 4, dtype=np.uint8).reshape(5, 4))
    f.create_dataset("verdict", data=np.array([0, 1, 1, 0, 1], np.int64))
for cls in ("cat", "dog"):
    os.makedirs(f"{w}/pets/train/{cls}")
    Image.new("RGB", (9, 7), (10, 20, 30)).save(f"{w}/pets/train/{cls}/a.png")
np.save(f"{w}/x.npy", np.zeros((4, 2), np.float32))
np.save(f"{w}/y.npy", np.array([1.0, 2.0, 3.0, 4.0], np.float32))
EOF_PY

# json FILE EXPR: evaluates a Python expression over the JSON document `d`.
json() {
    $py -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2" \
        || fail "$1: $2 is false: $(cat "$1")"
}
run() { # run NAME WANT ARGS...
    name=$1 want=$2; shift 2
    "$stoke" data "$@" >"$work/$name.out" 2>"$work/$name.err"
    rc=$?
    [ "$rc" -eq "$want" ] || fail "$name: exit $rc, expected $want: $(cat "$work/$name.err")"
}

run h5_named 0 info "$work/named.h5" --input-name pixels --target-name verdict --json
json "$work/h5_named.out" 'd["count"] == 5 and d["input"]["shape"] == [4] and d["num_classes"] == 2'
# Without --input-name the default 'features' (6 samples) is taken, against 5 targets.
run h5_default 1 info "$work/named.h5" --target-name verdict
grep -q "'features' have 6 samples" "$work/h5_default.err" || fail "h5_default: $(cat "$work/h5_default.err")"
run h5_missing 1 info "$work/named.h5" --input-name nosuch --target-name verdict
grep -q "pixels" "$work/h5_missing.err" || fail "h5_missing: the error does not list the datasets"

run images 0 info "$work/pets" --split train --size 5x6 --channels 1 --json
json "$work/images.out" 'd["count"] == 2 and d["input"]["shape"] == [5, 6, 1] and d["num_classes"] == 2'
run images_default 0 info "$work/pets" --split train --json
json "$work/images_default.out" 'd["input"]["shape"] == [224, 224, 3]'

run npy_class 0 info "$work/x.npy" --json
json "$work/npy_class.out" 'd["target"]["kind"] == "class"'
run npy_regression 0 info "$work/x.npy" --regression --json
json "$work/npy_regression.out" 'd["target"]["kind"] == "scalar"'

# An option the format does not use is a usage error, not dropped without a word.
run unused_split 2 info "$work/x.npy" --split test
grep -q -- "--split applies to IDX directories and image folders; .*x.npy is npy" "$work/unused_split.err" || fail "unused_split: $(cat "$work/unused_split.err")"
run unused_size 2 info "$work/named.h5" --input-name pixels --target-name verdict --size 5x6
grep -q -- "--size applies to image folders; .*named.h5 is hdf5" "$work/unused_size.err" || fail "unused_size: $(cat "$work/unused_size.err")"
run unused_input_name 2 info "$work/x.npy" --input-name pixels
run unused_targets 2 info "$work/pets" --split train --targets "$work/y.npy"
run unused_channels 2 info "$work/x.npy" --channels 1
run bad_size 2 info "$work/pets" --size 5by6
run bad_size_zero 2 info "$work/pets" --size 0x6
run bad_channels 2 info "$work/pets" --channels 2
run missing_value 2 info "$work/named.h5" --input-name

# --- A newcomer's photo folder: 121 images of 80 to 200 px in three named classes. ---
$py - "$work" <<'EOF_PY' || { echo "cannot write the photos" >&2; exit 1; }
import sys, os
from PIL import Image
w = sys.argv[1]
for cls, n in (("boot", 40), ("dress", 41), ("shirt", 40)):
    os.makedirs(f"{w}/photos/{cls}")
    for i in range(n):
        # 80 to 200 px wide, 90 to 150 high: the extremes in the first two
        size = ((80, 150), (200, 90))[i] if i < 2 else (100 + i, 100 + i % 40)
        ext = "png" if i % 3 == 0 else "jpg"
        Image.new("RGB", size, (i * 5 % 256, 60, 90)).save(f"{w}/photos/{cls}/{i:03d}.{ext}")
open(f"{w}/photos/README.txt", "w").write("not a class\n")
EOF_PY

# info says the sizes on disk beside the size the images are read at, and the classes'
# names beside their indices.
run photos 0 info "$work/photos"
grep -qx "input        (224, 224, 3) uint8, 150528 bytes per sample, as read: every image resized to 224x224 (HxW, the --size default)" "$work/photos.out" ||
    fail "photos: the input line does not say the size is --size's default: $(cat "$work/photos.out")"
grep -qx "on disk      80 to 200 px wide, 90 to 150 px high (all 121 images)" "$work/photos.out" ||
    fail "photos: no sizes on disk: $(cat "$work/photos.out")"
$py - "$work/photos.out" <<'EOF_PY' || fail "photos: class balance without names: $(cat "$work/photos.out")"
import sys
out = open(sys.argv[1]).read().splitlines()
rows = [l.split() for l in out[out.index("class balance") + 1:]]
assert rows[0] == ["class", "samples", "%", "name"], rows[0]
assert rows[1:] == [["0", "40", "33.06", "boot"], ["1", "41", "33.88", "dress"],
                    ["2", "40", "33.06", "shirt"]], rows
EOF_PY
run photos_sized 0 info "$work/photos" --size 64x48 --json
json "$work/photos_sized.out" 'd["input"]["shape"] == [64, 48, 3] and d["input"]["size_from"] == "--size"'
json "$work/photos_sized.out" 'd["on_disk"] == {"width": [80, 200], "height": [90, 150], "images_read": 121}'
json "$work/photos_sized.out" '[b["name"] for b in d["class_balance"]] == ["boot", "dress", "shirt"]'
json "$work/h5_named.out" '"on_disk" not in d and "name" not in d["class_balance"][0]'

# convert's progress: each line's percentage is its own counts' share (the writer
# reports whole chunks: 85 records of 64x64x3 to a MiB, not quarters).
run photos_convert 0 convert "$work/photos" "$work/photos.rec" --size 64x64
$py - "$work/photos_convert.out" <<'EOF_PY' || fail "photos_convert: progress disagrees with itself: $(cat "$work/photos_convert.out")"
import re, sys
lines = [l for l in open(sys.argv[1]).read().splitlines() if l.startswith("converting:")]
assert len(lines) >= 2, lines
for l in lines:
    m = re.fullmatch(r"converting: (\d+)/(\d+) samples \((\d+)%\)", l)
    assert m, l
    done, total, pct = map(int, m.groups())
    assert total == 121 and pct == done * 100 // total, l
assert lines[-1] == "converting: 121/121 samples (100%)", lines
EOF_PY

echo "$fails failed"
[ "$fails" -eq 0 ]
