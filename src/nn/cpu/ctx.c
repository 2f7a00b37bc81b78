/* ctx.c - the CPU backend's per-model context and the calling thread's binding. */
#include "nn/cpu/ctx.h"

#include <omp.h>
#include <stdlib.h>

#include "nn/cpu/conv.h"
#include "nn/cpu/dense.h"

static cpu_ctx g_default = {
    .threads = 0,
    .linear_impl = CPU_LINEAR_AUTO,
    .conv_layout = CPU_CONV_LAYOUT_AUTO,
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Thread-local, so a model run on one thread never sees another's settings. */
static _Thread_local cpu_ctx *t_bound;

cpu_ctx *cpu_ctx_default(void) { return &g_default; }

cpu_ctx *cpu_ctx_current(void) { return t_bound ? t_bound : &g_default; }

cpu_ctx *cpu_ctx_bind(cpu_ctx *c)
{
    cpu_ctx *prev = t_bound;
    t_bound = c;
    return prev;
}

void cpu_ctx_restore(cpu_ctx **prev) { t_bound = *prev; }

int cpu_ctx_threads(const cpu_ctx *c)
{
    int n = atomic_load(&c->threads);
    if (n <= 0) {
        /* Unset: follow OMP_NUM_THREADS (or all CPUs) like oneDNN would. */
        n = omp_get_max_threads();
        if (n < 1)
            n = 1;
    }
    return n;
}

cpu_ctx *cpu_ctx_new(int threads)
{
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        stoke_fail(STOKE_ERR_NOMEM, "cpu backend: out of memory for a context");
        return NULL;
    }
    atomic_init(&c->threads, threads > 0 ? threads : cpu_ctx_threads(&g_default));
    atomic_init(&c->linear_impl, atomic_load(&g_default.linear_impl));
    atomic_init(&c->conv_layout, atomic_load(&g_default.conv_layout));
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void cpu_ctx_free(cpu_ctx *c)
{
    if (!c || c == &g_default)
        return;
    for (size_t i = 0; i < c->cache_len; i++) {
        if (c->cache[i].destroy)
            c->cache[i].destroy(c->cache[i].value);
        free(c->cache[i].key);
    }
    free(c->cache);
    if (c->stream)
        dnnl_stream_destroy(c->stream);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
