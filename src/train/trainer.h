/* trainer.h - the trainer's state, shared by the files that each do one of its jobs:
 *   setup.c    stoke_trainer_new: checkpoint, machine, data, model, decisions, loaders
 *   data.c     the datasets: opened, held in memory, their statistics
 *   loop.c     stoke_trainer_run: step, epoch_end, evaluate
 *   meta.c     the checkpoint's metadata (one table) and stoke_trainer_save
 *   resume.c   the checkpoint's config against the one given with --resume
 *   records.c  the JSON-lines log
 *   progress.c the events and their text */
#ifndef STOKE_TRAINER_H
#define STOKE_TRAINER_H

#include "stoke/monitor.h"
#include "stoke/tune.h"
#include "train/train_impl.h"

struct stoke_trainer {
    stoke_train_config cfg;
    stoke_train_callback cb;
    void *cb_ctx;
    stoke_machine machine;
    stoke_recs recs;
    stoke_decision decision; /* what runs where and why (stoke_decide), applied */
    stoke_dataset *train_src, *train_d, *val_src, *val_d; /* *_d may be the in-memory copy */
    stoke_dataset_info info;
    int64_t val_count;
    train_input input;
    stoke_op ops[4], val_ops[4];
    stoke_transform_opts topts, val_topts;
    stoke_model_file *mf;
    stoke_graph *graph;
    stoke_model *model;
    stoke_model *eval_model; /* inference-only, val_batch_size samples, weights copied in */
    stoke_precision precision;
    int device;         /* the models' CUDA device, or STOKE_TUNE_CPU */
    bool recompute;     /* the training model checkpoints (cfg.recompute on, or auto
                           and it did not fit without) */
    double step_flops;  /* per sample of a training step: 3 x the forward's (MFU) */
    double peak_flops;  /* the device's peak at the precision; 0 if unknown */
    void *target_stage; /* a device model's batch of converted targets, on the host; NULL
                           for the CPU's, converted in place (train_targets.stage) */
    stoke_optim optim;
    stoke_lr_schedule sched;
    stoke_tensor x, y, metric;
    const char *metric_name;
    bool classes;
    int64_t nclasses;
    int64_t target_elems;
    stoke_loader *loader, *val_loader;
    stoke_sampler_state start;
    stoke_monitor *monitor;
    int workers, threads;
    int log_fd;
    char log_error[600]; /* the first record that could not be written */
    double held_bytes;   /* samples held in memory (training and validation) */
    /* position */
    int64_t epoch, step;
    /* this epoch's running sums (saved with a mid-epoch checkpoint) */
    double ep_loss, ep_metric;
    int64_t ep_samples, ep_batches;
    double ep_elapsed_before; /* seconds of this epoch before a resume */
    /* this part of the epoch's seconds in each phase of a step (stoke_phase), on the
     * clock of the model's device */
    double ph[STOKE_PHASE_COUNT];
    stoke_train_totals totals; /* the run's, never reset (stoke_trainer_totals) */
    bool graphs_said;          /* the `CUDA graphs:` line went out */
    double loop_start;         /* wall time the training loop started: log "elapsed" */
    char warned[16][32];
    int nwarned;
    stoke_train_result result;
};

/* progress.c: an event to the callback; an info line. */
void train_emit(stoke_trainer *t, const stoke_train_event *e);
void train_info(stoke_trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* data.c: opens the training and validation sets (held in memory when they fit),
 * printing the dataset and validation lines. */
stoke_status train_open_data(stoke_trainer *t);
/* Per-channel mean and std of the training inputs for the normalize transform. */
stoke_status train_input_stats(stoke_dataset *d, train_input *ti);
/* The actor-critic's action count (the largest first target value + 1) into *actions. */
stoke_status train_count_actions(stoke_dataset *d, const char *path, int64_t *actions);
/* Host bytes per sample of a loader's ring over d with these settings. */
size_t train_ring_per_sample(const stoke_trainer *t, stoke_dataset *d, int workers, int prefetch);

/* meta.c: the trainer's position and running sums from a checkpoint's metadata (m,
 * read by train_meta_read), and its weights and optimizer state from ck. */
stoke_status train_restore(stoke_trainer *t, const stoke_ckpt *ck, const train_meta *m);

/* resume.c: settings not given come from the checkpoint's config; those given are
 * checked against it. */
stoke_status train_resume_config(stoke_trainer *t, const stoke_ckpt *ck);

/* records.c: the JSON-lines log. A record that cannot be written stops the log with
 * a warning (the training goes on); train_log_finish returns that error. */
void train_log_start(stoke_trainer *t, int64_t steps_per_epoch);
void train_log_step(stoke_trainer *t, const stoke_train_event *e, double now, double batch_loss,
                    bool applied);
void train_log_eval(stoke_trainer *t, const stoke_train_event *e, double now);
void train_log_epoch(stoke_trainer *t, const stoke_train_event *e, double now);
void train_log_target(stoke_trainer *t, const stoke_train_event *e, double now);
stoke_status train_log_finish(stoke_trainer *t);

#endif
