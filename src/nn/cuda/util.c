/* util.c - the small helpers every CUDA op file shares (shapes, and naming the layer
 * in an error), apart from the backend's table in cuda_backend.c. */
#include <stdio.h>

#include "nn/cuda/ops.h"

int64_t cuda_elems(const stoke_shape *s) { return stoke_shape_elems(s); }

const stoke_shape *cuda_in_shape(const nn_exec_args *a, int k)
{
    return &nn_graph_node(a->graph, a->node->in[k])->shape;
}

stoke_status cuda_layer_fail(stoke_status st, const nn_node *n)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", stoke_last_error());
    return stoke_fail(st, "%s: %s", n->name, msg);
}
