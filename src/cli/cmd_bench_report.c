/* cmd_bench_report.c - `stoke bench`'s before/after table and its JSON (schema in
 * docs/bench.md): the same numbers, a figure that is unknown printed "-" and written
 * null, never a made-up zero. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "cli/bench.h"
#include "cli/cli.h"
#include "core/tmpfile.h"
#include "stoke/core.h"

static const char *const phase_names[4] = {"input", "forward", "backward", "optimizer"};

/* v with `dec` decimals and `unit` after it, or "-". */
static void cell(char *buf, size_t n, int dec, const char *unit, double v)
{
    if (isfinite(v))
        snprintf(buf, n, "%.*f%s", dec, v, unit);
    else
        snprintf(buf, n, "-");
}

static void row(const char *label, const char *a, const char *b)
{
    printf("  %-24s %16s %16s\n", label, a, b);
}

static void row_num(const bench_report *r, const char *label, int dec, size_t off)
{
    char a[32], b[32];
    cell(a, sizeof a, dec, "", *(const double *)(const void *)((const char *)&r->runs[0] + off));
    cell(b, sizeof b, dec, "", *(const double *)(const void *)((const char *)&r->runs[1] + off));
    row(label, a, b);
}

static void print_settings(const bench_run *r)
{
    printf("%s settings:\n", r->name);
    for (int i = 0; i < r->nsettings; i++) {
        const bench_setting *s = &r->settings[i];
        printf("  %-12s %-8s %s%s%s\n", s->key, s->value, s->source, s->detail[0] ? ": " : "",
               s->detail);
    }
}

void bench_print(const bench_report *r)
{
    const bench_run *n = &r->runs[0], *t = &r->runs[1];
    printf("\nstoke bench: %s on %s%s, %lld measured steps after %lld warm-up steps each\n",
           r->model, r->dataset, r->limit > 0 ? " (limited)" : "", (long long)t->steps,
           (long long)t->warmup_steps);
    printf("CPU: %s (%d usable)\n\n", r->machine->cpu.model[0] ? r->machine->cpu.model : "unknown",
           r->machine->cpu.usable_cpus);
    row("", "naive", "tuned");
    row_num(r, "CPU utilization %", 0, offsetof(bench_run, cpu_pct));
    row_num(r, "GPU utilization %", 0, offsetof(bench_run, gpu_pct));
    char a[32], b[32];
    snprintf(a, sizeof a, "%lld x %lld", (long long)n->batch, (long long)n->accumulate);
    snprintf(b, sizeof b, "%lld x %lld", (long long)t->batch, (long long)t->accumulate);
    row("batch x accumulation", a, b);
    row_num(r, "samples/s", 0, offsetof(bench_run, samples_per_s));
    row_num(r, "data wait %", 1, offsetof(bench_run, data_wait_pct));
    for (int p = 0; p < 4; p++) {
        char label[32];
        snprintf(label, sizeof label, "step: %s %%", phase_names[p]);
        cell(a, sizeof a, 1, "", n->phase_pct[p]);
        cell(b, sizeof b, 1, "", t->phase_pct[p]);
        row(label, a, b);
    }
    char x[32];
    stoke_format_bytes(n->plan_bytes, x, sizeof x);
    snprintf(a, sizeof a, "%s", isfinite(n->plan_bytes) ? x : "-");
    stoke_format_bytes(t->plan_bytes, x, sizeof x);
    snprintf(b, sizeof b, "%s", isfinite(t->plan_bytes) ? x : "-");
    row("memory (plan)", a, b);
    stoke_format_bytes(n->peak_rss_bytes, x, sizeof x);
    snprintf(a, sizeof a, "%s", isfinite(n->peak_rss_bytes) ? x : "-");
    stoke_format_bytes(t->peak_rss_bytes, x, sizeof x);
    snprintf(b, sizeof b, "%s", isfinite(t->peak_rss_bytes) ? x : "-");
    row("peak RSS", a, b);
    row_num(r, "MFU %", 2, offsetof(bench_run, mfu_pct));
    cell(b, sizeof b, 2, "x", r->speedup);
    row("speedup", "1.00x", b);
    if (!n->rss_reset || !t->rss_reset)
        printf("  (peak RSS: the process's peak so far; it could not be reset between runs)\n");
    printf("\n");
    print_settings(n);
    print_settings(t);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < r->runs[k].nwarnings; i++)
            printf("%s diagnosis: %s\n", r->runs[k].name, r->runs[k].warnings[i]);
    const bench_robust *rb = &r->robust;
    if (!rb->ran) {
        printf("robustness: skipped (%s)\n", rb->skipped);
        return;
    }
    char wait[32];
    cell(wait, sizeof wait, 1, "%", rb->data_wait_pct);
    printf("robustness: %s, %lld us more CPU per sample, %lld samples, %lld workers, data wait "
           "%s: %s\n",
           rb->passed ? "passed" : "FAILED", (long long)rb->delay_us, (long long)rb->limit,
           (long long)rb->workers, wait, rb->verdict);
    if (rb->rule[0])
        printf("  evidence: %s\n  advice: %s\n", rb->evidence, rb->advice);
}

/* A number, or null when it is unknown. */
static void add_num(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

static cJSON *run_json(const bench_run *r)
{
    cJSON *o = cJSON_CreateObject(), *set = cJSON_AddObjectToObject(o, "settings");
    for (int i = 0; set && i < r->nsettings; i++) {
        const bench_setting *s = &r->settings[i];
        cJSON *e = cJSON_AddObjectToObject(set, s->key);
        char *end;
        double v = strtod(s->value, &end);
        if (e && s->value[0] && !*end)
            cJSON_AddNumberToObject(e, "value", v);
        else if (e)
            cJSON_AddStringToObject(e, "value", s->value);
        cJSON_AddStringToObject(e, "source", s->source);
        cJSON_AddStringToObject(e, "detail", s->detail);
    }
    cJSON *m = cJSON_AddObjectToObject(o, "measured");
    add_num(m, "warmup_steps", (double)r->warmup_steps);
    add_num(m, "steps", (double)r->steps);
    add_num(m, "samples", (double)r->samples);
    add_num(m, "seconds", r->seconds);
    add_num(m, "batch", (double)r->batch);
    add_num(m, "accumulate", (double)r->accumulate);
    add_num(m, "samples_per_s", r->samples_per_s);
    add_num(m, "data_wait_pct", r->data_wait_pct);
    cJSON *ph = cJSON_AddObjectToObject(m, "step_pct");
    for (int p = 0; p < 4; p++)
        add_num(ph, phase_names[p], r->phase_pct[p]);
    add_num(m, "cpu_pct", r->cpu_pct);
    add_num(m, "gpu_pct", r->gpu_pct);
    add_num(m, "mfu_pct", r->mfu_pct);
    add_num(m, "plan_bytes", r->plan_bytes);
    add_num(m, "peak_rss_bytes", r->peak_rss_bytes);
    cJSON_AddBoolToObject(m, "peak_rss_reset", r->rss_reset);
    cJSON *w = cJSON_AddArrayToObject(o, "diagnoses");
    for (int i = 0; w && i < r->nwarnings; i++)
        cJSON_AddItemToArray(w, cJSON_CreateString(r->warnings[i]));
    return o;
}

static cJSON *report_json(const bench_report *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schema", "stoke-bench/1");
    cJSON *mach = cJSON_AddObjectToObject(o, "machine");
    cJSON_AddStringToObject(mach, "cpu", r->machine->cpu.model);
    cJSON_AddNumberToObject(mach, "usable_cpus", r->machine->cpu.usable_cpus);
    cJSON *gpus = cJSON_AddArrayToObject(mach, "gpus");
    for (int g = 0; gpus && g < r->machine->gpu_count; g++)
        cJSON_AddItemToArray(gpus, cJSON_CreateString(r->machine->gpus[g].name));
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddStringToObject(o, "dataset", r->dataset);
    cJSON_AddNumberToObject(o, "limit", (double)r->limit);
    cJSON *cfgs = cJSON_AddObjectToObject(o, "configurations");
    for (int k = 0; cfgs && k < 2; k++)
        cJSON_AddItemToObject(cfgs, r->runs[k].name, run_json(&r->runs[k]));
    add_num(o, "speedup", r->speedup);
    const bench_robust *b = &r->robust;
    cJSON *rb = cJSON_AddObjectToObject(o, "robustness");
    cJSON_AddBoolToObject(rb, "ran", b->ran);
    if (!b->ran) {
        cJSON_AddStringToObject(rb, "skipped", b->skipped);
        return o;
    }
    cJSON_AddNumberToObject(rb, "delay_us", (double)b->delay_us);
    cJSON_AddNumberToObject(rb, "limit", (double)b->limit);
    cJSON_AddNumberToObject(rb, "workers", (double)b->workers);
    add_num(rb, "data_wait_pct", b->data_wait_pct);
    cJSON_AddBoolToObject(rb, "passed", b->passed);
    cJSON_AddStringToObject(rb, "verdict", b->verdict);
    if (b->rule[0])
        cJSON_AddStringToObject(rb, "rule", b->rule);
    else
        cJSON_AddNullToObject(rb, "rule");
    cJSON_AddStringToObject(rb, "evidence", b->evidence);
    cJSON_AddStringToObject(rb, "advice", b->advice);
    stoke_finding_numbers_json(rb, &b->finding); /* docs/monitor.md, "A finding in numbers" */
    return o;
}

int bench_check_json_path(const char *path)
{
    if (stoke_tmpfile_check(path) != STOKE_OK)
        return cli_error("bench", "--json: %s", stoke_last_error());
    return 0;
}

int bench_write_json(const bench_report *r, const char *path)
{
    cJSON *o = report_json(r);
    char *s = o ? stoke_json_print(o, true) : NULL;
    cJSON_Delete(o);
    if (!s)
        return cli_error("bench", "out of memory");
    size_t len = strlen(s);
    s[len] = '\n'; /* cJSON's terminator becomes the file's last newline */
    stoke_tmpfile t;
    stoke_status st = stoke_tmpfile_open(&t, path);
    if (st == STOKE_OK)
        st = stoke_tmpfile_write(&t, s, len + 1);
    if (st == STOKE_OK)
        st = stoke_tmpfile_commit(&t);
    free(s);
    if (st != STOKE_OK)
        return cli_error("bench", "--json: %s", stoke_last_error());
    printf("report written to %s\n", path);
    return 0;
}
