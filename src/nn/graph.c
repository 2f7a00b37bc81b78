/* graph.c - a graph's life and bookkeeping: creating and freeing it, its first error,
 * its node and parameter tables, inputs and outputs, the accessors and the FLOP count.
 * The ops' builders live in graph_layers.c, graph_ops.c and graph_loss.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/graph_build.h"

static const char *const op_names[STOKE_NN_OP_COUNT] = {
    [STOKE_NN_INPUT] = "input",
    [STOKE_NN_LINEAR] = "linear",
    [STOKE_NN_CONV2D] = "conv2d",
    [STOKE_NN_MAXPOOL2D] = "maxpool2d",
    [STOKE_NN_AVGPOOL2D] = "avgpool2d",
    [STOKE_NN_GLOBAL_AVGPOOL] = "global_avgpool",
    [STOKE_NN_BATCHNORM] = "batchnorm",
    [STOKE_NN_LAYERNORM] = "layernorm",
    [STOKE_NN_RELU] = "relu",
    [STOKE_NN_GELU] = "gelu",
    [STOKE_NN_TANH] = "tanh",
    [STOKE_NN_SIGMOID] = "sigmoid",
    [STOKE_NN_DROPOUT] = "dropout",
    [STOKE_NN_ADD] = "add",
    [STOKE_NN_RESHAPE] = "reshape",
    [STOKE_NN_EMBEDDING] = "embedding",
    [STOKE_NN_SOFTMAX] = "softmax",
    [STOKE_NN_ATTENTION] = "attention",
    [STOKE_NN_PATCHIFY] = "patchify",
    [STOKE_NN_POS_EMBED] = "pos_embed",
    [STOKE_NN_SEQ_MEAN] = "seq_mean",
    [STOKE_NN_CROSS_ENTROPY] = "cross_entropy",
    [STOKE_NN_BCE_LOGITS] = "bce_logits",
    [STOKE_NN_MSE] = "mse",
    [STOKE_NN_L1] = "l1",
    [STOKE_NN_ACCURACY] = "accuracy",
    [STOKE_NN_MAE] = "mae",
    [STOKE_NN_POLICY_GRADIENT] = "policy_gradient",
    [STOKE_NN_SLICE] = "slice",
};

const char *stoke_nn_op_name(stoke_nn_op op)
{
    return (op >= 0 && op < STOKE_NN_OP_COUNT && op_names[op]) ? op_names[op] : "?";
}

stoke_graph *stoke_graph_new(const char *name)
{
    stoke_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    snprintf(g->name, sizeof g->name, "%s", name ? name : "model");
    return g;
}

void stoke_graph_free(stoke_graph *g)
{
    if (!g)
        return;
    free(g->nodes);
    free(g->params);
    free(g);
}

stoke_status stoke_graph_status(const stoke_graph *g)
{
    if (!g)
        return stoke_fail(STOKE_ERR_ARG, "nn: no graph");
    if (g->status != STOKE_OK)
        return stoke_fail(g->status, "%s", g->error);
    return STOKE_OK;
}

/* Records the first error only: later ones are usually consequences of it. */
__attribute__((format(printf, 3, 4))) stoke_tensor nn_g_fail(stoke_graph *g, stoke_status s,
                                                             const char *fmt, ...)
{
    if (g->status == STOKE_OK) {
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(g->error, sizeof g->error, "%s: ", g->name);
        if (n > 0 && (size_t)n < sizeof g->error)
            vsnprintf(g->error + n, sizeof g->error - (size_t)n, fmt, ap);
        va_end(ap);
        g->status = s;
        stoke_fail(s, "%s", g->error);
    }
    return STOKE_NO_TENSOR;
}

char *nn_g_shape_str(const stoke_shape *s, char *buf, size_t size)
{
    return stoke_shape_format(s, buf, size);
}

stoke_shape nn_g_shape_of(int ndim, const int64_t *dims)
{
    stoke_shape s = {.ndim = ndim};
    for (int i = 0; i < ndim; i++)
        s.dims[i] = dims[i];
    return s;
}

stoke_shape nn_g_shape1(int64_t a) { return nn_g_shape_of(1, (int64_t[]){a}); }
stoke_shape nn_g_shape2(int64_t a, int64_t b) { return nn_g_shape_of(2, (int64_t[]){a, b}); }
stoke_shape nn_g_shape3(int64_t a, int64_t b, int64_t c)
{
    return nn_g_shape_of(3, (int64_t[]){a, b, c});
}

/* A handle usable as an input: valid, from this graph. Silent for STOKE_NO_TENSOR so
 * that chains report only the first error. */
bool nn_g_usable(stoke_graph *g, stoke_tensor t, const char *what)
{
    if (!g || g->status != STOKE_OK)
        return false;
    if (t == STOKE_NO_TENSOR)
        return false;
    if (t < 0 || t >= g->nnodes) {
        nn_g_fail(g, STOKE_ERR_ARG, "%s: tensor handle %d is not a node of this graph", what,
                  (int)t);
        return false;
    }
    if (nn_op_is_loss(g->nodes[t].op) || nn_op_is_metric(g->nodes[t].op)) {
        nn_g_fail(g, STOKE_ERR_ARG, "%s: input %s is a loss or metric, not a tensor", what,
                  g->nodes[t].name);
        return false;
    }
    return true;
}

static bool name_taken(const stoke_graph *g, const char *name)
{
    for (int i = 0; i < g->nnodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0 ||
            (g->nodes[i].is_output && strcmp(g->nodes[i].out_name, name) == 0))
            return true;
    return false;
}

/* Appends a node. `name` NULL gives "<op>#<index>". The pointer is valid until the
 * next node is added. */
static nn_node *new_node(stoke_graph *g, stoke_nn_op op, const char *name)
{
    if (g->status != STOKE_OK)
        return NULL;
    if (name) {
        if (!name[0] || strlen(name) >= NN_NAME_MAX - 24) {
            nn_g_fail(g, STOKE_ERR_ARG, "%s: layer name empty or longer than %d bytes",
                      stoke_nn_op_name(op), NN_NAME_MAX - 25);
            return NULL;
        }
        if (name_taken(g, name)) {
            nn_g_fail(g, STOKE_ERR_ARG, "%s: layer name \"%s\" is used twice", stoke_nn_op_name(op),
                      name);
            return NULL;
        }
    }
    if (g->nnodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 16;
        nn_node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
        if (!n) {
            nn_g_fail(g, STOKE_ERR_NOMEM, "out of memory adding a node");
            return NULL;
        }
        g->nodes = n;
        g->cap_nodes = cap;
    }
    nn_node *n = &g->nodes[g->nnodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->dtype = STOKE_F32;
    n->loss_weight = 1.0f;
    if (name)
        snprintf(n->name, sizeof n->name, "%s", name);
    else
        snprintf(n->name, sizeof n->name, "%s#%d", stoke_nn_op_name(op), g->nnodes);
    g->nnodes++;
    return n;
}

nn_node *nn_g_node_with_inputs(stoke_graph *g, stoke_nn_op op, const char *name, stoke_tensor a,
                               stoke_tensor b)
{
    nn_node *n = new_node(g, op, name);
    if (!n)
        return NULL;
    n->in[0] = a;
    n->in[1] = b;
    n->nin = b == STOKE_NO_TENSOR ? 1 : 2;
    bool ng = false;
    for (int i = 0; i < n->nin; i++)
        ng = ng || g->nodes[n->in[i]].needs_grad;
    n->needs_grad = ng && !nn_op_is_metric(op);
    return n;
}

stoke_tensor nn_g_handle(const stoke_graph *g, const nn_node *n)
{
    return (stoke_tensor)(n - g->nodes);
}

int nn_g_add_param(stoke_graph *g, nn_node *n, const char *suffix, stoke_shape shape, nn_init init,
                   double fan_in, double fan_out, bool trainable, bool lowp)
{
    if (g->status != STOKE_OK)
        return -1;
    if (g->nparams == g->cap_params) {
        int cap = g->cap_params ? 2 * g->cap_params : 16;
        nn_param *p = realloc(g->params, (size_t)cap * sizeof *p);
        if (!p) {
            nn_g_fail(g, STOKE_ERR_NOMEM, "out of memory adding a parameter");
            return -1;
        }
        g->params = p;
        g->cap_params = cap;
        for (int i = 0; i < g->nparams; i++) /* realloc moved the names */
            g->params[i].info.name = g->params[i].name;
    }
    int i = g->nparams++;
    nn_param *p = &g->params[i];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s.%s", n->name, suffix);
    p->info.name = p->name;
    p->info.shape = shape;
    p->info.elems = stoke_shape_elems(&shape);
    p->info.trainable = trainable;
    p->info.layer = nn_g_handle(g, n);
    p->init = init;
    p->fan_in = fan_in;
    p->fan_out = fan_out;
    p->lowp = lowp;
    n->param[n->nparam++] = i;
    if (trainable)
        n->needs_grad = true;
    return i;
}

bool nn_g_positive(stoke_graph *g, const char *layer, const char *what, int64_t v)
{
    if (v >= 1)
        return true;
    nn_g_fail(g, STOKE_ERR_ARG, "%s: %s must be >= 1, got %lld", layer, what, (long long)v);
    return false;
}

stoke_tensor stoke_nn_input(stoke_graph *g, const char *name, stoke_dtype dtype,
                            const stoke_shape *shape)
{
    if (!g || g->status != STOKE_OK)
        return STOKE_NO_TENSOR;
    if (!name || !shape)
        return nn_g_fail(g, STOKE_ERR_ARG, "input: needs a name and a shape");
    if (dtype != STOKE_F32 && dtype != STOKE_I32)
        return nn_g_fail(g, STOKE_ERR_ARG, "%s: inputs are float32 or int32, not %s", name,
                         stoke_dtype_name(dtype));
    if (shape->ndim < 0 || shape->ndim > STOKE_MAX_DIMS)
        return nn_g_fail(g, STOKE_ERR_ARG, "%s: %d dimensions", name, shape->ndim);
    for (int i = 0; i < shape->ndim; i++)
        if (!nn_g_positive(g, name, "every dimension", shape->dims[i]))
            return STOKE_NO_TENSOR;
    nn_node *n = new_node(g, STOKE_NN_INPUT, name);
    if (!n)
        return STOKE_NO_TENSOR;
    n->dtype = dtype;
    n->shape = *shape;
    return nn_g_handle(g, n);
}

/* A float tensor input check shared by the layers. */
const nn_node *nn_g_float_input(stoke_graph *g, stoke_tensor x, const char *layer)
{
    if (!nn_g_usable(g, x, layer))
        return NULL;
    const nn_node *in = &g->nodes[x];
    if (in->dtype != STOKE_F32) {
        nn_g_fail(g, STOKE_ERR_ARG,
                  "%s: input %s holds int32 ids; only embedding and losses take them", layer,
                  in->name);
        return NULL;
    }
    return in;
}

void stoke_nn_output(stoke_graph *g, const char *name, stoke_tensor t)
{
    if (!g || g->status != STOKE_OK || t == STOKE_NO_TENSOR)
        return;
    if (t < 0 || t >= g->nnodes) {
        nn_g_fail(g, STOKE_ERR_ARG, "output %s: tensor handle %d is not a node of this graph",
                  name ? name : "?", (int)t);
        return;
    }
    if (!name || !name[0] || strlen(name) >= NN_NAME_MAX) {
        nn_g_fail(g, STOKE_ERR_ARG, "output of %s: name empty or too long", g->nodes[t].name);
        return;
    }
    if (stoke_graph_find(g, name) != STOKE_NO_TENSOR && stoke_graph_find(g, name) != t) {
        nn_g_fail(g, STOKE_ERR_ARG, "output name \"%s\" is used twice", name);
        return;
    }
    g->nodes[t].is_output = true;
    snprintf(g->nodes[t].out_name, sizeof g->nodes[t].out_name, "%s", name);
}

int stoke_graph_node_count(const stoke_graph *g) { return g ? g->nnodes : 0; }

stoke_nn_op stoke_graph_node_op(const stoke_graph *g, stoke_tensor t)
{
    const nn_node *n = g ? nn_graph_node(g, t) : NULL;
    return n ? n->op : STOKE_NN_OP_COUNT;
}

const stoke_shape *stoke_graph_shape(const stoke_graph *g, stoke_tensor t)
{
    const nn_node *n = g ? nn_graph_node(g, t) : NULL;
    return n ? &n->shape : NULL;
}

const char *stoke_graph_node_name(const stoke_graph *g, stoke_tensor t)
{
    const nn_node *n = g ? nn_graph_node(g, t) : NULL;
    return n ? n->name : NULL;
}

stoke_tensor stoke_graph_find(const stoke_graph *g, const char *name)
{
    if (!g || !name)
        return STOKE_NO_TENSOR;
    for (int i = 0; i < g->nnodes; i++) {
        const nn_node *n = &g->nodes[i];
        if ((n->is_output && strcmp(n->out_name, name) == 0) ||
            (n->op == STOKE_NN_INPUT && strcmp(n->name, name) == 0))
            return (stoke_tensor)i;
    }
    return STOKE_NO_TENSOR;
}

int stoke_graph_param_count(const stoke_graph *g) { return g ? g->nparams : 0; }

const stoke_param_info *stoke_graph_param(const stoke_graph *g, int i)
{
    return (g && i >= 0 && i < g->nparams) ? &g->params[i].info : NULL;
}

int64_t stoke_graph_trainable_elems(const stoke_graph *g)
{
    int64_t n = 0;
    for (int i = 0; g && i < g->nparams; i++)
        if (g->params[i].info.trainable)
            n += g->params[i].info.elems;
    return n;
}

/* One node's matmul and convolution FLOPs a sample: forward, and what backward
 * computes. Backward multiplies by the weights' gradient always (a node with weights
 * needs_grad) and by the input's gradient only when the input needs one: the backends
 * skip it (din NULL) for a first layer fed by the data, so counting "3 x forward"
 * overstated an MLP's step by a quarter of that layer's share. */
static void node_flops(const stoke_graph *g, const nn_node *n, double *fwd, double *bwd)
{
    *fwd = *bwd = 0;
    if (n->op != STOKE_NN_LINEAR && n->op != STOKE_NN_CONV2D && n->op != STOKE_NN_ATTENTION)
        return;
    const nn_node *src = &g->nodes[n->in[0]];
    const stoke_shape *in = &src->shape;
    const stoke_shape *out = &n->shape;
    bool din = src->needs_grad;
    if (n->op == STOKE_NN_ATTENTION) {
        double T = (double)out->dims[0], C = (double)out->dims[1];
        double qkv = 2.0 * T * C * 3 * C, proj = 2.0 * T * C * C, products = 2.0 * 2 * T * T * C;
        *fwd = qkv + proj + products;
        if (n->needs_grad) /* weight gradients of both projections, the output projection's
                              input gradient, and two products per forward product */
            *bwd = qkv + proj + proj + 2 * products + (din ? qkv : 0);
        return;
    }
    double k = n->op == STOKE_NN_LINEAR ? (double)in->dims[in->ndim - 1]
                                        : (double)in->dims[0] * n->kernel * n->kernel;
    *fwd = 2.0 * (double)stoke_shape_elems(out) * k;
    if (n->needs_grad)
        *bwd = *fwd + (din ? *fwd : 0);
}

/* The forward's FLOPs, and with `step` what backward computes too. */
static double graph_flops(const stoke_graph *g, bool step)
{
    if (!g || g->status != STOKE_OK)
        return 0;
    double f = 0;
    for (int i = 0; i < g->nnodes; i++) {
        double fwd, bwd;
        node_flops(g, &g->nodes[i], &fwd, &bwd);
        f += fwd + (step ? bwd : 0);
    }
    return f;
}

double stoke_graph_flops(const stoke_graph *g) { return graph_flops(g, false); }

double stoke_graph_step_flops(const stoke_graph *g) { return graph_flops(g, true); }
