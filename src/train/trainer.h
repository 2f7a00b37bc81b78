/* trainer.h - the trainer's state, shared by the files that each do one of its jobs:
 *   setup.c    stoke_trainer_new: the order of the steps the files below do
 *   data.c     the datasets: opened, held in memory, their statistics
 *   build.c    the model for the data; decision.c the tuner's decision, applied;
 *   batch.c    the batch rule's facts and result; plan.c the models' plans;
 *   allocate.c the models on the device; pipeline.c the loaders and the monitor
 *   loop.c     stoke_trainer_run: step, epoch_end, evaluate
 *   dist.c     data parallel: the world, the agreed batch and stop, the reducer
 *   meta.c     the checkpoint's metadata (one table) and stoke_trainer_save
 *   resume.c   the checkpoint's config against the one given with --resume
 *   records.c  the JSON-lines log
 *   progress.c the events and their text */
#ifndef STOKE_TRAINER_H
#define STOKE_TRAINER_H

#include "stoke/dist.h"
#include "stoke/monitor.h"
#include "stoke/tune.h"
#include "train/adapt.h"
#include "train/train_impl.h"

/* The peak MFU is taken against (peak.c), and how it was obtained. */
typedef enum train_peak_source {
    TRAIN_PEAK_NONE = 0, /* unknown: no MFU */
    TRAIN_PEAK_MEASURED, /* the CPU's matmul rate, measured by this run */
    TRAIN_PEAK_CACHED,   /* the same, measured by an earlier run (the peak cache) */
    TRAIN_PEAK_CLOCK,    /* the CPU's clock x FLOPs per cycle: nothing could be measured */
    TRAIN_PEAK_SPEC,     /* a GPU's: SMs x clock x its architecture's rate */
    TRAIN_PEAK_RAISED,   /* an epoch ran faster than the peak: raised to its rate */
} train_peak_source;

typedef struct train_peak {
    double flops;
    train_peak_source source;
    bool busy;             /* measured while other processes took the cores: not cached */
    bool in_cache;         /* cache_path holds this peak (read from it, or written) */
    char label[64];        /* for the epoch line: "measured now", "cached from DATE", ... */
    char how[1400];        /* for the setup line: how it was obtained, in full */
    char cache_path[4200]; /* the CPU's peak cache file ("" for none) */
} train_peak;

/* A tuning trial (tune.c): a trainer that runs `warmup` steps, then measures at least
 * `min_steps` steps and `seconds`, and stops; no validation, monitor, log or
 * checkpoint. */
typedef struct train_trial {
    bool on;
    int64_t warmup, min_steps, max_steps;
    double seconds;
    /* measured: the window starts at the warm-up's end */
    bool marked, finite, done;
    /* the losses of the first warmup + min_steps steps (every trial runs them, on the
     * same batches): their mean is what the precisions are compared by */
    double loss_sum, loss_samples;
    double t0, t1;
    int64_t step0;
    stoke_loader_stats s0;
} train_trial;

struct stoke_trainer {
    stoke_train_config cfg;
    stoke_dist *world; /* cfg.world in a data parallel run (not a trial's); NULL: alone */
    struct train_dist {
        double unhidden_s;     /* one step's all-reduce, blocking, measured at the start */
        stoke_mon_rank *ranks; /* every rank's step, gathered at the last epoch's end */
        int nranks;
        /* under mpirun: its grace between a Ctrl-C's SIGTERM and SIGKILL, and what a
         * stop needs (the last epoch end's evaluation and checkpoint, s) */
        bool grace_known;
        double grace_s, eval_s, checkpoint_s;
    } dist;
    stoke_train_callback cb;
    void *cb_ctx;
    stoke_machine machine;
    stoke_recs recs;
    stoke_profiles profiles; /* the decision's starting points (stoke_profiles_load) */
    stoke_decision decision; /* what runs where and why (stoke_decide), applied */
    stoke_dataset *train_src, *train_d, *val_src, *val_d; /* *_d may be the in-memory copy */
    stoke_dataset_info info;
    int64_t val_count;
    train_input input;
    stoke_op ops[STOKE_TRAIN_MAX_OPS], val_ops[STOKE_TRAIN_MAX_OPS];
    stoke_transform_opts topts, val_topts;
    stoke_model_file *mf;
    stoke_graph *graph;
    stoke_model *model;
    stoke_model *eval_model; /* inference-only, val_batch_size samples, weights copied in */
    stoke_precision precision;
    int device;         /* the models' CUDA device, or STOKE_TUNE_CPU */
    bool recompute;     /* the training model checkpoints (cfg.recompute on, or auto
                           and it did not fit without) */
    double step_flops;  /* per sample of a training step, as backward computes it (MFU) */
    train_peak peak;    /* the device's peak at the precision (flops 0: unknown) */
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
    bool plan_refused; /* the last allocate_models' NOMEM was the CPU's plan check */
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
    /* this part of the epoch's waits for batches (the log's wait_hist; this rank's
     * own in data parallel) */
    stoke_wait_hist waits;
    stoke_train_totals totals; /* the run's, never reset (stoke_trainer_totals) */
    bool graphs_said;          /* the `CUDA graphs:` line went out */
    double loop_start;         /* wall time the training loop started: log "elapsed" */
    char warned[16][32];
    int nwarned;
    stoke_train_result result;
    train_trial trial;
    /* the compute threads during the run (adapt.c): on when the count was decided
     * (rule or measured) on the CPU with more than one; the load is read at most every
     * half second for the controller's hint */
    struct train_adapt {
        bool on;
        int max; /* the most threads tried: the available CPUs less the workers */
        adapt_state a;
        int64_t samples; /* totals.samples at the last step fed */
        stoke_cpu_snapshot snap;
        double snap_t, others;
    } adapt;
    /* settings left to measurement (tune.c): measured by trials or read from the
     * cache, applied to cfg before the decision, their provenance kept for it */
    struct train_tuned {
        bool batch, workers, prefetch, threads, precision; /* open */
        bool applied;                                      /* measured values are in cfg */
        stoke_source source; /* STOKE_SRC_MEASURED or STOKE_SRC_CACHED */
        char why_batch[620], why_workers[620], why_prefetch[620], why_threads[620],
            why_precision[620]; /* "measured: " and the search's reason */
        char pending[400];      /* a dry run without a cached measurement: why the rules decide */
    } tuned;
};

/* dist.c: the data parallel parts; each does nothing in a world of one (or none).
 * begin: the world, this rank's share of the CPUs, said (after the machine probe);
 * agree_batch: one batch over the ranks, the smallest fitted; attach: the reducer on the model, rank 0's weights everywhere, the
 * unhidden all-reduce measured; agree_steps: one accumulation and precision, the
 * effective batch said; set_sync: whether this backward reduces (the step's
 * last micro-batch); stop: a stop any rank asked for, agreed; eval and sums: sums
 * over the ranks; buffers: batch norm's statistics averaged; phases: the all-reduce
 * column of an event (pct: 100 / the seconds the event covers); gather: every rank's
 * step over `seconds` with `wait_s` waiting for input, into t->dist.ranks. */
bool train_dist_on(const stoke_trainer *t);
/* This rank's samples and batches an epoch: its share (all of them alone). */
int64_t train_epoch_samples(const stoke_trainer *t);
int64_t train_epoch_batches(const stoke_trainer *t);
int train_rank(const stoke_trainer *t);
int train_world(const stoke_trainer *t);
stoke_status train_dist_begin(stoke_trainer *t);
stoke_status train_dist_agree_batch(stoke_trainer *t);
stoke_status train_dist_agree_steps(stoke_trainer *t);
stoke_status train_dist_attach(stoke_trainer *t);
void train_dist_set_sync(stoke_trainer *t, bool last);
stoke_status train_dist_stop(stoke_trainer *t, bool *stop);
stoke_status train_dist_eval(stoke_trainer *t, train_eval *acc);
stoke_status train_dist_sums(stoke_trainer *t, double *loss, double *metric, int64_t *samples,
                             int64_t *since);
stoke_status train_dist_buffers(stoke_trainer *t);
/* The checkpoint of a data parallel run, every rank calling: the world's statistics
 * and sums, written by rank 0 (*wrote: this rank wrote it). */
stoke_status train_dist_save(stoke_trainer *t, const char *path, bool *wrote);
void train_dist_phases(stoke_trainer *t, stoke_train_event *e, double pct);
void train_dist_epoch_start(stoke_trainer *t);
stoke_status train_dist_gather(stoke_trainer *t, double seconds, double wait_s);

/* setup.c: stoke_trainer_new, as a tuning trial when trial is not NULL. */
stoke_status train_new(const stoke_train_config *cfg, stoke_train_callback cb, void *ctx,
                       const train_trial *trial, stoke_trainer **out);

/* setup.c: a setting given as auto that a dry run could not measure: its rule's
 * reason, prefixed with why it is not measured (t->tuned.pending). */
void train_tuned_pending(const stoke_trainer *t, stoke_why *w);

/* loop.c: the thread controller's start (at the loop's), each optimizer step's
 * report to it (switches said and logged), and time spent outside steps. */
void train_adapt_start(stoke_trainer *t);
void train_adapt_step(stoke_trainer *t, double now);
void train_adapt_pause(stoke_trainer *t);

/* records.c: a trial of another thread count that ended (kept or reverted). */
void train_log_threads(stoke_trainer *t, const adapt_result *r, double now);

/* loop.c: a trial's bookkeeping after each optimizer step: the window's start, the
 * losses' finiteness, and trial.done once it has measured enough. */
void train_trial_step(stoke_trainer *t);

/* tune.c: settings the run leaves to measurement (`auto` given), taken from the
 * tuning cache or measured by trials now (their lines as INFO events), applied to
 * t->cfg and recorded in t->tuned. Nothing to do when none is left open. */
stoke_status train_tune_settings(stoke_trainer *t);

/* tune.c: whether precision is left to measurement: auto given (a checkpoint's auto
 * is not: a resumed run keeps its precision), or auto left unset with `all` (stoke
 * tune) or `unsure` (the rule is unsure: stoke_decision.precision_unsure). */
bool train_precision_open(const stoke_train_config *c, bool all, bool unsure);

/* tune.c: the cache file of `key` among the `kind` entries: <cache>/<kind>/<hash of
 * key>.<ext> under $STOKE_CACHE_DIR, else $XDG_CACHE_HOME/stoke, else ~/.cache/stoke
 * ("" if none); and mkdir -p of a path's directory. */
void train_cache_file(const char *kind, const char *key, const char *ext, char *path, size_t size);
bool train_make_dirs(const char *path);

/* tune.c: a tuning cache entry's bytes as read from `path` (len of them, anything): true
 * with its five settings when it is text of at most 64 KiB whose "# key:" line is
 * `key` and whose settings parse as a --config file and are measured values (a batch
 * of at least 1, workers not auto, ...). False with why otherwise: "the entry is
 * unreadable: PATH: <why>" (not text, too large, no key line), "PATH is for another
 * machine, model or dataset", the config parser's message, "PATH has no <setting>",
 * "PATH holds a setting that is not a measured value". Pure: whether the run may take
 * it (measured or given, equal to the run's, within bounds) is the caller's; fuzzed by
 * tests/fuzz/fuzz_tune_cache.c. */
typedef struct train_tune_entry {
    stoke_tune_point best;
    char precision[8];       /* as the entry writes it */
    char measured[120];      /* " batch_size workers ... ": the settings measured there */
    char why_precision[600]; /* the trials' reason for a precision measured there ("#
                                why precision:"), "" when the entry has none */
} train_tune_entry;
bool train_tune_cache_parse(const char *path, const char *bytes, size_t len, const char *key,
                            train_tune_entry *e, char *why, size_t wn);

/* peak.c: the CPU's peak cache. The key names what the rate depends on (the CPU and
 * the features in use, threads, precision); its file is train_cache_file("peak", key,
 * "txt"). read: true with the cached FLOP/s and its date, or
 * false with why ("not measured before", not a regular file, not a peak cache file,
 * for another key); never blocks on a FIFO. write: atomically (a temporary file
 * renamed), `what` as a comment; a status with the message on failure. */
void train_peak_key(const stoke_cpu_info *cpu, stoke_precision p, int threads, char *key,
                    size_t size);
bool train_peak_cache_read(const char *path, const char *key, double *flops, char *when,
                           size_t when_size, char *why, size_t why_size);
stoke_status train_peak_cache_write(const char *path, const char *key, double flops,
                                    const char *what);

/* peak.c: the CPU's peak at precision p (fp32, or bf16 where native) and `threads`:
 * the cache's, else measured now (if `measure`) and cached, else computed from the
 * clock (stoke_cpu_peak_flops), else unknown (flops 0). Can't fail. */
void train_cpu_peak(const stoke_cpu_info *cpu, stoke_precision p, int threads, bool measure,
                    train_peak *out);

/* peak.c: an epoch's MFU against t->peak, never above 100%: an epoch whose FLOP/s
 * exceed the peak shows the peak was low, so it is raised to that rate (and a cached
 * one removed, so the next run measures again). NaN when the peak is unknown. */
double train_peak_mfu(stoke_trainer *t, double samples_per_s, int64_t epoch);

/* progress.c: an event to the callback; an info line. */
void train_emit(stoke_trainer *t, const stoke_train_event *e);
void train_info(stoke_trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* data.c: opens the training and validation sets (held in memory when they fit),
 * printing the dataset and validation lines. */
stoke_status train_open_data(stoke_trainer *t);
/* The actor-critic's action count (the largest first target value + 1) into *actions. */
stoke_status train_count_actions(stoke_dataset *d, const char *path, int64_t *actions);
/* Host bytes per sample of a loader's ring over d with these settings. */
size_t train_ring_per_sample(const stoke_trainer *t, stoke_dataset *d, int workers, int prefetch);

/* batch.c: batch_size auto and effective_batch, decided (cfg, decision) and said;
 * after the decision (device, loader) and before the optimizer's schedule. */
stoke_status train_decide_batch(stoke_trainer *t);
/* The largest batch whose exact plan (stoke_trainer_plan: the training model, the
 * loader's ring, the validation model and the data held beside it) fits `safety` x
 * the device's free memory (the GPU's, the host's available memory, or
 * --memory-budget), rounded down to a power of two when `pow2`, at most the training
 * samples: *cap, with the numbers in `why` (the facts measured here, the rule
 * stoke_tune_batch_fit's). STOKE_ERR_NOMEM when not even batch 1 fits. The measured
 * search (tune.c) calls it too. */
stoke_status train_fit_batch(stoke_trainer *t, double safety, bool pow2, int64_t *cap, char *why,
                             size_t n);
/* decision.c: the tuner's decision for the run (stoke_decide on the config's request
 * and the data's facts; with `cpu_because`, the CPU for that reason), applied to t
 * (precision, device, workers, compute threads and their adaptation) and said. */
stoke_status train_apply_decision(stoke_trainer *t, const char *cpu_because);

/* peak.c: what MFU is measured against (a step's FLOPs per sample, the device's peak at
 * the run's precision), said. */
void train_setup_mfu(stoke_trainer *t);

/* build.c: the model for the data (meta: a resumed checkpoint's, else NULL), its
 * input's normalization and transforms, the evaluation settings it allows, the
 * optimizer, and the learning-rate schedule at the batch decided (the model line). */
stoke_status train_setup_model(stoke_trainer *t, const train_meta *meta);
stoke_status train_setup_input(stoke_trainer *t, const train_meta *meta);
stoke_status train_check_evaluation(const stoke_trainer *t);
void train_setup_optimizer(stoke_trainer *t);
void train_setup_schedule(stoke_trainer *t);

/* plan.c: the validation batch as run (at most the validation samples); the options of
 * the training (`training`) or the evaluation model; a model's plan, naming the largest
 * batch its kernels take when one is refused; the recompute line; recompute auto still
 * off; the bytes both models' plans and the device slots take at the current batches;
 * the GPU's free memory (cudaMemGetInfo). */
int64_t train_val_batch(const stoke_trainer *t);
stoke_model_opts train_model_opts(const stoke_trainer *t, bool training);
stoke_status train_plan_model(const stoke_trainer *t, const stoke_model_opts *o,
                              stoke_mem_plan *plan);
void train_report_recompute(stoke_trainer *t, const char *why);
bool train_recompute_pending(const stoke_trainer *t);
stoke_status train_planned_bytes(const stoke_trainer *t, size_t *bytes);
stoke_status train_gpu_free_bytes(int device, size_t *free_bytes);

/* allocate.c: the models on the device decided, halved until they fit (a GPU the CUDA
 * backend cannot run on, under device auto: the CPU, decided again); ring[]: the
 * loaders' bytes per sample; *left: the memory that remains for the rings (0:
 * unknown). */
stoke_status train_allocate(stoke_trainer *t, size_t ring[2], size_t *left);

/* pipeline.c: the loaders (none for the training set of a finished run), the monitor
 * watching the training loader; and both stopped (the models synchronized first). */
stoke_status train_start_pipeline(stoke_trainer *t, const size_t ring[2], size_t left);
void train_stop_pipeline(stoke_trainer *t);

/* allocate.c: after an allocation failure within training (err: its message): the
 * models, their state (weights, optimizer state, step count, loss scale) and the
 * loaders rebuilt at half the micro-batch and twice the accumulation, the loader
 * starting at `from`. STOKE_ERR_NOMEM when the batch is 1 already. */
stoke_status train_halve_batch(stoke_trainer *t, stoke_sampler_state from, const char *err);

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
void train_log_finding(stoke_trainer *t, const stoke_finding *f, int64_t epoch, double now);
stoke_status train_log_finish(stoke_trainer *t);

#endif
