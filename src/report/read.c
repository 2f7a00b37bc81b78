/* read.c - the report's inputs, streamed a line at a time: each line is parsed on its
 * own (cJSON) and only the numbers drawn are kept, in rp_series' bounded buckets. A
 * bench or tune report is one JSON document (small), read whole. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "report/report.h"

/* A JSON document larger than this is no bench or tune report. */
#define RP_MAX_DOC (64u << 20)

const char *rp_kind_name(rp_kind k)
{
    static const char *n[] = {"unknown", "training log (stoke train --log)",
                              "monitor log (stoke monitor --jsonl)",
                              "bench report (stoke bench --json)", "tune report (stoke tune --json)"};
    return (unsigned)k < 5 ? n[k] : "?";
}

static const char *const phase_names[RP_STACK_MAX] = {"data_wait", "input", "forward", "backward", "optimizer",
                                           "allreduce"};

void rp_report_init(rp_report *r)
{
    memset(r, 0, sizeof *r);
    rp_series_init(&r->loss, "loss");
    rp_series_init(&r->batch_loss, "batch_loss");
    rp_series_init(&r->val_loss, "val_loss");
    rp_series_init(&r->acc, "acc");
    rp_series_init(&r->val_acc, "val_acc");
    rp_series_init(&r->lr, "lr");
    rp_series_init(&r->sps, "samples_per_s");
    rp_series_init(&r->wait, "data_wait_pct");
    rp_series_init(&r->mfu, "mfu_pct");
    rp_series_init(&r->cpu, "cpu_pct");
    rp_series_init(&r->host_mem, "mem_used");
    rp_series_init(&r->wait_p95, "wait_p95_ms");
    rp_series_init(&r->wait_max, "wait_max_ms");
    r->final_val_acc = r->final_val_loss = r->last_sps = NAN;
    r->hist_p50 = r->hist_p95 = r->hist_max = NAN;
    r->speedup = NAN;
}

static void gpu_init(rp_gpu *g, int index)
{
    char n[48];
    g->index = index;
    snprintf(n, sizeof n, "gpu%d_util_pct", index);
    rp_series_init(&g->util, n);
    snprintf(n, sizeof n, "gpu%d_mem_used", index);
    rp_series_init(&g->mem, n);
    snprintf(n, sizeof n, "gpu%d_power_w", index);
    rp_series_init(&g->power, n);
    snprintf(n, sizeof n, "gpu%d_sm_clock_mhz", index);
    rp_series_init(&g->clock, n);
    g->span_open = NAN;
}

void rp_report_free(rp_report *r)
{
    rp_series *all[] = {&r->loss, &r->batch_loss, &r->val_loss, &r->acc, &r->val_acc, &r->lr,
                        &r->sps, &r->wait, &r->mfu, &r->cpu, &r->host_mem, &r->wait_p95,
                        &r->wait_max};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        rp_series_free(all[i]);
    rp_stack_free(&r->phase);
    for (int i = 0; i < r->ngpu; i++) {
        rp_series_free(&r->gpu[i].util);
        rp_series_free(&r->gpu[i].mem);
        rp_series_free(&r->gpu[i].power);
        rp_series_free(&r->gpu[i].clock);
    }
}

/* ---- JSON helpers ---------------------------------------------------------------------- */

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* A number that may be absent: NaN stands for null in a loss (a NaN loss is logged as
 * null) only when the key is there. */
static bool has(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k) != NULL;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The container when it is one, else NULL (no elements to walk). */
static const cJSON *only_Array(const cJSON *a) { return cJSON_IsArray(a) ? a : NULL; }
static const cJSON *only_Object(const cJSON *a) { return cJSON_IsObject(a) ? a : NULL; }

/* A whole number from a JSON number, 0 when absent or beyond any count a log holds
 * (a cast of NaN or 1e300 is undefined). */
static int64_t whole_num(double v) { return v >= -1e15 && v <= 1e15 ? (int64_t)v : 0; }

static void copy(char *dst, size_t n, const char *s)
{
    if (s)
        stoke_say(dst, n, "%s", s);
}

/* One finding object (a train record, the monitor's diagnosis, bench's robustness) in
 * words. Repeats of a rule already listed are counted, not listed again. */
static void add_finding(rp_report *r, const cJSON *f, const char *source)
{
    const char *rule = str(f, "rule");
    if (!rule)
        rule = str(f, "verdict");
    for (int i = 0; i < r->nfindings; i++)
        if (rule && !strcmp(r->findings[i].rule, rule) && !strcmp(r->findings[i].source, source)) {
            r->findings[i].repeats++;
            return;
        }
    if (r->nfindings == RP_MAX_FINDINGS) {
        r->findings_dropped++;
        return;
    }
    rp_finding *d = &r->findings[r->nfindings++];
    memset(d, 0, sizeof *d);
    copy(d->source, sizeof d->source, source);
    copy(d->rule, sizeof d->rule, rule ? rule : "finding");
    copy(d->resource, sizeof d->resource, str(f, "resource"));
    copy(d->evidence, sizeof d->evidence, str(f, "evidence"));
    copy(d->advice, sizeof d->advice, str(f, "advice"));
    const cJSON *figs = cJSON_GetObjectItemCaseSensitive(f, "figures"), *e;
    cJSON_ArrayForEach(e, only_Object(figs))
    {
        double v = num(e, "value");
        const char *u = str(e, "unit");
        if (e->string && isfinite(v))
            stoke_more(d->numbers, sizeof d->numbers, "%s%s %g%s%s", d->numbers[0] ? "; " : "",
                       e->string, v, u && u[0] != '%' ? " " : "", u ? u : "");
    }
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(f, "changes");
    cJSON_ArrayForEach(e, only_Array(ch))
    {
        const char *set = str(e, "setting"), *u = str(e, "unit"), *to = str(e, "to");
        double cur = num(e, "current"), sug = num(e, "suggested");
        if (!set)
            continue;
        if (to)
            stoke_more(d->numbers, sizeof d->numbers, "%s%s -> %s", d->numbers[0] ? "; " : "",
                       set, to);
        else if (isfinite(sug))
            stoke_more(d->numbers, sizeof d->numbers, "%s%s %g -> %g%s%s",
                       d->numbers[0] ? "; " : "", set, cur, sug, u ? " " : "", u ? u : "");
    }
}

/* ---- the training log ----------------------------------------------------------------- */

static void run_hist(rp_report *r, const cJSON *h)
{
    const cJSON *edges = cJSON_GetObjectItemCaseSensitive(h, "edges_ms");
    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(h, "counts");
    int ne = cJSON_GetArraySize(edges), nc = cJSON_GetArraySize(counts);
    if (!cJSON_IsArray(edges) || !cJSON_IsArray(counts) || ne < 1 || ne != nc ||
        ne > RP_HIST_MAX)
        return;
    double e[RP_HIST_MAX];
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, edges) e[i++] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (r->hist_n == 0) {
        r->hist_n = ne;
        memcpy(r->hist_edges, e, sizeof e[0] * (size_t)ne);
    } else if (r->hist_n != ne || memcmp(r->hist_edges, e, sizeof e[0] * (size_t)ne)) {
        r->hist_mismatch = true; /* other buckets: not summed */
        return;
    }
    i = 0;
    cJSON_ArrayForEach(v, counts)
    {
        if (cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 1e12)
            r->hist_counts[i] += (int64_t)v->valuedouble;
        i++;
    }
    double b = num(h, "batches"), p50 = num(h, "p50_ms"), p95 = num(h, "p95_ms"),
           mx = num(h, "max_ms");
    if (isfinite(b) && b > 0 && b < 1e12)
        r->hist_batches += (int64_t)b;
    if (isfinite(p50))
        r->hist_p50 = p50;
    if (isfinite(p95))
        r->hist_p95 = p95;
    if (isfinite(mx) && !(mx <= r->hist_max))
        r->hist_max = mx;
}

static void run_record(rp_report *r, const cJSON *o, const char *type)
{
    double step = num(o, "step"), el = num(o, "elapsed");
    r->run_records++;
    if (isfinite(el))
        r->last_elapsed = el;
    if (!strcmp(type, "start")) {
        copy(r->model, sizeof r->model, str(o, "model"));
        copy(r->dataset, sizeof r->dataset, str(o, "dataset"));
        const char *dn = str(o, "device_name"), *dv = str(o, "device");
        if (dv)
            stoke_say(r->device, sizeof r->device, "%s%s%s%s", dv, dn ? " (" : "", dn ? dn : "",
                      dn ? ")" : "");
        copy(r->precision, sizeof r->precision, str(o, "precision"));
        double ep = num(o, "epochs"), b = num(o, "batch");
        r->epochs_planned = whole_num(ep);
        r->batch = whole_num(b);
    } else if (!strcmp(type, "step")) {
        /* a NaN loss is written as null: the key is there, the number is not */
        if (has(o, "loss"))
            rp_series_add(&r->loss, step, el, num(o, "loss"));
        if (has(o, "batch_loss"))
            rp_series_add(&r->batch_loss, step, el, num(o, "batch_loss"));
        if (has(o, "lr"))
            rp_series_add(&r->lr, step, el, num(o, "lr"));
        if (has(o, "samples_per_s"))
            rp_series_add(&r->sps, step, el, num(o, "samples_per_s"));
        if (has(o, "data_wait_pct"))
            rp_series_add(&r->wait, step, el, num(o, "data_wait_pct"));
        double v[RP_STACK_MAX];
        for (int i = 0; i < RP_STACK_MAX; i++) {
            char k[32];
            snprintf(k, sizeof k, "%s_pct", phase_names[i]);
            v[i] = num(o, k);
        }
        if (isfinite(v[5]))
            r->has_allreduce = true;
        if (has(o, "forward_pct"))
            rp_stack_add(&r->phase, step, v);
    } else if (!strcmp(type, "epoch") || !strcmp(type, "eval")) {
        double vl = num(o, "val_loss"), va = num(o, "val_acc");
        if (isfinite(vl) || has(o, "val_loss"))
            if (!cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "val_loss")))
                rp_series_add(&r->val_loss, step, el, vl);
        if (isfinite(va)) {
            rp_series_add(&r->val_acc, step, el, 100 * va);
            r->final_val_acc = 100 * va;
        }
        if (isfinite(vl))
            r->final_val_loss = vl;
        if (!strcmp(type, "epoch")) {
            r->epochs_done++;
            double a = num(o, "acc"), sps = num(o, "samples_per_s"), m = num(o, "mfu_pct");
            if (isfinite(a))
                rp_series_add(&r->acc, step, el, 100 * a);
            if (isfinite(sps))
                r->last_sps = sps;
            if (isfinite(m))
                rp_series_add(&r->mfu, step, el, m);
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "wait_hist");
            if (cJSON_IsObject(h))
                run_hist(r, h);
        }
    } else if (!strcmp(type, "finding")) {
        add_finding(r, o, "train");
    }
}

/* ---- the monitor's JSON lines ------------------------------------------------------ */

static bool real_throttle(const cJSON *names)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, only_Array(names))
    {
        if (cJSON_IsString(v) && strcmp(v->valuestring, "gpu_idle") &&
            strcmp(v->valuestring, "app_clocks") && strcmp(v->valuestring, "display_clock"))
            return true;
    }
    return false;
}

static void add_span(rp_gpu *g, double t0, double t1)
{
    if (g->nspans == RP_MAX_SPANS) { /* too many: the last one grows */
        g->spans[RP_MAX_SPANS - 1].t1 = t1;
        return;
    }
    g->spans[g->nspans++] = (rp_span){t0, t1};
}

static void mon_gpu(rp_report *r, const cJSON *o, double t)
{
    double di = num(o, "index");
    if (!(di >= 0 && di < 1e6))
        return; /* no GPU index: not a reading of one */
    int idx = (int)di;
    rp_gpu *g = NULL;
    for (int i = 0; i < r->ngpu; i++)
        if (r->gpu[i].index == idx)
            g = &r->gpu[i];
    if (!g) {
        if (r->ngpu == RP_MAX_GPUS)
            return;
        g = &r->gpu[r->ngpu++];
        gpu_init(g, idx);
    }
    if (has(o, "util_pct"))
        rp_series_add(&g->util, t, t, num(o, "util_pct"));
    if (has(o, "mem_used_bytes"))
        rp_series_add(&g->mem, t, t, num(o, "mem_used_bytes"));
    if (has(o, "power_w"))
        rp_series_add(&g->power, t, t, num(o, "power_w"));
    if (has(o, "sm_clock_mhz"))
        rp_series_add(&g->clock, t, t, num(o, "sm_clock_mhz"));
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(o, "throttle");
    bool on = real_throttle(th);
    if (on && isnan(g->span_open)) {
        g->span_open = t;
        const cJSON *v;
        cJSON_ArrayForEach(v, th) if (cJSON_IsString(v) && !strstr(g->reasons, v->valuestring))
            stoke_more(g->reasons, sizeof g->reasons, "%s%s", g->reasons[0] ? ", " : "",
                       v->valuestring);
    } else if (!on && !isnan(g->span_open)) {
        add_span(g, g->span_open, t);
        g->span_open = NAN;
    }
}

static void mon_record(rp_report *r, const cJSON *o)
{
    const char *type = str(o, "type");
    if (type) {
        if (!strcmp(type, "diagnosis")) {
            const cJSON *f, *fs = cJSON_GetObjectItemCaseSensitive(o, "findings");
            cJSON_ArrayForEach(f, only_Array(fs)) add_finding(r, f, "monitor");
        }
        return;
    }
    double t = num(o, "t");
    if (!isfinite(t))
        return;
    r->mon_samples++;
    r->mon_last_t = t;
    if (has(o, "cpu_pct"))
        rp_series_add(&r->cpu, t, t, num(o, "cpu_pct"));
    if (has(o, "mem_used_bytes"))
        rp_series_add(&r->host_mem, t, t, num(o, "mem_used_bytes"));
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pipeline");
    if (cJSON_IsObject(p)) {
        if (has(p, "wait_p95_ms"))
            rp_series_add(&r->wait_p95, t, t, num(p, "wait_p95_ms"));
        if (has(p, "wait_max_ms"))
            rp_series_add(&r->wait_max, t, t, num(p, "wait_max_ms"));
    }
    const cJSON *g, *gs = cJSON_GetObjectItemCaseSensitive(o, "gpus");
    cJSON_ArrayForEach(g, only_Array(gs)) if (cJSON_IsObject(g)) mon_gpu(r, g, t);
}

/* ---- bench and tune --------------------------------------------------------------------- */

static void bench_row(rp_report *r, const char *label, const cJSON *a, const cJSON *b,
                      const char *k, const char *unit)
{
    if (r->bench_nrows == 12)
        return;
    char(*row)[64] = r->bench_rows[r->bench_nrows++];
    snprintf(row[0], 64, "%s", label);
    const cJSON *m[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        double v = num(m[i], k);
        if (isfinite(v)) {
            char n[32];
            rp_num(n, sizeof n, v);
            snprintf(row[i + 1], 64, "%s%s", n, unit);
        } else
            snprintf(row[i + 1], 64, "unknown");
    }
}

static void read_bench(rp_report *r, const cJSON *d)
{
    r->has_bench = true;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(d, "configurations");
    const cJSON *nv = cJSON_GetObjectItemCaseSensitive(c, "naive");
    const cJSON *tu = cJSON_GetObjectItemCaseSensitive(c, "tuned");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(nv, "measured");
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(tu, "measured");
    bench_row(r, "samples/s", nm, tm, "samples_per_s", "");
    bench_row(r, "batch", nm, tm, "batch", "");
    bench_row(r, "seconds measured", nm, tm, "seconds", " s");
    bench_row(r, "data wait", nm, tm, "data_wait_pct", "%");
    bench_row(r, "CPU", nm, tm, "cpu_pct", "%");
    bench_row(r, "GPU", nm, tm, "gpu_pct", "%");
    bench_row(r, "MFU", nm, tm, "mfu_pct", "%");
    bench_row(r, "peak RSS", nm, tm, "peak_rss_bytes", "B");
    r->speedup = num(d, "speedup");
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(d, "robustness");
    if (cJSON_IsObject(rb)) {
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rb, "ran"))) {
            const char *v = str(rb, "verdict");
            stoke_say(r->robustness, sizeof r->robustness,
                      "robustness (a loader slowed by %g us a sample): %s, %s", num(rb, "delay_us"),
                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rb, "passed")) ? "passed"
                                                                                   : "failed",
                      v ? v : "no verdict");
            if (str(rb, "rule"))
                add_finding(r, rb, "bench");
        } else
            stoke_say(r->robustness, sizeof r->robustness, "robustness: not run (%s)",
                      str(rb, "skipped") ? str(rb, "skipped") : "skipped");
    }
    const cJSON *cfg[2] = {nv, tu}, *f;
    for (int i = 0; i < 2; i++) {
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(cfg[i], "diagnoses");
        cJSON_ArrayForEach(f, only_Array(ds)) if (cJSON_IsObject(f))
            add_finding(r, f, "bench");
    }
}

static void trial_label(const cJSON *t, char *buf, size_t n)
{
    buf[0] = 0;
    static const char *const k[] = {"batch_size", "workers", "prefetch", "threads"};
    static const char *const s[] = {"batch", "workers", "prefetch", "threads"};
    for (int i = 0; i < 4; i++) {
        double v = num(t, k[i]);
        if (isfinite(v))
            stoke_more(buf, n, "%s%s %g", buf[0] ? ", " : "", s[i], v);
    }
    if (str(t, "precision"))
        stoke_more(buf, n, ", %s", str(t, "precision"));
    if (str(t, "stage"))
        stoke_more(buf, n, " (%s)", str(t, "stage"));
}

static bool same_point(const cJSON *a, const cJSON *b)
{
    static const char *const k[] = {"batch_size", "workers", "prefetch", "threads"};
    for (int i = 0; i < 4; i++)
        if (num(a, k[i]) != num(b, k[i]))
            return false;
    const char *pa = str(a, "precision"), *pb = str(b, "precision");
    return pa && pb && !strcmp(pa, pb);
}

static void read_tune(rp_report *r, const cJSON *d)
{
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(d, "trials"), *t;
    const cJSON *chosen = cJSON_GetObjectItemCaseSensitive(d, "chosen");
    bool marked = false;
    cJSON_ArrayForEach(t, ts)
    {
        if (!cJSON_IsObject(t))
            continue;
        if (r->ntrials == RP_MAX_TRIALS) {
            r->trials_dropped++;
            continue;
        }
        rp_trial *x = &r->trials[r->ntrials++];
        memset(x, 0, sizeof *x);
        trial_label(t, x->label, sizeof x->label);
        x->samples_per_s = num(t, "samples_per_s");
        copy(x->error, sizeof x->error, str(t, "error"));
        if (x->error[0])
            x->samples_per_s = NAN;
        else if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(t, "ran")))
            stoke_say(x->error, sizeof x->error, "did not run");
        if (!marked && cJSON_IsObject(chosen) && same_point(t, chosen) && !x->error[0])
            x->chosen = marked = true;
    }
}

/* ---- detection and the line loop ------------------------------------------------------- */

static const char *const run_types[] = {"start", "step", "epoch", "eval", "threads", "target",
                                        "finding", NULL};

static rp_kind kind_of(const cJSON *o)
{
    if (!cJSON_IsObject(o))
        return RP_NONE;
    const char *schema = str(o, "schema"), *type = str(o, "type");
    if (schema && !strncmp(schema, "stoke-bench/", 12))
        return RP_BENCH;
    if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "trials")))
        return RP_TUNE;
    if (type) {
        for (int i = 0; run_types[i]; i++)
            if (!strcmp(type, run_types[i]))
                return RP_RUN;
        if (!strcmp(type, "diagnosis"))
            return RP_MONITOR;
        return RP_NONE;
    }
    if (has(o, "seq") && has(o, "t"))
        return RP_MONITOR;
    return RP_NONE;
}

static bool blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n')
            return false;
    return true;
}

/* The whole file as one JSON document (bench, tune); NULL if it is not one. */
static cJSON *whole(FILE *f)
{
    rewind(f);
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    while (s) {
        if (n + 1 == cap) {
            if (cap >= RP_MAX_DOC) {
                free(s);
                return NULL;
            }
            char *t = realloc(s, cap * 2);
            if (!t)
                break;
            s = t;
            cap *= 2;
        }
        size_t got = fread(s + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    if (!s)
        return NULL;
    s[n] = 0;
    cJSON *d = strlen(s) == n ? cJSON_Parse(s) : NULL;
    free(s);
    return d;
}

/* A log read a line at a time: the next line that is not blank, parsed (NULL when it is
 * not JSON, or holds a NUL); false at the end of the file. */
typedef struct lines {
    char *line;
    size_t cap;
    int64_t lineno;
} lines;

static bool next_line(FILE *f, lines *l, cJSON **o)
{
    ssize_t len;
    while ((len = getline(&l->line, &l->cap, f)) >= 0) {
        l->lineno++;
        if (blank(l->line))
            continue;
        *o = (size_t)len == strlen(l->line) ? cJSON_Parse(l->line) : NULL;
        return true;
    }
    return false;
}

stoke_status rp_detect(FILE *f, const char *name, rp_kind *kind)
{
    *kind = RP_NONE;
    rewind(f);
    lines l = {0};
    cJSON *o;
    stoke_status s = STOKE_OK;
    while (next_line(f, &l, &o)) {
        *kind = kind_of(o);
        cJSON_Delete(o);
        if (*kind == RP_NONE) { /* a document over several lines? */
            cJSON *d = whole(f);
            *kind = kind_of(d);
            cJSON_Delete(d);
            if (*kind == RP_RUN || *kind == RP_MONITOR)
                *kind = RP_NONE; /* a log is one record a line */
        }
        if (*kind == RP_NONE)
            s = stoke_fail(STOKE_ERR_FORMAT,
                           "%s:%lld: not a stoke training log, monitor log, bench or tune report "
                           "(a record with a \"type\" of the training log, a monitor sample "
                           "with \"seq\" and \"t\", or a JSON document with \"schema\": "
                           "\"stoke-bench/1\" or \"trials\")",
                           name, (long long)l.lineno);
        break;
    }
    if (l.lineno == 0 || (*kind == RP_NONE && s == STOKE_OK))
        *kind = RP_RUN; /* empty: an empty run, which the page says */
    if (ferror(f))
        s = stoke_fail(STOKE_ERR_IO, "%s: cannot read it: %s", name, strerror(errno));
    free(l.line);
    return s;
}

stoke_status rp_read(rp_report *r, FILE *f, const char *name, rp_kind kind)
{
    snprintf(r->path[kind], sizeof r->path[kind], "%s", name);
    if (kind == RP_BENCH || kind == RP_TUNE) {
        cJSON *d = whole(f);
        if (kind_of(d) != kind) {
            cJSON_Delete(d);
            return stoke_fail(STOKE_ERR_FORMAT, "%s: not one JSON document of a %s", name,
                              rp_kind_name(kind));
        }
        if (kind == RP_BENCH)
            read_bench(r, d);
        else
            read_tune(r, d);
        cJSON_Delete(d);
        return STOKE_OK;
    }
    rewind(f);
    lines l = {0};
    cJSON *o;
    stoke_status s = STOKE_OK;
    while (next_line(f, &l, &o)) {
        if (!cJSON_IsObject(o)) {
            cJSON_Delete(o);
            s = stoke_fail(STOKE_ERR_FORMAT, "%s:%lld: not a JSON object (a %s has one a line)",
                           name, (long long)l.lineno, rp_kind_name(kind));
            break;
        }
        const char *type = str(o, "type");
        if (kind == RP_RUN && type)
            run_record(r, o, type);
        else if (kind == RP_MONITOR)
            mon_record(r, o);
        cJSON_Delete(o);
    }
    if (s == STOKE_OK && ferror(f))
        s = stoke_fail(STOKE_ERR_IO, "%s: cannot read it: %s", name, strerror(errno));
    free(l.line);
    if (kind == RP_RUN)
        r->run_lines = l.lineno;
    else
        r->mon_lines = l.lineno;
    /* a throttle still on at the end lasts to the last sample */
    for (int i = 0; i < r->ngpu; i++)
        if (!isnan(r->gpu[i].span_open)) {
            add_span(&r->gpu[i], r->gpu[i].span_open, r->mon_last_t);
            r->gpu[i].span_open = NAN;
        }
    return s;
}
