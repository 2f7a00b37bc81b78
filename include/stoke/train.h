/* train.h - checkpoints (safetensors), YAML model files, and the training loop that
 * ties the loader, the model, the optimizer and the monitor together. */
#ifndef STOKE_TRAIN_H
#define STOKE_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"
#include "stoke/data.h"
#include "stoke/nn.h"
#include "stoke/tune.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Checkpoints: safetensors files (checkpoint.c, docs/checkpoint.md) ----------
 * The layout is Hugging Face's safetensors: an 8-byte little-endian header length N,
 * N bytes of JSON mapping each tensor name to {"dtype", "shape", "data_offsets"}
 * (offsets relative to the data that follows the header) plus "__metadata__", a
 * string -> string object, then the raw little-endian tensor bytes. */

/* One named tensor. Writers fill every field but nbytes (computed); readers get
 * pointers into the opened checkpoint (valid until stoke_ckpt_close). */
typedef struct stoke_ckpt_tensor {
    const char *name;
    stoke_dtype dtype; /* any stoke dtype; safetensors names F32, BF16, I64, ... */
    int ndim;          /* 0..STOKE_MAX_DIMS (0 is a scalar) */
    int64_t shape[STOKE_MAX_DIMS];
    const void *data; /* elems x dtype size bytes */
    size_t nbytes;
} stoke_ckpt_tensor;

typedef struct stoke_ckpt_kv {
    const char *key;
    const char *value;
} stoke_ckpt_kv;

/* Writes the tensors (in the given order) and the metadata to `path` atomically: into
 * ".<name>.stoke-tmp-XXXXXX" in the same directory, fsync, rename over `path`, fsync of
 * the directory. A crash at any point leaves either the previous file or the new one
 * under `path`. The temporary file is removed on every failure and when SIGINT,
 * SIGTERM, SIGHUP or SIGXFSZ ends the process mid-write (only a SIGKILL or a crash
 * leaves it). Names must be unique and non-empty, metadata keys unique and not
 * "__metadata__" (STOKE_ERR_ARG naming the tensor or key); write failures, a full disk
 * or the file-size limit (with SIGXFSZ ignored, as `stoke` runs), are STOKE_ERR_IO
 * naming the file and the cause; a `path` that is not a regular file is refused. */
stoke_status stoke_ckpt_write(const char *path, const stoke_ckpt_tensor *tensors, size_t ntensors,
                              const stoke_ckpt_kv *meta, size_t nmeta);

typedef struct stoke_ckpt stoke_ckpt;

/* Reads the whole file at `path` and checks all of it before returning: the header
 * length within the file (and at most 100 MB), valid JSON, every entry's dtype, shape
 * and data_offsets, sizes equal to elems x dtype size, no overlaps and no holes (the
 * tensors tile the data exactly), metadata values strings. Errors (STOKE_ERR_FORMAT)
 * name the file, the tensor or key, and the file offset; STOKE_ERR_NOTFOUND / IO if it
 * cannot be read or is not a regular file (a FIFO is refused, never waited on). On
 * success close with stoke_ckpt_close. */
stoke_status stoke_ckpt_open(const char *path, stoke_ckpt **out);

/* The same checks over a file already in memory (`size` bytes, copied); `name` is what
 * the messages call it. For fuzzing and for tests. */
stoke_status stoke_ckpt_open_memory(const void *data, size_t size, const char *name,
                                    stoke_ckpt **out);

size_t stoke_ckpt_count(const stoke_ckpt *c);
/* Tensors in file (offset) order. i < count. */
const stoke_ckpt_tensor *stoke_ckpt_tensor_at(const stoke_ckpt *c, size_t i);
/* The tensor called `name`, or NULL. */
const stoke_ckpt_tensor *stoke_ckpt_find(const stoke_ckpt *c, const char *name);
/* The metadata value of `key`, or NULL. */
const char *stoke_ckpt_meta(const stoke_ckpt *c, const char *key);
size_t stoke_ckpt_meta_count(const stoke_ckpt *c);
const stoke_ckpt_kv *stoke_ckpt_meta_at(const stoke_ckpt *c, size_t i);
/* The file name given to open. */
const char *stoke_ckpt_path(const stoke_ckpt *c);

void stoke_ckpt_close(stoke_ckpt *c); /* NULL is fine */

/* safetensors' dtype names ("F32", "BF16", "I64", "U8", ...) <-> stoke dtypes.
 * stoke_ckpt_dtype_parse returns false for a name it does not know. */
const char *stoke_ckpt_dtype_name(stoke_dtype t);
bool stoke_ckpt_dtype_parse(const char *name, stoke_dtype *out);

/* ---- Model files (model_file.c, schema in docs/train.md) --------------------------
 * A YAML document naming a preset with its options ("model: cnn", "model: mlp" with
 * "hidden: [512, 512]", ...) or listing layers in order ("layers:" a sequence of
 * {type: conv2d, out: 32, kernel: 3, padding: 1}, ..., with {type: residual, layers:
 * [...]} blocks), plus the loss. A preset name alone ("cnn") is the same as the
 * document "model: cnn". */

typedef struct stoke_model_file stoke_model_file;

/* Parses and checks a model document of `len` bytes; `name` is what the messages call
 * it. Errors (STOKE_ERR_FORMAT) name the file, line and column (1-based) and the field,
 * e.g. "m.yaml:4:14: layers[1].kernel: expected a positive integer, got 'x'". Refused
 * besides the schema's errors (docs/train.md, YAML rules): a key given twice in a
 * mapping, nesting past 256 levels or 64 residual blocks, aliases, tags, a second
 * document. On success free with stoke_model_file_free. */
stoke_status stoke_model_file_parse(const char *text, size_t len, const char *name,
                                    stoke_model_file **out);

/* `spec` is a preset name (mlp, cnn, resnet, transformer, actor-critic) or the path of
 * a YAML model file. STOKE_ERR_NOTFOUND names a spec that is neither. */
stoke_status stoke_model_file_load(const char *spec, stoke_model_file **out);

/* The document's text (saved in checkpoints so eval and predict rebuild the model),
 * and a short description ("cnn", "layers (7)"). Valid until free. */
const char *stoke_model_file_text(const stoke_model_file *mf);
const char *stoke_model_file_describe(const stoke_model_file *mf);

/* Builds the graph for inputs of per-sample `input` shape and the dataset's targets:
 * inputs "x" and "y" (class targets: int32 (), `classes` logits, cross-entropy and
 * accuracy; scalar targets: fp32 (1), MSE and MAE; vector targets: fp32 of `target`
 * shape), output "logits". NULL on failure with the message in stoke_last_error()
 * (naming the file and the layer). */
stoke_graph *stoke_model_file_build(const stoke_model_file *mf, const stoke_shape *input,
                                    stoke_target_kind kind, const stoke_shape *target,
                                    int64_t classes);

void stoke_model_file_free(stoke_model_file *mf); /* NULL is fine */

/* ---- Training configuration (config.c, docs/train.md) -----------------------------
 * Every setting has a key ("batch_size"), a default, and may be set, in increasing
 * precedence, by a YAML config file (key: value), the environment (BATCH_SIZE,
 * VAL_BATCH_SIZE, NUM_WORKERS, AMP, as the seeds export them) and command-line flags
 * (--batch-size). Each source goes through stoke_train_config_set, which records
 * where the value came from. */

typedef enum stoke_cfg_source {
    STOKE_CFG_DEFAULT = 0,
    STOKE_CFG_FILE,
    STOKE_CFG_ENV,
    STOKE_CFG_FLAG,
    STOKE_CFG_CHECKPOINT, /* restored by --resume */
} stoke_cfg_source;

#define STOKE_CFG_MAX_KEYS 48
/* The largest batch any command takes (batch_size, val_batch_size, stoke eval's and
 * stoke data bench's --batch-size): one limit for every way a batch is given. */
#define STOKE_MAX_BATCH (1 << 24)

typedef struct stoke_train_config {
    char dataset[512];       /* training data (default: Debian's Fashion-MNIST) */
    char val_dataset[512];   /* "" = the dataset's "test" split when it has one */
    char model[512];         /* preset name or YAML model file (default "cnn") */
    char hidden[160];        /* mlp / actor-critic presets: hidden sizes "512,512";
                                 "" = the preset's default */
    int64_t epochs;          /* default 3 */
    int64_t max_steps;       /* > 0: stop after this many optimizer steps in total,
                                 saving a checkpoint as an interruption does */
    int64_t batch_size;      /* samples per forward/backward (default 128); 0 = auto: the
                                 largest that fits memory_safety x the free memory (a
                                 power of two with batch_pow2, at most the samples; on
                                 the CPU at most STOKE_TUNE_CPU_START_BATCH), set by
                                 stoke_trainer_new */
    int64_t val_batch_size;  /* default 256 */
    int64_t accumulate;      /* backward passes per optimizer step (default 1): the
                                 effective batch is batch_size x accumulate */
    int64_t effective_batch; /* > 0: accumulate = ceil(this / batch_size) (not with
                                  accumulate given; env EFFECTIVE_BATCH) */
    double memory_safety;    /* batch auto: the share of the free memory planned for
                                  (0, 1], default 0.7 */
    bool batch_pow2;         /* batch auto: rounded down to a power of two (default) */
    int64_t limit;           /* > 0: train on the first `limit` samples only */
    int64_t val_limit;       /* > 0: evaluate on the first `val_limit` samples only */
    int64_t workers;         /* loader threads; -1 = decided (stoke_decide) */
    int64_t prefetch;        /* ring slots; 0 = decided: 2 x workers within [2, 32] */
    int64_t threads;         /* compute threads (OpenMP / oneDNN / BLAS); 0 = decided:
                                 usable CPUs - workers */
    bool no_fusion;          /* STOKE_NO_FUSION set and not "0" (environment only, not
                                 a key): the models run every op apart */
    char precision[8];       /* auto, fp32, bf16, fp16 */
    char device[16];         /* auto (a GPU when the CUDA backend can run on one), cpu,
                                 cuda, cuda:N (env STOKE_DEVICE) */
    char recompute[8];       /* gradient checkpointing (stoke_model_opts.recompute): off
                                 (default), on, or auto: on only when the models would
                                 not fit otherwise, before a smaller batch is tried
                                 (env STOKE_RECOMPUTE) */
    char tune[8];            /* what measures the settings given as auto: trials
                                  (default: the tuning cache, else trials before the
                                  run), cache (the cache alone, else the rules), off
                                  (the rules, as when unset; env STOKE_TUNE) */
    char optimizer[8];       /* sgd, adamw */
    double lr;               /* default 0.05 (SGD) */
    double momentum;         /* SGD, default 0.9 */
    bool nesterov;
    double weight_decay;
    double clip_norm;  /* 0 = no clipping */
    char schedule[12]; /* constant, step, cosine (default: cosine to 0 over the run) */
    int64_t warmup_steps;
    int64_t step_size;      /* schedule step: optimizer steps between decays */
    double gamma;           /* schedule step: the decay factor */
    double min_lr;          /* schedule cosine */
    bool augment;           /* augment images as `transforms` says */
    char transforms[16];    /* the augmentation: crop (random crop, pad 2, + horizontal flip;
                               the default) or rrc (RandomResizedCrop to the input size +
                               flip, on the original images where the dataset has them;
                               validation: the shorter side resized to 8/7 of it, then a
                               centre crop, as torchvision's Resize(256) +
                               CenterCrop(224)); crop+jitter and rrc+jitter add a color
                               jitter (brightness, contrast, saturation 0.4) */
    uint64_t seed;          /* shuffling, augmentation, initialization, dropout */
    char checkpoint[512];   /* "" = none; written every epoch, at the end, on SIGINT */
    char resume[512];       /* "" = start afresh */
    char log[512];          /* JSON-lines log of steps and epochs, "" = none */
    char report[512];       /* the HTML page of `stoke report` written at the end (by
                               the CLI, from the log and the monitor's samples), "" = none */
    int64_t log_every;      /* a step record every N optimizer steps (default 10) */
    int64_t eval_every;     /* > 0: also evaluate every N optimizer steps */
    double target_accuracy; /* > 0: stop after the first evaluation reaching this
                                 validation accuracy (a fraction; "90%" is 0.9) */
    bool dry_run;           /* print the memory plan and the largest batch; no training */
    double memory_budget;   /* bytes the models may take (checked before allocating;
                                 --dry-run's budget); 0 = what is available */
    bool monitor;           /* embed the monitor (CPU/GPU utilization, warnings) */
    /* a test/benchmark knob: CPU time added to the loading of each training sample
     * (stoke_loader_opts.sample_delay_us), a slow decode on demand (stoke bench) */
    int64_t loader_delay_us;
    stoke_cfg_source source[STOKE_CFG_MAX_KEYS]; /* per key, in stoke_train_config_key order */
    /* not a setting: the world of a data parallel run (stoke_dist_init, dist.h), whose
     * ranks each train a replica on their shard; NULL (the default): this process
     * alone. The caller keeps it alive past the trainer. */
    struct stoke_dist *world;
    /* not a setting: where the embedded monitor appends its samples as the monitor's
     * JSON lines (stoke_mon_format_json), for `--report`; NULL: nowhere. The caller
     * keeps the string alive past the trainer. */
    const char *monitor_jsonl;
} stoke_train_config;

/* The defaults. Can't fail. */
void stoke_train_config_defaults(stoke_train_config *c);

/* Sets `key` (with '-' or '_') from its text form and records `src`. STOKE_ERR_ARG
 * names the key and the value when the key is unknown or the value is invalid. */
stoke_status stoke_train_config_set(stoke_train_config *c, const char *key, const char *value,
                                    stoke_cfg_source src);

/* The hardware profile table (docs/profiles.md) from `len` bytes of YAML; `name` is
 * what messages call it. STOKE_ERR_FORMAT naming name:line:col and the field: an
 * unknown key, a duplicate, a wrong type, an absurd value, a missing field, two
 * profiles of one name, two CPU-only ones, and what config files refuse (nesting,
 * aliases, tags, documents). On error out->count is 0. */
stoke_status stoke_profiles_parse(const char *text, size_t len, const char *name,
                                  stoke_profiles *out);
/* The table stoke uses: the file STOKE_PROFILES names, else the one built in (the
 * repository's data/profiles.yaml when stoke was built). */
stoke_status stoke_profiles_load(stoke_profiles *out);

/* Applies a YAML file of `key: value` pairs (STOKE_CFG_FILE). Errors name the file,
 * line, column and key: an unknown key or a bad value, a value that is not a single
 * one (a list, a mapping, null), a key given twice (batch-size and batch_size are one
 * key), and what model files refuse as well (nesting, aliases, tags, documents). */
stoke_status stoke_train_config_load_file(stoke_train_config *c, const char *path);
/* The same from `size` bytes in memory; `name` stands for the file in messages. */
stoke_status stoke_train_config_parse(stoke_train_config *c, const char *data, size_t size,
                                      const char *name);

/* Applies BATCH_SIZE, VAL_BATCH_SIZE, NUM_WORKERS, PREFETCH_FACTOR, ACCUMULATE, EPOCHS,
 * LR, SEED, PRECISION, STOKE_DEVICE, STOKE_RECOMPUTE and AMP (true/1 -> precision
 * bf16, false/0 -> fp32; refused beside PRECISION) from the environment
 * (STOKE_CFG_ENV). `getenv_fn` may be NULL (the process environment). Errors name the
 * variable. */
stoke_status stoke_train_config_load_env(stoke_train_config *c,
                                         const char *(*getenv_fn)(const char *name));

/* Key i's name ("batch_size"), or NULL past the last one; and where key `key` came from
 * (STOKE_CFG_DEFAULT for an unknown key). */
const char *stoke_train_config_key(int i);
/* Key i's environment variable ("BATCH_SIZE"), or NULL when it has none (precision's
 * AMP is read beside its PRECISION). */
const char *stoke_train_config_env(int i);
stoke_cfg_source stoke_train_config_source(const stoke_train_config *c, const char *key);
/* The index of setting `key` (matched as stoke_train_config_set matches it, '-' as
 * '_'), or -1 when there is none; *truth (may be NULL): whether it is a true/false
 * setting, which a command-line flag alone sets. */
int stoke_train_config_find(const char *key, bool *truth);
const char *stoke_cfg_source_name(stoke_cfg_source s); /* "default", "file", "env", ... */

/* The configuration as one JSON object (malloc'd; NULL when out of memory). */
char *stoke_train_config_json(const stoke_train_config *c);

/* ---- The training input pipeline (input.c, data.c) ------------------------------
 * What `stoke train` does to a training set's samples, for a program that runs its
 * loader alone (`stoke data bench`) and must not build a second pipeline. */

#define STOKE_TRAIN_MAX_OPS 4

/* The transform `stoke train` runs on the samples of the training set `d` under c
 * (augment, transforms; c->dataset names it in messages): its training transform or,
 * with `eval`, its validation one, normalized by d's per-channel statistics as
 * training computes them (this reads samples). *o points into ops. *image is false
 * (and *o zeroed) for inputs fed to the model as read (float32 vectors). STOKE_ERR_ARG
 * with stoke train's messages for inputs it cannot take or augmentation it refuses;
 * the reads' errors (naming the file) otherwise. */
stoke_status stoke_train_input_transform(const stoke_train_config *c, stoke_dataset *d, bool eval,
                                         stoke_op ops[STOKE_TRAIN_MAX_OPS], stoke_transform_opts *o,
                                         bool *image);

/* Whether `stoke train` under c reads the training set d's samples from their original
 * images every epoch: RandomResizedCrop (rrc, rrc+jitter) on a dataset that has them
 * (stoke_dataset_has_originals). */
bool stoke_train_reads_originals(const stoke_train_config *c, const stoke_dataset *d);

/* Whether `stoke train` under c holds the training set d, `bytes` (inputs and targets as
 * read), in memory when `available` bytes are (0: unknown): when it takes at most a
 * quarter, unless it reads the originals. */
bool stoke_train_holds_in_memory(const stoke_train_config *c, const stoke_dataset *d, double bytes,
                                 uint64_t available);

/* ---- The trainer -------------------------------------------------------------- */

typedef enum stoke_train_event_kind {
    STOKE_EV_INFO = 0,   /* a setup line: dataset, model, threads split, precision */
    STOKE_EV_PROGRESS,   /* live stats within an epoch */
    STOKE_EV_EPOCH,      /* an epoch ended (and was evaluated) */
    STOKE_EV_WARNING,    /* a monitor finding (low utilization, ...) */
    STOKE_EV_CHECKPOINT, /* a checkpoint was written (text: its path) */
    STOKE_EV_EVAL,       /* an evaluation within an epoch (eval_every) */
    STOKE_EV_TARGET,     /* an evaluation reached target_accuracy: training stops */
} stoke_train_event_kind;

typedef struct stoke_train_event {
    stoke_train_event_kind kind;
    const char *text; /* INFO / WARNING / CHECKPOINT text */
    int64_t epoch;    /* 0-based */
    int64_t epochs;
    int64_t batch, batches;  /* batches done in this epoch, of */
    int64_t step;            /* optimizer steps so far (whole run) */
    bool tick;               /* PROGRESS: a 10% boundary of the epoch was crossed */
    double loss;             /* running mean training loss over this epoch */
    double metric;           /* running training accuracy (classes) or MAE, NaN if none */
    const char *metric_name; /* "acc" or "mae" */
    double lr;
    double samples_per_s; /* over this epoch */
    double data_wait_pct; /* % of this epoch's time spent waiting for batches */
    double cpu_pct;       /* the process, 100 = one core; NaN if unknown */
    double gpu_pct;       /* GPU utilization, NaN without a GPU */
    double mfu_pct;       /* model FLOP utilization: the matmuls' and convolutions'
                                    FLOP/s as % of the device's peak, at most 100;
                                    NaN if unknown */
    /* EPOCH: the peak MFU was taken against (0 if unknown) and how it was obtained:
     * "measured now", "cached from <date>", "computed from the clock", "GPU spec",
     * "raised to epoch N's rate"; "" if unknown. Lives as long as the trainer. */
    double peak_flops;
    const char *peak_source;
    /* PROGRESS, EPOCH: % of the epoch's time so far in each phase of the steps (with
     * data_wait_pct, the rest is bookkeeping): the batch into the model, forward,
     * backward (on a GPU waited for, so its time is its own), the optimizer step */
    double input_pct, forward_pct, backward_pct, optimizer_pct;
    /* data parallel (world > 1): the gradients' all-reduce as % of the time (the
     * reducer's host time, moved out of backward and optimizer), and the share of an
     * unhidden all-reduce that backward hid; NaN otherwise */
    int world;
    double allreduce_pct, allreduce_hidden_pct;
    double elapsed_s;            /* this epoch */
    double eta_s;                /* PROGRESS: rest of the epoch */
    double val_loss, val_metric; /* EPOCH, EVAL, TARGET: NaN when there is no validation set */
    int64_t val_samples;
    double run_elapsed_s; /* seconds since the training loop started (not setup) */
    double target;        /* TARGET: target_accuracy */
    /* WARNING: the monitor's finding apart (text joins them): its rule (stoke_rules)
     * and its evidence and advice; NULL for other events */
    const struct stoke_rule *rule;
    const char *evidence, *advice;
    const struct stoke_finding *finding; /* WARNING: its fields (during the call); else NULL */
    /* PROGRESS, EPOCH: the compute threads when the run changed them from the
     * decision's count (adapting to the load: docs/train.md, "Shared cores"); 0 while
     * it runs at that count */
    int threads;
} stoke_train_event;

typedef void (*stoke_train_callback)(const stoke_train_event *e, void *ctx);

/* The progress line ("epoch 1/3  42% 197/469 | loss 0.4123 acc 85.1% | 5210 samples/s |
 * data wait 0.4% | CPU 198% | lr 0.05 | eta 3s") and the epoch summary line. Return the
 * length; buf is always NUL-terminated. */
size_t stoke_train_format_progress(const stoke_train_event *e, char *buf, size_t size);
size_t stoke_train_format_epoch(const stoke_train_event *e, char *buf, size_t size);
/* An EVAL event ("eval at step 300 (epoch 2/5, 41%) | val loss 0.3012 val acc 89.12% |
 * 0.8s, at 12.3s": the evaluation's time, then the time since the loop started) and a
 * TARGET event ("target reached: val acc 90.38% >= 90.00% at step 1407 (epoch 3/5, end),
 * 33.4s after the start"). */
size_t stoke_train_format_eval(const stoke_train_event *e, char *buf, size_t size);
size_t stoke_train_format_target(const stoke_train_event *e, char *buf, size_t size);

typedef struct stoke_trainer stoke_trainer;

/* Sets everything up: probes the machine, opens the datasets (held in memory when they
 * are small), decides precision, threads, loader workers and prefetch depth (one
 * stoke_decide, reported as INFO events), builds the model, loads --resume, starts the
 * loader and the monitor.
 * `cb` (may be NULL) receives every event on the calling thread. Errors name what
 * failed (file, key, tensor). Free with stoke_trainer_free. */
stoke_status stoke_trainer_new(const stoke_train_config *c, stoke_train_callback cb, void *ctx,
                               stoke_trainer **out);

/* Trains until the last epoch (or max_steps), evaluating after every epoch (and every
 * eval_every steps) and writing the checkpoint (if configured) after every epoch and at
 * the end. An evaluation reaching target_accuracy ends the run there (checkpoint as at
 * the end; result.target_reached). When *stop becomes
 * non-zero (a signal handler's flag; may be NULL) it finishes the current optimizer
 * step, writes the checkpoint and returns STOKE_OK with result.interrupted set. */
stoke_status stoke_trainer_run(stoke_trainer *t, const volatile int *stop);

/* The memory plan for the configured batch and the largest batch that fits beside
 * what else the run holds — the validation model and, against a given budget, the
 * samples held in memory (*beside) — within `budget_bytes` (0: the configured
 * memory_budget, else what is available now: MemAvailable, or the headroom under a
 * cgroup limit; *budget_used). The same budget the check before allocating uses. On a
 * GPU (device decided cuda:N) the plan is the CUDA backend's, the default budget 90% of
 * the GPU's free memory, and *beside the validation model's plan and the loaders'
 * device slots (fit_gpu_batch's rule). */
stoke_status stoke_trainer_plan(stoke_trainer *t, size_t budget_bytes, stoke_mem_plan *plan,
                                int64_t *max_batch, size_t *budget_used, size_t *beside);

typedef struct stoke_train_result {
    int64_t epochs_done;         /* completed epochs */
    int64_t steps;               /* optimizer steps */
    double train_loss;           /* last epoch's mean */
    double val_loss, val_metric; /* last evaluation; NaN if none */
    const char *metric_name;
    double seconds;          /* wall time of stoke_trainer_run */
    bool interrupted;        /* stopped by *stop or max_steps */
    bool target_reached;     /* stopped at target_accuracy: */
    int64_t target_epoch;    /*   0-based epoch of that evaluation */
    int64_t target_step;     /*   optimizer steps before it */
    double target_elapsed_s; /*   seconds from the loop's start to its end */
    double best_val_metric;  /* best validation metric of the run; NaN if none */
} stoke_train_result;

void stoke_trainer_result(const stoke_trainer *t, stoke_train_result *r);

/* The settings the trainer runs with (--resume's completed from the checkpoint) and
 * what the tuner decided for them (stoke_decision, stoke/tune.h); owned by the
 * trainer. A --dry-run trainer has both: `stoke config show` reads them. */
const stoke_train_config *stoke_trainer_config(const stoke_trainer *t);
const struct stoke_decision *stoke_trainer_decision(const stoke_trainer *t);

/* The model being trained (for tests and tools); owned by the trainer. */
stoke_model *stoke_trainer_model(stoke_trainer *t);

/* The trainer's embedded monitor (stoke/monitor.h; NULL with --no-monitor): read it
 * with stoke_monitor_latest only, from any thread, while the trainer lives. */
struct stoke_monitor *stoke_trainer_monitor(stoke_trainer *t);

/* What the trainer has done since it was created, for measuring a part of a run
 * (stoke bench: totals after its warm-up and at the end, differenced). Never reset by
 * an epoch's end or a second stoke_trainer_run. */
typedef struct stoke_train_totals {
    int64_t steps, samples;        /* optimizer steps; samples through forward/backward */
    double loader_wait_s;          /* the training thread's wait for batches */
    double phase_s[4];             /* input, forward, backward, optimizer (stoke_phase
                                      order from STOKE_PHASE_INPUT), on the device's clock */
    double eval_s;                 /* evaluations (validation), within and after epochs */
    double step_flops, peak_flops; /* per sample of a step; the device's peak (0: unknown) */
} stoke_train_totals;

/* MFU in % of peak_flops for a rate of samples_per_s x step_flops, at most 100 (a
 * higher rate shows the peak is low: the trainer raises its own to it); NaN when
 * either figure is unknown (0). */
double stoke_train_mfu_pct(double samples_per_s, double step_flops, double peak_flops);

/* The totals so far (on a GPU it waits for the phases queued). */
void stoke_trainer_totals(stoke_trainer *t, stoke_train_totals *out);

/* A later stoke_trainer_run goes on to `steps` optimizer steps in all (max_steps): a run
 * stopped at max_steps continues where it stopped, its epoch's figures over the new
 * part only. */
void stoke_trainer_set_max_steps(stoke_trainer *t, int64_t steps);

/* Writes a checkpoint of the current state to `path` now. */
stoke_status stoke_trainer_save(stoke_trainer *t, const char *path);

void stoke_trainer_free(stoke_trainer *t); /* NULL is fine */

/* ---- Measured tuning (tune.c, docs/tune.md) -----------------------------------------
 * The settings a run leaves open, measured by short trials of real training steps on
 * its own model and data (stoke_tune_search decides what to try), kept in a cache per
 * machine + model + dataset + the settings given, so the next run starts tuned. */

typedef struct stoke_train_tune_opts {
    bool all;                     /* `stoke tune`: settings left at their defaults are measured
                             too; otherwise only those given as auto */
    bool grid;                    /* every combination (the benchmark's peer), not the search;
                             not cached */
    double trial_seconds;         /* each trial's measured seconds; 0: 0.5 */
    int64_t max_batch;            /* > 0: no batch above it is tried */
    bool use_cache;               /* a cached measurement answers without trials */
    bool write_cache;             /* the result is cached for the next run */
    bool no_trials;               /* the cache or nothing (a dry run) */
    const char *output;           /* also write the settings file here (NULL: no) */
    stoke_tune_trial_cb on_trial; /* after each trial (may be NULL) */
    void *ctx;
} stoke_train_tune_opts;

typedef struct stoke_train_tuning {
    bool batch, workers, prefetch, threads, precision; /* the settings measured */
    bool cached;              /* result.best came from the cache, no trial ran */
    stoke_tune_space space;   /* what was searched (not filled when cached) */
    stoke_tune_result result; /* the trials and the choice with its reasons */
    double seconds;           /* the trials' wall time */
    char cache_path[4200];    /* "" without a cache directory */
    char cache_note[600];     /* why the cache did not answer */
    char cache_error[600];    /* why the result could not be cached ("" if it was) */
} stoke_train_tuning;

/* Measures the open settings of `cfg` (opts->all: every one of batch_size, workers,
 * prefetch, threads and precision that is not given, else those given as auto) by
 * trials, writes the settings file (opts->output: YAML that `stoke train --config`
 * reads, the measurement in comments) and the cache entry. The cache is
 * $STOKE_CACHE_DIR, else $XDG_CACHE_HOME/stoke, else ~/.cache/stoke: tune/<hash>.yaml.
 * STOKE_ERR_ARG when nothing is open; errors of the run's setup as stoke_trainer_new
 * gives them; a cache that cannot be written is not an error (cache_error). */
stoke_status stoke_train_tune(const stoke_train_config *cfg, const stoke_train_tune_opts *opts,
                              stoke_train_tuning *out);

/* One trial as a line: "trial 3 (workers): batch 128, 1 worker + 1 thread, prefetch 4,
 * fp32 -> 7210 samples/s, data wait 0.4%, 17.75 ms a step, memory 120 MB". */
void stoke_train_format_trial(const stoke_tune_trial *t, int index, char *buf, size_t size);

/* ---- Using a saved model (eval, predict) --------------------------------------- */

typedef struct stoke_saved_model stoke_saved_model;

/* Rebuilds the model a checkpoint was trained with (for inference, up to `batch`
 * samples at a time) and checks its weights. The model is allocated by the first eval
 * or predict, at a batch no larger than its sample count, and refused there with the
 * numbers when its plan does not fit the memory available (STOKE_ERR_NOMEM). Errors
 * name the file and the tensor or key. */
stoke_status stoke_saved_model_open(const char *path, int64_t batch, stoke_saved_model **out);
void stoke_saved_model_free(stoke_saved_model *s);

/* The training dataset recorded in the checkpoint, and the model's input shape. */
const char *stoke_saved_model_dataset(const stoke_saved_model *s);
const stoke_shape *stoke_saved_model_input_shape(const stoke_saved_model *s);
int64_t stoke_saved_model_classes(const stoke_saved_model *s); /* 0 for regression */
/* The name of class c as the training data named it (an image folder's class folder),
 * or NULL: the checkpoint names no classes (other formats, older checkpoints) or c is
 * out of range. The string belongs to s. */
const char *stoke_saved_model_class_name(const stoke_saved_model *s, int64_t c);

/* Evaluates on a dataset (opened by the caller, with the checkpoint's normalization):
 * mean loss and accuracy (classes) or MAE over `limit` samples (0 = all). */
stoke_status stoke_saved_model_eval(stoke_saved_model *s, stoke_dataset *d, int64_t limit,
                                    double *loss, double *metric, int64_t *count);

/* Runs `n` samples (each in the dataset's raw dtype and the model's input shape,
 * u8 or f32, normalized as in training) and writes, per sample, the predicted class
 * (an actor-critic: the most likely action; regression: 0) to pred and the outputs to
 * out (n x outputs, may be NULL): the logits (an actor-critic: the policy's logits,
 * then the value). */
stoke_status stoke_saved_model_predict(stoke_saved_model *s, const void *inputs, stoke_dtype dtype,
                                       int64_t n, int64_t *pred, float *out);
int64_t stoke_saved_model_outputs(const stoke_saved_model *s); /* values per sample */
/* An actor-critic's number of actions (its outputs are that many logits and the
 * value); 0 for other models. */
int64_t stoke_saved_model_actions(const stoke_saved_model *s);

#ifdef __cplusplus
}
#endif
#endif
