/* train_impl.h - helpers shared by the trainer (train.c) and saved models (saved.c):
 * how a dataset's samples become model inputs and targets, and the checkpoint keys. */
#ifndef STOKE_TRAIN_IMPL_H
#define STOKE_TRAIN_IMPL_H

#include "stoke/nn.h"
#include "stoke/train.h"

#define TRAIN_CKPT_FORMAT "stoke-checkpoint-1"
#define TRAIN_MAX_CHANNELS 4
#define TRAIN_MAX_HIDDEN 16 /* hidden sizes of a preset (model files and --hidden) */

/* How samples are turned into the model's fp32 input. */
typedef struct train_input {
    bool image;                     /* transformed (u8/f32 image -> normalized f32 CHW) */
    int channels;
    float mean[TRAIN_MAX_CHANNELS], std[TRAIN_MAX_CHANNELS];
    stoke_shape in_shape;           /* the dataset's per-sample shape */
    stoke_dtype in_dtype;
    stoke_shape model_shape;        /* the model's input "x" shape */
} train_input;

/* Prefixes the last error message with "prefix: ". Returns s. */
stoke_status train_wrap_error(stoke_status s, const char *prefix);

/* Decides how inputs of this shape and dtype are fed (images: channel count and
 * layout; f32 vectors as they are). STOKE_ERR_ARG for what cannot be trained on. */
stoke_status train_input_init(train_input *ti, const stoke_shape *shape, stoke_dtype dtype);

/* Transform options (normalize, plus crop/flip when augment) for an image input.
 * `ops` holds at least 3. */
void train_transform_opts(const train_input *ti, bool augment, stoke_op *ops,
                          stoke_transform_opts *o);

/* Converts n targets of the dataset's dtype into the model's "y" input: int32 class
 * indices (checked against classes: STOKE_ERR_ARG naming the sample) or float32 values.
 * `samples` (may be NULL) gives the dataset indices for messages. */
stoke_status train_convert_targets(const void *src, stoke_dtype dtype, int64_t n,
                                   int64_t elems, bool classes, int64_t nclasses, void *dst,
                                   const int64_t *samples);

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

/* "1,28,28" <-> shape; "0.286,0.353" <-> floats. */
void train_format_shape(const stoke_shape *s, char *buf, size_t size);
bool train_parse_shape(const char *s, stoke_shape *out);
void train_format_floats(const float *v, int n, char *buf, size_t size);
int train_parse_floats(const char *s, float *v, int max);

#endif
