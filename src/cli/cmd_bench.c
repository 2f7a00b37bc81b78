/* cmd_bench.c - `stoke bench`: the same model and data trained for a fixed number of
 * steps twice in one process, with the seeds' naive start and with what stoke decides,
 * measured after a warm-up from the trainer's totals; then the tuned settings under a
 * slowed loader, which the monitor must diagnose as input-bound. */
#include <math.h>
#include <stddef.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "core/env.h"
#include "stoke/monitor.h"
#include "stoke/train.h"
#include "stoke/tune.h"

typedef struct bench_args {
    long steps, warmup;
    const char *json;
    bool no_robustness;
} bench_args;

#define B(f) offsetof(bench_args, f)
static const cli_opt bench_opts[] = {
    {.name = "steps",
     .type = CLI_LONG,
     .off = B(steps),
     .arg = "N",
     .min = 1,
     .max = 1000000,
     .help = "optimizer steps measured per configuration (default 300)"},
    {.name = "warmup",
     .type = CLI_LONG,
     .off = B(warmup),
     .arg = "N",
     .min = 1,
     .max = 1000000,
     .help = "steps run first and not measured (default 10): setup,\nfirst-touch memory, caches"},
    {.name = "json",
     .type = CLI_TEXT,
     .off = B(json),
     .arg = "FILE",
     .min = 1,
     .want = "needs a file",
     .help = "also write the report as JSON (docs/bench.md), atomically"},
    {.name = "no-robustness",
     .type = CLI_SWITCH,
     .off = B(no_robustness),
     .help = "skip the slowed-loader run"},
    {0}};
#undef B

void cmd_bench_usage(void)
{
    cli_print_usage("usage: stoke bench [train's options]", 19,
                    (const cli_opt *[]){bench_opts, NULL}, NULL);
    printf("\n"
           "Trains the same model on the same data twice, for a fixed number of steps, and\n"
           "prints the before/after table from measured numbers:\n"
           "  naive  the seeds' start, given explicitly: batch 4, 0 loader workers, the\n"
           "         smallest prefetch ring (2), fp32, all usable CPUs for compute\n"
           "  tuned  batch, workers, prefetch, threads and precision left to stoke, as\n"
           "         `stoke train` decides them\n"
           "Then the robustness check: a short run of the tuned settings with each training\n"
           "sample made slower to load (--loader-delay-us) must be diagnosed input-bound by\n"
           "the monitor, with the fix (loader workers, cheaper per-sample work).\n\n");
    cli_print_options(bench_opts, 20);
    printf("\n"
           "The other options are train's (`stoke train --help`), except those bench sets:\n"
           "--batch-size, --workers, --prefetch, --threads, --precision, --epochs,\n"
           "--max-steps, --loader-delay-us, and those that do not measure: --checkpoint,\n"
           "--resume, --log, --dry-run. Exit status: 0 done, 1 an error or the robustness\n"
           "check failed, 2 usage, 130/143 interrupted by SIGINT/SIGTERM (no JSON written).\n");
}

/* Settings bench chooses itself: given from anywhere they would be overridden. */
static const char *const bench_keys[] = {
    "batch_size",      "workers",    "prefetch", "threads", "precision", "epochs", "max_steps",
    "loader_delay_us", "checkpoint", "resume",   "log",     "dry_run",   "report", NULL};

static char naive_lr_why[160];

/* What the trainer's events say during one configuration. */
typedef struct listen {
    bench_run *run;
    bench_robust *robust;
    int64_t measure_from; /* step after which progress readings count */
    double gpu_sum;
    int gpu_n;
} listen;

static void on_event(const stoke_train_event *e, void *ctx)
{
    listen *l = ctx;
    if (e->kind == STOKE_EV_PROGRESS && e->step > l->measure_from && isfinite(e->gpu_pct)) {
        l->gpu_sum += e->gpu_pct;
        l->gpu_n++;
    }
    if (e->kind != STOKE_EV_WARNING)
        return;
    if (l->run && l->run->nwarnings < BENCH_WARNINGS)
        snprintf(l->run->warnings[l->run->nwarnings++], sizeof l->run->warnings[0], "%s", e->text);
    bench_robust *r = l->robust;
    /* the first finding that names a bound is the diagnosis (rules.c's table order) */
    if (r && !r->rule[0] && e->rule && e->rule->kind == STOKE_RULE_BOUND) {
        snprintf(r->rule, sizeof r->rule, "%s", e->rule->id);
        snprintf(r->evidence, sizeof r->evidence, "%s", e->evidence ? e->evidence : "");
        snprintf(r->advice, sizeof r->advice, "%s", e->advice ? e->advice : "");
        if (e->finding)
            r->finding = *e->finding; /* its names and units are static strings */
        /* read from the finding's changes, not its text; worded for stoke's own flags */
        const stoke_finding_change *w =
            e->finding ? stoke_finding_change_of(e->finding, "workers") : NULL;
        r->moves_loading =
            e->finding && e->finding->program == STOKE_PROG_STOKE &&
            ((w && w->direction > 0) || stoke_finding_change_of(e->finding, "per_sample_work"));
    }
}

static double process_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Resets the process's peak RSS (Linux's clear_refs 5); false where it cannot. */
static bool reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

static double peak_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = NAN;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = strtod(line + 6, NULL);
    if (f)
        fclose(f);
    return kb * 1024;
}

static void add_setting(bench_run *r, const char *key, const char *value, const char *source,
                        const char *detail)
{
    bench_setting *s = &r->settings[r->nsettings++];
    s->key = key;
    snprintf(s->value, sizeof s->value, "%s", value);
    snprintf(s->source, sizeof s->source, "%s", source);
    snprintf(s->detail, sizeof s->detail, "%s", detail);
}

/* A decided setting: bench's when it fixed it, else the decision's provenance. */
static void decided(bench_run *r, bool fixed, const char *key, const char *value,
                    const stoke_why *why)
{
    add_setting(r, key, value, fixed ? "bench" : stoke_source_name(why->source),
                fixed ? "" : why->reason);
}

/* The settings a trainer runs with, each with its source. */
static void record_settings(bench_run *r, stoke_trainer *t, bool naive)
{
    const stoke_train_config *c = stoke_trainer_config(t);
    const stoke_decision *d = stoke_trainer_decision(t);
    char v[32];
    r->batch = c->batch_size;
    r->accumulate = c->accumulate;
    snprintf(v, sizeof v, "%lld", (long long)c->batch_size);
    decided(r, naive, "batch_size", v, &d->batch_why);
    snprintf(v, sizeof v, "%lld", (long long)c->accumulate);
    add_setting(r, "accumulate", v,
                naive ? "bench" : stoke_cfg_source_name(stoke_train_config_source(c, "accumulate")),
                "");
    snprintf(v, sizeof v, "%d", d->workers);
    decided(r, naive, "workers", v, &d->workers_why);
    snprintf(v, sizeof v, "%d", d->prefetch);
    decided(r, naive, "prefetch", v, &d->prefetch_why);
    snprintf(v, sizeof v, "%d", d->threads);
    decided(r, naive, "threads", v, &d->threads_why);
    decided(r, naive, "precision", stoke_precision_name(d->precision), &d->precision_why);
    if (d->device == STOKE_TUNE_CPU)
        snprintf(v, sizeof v, "cpu");
    else
        snprintf(v, sizeof v, "cuda:%d", d->device);
    decided(r, false, "device", v, &d->device_why);
    decided(r, false, "pinned", d->pinned ? "yes" : "no", &d->pinned_why);
    snprintf(v, sizeof v, "%g", c->lr);
    add_setting(r, "lr", v,
                naive ? "bench" : stoke_cfg_source_name(stoke_train_config_source(c, "lr")),
                naive ? naive_lr_why : "");
}

/* stoke_trainer_run, 128 + the signal when interrupted, 1 on an error, -1 when it ran. */
static int run_trainer(stoke_trainer *t, const char *what)
{
    stoke_status s = stoke_trainer_run(t, &cli_stop_flag);
    if (cli_stop_flag) {
        fprintf(stderr, "stoke bench: interrupted by %s during the %s run; no report written\n",
                cli_stop_signal_name(), what);
        return 128 + cli_stop_signal();
    }
    if (s != STOKE_OK)
        return cli_error("bench", "%s run: %s", what, stoke_last_error());
    return -1;
}

/* One configuration: warm-up, then `steps` measured. -1 when done, else the exit code. */
static int measure(stoke_train_config cfg, bool naive, int64_t warmup, int64_t steps, bench_run *r)
{
    cfg.epochs = 1000000; /* the steps end the run, not the data */
    cfg.max_steps = warmup;
    listen l = {.run = r, .measure_from = INT64_MAX};
    r->rss_reset = reset_peak_rss();
    stoke_trainer *t;
    if (stoke_trainer_new(&cfg, on_event, &l, &t) != STOKE_OK)
        return cli_error("bench", "%s: %s", r->name, stoke_last_error());
    record_settings(r, t, naive);
    stoke_mem_plan plan;
    int64_t maxb;
    size_t budget, beside;
    r->plan_bytes = stoke_trainer_plan(t, 0, &plan, &maxb, &budget, &beside) == STOKE_OK
                        ? (double)plan.total
                        : NAN;
    printf("%s: warm-up %lld step%s, then %lld measured ...\n", r->name, (long long)cfg.max_steps,
           cfg.max_steps == 1 ? "" : "s", (long long)steps);
    fflush(stdout);
    int rc = run_trainer(t, r->name);
    stoke_train_totals a, b;
    stoke_trainer_totals(t, &a);
    r->warmup_steps = a.steps;
    double w0 = stoke_wall_time(), c0 = process_cpu_s();
    l.measure_from = a.steps;
    if (rc < 0) {
        stoke_trainer_set_max_steps(t, a.steps + steps);
        rc = run_trainer(t, r->name);
    }
    stoke_trainer_totals(t, &b);
    double wall = stoke_wall_time() - w0, cpu = process_cpu_s() - c0;
    r->peak_rss_bytes = peak_rss_bytes();
    stoke_trainer_free(t);
    if (rc >= 0)
        return rc;
    r->steps = b.steps - a.steps;
    r->samples = b.samples - a.samples;
    r->seconds = wall - (b.eval_s - a.eval_s);
    double pct = r->seconds > 0 ? 100.0 / r->seconds : NAN;
    r->samples_per_s = r->seconds > 0 ? (double)r->samples / r->seconds : NAN;
    r->data_wait_pct = (b.loader_wait_s - a.loader_wait_s) * pct;
    for (int p = 0; p < 4; p++)
        r->phase_pct[p] = (b.phase_s[p] - a.phase_s[p]) * pct;
    r->cpu_pct = wall > 0 ? 100.0 * cpu / wall : NAN;
    r->gpu_pct = l.gpu_n ? l.gpu_sum / l.gpu_n : NAN;
    r->mfu_pct = stoke_train_mfu_pct(r->samples_per_s, b.step_flops, b.peak_flops);
    return -1;
}

/* The tuned settings as decided, given explicitly, with each sample costing `delay`
 * more CPU: one epoch over a prefix long enough for the monitor's half-second
 * readings, evaluated on a few samples. */
static int robustness(stoke_train_config cfg, const bench_run *tuned, bench_robust *r)
{
    /* per-sample compute at the tuned speed; loading 10x that per loading thread starves
     * the model whatever the workers (they share the same cores) */
    double per_sample_us = 1e6 / tuned->samples_per_s;
    int64_t workers = 0;
    for (int i = 0; i < tuned->nsettings; i++)
        if (!strcmp(tuned->settings[i].key, "workers"))
            workers = atoll(tuned->settings[i].value);
    int64_t loaders = workers > 0 ? workers : 1;
    double delay = fmin(fmax(10.0 * per_sample_us * (double)loaders, 200.0), 1e6);
    r->delay_us = (int64_t)ceil(delay);
    r->workers = workers;
    /* ~6 s of loading (the setup before the first step, workers idle, dilutes their busy
     * share less), and at least 4 batches */
    int64_t n = (int64_t)(6e6 * (double)loaders / delay);
    if (n < 4 * tuned->batch)
        n = 4 * tuned->batch;
    if (cfg.limit > 0 && cfg.limit < n)
        n = cfg.limit;
    r->limit = n;
    char v[32];
    for (int i = 0; i < tuned->nsettings; i++) {
        const bench_setting *s = &tuned->settings[i];
        if (strcmp(s->key, "pinned") && strcmp(s->key, "device") &&
            stoke_train_config_set(&cfg, s->key, s->value, STOKE_CFG_FLAG) != STOKE_OK)
            return cli_error("bench", "robustness: %s", stoke_last_error());
    }
    snprintf(v, sizeof v, "%lld", (long long)r->delay_us);
    stoke_train_config_set(&cfg, "loader_delay_us", v, STOKE_CFG_FLAG);
    cfg.limit = n;
    cfg.epochs = 1;
    cfg.max_steps = 0;
    cfg.monitor = true; /* the diagnosis is the monitor's */
    if (cfg.val_limit == 0 || cfg.val_limit > 256)
        cfg.val_limit = 256;
    printf("robustness: the tuned settings, each sample %lld us more CPU to load, %lld samples "
           "...\n",
           (long long)r->delay_us, (long long)n);
    fflush(stdout);
    listen l = {.robust = r, .measure_from = INT64_MAX};
    stoke_trainer *t;
    if (stoke_trainer_new(&cfg, on_event, &l, &t) != STOKE_OK)
        return cli_error("bench", "robustness: %s", stoke_last_error());
    int rc = run_trainer(t, "robustness");
    stoke_train_totals tot;
    stoke_trainer_totals(t, &tot);
    stoke_train_result res;
    stoke_trainer_result(t, &res);
    stoke_trainer_free(t);
    if (rc >= 0)
        return rc;
    r->ran = true;
    double trained = res.seconds - tot.eval_s;
    r->data_wait_pct = trained > 0 ? 100.0 * tot.loader_wait_s / trained : NAN;
    /* the input-pipeline rules, and advice that moves the loading: more loader workers
     * or cheaper per-sample work (stoke's own flag, not PyTorch's) */
    bool input = !strcmp(r->rule, "data-wait") || !strcmp(r->rule, "input-bound-thread") ||
                 !strcmp(r->rule, "input-bound-cpu");
    r->passed = input && r->moves_loading;
    if (!r->rule[0])
        snprintf(r->verdict, sizeof r->verdict, "no finding named a bound");
    else if (!input)
        snprintf(r->verdict, sizeof r->verdict, "bound by %s, not the input pipeline", r->rule);
    else if (!r->passed)
        snprintf(r->verdict, sizeof r->verdict, "input-bound (%s), but the advice is not the fix",
                 r->rule);
    else
        snprintf(r->verdict, sizeof r->verdict, "input-bound (%s)", r->rule);
    return -1;
}

/* The settings bench chooses must not come from anywhere else. */
static int check_given(const stoke_train_config *c)
{
    for (int i = 0; bench_keys[i]; i++) {
        stoke_cfg_source s = stoke_train_config_source(c, bench_keys[i]);
        if (s == STOKE_CFG_DEFAULT)
            continue;
        char given[64];
        const char *env = NULL;
        for (int k = 0; stoke_train_config_key(k); k++)
            if (!strcmp(stoke_train_config_key(k), bench_keys[i]))
                env = stoke_train_config_env(k);
        if (s == STOKE_CFG_FLAG) {
            snprintf(given, sizeof given, "--%s", bench_keys[i]);
            for (char *p = given; *p; p++)
                if (*p == '_')
                    *p = '-';
        } else if (s == STOKE_CFG_ENV) {
            snprintf(given, sizeof given, "%s (environment)",
                     !strcmp(bench_keys[i], "precision") && !stoke_env("PRECISION") ? "AMP"
                     : env                                                          ? env
                           : bench_keys[i]);
        } else {
            snprintf(given, sizeof given, "%s (%s)", bench_keys[i], stoke_cfg_source_name(s));
        }
        return cli_usage_error("bench",
                               "%s given: stoke bench sets %s itself (naive fixes it, tuned "
                               "leaves it to stoke, the steps end the runs)",
                               given, bench_keys[i]);
    }
    return -1;
}

static int usable_cpus(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

static int run_all(stoke_train_config *cfg, int64_t steps, int64_t warmup, const char *json,
                   bool robust)
{
    static stoke_machine m;
    static bench_report rep;
    if (stoke_machine_probe(&m, NULL) != STOKE_OK)
        return cli_last_error("bench");
    rep = (bench_report){
        .machine = &m, .model = cfg->model, .dataset = cfg->dataset, .limit = cfg->limit};
    if (cfg->val_limit == 0) /* evaluations are left out of the figures: keep them short */
        cfg->val_limit = 512;
    stoke_train_config naive = *cfg, tuned = *cfg;
    char threads[16];
    snprintf(threads, sizeof threads, "%d", usable_cpus());
    const char *fixed[][2] = {{"batch_size", "4"},  {"accumulate", "1"}, {"effective_batch", "0"},
                              {"workers", "0"},     {"prefetch", "2"},   {"threads", threads},
                              {"precision", "fp32"}};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        stoke_train_config_set(&naive, fixed[i][0], fixed[i][1], STOKE_CFG_FLAG);
    /* the linear scaling rule: 4-sample steps at the rate of 128-sample ones diverge
     * (cnn, lr 0.05: NaN within 200 steps); the speed does not depend on it */
    naive.lr = cfg->lr * 4.0 / (double)(cfg->batch_size * cfg->accumulate);
    snprintf(naive_lr_why, sizeof naive_lr_why,
             "the run's lr %g x 4/%lld (linear scaling: 4-sample steps at the full rate diverge)",
             cfg->lr, (long long)(cfg->batch_size * cfg->accumulate));
    /* auto where a setting takes it, given as `stoke train --workers auto` gives it: a run
     * measures what is asked for (trials, or the tuning cache); the batch size keeps its
     * default where auto is refused */
    const char *autos[] = {"workers", "prefetch", "threads", "precision", "batch_size"};
    for (size_t i = 0; i < sizeof autos / sizeof autos[0]; i++)
        stoke_train_config_set(&tuned, autos[i], "auto", STOKE_CFG_FLAG);
    rep.runs[0].name = "naive";
    rep.runs[1].name = "tuned";
    cli_stop_catch();
    int rc = measure(naive, true, warmup, steps, &rep.runs[0]);
    if (rc < 0)
        rc = measure(tuned, false, warmup, steps, &rep.runs[1]);
    rep.speedup = rep.runs[1].samples_per_s / rep.runs[0].samples_per_s;
    if (rc < 0 && robust)
        rc = robustness(tuned, &rep.runs[1], &rep.robust);
    else if (rc < 0)
        snprintf(rep.robust.skipped, sizeof rep.robust.skipped, "--no-robustness");
    cli_stop_release();
    if (rc >= 0)
        return rc;
    bench_print(&rep);
    fflush(stdout); /* the table before a failure's message on stderr */
    if (json && (rc = bench_write_json(&rep, json)) != 0)
        return rc;
    if (rep.robust.ran && !rep.robust.passed)
        return cli_error("bench", "robustness: FAILED: %s", rep.robust.verdict);
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    bench_args a = {.steps = 300, .warmup = 10};
    stoke_train_config cfg;
    const char *config_path;
    int rc = cli_train_settings("bench", argc, argv, bench_opts, &a, &cfg, &config_path,
                                cmd_bench_usage);
    if (rc < 0)
        rc = check_given(&cfg);
    if (rc < 0 && a.json && bench_check_json_path(a.json) != 0)
        rc = 1;
    return rc >= 0 ? rc : run_all(&cfg, a.steps, a.warmup, a.json, !a.no_robustness);
}
