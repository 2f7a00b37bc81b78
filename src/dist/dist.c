/* dist.c - the reducer every transport shares (stoke_dist_reducer): a bucket is
 * flattened into a staging buffer, all-reduced there by the world's transport, and
 * copied back, as PyTorch DDP's buckets are. The transports fill dist_impl.h's table;
 * the one built here is the single process's (local.c). */
#include <stdlib.h>

#include "dist/dist_impl.h"

int stoke_dist_world_size(const stoke_dist *d) { return d->world; }
int stoke_dist_rank(const stoke_dist *d) { return d->rank; }

void stoke_dist_free(stoke_dist *d)
{
    if (d && d->transport_free)
        d->transport_free(d);
    free(d);
}

/* One staging buffer, the largest bucket's: the buckets are reduced one after another
 * on the model's stream, so each one's copies are queued after the last one's. */
static stoke_status dist_prepare(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b,
                                 int n)
{
    stoke_dist *d = self;
    size_t most = 0;
    for (int k = 0; k < n; k++)
        if (b[k].bytes > most)
            most = b[k].bytes;
    d->staging = most ? ops->alloc(ops->ctx, most) : NULL;
    if (most && !d->staging)
        return stoke_fail(STOKE_ERR_NOMEM, "dist: cannot allocate %zu bytes to stage gradients",
                          most);
    return STOKE_OK;
}

static stoke_status dist_reduce(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b)
{
    stoke_dist *d = self;
    char *flat = d->staging;
    size_t off = 0;
    for (int k = 0; k < b->count; k++) {
        ops->copy(ops->ctx, flat + off, b->grads[k], b->elems[k] * sizeof(float));
        off += b->elems[k] * sizeof(float);
    }
    stoke_status st = d->allreduce_mean(d, (float *)flat, off / sizeof(float), ops->stream);
    if (st != STOKE_OK)
        return st;
    off = 0;
    for (int k = 0; k < b->count; k++) {
        ops->copy(ops->ctx, b->grads[k], flat + off, b->elems[k] * sizeof(float));
        off += b->elems[k] * sizeof(float);
    }
    return STOKE_OK;
}

static stoke_status dist_finish(void *self, const stoke_grad_ops *ops)
{
    stoke_dist *d = self;
    return d->wait ? d->wait(d, ops->stream) : STOKE_OK;
}

static void dist_release(void *self, const stoke_grad_ops *ops)
{
    stoke_dist *d = self;
    if (d->staging)
        ops->free(ops->ctx, d->staging);
    d->staging = NULL;
}

stoke_grad_reducer stoke_dist_reducer(stoke_dist *d)
{
    return (stoke_grad_reducer){.self = d,
                                .prepare = dist_prepare,
                                .reduce = dist_reduce,
                                .finish = dist_finish,
                                .release = dist_release};
}
