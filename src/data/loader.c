/* loader.c - worker threads that read and transform samples straight into a ring of
 * batch slots, handed out in sampler order; pinned slots and an asynchronous copy to
 * double-buffered device slots where the CUDA runtime allows; timings of every batch. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset_impl.h"
#include "data/transform_impl.h"
#include "stoke/data.h"
#include "stoke/hw.h"
#include "stoke/monitor.h"

#define CHUNK       32   /* samples a worker claims at once */
#define WAIT_WINDOW 1024 /* batches kept for the p95 */
#define MAX_WORKERS 256

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY };

typedef struct slot {
    int64_t seq; /* the batch it holds, counted from the loader's start */
    int state;
    int64_t epoch, index, size;
    int64_t next_chunk;        /* samples claimed so far */
    int64_t done;              /* samples finished */
    int inflight;              /* chunks claimed and not finished */
    uint64_t busy_ns;          /* the workers' time on its chunks so far */
    stoke_sampler_state after; /* the sampler's state after this batch */
    stoke_status err;
    int64_t err_pos; /* position in the batch of the failed sample */
    char msg[768];
    int64_t *samples;
    unsigned char *inputs, *targets; /* host, pinned when on a device */
} slot;

typedef struct dslot {
    void *inputs, *targets; /* device memory */
    void *event;
    int64_t seq;  /* batch copied into it; -1 none */
    bool pending; /* copy issued and not yet synchronized */
} dslot;

/* opts.hold: a batch's buffers handed to the caller. The slot that filled them gets
 * this set's spare buffers in exchange, so the ring goes on without ever writing
 * into memory the caller holds; released sets wait in a pool for the next exchange. */
typedef struct held {
    unsigned char *inputs, *targets; /* host, pinned when on a device */
    void *dinputs, *dtargets;        /* device, when on a device */
    struct held *next;               /* in the pool */
    struct held *all;                /* every set, for destroy */
} held;

typedef struct worker {
    struct stoke_loader *l;
    pthread_t thread;
    int id;
    unsigned char *raw; /* one sample as read, before the transform */
    void *scratch;
    uint64_t busy_ns; /* guarded by the loader's mutex */
} worker;

struct stoke_loader {
    stoke_dataset *d;
    uint64_t delay_ns;      /* opts.sample_delay_us, CPU time spent per sample */
    stoke_sampler *sampler; /* under mu */
    stoke_transform *tf;
    uint64_t seed;
    int64_t bs;
    size_t raw_bytes, in_bytes, tg_bytes; /* per sample: as read, in the slot, target */
    bool originals; /* samples read from the originals (stoke_transform_read) */
    stoke_shape in_shape;
    stoke_dtype in_dtype;
    int K;
    slot *slots;

    pthread_mutex_t mu;
    pthread_cond_t work_cv, ready_cv;
    int64_t open_seq;  /* next batch to take from the sampler */
    int64_t claim_seq; /* batch whose chunks are being claimed */
    int64_t released;  /* every batch before it has left the ring */
    int64_t open_epoch, open_index;
    bool stop, failed;

    int nworkers;
    bool threads_running;
    worker *workers; /* nworkers, or 1 for the consumer when nworkers is 0 */

    /* Consumer side (one thread). */
    int64_t next_seq; /* batch to hand out next */
    stoke_sampler_state state;
    stoke_status err;
    char errmsg[1024];

    /* Device. */
    stoke_cudart *rt;
    bool on_device;
    int device;
    char reason[512];
    void *stream;
    dslot ds[2];
    void *consumer_event; /* the caller's, waited on before a device slot is reused */

    /* opts.hold (pool, counts under mu). */
    bool hold;
    held *pool, *all;
    int held_out, buffers;

    /* Instrumentation (consumer side, except busy_ns). */
    uint64_t start_ns;
    int64_t batches, samples;
    uint64_t wait_sum_ns, wait_max_ns;
    uint64_t wait_carry_ns; /* waited by calls that timed out, for the batch they wait for */
    /* The wait in progress, for the pipeline's running total (pipeline_wait_ns): when
     * the consumer's current call began (0: not in one), and the highest total told. */
    uint64_t wait_start_ns, wait_told_ns;
    float waits_ms[WAIT_WINDOW];
    float produce_ms[WAIT_WINDOW]; /* a batch's production time (its chunks', summed) */
    int64_t produced;              /* batches produced (under mu) */
    int64_t fill_sum;
    int fill_min, fill_max;
};

/* ---- workers -------------------------------------------------------------------- */

typedef struct chunk {
    slot *s;
    int64_t start, n;
} chunk;

/* Takes the next batch from the sampler into its slot. Called with mu held. */
static void open_batch(stoke_loader *l)
{
    int64_t g = l->open_seq++;
    slot *s = &l->slots[g % l->K];
    int64_t epoch;
    s->seq = g;
    s->size = stoke_sampler_next(l->sampler, s->samples, &epoch);
    if (epoch != l->open_epoch)
        l->open_epoch = epoch, l->open_index = 0;
    s->epoch = epoch;
    s->index = l->open_index++;
    s->after = stoke_sampler_get_state(l->sampler);
    s->next_chunk = s->done = 0;
    s->busy_ns = 0;
    s->inflight = 0;
    s->err = STOKE_OK;
    s->msg[0] = '\0';
    s->state = s->size == 0 ? SLOT_READY : SLOT_FILLING;
    if (s->size == 0)
        pthread_cond_broadcast(&l->ready_cv);
}

/* Claims up to CHUNK samples of the oldest batch with unclaimed ones, opening batches
 * as ring slots come free. Called with mu held. */
static bool claim(stoke_loader *l, chunk *c)
{
    if (l->failed || l->stop)
        return false;
    for (;;) {
        if (l->claim_seq == l->open_seq) {
            if (l->open_seq >= l->released + l->K)
                return false;
            open_batch(l);
        }
        slot *s = &l->slots[l->claim_seq % l->K];
        if (s->next_chunk < s->size) {
            c->s = s;
            c->start = s->next_chunk;
            c->n = s->size - s->next_chunk < CHUNK ? s->size - s->next_chunk : CHUNK;
            s->next_chunk += c->n;
            s->inflight++;
            return true;
        }
        l->claim_seq++;
    }
}

/* opts.sample_delay_us: spins on the thread's own CPU clock, not the wall clock or a
 * sleep, so a sample costs exactly `ns` of CPU however busy the machine is: the cost of
 * a decode, which takes a core and so stops scaling with workers at the core count
 * (a sleep would model slow storage instead, scaling with any number of workers). */
static void spend_cpu(uint64_t ns)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    uint64_t end = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec + ns;
    do
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    while ((uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec < end);
}

/* Reads and transforms a chunk's samples into their places in the slot; mu not held.
 * On failure fills the slot's message (the chunk owns its samples, and only one
 * chunk of a batch can fail first: the message is written under mu in finish). */
static stoke_status run_chunk(stoke_loader *l, worker *w, const chunk *c, int64_t *pos, char *msg,
                              size_t msize)
{
    slot *s = c->s;
    for (int64_t j = c->start; j < c->start + c->n; j++) {
        int64_t i = s->samples[j];
        unsigned char *dst = s->inputs + (size_t)j * l->in_bytes;
        void *tg = l->tg_bytes ? s->targets + (size_t)j * l->tg_bytes : NULL;
        stoke_status st = l->originals ? stoke_transform_read(l->tf, l->d, i, w->raw, dst, tg,
                                                              w->scratch, l->seed, s->epoch)
                                       : l->d->vt->read(l->d, i, l->tf ? w->raw : dst, tg);
        if (st != STOKE_OK) {
            *pos = j;
            snprintf(msg, msize, "%s (sample %" PRId64 ", batch %" PRId64 " of epoch %" PRId64 ")",
                     stoke_last_error(), i, s->index, s->epoch);
            return st;
        }
        if (l->tf && !l->originals)
            stoke_transform_apply(l->tf, w->raw, dst, w->scratch, l->seed, s->epoch, i);
        if (l->delay_ns)
            spend_cpu(l->delay_ns);
    }
    return STOKE_OK;
}

/* Records a finished chunk. Called with mu held. */
static void finish(stoke_loader *l, const chunk *c, stoke_status st, int64_t pos, const char *msg,
                   uint64_t busy_ns)
{
    slot *s = c->s;
    s->inflight--;
    s->done += c->n;
    s->busy_ns += busy_ns;
    if (st != STOKE_OK) {
        /* Chunks finish out of order; the error of the earliest sample wins so the
         * message does not depend on the number of workers. */
        if (s->err == STOKE_OK || pos < s->err_pos) {
            s->err = st;
            s->err_pos = pos;
            snprintf(s->msg, sizeof s->msg, "%s", msg);
        }
        l->failed = true;
    }
    if (s->done == s->size) {
        s->state = SLOT_READY;
        l->produce_ms[l->produced++ % WAIT_WINDOW] = (float)(s->busy_ns / 1e6);
    }
    /* Wake the consumer only when there is something for it: a batch or an error. */
    if (s->state == SLOT_READY || (s->err != STOKE_OK && s->inflight == 0))
        pthread_cond_signal(&l->ready_cv);
}

static void do_one(stoke_loader *l, worker *w, const chunk *c)
{
    char msg[768];
    int64_t pos = 0;
    pthread_mutex_unlock(&l->mu);
    uint64_t t0 = stoke_now_ns();
    stoke_status st = run_chunk(l, w, c, &pos, msg, sizeof msg);
    uint64_t t1 = stoke_now_ns();
    pthread_mutex_lock(&l->mu);
    w->busy_ns += t1 - t0;
    finish(l, c, st, pos, msg, t1 - t0);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    stoke_loader *l = w->l;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        chunk c;
        if (claim(l, &c))
            do_one(l, w, &c);
        else
            pthread_cond_wait(&l->work_cv, &l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void stop_workers(stoke_loader *l)
{
    if (!l->threads_running)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nworkers; i++)
        pthread_join(l->workers[i].thread, NULL);
    l->threads_running = false;
}

void stoke_loader_stop(stoke_loader *l)
{
    stop_workers(l);
    if (l->err == STOKE_OK) {
        l->err = STOKE_ERR_ARG;
        snprintf(l->errmsg, sizeof l->errmsg, "loader: stopped");
    }
}

/* ---- device ------------------------------------------------------------------------ */

static void *host_alloc(stoke_loader *l, size_t n)
{
    if (l->on_device) {
        void *p = NULL;
        if (stoke_cudart_host_alloc(l->rt, n, &p) != STOKE_OK)
            snprintf(l->reason, sizeof l->reason, "%s", stoke_last_error());
        return p;
    }
    return aligned_alloc(64, (n + 63) / 64 * 64 + 64);
}

static void host_free(stoke_loader *l, void *p)
{
    if (l->on_device)
        stoke_cudart_host_free(l->rt, p);
    else
        free(p);
}

static void device_teardown(stoke_loader *l)
{
    if (!l->rt)
        return;
    for (int k = 0; k < 2; k++) {
        dslot *d = &l->ds[k];
        if (d->event && d->pending)
            stoke_cudart_event_sync(l->rt, d->event);
        stoke_cudart_event_destroy(l->rt, d->event);
        stoke_cudart_free(l->rt, d->inputs);
        stoke_cudart_free(l->rt, d->targets);
        memset(d, 0, sizeof *d);
    }
    stoke_cudart_stream_destroy(l->rt, l->stream);
    l->stream = NULL;
}

/* Sets up the stream, events and device slots, or says in l->reason why not. */
static void device_setup(stoke_loader *l, int dev)
{
    stoke_cudart *rt = NULL;
    if (stoke_cudart_open(&rt) != STOKE_OK) {
        snprintf(l->reason, sizeof l->reason, "%s", stoke_last_error());
        return;
    }
    l->rt = rt;
    int count = 0;
    if (stoke_cudart_device_count(rt, &count) != STOKE_OK) {
        snprintf(l->reason, sizeof l->reason, "%s", stoke_last_error());
        return;
    }
    if (dev < 0 || dev >= count) {
        snprintf(l->reason, sizeof l->reason, "CUDA device %d requested, %d present", dev, count);
        return;
    }
    stoke_status st = stoke_cudart_check_device_api(rt);
    if (st != STOKE_OK) {
        snprintf(l->reason, sizeof l->reason, "%s", stoke_last_error());
        return;
    }
    st = stoke_cudart_set_device(rt, dev);
    if (st == STOKE_OK)
        st = stoke_cudart_stream_create(rt, &l->stream);
    for (int k = 0; k < 2 && st == STOKE_OK; k++) {
        l->ds[k].seq = -1;
        st = stoke_cudart_event_create(rt, &l->ds[k].event);
        if (st == STOKE_OK)
            st = stoke_cudart_malloc(rt, (size_t)l->bs * l->in_bytes, &l->ds[k].inputs);
        if (st == STOKE_OK && l->tg_bytes)
            st = stoke_cudart_malloc(rt, (size_t)l->bs * l->tg_bytes, &l->ds[k].targets);
    }
    if (st != STOKE_OK) {
        snprintf(l->reason, sizeof l->reason, "%s", stoke_last_error());
        device_teardown(l);
        return;
    }
    l->on_device = true;
    l->device = dev;
    l->reason[0] = '\0';
}

/* Issues the copy of host slot s into device slot k and records its event. */
static stoke_status issue_copy(stoke_loader *l, slot *s, int k)
{
    stoke_cudart *rt = l->rt;
    dslot *d = &l->ds[k];
    if (d->pending) { /* never overwrite a slot whose copy may still be running */
        stoke_status st = stoke_cudart_event_sync(rt, d->event);
        if (st != STOKE_OK)
            return st;
        d->pending = false;
    }
    stoke_status st = STOKE_OK;
    if (d->seq >= 0 && l->consumer_event) /* the caller's kernels on d->seq come first */
        st = stoke_cudart_stream_wait(rt, l->stream, l->consumer_event);
    if (st == STOKE_OK)
        st = stoke_cudart_copy_to_device_async(rt, d->inputs, s->inputs,
                                               (size_t)s->size * l->in_bytes, l->stream);
    if (st == STOKE_OK && l->tg_bytes)
        st = stoke_cudart_copy_to_device_async(rt, d->targets, s->targets,
                                               (size_t)s->size * l->tg_bytes, l->stream);
    if (st == STOKE_OK)
        st = stoke_cudart_event_record(rt, d->event, l->stream);
    if (st != STOKE_OK) {
        char m[512]; /* the message names the CUDA call; say which batch and device */
        snprintf(m, sizeof m, "%s", stoke_last_error());
        return stoke_fail(st, "batch %" PRId64 " to device %d: %s", s->index, l->device, m);
    }
    d->seq = s->seq;
    d->pending = true;
    return STOKE_OK;
}

/* ---- create / destroy ----------------------------------------------------------------- */

void stoke_loader_destroy(stoke_loader *l)
{
    if (!l)
        return;
    stop_workers(l);
    device_teardown(l);
    if (l->slots)
        for (int k = 0; k < l->K; k++) {
            host_free(l, l->slots[k].inputs);
            host_free(l, l->slots[k].targets);
            free(l->slots[k].samples);
        }
    free(l->slots);
    for (held *h = l->all, *n; h; h = n) {
        n = h->all;
        host_free(l, h->inputs);
        host_free(l, h->targets);
        if (l->rt) {
            stoke_cudart_free(l->rt, h->dinputs);
            stoke_cudart_free(l->rt, h->dtargets);
        }
        free(h);
    }
    if (l->workers)
        for (int i = 0; i < (l->nworkers ? l->nworkers : 1); i++) {
            free(l->workers[i].raw);
            free(l->workers[i].scratch);
        }
    free(l->workers);
    stoke_cudart_close(l->rt);
    stoke_sampler_destroy(l->sampler);
    stoke_transform_destroy(l->tf);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->work_cv);
    pthread_cond_destroy(&l->ready_cv);
    free(l);
}

int stoke_loader_slots(const stoke_loader_opts *o)
{
    int k = o->prefetch ? o->prefetch : 2 * o->workers + 2;
    return k < 2 ? 2 : k;
}

stoke_status stoke_loader_create(stoke_dataset *d, const stoke_loader_opts *o, stoke_loader **out)
{
    *out = NULL;
    if (o->workers < 0 || o->workers > MAX_WORKERS)
        return stoke_fail(STOKE_ERR_ARG, "loader: %d workers (0..%d)", o->workers, MAX_WORKERS);
    if (o->prefetch < 0 || o->prefetch > 4096)
        return stoke_fail(STOKE_ERR_ARG, "loader: prefetch %d (0..4096)", o->prefetch);
    if (o->sample_delay_us < 0 || o->sample_delay_us > 1000000)
        return stoke_fail(STOKE_ERR_ARG, "loader: sample delay %d us (0..1000000)",
                          o->sample_delay_us);
    stoke_loader *l = calloc(1, sizeof *l);
    if (!l)
        return stoke_fail(STOKE_ERR_NOMEM, "loader: out of memory");
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    /* The consumer's timed waits use the monotonic clock: a wall-clock step must not
     * stretch or cut them. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->ready_cv, &ca);
    pthread_condattr_destroy(&ca);
    l->d = d;
    l->delay_ns = (uint64_t)o->sample_delay_us * 1000u;
    l->hold = o->hold;
    l->seed = o->sampler.seed;
    l->bs = o->sampler.batch_size;
    l->nworkers = o->workers;
    l->K = stoke_loader_slots(o);
    l->fill_min = 1 << 30;
    l->start_ns = stoke_now_ns();
    snprintf(l->reason, sizeof l->reason, "no device requested");
    const stoke_dataset_info *info = &d->info;
    stoke_status st = stoke_sampler_create(info->count, &o->sampler, &l->sampler);
    if (st == STOKE_OK)
        st = stoke_sampler_set_state(l->sampler, o->start);
    l->state = o->start;
    l->open_epoch = o->start.epoch;
    l->open_index = (o->start.index + l->bs - 1) / (l->bs > 0 ? l->bs : 1);
    l->raw_bytes = info->input_bytes;
    l->tg_bytes = info->target_bytes;
    l->in_bytes = info->input_bytes;
    l->in_shape = info->input_shape;
    l->in_dtype = info->input_dtype;
    if (st == STOKE_OK && o->transform) {
        stoke_transform_opts to = *o->transform;
        if (to.in_shape.ndim == 0) { /* unset: the dataset's */
            to.in_shape = info->input_shape;
            to.in_dtype = info->input_dtype;
        }
        st = stoke_transform_create(&to, &l->tf);
        if (st == STOKE_OK &&
            (stoke_shape_elems(&to.in_shape) * (int64_t)stoke_dtype_size(to.in_dtype) !=
             (int64_t)info->input_bytes))
            st =
                stoke_fail(STOKE_ERR_ARG,
                           "loader: the transform's input of %" PRId64
                           " bytes does not match the dataset's samples of %zu bytes",
                           stoke_shape_elems(&to.in_shape) * (int64_t)stoke_dtype_size(to.in_dtype),
                           info->input_bytes);
        if (st == STOKE_OK && stoke_transform_on_originals(l->tf, d)) {
            l->originals = true;
            size_t wb = stoke_transform_window_bytes(l->tf);
            if (wb > l->raw_bytes)
                l->raw_bytes = wb;
        }
        if (st == STOKE_OK) {
            l->in_bytes = stoke_transform_out_bytes(l->tf);
            l->in_shape = stoke_transform_out_shape(l->tf);
            l->in_dtype = stoke_transform_out_dtype(l->tf);
        }
    }
    /* The ring is allocated up front and filled as fast as the workers go: one that
     * cannot fit would grow toward the OOM killer, so it is refused with its numbers. */
    double ring =
        (double)l->K * (double)l->bs * (double)(l->in_bytes + l->tg_bytes + sizeof(int64_t));
    if (st == STOKE_OK && o->memory_limit > 0 && ring > (double)o->memory_limit) {
        char a[32], b[32];
        st = stoke_fail(STOKE_ERR_NOMEM,
                        "loader: %d slots (prefetch) of %" PRId64 " samples "
                        "(the batch) take %s, and %s is left for them: lower the prefetch or "
                        "the batch",
                        l->K, l->bs, stoke_format_bytes(ring, a, sizeof a),
                        stoke_format_bytes((double)o->memory_limit, b, sizeof b));
    }
    if (st == STOKE_OK && o->use_device)
        device_setup(l, o->device);
    if (st == STOKE_OK) {
        l->slots = calloc((size_t)l->K, sizeof *l->slots);
        int nw = l->nworkers ? l->nworkers : 1;
        l->workers = calloc((size_t)nw, sizeof *l->workers);
        if (!l->slots || !l->workers)
            st = stoke_fail(STOKE_ERR_NOMEM, "loader: out of memory");
        for (int k = 0; st == STOKE_OK && k < l->K; k++) {
            slot *s = &l->slots[k];
            s->seq = -1;
            s->samples = malloc((size_t)l->bs * sizeof *s->samples);
            s->inputs = host_alloc(l, (size_t)l->bs * l->in_bytes);
            if (l->tg_bytes)
                s->targets = host_alloc(l, (size_t)l->bs * l->tg_bytes);
            if (!s->samples || !s->inputs || (l->tg_bytes && !s->targets)) {
                if (l->on_device && s->samples) { /* pinned memory ran out: say so */
                    st = stoke_fail(STOKE_ERR_NOMEM, "loader: %s", l->reason);
                } else {
                    st = stoke_fail(STOKE_ERR_NOMEM,
                                    "loader: cannot allocate %d slots of %" PRId64 " samples", l->K,
                                    l->bs);
                }
            }
        }
        size_t scratch = l->tf ? stoke_transform_scratch_bytes(l->tf) : 0;
        for (int i = 0; st == STOKE_OK && i < nw; i++) {
            worker *w = &l->workers[i];
            w->l = l;
            w->id = i;
            if (l->tf &&
                (!(w->raw = malloc(l->raw_bytes)) || (scratch && !(w->scratch = malloc(scratch)))))
                st = stoke_fail(STOKE_ERR_NOMEM, "loader: out of memory for worker buffers");
        }
    }
    for (int i = 0; st == STOKE_OK && i < l->nworkers; i++) {
        int rc = pthread_create(&l->workers[i].thread, NULL, worker_main, &l->workers[i]);
        if (rc != 0) {
            l->nworkers = i; /* join the ones that started */
            st =
                stoke_fail(STOKE_ERR_SYSTEM, "loader: cannot start worker %d: %s", i, strerror(rc));
        }
        l->threads_running = true;
    }
    if (st != STOKE_OK) {
        stoke_loader_destroy(l);
        return st;
    }
    *out = l;
    return STOKE_OK;
}

/* ---- the consumer ---------------------------------------------------------------------- */

static bool batch_done(const slot *s)
{
    return s->state == SLOT_READY || (s->err != STOKE_OK && s->inflight == 0);
}

static stoke_status fail_loader(stoke_loader *l, stoke_status st, const char *msg)
{
    l->err = st;
    snprintf(l->errmsg, sizeof l->errmsg, "%s", msg);
    pthread_mutex_lock(&l->mu);
    l->wait_start_ns = 0; /* no batch will end the wait */
    pthread_mutex_unlock(&l->mu);
    stop_workers(l);
    return stoke_fail(st, "%s", l->errmsg);
}

/* opts.hold: a set of buffers to exchange with the slot being handed out, from the
 * pool or newly allocated (by the consumer's thread only, so outside mu). */
static held *take_held(stoke_loader *l)
{
    pthread_mutex_lock(&l->mu);
    held *h = l->pool;
    if (h)
        l->pool = h->next;
    pthread_mutex_unlock(&l->mu);
    if (h)
        return h;
    h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->inputs = host_alloc(l, (size_t)l->bs * l->in_bytes);
    h->targets = l->tg_bytes ? host_alloc(l, (size_t)l->bs * l->tg_bytes) : NULL;
    bool ok = h->inputs && (!l->tg_bytes || h->targets);
    if (ok && l->on_device) {
        ok = stoke_cudart_malloc(l->rt, (size_t)l->bs * l->in_bytes, &h->dinputs) == STOKE_OK &&
             (!l->tg_bytes ||
              stoke_cudart_malloc(l->rt, (size_t)l->bs * l->tg_bytes, &h->dtargets) == STOKE_OK);
    }
    pthread_mutex_lock(&l->mu);
    h->all = l->all; /* listed even when incomplete, so destroy frees what was allocated */
    l->all = h;
    l->buffers++;
    pthread_mutex_unlock(&l->mu);
    return ok ? h : NULL; /* an incomplete set stays off the pool */
}

void stoke_loader_release(stoke_loader *l, void *token)
{
    held *h = token;
    if (!h)
        return;
    pthread_mutex_lock(&l->mu);
    h->next = l->pool;
    l->pool = h;
    l->held_out--;
    pthread_mutex_unlock(&l->mu);
}

static void swap_ptr(void *a, void *b)
{
    void *t;
    memcpy(&t, a, sizeof t);
    memcpy(a, b, sizeof t);
    memcpy(b, &t, sizeof t);
}

/* Waits until batch g's slot is done; with a deadline (> 0), gives up at it. Called
 * with mu held; false on a timeout. */
static bool wait_batch(stoke_loader *l, int64_t g, slot *s, uint64_t deadline_ns, bool *bug)
{
    while (!(g < l->open_seq && s->seq == g && batch_done(s))) {
        chunk c;
        if (l->nworkers == 0) {
            if (!claim(l, &c)) {
                /* batch g was opened empty (an epoch with nothing for this rank:
                 * evaluation's exact shards): done, nothing to claim */
                if (g < l->open_seq && s->seq == g && batch_done(s))
                    continue;
                *bug = true; /* otherwise it can always open its batch */
                return true;
            }
            /* The work is done here, a chunk at a time: each call makes progress
             * even with a deadline already past. */
            do_one(l, &l->workers[0], &c);
            if (deadline_ns && stoke_now_ns() >= deadline_ns && !(s->seq == g && batch_done(s)))
                return false;
        } else if (deadline_ns && stoke_now_ns() >= deadline_ns) {
            return false;
        } else if (deadline_ns) {
            struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                                  .tv_nsec = (long)(deadline_ns % 1000000000u)};
            pthread_cond_timedwait(&l->ready_cv, &l->mu, &ts);
        } else {
            pthread_cond_wait(&l->ready_cv, &l->mu);
        }
    }
    return true;
}

static stoke_status next_batch(stoke_loader *l, stoke_batch *b, uint64_t deadline_ns)
{
    memset(b, 0, sizeof *b);
    if (l->err != STOKE_OK)
        return stoke_fail(l->err, "%s", l->errmsg);
    uint64_t t0 = stoke_now_ns();
    int64_t g = l->next_seq;
    if (l->on_device) {
        /* The previous batch's copy has had a whole step to finish: make sure it has,
         * so its host slot can be refilled. */
        for (int k = 0; k < 2; k++) {
            dslot *d = &l->ds[k];
            if (d->pending && d->seq < g) {
                stoke_status st = stoke_cudart_event_sync(l->rt, d->event);
                if (st != STOKE_OK) {
                    char m[256];
                    snprintf(m, sizeof m, "%s", stoke_last_error());
                    return fail_loader(l, st, m);
                }
                d->pending = false;
            }
        }
    }
    pthread_mutex_lock(&l->mu);
    l->wait_start_ns = t0;
    /* Everything before g has been consumed (and copied): its slots come free. */
    if (l->released < g) {
        l->released = g;
        pthread_cond_broadcast(&l->work_cv);
    }
    int fill = 0;
    for (int64_t s = g; s < l->open_seq; s++)
        fill += l->slots[s % l->K].state == SLOT_READY;
    slot *s = &l->slots[g % l->K];
    bool bug = false;
    bool ready = wait_batch(l, g, s, deadline_ns, &bug);
    if (!ready || bug) {
        l->wait_carry_ns += stoke_now_ns() - t0;
        l->wait_start_ns = 0;
    }
    pthread_mutex_unlock(&l->mu);
    if (bug)
        return fail_loader(l, STOKE_ERR_SYSTEM, "loader: batch not claimable (bug)");
    if (!ready) {
        return stoke_fail(STOKE_ERR_TIMEOUT, "loader: batch %" PRId64 " not ready yet", g);
    }
    if (s->err != STOKE_OK) {
        char m[1024];
        snprintf(m, sizeof m, "%s", s->msg);
        return fail_loader(l, s->err, m);
    }
    b->epoch = s->epoch;
    b->index = s->index;
    b->size = s->size;
    b->samples = s->samples;
    b->inputs = s->inputs;
    b->targets = l->tg_bytes ? s->targets : NULL;
    b->host_inputs = s->inputs;
    b->host_targets = b->targets;
    b->input_shape = l->in_shape;
    b->input_dtype = l->in_dtype;
    b->input_bytes = l->in_bytes;
    b->target_bytes = l->tg_bytes;
    if (l->on_device && s->size > 0) {
        int k = l->ds[0].seq == g ? 0 : l->ds[1].seq == g ? 1 : -1;
        if (k < 0) { /* not prefetched: copy now into the slot not holding g-1 */
            k = l->ds[0].seq < l->ds[1].seq ? 0 : 1;
            stoke_status st = issue_copy(l, s, k);
            if (st != STOKE_OK) {
                char m[512];
                snprintf(m, sizeof m, "%s", stoke_last_error());
                return fail_loader(l, st, m);
            }
        }
        /* Prefetch: start the next batch's copy now if it is ready, into the other
         * device slot (the one the consumer has just finished with). */
        pthread_mutex_lock(&l->mu);
        slot *n = &l->slots[(g + 1) % l->K];
        bool next_ready = g + 1 < l->open_seq && n->seq == g + 1 && n->state == SLOT_READY &&
                          n->err == STOKE_OK && n->size > 0;
        pthread_mutex_unlock(&l->mu);
        if (next_ready && l->K > 1 && issue_copy(l, n, 1 - k) != STOKE_OK) {
            char m[512];
            snprintf(m, sizeof m, "%s", stoke_last_error());
            return fail_loader(l, STOKE_ERR_UNAVAILABLE, m);
        }
        b->inputs = l->ds[k].inputs;
        b->targets = l->tg_bytes ? l->ds[k].targets : NULL;
        b->on_device = true;
        b->event = l->ds[k].event;
    }
    if (l->hold && s->size > 0) {
        /* The batch's buffers go to the caller; the slot and the device slot get the
         * set's spares. Its copy (issued from these host buffers) may still be running:
         * the memory does not move, and comes back only through the caller. */
        held *h = take_held(l);
        if (!h) {
            char m[256];
            snprintf(m, sizeof m,
                     "loader: out of memory for another batch while the caller holds %d",
                     l->held_out);
            return fail_loader(l, STOKE_ERR_NOMEM, m);
        }
        pthread_mutex_lock(&l->mu);
        swap_ptr(&s->inputs, &h->inputs);
        swap_ptr(&s->targets, &h->targets);
        l->held_out++;
        pthread_mutex_unlock(&l->mu);
        b->host_inputs = h->inputs;
        b->host_targets = l->tg_bytes ? h->targets : NULL;
        if (b->on_device) {
            int k = l->ds[0].seq == g ? 0 : 1;
            swap_ptr(&l->ds[k].inputs, &h->dinputs);
            swap_ptr(&l->ds[k].targets, &h->dtargets);
            b->inputs = h->dinputs;
            b->targets = l->tg_bytes ? h->dtargets : NULL;
        } else {
            b->inputs = h->inputs;
            b->targets = l->tg_bytes ? h->targets : NULL;
        }
        b->held = h;
    }
    l->next_seq = g + 1;
    l->state = s->after;
    /* Instrumentation, under mu so stoke_loader_get_stats may run on another thread
     * (the monitor's sampler) while the consumer runs. */
    pthread_mutex_lock(&l->mu);
    uint64_t w = stoke_now_ns() - t0 + l->wait_carry_ns;
    l->wait_carry_ns = 0;
    l->wait_start_ns = 0;
    b->wait_ms = (double)w / 1e6;
    if (s->size > 0) {
        l->waits_ms[l->batches % WAIT_WINDOW] = (float)(w / 1e6);
        l->batches++;
        l->samples += s->size;
        l->wait_sum_ns += w;
        if (w > l->wait_max_ns)
            l->wait_max_ns = w;
        l->fill_sum += fill;
        if (fill < l->fill_min)
            l->fill_min = fill;
        if (fill > l->fill_max)
            l->fill_max = fill;
    }
    pthread_mutex_unlock(&l->mu);
    return STOKE_OK;
}

stoke_status stoke_loader_next(stoke_loader *l, stoke_batch *b) { return next_batch(l, b, 0); }

stoke_status stoke_loader_next_timed(stoke_loader *l, stoke_batch *b, double timeout_s)
{
    if (!(timeout_s >= 0 && timeout_s <= 1e6)) {
        memset(b, 0, sizeof *b);
        return stoke_fail(STOKE_ERR_ARG, "loader: timeout %g s (0..1e6)", timeout_s);
    }
    uint64_t d = stoke_now_ns() + (uint64_t)(timeout_s * 1e9);
    return next_batch(l, b, d ? d : 1);
}

stoke_status stoke_loader_stream_wait(stoke_loader *l, const stoke_batch *b, void *stream)
{
    if (!b->on_device || !b->event)
        return STOKE_OK;
    return stoke_cudart_stream_wait(l->rt, stream, b->event);
}

stoke_status stoke_loader_wait(stoke_loader *l, const stoke_batch *b)
{
    if (!b->on_device || !b->event)
        return STOKE_OK;
    return stoke_cudart_event_sync(l->rt, b->event);
}

void stoke_loader_set_consumer_event(stoke_loader *l, void *event) { l->consumer_event = event; }

stoke_sampler_state stoke_loader_state(const stoke_loader *l) { return l->state; }
bool stoke_loader_on_device(const stoke_loader *l) { return l->on_device; }
const char *stoke_loader_device_reason(const stoke_loader *l) { return l->reason; }

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void stoke_loader_get_stats(stoke_loader *l, stoke_loader_stats *s)
{
    memset(s, 0, sizeof *s);
    s->slots = l->K;
    s->workers = l->nworkers;
    /* Copied under mu (the consumer updates them under it), sorted outside it. */
    float sorted[WAIT_WINDOW], prod[WAIT_WINDOW];
    uint64_t wait_sum_ns, wait_max_ns, busy = 0;
    int64_t fill_sum;
    pthread_mutex_lock(&l->mu);
    s->elapsed_s = (double)(stoke_now_ns() - l->start_ns) / 1e9;
    s->batches = l->batches;
    s->samples = l->samples;
    wait_sum_ns = l->wait_sum_ns;
    wait_max_ns = l->wait_max_ns;
    fill_sum = l->fill_sum;
    s->fill_min = l->fill_min;
    s->fill_max = l->fill_max;
    int n = l->batches < WAIT_WINDOW ? (int)l->batches : WAIT_WINDOW;
    memcpy(sorted, l->waits_ms, (size_t)n * sizeof *sorted);
    int np = l->produced < WAIT_WINDOW ? (int)l->produced : WAIT_WINDOW;
    memcpy(prod, l->produce_ms, (size_t)np * sizeof *prod);
    int nw = l->nworkers ? l->nworkers : 1;
    for (int i = 0; i < nw && l->workers; i++) {
        busy += l->workers[i].busy_ns;
        if (i < 64 && s->elapsed_s > 0)
            s->busy_frac[i] = (double)l->workers[i].busy_ns / 1e9 / s->elapsed_s;
    }
    s->held = l->held_out;
    s->buffers = l->buffers;
    pthread_mutex_unlock(&l->mu);
    if (s->batches > 0) {
        s->wait_avg_ms = (double)wait_sum_ns / 1e6 / (double)s->batches;
        s->wait_max_ms = (double)wait_max_ns / 1e6;
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_float);
        int k = (int)(0.95 * (n - 1) + 0.5);
        s->wait_p95_ms = sorted[k];
        s->fill_avg = (double)fill_sum / (double)s->batches;
        s->busy_avg_ms = (double)busy / 1e6 / (double)s->batches;
    }
    if (np > 0) {
        qsort(prod, (size_t)np, sizeof *prod, cmp_float);
        s->busy_p95_ms = prod[(int)(0.95 * (np - 1) + 0.5)];
    }
    if (s->batches == 0) {
        s->fill_min = s->fill_max = 0;
    }
}

/* The consumer's total wait including the wait in progress, so a monitor's window
 * that ends while the consumer waits for a slow batch sees that wait then, not all of
 * it in the window the batch arrives in (which, with batches slower than the window,
 * left most windows at 0% and the median at 0). Never less than what was told before:
 * an end-of-epoch marker's wait, not counted in the totals, would take it back. */
static uint64_t pipeline_wait_ns(stoke_loader *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t v = l->wait_sum_ns + l->wait_carry_ns;
    if (l->wait_start_ns)
        v += stoke_now_ns() - l->wait_start_ns;
    if (v < l->wait_told_ns)
        v = l->wait_told_ns;
    l->wait_told_ns = v;
    pthread_mutex_unlock(&l->mu);
    return v;
}

bool stoke_loader_pipeline(void *ctx, stoke_mon_pipeline *out)
{
    stoke_loader *l = ctx;
    if (!l)
        return false;
    stoke_loader_stats st;
    stoke_loader_get_stats(l, &st);
    memset(out, 0, sizeof *out);
    out->batches = st.batches;
    out->wait_total_s = (double)pipeline_wait_ns(l) / 1e9;
    out->wait_avg_ms = st.wait_avg_ms;
    out->wait_p95_ms = st.wait_p95_ms;
    out->wait_max_ms = st.wait_max_ms;
    out->fill_avg = st.fill_avg;
    out->slots = st.slots;
    out->workers = st.workers;
    int n = st.workers > 0 ? st.workers : 1; /* 0 workers: the consumer's own time */
    if (n > 64)
        n = 64;
    double busy = 0;
    for (int i = 0; i < n; i++)
        busy += st.busy_frac[i];
    out->busy_frac = busy / n;
    return true;
}
