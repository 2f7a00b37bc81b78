/* cmd_data_bench.c - `stoke data bench`: the loader alone over a dataset, with the
 * transform and the in-memory holding `stoke train` would use on it, timed for each
 * worker count: what a user runs to learn whether the loader can feed a GPU that
 * trains at X samples/s before renting one. */
#include "core/json.h"
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stoke/data.h"
#include "stoke/hw.h"
#include "stoke/train.h"

#define CMD "data"
/* The worker counts a bench may try, and how many: as text for the message. */
#define MAX_WORKERS   256
#define MAX_COUNTS    64
#define MAX_WORKERS_S "256"
#define MAX_COUNTS_S  "64"

typedef struct bench_opts {
    stoke_train_config cfg; /* augment, transforms, seed, batch size: as stoke train's */
    stoke_dataset_opts data;
    bool eval, json;
    int dtype, layout; /* stoke_dtype, stoke_image_layout; -1 not given */
    int workers[MAX_COUNTS], nworkers;
    double seconds;
    int hold; /* -1 auto, 0 no, 1 yes */
    const char *path;
} bench_opts;

/* "4" or "0,2,4": the worker counts to try. */
static bool parse_workers(const char *v, void *dest)
{
    bench_opts *o = dest;
    o->nworkers = 0;
    for (const char *p = v;;) {
        char num[16];
        size_t n = strcspn(p, ",");
        long w;
        if (n == 0 || n >= sizeof num || o->nworkers == MAX_COUNTS)
            return false;
        memcpy(num, p, n);
        num[n] = '\0';
        if (!cli_parse_long(num, 0, MAX_WORKERS, &w))
            return false;
        o->workers[o->nworkers++] = (int)w;
        if (!p[n])
            return true;
        p += n + 1;
    }
}

#define F(f) offsetof(bench_opts, f)
static const cli_opt transform_opts[] = {
    {.name = "augment",
     .type = CLI_SETTING,
     .off = F(cfg),
     .value = "true",
     .help = "the training augmentation, as stoke train --augment"},
    {.name = "transforms",
     .type = CLI_SETTING,
     .off = F(cfg),
     .arg = "crop|rrc",
     .help = "which one: random crop (pad 2) + flip (default), or\nRandomResizedCrop + flip (on "
             "the original images);\ncrop+jitter, rrc+jitter add a color jitter"},
    {.name = "eval",
     .type = CLI_SWITCH,
     .off = F(eval),
     .help = "the validation transform instead of the training one"},
    {.name = "dtype",
     .type = CLI_CHOICE,
     .off = F(dtype),
     .arg = "f32|bf16|f16",
     .choices = " f32 bf16 f16 ",
     .values = (const int[]){STOKE_F32, STOKE_BF16, STOKE_F16},
     .help = "the batches' element type (default f32)"},
    {.name = "layout",
     .type = CLI_CHOICE,
     .off = F(layout),
     .arg = "nchw|nhwc",
     .choices = " nchw nhwc ",
     .values = (const int[]){STOKE_LAYOUT_CHW, STOKE_LAYOUT_HWC},
     .help = "the batches' layout (default nchw)"},
    {.name = "seed",
     .type = CLI_SETTING,
     .off = F(cfg),
     .arg = "N",
     .help = "shuffling and augmentation (default 1, as stoke train)"},
    {0}};

static const cli_opt loader_opts[] = {
    {.name = "workers",
     .type = CLI_CUSTOM,
     .arg = "N|LIST",
     .parse = parse_workers,
     .want = "takes a count from 0 to " MAX_WORKERS_S
             " or a list such as 0,2,4 (at most " MAX_COUNTS_S ")",
     .help = "the worker counts to try, e.g. 4 or 0,2,4 (default: 0 to\nthe usable CPUs)"},
    /* the batch as stoke train takes it: the configuration table's limits */
    {.name = "batch-size",
     .type = CLI_SETTING,
     .off = F(cfg),
     .arg = "N",
     .help = "samples per batch (default 128, as stoke train)"},
    {.name = "seconds",
     .type = CLI_DOUBLE,
     .off = F(seconds),
     .arg = "S",
     .min = 0.01,
     .max = 86400,
     .want = "takes a time from 0.01 to 86400",
     .help = "timed seconds per worker count, after a warm-up of\nmin(0.5, S/4) s (default 3)"},
    {.name = "hold",
     .type = CLI_CHOICE,
     .off = F(hold),
     .arg = "auto|yes|no",
     .choices = " auto yes no ",
     .values = (const int[]){-1, 1, 0},
     .help = "hold the samples in memory: as stoke train decides (auto,\nwhen they take at most "
             "a quarter of the available\nmemory), always, or never (read and decoded every "
             "epoch)"},
    {.name = "json",
     .type = CLI_SWITCH,
     .off = F(json),
     .help = "print one JSON document instead of the table"},
    {0}};
#undef F

void cli_data_bench_synopsis(const char *lead, int indent)
{
    cli_print_usage(lead, indent, (const cli_opt *[]){transform_opts, loader_opts, NULL}, NULL);
}

void cmd_data_bench_usage(void)
{
    cli_data_bench_synopsis("usage: stoke data bench PATH [DATASET OPTIONS]", 24);
    puts("\n"
         "Runs the loader alone over PATH as `stoke train` would (its transform, its\n"
         "normalization from the data, shuffled batches, the data held in memory when\n"
         "stoke train would hold it) for each worker count, and prints samples/s, batches/s,\n"
         "the per-batch wait (average and p95), the workers' busy share and the rate a\n"
         "model could be fed at, then the best worker count.\n");
    fputs("Dataset options as `stoke data info`:", stdout);
    cli_print_names(cli_data_opts, 37, ".");
    puts("Transform options (images):");
    cli_print_options(transform_opts, 24);
    puts("Loader options:");
    cli_print_options(loader_opts, 24);
    puts("Exit: 0 success, 1 the dataset cannot be read (the message names the file), 2 a\n"
         "usage error, 130 interrupted by SIGINT (the rows measured so far are printed).\n"
         "Fields: docs/data.md.");
}

typedef struct bench_row {
    int workers;
    int64_t samples, batches, epoch_ends;
    double seconds, wait_avg_ms, wait_p95_ms, busy_share;
    double cpu_seconds; /* this process's CPU (every thread's) over the timed window */
} bench_row;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int parse(int argc, char **argv, bench_opts *o)
{
    cli_given given[16];
    cli_group groups[] = {{cli_data_opts, &o->data}, {transform_opts, o}, {loader_opts, o}};
    cli_spec s = {.cmd = CMD,
                  .sub = "bench",
                  .usage = cmd_data_bench_usage,
                  .groups = groups,
                  .ngroups = 3,
                  .dash_is_arg = true,
                  .pos = &o->path,
                  .max_pos = 1,
                  .given = given,
                  .max_given = 16};
    const char *no_file;
    int rc = cli_parse(&s, argc, argv, 2);
    if (rc < 0)
        rc = cli_apply_settings(&s, NULL, &no_file);
    if (rc >= 0)
        return rc;
    if (o->cfg.batch_size < 1) /* the configuration's auto: stoke train's batch finder */
        return cli_usage_error(CMD,
                               "--batch-size: 'auto' (the batch finder) is stoke train's; "
                               "give a whole number in [1, %d]",
                               STOKE_MAX_BATCH);
    if (!o->path)
        return cli_usage_error(CMD, "bench needs a PATH");
    return -1;
}

/* The next batch, waiting in slices so that SIGINT is seen while a slow batch is
 * being made. False when interrupted. */
static bool next_batch(stoke_loader *l, stoke_batch *b, stoke_status *s)
{
    do {
        if (interrupted)
            return false;
        *s = stoke_loader_next_timed(l, b, 0.1);
    } while (*s == STOKE_ERR_TIMEOUT);
    return true;
}

/* Seconds each worker (the consumer with 0 workers) spent loading, summed. */
static double busy_seconds(const stoke_loader_stats *s)
{
    int n = s->workers > 0 ? s->workers : 1;
    double t = 0;
    for (int i = 0; i < n && i < 64; i++)
        t += s->busy_frac[i] * s->elapsed_s;
    return t;
}

/* CPU seconds of every thread of this process: samples per CPU second is the per-core
 * rate, which other jobs on a shared machine do not move as they move wall time. */
static double process_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One worker count: warm-up, then `seconds` of batches. 0 when the row is measured,
 * 1 on a dataset error (message printed), 130 when interrupted. */
static int run_one(stoke_dataset *d, const bench_opts *o, const stoke_transform_opts *t,
                   int workers, bench_row *row)
{
    stoke_loader_opts lo = {
        .sampler = {.batch_size = o->cfg.batch_size, .shuffle = true, .seed = o->cfg.seed},
        .transform = t,
        .workers = workers,
    };
    stoke_loader *l;
    if (stoke_loader_create(d, &lo, &l) != STOKE_OK)
        return cli_last_error(CMD);
    memset(row, 0, sizeof *row);
    row->workers = workers;
    double warm = o->seconds / 4 < 0.5 ? o->seconds / 4 : 0.5;
    uint64_t t0 = stoke_now_ns();
    stoke_loader_stats s0, s1;
    stoke_batch b;
    stoke_status s = STOKE_OK;
    bool measuring = false;
    int rc = 0;
    double cpu0 = 0;
    for (;;) {
        if (!next_batch(l, &b, &s)) {
            rc = 130;
            break;
        }
        if (s != STOKE_OK) {
            rc = cli_last_error(CMD);
            break;
        }
        double el = (double)(stoke_now_ns() - t0) * 1e-9;
        if (!measuring) {
            if (b.size == 0 || el < warm)
                continue;
            stoke_loader_get_stats(l, &s0);
            t0 = stoke_now_ns();
            cpu0 = process_cpu_s();
            measuring = true;
            continue;
        }
        row->epoch_ends += b.size == 0;
        if (el >= o->seconds)
            break;
    }
    if (rc == 0) {
        row->cpu_seconds = process_cpu_s() - cpu0;
        stoke_loader_get_stats(l, &s1);
        row->batches = s1.batches - s0.batches;
        row->samples = s1.samples - s0.samples;
        row->seconds = s1.elapsed_s - s0.elapsed_s;
        if (row->batches > 0)
            row->wait_avg_ms =
                (s1.wait_avg_ms * (double)s1.batches - s0.wait_avg_ms * (double)s0.batches) /
                (double)row->batches;
        row->wait_p95_ms = s1.wait_p95_ms;
        int n = workers > 0 ? workers : 1;
        if (row->seconds > 0)
            row->busy_share = (busy_seconds(&s1) - busy_seconds(&s0)) / (n * row->seconds);
    }
    stoke_loader_destroy(l);
    return rc;
}

static double rate(int64_t n, double secs) { return secs > 0 ? (double)n / secs : 0; }

typedef struct bench_setup {
    const stoke_dataset_info *info;
    bool held, image, originals;
    double load_s, bytes;
    uint64_t avail;
    stoke_shape out_shape;
    stoke_cpu_info cpu;
    double load_avg;
    char transform[160]; /* what is done to each sample */
} bench_setup;

/* What the loader does to each sample, told from the ops of the transform stoke train
 * makes (stoke_train_input_transform): the augmentation's name is read there alone. */
static void describe(const stoke_transform_opts *t, bool image, bool eval, char *buf, size_t n)
{
    if (!image) {
        snprintf(buf, n, "none (inputs fed as read)");
        return;
    }
    size_t k = (size_t)snprintf(buf, n, "%s: ", eval ? "validation" : "training");
    for (int i = 0; i < t->nops && k < n; i++) {
        const stoke_op *op = &t->ops[i];
        char crop[32];
        snprintf(crop, sizeof crop, "random crop (pad %d)", op->pad);
        const char *what = op->kind == STOKE_OP_CROP ? op->center ? "centre crop" : crop
                           : op->kind == STOKE_OP_RANDOM_RESIZED_CROP ? "random resized crop"
                           : op->kind == STOKE_OP_HFLIP               ? "flip"
                           : op->kind == STOKE_OP_COLOR_JITTER        ? "color jitter"
                           : op->kind == STOKE_OP_RESIZE_SHORTER      ? "resize the shorter side"
                           : op->kind == STOKE_OP_NORMALIZE           ? "normalize"
                                                                      : "resize";
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? " + " : "", what);
    }
}

static int best_row(const bench_row *rows, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (best < 0 ||
            rate(rows[i].samples, rows[i].seconds) > rate(rows[best].samples, rows[best].seconds))
            best = i;
    return best;
}

static cJSON *shape_json(const stoke_shape *s)
{
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < s->ndim; k++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->dims[k]));
    return a;
}

static void print_json(const bench_opts *o, const bench_setup *b, const bench_row *rows, int n)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "path", o->path);
    cJSON_AddStringToObject(root, "format", b->info->format);
    cJSON_AddNumberToObject(root, "count", (double)b->info->count);
    cJSON *in = cJSON_AddObjectToObject(root, "input");
    cJSON_AddItemToObject(in, "shape", shape_json(&b->info->input_shape));
    cJSON_AddStringToObject(in, "dtype", stoke_dtype_name(b->info->input_dtype));
    cJSON *m = cJSON_AddObjectToObject(root, "memory");
    cJSON_AddStringToObject(m, "hold", o->hold < 0 ? "auto" : o->hold ? "yes" : "no");
    cJSON_AddBoolToObject(m, "held", b->held);
    cJSON_AddNumberToObject(m, "bytes", b->bytes);
    cJSON_AddNumberToObject(m, "available_bytes", (double)b->avail);
    cJSON_AddNumberToObject(m, "load_seconds", b->load_s);
    cJSON *t = cJSON_AddObjectToObject(root, "transform");
    cJSON_AddStringToObject(t, "name", b->transform);
    cJSON_AddBoolToObject(t, "augment", o->cfg.augment);
    cJSON_AddStringToObject(t, "transforms", o->cfg.transforms);
    cJSON_AddBoolToObject(t, "eval", o->eval);
    if (b->image) {
        cJSON_AddItemToObject(t, "out_shape", shape_json(&b->out_shape));
        cJSON_AddStringToObject(t, "out_dtype", stoke_dtype_name(o->dtype));
        cJSON_AddStringToObject(t, "layout", o->layout == STOKE_LAYOUT_HWC ? "nhwc" : "nchw");
    }
    cJSON_AddNumberToObject(root, "batch_size", (double)o->cfg.batch_size);
    cJSON_AddNumberToObject(root, "seed", (double)o->cfg.seed);
    cJSON_AddNumberToObject(root, "seconds", o->seconds);
    cJSON_AddStringToObject(root, "cpu", b->cpu.model);
    cJSON_AddNumberToObject(root, "usable_cpus", b->cpu.usable_cpus);
    cJSON_AddNumberToObject(root, "load_average", b->load_avg);
    cJSON *arr = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        cJSON *e = cJSON_CreateObject();
        double sps = rate(r->samples, r->seconds);
        cJSON_AddNumberToObject(e, "workers", r->workers);
        cJSON_AddNumberToObject(e, "samples", (double)r->samples);
        cJSON_AddNumberToObject(e, "batches", (double)r->batches);
        cJSON_AddNumberToObject(e, "epoch_ends", (double)r->epoch_ends);
        cJSON_AddNumberToObject(e, "seconds", r->seconds);
        cJSON_AddNumberToObject(e, "cpu_seconds", r->cpu_seconds);
        cJSON_AddNumberToObject(e, "samples_per_cpu_s", rate(r->samples, r->cpu_seconds));
        cJSON_AddNumberToObject(e, "samples_per_s", sps);
        cJSON_AddNumberToObject(e, "batches_per_s", rate(r->batches, r->seconds));
        cJSON_AddNumberToObject(e, "wait_avg_ms", r->wait_avg_ms);
        cJSON_AddNumberToObject(e, "wait_p95_ms", r->wait_p95_ms);
        cJSON_AddNumberToObject(e, "busy_share", r->busy_share);
        cJSON_AddNumberToObject(e, "feeds_samples_per_s", sps);
        cJSON_AddItemToArray(arr, e);
    }
    int bi = best_row(rows, n);
    if (bi >= 0) {
        cJSON *e = cJSON_AddObjectToObject(root, "best");
        cJSON_AddNumberToObject(e, "workers", rows[bi].workers);
        cJSON_AddNumberToObject(e, "samples_per_s", rate(rows[bi].samples, rows[bi].seconds));
    } else {
        cJSON_AddNullToObject(root, "best");
    }
    cJSON_AddBoolToObject(root, "interrupted", interrupted != 0);
    char *s = stoke_json_print(root, true);
    if (s)
        puts(s);
    free(s);
    cJSON_Delete(root);
}

static void print_header(const bench_opts *o, const bench_setup *b)
{
    char sh[96], x[32], y[32];
    printf("dataset      %s (%s, %" PRId64 " samples of %s %s)\n", o->path, b->info->format,
           b->info->count, stoke_shape_format(&b->info->input_shape, sh, sizeof sh),
           stoke_dtype_name(b->info->input_dtype));
    stoke_format_bytes(b->bytes, x, sizeof x);
    stoke_format_bytes((double)b->avail, y, sizeof y);
    if (b->held)
        printf("memory       held in memory (%s; %s available; loaded in %.2f s)%s\n", x, y,
               b->load_s, o->hold < 0 ? ", as stoke train holds it" : ", --hold yes");
    else
        printf("memory       read from storage every epoch%s (%s; %s available)%s\n",
               b->originals ? ", the crop drawn on each original image" : "", x, y,
               o->hold < 0 ? ", as stoke train reads it" : ", --hold no");
    printf("transform    %s", b->transform);
    if (b->image)
        printf(" -> %s %s %s", stoke_shape_format(&b->out_shape, sh, sizeof sh),
               stoke_dtype_name(o->dtype), o->layout == STOKE_LAYOUT_HWC ? "NHWC" : "NCHW");
    printf("\nbatches      %" PRId64 " samples, shuffled, seed %" PRIu64
           "; %.3g s per worker count after a warm-up\n",
           o->cfg.batch_size, o->cfg.seed, o->seconds);
    printf("cpu          %s, %d usable CPU%s, load average %.2f\n",
           b->cpu.model[0] ? b->cpu.model : "?", b->cpu.usable_cpus,
           b->cpu.usable_cpus == 1 ? "" : "s", b->load_avg);
    printf("\n%7s %11s %10s %12s %12s %7s %16s %12s\n", "workers", "samples/s", "batches/s",
           "wait avg ms", "wait p95 ms", "busy %", "feeds samples/s", "per CPU-s");
    fflush(stdout);
}

static void print_row(const bench_row *r)
{
    double sps = rate(r->samples, r->seconds);
    printf("%7d %11.0f %10.1f %12.3f %12.3f %7.1f %16.0f %12.0f\n", r->workers, sps,
           rate(r->batches, r->seconds), r->wait_avg_ms, r->wait_p95_ms, 100 * r->busy_share, sps,
           rate(r->samples, r->cpu_seconds));
    fflush(stdout);
}

static void print_best(const bench_row *rows, int n)
{
    int bi = best_row(rows, n);
    if (bi < 0)
        return;
    double sps = rate(rows[bi].samples, rows[bi].seconds);
    printf("\nbest: %d worker%s, %.0f samples/s\n", rows[bi].workers,
           rows[bi].workers == 1 ? "" : "s", sps);
    printf("the loader can feed a model that trains at up to %.0f samples/s with %d worker%s\n",
           sps, rows[bi].workers, rows[bi].workers == 1 ? "" : "s");
}

/* The dataset opened, held in memory or not, and the transform made: -1 when ready,
 * else the exit code. */
static int setup(bench_opts *o, stoke_dataset **src, stoke_dataset **d, bench_setup *b,
                 stoke_op *ops, stoke_transform_opts *t)
{
    int rc = cli_data_open(o->path, &o->data, src);
    if (rc >= 0)
        return rc;
    b->info = stoke_dataset_get_info(*src);
    b->bytes = (double)b->info->count * (double)(b->info->input_bytes + b->info->target_bytes);
    stoke_mem_info mi = {0};
    b->avail = stoke_mem_probe(NULL, &mi) == STOKE_OK ? mi.available_bytes : 0;
    b->held =
        o->hold < 0 ? stoke_train_holds_in_memory(&o->cfg, *src, b->bytes, b->avail) : o->hold == 1;
    *d = *src;
    if (b->held) {
        uint64_t t0 = stoke_now_ns();
        if (stoke_dataset_load(*src, d) != STOKE_OK)
            return cli_last_error(CMD);
        b->load_s = (double)(stoke_now_ns() - t0) * 1e-9;
    }
    stoke_status s = stoke_train_input_transform(&o->cfg, *d, o->eval, ops, t, &b->image);
    if (s != STOKE_OK) /* the augmentation asked for does not fit the data: a usage error */
        return s == STOKE_ERR_ARG &&
                       (o->cfg.augment ||
                        stoke_train_config_source(&o->cfg, "transforms") == STOKE_CFG_FLAG)
                   ? cli_usage_error(CMD, "%s", stoke_last_error())
                   : cli_last_error(CMD);
    if (!b->image && (o->eval || o->dtype >= 0 || o->layout >= 0)) {
        char sh[64];
        return cli_usage_error(CMD,
                               "--eval, --dtype and --layout apply to images; %s has samples "
                               "of %s %s",
                               o->path, stoke_shape_format(&b->info->input_shape, sh, sizeof sh),
                               stoke_dtype_name(b->info->input_dtype));
    }
    describe(t, b->image, o->eval, b->transform, sizeof b->transform);
    o->dtype = o->dtype < 0 ? STOKE_F32 : o->dtype;
    o->layout = o->layout < 0 ? STOKE_LAYOUT_CHW : o->layout;
    if (b->image) {
        t->out_dtype = o->dtype;
        t->out_layout = o->layout;
        stoke_transform *tr;
        if (stoke_transform_create(t, &tr) != STOKE_OK)
            return cli_last_error(CMD);
        b->out_shape = stoke_transform_out_shape(tr);
        stoke_transform_destroy(tr);
    }
    if (stoke_cpu_probe(NULL, &b->cpu) != STOKE_OK || b->cpu.usable_cpus < 1)
        b->cpu.usable_cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (!o->nworkers) {
        int n = b->cpu.usable_cpus < MAX_COUNTS ? b->cpu.usable_cpus : MAX_COUNTS - 1;
        for (int i = 0; i <= n; i++)
            o->workers[o->nworkers++] = i;
    }
    double la[1];
    b->load_avg = getloadavg(la, 1) == 1 ? la[0] : -1;
    return -1;
}

int cmd_data_bench(int argc, char **argv)
{
    bench_opts o = {.dtype = -1, .layout = -1, .seconds = 3, .hold = -1};
    stoke_train_config_defaults(&o.cfg);
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    snprintf(o.cfg.dataset, sizeof o.cfg.dataset, "%s", o.path);
    stoke_dataset *src = NULL, *d = NULL;
    bench_setup b = {0};
    stoke_op ops[STOKE_TRAIN_MAX_OPS];
    stoke_transform_opts t;
    rc = setup(&o, &src, &d, &b, ops, &t);
    bench_row rows[MAX_COUNTS];
    int n = 0;
    if (rc < 0) {
        if (!o.json)
            print_header(&o, &b);
        /* Only around the runs: before, a SIGINT ends a long load at once, as it would
         * stoke train's. */
        struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_ONSTACK};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        for (int i = 0; i < o.nworkers && rc < 0; i++) {
            int r = run_one(d, &o, b.image ? &t : NULL, o.workers[i], &rows[n]);
            if (r == 0 && !o.json)
                print_row(&rows[n]);
            n += r == 0;
            if (r > 0)
                rc = r;
        }
        signal(SIGINT, SIG_DFL);
        if (rc != 1) {
            if (o.json)
                print_json(&o, &b, rows, n);
            else
                print_best(rows, n);
        }
        rc = rc < 0 ? 0 : rc;
    }
    if (d != src)
        stoke_dataset_close(d);
    stoke_dataset_close(src);
    return rc;
}
