/* model.c - a model's life: made from a graph and options (its arenas cut into named
 * pointers, llm.c style: one allocation per kind), freed, and what callers read and
 * write through it (parameters, values, inputs, the device it runs on). The plan is
 * plan.c's, the executor exec.c's, the step step.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/marks.h"
#include "nn/model_impl.h"

static void *arena(const nn_backend *be, size_t bytes, const char *what, const char *model,
                   stoke_status *st)
{
    if (*st != STOKE_OK || bytes == 0)
        return NULL;
    void *p = be->alloc(be->ctx, bytes);
    if (!p)
        *st =
            stoke_fail(STOKE_ERR_NOMEM, "%s: cannot allocate %zu bytes of %s", model, bytes, what);
    return p;
}

void stoke_model_free(stoke_model *m)
{
    if (!m)
        return;
    const nn_backend *be = m->be;
    nn_graphs_drop(m);
    nn_reducer_drop(m); /* its release may free the model's memory it staged in */
    nn_marks_free(m->marks, be);
    if (m->input_event)
        be->event_free(be->ctx, m->input_event);
    free(m->norm_buf);
    free(m->fetch_ptrs);
    free(m->fetch_vals);
    be->free(be->ctx, m->params_arena);
    be->free(be->ctx, m->grads_arena);
    be->free(be->ctx, m->optim_arena);
    be->free(be->ctx, m->act_arena);
    be->free(be->ctx, m->ws_arena);
    free(m->param);
    free(m->grad);
    free(m->state);
    free(m->param_lp);
    free(m->out);
    free(m->saved);
    free(m->dout);
    free(m->value);
    free(m->ready);
    nn_layout_free(&m->L);
    nn_backend_free(m->own);
    free(m);
}

stoke_status stoke_model_new(const stoke_graph *g, const stoke_model_opts *o, stoke_model **out)
{
    *out = NULL;
    stoke_model *m = calloc(1, sizeof *m);
    if (!m)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", g->name);
    stoke_status st = nn_backend_for(g, o, &m->own);
    if (st != STOKE_OK) {
        free(m);
        return st;
    }
    const nn_backend *be = m->own;
    m->g = g;
    m->o = nn_fill_defaults(o);
    m->be = be;
    cpu_loss_scaler_init(&m->scaler);
    if (m->o.precision != STOKE_PREC_FP16)
        m->scaler.scale = 1.0f;
    st = nn_layout_build(g, &m->o, be, &m->L);
    if (st != STOKE_OK) {
        nn_backend_free(m->own);
        free(m);
        return st;
    }
    layout *L = &m->L;
    nn_plan_fill(L, g, &m->o, &m->plan);
    int n = g->nnodes, np = g->nparams;
    size_t B = (size_t)m->o.max_batch;
    m->params_arena = arena(be, L->params, "parameters", g->name, &st);
    m->grads_arena = arena(be, L->grads, "gradients", g->name, &st);
    m->optim_arena = arena(be, L->optim, "optimizer state", g->name, &st);
    m->act_arena = arena(be, B * L->act_ps, "activations", g->name, &st);
    m->ws_arena = arena(be, L->ws, "workspace", g->name, &st);
    m->param = calloc((size_t)np + 1, sizeof(float *));
    m->grad = calloc((size_t)np + 1, sizeof(float *));
    m->state = calloc(2 * (size_t)np + 1, sizeof(float *));
    m->param_lp = calloc((size_t)np + 1, sizeof(uint16_t *));
    m->out = calloc((size_t)n, sizeof(float *));
    m->saved = calloc((size_t)n, sizeof(float *));
    m->dout = calloc((size_t)n, sizeof(float *));
    m->value = calloc((size_t)n, sizeof(double));
    m->fetch_ptrs = calloc((size_t)n + 1, sizeof *m->fetch_ptrs);
    m->fetch_vals = calloc((size_t)n + 1, sizeof *m->fetch_vals);
    m->ready_cap = 8;
    m->ready = malloc((size_t)m->ready_cap * sizeof *m->ready);
    if (m->ready)
        m->nready = nn_planned(L, m->ready);
    m->ready_threads = be->threads(be->ctx);
    if (st == STOKE_OK &&
        (!m->param || !m->grad || !m->state || !m->param_lp || !m->out || !m->saved || !m->dout ||
         !m->value || !m->ready || !m->fetch_ptrs || !m->fetch_vals))
        st = stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", g->name);
    if (st != STOKE_OK) {
        stoke_model_free(m);
        return st;
    }
    for (int i = 0; i < np; i++) {
        m->param[i] = (float *)(m->params_arena + L->param_off[i]);
        if (L->lp_off[i] != NONE)
            m->param_lp[i] = (uint16_t *)(m->params_arena + L->lp_off[i]);
        if (L->grad_off[i] != NONE)
            m->grad[i] = (float *)(m->grads_arena + L->grad_off[i]);
        for (int s = 0; s < L->slots; s++)
            if (L->state_off[i] != NONE)
                m->state[2 * i + s] =
                    (float *)(m->optim_arena + L->state_off[i] +
                              (size_t)s *
                                  align_up((size_t)g->params[i].info.elems * sizeof(float)));
    }
    /* activations: [outputs and saved state of every node][their gradients], so zeroing
     * the gradients before backward is one call */
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (L->seg && L->seg[i] >= 0)
            continue;
        if (L->out_ps[i]) {
            m->out[i] = (float *)(m->act_arena + off);
            off += B * L->out_ps[i];
        }
        if (L->saved_ps[i]) {
            m->saved[i] = (float *)(m->act_arena + off);
            off += B * L->saved_ps[i];
        }
    }
    /* the segments' nodes: each segment from the start of one shared region, since only
     * one segment's activations exist at a time (forward, or its recompute) */
    for (int i = 0; i < n && L->nsegs; i++)
        if (L->seg[i] >= 0) {
            char *at = m->act_arena + off + B * L->shared_off[i];
            m->out[i] = (float *)at;
            if (L->saved_ps[i])
                m->saved[i] = (float *)(at + B * L->out_ps[i]);
        }
    off += B * L->shared_fwd_ps;
    m->dout_base = m->act_arena ? m->act_arena + off : NULL;
    for (int i = 0; i < n; i++)
        if (L->dout_ps[i] && !(L->seg && L->seg[i] >= 0)) {
            m->dout[i] = (float *)(m->act_arena + off);
            off += B * L->dout_ps[i];
        }
    m->shared_dout = m->act_arena ? m->act_arena + off : NULL;
    for (int i = 0; i < n && L->nsegs; i++)
        if (L->seg[i] >= 0 && L->dout_ps[i])
            m->dout[i] = (float *)(m->shared_dout + B * L->shared_doff[i]);
    off += B * L->shared_dout_ps;
    m->dout_bytes = (size_t)(m->act_arena + off - m->dout_base);
    for (int i = 0; i < n; i++)
        if (L->alias[i] != i) {
            m->out[i] = m->out[L->alias[i]];
            m->dout[i] = m->dout[L->alias[i]];
        }
    /* initial values, computed on the host and written through the backend */
    size_t most = 0;
    for (int i = 0; i < np; i++)
        if ((size_t)g->params[i].info.elems > most)
            most = (size_t)g->params[i].info.elems;
    float *host = malloc((most ? most : 1) * sizeof(float));
    if (!host) {
        stoke_model_free(m);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", g->name);
    }
    for (int i = 0; i < np; i++) {
        nn_param_init(&g->params[i], m->o.seed, host);
        be->write(be->ctx, m->param[i], host, (size_t)g->params[i].info.elems * sizeof(float));
    }
    free(host);
    stoke_model_params_changed(m);
    *out = m;
    return STOKE_OK;
}

const stoke_graph *stoke_model_graph(const stoke_model *m) { return m->g; }
const stoke_mem_plan *stoke_model_plan(const stoke_model *m) { return &m->plan; }
int stoke_model_threads(const stoke_model *m) { return m->be->threads(m->be->ctx); }
void stoke_model_set_threads(stoke_model *m, int n) { m->be->set_threads(m->be->ctx, n); }
size_t stoke_model_used_mem(const stoke_model *m)
{
    return m->L.params + m->L.grads + m->L.optim + (size_t)m->o.max_batch * m->L.act_ps + m->L.ws;
}

void *stoke_model_input(stoke_model *m, stoke_tensor t)
{
    const nn_node *n = nn_graph_node(m->g, t);
    return n && n->op == STOKE_NN_INPUT ? m->out[t] : NULL;
}

void stoke_model_params_changed(stoke_model *m)
{
    for (int i = 0; i < m->g->nparams; i++)
        if (m->param_lp[i])
            m->be->to_lowp(m->be->ctx, m->o.precision, m->param[i], m->param_lp[i],
                           (size_t)m->g->params[i].info.elems);
}

double stoke_model_value(const stoke_model *m, stoke_tensor t)
{
    nn_settle_for_getter(m, false);
    const nn_node *n = nn_graph_node(m->g, t);
    if (!n || !(nn_op_is_loss(n->op) || nn_op_is_metric(n->op)) || !m->fwd_valid)
        return NAN;
    return m->value[t];
}

double stoke_model_loss(const stoke_model *m)
{
    nn_settle_for_getter(m, false);
    return m->fwd_valid ? m->total_loss : NAN;
}

const float *stoke_model_output(const stoke_model *m, stoke_tensor t)
{
    const nn_node *n = nn_graph_node(m->g, t);
    if (!n || !n->is_output || n->dtype != STOKE_F32)
        return NULL;
    return m->out[t];
}

double stoke_model_grad_norm(const stoke_model *m)
{
    nn_settle_for_getter(m, true);
    return m->grad_norm;
}

float stoke_model_loss_scale(const stoke_model *m)
{
    nn_settle_for_getter(m, true);
    return m->scaler.scale;
}
void stoke_model_set_loss_scale(stoke_model *m, float scale)
{
    if (isfinite(scale) && scale > 0)
        m->scaler.scale = scale;
}

float *stoke_model_param(stoke_model *m, int i)
{
    return (i >= 0 && i < m->g->nparams) ? m->param[i] : NULL;
}
float *stoke_model_grad(stoke_model *m, int i)
{
    return (i >= 0 && i < m->g->nparams) ? m->grad[i] : NULL;
}
float *stoke_model_optim_state(stoke_model *m, int i, int slot)
{
    return (i >= 0 && i < m->g->nparams && slot >= 0 && slot < m->L.slots) ? m->state[2 * i + slot]
                                                                           : NULL;
}
int stoke_model_optim_slots(const stoke_model *m) { return m->L.slots; }
int64_t stoke_model_step_count(const stoke_model *m)
{
    nn_settle_for_getter(m, true);
    return m->steps;
}

void stoke_model_set_step_count(stoke_model *m, int64_t steps)
{
    nn_settle_for_getter(m, true);
    m->steps = m->calls = steps < 0 ? 0 : steps;
    m->micro = 0;
}

/* ---- models on a device ---- */

bool stoke_model_on_device(const stoke_model *m) { return m->o.cuda; }

const char *stoke_model_device_name(const stoke_model *m)
{
    return m->o.cuda ? nn_backend_describe(m->be) : "cpu";
}

stoke_status stoke_model_sync(stoke_model *m)
{
    nn_keep_late(m, nn_settle_forward(m));
    stoke_status st = nn_settle_step(m); /* with what was kept */
    if (st == STOKE_OK && m->be->sync)
        st = m->be->sync(m->be->ctx);
    return st;
}

int stoke_model_graphs(const stoke_model *m, const char **why)
{
    int n = m->step_graph != NULL;
    for (int i = 0; i < m->ngraphs; i++)
        n += (m->graphs[i].fwd != NULL) + (m->graphs[i].bwd != NULL);
    if (why)
        *why = m->graphs_off;
    return n;
}

void stoke_model_mark(stoke_model *m, stoke_phase p)
{
    if (!m->marks && !(m->marks = nn_marks_new()))
        return; /* out of memory: the phases go untimed */
    nn_marks_mark(m->marks, m->be, p);
}

void stoke_model_phase_seconds(stoke_model *m, bool wait, double sec[STOKE_PHASE_COUNT])
{
    if (m->marks)
        nn_marks_take(m->marks, m->be, wait, sec);
}

static stoke_status check_input(const stoke_model *m, stoke_tensor t, size_t bytes)
{
    const nn_node *n = nn_graph_node(m->g, t);
    if (!n || n->op != STOKE_NN_INPUT)
        return stoke_fail(STOKE_ERR_ARG, "%s: tensor %d is not an input", m->g->name, (int)t);
    /* fp32 or int32: 4 bytes a value */
    size_t cap = (size_t)m->o.max_batch * (size_t)stoke_shape_elems(&n->shape) * 4;
    if (bytes > cap)
        return stoke_fail(STOKE_ERR_ARG, "%s: %zu bytes for input %s, which holds %zu", m->g->name,
                          bytes, n->name, cap);
    return STOKE_OK;
}

stoke_status stoke_model_set_input(stoke_model *m, stoke_tensor t, const void *host, size_t bytes)
{
    stoke_status st = check_input(m, t, bytes);
    if (st != STOKE_OK || bytes == 0)
        return st;
    /* not waited for: a device copies through pinned memory, and what fails is said by
     * the next call that waits */
    m->be->write(m->be->ctx, m->out[t], host, bytes);
    return STOKE_OK;
}

void *stoke_model_stream(const stoke_model *m) { return nn_backend_stream(m->be); }

stoke_status stoke_model_set_input_device(stoke_model *m, stoke_tensor t, const void *dev,
                                          size_t bytes)
{
    if (!m->o.cuda)
        return stoke_fail(STOKE_ERR_ARG, "%s: a device input for a model on the CPU", m->g->name);
    stoke_status st = check_input(m, t, bytes);
    if (st != STOKE_OK || !bytes)
        return st;
    m->be->copy(m->be->ctx, m->out[t], dev, bytes);
    if (!m->input_event && !(m->input_event = m->be->event_new(m->be->ctx)))
        return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s: cannot create a CUDA event", m->g->name);
    m->be->event_record(m->be->ctx, m->input_event);
    return STOKE_OK;
}

void *stoke_model_input_event(stoke_model *m)
{
    if (m->o.cuda && !m->input_event)
        m->input_event = m->be->event_new(m->be->ctx);
    return m->input_event;
}

stoke_status stoke_model_read(stoke_model *m, const void *buf, void *host, size_t bytes)
{
    if (bytes == 0)
        return STOKE_OK;
    m->be->read(m->be->ctx, host, buf, bytes);
    return stoke_model_sync(m);
}

stoke_status stoke_model_write(stoke_model *m, void *buf, const void *host, size_t bytes)
{
    if (bytes == 0)
        return STOKE_OK;
    m->be->write(m->be->ctx, buf, host, bytes);
    return stoke_model_sync(m);
}

stoke_status stoke_model_copy_params(stoke_model *dst, stoke_model *src)
{
    if (dst->g != src->g || dst->o.cuda != src->o.cuda ||
        (dst->o.cuda && dst->o.cuda_device != src->o.cuda_device))
        return stoke_fail(STOKE_ERR_ARG,
                          "%s: copying parameters needs two models of one graph on one device",
                          dst->g->name);
    /* src's queued updates first: the copy runs on dst's stream */
    stoke_status st = stoke_model_sync(src);
    for (int i = 0; i < dst->g->nparams && st == STOKE_OK; i++)
        dst->be->copy(dst->be->ctx, dst->param[i], src->param[i],
                      (size_t)dst->g->params[i].info.elems * sizeof(float));
    if (st != STOKE_OK)
        return st;
    stoke_model_params_changed(dst);
    return stoke_model_sync(dst);
}
