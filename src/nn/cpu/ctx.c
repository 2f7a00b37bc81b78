/* ctx.c - the CPU backend's per-model context and the calling thread's binding. */
#include "nn/cpu/ctx.h"

#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cpu/conv.h"
#include "nn/cpu/dense.h"

/* Read once at load, before any context's count is applied to a thread's OpenMP
 * setting (cpu_threads_apply changes omp_get_max_threads for its thread). */
static int g_machine_threads = 1;

__attribute__((constructor)) static void machine_threads_init(void)
{
    int n = omp_get_max_threads();
    g_machine_threads = n < 1 ? 1 : n;
}

int cpu_machine_threads(void) { return g_machine_threads; }

/* Thread-local, so a model run on one thread never sees another's settings. */
static _Thread_local cpu_ctx *t_bound;

/* The thread's own context, in the thread's storage (no allocation to fail), released
 * by the key's destructor when the thread ends. */
static _Thread_local cpu_ctx t_own;
static _Thread_local bool t_own_ready;
static pthread_key_t own_key;
static pthread_once_t own_key_once = PTHREAD_ONCE_INIT;

static void ctx_release(cpu_ctx *c)
{
    for (size_t i = 0; i < c->cache_len; i++) {
        if (c->cache[i].destroy)
            c->cache[i].destroy(c->cache[i].value);
        free(c->cache[i].key);
    }
    free(c->cache);
    if (c->stream)
        dnnl_stream_destroy(c->stream);
    if (c->engine)
        dnnl_engine_destroy(c->engine);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->dev);
}

/* Runs on the ending thread: a later use there (another key's destructor) starts a
 * fresh context rather than one released. */
static void own_release(void *c)
{
    ctx_release(c);
    memset(c, 0, sizeof(cpu_ctx));
    t_own_ready = false;
}

static void own_key_init(void) { pthread_key_create(&own_key, own_release); }

static cpu_ctx *thread_own(void)
{
    if (!t_own_ready) {
        /* threads 0: follow the thread's OpenMP setting, as a kernel called on its own
         * always has */
        atomic_init(&t_own.threads, 0);
        atomic_init(&t_own.linear_impl, CPU_LINEAR_AUTO);
        atomic_init(&t_own.conv_layout, CPU_CONV_LAYOUT_AUTO);
        pthread_mutex_init(&t_own.lock, NULL);
        pthread_mutex_init(&t_own.dev, NULL);
        pthread_once(&own_key_once, own_key_init);
        pthread_setspecific(own_key, &t_own);
        t_own_ready = true;
    }
    return &t_own;
}

cpu_ctx *cpu_ctx_current(void) { return t_bound ? t_bound : thread_own(); }

cpu_ctx *cpu_ctx_bind(cpu_ctx *c)
{
    cpu_ctx *prev = t_bound;
    if (c)
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
    atomic_init(&c->threads, threads > 0 ? threads : cpu_machine_threads());
    atomic_init(&c->linear_impl, CPU_LINEAR_AUTO);
    atomic_init(&c->conv_layout, CPU_CONV_LAYOUT_AUTO);
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->dev, NULL);
    return c;
}

void cpu_ctx_free(cpu_ctx *c)
{
    if (!c || c == &t_own)
        return;
    ctx_release(c);
    free(c);
}
