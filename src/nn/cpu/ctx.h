/* ctx.h - the CPU backend's context: what one model's kernels run with (compute
 * threads, the linear and convolution implementation choices, the oneDNN stream and
 * the primitive cache). Internal to src/nn.
 *
 * The backend table's entries bind their context to the calling thread for the
 * duration of the call (CPU_CTX_SCOPE), and the kernels find it with cpu_ctx_current:
 * so two models with different settings run interleaved, or on different threads,
 * each with its own. A kernel called outside the table (tests, benchmarks) runs with
 * the process's default context, which cpu_set_threads, cpu_linear_set_impl and
 * cpu_conv2d_set_layout set, and which new contexts start from. The binding is the
 * calling thread's: OpenMP's other threads in a parallel region see the default, so a
 * kernel reads what it needs from the context before the region. */
#ifndef STOKE_NN_CPU_CTX_H
#define STOKE_NN_CPU_CTX_H

#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "stoke/core.h"

typedef struct cpu_cache_entry {
    void *key;
    size_t key_size;
    void *value;
    void (*destroy)(void *value);
} cpu_cache_entry;

typedef struct cpu_ctx {
    atomic_int threads;     /* >= 1; 0 only in the default: follow OpenMP's setting */
    atomic_int linear_impl; /* cpu_linear_impl */
    atomic_int conv_layout; /* cpu_conv_layout */
    pthread_mutex_t lock;   /* the stream's creation and the cache */
    dnnl_stream_t stream;   /* created on first use, after the engine */
    cpu_cache_entry *cache; /* primitives by shape key, scanned linearly */
    size_t cache_len, cache_cap;
} cpu_ctx;

/* A new context with `threads` compute threads (<= 0: the default context's count
 * now) and the default context's implementation choices. NULL when out of memory
 * (recorded). */
cpu_ctx *cpu_ctx_new(int threads);

/* Releases the context's cached primitives and stream. NULL and the default context
 * are ignored. The context must not be bound on any thread. */
void cpu_ctx_free(cpu_ctx *c);

/* The process's default context. Never NULL. */
cpu_ctx *cpu_ctx_default(void);

/* The context bound to the calling thread, else the default. Never NULL. */
cpu_ctx *cpu_ctx_current(void);

/* Binds c (NULL: the default) to the calling thread; returns the previous binding
 * for cpu_ctx_restore. */
cpu_ctx *cpu_ctx_bind(cpu_ctx *c);
void cpu_ctx_restore(cpu_ctx **prev);

/* Binds c until the end of the enclosing block, whichever way it is left. */
#define CPU_CTX_SCOPE(c) \
    cpu_ctx *cpu_ctx_prev_ __attribute__((cleanup(cpu_ctx_restore), unused)) = cpu_ctx_bind(c)

/* c's compute threads, resolved (>= 1). */
int cpu_ctx_threads(const cpu_ctx *c);

#endif
