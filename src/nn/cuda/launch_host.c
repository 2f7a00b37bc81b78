/* launch_host.c - the host build of the kernel table (launch.h): each launcher waits
 * for the stream's queued work, then runs the body for every index. The indices are
 * independent (kern.h's rules), so they are split over OpenMP threads, which also
 * keeps the suite's end-to-end runs on the test doubles short. */
#include "nn/cuda/launch.h"

#define NK_HOST(name, T)                                                                        \
    static int host_##name(const nk_launch *L, int64_t n, const T *a)                           \
    {                                                                                           \
        if (L->sync && L->stream) {                                                             \
            int rc = L->sync(L->sync_ctx, L->stream);                                           \
            if (rc != 0)                                                                        \
                return rc;                                                                      \
        }                                                                                       \
        _Pragma("omp parallel for schedule(static) if (n >= 16384)") for (int64_t i = 0; i < n; \
                                                                          i++) nk_##name(i, a); \
        return 0;                                                                               \
    }
NK_ALL_KERNELS(NK_HOST)
#undef NK_HOST

static const nn_cuda_kernels host_table = {.build = "host",
                                           .min_cc = 0,
#define NK_ENTRY(name, T) .name = host_##name,
                                           NK_ALL_KERNELS(NK_ENTRY)
#undef NK_ENTRY
};

const nn_cuda_kernels *nn_cuda_host_kernels(void) { return &host_table; }
