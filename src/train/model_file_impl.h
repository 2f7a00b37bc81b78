/* model_file_impl.h - a model file as parsed (model_file.c reads it) and built
 * (model_build.c makes its graph): the layers, their types and the preset's options. */
#ifndef STOKE_TRAIN_MODEL_FILE_IMPL_H
#define STOKE_TRAIN_MODEL_FILE_IMPL_H

#include "train/train_impl.h"

/* Residual blocks nest at most this deep. Parsing, building and freeing recurse once
 * per block, so this bounds their stack: under ASan the parser took about 1.5 KB a
 * block (it overflowed 8 MB at 5,400), so 64 take some 100 KB; no real model nests
 * more than a handful. The YAML reader's own depth limit (TRAIN_YAML_MAX_DEPTH, 2
 * levels a block) comes after this one. */
#define MAX_BLOCK_NESTING 64

typedef enum layer_type {
    L_LINEAR,
    L_CONV2D,
    L_MAXPOOL,
    L_AVGPOOL,
    L_GLOBAL_AVGPOOL,
    L_BATCHNORM,
    L_LAYERNORM,
    L_RELU,
    L_GELU,
    L_TANH,
    L_SIGMOID,
    L_DROPOUT,
    L_FLATTEN,
    L_ATTENTION,
    L_PATCHIFY,
    L_POS_EMBED,
    L_SEQ_MEAN,
    L_RESIDUAL,
    L_COUNT
} layer_type;

/* Per type: its name in files, the fields it accepts (besides type and name), and the
 * prefix of generated layer names (NULL: no parameters, no name needed). */
typedef struct layer_type_info {
    const char *name;
    const char *fields;
    const char *prefix;
} layer_type_info;
extern const layer_type_info train_layer_types[L_COUNT];

typedef struct layer {
    layer_type type;
    char name[64];
    int64_t out; /* 0: the model's outputs (classes) */
    int kernel, stride, padding, heads, patch;
    bool bias;
    float p, eps, momentum;
    size_t line, col; /* 1-based, for build errors */
    struct layer *children;
    int nchildren;
} layer;

#define MAX_HIDDEN TRAIN_MAX_HIDDEN

struct stoke_model_file {
    char *name;
    char *text;
    char desc[64];
    char preset[32]; /* "" for a layers model */
    int64_t hidden[MAX_HIDDEN];
    int nhidden; /* -1: not given */
    int width, blocks, patch, depth, heads;
    layer *layers;
    int nlayers;
    char loss[24]; /* "" = by target kind */
    float label_smoothing;
    float clip, entropy; /* actor-critic: PPO epsilon (0: 0.2), entropy bonus */
};

#endif
