/* monitor.c - the sampler thread: reads /proc and the GPUs at a fixed interval, keeps
 * the run's history and the latest sample, and hands each sample to a callback. */
#include "stoke/monitor.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct stoke_monitor {
    stoke_monitor_config cfg;
    stoke_proc_reader *proc;
    stoke_gpu_reader *gpu;
    char gpu_note[256];
    stoke_mon_history hist;   /* written by the sampler only while it runs */
    stoke_mon_sample scratch; /* the sampler's sample being built */
    uint64_t t0_ns, seq;
    stoke_mon_pipeline pipe_prev; /* the pipeline's previous snapshot (sampler only) */
    uint64_t pipe_prev_ns;
    bool have_pipe_prev;
    pthread_t thread;
    bool running;
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;
    bool stop_req, gone, have_latest;
    stoke_mon_sample latest;
    stoke_status err;
    char errmsg[512];
};

static void record_error(stoke_monitor *m, stoke_status st, const char *msg)
{
    pthread_mutex_lock(&m->mu);
    if (m->err == STOKE_OK) {
        m->err = st;
        snprintf(m->errmsg, sizeof m->errmsg, "%s", msg);
    }
    pthread_mutex_unlock(&m->mu);
}

/* Asks the pipeline for a snapshot and, with the previous one, the window's wait share
 * and batch rate. The window is the time between the two calls, not between samples,
 * so a slow provider does not skew it. */
static void read_pipeline(stoke_monitor *m, stoke_mon_sample *s)
{
    stoke_mon_pipeline p;
    memset(&p, 0, sizeof p);
    if (!m->cfg.pipeline_fn || !m->cfg.pipeline_fn(m->cfg.pipeline_ctx, &p))
        return;
    uint64_t now = stoke_now_ns();
    if (s) {
        s->pipe = p;
        s->valid |= STOKE_MS_PIPELINE;
        const stoke_mon_pipeline *q = &m->pipe_prev;
        double dt = (double)(now - m->pipe_prev_ns) * 1e-9;
        /* Counts going backwards mean a new pipeline: no window across the two. */
        if (m->have_pipe_prev && dt > 0 && p.batches >= q->batches &&
            p.wait_total_s >= q->wait_total_s) {
            double pct = 100.0 * (p.wait_total_s - q->wait_total_s) / dt;
            /* A provider that counts a wait when its batch arrives (not stoke's loader,
             * which counts it as it accrues) puts all of it in this window. */
            s->data_wait_pct = pct > 100.0 ? 100.0 : pct;
            s->batches_per_s = (double)(p.batches - q->batches) / dt;
            s->valid |= STOKE_MS_PIPELINE_RATE;
        }
    }
    m->pipe_prev = p;
    m->pipe_prev_ns = now;
    m->have_pipe_prev = true;
}

stoke_status stoke_monitor_create(const stoke_monitor_config *cfg, stoke_monitor **out)
{
    *out = NULL;
    if (!(cfg->interval_s >= 0.05) || cfg->interval_s > 86400)
        return stoke_fail(STOKE_ERR_ARG, "interval %g s is out of range (0.05 to 86400)",
                          cfg->interval_s);
    stoke_monitor *m = calloc(1, sizeof *m);
    if (!m)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    m->cfg = *cfg;
    stoke_mon_history_init(&m->hist);
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    stoke_status st = stoke_proc_reader_open(cfg->pid, &m->proc);
    if (st != STOKE_OK) {
        stoke_monitor_free(m);
        return st;
    }
    if (cfg->no_gpu) {
        snprintf(m->gpu_note, sizeof m->gpu_note, "GPU sampling disabled");
    } else if (stoke_gpu_reader_open(&m->gpu) != STOKE_OK) {
        snprintf(m->gpu_note, sizeof m->gpu_note, "no NVIDIA GPU: %s", stoke_last_error());
    } else if (stoke_gpu_reader_count(m->gpu) == 0) {
        snprintf(m->gpu_note, sizeof m->gpu_note, "no NVIDIA GPU: NVML lists no device");
    }
    /* A first reading, so the first sample already has rates. */
    bool alive;
    st = stoke_proc_read(m->proc, &m->scratch, &alive);
    if (st != STOKE_OK) {
        stoke_monitor_free(m);
        return st;
    }
    if (!alive) {
        stoke_monitor_free(m);
        return stoke_fail(STOKE_ERR_NOTFOUND, "no process with pid %d", cfg->pid);
    }
    read_pipeline(m, NULL);
    m->t0_ns = stoke_now_ns();
    *out = m;
    return STOKE_OK;
}

/* Takes one sample; returns false when the watched root has ended. */
static bool sample_once(stoke_monitor *m)
{
    stoke_mon_sample *s = &m->scratch;
    memset(s, 0, sizeof *s);
    s->seq = ++m->seq;
    s->t = (double)(stoke_now_ns() - m->t0_ns) * 1e-9;
    s->wall = stoke_wall_time();
    bool alive = true;
    stoke_status st = stoke_proc_read(m->proc, s, &alive);
    if (st != STOKE_OK)
        record_error(m, st, stoke_last_error());
    if (!alive)
        return false;
    if (m->gpu) {
        int npids = 0;
        const int *pids = m->cfg.pid > 0 ? stoke_proc_tree_pids(m->proc, &npids) : NULL;
        stoke_gpu_read(m->gpu, pids, npids, s);
    }
    read_pipeline(m, s);
    st = stoke_mon_history_add(&m->hist, s);
    if (st != STOKE_OK)
        record_error(m, st, stoke_last_error());
    pthread_mutex_lock(&m->mu);
    m->latest = *s;
    m->have_latest = true;
    pthread_mutex_unlock(&m->mu);
    if (m->cfg.on_sample) {
        st = m->cfg.on_sample(s, m->cfg.ctx);
        if (st != STOKE_OK)
            record_error(m, st, stoke_last_error());
    }
    return true;
}

static void *sampler(void *arg)
{
    stoke_monitor *m = arg;
    uint64_t interval_ns = (uint64_t)(m->cfg.interval_s * 1e9);
    uint64_t next = m->t0_ns + interval_ns;
    pthread_mutex_lock(&m->mu);
    while (!m->stop_req) {
        struct timespec ts = {(time_t)(next / 1000000000u), (long)(next % 1000000000u)};
        int rc = pthread_cond_timedwait(&m->cv, &m->mu, &ts);
        if (m->stop_req)
            break;
        if (rc != ETIMEDOUT && stoke_now_ns() < next)
            continue; /* spurious wake-up */
        pthread_mutex_unlock(&m->mu);
        bool alive = sample_once(m);
        /* Fixed schedule without drift; after a stall, skip the missed ticks. */
        uint64_t now = stoke_now_ns();
        next += interval_ns;
        if (next <= now)
            next = now + interval_ns - (now - m->t0_ns) % interval_ns;
        pthread_mutex_lock(&m->mu);
        if (!alive) {
            m->gone = true;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

stoke_status stoke_monitor_start(stoke_monitor *m)
{
    if (m->running)
        return STOKE_OK;
    m->stop_req = false;
    int rc = pthread_create(&m->thread, NULL, sampler, m);
    if (rc != 0)
        return stoke_fail(STOKE_ERR_SYSTEM, "cannot start the sampler thread: %s", strerror(rc));
    m->running = true;
    return STOKE_OK;
}

void stoke_monitor_stop(stoke_monitor *m)
{
    if (!m->running)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop_req = true;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
    m->running = false;
}

bool stoke_monitor_sample_now(stoke_monitor *m, double min_s)
{
    if (m->running || m->gone)
        return false;
    double since = (double)(stoke_now_ns() - m->t0_ns) * 1e-9 - (m->have_latest ? m->latest.t : 0);
    if (since < min_s)
        return false;
    if (!sample_once(m)) {
        pthread_mutex_lock(&m->mu);
        m->gone = true;
        pthread_mutex_unlock(&m->mu);
        return false;
    }
    return true;
}

bool stoke_monitor_latest(stoke_monitor *m, stoke_mon_sample *out)
{
    pthread_mutex_lock(&m->mu);
    bool have = m->have_latest;
    if (have)
        *out = m->latest;
    pthread_mutex_unlock(&m->mu);
    return have;
}

bool stoke_monitor_target_gone(stoke_monitor *m)
{
    pthread_mutex_lock(&m->mu);
    bool gone = m->gone;
    pthread_mutex_unlock(&m->mu);
    return gone;
}

int stoke_monitor_gpu_count(const stoke_monitor *m) { return stoke_gpu_reader_count(m->gpu); }

const char *stoke_monitor_gpu_note(const stoke_monitor *m) { return m->gpu_note; }

const stoke_mon_history *stoke_monitor_history(const stoke_monitor *m) { return &m->hist; }

stoke_status stoke_monitor_error(stoke_monitor *m, char *msg, size_t size)
{
    pthread_mutex_lock(&m->mu);
    stoke_status st = m->err;
    if (msg && size)
        snprintf(msg, size, "%s", m->errmsg);
    pthread_mutex_unlock(&m->mu);
    return st;
}

void stoke_monitor_free(stoke_monitor *m)
{
    if (!m)
        return;
    stoke_monitor_stop(m);
    stoke_proc_reader_free(m->proc);
    stoke_gpu_reader_free(m->gpu);
    stoke_mon_history_free(&m->hist);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}
