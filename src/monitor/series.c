/* series.c - sample series with min/median/p95/max, the history of a run, its summary. */
#include "stoke/monitor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SERIES_DEFAULT_LIMIT ((size_t)1 << 18)

void stoke_series_init(stoke_series *s)
{
    memset(s, 0, sizeof *s);
    s->stride = 1;
}

void stoke_series_free(stoke_series *s)
{
    free(s->v);
    stoke_series_init(s);
}

stoke_status stoke_series_push(stoke_series *s, double x)
{
    if (s->stride == 0)
        s->stride = 1;
    if (s->count == 0 || x < s->min)
        s->min = x;
    if (s->count == 0 || x > s->max)
        s->max = x;
    s->count++;
    s->sum += x;
    if (s->phase++ % s->stride != 0)
        return STOKE_OK;
    size_t limit = s->limit ? s->limit : SERIES_DEFAULT_LIMIT;
    if (s->n == limit) {
        /* Thin evenly: keep every other value, then one value in twice the stride. */
        for (size_t i = 0; i < s->n / 2; i++)
            s->v[i] = s->v[2 * i];
        s->n /= 2;
        s->stride *= 2;
        s->phase = 1;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        if (cap > limit)
            cap = limit;
        float *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return stoke_fail(STOKE_ERR_NOMEM, "series: out of memory (%zu values)", cap);
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (float)x;
    return STOKE_OK;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

stoke_status stoke_series_stats(const stoke_series *s, stoke_stats *out)
{
    memset(out, 0, sizeof *out);
    if (s->count == 0 || s->n == 0)
        return STOKE_OK;
    float *v = malloc(s->n * sizeof *v);
    if (!v)
        return stoke_fail(STOKE_ERR_NOMEM, "series: out of memory sorting %zu values", s->n);
    memcpy(v, s->v, s->n * sizeof *v);
    qsort(v, s->n, sizeof *v, cmp_float);
    size_t n = s->n;
    out->n = s->count;
    out->min = s->min;
    out->max = s->max;
    out->mean = s->sum / (double)s->count;
    out->median = n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
    size_t rank = (size_t)ceil(0.95 * (double)n); /* nearest rank, 1-based */
    out->p95 = v[(rank ? rank : 1) - 1];
    /* Kept values are floats, min and max exact doubles: a value that float cannot hold
     * (54.545454...) would put the median above the max. Order is what readers rely on. */
    out->median = fmin(fmax(out->median, out->min), out->max);
    out->p95 = fmin(fmax(out->p95, out->min), out->max);
    free(v);
    return STOKE_OK;
}

/* ---- History ------------------------------------------------------------------ */

void stoke_mon_history_init(stoke_mon_history *h)
{
    memset(h, 0, sizeof *h);
    for (int i = 0; i < STOKE_M_COUNT; i++)
        stoke_series_init(&h->sys[i]);
    for (int g = 0; g < STOKE_MAX_GPUS; g++)
        for (int i = 0; i < STOKE_G_COUNT; i++)
            stoke_series_init(&h->gpu[g].s[i]);
}

/* The ranks' series (their memory; the ranks are forgotten too). */
static void free_ranks(stoke_mon_history *h)
{
    for (int k = 0; k < h->nranks; k++) {
        stoke_series_free(&h->ranks[k].cpu);
        stoke_series_free(&h->ranks[k].rss);
    }
    h->nranks = 0;
}

void stoke_mon_history_free(stoke_mon_history *h)
{
    for (int i = 0; i < STOKE_M_COUNT; i++)
        stoke_series_free(&h->sys[i]);
    for (int g = 0; g < STOKE_MAX_GPUS; g++)
        for (int i = 0; i < STOKE_G_COUNT; i++)
            stoke_series_free(&h->gpu[g].s[i]);
    free_ranks(h);
}

/* The samples so far were the job's startup (stoke_mon_history): their medians are
 * kept for the startup rule, and the series start again. */
static void leave_out_startup(stoke_mon_history *h)
{
    stoke_stats t, j;
    stoke_series_stats(&h->sys[STOKE_M_THREAD_MAX], &t); /* a sort's memory: 0 if refused */
    stoke_series_stats(&h->sys[STOKE_M_PROC_CPU], &j);
    h->startup_thread = t.n ? t.median : 0;
    h->startup_job = j.n ? j.median : 0;
    h->startup_samples = h->samples;
    h->startup_s = h->last_t;
    h->samples = 0;
    for (int i = 0; i < STOKE_M_COUNT; i++)
        stoke_series_free(&h->sys[i]);
    for (int g = 0; g < STOKE_MAX_GPUS; g++) {
        for (int i = 0; i < STOKE_G_COUNT; i++)
            stoke_series_free(&h->gpu[g].s[i]);
        h->gpu[g].throttle_samples = h->gpu[g].power_throttled = h->gpu[g].thermal_throttled = 0;
    }
    h->nbusy = 0;
    memset(h->busy_samples, 0, sizeof h->busy_samples);
    free_ranks(h);
}

/* The series of a rank of the tree, NULL when the history holds as many as it can. */
static struct stoke_mon_rank_history *rank_history(stoke_mon_history *h, int rank)
{
    for (int k = 0; k < h->nranks; k++)
        if (h->ranks[k].rank == rank)
            return &h->ranks[k];
    if (h->nranks == STOKE_MON_LOCAL_RANKS)
        return NULL;
    struct stoke_mon_rank_history *x = &h->ranks[h->nranks++];
    x->rank = rank;
    stoke_series_init(&x->cpu);
    stoke_series_init(&x->rss);
    return x;
}

stoke_status stoke_mon_history_add(stoke_mon_history *h, const stoke_mon_sample *s)
{
    stoke_status st = STOKE_OK;
#define PUSH(series, x)                                           \
    do {                                                          \
        stoke_status e_ = stoke_series_push(series, (double)(x)); \
        if (e_ != STOKE_OK)                                       \
            st = e_;                                              \
    } while (0)
    if (!h->gpu_work_seen && (s->valid & STOKE_MS_PROC_GPU) && s->proc_gpu_mem_bytes > 0) {
        bool busy = false;
        for (int g = 0; g < s->gpu_count && g < STOKE_MAX_GPUS; g++)
            busy |= (s->gpus[g].s.valid & STOKE_GS_UTIL) && s->gpus[g].s.util_gpu_pct > 0;
        if (busy) {
            h->gpu_work_seen = true;
            if (h->samples > 0)
                leave_out_startup(h);
        }
    }
    h->samples++;
    h->duration_s = s->t;
    h->last_t = s->t;
    if (s->ncpu > h->ncpu)
        h->ncpu = s->ncpu;
    if (s->proc_pid)
        h->proc_pid = s->proc_pid;
    if (s->valid & STOKE_MS_CPU) {
        PUSH(&h->sys[STOKE_M_CPU], s->cpu_pct);
        PUSH(&h->sys[STOKE_M_IOWAIT], s->iowait_pct);
    }
    if (s->valid & STOKE_MS_MEM) {
        PUSH(&h->sys[STOKE_M_MEM_USED], s->mem_used_bytes);
        if (s->mem_total_bytes > h->mem_total_bytes)
            h->mem_total_bytes = s->mem_total_bytes;
    }
    if (s->valid & STOKE_MS_PROC) {
        PUSH(&h->sys[STOKE_M_PROC_THREADS], s->proc_threads);
        PUSH(&h->sys[STOKE_M_PROC_RSS], s->proc_rss_bytes);
    }
    if (s->valid & STOKE_MS_PROC_CPU)
        PUSH(&h->sys[STOKE_M_PROC_CPU], s->proc_cpu_pct);
    /* The other processes' CPU, sample by sample (the medians of two series need not
     * come from the same sample): the busy CPUs less the tree's. Both readings span
     * the same interval; rounding can make the difference slightly negative. */
    if ((s->valid & STOKE_MS_CPU) && (s->valid & STOKE_MS_PROC_CPU) && s->ncpu > 0)
        PUSH(&h->sys[STOKE_M_OTHERS_CPU], fmax(0.0, s->cpu_pct * s->ncpu - s->proc_cpu_pct));
    if (s->valid & STOKE_MS_PROC_IO) {
        PUSH(&h->sys[STOKE_M_PROC_READ], s->proc_read_Bps);
        PUSH(&h->sys[STOKE_M_PROC_WRITE], s->proc_write_Bps);
    }
    if (s->valid & STOKE_MS_PROC_GPU)
        PUSH(&h->sys[STOKE_M_PROC_GPU_MEM], s->proc_gpu_mem_bytes);
    if (s->valid & STOKE_MS_THREAD) {
        PUSH(&h->sys[STOKE_M_THREAD_MAX], s->busiest.core_pct);
        PUSH(&h->sys[STOKE_M_BUSY_THREADS], s->busy_threads);
        int k = 0;
        while (k < h->nbusy && h->busy[k].tid != s->busiest.tid)
            k++;
        if (k < h->nbusy || h->nbusy < 8) {
            if (k == h->nbusy)
                h->nbusy++;
            h->busy[k] = s->busiest; /* the latest name: a thread may rename itself */
            h->busy_samples[k]++;
        }
    }
    if (s->valid & STOKE_MS_PIPELINE) {
        h->have_pipeline = true;
        h->pipeline = s->pipe;
    }
    if (s->valid & STOKE_MS_PIPELINE_RATE) {
        PUSH(&h->sys[STOKE_M_DATA_WAIT], s->data_wait_pct);
        PUSH(&h->sys[STOKE_M_BATCH_RATE], s->batches_per_s);
    }
    for (int k = 0; (s->valid & STOKE_MS_RANKS) && k < s->nrank_procs && k < STOKE_MON_LOCAL_RANKS;
         k++) {
        const stoke_mon_rank_proc *p = &s->rank_procs[k];
        struct stoke_mon_rank_history *x = rank_history(h, p->rank);
        if (!x)
            break;
        x->pid = p->pid;
        PUSH(&x->rss, p->rss_bytes);
        if (p->cpu_valid)
            PUSH(&x->cpu, p->cpu_pct);
    }
    int ng = s->gpu_count < STOKE_MAX_GPUS ? s->gpu_count : STOKE_MAX_GPUS;
    if (ng > h->gpu_count)
        h->gpu_count = ng;
    for (int g = 0; g < ng; g++) {
        const stoke_gpu_sample *x = &s->gpus[g].s;
        stoke_mon_gpu_history *gh = &h->gpu[g];
        if (x->valid & STOKE_GS_UTIL) {
            PUSH(&gh->s[STOKE_G_UTIL], x->util_gpu_pct);
            PUSH(&gh->s[STOKE_G_MEM_UTIL], x->util_mem_pct);
        }
        if (x->valid & STOKE_GS_MEMORY) {
            PUSH(&gh->s[STOKE_G_MEM_USED], x->mem_used_bytes);
            if (x->mem_total_bytes > gh->mem_total_bytes)
                gh->mem_total_bytes = x->mem_total_bytes;
        }
        if (x->valid & STOKE_GS_POWER)
            PUSH(&gh->s[STOKE_G_POWER], x->power_mw / 1000.0);
        if ((x->valid & STOKE_GS_POWER_LIMIT) && x->power_limit_mw / 1000.0 > gh->power_limit_w)
            gh->power_limit_w = x->power_limit_mw / 1000.0;
        if (x->valid & STOKE_GS_TEMP)
            PUSH(&gh->s[STOKE_G_TEMP], x->temp_c);
        if (x->valid & STOKE_GS_SM_CLOCK)
            PUSH(&gh->s[STOKE_G_SM_CLOCK], x->sm_clock_mhz);
        if (x->valid & STOKE_GS_PCIE_RX)
            PUSH(&gh->s[STOKE_G_PCIE_RX], x->pcie_rx_kBps * 1000.0);
        if (x->valid & STOKE_GS_PCIE_TX)
            PUSH(&gh->s[STOKE_G_PCIE_TX], x->pcie_tx_kBps * 1000.0);
        if (s->gpus[g].proc_mem_valid)
            PUSH(&gh->s[STOKE_G_PROC_MEM], s->gpus[g].proc_mem_bytes);
        if (x->valid & STOKE_GS_THROTTLE) {
            gh->throttle_samples++;
            if (x->throttle_reasons & (STOKE_THROTTLE_SW_POWER_CAP | STOKE_THROTTLE_HW_POWER_BRAKE |
                                       STOKE_THROTTLE_HW_SLOWDOWN))
                gh->power_throttled++;
            if (x->throttle_reasons & (STOKE_THROTTLE_SW_THERMAL | STOKE_THROTTLE_HW_THERMAL))
                gh->thermal_throttled++;
        }
    }
#undef PUSH
    return st;
}

static const char *const sys_names[STOKE_M_COUNT][2] = {
    [STOKE_M_CPU] = {"cpu_pct", "%"},
    [STOKE_M_IOWAIT] = {"iowait_pct", "%"},
    [STOKE_M_MEM_USED] = {"mem_used", "bytes"},
    [STOKE_M_PROC_CPU] = {"proc_cpu_pct", "% of a core"},
    [STOKE_M_PROC_THREADS] = {"proc_threads", ""},
    [STOKE_M_PROC_RSS] = {"proc_rss", "bytes"},
    [STOKE_M_PROC_READ] = {"proc_read", "bytes/s"},
    [STOKE_M_PROC_WRITE] = {"proc_write", "bytes/s"},
    [STOKE_M_PROC_GPU_MEM] = {"proc_gpu_mem", "bytes"},
    [STOKE_M_DATA_WAIT] = {"data_wait_pct", "%"},
    [STOKE_M_BATCH_RATE] = {"batches_per_s", "batches/s"},
    [STOKE_M_THREAD_MAX] = {"thread_max_pct", "% of a core"},
    [STOKE_M_BUSY_THREADS] = {"busy_threads", ""},
    [STOKE_M_OTHERS_CPU] = {"others_cpu_pct", "% of a core"},
};

static const char *const gpu_names[STOKE_G_COUNT][2] = {
    [STOKE_G_UTIL] = {"util_pct", "%"},
    [STOKE_G_MEM_UTIL] = {"mem_util_pct", "%"},
    [STOKE_G_MEM_USED] = {"mem_used", "bytes"},
    [STOKE_G_POWER] = {"power", "W"},
    [STOKE_G_TEMP] = {"temp", "C"},
    [STOKE_G_SM_CLOCK] = {"sm_clock", "MHz"},
    [STOKE_G_PCIE_RX] = {"pcie_rx", "bytes/s"},
    [STOKE_G_PCIE_TX] = {"pcie_tx", "bytes/s"},
    [STOKE_G_PROC_MEM] = {"proc_mem", "bytes"},
};

const char *stoke_sys_metric_name(stoke_sys_metric m)
{
    return (unsigned)m < STOKE_M_COUNT ? sys_names[m][0] : "?";
}
const char *stoke_sys_metric_unit(stoke_sys_metric m)
{
    return (unsigned)m < STOKE_M_COUNT ? sys_names[m][1] : "";
}
const char *stoke_gpu_metric_name(stoke_gpu_metric m)
{
    return (unsigned)m < STOKE_G_COUNT ? gpu_names[m][0] : "?";
}
const char *stoke_gpu_metric_unit(stoke_gpu_metric m)
{
    return (unsigned)m < STOKE_G_COUNT ? gpu_names[m][1] : "";
}

stoke_status stoke_mon_summarize(const stoke_mon_history *h, int usable_cpus,
                                 stoke_mon_summary *out)
{
    memset(out, 0, sizeof *out);
    out->samples = h->samples;
    out->duration_s = h->duration_s;
    out->ncpu = h->ncpu;
    out->usable_cpus = usable_cpus > 0 ? usable_cpus : h->ncpu;
    out->mem_total_bytes = h->mem_total_bytes;
    out->proc_pid = h->proc_pid;
    out->gpu_count = h->gpu_count;
    out->have_pipeline = h->have_pipeline;
    out->pipeline = h->pipeline;
    out->startup_samples = h->startup_samples;
    out->startup_s = h->startup_s;
    out->startup_thread = h->startup_thread;
    out->startup_job = h->startup_job;
    for (int k = 0; k < h->nbusy; k++)
        if (h->busy_samples[k] > out->busiest_thread_samples) {
            out->have_thread = true;
            out->busiest_thread = h->busy[k];
            out->busiest_thread_samples = h->busy_samples[k];
        }
    for (int i = 0; i < STOKE_M_COUNT; i++) {
        stoke_status st = stoke_series_stats(&h->sys[i], &out->sys[i]);
        if (st != STOKE_OK)
            return st;
    }
    for (int g = 0; g < h->gpu_count; g++) {
        for (int i = 0; i < STOKE_G_COUNT; i++) {
            stoke_status st = stoke_series_stats(&h->gpu[g].s[i], &out->gpu[g].s[i]);
            if (st != STOKE_OK)
                return st;
        }
        out->gpu[g].mem_total_bytes = h->gpu[g].mem_total_bytes;
        out->gpu[g].power_limit_w = h->gpu[g].power_limit_w;
        out->gpu[g].throttle_samples = h->gpu[g].throttle_samples;
        out->gpu[g].power_throttled = h->gpu[g].power_throttled;
        out->gpu[g].thermal_throttled = h->gpu[g].thermal_throttled;
    }
    for (int k = 0; k < h->nranks; k++) {
        stoke_mon_rank_usage *u = &out->rank_procs[k];
        u->rank = h->ranks[k].rank;
        u->pid = h->ranks[k].pid;
        stoke_status st = stoke_series_stats(&h->ranks[k].cpu, &u->cpu_pct);
        if (st == STOKE_OK)
            st = stoke_series_stats(&h->ranks[k].rss, &u->rss_bytes);
        if (st != STOKE_OK)
            return st;
        out->nrank_procs = k + 1;
    }
    return STOKE_OK;
}

/* A value in the unit a person reads: bytes as "12.3 GB", rates as "120.0 MB/s". */
static void fmt_value(double v, const char *unit, char *buf, size_t size)
{
    if (strcmp(unit, "bytes") == 0) {
        stoke_format_bytes(v, buf, size);
    } else if (strcmp(unit, "bytes/s") == 0) {
        char b[32];
        snprintf(buf, size, "%s/s", stoke_format_bytes(v, b, sizeof b));
    } else {
        snprintf(buf, size, "%.1f", v);
    }
}

static void print_row(FILE *f, const char *name, const char *unit, const stoke_stats *st)
{
    if (st->n == 0)
        return;
    char a[32], b[32], c[32], d[32];
    fmt_value(st->min, unit, a, sizeof a);
    fmt_value(st->median, unit, b, sizeof b);
    fmt_value(st->p95, unit, c, sizeof c);
    fmt_value(st->max, unit, d, sizeof d);
    const char *u = strcmp(unit, "bytes") == 0 || strcmp(unit, "bytes/s") == 0 ? "" : unit;
    fprintf(f, "  %-22s %-12s %12s %12s %12s %12s\n", name, u, a, b, c, d);
}

void stoke_mon_summary_print(const stoke_mon_summary *s, FILE *f)
{
    if (s->startup_samples)
        fprintf(f,
                "summary: %zu samples over the last %.1f s (the first %.1f s, before the job's "
                "first GPU work, left out)\n",
                s->samples, s->duration_s - s->startup_s, s->startup_s);
    else
        fprintf(f, "summary: %zu samples over %.1f s\n", s->samples, s->duration_s);
    if (s->ncpu > 0)
        fprintf(f, "  CPUs: %d usable of %d (the cores the diagnosis counts)\n", s->usable_cpus,
                s->ncpu);
    fprintf(f, "  %-22s %-12s %12s %12s %12s %12s\n", "series", "unit", "min", "median", "p95",
            "max");
    for (int i = 0; i < STOKE_M_COUNT; i++)
        print_row(f, stoke_sys_metric_name(i), stoke_sys_metric_unit(i), &s->sys[i]);
    for (int g = 0; g < s->gpu_count; g++)
        for (int i = 0; i < STOKE_G_COUNT; i++) {
            char name[40];
            snprintf(name, sizeof name, "gpu%d.%s", g, stoke_gpu_metric_name(i));
            print_row(f, name, stoke_gpu_metric_unit(i), &s->gpu[g].s[i]);
        }
    if (s->have_pipeline) {
        const stoke_mon_pipeline *p = &s->pipeline;
        fprintf(f,
                "  input pipeline: %lld batches, %d worker%s, %d slots; the consumer waited "
                "%.1f s in all, per batch avg %.2f ms, p95 %.2f ms, max %.2f ms; ring fill "
                "avg %.2f; workers busy %.0f%%\n",
                (long long)p->batches, p->workers, p->workers == 1 ? "" : "s", p->slots,
                p->wait_total_s, p->wait_avg_ms, p->wait_p95_ms, p->wait_max_ms, p->fill_avg,
                100.0 * p->busy_frac);
    }
    if (s->nrank_procs > 0) {
        fprintf(f, "  ranks (MPI processes of the tree): CPU %% of a core median / p95, RSS max\n");
        for (int k = 0; k < s->nrank_procs; k++) {
            const stoke_mon_rank_usage *u = &s->rank_procs[k];
            char rss[32];
            stoke_format_bytes(u->rss_bytes.max, rss, sizeof rss);
            if (u->cpu_pct.n)
                fprintf(f, "    rank %-4d pid %-8d CPU %6.1f / %6.1f  RSS %s\n", u->rank, u->pid,
                        u->cpu_pct.median, u->cpu_pct.p95, rss);
            else
                fprintf(f, "    rank %-4d pid %-8d CPU      -          -  RSS %s\n", u->rank,
                        u->pid, rss);
        }
    }
    if (s->nranks > 0) {
        fprintf(f, "  ranks (the trainer's per-step means, seconds): step, input wait, compute, "
                   "all-reduce wait\n");
        for (int k = 0; k < s->nranks && k < STOKE_MON_MAX_RANKS; k++) {
            const stoke_mon_rank *x = &s->ranks[k];
            fprintf(f, "    rank %-4d %-20.64s %8.4f %8.4f %8.4f %8.4f  (%lld steps)\n", x->rank,
                    x->host[0] ? x->host : "-", x->step_s, x->input_wait_s, x->compute_s,
                    x->reduce_wait_s, (long long)x->steps);
        }
    }
}
