/* adapt.c - the compute-thread controller (adapt.h): windows of step times, trials of
 * another count, hysteresis and back-off. No clock, no system reads: the trainer feeds
 * it, so a recorded run replays exactly. */
#include "train/adapt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void adapt_default_params(adapt_params *p)
{
    *p = (adapt_params){
        .settle_steps = 2,
        .min_steps = 5,
        .min_seconds = 0.3,
        .margin = 0.05,
        .first_explore = 10.0,
        .backoff_max = 120.0,
        .change = 0.25,
        .min_gap = 2.0,
    };
}

void adapt_init(adapt_state *a, const adapt_params *p, int max, int threads, double now)
{
    memset(a, 0, sizeof *a);
    a->p = *p;
    a->max = max > 0 ? max : 1;
    a->cur = threads < 1 ? 1 : threads > a->max ? a->max : threads;
    a->backoff = p->first_explore;
    a->next_try = now + p->first_explore;
    a->last_try = now; /* no trial in the first min_gap seconds: warm-up, not load */
    a->others_ref = NAN;
    a->settle = p->settle_steps;
}

void adapt_pause(adapt_state *a, double now) { a->last_t = now; }

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The window's rate: the median step's samples/s, so that one step slowed by a page
 * fault or a log write does not decide. */
static double window_rate(adapt_state *a)
{
    double v[ADAPT_WINDOW_MAX];
    memcpy(v, a->per_sample, (size_t)a->n * sizeof *v);
    qsort(v, (size_t)a->n, sizeof *v, cmp_double);
    double m = a->n % 2 ? v[a->n / 2] : 0.5 * (v[a->n / 2 - 1] + v[a->n / 2]);
    return m > 0 ? 1.0 / m : 0;
}

/* The count to try: the cores the other processes leave when their load is known and
 * points elsewhere, otherwise a neighbour (alternating down and up). 0: none. */
static int candidate(adapt_state *a, double others)
{
    if (isfinite(others)) {
        /* the others holding every core: the full count (time is shared by thread, the
         * decision's rule: tune/decide.c) */
        long free_cores = a->max - lround(others);
        int hint = free_cores < 1 ? a->max : (int)free_cores;
        if (hint != a->cur)
            return hint;
    }
    bool down = a->cur > 1, up = a->cur < a->max;
    if (down && up)
        return (a->toggle++ % 2) ? a->cur + 1 : a->cur - 1;
    return down ? a->cur - 1 : up ? a->cur + 1 : 0;
}

static void say_others(char *buf, size_t size, double others, int max)
{
    if (isfinite(others))
        snprintf(buf, size, "; other processes hold about %.1f of %d cores", others, max);
    else
        buf[0] = '\0';
}

adapt_action adapt_step(adapt_state *a, double now, int64_t samples, double others,
                        adapt_result *res)
{
    memset(res, 0, sizeof *res);
    res->others = NAN;
    double dt = a->last_t > 0 ? now - a->last_t : 0;
    a->last_t = now;
    if (a->max <= 1 || dt <= 0 || samples <= 0)
        return ADAPT_NONE;
    if (a->settle > 0) {
        a->settle--;
        return ADAPT_NONE;
    }
    if (a->n < ADAPT_WINDOW_MAX)
        a->per_sample[a->n++] = dt / (double)samples;
    a->win_seconds += dt;
    if (isfinite(others)) {
        a->win_others_sum += others;
        a->win_others_n++;
    }
    if (a->n < a->p.min_steps || (a->win_seconds < a->p.min_seconds && a->n < ADAPT_WINDOW_MAX))
        return ADAPT_NONE;
    double rate = window_rate(a);
    double oth = a->win_others_n ? a->win_others_sum / a->win_others_n : NAN;
    a->n = 0;
    a->win_seconds = 0;
    a->win_others_sum = 0;
    a->win_others_n = 0;
    char load[80];
    say_others(load, sizeof load, oth, a->max);

    if (a->base) { /* a trial's window closed */
        res->from = a->base;
        res->tried = a->cur;
        res->rate_from = a->base_rate;
        res->rate_to = rate;
        res->others = oth;
        if (rate > a->base_rate * (1 + a->p.margin)) {
            res->action = ADAPT_KEEP;
            res->threads = a->cur;
            snprintf(res->reason, sizeof res->reason,
                     "threads %d -> %d: %d ran %.0f samples/s against %.0f with %d%s", a->base,
                     a->cur, a->cur, rate, a->base_rate, a->base, load);
            a->ref_rate = rate;
            a->backoff = a->p.first_explore;
            a->switches++;
        } else {
            res->action = ADAPT_REVERT;
            res->threads = a->base;
            snprintf(res->reason, sizeof res->reason,
                     "threads %d kept: %d ran %.0f samples/s against %.0f with %d%s", a->base,
                     a->cur, rate, a->base_rate, a->base, load);
            a->cur = a->base;
            a->ref_rate = a->base_rate;
            a->backoff = fmin(2 * a->backoff, a->p.backoff_max);
            a->settle = a->p.settle_steps;
        }
        a->next_try = now + a->backoff;
        a->others_ref = oth;
        a->base = 0;
        a->windows = 1; /* the trial's (KEEP) or the one before it (REVERT) */
        return res->action;
    }

    /* a window at the current count: is it time to try another? A change of speed
     * counts from the second window on (the first after a start or a change still
     * warms caches). */
    bool first = a->ref_rate <= 0;
    a->windows++;
    bool moved = !first && a->windows > 2 && fabs(rate - a->ref_rate) > a->p.change * a->ref_rate;
    bool load_moved = isfinite(oth) && isfinite(a->others_ref) && fabs(oth - a->others_ref) >= 0.75;
    if (first || !isfinite(a->others_ref))
        a->others_ref = oth;
    /* the periodic trial looks for what the readings cannot show; a machine read as
     * quiet at the full count has nothing to find (fewer threads than cores on an idle
     * machine is the start's decision to make, by trials: docs/tune.md) */
    bool quiet_full = isfinite(oth) && oth < 0.5 && a->cur == a->max;
    bool periodic = now >= a->next_try && !quiet_full;
    if (now >= a->next_try && quiet_full)
        a->next_try = now + a->backoff;
    bool due = periodic || ((moved || load_moved) && now - a->last_try >= a->p.min_gap);
    if (!due) {
        a->ref_rate = first ? rate : 0.75 * a->ref_rate + 0.25 * rate;
        return ADAPT_NONE;
    }
    int c = candidate(a, oth);
    if (c <= 0 || c == a->cur) {
        a->ref_rate = rate;
        a->next_try = now + a->backoff;
        return ADAPT_NONE;
    }
    res->action = ADAPT_TRY;
    res->threads = c;
    res->tried = c;
    res->from = a->cur;
    res->rate_from = rate;
    res->others = oth;
    snprintf(res->reason, sizeof res->reason, "trying %d threads (%d ran %.0f samples/s%s%s)", c,
             a->cur, rate,
             moved ? (rate < a->ref_rate ? ", slower than before" : ", faster than before") : "",
             load);
    a->base = a->cur;
    a->base_rate = rate;
    a->cur = c;
    a->windows = 0;
    a->settle = a->p.settle_steps;
    a->last_try = now;
    a->trials++;
    return ADAPT_TRY;
}
