/* tune_cache.c - the tuning cache: one file per machine + model + dataset + the
 * settings given (its key), where it lives ($STOKE_CACHE_DIR, $XDG_CACHE_HOME, ~), the
 * settings file a measurement is written as, and reading an entry back only when it
 * fits the run (its key, the settings given, the bounds of this machine and data). */
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
#include "train/tuning.h"

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
char *train_tune_cache_key(const stoke_trainer *t)
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
char *train_tuned_yaml(const stoke_trainer *t, const tune_open *o, const stoke_tune_result *r,
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

stoke_status train_write_file(const char *path, const char *text)
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
bool train_tune_cache_read(const char *path, const char *key, const stoke_train_config *run,
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
