#!/bin/sh
# train_faults.sh STOKE WORKDIR - issue 26's faults in what `stoke train` reads back
# and writes, on a small generated npy dataset: a checkpoint's stoke.config that is not
# an object or lacks a key (5), metadata numbers out of range (6), a dataset path that
# is not UTF-8 in every JSON written and read back exactly (7), signed seeds (9),
# device errors naming their source and the limit (12), and where a resumed run writes
# its checkpoint (13).
set -u
stoke=$1
work=$2
here=$(dirname "$0")
. "$here/lib.sh"
clear_config_env
py=/usr/bin/python3
if ! $py -c 'import numpy' 2>/dev/null; then
    echo "skip: $py with numpy is needed to make the dataset"
    exit 77
fi
meta() { $py "$here/../ckpt_meta.py" "$@"; }
mkdir -p "$work/data"
$py - "$work/data" <<'PY'
import sys
import numpy as np
r = np.random.default_rng(0)
np.save(sys.argv[1] + "/x.npy", r.integers(0, 255, (64, 8, 8), dtype=np.uint8))
np.save(sys.argv[1] + "/y.npy", (np.arange(64) % 4).astype(np.uint8))
PY
small="--model mlp --batch-size 16 --no-monitor --tune off"
ck=$work/c.safetensors
"$stoke" train --dataset "$work/data/x.npy" $small --epochs 1 --checkpoint "$ck" >"$out" 2>&1 \
    && ok "a checkpoint to resume" || { fail "training the checkpoint"; show "$out"; }

# resume CASE EXPECTED_RC PATTERN KEY VALUE: the checkpoint with metadata KEY set to
# VALUE, resumed (writing elsewhere: $ck stays as trained): its exit status and a line
# of its output.
resume() {
    name=$1 want_rc=$2 pattern=$3 key=$4 value=$5
    cp "$ck" "$work/$name.safetensors"
    meta set "$work/$name.safetensors" "$key" "$value"
    "$stoke" train --resume "$work/$name.safetensors" --epochs 2 \
        --checkpoint "$work/$name.out.safetensors" >"$work/$name.txt" 2>&1
    rc=$?
    if [ $rc -eq "$want_rc" ] && grep -q -- "$pattern" "$work/$name.txt"; then
        ok "$name: exit $rc, '$pattern'"
    else
        fail "$name: exit $rc (want $want_rc), '$pattern'"; show "$work/$name.txt"
    fi
}

# 5: a config that is JSON but not an object, or lacks what the weights were trained
# with, is refused naming the key; it never falls back to the defaults (Fashion-MNIST).
resume config_array 1 "^stoke train: $work/config_array.safetensors: metadata stoke.config is an array, not a JSON object" \
    stoke.config '[]'
resume config_string 1 "metadata stoke.config is a string, not a JSON object" stoke.config '"x"'
cfg=$(meta get "$ck" stoke.config)
nodata=$(printf '%s' "$cfg" | $py -c 'import json, sys; c = json.load(sys.stdin); del c["dataset"]; print(json.dumps(c))')
resume config_no_dataset 1 "metadata stoke.config lacks the key dataset" stoke.config "$nodata"
badlr=$(printf '%s' "$cfg" | $py -c 'import json, sys; c = json.load(sys.stdin); c["lr"] = [1]; print(json.dumps(c))')
resume config_array_value 1 "metadata stoke.config: key lr is an array, not a setting's value" \
    stoke.config "$badlr"
badseed=$(printf '%s' "$cfg" | $py -c 'import json, sys; c = json.load(sys.stdin); c["seed"] = " -1"; print(json.dumps(c))')
resume config_seed_sign 1 "config_seed_sign.safetensors: seed: ' -1' is not a whole number" \
    stoke.config "$badseed"
# a setting newer than the checkpoint (not one of those required): its default, said
nosched=$(printf '%s' "$cfg" | $py -c 'import json, sys; c = json.load(sys.stdin); del c["schedule"]; print(json.dumps(c))')
resume config_no_schedule 0 "^resume: the checkpoint's config lacks settings newer than it; the defaults apply: schedule cosine$" \
    stoke.config "$nosched"
if grep -q fashion-mnist "$work"/config_*.txt; then
    fail "a broken config fell back to the default dataset"; grep fashion-mnist "$work"/config_*.txt | show
else
    ok "no broken config falls back to the default dataset"
fi

# 6: every metadata number in its range, written as the writer writes it.
resume step_negative 1 "metadata stoke.step: '-1' is outside \[0, 1000000000000000\]" stoke.step -1
resume step_blank 1 "metadata stoke.step: ' 5' is not understood" stoke.step ' 5'
resume epoch_negative 1 "metadata stoke.epoch: '-2' is outside" stoke.epoch -2
resume sampler_index 1 "metadata stoke.sampler_index: '-3' is outside" stoke.sampler_index -3
resume sampler_epoch 1 "metadata stoke.sampler_epoch: '2000000' is outside" stoke.sampler_epoch 2000000
resume seed_sign 1 "metadata stoke.seed: ' -1' is not understood" stoke.seed ' -1'
resume loss_scale_nan 1 "metadata stoke.loss_scale: 'nan' is outside" stoke.loss_scale nan
resume loss_scale_neg 1 "metadata stoke.loss_scale: '-4' is outside" stoke.loss_scale -4
resume metric_sum 1 "metadata stoke.epoch_metric_sum: '-1' is outside" stoke.epoch_metric_sum -1
resume loss_sum_inf 1 "metadata stoke.epoch_loss_sum: 'inf' is outside" stoke.epoch_loss_sum inf
resume samples 1 "metadata stoke.epoch_samples: '-64' is outside" stoke.epoch_samples -64
resume classes 1 "metadata stoke.classes: '-1' is outside" stoke.classes -1
resume shape_zero 1 "metadata stoke.data_shape: '0,8' is outside \[1, 2147483647\]" stoke.data_shape 0,8
resume shape_sign 1 "metadata stoke.input_shape: '1,+8,8' is not understood" stoke.input_shape 1,+8,8
resume std_zero 1 "metadata stoke.normalize_std: '0' is outside" stoke.normalize_std 0
resume mean_nan 1 "metadata stoke.normalize_mean: 'nan' is outside" stoke.normalize_mean nan
if grep -q "test fault\|steps in" "$work/step_negative.txt"; then
    fail "step -1 trained"; show "$work/step_negative.txt"
else
    ok "step -1: no training, no test fault"
fi
cp "$ck" "$work/evalstep.safetensors"
meta set "$work/evalstep.safetensors" stoke.classes -1
"$stoke" eval "$work/evalstep.safetensors" --dataset "$work/data/x.npy" >"$out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "metadata stoke.classes: '-1' is outside" "$out"; then ok "eval: the same checks"; else fail "eval: exit $rc"; show "$out"; fi

# 13: a resumed run without --checkpoint writes to the path in the checkpoint's
# config: it says so, and why, at the start and in its last line.
cp "$ck" "$work/r13.safetensors"
"$stoke" train --resume "$work/r13.safetensors" --epochs 4 --max-steps 6 >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^resume: checkpoints go to $ck, the path in $work/r13.safetensors's config (--checkpoint writes elsewhere)$" "$out" \
    && grep -q "^stopped after step 6 (max steps); checkpoint written to $ck (the path in $work/r13.safetensors's config" "$out" \
    && ! grep -q "no --checkpoint given" "$out"; then
    ok "resume: where it writes, and why"
else
    fail "resume: where it writes (exit $rc)"; show "$out"
fi
"$stoke" train --dataset "$work/data/x.npy" $small --epochs 2 --max-steps 2 >"$out" 2>&1
if grep -q "^stopped after step 2 (max steps); no --checkpoint given$" "$out"; then ok "no checkpoint: said"; else fail "no checkpoint"; show "$out"; fi

# 7: a dataset path with byte 0xFF. Every JSON written is UTF-8 (U+FFFD in its place),
# and the checkpoint keeps the exact bytes (stoke.config_bytes), so --resume and eval
# open the same file.
odd=$work/$(printf 'd\377x')
mkdir -p "$odd"
cp "$work/data/x.npy" "$work/data/y.npy" "$odd/"
"$stoke" train --dataset "$odd/x.npy" $small --epochs 1 --checkpoint "$work/odd.safetensors" \
    --log "$odd/log.jsonl" >"$out" 2>&1 || { fail "training on the odd path"; show "$out"; }
if $py "$here/../safetensors_read.py" model "$work/odd.safetensors" >"$work/py.txt" 2>&1; then
    ok "the independent reader accepts the checkpoint of a non-UTF-8 path"
else
    fail "independent reader"; show "$work/py.txt"
fi
"$stoke" data info "$odd/x.npy" --json >"$work/info.json" 2>&1
"$stoke" config show --dataset "$odd/x.npy" --json >"$work/show.json" 2>&1
if $py - "$work/odd.safetensors" "$odd/log.jsonl" "$work/info.json" "$work/show.json" "$odd" <<'PY'
import json, os, struct, sys
ck, log, info, show, odd = sys.argv[1:6]
want = (odd + "/x.npy").encode("utf-8", "surrogateescape")
shown = want.decode("utf-8", "replace")  # each invalid byte: U+FFFD
with open(ck, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    meta = json.loads(f.read(n).decode("utf-8"))["__metadata__"]
assert meta["stoke.dataset"] == shown, meta["stoke.dataset"]
assert json.loads(meta["stoke.config"])["dataset"] == shown
assert bytes.fromhex(json.loads(meta["stoke.config_bytes"])["dataset"]) == want
recs = [json.loads(l) for l in open(log, encoding="utf-8")]
assert [r for r in recs if r["type"] == "start"][0]["dataset"] == shown
assert json.load(open(info, encoding="utf-8"))["path"] == shown
json.load(open(show, encoding="utf-8"))
PY
then
    ok "checkpoint header, log, data info --json and config show --json: UTF-8 JSON"
else
    fail "JSON of a non-UTF-8 path"
fi
"$stoke" train --resume "$work/odd.safetensors" --epochs 2 >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^dataset: $odd/x.npy: 64 samples" "$out"; then
    ok "resume opens the exact non-UTF-8 path"
else
    fail "resume of the odd path: exit $rc"; show "$out"
fi
"$stoke" eval "$work/odd.safetensors" >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "^$work/odd.safetensors on $odd/x.npy (test, 64 samples)" "$out"; then
    ok "eval opens the exact non-UTF-8 path"
else
    fail "eval of the odd path: exit $rc"; show "$out"
fi
cp "$work/odd.safetensors" "$work/oddbad.safetensors"
meta set "$work/oddbad.safetensors" stoke.config_bytes '{"dataset":"zz"}'
"$stoke" train --resume "$work/oddbad.safetensors" --epochs 2 >"$out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "metadata stoke.config_bytes: dataset is not" "$out"; then ok "config_bytes checked"; else fail "config_bytes: exit $rc"; show "$out"; fi

# 9 and 12 from the command line: a sign before the digits, and the device's source.
SEED=" -5" "$stoke" train --dataset "$work/data/x.npy" --dry-run >"$out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "environment SEED= -5: seed: ' -5' is not a whole number" "$out"; then ok "SEED=' -5' refused"; else fail "SEED=' -5': exit $rc"; show "$out"; fi
printf "seed: ' -1'\n" >"$work/seed.yaml"
"$stoke" train --config "$work/seed.yaml" --dry-run >"$out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "seed.yaml:1:7: seed: ' -1' is not a whole number" "$out"; then ok "seed: ' -1' refused at its line"; else fail "seed file: exit $rc"; show "$out"; fi
"$stoke" train --device cuda:99 --dry-run >"$out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "^stoke train: --device: 'cuda:99': stoke addresses at most 16 GPUs, cuda:0 to cuda:15" "$out"; then ok "--device cuda:99: the limit"; else fail "--device cuda:99: exit $rc"; show "$out"; fi
STOKE_DEVICE=cuda:99 "$stoke" config show >"$out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "environment STOKE_DEVICE=cuda:99: device: 'cuda:99': stoke addresses at most 16 GPUs" "$out"; then ok "STOKE_DEVICE=cuda:99: the variable and the limit"; else fail "STOKE_DEVICE=cuda:99: exit $rc"; show "$out"; fi
STOKE_DEVICE=gpu "$stoke" train --dry-run >"$out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "environment STOKE_DEVICE=gpu: device: 'gpu' is not auto, cpu, cuda or cuda:N" "$out"; then ok "STOKE_DEVICE=gpu: the variable"; else fail "STOKE_DEVICE=gpu: exit $rc"; show "$out"; fi
printf 'epochs: 1\ndevice: gpu\n' >"$work/dev.yaml"
"$stoke" train --config "$work/dev.yaml" --dry-run >"$out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "dev.yaml:2:9: device: 'gpu' is not auto, cpu, cuda or cuda:N" "$out"; then ok "device: gpu in a file: its line"; else fail "device in a file: exit $rc"; show "$out"; fi
e2e_end
