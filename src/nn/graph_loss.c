/* graph_loss.c - recording the losses and metrics: the checks of their prediction and
 * target, the scalar output each one is, and a loss's weight. */
#include <math.h>
#include <stdio.h>

#include "nn/graph_build.h"

/* Losses and metrics: a scalar per batch; every one is an output. */
static stoke_tensor scalar_node(stoke_graph *g, stoke_nn_op op, stoke_tensor a, stoke_tensor b)
{
    nn_node *n = nn_g_node_with_inputs(g, op, NULL, a, b);
    if (!n)
        return STOKE_NO_TENSOR;
    n->shape.ndim = 0;
    n->is_output = true;
    snprintf(n->out_name, sizeof n->out_name, "%s:%s", nn_op_is_loss(op) ? "loss" : "metric",
             n->name);
    return nn_g_handle(g, n);
}

static bool class_pair(stoke_graph *g, stoke_nn_op op, stoke_tensor logits, stoke_tensor target)
{
    const char *what = stoke_nn_op_name(op);
    const nn_node *l = nn_g_float_input(g, logits, what);
    if (!l || !nn_g_usable(g, target, what))
        return false;
    const nn_node *t = &g->nodes[target];
    char b[64];
    if (l->shape.ndim != 1 || l->shape.dims[0] < 2) {
        nn_g_fail(g, STOKE_ERR_ARG, "%s#%d: needs logits (K) with K >= 2 classes, %s is %s", what,
                  g->nnodes, l->name, nn_g_shape_str(&l->shape, b, sizeof b));
        return false;
    }
    if (t->dtype != STOKE_I32 || t->shape.ndim != 0) {
        nn_g_fail(g, STOKE_ERR_ARG,
                  "%s#%d: target %s must be an int32 class of shape (), not %s %s", what, g->nnodes,
                  t->name, stoke_dtype_name(t->dtype), nn_g_shape_str(&t->shape, b, sizeof b));
        return false;
    }
    return true;
}

static bool same_elems(stoke_graph *g, stoke_nn_op op, stoke_tensor pred, stoke_tensor target)
{
    const char *what = stoke_nn_op_name(op);
    const nn_node *p = nn_g_float_input(g, pred, what);
    const nn_node *t = p ? nn_g_float_input(g, target, what) : NULL;
    if (!p || !t)
        return false;
    if (stoke_shape_elems(&p->shape) != stoke_shape_elems(&t->shape)) {
        char b1[64], b2[64];
        nn_g_fail(g, STOKE_ERR_ARG, "%s#%d: prediction %s is %s but target %s is %s", what,
                  g->nnodes, p->name, nn_g_shape_str(&p->shape, b1, sizeof b1), t->name,
                  nn_g_shape_str(&t->shape, b2, sizeof b2));
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
        return nn_g_fail(g, STOKE_ERR_ARG, "cross_entropy#%d: label smoothing %g must be in [0, 1)",
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
    const nn_node *l = nn_g_float_input(g, logits, what);
    const nn_node *t = l ? nn_g_float_input(g, target, what) : NULL;
    if (!l || !t)
        return STOKE_NO_TENSOR;
    char b[64];
    if (l->shape.ndim != 1 || l->shape.dims[0] < 2)
        return nn_g_fail(g, STOKE_ERR_ARG, "%s#%d: needs logits (K) with K >= 2 actions, %s is %s",
                         what, g->nnodes, l->name, nn_g_shape_str(&l->shape, b, sizeof b));
    if (t->shape.ndim != 1 || (t->shape.dims[0] != 2 && t->shape.dims[0] != 3))
        return nn_g_fail(g, STOKE_ERR_ARG,
                         "%s#%d: target %s must be fp32 [action, advantage] (2) or "
                         "[action, advantage, old_log_prob] (3), not %s",
                         what, g->nnodes, t->name, nn_g_shape_str(&t->shape, b, sizeof b));
    bool ppo = t->shape.dims[0] == 3;
    if (ppo ? !(clip > 0 && clip < 1) : clip != 0)
        return nn_g_fail(g, STOKE_ERR_ARG,
                         ppo ? "%s#%d: PPO's clip epsilon %g must be in (0, 1)"
                             : "%s#%d: clip %g needs the old log-probability (a 3-value target)",
                         what, g->nnodes, (double)clip);
    if (!(entropy >= 0 && isfinite(entropy)))
        return nn_g_fail(g, STOKE_ERR_ARG, "%s#%d: entropy coefficient %g must be finite and >= 0",
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
        nn_g_fail(g, STOKE_ERR_ARG, "loss weight: tensor %d is not a loss", (int)loss);
        return;
    }
    if (!isfinite(weight) || weight < 0) {
        nn_g_fail(g, STOKE_ERR_ARG, "loss weight of %s: %g must be finite and >= 0",
                  g->nodes[loss].name, (double)weight);
        return;
    }
    g->nodes[loss].loss_weight = weight;
}
