#!/bin/sh
# bench/gpu.sh [--quick] [--dry-run] [--no-build] [--models cnn,mlp] [--json FILE] [BUILD_DIR] - `stoke train --device
# cuda` beside PyTorch on the same NVIDIA GPU, the GPU twin of bench/train_bench.sh: the
# reference CNN (batch 128) and the MLP 784-512-512-10 (batch 256) on Fashion-MNIST,
# SGD momentum 0.9, lr 0.05 constant, cross-entropy, seed 1. For each model, in the
# precision stoke's --precision auto picks on this GPU (bf16 from compute capability
# 8.0, fp16 with loss scaling on 7.x, fp32 below; PyTorch: torch.autocast, plus
# GradScaler for fp16) and in fp32 (TF32 from 8.0 on both sides):
#   - training samples/s: W warm-up steps, then R windows of N steps, the best window
#     (full: 20, 5 x 40; --quick: 10, 3 x 30), all in the first epoch. stoke from the
#     wall-clock times of its --log-every 1 step records; PyTorch with
#     torch.cuda.synchronize() around each window. PyTorch twice: the data resident on
#     the GPU (the fastest a user can feed it; the CNN in NCHW and channels_last, the
#     faster kept) and a DataLoader over the same tensors on the CPU (pin_memory,
#     non_blocking copies, num_workers 0, 2 and 4, the best kept: what the seeds' users
#     run);
#   - MFU: samples/s x the step's matmul/conv FLOPs a sample (3 x forward less the first
#     layer's input gradient, never computed: the count stoke uses) / the peak `stoke
#     probe --json` gives this GPU at that precision (tensor cores for bf16/fp16, the
#     FMA rate for fp32): the same peak for both sides; a rate past it (TF32) is printed
#     "> peak", never as an MFU above 100%;
#   - time to 90% test accuracy for the CNN: wall time from the first step to the first
#     end-of-epoch evaluation on the 10,000 test images reaching it, at most 6 epochs
#     (--quick 3); PyTorch with its data resident;
#   - the loader's wait (% of the window) stoke reports.
# --models mlp (or cnn) measures one model only; the time to target is then the
# MLP's when the CNN is left out.
# Prints one table and a line naming the GPU, driver, CUDA, the CPU and the command, and
# writes the same as JSON (bench/out/gpu-<date>.json, or --json FILE); the raw "key
# value" lines go to BUILD_DIR/gpu_bench.results. Builds BUILD_DIR (default out/release)
# with scripts/build first, unless --no-build.
#
# Without a GPU it says so and exits 0: nothing is measured, no table. --dry-run (or
# STOKE_BENCH_GPU_FAKE=1) runs the whole pipeline against stoke's CUDA test doubles (the
# environment of tests/e2e/train_cuda.sh: a fake H100 whose cuBLAS/cuDNN are loops on
# the CPU, the kernels' host build) with tiny sizes, and PyTorch on the CPU; every number
# is labelled "DRY RUN: CPU doubles, not a GPU measurement", in the table and the JSON.
#
# Environment: STOKE_BENCH_PYTHON (default /usr/bin/python3) is the Python whose torch
# is the peer (it needs a CUDA build of torch; without one only stoke is measured);
# STOKE_BENCH_DATA the Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist);
# STOKE_BENCH_COMMIT the commit measured, where the tree around this script is not it
# (the GPU kit sets it from its KIT.txt).
# --dry-run takes the doubles from STOKE_CUDART_LIBRARY, _CUBLAS_, _CUBLASLT_, _CUDNN_,
# STOKE_NVML_LIBRARY and STOKE_FAKE_GPU_SCENARIO when all are set (the GPU kit's dry
# run), else from BUILD_DIR/tests/fake.
# CUDA_DEVICE_ORDER=PCI_BUS_ID is set so that cuda:0 is the same GPU for stoke and
# PyTorch; the probe's GPU and peak are cuda:0's, which the probe matches by PCI bus id
# (so CUDA_VISIBLE_DEVICES is followed too).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
command="bench/gpu.sh${*:+ $*}"
usage() {
    echo "usage: bench/gpu.sh [--quick] [--dry-run] [--no-build] [--models cnn,mlp] [--json FILE] [BUILD_DIR]" >&2
    exit 2
}
quick=0 dry=0 nobuild=0 json="" build="" only=""
while [ $# -gt 0 ]; do
    case $1 in
        --quick) quick=1 ;;
        --dry-run) dry=1 ;;
        --no-build) nobuild=1 ;;
        --json) [ $# -ge 2 ] || usage; json=$2; shift ;;
        --models) [ $# -ge 2 ] || usage; only=$2; shift ;;
        --json=*) json=${1#--json=} ;;
        -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "bench/gpu.sh: unknown option $1" >&2; usage ;;
        *) [ -z "$build" ] || usage; build=$1 ;;
    esac
    shift
done
[ "${STOKE_BENCH_GPU_FAKE:-0}" = 1 ] && dry=1
build=${build:-$repo/out/release}
case $build in /*) ;; *) build=$(pwd)/$build ;; esac
py=${STOKE_BENCH_PYTHON:-/usr/bin/python3}
data=${STOKE_BENCH_DATA:-/usr/share/datasets/fashion-mnist}
stoke=$build/stoke
# the report needs only the standard library: /usr/bin/python3, whatever the peer is
# (the peer's Python where there is no /usr/bin/python3)
rpy=/usr/bin/python3
[ -x "$rpy" ] || rpy=$py
report() { "$rpy" "$here/gpu_report.py" "$@"; }
note() { printf '%s\n' "$*" >&2; }

# Sizes. The speed windows stay inside the first epoch (stoke's data wait is read over
# the window from its epoch-so-far figures): (warmup + repeats x steps) x batch must be
# at most 60,000 for both models (220 x 256 = 56,320).
batch_cnn=128 batch_mlp=256 limit=0 val_limit=0 target=0.90 workers=0,2,4
if [ $quick = 1 ]; then
    warmup=10 steps=30 repeats=3 max_epochs=3
else
    warmup=20 steps=40 repeats=5 max_epochs=6
fi
if [ $dry = 1 ]; then
    # a step of the doubles' loops takes about 60 ms at batch 32 on one core
    warmup=2 steps=3 repeats=2 max_epochs=2 batch_cnn=16 batch_mlp=32 limit=256 val_limit=256
    target=0.50 workers=0,2
fi

if ! [ -d "$data" ]; then
    note "bench/gpu.sh: $data is missing (apt-get install dataset-fashion-mnist)"
    exit 1
fi

# An incremental build (--no-build: BUILD_DIR as it is); if the tree does not build,
# what BUILD_DIR has is used.
if [ $nobuild = 0 ]; then
    note "building $build"
    mkdir -p "$(dirname "$build")"
    if ! "$repo/scripts/build" "$build" >"$build.gpu-bench-build.log" 2>&1; then
        note "warning: building $build failed (see $build.gpu-bench-build.log); using what it has"
    fi
fi
if ! [ -x "$stoke" ]; then
    note "bench/gpu.sh: no $stoke (the build failed: $build.gpu-bench-build.log)"
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/results

if [ $dry = 1 ] && [ -n "${STOKE_CUDART_LIBRARY:-}" ] && [ -n "${STOKE_CUBLAS_LIBRARY:-}" ] &&
   [ -n "${STOKE_CUBLASLT_LIBRARY:-}" ] && [ -n "${STOKE_CUDNN_LIBRARY:-}" ] &&
   [ -n "${STOKE_NVML_LIBRARY:-}" ] && [ -n "${STOKE_FAKE_GPU_SCENARIO:-}" ]; then
    # the caller named the doubles (the GPU kit's dry run, scripts/kit/run.sh)
    export STOKE_CUDA_KERNELS=host
    note "DRY RUN: stoke on the CUDA test doubles the environment names ($STOKE_CUDART_LIBRARY ...), PyTorch on the CPU, tiny sizes: not a GPU measurement"
elif [ $dry = 1 ]; then
    fake=$build/tests/fake
    for f in fake_nvml/libnvidia-ml.so.1 fake_cudart/libcudart.so.13 \
             fake_cublas/libcublas.so.13 fake_cublaslt/libcublasLt.so.13 \
             fake_cudnn/libcudnn.so.9; do
        if ! [ -f "$fake/$f" ]; then
            note "bench/gpu.sh --dry-run: no $fake/$f (stoke's CUDA test doubles: a build with tests, scripts/build $build)"
            exit 1
        fi
    done
    export STOKE_NVML_LIBRARY="$fake/fake_nvml/libnvidia-ml.so.1"
    export STOKE_CUDART_LIBRARY="$fake/fake_cudart/libcudart.so.13"
    export STOKE_CUBLAS_LIBRARY="$fake/fake_cublas/libcublas.so.13"
    export STOKE_CUBLASLT_LIBRARY="$fake/fake_cublaslt/libcublasLt.so.13"
    export STOKE_CUDNN_LIBRARY="$fake/fake_cudnn/libcudnn.so.9"
    export STOKE_FAKE_GPU_SCENARIO="$repo/tests/scenarios/cuda_train.gpu"
    export STOKE_CUDA_KERNELS=host
    note "DRY RUN: stoke on its CUDA test doubles (a fake H100 computed on the CPU), PyTorch on the CPU, tiny sizes: not a GPU measurement"
fi
export CUDA_DEVICE_ORDER=PCI_BUS_ID
# Numbers from the doubles are labelled as such however they were asked for.
doubles=$dry
if [ $dry = 0 ] && { [ -n "${STOKE_FAKE_GPU_SCENARIO:-}" ] || [ "${STOKE_CUDA_KERNELS:-}" = host ]; }; then
    doubles=1
    note "STOKE_FAKE_GPU_SCENARIO or STOKE_CUDA_KERNELS=host is set: stoke runs on its test doubles, and the results are labelled as a dry run"
fi

# ---- Is there a GPU? ----
if ! "$stoke" probe --json >"$tmp/probe.json" 2>"$tmp/probe.err"; then
    note "bench/gpu.sh: $stoke probe --json failed: $(tail -1 "$tmp/probe.err")"
    exit 1
fi
report probe "$tmp/probe.json" >"$tmp/probe.kv"
kv() { awk -v k="$1" '$1 == k {sub(/^[^ ]* /, ""); print; exit}' "$tmp/probe.kv"; }
if [ "$(kv gpu_count)" = 0 ]; then
    echo "No GPU: stoke probe found none ($(kv gpu_note)). Nothing was measured: no table."
    echo "bench/gpu.sh is for a machine with an NVIDIA GPU; bench/gpu.sh --dry-run runs its pipeline on stoke's CUDA test doubles (numbers that are not a GPU's)."
    exit 0
fi
if ! [ -f "$build/libstoke_cuda.so" ]; then
    if [ $dry = 0 ]; then
        echo "this build has no CUDA kernels ($build/libstoke_cuda.so is missing): install nvcc (scripts/deps) and rebuild (scripts/build $build)" >&2
        exit 1
    fi
    note "dry run: $build/libstoke_cuda.so is missing (a real run would stop here); the kernels' host build stands in"
fi

{
    echo "# bench/gpu.sh results: key value"
    echo "dry_run $doubles"
    echo "quick $quick"
    echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "command $command"
    echo "commit ${STOKE_BENCH_COMMIT:-$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
    echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs"
    echo "warmup $warmup"
    echo "steps $steps"
    echo "repeats $repeats"
    echo "target $target"
    echo "max_epochs $max_epochs"
    echo "limit $limit"
    echo "val_limit $val_limit"
    echo "batch_cnn $batch_cnn"
    echo "batch_mlp $batch_mlp"
    echo "loader_workers $workers"
    # a step's matmul and convolution FLOPs a sample as backward computes them
    # (stoke_graph_step_flops's count): 3 x forward less the first layer's input
    # gradient, which is never computed
    echo "flops_cnn $((3 * 2 * (28 * 28 * 32 * 1 * 9 + 14 * 14 * 64 * 32 * 9 + 3136 * 128 + 128 * 10) - 2 * 28 * 28 * 32 * 1 * 9))"
    echo "flops_mlp $((3 * 2 * (784 * 512 + 512 * 512 + 512 * 10) - 2 * 784 * 512))"
    cat "$tmp/probe.kv"
} >>"$out"
note "GPU: $(kv gpu_name) (compute capability $(kv gpu_cc)), driver $(kv driver)"

# ---- The peer ----
tdev=cuda:0
[ $dry = 1 ] && tdev=cpu
peer=1
if ! [ -x "$py" ]; then
    peer=0 why="$py does not exist"
elif ! "$py" -c 'import torch' >/dev/null 2>&1; then
    peer=0 why="$py has no torch (pip install torch, a CUDA build; or STOKE_BENCH_PYTHON=another python)"
elif ! "$py" "$here/gpu_torch.py" check --device $tdev >"$tmp/torch.kv" 2>"$tmp/torch.err"; then
    peer=0 why="$(tail -1 "$tmp/torch.err")"
fi
if [ $peer = 1 ]; then
    cat "$tmp/torch.kv" >>"$out"
    tname=$(awk '$1 == "torch_device_name" {sub(/^[^ ]* /, ""); print}' "$tmp/torch.kv")
    if [ $dry = 0 ] && [ "$tname" != "$(kv gpu_name)" ]; then
        echo "warning_ PyTorch's cuda:0 is '$tname', stoke probe's GPU 0 '$(kv gpu_name)': not the same GPU?" >>"$out"
    fi
    note "peer: torch $(awk '$1 == "torch_version" {print $2}' "$tmp/torch.kv") on $tname"
else
    echo "missing_ the PyTorch peer: $why; only stoke was measured" >>"$out"
    note "no PyTorch peer: $why; measuring stoke only"
fi

# ---- What runs ----
auto=$(kv auto_precision)
case $auto in
    bf16 | fp16) precisions="$auto fp32" ;;
    fp32) precisions=fp32 ;;
    *) precisions=fp32
       echo "missing_ mixed precision: the probe gives no compute capability for $(kv gpu_name), so stoke's auto precision is unknown; fp32 only" >>"$out" ;;
esac
models="cnn mlp"
tt_models=cnn
if [ $dry = 1 ]; then
    # The CUDA backend's convolution may not have landed yet: then the dry run is the MLP.
    if ! "$stoke" train --device cuda --model cnn --batch-size 2 --limit 4 --val-limit 4 --epochs 1 --dataset "$data" \
            --max-steps 1 --no-monitor >"$tmp/cnn_try" 2>&1; then
        if grep -q 'not built yet' "$tmp/cnn_try"; then
            models=mlp tt_models=mlp
            echo "missing_ dry run: the CNN on the CUDA doubles ($(tail -1 "$tmp/cnn_try")): the dry run uses the MLP alone, also for the time to target; the real run includes the CNN" >>"$out"
            note "dry run: stoke's CUDA backend cannot run the CNN yet ($(tail -1 "$tmp/cnn_try")): the MLP alone"
        fi
    fi
fi
if [ -n "$only" ]; then
    # a subset (the GPU kit's dry run: the MLP alone, whose doubles' loops are fast)
    sel="" tt=""
    for m in $(echo "$only" | tr ',' ' '); do
        case " $models " in *" $m "*) sel="$sel $m" ;; *) note "bench/gpu.sh: --models: '$m' is not one of: $models"; exit 2 ;; esac
        case " $tt_models " in *" $m "*) tt="$tt $m" ;; esac
    done
    models=${sel# } tt_models=${tt# }
    [ -n "$tt_models" ] || tt_models=$(echo "$models" | cut -d' ' -f1)
fi
echo "models $models" >>"$out"
echo "precisions $precisions" >>"$out"
echo "to_target_models $tt_models" >>"$out"

lim() { [ "$1" -gt 0 ] && printf '%s %s' "$2" "$1"; return 0; }
stoke_common() { # MODEL BATCH: the flags every stoke run shares
    if [ "$1" = cnn ]; then printf '%s' "--model cnn"; else printf '%s' "--model mlp --hidden 512,512"; fi
    printf ' %s' --batch-size "$2" --device cuda:0 --optimizer sgd --lr 0.05 --momentum 0.9 \
        --schedule constant --seed 1 --val-batch-size 1000 --no-monitor --dataset "$data"
    # shellcheck disable=SC2046 # lim prints nothing or two words
    printf ' %s' $(lim "$limit" --limit)
}

for m in $models; do
    b=$batch_cnn; [ $m = mlp ] && b=$batch_mlp
    for p in $precisions; do
        # stoke's throughput
        note "stoke train --device cuda: $m $p, throughput"
        rm -f "$tmp/log"
        vl=$val_limit; [ "$vl" -gt 0 ] || vl=1000 # no evaluation runs before --max-steps; in case
        # shellcheck disable=SC2046
        if "$stoke" train $(stoke_common $m $b) --precision $p --epochs 1 --val-limit $vl \
                --log "$tmp/log" --log-every 1 --max-steps $((warmup + repeats * steps)) \
                >"$tmp/stdout" 2>&1; then
            report stoke-speed "$tmp/log" $b $warmup $steps $repeats >"$tmp/speed" || true
            rate=$(awk '$1 == "speed" {print $2}' "$tmp/speed")
            echo "rate_${m}_${p}_stoke $rate" >>"$out"
            echo "wait_${m}_${p}_stoke $(awk '$1 == "data_wait_pct" {print $2}' "$tmp/speed")" >>"$out"
            sed -n 's/^device_name /stoke_device_name /p' "$tmp/speed" | head -1 >>"$out"
            sed -n "s/^step_pct /step_${m}_${p}_stoke /p" "$tmp/speed" >>"$out"
            sed -n "s/^\(CUDA graphs: .*\)/graphs_${m}_${p} \1/p" "$tmp/stdout" | head -1 >>"$out"
            case $rate in nan | "") echo "missing_ stoke $m $p: no complete window in its log (warm-up $warmup, $repeats x $steps steps)" >>"$out" ;; esac
            # stoke's own FLOP count against this script's (its setup line, 3 digits)
            mf=$(sed -n 's/^MFU: \([0-9.e+]*\) MFLOP a sample a step.*/\1/p' "$tmp/stdout" | head -1)
            if [ -n "$mf" ]; then
                echo "stoke_mflop_$m $mf" >>"$out"
                ours=$(awk -v k=flops_$m '$1 == k {print $2}' "$out")
                awk -v s="$mf" -v o="$ours" 'BEGIN {d = s * 1e6 / o - 1; exit !(d > 0.01 || d < -0.01)}' &&
                    echo "warning_ stoke counts $mf MFLOP a sample a step for the $m, this script $ours FLOP: the MFU columns disagree with stoke's" >>"$out"
            fi
        else
            echo "missing_ stoke train --device cuda $m $p failed: $(tail -1 "$tmp/stdout")" >>"$out"
            note "  failed: $(tail -1 "$tmp/stdout")"
        fi
        # PyTorch's throughput, both feeds
        if [ $peer = 1 ]; then
            for feed in resident loader; do
                note "PyTorch ($tdev): $m $p, throughput, $feed data"
                # shellcheck disable=SC2046
                if "$py" "$here/gpu_torch.py" speed $m --device $tdev --precision $p --feed $feed \
                        --workers $workers --batch $b $(lim "$limit" --limit) --warmup $warmup \
                        --steps $steps --repeats $repeats >"$tmp/tout" 2>"$tmp/terr"; then
                    echo "rate_${m}_${p}_torch_$feed $(awk '$1 == "speed" {print $2}' "$tmp/tout")" >>"$out"
                    echo "cfg_${m}_${p}_torch_$feed $(sed -n 's/^config //p' "$tmp/tout")" >>"$out"
                else
                    echo "missing_ PyTorch $m $p ($feed data) failed: $(tail -1 "$tmp/terr")" >>"$out"
                    note "  failed: $(tail -1 "$tmp/terr")"
                fi
            done
        fi
        # Time to target
        case " $tt_models " in *" $m "*) ;; *) continue ;; esac
        note "stoke train --device cuda: $m $p, time to $target (at most $max_epochs epochs)"
        rm -f "$tmp/log"
        # shellcheck disable=SC2046
        if "$stoke" train $(stoke_common $m $b) --precision $p --epochs $max_epochs \
                $(lim "$val_limit" --val-limit) --target-accuracy $target \
                --log "$tmp/log" --log-every 1000000 >"$tmp/stdout" 2>&1; then
            report stoke-epochs "$tmp/log" >"$tmp/ep" || true
            sed -n "s/^epoch \([0-9]*\) seconds \([^ ]*\) test_accuracy \([^ ]*\)/epoch_${m}_${p}_stoke_\1 \2 \3/p" "$tmp/ep" >>"$out"
            echo "to_${m}_${p}_stoke $(awk '$1 == "to_target_seconds" {print $2}' "$tmp/ep")" >>"$out"
            echo "to_epochs_${m}_${p}_stoke $(grep -c '^epoch ' "$tmp/ep")" >>"$out"
            sed -n "s/^mfu_reported /mfu_reported_${m}_${p}_stoke /p" "$tmp/ep" >>"$out"
        else
            echo "missing_ stoke train --device cuda $m $p to $target failed: $(tail -1 "$tmp/stdout")" >>"$out"
        fi
        [ $peer = 1 ] || continue
        cl=""
        grep -q "^cfg_${m}_${p}_torch_resident .*channels_last" "$out" && cl=--channels-last
        note "PyTorch ($tdev): $m $p, time to $target"
        # shellcheck disable=SC2046
        if "$py" "$here/gpu_torch.py" to-target $m --device $tdev --precision $p --batch $b $cl \
                $(lim "$limit" --limit) $(lim "$val_limit" --val-limit) --target $target \
                --max-epochs $max_epochs >"$tmp/tout" 2>"$tmp/terr"; then
            sed -n "s/^epoch \([0-9]*\) seconds \([^ ]*\) test_accuracy \([^ ]*\)/epoch_${m}_${p}_torch_resident_\1 \2 \3/p" "$tmp/tout" >>"$out"
            echo "to_${m}_${p}_torch_resident $(awk '$1 == "to_target_seconds" {print $2}' "$tmp/tout")" >>"$out"
            echo "to_epochs_${m}_${p}_torch_resident $(grep -c '^epoch ' "$tmp/tout")" >>"$out"
        else
            echo "missing_ PyTorch $m $p to $target failed: $(tail -1 "$tmp/terr")" >>"$out"
        fi
    done
done

if [ -z "$json" ]; then
    mkdir -p "$here/out"
    json=$here/out/gpu-$(date -u +%Y-%m-%dT%H%MZ)$([ $doubles = 1 ] && echo -dryrun).json
fi
cp "$out" "$build/gpu_bench.results" 2>/dev/null || true # the raw "key value" lines
report table "$out" "$json"
