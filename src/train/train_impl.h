/* train_impl.h - helpers shared by the trainer (trainer.h and its files) and saved
 * models (saved.c): how a dataset's samples become model inputs and targets (input.c),
 * one evaluation pass, and the checkpoint's metadata (meta.c). */
#ifndef STOKE_TRAIN_IMPL_H
#define STOKE_TRAIN_IMPL_H

#include "stoke/nn.h"
#include "stoke/train.h"

#define TRAIN_CKPT_FORMAT  "stoke-checkpoint-1"
#define TRAIN_MAX_CHANNELS 4
#define TRAIN_MAX_HIDDEN   16 /* hidden sizes of a preset (model files and --hidden) */

/* How samples are turned into the model's fp32 input. */
typedef struct train_input {
    bool image; /* transformed (u8/f32 image -> normalized f32 CHW) */
    int channels;
    float mean[TRAIN_MAX_CHANNELS], std[TRAIN_MAX_CHANNELS];
    stoke_shape in_shape; /* the dataset's per-sample shape */
    stoke_dtype in_dtype;
    stoke_shape model_shape; /* the model's input "x" shape */
} train_input;

/* Prefixes the last error message with the formatted prefix and ": " (where the error
 * happened: a file's line, a setting, "validation"). Returns s. */
stoke_status train_wrap_error(stoke_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Decides how inputs of this shape and dtype are fed (images: channel count and
 * layout; f32 vectors as they are). STOKE_ERR_ARG for what cannot be trained on. */
stoke_status train_input_init(train_input *ti, const stoke_shape *shape, stoke_dtype dtype);

/* train_input_init for the training set at `path` (for messages) under c, and c's
 * augmentation checked against it: STOKE_ERR_ARG for augment on inputs that are not
 * images, and for transforms other than crop without augment. */
stoke_status train_input_setup(train_input *ti, const stoke_train_config *c, const char *path,
                               const stoke_dataset_info *info);

/* data.c: per-channel mean and std of the training inputs for the normalize transform,
 * over at most TRAIN_STATS_SAMPLES of them. */
#define TRAIN_STATS_SAMPLES 10000
stoke_status train_input_stats(stoke_dataset *d, train_input *ti);

/* What comes before the normalize: nothing, random crop (pad 2) + flip, or
 * RandomResizedCrop + flip for training and resize-shorter + centre crop for its
 * evaluation; the _JITTER ones add a color jitter after the flip. */
typedef enum train_aug {
    TRAIN_AUG_NONE,
    TRAIN_AUG_CROP,
    TRAIN_AUG_RRC,
    TRAIN_AUG_RRC_EVAL,
    TRAIN_AUG_CROP_JITTER,
    TRAIN_AUG_RRC_JITTER
} train_aug;

/* The training and evaluation transforms of a config's augment + transforms. */
void train_aug_of(bool augment, const char *transforms, train_aug *train, train_aug *eval);

/* Transform options (what `aug` says, then normalize) for an image input. `ops` holds
 * STOKE_TRAIN_MAX_OPS. */
void train_transform_opts(const train_input *ti, train_aug aug, stoke_op *ops,
                          stoke_transform_opts *o);

/* A number of any dtype at element i of src (NaN for an unknown dtype). */
double train_read_num(const void *src, stoke_dtype t, int64_t i);

/* Converts n targets of the dataset's dtype into the model's "y" input: int32 class
 * indices (checked against classes: STOKE_ERR_ARG naming the file `source` and the
 * sample, as the readers' own label checks do) or float32 values. `samples` (may be
 * NULL) gives the dataset indices and `source` (may be NULL) its path, for messages. */
stoke_status train_convert_targets(const void *src, stoke_dtype dtype, int64_t n, int64_t elems,
                                   bool classes, int64_t nclasses, void *dst,
                                   const int64_t *samples, const char *source);

/* How a dataset's targets feed the model's "y" (train_convert_targets' arguments). */
typedef struct train_targets {
    stoke_dtype dtype;
    int64_t elems;
    bool classes;
    int64_t nclasses;
    void *stage;        /* host memory for a batch of converted targets, copied into "y" from
                    there (a model on a device); NULL: converted in place (the CPU) */
    const char *source; /* the dataset's path, for messages (stoke_dataset_path) */
} train_targets;

/* n targets of the dataset into the model's "y": converted in place, or through
 * tg->stage for a model on a device. */
stoke_status train_feed_targets(stoke_model *m, stoke_tensor y, const train_targets *tg,
                                const void *targets, const int64_t *samples, int64_t n);

/* An evaluation's running sums: loss and metric weighted by the batch size. */
typedef struct train_eval {
    double loss, metric;
    int64_t n;
} train_eval;

/* One evaluation batch, the same for validation in training and for `stoke eval`: the
 * n inputs are already in the model's "x"; converts the targets into "y", runs the
 * forward pass (no training) and adds the batch's loss and metric (when `metric` is
 * not STOKE_NO_TENSOR) to *acc. On error *acc is unchanged. */
stoke_status train_eval_batch(stoke_model *m, stoke_tensor y, stoke_tensor metric,
                              const train_targets *tg, const void *targets, const int64_t *samples,
                              int64_t n, train_eval *acc);

/* The means of *acc (NaN when nothing was evaluated, or no metric) and its count. */
void train_eval_means(const train_eval *acc, bool has_metric, double *loss, double *metric,
                      int64_t *count);

/* A model about to be allocated: what it is for ("training", "validation",
 * "inference"), its plan (stoke_graph_plan) and the option that sets its batch. */
typedef struct train_mem_need {
    const char *what;
    const stoke_mem_plan *plan;
    const char *batch_flag;
    size_t ring_per_sample; /* its loader's ring: slots x (input + target + 8) bytes */
} train_mem_need;

/* STOKE_ERR_NOMEM, with each plan's parts, the memory there is and the largest batch
 * of needs[0] that would fit beside the others, when the plans together need more
 * than `budget` bytes (> 0: --memory-budget) or, with budget 0, more than is
 * available now (MemAvailable, or less under a cgroup limit: stoke_mem_probe).
 * STOKE_OK when they fit or the memory is unknown; *left (may be NULL) is then what
 * remains for the rest of the run (the loaders' rings), or 0 when unknown. */
stoke_status train_check_memory(const char *model, const train_mem_need *needs, int n,
                                double budget, size_t *left);

/* Per-channel values of the normalize transform (n = 0 for inputs that are not
 * images). */
typedef struct train_floats {
    float v[TRAIN_MAX_CHANNELS];
    int n;
} train_floats;

/* A checkpoint's stoke.* metadata, as the fields it is made from and read into. The
 * keys, their fields and their text forms are one table in meta.c, so writing and
 * reading cannot disagree. Strings point into the checkpoint (read) or at the
 * caller's text (write). */
typedef struct train_meta {
    const char *format; /* TRAIN_CKPT_FORMAT */
    int64_t epoch;      /* the sampler's epoch (the one being trained) */
    int64_t step;       /* optimizer steps taken */
    uint64_t seed;
    int64_t sampler_epoch, sampler_index; /* where the next batch starts */
    float loss_scale;                     /* the dynamic loss scale (fp16) */
    const char *precision, *optimizer;
    stoke_shape input_shape; /* the model's input "x" */
    stoke_shape data_shape;  /* the dataset's per-sample shape */
    const char *data_dtype;
    const char *target_kind; /* "class", "vector" or "scalar" */
    int64_t classes;
    stoke_shape target_shape;
    train_floats mean, std;                  /* the normalize transform's */
    double epoch_loss_sum, epoch_metric_sum; /* this epoch's running sums */
    int64_t epoch_samples, epoch_batches;
    const char *model;   /* the model file's text */
    const char *dataset; /* the training set's path */
    const char *config;  /* the run's config as JSON */
} train_meta;

/* Reads every key of the table from c into *m. STOKE_ERR_FORMAT naming the file and
 * the key when one is missing ("not a stoke checkpoint?") or its value is not of its
 * type. *m points into c: valid while c is open. */
stoke_status train_meta_read(const stoke_ckpt *c, train_meta *m);

/* The checkpoint's stoke.config, parsed (free with cJSON_Delete). It must be a JSON
 * object whose values are strings, numbers or booleans, holding at least the settings
 * that say what its weights are and how their inputs are prepared (dataset, model,
 * hidden, optimizer, seed, augment, transforms): a default in their place would train
 * or evaluate something else without a word. STOKE_ERR_FORMAT naming the file and the
 * key otherwise. */
struct cJSON;
stoke_status train_ckpt_config(const stoke_ckpt *c, struct cJSON **out);

/* The checkpoint's texts that are not UTF-8, kept exactly (core/json.h: JSON holds
 * them with U+FFFD in place of each invalid byte, which would name another file).
 * write: *json (malloc'd) is the object stoke.config_bytes holds, {"dataset":
 * "2f746d702fff"}, hex of each string setting of c that is not UTF-8; NULL when all
 * are. read: setting `key`'s exact bytes from the checkpoint's stoke.config_bytes into
 * buf: 1 when there, 0 when not (stoke.config's text is exact), -1 when malformed
 * (the error names the file and key). */
stoke_status train_config_bytes(const stoke_train_config *c, char **json);
int train_ckpt_config_bytes(const stoke_ckpt *c, const char *key, char *buf, size_t size);

/* Whether a checkpoint tensor (NULL: missing) is float32 of this shape: what a model's
 * parameter or optimizer state can be loaded from. */
bool train_tensor_fits(const stoke_ckpt_tensor *t, const stoke_shape *shape);

/* "1,28,28" <-> shape; "0.286,0.353" <-> floats. */
void train_format_shape(const stoke_shape *s, char *buf, size_t size);
bool train_parse_shape(const char *s, stoke_shape *out);
void train_format_floats(const float *v, int n, char *buf, size_t size);
int train_parse_floats(const char *s, float *v, int max);

#endif
