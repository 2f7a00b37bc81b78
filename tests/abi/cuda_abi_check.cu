// cuda_abi_check.cu - checks the CUDA runtime, cuBLAS, cuBLASLt and cuDNN values stoke declares
// by hand (src/hw/gpu_impl.h, src/nn/cuda/libs.h, loaded with dlopen at run time)
// against the toolkit's own headers, and links against the real libraries. Compiled by nvcc: if a value drifts in a
// new toolkit, the build fails here rather than a device misreporting at run time.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdio.h>
#if STOKE_ABI_CUDNN
#include <cudnn.h>
#endif

extern "C" {
#include "hw/gpu_impl.h"
#include "nn/cuda/libs.h"
}

static_assert((int)cudaSuccess == CU_SUCCESS, "cudaSuccess");
static_assert((int)cudaErrorInsufficientDriver == CU_ERROR_INSUFFICIENT_DRIVER,
              "cudaErrorInsufficientDriver");
static_assert((int)cudaErrorStubLibrary == CU_ERROR_STUB_LIBRARY, "cudaErrorStubLibrary");
static_assert((int)cudaErrorNoDevice == CU_ERROR_NO_DEVICE, "cudaErrorNoDevice");
static_assert((int)cudaDevAttrMultiProcessorCount == CU_ATTR_MULTIPROCESSOR_COUNT,
              "MultiProcessorCount");
static_assert((int)cudaDevAttrPciBusId == CU_ATTR_PCI_BUS_ID, "PciBusId");
static_assert((int)cudaDevAttrPciDeviceId == CU_ATTR_PCI_DEVICE_ID, "PciDeviceId");
static_assert((int)cudaDevAttrPciDomainId == CU_ATTR_PCI_DOMAIN_ID, "PciDomainId");
static_assert((int)cudaDevAttrComputeCapabilityMajor == CU_ATTR_COMPUTE_CAPABILITY_MAJOR,
              "ComputeCapabilityMajor");
static_assert((int)cudaDevAttrComputeCapabilityMinor == CU_ATTR_COMPUTE_CAPABILITY_MINOR,
              "ComputeCapabilityMinor");
static_assert((int)cudaErrorMemoryAllocation == CU_ERROR_MEMORY_ALLOCATION,
              "cudaErrorMemoryAllocation");
static_assert((int)cudaErrorNotReady == CU_ERROR_NOT_READY, "cudaErrorNotReady");
static_assert(cudaHostAllocDefault == CU_HOST_ALLOC_DEFAULT, "cudaHostAllocDefault");
static_assert((int)cudaMemcpyHostToDevice == CU_MEMCPY_HOST_TO_DEVICE, "cudaMemcpyHostToDevice");
static_assert(cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING, "cudaStreamNonBlocking");
static_assert(cudaEventDisableTiming == CU_EVENT_DISABLE_TIMING, "cudaEventDisableTiming");
static_assert(cudaEventDefault == CU_EVENT_DEFAULT, "cudaEventDefault");
static_assert((int)cudaStreamCaptureModeGlobal == (int)CU_CAPTURE_MODE_GLOBAL,
              "cudaStreamCaptureModeGlobal");
static_assert((int)cudaMemcpyDeviceToHost == CU_MEMCPY_DEVICE_TO_HOST, "cudaMemcpyDeviceToHost");
static_assert((int)cudaMemcpyDeviceToDevice == CU_MEMCPY_DEVICE_TO_DEVICE,
              "cudaMemcpyDeviceToDevice");
static_assert(sizeof(cudaStream_t) == sizeof(void *), "cudaStream_t is passed as void *");
static_assert(sizeof(cudaEvent_t) == sizeof(void *), "cudaEvent_t is passed as void *");
static_assert(sizeof(enum cudaMemcpyKind) == sizeof(int), "cudaMemcpyKind is passed as int");
static_assert(sizeof(cudaError_t) == sizeof(int), "cudaError_t is passed as int");
static_assert(sizeof(enum cudaDeviceAttr) == sizeof(int), "cudaDeviceAttr is passed as int");

// ---- cuBLASLt (src/nn/cuda/libs.h) ----
static_assert((int)CUBLASLT_MATMUL_DESC_TRANSA == NC_LT_TRANSA, "CUBLASLT_MATMUL_DESC_TRANSA");
static_assert((int)CUBLASLT_MATMUL_DESC_TRANSB == NC_LT_TRANSB, "CUBLASLT_MATMUL_DESC_TRANSB");
static_assert((int)CUBLASLT_MATMUL_DESC_EPILOGUE == NC_LT_EPILOGUE,
              "CUBLASLT_MATMUL_DESC_EPILOGUE");
static_assert((int)CUBLASLT_MATMUL_DESC_BIAS_POINTER == NC_LT_BIAS_POINTER,
              "CUBLASLT_MATMUL_DESC_BIAS_POINTER");
static_assert((int)CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER == NC_LT_AUX_POINTER,
              "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
static_assert((int)CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD == NC_LT_AUX_LD,
              "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD");
static_assert((int)CUBLASLT_EPILOGUE_DEFAULT == NC_LT_EPI_DEFAULT, "CUBLASLT_EPILOGUE_DEFAULT");
static_assert((int)CUBLASLT_EPILOGUE_RELU_AUX == NC_LT_EPI_RELU_AUX, "CUBLASLT_EPILOGUE_RELU_AUX");
static_assert((int)CUBLASLT_EPILOGUE_BIAS == NC_LT_EPI_BIAS, "CUBLASLT_EPILOGUE_BIAS");
static_assert((int)CUBLASLT_EPILOGUE_RELU_AUX_BIAS == NC_LT_EPI_RELU_AUX_BIAS,
              "CUBLASLT_EPILOGUE_RELU_AUX_BIAS");
static_assert((int)CUBLASLT_EPILOGUE_DRELU == NC_LT_EPI_DRELU, "CUBLASLT_EPILOGUE_DRELU");
static_assert((int)CUBLASLT_EPILOGUE_DRELU_BGRAD == NC_LT_EPI_DRELU_BGRAD,
              "CUBLASLT_EPILOGUE_DRELU_BGRAD");
static_assert((int)CUBLASLT_EPILOGUE_BGRADA == NC_LT_EPI_BGRADA, "CUBLASLT_EPILOGUE_BGRADA");
static_assert((int)CUBLASLT_EPILOGUE_BGRADB == NC_LT_EPI_BGRADB, "CUBLASLT_EPILOGUE_BGRADB");
static_assert((int)CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES == NC_LT_PREF_MAX_WORKSPACE_BYTES,
              "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES");
static_assert((int)CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES == NC_LT_PREF_MIN_ALIGN_A &&
                  (int)CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES == NC_LT_PREF_MIN_ALIGN_B &&
                  (int)CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES == NC_LT_PREF_MIN_ALIGN_C &&
                  (int)CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES == NC_LT_PREF_MIN_ALIGN_D,
              "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES");
static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(nn_lt_algo), "cublasLtMatmulAlgo_t size");
static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == sizeof(nn_lt_heuristic),
              "cublasLtMatmulHeuristicResult_t size");
static_assert(offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize) ==
                  offsetof(nn_lt_heuristic, workspace),
              "cublasLtMatmulHeuristicResult_t.workspaceSize");
static_assert(offsetof(cublasLtMatmulHeuristicResult_t, state) == offsetof(nn_lt_heuristic, state),
              "cublasLtMatmulHeuristicResult_t.state");
static_assert(offsetof(cublasLtMatmulHeuristicResult_t, wavesCount) ==
                  offsetof(nn_lt_heuristic, waves),
              "cublasLtMatmulHeuristicResult_t.wavesCount");
static_assert(sizeof(cublasLtHandle_t) == sizeof(void *) &&
                  sizeof(cublasLtMatmulDesc_t) == sizeof(void *) &&
                  sizeof(cublasLtMatrixLayout_t) == sizeof(void *) &&
                  sizeof(cublasLtMatmulPreference_t) == sizeof(void *),
              "cuBLASLt's handles and descriptors are passed as void *");
static_assert(sizeof(cublasLtMatmulDescAttributes_t) == sizeof(int) &&
                  sizeof(cublasLtMatmulPreferenceAttributes_t) == sizeof(int) &&
                  sizeof(cudaDataType) == sizeof(int),
              "cuBLASLt's enums are passed as int");

// ---- cuBLAS (src/nn/cuda/libs.h) ----
static_assert((int)CUBLAS_STATUS_SUCCESS == NC_CUBLAS_SUCCESS, "CUBLAS_STATUS_SUCCESS");
static_assert((int)CUBLAS_OP_N == NC_OP_N && (int)CUBLAS_OP_T == NC_OP_T, "cublasOperation_t");
static_assert((int)CUDA_R_32F == NC_R_32F, "CUDA_R_32F");
static_assert((int)CUDA_R_16F == NC_R_16F, "CUDA_R_16F");
static_assert((int)CUDA_R_16BF == NC_R_16BF, "CUDA_R_16BF");
static_assert((int)CUBLAS_COMPUTE_32F == NC_COMPUTE_32F, "CUBLAS_COMPUTE_32F");
static_assert((int)CUBLAS_COMPUTE_32F_FAST_TF32 == NC_COMPUTE_32F_FAST_TF32,
              "CUBLAS_COMPUTE_32F_FAST_TF32");
static_assert((int)CUBLAS_GEMM_DEFAULT == NC_GEMM_DEFAULT, "CUBLAS_GEMM_DEFAULT");
static_assert((int)CUBLAS_DEFAULT_MATH == NC_DEFAULT_MATH, "CUBLAS_DEFAULT_MATH");
static_assert((int)CUBLAS_TF32_TENSOR_OP_MATH == NC_TF32_TENSOR_OP_MATH,
              "CUBLAS_TF32_TENSOR_OP_MATH");
static_assert(sizeof(cublasHandle_t) == sizeof(void *), "cublasHandle_t is passed as void *");
static_assert(sizeof(cublasStatus_t) == sizeof(int), "cublasStatus_t is passed as int");
static_assert(sizeof(cublasOperation_t) == sizeof(int), "cublasOperation_t is passed as int");
static_assert(sizeof(cudaDataType) == sizeof(int), "cudaDataType is passed as int");
static_assert(sizeof(cublasComputeType_t) == sizeof(int), "cublasComputeType_t is passed as int");
static_assert(sizeof(cublasGemmAlgo_t) == sizeof(int), "cublasGemmAlgo_t is passed as int");
static_assert(sizeof(cublasMath_t) == sizeof(int), "cublasMath_t is passed as int");

#if STOKE_ABI_CUDNN
// ---- cuDNN (src/nn/cuda/libs.h) ----
static_assert(CUDNN_MAJOR == 9, "libs.h declares cuDNN 9's status codes and API");
static_assert((int)CUDNN_STATUS_SUCCESS == NC_CUDNN_SUCCESS, "CUDNN_STATUS_SUCCESS");
static_assert((int)CUDNN_DATA_FLOAT == NC_CUDNN_DATA_FLOAT, "CUDNN_DATA_FLOAT");
static_assert((int)CUDNN_DATA_HALF == NC_CUDNN_DATA_HALF, "CUDNN_DATA_HALF");
static_assert((int)CUDNN_DATA_BFLOAT16 == NC_CUDNN_DATA_BFLOAT16, "CUDNN_DATA_BFLOAT16");
static_assert((int)CUDNN_TENSOR_NCHW == NC_CUDNN_TENSOR_NCHW, "CUDNN_TENSOR_NCHW");
static_assert((int)CUDNN_CROSS_CORRELATION == NC_CUDNN_CROSS_CORRELATION,
              "CUDNN_CROSS_CORRELATION");
static_assert((int)CUDNN_DEFAULT_MATH == NC_CUDNN_DEFAULT_MATH, "CUDNN_DEFAULT_MATH");
static_assert((int)CUDNN_TENSOR_OP_MATH == NC_CUDNN_TENSOR_OP_MATH, "CUDNN_TENSOR_OP_MATH");
static_assert((int)CUDNN_FMA_MATH == NC_CUDNN_FMA_MATH, "CUDNN_FMA_MATH");
static_assert((int)CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ==
                  NC_CUDNN_FWD_IMPLICIT_PRECOMP_GEMM,
              "CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM");
static_assert((int)CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING == NC_CUDNN_POOL_AVG_INCLUDE_PAD,
              "CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING");
static_assert((int)CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING == NC_CUDNN_POOL_AVG_EXCLUDE_PAD,
              "CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING");
static_assert((int)CUDNN_POOLING_MAX_DETERMINISTIC == NC_CUDNN_POOL_MAX_DETERMINISTIC,
              "CUDNN_POOLING_MAX_DETERMINISTIC");
static_assert((int)CUDNN_NOT_PROPAGATE_NAN == NC_CUDNN_NOT_PROPAGATE_NAN, "NOT_PROPAGATE_NAN");
static_assert((int)CUDNN_PROPAGATE_NAN == NC_CUDNN_PROPAGATE_NAN, "CUDNN_PROPAGATE_NAN");
static_assert((int)CUDNN_ACTIVATION_RELU == NC_CUDNN_ACTIVATION_RELU, "CUDNN_ACTIVATION_RELU");
static_assert((int)CUDNN_ACTIVATION_IDENTITY == NC_CUDNN_ACTIVATION_IDENTITY,
              "CUDNN_ACTIVATION_IDENTITY");
static_assert(sizeof(cudnnPoolingMode_t) == sizeof(int), "cudnnPoolingMode_t is passed as int");
static_assert(sizeof(cudnnNanPropagation_t) == sizeof(int), "cudnnNanPropagation_t as int");
static_assert(sizeof(cudnnActivationMode_t) == sizeof(int), "cudnnActivationMode_t as int");
static_assert(sizeof(cudnnPoolingDescriptor_t) == sizeof(void *), "pooling descriptor is void *");
static_assert(sizeof(cudnnActivationDescriptor_t) == sizeof(void *), "activation desc is void *");
static_assert(sizeof(cudnnStatus_t) == sizeof(int), "cudnnStatus_t is passed as int");
static_assert(sizeof(cudnnDataType_t) == sizeof(int), "cudnnDataType_t is passed as int");
static_assert(sizeof(cudnnTensorFormat_t) == sizeof(int), "cudnnTensorFormat_t is passed as int");
static_assert(sizeof(cudnnConvolutionMode_t) == sizeof(int), "cudnnConvolutionMode_t as int");
static_assert(sizeof(cudnnMathType_t) == sizeof(int), "cudnnMathType_t is passed as int");
static_assert(sizeof(cudnnConvolutionFwdAlgo_t) == sizeof(int), "FwdAlgo_t is passed as int");
static_assert(sizeof(cudnnConvolutionBwdDataAlgo_t) == sizeof(int), "BwdDataAlgo_t as int");
static_assert(sizeof(cudnnConvolutionBwdFilterAlgo_t) == sizeof(int), "BwdFilterAlgo_t as int");
static_assert(sizeof(cudnnHandle_t) == sizeof(void *), "cudnnHandle_t is passed as void *");
static_assert(sizeof(cudnnTensorDescriptor_t) == sizeof(void *), "descriptors are void *");

// nn_cudnn_perf stands for all three AlgoPerf structs: the same size and offsets.
#define CHECK_PERF(T)                                                                           \
    static_assert(sizeof(T) == sizeof(nn_cudnn_perf), #T " size");                              \
    static_assert(offsetof(T, algo) == offsetof(nn_cudnn_perf, algo), #T ".algo");              \
    static_assert(offsetof(T, status) == offsetof(nn_cudnn_perf, status), #T ".status");        \
    static_assert(offsetof(T, time) == offsetof(nn_cudnn_perf, time), #T ".time");              \
    static_assert(offsetof(T, memory) == offsetof(nn_cudnn_perf, memory), #T ".memory");        \
    static_assert(offsetof(T, determinism) == offsetof(nn_cudnn_perf, determinism),             \
                  #T ".determinism");                                                           \
    static_assert(offsetof(T, mathType) == offsetof(nn_cudnn_perf, math_type), #T ".mathType"); \
    static_assert(offsetof(T, reserved) == offsetof(nn_cudnn_perf, reserved), #T ".reserved")
CHECK_PERF(cudnnConvolutionFwdAlgoPerf_t);
CHECK_PERF(cudnnConvolutionBwdDataAlgoPerf_t);
CHECK_PERF(cudnnConvolutionBwdFilterAlgoPerf_t);
#endif

#define CHECK_PROTOTYPE(fn, type) (void)static_cast<type>(&fn)

// The CUDA backend's tables, entry by entry in libs.h's order: each must convert to
// the library's prototype exactly (enums and handles are passed as int and void *,
// whose sizes are checked above).
static void check_cublaslt()
{
    CHECK_PROTOTYPE(cublasLtCreate, cublasStatus_t(*)(cublasLtHandle_t *));
    CHECK_PROTOTYPE(cublasLtDestroy, cublasStatus_t(*)(cublasLtHandle_t));
    CHECK_PROTOTYPE(cublasLtMatmulDescCreate,
                    cublasStatus_t(*)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t));
    CHECK_PROTOTYPE(cublasLtMatmulDescSetAttribute,
                    cublasStatus_t(*)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
                                      const void *, size_t));
    CHECK_PROTOTYPE(cublasLtMatmulDescDestroy, cublasStatus_t(*)(cublasLtMatmulDesc_t));
    CHECK_PROTOTYPE(
        cublasLtMatrixLayoutCreate,
        cublasStatus_t(*)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t));
    CHECK_PROTOTYPE(cublasLtMatrixLayoutDestroy, cublasStatus_t(*)(cublasLtMatrixLayout_t));
    CHECK_PROTOTYPE(cublasLtMatmulPreferenceCreate,
                    cublasStatus_t(*)(cublasLtMatmulPreference_t *));
    CHECK_PROTOTYPE(cublasLtMatmulPreferenceSetAttribute,
                    cublasStatus_t(*)(cublasLtMatmulPreference_t,
                                      cublasLtMatmulPreferenceAttributes_t, const void *, size_t));
    CHECK_PROTOTYPE(cublasLtMatmulPreferenceDestroy, cublasStatus_t(*)(cublasLtMatmulPreference_t));
    CHECK_PROTOTYPE(cublasLtMatmulAlgoGetHeuristic,
                    cublasStatus_t(*)(
                        cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                        cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                        cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *));
    CHECK_PROTOTYPE(cublasLtMatmul,
                    cublasStatus_t(*)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *,
                                      const void *, cublasLtMatrixLayout_t, const void *,
                                      cublasLtMatrixLayout_t, const void *, const void *,
                                      cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                                      const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t));
}

static void check_cublas()
{
    CHECK_PROTOTYPE(cublasCreate_v2, cublasStatus_t(*)(cublasHandle_t *));
    CHECK_PROTOTYPE(cublasDestroy_v2, cublasStatus_t(*)(cublasHandle_t));
    CHECK_PROTOTYPE(cublasSetStream_v2, cublasStatus_t(*)(cublasHandle_t, cudaStream_t));
    CHECK_PROTOTYPE(cublasSetMathMode, cublasStatus_t(*)(cublasHandle_t, cublasMath_t));
    CHECK_PROTOTYPE(cublasSetWorkspace_v2, cublasStatus_t(*)(cublasHandle_t, void *, size_t));
    CHECK_PROTOTYPE(cublasGemmEx,
                    cublasStatus_t(*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void *, const void *, cudaDataType, int,
                                      const void *, cudaDataType, int, const void *, void *,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t));
    CHECK_PROTOTYPE(cublasGemmStridedBatchedEx,
                    cublasStatus_t(*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void *, const void *, cudaDataType, int,
                                      long long, const void *, cudaDataType, int, long long,
                                      const void *, void *, cudaDataType, int, long long, int,
                                      cublasComputeType_t, cublasGemmAlgo_t));
    CHECK_PROTOTYPE(cublasGetStatusString, const char *(*)(cublasStatus_t));
}

#if STOKE_ABI_CUDNN
static void check_cudnn()
{
    typedef cudnnHandle_t H;
    typedef cudnnTensorDescriptor_t T;
    typedef cudnnFilterDescriptor_t F;
    typedef cudnnConvolutionDescriptor_t C;
    CHECK_PROTOTYPE(cudnnGetVersion, size_t(*)(void));
    CHECK_PROTOTYPE(cudnnGetErrorString, const char *(*)(cudnnStatus_t));
    CHECK_PROTOTYPE(cudnnCreate, cudnnStatus_t(*)(H *));
    CHECK_PROTOTYPE(cudnnDestroy, cudnnStatus_t(*)(H));
    CHECK_PROTOTYPE(cudnnSetStream, cudnnStatus_t(*)(H, cudaStream_t));
    CHECK_PROTOTYPE(cudnnCreateTensorDescriptor, cudnnStatus_t(*)(T *));
    CHECK_PROTOTYPE(cudnnSetTensor4dDescriptor,
                    cudnnStatus_t(*)(T, cudnnTensorFormat_t, cudnnDataType_t, int, int, int, int));
    CHECK_PROTOTYPE(cudnnDestroyTensorDescriptor, cudnnStatus_t(*)(T));
    CHECK_PROTOTYPE(cudnnCreateFilterDescriptor, cudnnStatus_t(*)(F *));
    CHECK_PROTOTYPE(cudnnSetFilter4dDescriptor,
                    cudnnStatus_t(*)(F, cudnnDataType_t, cudnnTensorFormat_t, int, int, int, int));
    CHECK_PROTOTYPE(cudnnDestroyFilterDescriptor, cudnnStatus_t(*)(F));
    CHECK_PROTOTYPE(cudnnCreateConvolutionDescriptor, cudnnStatus_t(*)(C *));
    CHECK_PROTOTYPE(
        cudnnSetConvolution2dDescriptor,
        cudnnStatus_t(*)(C, int, int, int, int, int, int, cudnnConvolutionMode_t, cudnnDataType_t));
    CHECK_PROTOTYPE(cudnnSetConvolutionMathType, cudnnStatus_t(*)(C, cudnnMathType_t));
    CHECK_PROTOTYPE(cudnnDestroyConvolutionDescriptor, cudnnStatus_t(*)(C));
    CHECK_PROTOTYPE(cudnnGetConvolutionForwardAlgorithm_v7,
                    cudnnStatus_t(*)(H, const T, const F, const C, const T, const int, int *,
                                     cudnnConvolutionFwdAlgoPerf_t *));
    CHECK_PROTOTYPE(cudnnGetConvolutionBackwardDataAlgorithm_v7,
                    cudnnStatus_t(*)(H, const F, const T, const C, const T, const int, int *,
                                     cudnnConvolutionBwdDataAlgoPerf_t *));
    CHECK_PROTOTYPE(cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                    cudnnStatus_t(*)(H, const T, const T, const C, const F, const int, int *,
                                     cudnnConvolutionBwdFilterAlgoPerf_t *));
    CHECK_PROTOTYPE(cudnnGetConvolutionForwardWorkspaceSize,
                    cudnnStatus_t(*)(H, const T, const F, const C, const T,
                                     cudnnConvolutionFwdAlgo_t, size_t *));
    CHECK_PROTOTYPE(cudnnGetConvolutionBackwardDataWorkspaceSize,
                    cudnnStatus_t(*)(H, const F, const T, const C, const T,
                                     cudnnConvolutionBwdDataAlgo_t, size_t *));
    CHECK_PROTOTYPE(cudnnGetConvolutionBackwardFilterWorkspaceSize,
                    cudnnStatus_t(*)(H, const T, const T, const C, const F,
                                     cudnnConvolutionBwdFilterAlgo_t, size_t *));
    CHECK_PROTOTYPE(cudnnConvolutionForward,
                    cudnnStatus_t(*)(H, const void *, const T, const void *, const F, const void *,
                                     const C, cudnnConvolutionFwdAlgo_t, void *, size_t,
                                     const void *, const T, void *));
    CHECK_PROTOTYPE(cudnnConvolutionBackwardData,
                    cudnnStatus_t(*)(H, const void *, const F, const void *, const T, const void *,
                                     const C, cudnnConvolutionBwdDataAlgo_t, void *, size_t,
                                     const void *, const T, void *));
    CHECK_PROTOTYPE(cudnnConvolutionBackwardFilter,
                    cudnnStatus_t(*)(H, const void *, const T, const void *, const T, const void *,
                                     const C, cudnnConvolutionBwdFilterAlgo_t, void *, size_t,
                                     const void *, const F, void *));
    typedef cudnnActivationDescriptor_t A;
    typedef cudnnPoolingDescriptor_t P;
    CHECK_PROTOTYPE(cudnnConvolutionBiasActivationForward,
                    cudnnStatus_t(*)(H, const void *, const T, const void *, const F, const void *,
                                     const C, cudnnConvolutionFwdAlgo_t, void *, size_t,
                                     const void *, const T, const void *, const T, const void *,
                                     const A, const T, void *));
    CHECK_PROTOTYPE(cudnnCreateActivationDescriptor, cudnnStatus_t(*)(A *));
    CHECK_PROTOTYPE(cudnnSetActivationDescriptor,
                    cudnnStatus_t(*)(A, cudnnActivationMode_t, cudnnNanPropagation_t, double));
    CHECK_PROTOTYPE(cudnnDestroyActivationDescriptor, cudnnStatus_t(*)(A));
    CHECK_PROTOTYPE(cudnnCreatePoolingDescriptor, cudnnStatus_t(*)(P *));
    CHECK_PROTOTYPE(cudnnSetPooling2dDescriptor,
                    cudnnStatus_t(*)(P, cudnnPoolingMode_t, cudnnNanPropagation_t, int, int, int,
                                     int, int, int));
    CHECK_PROTOTYPE(cudnnDestroyPoolingDescriptor, cudnnStatus_t(*)(P));
    CHECK_PROTOTYPE(cudnnPoolingForward,
                    cudnnStatus_t(*)(H, const P, const void *, const T, const void *, const void *,
                                     const T, void *));
    CHECK_PROTOTYPE(cudnnPoolingBackward,
                    cudnnStatus_t(*)(H, const P, const void *, const T, const void *, const T,
                                     const void *, const T, const void *, const void *, const T,
                                     void *));
}
#endif

int main()
{
    // The loader's entries of the driver table: each must convert to the toolkit's
    // prototype exactly (enums and handles are passed as int and void *, whose sizes
    // are checked above); a changed prototype fails to compile here.
    CHECK_PROTOTYPE(cudaSetDevice, cudaError_t(*)(int));
    CHECK_PROTOTYPE(cudaHostAlloc, cudaError_t(*)(void **, size_t, unsigned int));
    CHECK_PROTOTYPE(cudaFreeHost, cudaError_t(*)(void *));
    CHECK_PROTOTYPE(cudaMalloc, cudaError_t(*)(void **, size_t));
    CHECK_PROTOTYPE(cudaFree, cudaError_t(*)(void *));
    CHECK_PROTOTYPE(cudaMemcpyAsync,
                    cudaError_t(*)(void *, const void *, size_t, cudaMemcpyKind, cudaStream_t));
    CHECK_PROTOTYPE(cudaStreamCreateWithFlags, cudaError_t(*)(cudaStream_t *, unsigned int));
    CHECK_PROTOTYPE(cudaStreamDestroy, cudaError_t(*)(cudaStream_t));
    CHECK_PROTOTYPE(cudaEventCreateWithFlags, cudaError_t(*)(cudaEvent_t *, unsigned int));
    CHECK_PROTOTYPE(cudaEventRecord, cudaError_t(*)(cudaEvent_t, cudaStream_t));
    CHECK_PROTOTYPE(cudaEventSynchronize, cudaError_t(*)(cudaEvent_t));
    CHECK_PROTOTYPE(cudaEventQuery, cudaError_t(*)(cudaEvent_t));
    CHECK_PROTOTYPE(cudaEventDestroy, cudaError_t(*)(cudaEvent_t));
    CHECK_PROTOTYPE(cudaStreamWaitEvent, cudaError_t(*)(cudaStream_t, cudaEvent_t, unsigned int));
    // The CUDA backend's additions to the runtime table.
    CHECK_PROTOTYPE(cudaMemcpy, cudaError_t(*)(void *, const void *, size_t, cudaMemcpyKind));
    CHECK_PROTOTYPE(cudaMemsetAsync, cudaError_t(*)(void *, int, size_t, cudaStream_t));
    CHECK_PROTOTYPE(cudaStreamSynchronize, cudaError_t(*)(cudaStream_t));
    CHECK_PROTOTYPE(cudaMemGetInfo, cudaError_t(*)(size_t *, size_t *));
    CHECK_PROTOTYPE(cudaGetLastError, cudaError_t(*)(void));
    CHECK_PROTOTYPE(cudaEventElapsedTime, cudaError_t(*)(float *, cudaEvent_t, cudaEvent_t));
    CHECK_PROTOTYPE(cudaLaunchHostFunc, cudaError_t(*)(cudaStream_t, cudaHostFn_t, void *));
    CHECK_PROTOTYPE(cudaStreamBeginCapture, cudaError_t(*)(cudaStream_t, cudaStreamCaptureMode));
    CHECK_PROTOTYPE(cudaStreamEndCapture, cudaError_t(*)(cudaStream_t, cudaGraph_t *));
    CHECK_PROTOTYPE(cudaGraphInstantiate,
                    cudaError_t(*)(cudaGraphExec_t *, cudaGraph_t, unsigned long long));
    CHECK_PROTOTYPE(cudaGraphLaunch, cudaError_t(*)(cudaGraphExec_t, cudaStream_t));
    CHECK_PROTOTYPE(cudaGraphExecDestroy, cudaError_t(*)(cudaGraphExec_t));
    CHECK_PROTOTYPE(cudaGraphDestroy, cudaError_t(*)(cudaGraph_t));
    check_cublas();
    check_cublaslt();
#if STOKE_ABI_CUDNN
    check_cudnn();
    printf("cuDNN %zu linked\n", cudnnGetVersion());
#else
    printf("cuDNN headers or library not found: its checks were not compiled\n");
#endif
    // Linked against the real runtime: on a machine without a GPU this reports the
    // runtime's own reason, which is what stoke prints too.
    int n = -1, version = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    cudaRuntimeGetVersion(&version);
    printf("CUDA runtime %d linked; cudaGetDeviceCount: %s (%d devices)\n", version,
           rc == cudaSuccess ? "ok" : cudaGetErrorString(rc), rc == cudaSuccess ? n : 0);
    return 0;
}
