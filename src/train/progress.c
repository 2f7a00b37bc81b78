/* progress.c - what the trainer tells its caller: events to the callback, and the
 * text a terminal shows for each (stoke_train_format_*). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "train/trainer.h"

void train_emit(stoke_trainer *t, const stoke_train_event *e)
{
    if (t->cb && train_rank(t) == 0) /* rank 0 speaks for the world */
        t->cb(e, t->cb_ctx);
}

void train_info(stoke_trainer *t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    stoke_train_event e = {.kind = STOKE_EV_INFO, .text = buf};
    train_emit(t, &e);
}

static size_t metric_text(const stoke_train_event *e, double v, const char *prefix, char *buf,
                          size_t size)
{
    if (!isfinite(v) || !e->metric_name || !e->metric_name[0])
        return (size_t)snprintf(buf, size, "%s", "");
    if (!strcmp(e->metric_name, "acc"))
        return (size_t)snprintf(buf, size, " %sacc %.2f%%", prefix, 100 * v);
    return (size_t)snprintf(buf, size, " %s%s %.4g", prefix, e->metric_name, v);
}

size_t stoke_train_format_progress(const stoke_train_event *e, char *buf, size_t size)
{
    char m[48], cpu[48] = "", gpu[32] = "", ph[80] = "";
    metric_text(e, e->metric, "", m, sizeof m);
    if (isfinite(e->cpu_pct))
        snprintf(cpu, sizeof cpu, " | CPU %.0f%%", e->cpu_pct);
    if (e->threads > 0) /* the run changed the count: said beside the CPU it gets */
        snprintf(cpu + strlen(cpu), sizeof cpu - strlen(cpu), " | threads %d", e->threads);
    if (isfinite(e->gpu_pct))
        snprintf(gpu, sizeof gpu, " | GPU %.0f%%", e->gpu_pct);
    if (e->forward_pct > 0 || e->backward_pct > 0)
        snprintf(ph, sizeof ph, " | fwd %.0f%% bwd %.0f%% opt %.0f%%", e->forward_pct,
                 e->backward_pct, e->optimizer_pct);
    if (e->world > 1 && isfinite(e->allreduce_pct))
        snprintf(ph + strlen(ph), sizeof ph - strlen(ph), " ar %.0f%%", e->allreduce_pct);
    int n = snprintf(
        buf, size,
        "epoch %" PRId64 "/%" PRId64 " %3.0f%% %" PRId64 "/%" PRId64
        " | loss %.4f%s | %.0f samples/s | data wait %.1f%%%s%s%s | lr %.3g | eta %.0fs",
        e->epoch + 1, e->epochs, e->batches ? 100.0 * (double)e->batch / (double)e->batches : 0.0,
        e->batch, e->batches, e->loss, m, e->samples_per_s, e->data_wait_pct, ph, cpu, gpu, e->lr,
        e->eta_s);
    return n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;
}

size_t stoke_train_format_epoch(const stoke_train_event *e, char *buf, size_t size)
{
    char m[48], vm[48], val[96] = "", cpu[48] = "", mfu[160] = "";
    metric_text(e, e->metric, "", m, sizeof m);
    metric_text(e, e->val_metric, "val ", vm, sizeof vm);
    if (isfinite(e->val_loss))
        snprintf(val, sizeof val, " | val loss %.4f%s", e->val_loss, vm);
    if (isfinite(e->cpu_pct))
        snprintf(cpu, sizeof cpu, ", CPU %.0f%%", e->cpu_pct);
    if (e->threads > 0)
        snprintf(cpu + strlen(cpu), sizeof cpu - strlen(cpu), ", threads %d", e->threads);
    if (isfinite(e->mfu_pct)) {
        char f[32];
        snprintf(mfu, sizeof mfu, ", MFU %.1f%% of %s (%s)", e->mfu_pct,
                 stoke_format_flops(e->peak_flops, f, sizeof f),
                 e->peak_source && *e->peak_source ? e->peak_source : "peak");
    }
    char phases[220] = "";
    if (e->forward_pct > 0 || e->backward_pct > 0)
        snprintf(phases, sizeof phases,
                 " | step: input %.1f%%, forward %.1f%%, backward %.1f%%, optimizer %.1f%%",
                 e->input_pct, e->forward_pct, e->backward_pct, e->optimizer_pct);
    if (e->world > 1 && isfinite(e->allreduce_pct)) {
        char hid[48] = "";
        if (isfinite(e->allreduce_hidden_pct))
            snprintf(hid, sizeof hid, ", %.0f%% of it hidden behind backward",
                     e->allreduce_hidden_pct);
        snprintf(phases + strlen(phases), sizeof phases - strlen(phases),
                 ", all-reduce %.1f%%%s (%d ranks)", e->allreduce_pct, hid, e->world);
    }
    int n =
        snprintf(buf, size,
                 "epoch %" PRId64 "/%" PRId64 " done in %.1fs | loss %.4f%s%s | %.0f samples/s, "
                 "data wait %.1f%%%s%s%s",
                 e->epoch + 1, e->epochs, e->elapsed_s, e->loss, m, val, e->samples_per_s,
                 e->data_wait_pct, cpu, mfu, phases);
    return n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;
}

/* "epoch 2/5, 41%" or "epoch 2/5, end". */
static void position_text(const stoke_train_event *e, char *buf, size_t size)
{
    if (e->batches > 0 && e->batch < e->batches)
        snprintf(buf, size, "epoch %" PRId64 "/%" PRId64 ", %.0f%%", e->epoch + 1, e->epochs,
                 100.0 * (double)e->batch / (double)e->batches);
    else
        snprintf(buf, size, "epoch %" PRId64 "/%" PRId64 ", end", e->epoch + 1, e->epochs);
}

size_t stoke_train_format_eval(const stoke_train_event *e, char *buf, size_t size)
{
    char pos[64], vm[48];
    position_text(e, pos, sizeof pos);
    metric_text(e, e->val_metric, "val ", vm, sizeof vm);
    int n = snprintf(buf, size, "eval at step %" PRId64 " (%s) | val loss %.4f%s | %.1fs, at %.1fs",
                     e->step, pos, e->val_loss, vm, e->elapsed_s, e->run_elapsed_s);
    return n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;
}

size_t stoke_train_format_target(const stoke_train_event *e, char *buf, size_t size)
{
    char pos[64];
    position_text(e, pos, sizeof pos);
    int n = snprintf(buf, size,
                     "target reached: val acc %.2f%% >= %.2f%% at step %" PRId64
                     " (%s), %.1fs after the start",
                     100 * e->val_metric, 100 * e->target, e->step, pos, e->run_elapsed_s);
    return n < 0 ? 0 : (size_t)n >= size ? size - 1 : (size_t)n;
}
