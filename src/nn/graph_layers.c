/* graph_layers.c - recording the layers over features and images (linear, conv2d, the
 * pools, batch and layer norm): their shape rules, checks and parameters. */
#include "nn/graph_build.h"

stoke_tensor stoke_nn_linear(stoke_graph *g, const char *name, stoke_tensor x, int64_t out_features,
                             bool bias)
{
    const char *layer = name ? name : "linear";
    const nn_node *in = nn_g_float_input(g, x, layer);
    if (!in || !nn_g_positive(g, layer, "out_features", out_features))
        return STOKE_NO_TENSOR;
    if (in->shape.ndim < 1)
        return nn_g_fail(g, STOKE_ERR_ARG,
                         "%s: linear needs at least one dimension, input %s is ()", layer,
                         in->name);
    stoke_shape s = in->shape;
    int64_t fan_in = s.dims[s.ndim - 1];
    s.dims[s.ndim - 1] = out_features;
    if (!name)
        return nn_g_fail(g, STOKE_ERR_ARG, "linear: a layer with parameters needs a name");
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_LINEAR, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->features = out_features;
    n->bias = bias;
    nn_g_add_param(g, n, "weight", nn_g_shape2(out_features, fan_in), NN_INIT_UNIFORM_FAN_IN,
                   (double)fan_in, (double)out_features, true, true);
    if (bias)
        nn_g_add_param(g, n, "bias", nn_g_shape1(out_features), NN_INIT_UNIFORM_FAN_IN,
                       (double)fan_in, 0, true, false);
    return g->status == STOKE_OK ? nn_g_handle(g, n) : STOKE_NO_TENSOR;
}

/* Output size of a window op along one spatial dim, or 0 when it does not fit. */
static int64_t window_out(int64_t in, int kernel, int stride, int pad)
{
    int64_t span = in + 2 * (int64_t)pad - kernel;
    return span < 0 ? 0 : span / stride + 1;
}

bool nn_g_image_input(stoke_graph *g, const nn_node *in, const char *layer)
{
    if (in->shape.ndim == 3)
        return true;
    char b[64];
    nn_g_fail(g, STOKE_ERR_ARG, "%s: needs a (C, H, W) image, input %s is %s", layer, in->name,
              nn_g_shape_str(&in->shape, b, sizeof b));
    return false;
}

stoke_tensor stoke_nn_conv2d(stoke_graph *g, const char *name, stoke_tensor x, int64_t out_channels,
                             int kernel, int stride, int padding, bool bias)
{
    const char *layer = name ? name : "conv2d";
    const nn_node *in = nn_g_float_input(g, x, layer);
    if (!in || !nn_g_image_input(g, in, layer) ||
        !nn_g_positive(g, layer, "out_channels", out_channels) ||
        !nn_g_positive(g, layer, "kernel", kernel) || !nn_g_positive(g, layer, "stride", stride))
        return STOKE_NO_TENSOR;
    if (padding < 0)
        return nn_g_fail(g, STOKE_ERR_ARG, "%s: padding %d < 0", layer, padding);
    if (!name)
        return nn_g_fail(g, STOKE_ERR_ARG, "conv2d: a layer with parameters needs a name");
    int64_t C = in->shape.dims[0], H = in->shape.dims[1], W = in->shape.dims[2];
    int64_t OH = window_out(H, kernel, stride, padding),
            OW = window_out(W, kernel, stride, padding);
    if (OH < 1 || OW < 1) {
        char b[64];
        return nn_g_fail(
            g, STOKE_ERR_ARG, "%s: a %dx%d kernel with padding %d does not fit input %s %s", layer,
            kernel, kernel, padding, in->name, nn_g_shape_str(&in->shape, b, sizeof b));
    }
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_CONV2D, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = nn_g_shape3(out_channels, OH, OW);
    n->features = out_channels;
    n->kernel = kernel;
    n->stride = stride;
    n->padding = padding;
    n->bias = bias;
    double fan_in = (double)C * kernel * kernel;
    nn_g_add_param(g, n, "weight", nn_g_shape_of(4, (int64_t[]){out_channels, C, kernel, kernel}),
                   NN_INIT_UNIFORM_FAN_IN, fan_in, (double)out_channels * kernel * kernel, true,
                   true);
    if (bias)
        nn_g_add_param(g, n, "bias", nn_g_shape1(out_channels), NN_INIT_UNIFORM_FAN_IN, fan_in, 0,
                       true, false);
    return g->status == STOKE_OK ? nn_g_handle(g, n) : STOKE_NO_TENSOR;
}

static stoke_tensor pool(stoke_graph *g, stoke_nn_op op, stoke_tensor x, int kernel, int stride,
                         int padding)
{
    const char *layer = stoke_nn_op_name(op);
    const nn_node *in = nn_g_float_input(g, x, layer);
    if (!in || !nn_g_image_input(g, in, layer) || !nn_g_positive(g, layer, "kernel", kernel))
        return STOKE_NO_TENSOR;
    if (stride == 0)
        stride = kernel;
    if (stride < 0 || padding < 0 || padding > kernel / 2)
        return nn_g_fail(g, STOKE_ERR_ARG,
                         "%s after %s: stride %d, padding %d (padding must be <= kernel/2 = %d)",
                         layer, in->name, stride, padding, kernel / 2);
    int64_t OH = window_out(in->shape.dims[1], kernel, stride, padding);
    int64_t OW = window_out(in->shape.dims[2], kernel, stride, padding);
    if (OH < 1 || OW < 1) {
        char b[64];
        return nn_g_fail(g, STOKE_ERR_ARG, "%s: a %dx%d window does not fit input %s %s", layer,
                         kernel, kernel, in->name, nn_g_shape_str(&in->shape, b, sizeof b));
    }
    /* nn_g_node_with_inputs may move the node array, and `in` with it */
    stoke_shape s = nn_g_shape3(in->shape.dims[0], OH, OW);
    nn_node *n = nn_g_node_with_inputs(g, op, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->kernel = kernel;
    n->stride = stride;
    n->padding = padding;
    return nn_g_handle(g, n);
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
    const nn_node *in = nn_g_float_input(g, x, "global_avgpool");
    if (!in || !nn_g_image_input(g, in, "global_avgpool"))
        return STOKE_NO_TENSOR;
    int64_t C = in->shape.dims[0];
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_GLOBAL_AVGPOOL, NULL, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = nn_g_shape1(C);
    return nn_g_handle(g, n);
}

stoke_tensor stoke_nn_batchnorm(stoke_graph *g, const char *name, stoke_tensor x, float momentum,
                                float eps)
{
    const char *layer = name ? name : "batchnorm";
    const nn_node *in = nn_g_float_input(g, x, layer);
    if (!in)
        return STOKE_NO_TENSOR;
    if (in->shape.ndim != 3 && in->shape.ndim != 1) {
        char b[64];
        return nn_g_fail(g, STOKE_ERR_ARG, "%s: batch norm takes (C, H, W) or (C), input %s is %s",
                         layer, in->name, nn_g_shape_str(&in->shape, b, sizeof b));
    }
    if (!(momentum >= 0 && momentum <= 1) || !(eps > 0))
        return nn_g_fail(g, STOKE_ERR_ARG, "%s: momentum %g must be in [0, 1] and eps %g > 0",
                         layer, (double)momentum, (double)eps);
    if (!name)
        return nn_g_fail(g, STOKE_ERR_ARG, "batchnorm: a layer with parameters needs a name");
    int64_t C = in->shape.dims[0];
    stoke_shape s = in->shape; /* nn_g_node_with_inputs may move the node array */
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_BATCHNORM, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->momentum = momentum;
    n->eps = eps;
    nn_g_add_param(g, n, "weight", nn_g_shape1(C), NN_INIT_ONES, 0, 0, true, false);
    nn_g_add_param(g, n, "bias", nn_g_shape1(C), NN_INIT_ZEROS, 0, 0, true, false);
    nn_g_add_param(g, n, "running_mean", nn_g_shape1(C), NN_INIT_ZEROS, 0, 0, false, false);
    nn_g_add_param(g, n, "running_var", nn_g_shape1(C), NN_INIT_ONES, 0, 0, false, false);
    return g->status == STOKE_OK ? nn_g_handle(g, n) : STOKE_NO_TENSOR;
}

stoke_tensor stoke_nn_layernorm(stoke_graph *g, const char *name, stoke_tensor x, float eps)
{
    const char *layer = name ? name : "layernorm";
    const nn_node *in = nn_g_float_input(g, x, layer);
    if (!in)
        return STOKE_NO_TENSOR;
    if (in->shape.ndim < 1)
        return nn_g_fail(g, STOKE_ERR_ARG, "%s: layer norm needs a last dimension", layer);
    if (!(eps > 0))
        return nn_g_fail(g, STOKE_ERR_ARG, "%s: eps %g must be > 0", layer, (double)eps);
    if (!name)
        return nn_g_fail(g, STOKE_ERR_ARG, "layernorm: a layer with parameters needs a name");
    int64_t C = in->shape.dims[in->shape.ndim - 1];
    stoke_shape s = in->shape; /* nn_g_node_with_inputs may move the node array */
    nn_node *n = nn_g_node_with_inputs(g, STOKE_NN_LAYERNORM, name, x, STOKE_NO_TENSOR);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape = s;
    n->eps = eps;
    nn_g_add_param(g, n, "weight", nn_g_shape1(C), NN_INIT_ONES, 0, 0, true, false);
    nn_g_add_param(g, n, "bias", nn_g_shape1(C), NN_INIT_ZEROS, 0, 0, true, false);
    return g->status == STOKE_OK ? nn_g_handle(g, n) : STOKE_NO_TENSOR;
}
