#!/bin/sh
# bench/python_loader_bench.sh [BUILD_DIR] [-- OPTIONS] - stoke.Loader beside PyTorch's
# DataLoader inside a PyTorch training loop, in the same run: the reference CNN on
# Fashion-MNIST (batch 256, RandomCrop(28, padding=2) + RandomHorizontalFlip + Normalize),
# DataLoader with 0, 1 and 2 workers, stoke.Loader with "auto", 0, 1 and 2 workers;
# samples/s and the share of the step spent waiting for data, then each loader alone;
# every configuration 3 times in turn, the median kept (10 to 12 minutes on 2 cores).
# OPTIONS go to bench/python_loader_bench.py (--steps N, --warmup N, --rounds R,
# --batch-size B, --threads T). Builds BUILD_DIR (default out/release) incrementally, with the Python
# package; installs python3-torch and dataset-fashion-mnist with apt-get if missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=out/release
if [ $# -gt 0 ] && [ "$1" != "--" ]; then build=$1; shift; fi
if [ "${1:-}" = "--" ]; then shift; fi
py=/usr/bin/python3
data=/usr/share/datasets/fashion-mnist

if ! [ -d "$data" ] || ! "$py" -c 'import torch' 2>/dev/null; then
    echo "installing python3-torch and dataset-fashion-mnist (apt-get)" >&2
    apt-get install -y python3-torch dataset-fashion-mnist >/dev/null
fi
"$here/../scripts/build" "$build" -DSTOKE_PYTHON=ON -DPython3_EXECUTABLE="$py" >/dev/null
build=$(cd "$build" && pwd)
PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" exec "$py" "$here/python_loader_bench.py" "$@"
