#!/bin/sh
# data.sh STOKE FIXTURES WORK PAUSING - runs `stoke data info` and `stoke data convert` as a user
# would and checks them against numpy reading the same files: the Debian Fashion-MNIST
# package, the records layout of docs/formats.md read back by Python's struct, corrupt
# inputs, usage errors, and a destination that must survive a failed convert.
set -u
stoke=$1 fixtures=$2 work=$3 pausing=$4
py=/usr/bin/python3
fm=/usr/share/datasets/fashion-mnist
rm -rf "$work"
mkdir -p "$work"
fails=0

fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

# run NAME EXPECTED_RC ARGS...: runs stoke data, keeps stdout/stderr in $work/NAME.*
run() {
    name=$1 want=$2
    shift 2
    "$stoke" data "$@" >"$work/$name.out" 2>"$work/$name.err"
    rc=$?
    [ "$rc" -eq "$want" ] || fail "$name: exit $rc, expected $want; stderr: $(cat "$work/$name.err")"
}

has() { # has NAME.STREAM TEXT
    grep -qF -- "$2" "$work/$1" || fail "$1 lacks '$2': $(cat "$work/$1")"
}

# --- info on the Debian package: the human report against numpy's count. ---
run info_train 0 info "$fm"
$py - "$fm/train-labels-idx1-ubyte.gz" "$work/info_train.out" <<'EOF' || fail "info_train: differs from numpy"
import gzip, sys, numpy as np
labels = np.frombuffer(gzip.open(sys.argv[1]).read(), dtype=np.uint8, offset=8)
out = open(sys.argv[2]).read().splitlines()
fields = {l[:13].strip(): l[13:] for l in out if not l.startswith(" ")}
assert fields["format"] == "idx", fields
assert fields["samples"] == str(len(labels)), fields
assert fields["input"] == "(28, 28) uint8, 784 bytes per sample", fields
assert fields["target"] == "class () uint8, 1 byte per sample", fields
counts = np.bincount(labels)
assert fields["classes"] == str(len(counts)), fields
rows = [l.split() for l in out[out.index("class balance") + 2:]]
assert len(rows) == len(counts), rows
for c, (cls, n, pct) in enumerate(rows):
    assert int(cls) == c and int(n) == counts[c], (c, rows[c])
    assert abs(float(pct) - 100 * counts[c] / len(labels)) < 0.006, (c, pct)
EOF

# --- info --json on the test split, and on one images file with its labels beside it.
run info_json 0 info "$fm" --split test --json
run info_file 0 info "$fm/t10k-images-idx3-ubyte.gz" --json
for name in info_json info_file; do
    $py - "$fm/t10k-labels-idx1-ubyte.gz" "$work/$name.out" <<'EOF' || fail "$name: differs from numpy"
import gzip, json, sys, numpy as np
labels = np.frombuffer(gzip.open(sys.argv[1]).read(), dtype=np.uint8, offset=8)
d = json.load(open(sys.argv[2]))
assert d["format"] == "idx" and d["count"] == len(labels), d
assert d["input"] == {"shape": [28, 28], "dtype": "uint8", "bytes": 784}, d["input"]
assert d["target"] == {"kind": "class", "shape": [], "dtype": "uint8", "bytes": 1}, d["target"]
counts = np.bincount(labels)
assert d["num_classes"] == len(counts)
assert [b["count"] for b in d["class_balance"]] == counts.tolist(), d["class_balance"]
assert [b["class"] for b in d["class_balance"]] == list(range(len(counts)))
assert all(abs(b["percent"] - 100 * b["count"] / len(labels)) < 1e-9 for b in d["class_balance"])
EOF
done

# --- NPY with float (regression) targets, and an inputs-only file. ---
run info_npy 0 info "$fixtures/npy_v3_f4_regression/inputs.npy" --json
$py -c "
import json, sys
d = json.load(open('$work/info_npy.out'))
assert d['format'] == 'npy' and d['count'] == 4 and d['input']['shape'] == [2, 3], d
assert d['target']['kind'] == 'scalar' and d['target']['dtype'] == 'float32', d
assert d['num_classes'] == 0 and 'class_balance' not in d, d
" || fail "info_npy: wrong document"
run info_npy_targets 0 info "$fixtures/npy_v1_f8be_vector/pose_x.npy" \
    --targets "$fixtures/npy_v1_f8be_vector/pose_y.npy"
has info_npy_targets.out "target       vector (2,) float32, 8 bytes per sample"
run info_none 0 info "$fixtures/npy_v1_scalar_samples/values.npy"
has info_none.out "input        () float64, 8 bytes per sample"
has info_none.out "target       none"

# --- convert the test split, read the records back with struct (docs/formats.md). ---
run convert 0 convert "$fm" "$work/test.rec" --split test
has convert.out "converting: 10000/10000 samples (100%)"
has convert.out "wrote 10000 samples"
has convert.out "(8000256 bytes)"
has convert.out "samples/s"
lines=$(wc -l <"$work/convert.out")
[ "$lines" -le 6 ] || fail "convert: $lines progress lines when not on a terminal"
$py - "$fm" "$work/test.rec" <<'EOF' || fail "convert: records differ from numpy's IDX"
import gzip, struct, sys, zlib, numpy as np
fm, rec = sys.argv[1], sys.argv[2]
images = np.frombuffer(gzip.open(fm + "/t10k-images-idx3-ubyte.gz").read(), np.uint8, offset=16)
labels = np.frombuffer(gzip.open(fm + "/t10k-labels-idx1-ubyte.gz").read(), np.uint8, offset=8)
data = open(rec, "rb").read()
h = data[:256]
assert h[:8] == b"STOKEREC"
version, header_size, count, record_size, in_bytes, tg_bytes, ncls = struct.unpack_from("<IIQQQQq", h, 8)
in_dtype, in_ndim, kind, tg_dtype, tg_ndim = struct.unpack_from("<BBBBB", h, 56)
in_dims = struct.unpack_from("<8q", h, 64)
tg_off, = struct.unpack_from("<Q", h, 192)
crc, = struct.unpack_from("<I", h, 252)
assert (version, header_size, count) == (1, 256, 10000), (version, header_size, count)
assert (record_size, in_bytes, tg_bytes, tg_off, ncls) == (800, 784, 1, 784, 10)
assert (in_dtype, in_ndim, kind, tg_dtype, tg_ndim) == (0, 2, 1, 0, 0)
assert in_dims == (28, 28, 0, 0, 0, 0, 0, 0)
assert crc == zlib.crc32(h[:252]), "checksum"
assert len(data) == 256 + count * record_size
recs = np.frombuffer(data, np.uint8, offset=256).reshape(count, record_size)
assert (recs[:, :784] == images.reshape(count, 784)).all(), "images"
assert (recs[:, 784] == labels).all(), "labels"
assert not recs[:, 785:].any(), "padding is not zero"
EOF
run info_rec 0 info "$work/test.rec"
has info_rec.out "encoding     pixels: 800 bytes per sample, as read"
sed 1d "$work/info_rec.out" | grep -v '^encoding ' | sed 's/^format       records$/format       idx/' >"$work/a"
run info_idx 0 info "$fm" --split test
sed 1d "$work/info_idx.out" >"$work/b"
cmp -s "$work/a" "$work/b" || fail "info of the records differs from info of the IDX: $(diff "$work/a" "$work/b")"

# --- corrupt inputs: the library's message, exit 1. ---
run bad_idx 1 info "$fixtures/bad/idx_truncated"
has bad_idx.err "stoke data: $fixtures/bad/idx_truncated: truncated"
run bad_gzip 1 convert "$fixtures/bad/idx_bad_gzip.gz" "$work/never.rec"
has bad_gzip.err "bad gzip"
[ -e "$work/never.rec" ] && fail "bad_gzip: a destination was written"
run bad_npy 1 info "$fixtures/bad/npy_fortran"
has bad_npy.err "Fortran order is not supported"
head -c 1000 "$work/test.rec" >"$work/cut.rec"
run bad_rec 1 info "$work/cut.rec"
has bad_rec.err "cut.rec: truncated"
run missing 1 info "$work/does-not-exist"
has missing.err "does-not-exist"

# --- a failed convert leaves an existing destination intact and nothing beside it. ---
# Past the file-size limit, as a user's shell runs it (SIGXFSZ at its default): a
# message naming the file and the limit, not death by SIGXFSZ.
echo "precious" >"$work/keep.rec"
( ulimit -f 100; exec "$stoke" data convert "$fm" "$work/keep.rec" --split test ) \
    >"$work/fsize.out" 2>"$work/fsize.err"
rc=$?
[ "$rc" -eq 1 ] || fail "convert past the file-size limit: exit $rc, expected 1: $(cat "$work/fsize.err")"
has fsize.err "stoke data: $work/keep.rec: write failed after "
has fsize.err "the file size limit (ulimit -f) of "
[ "$(cat "$work/keep.rec")" = precious ] || fail "the existing destination was changed"
ls -a "$work" | grep -q stoke-tmp && fail "a temporary file was left behind: $(ls -a "$work")"

# Interrupted mid-write by SIGINT (Ctrl-C) or SIGTERM: the status of death by that
# signal, the destination as it was, no temporary file. PAUSING (tests/stoke_seams.c,
# docs/testing.md) is stoke with the writer held after its first chunk until a signal
# comes, so the signal certainly lands mid-write. `env --default-signal`: a script's background
# job starts with SIGINT ignored, a terminal's foreground job does not.
wait_for_content() { # wait_for_content FILE TEXT PID: until FILE holds TEXT or PID ends
    while [ "$(cat "$1" 2>/dev/null)" != "$2" ] && kill -0 "$3" 2>/dev/null; do sleep 0.05; done
    [ "$(cat "$1" 2>/dev/null)" = "$2" ]
}
for sig in INT TERM; do
    rm -f "$work/paused"
    env --default-signal=INT,TERM WRITE_PAUSE_FILE="$work/paused" \
        "$pausing" data convert "$fm" "$work/keep.rec" --split test \
        >"$work/sig$sig.out" 2>"$work/sig$sig.err" &
    pid=$!
    wait_for_content "$work/paused" 1 $pid || fail "SIG$sig: the writer never paused mid-write"
    ls -a "$work" | grep -q stoke-tmp || fail "SIG$sig: no temporary file while writing"
    kill -$sig $pid
    wait $pid
    rc=$?
    want=130; [ $sig = TERM ] && want=143
    [ $rc -eq $want ] || fail "convert interrupted by SIG$sig: exit $rc, expected $want"
    [ "$(cat "$work/keep.rec")" = precious ] || fail "SIG$sig: the existing destination was changed"
    ls -a "$work" | grep -q stoke-tmp && fail "SIG$sig: a temporary file was left behind: $(ls -a "$work")"
done
rm -f "$work/paused"

# --- FIFOs and devices are refused by name, at once (a hang fails by ctest's TIMEOUT). ---
mkfifo "$work/fifo"
refused() { # refused NAME PATTERN ARGS...: exit 1, stderr has PATTERN
    name=$1 pattern=$2
    shift 2
    "$stoke" data "$@" >"$work/$name.out" 2>"$work/$name.err"
    rc=$?
    [ "$rc" -eq 1 ] || fail "$name: exit $rc, expected 1: $(cat "$work/$name.err")"
    has "$name.err" "$pattern"
}
refused fifo_info "$work/fifo: is a FIFO (named pipe)" info "$work/fifo"
refused fifo_convert "$work/fifo: is a FIFO (named pipe)" convert "$work/fifo" "$work/never.rec"
refused dev_info "/dev/zero: is a character device" info /dev/zero
refused fifo_targets "$work/fifo: is a FIFO (named pipe), not a regular file" \
    info "$fixtures/npy_v3_f4_regression/inputs.npy" --targets "$work/fifo"
# A FIFO where the IDX directory's labels file should be.
mkdir -p "$work/idxfifo"
cp "$fm/t10k-images-idx3-ubyte.gz" "$work/idxfifo/"
mkfifo "$work/idxfifo/t10k-labels-idx1-ubyte"
refused fifo_in_dir "idxfifo/t10k-labels-idx1-ubyte: is a FIFO" info "$work/idxfifo" --split test
# Destinations that are not regular files are not replaced.
refused fifo_dest "$work/fifo: is a FIFO (named pipe), not a regular file" \
    convert "$fm" "$work/fifo" --split test
[ -p "$work/fifo" ] || fail "fifo_dest: the FIFO was replaced"
[ -e "$work/never.rec" ] && fail "a FIFO source wrote a destination"
ls -a "$work" | grep -q stoke-tmp && fail "FIFOs: a temporary file was left behind"
run unwritable 1 convert "$fm" /nonexistent-dir/out.rec --split test
has unwritable.err "/nonexistent-dir/out.rec"
[ -e /nonexistent-dir ] && fail "unwritable: something was created"
mkdir -p "$work/dir.rec"
run dest_dir 1 convert "$fm" "$work/dir.rec" --split test
[ -d "$work/dir.rec" ] || fail "dest_dir: the directory is gone"
ls -a "$work" | grep -q stoke-tmp && fail "dest_dir: a temporary file was left behind"

# --- an image folder with symbolic links (docs/data.md): loops into ".", a link out of
# its class to the root, a class folder that is a link. Each image is one sample of the
# class whose folder holds it; what was left out is counted, with an example.
fan=$work/fan
mkdir -p "$fan/a" "$fan/b"
$py -c 'import sys; from PIL import Image; Image.new("RGB", (9, 7), (9, 8, 7)).save(sys.argv[1])' \
    "$fan/a/0.png" || fail "fan: Pillow could not write the image"
cp "$fan/a/0.png" "$fan/b/0.png"
for i in 1 2 3; do ln -s . "$fan/a/s$i"; done
ln -s .. "$fan/b/up"
ln -s a "$fan/c"
run fan 0 info "$fan"
has fan.out "samples      2"
has fan.out "classes      2"
has fan.out "skipped      5 ("
has fan.out "e.g. $fan/a/s1: a folder walked already"
has fan.err "warning: $fan: 5 entries left out"
run fan_json 0 info "$fan" --json
$py - "$work/fan_json.out" <<'EOF' || fail "fan_json: $(cat "$work/fan_json.out")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["count"] == 2 and j["num_classes"] == 2, j
assert [c["count"] for c in j["class_balance"]] == [1, 1], j["class_balance"]
assert j["skipped"]["count"] == 5 and "/b/up" not in j["skipped"]["example"], j["skipped"]
EOF

# --- usage errors: exit 2. ---
run usage_none 2
run usage_sub 2 frobnicate
has usage_sub.err "unknown subcommand 'frobnicate'"
run usage_info 2 info
has usage_info.err "info needs a PATH"
run usage_convert 2 convert "$fm"
run usage_opt 2 info "$fm" --frob
has usage_opt.err "unknown option '--frob'"
run usage_split 2 info "$fm" --split
has usage_split.err "--split needs a value"
run usage_extra 2 info "$fm" extra
run usage_json 2 convert "$fm" "$work/x.rec" --json
run bad_split 2 info "$fm" --split validation
has bad_split.err "split 'validation'"
run help 0 --help
has help.out "usage: stoke data info PATH"

echo "$fails failed"
[ "$fails" -eq 0 ]
