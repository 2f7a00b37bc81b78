/* graph_impl.h - the recorded nodes and parameters of a stoke_graph, shared by the
 * builders, the memory plan, the executor and the backends. Internal to src/nn. */
#ifndef STOKE_NN_GRAPH_IMPL_H
#define STOKE_NN_GRAPH_IMPL_H

#include "stoke/nn.h"

#define NN_NAME_MAX   80
#define NN_MAX_INPUTS 2
#define NN_MAX_PARAMS 4

/* How a parameter is initialized (PyTorch's defaults, see nn.h). */
typedef enum nn_init {
    NN_INIT_UNIFORM_FAN_IN = 0, /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
    NN_INIT_XAVIER,             /* U(-sqrt(6/(fan_in+fan_out)), ...) */
    NN_INIT_NORMAL,             /* N(0, std) */
    NN_INIT_ZEROS,
    NN_INIT_ONES,
} nn_init;

typedef struct nn_param {
    stoke_param_info info;       /* info.name points at name below */
    char name[NN_NAME_MAX + 32]; /* "<layer>.<suffix>" */
    nn_init init;
    double fan_in, fan_out, std;
    bool lowp; /* gets a bf16/fp16 copy (linear and conv weights) */
} nn_param;

/* One op. Attributes not used by the op are 0. */
typedef struct nn_node {
    stoke_nn_op op;
    char name[NN_NAME_MAX]; /* layer name, or "<op>#<index>" */
    stoke_dtype dtype;      /* of the output: STOKE_F32, or STOKE_I32 for id inputs */
    stoke_shape shape;      /* per-sample output shape (() for losses, metrics) */
    int nin;
    stoke_tensor in[NN_MAX_INPUTS];
    int nparam;
    int param[NN_MAX_PARAMS]; /* indices into the graph's parameter table */
    int64_t features;         /* linear/conv: out features/channels; embedding: dim */
    int64_t vocab;            /* embedding */
    int kernel, stride, padding;
    int heads, patch;
    bool bias;
    float p, eps, momentum, smoothing;
    float clip, entropy; /* policy gradient: PPO epsilon (0: no ratio), bonus */
    int64_t begin;       /* slice: first column (features: the width) */
    float loss_weight;   /* losses: weight in the total loss */
    bool is_output;
    char out_name[NN_NAME_MAX + 32];
    bool needs_grad; /* some parameter lies upstream: backward visits it */
} nn_node;

struct stoke_graph {
    char name[NN_NAME_MAX];
    stoke_status status; /* first error */
    char error[512];
    nn_node *nodes;
    int nnodes, cap_nodes;
    nn_param *params;
    int nparams, cap_params;
};

/* Writes parameter p's initial values (p->info.elems floats) for `seed`. */
void nn_param_init(const nn_param *p, uint64_t seed, float *out);

static inline const nn_node *nn_graph_node(const stoke_graph *g, stoke_tensor t)
{
    return (t >= 0 && t < g->nnodes) ? &g->nodes[t] : NULL;
}

static inline bool nn_op_is_loss(stoke_nn_op op)
{
    return op == STOKE_NN_CROSS_ENTROPY || op == STOKE_NN_BCE_LOGITS || op == STOKE_NN_MSE ||
           op == STOKE_NN_L1 || op == STOKE_NN_POLICY_GRADIENT;
}

static inline bool nn_op_is_metric(stoke_nn_op op)
{
    return op == STOKE_NN_ACCURACY || op == STOKE_NN_MAE;
}

#endif
