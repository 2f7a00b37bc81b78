/* test_batch_fit.c - batch_size auto against memory budgets (the batch found is the
 * largest whose exact plan fits safety x the budget: the plan at it fits, the plan one
 * sample (or, rounded to a power of two, twice) larger does not), the dataset and
 * --limit cap, the CPU's starting point; effective_batch's accumulation and its
 * errors; and an injected allocation failure at setup and within training: the run
 * completes at half the batch and twice the accumulation, with the same steps, and
 * says so. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nn/cpu/alloc_seam.h"
#include "step_fault.h"
#include "stoke/train.h"
#include "train/trainer.h"

#define N 320 /* samples */
#define S 8   /* side */
#define K 4   /* classes */

static char dir[256], x_path[512], cnn_path[512], mlp_path[512];

static void write_npy(const char *path, const char *descr, const char *shape, const void *data,
                      size_t bytes)
{
    char h[128];
    int n = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
                     shape);
    int pad = (64 - (10 + n + 1) % 64) % 64;
    FILE *f = fopen(path, "wb");
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    unsigned short hl = (unsigned short)(n + pad + 1);
    fputc(hl & 0xff, f);
    fputc(hl >> 8, f);
    fwrite(h, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    fwrite(data, 1, bytes, f);
    fclose(f);
}

static void write_text(char *path, size_t n, const char *name, const char *text)
{
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void make_dataset(void)
{
    static unsigned char x[N * S * S], y[N];
    unsigned s = 12345;
    for (int i = 0; i < N; i++) {
        y[i] = (unsigned char)(i % K);
        for (int p = 0; p < S * S; p++) {
            s = s * 1103515245u + 12345u;
            x[i * S * S + p] =
                (unsigned char)((p % S) * K / S == i % K ? 140 : 40) + (s >> 16) % 90;
        }
    }
    char y_path[512];
    snprintf(x_path, sizeof x_path, "%s/x.npy", dir);
    snprintf(y_path, sizeof y_path, "%s/y.npy", dir);
    write_npy(x_path, "|u1", "(320, 8, 8)", x, sizeof x);
    write_npy(y_path, "|u1", "(320,)", y, sizeof y);
    write_text(cnn_path, sizeof cnn_path, "cnn.yaml",
               "layers:\n"
               "  - {type: conv2d, out: 8, kernel: 3, padding: 1}\n"
               "  - {type: relu}\n"
               "  - {type: flatten}\n"
               "  - {type: linear, out: 32}\n"
               "  - {type: relu}\n"
               "  - {type: linear}\n");
    /* no batch norm: a micro-batch's statistics would make 2 x 32 differ from 64 */
    write_text(mlp_path, sizeof mlp_path, "mlp.yaml",
               "layers:\n"
               "  - {type: flatten}\n"
               "  - {type: linear, out: 64}\n"
               "  - {type: relu}\n"
               "  - {type: linear}\n");
}

static void base(stoke_train_config *c)
{
    stoke_train_config_defaults(c);
    snprintf(c->dataset, sizeof c->dataset, "%s", x_path);
    snprintf(c->val_dataset, sizeof c->val_dataset, "%s", x_path);
    snprintf(c->model, sizeof c->model, "%s", cnn_path);
    c->epochs = 1;
    c->val_batch_size = 64;
    c->threads = 2;
    c->workers = 0;
    c->monitor = false;
    c->seed = 3;
}

static stoke_trainer *dry(const stoke_train_config *c)
{
    stoke_train_config d = *c;
    d.dry_run = true;
    stoke_trainer *t = NULL;
    stoke_status s = stoke_trainer_new(&d, NULL, NULL, &t);
    CHECK_MSG(s == STOKE_OK, "%s", stoke_last_error());
    return t;
}

/* What the plans at `batch` take within `budget` (the given --memory-budget; the data
 * held is counted beside): the training model, its loader's ring, the others. */
static size_t need_at(const stoke_train_config *c, int64_t batch)
{
    stoke_train_config b = *c;
    b.batch_size = batch;
    stoke_trainer *t = dry(&b);
    if (!t)
        return 0;
    stoke_mem_plan plan;
    int64_t maxb;
    size_t used, beside;
    CHECK_INT_EQ(stoke_trainer_plan(t, 0, &plan, &maxb, &used, &beside), STOKE_OK);
    size_t ring = train_ring_per_sample(t, t->train_d, t->workers, t->decision.prefetch);
    stoke_trainer_free(t);
    return plan.total + ring * (size_t)batch + beside;
}

static int64_t pow2_floor(int64_t b)
{
    int64_t p = 1;
    while (p * 2 <= b)
        p *= 2;
    return p;
}

/* One budget: the finder's cap is the largest batch that fits (checked against the
 * plans at it and one above), the power of two below it when asked, at most the
 * samples; the trainer applies it (the CPU: at most its starting point). */
static void finder_case(double budget, double safety, bool pow2, int64_t limit)
{
    stoke_train_config c;
    base(&c);
    c.memory_budget = budget;
    c.memory_safety = safety;
    c.batch_pow2 = pow2;
    c.limit = limit;
    c.batch_size = 1;
    stoke_trainer *t = dry(&c);
    if (!t)
        return;
    int64_t cap = -1;
    char why[300];
    stoke_status s = train_fit_batch(t, safety, pow2, &cap, why, sizeof why);
    char err[400];
    snprintf(err, sizeof err, "%s", s == STOKE_OK ? "" : stoke_last_error());
    int64_t samples = t->info.count;
    stoke_trainer_free(t);
    size_t have = (size_t)(budget * safety);
    if (need_at(&c, 1) > have) { /* not even batch 1: said, with the numbers */
        CHECK_INT_EQ(s, STOKE_ERR_NOMEM);
        CHECK_STR_CONTAINS(err, "batch_size auto: not even batch 1 fits");
        printf("budget %.0f x %.2f: not even batch 1\n", budget, safety);
        return;
    }
    CHECK_MSG(s == STOKE_OK, "budget %g: %s", budget, err);
    int64_t fit = cap, above = cap + 1;
    if (pow2) { /* the fit is in [cap, 2 cap): find it, one sample at a time */
        CHECK_MSG(cap == pow2_floor(cap), "cap %lld is not a power of two", (long long)cap);
        while (fit + 1 < 2 * cap && fit + 1 <= samples && need_at(&c, fit + 1) <= have)
            fit++;
        above = fit + 1;
        CHECK_INT_EQ(cap, pow2_floor(fit));
    }
    CHECK_MSG(need_at(&c, cap) <= have, "budget %g x %g: batch %lld does not fit", budget, safety,
              (long long)cap);
    if (above <= samples)
        CHECK_MSG(need_at(&c, above) > have, "budget %g x %g: batch %lld fits too (cap %lld)",
                  budget, safety, (long long)above, (long long)cap);
    else
        CHECK_INT_EQ(fit, samples); /* the dataset's cap */
    CHECK_STR_CONTAINS(why, "memory_safety");
    CHECK_STR_CONTAINS(why, "--memory-budget");
    /* applied: batch_size auto trains at it, said as tuned */
    c.batch_size = 0;
    t = dry(&c);
    if (!t)
        return;
    /* the fit, at most the CPU's start and the batch that keeps 50 steps an epoch */
    int64_t steps =
        samples / STOKE_TUNE_MIN_EPOCH_STEPS > 1 ? samples / STOKE_TUNE_MIN_EPOCH_STEPS : 1;
    steps = pow2 ? pow2_floor(steps) : steps;
    int64_t want = cap < STOKE_TUNE_CPU_START_BATCH ? cap : STOKE_TUNE_CPU_START_BATCH;
    want = steps < want ? steps : want;
    CHECK_INT_EQ(stoke_trainer_config(t)->batch_size, want);
    const stoke_decision *d = stoke_trainer_decision(t);
    CHECK_INT_EQ(d->batch, want);
    CHECK_INT_EQ(d->batch_why.source, STOKE_SRC_RULE);
    CHECK_STR_CONTAINS(d->batch_why.reason, why);
    if (want < cap)
        CHECK_STR_CONTAINS(d->batch_why.reason,
                           want == steps ? "optimizer steps" : "the CPU's starting point");
    stoke_trainer_free(t);
    printf("budget %.0f x %.2f%s%s: cap %lld, batch %lld\n", budget, safety, pow2 ? " pow2" : "",
           limit ? " limited" : "", (long long)cap, (long long)want);
}

static void test_finder(void)
{
    stoke_train_config c;
    base(&c);
    /* budgets from the plans themselves: room for about k samples */
    size_t one = need_at(&c, 1), per = need_at(&c, 65) - need_at(&c, 64);
    CHECK(one > 0 && per > 0);
    int ks[] = {3, 37, 200};
    for (int i = 0; i < 3; i++) {
        double b = (double)(one + per * (size_t)ks[i]);
        finder_case(b, 1.0, false, 0);
        finder_case(b, 1.0, true, 0);
        finder_case(b / 0.7, 0.7, false, 0); /* the same room through the safety factor */
        finder_case(b, 0.5, true, 0);
    }
    finder_case(1e12, 0.7, false, 0);  /* the dataset caps it: 320, the CPU's start below */
    finder_case(1e12, 0.7, false, 90); /* --limit caps it */
    finder_case(1e12, 0.7, true, 90);
    /* not even batch 1 */
    c.memory_budget = (double)one / 2;
    c.batch_size = 0;
    stoke_trainer *t = NULL;
    c.dry_run = true;
    CHECK_INT_EQ(stoke_trainer_new(&c, NULL, NULL, &t), STOKE_ERR_NOMEM);
    CHECK_STR_CONTAINS(stoke_last_error(), "batch_size auto: not even batch 1 fits");
    CHECK(t == NULL);
}

static const char *env_auto(const char *name)
{
    return !strcmp(name, "BATCH_SIZE") ? "auto" : !strcmp(name, "EFFECTIVE_BATCH") ? "100" : NULL;
}

static void test_config_keys(void)
{
    stoke_train_config c;
    stoke_train_config_defaults(&c);
    CHECK_NEAR(c.memory_safety, 0.7, 0);
    CHECK(c.batch_pow2);
    CHECK_INT_EQ(c.effective_batch, 0);
    CHECK_INT_EQ(stoke_train_config_load_env(&c, env_auto), STOKE_OK);
    CHECK_INT_EQ(c.batch_size, 0);
    CHECK_INT_EQ(stoke_train_config_source(&c, "batch_size"), STOKE_CFG_ENV);
    CHECK_INT_EQ(c.effective_batch, 100);
    CHECK_INT_EQ(stoke_train_config_source(&c, "effective_batch"), STOKE_CFG_ENV);
    static const char f[] = "batch_size: auto\nmemory_safety: 50%\nbatch_pow2: false\n";
    stoke_train_config_defaults(&c);
    CHECK_INT_EQ(stoke_train_config_parse(&c, f, strlen(f), "b.yaml"), STOKE_OK);
    CHECK_INT_EQ(c.batch_size, 0);
    CHECK_NEAR(c.memory_safety, 0.5, 1e-12);
    CHECK(!c.batch_pow2);
    CHECK_INT_EQ(stoke_train_config_source(&c, "memory_safety"), STOKE_CFG_FILE);
    CHECK_INT_EQ(stoke_train_config_set(&c, "batch-size", "AUTO", STOKE_CFG_FLAG), STOKE_OK);
    CHECK_INT_EQ(stoke_train_config_source(&c, "batch_size"), STOKE_CFG_FLAG);
    /* every error names the key */
    const char *bad[][3] = {
        {"memory_safety", "0", "memory_safety: '0' is not a fraction in (0, 1]"},
        {"memory_safety", "1.5", "memory_safety: '1.5' is not a fraction"},
        {"memory_safety", "-0.2", "memory_safety: '-0.2'"},
        {"batch_pow2", "maybe", "batch_pow2: 'maybe' is not true or false"},
        {"effective_batch", "-1", "effective_batch: '-1' is not a whole number"},
        {"effective_batch", "auto", "effective_batch: 'auto' is for the"},
        {"batch_size", "0", "batch_size: '0' is not a whole number"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_INT_EQ(stoke_train_config_set(&c, bad[i][0], bad[i][1], STOKE_CFG_FLAG),
                     STOKE_ERR_ARG);
        CHECK_STR_CONTAINS(stoke_last_error(), bad[i][2]);
    }
}

/* batch auto keeps 50 optimizer steps an epoch: the fastest batch of a small dataset
 * is a few steps an epoch (2,000 samples at batch 1024: 2 steps, 9% accuracy). The
 * user's effective_batch sets the optimizer's batch instead; an accumulation given
 * counts. */
static void test_steps_cap(void)
{
    stoke_train_config c;
    base(&c);
    c.memory_budget = 1e12; /* memory is no bound: the 320 samples are */
    c.batch_size = 0;
    stoke_trainer *t = dry(&c);
    if (t) {
        CHECK_INT_EQ(stoke_trainer_config(t)->batch_size, 4); /* 320 / 50 = 6, a power of two */
        CHECK_STR_CONTAINS(stoke_trainer_decision(t)->batch_why.reason,
                           "at most 6 keeps an epoch of 320 samples at least 50 optimizer steps");
        stoke_trainer_free(t);
    }
    c.batch_pow2 = false;
    if ((t = dry(&c))) {
        CHECK_INT_EQ(stoke_trainer_config(t)->batch_size, 6);
        stoke_trainer_free(t);
    }
    CHECK_INT_EQ(stoke_train_config_set(&c, "accumulate", "2", STOKE_CFG_FLAG), STOKE_OK);
    if ((t = dry(&c))) {
        CHECK_INT_EQ(stoke_trainer_config(t)->batch_size, 3); /* 320 / (50 x 2) */
        stoke_trainer_free(t);
    }
    base(&c);
    c.memory_budget = 1e12;
    c.batch_size = 0;
    c.effective_batch = 512;
    if ((t = dry(&c))) {
        CHECK_INT_EQ(stoke_trainer_config(t)->batch_size, 256); /* the fit 320, pow2, the CPU */
        CHECK(!strstr(stoke_trainer_decision(t)->batch_why.reason, "optimizer steps"));
        stoke_trainer_free(t);
    }
}

static void test_effective(void)
{
    stoke_train_config c;
    base(&c);
    c.batch_size = 32;
    struct {
        int64_t eff, accum;
        const char *says;
    } cases[] = {{100, 4, "the effective batch is 128"}, {96, 3, "3 accumulated"}, {1, 1, ""}};
    for (int i = 0; i < 3; i++) {
        CHECK_INT_EQ(stoke_train_config_set(&c, "effective_batch", "0", STOKE_CFG_FLAG), STOKE_OK);
        c.effective_batch = cases[i].eff;
        stoke_trainer *t = dry(&c);
        if (!t)
            continue;
        CHECK_INT_EQ(stoke_trainer_config(t)->accumulate, cases[i].accum);
        CHECK_INT_EQ(stoke_trainer_decision(t)->accumulate_why.source, STOKE_SRC_RULE);
        CHECK_STR_CONTAINS(stoke_trainer_decision(t)->accumulate_why.reason, cases[i].says);
        if (cases[i].eff == 96)
            CHECK(!strstr(stoke_trainer_decision(t)->accumulate_why.reason, "not a multiple"));
        stoke_trainer_free(t);
    }
    /* with the batch auto: ceil(effective / the batch found) */
    c.batch_size = 0;
    c.memory_budget = 1e12;
    c.limit = 100; /* the fit is 100, 64 as a power of two */
    c.effective_batch = 200;
    stoke_trainer *t = dry(&c);
    if (t) {
        CHECK_INT_EQ(stoke_trainer_config(t)->batch_size, 64);
        CHECK_INT_EQ(stoke_trainer_config(t)->accumulate, 4);
        stoke_trainer_free(t);
    }
    /* accumulate and effective_batch both given: refused, naming both and the sources */
    CHECK_INT_EQ(stoke_train_config_set(&c, "accumulate", "2", STOKE_CFG_ENV), STOKE_OK);
    c.dry_run = true;
    CHECK_INT_EQ(stoke_trainer_new(&c, NULL, NULL, &t), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(),
                       "effective_batch (flag) and accumulate (env) both set the accumulation");
}

typedef struct lines {
    char text[4][600];
    int n;
} lines;

static void keep_halving(const stoke_train_event *e, void *ctx)
{
    lines *l = ctx;
    if (e->kind == STOKE_EV_INFO && strstr(e->text, "accumulated instead") && l->n < 4)
        snprintf(l->text[l->n++], sizeof l->text[0], "%s", e->text);
}

typedef struct run {
    stoke_train_result r;
    int64_t batch, accum;
    float w[4]; /* the first weights */
    lines said;
} run;

static void train_run(const stoke_train_config *c, run *out)
{
    memset(out, 0, sizeof *out);
    stoke_trainer *t = NULL;
    stoke_status s = stoke_trainer_new(c, keep_halving, &out->said, &t);
    CHECK_MSG(s == STOKE_OK, "%s", stoke_last_error());
    if (s != STOKE_OK)
        return;
    s = stoke_trainer_run(t, NULL);
    CHECK_MSG(s == STOKE_OK, "%s", stoke_last_error());
    stoke_trainer_result(t, &out->r);
    out->batch = stoke_trainer_config(t)->batch_size;
    out->accum = stoke_trainer_config(t)->accumulate;
    memcpy(out->w, stoke_model_param(stoke_trainer_model(t), 0), sizeof out->w);
    stoke_trainer_free(t);
}

/* The CPU allocator seam (nn/cpu/alloc_seam.h) refusing blocks above a size, as an
 * out-of-memory host would refuse the arenas that grow with the batch. */
static size_t g_refuse_above;

static void *refusing_alloc(size_t bytes)
{
    return bytes > g_refuse_above ? NULL : cpu_alloc_default_ops()->alloc(bytes);
}

static void refusing_free(void *p) { cpu_alloc_default_ops()->free(p); }

static const cpu_alloc_ops refusing = {refusing_alloc, refusing_free};

static void test_alloc_failure(void)
{
    stoke_train_config c;
    base(&c);
    snprintf(c.model, sizeof c.model, "%s", mlp_path);
    c.epochs = 2;
    c.batch_size = 64;
    c.val_batch_size = 64;
    snprintf(c.optimizer, sizeof c.optimizer, "adamw"); /* state to keep: two moments */
    c.lr = 0.01;
    run a, b, h, d;
    train_run(&c, &a);
    /* the arena that grows with the batch refused at 64, allowed at 32 */
    stoke_trainer *t = dry(&c);
    if (!t)
        return;
    const stoke_mem_plan *p = NULL;
    stoke_mem_plan plan;
    int64_t maxb;
    size_t used, beside;
    CHECK_INT_EQ(stoke_trainer_plan(t, 0, &plan, &maxb, &used, &beside), STOKE_OK);
    p = &plan;
    stoke_trainer_free(t);
    size_t act32 = p->activations_per_sample * 32, limit = act32;
    size_t fixed[] = {p->params, p->grads, p->optim, p->workspace};
    for (int i = 0; i < 4; i++)
        limit = fixed[i] > limit ? fixed[i] : limit;
    CHECK_MSG(p->activations_per_sample * 64 > limit, "no arena to refuse at batch 64");
    g_refuse_above = limit;
    const cpu_alloc_ops *prev = cpu_alloc_set_ops(&refusing);
    train_run(&c, &b);
    cpu_alloc_set_ops(prev);
    /* within training: the first batch of step 3 refused, as a grown workspace would */
    step_fault f;
    step_fault_set(&f, 3, 0);
    train_run(&c, &h);
    step_fault_clear();
    /* the reference for both: 32 x 2 from the start */
    c.batch_size = 32;
    c.accumulate = 2;
    train_run(&c, &d);
    /* within a step's accumulation: its second batch, gradients of the first held */
    run m;
    step_fault_set(&f, 7, 1); /* in the last epoch */
    train_run(&c, &m);
    step_fault_clear();
    CHECK_INT_EQ(m.batch, 16);
    CHECK_INT_EQ(m.accum, 4);
    CHECK_INT_EQ(m.r.steps, a.r.steps);
    CHECK_INT_EQ(m.said.n, 1);
    CHECK_STR_CONTAINS(m.said.text[0], "refused at step 7, batch 1 of it): batch 16 x 4");
    CHECK_MSG(fabs(m.r.val_loss - a.r.val_loss) < 1e-4 * (1 + fabs(a.r.val_loss)),
              "mid-step: val loss %.6f, at 64 %.6f", m.r.val_loss, a.r.val_loss);
    for (int k = 0; k < 4; k++)
        CHECK_NEAR(m.w[k], a.w[k], 1e-4);
    /* the epoch's loss counts each sample once: the restarted step's first batch too */
    CHECK_NEAR(m.r.train_loss, a.r.train_loss, 1e-4 * (1 + fabs(a.r.train_loss)));
    const run *rs[] = {&b, &h};
    for (int i = 0; i < 2; i++) {
        const run *r = rs[i];
        CHECK_INT_EQ(r->batch, 32);
        CHECK_INT_EQ(r->accum, 2); /* the same effective batch */
        CHECK_INT_EQ(r->r.steps, a.r.steps);
        CHECK_INT_EQ(r->r.epochs_done, 2);
        CHECK_INT_EQ(r->said.n, 1);
        CHECK_STR_CONTAINS(r->said.text[0], "batch 32 x 2 accumulated instead, the same effective "
                                            "batch");
        CHECK_STR_CONTAINS(r->said.text[0], "out of host memory");
        /* nothing lost: the training is the one at 64 (up to the sums' order) */
        CHECK_MSG(fabs(r->r.val_loss - a.r.val_loss) < 1e-4 * (1 + fabs(a.r.val_loss)),
                  "run %d: val loss %.6f, at 64 %.6f", i, r->r.val_loss, a.r.val_loss);
        for (int k = 0; k < 4; k++)
            CHECK_NEAR(r->w[k], a.w[k], 1e-4);
    }
    CHECK_STR_CONTAINS(b.said.text[0], "cannot allocate");
    CHECK_STR_CONTAINS(h.said.text[0], "test fault: the workspace of batch 64 refused at step 3");
    /* halved before the first step: exactly the run at 32 x 2 */
    CHECK(memcmp(b.w, d.w, sizeof b.w) == 0);
    CHECK_INT_EQ(a.said.n, 0);
    printf("val loss at 64 %.6f, halved at setup %.6f, within training %.6f, 32 x 2 %.6f\n",
           a.r.val_loss, b.r.val_loss, h.r.val_loss, d.r.val_loss);
}

static void cleanup(void)
{
    const char *names[] = {"x.npy", "y.npy", "cnn.yaml", "mlp.yaml"};
    char p[600];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* Issue 24 (4): batches larger than the samples they are run on. The validation
 * model was planned at --val-batch-size whatever the validation set held (256 for 30
 * images: 3.4 GB); --batch-size 100000 on 1000 samples was planned as such and
 * failed at the kernels' size limit, with a message naming the wrong size. */
static void test_caps(void)
{
    stoke_train_config c;
    base(&c);
    c.memory_budget = 1e9;
    c.batch_size = 32;
    c.val_limit = 30;
    size_t beside[2] = {0, 0};
    int64_t vb[2] = {256, 30};
    for (int i = 0; i < 2; i++) {
        c.val_batch_size = vb[i];
        stoke_trainer *t = dry(&c);
        if (!t)
            return;
        stoke_mem_plan plan;
        int64_t maxb;
        size_t used;
        CHECK_INT_EQ(stoke_trainer_plan(t, 0, &plan, &maxb, &used, &beside[i]), STOKE_OK);
        stoke_trainer_free(t);
    }
    /* the validation model at 30 either way: what it takes beside the training one */
    CHECK_MSG(beside[0] == beside[1], "beside the training model: %zu at val batch 256, %zu at 30",
              beside[0], beside[1]);

    /* a given batch over the training samples: capped, and said */
    base(&c);
    c.limit = 90;
    c.batch_size = 100000;
    stoke_trainer *t = dry(&c);
    if (t) {
        CHECK_INT_EQ(stoke_trainer_config(t)->batch_size, 90);
        CHECK_INT_EQ(stoke_trainer_decision(t)->batch, 90);
        stoke_trainer_free(t);
    }

    /* a batch within the samples that the kernels cannot index: conv1's output is
     * 131072 x 8 x 8 = 8388608 values a sample, so 255 samples are the most an int
     * counts (2147483647 / 8388608 = 255.99) */
    char wide_path[512];
    write_text(wide_path, sizeof wide_path, "wide.yaml",
               "layers:\n"
               "  - {type: conv2d, out: 131072, kernel: 3, padding: 1}\n"
               "  - {type: global_avgpool}\n"
               "  - {type: flatten}\n"
               "  - {type: linear}\n");
    base(&c);
    snprintf(c.model, sizeof c.model, "%s", wide_path);
    c.val_dataset[0] = '\0';
    c.batch_size = 300;
    t = dry(&c);
    if (t) {
        stoke_mem_plan plan;
        int64_t maxb;
        size_t used, bes;
        CHECK_INT_EQ(stoke_trainer_plan(t, 0, &plan, &maxb, &used, &bes), STOKE_ERR_ARG);
        CHECK_STR_CONTAINS(stoke_last_error(),
                           "conv1: its output at batch 300 has 2516582400 values (8388608 a "
                           "sample), more than the CPU kernels' int limit (2147483647): this "
                           "layer takes a batch of at most 255");
        CHECK_STR_CONTAINS(stoke_last_error(),
                           "the largest training batch the model's kernels take is 255 "
                           "(--batch-size 255)");
        stoke_trainer_free(t);
    }
    unlink(wide_path);
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/stoke-batch-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir))
        return 1;
    make_dataset();
    test_config_keys();
    test_finder();
    test_caps();
    test_steps_cap();
    test_effective();
    test_alloc_failure();
    cleanup();
    return CHECK_DONE();
}
