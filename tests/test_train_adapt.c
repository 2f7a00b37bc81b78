/* test_train_adapt.c - the compute-thread controller (src/train/adapt.c) driven by
 * step times: a machine model gives each step's seconds for a thread count and a time,
 * the controller's actions are applied as the trainer applies them. No clock: the
 * times are the model's, so nothing here depends on this machine or its load. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "train/adapt.h"

/* Seconds a step of 128 samples takes at `threads` at time t (and the others' cores). */
typedef struct machine {
    double (*step)(const struct machine *m, int threads, double t);
    double (*others)(const struct machine *m, double t);
    double busy_from, busy_to; /* a competing job's window */
    int max;
    int start; /* the count decided at the start (0: max) */
} machine;

typedef struct run {
    int threads;
    int tries, keeps, reverts;
    char last_keep[240];
    double keep_at[16];
    int keep_to[16];
    double t;
    double thread_seconds[9]; /* modelled time at each count: the model's step times
                                 summed, never a clock, so the shares checked are exact */
} run;

static uint32_t noise_state = 12345;
/* Deterministic +-3% noise: a shared machine's jitter, reproducible. */
static double noise(void)
{
    noise_state = noise_state * 1664525u + 1013904223u;
    return 1.0 + 0.06 * ((double)(noise_state >> 8) / (double)(1u << 24) - 0.5);
}

static bool busy(const machine *m, double t) { return t >= m->busy_from && t < m->busy_to; }

/* 2 cores: 2 threads 10 ms a step when quiet, 1 thread 18 ms; with one busy process
 * beside it 2 threads take 40 ms (a barrier waits on a descheduled thread), 1 thread
 * 18 ms (it has a core of its own). */
static double two_core_step(const machine *m, int threads, double t)
{
    double s = threads >= 2 ? (busy(m, t) ? 0.040 : 0.010) : 0.018;
    return s * noise();
}

static double one_other(const machine *m, double t) { return busy(m, t) ? 1.0 : 0.0; }
static double unknown(const machine *m, double t)
{
    (void)m;
    (void)t;
    return NAN;
}

static void simulate(const machine *m, const adapt_params *p, double until, run *r)
{
    adapt_state a;
    memset(r, 0, sizeof *r);
    r->threads = m->start ? m->start : m->max;
    adapt_init(&a, p, m->max, m->start ? m->start : m->max, 0.0);
    adapt_pause(&a, 0.0);
    double t = 0;
    while (t < until) {
        double dt = m->step(m, r->threads, t);
        r->thread_seconds[r->threads < 8 ? r->threads : 8] += dt;
        t += dt;
        adapt_result res;
        adapt_action act = adapt_step(&a, t, 128, m->others(m, t), &res);
        switch (act) {
        case ADAPT_NONE: break;
        case ADAPT_TRY:
            r->tries++;
            CHECK(res.threads >= 1 && res.threads <= m->max && res.threads != r->threads);
            r->threads = res.threads;
            break;
        case ADAPT_KEEP:
            CHECK_INT_EQ(res.threads, r->threads);
            if (r->keeps < 16) {
                r->keep_at[r->keeps] = t;
                r->keep_to[r->keeps] = res.threads;
            }
            r->keeps++;
            snprintf(r->last_keep, sizeof r->last_keep, "%s", res.reason);
            break;
        case ADAPT_REVERT:
            r->reverts++;
            r->threads = res.threads;
            break;
        }
    }
    r->t = t;
}

/* Quiet, and read as quiet: 2 threads stay and nothing is tried (no trial can find
 * more than the full count on an idle machine). */
static void test_quiet_keeps_the_decision(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {two_core_step, one_other, 1e9, 1e9, 2, 0};
    run r;
    simulate(&m, &p, 600, &r);
    CHECK_INT_EQ(r.keeps, 0);
    CHECK_INT_EQ(r.tries, 0);
    CHECK_INT_EQ(r.threads, 2);
}

/* Quiet without load readings: periodic trials, few (the back-off doubles), and
 * cheap; the count stays. */
static void test_quiet_without_load_readings(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {two_core_step, unknown, 1e9, 1e9, 2, 0};
    run r;
    simulate(&m, &p, 600, &r);
    CHECK_INT_EQ(r.keeps, 0);
    CHECK_INT_EQ(r.threads, 2);
    CHECK_MSG(r.tries >= 3 && r.tries <= 10, "%d trials in 600 s", r.tries);
    /* time at the slower count: the trials' windows only */
    CHECK_MSG(r.thread_seconds[1] < 0.01 * r.t, "%.1f s of %.1f at 1 thread", r.thread_seconds[1],
              r.t);
}

/* The first seconds warm up (a first window slower than the next): no trial there. */
static double warming_step(const machine *m, int threads, double t)
{
    (void)m;
    double s = threads >= 2 ? 0.010 : 0.018;
    return (t < 1.0 ? 1.6 * s : s) * noise();
}

static void test_warm_up_is_not_load(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {warming_step, unknown, 0, 0, 2, 0};
    run r;
    simulate(&m, &p, 9.5, &r);
    CHECK_INT_EQ(r.tries, 0);
}

/* A competing job from 30 s to 300 s: the controller moves to 1 thread soon after it
 * starts, stays there while it runs (no flapping), and back to 2 after it ends. */
static void test_contention_comes_and_goes(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {two_core_step, one_other, 30, 300, 2, 0};
    run r;
    simulate(&m, &p, 400, &r);
    CHECK_INT_EQ(r.keeps, 2);
    CHECK_INT_EQ(r.keep_to[0], 1);
    CHECK_MSG(r.keep_at[0] > 30 && r.keep_at[0] < 35, "switched to 1 at %.1f s", r.keep_at[0]);
    CHECK_INT_EQ(r.keep_to[1], 2);
    CHECK_MSG(r.keep_at[1] > 300 && r.keep_at[1] < 305, "back to 2 at %.1f s", r.keep_at[1]);
    CHECK_INT_EQ(r.threads, 2);
    CHECK_STR_CONTAINS(r.last_keep, "threads 1 -> 2");
}

/* Busy at the start: the decision gave 1 thread of 2; when the other job ends, the
 * controller goes up to the 2 a quiet machine gets. */
static void test_start_busy_goes_up(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {two_core_step, one_other, 0, 40, 2, 1};
    run r;
    simulate(&m, &p, 120, &r);
    CHECK_INT_EQ(r.keeps, 1);
    CHECK_INT_EQ(r.keep_to[0], 2);
    CHECK_MSG(r.keep_at[0] > 40 && r.keep_at[0] < 45, "went up at %.1f s", r.keep_at[0]);
    CHECK_INT_EQ(r.threads, 2);
}

/* Without the load readings (no /proc/stat) the speed change alone starts the trial. */
static void test_contention_without_load_readings(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {two_core_step, unknown, 30, 1e9, 2, 0};
    run r;
    simulate(&m, &p, 200, &r);
    CHECK_INT_EQ(r.keeps, 1);
    CHECK_MSG(r.keep_at[0] > 30 && r.keep_at[0] < 36, "switched at %.1f s", r.keep_at[0]);
    CHECK_INT_EQ(r.threads, 1);
    CHECK_STR_CONTAINS(r.last_keep, "threads 2 -> 1: 1 ran");
    CHECK(!strstr(r.last_keep, "other processes"));
}

/* The reason says the load when it is known. */
static void test_reason_names_the_load(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {two_core_step, one_other, 30, 1e9, 2, 0};
    run r;
    simulate(&m, &p, 100, &r);
    CHECK_INT_EQ(r.keeps, 1);
    CHECK_STR_CONTAINS(r.last_keep, "threads 2 -> 1: 1 ran");
    CHECK_STR_CONTAINS(r.last_keep, "other processes hold about 1.0 of 2 cores");
}

/* Counts within the margin never switch, however long it runs: no flapping on noise. */
static double equal_step(const machine *m, int threads, double t)
{
    (void)m;
    (void)t;
    return (threads == 4 ? 0.010 : 0.0102) * noise();
}

static void test_noise_does_not_flap(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {equal_step, unknown, 0, 0, 4, 0};
    run r;
    simulate(&m, &p, 1200, &r);
    CHECK_INT_EQ(r.keeps, 0);
    CHECK_INT_EQ(r.threads, 4);
}

/* 8 threads, 5 cores taken by others: the first trial goes straight to the 3 cores
 * left (the load's hint), not one step down. */
static double eight_core_step(const machine *m, int threads, double t)
{
    (void)t;
    (void)m;
    int free_cores = 3;
    double ideal = 0.080 / threads;
    return (threads > free_cores ? ideal * 4 : ideal) * noise();
}

static double five_others(const machine *m, double t)
{
    (void)m;
    (void)t;
    return 5.0;
}

static void test_hint_goes_to_the_free_cores(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {eight_core_step, five_others, 0, 0, 8, 0};
    run r;
    simulate(&m, &p, 30, &r);
    CHECK(r.keeps >= 1);
    CHECK_INT_EQ(r.keep_to[0], 3);
    CHECK_INT_EQ(r.threads, 3);
}

/* Two busy processes on 2 cores (the others hold every core): the kernel shares time
 * by thread, so 2 threads get half of each core where 1 gets a third of one; the
 * decision keeps 2 and the hint does too, and a trial of 1 that loses is reverted. */
static double two_others_step(const machine *m, int threads, double t)
{
    (void)m;
    (void)t;
    return (threads >= 2 ? 0.020 : 0.030) * noise();
}

static double two_others(const machine *m, double t)
{
    (void)m;
    (void)t;
    return 2.0;
}

static void test_all_cores_taken_keeps_the_team(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {two_others_step, two_others, 0, 0, 2, 0};
    run r;
    simulate(&m, &p, 300, &r);
    CHECK_INT_EQ(r.keeps, 0);
    CHECK_INT_EQ(r.threads, 2);
    CHECK_MSG(r.thread_seconds[1] < 0.02 * r.t, "%.1f s of %.1f at 1 thread", r.thread_seconds[1],
              r.t);
}

/* One thread decided: nothing to adapt, never a trial. */
static void test_one_thread_never_tries(void)
{
    adapt_params p;
    adapt_default_params(&p);
    machine m = {two_core_step, one_other, 10, 1e9, 1, 0};
    run r;
    simulate(&m, &p, 100, &r);
    CHECK_INT_EQ(r.tries, 0);
    CHECK_INT_EQ(r.threads, 1);
}

/* Time outside steps (an evaluation after every other step here) is not measured as
 * a step: the reference speed stays the steps' own. */
static void test_pause_is_not_a_step(void)
{
    adapt_params p;
    adapt_default_params(&p);
    p.first_explore = 1e9; /* no trials: only the measurement is looked at */
    adapt_state a;
    adapt_init(&a, &p, 2, 2, 0);
    adapt_pause(&a, 0);
    adapt_result res;
    double t = 0;
    for (int i = 0; i < 400; i++) {
        t += 0.010;
        CHECK_INT_EQ(adapt_step(&a, t, 128, 0.0, &res), ADAPT_NONE);
        if (i % 2) {
            t += 3.0; /* an evaluation of 3 s */
            adapt_pause(&a, t);
        }
    }
    CHECK_NEAR(a.ref_rate, 12800, 100);
}

int main(void)
{
    test_quiet_keeps_the_decision();
    test_quiet_without_load_readings();
    test_warm_up_is_not_load();
    test_contention_comes_and_goes();
    test_contention_without_load_readings();
    test_start_busy_goes_up();
    test_reason_names_the_load();
    test_noise_does_not_flap();
    test_hint_goes_to_the_free_cores();
    test_one_thread_never_tries();
    test_all_cores_taken_keeps_the_team();
    test_pause_is_not_a_step();
    return CHECK_DONE();
}
