/* setup.c - stoke_trainer_new: the order of setting up a run (the checkpoint to resume,
 * the machine, the data, the model, the decision, the batch, then the models, the
 * loaders and the log: each step in its own file) and the trainer's accessors and end.
 * The loop is loop.c. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tmpfile.h"
#include "train/trainer.h"

/* --resume: the checkpoint opened and its metadata read; the run's settings completed
 * from its config. */
static stoke_status open_resume(stoke_trainer *t, stoke_ckpt **ck, train_meta *meta)
{
    const char *path = t->cfg.resume;
    stoke_status s = stoke_ckpt_open(path, ck);
    if (s == STOKE_OK)
        s = train_meta_read(*ck, meta);
    if (s == STOKE_OK && strcmp(meta->format, TRAIN_CKPT_FORMAT))
        s = stoke_fail(STOKE_ERR_FORMAT, "%s: not a stoke training checkpoint", path);
    if (s == STOKE_OK)
        s = train_resume_config(t, *ck);
    return s;
}

/* How long the start's look at other processes' CPU use takes, seconds. */
#define CPU_LOAD_SAMPLE_S 0.2

/* Everything up to the model line (all a --dry-run does). */
static stoke_status prepare(stoke_trainer *t, const train_meta *meta)
{
    stoke_status s = stoke_machine_probe(&t->machine, NULL);
    if (s == STOKE_OK)
        s = train_dist_begin(t); /* this rank's share of the CPUs, before any rule uses them */
    if (s != STOKE_OK)
        return s;
    /* What other processes take, once, for the compute threads' rule (a dry run too, so
     * `config show` says what a run would decide); threads given need no sample. A
     * failed sample leaves the load unknown and the rule on the available CPUs alone. */
    if (t->cfg.threads <= 0)
        (void)stoke_cpu_load_sample(CPU_LOAD_SAMPLE_S, &t->machine.load);
    stoke_recommend(&t->machine, &t->recs);
    if ((s = stoke_profiles_load(&t->profiles)) != STOKE_OK ||
        (s = train_open_data(t)) != STOKE_OK || (s = train_setup_input(t, meta)) != STOKE_OK ||
        (s = train_setup_model(t, meta)) != STOKE_OK ||
        (s = train_check_evaluation(t)) != STOKE_OK ||
        (s = train_apply_decision(t, NULL)) != STOKE_OK)
        return s;
    train_setup_optimizer(t);
    if ((s = train_decide_batch(t)) != STOKE_OK || (s = train_dist_agree_steps(t)) != STOKE_OK)
        return s;
    train_setup_mfu(t);
    train_setup_schedule(t);
    t->recompute = strcmp(t->cfg.recompute, "on") == 0;
    if (t->recompute)
        train_report_recompute(
            t, stoke_cfg_source_name(stoke_train_config_source(&t->cfg, "recompute")));
    return STOKE_OK;
}

/* The rest: memory, models, the checkpoint's state, loaders, monitor and log. */
static stoke_status start(stoke_trainer *t, const stoke_ckpt *ck, const train_meta *meta)
{
    /* The checkpoint's directory before any step: its first write comes at the end of
     * an epoch, and a missing one found then costs the epoch. */
    if (t->cfg.checkpoint[0] && stoke_tmpfile_check(t->cfg.checkpoint) != STOKE_OK)
        return train_wrap_error(STOKE_ERR_IO, "--checkpoint");
    size_t ring[2], left;
    stoke_status s = train_allocate(t, ring, &left);
    if (s != STOKE_OK)
        return s;
    if (ck) {
        /* the optimizer, like the model and seed, was checked by train_resume_config */
        if ((s = train_restore(t, ck, meta)) != STOKE_OK)
            return s;
        train_info(t, "resumed from %s: epoch %" PRId64 ", sample %" PRId64 " of it, step %" PRId64,
                   t->cfg.resume, t->start.epoch + 1, t->start.index, t->step);
    }
    if ((s = train_dist_attach(t)) != STOKE_OK)
        return s;
    t->epoch = t->start.epoch;
    s = train_start_pipeline(t, ring, left);
    /* a loader's ring that does not fit: the models at half the batch leave it room
     * (not in a data parallel run: every rank would have to halve together) */
    while (s == STOKE_ERR_NOMEM && t->cfg.batch_size > 1 && !train_dist_on(t)) {
        char why[300];
        snprintf(why, sizeof why, "%s", stoke_last_error());
        s = train_halve_batch(t, t->start, why);
    }
    if (s == STOKE_OK && t->cfg.log[0] && train_rank(t) == 0) /* rank 0 writes the log */
        s = stoke_mon_open_log(t->cfg.log, t->cfg.resume[0] != 0, &t->log_fd);
    return s;
}

stoke_status stoke_trainer_new(const stoke_train_config *cfg, stoke_train_callback cb, void *ctx,
                               stoke_trainer **out)
{
    return train_new(cfg, cb, ctx, NULL, out);
}

stoke_status train_new(const stoke_train_config *cfg, stoke_train_callback cb, void *ctx,
                       const train_trial *trial, stoke_trainer **out)
{
    *out = NULL;
    stoke_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    t->cfg = *cfg;
    t->cb = cb;
    t->cb_ctx = ctx;
    t->log_fd = -1;
    t->result.val_loss = t->result.val_metric = t->result.best_val_metric = NAN;
    stoke_ckpt *ck = NULL;
    train_meta meta;
    stoke_status s = STOKE_OK;
    if (trial)
        t->trial = *trial;
    if (cfg->resume[0])
        s = open_resume(t, &ck, &meta);
    if (s == STOKE_OK && !trial)
        s = train_tune_settings(t);
    if (s == STOKE_OK)
        s = prepare(t, ck ? &meta : NULL);
    if (s == STOKE_OK && !t->cfg.dry_run)
        s = start(t, ck, &meta);
    stoke_ckpt_close(ck);
    if (s != STOKE_OK) {
        stoke_trainer_free(t);
        return s;
    }
    *out = t;
    return STOKE_OK;
}

void stoke_trainer_result(const stoke_trainer *t, stoke_train_result *r)
{
    *r = t->result;
    r->metric_name = t->metric_name ? t->metric_name : "";
}

stoke_model *stoke_trainer_model(stoke_trainer *t) { return t->model; }

struct stoke_monitor *stoke_trainer_monitor(stoke_trainer *t) { return t->monitor; }

const stoke_train_config *stoke_trainer_config(const stoke_trainer *t) { return &t->cfg; }

const stoke_decision *stoke_trainer_decision(const stoke_trainer *t) { return &t->decision; }

void stoke_trainer_free(stoke_trainer *t)
{
    if (!t)
        return;
    stoke_monitor_free(t->monitor);
    if (t->model) /* its queued copies read the loaders' device memory */
        stoke_model_sync(t->model);
    if (t->eval_model)
        stoke_model_sync(t->eval_model);
    stoke_loader_destroy(t->loader);
    stoke_loader_destroy(t->val_loader);
    stoke_model_free(t->model);
    stoke_model_free(t->eval_model);
    free(t->target_stage);
    stoke_graph_free(t->graph);
    free(t->dist.ranks);
    stoke_model_file_free(t->mf);
    if (t->train_d != t->train_src)
        stoke_dataset_close(t->train_d);
    stoke_dataset_close(t->train_src);
    if (t->val_d != t->val_src)
        stoke_dataset_close(t->val_d);
    stoke_dataset_close(t->val_src);
    if (t->log_fd >= 0)
        close(t->log_fd);
    free(t);
}
