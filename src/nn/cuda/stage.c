/* stage.c - writes from host memory without waiting: the bytes are copied into a
 * pinned slot and the device copy is queued from there. A copy from pageable memory
 * returns only once its source is consumed, which for a batch's targets means waiting
 * for everything queued before it: the previous step. */
#include "nn/cuda/ops.h"

#include <string.h>

static stoke_status wait_write(cuda_ctx *c, void *dev, const void *host, size_t bytes)
{
    stoke_status st = stoke_cudart_copy_to_device_async(c->rt, dev, host, bytes, c->L.stream);
    return st == STOKE_OK ? stoke_cudart_stream_sync(c->rt, c->L.stream) : st;
}

stoke_status cuda_stage_write(cuda_ctx *c, void *dev, const void *host, size_t bytes)
{
    /* a capture records no host memory that changes under it */
    if (bytes > CUDA_STAGE_MAX || c->L.capturing)
        return wait_write(c, dev, host, bytes);
    struct cuda_stage *s = &c->stage[c->next_stage];
    stoke_status st = STOKE_OK;
    if (!s->event)
        st = stoke_cudart_event_create(c->rt, &s->event);
    if (st == STOKE_OK && s->pending) /* CUDA_STAGES writes ago: long done, as a rule */
        st = stoke_cudart_event_sync(c->rt, s->event);
    s->pending = false;
    if (st == STOKE_OK && s->cap < bytes) {
        stoke_cudart_host_free(c->rt, s->host);
        s->host = NULL;
        s->cap = 0;
        size_t cap = bytes < 4096 ? 4096 : bytes;
        st = stoke_cudart_host_alloc(c->rt, cap, &s->host);
        if (st == STOKE_OK)
            s->cap = cap;
    }
    if (st != STOKE_OK)
        return st;
    memcpy(s->host, host, bytes);
    st = stoke_cudart_copy_to_device_async(c->rt, dev, s->host, bytes, c->L.stream);
    if (st == STOKE_OK)
        st = stoke_cudart_event_record(c->rt, s->event, c->L.stream);
    s->pending = st == STOKE_OK;
    c->next_stage = (c->next_stage + 1) % CUDA_STAGES;
    return st;
}

void cuda_stages_free(cuda_ctx *c)
{
    for (int i = 0; i < CUDA_STAGES; i++) {
        struct cuda_stage *s = &c->stage[i];
        stoke_cudart_host_free(c->rt, s->host);
        if (s->event)
            stoke_cudart_event_destroy(c->rt, s->event);
        memset(s, 0, sizeof *s);
    }
}
