/* comm.c - the communication thread of host-completed transports (MPI on the CPU):
 * buckets are queued by the training thread as backward produces them and reduced
 * here one after another, in readiness order, so the all-reduce runs while backward
 * computes the rest. A thread of its own because MPI's non-blocking collectives only
 * progress inside MPI calls, and a training thread in backward makes none; the same
 * shape as Horovod's background thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_impl.h"

struct dist_comm {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t more, done_cv;
    int *queue; /* bucket indices, a ring of cap */
    int cap, head, count;
    int64_t queued, done; /* buckets handed over, reduced */
    bool quit, failed;
    char error[1024]; /* the first failure's message, made on this thread */
    stoke_status status;
    stoke_dist *d;
};

static void *comm_main(void *arg)
{
    dist_comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->count && !c->quit)
            pthread_cond_wait(&c->more, &c->mu);
        if (!c->count && c->quit)
            break;
        int k = c->queue[c->head];
        c->head = (c->head + 1) % c->cap;
        c->count--;
        dist_stage *st = &c->d->stage[k];
        bool skip = c->failed; /* after a failure the peers are gone: nothing to wait for */
        pthread_mutex_unlock(&c->mu);
        stoke_status s = skip ? STOKE_OK : c->d->grads->mean(c->d, st->buf, st->n);
        pthread_mutex_lock(&c->mu);
        if (s != STOKE_OK && !c->failed) {
            c->failed = true;
            c->status = s;
            snprintf(c->error, sizeof c->error, "%s", stoke_last_error());
        }
        c->done++;
        pthread_cond_broadcast(&c->done_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static stoke_status comm_new(stoke_dist *d)
{
    dist_comm *c = calloc(1, sizeof *c);
    int cap = d->nstage > 0 ? d->nstage : 1;
    if (!c || !(c->queue = malloc((size_t)cap * sizeof *c->queue))) {
        free(c);
        return stoke_fail(STOKE_ERR_NOMEM, "dist: out of memory for the communication thread");
    }
    c->cap = cap;
    c->d = d;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->more, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    if (pthread_create(&c->thread, NULL, comm_main, c) != 0) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->more);
        pthread_cond_destroy(&c->done_cv);
        free(c->queue);
        free(c);
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "dist: cannot start the communication thread");
    }
    d->comm = c;
    return STOKE_OK;
}

stoke_status dist_comm_start(stoke_dist *d, int k)
{
    if (!d->comm) {
        stoke_status s = comm_new(d);
        if (s != STOKE_OK)
            return s;
    }
    dist_comm *c = d->comm;
    pthread_mutex_lock(&c->mu);
    /* a bucket is queued at most once a step (dist.c waits before queuing it again) */
    if (c->count == c->cap) {
        pthread_mutex_unlock(&c->mu);
        return stoke_fail(STOKE_ERR_ARG, "dist: bucket %d queued twice in a step", k);
    }
    c->queue[(c->head + c->count) % c->cap] = k;
    c->count++;
    c->queued++;
    pthread_cond_signal(&c->more);
    pthread_mutex_unlock(&c->mu);
    return STOKE_OK;
}

stoke_status dist_comm_wait(stoke_dist *d)
{
    dist_comm *c = d->comm;
    if (!c)
        return STOKE_OK;
    pthread_mutex_lock(&c->mu);
    while (c->done < c->queued)
        pthread_cond_wait(&c->done_cv, &c->mu);
    stoke_status s = c->failed ? c->status : STOKE_OK;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", c->error);
    pthread_mutex_unlock(&c->mu);
    return s == STOKE_OK ? STOKE_OK : stoke_fail(s, "%s", msg);
}

void dist_comm_free(stoke_dist *d)
{
    dist_comm *c = d->comm;
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->quit = true;
    pthread_cond_signal(&c->more);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->more);
    pthread_cond_destroy(&c->done_cv);
    free(c->queue);
    free(c);
    d->comm = NULL;
}
