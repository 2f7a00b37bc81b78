/* ctx.h - the CPU backend's context: what one model's kernels run with (compute
 * threads, the linear and convolution implementation choices, the oneDNN engine and
 * stream, and the primitive cache). Internal to src/nn.
 *
 * Every model owns one (nn_cpu_backend_new), as a CUDA model owns its cuda_ctx: two
 * models never share threads, engine or cache. The backend table's entries bind their
 * context to the calling thread for the duration of the call (CPU_CTX_SCOPE), and the
 * kernels find it with cpu_ctx_current. A kernel called with nothing bound (tests,
 * benchmarks, the context-less table of nn_cpu_backend) runs with the calling thread's
 * own context, created on first use with the machine's defaults and freed when the
 * thread ends: there is no process-wide context for one caller to change under
 * another. The binding is the calling thread's: OpenMP's other threads in a parallel
 * region see their own, so a kernel reads what it needs from the context before the
 * region. */
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
    atomic_int threads;     /* >= 1; 0 only in a thread's own: follow OpenMP's setting */
    atomic_int linear_impl; /* cpu_linear_impl */
    atomic_int conv_layout; /* cpu_conv_layout */
    pthread_mutex_t lock;   /* the cache (held while an entry is created) */
    pthread_mutex_t dev;    /* the engine's and the stream's creation */
    dnnl_engine_t engine;   /* created on first use (dnnl_util_engine) */
    dnnl_stream_t stream;   /* created on first use, after the engine */
    cpu_cache_entry *cache; /* primitives by shape key, scanned linearly */
    size_t cache_len, cache_cap;
} cpu_ctx;

/* A new context with `threads` compute threads (<= 0: cpu_machine_threads()) and the
 * automatic implementation choices. NULL when out of memory (recorded). */
cpu_ctx *cpu_ctx_new(int threads);

/* Releases the context's cached primitives, stream and engine. NULL is ignored. The
 * context must not be bound on any thread. */
void cpu_ctx_free(cpu_ctx *c);

/* The context bound to the calling thread, else the thread's own (created now if
 * need be; a static fallback with the same defaults when out of memory). Never NULL. */
cpu_ctx *cpu_ctx_current(void);

/* Binds c to the calling thread (NULL: keeps the binding there is, so that an entry of
 * the context-less table called inside a bound one runs with that context); returns
 * the previous binding for cpu_ctx_restore. */
cpu_ctx *cpu_ctx_bind(cpu_ctx *c);
void cpu_ctx_restore(cpu_ctx **prev);

/* Binds c until the end of the enclosing block, whichever way it is left. */
#define CPU_CTX_SCOPE(c) \
    cpu_ctx *cpu_ctx_prev_ __attribute__((cleanup(cpu_ctx_restore), unused)) = cpu_ctx_bind(c)

/* c's compute threads, resolved (>= 1). */
int cpu_ctx_threads(const cpu_ctx *c);

/* The compute threads a context gets when given none: OpenMP's count when the library
 * was loaded (OMP_NUM_THREADS, else every online CPU). A fact of the process's start,
 * not a setting: no caller can change it for another. */
int cpu_machine_threads(void);

#endif
