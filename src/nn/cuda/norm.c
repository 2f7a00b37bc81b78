/* norm.c - the CUDA backend's batch norm and layer norm (k_norm.h): the statistics of
 * a channel or a row are one index's ordered sums, so training is bit-reproducible for
 * any launch configuration. */
#include "nn/cuda/ops.h"

/* ---- batch norm: saved = mean | rstd per channel (the per-sample area is
 * over-provisioned, as the CPU's, so the plan stays linear in the batch) ---- */

size_t cuda_bn_saved(void *ctx, const stoke_graph *g, const nn_node *n)
{
    (void)ctx;
    (void)g;
    return 2 * (size_t)n->shape.dims[0] * sizeof(float);
}

/* the backward's per-channel means of dy and dy xhat */
stoke_status cuda_bn_ws(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                        stoke_precision p, size_t *bytes)
{
    (void)ctx;
    (void)g;
    (void)batch;
    (void)p;
    *bytes = 2 * (size_t)n->shape.dims[0] * sizeof(float);
    return STOKE_OK;
}

static nk_bn_args bn_args(const nn_exec_args *a)
{
    const stoke_shape *s = &a->node->shape;
    nk_bn_args k = {0};
    k.C = s->dims[0];
    k.S = s->ndim == 3 ? s->dims[1] * s->dims[2] : 1;
    k.B = a->batch;
    k.x = a->in[0];
    k.dy = a->dout;
    k.y = a->out;
    k.dx = a->din[0];
    k.w = a->param[0];
    k.b = a->param[1];
    /* a recompute must not move the running statistics a second time */
    k.rmean = a->recompute ? NULL : a->param[2];
    k.rvar = a->recompute ? NULL : a->param[3];
    k.mean = a->saved;
    k.rstd = k.mean + k.C;
    k.dw = a->grad[0];
    k.db = a->grad[1];
    k.mdy = a->ws;
    k.mdyx = k.mdy ? k.mdy + k.C : NULL;
    k.train = a->train;
    k.momentum = a->node->momentum;
    k.eps = a->node->eps;
    return k;
}

stoke_status cuda_bn_fwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    nk_bn_args k = bn_args(a);
    stoke_status st;
    if (a->train && k.B * k.S < 2)
        st = stoke_fail(STOKE_ERR_ARG,
                        "batchnorm: training needs more than 1 value per channel "
                        "(batch %d x %d positions)",
                        (int)k.B, (int)k.S);
    else if (!a->train && (!k.rmean || !k.rvar))
        st = stoke_fail(STOKE_ERR_ARG, "batchnorm: eval mode needs running statistics");
    else
        st = CUDA_RUN(c, bn_stats, k.C, &k);
    if (st == STOKE_OK)
        st = CUDA_RUN(c, bn_apply, k.B * k.C * k.S, &k);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

stoke_status cuda_bn_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    nk_bn_args k = bn_args(a);
    stoke_status st = CUDA_RUN(c, bn_grad, k.C, &k);
    if (st == STOKE_OK && k.dx)
        st = CUDA_RUN(c, bn_dx, k.B * k.C * k.S, &k);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

/* ---- layer norm: saved = mean (rows) | rstd (rows) ---- */

size_t cuda_ln_saved(void *ctx, const stoke_graph *g, const nn_node *n)
{
    (void)ctx;
    (void)g;
    const stoke_shape *s = &n->shape;
    return 2 * (size_t)(cuda_elems(s) / s->dims[s->ndim - 1]) * sizeof(float);
}

static nk_ln_args ln_args(const nn_exec_args *a)
{
    const stoke_shape *s = &a->node->shape;
    nk_ln_args k = {0};
    k.C = s->dims[s->ndim - 1];
    k.rows = a->batch * (cuda_elems(s) / k.C);
    k.x = a->in[0];
    k.dy = a->dout;
    k.y = a->out;
    k.dx = a->din[0];
    k.w = a->param[0];
    k.b = a->param[1];
    k.mean = a->saved;
    k.rstd = k.mean + k.rows;
    k.dw = a->grad[0];
    k.db = a->grad[1];
    k.eps = a->node->eps;
    return k;
}

stoke_status cuda_ln_fwd(void *ctx, const nn_exec_args *a)
{
    nk_ln_args k = ln_args(a);
    stoke_status st = CUDA_RUN((cuda_ctx *)ctx, ln_fwd, k.rows, &k);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}

stoke_status cuda_ln_bwd(void *ctx, const nn_exec_args *a)
{
    cuda_ctx *c = ctx;
    nk_ln_args k = ln_args(a);
    stoke_status st = STOKE_OK;
    if (k.dx)
        st = CUDA_RUN(c, ln_dx, k.rows, &k);
    if (st == STOKE_OK && (k.dw || k.db))
        st = CUDA_RUN(c, ln_param, k.C, &k);
    return st == STOKE_OK ? st : cuda_layer_fail(st, a->node);
}
