/* exec.c - the executor: forward in graph order, backward in reverse (recomputing
 * checkpointed segments), both captured into a backend's graphs and replayed, and a
 * device's results read late. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "nn/model_impl.h"

/* Every captured graph: they hold the arenas' addresses and the ops' arguments. */
void nn_graphs_drop(stoke_model *m)
{
    for (int i = 0; i < m->ngraphs; i++) {
        m->be->graph_free(m->be->ctx, m->graphs[i].fwd);
        m->be->graph_free(m->be->ctx, m->graphs[i].bwd);
    }
    m->ngraphs = 0;
    if (m->step_graph)
        m->be->graph_free(m->be->ctx, m->step_graph);
    m->step_graph = NULL;
}

static nn_exec_args node_args(const stoke_model *m, int i)
{
    const nn_node *nd = &m->g->nodes[i];
    nn_exec_args a = {.graph = m->g,
                      .node = nd,
                      .index = i,
                      .batch = m->fwd_batch,
                      .train = m->fwd_train,
                      .precision = m->o.precision};
    for (int k = 0; k < nd->nin; k++) {
        a.in[k] = m->out[nd->in[k]];
        a.din[k] = m->dout[nd->in[k]];
    }
    a.out = m->out[i];
    a.dout = m->dout[i];
    for (int k = 0; k < nd->nparam; k++) {
        int p = nd->param[k];
        a.param[k] = m->param[p];
        a.grad[k] = m->grad[p];
        a.param_lp[k] = m->L.lowp[i] ? m->param_lp[p] : NULL;
    }
    if (!m->L.lowp[i])
        a.precision = STOKE_PREC_FP32;
    a.saved = m->saved[i];
    a.ws = m->ws_arena;
    a.ws_size = m->L.ws;
    a.seed = stoke_fmix64(m->o.seed ^ stoke_mix64((uint64_t)i));
    a.step = m->fwd_key;
    if (m->L.head[i] == i) {
        int last = m->L.chain[i][m->L.chain_len[i] - 1];
        a.out = m->out[last];
        a.dout = m->dout[last];
        a.saved = m->saved[last];
        a.chain = m->L.chain[i];
        a.nchain = m->L.chain_len[i];
    }
    return a;
}

/* Names the layer unless the kernel's message already does. */
static stoke_status node_fail(const stoke_model *m, int i, stoke_status st, const char *phase)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", stoke_last_error());
    const nn_node *nd = &m->g->nodes[i];
    size_t len = strlen(nd->name); /* "conv2: ..." names conv2; "conv2d: ..." does not */
    if (strncmp(msg, nd->name, len) == 0 && msg[len] == ':')
        return stoke_fail(st, "%s: %s %s", m->g->name, phase, msg);
    return stoke_fail(st, "%s: %s %s (%s): %s", m->g->name, phase, nd->name,
                      stoke_nn_op_name(nd->op), msg);
}

stoke_status stoke_model_reserve(stoke_model *m, int64_t batch)
{
    if (batch < 1 || batch > m->o.max_batch)
        return stoke_fail(STOKE_ERR_ARG, "%s: batch %lld outside 1..%lld (the model's max batch)",
                          m->g->name, (long long)batch, (long long)m->o.max_batch);
    int threads = m->be->threads(m->be->ctx);
    if (threads != m->ready_threads) {
        m->nready = 0;
        m->ready_threads = threads;
    }
    for (int i = 0; i < m->nready; i++)
        if (m->ready[i] == batch)
            return STOKE_OK;
    if (m->nready == m->ready_cap) {
        int64_t *grown = realloc(m->ready, 2 * (size_t)m->ready_cap * sizeof *grown);
        if (!grown)
            return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", m->g->name);
        m->ready = grown;
        m->ready_cap *= 2;
    }
    size_t need = 0;
    stoke_status st = nn_ws_at(m->g, &m->o, m->be, &m->L, batch, &need);
    if (st != STOKE_OK)
        return st;
    if (need > m->L.ws) {
        /* Scratch only: nothing to copy, and the old arena goes only once the new one
         * exists, so a failure leaves the model as it was. */
        char *ws = m->be->alloc(m->be->ctx, need);
        if (!ws)
            return stoke_fail(STOKE_ERR_NOMEM,
                              "%s: cannot allocate %zu bytes of workspace for batch %lld "
                              "(%zu planned for batch %lld)",
                              m->g->name, need, (long long)batch, m->L.ws,
                              (long long)m->o.max_batch);
        nn_graphs_drop(m);
        m->be->free(m->be->ctx, m->ws_arena);
        m->ws_arena = ws;
        m->plan.total += need - m->L.ws;
        m->plan.workspace = m->L.ws = need;
    }
    m->ready[m->nready++] = batch;
    return STOKE_OK;
}

/* The forward's ops, queued (on a device) or run. */
static stoke_status forward_ops(stoke_model *m)
{
    const nn_backend *be = m->be;
    for (int i = 0; i < m->g->nnodes; i++) {
        const nn_node *nd = &m->g->nodes[i];
        if (nd->op == STOKE_NN_INPUT || nd->op == STOKE_NN_RESHAPE)
            continue;
        int h = m->L.head[i];
        if (h >= 0 && h != i)
            continue; /* ran with its chain's first node */
        nn_exec_args a = node_args(m, i);
        stoke_status st =
            h == i ? m->L.fused[i]->forward(be->ctx, &a) : be->ops[nd->op].forward(be->ctx, &a);
        if (st != STOKE_OK)
            return node_fail(m, i, st, "forward");
    }
    return STOKE_OK;
}

/* The graph slot of (batch, train), or NULL: no graphs on this backend or model, or
 * no slot left. */
static struct model_graph *graph_of(stoke_model *m, int64_t batch, bool train)
{
    if (!m->be->capture_begin || m->graphs_off[0])
        return NULL;
    for (int i = 0; i < m->ngraphs; i++)
        if (m->graphs[i].batch == batch && m->graphs[i].train == train)
            return &m->graphs[i];
    if (m->ngraphs == NN_MAX_GRAPHS)
        return NULL;
    struct model_graph *g = &m->graphs[m->ngraphs++];
    memset(g, 0, sizeof *g);
    g->batch = batch;
    g->train = train;
    return g;
}

/* ops(m) through *graph: replayed if captured, captured and replayed on the second
 * call (*runs counts them), run as they are on the first, without a graph (NULL) or
 * when the backend or the model has none. A capture that fails turns graphs off for the model (saying why in graphs_off)
 * and the ops run as they are: nothing ran while capturing. */
stoke_status nn_run_graphed(stoke_model *m, void **graph, int *runs,
                            stoke_status (*ops)(stoke_model *m))
{
    const nn_backend *be = m->be;
    if (!graph || !be->capture_begin || m->graphs_off[0])
        return ops(m);
    if (*graph)
        return be->replay(be->ctx, *graph);
    if ((*runs)++ == 0)
        return ops(m);
    stoke_status st = be->capture_begin(be->ctx);
    if (st == STOKE_OK) {
        stoke_status os = ops(m);
        char why[256];
        snprintf(why, sizeof why, "%s", stoke_last_error());
        st = be->capture_end(be->ctx, graph);
        if (os != STOKE_OK && st == STOKE_OK) {
            be->graph_free(be->ctx, *graph);
            *graph = NULL;
            st = stoke_fail(os, "%s", why);
        }
    }
    if (st != STOKE_OK) {
        snprintf(m->graphs_off, sizeof m->graphs_off, "%s", stoke_last_error());
        nn_graphs_drop(m);
        return ops(m);
    }
    return be->replay(be->ctx, *graph);
}

/* Keeps the first error found late (a device's result read after the call that
 * queued its work returned), for the next call that can return it. */
stoke_status nn_keep_late(stoke_model *m, stoke_status st)
{
    if (st != STOKE_OK && m->late == STOKE_OK) {
        m->late = st;
        snprintf(m->late_msg, sizeof m->late_msg, "%s", stoke_last_error());
    }
    return st;
}

/* The error kept by nn_keep_late, once. */
stoke_status nn_take_late(stoke_model *m)
{
    stoke_status st = m->late;
    m->late = STOKE_OK;
    return st != STOKE_OK ? stoke_fail(st, "%s", m->late_msg) : STOKE_OK;
}

/* The forward's losses and metrics (vals[k], in node order) as its values. */
static void take_values(stoke_model *m, const float *vals)
{
    double total = 0;
    for (int i = 0, k = 0; i < m->g->nnodes; i++) {
        const nn_node *nd = &m->g->nodes[i];
        if (nn_op_is_loss(nd->op) || nn_op_is_metric(nd->op)) {
            m->value[i] = vals[k++];
            if (nn_op_is_loss(nd->op))
                total += (double)nd->loss_weight * m->value[i];
        }
    }
    m->total_loss = total;
}

/* A device's forward results, waited for (the work queued after it runs meanwhile):
 * its bad-input flags, then its values. */
stoke_status nn_settle_forward(stoke_model *m)
{
    if (!m->fwd_pending)
        return STOKE_OK;
    m->fwd_pending = false;
    const nn_backend *be = m->be;
    int bad = -1;
    stoke_status st = be->forward_check(be->ctx, &bad, m->fetch_vals);
    if (st != STOKE_OK) {
        m->fwd_valid = false;
        return bad >= 0 ? node_fail(m, bad, st, "forward")
                        : stoke_fail(st, "%s: forward: %s", m->g->name, stoke_last_error());
    }
    take_values(m, m->fetch_vals);
    return STOKE_OK;
}

stoke_status stoke_model_forward(stoke_model *m, int64_t batch, bool train)
{
    stoke_status ls = nn_take_late(m);
    if (ls != STOKE_OK)
        return ls;
    stoke_status rs = stoke_model_reserve(m, batch);
    if (rs != STOKE_OK)
        return rs;
    m->fwd_valid = false;
    m->fwd_pending = false;
    m->fwd_batch = batch;
    m->fwd_train = train;
    /* the dropout key: distinct for every training forward, reproducible from the
     * optimizer step (and the micro-batch within it) */
    m->fwd_key = ((uint64_t)m->calls << 20) | (m->micro & 0xfffff);
    if (train)
        m->micro++;
    const nn_backend *be = m->be;
    if (be->set_key)
        be->set_key(be->ctx, m->fwd_key);
    struct model_graph *gs = graph_of(m, batch, train);
    stoke_status fs =
        nn_run_graphed(m, gs ? &gs->fwd : NULL, gs ? &gs->fwd_runs : NULL, forward_ops);
    if (fs != STOKE_OK)
        return fs;
    int n = 0;
    for (int i = 0; i < m->g->nnodes; i++)
        if (nn_op_is_loss(m->g->nodes[i].op) || nn_op_is_metric(m->g->nodes[i].op))
            m->fetch_ptrs[n++] = m->out[i];
    m->fwd_valid = true;
    if (be->forward_fetch) {
        /* read once the backward is queued (nn_settle_forward); an evaluation's now */
        stoke_status st = be->forward_fetch(be->ctx, m->fetch_ptrs, n);
        if (st != STOKE_OK) {
            m->fwd_valid = false;
            return stoke_fail(st, "%s: forward: %s", m->g->name, stoke_last_error());
        }
        m->fwd_pending = true;
        return train ? STOKE_OK : nn_settle_forward(m);
    }
    for (int k = 0; k < n; k++)
        be->read(be->ctx, &m->fetch_vals[k], m->fetch_ptrs[k], sizeof(float));
    take_values(m, m->fetch_vals);
    return STOKE_OK;
}

/* Rebuilds segment s's dropped activations before its backward: its nodes' forward
 * again, from the kept outputs, with the forward's batch, mode and dropout key, so the
 * values are the forward's bit for bit; `recompute` tells batch norm not to update its
 * running statistics a second time. Losses and metrics are kept nodes: not rerun, their
 * values not read again. The shared gradient region held the next segment's gradients:
 * zeroed again. */
static stoke_status recompute(stoke_model *m, int s)
{
    const nn_backend *be = m->be;
    const layout *L = &m->L;
    for (int i = L->seg_start[s] + 1; i < L->seg_end[s]; i++) {
        int h = L->head[i];
        if (h >= 0 ? h != i || L->seg[L_last(L, h)] != s : L->seg[i] != s)
            continue;
        nn_exec_args a = node_args(m, i);
        a.recompute = true;
        stoke_status st = h == i ? L->fused[i]->forward(be->ctx, &a)
                                 : be->ops[m->g->nodes[i].op].forward(be->ctx, &a);
        if (st != STOKE_OK)
            return node_fail(m, i, st, "recomputing");
    }
    if (L->seg_dout_ps[s])
        be->zero(be->ctx, m->shared_dout, (size_t)m->o.max_batch * L->seg_dout_ps[s]);
    return STOKE_OK;
}

static stoke_status backward_ops(stoke_model *m);

stoke_status stoke_model_backward(stoke_model *m)
{
    if (!m->o.training)
        return stoke_fail(STOKE_ERR_ARG, "%s: backward on a model compiled for inference",
                          m->g->name);
    if (!m->fwd_valid || !m->fwd_train)
        return stoke_fail(STOKE_ERR_ARG, "%s: backward needs a successful forward in train mode",
                          m->g->name);
    const nn_backend *be = m->be;
    bool has_loss = false;
    for (int i = 0; i < m->g->nnodes; i++)
        has_loss = has_loss || (nn_op_is_loss(m->g->nodes[i].op) && m->g->nodes[i].needs_grad);
    if (!has_loss)
        return stoke_fail(STOKE_ERR_ARG, "%s: no loss depends on a parameter", m->g->name);
    /* the last step's decision (its loss scale, its count): the device has this
     * forward queued behind it */
    stoke_status ss = nn_settle_step(m);
    if (ss != STOKE_OK)
        return ss;
    struct model_graph *g = graph_of(m, m->fwd_batch, true);
    if (g && g->bwd && g->scale != m->scaler.scale) { /* the scale is in the loss kernels */
        be->graph_free(be->ctx, g->bwd);
        g->bwd = NULL;
    }
    if (g && !g->bwd)
        g->scale = m->scaler.scale;
    stoke_status st = nn_run_graphed(m, g ? &g->bwd : NULL, g ? &g->bwd_runs : NULL, backward_ops);
    if (st == STOKE_OK) /* the forward's results, while the device runs the backward */
        st = nn_settle_forward(m);
    if (st != STOKE_OK)
        return st;
    m->backward_passes++;
    return STOKE_OK;
}

/* The backward's ops, queued (on a device) or run. */
static stoke_status backward_ops(stoke_model *m)
{
    const nn_backend *be = m->be;
    if (m->dout_bytes)
        be->zero(be->ctx, m->dout_base, m->dout_bytes);
    int seg = m->L.nsegs - 1;
    m->next_bucket = 0;
    for (int i = m->g->nnodes - 1; i >= 0; i--) {
        const nn_node *nd = &m->g->nodes[i];
        int h = m->L.head[i];
        if (m->has_reducer) { /* the buckets the nodes after i finished */
            stoke_status rs = nn_reduce_ready(m, i);
            if (rs != STOKE_OK)
                return rs;
        }
        if (seg >= 0 && i == m->L.seg_end[seg]) {
            /* forward wrote the last segment last: its activations are still there */
            stoke_status st = seg == m->L.nsegs - 1 ? STOKE_OK : recompute(m, seg);
            seg--;
            if (st != STOKE_OK)
                return st;
        }
        if (h >= 0) {
            /* a chain runs backward from its last node, with its first node's args */
            if (L_last(&m->L, h) != i || !nd->needs_grad)
                continue;
            nn_exec_args a = node_args(m, h);
            if (!a.dout)
                continue;
            stoke_status st = m->L.fused[h]->backward(be->ctx, &a);
            if (st != STOKE_OK)
                return node_fail(m, h, st, "backward");
            continue;
        }
        if (!nd->needs_grad || !be->ops[nd->op].backward || nd->op == STOKE_NN_RESHAPE)
            continue;
        nn_exec_args a = node_args(m, i);
        if (nn_op_is_loss(nd->op)) {
            if (nd->loss_weight == 0)
                continue;
            a.grad_scale = nd->loss_weight * m->scaler.scale;
        } else if (!a.dout) {
            continue;
        }
        stoke_status st = be->ops[nd->op].backward(be->ctx, &a);
        if (st != STOKE_OK)
            return node_fail(m, i, st, "backward");
    }
    return m->has_reducer ? nn_reduce_ready(m, -1) : STOKE_OK;
}
