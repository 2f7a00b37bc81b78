/* model.c - the memory plan, the model's arenas (llm.c style: one allocation per kind,
 * cut into named pointers from a table of sizes) and the executor: forward in graph
 * order, backward in reverse, optimizer steps with loss scaling and clipping. Only
 * the backend table touches memory or runs kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/precision.h"
#include "core/rng.h"
#include "nn/backend_impl.h"
#include "nn/cuda/k_base.h" /* nk_step_coef: the step's rule, shared with the device */
#include "nn/marks.h"

#define ALIGN 64
#define NONE  ((size_t)-1)
/* captured (batch, mode) keys per model: the batch, the epoch's last, an odd one */
#define NN_MAX_GRAPHS 8

static size_t align_up(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

const char *stoke_precision_name(stoke_precision p)
{
    switch (p) {
    case STOKE_PREC_FP32: return "fp32";
    case STOKE_PREC_BF16: return "bf16";
    case STOKE_PREC_FP16: return "fp16";
    }
    return "?";
}

bool stoke_precision_parse(const char *s, stoke_precision *out)
{
    for (int p = STOKE_PREC_FP32; p <= STOKE_PREC_FP16; p++)
        if (s && strcmp(s, stoke_precision_name((stoke_precision)p)) == 0) {
            *out = (stoke_precision)p;
            return true;
        }
    return false;
}

const char *stoke_optim_name(stoke_optim_kind k)
{
    return k == STOKE_SGD ? "sgd" : k == STOKE_ADAMW ? "adamw" : "?";
}

double stoke_lr_at(const stoke_lr_schedule *s, int64_t step)
{
    if (step < 0)
        step = 0;
    if (step < s->warmup_steps) /* linear warm-up: lr/W, 2 lr/W, ..., lr */
        return s->lr * (double)(step + 1) / (double)s->warmup_steps;
    int64_t t = step - (s->warmup_steps > 0 ? s->warmup_steps : 0);
    switch (s->kind) {
    case STOKE_LR_STEP:
        return s->step_size > 0 ? s->lr * pow(s->gamma, (double)(t / s->step_size)) : s->lr;
    case STOKE_LR_COSINE: {
        int64_t T = s->total_steps - (s->warmup_steps > 0 ? s->warmup_steps : 0);
        if (T <= 0 || t >= T)
            return s->min_lr;
        return s->min_lr + (s->lr - s->min_lr) * (1 + cos(M_PI * (double)t / (double)T)) / 2;
    }
    case STOKE_LR_CONSTANT: break;
    }
    return s->lr;
}

/* ---- layout: the table of sizes every arena is cut from ---- */

typedef struct layout {
    int nnodes, nparams;
    int64_t batch;
    int64_t last_batch; /* the epoch's last batch when smaller than batch, else 0 */
    /* per node */
    int *alias;     /* the node whose buffers it uses (itself but for reshape) */
    bool *lowp;     /* runs in the model's low precision */
    size_t *out_ps; /* aligned bytes per sample; 0 for aliases */
    size_t *saved_ps;
    size_t *dout_ps; /* 0: no gradient kept */
    /* fused chains (nn_fused_impl): for each member the chain's first node, else -1;
     * at the first node the chain and its kernels */
    int *head;
    int (*chain)[NN_MAX_CHAIN];
    int *chain_len;
    const nn_fused_impl **fused;
    /* per parameter: offsets into their arenas, NONE when absent */
    size_t *param_off, *lp_off, *grad_off, *state_off;
    int slots;
    size_t params, grads, optim, act_ps, fwd_ps, ws;
    /* recompute: nsegs segments, segment s the nodes (seg_start[s], seg_end[s]]; seg[i]
     * the segment whose shared region holds node i's buffers (at shared_off[i] in the
     * forward part, shared_doff[i] in the gradient part), else -1. seg_dout_ps[s] is
     * what zeroing segment s's gradients covers. The region is shared_fwd_ps +
     * shared_dout_ps per sample, counted in act_ps. */
    int nsegs;
    int *seg, *seg_start, *seg_end;
    size_t *shared_off, *shared_doff, *seg_dout_ps;
    size_t shared_fwd_ps, shared_dout_ps;
} layout;

static int L_last(const layout *L, int head) { return L->chain[head][L->chain_len[head] - 1]; }

static void layout_free(layout *L)
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

static stoke_status check_opts(const stoke_graph *g, const stoke_model_opts *o,
                               const nn_backend *be)
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
static stoke_model_opts fill_defaults(const stoke_model_opts *o)
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
static int planned(const layout *L, int64_t b[2])
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
            for (int k = 0, nb = planned(L, b); k < nb && st == STOKE_OK; k++) {
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
static stoke_status ws_at(const stoke_graph *g, const stoke_model_opts *o, const nn_backend *be,
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

static stoke_status layout_build(const stoke_graph *g, const stoke_model_opts *o,
                                 const nn_backend *be, layout *L)
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
        layout_free(L);
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
        layout_free(L);
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
            layout_free(L);
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
    for (int k = 0, nb = planned(L, b); k < nb; k++) {
        size_t ws = 0;
        stoke_status st = ws_at(g, o, be, L, b[k], &ws);
        if (st != STOKE_OK) {
            layout_free(L);
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

static void plan_fill(const layout *L, const stoke_graph *g, const stoke_model_opts *o,
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

/* The backend a model with these options runs on: a new instance (*own, to free)
 * for a device or a thread count of its own, else the CPU's shared table. */
static stoke_status backend_for(const stoke_model_opts *o, const nn_backend **be, nn_backend **own)
{
    *own = NULL;
    *be = nn_cpu_backend();
    if (!o->cuda && o->threads <= 0)
        return STOKE_OK;
    stoke_status st =
        o->cuda ? nn_cuda_backend_new(o->cuda_device, own) : nn_cpu_backend_new(o->threads, own);
    if (st == STOKE_OK)
        *be = *own;
    return st;
}

stoke_status stoke_graph_plan(const stoke_graph *g, const stoke_model_opts *o, stoke_mem_plan *out)
{
    /* A device or a thread count of its own is planned in a context of its own (the
     * libraries' scratch depends on them); otherwise in the shared one, whose
     * primitives stay cached for the next plan. */
    const nn_backend *be;
    nn_backend *own;
    stoke_status st = backend_for(o, &be, &own);
    if (st == STOKE_OK)
        st = check_opts(g, o, be);
    if (st != STOKE_OK) {
        nn_backend_free(own);
        return st;
    }
    stoke_model_opts f = fill_defaults(o);
    layout L;
    st = layout_build(g, &f, be, &L);
    if (st == STOKE_OK)
        plan_fill(&L, g, &f, out);
    layout_free(&L);
    nn_backend_free(own);
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

/* ---- the model ---- */

struct stoke_model {
    const stoke_graph *g;
    stoke_model_opts o;
    const nn_backend *be; /* == own: the backend with this model's context */
    nn_backend *own;
    layout L;
    stoke_mem_plan plan;
    char *params_arena, *grads_arena, *optim_arena, *act_arena, *ws_arena;
    /* batches whose workspace is known to be enough, and the compute threads that held
     * then (the libraries' scratch depends on the thread count too) */
    int64_t *ready;
    int nready, ready_cap, ready_threads;
    /* the named pointers cut from the arenas (llm.c's ParameterTensors) */
    float **param, **grad, **state; /* state: slots per parameter */
    uint16_t **param_lp;
    float **out, **saved, **dout; /* per node, sized for max_batch */
    char *dout_base;
    size_t dout_bytes;
    char *shared_dout; /* the segments' shared gradient region (recompute) */
    double *value;     /* per node: loss and metric values */
    double total_loss;
    int64_t fwd_batch;
    bool fwd_train, fwd_valid;
    uint64_t fwd_key, micro;
    int64_t steps; /* applied (an fp16 overflow's skipped step is not) */
    int64_t calls; /* stoke_model_step calls: the dropout keys', known without the device */
    int backward_passes;
    double grad_norm;
    /* fp16 only (scale 1 otherwise): PyTorch GradScaler's defaults and rules */
    cpu_loss_scaler scaler;
    nn_marks *marks; /* the step's phases (stoke_model_mark), made at the first mark */
    /* Captured forwards and backwards (backend capture_begin), replayed when the same
     * batch, mode and loss scale come again. A key's first call runs as it is (it
     * prepares what the ops cache: cuDNN plans, workspace), its second is captured. */
    struct model_graph {
        int64_t batch;
        bool train;
        float scale; /* the loss scale the backward was captured with */
        int fwd_runs, bwd_runs;
        void *fwd, *bwd;
    } graphs[NN_MAX_GRAPHS];
    int ngraphs;
    void *step_graph; /* the optimizer's updates, any batch */
    int step_runs;
    double step_lr, step_coef; /* the updates' arguments (step_ops) */
    void *norm_buf;            /* the gradients, sizes and sums of squares (step), made once */
    int norm_count;            /* the gradients in it */
    /* A device's results read late (backend forward_fetch, step_decide): a forward's
     * losses and metrics once its backward is queued, a step's decision once the next
     * backward is (settle_forward, settle_step). An error found then is kept in late
     * and returned by the next call that can return one. */
    bool fwd_pending, step_pending, step_skipped;
    const float **fetch_ptrs; /* the forward's loss and metric outputs (device) */
    float *fetch_vals;
    stoke_status late;
    char late_msg[512];
    void *input_event;    /* recorded after each device input copy (stoke_model_input_event) */
    char graphs_off[256]; /* why this model stopped capturing ("" while it does) */
};

/* Every captured graph: they hold the arenas' addresses and the ops' arguments. */
static void graphs_drop(stoke_model *m)
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
    graphs_drop(m);
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
    layout_free(&m->L);
    nn_backend_free(m->own);
    free(m);
}

stoke_status stoke_model_new(const stoke_graph *g, const stoke_model_opts *o, stoke_model **out)
{
    *out = NULL;
    stoke_model *m = calloc(1, sizeof *m);
    if (!m)
        return stoke_fail(STOKE_ERR_NOMEM, "%s: out of memory", g->name);
    stoke_status st = o->cuda ? nn_cuda_backend_new(o->cuda_device, &m->own)
                              : nn_cpu_backend_new(o->threads, &m->own);
    if (st == STOKE_OK)
        st = check_opts(g, o, m->own);
    if (st != STOKE_OK) {
        nn_backend_free(m->own);
        free(m);
        return st;
    }
    const nn_backend *be = m->own;
    m->g = g;
    m->o = fill_defaults(o);
    m->be = be;
    cpu_loss_scaler_init(&m->scaler);
    if (m->o.precision != STOKE_PREC_FP16)
        m->scaler.scale = 1.0f;
    st = layout_build(g, &m->o, be, &m->L);
    if (st != STOKE_OK) {
        nn_backend_free(m->own);
        free(m);
        return st;
    }
    layout *L = &m->L;
    plan_fill(L, g, &m->o, &m->plan);
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
        m->nready = planned(L, m->ready);
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
    stoke_status st = ws_at(m->g, &m->o, m->be, &m->L, batch, &need);
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
        graphs_drop(m);
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
static stoke_status run_graphed(stoke_model *m, void **graph, int *runs,
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
        graphs_drop(m);
        return ops(m);
    }
    return be->replay(be->ctx, *graph);
}

/* Keeps the first error found late (a device's result read after the call that
 * queued its work returned), for the next call that can return it. */
static stoke_status keep_late(stoke_model *m, stoke_status st)
{
    if (st != STOKE_OK && m->late == STOKE_OK) {
        m->late = st;
        snprintf(m->late_msg, sizeof m->late_msg, "%s", stoke_last_error());
    }
    return st;
}

/* The error kept by keep_late, once. */
static stoke_status take_late(stoke_model *m)
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
static stoke_status settle_forward(stoke_model *m)
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

static stoke_status settle_step(stoke_model *m);

stoke_status stoke_model_forward(stoke_model *m, int64_t batch, bool train)
{
    stoke_status ls = take_late(m);
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
    stoke_status fs = run_graphed(m, gs ? &gs->fwd : NULL, gs ? &gs->fwd_runs : NULL, forward_ops);
    if (fs != STOKE_OK)
        return fs;
    int n = 0;
    for (int i = 0; i < m->g->nnodes; i++)
        if (nn_op_is_loss(m->g->nodes[i].op) || nn_op_is_metric(m->g->nodes[i].op))
            m->fetch_ptrs[n++] = m->out[i];
    m->fwd_valid = true;
    if (be->forward_fetch) {
        /* read once the backward is queued (settle_forward); an evaluation's now */
        stoke_status st = be->forward_fetch(be->ctx, m->fetch_ptrs, n);
        if (st != STOKE_OK) {
            m->fwd_valid = false;
            return stoke_fail(st, "%s: forward: %s", m->g->name, stoke_last_error());
        }
        m->fwd_pending = true;
        return train ? STOKE_OK : settle_forward(m);
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
    stoke_status ss = settle_step(m);
    if (ss != STOKE_OK)
        return ss;
    struct model_graph *g = graph_of(m, m->fwd_batch, true);
    if (g && g->bwd && g->scale != m->scaler.scale) { /* the scale is in the loss kernels */
        be->graph_free(be->ctx, g->bwd);
        g->bwd = NULL;
    }
    if (g && !g->bwd)
        g->scale = m->scaler.scale;
    stoke_status st = run_graphed(m, g ? &g->bwd : NULL, g ? &g->bwd_runs : NULL, backward_ops);
    if (st == STOKE_OK) /* the forward's results, while the device runs the backward */
        st = settle_forward(m);
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
    for (int i = m->g->nnodes - 1; i >= 0; i--) {
        const nn_node *nd = &m->g->nodes[i];
        int h = m->L.head[i];
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
    return STOKE_OK;
}

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
static stoke_status settle_step(stoke_model *m)
{
    if (!m->step_pending)
        return take_late(m);
    m->step_pending = false;
    const nn_backend *be = m->be;
    double norm;
    int bad;
    bool skip;
    stoke_status st = be->step_result(be->ctx, &norm, &bad, &skip);
    if (st != STOKE_OK)
        return keep_late(m, stoke_fail(st, "%s: step: %s", m->g->name, stoke_last_error()));
    keep_late(m, step_outcome(m, norm, bad, skip));
    return take_late(m);
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
    stoke_status ps = settle_step(m); /* the last one's, if no backward came between */
    if (ps != STOKE_OK)
        return ps;
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
        stoke_status us = run_graphed(m, &m->step_graph, &m->step_runs, step_ops);
        if (us == STOKE_OK)
            us = be->step_fetch(be->ctx);
        if (us != STOKE_OK)
            return us;
        m->step_pending = true;
        if (!applied)
            return STOKE_OK;
        stoke_status st = settle_step(m);
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
    stoke_status us = run_graphed(m, &m->step_graph, &m->step_runs, step_ops);
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
static void settle_for_getter(const stoke_model *cm, bool step)
{
    stoke_model *m = (stoke_model *)cm;
    if (!step)
        keep_late(m, settle_forward(m));
    else if (m->step_pending)
        keep_late(m, settle_step(m));
}

double stoke_model_value(const stoke_model *m, stoke_tensor t)
{
    settle_for_getter(m, false);
    const nn_node *n = nn_graph_node(m->g, t);
    if (!n || !(nn_op_is_loss(n->op) || nn_op_is_metric(n->op)) || !m->fwd_valid)
        return NAN;
    return m->value[t];
}

double stoke_model_loss(const stoke_model *m)
{
    settle_for_getter(m, false);
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
    settle_for_getter(m, true);
    return m->grad_norm;
}

float stoke_model_loss_scale(const stoke_model *m)
{
    settle_for_getter(m, true);
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
    settle_for_getter(m, true);
    return m->steps;
}

void stoke_model_set_step_count(stoke_model *m, int64_t steps)
{
    settle_for_getter(m, true);
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
    keep_late(m, settle_forward(m));
    stoke_status st = settle_step(m); /* with what was kept */
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
