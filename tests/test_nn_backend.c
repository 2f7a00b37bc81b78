/* test_nn_backend.c - the backend context each model owns: two models in one process
 * with different compute-thread counts, run interleaved on one thread, on two threads
 * at once, and on two threads taking turns step by step, each give exactly what it
 * gives alone and keep their own count; fusion chosen per
 * model, with STOKE_NO_FUSION read by the trainer's config layer and never by the
 * library. */
#include "check.h"
#include "stoke/nn.h"
#include "stoke/train.h"

#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { B = 64, STEPS = 3 };

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float rnd(void)
{ /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *xs;

/* Large enough that the linear layers (64 x 784 x 512 multiply-adds) and the
 * convolutions run on every compute thread. */
static stoke_graph *graph(bool cnn)
{
    stoke_shape img = {.ndim = 3, .dims = {1, 28, 28}}, flat = {.ndim = 1, .dims = {784}};
    int64_t hidden[2] = {512, 256};
    return cnn ? stoke_preset_cnn(&img, 10) : stoke_preset_mlp(&flat, hidden, 2, 10);
}

static stoke_model *model(const stoke_graph *g, int threads, bool no_fusion)
{
    stoke_model_opts o = {.max_batch = B,
                          .precision = STOKE_PREC_FP32,
                          .training = true,
                          .seed = 11,
                          .optim = {.kind = STOKE_SGD, .momentum = 0.9f},
                          .threads = threads,
                          .no_fusion = no_fusion};
    stoke_model *m = NULL;
    CHECK_MSG(stoke_model_new(g, &o, &m) == STOKE_OK, "%s", stoke_last_error());
    return m;
}

/* One training step on the fixed batch; the loss, and in *omp the OpenMP thread count
 * the kernels left on the calling thread (they apply their context's on entry). */
static double step(stoke_model *m, int *omp)
{
    const stoke_graph *g = stoke_model_graph(m);
    size_t n = (size_t)B * 784 * sizeof(float);
    memcpy(stoke_model_input(m, stoke_graph_find(g, "x")), xs, n);
    int32_t *y = stoke_model_input(m, stoke_graph_find(g, "y"));
    for (int i = 0; i < B; i++)
        y[i] = i % 10;
    if (stoke_model_forward(m, B, true) != STOKE_OK)
        return NAN;
    double loss = stoke_model_loss(m);
    if (omp)
        *omp = omp_get_max_threads();
    stoke_model_zero_grad(m);
    bool applied = false;
    if (stoke_model_backward(m) != STOKE_OK || stoke_model_step(m, 0.01, 1, &applied) != STOKE_OK)
        return NAN;
    return loss;
}

/* The parameters after the steps, flattened. */
static float *params(stoke_model *m)
{
    const stoke_graph *g = stoke_model_graph(m);
    size_t total = 0;
    for (int p = 0; p < stoke_graph_param_count(g); p++)
        total += (size_t)stoke_graph_param(g, p)->elems;
    float *all = malloc(total * sizeof *all), *at = all;
    for (int p = 0; p < stoke_graph_param_count(g); p++) {
        size_t n = (size_t)stoke_graph_param(g, p)->elems;
        memcpy(at, stoke_model_param(m, p), n * sizeof *at);
        at += n;
    }
    return all;
}

static size_t nparams(const stoke_graph *g)
{
    size_t total = 0;
    for (int p = 0; p < stoke_graph_param_count(g); p++)
        total += (size_t)stoke_graph_param(g, p)->elems;
    return total;
}

typedef struct run {
    const stoke_graph *g;
    int threads;
    double loss[STEPS];
    float *w;
    bool ok;
} run;

/* A model alone: the reference for its thread count. */
static void *run_alone(void *arg)
{
    run *r = arg;
    stoke_model *m = model(r->g, r->threads, false);
    r->ok = m != NULL;
    for (int s = 0; m && s < STEPS; s++)
        r->loss[s] = step(m, NULL);
    r->w = m ? params(m) : NULL;
    stoke_model_free(m);
    return NULL;
}

static void same_as(const char *what, const run *got, const run *want, size_t n)
{
    for (int s = 0; s < STEPS; s++)
        CHECK_MSG(got->loss[s] == want->loss[s], "%s, %d threads: step %d loss %.9g, alone %.9g",
                  what, want->threads, s, got->loss[s], want->loss[s]);
    CHECK_MSG(got->w && want->w && memcmp(got->w, want->w, n * sizeof(float)) == 0,
              "%s, %d threads: parameters differ from the model run alone", what, want->threads);
}

/* Two models on two threads taking turns, step by step (a's step s, then b's, then
 * a's s + 1, ...): both bound on their own threads for the whole run, each step on the
 * heels of the other model's, so anything one context left behind (an OpenMP count,
 * a primitive, a stream, an engine) would reach the other. */
typedef struct turns {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int turn; /* 2 s + who: whose step comes next */
} turns;

typedef struct turn_run {
    run r;
    turns *t;
    int me;
    stoke_model *m;
    int omp[STEPS], count[STEPS];
} turn_run;

static void *run_turns(void *arg)
{
    turn_run *tr = arg;
    for (int s = 0; s < STEPS; s++) {
        pthread_mutex_lock(&tr->t->lock);
        while (tr->t->turn != 2 * s + tr->me)
            pthread_cond_wait(&tr->t->cond, &tr->t->lock);
        pthread_mutex_unlock(&tr->t->lock);
        tr->r.loss[s] = step(tr->m, &tr->omp[s]);
        tr->count[s] = stoke_model_threads(tr->m);
        pthread_mutex_lock(&tr->t->lock);
        tr->t->turn++;
        pthread_cond_broadcast(&tr->t->cond);
        pthread_mutex_unlock(&tr->t->lock);
    }
    tr->r.w = params(tr->m);
    return NULL;
}

static void alternate_on_two_threads(const char *name, const stoke_graph *g, const run *ref,
                                     size_t n)
{
    turns t = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    turn_run tr[2];
    for (int i = 0; i < 2; i++)
        tr[i] = (turn_run){.r = {.g = g, .threads = ref[i].threads, .ok = true},
                           .t = &t,
                           .me = i,
                           .m = model(g, ref[i].threads, false)};
    if (tr[0].m && tr[1].m) {
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            CHECK(pthread_create(&th[i], NULL, run_turns, &tr[i]) == 0);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < 2; i++) {
            for (int s = 0; s < STEPS; s++)
                CHECK_MSG(tr[i].omp[s] == ref[i].threads && tr[i].count[s] == ref[i].threads,
                          "%s, turns, step %d: the %d-thread model ran on %d threads, reports %d",
                          name, s, ref[i].threads, tr[i].omp[s], tr[i].count[s]);
            same_as(name, &tr[i].r, &ref[i], n);
            free(tr[i].r.w);
        }
    }
    for (int i = 0; i < 2; i++)
        stoke_model_free(tr[i].m);
}

static void test_threads(bool cnn)
{
    const char *name = cnn ? "cnn" : "mlp";
    stoke_graph *g = graph(cnn);
    CHECK(g != NULL);
    if (!g)
        return;
    size_t n = nparams(g);
    run ref[2] = {{.g = g, .threads = 1}, {.g = g, .threads = 2}};
    for (int i = 0; i < 2; i++) {
        run_alone(&ref[i]);
        CHECK(ref[i].ok);
    }
    /* different counts give close, not necessarily equal, results */
    for (int s = 0; s < STEPS; s++)
        CHECK_NEAR(ref[0].loss[s], ref[1].loss[s], 1e-4 * (1 + fabs(ref[1].loss[s])));

    /* interleaved on one thread: each model re-applies its own count every call */
    stoke_model *a = model(g, 1, false), *b = model(g, 2, false);
    if (a && b) {
        CHECK_INT_EQ(stoke_model_threads(a), 1);
        CHECK_INT_EQ(stoke_model_threads(b), 2);
        run ra = {.g = g, .threads = 1, .ok = true}, rb = {.g = g, .threads = 2, .ok = true};
        for (int s = 0; s < STEPS; s++) {
            int omp_a = 0, omp_b = 0;
            ra.loss[s] = step(a, &omp_a);
            rb.loss[s] = step(b, &omp_b);
            CHECK_MSG(omp_a == 1 && omp_b == 2, "%s step %d: kernels ran on %d and %d threads",
                      name, s, omp_a, omp_b);
        }
        ra.w = params(a);
        rb.w = params(b);
        same_as(name, &ra, &ref[0], n);
        same_as(name, &rb, &ref[1], n);
        free(ra.w);
        free(rb.w);
    }
    stoke_model_free(a);
    stoke_model_free(b);

    /* at the same time, one model on each of two threads */
    run par[2] = {{.g = g, .threads = 1}, {.g = g, .threads = 2}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, run_alone, &par[i]) == 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        CHECK(par[i].ok);
        same_as(name, &par[i], &ref[i], n);
        free(par[i].w);
    }
    alternate_on_two_threads(name, g, ref, n);
    for (int i = 0; i < 2; i++)
        free(ref[i].w);
    stoke_graph_free(g);
}

/* What the trainer's thread controller does (src/train/adapt.c): the count changed
 * between steps of one model, 2 -> 1 -> 2 -> 1. Every step still runs, on the count set
 * (the kernels apply it on entry), and the parameters stay as close to the run at a
 * fixed count as two fixed counts are to each other: a change alters only the order
 * of the reductions split across threads, never the arithmetic. */
static void test_switch_mid_run(bool cnn)
{
    const char *name = cnn ? "cnn" : "mlp";
    stoke_graph *g = graph(cnn);
    if (!g)
        return;
    size_t n = nparams(g);
    enum { RUN = 8 };
    stoke_model *fixed = model(g, 2, false), *sw = model(g, 2, false);
    if (fixed && sw) {
        for (int s = 0; s < RUN; s++) {
            int want = s < 2 ? 2 : s % 2 ? 1 : 2, omp = 0;
            stoke_model_set_threads(sw, want);
            double lf = step(fixed, NULL), ls = step(sw, &omp);
            CHECK_MSG(omp == want, "%s step %d: kernels ran on %d threads, %d set", name, s, omp,
                      want);
            if (s < 3) /* the same count so far: the same bits */
                CHECK_MSG(lf == ls, "%s step %d: loss %.9g switched, %.9g fixed", name, s, ls, lf);
            CHECK_NEAR(ls, lf, 1e-4 * (1 + fabs(lf)));
        }
        float *wf = params(fixed), *ws = params(sw);
        double worst = 0, scale = 0;
        for (size_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs((double)wf[i] - ws[i]));
            scale = fmax(scale, fabs((double)wf[i]));
        }
        CHECK_MSG(worst <= 1e-4 * scale, "%s: parameters %.3g apart (largest %.3g)", name, worst,
                  scale);
        free(wf);
        free(ws);
    }
    stoke_model_free(fixed);
    stoke_model_free(sw);
    stoke_graph_free(g);
}

/* OpenMP's count when the library loaded (OMP_NUM_THREADS, else every CPU), read
 * first thing in main: what a model given 0 threads runs with. No call changes it for
 * later models: there is no process-wide count left to set. */
static int g_load_threads;

/* 0 takes the machine's count when the model is created; each model keeps its own. */
static void test_default_threads(void)
{
    stoke_graph *g = graph(false);
    if (!g)
        return;
    stoke_model *a = model(g, 0, false);
    stoke_model_set_threads(a, 1); /* one model's setting is not the next one's default */
    stoke_model *b = model(g, 0, false);
    if (a && b) {
        CHECK_INT_EQ(stoke_model_threads(a), 1);
        CHECK_INT_EQ(stoke_model_threads(b), g_load_threads);
        int omp = 0;
        CHECK(isfinite(step(a, &omp)));
        CHECK_INT_EQ(omp, 1);
        stoke_model_set_threads(b, 2);
        CHECK(isfinite(step(b, &omp)));
        CHECK_INT_EQ(omp, 2);
        CHECK_INT_EQ(stoke_model_threads(a), 1);
        stoke_model_set_threads(a, 2);
        CHECK_INT_EQ(stoke_model_threads(a), 2);
        CHECK(isfinite(step(a, &omp)));
        CHECK_INT_EQ(omp, 2);
    }
    stoke_model_opts bad = {.max_batch = B, .threads = -1};
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &bad, &m) == STOKE_ERR_ARG && !m);
    CHECK_STR_CONTAINS(stoke_last_error(), "threads -1");
    stoke_model_free(a);
    stoke_model_free(b);
    stoke_graph_free(g);
}

/* Fusion per model, interleaved: same values, the fused plan smaller. The library
 * ignores STOKE_NO_FUSION (set here); the config layer reads it. */
static void test_fusion(void)
{
    CHECK(setenv("STOKE_NO_FUSION", "1", 1) == 0);
    stoke_graph *g = graph(true);
    if (!g)
        return;
    stoke_model *fused = model(g, 2, false), *apart = model(g, 2, true);
    if (fused && apart) {
        CHECK_MSG(stoke_model_plan(fused)->activations_per_sample <
                      stoke_model_plan(apart)->activations_per_sample,
                  "fused %zu bytes per sample, apart %zu",
                  stoke_model_plan(fused)->activations_per_sample,
                  stoke_model_plan(apart)->activations_per_sample);
        for (int s = 0; s < STEPS; s++) {
            double lf = step(fused, NULL), la = step(apart, NULL);
            CHECK_MSG(lf == la, "step %d: fused loss %.9g, apart %.9g", s, lf, la);
        }
    }
    stoke_model_free(fused);
    stoke_model_free(apart);
    stoke_graph_free(g);

    stoke_train_config c;
    stoke_train_config_defaults(&c);
    CHECK(!c.no_fusion);
    CHECK(stoke_train_config_load_env(&c, NULL) == STOKE_OK && c.no_fusion);
    CHECK(setenv("STOKE_NO_FUSION", "0", 1) == 0);
    CHECK(stoke_train_config_load_env(&c, NULL) == STOKE_OK && !c.no_fusion);
    unsetenv("STOKE_NO_FUSION");
}

int main(void)
{
    g_load_threads = omp_get_max_threads();
    xs = malloc((size_t)B * 784 * sizeof *xs);
    for (size_t i = 0; i < (size_t)B * 784; i++)
        xs[i] = rnd();
    test_threads(false);
    test_switch_mid_run(false);
    test_switch_mid_run(true);
    test_threads(true);
    test_default_threads();
    test_fusion();
    free(xs);
    return CHECK_DONE();
}
