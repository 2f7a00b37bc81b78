/* dist.c - the trainer's data parallel parts (docs/distributed.md): the world it runs
 * in and this rank's share of the machine, the batch every rank agrees on, the
 * reducer on the model with every replica starting from rank 0's weights, the stop
 * every rank agrees on, and the figures (evaluation, the epoch's sums, the all-reduce
 * column, each rank's step) summed or gathered over the ranks. A world of one takes
 * none of these paths: a single process trains exactly as before. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "train/trainer.h"

/* Repetitions of the unhidden all-reduce measured at the start (its median). */
#define CALIBRATE_REPS 5
#define BUCKET_MIN     ((size_t)256 << 10)
#define BUCKET_MAX     ((size_t)25 << 20)

bool train_dist_on(const stoke_trainer *t)
{
    return t->world && stoke_dist_world_size(t->world) > 1;
}

int train_rank(const stoke_trainer *t) { return t->world ? stoke_dist_rank(t->world) : 0; }

int train_world(const stoke_trainer *t) { return t->world ? stoke_dist_world_size(t->world) : 1; }

int64_t train_epoch_samples(const stoke_trainer *t)
{
    int64_t world = train_world(t);
    return (t->info.count + world - 1) / world;
}

int64_t train_epoch_batches(const stoke_trainer *t)
{
    int64_t bs = t->cfg.batch_size;
    return (train_epoch_samples(t) + bs - 1) / bs;
}

/* "vm (2 ranks), node2 (2 ranks)": the world's hosts in rank order, as far as fits. */
static stoke_status world_hosts(stoke_trainer *t, char *out, size_t size)
{
    int world = train_world(t);
    char(*all)[64] = calloc((size_t)world, sizeof *all);
    if (!all)
        return stoke_fail(STOKE_ERR_NOMEM, "data parallel: out of memory");
    char mine[64];
    snprintf(mine, sizeof mine, "%s", stoke_dist_host_name(t->world));
    stoke_status s = stoke_dist_allgather(t->world, mine, sizeof mine, all);
    out[0] = '\0';
    for (int r = 0; s == STOKE_OK && r < world; r++) {
        bool seen = false;
        for (int q = 0; q < r && !seen; q++)
            seen = !strcmp(all[q], all[r]);
        if (seen)
            continue;
        int n = 0;
        for (int q = r; q < world; q++)
            n += !strcmp(all[q], all[r]);
        stoke_more(out, size, "%s%s (%d rank%s)", out[0] ? ", " : "", all[r], n, n == 1 ? "" : "s");
    }
    free(all);
    return s;
}

stoke_status train_dist_begin(stoke_trainer *t)
{
    if (t->cfg.world && !t->trial.on) /* a tuning trial measures this process alone */
        t->world = t->cfg.world;
    if (!train_dist_on(t))
        return STOKE_OK;
    stoke_dist *w = t->world;
    stoke_cpu_info *cpu = &t->machine.cpu;
    int local = stoke_dist_local_size(w), avail = stoke_cpu_available(cpu);
    char share[240];
    /* mpirun binds each rank to its cores when there are few (the affinity mask says
     * so); unbound ranks on one machine split its CPUs between them */
    if (local > 1 && cpu->usable_cpus >= cpu->logical_cpus) {
        int mine = avail / local > 0 ? avail / local : 1;
        snprintf(share, sizeof share, "%d of the %d CPUs (%d ranks on this machine share them%s)",
                 mine, avail, local,
                 avail < local ? ", fewer CPUs than ranks: expect it slow" : "");
        cpu->available_cpus = mine;
    } else {
        snprintf(share, sizeof share, "%d CPU%s (%s)", avail, avail == 1 ? "" : "s",
                 local > 1 ? "bound to it by mpirun" : "the only rank on this machine");
    }
    t->dist.grace_known = stoke_dist_stop_grace(&t->dist.grace_s);
    char hosts[400];
    stoke_status s = world_hosts(t, hosts, sizeof hosts);
    if (s != STOKE_OK)
        return s;
    train_info(t,
               "data parallel: rank %d of %d on %s, gradients over %s; this rank has %s; "
               "the world: %s",
               stoke_dist_rank(w), stoke_dist_world_size(w), stoke_dist_host_name(w),
               stoke_dist_transport(w), share, hosts);
    return STOKE_OK;
}

stoke_status train_dist_agree_batch(stoke_trainer *t)
{
    if (!train_dist_on(t))
        return STOKE_OK;
    stoke_train_config *c = &t->cfg;
    /* every rank must take the same number of batches an epoch: one batch, the
     * smallest any rank fits */
    double b = (double)c->batch_size;
    stoke_status s = stoke_dist_min(t->world, &b, 1);
    if (s == STOKE_OK && (int64_t)b != c->batch_size) {
        train_info(t, "batch: %" PRId64 " (the smallest rank's; this rank fitted %" PRId64 ")",
                   (int64_t)b, c->batch_size);
        c->batch_size = t->decision.batch = (int64_t)b;
    }
    return s;
}

stoke_status train_dist_agree_steps(stoke_trainer *t)
{
    if (!train_dist_on(t))
        return STOKE_OK;
    stoke_train_config *c = &t->cfg;
    /* one accumulation and one precision: ranks that differ would not step together
     * or would not compute the same update */
    double lo[2] = {(double)c->accumulate, (double)t->precision}, hi[2] = {lo[0], lo[1]};
    stoke_status s = stoke_dist_min(t->world, lo, 2);
    if (s == STOKE_OK)
        s = stoke_dist_max(t->world, hi, 2);
    if (s != STOKE_OK)
        return s;
    if (lo[0] != hi[0] || lo[1] != hi[1])
        return stoke_fail(STOKE_ERR_ARG, "data parallel: the ranks decided different %s (give %s)",
                          lo[0] != hi[0] ? "accumulations" : "precisions",
                          lo[0] != hi[0] ? "--accumulate" : "--precision");
    int world = train_world(t);
    int64_t eff = (int64_t)world * c->batch_size * c->accumulate;
    train_info(t,
               "effective batch: %d ranks x batch %" PRId64 " x %" PRId64 " accumulated = %" PRId64
               " samples a step; lr %g as given (not scaled with "
               "the ranks: scale it yourself if the recipe asks, e.g. linearly with the "
               "effective batch)",
               world, c->batch_size, c->accumulate, eff, c->lr);
    return STOKE_OK;
}

/* The model's trainable floats: what one step all-reduces. */
static size_t grad_floats(const stoke_trainer *t)
{
    return (size_t)stoke_graph_trainable_elems(t->graph);
}

stoke_status train_dist_attach(stoke_trainer *t)
{
    if (!train_dist_on(t))
        return STOKE_OK;
    stoke_status s = STOKE_OK;
    if (t->device != STOKE_TUNE_CPU)
        s = stoke_dist_use_device(t->world, t->device);
    stoke_grad_reducer r = stoke_dist_reducer(t->world);
    /* about four buckets, within [256 KiB, DDP's 25 MiB]: a small model's gradients in
     * one bucket could only start once backward is over, with nothing left to hide it */
    size_t quarter = grad_floats(t) * sizeof(float) / 4;
    r.bucket_bytes = quarter < BUCKET_MIN   ? BUCKET_MIN
                     : quarter > BUCKET_MAX ? BUCKET_MAX
                                            : quarter;
    if (s == STOKE_OK)
        s = stoke_model_set_reducer(t->model, &r);
    if (s == STOKE_OK) /* replicas start equal, resumed or not */
        s = stoke_dist_bcast_params(t->world, t->model);
    if (s == STOKE_OK && t->device == STOKE_TUNE_CPU)
        s = stoke_dist_time_allreduce(t->world, grad_floats(t), CALIBRATE_REPS,
                                      &t->dist.unhidden_s);
    if (s != STOKE_OK)
        return train_wrap_error(s, "data parallel");
    const stoke_grad_bucket *b;
    int nb = stoke_model_buckets(t->model, &b);
    if (t->device == STOKE_TUNE_CPU)
        train_info(t,
                   "all-reduce: %.1f MB of gradients a step in %d bucket%s, each started as "
                   "soon as backward has produced it, on a communication thread; unhidden it "
                   "takes %.2f ms here (measured now)",
                   (double)grad_floats(t) * 4 / 1e6, nb, nb == 1 ? "" : "s",
                   t->dist.unhidden_s * 1e3);
    else
        train_info(t,
                   "all-reduce: %.1f MB of gradients a step in %d bucket%s over NCCL, each "
                   "queued on the model's stream as soon as backward has produced it (the "
                   "host never waits; on the one stream it runs between backward's kernels)",
                   (double)grad_floats(t) * 4 / 1e6, nb, nb == 1 ? "" : "s");
    stoke_dist_reset_stats(t->world);
    return STOKE_OK;
}

void train_dist_set_sync(stoke_trainer *t, bool last)
{
    if (train_dist_on(t))
        stoke_dist_set_sync(t->world, last);
}

stoke_status train_dist_stop(stoke_trainer *t, bool *stop)
{
    if (!train_dist_on(t))
        return STOKE_OK;
    double v = *stop ? 1 : 0;
    stoke_status s = stoke_dist_max(t->world, &v, 1);
    *stop = v > 0;
    return s;
}

stoke_status train_dist_eval(stoke_trainer *t, train_eval *acc)
{
    if (!train_dist_on(t))
        return STOKE_OK;
    double v[3] = {acc->loss, acc->metric, (double)acc->n};
    stoke_status s = stoke_dist_sum(t->world, v, 3);
    acc->loss = v[0], acc->metric = v[1], acc->n = (int64_t)v[2];
    return s;
}

stoke_status train_dist_sums(stoke_trainer *t, double *loss, double *metric, int64_t *samples,
                             int64_t *since)
{
    if (!train_dist_on(t))
        return STOKE_OK;
    double v[4] = {*loss, *metric, (double)*samples, (double)*since};
    stoke_status s = stoke_dist_sum(t->world, v, 4);
    *loss = v[0], *metric = v[1], *samples = (int64_t)v[2], *since = (int64_t)v[3];
    return s;
}

stoke_status train_dist_save(stoke_trainer *t, const char *path, bool *wrote)
{
    /* rank 0 writes what the world agrees on: the averaged statistics and the epoch's
     * sums over every rank (its own put back after, for the rest of the epoch) */
    *wrote = false;
    double loss = t->ep_loss, metric = t->ep_metric;
    int64_t samples = t->ep_samples, unused = 0;
    stoke_status s = train_dist_buffers(t);
    if (s == STOKE_OK)
        s = train_dist_sums(t, &loss, &metric, &samples, &unused);
    if (s != STOKE_OK || train_rank(t) != 0)
        return s;
    double l0 = t->ep_loss, m0 = t->ep_metric;
    int64_t s0 = t->ep_samples;
    t->ep_loss = loss, t->ep_metric = metric, t->ep_samples = samples;
    s = stoke_trainer_save(t, path);
    t->ep_loss = l0, t->ep_metric = m0, t->ep_samples = s0;
    *wrote = s == STOKE_OK;
    return s;
}

stoke_status train_dist_buffers(stoke_trainer *t)
{
    return train_dist_on(t) ? stoke_dist_average_buffers(t->world, t->model) : STOKE_OK;
}

void train_dist_phases(stoke_trainer *t, stoke_train_event *e, double pct)
{
    e->world = train_world(t);
    e->allreduce_pct = e->allreduce_hidden_pct = NAN;
    /* on a GPU the all-reduce is queued on the model's stream between backward's
     * kernels: inside the backward column, not apart from it */
    if (!train_dist_on(t) || t->device != STOKE_TUNE_CPU)
        return;
    stoke_dist_stats d;
    stoke_dist_get_stats(t->world, &d);
    /* the reducer's host time ran inside backward (staging, starting) and the step
     * (waiting, scattering): moved from those columns into its own */
    e->backward_pct = fmax(0, e->backward_pct - d.reduce_s * pct);
    e->optimizer_pct = fmax(0, e->optimizer_pct - d.finish_s * pct);
    e->allreduce_pct = (d.reduce_s + d.finish_s) * pct;
    if (d.steps > 0 && t->dist.unhidden_s > 0) {
        double exposed = d.exposed_s / (double)d.steps;
        e->allreduce_hidden_pct = 100 * fmin(1, fmax(0, 1 - exposed / t->dist.unhidden_s));
    }
}

void train_dist_epoch_start(stoke_trainer *t)
{
    if (train_dist_on(t))
        stoke_dist_reset_stats(t->world);
}

/* One rank's step, as it travels between ranks. */
typedef struct rank_figures {
    double steps, step_s, input_wait_s, compute_s, reduce_wait_s;
    char host[64];
} rank_figures;

stoke_status train_dist_gather(stoke_trainer *t, double seconds, double wait_s)
{
    if (!train_dist_on(t))
        return STOKE_OK;
    int world = train_world(t);
    stoke_dist_stats d;
    stoke_dist_get_stats(t->world, &d);
    double steps = d.steps > 0 ? (double)d.steps : 1;
    rank_figures mine = {.steps = (double)d.steps,
                         .step_s = seconds / steps,
                         .input_wait_s = wait_s / steps,
                         .reduce_wait_s = d.exposed_s / steps};
    mine.compute_s = fmax(0, mine.step_s - mine.input_wait_s - mine.reduce_wait_s);
    snprintf(mine.host, sizeof mine.host, "%s", stoke_dist_host_name(t->world));
    rank_figures *all = calloc((size_t)world, sizeof *all);
    if (!all)
        return stoke_fail(STOKE_ERR_NOMEM, "data parallel: out of memory");
    stoke_status s = stoke_dist_allgather(t->world, &mine, sizeof mine, all);
    if (s == STOKE_OK) {
        free(t->dist.ranks);
        t->dist.ranks = calloc((size_t)world, sizeof *t->dist.ranks);
        t->dist.nranks = t->dist.ranks ? world : 0;
        for (int r = 0; r < t->dist.nranks; r++)
            t->dist.ranks[r] = (stoke_mon_rank){.rank = r,
                                                .steps = (int64_t)all[r].steps,
                                                .step_s = all[r].step_s,
                                                .input_wait_s = all[r].input_wait_s,
                                                .compute_s = all[r].compute_s,
                                                .reduce_wait_s = all[r].reduce_wait_s};
        for (int r = 0; r < t->dist.nranks; r++)
            snprintf(t->dist.ranks[r].host, sizeof t->dist.ranks[r].host, "%s", all[r].host);
    }
    free(all);
    return s;
}
