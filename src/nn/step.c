/* step.c - the optimizer step: the gradients' norm, clipping and loss scaling
 * decided (on the host or the device), the updates run through the backend, and a
 * device's decision settled late. */
#include <math.h>
#include <stdlib.h>

#include "nn/cuda/k_base.h" /* nk_step_coef: the step's rule, shared with the device */
#include "nn/model_impl.h"

void stoke_model_zero_grad(stoke_model *m)
{
    if (m->grads_arena)
        m->be->zero(m->be->ctx, m->grads_arena, m->L.grads);
    m->backward_passes = 0;
}

/* The step's updates with m->step_lr and step_coef: every parameter's, its
 * low-precision copy refreshed and its gradient zeroed. */
static stoke_status step_ops(stoke_model *m)
{
    const nn_backend *be = m->be;
    const stoke_graph *g = m->g;
    int64_t t = m->steps + 1;
    float lr = (float)m->step_lr, coef = (float)m->step_coef;
    bool sgd = m->o.optim.kind != STOKE_ADAMW;
    if (be->step_decide) {
        const float **gx = m->norm_buf;
        size_t *gn = (size_t *)(gx + g->nparams);
        stoke_status st = be->step_decide(be->ctx, gx, gn, m->norm_count);
        if (st != STOKE_OK)
            return stoke_fail(st, "%s: step: %s", g->name, stoke_last_error());
    }
    for (int i = 0; i < g->nparams; i++) {
        if (!m->grad[i])
            continue;
        size_t n = (size_t)g->params[i].info.elems;
        /* a device decides the factor as it runs: a graph must hold the pass always */
        if (m->step_coef != 1.0 || be->set_step)
            be->scale(be->ctx, m->grad[i], n, coef);
        if (!sgd)
            be->adamw(be->ctx, m->param[i], m->grad[i], m->state[2 * i], m->state[2 * i + 1], n, lr,
                      t, &m->o.optim);
        else /* refreshes the low-precision copy and zeroes the gradient as it goes */
            be->sgd(be->ctx, m->param[i], m->grad[i], m->state[2 * i], n, lr, t, &m->o.optim,
                    m->param_lp[i], m->o.precision);
    }
    if (sgd) {
        /* what SGD's pass did not cover: copies of parameters without gradients */
        for (int i = 0; i < g->nparams; i++)
            if (m->param_lp[i] && !m->grad[i])
                be->to_lowp(be->ctx, m->o.precision, m->param[i], m->param_lp[i],
                            (size_t)g->params[i].info.elems);
    } else {
        stoke_model_params_changed(m);
        if (m->grads_arena)
            be->zero(be->ctx, m->grads_arena, m->L.grads);
    }
    return STOKE_OK;
}

/* A step's outcome, from its decision: counted, or (a gradient not finite, the
 * bad-th in norm_buf) an error in fp32 and bf16, a skip backing fp16's scale off. */
static stoke_status step_outcome(stoke_model *m, double norm, int bad, bool skip)
{
    const stoke_graph *g = m->g;
    m->grad_norm = norm;
    m->step_skipped = skip;
    bool fp16 = m->o.precision == STOKE_PREC_FP16;
    if (!skip) {
        m->steps++;
        if (fp16)
            cpu_loss_scaler_update(&m->scaler, false);
        return STOKE_OK;
    }
    if (fp16) {
        cpu_loss_scaler_update(&m->scaler, true);
        return STOKE_OK;
    }
    const char *name = "?";
    for (int i = 0, k = 0; i < g->nparams; i++)
        if (m->grad[i] && k++ == bad)
            name = g->params[i].name;
    return stoke_fail(STOKE_ERR_ARG, "%s: gradient of %s is not finite (inf or NaN) at step %lld",
                      g->name, name, (long long)m->steps);
}

/* A device's step decision, waited for (the device runs what was queued after it). */
stoke_status nn_settle_step(stoke_model *m)
{
    if (!m->step_pending)
        return nn_take_late(m);
    m->step_pending = false;
    const nn_backend *be = m->be;
    double norm;
    int bad;
    bool skip;
    stoke_status st = be->step_result(be->ctx, &norm, &bad, &skip);
    if (st != STOKE_OK)
        return nn_keep_late(m, stoke_fail(st, "%s: step: %s", m->g->name, stoke_last_error()));
    nn_keep_late(m, step_outcome(m, norm, bad, skip));
    return nn_take_late(m);
}

stoke_status stoke_model_step(stoke_model *m, double lr, int accum, bool *applied)
{
    if (applied)
        *applied = false;
    if (!m->o.training)
        return stoke_fail(STOKE_ERR_ARG, "%s: step on a model compiled for inference", m->g->name);
    if (accum < 1 || !(lr >= 0) || !isfinite(lr))
        return stoke_fail(STOKE_ERR_ARG, "%s: step with accum %d (>= 1) and lr %g (finite, >= 0)",
                          m->g->name, accum, lr);
    stoke_status ps = nn_settle_step(m); /* the last one's, if no backward came between */
    if (ps != STOKE_OK)
        return ps;
    if (m->has_reducer) { /* the gradients reduced, ahead of everything the step reads */
        stoke_status rs = nn_reduce_finish(m);
        if (rs != STOKE_OK)
            return rs;
    }
    const nn_backend *be = m->be;
    const stoke_graph *g = m->g;
    if (!m->norm_buf &&
        !(m->norm_buf =
              malloc((size_t)g->nparams * (sizeof(float *) + sizeof(size_t) + sizeof(double)))))
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory in step", g->name);
    const float **gx = m->norm_buf;
    size_t *gn = (size_t *)(gx + g->nparams);
    double *gs = (double *)(gn + g->nparams);
    int count = 0;
    for (int i = 0; i < g->nparams; i++)
        if (m->grad[i]) {
            gx[count] = m->grad[i];
            gn[count++] = (size_t)g->params[i].info.elems;
        }
    m->norm_count = count;
    double inv = 1.0 / ((double)m->scaler.scale * accum);
    m->step_lr = lr;
    m->calls++;
    m->micro = 0;
    m->backward_passes = 0;
    if (be->step_decide) {
        /* decided on the device, in the step's graph; read at the next backward */
        be->set_step(be->ctx, (float)lr, m->steps + 1, inv, &m->o.optim);
        stoke_status us = nn_run_graphed(m, &m->step_graph, &m->step_runs, step_ops);
        if (us == STOKE_OK)
            us = be->step_fetch(be->ctx);
        if (us != STOKE_OK)
            return us;
        m->step_pending = true;
        if (!applied)
            return STOKE_OK;
        stoke_status st = nn_settle_step(m);
        *applied = st == STOKE_OK && !m->step_skipped;
        return st;
    }
    /* every gradient's sum of squares in one call */
    be->sum_squares(be->ctx, gx, gn, count, gs);
    double sumsq = 0;
    int bad = -1;
    for (int k = 0; k < count; k++) {
        sumsq += gs[k];
        if (!isfinite(gs[k]) && bad < 0)
            bad = k;
    }
    if (bad >= 0) {
        stoke_model_zero_grad(m);
        return step_outcome(m, INFINITY, bad, true);
    }
    double norm;
    m->step_coef = nk_step_coef(sumsq, inv, m->o.optim.clip_norm, &norm);
    stoke_status us = nn_run_graphed(m, &m->step_graph, &m->step_runs, step_ops);
    if (us != STOKE_OK)
        return us;
    if (applied)
        *applied = true;
    return step_outcome(m, norm, -1, false);
}

/* What a getter reads, settled: a device's forward results (`step` false) or its last
 * step's decision, waited for; an error is kept for the next call that can return
 * one. The model is the caller's: the getters' const promises that what they report
 * does not change, which holds. */
void nn_settle_for_getter(const stoke_model *cm, bool step)
{
    stoke_model *m = (stoke_model *)cm;
    if (!step)
        nn_keep_late(m, nn_settle_forward(m));
    else if (m->step_pending)
        nn_keep_late(m, nn_settle_step(m));
}
