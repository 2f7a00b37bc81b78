/* buckets.c - a model's data-parallel seam (stoke_grad_reducer, nn.h): its trainable
 * parameters grouped into gradient buckets by the backward's order, each handed to the
 * reducer during backward as soon as its gradients are final, and the reducer's wait
 * before the optimizer step. With no reducer installed nothing here runs. */
#include <stdio.h>
#include <stdlib.h>

#include "nn/model_impl.h"

/* PyTorch DistributedDataParallel's bucket_cap_mb */
#define DEFAULT_BUCKET_BYTES ((size_t)25 << 20)

/* The backward iteration (backward_ops' node index) that writes node u's parameter
 * gradients: a fused chain's backward runs at its last node, with its first node's. */
static int grad_iteration(const stoke_model *m, int u)
{
    int h = m->L.head[u];
    return h >= 0 ? L_last(&m->L, h) : u;
}

typedef struct ready_param {
    int at; /* the iteration after which its gradient is final */
    int index;
} ready_param;

/* Readiness order: later iterations first (backward runs from the last node), then
 * the later parameter, so the order is total and the same on every rank. */
static int by_readiness(const void *a, const void *b)
{
    const ready_param *x = a, *y = b;
    if (x->at != y->at)
        return x->at > y->at ? -1 : 1;
    return (x->index < y->index) - (x->index > y->index);
}

static void buckets_free(stoke_model *m)
{
    free(m->buckets);
    free(m->ready_at);
    free(m->bucket_params);
    free(m->bucket_grads);
    free(m->bucket_elems);
    m->buckets = NULL;
    m->ready_at = m->bucket_params = NULL;
    m->bucket_grads = NULL;
    m->bucket_elems = NULL;
    m->nbuckets = m->next_bucket = 0;
}

/* Groups the trainable parameters into buckets of about `cap` bytes in readiness
 * order. A parameter no node reads is final from the start (iteration nnodes). */
static stoke_status buckets_build(stoke_model *m, size_t cap)
{
    const stoke_graph *g = m->g;
    int np = g->nparams, n = g->nnodes;
    ready_param *rp = malloc(((size_t)np + 1) * sizeof *rp);
    m->buckets = calloc((size_t)np + 1, sizeof *m->buckets);
    m->ready_at = calloc((size_t)np + 1, sizeof *m->ready_at);
    m->bucket_params = calloc((size_t)np + 1, sizeof *m->bucket_params);
    m->bucket_grads = calloc((size_t)np + 1, sizeof *m->bucket_grads);
    m->bucket_elems = calloc((size_t)np + 1, sizeof *m->bucket_elems);
    if (!rp || !m->buckets || !m->ready_at || !m->bucket_params || !m->bucket_grads ||
        !m->bucket_elems) {
        free(rp);
        buckets_free(m);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory for gradient buckets", g->name);
    }
    for (int p = 0; p < np; p++)
        rp[p] = (ready_param){.at = n, .index = p};
    for (int u = 0; u < n; u++) {
        const nn_node *nd = &g->nodes[u];
        int at = grad_iteration(m, u);
        for (int k = 0; k < nd->nparam; k++)
            if (at < rp[nd->param[k]].at)
                rp[nd->param[k]].at = at;
    }
    int count = 0;
    for (int p = 0; p < np; p++)
        if (m->grad[p])
            rp[count++] = rp[p];
    qsort(rp, (size_t)count, sizeof *rp, by_readiness);
    stoke_grad_bucket *b = NULL;
    for (int k = 0; k < count; k++) {
        int p = rp[k].index;
        if (!b) {
            b = &m->buckets[m->nbuckets];
            *b = (stoke_grad_bucket){.index = m->nbuckets,
                                     .params = &m->bucket_params[k],
                                     .grads = &m->bucket_grads[k],
                                     .elems = &m->bucket_elems[k]};
            m->nbuckets++;
        }
        m->bucket_params[k] = p;
        m->bucket_grads[k] = m->grad[p];
        m->bucket_elems[k] = (size_t)g->params[p].info.elems;
        b->count++;
        b->bytes += m->bucket_elems[k] * sizeof(float);
        m->ready_at[b->index] = rp[k].at; /* its last member's: the earliest iteration */
        if (b->bytes >= cap)
            b = NULL;
    }
    free(rp);
    return STOKE_OK;
}

void nn_reducer_drop(stoke_model *m)
{
    if (m->has_reducer && m->reducer.release)
        m->reducer.release(m->reducer.self, &m->gops);
    m->has_reducer = false;
    buckets_free(m);
}

stoke_status stoke_model_set_reducer(stoke_model *m, const stoke_grad_reducer *r)
{
    if (r && !m->o.training)
        return stoke_fail(STOKE_ERR_ARG, "%s: a gradient reducer on a model compiled for inference",
                          m->g->name);
    /* a captured backward holds the reductions queued while it was captured */
    nn_graphs_drop(m);
    nn_reducer_drop(m);
    if (!r)
        return STOKE_OK;
    const nn_backend *be = m->be;
    m->gops = (stoke_grad_ops){.ctx = be->ctx,
                               .stream = be->queue ? be->queue(be->ctx) : NULL,
                               .alloc = be->alloc,
                               .free = be->free,
                               .copy = be->copy};
    stoke_status st = buckets_build(m, r->bucket_bytes ? r->bucket_bytes : DEFAULT_BUCKET_BYTES);
    if (st != STOKE_OK)
        return st;
    if (r->prepare) {
        st = r->prepare(r->self, &m->gops, m->buckets, m->nbuckets);
        if (st != STOKE_OK) {
            buckets_free(m);
            return st;
        }
    }
    m->reducer = *r;
    m->has_reducer = true;
    return STOKE_OK;
}

int stoke_model_buckets(const stoke_model *m, const stoke_grad_bucket **out)
{
    *out = m->has_reducer ? m->buckets : NULL;
    return m->has_reducer ? m->nbuckets : 0;
}

stoke_status nn_reduce_ready(stoke_model *m, int i)
{
    for (; m->next_bucket < m->nbuckets && m->ready_at[m->next_bucket] > i; m->next_bucket++) {
        const stoke_grad_bucket *b = &m->buckets[m->next_bucket];
        stoke_status st =
            m->reducer.reduce ? m->reducer.reduce(m->reducer.self, &m->gops, b) : STOKE_OK;
        if (st != STOKE_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", stoke_last_error());
            return stoke_fail(st, "%s: reducing gradient bucket %d: %s", m->g->name, b->index, msg);
        }
    }
    return STOKE_OK;
}

stoke_status nn_reduce_finish(stoke_model *m)
{
    if (!m->reducer.finish)
        return STOKE_OK;
    stoke_status st = m->reducer.finish(m->reducer.self, &m->gops);
    if (st == STOKE_OK)
        return st;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", stoke_last_error());
    return stoke_fail(st, "%s: finishing the gradients' reduction: %s", m->g->name, msg);
}
