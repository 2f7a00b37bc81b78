/* dnnl_util.c - oneDNN engine, stream, primitive cache and argument glue for the CPU
 * kernels. */
#include "nn/cpu/dnnl_util.h"

#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/env.h"

/* oneDNN's levels (dnnl_types.h: each value's bits include those of the levels below
 * it) by the names its ONEDNN_MAX_CPU_ISA takes. */
static const struct {
    const char *name;
    dnnl_cpu_isa_t isa;
} dnnl_levels[] = {
    {"SSE41", dnnl_cpu_isa_sse41},
    {"AVX", dnnl_cpu_isa_avx},
    {"AVX2", dnnl_cpu_isa_avx2},
    {"AVX2_VNNI", dnnl_cpu_isa_avx2_vnni},
    {"AVX512_CORE", dnnl_cpu_isa_avx512_core},
    {"AVX512_CORE_VNNI", dnnl_cpu_isa_avx512_core_vnni},
    {"AVX512_CORE_BF16", dnnl_cpu_isa_avx512_core_bf16},
    {"AVX512_CORE_AMX", dnnl_cpu_isa_avx512_core_amx},
};
#define N_DNNL_LEVELS (sizeof dnnl_levels / sizeof dnnl_levels[0])

static unsigned isa_bits(dnnl_cpu_isa_t isa)
{
    return isa == dnnl_cpu_isa_all ? ~0u : (unsigned)isa;
}

static dnnl_cpu_isa_t dnnl_level_of(stoke_cpu_isa cap)
{
    switch (cap) {
    case STOKE_CPU_ISA_SSE41: return dnnl_cpu_isa_sse41;
    case STOKE_CPU_ISA_AVX2: return dnnl_cpu_isa_avx2;
    case STOKE_CPU_ISA_AVX512_CORE: return dnnl_cpu_isa_avx512_core;
    case STOKE_CPU_ISA_AVX512_CORE_VNNI: return dnnl_cpu_isa_avx512_core_vnni;
    case STOKE_CPU_ISA_AVX512_CORE_BF16: return dnnl_cpu_isa_avx512_core_bf16;
    case STOKE_CPU_ISA_AVX512_CORE_AMX: return dnnl_cpu_isa_avx512_core_amx;
    case STOKE_CPU_ISA_ALL: break;
    }
    return dnnl_cpu_isa_all;
}

dnnl_cpu_isa_t dnnl_util_isa_cap(stoke_cpu_isa cap, const char *onednn_env)
{
    unsigned want = isa_bits(dnnl_level_of(cap));
    for (size_t i = 0; onednn_env && i < N_DNNL_LEVELS; i++)
        if (strcasecmp(onednn_env, dnnl_levels[i].name) == 0)
            want &= isa_bits(dnnl_levels[i].isa);
    if (want == ~0u)
        return dnnl_cpu_isa_all;
    /* The levels are only partly ordered (AVX2_VNNI beside AVX512_CORE): the one with the
     * most bits inside both caps is their meet. */
    dnnl_cpu_isa_t best = dnnl_cpu_isa_all;
    int best_bits = -1;
    for (size_t i = 0; i < N_DNNL_LEVELS; i++) {
        unsigned b = isa_bits(dnnl_levels[i].isa);
        if ((b & want) == b && __builtin_popcount(b) > best_bits) {
            best = dnnl_levels[i].isa;
            best_bits = __builtin_popcount(b);
        }
    }
    return best_bits < 0 ? dnnl_cpu_isa_sse41 : best;
}

/* dnnl_set_max_cpu_isa works once, before oneDNN's first JIT kernel, and then overrides
 * ONEDNN_MAX_CPU_ISA, so the user's own oneDNN cap is read here (in oneDNN's order:
 * ONEDNN_ unless empty, else DNNL_) and the lower of the two is set. If oneDNN was
 * already used in this process (the setting is taken), that is fine as long as it
 * runs within the cap. */
static stoke_status apply_isa_cap(char *err, size_t err_size)
{
    stoke_cpu_isa cap;
    if (stoke_max_cpu_isa(&cap) != STOKE_OK) {
        snprintf(err, err_size, "%s", stoke_last_error());
        return STOKE_ERR_ARG;
    }
    const char *env = stoke_env("ONEDNN_MAX_CPU_ISA");
    if (!env || !*env)
        env = stoke_env("DNNL_MAX_CPU_ISA");
    dnnl_cpu_isa_t want = dnnl_util_isa_cap(cap, env);
    if (want == dnnl_cpu_isa_all || dnnl_set_max_cpu_isa(want) == dnnl_success)
        return STOKE_OK;
    dnnl_cpu_isa_t now = dnnl_get_effective_cpu_isa();
    if ((isa_bits(now) & isa_bits(want)) == isa_bits(now))
        return STOKE_OK;
    snprintf(err, err_size,
             "oneDNN: cannot cap its instruction set at %s (STOKE_MAX_CPU_ISA=%s): it was "
             "used before stoke's first model and runs at %s",
             dnnl_cpu_isa2str(want), stoke_cpu_isa_name(cap), dnnl_cpu_isa2str(now));
    return STOKE_ERR_UNAVAILABLE;
}

/* The instruction-set cap is oneDNN's, for the whole process (dnnl_set_max_cpu_isa
 * works once, before the first JIT kernel), so it is applied once, before any
 * context's first engine; the engines themselves, like the streams, are the contexts'
 * own. */
static pthread_once_t cap_once = PTHREAD_ONCE_INIT;
static stoke_status g_cap_status = STOKE_OK;
static char g_cap_error[512];

static void cap_init(void) { g_cap_status = apply_isa_cap(g_cap_error, sizeof g_cap_error); }

static stoke_status cap_applied(void)
{
    pthread_once(&cap_once, cap_init);
    if (g_cap_status != STOKE_OK)
        return stoke_fail(g_cap_status, "%s", g_cap_error);
    return STOKE_OK;
}

stoke_status dnnl_util_engine(dnnl_engine_t *engine, dnnl_stream_t *stream)
{
    stoke_status cap = cap_applied();
    if (cap != STOKE_OK)
        return cap;
    cpu_ctx *c = cpu_ctx_current();
    pthread_mutex_lock(&c->dev);
    dnnl_status_t st = dnnl_success;
    const char *what = "the CPU engine";
    if (!c->engine)
        st = dnnl_engine_create(&c->engine, dnnl_cpu, 0);
    if (st == dnnl_success && stream && !c->stream) {
        what = "a stream";
        st = dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags);
    }
    if (engine)
        *engine = c->engine;
    if (stream)
        *stream = c->stream;
    pthread_mutex_unlock(&c->dev);
    if (st != dnnl_success)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "oneDNN: cannot create %s: %s", what,
                          dnnl_status2str(st));
    return STOKE_OK;
}

stoke_status dnnl_util_check(dnnl_status_t st, const char *what)
{
    if (st == dnnl_success)
        return STOKE_OK;
    stoke_status code = st == dnnl_unimplemented   ? STOKE_ERR_UNAVAILABLE
                        : st == dnnl_out_of_memory ? STOKE_ERR_NOMEM
                                                   : STOKE_ERR_ARG;
    return stoke_fail(code, "oneDNN %s: %s", what, dnnl_status2str(st));
}

size_t dnnl_util_align(size_t n)
{
    return (n + DNNL_UTIL_ALIGN - 1) / DNNL_UTIL_ALIGN * DNNL_UTIL_ALIGN;
}

/* The cache of the calling thread's context: a growing array of (key, value), scanned
 * linearly. A model has a few dozen shapes at most, and lookups happen once per kernel
 * call. */
stoke_status dnnl_util_cache_get(const void *key, size_t key_size,
                                 stoke_status (*create)(const void *key, void **value),
                                 void (*destroy)(void *value), void **value)
{
    cpu_ctx *c = cpu_ctx_current();
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->cache_len; i++) {
        cpu_cache_entry *e = &c->cache[i];
        if (e->key_size == key_size && memcmp(e->key, key, key_size) == 0) {
            *value = e->value;
            pthread_mutex_unlock(&c->lock);
            return STOKE_OK;
        }
    }
    stoke_status st = STOKE_OK;
    if (c->cache_len == c->cache_cap) {
        size_t cap = c->cache_cap ? 2 * c->cache_cap : 32;
        cpu_cache_entry *grown = realloc(c->cache, cap * sizeof *grown);
        if (!grown) {
            st = stoke_fail(STOKE_ERR_NOMEM, "oneDNN primitive cache: out of memory");
            goto out;
        }
        c->cache = grown;
        c->cache_cap = cap;
    }
    void *k = malloc(key_size);
    if (!k) {
        st = stoke_fail(STOKE_ERR_NOMEM, "oneDNN primitive cache: out of memory");
        goto out;
    }
    memcpy(k, key, key_size);
    void *v = NULL;
    st = create(key, &v);
    if (st != STOKE_OK) {
        free(k);
        goto out;
    }
    c->cache[c->cache_len++] = (cpu_cache_entry){k, key_size, v, destroy};
    *value = v;
out:
    pthread_mutex_unlock(&c->lock);
    return st;
}

dnnl_primitive_attr_t dnnl_util_attr(int post)
{
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success)
        return NULL;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success)
        goto fail;
    if (post) {
        dnnl_post_ops_t po = NULL;
        if (dnnl_post_ops_create(&po) != dnnl_success)
            goto fail;
        dnnl_status_t s1 = dnnl_success;
        if (post & DNNL_UTIL_POST_RELU)
            s1 = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
        if (s1 == dnnl_success && (post & DNNL_UTIL_POST_SUM))
            s1 = dnnl_post_ops_append_sum(po, 1.0f);
        dnnl_status_t s2 = s1 == dnnl_success ? dnnl_primitive_attr_set_post_ops(attr, po) : s1;
        dnnl_post_ops_destroy(po);
        if (s2 != dnnl_success)
            goto fail;
    }
    return attr;
fail:
    dnnl_primitive_attr_destroy(attr);
    return NULL;
}

size_t dnnl_util_scratchpad_size(const_dnnl_primitive_desc_t pd)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return md ? dnnl_memory_desc_get_size(md) : 0;
}

/* Creates pd's primitive and, if it wants one, a scratchpad memory with no buffer. */
static stoke_status make_prim(const_dnnl_primitive_desc_t pd, dnnl_primitive_t *p,
                              dnnl_memory_t *scratch, size_t *scratch_bytes, const char *what)
{
    dnnl_engine_t eng = NULL;
    stoke_status st = dnnl_util_engine(&eng, NULL);
    if (st != STOKE_OK)
        return st;
    st = dnnl_util_check(dnnl_primitive_create(p, pd), what);
    if (st != STOKE_OK)
        return st;
    *scratch = NULL;
    *scratch_bytes = dnnl_util_scratchpad_size(pd);
    if (*scratch_bytes) {
        const dnnl_memory_desc_t *md =
            dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        st = dnnl_util_check(dnnl_memory_create(scratch, md, eng, DNNL_MEMORY_NONE), what);
        if (st != STOKE_OK) {
            dnnl_primitive_destroy(*p);
            *p = NULL;
        }
    }
    return st;
}

stoke_status dnnl_util_prim_init(dnnl_util_prim *pr, const_dnnl_primitive_desc_t pd,
                                 const char *what)
{
    return make_prim(pd, &pr->p, &pr->scratch, &pr->scratch_bytes, what);
}

void dnnl_util_prim_destroy(dnnl_util_prim *pr)
{
    if (pr->p)
        dnnl_primitive_destroy(pr->p);
    if (pr->scratch)
        dnnl_memory_destroy(pr->scratch);
    memset(pr, 0, sizeof *pr);
}

stoke_status dnnl_util_arg_init(dnnl_util_arg *a, const dnnl_memory_desc_t *user_md,
                                const dnnl_memory_desc_t *prim_md, int kind, size_t *phase_bytes)
{
    memset(a, 0, sizeof *a);
    dnnl_engine_t eng = NULL;
    stoke_status st = dnnl_util_engine(&eng, NULL);
    if (st != STOKE_OK)
        return st;
    st = dnnl_util_check(dnnl_memory_create(&a->user, user_md, eng, DNNL_MEMORY_NONE), "memory");
    if (st != STOKE_OK)
        return st;
    int same = dnnl_memory_desc_equal(user_md, prim_md);
    if (same && kind != DNNL_UTIL_OUT_ACC) {
        a->prim = a->user;
        return STOKE_OK;
    }
    st = dnnl_util_check(dnnl_memory_create(&a->prim, prim_md, eng, DNNL_MEMORY_NONE), "memory");
    if (st != STOKE_OK)
        goto fail;
    a->bytes = dnnl_util_align(dnnl_memory_desc_get_size(prim_md));
    a->ws_off = *phase_bytes;
    *phase_bytes += a->bytes;
    dnnl_primitive_attr_t attr = dnnl_util_attr(kind == DNNL_UTIL_OUT_ACC ? DNNL_UTIL_POST_SUM : 0);
    if (!attr) {
        st = stoke_fail(STOKE_ERR_NOMEM, "oneDNN: cannot create a reorder attribute");
        goto fail;
    }
    dnnl_primitive_desc_t pd = NULL;
    if (kind == DNNL_UTIL_IN)
        st = dnnl_util_check(
            dnnl_reorder_primitive_desc_create(&pd, user_md, eng, prim_md, eng, attr), "reorder");
    else
        st = dnnl_util_check(
            dnnl_reorder_primitive_desc_create(&pd, prim_md, eng, user_md, eng, attr), "reorder");
    dnnl_primitive_attr_destroy(attr);
    if (st != STOKE_OK)
        goto fail;
    st = make_prim(pd, &a->reorder, &a->scratch, &a->scratch_bytes, "reorder");
    dnnl_primitive_desc_destroy(pd);
    if (st != STOKE_OK)
        goto fail;
    return STOKE_OK;
fail:
    dnnl_util_arg_destroy(a);
    return st;
}

void dnnl_util_arg_bind(dnnl_util_arg *a, const void *user_ptr, char *phase_base)
{
    /* oneDNN takes non-const handles; inputs are only read. */
    dnnl_memory_set_data_handle(a->user, (void *)(uintptr_t)user_ptr);
    if (a->prim != a->user)
        dnnl_memory_set_data_handle(a->prim, phase_base + a->ws_off);
}

static stoke_status run_reorder(dnnl_util_arg *a, dnnl_memory_t from, dnnl_memory_t to,
                                void *scratch)
{
    dnnl_stream_t stream = NULL;
    stoke_status st = dnnl_util_engine(NULL, &stream);
    if (st != STOKE_OK)
        return st;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {0, NULL}};
    int n = 2;
    if (a->scratch) {
        dnnl_memory_set_data_handle(a->scratch, scratch);
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, a->scratch};
    }
    st = dnnl_util_check(dnnl_primitive_execute(a->reorder, stream, n, args), "reorder");
    if (st == STOKE_OK)
        st = dnnl_util_check(dnnl_stream_wait(stream), "reorder");
    return st;
}

stoke_status dnnl_util_arg_pull(dnnl_util_arg *a, void *scratch)
{
    return a->reorder ? run_reorder(a, a->user, a->prim, scratch) : STOKE_OK;
}

stoke_status dnnl_util_arg_push(dnnl_util_arg *a, void *scratch)
{
    return a->reorder ? run_reorder(a, a->prim, a->user, scratch) : STOKE_OK;
}

stoke_status dnnl_util_exec(dnnl_util_prim *pr, int nargs, dnnl_exec_arg_t *args, void *scratch,
                            const char *what)
{
    dnnl_stream_t stream = NULL;
    stoke_status st = dnnl_util_engine(NULL, &stream);
    if (st != STOKE_OK)
        return st;
    if (pr->scratch) {
        dnnl_memory_set_data_handle(pr->scratch, scratch);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pr->scratch};
    }
    st = dnnl_util_check(dnnl_primitive_execute(pr->p, stream, nargs, args), what);
    if (st == STOKE_OK)
        st = dnnl_util_check(dnnl_stream_wait(stream), what);
    return st;
}

void dnnl_util_arg_destroy(dnnl_util_arg *a)
{
    if (a->reorder)
        dnnl_primitive_destroy(a->reorder);
    if (a->scratch)
        dnnl_memory_destroy(a->scratch);
    if (a->prim && a->prim != a->user)
        dnnl_memory_destroy(a->prim);
    if (a->user)
        dnnl_memory_destroy(a->user);
    memset(a, 0, sizeof *a);
}

/* Asked of oneDNN itself rather than read off cpuid: what it implements depends on
 * its version and on its ISA cap (ONEDNN_MAX_CPU_ISA, stoke's own cap) as well. */
static int g_bf16_kernels;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;

static int pd_ok(dnnl_engine_t eng, const void *desc)
{
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_primitive_desc_create(&pd, desc, NULL, eng, NULL) != dnnl_success)
        return 0;
    dnnl_primitive_desc_destroy(pd);
    return 1;
}

/* On an engine of its own: the answer is the machine's (and the cap's), no context's. */
static void bf16_probe(void)
{
    dnnl_engine_t eng = NULL;
    if (cap_applied() != STOKE_OK || dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success)
        return;
    dnnl_memory_desc_t a, b, c, src, wei, dst;
    dnnl_dims_t d2 = {16, 16}, s4 = {1, 16, 8, 8}, w4 = {16, 16, 3, 3};
    dnnl_dims_t one = {1, 1}, pad = {1, 1};
    dnnl_matmul_desc_t mm;
    dnnl_convolution_desc_t conv;
    g_bf16_kernels =
        dnnl_memory_desc_init_by_tag(&a, 2, d2, dnnl_bf16, dnnl_ab) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&b, 2, d2, dnnl_bf16, dnnl_ab) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&c, 2, d2, dnnl_f32, dnnl_ab) == dnnl_success &&
        dnnl_matmul_desc_init(&mm, &a, &b, NULL, &c) == dnnl_success && pd_ok(eng, &mm) &&
        dnnl_memory_desc_init_by_tag(&src, 4, s4, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&wei, 4, w4, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&dst, 4, s4, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
        dnnl_convolution_forward_desc_init(&conv, dnnl_forward_training, dnnl_convolution_direct,
                                           &src, &wei, NULL, &dst, one, pad, pad) == dnnl_success &&
        pd_ok(eng, &conv);
    dnnl_engine_destroy(eng);
}

int dnnl_util_bf16_kernels(void)
{
    pthread_once(&bf16_once, bf16_probe);
    return g_bf16_kernels;
}
