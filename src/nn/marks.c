/* marks.c - a ring of marks, each ending a phase of the training step. On a GPU a
 * mark is a timing event on the model's stream: the host only queues work, so its own
 * clock would time the queueing, not the work, and waiting to read the clock would
 * stall the stream. Events are read once they have completed, later, without
 * waiting. On the CPU the work is done when a call returns: the wall clock. The time
 * from a mark to the next belongs to the later mark's phase; a START mark ends no
 * phase (the time before it, such as waiting for the loader, is nobody's). */
#include "nn/marks.h"

#include <stdlib.h>

#include "stoke/core.h"

/* Room for a few steps of marks between two reads (the trainer reads at every step). */
#define NN_MARKS 32

struct nn_marks {
    void *ev[NN_MARKS];
    double wall[NN_MARKS];
    int phase[NN_MARKS];
    int head, count; /* the marks not yet read: slots head .. head + count - 1 */
    int prev;        /* the slot of the last mark read, or -1 */
    double sec[STOKE_PHASE_COUNT];
};

nn_marks *nn_marks_new(void)
{
    nn_marks *k = calloc(1, sizeof *k);
    if (k)
        k->prev = -1;
    return k;
}

void nn_marks_free(nn_marks *k, const nn_backend *be)
{
    if (!k)
        return;
    for (int i = 0; i < NN_MARKS; i++)
        if (k->ev[i] && be->event_free)
            be->event_free(be->ctx, k->ev[i]);
    free(k);
}

/* Reads the completed marks in order, stopping at the first still pending. */
static void harvest(nn_marks *k, const nn_backend *be, bool wait)
{
    while (k->count > 0) {
        int s = k->head;
        if (be->event_done && !be->event_done(be->ctx, k->ev[s], wait))
            return;
        int p = k->phase[s];
        if (k->prev >= 0 && p != STOKE_PHASE_START) {
            double d = be->event_seconds ? be->event_seconds(be->ctx, k->ev[k->prev], k->ev[s])
                                         : k->wall[s] - k->wall[k->prev];
            k->sec[p] += d > 0 ? d : 0;
        }
        k->prev = s;
        k->head = (k->head + 1) % NN_MARKS;
        k->count--;
    }
}

void nn_marks_mark(nn_marks *k, const nn_backend *be, stoke_phase p)
{
    if (p < 0 || p >= STOKE_PHASE_COUNT)
        return;
    if (k->count == NN_MARKS - 1) /* the next slot is the last one read: make room */
        harvest(k, be, true);
    int s = (k->head + k->count) % NN_MARKS;
    if (be->event_record) {
        if (!k->ev[s] && be->event_new)
            k->ev[s] = be->event_new(be->ctx);
        be->event_record(be->ctx, k->ev[s]);
    }
    k->wall[s] = stoke_wall_time();
    k->phase[s] = p;
    k->count++;
}

void nn_marks_take(nn_marks *k, const nn_backend *be, bool wait, double *sec)
{
    harvest(k, be, wait);
    for (int i = 0; i < STOKE_PHASE_COUNT; i++) {
        sec[i] += k->sec[i];
        k->sec[i] = 0;
    }
}
