/* test_tune_search.c - the measured tuning's search (stoke_tune_search) against a model
 * of a loader and a training step whose costs the test controls: per-sample loading
 * cost, per-sample compute, the CPU's cores shared by workers and threads, a batch
 * that stops paying past a size, memory that ends at a batch, bf16 that diverges.
 * The knee each search must find is computed by brute force over the same model. */
#include <inttypes.h>

#include "check.h"
#include "stoke/tune.h"

typedef struct sim {
    bool cpu; /* compute threads and loader workers share `cores` */
    int cores;
    double load_us;    /* one worker's time to load and transform a sample */
    double jitter;     /* p95 of a batch's production is mean x (1 + jitter) */
    double fixed_ms;   /* a step's fixed cost */
    double comp_us;    /* a sample's compute (one thread on the CPU) */
    double big;        /* per-sample compute grows by batch / big (caches): a peak */
    int64_t oom_above; /* batches above this do not fit (0: all fit) */
    bool nan_bf16;     /* bf16's losses go non-finite */
    double noise;      /* each measurement off by up to +-noise (seeded) */
    uint64_t rng;
    int calls;
    bool fail;          /* the trial function fails (an error that stops the search) */
    bool diverge_stops; /* a diverging trial cannot run (as an fp32/bf16 step stops) */
    double bf16_speed;  /* bf16's compute is this many times fp32's (0: the same) */
    double bf16_loss;   /* bf16's mean loss over the first steps is fp32's x (1 + this) */
} sim;

static double uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* The steady state of one point: samples/s, wait %, compute and production ms. */
static void model(const sim *x, const stoke_tune_point *p, double *sps, double *wait_pct,
                  double *comp, double *prod)
{
    double b = (double)p->batch;
    double cores = p->threads;
    if (x->cpu) { /* busy workers take cores from the math */
        double left = x->cores - p->workers;
        cores = p->threads < left ? p->threads : left;
        if (cores < 0.5)
            cores = 0.5;
    }
    double speed = p->precision == STOKE_PREC_BF16 && x->bf16_speed > 0 ? x->bf16_speed : 1;
    *comp = x->fixed_ms + b * x->comp_us / 1e3 * (1 + b / x->big) / (x->cpu ? cores : 1) / speed;
    *prod = b * x->load_us / 1e3;
    double step, wait;
    if (p->workers == 0) {
        step = *comp + *prod; /* the training thread loads */
        wait = *prod;
    } else {
        double per = *prod / p->workers;
        step = per > *comp ? per : *comp;
        wait = step - *comp;
    }
    *sps = b / step * 1e3;
    *wait_pct = 100 * wait / step;
}

static stoke_status sim_trial(void *ctx, const stoke_tune_point *p, stoke_tune_measure *m)
{
    sim *x = ctx;
    x->calls++;
    memset(m, 0, sizeof *m);
    if (x->fail)
        return stoke_fail(STOKE_ERR_IO, "sim: the dataset vanished");
    if (x->oom_above && p->batch > x->oom_above) {
        snprintf(m->error, sizeof m->error, "out of memory at batch %" PRId64, p->batch);
        m->finite = true;
        return STOKE_OK;
    }
    double comp, prod;
    model(x, p, &m->samples_per_s, &m->wait_pct, &comp, &prod);
    if (x->noise > 0)
        m->samples_per_s *= 1 + x->noise * (2 * uniform(&x->rng) - 1);
    m->ran = true;
    m->steps = 20;
    m->step_ms = (double)p->batch / m->samples_per_s * 1e3;
    m->seconds = m->step_ms * 20 / 1e3;
    m->produce_ms = prod;
    m->produce_p95_ms = prod * (1 + x->jitter);
    m->finite = !(x->nan_bf16 && p->precision == STOKE_PREC_BF16);
    if (!m->finite && x->diverge_stops) {
        m->ran = false;
        snprintf(m->error, sizeof m->error, "gradient of w is not finite (inf or NaN) at step 3");
    }
    m->memory_bytes = (double)p->batch * 1e6;
    m->loss = 2.3 * (p->precision == STOKE_PREC_BF16 ? 1 + x->bf16_loss : 1);
    if (!m->finite)
        m->loss = NAN;
    return STOKE_OK;
}

static stoke_tune_space gpu_space(void)
{
    return (stoke_tune_space){.start = {256, 1, 4, 1, STOKE_PREC_FP32},
                              .workers = true,
                              .usable_cpus = 16,
                              .max_workers = 15,
                              .batch_min = 16,
                              .batch_max = 4096};
}

/* The fewest workers whose wait is within 5%, by brute force over the model. */
static int knee(const sim *x, stoke_tune_point p, int max_workers)
{
    for (p.workers = 0; p.workers <= max_workers; p.workers++) {
        double sps, wait, c, d;
        model(x, &p, &sps, &wait, &c, &d);
        if (wait <= 5.0)
            return p.workers;
    }
    return -1;
}

static void test_workers_knee(void)
{
    /* a loader whose per-sample cost goes from free to 40x the compute */
    const double loads[] = {0, 5, 20, 50, 100, 200};
    for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++) {
        sim x = {.cores = 16, .load_us = loads[i], .fixed_ms = 1, .comp_us = 10, .big = 1e9};
        stoke_tune_space sp = gpu_space();
        stoke_tune_result *r = malloc(sizeof *r);
        CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
        int k = knee(&x, sp.start, 15);
        CHECK_MSG(r->best.workers == k, "load %.0f us: chose %d workers, the knee is %d (%s)",
                  loads[i], r->best.workers, k, r->why_workers);
        CHECK(r->best_m.ran && r->best_m.wait_pct <= 5.0);
        /* a first guess from the measured times, then a walk: far fewer trials than
         * trying every count */
        CHECK_MSG(r->ntrials <= 5, "load %.0f us: %d trials", loads[i], r->ntrials);
        CHECK(r->best.batch == 256 && r->best.prefetch == 4); /* not searched: kept */
        CHECK(strstr(r->why_workers, "keep") != NULL);
        free(r);
    }
    /* never fed within 15 workers: the most samples/s, said so */
    sim x = {.cores = 16, .load_us = 5000, .fixed_ms = 1, .comp_us = 10, .big = 1e9};
    stoke_tune_space sp = gpu_space();
    stoke_tune_result *r = malloc(sizeof *r);
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    CHECK_INT_EQ(r->best.workers, 15);
    CHECK(strstr(r->why_workers, "no count up to 15") != NULL);
    free(r);
}

/* The CPU: the cores split between loader workers and compute threads. */
static void test_core_split(void)
{
    const double loads[] = {0, 30, 120, 400};
    for (int cores = 2; cores <= 8; cores *= 2)
        for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++) {
            sim x = {.cpu = true,
                     .cores = cores,
                     .load_us = loads[i],
                     .fixed_ms = 0.5,
                     .comp_us = 60,
                     .big = 1e9};
            stoke_tune_space sp = {.start = {128, 0, 2, cores, STOKE_PREC_FP32},
                                   .workers = true,
                                   .threads = true,
                                   .cpu = true,
                                   .usable_cpus = cores,
                                   .batch_min = 16,
                                   .batch_max = 4096};
            stoke_tune_result *r = malloc(sizeof *r);
            CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
            /* brute force: the most samples/s over every split */
            double best = 0;
            for (int w = 0; w < cores; w++) {
                stoke_tune_point p = {128, w, 2, cores - w, STOKE_PREC_FP32};
                double sps, wait, c, d;
                model(&x, &p, &sps, &wait, &c, &d);
                if (sps > best)
                    best = sps;
            }
            CHECK(r->best.threads == (cores - r->best.workers > 1 ? cores - r->best.workers : 1));
            CHECK_MSG(r->best_m.samples_per_s >= best / 1.03,
                      "%d cores, load %.0f: %.0f samples/s at %d+%d, the best split %.0f", cores,
                      loads[i], r->best_m.samples_per_s, r->best.workers, r->best.threads, best);
            CHECK(r->why_threads[0] != '\0');
            free(r);
        }
}

/* Batches: the smallest power of two within 5% of the fastest, where the model's
 * throughput peaks; memory ends the climb. */
static void test_batch(void)
{
    const double bigs[] = {256, 1024, 8192, 1e9};
    for (size_t i = 0; i < sizeof bigs / sizeof bigs[0]; i++) {
        sim x = {.cores = 16, .load_us = 0, .fixed_ms = 2, .comp_us = 10, .big = bigs[i]};
        stoke_tune_space sp = gpu_space();
        sp.workers = false;
        sp.batch = true;
        sp.start.batch = 64;
        stoke_tune_result *r = malloc(sizeof *r);
        CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
        double top = 0;
        for (int64_t b = 16; b <= 4096; b *= 2) {
            stoke_tune_point p = sp.start;
            p.batch = b;
            double sps, wait, c, d;
            model(&x, &p, &sps, &wait, &c, &d);
            top = sps > top ? sps : top;
        }
        CHECK_MSG(r->best_m.samples_per_s >= top * 0.95, "big %.0f: batch %" PRId64 " %.0f < %.0f",
                  bigs[i], r->best.batch, r->best_m.samples_per_s, top);
        /* and no smaller batch is within 5% of what the search measured */
        stoke_tune_point p = r->best;
        p.batch /= 2;
        double sps, wait, c, d;
        model(&x, &p, &sps, &wait, &c, &d);
        CHECK_MSG(p.batch < 16 || sps < top * 0.95, "big %.0f: %" PRId64 " would do", bigs[i],
                  p.batch);
        CHECK(strstr(r->why_batch, "smallest within 5%") != NULL);
        free(r);
    }
    /* memory ends at 512: the climb stops there, the failure is a trial, not an error */
    sim x = {.cores = 16, .fixed_ms = 2, .comp_us = 10, .big = 1e9, .oom_above = 512};
    stoke_tune_space sp = gpu_space();
    sp.workers = false;
    sp.batch = true;
    stoke_tune_result *r = malloc(sizeof *r);
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    CHECK_INT_EQ(r->best.batch, 512);
    bool failed = false;
    for (int i = 0; i < r->ntrials; i++)
        failed |= !r->trials[i].m.ran && strstr(r->trials[i].m.error, "out of memory");
    CHECK(failed);
    CHECK(strstr(r->why_batch, "could not run") != NULL);
    /* nothing fits: an error naming the first trial's failure */
    x.oom_above = 8;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_ERR_UNAVAILABLE);
    CHECK(strstr(stoke_last_error(), "out of memory") != NULL);
    free(r);
}

/* The batch's reason reports the figures the trials printed (a newcomer read 2339
 * samples/s in a trial and 2433 for the same batch in the decision), which batches
 * were tried and what the ceiling is, not a ceiling that reads as tried. */
static void test_batch_reason(void)
{
    /* the training thread loads (no workers): the fed rate differs from the measured */
    sim x = {.cpu = true, .cores = 2, .load_us = 40, .fixed_ms = 1, .comp_us = 30, .big = 700};
    stoke_tune_space sp = {.start = {256, 0, 2, 2, STOKE_PREC_FP32},
                           .batch = true,
                           .cpu = true,
                           .usable_cpus = 2,
                           .batch_min = 16,
                           .batch_max = 3000};
    snprintf(sp.batch_max_why, sizeof sp.batch_max_why, "the 3000 samples");
    stoke_tune_result *r = malloc(sizeof *r);
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    int64_t lo = 0, hi = 0;
    for (int i = 0; i < r->ntrials; i++) {
        const stoke_tune_trial *t = &r->trials[i];
        if (strcmp(t->stage, "batch") || !t->m.ran)
            continue;
        char want[64];
        snprintf(want, sizeof want, " %" PRId64 ": %.0f", t->p.batch, t->m.samples_per_s);
        CHECK_MSG(strstr(r->why_batch, want) != NULL, "'%s' not in: %s", want, r->why_batch);
        lo = lo && lo < t->p.batch ? lo : t->p.batch;
        hi = hi > t->p.batch ? hi : t->p.batch;
    }
    CHECK(lo > 0 && hi > lo);
    char tried[64];
    snprintf(tried, sizeof tried, "(tried %" PRId64 " to %" PRId64 ";", lo, hi);
    CHECK_MSG(strstr(r->why_batch, tried) != NULL, "'%s' not in: %s", tried, r->why_batch);
    CHECK_STR_CONTAINS(r->why_batch, "the ceiling 2048, a power of two: the 3000 samples)");
    CHECK(strstr(r->why_batch, "...") == NULL);
    free(r);
}

static void test_precision(void)
{
    sim x = {.cores = 16, .fixed_ms = 1, .comp_us = 10, .big = 1e9, .nan_bf16 = true};
    stoke_tune_space sp = gpu_space();
    sp.workers = false;
    sp.precision = true;
    sp.start.precision = STOKE_PREC_BF16;
    stoke_tune_result *r = malloc(sizeof *r);
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    CHECK(r->best.precision == STOKE_PREC_FP32);
    CHECK(strstr(r->why_precision, "non-finite") != NULL);
    CHECK(r->best_m.finite);
    x.nan_bf16 = false;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    CHECK(r->best.precision == STOKE_PREC_BF16);
    CHECK(strstr(r->why_precision, "finite") != NULL);
    CHECK_INT_EQ(r->ntrials, 1); /* the one trial confirms it and is the result */
    /* bf16 stopped by a gradient that is not finite (the trial could not run): fp32 */
    x.nan_bf16 = true;
    x.diverge_stops = true;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    CHECK(r->best.precision == STOKE_PREC_FP32 && r->best_m.ran);
    CHECK(!r->trials[0].m.ran && strstr(r->why_precision, "non-finite") != NULL);
    /* a start that does not fit says nothing about bf16 */
    x.diverge_stops = x.nan_bf16 = false;
    x.oom_above = 64;
    sp.batch = true;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    CHECK(r->best.precision == STOKE_PREC_BF16 && r->why_precision[0] == '\0');
    CHECK_INT_EQ(r->best.batch, 64);
    /* and if bf16 then diverges where it fits, the last trial catches it */
    x.nan_bf16 = true;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    CHECK(r->best.precision == STOKE_PREC_FP32 && r->best_m.finite);
    CHECK(strstr(r->why_precision, "non-finite") != NULL);
    free(r);
}

/* The rule unsure (AVX512-BF16 without AMX): fp32 and bf16 are both tried at the
 * start's settings, and bf16 kept only when it is faster beyond the tie and learns as
 * well (finite, mean loss within STOKE_TUNE_BF16_LOSS_TOL of fp32's). */
static void test_precision_compare(void)
{
    sim x = {.cpu = true, .cores = 4, .fixed_ms = 0, .comp_us = 40, .big = 1e9, .bf16_speed = 1.6};
    stoke_tune_space sp = {.start = {128, 0, 2, 4, STOKE_PREC_FP32},
                           .precision = true,
                           .precision_compare = true,
                           .cpu = true,
                           .usable_cpus = 4};
    snprintf(sp.precision_unsure_why, sizeof sp.precision_unsure_why, "AVX512-BF16 without AMX");
    stoke_tune_result *r = malloc(sizeof *r);
    /* faster and as good: bf16, with both rates, the losses and the rule's doubt */
    CHECK_INT_EQ(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r), STOKE_OK);
    printf("  %s\n", r->why_precision);
    CHECK(r->best.precision == STOKE_PREC_BF16);
    CHECK(r->trials[0].p.precision == STOKE_PREC_FP32 &&
          r->trials[1].p.precision == STOKE_PREC_BF16);
    CHECK_STR_EQ(r->trials[0].stage, "precision");
    CHECK_STR_CONTAINS(r->why_precision, "bf16 1.6x fp32's samples/s (fp32 ");
    CHECK_STR_CONTAINS(r->why_precision,
                       "mean loss over the same first steps 2.3 against fp32's 2.3");
    CHECK_STR_CONTAINS(r->why_precision, "; the rule was unsure: AVX512-BF16 without AMX");
    CHECK_INT_EQ(r->ntrials, 2); /* bf16's trial is the result's: no confirmation again */
    /* within the tolerance: still bf16 */
    x.bf16_loss = STOKE_TUNE_BF16_LOSS_TOL / 2;
    CHECK_INT_EQ(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r), STOKE_OK);
    CHECK(r->best.precision == STOKE_PREC_BF16);
    /* faster but learning worse: fp32, saying why */
    x.bf16_loss = STOKE_TUNE_BF16_LOSS_TOL * 2;
    CHECK_INT_EQ(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r), STOKE_OK);
    printf("  %s\n", r->why_precision);
    CHECK(r->best.precision == STOKE_PREC_FP32);
    CHECK_STR_CONTAINS(r->why_precision, "is not within 3% of fp32's 2.3");
    CHECK(r->best_m.ran && r->best_m.finite);
    /* faster but not finite: fp32 */
    x.bf16_loss = 0;
    x.nan_bf16 = true;
    CHECK_INT_EQ(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r), STOKE_OK);
    CHECK(r->best.precision == STOKE_PREC_FP32);
    CHECK_STR_CONTAINS(r->why_precision, "fp32: bf16's trial went non-finite");
    x.diverge_stops = true; /* stopped by its gradient: the same */
    CHECK_INT_EQ(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r), STOKE_OK);
    CHECK(r->best.precision == STOKE_PREC_FP32 && r->best_m.ran);
    CHECK_STR_CONTAINS(r->why_precision, "went non-finite: gradient of w is not finite");
    /* as good but within the tie (emulated bf16 is slower still): fp32 */
    x.nan_bf16 = x.diverge_stops = false;
    x.bf16_speed = 1.02;
    CHECK_INT_EQ(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r), STOKE_OK);
    printf("  %s\n", r->why_precision);
    CHECK(r->best.precision == STOKE_PREC_FP32);
    CHECK_STR_CONTAINS(r->why_precision, "not 5% faster; the rule was unsure");
    x.bf16_speed = 0.5;
    CHECK_INT_EQ(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r), STOKE_OK);
    CHECK(r->best.precision == STOKE_PREC_FP32);
    /* the rule sure (no compare): one trial at its value, as before */
    x.bf16_speed = 1.6;
    sp.precision_compare = false;
    CHECK_INT_EQ(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r), STOKE_OK);
    CHECK(r->best.precision == STOKE_PREC_FP32);
    CHECK_INT_EQ(r->ntrials, 1);
    /* compare asked but precision not open: nothing compared */
    sp.precision_compare = true;
    sp.precision = false;
    CHECK_INT_EQ(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r), STOKE_OK);
    CHECK_INT_EQ(r->ntrials, 1);
    free(r);
}

static void test_prefetch(void)
{
    /* the rule: workers in flight + ready batches covering the late part */
    CHECK_INT_EQ(stoke_tune_prefetch_for(0, 10, 20, 5), 2);
    CHECK_INT_EQ(stoke_tune_prefetch_for(1, 10, 10, 5), 2);
    CHECK_INT_EQ(stoke_tune_prefetch_for(3, 10, 10, 5), 4);    /* no jitter: one ready */
    CHECK_INT_EQ(stoke_tune_prefetch_for(4, 10, 20, 5), 6);    /* 10 ms late / 5 ms steps */
    CHECK_INT_EQ(stoke_tune_prefetch_for(4, 10, 21, 5), 7);    /* rounded up */
    CHECK_INT_EQ(stoke_tune_prefetch_for(30, 10, 100, 1), 32); /* the ring's bound */
    /* the search applies it to what its trial measured */
    sim x = {.cores = 16, .load_us = 100, .jitter = 1.5, .fixed_ms = 1, .comp_us = 10, .big = 1e9};
    stoke_tune_space sp = gpu_space();
    sp.prefetch = true;
    stoke_tune_result *r = malloc(sizeof *r);
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    double c, d, sps, wait;
    model(&x, &r->best, &sps, &wait, &c, &d);
    CHECK_INT_EQ(r->best.prefetch, stoke_tune_prefetch_for(r->best.workers, d, d * 2.5, c));
    CHECK(r->best.prefetch > r->best.workers + 1); /* the jitter asked for more */
    CHECK(strstr(r->why_prefetch, "p95") != NULL);
    /* no workers: nothing in flight */
    x.load_us = 0;
    sp.start.workers = 0;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    CHECK_INT_EQ(r->best.workers, 0);
    CHECK_INT_EQ(r->best.prefetch, 2);
    free(r);
}

/* Noisy measurements on random machines and models: the search's choice is within 10%
 * of the exhaustive grid's best (measured without noise), with far fewer trials. */
static void test_against_grid(void)
{
    uint64_t seed = 12345;
    int worse = 0, cases = 120;
    long trials = 0, grid_trials = 0;
    for (int k = 0; k < cases; k++) {
        bool cpu = k % 2;
        int cores = cpu ? 2 << (k / 2 % 2) : 8;
        sim x = {.cpu = cpu,
                 .cores = cores,
                 .load_us = 200 * uniform(&seed),
                 .jitter = uniform(&seed),
                 .fixed_ms = 0.2 + 3 * uniform(&seed),
                 .comp_us = 5 + 100 * uniform(&seed),
                 .big = 128 + 8192 * uniform(&seed),
                 .noise = 0.03,
                 .rng = seed};
        stoke_tune_space sp = {.start = {128, cpu ? 0 : 1, 2, cpu ? cores : 1, STOKE_PREC_FP32},
                               .batch = true,
                               .workers = true,
                               .prefetch = true,
                               .threads = cpu,
                               .cpu = cpu,
                               .usable_cpus = cores,
                               .max_workers = cpu ? 0 : cores - 1,
                               .batch_min = 16,
                               .batch_max = 2048};
        stoke_tune_result *r = malloc(sizeof *r), *g = malloc(sizeof *g);
        CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
        sp.grid = true;
        x.noise = 0;
        CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, g) == STOKE_OK);
        double got, best, wait, c, d;
        model(&x, &r->best, &got, &wait, &c, &d);
        model(&x, &g->best, &best, &wait, &c, &d);
        if (got < 0.9 * best) {
            worse++;
            fprintf(stderr,
                    "case %d (%s, %d cores): %.0f at b%" PRId64 " w%d t%d p%d against the grid's "
                    "%.0f at b%" PRId64 " w%d t%d p%d\n  %s\n  %s\n",
                    k, cpu ? "cpu" : "gpu", cores, got, r->best.batch, r->best.workers,
                    r->best.threads, r->best.prefetch, best, g->best.batch, g->best.workers,
                    g->best.threads, g->best.prefetch, r->why_workers, r->why_batch);
        }
        trials += r->ntrials;
        grid_trials += g->ntrials;
        free(r);
        free(g);
    }
    CHECK_INT_EQ(worse, 0);
    printf("against the grid: %d cases, %ld trials, the grid's %ld\n", cases, trials, grid_trials);
    CHECK_MSG(trials * 5 < grid_trials, "%ld trials against the grid's %ld", trials, grid_trials);
}

static int count_cb;
static void on_trial(void *ctx, const stoke_tune_trial *t)
{
    (void)ctx;
    CHECK(t->stage != NULL);
    count_cb++;
}

static void test_grid_and_errors(void)
{
    sim x = {.cpu = true, .cores = 4, .load_us = 50, .fixed_ms = 1, .comp_us = 30, .big = 2048};
    stoke_tune_space sp = {.start = {64, 0, 2, 4, STOKE_PREC_FP32},
                           .batch = true,
                           .workers = true,
                           .prefetch = true,
                           .threads = true,
                           .cpu = true,
                           .usable_cpus = 4,
                           .max_workers = 3,
                           .batch_min = 16,
                           .batch_max = 128,
                           .grid = true};
    stoke_tune_result *r = malloc(sizeof *r);
    count_cb = 0;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, on_trial, NULL, r) == STOKE_OK);
    /* 4 batches x 4 worker counts x 4 thread counts x 3 depths */
    CHECK_INT_EQ(r->ntrials, 4 * 4 * 4 * 3);
    CHECK_INT_EQ(count_cb, r->ntrials);
    for (int i = 0; i < r->ntrials; i++)
        CHECK(r->trials[i].m.samples_per_s <= r->best_m.samples_per_s);
    /* a grid past the table */
    sp.batch_min = 1;
    sp.batch_max = (int64_t)1 << 40;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_ERR_ARG);
    CHECK(strstr(stoke_last_error(), "grid") != NULL);
    /* no power of two in the batch range */
    sp.grid = false;
    sp.batch_min = 65;
    sp.batch_max = 100;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_ERR_ARG);
    CHECK(strstr(stoke_last_error(), "power of two") != NULL);
    /* a trial's own error stops the search with it */
    sp.batch_min = 16;
    x.fail = true;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_ERR_IO);
    CHECK(strstr(stoke_last_error(), "vanished") != NULL);
    /* each point runs once */
    x.fail = false;
    x.calls = 0;
    CHECK(stoke_tune_search(&sp, sim_trial, &x, NULL, NULL, r) == STOKE_OK);
    CHECK_INT_EQ(x.calls, r->ntrials);
    for (int i = 0; i < r->ntrials; i++)
        for (int j = 0; j < i; j++)
            CHECK(memcmp(&r->trials[i].p, &r->trials[j].p, sizeof r->trials[i].p) != 0);
    free(r);
}

int main(void)
{
    test_workers_knee();
    test_core_split();
    test_batch();
    test_batch_reason();
    test_precision();
    test_precision_compare();
    test_prefetch();
    test_against_grid();
    test_grid_and_errors();
    return CHECK_DONE();
}
