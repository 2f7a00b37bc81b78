/* decide.c - the one decision a training run applies: each setting the user left open
 * is taken from the machine's recommendations (the rules `stoke probe` prints) and the
 * dataset's facts; each given one is kept with its source. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "core/parse.h"
#include "core/text.h"
#include "stoke/tune.h"
#include "tune/tune_impl.h"

const char *stoke_source_name(stoke_source s)
{
    static const char *n[] = {"default",    "file", "env",    "flag",
                              "checkpoint", "rule", "cached", "measured"};
    return (unsigned)s < sizeof n / sizeof n[0] ? n[s] : "?";
}

static void why(stoke_why *w, stoke_source src, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void why(stoke_why *w, stoke_source src, const char *fmt, ...)
{
    w->source = src;
    va_list ap;
    va_start(ap, fmt);
    stoke_sayv(w->reason, sizeof w->reason, fmt, ap);
    va_end(ap);
}

/* The note a rule's reason gets when the device's profile starts from the same value. */
static const char *profile_same(const stoke_profile_match *pm, char *buf, size_t size)
{
    if (pm->how == STOKE_PROFILE_NONE)
        return "";
    snprintf(buf, size, "; profile '%s' (%s) starts from the same", pm->profile.name,
             pm->profile.source);
    return buf;
}

#define SAME(pm) profile_same((pm), (char[192]){0}, 192)

/* "auto" takes the rule of the device decided: the GPU's (bf16 from compute
 * capability 8.0, fp16 with loss scaling on 7.x) or the CPU's. */
static stoke_status decide_precision(const stoke_machine *m, const stoke_recs *recs,
                                     const stoke_tune_request *q, stoke_decision *d)
{
    if (strcmp(q->precision, "auto")) {
        if (!stoke_precision_parse(q->precision, &d->precision))
            return stoke_fail(STOKE_ERR_ARG, "precision: '%s' is not auto, fp32, bf16 or fp16",
                              q->precision);
        why(&d->precision_why, q->precision_src, "%s", "");
        return STOKE_OK;
    }
    /* the recommendations are per NVML device: cuda:N's, found by its PCI bus id */
    int gi = d->device >= 0 ? stoke_machine_cuda_gpu(m, d->device) : -1;
    const stoke_rec *r = stoke_recs_find(recs, "precision", gi >= 0 ? gi : STOKE_TUNE_CPU);
    d->precision = r && r->known ? r->precision : STOKE_PREC_FP32;
    if (r && r->known && r->unsure) {
        d->precision_unsure = true;
        snprintf(d->precision_unsure_why, sizeof d->precision_unsure_why, "%s", r->unsure_why);
    }
    /* The rule stays: it follows the hardware (bf16 from 8.0), where a seed followed
     * what its script happened to use (fp16 autocast on a 3090); the profile's differing
     * value is said, for the trial that confirms the precision. */
    const stoke_profile_match *pm = &d->profile;
    char note[200] = "";
    if (pm->how != STOKE_PROFILE_NONE && !pm->profile.precision_auto &&
        pm->profile.precision != d->precision)
        snprintf(note, sizeof note, "; profile '%s' (%s) starts from %s, the rule is kept",
                 pm->profile.name, pm->profile.source, stoke_precision_name(pm->profile.precision));
    else
        snprintf(note, sizeof note, "%s", SAME(pm));
    why(&d->precision_why, STOKE_SRC_RULE, "%s%s",
        r && r->known ? r->reason : "no recommendation, fp32", note);
    return STOKE_OK;
}

/* "8 usable CPUs", or with a cgroup quota "8 usable CPUs, a cgroup quota of 1.5 CPUs: 2
 * available". */
static void cpus_phrase(const stoke_machine *m, const stoke_decision *d, char *buf, size_t size)
{
    if (m->cpu.quota_cpus > 0) {
        char q[32];
        snprintf(q, sizeof q, "%.1f", m->cpu.quota_cpus);
        snprintf(buf, size, "%d usable CPU%s, a cgroup quota of %s CPU%s: %d available",
                 d->usable_cpus, d->usable_cpus == 1 ? "" : "s", q, strcmp(q, "1.0") ? "s" : "",
                 d->available_cpus);
    } else {
        snprintf(buf, size, "%d usable CPU%s", d->available_cpus,
                 d->available_cpus == 1 ? "" : "s");
    }
}

/* The whole CPUs of ours the machine's other processes were busy on at the start: their
 * load rounded, less the CPUs outside ours (the machine's CPUs past those available to
 * us take the rest first), within [0, available]. */
static int others_on_ours(const stoke_machine *m, int available)
{
    const stoke_cpu_load *l = &m->load;
    if (!l->valid || !(l->others_cpus > 0))
        return 0;
    long others = lround(l->others_cpus);
    long outside = l->ncpu > available ? l->ncpu - available : 0;
    long n = others - outside;
    return n < 0 ? 0 : n > available ? available : (int)n;
}

/* Workers for a caller whose own process computes on q->host_threads threads beside
 * the loader: the available CPUs, less those threads, less the whole CPUs other
 * processes keep busy, at least 1, at most the rules' cap (or the profile's, when
 * lower). */
static void decide_workers_left(const stoke_machine *m, const stoke_tune_request *q,
                                stoke_decision *d)
{
    int left = d->available_cpus - q->host_threads - d->others_cpus;
    int cap = tune_workers_cap(m);
    char cap_why[128];
    snprintf(cap_why, sizeof cap_why, "the rules' cap %s",
             m->gpu_count > 0 ? "with a GPU" : "on a CPU-only machine");
    const stoke_profile_match *pm = &d->profile;
    if (pm->how != STOKE_PROFILE_NONE && pm->profile.workers_max > 0 &&
        pm->profile.workers_max < cap) {
        cap = pm->profile.workers_max;
        snprintf(cap_why, sizeof cap_why, "profile '%s' (%s)", pm->profile.name,
                 pm->profile.source);
    }
    d->workers = left < 1 ? 1 : left > cap ? cap : left;
    char cpus[160];
    if (m->cpu.quota_cpus > 0 && d->available_cpus < d->usable_cpus)
        snprintf(cpus, sizeof cpus, "%d available CPU%s (%d usable, a cgroup quota of %.1f)",
                 d->available_cpus, d->available_cpus == 1 ? "" : "s", d->usable_cpus,
                 m->cpu.quota_cpus);
    else
        snprintf(cpus, sizeof cpus, "%d available CPU%s", d->available_cpus,
                 d->available_cpus == 1 ? "" : "s");
    char from[96] = "", others[160], bound[256] = "";
    if (q->host_threads_from && *q->host_threads_from)
        snprintf(from, sizeof from, " (%s)", q->host_threads_from);
    const stoke_cpu_load *l = &m->load;
    if (!l->valid)
        snprintf(others, sizeof others, "other processes' load unknown");
    else if (l->ncpu > d->available_cpus)
        snprintf(others, sizeof others,
                 "other processes busy on %.1f of the machine's %d CPUs (%d of these)",
                 l->others_cpus, l->ncpu, d->others_cpus);
    else
        snprintf(others, sizeof others, "other processes busy on %.1f", l->others_cpus);
    if (left < 1)
        snprintf(bound, sizeof bound, " (at least 1)");
    else if (left > cap)
        snprintf(bound, sizeof bound, " (%d left, capped at %d: %s)", left, cap, cap_why);
    why(&d->workers_why, STOKE_SRC_RULE,
        "%s, the script computes on %d thread%s%s, %s: %d worker%s%s", cpus, q->host_threads,
        q->host_threads == 1 ? "" : "s", from, others, d->workers, d->workers == 1 ? "" : "s",
        bound);
}

/* Loader workers, then the compute threads on the CPUs they leave. */
static void decide_threads(const stoke_machine *m, const stoke_recs *recs,
                           const stoke_tune_request *q, stoke_decision *d)
{
    if (q->workers >= 0) {
        d->workers = q->workers;
        why(&d->workers_why, q->workers_src, "%s", "");
    } else if (q->in_memory && q->cheap_transform) {
        if (d->device != STOKE_TUNE_CPU && q->host_threads <= 0 && d->available_cpus >= 3) {
            /* On a GPU the gather is as long as a step: an H200 trained the MLP at 0.55
             * ms a batch of 256 and the training thread waited half of it gathering.
             * Two workers gather ahead while it queues the GPU's work (one thread each,
             * and a third for the training thread). Not for a caller that computes on
             * the CPU itself (a Python script's torch threads: host_threads). */
            d->workers = 2;
            why(&d->workers_why, STOKE_SRC_RULE,
                "the dataset is in memory and its transform is one fused pass, but a GPU's "
                "step is about as short as gathering a batch: 2 workers gather ahead while "
                "the training thread queues the GPU's work");
        } else {
            /* A batch gathered from memory through the fused transform costs ~1 us a
             * sample, far below a step's compute on the CPU: a worker thread would
             * mostly sleep yet take a core from the math, so the training thread does
             * it. */
            d->workers = 0;
            why(&d->workers_why, STOKE_SRC_RULE,
                "the dataset is in memory and its transform is "
                "one fused pass: the training thread gathers each batch");
        }
    } else {
        const stoke_rec *rw = stoke_recs_find(recs, "loader_workers", STOKE_TUNE_CPU);
        int rule = rw && rw->known ? (int)rw->number : 1;
        const stoke_profile_match *pm = &d->profile;
        d->workers = pm->how != STOKE_PROFILE_NONE ? pm->workers : rule;
        if (d->workers == rule) {
            why(&d->workers_why, STOKE_SRC_RULE, "the tuner: %s%s", rw ? rw->reason : "", SAME(pm));
        } else {
            char per[48] = "";
            if (pm->profile.workers_for_cores)
                snprintf(per, sizeof per, " for %d cores", pm->profile.workers_for_cores);
            why(&d->workers_why, STOKE_SRC_RULE,
                "profile '%s' (%s): %d worker%s%s, scaled to the %d %s CPUs and capped by "
                "what they leave = %d (the rule alone: %d)",
                pm->profile.name, pm->profile.source, pm->profile.workers,
                pm->profile.workers == 1 ? "" : "s", per, d->available_cpus,
                d->available_cpus < d->usable_cpus ? "available" : "usable", d->workers, rule);
        }
        /* the caller's own compute threads known: workers take what they leave (a
         * single CPU's rule, the training thread loads, stays) */
        if (q->host_threads > 0 && rule > 0)
            decide_workers_left(m, q, d);
    }
    if (q->threads > 0) {
        d->threads = q->threads;
        why(&d->threads_why, q->threads_src, "%s", "");
    } else if (d->device != STOKE_TUNE_CPU) {
        d->threads = 1;
        why(&d->threads_why, STOKE_SRC_RULE,
            "the GPU computes: one host thread queues its work, the other CPUs are "
            "the loader's");
    } else {
        /* Cores other processes hold are left to them while some stay free. When they
         * hold them all, fewer threads buy nothing: the kernel shares time by thread,
         * so the team's share grows with its size, and the bounded spin
         * (cli/omp_wait.c) keeps a descheduled thread from stalling the rest for long
         * (measured on 2 cores beside 2 busy processes: 2 threads 1.7x 1 thread's
         * samples/s; beside 1, 1 thread was 1.07-1.14x 2's: docs/train.md). */
        int room = d->available_cpus - d->workers;
        bool all_taken = d->others_cpus > 0 && room > 0 && d->others_cpus >= room;
        int n = all_taken ? room : room - d->others_cpus;
        d->threads = n < 1 ? 1 : n;
        char cpus[160], others[300] = "";
        cpus_phrase(m, d, cpus, sizeof cpus);
        if (d->others_cpus > 0 || (m->load.valid && m->load.others_cpus >= 0.5)) {
            const stoke_cpu_load *l = &m->load;
            if (l->ncpu > d->available_cpus)
                snprintf(others, sizeof others,
                         ", other processes busy on about %.1f of the machine's %d CPUs: %d "
                         "of these taken out",
                         l->others_cpus, l->ncpu, d->others_cpus);
            else
                snprintf(others, sizeof others, ", other processes busy on about %.1f of them",
                         l->others_cpus);
            if (all_taken)
                stoke_more(others, sizeof others,
                           " (all of them: none is left out, as the kernel shares time by "
                           "thread)");
        }
        why(&d->threads_why, STOKE_SRC_RULE, "%s%s, less %d loader worker%s: %d thread%s%s", cpus,
            others, d->workers, d->workers == 1 ? "" : "s", d->threads, d->threads == 1 ? "" : "s",
            n < 1 ? " (at least 1)" : "");
    }
}

/* The loader's ring and where its slots live. */
static void decide_loader(const stoke_machine *m, const stoke_recs *recs,
                          const stoke_tune_request *q, stoke_decision *d)
{
    if (q->prefetch > 0) {
        d->prefetch = q->prefetch;
        why(&d->prefetch_why, q->prefetch_src, "%s", "");
    } else {
        const stoke_profile_match *pm = &d->profile;
        int rule = tune_prefetch_depth(d->workers);
        d->prefetch = pm->how != STOKE_PROFILE_NONE
                          ? tune_prefetch_clamp((long)d->workers * pm->profile.prefetch_factor)
                          : rule;
        if (d->prefetch == rule)
            why(&d->prefetch_why, STOKE_SRC_RULE,
                "2 per loader worker (one being filled, one "
                "ready), within [%d, %d]%s",
                MIN_PREFETCH, MAX_PREFETCH, SAME(pm));
        else
            why(&d->prefetch_why, STOKE_SRC_RULE,
                "profile '%s' (%s): %d batches ahead per loader worker x %d, within [%d, %d] "
                "(the rule alone: %d)",
                pm->profile.name, pm->profile.source, pm->profile.prefetch_factor, d->workers,
                MIN_PREFETCH, MAX_PREFETCH, rule);
    }
    const stoke_rec *rp = stoke_recs_find(recs, "pin_memory", STOKE_TUNE_CPU);
    d->pinned = d->device != STOKE_TUNE_CPU; /* only a device copy gains from them */
    if (d->pinned)
        why(&d->pinned_why, STOKE_SRC_RULE,
            "batches are copied to the GPU: page-locked slots let the copy run "
            "asynchronously, on the loader's stream, while the GPU computes");
    else if (m->gpu_count > 0)
        why(&d->pinned_why, STOKE_SRC_RULE, "the CPU computes: no batch is copied to a GPU");
    else
        why(&d->pinned_why, STOKE_SRC_RULE, "%s", rp ? rp->reason : "no GPU");
}

/* "cuda" and "cuda:N" as a device index into *index (past the limit: -2); false if s
 * is neither form. */
static bool parse_cuda(const char *s, int *index)
{
    if (!strcmp(s, "cuda")) {
        *index = 0;
        return true;
    }
    const char *digits = s + 5;
    size_t n = strncmp(s, "cuda:", 5) ? 0 : strspn(digits, "0123456789");
    if (n == 0 || digits[n])
        return false;
    uint64_t v; /* digits past UINT64_MAX are of the form too: past the limit */
    *index = stoke_parse_u64(digits, &v) && v < STOKE_MAX_GPUS ? (int)v : -2;
    return true;
}

stoke_status stoke_device_check(const char *dev)
{
    int index;
    if (!strcmp(dev, "auto") || !strcmp(dev, "cpu"))
        return STOKE_OK;
    if (!parse_cuda(dev, &index))
        return stoke_fail(STOKE_ERR_ARG, "device: '%s' is not auto, cpu, cuda or cuda:N", dev);
    if (index < 0)
        return stoke_fail(STOKE_ERR_ARG,
                          "device: '%s': stoke addresses at most %d GPUs, cuda:0 to cuda:%d", dev,
                          STOKE_MAX_GPUS, STOKE_MAX_GPUS - 1);
    return STOKE_OK;
}

static stoke_status decide_device(const stoke_machine *m, const stoke_tune_request *q,
                                  stoke_decision *d)
{
    const char *dev = q->device && *q->device ? q->device : "auto";
    d->device = STOKE_TUNE_CPU;
    if (!strcmp(dev, "cpu")) {
        why(&d->device_why, q->device_src, "%s", "");
        return STOKE_OK;
    }
    if (strcmp(dev, "auto")) {
        stoke_status s = stoke_device_check(dev);
        if (s != STOKE_OK)
            return s;
        parse_cuda(dev, &d->device);
        why(&d->device_why, q->device_src, "%s", "");
        return STOKE_OK;
    }
    if (m->gpu_count == 0) {
        why(&d->device_why, STOKE_SRC_RULE, "no GPU found");
        return STOKE_OK;
    }
    int gi = stoke_machine_cuda_gpu(m, 0);
    const stoke_gpu_info *g = &m->gpus[gi >= 0 ? gi : 0];
    d->device = 0;
    why(&d->device_why, STOKE_SRC_RULE, "%s, compute capability %d.%d, %.1f GB, found by NVML%s",
        g->name, g->cc_major, g->cc_minor, (double)g->memory_total_bytes / 1e9,
        m->gpu_count > 1 ? "; the first of several (--device cuda:N picks another)" : "");
    return STOKE_OK;
}

stoke_status stoke_decide(const stoke_machine *m, const stoke_recs *recs,
                          const stoke_tune_request *req, stoke_decision *out)
{
    memset(out, 0, sizeof *out);
    out->usable_cpus = m->cpu.usable_cpus > 0 ? m->cpu.usable_cpus : 1;
    out->available_cpus = stoke_cpu_available(&m->cpu);
    if (out->available_cpus > out->usable_cpus)
        out->available_cpus = out->usable_cpus;
    out->others_cpus = others_on_ours(m, out->available_cpus);
    stoke_status s = decide_device(m, req, out);
    if (s != STOKE_OK)
        return s;
    /* cuda:N not found gets no profile (an index past the GPUs), never the CPU's */
    int gi =
        out->device == STOKE_TUNE_CPU ? STOKE_TUNE_CPU : stoke_machine_cuda_gpu(m, out->device);
    stoke_profile_match_device(req->profiles, m,
                               gi < 0 && out->device != STOKE_TUNE_CPU ? m->gpu_count : gi,
                               &out->profile);
    out->batch = req->batch;
    why(&out->batch_why, req->batch_src, "%s", "");
    s = decide_precision(m, recs, req, out);
    if (s != STOKE_OK)
        return s;
    const stoke_rec *tf = gi >= 0 ? stoke_recs_find(recs, "tf32", gi) : NULL;
    if (tf && tf->known)
        out->tf32 = tf->number != 0 ? STOKE_TF32_ON : STOKE_TF32_OFF;
    decide_threads(m, recs, req, out);
    decide_loader(m, recs, req, out);
    return STOKE_OK;
}
