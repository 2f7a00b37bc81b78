/* launch_host.c - the host build of the kernel table (launch.h): each launcher queues
 * the body's loop over every index on the stream as a host function, with a copy of
 * the arguments (the caller's struct is gone by the time it runs), so kernels run in
 * the stream's order against copies, fills and library calls as on a device, and a
 * read that does not wait for them sees stale values, as on a device. The indices are
 * independent (kern.h's rules), so they are split over OpenMP threads, which also
 * keeps the suite's end-to-end runs on the test doubles short. */
#include <stdlib.h>

#include "nn/cuda/launch.h"

#define NK_HOST(name, T)                                                                        \
    typedef struct call_##name {                                                                \
        int64_t n;                                                                              \
        int kept; /* a graph's: freed with the graph, not after a run */                        \
        T a;                                                                                    \
    } call_##name;                                                                              \
    static void loop_##name(int64_t n, const T *a)                                              \
    {                                                                                           \
        _Pragma("omp parallel for schedule(static) if (n >= 16384)") for (int64_t i = 0; i < n; \
                                                                          i++) nk_##name(i, a); \
    }                                                                                           \
    static void run_##name(void *user)                                                          \
    {                                                                                           \
        call_##name *c = user;                                                                  \
        loop_##name(c->n, &c->a);                                                               \
        if (!c->kept)                                                                           \
            free(c);                                                                            \
    }                                                                                           \
    static int host_##name(const nk_launch *L, int64_t n, const T *a)                           \
    {                                                                                           \
        if (n <= 0)                                                                             \
            return 0;                                                                           \
        if (!L->host_func || !L->stream) {                                                      \
            loop_##name(n, a);                                                                  \
            return 0;                                                                           \
        }                                                                                       \
        call_##name *c = malloc(sizeof *c);                                                     \
        if (!c)                                                                                 \
            return 2; /* cudaErrorMemoryAllocation */                                           \
        c->n = n;                                                                               \
        c->a = *a;                                                                              \
        c->kept = L->capturing;                                                                 \
        if (c->kept && L->keep(L->host_ctx, c) != 0) {                                          \
            free(c);                                                                            \
            return 2;                                                                           \
        }                                                                                       \
        int rc = L->host_func(L->host_ctx, L->stream, run_##name, c);                           \
        if (rc != 0 && !c->kept)                                                                \
            free(c);                                                                            \
        return rc;                                                                              \
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
