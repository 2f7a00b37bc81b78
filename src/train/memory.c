/* memory.c - the memory check before a model is allocated. A plan that cannot fit is
 * refused with its numbers and the largest batch that would fit: allocating it anyway
 * grows toward the OOM killer, which ends the run without a word. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "stoke/hw.h"
#include "train/train_impl.h"

static size_t need_total(const train_mem_need *n)
{
    return n->plan->total + (size_t)n->plan->batch * n->ring_per_sample;
}

static size_t plan_total(const train_mem_need *needs, int n)
{
    size_t t = 0;
    for (int i = 0; i < n; i++)
        t += need_total(&needs[i]);
    return t;
}

stoke_status train_check_memory(const char *model, const train_mem_need *needs, int n,
                                double budget, size_t *left)
{
    if (left)
        *left = 0;
    size_t have;
    const char *source;
    if (budget > 0) {
        have = (size_t)budget;
        source = "--memory-budget";
    } else {
        /* read now, not at startup: the data held in memory is already loaded */
        stoke_mem_info mi;
        if (stoke_mem_probe(NULL, &mi) != STOKE_OK || mi.available_bytes == 0)
            return STOKE_OK; /* unknown: nothing to check against (*left 0: no limit) */
        have = (size_t)mi.available_bytes;
        source = mi.available_bytes < mi.meminfo_available_bytes ? "under the cgroup's memory limit"
                                                                 : "MemAvailable";
    }
    size_t need = plan_total(needs, n);
    if (need <= have) {
        if (left)
            *left = have - need > 0 ? have - need : 1;
        return STOKE_OK;
    }
    char parts[1024] = "", a[32], b[32], c[32], d[32], e[32], f[32], h[32];
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof parts; i++) {
        const stoke_mem_plan *p = needs[i].plan;
        char r[64] = "";
        if (needs[i].ring_per_sample)
            snprintf(r, sizeof r, ", loader ring %s",
                     stoke_format_bytes((double)needs[i].ring_per_sample * (double)p->batch, h,
                                        sizeof h));
        len += (size_t)snprintf(
            parts + len, sizeof parts - len,
            "%s%s at batch %" PRId64 " needs %s (parameters %s, gradients %s, "
            "optimizer state %s, activations %s, workspace %s%s)",
            i ? "; " : "", needs[i].what, p->batch,
            stoke_format_bytes((double)need_total(&needs[i]), a, sizeof a),
            stoke_format_bytes((double)p->params, b, sizeof b),
            stoke_format_bytes((double)p->grads, c, sizeof c),
            stoke_format_bytes((double)p->optim, d, sizeof d),
            stoke_format_bytes((double)p->activations_per_sample * (double)p->batch, e, sizeof e),
            stoke_format_bytes((double)p->workspace, f, sizeof f), r);
    }
    /* the largest batch of the first model that fits beside the others */
    size_t others = need - need_total(&needs[0]);
    int64_t fits =
        others < have ? stoke_plan_max_batch(needs[0].plan, have - others, needs[0].ring_per_sample)
                      : 0;
    const stoke_mem_plan *p0 = needs[0].plan;
    char advice[256];
    size_t fixed0 = p0->params + p0->grads + p0->optim;
    if (others >= have && fixed0 < have) /* the others are too big, not the first */
        snprintf(advice, sizeof advice,
                 "the %s model alone needs %s (%s lowers its "
                 "activations and workspace)",
                 needs[1].what, stoke_format_bytes((double)need_total(&needs[1]), f, sizeof f),
                 needs[1].batch_flag);
    else if (fits > 0) {
        /* checkpointing keeps the batch: worth naming when it fits a larger one */
        char alt[96] = "";
        stoke_model_opts o = p0->opts;
        stoke_mem_plan rp;
        o.recompute = true;
        if (o.training && !p0->opts.recompute && p0->graph &&
            stoke_graph_plan(p0->graph, &o, &rp) == STOKE_OK && rp.recompute_segments > 0) {
            int64_t rfits = stoke_plan_max_batch(&rp, have - others, needs[0].ring_per_sample);
            if (rfits > fits)
                snprintf(alt, sizeof alt, ", or %" PRId64 " with --recompute", rfits);
        }
        snprintf(advice, sizeof advice,
                 "the largest %s batch that fits is %" PRId64 " (%s %" PRId64 ")%s", needs[0].what,
                 fits, needs[0].batch_flag, fits, alt);
    } else
        snprintf(advice, sizeof advice,
                 "not even one sample fits: the %s model's parameters, "
                 "gradients and optimizer state alone need %s",
                 needs[0].what, stoke_format_bytes((double)fixed0, f, sizeof f));
    char all[64] = "";
    if (n > 1)
        snprintf(all, sizeof all, "; %s in all", stoke_format_bytes((double)need, a, sizeof a));
    return stoke_fail(STOKE_ERR_NOMEM,
                      "not enough memory for model %s: %s%s, and %s is available (%s); %s. "
                      "`stoke train --dry-run` shows the plan; --memory-budget sets the limit "
                      "this check uses",
                      model, parts, all, stoke_format_bytes((double)have, h, sizeof h), source,
                      advice);
}
