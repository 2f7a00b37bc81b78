/* finding.c - the fields of a finding and the wording of its advice: the figures a rule
 * read and the settings it asks to change, recorded for the texts to render, and each
 * setting named as the watched program knows it (stoke's flags or PyTorch's knobs). */
#include "monitor/rules_impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "core/text.h"

/* The GPUs the job uses: those holding memory of the watched tree if the driver says
 * so for any GPU, otherwise every GPU with utilization readings. */
bool rule_gpu_considered(const stoke_mon_summary *s, int g)
{
    if (s->gpu[g].s[STOKE_G_UTIL].n == 0 && s->gpu[g].s[STOKE_G_MEM_USED].n == 0)
        return false;
    bool any_job = false;
    for (int k = 0; k < s->gpu_count; k++)
        if (s->gpu[k].s[STOKE_G_PROC_MEM].max > 0)
            any_job = true;
    return !any_job || s->gpu[g].s[STOKE_G_PROC_MEM].max > 0;
}

bool rule_any_gpu(const stoke_mon_summary *s)
{
    for (int g = 0; g < s->gpu_count; g++)
        if (rule_gpu_considered(s, g))
            return true;
    return false;
}

/* ---- The fields of a finding: the texts are rendered from what these record ---- */

/* Records a figure of the run the rule read; returns its value for the evidence. */
double rule_fig(stoke_finding *f, const char *name, double value, const char *unit)
{
    if ((unsigned)f->nfigures < STOKE_FINDING_FIGURES)
        f->figures[f->nfigures++] = (stoke_finding_figure){name, value, unit};
    return value;
}

/* Records a setting the advice asks to change; returns its value to suggest. current
 * and suggested are NAN when unknown or not given (a direction only). */
double rule_change(stoke_finding *f, const char *setting, const char *unit, double current,
                   double suggested, int direction)
{
    if ((unsigned)f->nchanges < STOKE_FINDING_CHANGES)
        f->changes[f->nchanges++] =
            (stoke_finding_change){setting, unit, current, suggested, direction, NULL};
    return suggested;
}

/* Records a setting to set to a word ("bf16", "tmpfs"). */
void rule_change_to(stoke_finding *f, const char *setting, const char *to)
{
    if ((unsigned)f->nchanges < STOKE_FINDING_CHANGES)
        f->changes[f->nchanges++] = (stoke_finding_change){setting, "", NAN, NAN, 0, to};
}

const stoke_finding_figure *stoke_finding_figure_of(const stoke_finding *f, const char *name)
{
    for (int i = 0; i < f->nfigures; i++)
        if (!strcmp(f->figures[i].name, name))
            return &f->figures[i];
    return NULL;
}

const stoke_finding_change *stoke_finding_change_of(const stoke_finding *f, const char *setting)
{
    for (int i = 0; i < f->nchanges; i++)
        if (!strcmp(f->changes[i].setting, setting))
            return &f->changes[i];
    return NULL;
}

/* ---- A finding as JSON: bench --json, train --log and monitor --jsonl write the same --- */

/* A number, or null when it is unknown (JSON has no NaN). */
static void add_num(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

void stoke_finding_numbers_json(struct cJSON *o, const stoke_finding *f)
{
    cJSON *figs = cJSON_AddObjectToObject(o, "figures");
    for (int i = 0; figs && i < f->nfigures; i++) {
        cJSON *v = cJSON_AddObjectToObject(figs, f->figures[i].name);
        add_num(v, "value", f->figures[i].value);
        cJSON_AddStringToObject(v, "unit", f->figures[i].unit ? f->figures[i].unit : "");
    }
    cJSON *changes = cJSON_AddArrayToObject(o, "changes");
    for (int i = 0; changes && i < f->nchanges; i++) {
        const stoke_finding_change *c = &f->changes[i];
        cJSON *v = cJSON_CreateObject();
        if (!v)
            break;
        cJSON_AddStringToObject(v, "setting", c->setting);
        cJSON_AddStringToObject(v, "unit", c->unit ? c->unit : "");
        add_num(v, "current", c->current);
        add_num(v, "suggested", c->suggested);
        cJSON_AddNumberToObject(v, "direction", c->direction);
        if (c->to)
            cJSON_AddStringToObject(v, "to", c->to);
        else
            cJSON_AddNullToObject(v, "to");
        cJSON_AddItemToArray(changes, v);
    }
}

struct cJSON *stoke_finding_json(const stoke_finding *f)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "rule", f->rule ? f->rule->id : "");
    cJSON_AddStringToObject(o, "resource", f->rule && f->rule->resource ? f->rule->resource : "");
    cJSON_AddNumberToObject(o, "gpu", f->gpu);
    cJSON_AddNumberToObject(o, "rank", f->rank);
    cJSON_AddStringToObject(o, "evidence", f->evidence);
    cJSON_AddStringToObject(o, "advice", f->advice);
    stoke_finding_numbers_json(o, f);
    return o;
}

/* Loader workers to suggest: one core is left for the training process itself. */
int rule_suggested_workers(const stoke_mon_summary *s)
{
    return s->usable_cpus > 1 ? s->usable_cpus - 1 : 1;
}

/* The advice is worded for the program watched: stoke's flags for its own trainer,
 * PyTorch's knobs for a foreign job; a knob of the other is no advice at all. */
bool rule_is_stoke(const stoke_mon_summary *s) { return s->program.kind == STOKE_PROG_STOKE; }

/* "--workers 3" or "DataLoader(num_workers=3)". */
const char *rule_workers_knob(const stoke_mon_summary *s, int n, char *buf, size_t size)
{
    if (rule_is_stoke(s))
        stoke_say(buf, size, "--workers %d", n);
    else
        stoke_say(buf, size, "DataLoader(num_workers=%d)", n);
    return buf;
}

/* Batches in flight: stoke's ring slots, or PyTorch's per-worker prefetch_factor. */
const char *rule_prefetch_knob(const stoke_mon_summary *s, int slots, int workers, char *buf,
                               size_t size)
{
    if (rule_is_stoke(s))
        stoke_say(buf, size, "--prefetch %d", slots);
    else
        stoke_say(buf, size, "prefetch %d batches: DataLoader(prefetch_factor=%d)", slots,
                  workers > 0 ? (slots + workers - 1) / workers : slots);
    return buf;
}

const char *rule_threads_knob(const stoke_mon_summary *s, int n, char *buf, size_t size)
{
    if (rule_is_stoke(s))
        stoke_say(buf, size, "--threads %d", n);
    else
        stoke_say(buf, size,
                  "OMP_NUM_THREADS=%d (and MKL_NUM_THREADS / OPENBLAS_NUM_THREADS, "
                  "torch.set_num_threads(%d))",
                  n, n);
    return buf;
}

/* The run's loader workers: the pipeline's report, else stoke's setting; NAN unknown. */
double rule_current_workers(const stoke_mon_summary *s)
{
    if (s->have_pipeline)
        return s->pipeline.workers;
    return rule_is_stoke(s) && s->program.workers > 0 ? s->program.workers : NAN;
}

/* The run's prefetch depth (batches in flight), as rule_current_workers. */
double rule_current_prefetch(const stoke_mon_summary *s)
{
    if (s->have_pipeline)
        return s->pipeline.slots;
    return rule_is_stoke(s) && s->program.prefetch > 0 ? s->program.prefetch : NAN;
}

/* Records "at least n loader workers" and returns n for the advice. */
int rule_more_workers(stoke_finding *f, const stoke_mon_summary *s, int n)
{
    return (int)rule_change(f, "workers", "workers", rule_current_workers(s), n, +1);
}

/* The batch size scaled by factor (recorded as a change): stoke's flag with its current
 * value when known. */
const char *rule_batch_knob(const stoke_mon_summary *s, stoke_finding *f, double factor, char *buf,
                            size_t size)
{
    int b = s->program.batch_size;
    bool known = rule_is_stoke(s) && b > 0;
    double to = rule_change(f, "batch_size", "samples", known ? b : NAN,
                            known ? fmax(1, floor(b * factor)) : NAN, factor > 1 ? +1 : -1);
    if (known)
        stoke_say(buf, size, "--batch-size %d (now %d)", (int)to, b);
    else if (rule_is_stoke(s))
        stoke_say(buf, size, "--batch-size");
    else
        stoke_say(buf, size, "the DataLoader's batch_size");
    return buf;
}

/* Per-sample work done once: stoke's packed records where stoke's loader reads the data
 * (its trainer, or a Python job whose stoke.Loader reports the pipeline), else large
 * shards (a foreign loader cannot read stoke's format). */
const char *rule_pack_advice(const stoke_mon_summary *s, stoke_finding *f)
{
    bool records = rule_is_stoke(s) || s->have_pipeline;
    rule_change_to(f, "data_format", records ? "stoke-records" : "shards");
    return records ? "convert the dataset to stoke packed records (stoke data convert SRC DST)"
                   : "pack the samples into large sequential shards (tar/WebDataset)";
}

/* The input pipeline's own account of the run: its wait share series, if it reported. */
const stoke_stats *rule_data_wait(const stoke_mon_summary *s)
{
    const stoke_stats *w = &s->sys[STOKE_M_DATA_WAIT];
    return s->have_pipeline && w->n ? w : NULL;
}
