/* lt.c - matmuls through cuBLASLt: per (shape, operand type, epilogue) a descriptor,
 * the layouts and the algorithm cuBLASLt's heuristics pick, chosen once (at planning,
 * from the op's workspace entry) and kept for the context's life, as conv.c keeps
 * cuDNN's choices. */
#include <stdlib.h>
#include <string.h>

#include "nn/cuda/ops.h"

typedef struct cuda_lt_plan {
    cuda_mm key;
    void *desc, *la, *lb, *lc; /* C and D share a layout */
    nn_lt_algo algo;
    size_t ws;
} cuda_lt_plan;

static int compute_of(const cuda_ctx *c, int type)
{
    return type == NC_R_32F && c->tf32 ? NC_COMPUTE_32F_FAST_TF32 : NC_COMPUTE_32F;
}

static bool has_aux(int64_t epi)
{
    return epi == NC_LT_EPI_RELU_AUX || epi == NC_LT_EPI_RELU_AUX_BIAS || epi == NC_LT_EPI_DRELU ||
           epi == NC_LT_EPI_DRELU_BGRAD;
}

static bool has_bias(int64_t epi)
{
    return epi == NC_LT_EPI_BIAS || epi == NC_LT_EPI_RELU_AUX_BIAS ||
           epi == NC_LT_EPI_DRELU_BGRAD || epi == NC_LT_EPI_BGRADA || epi == NC_LT_EPI_BGRADB;
}

static void plan_free(cuda_ctx *c, cuda_lt_plan *p)
{
    if (!p)
        return;
    if (p->desc)
        c->lt->desc_destroy(p->desc);
    void *layouts[] = {p->la, p->lb, p->lc};
    for (int i = 0; i < 3; i++)
        if (layouts[i])
            c->lt->layout_destroy(layouts[i]);
    free(p);
}

void cuda_lt_plans_free(cuda_ctx *c)
{
    for (int i = 0; i < c->nlt_plans; i++)
        plan_free(c, c->lt_plans[i]);
    free(c->lt_plans);
    c->lt_plans = NULL;
    c->nlt_plans = 0;
}

static stoke_status lt_check(cuda_ctx *c, int rc, const char *what)
{
    (void)c;
    if (rc == NC_CUBLAS_SUCCESS)
        return STOKE_OK;
    return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s: %s", what, nn_cublas_error(NULL, rc));
}

static stoke_status set_attr(cuda_ctx *c, void *desc, int attr, const void *v, size_t bytes)
{
    return lt_check(c, c->lt->desc_set(desc, attr, v, bytes), "cublasLtMatmulDescSetAttribute");
}

/* The heuristics' first choice under the workspace the backend offers: what Hopper's
 * kernels are tuned for (NVIDIA's advice: 32 MiB), 4 MiB before it. Every operand
 * stoke passes is at least 16-byte aligned (arenas of 64, workspace regions of 256):
 * said so, or the heuristics assume 256 and the call would refuse a smaller one. */
static stoke_status choose(cuda_ctx *c, cuda_lt_plan *p)
{
    void *pref = NULL;
    stoke_status st = lt_check(c, c->lt->pref_create(&pref), "cublasLtMatmulPreferenceCreate");
    uint64_t most = (c->cc_major >= 9 ? 32u : 4u) << 20;
    if (st == STOKE_OK)
        st = lt_check(c, c->lt->pref_set(pref, NC_LT_PREF_MAX_WORKSPACE_BYTES, &most, sizeof most),
                      "cublasLtMatmulPreferenceSetAttribute");
    static const int align_attrs[] = {NC_LT_PREF_MIN_ALIGN_A, NC_LT_PREF_MIN_ALIGN_B,
                                      NC_LT_PREF_MIN_ALIGN_C, NC_LT_PREF_MIN_ALIGN_D};
    uint32_t align = 16;
    for (int i = 0; i < 4 && st == STOKE_OK; i++)
        st = lt_check(c, c->lt->pref_set(pref, align_attrs[i], &align, sizeof align),
                      "cublasLtMatmulPreferenceSetAttribute");
    nn_lt_heuristic h;
    memset(&h, 0, sizeof h);
    int got = 0;
    if (st == STOKE_OK)
        st = lt_check(
            c, c->lt->heuristic(c->lt_h, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &h, &got),
            "cublasLtMatmulAlgoGetHeuristic");
    if (pref)
        c->lt->pref_destroy(pref);
    if (st == STOKE_OK && (got < 1 || h.state != NC_CUBLAS_SUCCESS))
        st = stoke_fail(STOKE_ERR_UNAVAILABLE,
                        "cuBLASLt has no algorithm for a %lld x %lld x %lld matmul with "
                        "epilogue %lld",
                        (long long)p->key.m, (long long)p->key.n, (long long)p->key.k,
                        (long long)p->key.epi);
    p->algo = h.algo;
    p->ws = h.workspace;
    return st;
}

static stoke_status plan_new(cuda_ctx *c, const cuda_mm *k, cuda_lt_plan **out)
{
    cuda_lt_plan *p = calloc(1, sizeof *p);
    if (!p)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory planning a matmul");
    p->key = *k;
    int32_t ta = (int32_t)k->ta, tb = (int32_t)k->tb;
    uint32_t epi = (uint32_t)k->epi;
    stoke_status st =
        lt_check(c, c->lt->desc_create(&p->desc, compute_of(c, (int)k->type), NC_R_32F),
                 "cublasLtMatmulDescCreate");
    if (st == STOKE_OK)
        st = set_attr(c, p->desc, NC_LT_TRANSA, &ta, sizeof ta);
    if (st == STOKE_OK)
        st = set_attr(c, p->desc, NC_LT_TRANSB, &tb, sizeof tb);
    if (st == STOKE_OK)
        st = set_attr(c, p->desc, NC_LT_EPILOGUE, &epi, sizeof epi);
    if (st == STOKE_OK && has_aux(k->epi))
        st = set_attr(c, p->desc, NC_LT_AUX_LD, &k->aux_ld, sizeof k->aux_ld);
    if (st == STOKE_OK)
        st = lt_check(c,
                      c->lt->layout_create(&p->la, (int)k->type, (uint64_t)(k->ta ? k->k : k->m),
                                           (uint64_t)(k->ta ? k->m : k->k), k->lda),
                      "cublasLtMatrixLayoutCreate");
    if (st == STOKE_OK)
        st = lt_check(c,
                      c->lt->layout_create(&p->lb, (int)k->type, (uint64_t)(k->tb ? k->n : k->k),
                                           (uint64_t)(k->tb ? k->k : k->n), k->ldb),
                      "cublasLtMatrixLayoutCreate");
    if (st == STOKE_OK)
        st = lt_check(
            c, c->lt->layout_create(&p->lc, NC_R_32F, (uint64_t)k->m, (uint64_t)k->n, k->ldc),
            "cublasLtMatrixLayoutCreate");
    if (st == STOKE_OK)
        st = choose(c, p);
    if (st != STOKE_OK) {
        plan_free(c, p);
        return st;
    }
    *out = p;
    return STOKE_OK;
}

static stoke_status plan_of(cuda_ctx *c, const cuda_mm *k, cuda_lt_plan **out)
{
    for (int i = 0; i < c->nlt_plans; i++)
        if (memcmp(&c->lt_plans[i]->key, k, sizeof *k) == 0) {
            *out = c->lt_plans[i];
            return STOKE_OK;
        }
    cuda_lt_plan **grown = realloc(c->lt_plans, (size_t)(c->nlt_plans + 1) * sizeof *grown);
    if (!grown)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory planning a matmul");
    c->lt_plans = grown;
    stoke_status st = plan_new(c, k, out);
    if (st == STOKE_OK)
        c->lt_plans[c->nlt_plans++] = *out;
    return st;
}

stoke_status cuda_mm_plan(cuda_ctx *c, const cuda_mm *k, size_t *ws)
{
    *ws = 0;
    if (k->m <= 0 || k->n <= 0)
        return STOKE_OK;
    cuda_lt_plan *p = NULL;
    stoke_status st = plan_of(c, k, &p);
    if (st == STOKE_OK)
        *ws = p->ws;
    return st;
}

stoke_status cuda_mm_run(cuda_ctx *c, const cuda_mm *k, const cuda_mm_ptrs *a)
{
    if (k->m <= 0 || k->n <= 0)
        return STOKE_OK;
    cuda_lt_plan *p = NULL;
    stoke_status st = plan_of(c, k, &p);
    if (st != STOKE_OK)
        return st;
    if (p->ws > a->ws_size)
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "a %lld x %lld x %lld matmul needs %zu bytes of workspace, %zu planned",
                          (long long)k->m, (long long)k->n, (long long)k->k, p->ws, a->ws_size);
    /* The pointers change per call (the descriptor is read as the call queues). */
    if (has_bias(k->epi))
        st = set_attr(c, p->desc, NC_LT_BIAS_POINTER, &a->bias, sizeof a->bias);
    if (st == STOKE_OK && has_aux(k->epi))
        st = set_attr(c, p->desc, NC_LT_AUX_POINTER, &a->aux, sizeof a->aux);
    if (st == STOKE_OK)
        st = lt_check(c,
                      c->lt->matmul(c->lt_h, p->desc, &a->alpha, a->A, p->la, a->B, p->lb, &a->beta,
                                    a->C, p->lc, a->D, p->lc, &p->algo, a->ws, p->ws, c->L.stream),
                      "cublasLtMatmul");
    return st;
}
