/* graph_build.h - the helpers the graph's builders share (graph.c, graph_layers.c,
 * graph_ops.c, graph_loss.c): recording an error, shapes, checking inputs, appending a
 * node or a parameter. Internal to the builders; the rest of src/nn sees graph_impl.h. */
#ifndef STOKE_NN_GRAPH_BUILD_H
#define STOKE_NN_GRAPH_BUILD_H

#include <stddef.h>

#include "nn/graph_impl.h"

/* Records the graph's first error; returns STOKE_NO_TENSOR for a builder to pass on. */
__attribute__((format(printf, 3, 4))) stoke_tensor nn_g_fail(stoke_graph *g, stoke_status s,
                                                             const char *fmt, ...);

char *nn_g_shape_str(const stoke_shape *s, char *buf, size_t size);
stoke_shape nn_g_shape_of(int ndim, const int64_t *dims);
stoke_shape nn_g_shape1(int64_t a);
stoke_shape nn_g_shape2(int64_t a, int64_t b);
stoke_shape nn_g_shape3(int64_t a, int64_t b, int64_t c);

/* Input checks: false (or NULL) with the error recorded, silent after an earlier one. */
bool nn_g_usable(stoke_graph *g, stoke_tensor t, const char *what);
bool nn_g_positive(stoke_graph *g, const char *layer, const char *what, int64_t v);
const nn_node *nn_g_float_input(stoke_graph *g, stoke_tensor x, const char *layer);
bool nn_g_image_input(stoke_graph *g, const nn_node *in, const char *layer);

/* Appends a node reading a (and b unless STOKE_NO_TENSOR); the pointer is valid until
 * the next node is added, which may move the node array. */
nn_node *nn_g_node_with_inputs(stoke_graph *g, stoke_nn_op op, const char *name, stoke_tensor a,
                               stoke_tensor b);
stoke_tensor nn_g_handle(const stoke_graph *g, const nn_node *n);
/* Appends a parameter of node n named "<n>.<suffix>"; its index, or -1 on error. */
int nn_g_add_param(stoke_graph *g, nn_node *n, const char *suffix, stoke_shape shape, nn_init init,
                   double fan_in, double fan_out, bool trainable, bool lowp);

#endif
