/* records.c - the JSON-lines log (--log): one record per line, built with cJSON; the
 * numbers keep the text forms docs/train.md shows (times to the millisecond, losses
 * to 6 digits, absent values as null). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "train/trainer.h"

/* A record that cannot be written (a full disk, /dev/full, a file-size limit) stops
 * the log with a warning: the training goes on, since its checkpoint is worth more
 * than the log, and the run ends with the error (log_finish). */
static void log_line(stoke_trainer *t, const char *buf)
{
    if (t->log_fd < 0)
        return;
    if (stoke_mon_write_line(t->log_fd, buf, strlen(buf), t->cfg.log) == STOKE_OK)
        return;
    snprintf(t->log_error, sizeof t->log_error, "%s", stoke_last_error());
    close(t->log_fd);
    t->log_fd = -1;
    char w[700];
    snprintf(w, sizeof w,
             "log: %s; the log stops here, training goes on (the run will end "
             "with this error)",
             t->log_error);
    stoke_train_event e = {.kind = STOKE_EV_WARNING, .text = w};
    train_emit(t, &e);
}

/* The log's end: flushed to the disk and closed, each checked (a network filesystem
 * reports a failed write only then). The error of any record lost. */
stoke_status train_log_finish(stoke_trainer *t)
{
    if (t->log_fd >= 0) {
        int fd = t->log_fd;
        t->log_fd = -1;
        bool ok = fsync(fd) == 0 || errno == EINVAL || errno == EROFS; /* pipes, devices */
        int e = errno;
        if (close(fd) != 0 && ok) {
            ok = false;
            e = errno;
        }
        if (!ok && !t->log_error[0])
            snprintf(t->log_error, sizeof t->log_error, "cannot write to '%s': %s", t->cfg.log,
                     strerror(e));
    }
    if (!t->log_error[0])
        return STOKE_OK;
    return stoke_fail(STOKE_ERR_IO, "the log is incomplete: %s", t->log_error);
}

/* Numbers with a fixed count of decimals or 6 significant digits: cJSON would print up
 * to 17 digits, and the log keeps the shorter forms it always had. */
static void add_fixed(cJSON *o, const char *key, int decimals, double v)
{
    char b[64];
    snprintf(b, sizeof b, "%.*f", decimals, v);
    cJSON_AddRawToObject(o, key, b);
}

static void add_g6(cJSON *o, const char *key, double v)
{
    char b[64];
    snprintf(b, sizeof b, "%.6g", v);
    cJSON_AddRawToObject(o, key, b);
}

static void add_int(cJSON *o, const char *key, int64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%" PRId64, v);
    cJSON_AddRawToObject(o, key, b);
}

/* JSON has no NaN: absent values are null. */
static void add_num(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        add_g6(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* The fields every record after the first opens with: its type, the wall time and the
 * seconds since the loop started, and where the run is. */
static cJSON *record(const char *type, double now, double elapsed, int64_t epoch, int64_t step)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "type", type);
    /* to the microsecond: a window of 30 GPU steps lasts 24 ms, where milliseconds
     * made its rate a multiple of 4% (an H200's MLP read 160,000 samples/s twice) */
    add_fixed(o, "time", 6, now);
    add_fixed(o, "elapsed", 6, elapsed);
    add_int(o, "epoch", epoch);
    add_int(o, "step", step);
    return o;
}

/* Writes o as one line and frees it. */
static void write_record(stoke_trainer *t, cJSON *o)
{
    char *js = o ? stoke_json_print(o, false) : NULL;
    cJSON_Delete(o);
    if (!js)
        return;
    size_t n = strlen(js);
    char *line = malloc(n + 2);
    if (line) {
        memcpy(line, js, n);
        memcpy(line + n, "\n", 2);
        log_line(t, line);
    }
    free(line);
    free(js);
}

/* "acc", or "metric" for a model without one. */
static const char *metric_key(const stoke_trainer *t, const char *prefix, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s", prefix, t->metric_name[0] ? t->metric_name : "metric");
    return buf;
}

/* The log's first record of a run (and of each resumed part): what is trained and how,
 * and the clock "elapsed" counts from. */
void train_log_start(stoke_trainer *t, int64_t steps_per_epoch)
{
    if (t->log_fd < 0)
        return;
    const stoke_train_config *c = &t->cfg;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return;
    cJSON_AddStringToObject(o, "type", "start");
    cJSON_AddNumberToObject(o, "time", t->loop_start);
    cJSON_AddStringToObject(o, "model", stoke_model_file_describe(t->mf));
    if (c->hidden[0]) /* with --resume, the checkpoint's (resume_config) */
        cJSON_AddStringToObject(o, "hidden", c->hidden);
    cJSON_AddNumberToObject(o, "parameters", (double)stoke_graph_trainable_elems(t->graph));
    cJSON_AddStringToObject(o, "dataset", c->dataset);
    cJSON_AddNumberToObject(o, "train_samples", (double)t->info.count);
    cJSON_AddNumberToObject(o, "val_samples", (double)t->val_count);
    cJSON_AddNumberToObject(o, "batch", (double)c->batch_size);
    cJSON_AddNumberToObject(o, "accumulate", (double)c->accumulate);
    cJSON_AddNumberToObject(o, "epochs", (double)c->epochs);
    cJSON_AddNumberToObject(o, "steps_per_epoch", (double)steps_per_epoch);
    cJSON_AddNumberToObject(o, "max_steps", (double)c->max_steps);
    cJSON_AddStringToObject(o, "precision", stoke_precision_name(t->precision));
    char dev[16] = "cpu";
    if (t->device != STOKE_TUNE_CPU)
        snprintf(dev, sizeof dev, "cuda:%d", t->device);
    cJSON_AddStringToObject(o, "device", dev);
    if (t->device != STOKE_TUNE_CPU)
        cJSON_AddStringToObject(o, "device_name", stoke_model_device_name(t->model));
    cJSON_AddNumberToObject(o, "threads", t->threads);
    cJSON_AddNumberToObject(o, "workers", t->workers);
    if (train_dist_on(t)) { /* data parallel: the world, its hosts and the all-reduce */
        cJSON_AddNumberToObject(o, "world", train_world(t));
        cJSON_AddStringToObject(o, "transport", stoke_dist_transport(t->world));
        cJSON_AddNumberToObject(o, "effective_batch",
                                (double)train_world(t) * (double)c->batch_size *
                                    (double)c->accumulate);
        add_num(o, "allreduce_unhidden_s", t->dist.unhidden_s);
    }
    cJSON_AddStringToObject(o, "optimizer", c->optimizer);
    cJSON_AddNumberToObject(o, "lr", c->lr);
    cJSON_AddStringToObject(o, "schedule", c->schedule);
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, c->seed);
    cJSON_AddStringToObject(o, "seed", seed); /* a string, as in the checkpoint's config */
    cJSON_AddNumberToObject(o, "eval_every", (double)c->eval_every);
    if (c->target_accuracy > 0)
        cJSON_AddNumberToObject(o, "target_accuracy", c->target_accuracy);
    else
        cJSON_AddNullToObject(o, "target_accuracy");
    if (c->resume[0]) {
        cJSON_AddNumberToObject(o, "resumed_step", (double)t->step);
        cJSON_AddNumberToObject(o, "resumed_epoch", (double)t->epoch);
    }
    write_record(t, o);
}

/* Data parallel: the all-reduce's share and how much of it backward hid. */
static void add_dist(cJSON *o, const stoke_train_event *e)
{
    if (e->world <= 1)
        return;
    add_fixed(o, "allreduce_pct", 2, e->allreduce_pct);
    add_num(o, "allreduce_hidden_pct", e->allreduce_hidden_pct);
}

void train_log_step(stoke_trainer *t, const stoke_train_event *e, double now, double batch_loss,
                    bool applied)
{
    if (t->log_fd < 0)
        return;
    cJSON *o = record("step", now, e->run_elapsed_s, e->epoch, e->step);
    if (!o)
        return;
    add_int(o, "batch", e->batch);
    add_num(o, "loss", e->loss);
    add_num(o, "batch_loss", batch_loss);
    add_g6(o, "lr", e->lr);
    add_fixed(o, "samples_per_s", 1, e->samples_per_s);
    add_fixed(o, "data_wait_pct", 2, e->data_wait_pct);
    add_fixed(o, "input_pct", 2, e->input_pct);
    add_fixed(o, "forward_pct", 2, e->forward_pct);
    add_fixed(o, "backward_pct", 2, e->backward_pct);
    add_fixed(o, "optimizer_pct", 2, e->optimizer_pct);
    add_dist(o, e);
    cJSON_AddBoolToObject(o, "applied", applied);
    write_record(t, o);
}

void train_log_threads(stoke_trainer *t, const adapt_result *r, double now)
{
    if (t->log_fd < 0)
        return;
    cJSON *o = record("threads", now, now - t->loop_start, t->epoch, t->step);
    if (!o)
        return;
    add_int(o, "from", r->from);
    add_int(o, "tried", r->tried);
    add_int(o, "to", r->threads);
    cJSON_AddBoolToObject(o, "switched", r->action == ADAPT_KEEP);
    add_fixed(o, "samples_per_s_before", 1, r->rate_from);
    add_fixed(o, "samples_per_s_tried", 1, r->rate_to);
    add_num(o, "others_cpus", r->others);
    cJSON_AddStringToObject(o, "reason", r->reason);
    write_record(t, o);
}

void train_log_eval(stoke_trainer *t, const stoke_train_event *e, double now)
{
    if (t->log_fd < 0)
        return;
    cJSON *o = record("eval", now, e->run_elapsed_s, e->epoch, e->step);
    if (!o)
        return;
    char k[48];
    add_int(o, "batch", e->batch);
    add_num(o, "val_loss", e->val_loss);
    add_num(o, metric_key(t, "val_", k, sizeof k), e->val_metric);
    add_int(o, "val_samples", e->val_samples);
    add_fixed(o, "seconds", 3, e->elapsed_s);
    write_record(t, o);
}

/* The epoch's waits for batches (docs/train.md): the buckets' edges and counts (the
 * last counts the waits of at least the last edge), p50 and p95 interpolated within
 * their bucket, the exact max. */
static void add_wait_hist(cJSON *o, const stoke_wait_hist *h)
{
    cJSON *w = cJSON_AddObjectToObject(o, "wait_hist");
    cJSON *edges = w ? cJSON_AddArrayToObject(w, "edges_ms") : NULL;
    cJSON *counts = w ? cJSON_AddArrayToObject(w, "counts") : NULL;
    if (!counts)
        return;
    const double *e = stoke_wait_hist_edges();
    for (int i = 0; i < STOKE_WAIT_EDGES; i++) {
        cJSON_AddItemToArray(edges, cJSON_CreateNumber(e[i]));
        cJSON_AddItemToArray(counts, cJSON_CreateNumber((double)h->counts[i]));
    }
    add_int(w, "batches", h->batches);
    add_num(w, "p50_ms", stoke_wait_hist_quantile(h, 0.5));
    add_num(w, "p95_ms", stoke_wait_hist_quantile(h, 0.95));
    add_num(w, "max_ms", h->batches ? h->max_ms : NAN);
}

void train_log_epoch(stoke_trainer *t, const stoke_train_event *e, double now)
{
    if (t->log_fd < 0)
        return;
    cJSON *o = record("epoch", now, e->run_elapsed_s, e->epoch, e->step);
    if (!o)
        return;
    char k[48];
    add_num(o, "loss", e->loss);
    add_num(o, metric_key(t, "", k, sizeof k), e->metric);
    add_num(o, "val_loss", e->val_loss);
    add_num(o, metric_key(t, "val_", k, sizeof k), e->val_metric);
    add_int(o, "val_samples", e->val_samples);
    add_fixed(o, "seconds", 3, e->elapsed_s);
    add_fixed(o, "samples_per_s", 1, e->samples_per_s);
    add_fixed(o, "data_wait_pct", 2, e->data_wait_pct);
    add_num(o, "cpu_pct", e->cpu_pct);
    add_num(o, "mfu_pct", e->mfu_pct);
    add_num(o, "peak_flops", e->peak_flops > 0 ? e->peak_flops : NAN);
    if (e->peak_source && *e->peak_source)
        cJSON_AddStringToObject(o, "peak_source", e->peak_source);
    add_fixed(o, "input_pct", 2, e->input_pct);
    add_fixed(o, "forward_pct", 2, e->forward_pct);
    add_fixed(o, "backward_pct", 2, e->backward_pct);
    add_fixed(o, "optimizer_pct", 2, e->optimizer_pct);
    add_dist(o, e);
    add_wait_hist(o, &t->waits);
    cJSON *ranks = t->dist.nranks > 0 ? cJSON_AddArrayToObject(o, "ranks") : NULL;
    for (int r = 0; ranks && r < t->dist.nranks; r++) {
        const stoke_mon_rank *rk = &t->dist.ranks[r];
        cJSON *x = cJSON_CreateObject();
        if (!x)
            break;
        cJSON_AddNumberToObject(x, "rank", rk->rank);
        cJSON_AddStringToObject(x, "host", rk->host);
        add_int(x, "steps", rk->steps);
        add_fixed(x, "step_ms", 3, rk->step_s * 1e3);
        add_fixed(x, "input_wait_ms", 3, rk->input_wait_s * 1e3);
        add_fixed(x, "compute_ms", 3, rk->compute_s * 1e3);
        add_fixed(x, "allreduce_wait_ms", 3, rk->reduce_wait_s * 1e3);
        cJSON_AddItemToArray(ranks, x);
    }
    write_record(t, o);
}

void train_log_target(stoke_trainer *t, const stoke_train_event *e, double now)
{
    if (t->log_fd < 0)
        return;
    cJSON *o = record("target", now, e->run_elapsed_s, e->epoch, e->step);
    if (!o)
        return;
    add_int(o, "batch", e->batch);
    cJSON_AddBoolToObject(o, "epoch_end", e->batch >= e->batches);
    add_g6(o, "val_acc", e->val_metric);
    add_g6(o, "target", e->target);
    write_record(t, o);
}

/* A finding of the monitor's rules, when it is printed (once a run): the object
 * stoke_finding_json writes for bench --json and monitor --jsonl, after the record's
 * own fields. `epoch` is that of the epoch record just before it: the rules ran at
 * its end, over the run so far. */
void train_log_finding(stoke_trainer *t, const stoke_finding *f, int64_t epoch, double now)
{
    if (t->log_fd < 0)
        return;
    cJSON *o = record("finding", now, now - t->loop_start, epoch, t->step);
    cJSON *j = o ? stoke_finding_json(f) : NULL;
    if (!j) {
        cJSON_Delete(o);
        return;
    }
    while (j->child) { /* its fields, moved after the record's */
        cJSON *x = cJSON_DetachItemViaPointer(j, j->child);
        if (!cJSON_AddItemToObject(o, x->string, x)) /* copies the key first */
            cJSON_Delete(x);
    }
    cJSON_Delete(j);
    write_record(t, o);
}
