#!/bin/sh
# bench/loader_bench.sh [BUILD_DIR] [EPOCHS] - stoke's loader beside PyTorch's
# DataLoader in the same run, on Fashion-MNIST's training set (60,000 images) held in
# memory: with the same work per sample (pad 2 + random 28x28 crop, random horizontal
# flip, float32, normalize, batch 256, shuffled), PyTorch with 0, 1 and 2 persistent
# workers and stoke with 1 and 2; then with no transform (float32 batches) beside a
# memcpy of the same bytes. EPOCHS (default 3) timed epochs after one warm-up epoch.
# Builds BUILD_DIR (default out/release) if needed; installs python3-torch and
# dataset-fashion-mnist with apt-get if missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-out/release}
epochs=${2:-3}
data=/usr/share/datasets/fashion-mnist
py=/usr/bin/python3

if ! [ -d "$data" ] || ! "$py" -c 'import torch' 2>/dev/null; then
    echo "installing python3-torch and dataset-fashion-mnist (apt-get)" >&2
    apt-get install -y python3-torch dataset-fashion-mnist >/dev/null
fi
[ -x "$build/tests/stoke_bench_loader" ] || "$here/../scripts/build" "$build" >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$build/tests/stoke_bench_loader" "$data" "$epochs" >>"$out"
"$py" "$here/loader_bench_torch.py" "$data" "$epochs" >>"$out"

v() { awk -v k="$1" '$1 == k {print $2}' "$out"; }
grep '^#' "$out" || true
awk -v epochs="$epochs" '
    $1 ~ /^#/ { next }
    { v[$1] = $2 }
    END {
        printf "\n%-44s %14s\n", "Fashion-MNIST train, batch 256, " epochs " epochs", "samples/s"
        printf "with transforms (pad 2 + crop 28, flip, normalize, float32):\n"
        for (w = 0; w <= 2; w++) printf "  %-42s %14.0f\n", "PyTorch DataLoader, num_workers=" w, v["torch_transform_w" w]
        for (w = 1; w <= 2; w++) printf "  %-42s %14.0f\n", "stoke loader, " w " worker" (w > 1 ? "s" : ""), v["stoke_transform_w" w]
        tb = v["torch_transform_w0"]; if (v["torch_transform_w1"] > tb) tb = v["torch_transform_w1"]; if (v["torch_transform_w2"] > tb) tb = v["torch_transform_w2"]
        sb = v["stoke_transform_w1"]; if (v["stoke_transform_w2"] > sb) sb = v["stoke_transform_w2"]
        printf "  %-42s %13.1fx\n", "stoke best / PyTorch best", sb / tb
        printf "no transform (float32 samples as stored):\n"
        for (w = 0; w <= 2; w++) printf "  %-42s %14.0f\n", "PyTorch DataLoader, num_workers=" w, v["torch_plain_w" w]
        for (w = 1; w <= 2; w++) printf "  %-42s %14.0f\n", "stoke loader, " w " worker" (w > 1 ? "s" : ""), v["stoke_plain_w" w]
        printf "  %-42s %14.0f  (%.1f GB/s read + write)\n", "memcpy of the same bytes (1 thread)", v["memcpy"], v["memcpy_gbps"]
        pb = v["stoke_plain_w1"]; if (v["stoke_plain_w2"] > pb) pb = v["stoke_plain_w2"]
        tp = v["torch_plain_w0"]; if (v["torch_plain_w1"] > tp) tp = v["torch_plain_w1"]; if (v["torch_plain_w2"] > tp) tp = v["torch_plain_w2"]
        printf "  %-42s %13.0f%%\n", "stoke best / memcpy", 100 * pb / v["memcpy"]
        printf "  %-42s %13.1fx\n", "stoke best / PyTorch best", pb / tp
    }' "$out"
