/* graph.c - recording a static graph: builders with shape inference, the parameter
 * table, and PyTorch-default initialization from a seed. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "nn/graph_impl.h"

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
__attribute__((format(printf, 3, 4))) static stoke_tensor gfail(stoke_graph *g, stoke_status s,
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

static char *shape_str(const stoke_shape *s, char *buf, size_t size)
{
    return stoke_shape_format(s, buf, size);
}

static stoke_shape shape_of(int ndim, const int64_t *dims)
{
    stoke_shape s = {.ndim = ndim};
    for (int i = 0; i < ndim; i++)
        s.dims[i] = dims[i];
    return s;
}

static stoke_shape shape1(int64_t a) { return shape_of(1, (int64_t[]){a}); }
static stoke_shape shape2(int64_t a, int64_t b) { return shape_of(2, (int64_t[]){a, b}); }
static stoke_shape shape3(int64_t a, int64_t b, int64_t c)
{
    return shape_of(3, (int64_t[]){a, b, c});
}

/* A handle usable as an input: valid, from this graph. Silent for STOKE_NO_TENSOR so
 * that chains report only the first error. */
static bool usable(stoke_graph *g, stoke_tensor t, const char *what)
{
    if (!g || g->status != STOKE_OK)
        return false;
    if (t == STOKE_NO_TENSOR)
        return false;
    if (t < 0 || t >= g->nnodes) {
        gfail(g, STOKE_ERR_ARG, "%s: tensor handle %d is not a node of this graph", what, (int)t);
        return false;
    }
    if (nn_op_is_loss(g->nodes[t].op) || nn_op_is_metric(g->nodes[t].op)) {
        gfail(g, STOKE_ERR_ARG, "%s: input %s is a loss or metric, not a tensor", what,
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
            gfail(g, STOKE_ERR_ARG, "%s: layer name empty or longer than %d bytes",
                  stoke_nn_op_name(op), NN_NAME_MAX - 25);
            return NULL;
        }
        if (name_taken(g, name)) {
            gfail(g, STOKE_ERR_ARG, "%s: layer name \"%s\" is used twice", stoke_nn_op_name(op),
                  name);
            return NULL;
        }
    }
    if (g->nnodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 16;
        nn_node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
        if (!n) {
            gfail(g, STOKE_ERR_NOMEM, "out of memory adding a node");
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

static nn_node *node_with_inputs(stoke_graph *g, stoke_nn_op op, const char *name, stoke_tensor a,
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

static stoke_tensor handle(const stoke_graph *g, const nn_node *n)
{
    return (stoke_tensor)(n - g->nodes);
}

static int add_param(stoke_graph *g, nn_node *n, const char *suffix, stoke_shape shape,
                     nn_init init, double fan_in, double fan_out, bool trainable, bool lowp)
{
    if (g->status != STOKE_OK)
        return -1;
    if (g->nparams == g->cap_params) {
        int cap = g->cap_params ? 2 * g->cap_params : 16;
        nn_param *p = realloc(g->params, (size_t)cap * sizeof *p);
        if (!p) {
            gfail(g, STOKE_ERR_NOMEM, "out of memory adding a parameter");
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
    p->info.layer = handle(g, n);
    p->init = init;
    p->fan_in = fan_in;
    p->fan_out = fan_out;
    p->lowp = lowp;
    n->param[n->nparam++] = i;
    if (trainable)
        n->needs_grad = true;
    return i;
}

static bool positive(stoke_graph *g, const char *layer, const char *what, int64_t v)
{
    if (v >= 1)
        return true;
    gfail(g, STOKE_ERR_ARG, "%s: %s must be >= 1, got %lld", layer, what, (long long)v);
    return false;
}

stoke_tensor stoke_nn_input(stoke_graph *g, const char *name, stoke_dtype dtype,
                            const stoke_shape *shape)
{
    if (!g || g->status != STOKE_OK)
        return STOKE_NO_TENSOR;
    if (!name || !shape)
        return gfail(g, STOKE_ERR_ARG, "input: needs a name and a shape");
    if (dtype != STOKE_F32 && dtype != STOKE_I32)
        return gfail(g, STOKE_ERR_ARG, "%s: inputs are float32 or int32, not %s", name,
                     stoke_dtype_name(dtype));
    if (shape->ndim < 0 || shape->ndim > STOKE_MAX_DIMS)
        return gfail(g, STOKE_ERR_ARG, "%s: %d dimensions", name, shape->ndim);
    for (int i = 0; i < shape->ndim; i++)
        if (!positive(g, name, "every dimension", shape->dims[i]))
            return STOKE_NO_TENSOR;
    nn_node *n = new_node(g, STOKE_NN_INPUT, name);
    if (!n)
        return STOKE_NO_TENSOR;
    n->dtype = dtype;
    n->shape = *shape;
    return handle(g, n);
}

/* A float tensor input check shared by the layers. */
static const nn_node *float_input(stoke_graph *g, stoke_tensor x, const char *layer)
{
    if (!usable(g, x, layer))
        return NULL;
    const nn_node *in = &g->nodes[x];
    if (in->dtype != STOKE_F32) {
        gfail(g, STOKE_ERR_ARG, "%s: input %s holds int32 ids; only embedding and losses take them",
              layer, in->name);
        return NULL;
    }
    return in;
}

stoke_tensor stoke_nn_linear(stoke_graph *g, const char *name, stoke_tensor x, int64_t out_features,
                             bool bias)
{
    const char *layer = name ? name : "linear";
    const nn_node *in = float_input(g, x, layer);
    if (!in || !positive(g, layer, "out_features", out_features))
        return STOKE_NO_TENSOR;
    if (in->shape.ndim < 1)
        return gfail(g, STOKE_ERR_ARG, "%s: linear needs at least one dimension, input %s is ()",
                     layer, in->name);
    stoke_shape s = in->shape;
    int64_t fan_in = s.dims[s.ndim - 1];
    s.dims[s.ndim - 1] = out_features;
    if (!name)
        return gfail(g, STOKE_ERR_ARG, "linear: a layer with parameters needs a name");
    nn_node *n = node_with_inputs(g, STOKE_NN_LINEAR, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->features = out_features;
    n->bias = bias;
    add_param(g, n, "weight", shape2(out_features, fan_in), NN_INIT_UNIFORM_FAN_IN, (double)fan_in,
              (double)out_features, true, true);
    if (bias)
        add_param(g, n, "bias", shape1(out_features), NN_INIT_UNIFORM_FAN_IN, (double)fan_in, 0,
                  true, false);
    return g->status == STOKE_OK ? handle(g, n) : STOKE_NO_TENSOR;
}

/* Output size of a window op along one spatial dim, or 0 when it does not fit. */
static int64_t window_out(int64_t in, int kernel, int stride, int pad)
{
    int64_t span = in + 2 * (int64_t)pad - kernel;
    return span < 0 ? 0 : span / stride + 1;
}

static bool image_input(stoke_graph *g, const nn_node *in, const char *layer)
{
    if (in->shape.ndim == 3)
        return true;
    char b[64];
    gfail(g, STOKE_ERR_ARG, "%s: needs a (C, H, W) image, input %s is %s", layer, in->name,
          shape_str(&in->shape, b, sizeof b));
    return false;
}

stoke_tensor stoke_nn_conv2d(stoke_graph *g, const char *name, stoke_tensor x, int64_t out_channels,
                             int kernel, int stride, int padding, bool bias)
{
    const char *layer = name ? name : "conv2d";
    const nn_node *in = float_input(g, x, layer);
    if (!in || !image_input(g, in, layer) || !positive(g, layer, "out_channels", out_channels) ||
        !positive(g, layer, "kernel", kernel) || !positive(g, layer, "stride", stride))
        return STOKE_NO_TENSOR;
    if (padding < 0)
        return gfail(g, STOKE_ERR_ARG, "%s: padding %d < 0", layer, padding);
    if (!name)
        return gfail(g, STOKE_ERR_ARG, "conv2d: a layer with parameters needs a name");
    int64_t C = in->shape.dims[0], H = in->shape.dims[1], W = in->shape.dims[2];
    int64_t OH = window_out(H, kernel, stride, padding),
            OW = window_out(W, kernel, stride, padding);
    if (OH < 1 || OW < 1) {
        char b[64];
        return gfail(g, STOKE_ERR_ARG,
                     "%s: a %dx%d kernel with padding %d does not fit input %s %s", layer, kernel,
                     kernel, padding, in->name, shape_str(&in->shape, b, sizeof b));
    }
    nn_node *n = node_with_inputs(g, STOKE_NN_CONV2D, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = shape3(out_channels, OH, OW);
    n->features = out_channels;
    n->kernel = kernel;
    n->stride = stride;
    n->padding = padding;
    n->bias = bias;
    double fan_in = (double)C * kernel * kernel;
    add_param(g, n, "weight", shape_of(4, (int64_t[]){out_channels, C, kernel, kernel}),
              NN_INIT_UNIFORM_FAN_IN, fan_in, (double)out_channels * kernel * kernel, true, true);
    if (bias)
        add_param(g, n, "bias", shape1(out_channels), NN_INIT_UNIFORM_FAN_IN, fan_in, 0, true,
                  false);
    return g->status == STOKE_OK ? handle(g, n) : STOKE_NO_TENSOR;
}

static stoke_tensor pool(stoke_graph *g, stoke_nn_op op, stoke_tensor x, int kernel, int stride,
                         int padding)
{
    const char *layer = stoke_nn_op_name(op);
    const nn_node *in = float_input(g, x, layer);
    if (!in || !image_input(g, in, layer) || !positive(g, layer, "kernel", kernel))
        return STOKE_NO_TENSOR;
    if (stride == 0)
        stride = kernel;
    if (stride < 0 || padding < 0 || padding > kernel / 2)
        return gfail(g, STOKE_ERR_ARG,
                     "%s after %s: stride %d, padding %d (padding must be <= kernel/2 = %d)", layer,
                     in->name, stride, padding, kernel / 2);
    int64_t OH = window_out(in->shape.dims[1], kernel, stride, padding);
    int64_t OW = window_out(in->shape.dims[2], kernel, stride, padding);
    if (OH < 1 || OW < 1) {
        char b[64];
        return gfail(g, STOKE_ERR_ARG, "%s: a %dx%d window does not fit input %s %s", layer, kernel,
                     kernel, in->name, shape_str(&in->shape, b, sizeof b));
    }
    /* node_with_inputs may move the node array, and `in` with it */
    stoke_shape s = shape3(in->shape.dims[0], OH, OW);
    nn_node *n = node_with_inputs(g, op, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->kernel = kernel;
    n->stride = stride;
    n->padding = padding;
    return handle(g, n);
}

stoke_tensor stoke_nn_maxpool2d(stoke_graph *g, stoke_tensor x, int kernel, int stride, int padding)
{
    return pool(g, STOKE_NN_MAXPOOL2D, x, kernel, stride, padding);
}

stoke_tensor stoke_nn_avgpool2d(stoke_graph *g, stoke_tensor x, int kernel, int stride, int padding)
{
    return pool(g, STOKE_NN_AVGPOOL2D, x, kernel, stride, padding);
}

stoke_tensor stoke_nn_global_avgpool(stoke_graph *g, stoke_tensor x)
{
    const nn_node *in = float_input(g, x, "global_avgpool");
    if (!in || !image_input(g, in, "global_avgpool"))
        return STOKE_NO_TENSOR;
    int64_t C = in->shape.dims[0];
    nn_node *n = node_with_inputs(g, STOKE_NN_GLOBAL_AVGPOOL, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = shape1(C);
    return handle(g, n);
}

stoke_tensor stoke_nn_batchnorm(stoke_graph *g, const char *name, stoke_tensor x, float momentum,
                                float eps)
{
    const char *layer = name ? name : "batchnorm";
    const nn_node *in = float_input(g, x, layer);
    if (!in)
        return STOKE_NO_TENSOR;
    if (in->shape.ndim != 3 && in->shape.ndim != 1) {
        char b[64];
        return gfail(g, STOKE_ERR_ARG, "%s: batch norm takes (C, H, W) or (C), input %s is %s",
                     layer, in->name, shape_str(&in->shape, b, sizeof b));
    }
    if (!(momentum >= 0 && momentum <= 1) || !(eps > 0))
        return gfail(g, STOKE_ERR_ARG, "%s: momentum %g must be in [0, 1] and eps %g > 0", layer,
                     (double)momentum, (double)eps);
    if (!name)
        return gfail(g, STOKE_ERR_ARG, "batchnorm: a layer with parameters needs a name");
    int64_t C = in->shape.dims[0];
    stoke_shape s = in->shape; /* node_with_inputs may move the node array */
    nn_node *n = node_with_inputs(g, STOKE_NN_BATCHNORM, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->momentum = momentum;
    n->eps = eps;
    add_param(g, n, "weight", shape1(C), NN_INIT_ONES, 0, 0, true, false);
    add_param(g, n, "bias", shape1(C), NN_INIT_ZEROS, 0, 0, true, false);
    add_param(g, n, "running_mean", shape1(C), NN_INIT_ZEROS, 0, 0, false, false);
    add_param(g, n, "running_var", shape1(C), NN_INIT_ONES, 0, 0, false, false);
    return g->status == STOKE_OK ? handle(g, n) : STOKE_NO_TENSOR;
}

stoke_tensor stoke_nn_layernorm(stoke_graph *g, const char *name, stoke_tensor x, float eps)
{
    const char *layer = name ? name : "layernorm";
    const nn_node *in = float_input(g, x, layer);
    if (!in)
        return STOKE_NO_TENSOR;
    if (in->shape.ndim < 1)
        return gfail(g, STOKE_ERR_ARG, "%s: layer norm needs a last dimension", layer);
    if (!(eps > 0))
        return gfail(g, STOKE_ERR_ARG, "%s: eps %g must be > 0", layer, (double)eps);
    if (!name)
        return gfail(g, STOKE_ERR_ARG, "layernorm: a layer with parameters needs a name");
    int64_t C = in->shape.dims[in->shape.ndim - 1];
    stoke_shape s = in->shape; /* node_with_inputs may move the node array */
    nn_node *n = node_with_inputs(g, STOKE_NN_LAYERNORM, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->eps = eps;
    add_param(g, n, "weight", shape1(C), NN_INIT_ONES, 0, 0, true, false);
    add_param(g, n, "bias", shape1(C), NN_INIT_ZEROS, 0, 0, true, false);
    return g->status == STOKE_OK ? handle(g, n) : STOKE_NO_TENSOR;
}

static stoke_tensor unary(stoke_graph *g, stoke_nn_op op, stoke_tensor x)
{
    const nn_node *in = float_input(g, x, stoke_nn_op_name(op));
    if (!in)
        return STOKE_NO_TENSOR;
    stoke_shape s = in->shape;
    nn_node *n = node_with_inputs(g, op, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    return handle(g, n);
}

stoke_tensor stoke_nn_relu(stoke_graph *g, stoke_tensor x) { return unary(g, STOKE_NN_RELU, x); }
stoke_tensor stoke_nn_gelu(stoke_graph *g, stoke_tensor x) { return unary(g, STOKE_NN_GELU, x); }
stoke_tensor stoke_nn_tanh(stoke_graph *g, stoke_tensor x) { return unary(g, STOKE_NN_TANH, x); }
stoke_tensor stoke_nn_sigmoid(stoke_graph *g, stoke_tensor x)
{
    return unary(g, STOKE_NN_SIGMOID, x);
}

stoke_tensor stoke_nn_softmax(stoke_graph *g, stoke_tensor x)
{
    const nn_node *in = float_input(g, x, "softmax");
    if (in && in->shape.ndim < 1)
        return gfail(g, STOKE_ERR_ARG, "softmax: input %s has no last dimension", in->name);
    return unary(g, STOKE_NN_SOFTMAX, x);
}

stoke_tensor stoke_nn_dropout(stoke_graph *g, stoke_tensor x, float p)
{
    if (g && g->status == STOKE_OK && !(p >= 0 && p < 1))
        return gfail(g, STOKE_ERR_ARG, "dropout#%d: p %g must be in [0, 1)", g->nnodes, (double)p);
    stoke_tensor t = unary(g, STOKE_NN_DROPOUT, x);
    if (t != STOKE_NO_TENSOR)
        g->nodes[t].p = p;
    return t;
}

stoke_tensor stoke_nn_add(stoke_graph *g, stoke_tensor a, stoke_tensor b)
{
    const nn_node *na = float_input(g, a, "add");
    const nn_node *nb = na ? float_input(g, b, "add") : NULL;
    if (!na || !nb)
        return STOKE_NO_TENSOR;
    if (na->shape.ndim != nb->shape.ndim ||
        memcmp(na->shape.dims, nb->shape.dims, (size_t)na->shape.ndim * sizeof(int64_t)) != 0) {
        char b1[64], b2[64];
        return gfail(g, STOKE_ERR_ARG, "add#%d: shapes differ: %s is %s, %s is %s", g->nnodes,
                     na->name, shape_str(&na->shape, b1, sizeof b1), nb->name,
                     shape_str(&nb->shape, b2, sizeof b2));
    }
    if (a == b)
        return gfail(g, STOKE_ERR_ARG, "add#%d: both inputs are %s (use a scale instead)",
                     g->nnodes, na->name);
    stoke_shape s = na->shape;
    nn_node *n = node_with_inputs(g, STOKE_NN_ADD, NULL, a, b);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    return handle(g, n);
}

stoke_tensor stoke_nn_reshape(stoke_graph *g, stoke_tensor x, const stoke_shape *shape)
{
    const nn_node *in = float_input(g, x, "reshape");
    if (!in)
        return STOKE_NO_TENSOR;
    if (!shape || shape->ndim < 0 || shape->ndim > STOKE_MAX_DIMS)
        return gfail(g, STOKE_ERR_ARG, "reshape of %s: bad shape", in->name);
    for (int i = 0; i < shape->ndim; i++)
        if (shape->dims[i] < 1)
            return gfail(g, STOKE_ERR_ARG, "reshape of %s: dimension %d is %lld", in->name, i,
                         (long long)shape->dims[i]);
    if (stoke_shape_elems(shape) != stoke_shape_elems(&in->shape)) {
        char b1[64], b2[64];
        return gfail(g, STOKE_ERR_ARG, "reshape of %s: %s has %lld elements, %s has %lld", in->name,
                     shape_str(&in->shape, b1, sizeof b1), (long long)stoke_shape_elems(&in->shape),
                     shape_str(shape, b2, sizeof b2), (long long)stoke_shape_elems(shape));
    }
    nn_node *n = node_with_inputs(g, STOKE_NN_RESHAPE, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = *shape;
    return handle(g, n);
}

stoke_tensor stoke_nn_flatten(stoke_graph *g, stoke_tensor x)
{
    if (!usable(g, x, "flatten"))
        return STOKE_NO_TENSOR;
    stoke_shape s = shape1(stoke_shape_elems(&g->nodes[x].shape));
    return stoke_nn_reshape(g, x, &s);
}

stoke_tensor stoke_nn_embedding(stoke_graph *g, const char *name, stoke_tensor ids, int64_t vocab,
                                int64_t dim)
{
    const char *layer = name ? name : "embedding";
    if (!usable(g, ids, layer) || !positive(g, layer, "vocab", vocab) ||
        !positive(g, layer, "dim", dim))
        return STOKE_NO_TENSOR;
    const nn_node *in = &g->nodes[ids];
    if (in->op != STOKE_NN_INPUT || in->dtype != STOKE_I32 || in->shape.ndim > 1)
        return gfail(g, STOKE_ERR_ARG, "%s: needs an int32 input of shape (T) or (), got %s", layer,
                     in->name);
    if (!name)
        return gfail(g, STOKE_ERR_ARG, "embedding: a layer with parameters needs a name");
    stoke_shape s = in->shape.ndim == 1 ? shape2(in->shape.dims[0], dim) : shape1(dim);
    nn_node *n = node_with_inputs(g, STOKE_NN_EMBEDDING, name, ids, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->vocab = vocab;
    n->features = dim;
    int p = add_param(g, n, "weight", shape2(vocab, dim), NN_INIT_NORMAL, 0, 0, true, false);
    if (p >= 0)
        g->params[p].std = 1.0;
    return g->status == STOKE_OK ? handle(g, n) : STOKE_NO_TENSOR;
}

static const nn_node *sequence_input(stoke_graph *g, stoke_tensor x, const char *layer)
{
    const nn_node *in = float_input(g, x, layer);
    if (in && in->shape.ndim != 2) {
        char b[64];
        gfail(g, STOKE_ERR_ARG, "%s: needs a (T, C) sequence, input %s is %s", layer, in->name,
              shape_str(&in->shape, b, sizeof b));
        return NULL;
    }
    return in;
}

stoke_tensor stoke_nn_attention(stoke_graph *g, const char *name, stoke_tensor x, int heads)
{
    const char *layer = name ? name : "attention";
    const nn_node *in = sequence_input(g, x, layer);
    if (!in || !positive(g, layer, "heads", heads))
        return STOKE_NO_TENSOR;
    int64_t T = in->shape.dims[0], C = in->shape.dims[1];
    if (C % heads != 0)
        return gfail(g, STOKE_ERR_ARG, "%s: %lld channels of %s do not split into %d heads", layer,
                     (long long)C, in->name, heads);
    if (!name)
        return gfail(g, STOKE_ERR_ARG, "attention: a layer with parameters needs a name");
    nn_node *n = node_with_inputs(g, STOKE_NN_ATTENTION, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = shape2(T, C);
    n->heads = heads;
    n->features = C;
    n->bias = true;
    /* nn.MultiheadAttention._reset_parameters: xavier_uniform_ on the packed (3C, C)
     * in_proj_weight (fan_in C, fan_out 3C), zero biases; out_proj keeps nn.Linear's
     * default weight init. */
    add_param(g, n, "in_proj_weight", shape2(3 * C, C), NN_INIT_XAVIER, (double)C, (double)(3 * C),
              true, true);
    add_param(g, n, "in_proj_bias", shape1(3 * C), NN_INIT_ZEROS, 0, 0, true, false);
    add_param(g, n, "out_proj.weight", shape2(C, C), NN_INIT_UNIFORM_FAN_IN, (double)C, (double)C,
              true, true);
    add_param(g, n, "out_proj.bias", shape1(C), NN_INIT_ZEROS, 0, 0, true, false);
    return g->status == STOKE_OK ? handle(g, n) : STOKE_NO_TENSOR;
}

stoke_tensor stoke_nn_patchify(stoke_graph *g, stoke_tensor x, int patch)
{
    const nn_node *in = float_input(g, x, "patchify");
    if (!in || !image_input(g, in, "patchify") || !positive(g, "patchify", "patch", patch))
        return STOKE_NO_TENSOR;
    int64_t C = in->shape.dims[0], H = in->shape.dims[1], W = in->shape.dims[2];
    if (H % patch || W % patch)
        return gfail(g, STOKE_ERR_ARG,
                     "patchify: %lldx%lld image %s is not divisible into %dx%d patches",
                     (long long)H, (long long)W, in->name, patch, patch);
    nn_node *n = node_with_inputs(g, STOKE_NN_PATCHIFY, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = shape2((H / patch) * (W / patch), C * patch * patch);
    n->patch = patch;
    return handle(g, n);
}

stoke_tensor stoke_nn_pos_embed(stoke_graph *g, const char *name, stoke_tensor x)
{
    const char *layer = name ? name : "pos_embed";
    const nn_node *in = sequence_input(g, x, layer);
    if (!in)
        return STOKE_NO_TENSOR;
    if (!name)
        return gfail(g, STOKE_ERR_ARG, "pos_embed: a layer with parameters needs a name");
    stoke_shape s = in->shape;
    nn_node *n = node_with_inputs(g, STOKE_NN_POS_EMBED, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    int p = add_param(g, n, "weight", s, NN_INIT_NORMAL, 0, 0, true, false);
    if (p >= 0)
        g->params[p].std = 0.02;
    return g->status == STOKE_OK ? handle(g, n) : STOKE_NO_TENSOR;
}

stoke_tensor stoke_nn_seq_mean(stoke_graph *g, stoke_tensor x)
{
    const nn_node *in = sequence_input(g, x, "seq_mean");
    if (!in)
        return STOKE_NO_TENSOR;
    int64_t C = in->shape.dims[1];
    nn_node *n = node_with_inputs(g, STOKE_NN_SEQ_MEAN, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = shape1(C);
    return handle(g, n);
}

stoke_tensor stoke_nn_slice(stoke_graph *g, stoke_tensor x, int64_t begin, int64_t end)
{
    const nn_node *in = float_input(g, x, "slice");
    if (!in)
        return STOKE_NO_TENSOR;
    char b[64];
    if (in->shape.ndim < 1)
        return gfail(g, STOKE_ERR_ARG, "slice of %s: needs at least one dimension, got ()",
                     in->name);
    int64_t C = in->shape.dims[in->shape.ndim - 1];
    if (!(begin >= 0 && begin < end && end <= C))
        return gfail(g, STOKE_ERR_ARG,
                     "slice of %s: columns [%lld, %lld) are not within the "
                     "last dim of %s",
                     in->name, (long long)begin, (long long)end,
                     shape_str(&in->shape, b, sizeof b));
    stoke_shape s = in->shape;
    s.dims[s.ndim - 1] = end - begin;
    nn_node *n = node_with_inputs(g, STOKE_NN_SLICE, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->begin = begin;
    n->features = end - begin;
    return handle(g, n);
}

/* Losses and metrics: a scalar per batch; every one is an output. */
static stoke_tensor scalar_node(stoke_graph *g, stoke_nn_op op, stoke_tensor a, stoke_tensor b)
{
    nn_node *n = node_with_inputs(g, op, NULL, a, b);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape.ndim = 0;
    n->is_output = true;
    snprintf(n->out_name, sizeof n->out_name, "%s:%s", nn_op_is_loss(op) ? "loss" : "metric",
             n->name);
    return handle(g, n);
}

static bool class_pair(stoke_graph *g, stoke_nn_op op, stoke_tensor logits, stoke_tensor target)
{
    const char *what = stoke_nn_op_name(op);
    const nn_node *l = float_input(g, logits, what);
    if (!l || !usable(g, target, what))
        return false;
    const nn_node *t = &g->nodes[target];
    char b[64];
    if (l->shape.ndim != 1 || l->shape.dims[0] < 2) {
        gfail(g, STOKE_ERR_ARG, "%s#%d: needs logits (K) with K >= 2 classes, %s is %s", what,
              g->nnodes, l->name, shape_str(&l->shape, b, sizeof b));
        return false;
    }
    if (t->dtype != STOKE_I32 || t->shape.ndim != 0) {
        gfail(g, STOKE_ERR_ARG, "%s#%d: target %s must be an int32 class of shape (), not %s %s",
              what, g->nnodes, t->name, stoke_dtype_name(t->dtype),
              shape_str(&t->shape, b, sizeof b));
        return false;
    }
    return true;
}

static bool same_elems(stoke_graph *g, stoke_nn_op op, stoke_tensor pred, stoke_tensor target)
{
    const char *what = stoke_nn_op_name(op);
    const nn_node *p = float_input(g, pred, what);
    const nn_node *t = p ? float_input(g, target, what) : NULL;
    if (!p || !t)
        return false;
    if (stoke_shape_elems(&p->shape) != stoke_shape_elems(&t->shape)) {
        char b1[64], b2[64];
        gfail(g, STOKE_ERR_ARG, "%s#%d: prediction %s is %s but target %s is %s", what, g->nnodes,
              p->name, shape_str(&p->shape, b1, sizeof b1), t->name,
              shape_str(&t->shape, b2, sizeof b2));
        return false;
    }
    return true;
}

stoke_tensor stoke_nn_cross_entropy(stoke_graph *g, stoke_tensor logits, stoke_tensor target,
                                    float label_smoothing)
{
    if (!class_pair(g, STOKE_NN_CROSS_ENTROPY, logits, target))
        return STOKE_NO_TENSOR;
    if (!(label_smoothing >= 0 && label_smoothing < 1))
        return gfail(g, STOKE_ERR_ARG, "cross_entropy#%d: label smoothing %g must be in [0, 1)",
                     g->nnodes, (double)label_smoothing);
    stoke_tensor t = scalar_node(g, STOKE_NN_CROSS_ENTROPY, logits, target);
    if (t != STOKE_NO_TENSOR)
        g->nodes[t].smoothing = label_smoothing;
    return t;
}

stoke_tensor stoke_nn_policy_gradient(stoke_graph *g, stoke_tensor logits, stoke_tensor target,
                                      float clip, float entropy)
{
    const char *what = "policy_gradient";
    const nn_node *l = float_input(g, logits, what);
    const nn_node *t = l ? float_input(g, target, what) : NULL;
    if (!l || !t)
        return STOKE_NO_TENSOR;
    char b[64];
    if (l->shape.ndim != 1 || l->shape.dims[0] < 2)
        return gfail(g, STOKE_ERR_ARG, "%s#%d: needs logits (K) with K >= 2 actions, %s is %s",
                     what, g->nnodes, l->name, shape_str(&l->shape, b, sizeof b));
    if (t->shape.ndim != 1 || (t->shape.dims[0] != 2 && t->shape.dims[0] != 3))
        return gfail(g, STOKE_ERR_ARG,
                     "%s#%d: target %s must be fp32 [action, advantage] (2) or "
                     "[action, advantage, old_log_prob] (3), not %s",
                     what, g->nnodes, t->name, shape_str(&t->shape, b, sizeof b));
    bool ppo = t->shape.dims[0] == 3;
    if (ppo ? !(clip > 0 && clip < 1) : clip != 0)
        return gfail(g, STOKE_ERR_ARG,
                     ppo ? "%s#%d: PPO's clip epsilon %g must be in (0, 1)"
                         : "%s#%d: clip %g needs the old log-probability (a 3-value target)",
                     what, g->nnodes, (double)clip);
    if (!(entropy >= 0 && isfinite(entropy)))
        return gfail(g, STOKE_ERR_ARG, "%s#%d: entropy coefficient %g must be finite and >= 0",
                     what, g->nnodes, (double)entropy);
    stoke_tensor r = scalar_node(g, STOKE_NN_POLICY_GRADIENT, logits, target);
    if (r != STOKE_NO_TENSOR) {
        g->nodes[r].clip = clip;
        g->nodes[r].entropy = entropy;
    }
    return r;
}

stoke_tensor stoke_nn_bce_logits(stoke_graph *g, stoke_tensor logits, stoke_tensor target)
{
    if (!same_elems(g, STOKE_NN_BCE_LOGITS, logits, target))
        return STOKE_NO_TENSOR;
    return scalar_node(g, STOKE_NN_BCE_LOGITS, logits, target);
}

stoke_tensor stoke_nn_mse(stoke_graph *g, stoke_tensor pred, stoke_tensor target)
{
    if (!same_elems(g, STOKE_NN_MSE, pred, target))
        return STOKE_NO_TENSOR;
    return scalar_node(g, STOKE_NN_MSE, pred, target);
}

stoke_tensor stoke_nn_l1(stoke_graph *g, stoke_tensor pred, stoke_tensor target)
{
    if (!same_elems(g, STOKE_NN_L1, pred, target))
        return STOKE_NO_TENSOR;
    return scalar_node(g, STOKE_NN_L1, pred, target);
}

stoke_tensor stoke_nn_accuracy(stoke_graph *g, stoke_tensor logits, stoke_tensor target)
{
    if (!class_pair(g, STOKE_NN_ACCURACY, logits, target))
        return STOKE_NO_TENSOR;
    return scalar_node(g, STOKE_NN_ACCURACY, logits, target);
}

stoke_tensor stoke_nn_mae(stoke_graph *g, stoke_tensor pred, stoke_tensor target)
{
    if (!same_elems(g, STOKE_NN_MAE, pred, target))
        return STOKE_NO_TENSOR;
    return scalar_node(g, STOKE_NN_MAE, pred, target);
}

void stoke_nn_loss_weight(stoke_graph *g, stoke_tensor loss, float weight)
{
    if (!g || g->status != STOKE_OK || loss == STOKE_NO_TENSOR)
        return;
    if (loss < 0 || loss >= g->nnodes || !nn_op_is_loss(g->nodes[loss].op)) {
        gfail(g, STOKE_ERR_ARG, "loss weight: tensor %d is not a loss", (int)loss);
        return;
    }
    if (!isfinite(weight) || weight < 0) {
        gfail(g, STOKE_ERR_ARG, "loss weight of %s: %g must be finite and >= 0",
              g->nodes[loss].name, (double)weight);
        return;
    }
    g->nodes[loss].loss_weight = weight;
}

void stoke_nn_output(stoke_graph *g, const char *name, stoke_tensor t)
{
    if (!g || g->status != STOKE_OK || t == STOKE_NO_TENSOR)
        return;
    if (t < 0 || t >= g->nnodes) {
        gfail(g, STOKE_ERR_ARG, "output %s: tensor handle %d is not a node of this graph",
              name ? name : "?", (int)t);
        return;
    }
    if (!name || !name[0] || strlen(name) >= NN_NAME_MAX) {
        gfail(g, STOKE_ERR_ARG, "output of %s: name empty or too long", g->nodes[t].name);
        return;
    }
    if (stoke_graph_find(g, name) != STOKE_NO_TENSOR && stoke_graph_find(g, name) != t) {
        gfail(g, STOKE_ERR_ARG, "output name \"%s\" is used twice", name);
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

/* Each parameter gets its own SplitMix64 stream keyed by (seed, FNV-1a of its name), so
 * the values do not depend on the layer order. */
static double uniform01(uint64_t *s)
{ /* [0, 1) with 53 bits */
    return stoke_u64_to_unit(stoke_splitmix64_next(s));
}

void nn_param_init(const nn_param *p, uint64_t seed, float *out)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *c = p->name; *c; c++)
        h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
    uint64_t s = seed ^ h;
    stoke_splitmix64_next(&s);
    int64_t n = p->info.elems;
    double bound = 0;
    switch (p->init) {
    case NN_INIT_UNIFORM_FAN_IN:
        /* kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in) =
         * 1/sqrt(fan_in); PyTorch's bias bound is the same 1/sqrt(fan_in). */
        bound = 1.0 / sqrt(p->fan_in);
        break;
    case NN_INIT_XAVIER: bound = sqrt(6.0 / (p->fan_in + p->fan_out)); break;
    case NN_INIT_NORMAL:
        for (int64_t i = 0; i < n; i += 2) { /* Box-Muller, both values used */
            double u1 = 1.0 - uniform01(&s), u2 = uniform01(&s);
            double r = sqrt(-2.0 * log(u1)) * p->std;
            out[i] = (float)(r * cos(2 * M_PI * u2));
            if (i + 1 < n)
                out[i + 1] = (float)(r * sin(2 * M_PI * u2));
        }
        return;
    case NN_INIT_ZEROS:
    case NN_INIT_ONES:
        for (int64_t i = 0; i < n; i++)
            out[i] = p->init == NN_INIT_ONES ? 1.0f : 0.0f;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = (float)((2.0 * uniform01(&s) - 1.0) * bound);
        /* rounding to float may reach the bound itself; PyTorch's U(-b, b) is open */
        out[i] = fabsf(v) < (float)bound ? v : 0.0f;
    }
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
