/* dist.c - the reducer every transport shares (stoke_dist_reducer), as PyTorch DDP's
 * buckets are: each bucket is flattened into its own staging buffer and its mean over
 * the world started as soon as backward has produced it, so the reductions of the
 * last layers run while the first layers' backward does; before the step they are
 * waited for and scattered back. Also the world's accessors and its host collectives,
 * which dispatch to the world's tables (dist_impl.h). */
#include <stdlib.h>
#include <string.h>

#include "dist/dist_impl.h"

stoke_status dist_new(int world, int rank, const dist_host *h, void *state, const dist_grads *g,
                      stoke_dist **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory");
    stoke_dist *d = *out;
    d->world = world;
    d->rank = rank;
    d->local_world = 1;
    d->host = h;
    d->host_state = state;
    d->grads = g;
    d->sync = true;
    return STOKE_OK;
}

int stoke_dist_world_size(const stoke_dist *d) { return d->world; }
int stoke_dist_rank(const stoke_dist *d) { return d->rank; }
int stoke_dist_local_size(const stoke_dist *d) { return d->local_world; }
int stoke_dist_local_rank(const stoke_dist *d) { return d->local_rank; }
const char *stoke_dist_host_name(const stoke_dist *d) { return d->host_name; }
const char *stoke_dist_transport(const stoke_dist *d) { return d->grads->name; }

void stoke_dist_free(stoke_dist *d)
{
    if (!d)
        return;
    dist_comm_free(d);
    if (d->grads && d->grads->free)
        d->grads->free(d);
    if (d->host && d->host->free)
        d->host->free(d);
    free(d->stage);
    free(d);
}

void stoke_dist_abort(stoke_dist *d, int code)
{
    if (d && d->host->abort)
        d->host->abort(d, code);
}

stoke_status stoke_dist_sum(stoke_dist *d, double *v, int n)
{
    return d->host->allreduce_f64(d, v, n, 0);
}

stoke_status stoke_dist_min(stoke_dist *d, double *v, int n)
{
    return d->host->allreduce_f64(d, v, n, 1);
}

stoke_status stoke_dist_max(stoke_dist *d, double *v, int n)
{
    return d->host->allreduce_f64(d, v, n, 2);
}

stoke_status stoke_dist_bcast(stoke_dist *d, void *buf, size_t bytes, int root)
{
    return d->host->bcast(d, buf, bytes, root);
}

stoke_status stoke_dist_allgather(stoke_dist *d, const void *mine, size_t bytes, void *all)
{
    return d->host->allgather(d, mine, bytes, all);
}

/* Each parameter (trainable or not, as `which` asks) through host memory: read from
 * the model, passed through f, written back. */
static stoke_status each_param(stoke_dist *d, stoke_model *m, int which,
                               stoke_status (*f)(stoke_dist *d, float *v, size_t n))
{
    const stoke_graph *g = stoke_model_graph(m);
    float *host = NULL;
    size_t cap = 0;
    stoke_status s = STOKE_OK;
    for (int i = 0; s == STOKE_OK && i < stoke_graph_param_count(g); i++) {
        const stoke_param_info *p = stoke_graph_param(g, i);
        if (which == 0 && p->trainable)
            continue;
        size_t n = (size_t)p->elems;
        if (n > cap) {
            free(host);
            cap = n;
            if (!(host = malloc(n * sizeof *host)))
                return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory for %s", p->name);
        }
        float *dev = stoke_model_param(m, i);
        s = stoke_model_read(m, dev, host, n * sizeof *host);
        if (s == STOKE_OK)
            s = f(d, host, n);
        if (s == STOKE_OK)
            s = stoke_model_write(m, dev, host, n * sizeof *host);
    }
    free(host);
    if (s == STOKE_OK)
        stoke_model_params_changed(m);
    return s;
}

static stoke_status bcast_floats(stoke_dist *d, float *v, size_t n)
{
    return stoke_dist_bcast(d, v, n * sizeof *v, 0);
}

/* The mean in double, so the buffers' average does not depend on the ranks' order. */
static stoke_status mean_floats(stoke_dist *d, float *v, size_t n)
{
    double *t = malloc(n * sizeof *t);
    if (!t)
        return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory for %zu buffer values", n);
    for (size_t i = 0; i < n; i++)
        t[i] = v[i];
    stoke_status s = STOKE_OK;
    for (size_t off = 0; s == STOKE_OK && off < n; off += 1 << 20) {
        size_t k = n - off < (1u << 20) ? n - off : (1u << 20);
        s = stoke_dist_sum(d, t + off, (int)k);
    }
    for (size_t i = 0; s == STOKE_OK && i < n; i++)
        v[i] = (float)(t[i] / d->world);
    free(t);
    return s;
}

stoke_status stoke_dist_bcast_params(stoke_dist *d, stoke_model *m)
{
    return d->world > 1 ? each_param(d, m, 1, bcast_floats) : STOKE_OK;
}

stoke_status stoke_dist_average_buffers(stoke_dist *d, stoke_model *m)
{
    return d->world > 1 ? each_param(d, m, 0, mean_floats) : STOKE_OK;
}

void stoke_dist_set_sync(stoke_dist *d, bool sync) { d->sync = sync; }

void stoke_dist_get_stats(const stoke_dist *d, stoke_dist_stats *out) { *out = d->stats; }
void stoke_dist_reset_stats(stoke_dist *d) { memset(&d->stats, 0, sizeof d->stats); }

/* ---- the reducer ------------------------------------------------------------------ */

static void stage_release(stoke_dist *d, const stoke_grad_ops *ops)
{
    (void)dist_comm_wait(d); /* nothing may still read a buffer freed here */
    dist_comm_free(d);
    for (int k = 0; k < d->nstage; k++)
        if (d->stage[k].buf)
            ops->free(ops->ctx, d->stage[k].buf);
    free(d->stage);
    d->stage = NULL;
    d->nstage = 0;
    d->buckets = NULL;
}

static void copy_back(stoke_dist *d, const stoke_grad_ops *ops, const stoke_grad_bucket *b)
{
    const char *flat = (const char *)d->stage[b->index].buf;
    for (int k = 0; k < b->count; k++) {
        ops->copy(ops->ctx, b->grads[k], flat, b->elems[k] * sizeof(float));
        flat += b->elems[k] * sizeof(float);
    }
}

/* Bucket b staged and its mean started. */
static stoke_status start_bucket(stoke_dist *d, const stoke_grad_ops *ops,
                                 const stoke_grad_bucket *b)
{
    dist_stage *st = &d->stage[b->index];
    char *flat = (char *)st->buf;
    for (int k = 0; k < b->count; k++) {
        ops->copy(ops->ctx, flat, b->grads[k], b->elems[k] * sizeof(float));
        flat += b->elems[k] * sizeof(float);
    }
    stoke_status s = d->grads->stream_ordered
                         ? d->grads->start(d, b->index, st->buf, st->n, ops->stream)
                         : dist_comm_start(d, b->index);
    if (s != STOKE_OK)
        return s;
    st->started = true;
    d->stats.reductions++;
    d->stats.bytes += (double)b->bytes;
    if (d->grads->stream_ordered)
        copy_back(d, ops, b); /* behind the mean on the stream */
    return STOKE_OK;
}

static stoke_status dist_prepare(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b,
                                 int n)
{
    stoke_dist *d = self;
    d->stage = calloc(n > 0 ? (size_t)n : 1, sizeof *d->stage);
    if (!d->stage)
        return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory for %d buckets", n);
    d->nstage = n;
    d->buckets = b;
    for (int k = 0; k < n; k++) {
        d->stage[k].n = b[k].bytes / sizeof(float);
        d->stage[k].buf = b[k].bytes ? ops->alloc(ops->ctx, b[k].bytes) : NULL;
        if (b[k].bytes && !d->stage[k].buf) {
            stage_release(d, ops);
            return stoke_fail(STOKE_ERR_NOMEM,
                              "dist: cannot allocate %zu bytes to stage gradient bucket %d",
                              b[k].bytes, k);
        }
    }
    return STOKE_OK;
}

/* Every started reduction complete and (host-completed) scattered back. */
static stoke_status complete(stoke_dist *d, const stoke_grad_ops *ops)
{
    double t0 = stoke_wall_time();
    stoke_status s = d->grads->stream_ordered ? d->grads->wait(d, ops->stream) : dist_comm_wait(d);
    d->stats.exposed_s += stoke_wall_time() - t0;
    if (s != STOKE_OK)
        return s;
    for (int k = 0; k < d->nstage; k++) {
        if (!d->stage[k].started)
            continue;
        if (!d->grads->stream_ordered)
            copy_back(d, ops, &d->buckets[k]);
        d->stage[k].started = false;
    }
    return STOKE_OK;
}

static stoke_status dist_reduce(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b)
{
    stoke_dist *d = self;
    d->replays = d->sync;
    if (!d->sync)
        return STOKE_OK;
    double t0 = stoke_wall_time();
    stoke_status s = STOKE_OK;
    /* started already this step (a device's captured backward reduces at every
     * micro-batch): the host-completed one must land before its buffer is refilled */
    if (d->stage[b->index].started && !d->grads->stream_ordered)
        s = complete(d, ops);
    if (s == STOKE_OK)
        s = start_bucket(d, ops, b);
    d->stats.reduce_s += stoke_wall_time() - t0;
    return s;
}

static stoke_status dist_finish(void *self, const stoke_grad_ops *ops)
{
    stoke_dist *d = self;
    double t0 = stoke_wall_time();
    stoke_status s = STOKE_OK;
    /* the buckets no backward started this step (its last micro-batch was not synced:
     * an epoch's short tail) are reduced now, unhidden */
    bool any = false;
    for (int k = 0; k < d->nstage; k++)
        any |= d->stage[k].started;
    any |= d->grads->stream_ordered && d->replays; /* a replayed graph reduced them */
    for (int k = 0; s == STOKE_OK && !any && k < d->nstage; k++)
        s = start_bucket(d, ops, &d->buckets[k]);
    if (s == STOKE_OK)
        s = complete(d, ops);
    d->stats.steps++;
    d->stats.finish_s += stoke_wall_time() - t0;
    return s;
}

static void dist_release(void *self, const stoke_grad_ops *ops) { stage_release(self, ops); }

stoke_grad_reducer stoke_dist_reducer(stoke_dist *d)
{
    return (stoke_grad_reducer){.self = d,
                                .prepare = dist_prepare,
                                .reduce = dist_reduce,
                                .finish = dist_finish,
                                .release = dist_release};
}
