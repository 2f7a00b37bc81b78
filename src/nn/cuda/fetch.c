/* fetch.c - what the host reads of a forward and of an optimizer step: queued behind
 * the work as copies into pinned memory and a fence event, waited for only when the
 * host needs the values. The model queues a step's forward, backward and updates back
 * to back and reads the forward's losses once the backward is queued, the step's
 * decision once the next batch's forward is: the device always has work queued while
 * the host waits. */
#include "nn/cuda/ops.h"

#include <stdlib.h>

/* The host's copies of the first n flags, or none before the first forward. */
static int flags_used(const cuda_ctx *c)
{
    int last = -1;
    for (int i = 0; i < c->nchecks; i++)
        if (c->checks[i].node)
            last = i;
    return last + 1;
}

static stoke_status values_room(cuda_ctx *c, int n)
{
    if (n <= c->nvalues)
        return STOKE_OK;
    /* a copy into the old buffer may be queued */
    stoke_status st = stoke_cudart_stream_sync(c->rt, c->L.stream);
    float *v = NULL;
    if (st == STOKE_OK)
        st = stoke_cudart_host_alloc(c->rt, (size_t)n * sizeof *v, (void **)&v);
    if (st != STOKE_OK)
        return st;
    stoke_cudart_host_free(c->rt, c->values_host);
    c->values_host = v;
    c->nvalues = n;
    return STOKE_OK;
}

stoke_status cuda_forward_fetch(cuda_ctx *c, const float *const *values, int n)
{
    stoke_status st = values_room(c, n);
    int nf = c->nflags = flags_used(c);
    if (st == STOKE_OK && nf > 0)
        st = stoke_cudart_copy_to_host_async(c->rt, c->flags_host, c->flags,
                                             (size_t)nf * sizeof *c->flags_host, c->L.stream);
    for (int k = 0; k < n && st == STOKE_OK; k++)
        st = stoke_cudart_copy_to_host_async(c->rt, c->values_host + k, values[k], sizeof(float),
                                             c->L.stream);
    if (st == STOKE_OK)
        st = stoke_cudart_event_record(c->rt, c->fence[CUDA_FETCH_FORWARD], c->L.stream);
    cuda_note(c, st);
    return st;
}

/* Waits for fence f; then the first error noted since the last check, if any. */
static stoke_status fence_wait(cuda_ctx *c, int f)
{
    cuda_note(c, stoke_cudart_event_sync(c->rt, c->fence[f]));
    stoke_status st = c->err;
    c->err = STOKE_OK;
    return st != STOKE_OK ? stoke_fail(st, "%s", c->err_msg) : STOKE_OK;
}

stoke_status cuda_forward_check(cuda_ctx *c, int *node, float *values)
{
    *node = -1;
    stoke_status st = fence_wait(c, CUDA_FETCH_FORWARD);
    if (st != STOKE_OK)
        return st;
    for (int k = 0; k < c->nvalues && values; k++)
        values[k] = c->values_host[k];
    for (int i = 0; i < c->nflags; i++) { /* the flags fetched */
        const cuda_input_check *k = &c->checks[i];
        int32_t flag = c->flags_host[i];
        if (!k->node || flag <= 0)
            continue;
        *node = i;
        st = k->node->op == STOKE_NN_EMBEDDING ? cuda_emb_bad(c, k, flag)
                                               : cuda_loss_bad(c, k, flag);
        return cuda_layer_fail(st, k->node);
    }
    return STOKE_OK;
}

/* Every tensor's sum of squares into its slot of c->totals (trees of sums, reduce.c:
 * the scratch reused, the stream orders the launches), then the decision. c->totals
 * grows on the step's first, uncaptured run: a capture never allocates. */
stoke_status cuda_step_decide(cuda_ctx *c, const float *const *x, const size_t *n, int count)
{
    stoke_status st = cuda_ctx_totals(c, count > 0 ? count : 1);
    if (st == STOKE_OK)
        st = cuda_sum_squares_many(c, x, n, count, c->totals);
    nk_step_decide_args d = {c->step, c->totals, c->result, count};
    if (st == STOKE_OK)
        st = CUDA_RUN(c, step_decide, 1, &d);
    return st;
}

stoke_status cuda_step_fetch(cuda_ctx *c)
{
    stoke_status st = stoke_cudart_copy_to_host_async(c->rt, c->result_host, c->result,
                                                      sizeof *c->result_host, c->L.stream);
    if (st == STOKE_OK)
        st = stoke_cudart_event_record(c->rt, c->fence[CUDA_FETCH_STEP], c->L.stream);
    cuda_note(c, st);
    return st;
}

stoke_status cuda_step_result(cuda_ctx *c, nk_step_result *out)
{
    stoke_status st = fence_wait(c, CUDA_FETCH_STEP);
    *out = *c->result_host;
    return st;
}
