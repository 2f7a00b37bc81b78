/* memory.c - the CPU backend's memory entries: allocation through the allocator seam
 * (nn/cpu/alloc_seam.h), zeroing over the compute threads, and the copies. */
#include "nn/cpu/ops.h"

#include <stdlib.h>
#include <string.h>

#include "nn/cpu/alloc_seam.h"
#include "nn/cpu/dense.h"

static void *default_alloc(size_t bytes)
{
    void *p = NULL;
    size_t size = bytes ? align_up(bytes) : CPU_OP_ALIGN;
    return posix_memalign(&p, CPU_OP_ALIGN, size) == 0 ? p : NULL;
}

static const cpu_alloc_ops default_ops = {default_alloc, free};

/* The process's allocator table: a seam for tests (alloc_seam.h), which only they
 * replace; the contexts themselves hold no allocator state. */
static const cpu_alloc_ops *g_alloc = &default_ops;

const cpu_alloc_ops *cpu_alloc_default_ops(void) { return &default_ops; }

const cpu_alloc_ops *cpu_alloc_set_ops(const cpu_alloc_ops *ops)
{
    const cpu_alloc_ops *prev = g_alloc;
    g_alloc = ops ? ops : &default_ops;
    return prev;
}

void *cpu_be_alloc(void *ctx, size_t bytes)
{
    CPU_CTX_SCOPE(ctx);
    void *p = g_alloc->alloc(bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void cpu_be_free(void *ctx, void *p)
{
    CPU_CTX_SCOPE(ctx);
    g_alloc->free(p);
}

/* Zeroing the activation gradients before each backward is tens of MB for the CNN; one
 * thread's memset leaves the other core spinning in OpenMP's barrier, so large spans are
 * split over the threads in 64 KB-aligned pieces (the result is the same zeros). */
#define ZERO_PAR_MIN ((size_t)1 << 20)
#define ZERO_BLK     ((size_t)1 << 16)

void cpu_be_zero(void *ctx, void *p, size_t bytes)
{
    CPU_CTX_SCOPE(ctx);
    if (bytes < ZERO_PAR_MIN) {
        memset(p, 0, bytes);
        return;
    }
    cpu_threads_apply();
    char *c = p;
    long nblk = (long)((bytes + ZERO_BLK - 1) / ZERO_BLK);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nblk; k++) {
        size_t o = (size_t)k * ZERO_BLK;
        memset(c + o, 0, bytes - o < ZERO_BLK ? bytes - o : ZERO_BLK);
    }
}

void cpu_be_read(void *ctx, void *host, const void *dev, size_t bytes)
{
    CPU_CTX_SCOPE(ctx);
    memcpy(host, dev, bytes);
}

void cpu_be_write(void *ctx, void *dev, const void *host, size_t bytes)
{
    CPU_CTX_SCOPE(ctx);
    memcpy(dev, host, bytes);
}

void cpu_be_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    CPU_CTX_SCOPE(ctx);
    memcpy(dst, src, bytes);
}
