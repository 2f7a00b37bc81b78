/* plan.c - the memory plan: the table of sizes every arena is cut from (fused chains,
 * recompute segments, workspace per planned batch), stoke_graph_plan and the search
 * for the largest batch that fits a budget. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/model_impl.h"

void nn_layout_free(layout *L)
{
    free(L->alias);
    free(L->lowp);
    free(L->out_ps);
    free(L->saved_ps);
    free(L->dout_ps);
    free(L->head);
    free(L->chain);
    free(L->chain_len);
    free(L->fused);
    free(L->param_off);
    free(L->lp_off);
    free(L->grad_off);
    free(L->state_off);
    free(L->seg);
    free(L->seg_start);
    free(L->seg_end);
    free(L->shared_off);
    free(L->shared_doff);
    free(L->seg_dout_ps);
    memset(L, 0, sizeof *L);
}

static int optim_slots(const stoke_model_opts *o)
{
    if (!o->training)
        return 0;
    if (o->optim.kind == STOKE_ADAMW)
        return 2;
    return o->optim.momentum > 0 ? 1 : 0;
}

stoke_status nn_check_opts(const stoke_graph *g, const stoke_model_opts *o, const nn_backend *be)
{
    if (!g || !o)
        return stoke_fail(STOKE_ERR_ARG, "nn: no graph or options");
    if (g->status != STOKE_OK)
        return stoke_graph_status(g);
    if (g->nnodes == 0)
        return stoke_fail(STOKE_ERR_ARG, "%s: the graph is empty", g->name);
    if (o->max_batch < 1)
        return stoke_fail(STOKE_ERR_ARG, "%s: max batch %lld must be >= 1", g->name,
                          (long long)o->max_batch);
    if (o->epoch_samples < 0)
        return stoke_fail(STOKE_ERR_ARG, "%s: epoch samples %lld must be >= 0", g->name,
                          (long long)o->epoch_samples);
    if (o->threads < 0)
        return stoke_fail(STOKE_ERR_ARG, "%s: threads %d must be >= 0", g->name, o->threads);
    if (o->precision < STOKE_PREC_FP32 || o->precision > STOKE_PREC_FP16)
        return stoke_fail(STOKE_ERR_ARG, "%s: unknown precision %d", g->name, (int)o->precision);
    if (o->training) {
        if (o->optim.kind != STOKE_SGD && o->optim.kind != STOKE_ADAMW)
            return stoke_fail(STOKE_ERR_ARG, "%s: unknown optimizer %d", g->name,
                              (int)o->optim.kind);
        if (!(o->optim.clip_norm >= 0))
            return stoke_fail(STOKE_ERR_ARG, "%s: clip norm %g must be >= 0", g->name,
                              (double)o->optim.clip_norm);
        if (!be->check_optim || !be->sgd || !be->adamw || !be->scale ||
            !(be->sum_squares ||
              (be->step_decide && be->set_step && be->step_fetch && be->step_result)))
            return stoke_fail(STOKE_ERR_UNAVAILABLE,
                              "%s: the optimizers are not built yet in the %s backend", g->name,
                              be->name);
        stoke_status st = be->check_optim(be->ctx, &o->optim);
        if (st != STOKE_OK)
            return st;
    }
    for (int i = 0; i < g->nnodes; i++)
        if (!be->ops[g->nodes[i].op].forward)
            return stoke_fail(STOKE_ERR_UNAVAILABLE, "%s: op %s not built yet in the %s backend",
                              g->nodes[i].name, stoke_nn_op_name(g->nodes[i].op), be->name);
    return STOKE_OK;
}

/* The optimizer options with PyTorch's AdamW defaults filled in for zeros. */
stoke_model_opts nn_fill_defaults(const stoke_model_opts *o)
{
    stoke_model_opts r = *o;
    if (r.optim.kind == STOKE_ADAMW) {
        if (r.optim.beta1 == 0)
            r.optim.beta1 = 0.9f;
        if (r.optim.beta2 == 0)
            r.optim.beta2 = 0.999f;
        if (r.optim.eps == 0)
            r.optim.eps = 1e-8f;
    }
    return r;
}

/* The batches a layout is planned for: its batch, then the epoch's last one if any. */
int nn_planned(const layout *L, int64_t b[2])
{
    b[0] = L->batch;
    b[1] = L->last_batch;
    return L->last_batch > 0 ? 2 : 1;
}

/* Finds the chains the backend runs fused: from each node, the run of nodes that are
 * each the only reader of the previous one's output (which is no model output), the
 * longest the backend takes at every planned batch (whether a library's kernel can
 * be fused may depend on the layout it picks for the batch). Marks L->head, chain,
 * chain_len, fused. */
static stoke_status find_chains(const stoke_graph *g, const stoke_model_opts *o,
                                const nn_backend *be, layout *L)
{
    int n = g->nnodes;
    for (int i = 0; i < n; i++)
        L->head[i] = -1;
    if (o->no_fusion || !be->fuse)
        return STOKE_OK;
    int *readers = calloc((size_t)n, sizeof *readers), *reader = calloc((size_t)n, sizeof *reader);
    if (!readers || !reader) {
        free(readers);
        free(reader);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory planning", g->name);
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            readers[g->nodes[i].in[k]]++;
            reader[g->nodes[i].in[k]] = i;
        }
    stoke_status st = STOKE_OK;
    for (int i = 0; i < n && st == STOKE_OK; i++) {
        if (L->head[i] >= 0)
            continue;
        int c[NN_MAX_CHAIN] = {i}, len = 1;
        while (len < NN_MAX_CHAIN) {
            int last = c[len - 1];
            if (readers[last] != 1 || g->nodes[last].is_output)
                break;
            c[len++] = reader[last];
        }
        for (; len >= 2 && st == STOKE_OK; len--) {
            stoke_precision p = L->lowp[i] ? o->precision : STOKE_PREC_FP32;
            const nn_fused_impl *f = NULL;
            int64_t b[2];
            for (int k = 0, nb = nn_planned(L, b); k < nb && st == STOKE_OK; k++) {
                const nn_fused_impl *fk = NULL;
                st = be->fuse(be->ctx, g, c, len, b[k], p, &fk);
                f = k == 0 || fk == f ? fk : NULL;
            }
            if (st != STOKE_OK || !f)
                continue;
            for (int k = 0; k < len; k++) {
                L->head[c[k]] = i;
                L->chain[i][k] = c[k];
            }
            L->chain_len[i] = len;
            L->fused[i] = f;
            break;
        }
    }
    free(readers);
    free(reader);
    return st;
}

/* The workspace the nodes need at `batch` (the largest over them, aligned), asking
 * each op (or fused chain) at the precision it runs in; this also prepares what the
 * kernels cache for the shape. Fails naming the node if a kernel cannot run there. */
stoke_status nn_ws_at(const stoke_graph *g, const stoke_model_opts *o, const nn_backend *be,
                      const layout *L, int64_t batch, size_t *out)
{
    size_t most = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const nn_node *nd = &g->nodes[i];
        const nn_op_impl *op = &be->ops[nd->op];
        int h = L->head[i];
        if (!(h == i || (h < 0 && op->workspace)))
            continue; /* a fused chain's workspace is planned at its first node */
        size_t ws = 0;
        stoke_precision p = L->lowp[i] ? o->precision : STOKE_PREC_FP32;
        stoke_status st =
            h == i ? L->fused[i]->workspace(be->ctx, g, L->chain[i], L->chain_len[i], batch, p, &ws)
                   : op->workspace(be->ctx, g, nd, batch, p, &ws);
        if (st != STOKE_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", stoke_last_error());
            return stoke_fail(st, "%s: planning %s at batch %lld: %s", g->name, nd->name,
                              (long long)batch, msg);
        }
        if (align_up(ws) > most)
            most = align_up(ws);
    }
    *out = most;
    return STOKE_OK;
}

/* Nodes whose output stays in memory whatever the segments: data (inputs and what is
 * computed from them alone: cheap, and often read far away, as a target by the loss),
 * losses and metrics (their values are read once, after forward), and outputs. */
static bool always_kept(const nn_node *nd)
{
    return nd->op == STOKE_NN_INPUT || !nd->needs_grad || nn_op_is_loss(nd->op) ||
           nn_op_is_metric(nd->op) || nd->is_output;
}

/* Checkpointed segments (Chen et al. 2016, "Training deep nets with sublinear memory
 * cost"). A cut is a node after which no earlier output but its own (and kept ones) is
 * read, so everything between two cuts can be dropped after forward and rebuilt from
 * the earlier cut's output alone. The pieces between cuts are grouped into about
 * sqrt(nodes) segments of similar bytes: memory then goes as the kept cut outputs plus
 * one segment, both about sqrt of the whole. Fills L->nsegs, seg*, shared*. */
static stoke_status find_segments(const stoke_graph *g, layout *L)
{
    int n = g->nnodes;
    L->seg = malloc((size_t)n * sizeof *L->seg);
    L->seg_start = malloc((size_t)n * sizeof *L->seg_start);
    L->seg_end = malloc((size_t)n * sizeof *L->seg_end);
    L->shared_off = calloc((size_t)n, sizeof *L->shared_off);
    L->shared_doff = calloc((size_t)n, sizeof *L->shared_doff);
    L->seg_dout_ps = calloc((size_t)n, sizeof *L->seg_dout_ps);
    int *last = malloc((size_t)n * sizeof *last), *cuts = malloc((size_t)n * sizeof *cuts);
    bool *kept = malloc((size_t)n * sizeof *kept);
    double *prefix = malloc((size_t)n * sizeof *prefix);
    if (!L->seg || !L->seg_start || !L->seg_end || !L->shared_off || !L->shared_doff ||
        !L->seg_dout_ps || !last || !cuts || !kept || !prefix) {
        free(last);
        free(cuts);
        free(kept);
        free(prefix);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory planning", g->name);
    }
    for (int i = 0; i < n; i++) {
        L->seg[i] = -1;
        last[i] = i;
        kept[i] = always_kept(&g->nodes[i]);
    }
    for (int i = 0; i < n; i++) {
        const nn_node *nd = &g->nodes[i];
        if (nd->op == STOKE_NN_RESHAPE) {
            if (nd->is_output) /* its buffer is its source's */
                kept[L->alias[i]] = true;
            continue; /* its readers read its source: they are counted there */
        }
        for (int k = 0; k < nd->nin; k++) {
            int u = L->alias[nd->in[k]];
            if (last[u] < i)
                last[u] = i;
        }
    }
    /* cuts, and the bytes the nodes up to each would free */
    int ncuts = 0, counted = 0;
    int live = -1; /* the last reader of any earlier node that can be dropped */
    double bytes = 0;
    for (int c = 0; c < n; c++) {
        const nn_node *nd = &g->nodes[c];
        int h = L->head[c];
        bool owner = nd->op != STOKE_NN_INPUT && nd->op != STOKE_NN_RESHAPE &&
                     (h < 0 || L_last(L, h) == c); /* a chain stays whole */
        if (owner && !kept[c])
            bytes += (double)(L->out_ps[c] + L->saved_ps[c] + L->dout_ps[c]);
        if (nd->op != STOKE_NN_INPUT && nd->op != STOKE_NN_RESHAPE)
            counted++;
        if (owner && live <= c) {
            cuts[ncuts] = c;
            prefix[ncuts++] = bytes;
        }
        if (!kept[c] && last[c] > live)
            live = last[c];
    }
    /* sqrt(nodes) segments ending at the cuts nearest to equal shares of the bytes */
    int want = ncuts > 0 ? (int)lround(sqrt((double)counted)) : 0;
    if (want > ncuts)
        want = ncuts;
    double total = ncuts > 0 ? prefix[ncuts - 1] : 0;
    int prev_cut = -1, start = -1;
    L->nsegs = 0;
    for (int j = 1; j <= want; j++) {
        int best = -1;
        if (j == want) {
            best = ncuts - 1;
        } else {
            double target = total * j / want;
            for (int k = prev_cut + 1; k < ncuts; k++)
                if (best < 0 || fabs(prefix[k] - target) < fabs(prefix[best] - target))
                    best = k;
                else
                    break; /* prefix grows: past the nearest */
        }
        if (best <= prev_cut)
            continue;
        prev_cut = best;
        int end = cuts[best], s = L->nsegs;
        size_t fwd = 0, dout = 0;
        for (int i = start + 1; i < end; i++) {
            const nn_node *nd = &g->nodes[i];
            int h = L->head[i];
            if (kept[i] || nd->op == STOKE_NN_INPUT || nd->op == STOKE_NN_RESHAPE ||
                (h >= 0 && L_last(L, h) != i))
                continue;
            L->seg[i] = s;
            L->shared_off[i] = fwd;
            L->shared_doff[i] = dout;
            fwd += L->out_ps[i] + L->saved_ps[i];
            dout += L->dout_ps[i];
        }
        if (fwd == 0 && dout == 0)
            continue; /* nothing to drop here: the next segment starts where this one did */
        L->seg_start[s] = start;
        L->seg_end[s] = end;
        L->seg_dout_ps[s] = dout;
        if (fwd > L->shared_fwd_ps)
            L->shared_fwd_ps = fwd;
        if (dout > L->shared_dout_ps)
            L->shared_dout_ps = dout;
        L->nsegs++;
        start = end;
    }
    free(last);
    free(cuts);
    free(kept);
    free(prefix);
    return STOKE_OK;
}

stoke_status nn_layout_build(const stoke_graph *g, const stoke_model_opts *o, const nn_backend *be,
                             layout *L)
{
    int64_t batch = o->max_batch;
    memset(L, 0, sizeof *L);
    int n = g->nnodes, np = g->nparams;
    L->nnodes = n;
    L->nparams = np;
    L->batch = batch;
    if (o->epoch_samples > 0 && o->epoch_samples % batch != 0)
        L->last_batch = o->epoch_samples % batch;
    L->alias = calloc((size_t)n, sizeof *L->alias);
    L->lowp = calloc((size_t)n, sizeof *L->lowp);
    L->out_ps = calloc((size_t)n, sizeof(size_t));
    L->saved_ps = calloc((size_t)n, sizeof(size_t));
    L->dout_ps = calloc((size_t)n, sizeof(size_t));
    L->param_off = calloc((size_t)np + 1, sizeof(size_t));
    L->lp_off = calloc((size_t)np + 1, sizeof(size_t));
    L->grad_off = calloc((size_t)np + 1, sizeof(size_t));
    L->state_off = calloc((size_t)np + 1, sizeof(size_t));
    L->head = calloc((size_t)n, sizeof *L->head);
    L->chain = calloc((size_t)n, sizeof *L->chain);
    L->chain_len = calloc((size_t)n, sizeof *L->chain_len);
    L->fused = calloc((size_t)n, sizeof *L->fused);
    if (!L->alias || !L->lowp || !L->out_ps || !L->saved_ps || !L->dout_ps || !L->param_off ||
        !L->lp_off || !L->grad_off || !L->state_off || !L->head || !L->chain || !L->chain_len ||
        !L->fused) {
        nn_layout_free(L);
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory planning", g->name);
    }
    L->slots = optim_slots(o);
    for (int i = 0; i < n; i++)
        L->lowp[i] =
            o->precision != STOKE_PREC_FP32 && be->supports(be->ctx, g->nodes[i].op, o->precision);
    stoke_status fst = find_chains(g, o, be, L);
    if (fst != STOKE_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", stoke_last_error());
        nn_layout_free(L);
        return stoke_fail(fst, "%s: planning at batch %lld: %s", g->name, (long long)batch, msg);
    }
    for (int i = 0; i < n; i++) {
        const nn_node *nd = &g->nodes[i];
        const nn_op_impl *op = &be->ops[nd->op];
        L->alias[i] = nd->op == STOKE_NN_RESHAPE ? L->alias[nd->in[0]] : i;
        bool scalar = nn_op_is_loss(nd->op) || nn_op_is_metric(nd->op);
        size_t el = scalar ? 1 : (size_t)stoke_shape_elems(&nd->shape);
        /* a fused chain keeps only its last node's output and gradient, and one saved
         * state, there; its first node plans the workspace */
        int h = L->head[i];
        bool inner = h >= 0 && L->chain[h][L->chain_len[h] - 1] != i;
        if (nd->op != STOKE_NN_RESHAPE && !inner)
            L->out_ps[i] = align_up(el * sizeof(float));
        if (h < 0)
            L->saved_ps[i] = op->saved_bytes ? align_up(op->saved_bytes(be->ctx, g, nd)) : 0;
        else if (!inner)
            L->saved_ps[i] =
                align_up(L->fused[h]->saved_bytes(be->ctx, g, L->chain[h], L->chain_len[h]));
        if (o->training && nd->needs_grad && !scalar && nd->op != STOKE_NN_INPUT &&
            nd->op != STOKE_NN_RESHAPE && !inner)
            L->dout_ps[i] = align_up(el * sizeof(float));
    }
    if (o->training && o->recompute) {
        stoke_status st = find_segments(g, L);
        if (st != STOKE_OK) {
            nn_layout_free(L);
            return st;
        }
    }
    for (int i = 0; i < n; i++)
        if (!L->seg || L->seg[i] < 0) {
            L->fwd_ps += L->out_ps[i] + L->saved_ps[i];
            L->act_ps += L->out_ps[i] + L->saved_ps[i] + L->dout_ps[i];
        }
    L->fwd_ps += L->shared_fwd_ps;
    L->act_ps += L->shared_fwd_ps + L->shared_dout_ps;
    int64_t b[2];
    for (int k = 0, nb = nn_planned(L, b); k < nb; k++) {
        size_t ws = 0;
        stoke_status st = nn_ws_at(g, o, be, L, b[k], &ws);
        if (st != STOKE_OK) {
            nn_layout_free(L);
            return st;
        }
        if (ws > L->ws)
            L->ws = ws;
    }
    for (int i = 0; i < np; i++) {
        const nn_param *p = &g->params[i];
        size_t bytes = align_up((size_t)p->info.elems * sizeof(float));
        L->param_off[i] = L->params;
        L->params += bytes;
        L->lp_off[i] = L->grad_off[i] = L->state_off[i] = NONE;
        if (p->lowp && L->lowp[p->info.layer]) {
            L->lp_off[i] = L->params;
            L->params += align_up((size_t)p->info.elems * sizeof(uint16_t));
        }
        if (o->training && p->info.trainable) {
            L->grad_off[i] = L->grads;
            L->grads += bytes;
            if (L->slots) {
                L->state_off[i] = L->optim;
                L->optim += bytes * (size_t)L->slots;
            }
        }
    }
    return STOKE_OK;
}

void nn_plan_fill(const layout *L, const stoke_graph *g, const stoke_model_opts *o,
                  stoke_mem_plan *p)
{
    memset(p, 0, sizeof *p);
    p->batch = L->batch;
    p->last_batch = L->last_batch;
    p->params = L->params;
    p->grads = L->grads;
    p->optim = L->optim;
    p->activations_per_sample = L->act_ps;
    p->workspace = L->ws;
    p->recompute_segments = L->nsegs;
    p->total = p->params + p->grads + p->optim + (size_t)L->batch * p->activations_per_sample +
               p->workspace;
    p->graph = g;
    p->opts = *o;
    p->opts.max_batch = L->batch;
}

stoke_status nn_backend_for(const stoke_graph *g, const stoke_model_opts *o, nn_backend **out)
{
    stoke_status st = o->cuda ? nn_cuda_backend_new(o->cuda_device, o->tf32, out)
                              : nn_cpu_backend_new(o->threads, out);
    if (st == STOKE_OK)
        st = nn_check_opts(g, o, *out);
    if (st != STOKE_OK) {
        nn_backend_free(*out);
        *out = NULL;
    }
    return st;
}

stoke_status stoke_graph_plan(const stoke_graph *g, const stoke_model_opts *o, stoke_mem_plan *out)
{
    /* Planned in a context of its own, as the model will run (the libraries' scratch
     * depends on the device and the threads). */
    nn_backend *be;
    stoke_status st = nn_backend_for(g, o, &be);
    if (st != STOKE_OK)
        return st;
    stoke_model_opts f = nn_fill_defaults(o);
    layout L;
    st = nn_layout_build(g, &f, be, &L);
    if (st == STOKE_OK)
        nn_plan_fill(&L, g, &f, out);
    nn_layout_free(&L);
    nn_backend_free(be);
    return st;
}

/* Whether plan's model compiled for b samples fits the budget. A batch that cannot
 * be planned (sizes past the kernels' int range at a huge batch) does not fit. */
static bool plan_fits(const stoke_mem_plan *plan, int64_t b, size_t budget_bytes,
                      size_t extra_per_sample)
{
    stoke_model_opts o = plan->opts;
    o.max_batch = b;
    stoke_mem_plan p;
    return stoke_graph_plan(plan->graph, &o, &p) == STOKE_OK &&
           (double)p.total + (double)b * (double)extra_per_sample <= (double)budget_bytes;
}

int64_t stoke_plan_max_batch(const stoke_mem_plan *plan, size_t budget_bytes,
                             size_t extra_per_sample)
{
    if (!plan || !plan->graph || plan->activations_per_sample == 0)
        return 0;
    /* total(b) = fixed + b x per_sample + workspace(b) with workspace >= 0, so b_max
     * below bounds the answer; a batch larger than the epoch is never run. The
     * workspace is not monotone in b (see stoke_mem_plan): a batch can fail to fit
     * while larger ones do (measured: the reference CNN at 63671 needs 22 GB of
     * workspace, at 70000 only 8.8 GB). Halving or galloping steps jump over such
     * regions and stop at a low local boundary, so the search walks down from b_max in
     * steps of 1/64 of the batch (about 300 plans from 10^6 to 10^4, each a few ms),
     * then bisects between the first batch that fits and the step above it. */
    size_t fixed = plan->params + plan->grads + plan->optim;
    if (budget_bytes <= fixed)
        return 0;
    int64_t b =
        (int64_t)((budget_bytes - fixed) / (plan->activations_per_sample + extra_per_sample));
    if (b > (int64_t)1 << 40)
        b = (int64_t)1 << 40;
    if (plan->opts.epoch_samples > 0 && b > plan->opts.epoch_samples)
        b = plan->opts.epoch_samples;
    int64_t lo = 0, hi = b + 1;
    while (b >= 1) {
        if (plan_fits(plan, b, budget_bytes, extra_per_sample)) {
            lo = b;
            break;
        }
        hi = b;
        b -= b / 64 > 1 ? b / 64 : 1;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (plan_fits(plan, mid, budget_bytes, extra_per_sample))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}
