#!/bin/sh
# bench/train_bench.sh [--quick] [BUILD_DIR] - `stoke train` beside PyTorch (Debian's
# python3-torch) in the same run: the reference CNN (batch 128) and the MLP 784-512-512-10
# (batch 256) on Fashion-MNIST held in memory, SGD momentum 0.9, cross-entropy. Prints
# side by side: training samples/s (stoke fp32 and bf16, PyTorch's best configuration of
# threads, OpenBLAS threads, OPENBLAS_CORETYPE set/unset, channels_last, and autocast
# bf16), the ratios, the wall time to the target test accuracy (90% for the CNN, 88% for
# the MLP, which plateaus near 89.5% under constant-rate SGD) with the ratio, and each
# training step's fraction of the machine's best measured SGEMM peak at the same thread
# count. --quick: shorter windows, fewer epochs, no bf16 time to target (about 7 minutes
# instead of about 13 on an idle machine). Builds BUILD_DIR (default out/release).
#
# OPENBLAS_CORETYPE: "set" is the machine's value (Haswell when this shell has none: the
# value these machines' environment carries); it is changed for PyTorch's and the peak
# driver's commands only. stoke runs in the caller's environment, unchanged (its training
# does not use OpenBLAS). The report names the OpenBLAS kernels PyTorch ran on in each
# case and warns when they are a fallback far below the CPU (`stoke probe` judges them).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
build=${1:-out/release}
py=/usr/bin/python3
data=/usr/share/datasets/fashion-mnist
ct=${OPENBLAS_CORETYPE:-Haswell}
# *_epochs: the most epochs a time-to-target run may take; both sides stop at the target.
if [ $quick = 1 ]; then
    steps=15 repeats=2 warmup=5 cnn_epochs=4 mlp_epochs=8
else
    steps=30 repeats=3 warmup=10 cnn_epochs=6 mlp_epochs=20
fi

if ! [ -d "$data" ] || ! "$py" -c 'import torch' 2>/dev/null; then
    echo "installing python3-torch and dataset-fashion-mnist (apt-get)" >&2
    apt-get install -y python3-torch dataset-fashion-mnist >/dev/null
fi
stoke=$build/stoke
# An incremental build (quick when BUILD_DIR is current); if the tree does not build,
# what BUILD_DIR has is used, and without `stoke train` PyTorch's side is still measured.
"$here/../scripts/build" "$build" >/dev/null 2>&1 || echo "warning: building $build failed; using what it has" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/results
start=$(date +%s)

note() { printf '%s\n' "$*" >&2; }
# run_ct set|unset CMD...: CMD with OPENBLAS_CORETYPE as the machine sets it, or unset.
run_ct() {
    w=$1; shift
    if [ "$w" = set ]; then OPENBLAS_CORETYPE=$ct "$@"; else env -u OPENBLAS_CORETYPE "$@"; fi
}
torch() { "$py" "$here/train_torch.py" "$@" 2>/dev/null; }

{
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# OPENBLAS_CORETYPE set = $ct; stoke runs with OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"
    echo "target_cnn 0.90"
    echo "target_mlp 0.88"
} >>"$out"

# The OpenBLAS kernels PyTorch runs on, set and unset: a fallback core far below this CPU
# (Debian's OpenBLAS on a CPU model it does not know) would make the comparison one
# against a crippled peer, and the report says so.
for w in set unset; do
    run_ct $w "$py" "$here/train_torch.py" blas --stoke "$stoke" 2>/dev/null |
        sed -n "s/^peer_openblas /peer_openblas_$w /p" >>"$out"
done
note "PyTorch's OpenBLAS kernels: $(sed -n 's/^peer_openblas_//p' "$out" | tr '\n' ';')"

# The peaks, measured at the start and again at the end (the report keeps the best of
# the two: a shared machine's other jobs lower a measurement, never raise it).
peaks() {
    note "matrix-multiply peaks"
    for w in set unset; do
        if [ -x "$build/tests/stoke_bench_sgemm" ]; then
            run_ct $w "$build/tests/stoke_bench_sgemm" | sed "/^#/d; s/^\([a-z0-9_]*\)_t\([12]\) /peak_\1_${w}_t\2 /" >>"$out"
        fi
        run_ct $w "$py" "$here/train_torch.py" sgemm 2>/dev/null | sed -n "s/^sgemm_t\([12]\) /peak_torch_mm_${w}_t\1 /p" >>"$out"
    done
}
peaks

note "PyTorch training throughput"
for w in set unset; do
    for m in cnn mlp; do
        for p in "" --bf16; do
            run_ct $w "$py" "$here/train_torch.py" speed $m $p --steps $steps --repeats $repeats \
                --warmup $warmup 2>/dev/null | sed -n "s/^speed_\([^ ]*\) /torch_speed_\1_${w} /p; /^flops/p" >>"$out"
        done
    done
done

# PyTorch's time to target, in its best configuration of each precision.
for m in cnn mlp; do
    target=$(awk -v k=target_$m '$1 == k {print $2}' "$out")
    epochs=$cnn_epochs; [ $m = mlp ] && epochs=$mlp_epochs
    for prec in fp32 bf16; do
        if [ $prec = fp32 ]; then pat="torch_speed_${m}_t[0-9]_b[0-9]_cl[01]_(set|unset)"
        else pat="torch_speed_${m}_.*_bf16_(set|unset)"; fi
        tag=$(awk -v p="^$pat\$" '$1 ~ p && $2 > best {best = $2; k = $1} END {print k}' "$out")
        [ -n "$tag" ] || continue
        [ $quick = 1 ] && [ $prec = bf16 ] && continue
        note "PyTorch time to $target ($m $prec, $tag)"
        set -- $(echo "$tag" | sed 's/.*_t\([0-9]\)_b\([0-9]\)_cl\([01]\).*_\(set\|unset\)$/\1 \2 \3 \4/')
        flags="--threads $1 --blas-threads $2"
        [ "$3" = 1 ] && flags="$flags --channels-last"
        [ $prec = bf16 ] && flags="$flags --bf16"
        run_ct "$4" "$py" "$here/train_torch.py" to90 $m $flags --target "$target" \
            --max-epochs $epochs 2>/dev/null >"$tmp/to90"
        sed -n "s/^epoch \([0-9]*\) seconds \([^ ]*\) test_accuracy \([^ ]*\)/torch_epoch_${m}_${prec}_\1 \2 \3/p" "$tmp/to90" >>"$out"
        sed -n "s/^to90_seconds /torch_to90_${m}_${prec} /p" "$tmp/to90" >>"$out"
        echo "torch_to90cfg_${m}_${prec} $tag" >>"$out"
    done
done

# stoke's side: the same models, batches, optimizer and data in memory (stoke loads the
# IDX files into memory itself; no augmentation, evaluation on the 10,000 test images
# after every epoch, as PyTorch's side does).
if "$stoke" train --help >/dev/null 2>&1; then
    for m in cnn mlp; do
        if [ $m = cnn ]; then spec=cnn b=128; else spec="mlp --hidden 512,512" b=256; fi
        common="--model $spec --batch-size $b --optimizer sgd --lr 0.05 --momentum 0.9 --schedule constant --seed 1 --val-batch-size 1000 --no-monitor"
        for prec in fp32 bf16; do
            for t in 1 2; do
                note "stoke training throughput ($m $prec, $t thread(s))"
                rm -f "$tmp/log"
                if "$stoke" train $common --precision $prec --threads $t --log "$tmp/log" --log-every 1 \
                        --max-steps $((warmup + repeats * steps)) >"$tmp/stdout" 2>&1; then
                    echo "stoke_speed_${m}_${prec}_t$t $("$py" "$here/train_report.py" speed "$tmp/log" $b $warmup $steps $repeats)" >>"$out"
                else
                    echo "missing_${m}_${prec}_t$t stoke train $m $prec --threads $t failed: $(tail -1 "$tmp/stdout")" >>"$out"
                fi
            done
            t=$(awk -v p="^stoke_speed_${m}_${prec}_t" '$1 ~ p && $2 > best {best = $2; k = $1} END {sub(/.*_t/, "", k); print k}' "$out")
            [ -n "$t" ] || continue
            target=$(awk -v k=target_$m '$1 == k {print $2}' "$out")
            # Stops at the first evaluation reaching the target, as PyTorch's runs do; the
            # times are the log's "elapsed" (from the training loop's start).
            epochs=$cnn_epochs; [ $m = mlp ] && epochs=$mlp_epochs
            note "stoke time to $target ($m $prec, --threads $t, at most $epochs epochs)"
            rm -f "$tmp/log"
            if "$stoke" train $common --precision $prec --threads $t --epochs $epochs \
                    --target-accuracy "$target" --log "$tmp/log" --log-every 1000000 >"$tmp/stdout" 2>&1; then
                "$py" "$here/train_report.py" epochs "$tmp/log" $m $prec "$target" >>"$out"
                echo "stoke_to90cfg_${m}_${prec} --threads $t" >>"$out"
            else
                echo "missing_${m}_${prec}_to90 stoke train $m $prec failed: $(tail -1 "$tmp/stdout")" >>"$out"
            fi
        done
    done
else
    echo "missing_0 stoke train: not in $build/stoke (not built yet); stoke's rows are empty" >>"$out"
fi

peaks
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg); $(($(date +%s) - start)) s in all" >>"$out"
grep '^#' "$out"
cp "$out" "$build/train_bench.results" 2>/dev/null || true # the raw "key value" lines
"$py" "$here/train_report.py" table "$out" || cat "$out"
