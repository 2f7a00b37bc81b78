/* tune.c - settings measured rather than ruled: the trials (real training steps on the
 * run's own model and data), the tuning cache (one file per machine + model + dataset
 * + the settings given), and stoke_train_tune (`stoke tune`, and `auto` in a run). */
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

#include "core/env.h"
#include "core/regular.h"
#include "core/text.h"
#include "core/tmpfile.h"
#include "train/trainer.h"

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

typedef struct tune_open {
    bool batch, workers, prefetch, threads, precision;
} tune_open;

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

/* ---- the cache -------------------------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* What a measurement depends on besides the five settings, as one line: the machine,
 * the model and the data. The file's name is its hash; the line is kept in the file
 * and compared, so a collision reads as a miss. Allocated whole (the caller frees it;
 * NULL when out of memory): a key cut to a buffer's size would drop what follows a
 * long dataset path (its size and time, every setting after it), and two datasets
 * would share one entry. */
static char *cache_key(const stoke_trainer *t)
{
    const stoke_train_config *c = &t->cfg;
    const stoke_machine *m = &t->machine;
    char *real = realpath(c->dataset, NULL);
    struct stat st = {0};
    stat(real ? real : c->dataset, &st);
    char *key = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&key, &size);
    if (!f) {
        free(real);
        return NULL;
    }
    fprintf(
        f,
        "stoke-tune-1|cpu=%s|cpus=%d|simd=%x|mem=%.0fG|model=%s|hidden=%s|model_text=%016" PRIx64
        "|data=%s:%lld:%lld|limit=%" PRId64 "|augment=%d:%s|recompute=%s|device=%s|safety=%g"
        "|delay_us=%" PRId64,
        m->cpu.model, stoke_cpu_available(&m->cpu), (unsigned)m->cpu.simd,
        (double)m->mem.total_bytes / (1 << 30), c->model, c->hidden,
        fnv1a(stoke_model_file_text(t->mf)), real ? real : c->dataset, (long long)st.st_size,
        (long long)st.st_mtime, c->limit, c->augment, c->transforms, c->recompute, c->device,
        c->memory_safety,
        c->loader_delay_us); /* trials run with the slowed loader: their answer is its own */
    free(real);
    for (int i = 0; i < m->gpu_count; i++)
        fprintf(f, "|gpu=%s:%.0fG", m->gpus[i].name, (double)m->gpus[i].memory_total_bytes / 1e9);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed) {
        free(key);
        return NULL;
    }
    for (char *p = key; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return key;
}

/* $STOKE_CACHE_DIR, else $XDG_CACHE_HOME/stoke, else ~/.cache/stoke; "" if none. */
static void cache_dir(char *dir, size_t size)
{
    const char *e = stoke_env("STOKE_CACHE_DIR"), *x = stoke_env("XDG_CACHE_HOME"),
               *h = stoke_env("HOME");
    if (e && *e)
        stoke_say(dir, size, "%s", e);
    else if (x && *x)
        stoke_say(dir, size, "%s/stoke", x);
    else if (h && *h)
        stoke_say(dir, size, "%s/.cache/stoke", h);
    else
        dir[0] = '\0';
}

void train_cache_file(const char *kind, const char *key, const char *ext, char *path, size_t size)
{
    char dir[PATH_MAX];
    cache_dir(dir, sizeof dir);
    if (!dir[0]) {
        path[0] = '\0';
        return;
    }
    stoke_say(path, size, "%s/%s/%016" PRIx64 ".%s", dir, kind, fnv1a(key), ext);
}

bool train_make_dirs(const char *path)
{
    char d[PATH_MAX];
    stoke_say(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash)
        return true;
    *slash = '\0';
    for (char *p = d + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(d, 0755) && errno != EEXIST)
                return false;
            *p = '/';
        }
    return !mkdir(d, 0755) || errno == EEXIST;
}

/* "batch_size workers ...": the settings a measurement chose (the rest were given). */
static const char *measured_list(const tune_open *o, char *buf, size_t size)
{
    const char *names[] = {o->batch ? "batch_size" : NULL, o->workers ? "workers" : NULL,
                           o->prefetch ? "prefetch" : NULL, o->threads ? "threads" : NULL,
                           o->precision ? "precision" : NULL};
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i])
            stoke_say(buf + strlen(buf), size - strlen(buf), "%s%s", buf[0] ? " " : "", names[i]);
    return buf;
}

/* The settings file `stoke train --config` reads, with the measurement as comments.
 * Sized to its text: the key line is as long as the dataset's path makes it, and a
 * file cut short would lose the settings after it. */
static char *tuned_yaml(const stoke_trainer *t, const tune_open *o, const stoke_tune_result *r,
                        const char *key, double seconds)
{
    char *y = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&y, &size);
    if (!f)
        return NULL;
    const stoke_tune_point *b = &r->best;
    const stoke_tune_measure *m = &r->best_m;
    char when[32] = "", dev[32] = "the CPU computes", names[80], data[sizeof t->cfg.dataset],
         model[sizeof t->cfg.model];
    /* a line break in a path would end the comment and put the rest in the YAML */
    stoke_say(data, sizeof data, "%s", t->cfg.dataset);
    stoke_say(model, sizeof model, "%s", t->cfg.model);
    for (char *p = data; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    for (char *p = model; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    if (t->device != STOKE_TUNE_CPU)
        stoke_say(dev, sizeof dev, "on cuda:%d", t->device);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    fprintf(f,
            "# stoke tune: %s, %d usable CPUs, %s; model %s; dataset %s\n"
            "# measured %s: %.0f samples/s, data wait %.1f%%, %d trials in %.1f s\n"
            "# key: %s\n"
            "# measured: %s\n",
            t->machine.cpu.model, stoke_cpu_available(&t->machine.cpu), dev, model, data, when,
            m->samples_per_s, m->wait_pct, r->ntrials, seconds, key,
            measured_list(o, names, sizeof names));
    /* the precision's reason (both rates, the rule's doubt) for the runs that read it */
    if (o->precision && r->why_precision[0])
        fprintf(f, "# why precision: %s\n", r->why_precision);
    /* all five: the file is the whole tuned configuration (the settings given were
     * measured with), and the cache checks a later run's against them */
    fprintf(f, "batch_size: %" PRId64 "\nworkers: %d\nprefetch: %d\nthreads: %d\nprecision: %s\n",
            b->batch, b->workers, b->prefetch, b->threads, stoke_precision_name(b->precision));
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed) {
        free(y);
        return NULL;
    }
    return y;
}

static stoke_status write_file(const char *path, const char *text)
{
    stoke_tmpfile f;
    stoke_status s = stoke_tmpfile_open(&f, path);
    if (s == STOKE_OK && (s = stoke_tmpfile_write(&f, text, strlen(text))) == STOKE_OK)
        s = stoke_tmpfile_commit(&f);
    return s;
}

/* An entry is a few lines; a file larger than this is not one. */
#define CACHE_ENTRY_MAX 65536

/* The entry's bytes (the caller frees them; up to CACHE_ENTRY_MAX + 1, so that a larger
 * file is told apart), or NULL with why: "not measured before" when there is none,
 * else that it is unreadable and why. Opened as a regular file only: a FIFO there
 * would block the run (and `config show`) forever. */
static char *cache_bytes(const char *path, size_t *len, char *why, size_t wn)
{
    FILE *f = NULL;
    stoke_status s = stoke_fopen_regular(path, NULL, &f);
    if (s == STOKE_ERR_NOTFOUND) {
        stoke_say(why, wn, "not measured before");
        return NULL;
    }
    if (s != STOKE_OK) {
        stoke_say(why, wn, "the entry is unreadable: %s", stoke_last_error());
        return NULL;
    }
    char *text = malloc(CACHE_ENTRY_MAX + 1);
    *len = text ? fread(text, 1, CACHE_ENTRY_MAX + 1, f) : 0;
    int e = ferror(f) ? errno : 0;
    fclose(f);
    if (!text) {
        stoke_say(why, wn, "out of memory");
        return NULL;
    }
    if (e) {
        stoke_say(why, wn, "the entry is unreadable: %s: %s", path, strerror(e));
        free(text);
        return NULL;
    }
    return text;
}

bool train_tune_cache_parse(const char *path, const char *bytes, size_t len, const char *key,
                            train_tune_entry *e, char *why, size_t wn)
{
    memset(e, 0, sizeof *e);
    const char *bad = len > CACHE_ENTRY_MAX              ? "larger than 64 KiB, not a cache entry"
                      : memchr(bytes, '\0', len) != NULL ? "holds a NUL byte, not text"
                                                         : NULL;
    char *text = bad ? NULL : malloc(len + 1);
    if (!bad && !text) {
        stoke_say(why, wn, "out of memory");
        return false;
    }
    if (text) {
        memcpy(text, bytes, len);
        text[len] = '\0';
        if (!strstr(text, "\n# key: "))
            bad = "has no '# key:' line, not an entry stoke tune wrote";
        else if (!strstr(text, "\n# measured: "))
            bad = "has no '# measured:' line, not an entry stoke tune wrote";
    }
    if (bad) {
        stoke_say(why, wn, "the entry is unreadable: %s: %s", path, bad);
        free(text);
        return false;
    }
    const char *k = strstr(text, "\n# key: ");
    size_t kl = strlen(key);
    if (strncmp(k + 8, key, kl) || (k[8 + kl] != '\n' && k[8 + kl])) {
        stoke_say(why, wn, "%s is for another machine, model or dataset", path);
        free(text);
        return false;
    }
    const char *ml = strstr(text, "\n# measured: ") + 13;
    size_t n = strcspn(ml, "\n");
    stoke_say(e->measured, sizeof e->measured, " %.*s ", (int)(n < 100 ? n : 100), ml);
    static const char why_line[] = "\n# why precision: ";
    const char *wp = strstr(text, why_line);
    if (wp) {
        wp += sizeof why_line - 1; /* the value, which may be empty at the text's end */
        n = strcspn(wp, "\n");
        if (n < sizeof e->why_precision)
            stoke_say(e->why_precision, sizeof e->why_precision, "%.*s", (int)n, wp);
    }
    stoke_train_config c;
    stoke_train_config_defaults(&c);
    stoke_status s = stoke_train_config_parse(&c, text, len, path);
    free(text);
    if (s != STOKE_OK) {
        stoke_say(why, wn, "%s", stoke_last_error());
        return false;
    }
    static const char *keys[] = {"batch_size", "workers", "prefetch", "threads", "precision"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (stoke_train_config_source(&c, keys[i]) != STOKE_CFG_FILE) {
            stoke_say(why, wn, "%s has no %s", path, keys[i]);
            return false;
        }
    if (c.batch_size <= 0 || c.workers < 0 || c.prefetch == 0 || c.threads == 0 ||
        !stoke_precision_parse(c.precision, &e->best.precision)) {
        stoke_say(why, wn, "%s holds a setting that is not a measured value", path);
        return false;
    }
    e->best.batch = c.batch_size;
    e->best.workers = (int)c.workers;
    e->best.prefetch = (int)c.prefetch;
    e->best.threads = (int)c.threads;
    stoke_say(e->precision, sizeof e->precision, "%s", c.precision);
    return true;
}

/* A cached value outside what this machine and dataset allow now (a batch above the
 * samples or the memory fit, more workers or threads than usable CPUs, a prefetch
 * outside the loader's ring) is not a measurement of this run: an entry edited, or
 * written under other limits. Only the settings the run leaves open are checked: a
 * given one must equal the entry's, and is the user's. The bounds are those the
 * search itself keeps to (build_space), so an entry it wrote always passes. */
static bool cache_in_bounds(const char *path, const stoke_tune_point *b, const tune_open *o,
                            const stoke_tune_space *sp, char *why, size_t wn)
{
    int cpus = sp->usable_cpus;
    if (o->batch && (b->batch < 1 || b->batch > sp->batch_max))
        stoke_say(why, wn, "%s holds batch_size %" PRId64 ", outside 1..%" PRId64 " (%s)", path,
                  b->batch, sp->batch_max, sp->batch_max_why[0] ? sp->batch_max_why : "this run's");
    else if (o->workers && b->workers > cpus)
        stoke_say(why, wn, "%s holds %d workers, more than this machine's %d usable CPU%s", path,
                  b->workers, cpus, cpus == 1 ? "" : "s");
    else if (o->threads && b->threads > cpus)
        stoke_say(why, wn, "%s holds %d threads, more than this machine's %d usable CPU%s", path,
                  b->threads, cpus, cpus == 1 ? "" : "s");
    else if (o->prefetch &&
             (b->prefetch < STOKE_TUNE_PREFETCH_MIN || b->prefetch > STOKE_TUNE_PREFETCH_MAX))
        stoke_say(why, wn, "%s holds prefetch %d, outside the loader's %d..%d batches in flight",
                  path, b->prefetch, STOKE_TUNE_PREFETCH_MIN, STOKE_TUNE_PREFETCH_MAX);
    else
        return true;
    return false;
}

/* The cached point for a run: the entry at `path` when it is for this key, agrees
 * with every setting the run gives a value (`c`'s, those not open) and holds values
 * within `sp`'s bounds; false (with why) when there is none or it does not fit: then
 * it is measured again and rewritten. */
static bool cache_read(const char *path, const char *key, const stoke_train_config *run,
                       const tune_open *o, const stoke_tune_space *sp, stoke_tune_result *res,
                       char *why, size_t wn)
{
    stoke_tune_point *best = &res->best;
    size_t len = 0;
    char *bytes = cache_bytes(path, &len, why, wn);
    if (!bytes)
        return false;
    train_tune_entry e;
    bool ok = train_tune_cache_parse(path, bytes, len, key, &e, why, wn);
    free(bytes);
    if (!ok)
        return false;
    /* a setting the run leaves open must have been measured there, not given */
    const char *m = e.measured;
    const char *unmeasured = !strstr(m, " batch_size ") && o->batch      ? "batch_size"
                             : !strstr(m, " workers ") && o->workers     ? "workers"
                             : !strstr(m, " prefetch ") && o->prefetch   ? "prefetch"
                             : !strstr(m, " threads ") && o->threads     ? "threads"
                             : !strstr(m, " precision ") && o->precision ? "precision"
                                                                         : NULL;
    if (unmeasured) {
        stoke_say(why, wn, "%s was given %s, not measured", path, unmeasured);
        return false;
    }
    *best = e.best;
    if (o->precision)
        stoke_say(res->why_precision, sizeof res->why_precision, "%s", e.why_precision);
    /* a value the run gives (not left to a rule: -1, 0, auto) must be the one measured
     * with: the others were tuned around it */
    bool batch_given = !o->batch, w = !o->workers && run->workers >= 0,
         p = !o->prefetch && run->prefetch > 0, th = !o->threads && run->threads > 0,
         pr = !o->precision && strcmp(run->precision, "auto");
    const char *differs = batch_given && run->batch_size != best->batch ? "batch_size"
                          : w && run->workers != best->workers          ? "workers"
                          : p && run->prefetch != best->prefetch        ? "prefetch"
                          : th && run->threads != best->threads         ? "threads"
                          : pr && strcmp(run->precision, e.precision)   ? "precision"
                                                                        : NULL;
    if (differs) {
        stoke_say(why, wn, "%s was measured with another %s than this run's", path, differs);
        return false;
    }
    return cache_in_bounds(path, best, o, sp, why, wn);
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
    char *y = tuned_yaml(pt, o, &out->result, key, out->seconds);
    if (!y)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    stoke_status s = STOKE_OK;
    if (opts->write_cache && out->cache_path[0] && !opts->grid) {
        errno = 0;
        if (!train_make_dirs(out->cache_path))
            stoke_say(out->cache_error, sizeof out->cache_error, "%s: %s", out->cache_path,
                      strerror(errno));
        else if (write_file(out->cache_path, y) != STOKE_OK)
            /* a cache that cannot be written costs the next run its trials, no more */
            stoke_say(out->cache_error, sizeof out->cache_error, "%s", stoke_last_error());
    }
    if (opts->output)
        s = write_file(opts->output, y);
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
    char *key = cache_key(pt);
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
             cache_read(out->cache_path, key, cfg, &o, &sp, &out->result, out->cache_note,
                        sizeof out->cache_note)) {
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
