/* cmd_tune.c - `stoke tune`: the settings `stoke train` would run with, measured by
 * short trials of real training steps (stoke_train_tune), printed trial by trial, the
 * choice with its reasons, written as a settings file train's --config reads. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "cli/cli.h"
#include "stoke/train.h"
#include "stoke/tune.h"

typedef struct tune_args {
    const char *output;
    double seconds;
    long max_batch;
    bool grid, no_cache, json;
} tune_args;

#define T(f) offsetof(tune_args, f)
static const cli_opt tune_opts[] = {
    {.name = "output",
     .type = CLI_TEXT,
     .off = T(output),
     .arg = "FILE",
     .min = 1,
     .want = "needs a file name",
     .help = "the settings file (default stoke-tune.yaml)"},
    {.name = "trial-seconds",
     .type = CLI_DOUBLE,
     .off = T(seconds),
     .arg = "S",
     .min = 0.05,
     .max = 600,
     .want = "needs seconds from 0.05 to 600",
     .help = "each trial's measured time after its warm-up (default 0.5)"},
    {.name = "max-batch",
     .type = CLI_LONG,
     .off = T(max_batch),
     .arg = "N",
     .min = 1,
     .max = 1L << 40,
     .want = "needs a batch from 1",
     .help = "try no batch above N (default: what fits in memory and the\ndataset)"},
    {.name = "grid",
     .type = CLI_SWITCH,
     .off = T(grid),
     .help = "every combination of batch (powers of two), workers,\nprefetch (2, 4, 8) and "
             "threads instead of the search: the\nbenchmark's peer (bench/tune_grid.sh); not "
             "cached"},
    {.name = "no-cache", .type = CLI_SWITCH, .off = T(no_cache), .help = "do not write the cache"},
    {.name = "json",
     .type = CLI_SWITCH,
     .off = T(json),
     .help = "print one JSON document (docs/tune.md) instead of text"},
    {0}};
#undef T

void cmd_tune_usage(void)
{
    cli_print_usage("usage: stoke tune", 18, (const cli_opt *[]){tune_opts, NULL},
                    "[train's options]");
    printf("\n"
           "Measures the settings `stoke train` would run with that are not given (batch_size,\n"
           "workers, prefetch, threads, precision; or those given as auto) by short trials of\n"
           "real training steps on the model and data the options name, prints every trial\n"
           "(setting -> samples/s, data wait, memory), the choice and why, and writes it as a\n"
           "settings file that `stoke train --config FILE` reads. The result is also cached for\n"
           "this machine, model and dataset: `stoke train` with those settings given as auto\n"
           "starts from it (`stoke config show` says \"cached\").\n\n");
    cli_print_options(tune_opts, 24);
    printf("\n"
           "The options are train's (`stoke train --help`); the settings given are kept.\n"
           "Exit status: 0 tuned, 1 a failure (the data, the model, no trial could run),\n"
           "2 usage.\n");
}

static void print_trial(void *ctx, const stoke_tune_trial *t)
{
    int *n = ctx;
    char line[700];
    stoke_train_format_trial(t, ++*n, line, sizeof line);
    printf("%s\n", line);
    fflush(stdout);
}

static cJSON *point_json(const stoke_tune_point *p)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "batch_size", (double)p->batch);
    cJSON_AddNumberToObject(o, "workers", p->workers);
    cJSON_AddNumberToObject(o, "prefetch", p->prefetch);
    cJSON_AddNumberToObject(o, "threads", p->threads);
    cJSON_AddStringToObject(o, "precision", stoke_precision_name(p->precision));
    return o;
}

static void measure_json(cJSON *o, const stoke_tune_measure *m)
{
    cJSON_AddBoolToObject(o, "ran", m->ran);
    if (!m->ran) {
        cJSON_AddStringToObject(o, "error", m->error);
        return;
    }
    cJSON_AddNumberToObject(o, "steps", (double)m->steps);
    cJSON_AddNumberToObject(o, "seconds", m->seconds);
    cJSON_AddNumberToObject(o, "samples_per_s", m->samples_per_s);
    cJSON_AddNumberToObject(o, "data_wait_pct", m->wait_pct);
    cJSON_AddNumberToObject(o, "step_ms", m->step_ms);
    cJSON_AddNumberToObject(o, "produce_ms", m->produce_ms);
    cJSON_AddNumberToObject(o, "produce_p95_ms", m->produce_p95_ms);
    cJSON_AddBoolToObject(o, "finite", m->finite);
    cJSON_AddNumberToObject(o, "memory_bytes", m->memory_bytes);
    /* the mean loss over the first steps the precisions are compared by; null unknown */
    if (isfinite(m->loss))
        cJSON_AddNumberToObject(o, "loss", m->loss);
    else
        cJSON_AddNullToObject(o, "loss");
}

static int print_json(const stoke_train_tuning *r, const char *output)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *trials = cJSON_AddArrayToObject(o, "trials");
    for (int i = 0; i < r->result.ntrials; i++) {
        const stoke_tune_trial *t = &r->result.trials[i];
        cJSON *e = point_json(&t->p);
        cJSON_AddStringToObject(e, "stage", t->stage);
        measure_json(e, &t->m);
        cJSON_AddItemToArray(trials, e);
    }
    cJSON *best = point_json(&r->result.best);
    measure_json(best, &r->result.best_m);
    cJSON_AddItemToObject(o, "chosen", best);
    cJSON *why = cJSON_AddObjectToObject(o, "why");
    const struct {
        bool on;
        const char *key, *text;
    } w[] = {{r->batch, "batch_size", r->result.why_batch},
             {r->workers, "workers", r->result.why_workers},
             {r->prefetch, "prefetch", r->result.why_prefetch},
             {r->threads, "threads", r->result.why_threads},
             {r->precision, "precision", r->result.why_precision}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (w[i].on)
            cJSON_AddStringToObject(why, w[i].key, w[i].text);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    cJSON_AddBoolToObject(o, "grid", r->space.grid);
    cJSON_AddStringToObject(o, "output", output);
    cJSON_AddStringToObject(o, "cache", r->cache_error[0] ? "" : r->cache_path);
    if (r->cache_error[0])
        cJSON_AddStringToObject(o, "cache_error", r->cache_error);
    char *s = stoke_json_print(o, false);
    cJSON_Delete(o);
    if (!s)
        return cli_error("tune", "out of memory");
    printf("%s\n", s);
    free(s);
    return 0;
}

static void print_text(const stoke_train_tuning *r, const char *output, bool cache)
{
    const stoke_tune_point *b = &r->result.best;
    const stoke_tune_measure *m = &r->result.best_m;
    printf("\n%d trials in %.1f s. Chosen: batch %" PRId64 ", %d loader worker%s, %d compute "
           "thread%s, prefetch %d, %s: %.0f samples/s, data wait %.1f%%\n",
           r->result.ntrials, r->seconds, b->batch, b->workers, b->workers == 1 ? "" : "s",
           b->threads, b->threads == 1 ? "" : "s", b->prefetch, stoke_precision_name(b->precision),
           m->samples_per_s, m->wait_pct);
    const struct {
        bool on;
        const char *key, *text;
    } w[] = {{r->precision, "precision", r->result.why_precision},
             {r->workers, "workers", r->result.why_workers},
             {r->threads, "threads", r->result.why_threads},
             {r->batch, "batch_size", r->result.why_batch},
             {r->prefetch, "prefetch", r->result.why_prefetch}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (w[i].on && w[i].text[0])
            printf("  %s: %s\n", w[i].key, w[i].text);
    printf("written: %s (stoke train --config %s)\n", output, output);
    if (!cache)
        return;
    if (r->cache_error[0])
        printf("not cached: %s\n", r->cache_error);
    else if (r->cache_path[0])
        printf("cached: %s (stoke train with these settings given as auto starts from it)\n",
               r->cache_path);
}

int cmd_tune(int argc, char **argv)
{
    tune_args a = {.output = "stoke-tune.yaml"};
    stoke_train_config cfg;
    const char *config_path;
    int rc =
        cli_train_settings("tune", argc, argv, tune_opts, &a, &cfg, &config_path, cmd_tune_usage);
    if (rc >= 0)
        return rc;
    if (cfg.dry_run)
        return cli_usage_error("tune", "--dry-run: tune measures by training; `stoke config show` "
                                       "shows what a run would do without training");
    if (cfg.resume[0])
        return cli_usage_error("tune", "--resume: tune measures a fresh run's settings; a "
                                       "resumed run keeps its checkpoint's");
    stoke_train_tuning *r = malloc(sizeof *r);
    if (!r)
        return cli_error("tune", "out of memory");
    int count = 0;
    stoke_train_tune_opts o = {.all = true,
                               .grid = a.grid,
                               .trial_seconds = a.seconds,
                               .max_batch = a.max_batch,
                               .write_cache = !a.no_cache,
                               .output = a.output,
                               .on_trial = a.json ? NULL : print_trial,
                               .ctx = &count};
    if (stoke_train_tune(&cfg, &o, r) != STOKE_OK) {
        free(r);
        return cli_last_error("tune");
    }
    rc = 0;
    if (a.json)
        rc = print_json(r, a.output);
    else
        print_text(r, a.output, !a.no_cache && !a.grid);
    free(r);
    return rc;
}
