/* wait_hist.c - the histogram of the consumer's per-batch waits (stoke_wait_hist):
 * fixed buckets so that a run's epochs compare bucket by bucket, and a percentile
 * costs no stored samples. */
#include <math.h>

#include "stoke/data.h"

/* 1-2-5 steps: a microsecond (a batch that was ready) to ten seconds (a stalled
 * pipeline), three buckets a decade. */
static const double edges[STOKE_WAIT_EDGES] = {0,   0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1,
                                               0.2, 0.5,   1,     2,     5,    10,   20,   50,
                                               100, 200,   500,   1000,  2000, 5000, 10000};

const double *stoke_wait_hist_edges(void) { return edges; }

void stoke_wait_hist_add(stoke_wait_hist *h, double wait_ms)
{
    if (!(wait_ms > 0)) /* NaN too */
        wait_ms = 0;
    int i = STOKE_WAIT_EDGES - 1;
    while (i > 0 && wait_ms < edges[i])
        i--;
    h->counts[i]++;
    if (h->batches == 0 || wait_ms > h->max_ms)
        h->max_ms = wait_ms;
    h->batches++;
}

double stoke_wait_hist_quantile(const stoke_wait_hist *h, double q)
{
    if (h->batches <= 0)
        return NAN;
    q = q < 0 ? 0 : q > 1 ? 1 : q;
    double rank = q * (double)h->batches, below = 0;
    for (int i = 0; i < STOKE_WAIT_EDGES; i++) {
        double c = (double)h->counts[i];
        if (c <= 0 || below + c < rank) {
            below += c;
            continue;
        }
        double lo = edges[i], hi = i + 1 < STOKE_WAIT_EDGES ? edges[i + 1] : h->max_ms;
        if (hi > h->max_ms)
            hi = h->max_ms;
        if (lo > hi)
            lo = hi;
        return lo + (hi - lo) * (rank - below) / c;
    }
    return h->max_ms;
}
