/* graph_ops.c - recording the element-wise, shape and sequence ops (activations,
 * softmax, dropout, add, reshape, embedding, attention, patches, slices): their shape
 * rules, checks and parameters. */
#include <string.h>

#include "nn/graph_build.h"

static stoke_tensor unary(stoke_graph *g, stoke_nn_op op, stoke_tensor x)
{
    const nn_node *in = nn_g_float_input(g, x, stoke_nn_op_name(op));
    if (!in)
        return STOKE_NO_TENSOR;
    stoke_shape s = in->shape;
    nn_node *n = nn_g_node_with_inputs(g, op, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    return nn_g_handle(g, n);
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
    const nn_node *in = nn_g_float_input(g, x, "softmax");
    if (in && in->shape.ndim < 1)
        return nn_g_fail(g, STOKE_ERR_ARG, "softmax: input %s has no last dimension", in->name);
    return unary(g, STOKE_NN_SOFTMAX, x);
}

stoke_tensor stoke_nn_dropout(stoke_graph *g, stoke_tensor x, float p)
{
    if (g && g->status == STOKE_OK && !(p >= 0 && p < 1))
        return nn_g_fail(g, STOKE_ERR_ARG, "dropout#%d: p %g must be in [0, 1)", g->nnodes,
                         (double)p);
    stoke_tensor t = unary(g, STOKE_NN_DROPOUT, x);
    if (t != STOKE_NO_TENSOR)
        g->nodes[t].p = p;
    return t;
}

stoke_tensor stoke_nn_add(stoke_graph *g, stoke_tensor a, stoke_tensor b)
{
    const nn_node *na = nn_g_float_input(g, a, "add");
    const nn_node *nb = na ? nn_g_float_input(g, b, "add") : NULL;
    if (!na || !nb)
        return STOKE_NO_TENSOR;
    if (na->shape.ndim != nb->shape.ndim ||
        memcmp(na->shape.dims, nb->shape.dims, (size_t)na->shape.ndim * sizeof(int64_t)) != 0) {
        char b1[64], b2[64];
        return nn_g_fail(g, STOKE_ERR_ARG, "add#%d: shapes differ: %s is %s, %s is %s", g->nnodes,
                         na->name, nn_g_shape_str(&na->shape, b1, sizeof b1), nb->name,
                         nn_g_shape_str(&nb->shape, b2, sizeof b2));
    }
    if (a == b)
        return nn_g_fail(g, STOKE_ERR_ARG, "add#%d: both inputs are %s (use a scale instead)",
                         g->nnodes, na->name);
    stoke_shape s = na->shape;
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_ADD, NULL, a, b);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    return nn_g_handle(g, n);
}

stoke_tensor stoke_nn_reshape(stoke_graph *g, stoke_tensor x, const stoke_shape *shape)
{
    const nn_node *in = nn_g_float_input(g, x, "reshape");
    if (!in)
        return STOKE_NO_TENSOR;
    if (!shape || shape->ndim < 0 || shape->ndim > STOKE_MAX_DIMS)
        return nn_g_fail(g, STOKE_ERR_ARG, "reshape of %s: bad shape", in->name);
    for (int i = 0; i < shape->ndim; i++)
        if (shape->dims[i] < 1)
            return nn_g_fail(g, STOKE_ERR_ARG, "reshape of %s: dimension %d is %lld", in->name, i,
                             (long long)shape->dims[i]);
    if (stoke_shape_elems(shape) != stoke_shape_elems(&in->shape)) {
        char b1[64], b2[64];
        return nn_g_fail(g, STOKE_ERR_ARG, "reshape of %s: %s has %lld elements, %s has %lld",
                         in->name, nn_g_shape_str(&in->shape, b1, sizeof b1),
                         (long long)stoke_shape_elems(&in->shape),
                         nn_g_shape_str(shape, b2, sizeof b2), (long long)stoke_shape_elems(shape));
    }
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_RESHAPE, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = *shape;
    return nn_g_handle(g, n);
}

stoke_tensor stoke_nn_flatten(stoke_graph *g, stoke_tensor x)
{
    if (!nn_g_usable(g, x, "flatten"))
        return STOKE_NO_TENSOR;
    stoke_shape s = nn_g_shape1(stoke_shape_elems(&g->nodes[x].shape));
    return stoke_nn_reshape(g, x, &s);
}

stoke_tensor stoke_nn_embedding(stoke_graph *g, const char *name, stoke_tensor ids, int64_t vocab,
                                int64_t dim)
{
    const char *layer = name ? name : "embedding";
    if (!nn_g_usable(g, ids, layer) || !nn_g_positive(g, layer, "vocab", vocab) ||
        !nn_g_positive(g, layer, "dim", dim))
        return STOKE_NO_TENSOR;
    const nn_node *in = &g->nodes[ids];
    if (in->op != STOKE_NN_INPUT || in->dtype != STOKE_I32 || in->shape.ndim > 1)
        return nn_g_fail(g, STOKE_ERR_ARG, "%s: needs an int32 input of shape (T) or (), got %s",
                         layer, in->name);
    if (!name)
        return nn_g_fail(g, STOKE_ERR_ARG, "embedding: a layer with parameters needs a name");
    stoke_shape s = in->shape.ndim == 1 ? nn_g_shape2(in->shape.dims[0], dim) : nn_g_shape1(dim);
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_EMBEDDING, name, ids, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->vocab = vocab;
    n->features = dim;
    int p =
        nn_g_add_param(g, n, "weight", nn_g_shape2(vocab, dim), NN_INIT_NORMAL, 0, 0, true, false);
    if (p >= 0)
        g->params[p].std = 1.0;
    return g->status == STOKE_OK ? nn_g_handle(g, n) : STOKE_NO_TENSOR;
}

static const nn_node *sequence_input(stoke_graph *g, stoke_tensor x, const char *layer)
{
    const nn_node *in = nn_g_float_input(g, x, layer);
    if (in && in->shape.ndim != 2) {
        char b[64];
        nn_g_fail(g, STOKE_ERR_ARG, "%s: needs a (T, C) sequence, input %s is %s", layer, in->name,
                  nn_g_shape_str(&in->shape, b, sizeof b));
        return NULL;
    }
    return in;
}

stoke_tensor stoke_nn_attention(stoke_graph *g, const char *name, stoke_tensor x, int heads)
{
    const char *layer = name ? name : "attention";
    const nn_node *in = sequence_input(g, x, layer);
    if (!in || !nn_g_positive(g, layer, "heads", heads))
        return STOKE_NO_TENSOR;
    int64_t T = in->shape.dims[0], C = in->shape.dims[1];
    if (C % heads != 0)
        return nn_g_fail(g, STOKE_ERR_ARG, "%s: %lld channels of %s do not split into %d heads",
                         layer, (long long)C, in->name, heads);
    if (!name)
        return nn_g_fail(g, STOKE_ERR_ARG, "attention: a layer with parameters needs a name");
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_ATTENTION, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = nn_g_shape2(T, C);
    n->heads = heads;
    n->features = C;
    n->bias = true;
    /* nn.MultiheadAttention._reset_parameters: xavier_uniform_ on the packed (3C, C)
     * in_proj_weight (fan_in C, fan_out 3C), zero biases; out_proj keeps nn.Linear's
     * default weight init. */
    nn_g_add_param(g, n, "in_proj_weight", nn_g_shape2(3 * C, C), NN_INIT_XAVIER, (double)C,
                   (double)(3 * C), true, true);
    nn_g_add_param(g, n, "in_proj_bias", nn_g_shape1(3 * C), NN_INIT_ZEROS, 0, 0, true, false);
    nn_g_add_param(g, n, "out_proj.weight", nn_g_shape2(C, C), NN_INIT_UNIFORM_FAN_IN, (double)C,
                   (double)C, true, true);
    nn_g_add_param(g, n, "out_proj.bias", nn_g_shape1(C), NN_INIT_ZEROS, 0, 0, true, false);
    return g->status == STOKE_OK ? nn_g_handle(g, n) : STOKE_NO_TENSOR;
}

stoke_tensor stoke_nn_patchify(stoke_graph *g, stoke_tensor x, int patch)
{
    const nn_node *in = nn_g_float_input(g, x, "patchify");
    if (!in || !nn_g_image_input(g, in, "patchify") ||
        !nn_g_positive(g, "patchify", "patch", patch))
        return STOKE_NO_TENSOR;
    int64_t C = in->shape.dims[0], H = in->shape.dims[1], W = in->shape.dims[2];
    if (H % patch || W % patch)
        return nn_g_fail(g, STOKE_ERR_ARG,
                         "patchify: %lldx%lld image %s is not divisible into %dx%d patches",
                         (long long)H, (long long)W, in->name, patch, patch);
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_PATCHIFY, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = nn_g_shape2((H / patch) * (W / patch), C * patch * patch);
    n->patch = patch;
    return nn_g_handle(g, n);
}

stoke_tensor stoke_nn_pos_embed(stoke_graph *g, const char *name, stoke_tensor x)
{
    const char *layer = name ? name : "pos_embed";
    const nn_node *in = sequence_input(g, x, layer);
    if (!in)
        return STOKE_NO_TENSOR;
    if (!name)
        return nn_g_fail(g, STOKE_ERR_ARG, "pos_embed: a layer with parameters needs a name");
    stoke_shape s = in->shape;
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_POS_EMBED, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    int p = nn_g_add_param(g, n, "weight", s, NN_INIT_NORMAL, 0, 0, true, false);
    if (p >= 0)
        g->params[p].std = 0.02;
    return g->status == STOKE_OK ? nn_g_handle(g, n) : STOKE_NO_TENSOR;
}

stoke_tensor stoke_nn_seq_mean(stoke_graph *g, stoke_tensor x)
{
    const nn_node *in = sequence_input(g, x, "seq_mean");
    if (!in)
        return STOKE_NO_TENSOR;
    int64_t C = in->shape.dims[1];
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_SEQ_MEAN, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = nn_g_shape1(C);
    return nn_g_handle(g, n);
}

stoke_tensor stoke_nn_slice(stoke_graph *g, stoke_tensor x, int64_t begin, int64_t end)
{
    const nn_node *in = nn_g_float_input(g, x, "slice");
    if (!in)
        return STOKE_NO_TENSOR;
    char b[64];
    if (in->shape.ndim < 1)
        return nn_g_fail(g, STOKE_ERR_ARG, "slice of %s: needs at least one dimension, got ()",
                         in->name);
    int64_t C = in->shape.dims[in->shape.ndim - 1];
    if (!(begin >= 0 && begin < end && end <= C))
        return nn_g_fail(g, STOKE_ERR_ARG,
                         "slice of %s: columns [%lld, %lld) are not within the "
                         "last dim of %s",
                         in->name, (long long)begin, (long long)end,
                         nn_g_shape_str(&in->shape, b, sizeof b));
    stoke_shape s = in->shape;
    s.dims[s.ndim - 1] = end - begin;
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_SLICE, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->begin = begin;
    n->features = end - begin;
    return nn_g_handle(g, n);
}
