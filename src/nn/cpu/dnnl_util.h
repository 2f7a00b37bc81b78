/* dnnl_util.h - the CPU backend's oneDNN engine, its context's stream and shape-keyed
 * primitive cache, and the glue the dense and conv kernels use to run primitives on
 * caller-owned buffers. Internal to src/nn/cpu. */
#ifndef STOKE_NN_CPU_DNNL_UTIL_H
#define STOKE_NN_CPU_DNNL_UTIL_H

#include <oneapi/dnnl/dnnl.h>
#include <stddef.h>

#include "nn/cpu/ctx.h"
#include "stoke/core.h"

/* Workspace regions are cut at this alignment (AVX-512 lines). */
#define DNNL_UTIL_ALIGN 64

/* The calling thread's context's CPU engine and in-order stream (cpu_ctx_current;
 * created on the context's first use), after
 * oneDNN's instruction set is capped (dnnl_set_max_cpu_isa) at the lower of
 * STOKE_MAX_CPU_ISA and the user's own ONEDNN_MAX_CPU_ISA. Every oneDNN call that may
 * generate code (a primitive descriptor, dnnl_sgemm) must come after this one.
 * Returns, with the message recorded, STOKE_ERR_ARG for a bad STOKE_MAX_CPU_ISA,
 * STOKE_ERR_UNAVAILABLE if oneDNN already runs above the cap (it was used before) or
 * cannot create the engine. */
stoke_status dnnl_util_engine(dnnl_engine_t *engine, dnnl_stream_t *stream);

/* Whether oneDNN has bf16 matmul and convolution kernels on this CPU (natively with
 * AVX512-BF16 or AMX, by its own exact emulation on other AVX-512 CPUs; none below
 * AVX-512, or under an ISA cap below it). Probed once. */
int dnnl_util_bf16_kernels(void);

/* The oneDNN level to set for the stoke cap `cap` and the value of ONEDNN_MAX_CPU_ISA
 * (NULL: unset; case-insensitive; a name oneDNN 2.x does not know caps nothing): the
 * largest oneDNN level within both, dnnl_cpu_isa_all when neither caps. Pure. */
dnnl_cpu_isa_t dnnl_util_isa_cap(stoke_cpu_isa cap, const char *onednn_env);

/* Turns a oneDNN status into a stoke status (unimplemented: STOKE_ERR_UNAVAILABLE,
 * out of memory: STOKE_ERR_NOMEM, others STOKE_ERR_ARG); records "oneDNN <what>:
 * <status>" on failure. */
stoke_status dnnl_util_check(dnnl_status_t st, const char *what);

/* Finds the value stored under the key bytes in the calling thread's context's cache
 * (callers memset their key structs, so padding compares equal), or calls
 * create(key, &value) once and stores it. The value lives until the context is freed,
 * which calls destroy(value) (may be NULL); a thread's own context's live until the
 * thread ends. Thread-safe; creation happens under the context's lock, so it is
 * serialized (it is meant for planning time, not the hot path). */
stoke_status dnnl_util_cache_get(const void *key, size_t key_size,
                                 stoke_status (*create)(const void *key, void **value),
                                 void (*destroy)(void *value), void **value);

/* Rounds up to DNNL_UTIL_ALIGN. */
size_t dnnl_util_align(size_t n);

/* Post-ops for dnnl_util_attr: dst += result; ReLU of the result (before any sum). */
enum { DNNL_UTIL_POST_SUM = 1, DNNL_UTIL_POST_RELU = 2 };

/* A primitive attribute with user-managed scratchpad (so oneDNN never allocates while
 * executing) and the post-ops in `post` (DNNL_UTIL_POST_* bits). NULL on failure. */
dnnl_primitive_attr_t dnnl_util_attr(int post);

/* Bytes of the scratchpad the primitive descriptor wants (0 if none). */
size_t dnnl_util_scratchpad_size(const_dnnl_primitive_desc_t pd);

/* One tensor argument of a primitive, in the user's plain layout (NCHW, OIHW, (B,C))
 * and in the layout the primitive chose. When they differ, `reorder` moves data
 * between them through a region of the workspace at `ws_off`; an accumulating output
 * always goes through the workspace and is added into the user's buffer by a reorder
 * with a sum post-op, since oneDNN's backward primitives overwrite. */
typedef struct dnnl_util_arg {
    dnnl_memory_t user;       /* user layout; handle set per call */
    dnnl_memory_t prim;       /* primitive layout; == user when no reorder */
    dnnl_primitive_t reorder; /* user->prim for inputs, prim->user for outputs; or NULL */
    dnnl_memory_t scratch;    /* the reorder's scratchpad, or NULL if it needs none */
    size_t scratch_bytes;     /* its size */
    size_t ws_off;            /* offset of prim's buffer in the phase region */
    size_t bytes;             /* bytes of prim's buffer if it lives in the workspace */
} dnnl_util_arg;

/* Argument kinds for dnnl_util_arg_init. */
enum { DNNL_UTIL_IN = 0, DNNL_UTIL_OUT = 1, DNNL_UTIL_OUT_ACC = 2 };

/* Builds an argument for the primitive layout `prim_md` and the user layout `user_md`,
 * placing any workspace buffer at *phase_bytes (advanced by its aligned size). */
stoke_status dnnl_util_arg_init(dnnl_util_arg *a, const dnnl_memory_desc_t *user_md,
                                const dnnl_memory_desc_t *prim_md, int kind, size_t *phase_bytes);

/* Points an argument at the user's buffer and, if it needs one, at its workspace
 * region (phase base + ws_off). */
void dnnl_util_arg_bind(dnnl_util_arg *a, const void *user_ptr, char *phase_base);

/* Runs the argument's input reorder (user->prim) if any. scratch is the shared
 * scratchpad region. */
stoke_status dnnl_util_arg_pull(dnnl_util_arg *a, void *scratch);

/* Runs the argument's output reorder (prim->user, accumulating for OUT_ACC) if any. */
stoke_status dnnl_util_arg_push(dnnl_util_arg *a, void *scratch);

/* A compute primitive and its user-managed scratchpad memory (NULL if none). */
typedef struct dnnl_util_prim {
    dnnl_primitive_t p;
    dnnl_memory_t scratch;
    size_t scratch_bytes;
} dnnl_util_prim;

/* Creates the primitive of pd (which it keeps; the caller still destroys pd) and its
 * scratchpad memory. */
stoke_status dnnl_util_prim_init(dnnl_util_prim *pr, const_dnnl_primitive_desc_t pd,
                                 const char *what);

/* Executes a primitive with the given args (plus its scratchpad, pointed at scratch)
 * and waits for it. args must have room for one more entry after nargs. */
stoke_status dnnl_util_exec(dnnl_util_prim *pr, int nargs, dnnl_exec_arg_t *args, void *scratch,
                            const char *what);

/* Releases a primitive's oneDNN objects. */
void dnnl_util_prim_destroy(dnnl_util_prim *pr);

/* Releases an argument's oneDNN objects. */
void dnnl_util_arg_destroy(dnnl_util_arg *a);

#endif
