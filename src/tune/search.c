/* search.c - the measured tuning: which settings to try, in what order, and what the
 * measurements say. A trial (the caller's function) runs one point; the search never
 * times anything itself, so the tests drive it with a model whose knee is known. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/text.h"
#include "stoke/tune.h"
#include "tune/tune_impl.h"

/* Measurements within 5% (3% for the core split) are one result: trials on a shared
 * machine vary by that much, and the cheaper setting wins a tie. */
#define BATCH_TIE   0.05
#define SPLIT_TIE   0.03
#define BATCH_CLIMB 0.02

typedef struct search {
    const stoke_tune_space *sp;
    stoke_tune_trial_fn fn;
    void *ctx;
    stoke_tune_trial_cb cb;
    void *cb_ctx;
    stoke_tune_result *r;
    double target; /* data wait % that counts as fed */
} search;

static bool same(const stoke_tune_point *a, const stoke_tune_point *b)
{
    return a->batch == b->batch && a->workers == b->workers && a->prefetch == b->prefetch &&
           a->threads == b->threads && a->precision == b->precision;
}

/* The trial of p: measured before (each point runs once) or now. */
static stoke_status trial(search *s, const stoke_tune_point *p, const char *stage,
                          const stoke_tune_measure **out)
{
    stoke_tune_result *r = s->r;
    for (int i = 0; i < r->ntrials; i++)
        if (same(&r->trials[i].p, p)) {
            *out = &r->trials[i].m;
            return STOKE_OK;
        }
    if (r->ntrials == STOKE_TUNE_MAX_TRIALS)
        return stoke_fail(STOKE_ERR_ARG, "more than %d trials", STOKE_TUNE_MAX_TRIALS);
    stoke_tune_trial *t = &r->trials[r->ntrials];
    memset(t, 0, sizeof *t);
    t->p = *p;
    t->stage = stage;
    stoke_status st = s->fn(s->ctx, p, &t->m);
    if (st != STOKE_OK)
        return st;
    r->ntrials++;
    if (s->cb)
        s->cb(s->cb_ctx, t);
    *out = &t->m;
    return STOKE_OK;
}

static bool fed(const search *s, const stoke_tune_measure *m)
{
    return m->ran && m->wait_pct <= s->target;
}

/* The step's own time (not waiting for its batch). */
static double compute_ms(const stoke_tune_measure *m)
{
    double c = m->step_ms * (1.0 - m->wait_pct / 100.0);
    return c > 1e-6 ? c : 1e-6;
}

/* On the CPU the compute threads take the cores the loader workers leave. */
static void split(const search *s, stoke_tune_point *p)
{
    if (s->sp->cpu && s->sp->threads) {
        p->threads = s->sp->usable_cpus - p->workers;
        if (p->threads < 1)
            p->threads = 1;
    }
}

static int max_workers(const search *s)
{
    const stoke_tune_space *sp = s->sp;
    int mw = sp->max_workers > 0 ? sp->max_workers : sp->usable_cpus;
    /* on the CPU a loader that is the limit may take every core, the one compute
     * thread then sharing a core with a worker */
    if (sp->cpu && sp->threads && mw > sp->usable_cpus)
        mw = sp->usable_cpus;
    return mw < 0 ? 0 : mw;
}

/* The rule unsure (AVX512-BF16 without AMX): fp32 and bf16 at the same other settings,
 * bf16 kept when it learns as well over the same first steps (finite, mean loss within
 * STOKE_TUNE_BF16_LOSS_TOL of fp32's) and is faster beyond the tie; fp32 otherwise. */
static stoke_status compare_precision(search *s, stoke_tune_point *p)
{
    stoke_tune_point a = *p, b = *p;
    a.precision = STOKE_PREC_FP32;
    b.precision = STOKE_PREC_BF16;
    const stoke_tune_measure *ma, *mb;
    stoke_status st = trial(s, &a, "precision", &ma);
    if (st == STOKE_OK)
        st = trial(s, &b, "precision", &mb);
    if (st != STOKE_OK)
        return st;
    char *why = s->r->why_precision;
    size_t wn = sizeof s->r->why_precision;
    const char *doubt = s->sp->precision_unsure_why[0] ? s->sp->precision_unsure_why : "unsure";
    p->precision = STOKE_PREC_FP32;
    double tol = STOKE_TUNE_BF16_LOSS_TOL * fabs(ma->loss);
    if (!ma->ran)
        /* nothing to compare against (memory, say): the rule's fp32, its trial the
         * later stages' to judge */
        stoke_say(why, wn,
                  "fp32, the rule's: its trial could not run (%s), so bf16 was not "
                  "compared; the rule was unsure: %s",
                  ma->error, doubt);
    else if (!mb->ran || !mb->finite)
        stoke_say(why, wn, "fp32: bf16's trial %s%s%s; the rule was unsure: %s",
                  mb->finite ? "could not run" : "went non-finite", mb->error[0] ? ": " : "",
                  mb->error, doubt);
    else if (!(isfinite(ma->loss) && isfinite(mb->loss) && mb->loss <= ma->loss + tol))
        stoke_say(why, wn,
                  "fp32: bf16 ran %.2fx fp32's samples/s (fp32 %.0f, bf16 %.0f) but "
                  "its mean loss over the same first steps, %.4g, is not within %.0f%% of "
                  "fp32's %.4g; the rule was unsure: %s",
                  mb->samples_per_s / ma->samples_per_s, ma->samples_per_s, mb->samples_per_s,
                  mb->loss, STOKE_TUNE_BF16_LOSS_TOL * 100, ma->loss, doubt);
    else if (!(mb->samples_per_s > ma->samples_per_s * (1 + BATCH_TIE)))
        stoke_say(why, wn,
                  "fp32: bf16 ran %.2fx fp32's samples/s (fp32 %.0f, bf16 %.0f), not "
                  "%.0f%% faster; the rule was unsure: %s",
                  mb->samples_per_s / ma->samples_per_s, ma->samples_per_s, mb->samples_per_s,
                  BATCH_TIE * 100, doubt);
    else {
        p->precision = STOKE_PREC_BF16;
        stoke_say(why, wn,
                  "bf16 %.1fx fp32's samples/s (fp32 %.0f, bf16 %.0f), mean loss over "
                  "the same first steps %.4g against fp32's %.4g; the rule was unsure: %s",
                  mb->samples_per_s / ma->samples_per_s, ma->samples_per_s, mb->samples_per_s,
                  mb->loss, ma->loss, doubt);
    }
    return STOKE_OK;
}

static stoke_status search_precision(search *s, stoke_tune_point *p)
{
    if (s->sp->precision && s->sp->precision_compare)
        return compare_precision(s, p);
    const stoke_tune_measure *m;
    bool check = s->sp->precision && p->precision != STOKE_PREC_FP32;
    stoke_status st = trial(s, p, check ? "precision" : "start", &m);
    /* fp32: nothing to confirm, the rule's reason stands; a trial that could not run
     * for another reason (memory) says nothing about the precision */
    if (st != STOKE_OK || !check || (!m->ran && m->finite))
        return st;
    const char *name = stoke_precision_name(p->precision);
    if (m->finite) {
        stoke_say(s->r->why_precision, sizeof s->r->why_precision,
                  "the probe's rule, confirmed: every loss of a %" PRId64
                  "-step trial at %s was finite",
                  m->steps, name);
        return STOKE_OK;
    }
    stoke_say(s->r->why_precision, sizeof s->r->why_precision,
              "the probe's rule said %s, but the loss went non-finite within a %" PRId64
              "-step trial at it: fp32",
              name, m->steps);
    p->precision = STOKE_PREC_FP32;
    return STOKE_OK;
}

/* GPU: the fewest workers whose data wait is at most the target. */
static stoke_status search_workers_fed(search *s, stoke_tune_point *p)
{
    const stoke_tune_measure *m;
    stoke_status st = trial(s, p, "workers", &m);
    if (st != STOKE_OK)
        return st;
    char *why = s->r->why_workers;
    size_t wn = sizeof s->r->why_workers;
    int mw = max_workers(s);
    if (!m->ran)
        return STOKE_OK;
    /* the first guess: W workers produce W batches per produce_ms, a step eats one
     * per compute_ms; 10% over the balance absorbs the jitter */
    int guess = p->workers;
    if (m->produce_ms > 0) {
        guess = (int)ceil(1.1 * m->produce_ms / compute_ms(m));
        if (fed(s, m) && guess > p->workers)
            guess = p->workers;
    }
    if (guess > mw)
        guess = mw;
    stoke_say(why, wn, "batch production %.2f ms, a step's compute %.2f ms", m->produce_ms,
              compute_ms(m));
    stoke_tune_point q = *p;
    q.workers = guess;
    if ((st = trial(s, &q, "workers", &m)) != STOKE_OK)
        return st;
    if (fed(s, m)) { /* walk down to the knee */
        while (q.workers > 0) {
            stoke_tune_point d = q;
            d.workers--;
            if ((st = trial(s, &d, "workers", &m)) != STOKE_OK)
                return st;
            if (!fed(s, m))
                break;
            q = d;
        }
        stoke_more(why, wn,
                   "; %d worker%s keep%s the data wait within %.0f%% of the step, %s fewer do not",
                   q.workers, q.workers == 1 ? "" : "s", q.workers == 1 ? "s" : "", s->target,
                   q.workers ? "and" : "so");
        if (!q.workers)
            stoke_more(why, wn, " (the training thread loads)");
        p->workers = q.workers;
        return STOKE_OK;
    }
    while (q.workers < mw) { /* walk up to the knee */
        q.workers++;
        if ((st = trial(s, &q, "workers", &m)) != STOKE_OK)
            return st;
        if (fed(s, m)) {
            stoke_more(why, wn, "; %d workers are the fewest that keep the data wait within %.0f%%",
                       q.workers, s->target);
            p->workers = q.workers;
            return STOKE_OK;
        }
    }
    /* never fed: the most samples/s of those tried, fewer workers on a tie */
    double top = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->r->ntrials; i++) {
            const stoke_tune_trial *t = &s->r->trials[i];
            stoke_tune_point x = t->p;
            x.workers = p->workers;
            if (!t->m.ran || !same(&x, p))
                continue;
            if (pass == 0 && t->m.samples_per_s > top)
                top = t->m.samples_per_s;
            if (pass == 1 && t->m.samples_per_s >= top / (1 + SPLIT_TIE) &&
                t->p.workers < q.workers)
                q.workers = t->p.workers;
        }
    p->workers = q.workers;
    stoke_more(
        why, wn,
        "; no count up to %d kept the data wait within %.0f%%: %d gave the most samples/s (the "
        "loader, not the workers' count, is the limit)",
        mw, s->target, p->workers);
    return STOKE_OK;
}

/* CPU: the split of the cores between loader workers and compute threads with the
 * most samples/s, climbing from the start's split. */
static stoke_status search_split(search *s, stoke_tune_point *p)
{
    const stoke_tune_measure *m;
    split(s, p);
    stoke_status st = trial(s, p, "workers", &m);
    if (st != STOKE_OK)
        return st;
    int mw = max_workers(s);
    stoke_tune_point best = *p;
    double bsps = m->ran ? m->samples_per_s : 0;
    /* a first guess where the workers' production meets the threads' compute, the
     * compute taken to scale with the threads; then a climb from the better of the two */
    if (m->ran && m->produce_ms > 0) {
        double one = compute_ms(m) * p->threads, fastest = 1e300;
        stoke_tune_point g = *p;
        for (int w = 0; w <= mw; w++) {
            stoke_tune_point q = *p;
            q.workers = w;
            split(s, &q);
            double c = one / q.threads;
            double step =
                w == 0 ? c + m->produce_ms : (m->produce_ms / w > c ? m->produce_ms / w : c);
            if (step < fastest * (1 - SPLIT_TIE)) {
                fastest = step;
                g = q;
            }
        }
        if ((st = trial(s, &g, "workers", &m)) != STOKE_OK)
            return st;
        if (m->ran && m->samples_per_s > bsps) {
            best = g;
            bsps = m->samples_per_s;
        }
    }
    for (int dir = 1; dir >= -1; dir -= 2) {
        stoke_tune_point q = best;
        bool moved = false;
        for (;;) {
            q.workers += dir;
            if (q.workers < 0 || q.workers > mw)
                break;
            split(s, &q);
            if ((st = trial(s, &q, "workers", &m)) != STOKE_OK)
                return st;
            if (!m->ran)
                break;
            /* more workers must win clearly; fewer win a tie */
            bool better = dir > 0 ? m->samples_per_s > bsps * (1 + SPLIT_TIE)
                                  : m->samples_per_s >= bsps / (1 + SPLIT_TIE);
            if (!better)
                break;
            best = q;
            bsps = m->samples_per_s;
            moved = true;
        }
        if (moved)
            break; /* up found better: down is the other side of the climb */
    }
    char *why = s->r->why_workers;
    size_t wn = sizeof s->r->why_workers;
    stoke_say(why, wn, "samples/s by loader workers + compute threads:");
    for (int i = 0; i < s->r->ntrials; i++) {
        const stoke_tune_trial *t = &s->r->trials[i];
        stoke_tune_point x = t->p;
        x.workers = best.workers;
        x.threads = best.threads;
        if (same(&x, &best) && t->m.ran)
            stoke_more(why, wn, " %d+%d: %.0f;", t->p.workers, t->p.threads, t->m.samples_per_s);
    }
    stoke_more(why, wn, " the most with the fewest workers (within %.0f%%): %d + %d",
               SPLIT_TIE * 100, best.workers, best.threads);
    if (s->sp->threads)
        stoke_say(s->r->why_threads, sizeof s->r->why_threads,
                  "the available CPUs less the loader workers, as measured by the split: %d + %d",
                  best.workers, best.threads);
    *p = best;
    return STOKE_OK;
}

/* What a batch size is judged by: the samples/s its step takes when fed, so that a
 * loader not yet sized for it (the workers are searched again after) does not hide
 * what the compute gains. Only the wait the loader's production explains is taken
 * out. */
static double fed_rate(const stoke_tune_point *p, const stoke_tune_measure *m)
{
    if (!m->ran)
        return 0;
    /* only the wait the loader's production explains goes away with more workers;
     * the rest (a worker's wake-up on a busy machine) stays in the step */
    double c = compute_ms(m), wait = m->step_ms - c;
    double explained = p->workers == 0 ? m->produce_ms : m->produce_ms / p->workers - c;
    explained = explained < 0 ? 0 : explained > wait ? wait : explained;
    double step = m->step_ms - explained;
    return (double)p->batch / (step > 1e-6 ? step : 1e-6) * 1e3;
}

/* Powers of two from the start's batch: up while the fed rate rises by more than 2%
 * (beyond a trial's noise), down while within 5%; the smallest within 5% of the
 * fastest. */
static stoke_status search_batch(search *s, stoke_tune_point *p)
{
    const stoke_tune_space *sp = s->sp;
    int64_t lo = 1;
    while (lo < sp->batch_min)
        lo *= 2;
    int64_t hi = stoke_tune_pow2_floor(sp->batch_max);
    int64_t b0 = stoke_tune_pow2_floor(p->batch > 0 ? p->batch : 1);
    b0 = b0 < lo ? lo : b0 > hi ? hi : b0;
    stoke_tune_point q = *p;
    q.batch = b0;
    const stoke_tune_measure *m;
    stoke_status st = trial(s, &q, "batch", &m);
    if (st != STOKE_OK)
        return st;
    double best = fed_rate(&q, m);
    bool rose = false;
    while (q.batch <= hi / 2) {
        q.batch *= 2;
        if ((st = trial(s, &q, "batch", &m)) != STOKE_OK)
            return st;
        double v = fed_rate(&q, m);
        bool up = m->ran && v > best * (1 + BATCH_CLIMB);
        if (v > best)
            best = v;
        if (!up)
            break;
        rose = true;
    }
    for (q.batch = b0; !rose && q.batch / 2 >= lo;) {
        q.batch /= 2;
        if ((st = trial(s, &q, "batch", &m)) != STOKE_OK)
            return st;
        double v = fed_rate(&q, m);
        if (!m->ran && best == 0)
            continue; /* nothing has fit yet: smaller still */
        if (!m->ran || v < best * (1 - BATCH_TIE))
            break;
        if (v > best)
            best = v;
    }
    /* the smallest within 5% of the fastest: fewer samples per step is more steps
     * per epoch for the same time. The line lists the samples/s each trial printed, so
     * the reader can find every number in the trials; the fed rate the choice compares
     * follows where it differs from the measured figure. */
    char *why = s->r->why_batch;
    size_t wn = sizeof s->r->why_batch;
    int64_t pick = 0, first = 0, last = 0;
    stoke_say(why, wn,
              "samples/s by batch as the trials measured them (fed: with the wait the "
              "loader's production explains taken out, what the choice compares):");
    for (int64_t b = lo; b <= hi && b > 0; b *= 2) {
        stoke_tune_point x = *p;
        x.batch = b;
        for (int i = 0; i < s->r->ntrials; i++) {
            const stoke_tune_trial *t = &s->r->trials[i];
            if (!same(&t->p, &x))
                continue;
            first = first ? first : b;
            last = b;
            if (!t->m.ran) {
                stoke_more(why, wn, " %" PRId64 ": could not run;", b);
                continue;
            }
            double f = fed_rate(&t->p, &t->m);
            stoke_more(why, wn, " %" PRId64 ": %.0f", b, t->m.samples_per_s);
            /* the same figure at the precision printed: one number */
            if (round(f) != round(t->m.samples_per_s))
                stoke_more(why, wn, " (fed %.0f)", f);
            stoke_more(why, wn, ";");
            if (!pick && f >= best * (1 - BATCH_TIE))
                pick = b;
        }
        if (b > hi / 2)
            break;
    }
    if (!pick)
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "no batch from %" PRId64 " to %" PRId64 " could run (%s)", lo, hi,
                          m->error);
    stoke_more(why, wn, " %" PRId64 " is the smallest within %.0f%% of the fastest (tried %" PRId64,
               pick, BATCH_TIE * 100, first);
    if (last != first)
        stoke_more(why, wn, " to %" PRId64, last);
    stoke_more(why, wn, "; the ceiling %" PRId64 "%s%s%s)", hi,
               hi != sp->batch_max ? ", a power of two" : "", sp->batch_max_why[0] ? ": " : "",
               sp->batch_max_why);
    p->batch = pick;
    return STOKE_OK;
}

int stoke_tune_prefetch_for(int workers, double produce_ms, double produce_p95_ms, double step_ms)
{
    if (workers <= 0)
        return MIN_PREFETCH;
    double late = produce_p95_ms - produce_ms;
    int ready = late > 0 && step_ms > 0 ? (int)ceil(late / step_ms) : 0;
    if (ready < 1)
        ready = 1;
    int d = workers + ready;
    return d < MIN_PREFETCH ? MIN_PREFETCH : d > MAX_PREFETCH ? MAX_PREFETCH : d;
}

static stoke_status search_prefetch(search *s, stoke_tune_point *p)
{
    char *why = s->r->why_prefetch;
    size_t wn = sizeof s->r->why_prefetch;
    const stoke_tune_measure *m;
    stoke_status st = trial(s, p, "prefetch", &m);
    if (st != STOKE_OK || !m->ran)
        return st;
    if (p->workers == 0) {
        p->prefetch = MIN_PREFETCH;
        stoke_say(why, wn,
                  "no loader workers: the training thread loads each batch as it asks for it, "
                  "nothing is in flight");
        return STOKE_OK;
    }
    int d = stoke_tune_prefetch_for(p->workers, m->produce_ms, m->produce_p95_ms, compute_ms(m));
    stoke_say(
        why, wn,
        "%d worker%s batch%s in flight + the ready ones that cover the p95 jitter of a batch's "
        "production (%.2f ms mean, %.2f ms p95, a step every %.2f ms): %d",
        p->workers, p->workers == 1 ? "'s" : "s'", p->workers == 1 ? "" : "es", m->produce_ms,
        m->produce_p95_ms, compute_ms(m), d);
    if (d == p->prefetch)
        return STOKE_OK;
    double was = m->samples_per_s;
    stoke_tune_point q = *p;
    q.prefetch = d;
    if ((st = trial(s, &q, "prefetch", &m)) != STOKE_OK)
        return st;
    if (m->ran && m->samples_per_s >= was * (1 - SPLIT_TIE)) {
        stoke_more(why, wn, ", confirmed (%.0f samples/s, %.0f at %d)", m->samples_per_s, was,
                   p->prefetch);
        p->prefetch = d;
    } else {
        stoke_more(why, wn, ", but %d measured faster (%.0f samples/s against %.0f): kept",
                   p->prefetch, was, m->ran ? m->samples_per_s : 0.0);
    }
    return STOKE_OK;
}

/* Every combination of the open settings' values, the fastest kept. */
static stoke_status search_grid(search *s, stoke_tune_point *p)
{
    const stoke_tune_space *sp = s->sp;
    int64_t lo = 1, hi = sp->batch ? stoke_tune_pow2_floor(sp->batch_max) : p->batch;
    while (sp->batch && lo < sp->batch_min)
        lo *= 2;
    if (!sp->batch)
        lo = p->batch;
    int wmax = sp->workers ? (sp->max_workers > 0 ? sp->max_workers : sp->usable_cpus) : p->workers;
    int wmin = sp->workers ? 0 : p->workers;
    int tmin = sp->threads && sp->cpu ? 1 : p->threads;
    int tmax = sp->threads && sp->cpu ? sp->usable_cpus : p->threads;
    static const int depths[] = {2, 4, 8};
    int nd = sp->prefetch ? 3 : 1;
    long count = 0;
    for (int64_t b = lo; b <= hi; b *= 2)
        count += (long)(wmax - wmin + 1) * (tmax - tmin + 1) * nd;
    if (count > STOKE_TUNE_MAX_TRIALS)
        return stoke_fail(STOKE_ERR_ARG, "the grid has %ld points, more than %d", count,
                          STOKE_TUNE_MAX_TRIALS);
    const stoke_tune_measure *m;
    stoke_tune_point best = *p;
    double bsps = -1;
    for (int64_t b = lo; b <= hi; b *= 2)
        for (int w = wmin; w <= wmax; w++)
            for (int th = tmin; th <= tmax; th++)
                for (int k = 0; k < nd; k++) {
                    stoke_tune_point q = {b, w, sp->prefetch ? depths[k] : p->prefetch, th,
                                          p->precision};
                    stoke_status st = trial(s, &q, "grid", &m);
                    if (st != STOKE_OK)
                        return st;
                    if (m->ran && m->samples_per_s > bsps) {
                        bsps = m->samples_per_s;
                        best = q;
                    }
                }
    stoke_say(s->r->why_batch, sizeof s->r->why_batch,
              "the grid's fastest of %d points (%.0f samples/s)", s->r->ntrials, bsps);
    *p = best;
    return STOKE_OK;
}

stoke_status stoke_tune_search(const stoke_tune_space *space, stoke_tune_trial_fn fn, void *ctx,
                               stoke_tune_trial_cb on_trial, void *cb_ctx, stoke_tune_result *out)
{
    memset(out, 0, sizeof *out);
    if (space->batch && (space->batch_max < 1 || space->batch_min > space->batch_max ||
                         stoke_tune_pow2_floor(space->batch_max) < space->batch_min))
        return stoke_fail(STOKE_ERR_ARG, "no power of two between batches %" PRId64 " and %" PRId64,
                          space->batch_min, space->batch_max);
    if (space->usable_cpus < 1)
        return stoke_fail(STOKE_ERR_ARG, "%d usable CPUs", space->usable_cpus);
    search s = {space,
                fn,
                ctx,
                on_trial,
                cb_ctx,
                out,
                space->wait_target_pct > 0 ? space->wait_target_pct : 5.0};
    stoke_tune_point p = space->start;
    split(&s, &p);
    stoke_status st = search_precision(&s, &p);
    if (st == STOKE_OK && space->grid)
        st = search_grid(&s, &p);
    else if (st == STOKE_OK) {
        bool split_search = space->cpu && (space->workers || space->threads);
        if (space->workers || split_search)
            st = split_search ? search_split(&s, &p) : search_workers_fed(&s, &p);
        if (st == STOKE_OK && space->batch) {
            int64_t was = p.batch;
            st = search_batch(&s, &p);
            /* a batch of another size changes the balance of loading and compute */
            if (st == STOKE_OK && p.batch != was && (space->workers || split_search))
                st = split_search ? search_split(&s, &p) : search_workers_fed(&s, &p);
        }
        if (st == STOKE_OK && space->prefetch)
            st = search_prefetch(&s, &p);
    }
    if (st != STOKE_OK)
        return st;
    const stoke_tune_measure *m;
    if ((st = trial(&s, &p, "confirm", &m)) != STOKE_OK)
        return st;
    if (space->precision && !m->finite && p.precision != STOKE_PREC_FP32) {
        /* the precision's first trial could not run (memory): its confirmation is this */
        stoke_say(out->why_precision, sizeof out->why_precision,
                  "the probe's rule said %s, but the loss went non-finite at it: fp32",
                  stoke_precision_name(p.precision));
        p.precision = STOKE_PREC_FP32;
        if ((st = trial(&s, &p, "confirm", &m)) != STOKE_OK)
            return st;
    }
    if (!m->ran) {
        for (int i = 0; i < out->ntrials; i++)
            if (out->trials[i].m.ran)
                return stoke_fail(STOKE_ERR_UNAVAILABLE, "the chosen setting could not run: %s",
                                  m->error);
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "no trial could run: %s", out->trials[0].m.error);
    }
    out->best = p;
    out->best_m = *m;
    return STOKE_OK;
}
