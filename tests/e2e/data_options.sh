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

echo "$fails failed"
[ "$fails" -eq 0 ]
