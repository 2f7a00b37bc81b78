/* tune.c - settings measured rather than ruled: the trials (real training steps on the
 * run's own model and data), which settings are open to them, and stoke_train_tune
 * (`stoke tune`, and `auto` in a run). The tuning cache is tune_cache.c. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/text.h"
#include "core/tmpfile.h"
#include "train/trainer.h"
#include "train/tuning.h"

/* A trial: 3 warm-up steps (the arenas, the loader's ring, the kernels' first
 * calls), then at least 5 steps and the seconds asked. */
#define TRIAL_WARMUP    3
#define TRIAL_MIN_STEPS 5
#define TRIAL_SECONDS   0.5
/* The batch search starts no lower: below it a step is mostly fixed overhead. */
#define TUNE_BATCH_MIN 16

typedef struct trial_ctx {
    stoke_train_config base;
    double seconds;
} trial_ctx;

static stoke_status run_trial(void *ctx, const stoke_tune_point *p, stoke_tune_measure *m)
{
    const trial_ctx *x = ctx;
    stoke_train_config c = x->base;
    c.batch_size = p->batch;
    c.workers = p->workers;
    c.prefetch = p->prefetch;
    c.threads = p->threads;
    stoke_say(c.precision, sizeof c.precision, "%s", stoke_precision_name(p->precision));
    c.accumulate = 1; /* a micro-batch's speed; accumulation only spaces the updates */
    c.effective_batch = 0;
    c.epochs = 1000000; /* the trial stops itself; the schedule's rate stays the start's */
    c.max_steps = c.eval_every = 0;
    c.target_accuracy = 0;
    c.checkpoint[0] = c.resume[0] = c.log[0] = '\0';
    c.monitor = c.dry_run = false;
    train_trial tr = {.on = true,
                      .warmup = TRIAL_WARMUP,
                      .min_steps = TRIAL_MIN_STEPS,
                      .max_steps = 1000000,
                      .seconds = x->seconds,
                      .finite = true};
    stoke_trainer *t = NULL;
    stoke_status s = train_new(&c, NULL, NULL, &tr, &t);
    memset(m, 0, sizeof *m);
    if (s == STOKE_OK && (s = stoke_trainer_run(t, NULL)) == STOKE_ERR_ARG) {
        /* set up, then refused by a step: a gradient that is not finite (an fp32 or
         * bf16 step stops there) or a bad sample; either way this setting did not
         * train. A bad sample fails every trial, and the search then says so. */
        stoke_say(m->error, sizeof m->error, "%s", stoke_last_error());
        m->finite = false;
        stoke_trainer_free(t);
        return STOKE_OK;
    }
    if (s == STOKE_ERR_NOMEM) { /* this setting does not fit: the search goes on */
        stoke_say(m->error, sizeof m->error, "%s", stoke_last_error());
        m->finite = true; /* nothing diverged */
        stoke_trainer_free(t);
        return STOKE_OK;
    }
    if (s != STOKE_OK) {
        stoke_trainer_free(t);
        return s;
    }
    const train_trial *r = &t->trial;
    stoke_loader_stats s1;
    stoke_loader_get_stats(t->loader, &s1);
    double dt = r->t1 - r->t0;
    int64_t batches = s1.batches - r->s0.batches;
    m->ran = r->marked && batches > 0 && dt > 0;
    if (!m->ran) {
        stoke_say(m->error, sizeof m->error, "the trial measured nothing");
        m->finite = true;
        stoke_trainer_free(t);
        return STOKE_OK;
    }
    m->steps = t->step - r->step0;
    m->seconds = dt;
    m->samples_per_s = (double)(s1.samples - r->s0.samples) / dt;
    double wait_ms =
        s1.wait_avg_ms * (double)s1.batches - r->s0.wait_avg_ms * (double)r->s0.batches;
    double busy_ms =
        s1.busy_avg_ms * (double)s1.batches - r->s0.busy_avg_ms * (double)r->s0.batches;
    m->wait_pct = 100.0 * wait_ms / 1e3 / dt;
    if (m->wait_pct < 0)
        m->wait_pct = 0;
    if (m->wait_pct > 100)
        m->wait_pct = 100;
    m->step_ms = dt * 1e3 / (double)(m->steps > 0 ? m->steps : 1);
    m->produce_ms = busy_ms > 0 ? busy_ms / (double)batches : 0;
    m->produce_p95_ms = s1.busy_p95_ms > m->produce_ms ? s1.busy_p95_ms : m->produce_ms;
    m->finite = r->finite && isfinite(t->ep_loss);
    m->loss = r->loss_samples > 0 ? r->loss_sum / r->loss_samples : NAN;
    stoke_mem_plan plan;
    int64_t most;
    size_t used, beside;
    if (stoke_trainer_plan(t, 0, &plan, &most, &used, &beside) == STOKE_OK)
        m->memory_bytes = (double)plan.total +
                          (double)train_ring_per_sample(t, t->train_d, p->workers, p->prefetch) *
                              (double)p->batch;
    stoke_trainer_free(t);
    return STOKE_OK;
}

/* ---- which settings are measured -------------------------------------------------- */

bool train_precision_open(const stoke_train_config *c, bool all, bool unsure)
{
    stoke_cfg_source src = stoke_train_config_source(c, "precision");
    return !strcmp(c->precision, "auto") &&
           (all || (src != STOKE_CFG_DEFAULT && src != STOKE_CFG_CHECKPOINT) ||
            (unsure && src == STOKE_CFG_DEFAULT));
}

/* `auto` given leaves a setting to measurement; `all` (stoke tune) also every setting
 * left at its default, and precision left unset is measured where its rule is unsure
 * (train_precision_open). A checkpoint's auto is not given: a run saves what it
 * measured as the value (apply_point), so an auto it saved is one its rules decided,
 * and the resumed run decides it by the same rules. */
static tune_open open_settings(const stoke_train_config *c, bool all, bool unsure)
{
#define OPEN(key, is_auto)                                                           \
    ((is_auto) && (all || (stoke_train_config_source(c, key) != STOKE_CFG_DEFAULT && \
                           stoke_train_config_source(c, key) != STOKE_CFG_CHECKPOINT)))
    tune_open o = {
        /* batch_size auto is 0 (train_decide_batch) */
        .batch = c->batch_size == 0 ||
                 (all && stoke_train_config_source(c, "batch_size") == STOKE_CFG_DEFAULT),
        .workers = OPEN("workers", c->workers < 0),
        .prefetch = OPEN("prefetch", c->prefetch == 0),
        .threads = OPEN("threads", c->threads == 0),
        .precision = train_precision_open(c, all, unsure),
    };
#undef OPEN
    return o;
}

/* Whether this CPU's precision rule is unsure (stoke_rec.unsure), from the CPU alone: a
 * cheap filter before the planning trainer, whose decision (the rule of the device the
 * run takes, none on a GPU) is the one that counts. False when the CPU cannot be read:
 * the rule then decides, as the run's own probe will say. */
static bool cpu_rule_unsure(void)
{
    stoke_machine *m = calloc(1, sizeof *m);
    stoke_recs *recs = malloc(sizeof *recs);
    bool unsure = false;
    if (m && recs && stoke_cpu_probe(NULL, &m->cpu) == STOKE_OK) {
        stoke_recommend(m, recs);
        const stoke_rec *r = stoke_recs_find(recs, "precision", STOKE_TUNE_CPU);
        unsure = r && r->unsure;
    }
    free(recs);
    free(m);
    return unsure;
}

static bool any_open(const tune_open *o)
{
    return o->batch || o->workers || o->prefetch || o->threads || o->precision;
}

/* ---- the search over a run's settings ---------------------------------------------- */

/* A trainer set up as `cfg` would be, without training (the planning trainer): the
 * machine, the data, the model and the rules' decision, the search's start. */
static stoke_status plan_trainer(const stoke_train_config *cfg, const tune_open *o,
                                 stoke_trainer **out)
{
    stoke_train_config c = *cfg;
    if (o->batch)
        c.batch_size = 0; /* the search starts from batch auto's rule (train_decide_batch) */
    c.dry_run = true;
    c.monitor = false;
    train_trial off = {0}; /* not a trial, and not tuned again */
    return train_new(&c, NULL, NULL, &off, out);
}

static stoke_status build_space(stoke_trainer *pt, const tune_open *o, bool grid, int64_t max_batch,
                                stoke_tune_space *sp)
{
    const stoke_decision *d = &pt->decision;
    memset(sp, 0, sizeof *sp);
    sp->start =
        (stoke_tune_point){pt->cfg.batch_size, d->workers, d->prefetch, d->threads, d->precision};
    sp->batch = o->batch;
    sp->workers = o->workers;
    sp->prefetch = o->prefetch;
    /* threads not given follow the rule (the CPUs the workers leave): the split
     * moves them with the workers even when only the workers are measured */
    sp->threads = o->threads || pt->cfg.threads == 0;
    sp->precision = o->precision;
    sp->precision_compare = o->precision && d->precision_unsure;
    stoke_say(sp->precision_unsure_why, sizeof sp->precision_unsure_why, "%s",
              d->precision_unsure_why);
    sp->cpu = d->device == STOKE_TUNE_CPU;
    sp->usable_cpus = d->available_cpus; /* the cgroup quota's, not only the affinity's */
    sp->max_workers = sp->cpu ? 0 : (d->available_cpus > 1 ? d->available_cpus - 1 : 1);
    sp->grid = grid;
    sp->batch_min = TUNE_BATCH_MIN;
    sp->batch_max = pt->info.count;
    stoke_say(sp->batch_max_why, sizeof sp->batch_max_why, "the %" PRId64 " samples",
              pt->info.count);
    if (o->batch) {
        /* the memory fit (memory_safety x the free memory) is the batches' ceiling, and
         * so are the steps an epoch needs (the fastest batch of a small dataset would
         * leave too few to learn) */
        int64_t fit = 0;
        char why[400];
        stoke_status s = train_fit_batch(pt, pt->cfg.memory_safety, false, &fit, why, sizeof why);
        if (s != STOKE_OK)
            return s;
        if (fit > 0 && fit < sp->batch_max) {
            sp->batch_max = fit;
            stoke_say(sp->batch_max_why, sizeof sp->batch_max_why,
                      "the memory fit (%.0f%% memory_safety of the free memory)",
                      pt->cfg.memory_safety * 100);
        }
        int64_t steps = stoke_tune_steps_cap(pt->info.count, pt->cfg.accumulate,
                                             pt->cfg.effective_batch > 0, why, sizeof why);
        if (steps > 0 && steps < sp->batch_max) {
            sp->batch_max = steps;
            stoke_say(sp->batch_max_why, sizeof sp->batch_max_why, "%s", why);
        }
        if (max_batch > 0 && max_batch < sp->batch_max) {
            sp->batch_max = max_batch;
            stoke_say(sp->batch_max_why, sizeof sp->batch_max_why, "--max-batch");
        }
        if (sp->batch_min > sp->batch_max)
            sp->batch_min = 1;
    }
    return STOKE_OK;
}

typedef struct tune_run {
    stoke_train_tune_opts opts;
    stoke_trainer *owner; /* a run tuning itself: trials become its INFO lines */
    int count;
} tune_run;

void stoke_train_format_trial(const stoke_tune_trial *t, int index, char *buf, size_t size)
{
    const stoke_tune_point *p = &t->p;
    int n = snprintf(buf, size,
                     "trial %d (%s): batch %" PRId64 ", %d worker%s + %d thread%s, prefetch %d, %s",
                     index, t->stage, p->batch, p->workers, p->workers == 1 ? "" : "s", p->threads,
                     p->threads == 1 ? "" : "s", p->prefetch, stoke_precision_name(p->precision));
    if (n < 0 || (size_t)n >= size)
        return;
    char mem[32];
    if (!t->m.ran)
        stoke_say(buf + n, size - (size_t)n, " -> could not run: %s", t->m.error);
    else
        stoke_say(buf + n, size - (size_t)n,
                  " -> %.0f samples/s, data wait %.1f%%, %.2f ms a step, memory %s%s",
                  t->m.samples_per_s, t->m.wait_pct, t->m.step_ms,
                  stoke_format_bytes(t->m.memory_bytes, mem, sizeof mem),
                  t->m.finite ? "" : ", loss NOT finite");
}

static void on_trial(void *ctx, const stoke_tune_trial *t)
{
    tune_run *r = ctx;
    r->count++;
    if (r->owner) {
        char line[600];
        stoke_train_format_trial(t, r->count, line, sizeof line);
        train_info(r->owner, "tune: %s", line);
    }
    if (r->opts.on_trial)
        r->opts.on_trial(r->opts.ctx, t);
}

/* The settings file for the result, to the cache and to opts->output. */
static stoke_status write_results(const stoke_trainer *pt, const tune_open *o, const char *key,
                                  const stoke_train_tune_opts *opts, stoke_train_tuning *out)
{
    char *y = train_tuned_yaml(pt, o, &out->result, key, out->seconds);
    if (!y)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    stoke_status s = STOKE_OK;
    if (opts->write_cache && out->cache_path[0] && !opts->grid) {
        errno = 0;
        if (!train_make_dirs(out->cache_path))
            stoke_say(out->cache_error, sizeof out->cache_error, "%s: %s", out->cache_path,
                      strerror(errno));
        else if (train_write_file(out->cache_path, y) != STOKE_OK)
            /* a cache that cannot be written costs the next run its trials, no more */
            stoke_say(out->cache_error, sizeof out->cache_error, "%s", stoke_last_error());
    }
    if (opts->output)
        s = train_write_file(opts->output, y);
    free(y);
    return s;
}

/* A setting measured whose trials said nothing (fp32: no rule to confirm) keeps the
 * rule's value, and so the rule's reason: a measured value is never shown without one. */
static void rule_reasons(const stoke_trainer *pt, const tune_open *o, stoke_tune_result *x)
{
    const stoke_decision *d = &pt->decision;
    struct {
        bool on;
        char *why;
        const stoke_why *rule;
    } v[] = {{o->batch, x->why_batch, &d->batch_why},
             {o->workers, x->why_workers, &d->workers_why},
             {o->prefetch, x->why_prefetch, &d->prefetch_why},
             {o->threads, x->why_threads, &d->threads_why},
             {o->precision, x->why_precision, &d->precision_why}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i].on && !v[i].why[0])
            stoke_say(v[i].why, sizeof x->why_batch, "the rule's value, which the trials kept%s%s",
                      v[i].rule->reason[0] ? ": " : "", v[i].rule->reason);
}

/* stoke_train_tune, and a run's own tuning when owner is not NULL. */
static stoke_status tune(const stoke_train_config *cfg, const stoke_train_tune_opts *opts,
                         stoke_trainer *owner, stoke_train_tuning *out)
{
    memset(out, 0, sizeof *out);
    if (!(opts->trial_seconds >= 0 && opts->trial_seconds <= 600))
        return stoke_fail(STOKE_ERR_ARG, "trial seconds %g (0..600)", opts->trial_seconds);
    tune_open o = open_settings(cfg, opts->all, false);
    /* precision left unset is measured where the rule is unsure, which only the
     * machine can say: the planning trainer's decision (stoke_decision), made only
     * where the CPU's rule may be (no cost elsewhere) */
    bool unset = !o.precision && train_precision_open(cfg, opts->all, true) && cpu_rule_unsure();
    if (!any_open(&o) && !unset)
        return owner ? STOKE_OK
                     : stoke_fail(STOKE_ERR_ARG,
                                  "every setting tune measures is given (batch_size, workers, "
                                  "prefetch, threads, precision): nothing to tune");
    /* the output checked before the trials, not after them */
    if (opts->output && stoke_tmpfile_check(opts->output) != STOKE_OK)
        return train_wrap_error(STOKE_ERR_IO, "--output");
    stoke_trainer *pt = NULL;
    stoke_status s = plan_trainer(cfg, &o, &pt);
    if (s != STOKE_OK)
        return s;
    o.precision = o.precision || (unset && pt->decision.precision_unsure);
    out->batch = o.batch;
    out->workers = o.workers;
    out->prefetch = o.prefetch;
    out->threads = o.threads;
    out->precision = o.precision;
    if (!any_open(&o)) { /* the rule is sure: nothing to measure */
        stoke_trainer_free(pt);
        return STOKE_OK;
    }
    char *key = train_tune_cache_key(pt);
    if (!key) {
        stoke_trainer_free(pt);
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    }
    train_cache_file("tune", key, "yaml", out->cache_path, sizeof out->cache_path);
    /* the space first: its bounds are what a cached entry is checked against */
    stoke_tune_space sp;
    stoke_status space_s = build_space(pt, &o, opts->grid, opts->max_batch, &sp);
    if (!out->cache_path[0])
        stoke_say(out->cache_note, sizeof out->cache_note,
                  "no cache directory (STOKE_CACHE_DIR, XDG_CACHE_HOME, HOME unset)");
    else if (space_s != STOKE_OK)
        stoke_say(out->cache_note, sizeof out->cache_note, "the cache not read: %s",
                  stoke_last_error());
    else if (opts->use_cache && !opts->grid &&
             train_tune_cache_read(out->cache_path, key, cfg, &o, &sp, &out->result,
                                   out->cache_note, sizeof out->cache_note)) {
        out->cached = true;
        free(key);
        stoke_trainer_free(pt);
        return STOKE_OK;
    }
    if (opts->no_trials || space_s != STOKE_OK) {
        free(key);
        stoke_trainer_free(pt);
        /* the space's own error when trials were to run (its message is the last) */
        return opts->no_trials ? STOKE_OK : space_s;
    }
    out->space = sp;
    trial_ctx tc = {.base = pt->cfg,
                    .seconds = opts->trial_seconds > 0 ? opts->trial_seconds : TRIAL_SECONDS};
    /* every trial runs where the rules put the run, not decided again each time */
    if (pt->device == STOKE_TUNE_CPU)
        stoke_say(tc.base.device, sizeof tc.base.device, "cpu");
    else
        stoke_say(tc.base.device, sizeof tc.base.device, "cuda:%d", pt->device);
    if (owner) {
        char what[80] = "";
        const char *names[] = {o.batch ? "batch_size" : NULL, o.workers ? "workers" : NULL,
                               o.prefetch ? "prefetch" : NULL, o.threads ? "threads" : NULL,
                               o.precision ? "precision" : NULL};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (names[i])
                stoke_say(what + strlen(what), sizeof what - strlen(what), "%s%s",
                          what[0] ? ", " : "", names[i]);
        train_info(owner, "tune: measuring %s by short trials (%s)", what, out->cache_note);
    }
    tune_run run = {.opts = *opts, .owner = owner};
    double t0 = stoke_wall_time();
    s = stoke_tune_search(&sp, run_trial, &tc, on_trial, &run, &out->result);
    out->seconds = stoke_wall_time() - t0;
    if (s == STOKE_OK) {
        rule_reasons(pt, &o, &out->result);
        s = write_results(pt, &o, key, opts, out);
    }
    free(key);
    stoke_trainer_free(pt);
    return s;
}

stoke_status stoke_train_tune(const stoke_train_config *cfg, const stoke_train_tune_opts *opts,
                              stoke_train_tuning *out)
{
    return tune(cfg, opts, NULL, out);
}

/* ---- a run's `auto` settings --------------------------------------------------------- */

static void apply_point(stoke_trainer *t, const stoke_train_tuning *r)
{
    stoke_train_config *c = &t->cfg;
    const stoke_tune_point *b = &r->result.best;
    if (r->batch)
        c->batch_size = b->batch;
    if (r->workers)
        c->workers = b->workers;
    if (r->prefetch)
        c->prefetch = b->prefetch;
    if (r->threads)
        c->threads = b->threads;
    if (r->precision)
        stoke_say(c->precision, sizeof c->precision, "%s", stoke_precision_name(b->precision));
}

/* "measured: <why>"; "" when the search had nothing to say (the rule's reason stays). */
static void measured(char *buf, size_t size, const char *why)
{
    if (why[0])
        stoke_say(buf, size, "measured: %s", why);
    else
        buf[0] = '\0';
}

stoke_status train_tune_settings(stoke_trainer *t)
{
    stoke_train_tuning *r = malloc(sizeof *r);
    if (!r)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    /* a dry run (and so `config show`) measures nothing: the cache or the rules */
    if (!strcmp(t->cfg.tune, "off")) {
        free(r);
        return STOKE_OK; /* auto is the rules' */
    }
    stoke_train_tune_opts to = {.use_cache = true,
                                .write_cache = true,
                                .no_trials = t->cfg.dry_run || !strcmp(t->cfg.tune, "cache")};
    stoke_status s = tune(&t->cfg, &to, t, r);
    if (s != STOKE_OK && s != STOKE_ERR_NOMEM)
        train_wrap_error(s, "measuring the settings given as auto");
    struct train_tuned *u = &t->tuned;
    u->batch = r->batch;
    u->workers = r->workers;
    u->prefetch = r->prefetch;
    u->threads = r->threads;
    u->precision = r->precision;
    if (s != STOKE_OK || !(r->batch || r->workers || r->prefetch || r->threads || r->precision)) {
        free(r);
        return s;
    }
    if (r->cached || r->result.ntrials > 0) {
        apply_point(t, r);
        u->applied = true;
        u->source = r->cached ? STOKE_SRC_CACHED : STOKE_SRC_MEASURED;
    }
    if (r->cached) {
        stoke_say(u->why_batch, sizeof u->why_batch,
                  "measured by an earlier run's trials on this machine, model and data (%s)",
                  r->cache_path);
        stoke_say(u->why_workers, sizeof u->why_workers, "%s", u->why_batch);
        stoke_say(u->why_prefetch, sizeof u->why_prefetch, "%s", u->why_batch);
        stoke_say(u->why_threads, sizeof u->why_threads, "%s", u->why_batch);
        stoke_say(u->why_precision, sizeof u->why_precision, "%s%s%s", u->why_batch,
                  r->result.why_precision[0] ? ": " : "", r->result.why_precision);
    } else if (u->applied) {
        const stoke_tune_result *x = &r->result;
        measured(u->why_batch, sizeof u->why_batch, x->why_batch);
        measured(u->why_workers, sizeof u->why_workers, x->why_workers);
        measured(u->why_prefetch, sizeof u->why_prefetch, x->why_prefetch);
        measured(u->why_threads, sizeof u->why_threads, x->why_threads);
        measured(u->why_precision, sizeof u->why_precision, x->why_precision);
        train_info(t, "tune: %d trials in %.1f s: %.0f samples/s%s%s", x->ntrials, r->seconds,
                   x->best_m.samples_per_s, r->cache_error[0] ? "; cache not written: " : "",
                   r->cache_error);
    } else {
        stoke_say(u->pending, sizeof u->pending, "auto, not measured yet (%s; %s): the rule",
                  r->cache_note,
                  strcmp(t->cfg.tune, "cache") ? "a run measures it first"
                                               : "tune: cache runs no trials");
    }
    free(r);
    return STOKE_OK;
}
