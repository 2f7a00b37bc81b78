/* pool.c - the CUDA backend's max, average (padding counted, as the CPU backend's
 * count_include_pad) and global average pooling through cuDNN's legacy pooling API.
 * Per (op, window, shape, batch) a plan keeps the pooling and the two tensor
 * descriptors, made in the workspace entry, so a step creates no cuDNN objects. Pooling
 * runs in fp32 at every precision (the backend's supports()), so one plan serves all.
 *
 * Max pooling's ties: cuDNN does not document which of equal maxima gets the
 * gradient, so nothing here relies on one (the CPU backend gives it to the first in
 * row-major window order, the test double does the same); after a ReLU the ties are
 * zeros, whose gradient the ReLU drops whichever gets it. */
#include <limits.h>
#include <stdlib.h>

#include "nn/cuda/ops.h"

typedef struct pool_key {
    int mode, n, c, h, w, oh, ow, k_h, k_w, stride_h, stride_w, pad;
} pool_key;

struct cuda_pool_plan {
    pool_key key;
    void *pd, *x, *y;
};

static bool key_eq(const pool_key *a, const pool_key *b)
{
    return a->mode == b->mode && a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w &&
           a->oh == b->oh && a->ow == b->ow && a->k_h == b->k_h && a->k_w == b->k_w &&
           a->stride_h == b->stride_h && a->stride_w == b->stride_w && a->pad == b->pad;
}

/* cuDNN's legacy API takes int dimensions: the graph's limits keep a sample's sizes in
 * int, the batch times them is checked. */
static stoke_status key_of(const stoke_graph *g, const nn_node *n, int64_t batch, pool_key *k)
{
    const stoke_shape *in = &nn_graph_node(g, n->in[0])->shape;
    int64_t elems = cuda_elems(in);
    if (batch < 1 || batch > INT_MAX || elems > INT_MAX / batch)
        return stoke_fail(STOKE_ERR_ARG, "%s: size %lld exceeds cuDNN's int range", n->name,
                          (long long)(batch * elems));
    *k = (pool_key){
        .n = (int)batch, .c = (int)in->dims[0], .h = (int)in->dims[1], .w = (int)in->dims[2]};
    if (n->op == STOKE_NN_GLOBAL_AVGPOOL) {
        /* one window the size of the plane; no padding, so either average mode */
        k->mode = NC_CUDNN_POOL_AVG_INCLUDE_PAD;
        k->oh = k->ow = 1;
        k->k_h = k->stride_h = k->h;
        k->k_w = k->stride_w = k->w;
        return STOKE_OK;
    }
    k->mode = n->op == STOKE_NN_MAXPOOL2D ? NC_CUDNN_POOL_MAX_DETERMINISTIC
                                          : NC_CUDNN_POOL_AVG_INCLUDE_PAD;
    k->oh = (int)n->shape.dims[1];
    k->ow = (int)n->shape.dims[2];
    k->k_h = k->k_w = n->kernel;
    k->stride_h = k->stride_w = n->stride;
    k->pad = n->padding;
    return STOKE_OK;
}

static void plan_free(cuda_ctx *c, struct cuda_pool_plan *p)
{
    if (p->x)
        c->dnn->destroy_tensor(p->x);
    if (p->y)
        c->dnn->destroy_tensor(p->y);
    if (p->pd)
        c->dnn->destroy_pool(p->pd);
    free(p);
}

void cuda_pool_plans_free(cuda_ctx *c)
{
    for (int i = 0; i < c->npool_plans; i++)
        plan_free(c, c->pool_plans[i]);
    free(c->pool_plans);
    c->pool_plans = NULL;
    c->npool_plans = 0;
}

static stoke_status describe(cuda_ctx *c, struct cuda_pool_plan *p)
{
    const pool_key *k = &p->key;
    nn_cudnn *d = c->dnn;
    int rc = d->create_pool(&p->pd);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->create_tensor(&p->x);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->create_tensor(&p->y);
    /* NaN not propagated: as the CPU's strict > scan, a NaN only wins where nothing
     * else is compared with it */
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->set_pool_2d(p->pd, k->mode, NC_CUDNN_NOT_PROPAGATE_NAN, k->k_h, k->k_w, k->pad,
                            k->pad, k->stride_h, k->stride_w);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->set_tensor_4d(p->x, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, k->n, k->c, k->h,
                              k->w);
    if (rc == NC_CUDNN_SUCCESS)
        rc = d->set_tensor_4d(p->y, NC_CUDNN_TENSOR_NCHW, NC_CUDNN_DATA_FLOAT, k->n, k->c, k->oh,
                              k->ow);
    return cuda_dnn_check(c, rc, "cuDNN pooling descriptors");
}

stoke_status cuda_pool_plan_for(cuda_ctx *c, const stoke_graph *g, const nn_node *n, int64_t batch,
                                const struct cuda_pool_plan **out)
{
    pool_key k;
    stoke_status st = key_of(g, n, batch, &k);
    if (st == STOKE_OK)
        st = cuda_ctx_dnn(c);
    if (st != STOKE_OK)
        return st;
    for (int i = 0; i < c->npool_plans; i++)
        if (key_eq(&c->pool_plans[i]->key, &k)) {
            *out = c->pool_plans[i];
            return STOKE_OK;
        }
    struct cuda_pool_plan **grown =
        realloc(c->pool_plans, (size_t)(c->npool_plans + 1) * sizeof *grown);
    struct cuda_pool_plan *p = calloc(1, sizeof *p);
    if (grown)
        c->pool_plans = grown;
    if (!grown || !p) {
        free(p);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    }
    p->key = k;
    st = describe(c, p);
    if (st != STOKE_OK) {
        plan_free(c, p);
        return st;
    }
    c->pool_plans[c->npool_plans++] = p;
    *out = p;
    return STOKE_OK;
}

stoke_status cuda_pool_forward(cuda_ctx *c, const struct cuda_pool_plan *p, const float *x,
                               float *y)
{
    const float one = 1.0f, zero = 0.0f;
    return cuda_dnn_check(c, c->dnn->pool_fwd(c->dnn_h, p->pd, &one, p->x, x, &zero, p->y, y),
                          "cudnnPoolingForward");
}

stoke_status cuda_pool_backward(cuda_ctx *c, const struct cuda_pool_plan *p, const float *y,
                                const float *dy, const float *x, float beta, float *dx)
{
    const float one = 1.0f;
    return cuda_dnn_check(
        c, c->dnn->pool_bwd(c->dnn_h, p->pd, &one, p->y, y, p->y, dy, p->x, x, &beta, p->x, dx),
        "cudnnPoolingBackward");
}

/* No scratch; makes the plan for the batch, so the first step does not. */
stoke_status cuda_pool_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                          stoke_precision p, size_t *bytes)
{
    (void)p;
    const struct cuda_pool_plan *plan = NULL;
    *bytes = 0;
    return cuda_pool_plan_for(ctx, g, n, batch, &plan);
}

stoke_status cuda_pool_fwd(void *ctx, const nn_exec_args *a)
{
    const struct cuda_pool_plan *p = NULL;
    stoke_status st = cuda_pool_plan_for(ctx, a->graph, a->node, a->batch, &p);
    if (st == STOKE_OK)
        st = cuda_pool_forward(ctx, p, a->in[0], a->out);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

/* din += the gradient (beta 1): the executor accumulates */
stoke_status cuda_pool_bwd(void *ctx, const nn_exec_args *a)
{
    if (!a->din[0])
        return STOKE_OK;
    const struct cuda_pool_plan *p = NULL;
    stoke_status st = cuda_pool_plan_for(ctx, a->graph, a->node, a->batch, &p);
    if (st == STOKE_OK)
        st = cuda_pool_backward(ctx, p, a->out, a->dout, a->in[0], 1.0f, a->din[0]);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}
