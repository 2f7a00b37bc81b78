// launch_device.cu - the device build of the kernel table (launch.h), compiled by
// nvcc into the module libstoke_cuda.so: one __global__ wrapper per kernel body, one
// thread per index, on the backend's stream.
#include <cuda_runtime_api.h>

#include "nn/cuda/launch.h"

#define NK_BLOCK 256

#define NK_DEVICE(name, T)                                                          \
    static __global__ void k_##name(T a, int64_t n)                                 \
    {                                                                               \
        int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;                 \
        if (i < n)                                                                  \
            nk_##name(i, &a);                                                       \
    }                                                                               \
    static int dev_##name(const nk_launch *L, int64_t n, const T *a)                \
    {                                                                               \
        if (n <= 0)                                                                 \
            return 0;                                                               \
        unsigned blocks = (unsigned)((n + NK_BLOCK - 1) / NK_BLOCK);                \
        k_##name<<<blocks, NK_BLOCK, 0, (cudaStream_t)L->stream>>>(*a, n);          \
        return (int)cudaGetLastError();                                             \
    }
NK_ALL_KERNELS(NK_DEVICE)
#undef NK_DEVICE

static nn_cuda_kernels make_table()
{
    nn_cuda_kernels t;
    t.build = "device (" STOKE_CUDA_ARCHS ")";
    t.min_cc = STOKE_CUDA_MIN_CC;
#define NK_ENTRY(name, T) t.name = dev_##name;
    NK_ALL_KERNELS(NK_ENTRY)
#undef NK_ENTRY
    return t;
}

static const nn_cuda_kernels device_table = make_table();

extern "C" __attribute__((visibility("default"))) const nn_cuda_kernels *
stoke_cuda_kernels_v1(size_t table_size)
{
    return table_size == sizeof device_table ? &device_table : 0;
}
