#!/bin/sh
# data_bench.sh STOKE WORK - runs `stoke data bench` as a user would: on the Debian
# Fashion-MNIST package and on a small folder of JPEGs written here by Pillow (with
# --augment --transforms rrc), checking the table's rows, the JSON document's fields,
# that the counts agree (samples = batches x batch size, less the short last batch of
# each epoch), every usage error, a corrupt JPEG found before the runs and one that
# turns up while the loader reads the folder (exit 1 naming the file), and SIGINT
# (exit 130 with the rows measured so far). No timing is checked: rates are bench's.
set -u
stoke=$1 work=$2
py=/usr/bin/python3
fm=/usr/share/datasets/fashion-mnist
rm -rf "$work"
mkdir -p "$work"
fails=0
skipped=""

fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

# run NAME EXPECTED_RC ARGS...: runs stoke data bench, keeps stdout/stderr in $work/NAME.*
run() {
    name=$1 want=$2
    shift 2
    "$stoke" data bench "$@" >"$work/$name.out" 2>"$work/$name.err"
    rc=$?
    [ "$rc" -eq "$want" ] || fail "$name: exit $rc, expected $want; stderr: $(cat "$work/$name.err")"
}

has() { # has NAME.STREAM TEXT
    grep -qF -- "$2" "$work/$1" || fail "$1 lacks '$2': $(cat "$work/$1")"
}

# check_json NAME BATCH WORKERS OUT_SHAPE OUT_DTYPE LAYOUT HELD: the document's fields
# and the counts of every row.
check_json() {
    $py - "$work/$1.out" "$2" "$3" "$4" "$5" "$6" "$7" "$8" <<'EOF' || fail "$1: wrong document"
import json, sys
path, bs, workers, shape, dtype, layout, held, count = sys.argv[1:]
bs, count = int(bs), int(count)
d = json.load(open(path))
for k in ("path", "format", "count", "input", "memory", "transform", "batch_size", "seed",
          "seconds", "cpu", "usable_cpus", "load_average", "rows", "best", "interrupted"):
    assert k in d, k
assert d["batch_size"] == bs and d["count"] == count and d["interrupted"] is False, d
assert d["memory"]["held"] is (held == "yes"), d["memory"]
t = d["transform"]
if shape != "-":
    assert t["out_shape"] == [int(x) for x in shape.split(",")], t
    assert t["out_dtype"] == dtype and t["layout"] == layout, t
rows = d["rows"]
assert [r["workers"] for r in rows] == [int(w) for w in workers.split(",")], rows
last = count % bs  # each epoch's short last batch (none when bs divides count)
for r in rows:
    assert set(r) == {"workers", "samples", "batches", "epoch_ends", "seconds", "samples_per_s",
                      "batches_per_s", "wait_avg_ms", "wait_p95_ms", "busy_share",
                      "feeds_samples_per_s", "cpu_seconds", "samples_per_cpu_s"}, r
    # timings are bench's to judge: here only their consistency (no bound on a time)
    assert r["batches"] >= 1, r
    short = r["batches"] * bs - r["samples"]
    if last == 0:
        assert short == 0, r
    else:
        # the window holds epoch_ends short batches, give or take one at either edge
        k = short // (bs - last)
        assert short % (bs - last) == 0 and abs(k - r["epoch_ends"]) <= 1, r
    assert abs(r["samples_per_s"] - r["samples"] / r["seconds"]) <= 1e-6 * r["samples_per_s"], r
    assert abs(r["batches_per_s"] - r["batches"] / r["seconds"]) <= 1e-6 * r["batches_per_s"], r
    assert r["feeds_samples_per_s"] == r["samples_per_s"], r
    assert 0 <= r["wait_avg_ms"] and 0 <= r["wait_p95_ms"], r
    assert isinstance(r["busy_share"], (int, float)) and isinstance(r["cpu_seconds"], (int, float)), r
    # the rate is samples / CPU seconds (0 when no CPU time was counted)
    assert abs(r["samples_per_cpu_s"] * r["cpu_seconds"] - (r["samples"] if r["cpu_seconds"] > 0 else 0)) <= 1e-6 * max(r["samples"], 1), r
best = max(rows, key=lambda r: r["samples_per_s"])
assert d["best"] == {"workers": best["workers"], "samples_per_s": best["samples_per_s"]}, d["best"]
EOF
}

# check_table NAME WORKERS: one row per worker count, in order, its numbers coherent,
# then the best and the sentence a user needs.
check_table() {
    $py - "$work/$1.out" "$2" <<'EOF' || fail "$1: wrong table: $(cat "$work/$1.out")"
import sys
lines = open(sys.argv[1]).read().splitlines()
workers = [int(w) for w in sys.argv[2].split(",")]
for key in ("dataset ", "memory ", "transform ", "batches ", "cpu "):
    assert any(l.startswith(key) for l in lines), key
h = next(i for i, l in enumerate(lines) if l.split()[:2] == ["workers", "samples/s"])
rows = [l.split() for l in lines[h + 1:h + 1 + len(workers)]]
assert [int(r[0]) for r in rows] == workers, rows
for r in rows:
    assert len(r) == 8 and r[1] == r[6], r  # samples/s, and the rate a model can be fed at
    float(r[5]), float(r[7])  # busy %, samples per CPU second: numbers (bench judges them)
best = max(rows, key=lambda r: float(r[1]))
bw = int(best[0])
assert f"best: {bw} worker{'' if bw == 1 else 's'}, {best[1]} samples/s" in lines, lines
assert (f"the loader can feed a model that trains at up to {best[1]} samples/s with {bw} "
        f"worker{'' if bw == 1 else 's'}") in lines, lines
EOF
}

# --- Fashion-MNIST (Debian's dataset-fashion-mnist). ---
if [ -d "$fm" ]; then
    run fm_table 0 "$fm" --augment --workers 0,1 --seconds 0.3
    check_table fm_table 0,1
    has fm_table.out "held in memory"
    has fm_table.out "random crop (pad 2) + flip + normalize -> (1, 28, 28) float32 NCHW"
    run fm_json 0 "$fm" --split test --batch-size 96 --workers 1,0 --seconds 0.3 --json
    check_json fm_json 96 1,0 1,28,28 float32 nchw yes 10000
    # read from the files every epoch, a batch that divides the set, bf16 NHWC
    run fm_nohold 0 "$fm" --split test --hold no --batch-size 100 --workers 2 --seconds 0.3 \
        --dtype bf16 --layout nhwc --json
    check_json fm_nohold 100 2 28,28,1 bfloat16 nhwc no 10000
    run fm_default_workers 0 "$fm" --split test --seconds 0.1 --json
    $py -c "
import json, os
d = json.load(open('$work/fm_default_workers.out'))
n = len(os.sched_getaffinity(0))
assert [r['workers'] for r in d['rows']] == list(range(n + 1)), d['rows']
" || fail "fm_default_workers: not 0 to the usable CPUs"
    run fm_size 2 "$fm" --size 32x32
    has fm_size.err "--size applies to image folders"
else
    skipped="$skipped $fm is missing (apt-get install dataset-fashion-mnist);"
fi

# --- A folder of JPEGs, RandomResizedCrop. ---
if $py -c "import numpy, PIL" 2>/dev/null; then
    $py - "$work/imgs" <<'EOF' || fail "could not write the JPEG folder"
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(14)
for c in range(3):
    os.makedirs(f"{sys.argv[1]}/class{c}")
    for i in range(7):
        h, w = int(rng.integers(40, 140)), int(rng.integers(40, 140))
        y, x = np.mgrid[0:h, 0:w]
        px = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h)], -1)
        px += rng.normal(0, 20, (h, w, 3))
        Image.fromarray(np.clip(px, 0, 255).astype(np.uint8)).save(
            f"{sys.argv[1]}/class{c}/img{i}.jpg", quality=int(rng.integers(75, 96)))
EOF
    imgs=$work/imgs
    run rrc_table 0 "$imgs" --augment --transforms rrc --size 48x64 --batch-size 8 \
        --workers 0,2 --seconds 0.3
    check_table rrc_table 0,2
    has rrc_table.out "random resized crop + flip + normalize -> (3, 48, 64) float32 NCHW"
    # 21 images, batch 8: a short batch of 5 ends each epoch
    run rrc_json 0 "$imgs" --augment --transforms rrc --size 48x64 --batch-size 8 \
        --workers 1,0 --seconds 0.3 --hold no --json
    check_json rrc_json 8 1,0 3,48,64 float32 nchw no 21
    # rrc reads the originals every epoch (as stoke train does): never held in memory
    run rrc_eval 0 "$imgs" --augment --transforms rrc --eval --size 64x64 --batch-size 7 \
        --workers 1 --seconds 0.2 --dtype f16 --layout nhwc --json
    check_json rrc_eval 7 1 64,64,3 float16 nhwc no 21
    has rrc_eval.out "validation: resize the shorter side + centre crop + normalize"
    run rrc_noaug 2 "$imgs" --transforms rrc
    has rrc_noaug.err "add --augment"
    run rrc_badtf 2 "$imgs" --augment --transforms flip
    has rrc_badtf.err "--transforms"
    # A corrupt JPEG among good ones: named before the runs (the normalization's pass
    # reads every image of a small folder) ...
    cp "$imgs/class1/img3.jpg" "$work/good.jpg"
    head -c 300 "$work/good.jpg" >"$imgs/class1/img3.jpg"
    run corrupt 1 "$imgs" --augment --transforms rrc --size 48x64 --workers 1 --seconds 0.2
    has corrupt.err "class1/img3.jpg"
    # ... and one that turns bad once the runs have started, read by the loader's
    # workers (--hold no: every epoch reads the files).
    cp "$work/good.jpg" "$imgs/class1/img3.jpg"
    head -c 300 "$work/good.jpg" >"$work/bad.jpg"
    "$stoke" data bench "$imgs" --augment --transforms rrc --size 48x64 \
        --batch-size 8 --workers 2 --seconds 60 --hold no \
        >"$work/midrun.out" 2>"$work/midrun.err" &
    pid=$!
    while ! grep -q "^workers" "$work/midrun.out" 2>/dev/null && kill -0 $pid 2>/dev/null; do
        sleep 0.1
    done
    mv "$work/bad.jpg" "$imgs/class1/img3.jpg"
    wait $pid
    rc=$?
    [ $rc -eq 1 ] || fail "midrun: exit $rc, expected 1: $(cat "$work/midrun.err")"
    has midrun.err "class1/img3.jpg"
    grep -q "^best" "$work/midrun.out" && fail "midrun: a best row after the error"
    cp "$work/good.jpg" "$imgs/class1/img3.jpg"
    # SIGINT: the rows measured so far, exit 130. 40 short runs, so the signal lands
    # in one of them whatever the machine's speed.
    list=0
    for k in $(seq 39); do list="$list,$((k % 2))"; done
    env --default-signal=INT "$stoke" data bench "$imgs" --size 48x64 --batch-size 8 \
        --workers $list --seconds 1 >"$work/sigint.out" 2>"$work/sigint.err" &
    pid=$!
    rows() { n=$(grep -c '^ *[01] ' "$work/sigint.out" 2>/dev/null); echo "${n:-0}"; }
    while [ "$(rows)" -lt 1 ] && kill -0 $pid 2>/dev/null; do
        sleep 0.1
    done
    kill -INT $pid
    wait $pid
    rc=$?
    [ $rc -eq 130 ] || fail "sigint: exit $rc, expected 130: $(cat "$work/sigint.err")"
    n=$(rows)
    [ "$n" -ge 1 ] && [ "$n" -lt 40 ] || fail "sigint: $n rows, expected a partial table"
    has sigint.out "the loader can feed a model"
else
    skipped="$skipped /usr/bin/python3 has no numpy or Pillow (apt-get install python3-pil);"
fi

# --- Usage errors (exit 2) and datasets that cannot be read (exit 1). ---
run missing 1 "$work/nonexistent"
has missing.err "$work/nonexistent"
printf 'not a dataset\n' >"$work/junk.bin"
run junk 1 "$work/junk.bin"
has junk.err "junk.bin"
$py -c "
import numpy as np
np.save('$work/x.npy', np.arange(64, dtype='f4').reshape(8, 8))
np.save('$work/y.npy', np.arange(8) % 2)"
run npy 0 "$work/x.npy" --batch-size 3 --workers 0 --seconds 0.1 --json
check_json npy 3 0 - - - yes 8
run npy_aug 2 "$work/x.npy" --augment
has npy_aug.err "random crops and flips are for images"
run npy_dtype 2 "$work/x.npy" --dtype bf16
has npy_dtype.err "apply to images"
run no_path 2
has no_path.err "bench needs a PATH"
run two_paths 2 "$work/x.npy" "$work/y.npy"
has two_paths.err "unexpected argument"
run unknown 2 "$work/x.npy" --frob
has unknown.err "unknown option '--frob'"
run seconds0 2 "$work/x.npy" --seconds 0
has seconds0.err "--seconds"
run seconds_junk 2 "$work/x.npy" --seconds 1s
run no_value 2 "$work/x.npy" --seconds
has no_value.err "--seconds needs a value"
run batch0 2 "$work/x.npy" --batch-size 0
has batch0.err "--batch-size"
run workers_junk 2 "$work/x.npy" --workers two
has workers_junk.err "--workers"
run workers_comma 2 "$work/x.npy" --workers 1,
run workers_neg 2 "$work/x.npy" --workers -1
run workers_many 2 "$work/x.npy" --workers 100000
run dtype 2 "$work/x.npy" --dtype f64
has dtype.err "--dtype takes f32, bf16 or f16"
run layout 2 "$work/x.npy" --layout chw
has layout.err "--layout takes nchw or nhwc"
run hold 2 "$work/x.npy" --hold maybe
has hold.err "--hold takes auto, yes or no"
run seed 2 "$work/x.npy" --seed x
has seed.err "--seed"
run help 0 --help
has help.out "usage: stoke data bench PATH"
"$stoke" data --help >"$work/data_help.out"
has data_help.out "stoke data bench PATH"

echo "$fails failed"
[ "$fails" -eq 0 ] || exit 1
if [ -n "$skipped" ]; then
    echo "skipped in part:$skipped"
    exit 77
fi
exit 0
