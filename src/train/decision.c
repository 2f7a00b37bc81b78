/* decision.c - the tuner's decision for this run: the request made of the config's
 * settings (each with its source), the measured ones and the data's facts; what
 * stoke_decide returns, applied (device, precision, compute threads, their adaptation,
 * the loader) and said, line by line. A GPU the CUDA runtime cannot see under device
 * auto is decided again for the CPU. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "train/trainer.h"

/* What the precision line adds when the CPU has no kernels of that precision. */
static const char *emulated_note(stoke_precision p)
{
    if (stoke_nn_precision_native(p))
        return "";
    return p == STOKE_PREC_BF16
               ? "; emulated: oneDNN has no bf16 kernels on this CPU (they start at AVX-512), "
                 "so operands are rounded to bf16 and the math runs in fp32, no faster than fp32"
               : "; emulated: the CPU kernels have no fp16 path, so operands are rounded to "
                 "fp16 and the math runs in fp32, no faster than fp32";
}

/* The config layer's sources are the tuner's first ones. */
_Static_assert((int)STOKE_CFG_DEFAULT == (int)STOKE_SRC_DEFAULT &&
                   (int)STOKE_CFG_FILE == (int)STOKE_SRC_FILE &&
                   (int)STOKE_CFG_ENV == (int)STOKE_SRC_ENV &&
                   (int)STOKE_CFG_FLAG == (int)STOKE_SRC_FLAG &&
                   (int)STOKE_CFG_CHECKPOINT == (int)STOKE_SRC_CHECKPOINT,
               "stoke_cfg_source and stoke_source differ");

/* The run's request to the tuner: the settings the user gave (each with its source)
 * or left open, and the facts of the data it runs on. */
static stoke_tune_request tune_request(const stoke_trainer *t)
{
    const stoke_train_config *c = &t->cfg;
#define SRC(key) ((stoke_source)stoke_train_config_source(c, key))
    return (stoke_tune_request){.device = c->device,
                                .device_src = SRC("device"),
                                .precision = c->precision,
                                .precision_src = SRC("precision"),
                                .workers = (int)c->workers,
                                .workers_src = SRC("workers"),
                                .threads = (int)c->threads,
                                .threads_src = SRC("threads"),
                                .prefetch = (int)c->prefetch,
                                .prefetch_src = SRC("prefetch"),
                                .batch = c->batch_size,
                                .batch_src = SRC("batch_size"),
                                .in_memory = t->train_d != t->train_src,
                                .cheap_transform =
                                    stoke_transform_one_pass(t->input.image ? &t->topts : NULL),
                                .profiles = &t->profiles};
#undef SRC
}

/* Settings measured (tune.c) carry their provenance and the measurements' reason. */
static void tuned_sources(const stoke_trainer *t, stoke_tune_request *q)
{
    const struct train_tuned *u = &t->tuned;
    if (!u->applied)
        return;
    if (u->batch)
        q->batch_src = u->source;
    if (u->workers)
        q->workers_src = u->source;
    if (u->prefetch)
        q->prefetch_src = u->source;
    if (u->threads)
        q->threads_src = u->source;
    if (u->precision)
        q->precision_src = u->source;
}

void train_tuned_pending(const stoke_trainer *t, stoke_why *w)
{
    char rule[sizeof w->reason];
    memcpy(rule, w->reason, sizeof rule);
    stoke_say(w->reason, sizeof w->reason, "%s: %s", t->tuned.pending, rule);
}

static void tuned_reasons(const stoke_trainer *t, stoke_decision *d)
{
    const struct train_tuned *u = &t->tuned;
    if (!u->applied && !u->pending[0])
        return;
    struct {
        bool on;
        stoke_why *w;
        const char *why;
    } v[] = {{u->batch, &d->batch_why, u->why_batch},
             {u->workers, &d->workers_why, u->why_workers},
             {u->prefetch, &d->prefetch_why, u->why_prefetch},
             {u->threads, &d->threads_why, u->why_threads},
             {u->precision, &d->precision_why, u->why_precision}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        if (!v[i].on)
            continue;
        if (u->applied) {
            /* a value measured but given to the rules as if given: its source and
             * reason are the measurement's (tune.c leaves no reason empty) */
            v[i].w->source = u->source;
            stoke_say(v[i].w->reason, sizeof v[i].w->reason, "%s", v[i].why);
            continue;
        }
        train_tuned_pending(t, v[i].w);
    }
}

/* "(flag)", or for a decided setting its reason. */
static const char *given_or_why(const stoke_why *w, char *buf, size_t n)
{
    if (w->source == STOKE_SRC_CACHED)
        stoke_say(buf, n, "cached: %s", w->reason);
    else
        stoke_say(buf, n, "%s",
                  stoke_source_decided(w->source) ? w->reason : stoke_source_name(w->source));
    return buf;
}

/* The CUDA runtime sees GPU `device`: checked before anything is said about it (its
 * precision, pinned memory, peak), so that a machine without a driver is told so first. */
static stoke_status check_cuda_device(int device)
{
    stoke_cudart *rt = NULL;
    int count = 0;
    stoke_status s = stoke_cudart_open(&rt);
    if (s == STOKE_OK)
        s = stoke_cudart_device_count(rt, &count);
    if (s == STOKE_OK && device >= count) /* the backend's words, as elsewhere */
        s = stoke_fail(STOKE_ERR_UNAVAILABLE, "CUDA device %d does not exist (%d found)", device,
                       count);
    stoke_cudart_close(rt);
    return s;
}

/* The "auto: " a line's reason starts with: decided now, by a rule or trials. */
static const char *auto_prefix(const stoke_why *w)
{
    return w->source == STOKE_SRC_RULE || w->source == STOKE_SRC_MEASURED ? "auto: " : "";
}

/* " + 1 left to other processes (busy on about 1.2 CPUs at the start)" when the threads'
 * rule took CPUs out for them; "" otherwise. */
static const char *others_note(const stoke_trainer *t, const stoke_decision *d, char *buf,
                               size_t size)
{
    buf[0] = '\0';
    int left = d->available_cpus - d->threads - d->workers; /* the 1-thread floor may eat in */
    if (d->others_cpus > 0 && left > 0 && d->threads_why.source == STOKE_SRC_RULE)
        snprintf(buf, size, " + %d left to other processes (busy on about %.1f CPUs at the start)",
                 left, t->machine.load.others_cpus);
    return buf;
}

/* What tune decided, applied (the compute threads; the rest is read from t->decision
 * where the models and loaders are made) and printed. */
stoke_status train_apply_decision(stoke_trainer *t, const char *cpu_because)
{
    stoke_tune_request q = tune_request(t);
    tuned_sources(t, &q);
    if (cpu_because)
        q.device = "cpu";
    stoke_status s = stoke_decide(&t->machine, &t->recs, &q, &t->decision);
    if (s != STOKE_OK)
        return s;
    /* data parallel on GPUs: one per rank, the ranks of a machine in its GPUs' order,
     * unless the device was given with its index */
    if (train_dist_on(t) && t->decision.device != STOKE_TUNE_CPU && !strchr(t->cfg.device, ':')) {
        int n = t->machine.gpu_count > 0 ? t->machine.gpu_count : 1;
        int lr = stoke_dist_local_rank(t->world);
        t->decision.device = lr % n;
        stoke_more(t->decision.device_why.reason, sizeof t->decision.device_why.reason,
                   "; one GPU per rank: local rank %d of %d on this machine takes cuda:%d", lr,
                   stoke_dist_local_size(t->world), lr % n);
    }
    if (t->decision.device != STOKE_TUNE_CPU && check_cuda_device(t->decision.device) != STOKE_OK) {
        char why[400], reason[480];
        snprintf(why, sizeof why, "%s", stoke_last_error());
        if (t->decision.device_why.source != STOKE_SRC_RULE)
            return stoke_fail(STOKE_ERR_UNAVAILABLE,
                              "device cuda:%d (%s): %s; or train on the CPU (--device cpu)",
                              t->decision.device, stoke_source_name(t->decision.device_why.source),
                              why);
        snprintf(reason, sizeof reason, "the CUDA backend cannot run on cuda:%d: %s",
                 t->decision.device, why);
        return train_apply_decision(t, reason);
    }
    tuned_reasons(t, &t->decision);
    if (cpu_because) {
        t->decision.device_why.source = STOKE_SRC_RULE;
        snprintf(t->decision.device_why.reason, sizeof t->decision.device_why.reason, "%s",
                 cpu_because);
    }
    const stoke_decision *d = &t->decision;
    t->precision = d->precision;
    t->device = d->device;
    t->workers = d->workers;
    t->threads = d->threads;
    char a[sizeof d->device_why.reason + 16], b[sizeof a], given[32] = "";
    if (!stoke_source_decided(d->threads_why.source))
        snprintf(given, sizeof given, " (%s)", stoke_source_name(d->threads_why.source));
    if (d->device == STOKE_TUNE_CPU)
        train_info(t, "device: cpu (%s%s)", auto_prefix(&d->device_why),
                   given_or_why(&d->device_why, a, sizeof a));
    else
        train_info(t, "device: cuda:%d (%s%s)", d->device, auto_prefix(&d->device_why),
                   given_or_why(&d->device_why, a, sizeof a));
    train_info(t, "precision: %s (%s%s)%s", stoke_precision_name(d->precision),
               auto_prefix(&d->precision_why), given_or_why(&d->precision_why, a, sizeof a),
               d->device == STOKE_TUNE_CPU ? emulated_note(d->precision) : "");
    if (d->device != STOKE_TUNE_CPU)
        train_info(t, "threads: %d usable CPU%s: 1 queues the GPU's work + %d loader worker%s (%s)",
                   d->usable_cpus, d->usable_cpus == 1 ? "" : "s", d->workers,
                   d->workers == 1 ? "" : "s", given_or_why(&d->workers_why, a, sizeof a));
    else
        train_info(t,
                   "threads: %d %s CPU%s = %d compute (OpenMP: oneDNN, kernels, BLAS)%s + "
                   "%d loader worker%s (%s)%s",
                   d->available_cpus, d->available_cpus < d->usable_cpus ? "available" : "usable",
                   d->available_cpus == 1 ? "" : "s", d->threads, given, d->workers,
                   d->workers == 1 ? "" : "s", given_or_why(&d->workers_why, a, sizeof a),
                   others_note(t, d, b, sizeof b));
    if (d->device == STOKE_TUNE_CPU) {
        /* the most threads a quiet machine would get: the available CPUs less the
         * workers (the start's count may be lower, other processes busy then) */
        int most = d->available_cpus - d->workers;
        t->adapt.max = most > t->threads ? most : t->threads;
        /* ranks step together: one rank's count chasing the others' load would only
         * move the slowest */
        t->adapt.on = stoke_source_decided(d->threads_why.source) && t->adapt.max > 1 &&
                      !t->trial.on && !train_dist_on(t);
        if (t->adapt.on) /* `config show` and bench say it with the decision */
            stoke_more(t->decision.threads_why.reason, sizeof t->decision.threads_why.reason,
                       "; during the run it follows the load, 1 to %d", t->adapt.max);
        char w[400];
        if (t->adapt.on)
            train_info(t,
                       "threads adapt: on: the steps' speed is watched, and another count is "
                       "tried when it or the other processes' load changes, between 1 and %d "
                       "(kept when faster by 5%%, and said; --threads N fixes the count); %s",
                       t->adapt.max, stoke_nn_omp_wait(w, sizeof w));
        else
            train_info(t, "threads adapt: off (%s); %s",
                       !stoke_source_decided(d->threads_why.source) ? "the count was given"
                       : train_dist_on(t) ? "data parallel: the ranks step together"
                                          : "one compute thread",
                       stoke_nn_omp_wait(w, sizeof w));
    }
    train_info(t, "loader: %d batches in flight (%s); pinned memory: %s (%s)", d->prefetch,
               given_or_why(&d->prefetch_why, a, sizeof a), d->pinned ? "yes" : "no",
               given_or_why(&d->pinned_why, b, sizeof b));
    return STOKE_OK;
}
