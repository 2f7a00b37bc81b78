/* dnnl_util.c - oneDNN engine, stream, primitive cache and argument glue for the CPU
 * kernels. */
#include "nn/cpu/dnnl_util.h"

#include <oneapi/dnnl/dnnl_debug.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static dnnl_status_t g_engine_status = dnnl_success;

static void engine_init(void) {
    g_engine_status = dnnl_engine_create(&g_engine, dnnl_cpu, 0);
    if (g_engine_status == dnnl_success)
        g_engine_status = dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags);
}

stoke_status dnnl_util_engine(dnnl_engine_t *engine, dnnl_stream_t *stream) {
    pthread_once(&engine_once, engine_init);
    if (g_engine_status != dnnl_success)
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "oneDNN: cannot create the CPU engine: %s",
                          dnnl_status2str(g_engine_status));
    if (engine)
        *engine = g_engine;
    if (stream)
        *stream = g_stream;
    return STOKE_OK;
}

stoke_status dnnl_util_check(dnnl_status_t st, const char *what) {
    if (st == dnnl_success)
        return STOKE_OK;
    stoke_status code = st == dnnl_unimplemented    ? STOKE_ERR_UNAVAILABLE
                        : st == dnnl_out_of_memory ? STOKE_ERR_NOMEM
                                                   : STOKE_ERR_ARG;
    return stoke_fail(code, "oneDNN %s: %s", what, dnnl_status2str(st));
}

size_t dnnl_util_align(size_t n) {
    return (n + DNNL_UTIL_ALIGN - 1) / DNNL_UTIL_ALIGN * DNNL_UTIL_ALIGN;
}

/* The cache: a growing array of (key, value), scanned linearly. A model has a few
 * dozen shapes at most, and lookups happen once per kernel call. */
typedef struct cache_entry {
    void *key;
    size_t key_size;
    void *value;
} cache_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry *cache;
static size_t cache_len, cache_cap;

stoke_status dnnl_util_cache_get(const void *key, size_t key_size,
                                 stoke_status (*create)(const void *key, void **value),
                                 void **value) {
    pthread_mutex_lock(&cache_lock);
    for (size_t i = 0; i < cache_len; i++) {
        if (cache[i].key_size == key_size && memcmp(cache[i].key, key, key_size) == 0) {
            *value = cache[i].value;
            pthread_mutex_unlock(&cache_lock);
            return STOKE_OK;
        }
    }
    stoke_status st = STOKE_OK;
    if (cache_len == cache_cap) {
        size_t cap = cache_cap ? 2 * cache_cap : 32;
        cache_entry *grown = realloc(cache, cap * sizeof *grown);
        if (!grown) {
            st = stoke_fail(STOKE_ERR_NOMEM, "oneDNN primitive cache: out of memory");
            goto out;
        }
        cache = grown;
        cache_cap = cap;
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
    cache[cache_len++] = (cache_entry){k, key_size, v};
    *value = v;
out:
    pthread_mutex_unlock(&cache_lock);
    return st;
}

dnnl_primitive_attr_t dnnl_util_attr(int post) {
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success)
        return NULL;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) !=
        dnnl_success)
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

size_t dnnl_util_scratchpad_size(const_dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return md ? dnnl_memory_desc_get_size(md) : 0;
}

/* Creates pd's primitive and, if it wants one, a scratchpad memory with no buffer. */
static stoke_status make_prim(const_dnnl_primitive_desc_t pd, dnnl_primitive_t *p,
                              dnnl_memory_t *scratch, size_t *scratch_bytes, const char *what) {
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
                                 const char *what) {
    return make_prim(pd, &pr->p, &pr->scratch, &pr->scratch_bytes, what);
}

void dnnl_util_prim_destroy(dnnl_util_prim *pr) {
    if (pr->p)
        dnnl_primitive_destroy(pr->p);
    if (pr->scratch)
        dnnl_memory_destroy(pr->scratch);
    memset(pr, 0, sizeof *pr);
}

stoke_status dnnl_util_arg_init(dnnl_util_arg *a, const dnnl_memory_desc_t *user_md,
                                const dnnl_memory_desc_t *prim_md, int kind,
                                size_t *phase_bytes) {
    memset(a, 0, sizeof *a);
    dnnl_engine_t eng = NULL;
    stoke_status st = dnnl_util_engine(&eng, NULL);
    if (st != STOKE_OK)
        return st;
    st = dnnl_util_check(dnnl_memory_create(&a->user, user_md, eng, DNNL_MEMORY_NONE),
                         "memory");
    if (st != STOKE_OK)
        return st;
    int same = dnnl_memory_desc_equal(user_md, prim_md);
    if (same && kind != DNNL_UTIL_OUT_ACC) {
        a->prim = a->user;
        return STOKE_OK;
    }
    st = dnnl_util_check(dnnl_memory_create(&a->prim, prim_md, eng, DNNL_MEMORY_NONE),
                         "memory");
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

void dnnl_util_arg_bind(dnnl_util_arg *a, const void *user_ptr, char *phase_base) {
    /* oneDNN takes non-const handles; inputs are only read. */
    dnnl_memory_set_data_handle(a->user, (void *)(uintptr_t)user_ptr);
    if (a->prim != a->user)
        dnnl_memory_set_data_handle(a->prim, phase_base + a->ws_off);
}

static stoke_status run_reorder(dnnl_util_arg *a, dnnl_memory_t from, dnnl_memory_t to,
                                void *scratch) {
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

stoke_status dnnl_util_arg_pull(dnnl_util_arg *a, void *scratch) {
    return a->reorder ? run_reorder(a, a->user, a->prim, scratch) : STOKE_OK;
}

stoke_status dnnl_util_arg_push(dnnl_util_arg *a, void *scratch) {
    return a->reorder ? run_reorder(a, a->prim, a->user, scratch) : STOKE_OK;
}

stoke_status dnnl_util_exec(dnnl_util_prim *pr, int nargs, dnnl_exec_arg_t *args,
                            void *scratch, const char *what) {
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

void dnnl_util_arg_destroy(dnnl_util_arg *a) {
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
