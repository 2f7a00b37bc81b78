/* cudnn.c - cuDNN's convolution and pooling API, loaded at run time with dlopen (as
 * src/hw/cudart.c loads the CUDA runtime), so a binary built without cuDNN still
 * convolves on a GPU machine that has it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cuda/libs.h"

/* cuDNN 9 only: its status codes and the _v7 heuristics are what libs.h declares. The
 * toolkit's directory comes last, as it is often not in the loader's path. */
static const char *const names[] = {"libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so.9",
                                    "/usr/lib/x86_64-linux-gnu/libcudnn.so.9", NULL};

#define SYM(name, field) STOKE_DL_SYM(nn_cudnn, name, field, 0)
static const nn_dl_sym syms[] = {
    SYM("cudnnGetVersion", get_version),
    SYM("cudnnGetErrorString", error_string),
    SYM("cudnnCreate", create),
    SYM("cudnnDestroy", destroy),
    SYM("cudnnSetStream", set_stream),
    SYM("cudnnCreateTensorDescriptor", create_tensor),
    SYM("cudnnSetTensor4dDescriptor", set_tensor_4d),
    SYM("cudnnDestroyTensorDescriptor", destroy_tensor),
    SYM("cudnnCreateFilterDescriptor", create_filter),
    SYM("cudnnSetFilter4dDescriptor", set_filter_4d),
    SYM("cudnnDestroyFilterDescriptor", destroy_filter),
    SYM("cudnnCreateConvolutionDescriptor", create_conv),
    SYM("cudnnSetConvolution2dDescriptor", set_conv_2d),
    SYM("cudnnSetConvolutionMathType", set_conv_math),
    SYM("cudnnDestroyConvolutionDescriptor", destroy_conv),
    SYM("cudnnGetConvolutionForwardAlgorithm_v7", fwd_algos),
    SYM("cudnnGetConvolutionBackwardDataAlgorithm_v7", bwd_data_algos),
    SYM("cudnnGetConvolutionBackwardFilterAlgorithm_v7", bwd_filter_algos),
    SYM("cudnnGetConvolutionForwardWorkspaceSize", fwd_ws),
    SYM("cudnnGetConvolutionBackwardDataWorkspaceSize", bwd_data_ws),
    SYM("cudnnGetConvolutionBackwardFilterWorkspaceSize", bwd_filter_ws),
    SYM("cudnnConvolutionForward", fwd),
    SYM("cudnnConvolutionBackwardData", bwd_data),
    SYM("cudnnConvolutionBackwardFilter", bwd_filter),
    SYM("cudnnConvolutionBiasActivationForward", conv_bias_act),
    SYM("cudnnCreateActivationDescriptor", create_act),
    SYM("cudnnSetActivationDescriptor", set_act),
    SYM("cudnnDestroyActivationDescriptor", destroy_act),
    SYM("cudnnCreatePoolingDescriptor", create_pool),
    SYM("cudnnSetPooling2dDescriptor", set_pool_2d),
    SYM("cudnnDestroyPoolingDescriptor", destroy_pool),
    SYM("cudnnPoolingForward", pool_fwd),
    SYM("cudnnPoolingBackward", pool_bwd),
};
#undef SYM

stoke_status nn_cudnn_open(nn_cudnn **out)
{
    *out = NULL;
    nn_cudnn *d = calloc(1, sizeof *d);
    if (!d)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory loading cuDNN");
    const nn_dl_lib l = {"cuDNN", "STOKE_CUDNN_LIBRARY", names, syms, sizeof syms / sizeof syms[0]};
    const char *tried;
    stoke_status st = nn_dl_open(&l, d, &tried);
    if (st != STOKE_OK) {
        nn_cudnn_close(d);
        return st;
    }
    d->version = d->get_version();
    *out = d;
    return STOKE_OK;
}

/* Stays loaded, as cuBLAS (cublas.c). */
void nn_cudnn_close(nn_cudnn *d) { free(d); }

/* cudnnStatus_t's names in cuDNN 9 (cudnn_graph_v9.h): the category codes only. */
static const char *cudnn_status_name(int status)
{
    switch (status) {
    case 0: return "CUDNN_STATUS_SUCCESS";
    case 1001: return "CUDNN_STATUS_NOT_INITIALIZED";
    case 2000: return "CUDNN_STATUS_BAD_PARAM";
    case 2002: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case 2008: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case 3000: return "CUDNN_STATUS_NOT_SUPPORTED";
    case 4000: return "CUDNN_STATUS_INTERNAL_ERROR";
    case 4004: return "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED";
    case 5000: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return NULL;
    }
}

const char *nn_cudnn_error(const nn_cudnn *d, int status)
{
    const char *s = d && d->error_string ? d->error_string(status) : NULL;
    /* The libraries' answer to a code they do not know ("<unknown>",
     * "CUDNN_UNKNOWN_STATUS_FOUND") says less than the number. */
    if (s && (s[0] == '<' || strstr(s, "UNKNOWN")))
        s = NULL;
    if (!s)
        s = cudnn_status_name(status);
    if (s)
        return s;
    /* Per thread, so two threads' messages do not overwrite each other. */
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "cuDNN status %d", status);
    return buf;
}
