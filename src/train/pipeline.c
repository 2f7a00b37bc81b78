/* pipeline.c - the loaders that feed the models (training and validation, their device
 * copies ordered after the models' reads) and the monitor watching the training
 * loader: started, and stopped before the models are rebuilt. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "train/trainer.h"

/* --report: each sample as the monitor's JSON line, appended (the monitor is rebuilt
 * with the loaders; a line is one write, as `stoke monitor --jsonl` writes it). On the
 * sampler thread. */
static stoke_status monitor_jsonl_line(const stoke_mon_sample *s, void *ctx)
{
    const char *path = ctx;
    char *buf = malloc(32768);
    if (!buf)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    int fd;
    stoke_status st = stoke_mon_open_log(path, true, &fd);
    if (st == STOKE_OK) {
        size_t n = stoke_mon_format_json(s, buf, 32768);
        if (n)
            st = stoke_mon_write_line(fd, buf, n, path);
        close(fd);
    }
    free(buf);
    return st;
}

/* The loaders (none for the training set of a finished run), the monitor watching the
 * training loader, and the log. */
stoke_status train_start_pipeline(stoke_trainer *t, const size_t ring[2], size_t left)
{
    const stoke_train_config *c = &t->cfg;
    stoke_status s;
    stoke_loader_opts lo = {.sampler = {.batch_size = c->batch_size,
                                        .shuffle = true,
                                        .seed = c->seed,
                                        .rank = train_rank(t),
                                        .world_size = train_world(t)},
                            .start = t->start,
                            .transform = t->input.image ? &t->topts : NULL,
                            .workers = t->workers,
                            .prefetch = t->decision.prefetch,
                            .use_device = t->device != STOKE_TUNE_CPU,
                            .device = t->device,
                            .sample_delay_us = (int)c->loader_delay_us,
                            .memory_limit = left ? left + ring[0] * (size_t)c->batch_size : 0};
    if (t->start.epoch < c->epochs &&
        (s = stoke_loader_create(t->train_d, &lo, &t->loader)) != STOKE_OK)
        return s;
    if (t->val_d) {
        /* each rank evaluates its share, every sample once (the sums are reduced) */
        stoke_loader_opts vo = {.sampler = {.batch_size = train_val_batch(t),
                                            .rank = train_rank(t),
                                            .world_size = train_world(t),
                                            .exact = true},
                                .transform = t->input.image ? &t->val_topts : NULL,
                                .use_device = t->device != STOKE_TUNE_CPU,
                                .device = t->device,
                                .memory_limit =
                                    left ? left + ring[1] * (size_t)train_val_batch(t) : 0};
        if ((s = stoke_loader_create(t->val_d, &vo, &t->val_loader)) != STOKE_OK)
            return s;
    }
    /* the models copy a batch out of the loader's device slot without waiting: the
     * loader's next copy into that slot waits for the model's */
    if (t->loader && stoke_loader_on_device(t->loader))
        stoke_loader_set_consumer_event(t->loader, stoke_model_input_event(t->model));
    if (t->val_loader && stoke_loader_on_device(t->val_loader))
        stoke_loader_set_consumer_event(t->val_loader, stoke_model_input_event(t->eval_model));
    if (t->device != STOKE_TUNE_CPU && t->loader)
        train_info(t, "device copy: %s",
                   stoke_loader_on_device(t->loader)
                       ? "batches go to the GPU from pinned slots on the loader's stream; the "
                         "compute stream waits on each copy's event"
                       : stoke_loader_device_reason(t->loader));
    if (c->monitor && t->loader && train_rank(t) == 0) {
        stoke_monitor_config mc = {.interval_s = 0.5,
                                   .on_sample = c->monitor_jsonl ? monitor_jsonl_line : NULL,
                                   .ctx = (void *)c->monitor_jsonl,
                                   .pid = getpid(),
                                   .no_gpu = false,
                                   .pipeline_fn = stoke_loader_pipeline,
                                   .pipeline_ctx = t->loader};
        if (stoke_monitor_create(&mc, &t->monitor) != STOKE_OK)
            t->monitor = NULL; /* utilization is then reported as unknown */
    }
    return STOKE_OK;
}

/* The loaders and the monitor watching one, gone (rebuilt after them). */
void train_stop_pipeline(stoke_trainer *t)
{
    stoke_monitor_free(t->monitor);
    t->monitor = NULL;
    if (t->model)
        stoke_model_sync(t->model);
    if (t->eval_model)
        stoke_model_sync(t->eval_model);
    stoke_loader_destroy(t->loader);
    stoke_loader_destroy(t->val_loader);
    t->loader = t->val_loader = NULL;
}
