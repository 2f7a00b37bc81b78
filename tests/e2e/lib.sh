# lib.sh - the setup the train e2e scripts share; source it once $work is set: a fresh
# work directory, $out, the fail/ok/show helpers, and e2e_end for the verdict (the
# script's exit status).
rm -rf "$work"
mkdir -p "$work"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
show() { sed 's/^/  | /' "$@"; }
out=$work/out.txt
# the tuning cache is the test's own, never the user's (tune.c)
export STOKE_CACHE_DIR="$work/cache"
# use_gpu_doubles FAKEDIR SCENARIODIR: NVML, the CUDA runtime, cuBLAS, cuBLASLt and cuDNN are
# stoke's test doubles (tests/fake) on the cuda_train scenario's GPU, and the kernels
# run in their host build (the bodies nvcc compiles into libstoke_cuda.so).
use_gpu_doubles() {
    export STOKE_NVML_LIBRARY="$1/fake_nvml/libnvidia-ml.so.1"
    export STOKE_CUDART_LIBRARY="$1/fake_cudart/libcudart.so.13"
    export STOKE_CUBLAS_LIBRARY="$1/fake_cublas/libcublas.so.13"
    export STOKE_CUBLASLT_LIBRARY="$1/fake_cublaslt/libcublasLt.so.13"
    export STOKE_CUDNN_LIBRARY="$1/fake_cudnn/libcudnn.so.9"
    export STOKE_FAKE_GPU_SCENARIO="$2/cuda_train.gpu"
    export STOKE_CUDA_KERNELS=host
}
# need_fashion_mnist: $data is Debian's Fashion-MNIST, or the test is skipped (77).
need_fashion_mnist() {
    data=/usr/share/datasets/fashion-mnist
    if [ ! -d "$data" ]; then
        echo "skip: $data is missing (apt-get install dataset-fashion-mnist)"
        exit 77
    fi
}
# clear_config_env: the settings a user may have in the environment (docs/config.md)
# do not leak from the machine running the test into what it checks.
clear_config_env() {
    unset BATCH_SIZE VAL_BATCH_SIZE NUM_WORKERS PREFETCH_FACTOR AMP PRECISION EPOCHS LR SEED \
        ACCUMULATE EFFECTIVE_BATCH STOKE_DEVICE STOKE_RECOMPUTE STOKE_TUNE
}
e2e_end() {
    echo "$fails failed"
    [ "$fails" -eq 0 ]
}
