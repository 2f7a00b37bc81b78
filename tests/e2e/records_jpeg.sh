#!/bin/sh
# records_jpeg.sh STOKE WORK - `stoke data convert --store jpeg` as a user would run it:
# a folder of JPEGs and a PNG (Pillow writes them) kept as their own bytes; `data info`'s
# encoding and bytes per sample against the files' sizes; the pixels read back from the
# JPEG records identical to the folder's (both converted to pixel records, compared with
# cmp); usage errors; a damaged JPEG refused while converting, naming it; a truncated
# file; labels out of range; and `stoke train --augment --transforms rrc` on the records.
set -u
stoke=$1 work=$2
py=/usr/bin/python3
. "$(dirname "$0")/lib.sh"

if ! $py -c "import PIL, numpy" 2>/dev/null; then
    echo "skipped: /usr/bin/python3 with Pillow and numpy not found (they write the images)"
    exit 77
fi

# run NAME EXPECTED_RC ARGS...: runs stoke data, keeps stdout/stderr in $work/NAME.*
run() {
    name=$1 want=$2
    shift 2
    "$stoke" data "$@" >"$work/$name.out" 2>"$work/$name.err"
    rc=$?
    if [ "$rc" -eq "$want" ]; then ok "$name"; else
        fail "$name: exit $rc, expected $want"; show "$work/$name.err"
    fi
}
has() { # has NAME.STREAM TEXT
    grep -qF -- "$2" "$work/$1" || { fail "$1 lacks '$2'"; show "$work/$1"; }
}

$py - "$work/imgs" <<'PY'
import os, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
rng = np.random.default_rng(5)
for k, cls in enumerate(["cat", "dog"]):
    os.makedirs(f"{root}/{cls}")
    for i in range(5):
        h, w = 60 + 7 * i, 80 - 5 * i
        y, x = np.mgrid[0:h, 0:w]
        px = np.stack([x * 3 + 90 * k, y * 2, (x + y) % 200], -1) + rng.integers(0, 30, (h, w, 3))
        Image.fromarray(px.clip(0, 255).astype(np.uint8)).save(f"{root}/{cls}/{i}.jpg", quality=70 + 5 * i)
Image.fromarray(rng.integers(0, 255, (30, 40, 3), np.uint8)).save(f"{root}/dog/9.png")
PY

run convert_jpeg 0 convert "$work/imgs" "$work/j.rec" --store jpeg --size 32x24
has convert_jpeg.out "wrote 11 samples"
run convert_pixels 0 convert "$work/imgs" "$work/p.rec" --size 32x24
run info_jpeg 0 info "$work/j.rec"
has info_jpeg.out "format       records"
has info_jpeg.out "encoding     jpeg: image file bytes"
has info_jpeg.out "input        (32, 24, 3) uint8, 2304 bytes per sample"
run info_jpeg_json 0 info "$work/j.rec" --json
# bytes per sample: the mean size of the folder's files, which the records keep whole
$py - "$work/imgs" "$work/info_jpeg_json.out" "$work/j.rec" "$work/p.rec" <<'PY' || fail "info --json of the JPEG records"
import glob, json, os, sys
files = glob.glob(f"{sys.argv[1]}/*/*")
d = json.load(open(sys.argv[2]))
assert d["format"] == "records" and d["encoding"] == "jpeg" and d["count"] == 11, d
mean = sum(os.path.getsize(f) for f in files) / len(files)
assert abs(d["stored_bytes_per_sample"] - mean) < 1e-6, (d["stored_bytes_per_sample"], mean)
assert d["input"] == {"shape": [32, 24, 3], "dtype": "uint8", "bytes": 2304}, d["input"]
assert [c["count"] for c in d["class_balance"]] == [5, 6], d["class_balance"]
# version 2, the images' bytes as they are in the folder, the trailer at the end
data = open(sys.argv[3], "rb").read()
assert data[:8] == b"STOKEREC" and data[8] == 2 and data[-8:] == b"STOKEEND", data[:16]
for f in files:
    assert open(f, "rb").read() in data, f
PY
run info_pixels_json 0 info "$work/p.rec" --json
grep -q '"encoding":	"pixels"' "$work/info_pixels_json.out" || { fail "pixels encoding"; show "$work/info_pixels_json.out"; }

# The JPEG records decode to exactly the folder's pixels: converted back to pixel
# records, the file is the folder's pixel records byte for byte.
run convert_back 0 convert "$work/j.rec" "$work/p2.rec"
if cmp -s "$work/p.rec" "$work/p2.rec"; then ok "jpeg records read as the folder"; else
    fail "pixels from the jpeg records differ from the folder's"
fi

run store_bad 2 convert "$work/imgs" "$work/x.rec" --store png
has store_bad.err "--store takes pixels or jpeg, not 'png'"
run store_not_images 2 convert "$work/p.rec" "$work/x.rec" --store jpeg
has store_not_images.err "--store jpeg applies to image folders; $work/p.rec is records"

# A damaged JPEG: the convert fails naming it, and leaves neither DST nor a temporary.
cp -r "$work/imgs" "$work/damaged"
$py - "$work/damaged/dog/2.jpg" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = len(b) // 2
b[n:n + 64] = b"\xff\xd3" * 32  # restart markers where none are declared
open(p, "wb").write(b)
PY
cp "$work/j.rec" "$work/keep.rec"
run convert_damaged 1 convert "$work/damaged" "$work/keep.rec" --store jpeg
has convert_damaged.err "damaged/dog/2.jpg (sample 7): corrupt JPEG"
cmp -s "$work/j.rec" "$work/keep.rec" || fail "a failed convert changed DST"
ls -a "$work" | grep -q stoke-tmp && fail "a temporary file was left"

# Truncated: refused on open, naming the file.
head -c 3000 "$work/j.rec" >"$work/cut.rec"
run info_truncated 1 info "$work/cut.rec"
has info_truncated.err "cut.rec: truncated or damaged: trailer, offset 2992: no end marker"

# A label out of range (the records' labels are checked when used, not on open): train,
# eval and info name the file and the sample, whatever the value.
"$stoke" train --dataset "$work/j.rec" --model mlp --hidden 8 --epochs 1 --batch-size 4 \
    --threads 2 --no-monitor --checkpoint "$work/m.ckpt" >"$out" 2>&1 || {
    fail "train a checkpoint on jpeg records"; show "$out"; }
for label in 1000 -1; do
    $py - "$work/j.rec" "$work/label.rec" "$label" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
index, = struct.unpack_from("<Q", b, len(b) - 16)
off, = struct.unpack_from("<Q", b, index + 2 * 16)  # record 2: its int64 target leads
struct.pack_into("<q", b, off, int(sys.argv[3]))
open(sys.argv[2], "wb").write(b)
PY
    "$stoke" train --dataset "$work/label.rec" --model mlp --hidden 8 --epochs 1 --batch-size 4 \
        --threads 2 --no-monitor >"$out" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ] &&
       grep -qF "stoke train: $work/label.rec: sample 2: class $label is not in [0, 2)" "$out"; then
        ok "train on a label of $label"
    else
        fail "train on a label of $label: exit $rc"; show "$out"
    fi
    "$stoke" eval "$work/m.ckpt" --dataset "$work/label.rec" >"$out" 2>&1
    rc=$?
    if [ "$rc" -eq 1 ] &&
       grep -qxF "stoke eval: $work/label.rec: sample 2: class $label is not in [0, 2)" "$out"; then
        ok "eval on a label of $label"
    else
        fail "eval on a label of $label: exit $rc"; show "$out"
    fi
    run "info_label$label" 1 info "$work/label.rec"
    has "info_label$label.err" "label.rec: sample 2: class $label is not in [0, 2) (record at byte"
done

# Training on it with RandomResizedCrop.
"$stoke" train --dataset "$work/j.rec" --model mlp --hidden 8 --epochs 1 --batch-size 4 \
    --threads 2 --no-monitor --augment --transforms rrc --max-steps 3 >"$out" 2>&1
if [ $? -eq 0 ] && grep -q "^dataset: $work/j.rec: 11 samples of (32, 24, 3) uint8" "$out" &&
   grep -q "^transforms: random resized crop" "$out"; then
    ok "train --augment --transforms rrc on jpeg records"
else
    fail "train on jpeg records"; show "$out"
fi
e2e_end
