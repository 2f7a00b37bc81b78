/* threads.c - the busiest thread of a process tree, and how many of its threads were
 * busy, from /proc/PID/task/TID/stat. */
#include "stoke/monitor.h"
#include "monitor/proc_impl.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct thread_ent {
    int pid, tid;
    unsigned long long ticks; /* utime + stime at the read that saw it */
    unsigned long long delta; /* ticks since the previous read, if rated */
    bool rated;               /* seen in both reads */
} thread_ent;

struct stoke_thread_reader {
    char root[256];
    long clk_tck;
    /* The previous read (sorted by tid) and the one being taken. */
    thread_ent *prev, *cur;
    int nprev, ncur, cap;
    double prev_t;
    bool have_prev;
    char buf[1024];
};

stoke_status stoke_thread_reader_open(const char *proc_root, stoke_thread_reader **out)
{
    *out = NULL;
    stoke_thread_reader *t = calloc(1, sizeof *t);
    if (!t)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    snprintf(t->root, sizeof t->root, "%s", proc_root && proc_root[0] ? proc_root : "/proc");
    t->clk_tck = sysconf(_SC_CLK_TCK);
    if (t->clk_tck <= 0)
        t->clk_tck = 100;
    *out = t;
    return STOKE_OK;
}

void stoke_thread_reader_free(stoke_thread_reader *t)
{
    if (!t)
        return;
    free(t->prev);
    free(t->cur);
    free(t);
}

static int push(stoke_thread_reader *t, int pid, int tid, unsigned long long ticks)
{
    if (t->ncur == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        thread_ent *a = realloc(t->cur, (size_t)cap * sizeof *a);
        thread_ent *b = realloc(t->prev, (size_t)cap * sizeof *b);
        if (a)
            t->cur = a;
        if (b)
            t->prev = b;
        if (!a || !b)
            return -1;
        t->cap = cap;
    }
    t->cur[t->ncur++] = (thread_ent){.pid = pid, .tid = tid, .ticks = ticks, .rated = false};
    return 0;
}

static int by_tid(const void *a, const void *b)
{
    int x = ((const thread_ent *)a)->tid, y = ((const thread_ent *)b)->tid;
    return (x > y) - (x < y);
}

/* Every thread of one process; a process that ended since it was listed has none. */
static int read_process(stoke_thread_reader *t, int pid)
{
    char path[320];
    snprintf(path, sizeof path, "%s/%d/task", t->root, pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) && rc == 0) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "%s/%d/task/%.16s/stat", t->root, pid, de->d_name);
        stat_fields f;
        if (stoke_read_file(path, t->buf, sizeof t->buf) <= 0 || !stoke_proc_parse_stat(t->buf, &f))
            continue;
        rc = push(t, pid, atoi(de->d_name), f.own_ticks);
    }
    closedir(d);
    return rc;
}

/* A thread counts as busy when it ran at least half as much as the busiest one, or at
 * least THREAD_BUSY_PCT of a core, and never under THREAD_BUSY_FLOOR_PCT. The relative
 * part matters on shared cores: the compute threads of a team (OpenMP, oneDNN, BLAS)
 * get equal slices of what is left to the job, and two threads at 10% of a core each
 * are still two threads that want a core; an absolute cut alone would miss them exactly
 * when the cores are most contended. The floor keeps a tick of a sleeping thread (2% at
 * 100 Hz over half a second) from counting. */
#define THREAD_BUSY_PCT       20.0
#define THREAD_BUSY_FLOOR_PCT 5.0

bool stoke_thread_read(stoke_thread_reader *t, const int *pids, int npids, double now_s,
                       stoke_mon_thread *out, int *busy)
{
    if (busy)
        *busy = 0;
    t->ncur = 0;
    for (int i = 0; i < npids; i++)
        if (read_process(t, pids[i]) < 0)
            break; /* out of memory: judge the threads read so far */
    qsort(t->cur, (size_t)t->ncur, sizeof *t->cur, by_tid);
    double dt = now_s - t->prev_t;
    const thread_ent *best = NULL;
    unsigned long long best_d = 0;
    if (t->have_prev && dt > 0) {
        /* Both lists are sorted by tid: one merge pass. A thread new since the previous
         * read has no rate yet. */
        int j = 0;
        for (int i = 0; i < t->ncur; i++) {
            while (j < t->nprev && t->prev[j].tid < t->cur[i].tid)
                j++;
            if (j == t->nprev || t->prev[j].tid != t->cur[i].tid ||
                t->prev[j].ticks > t->cur[i].ticks)
                continue;
            unsigned long long d = t->cur[i].ticks - t->prev[j].ticks;
            t->cur[i].rated = true;
            t->cur[i].delta = d;
            if (!best || d > best_d) {
                best = &t->cur[i];
                best_d = d;
            }
        }
    }
    bool found = best != NULL;
    if (found && busy) {
        double per_pct = 100.0 / (double)t->clk_tck / dt; /* % of a core per tick */
        double cut = fmax(THREAD_BUSY_FLOOR_PCT, fmin(THREAD_BUSY_PCT, 0.5 * best_d * per_pct));
        for (int i = 0; i < t->ncur; i++)
            if (t->cur[i].rated && (double)t->cur[i].delta * per_pct >= cut)
                (*busy)++;
    }
    if (found) {
        memset(out, 0, sizeof *out);
        out->pid = best->pid;
        out->tid = best->tid;
        out->core_pct = 100.0 * (double)best_d / (double)t->clk_tck / dt;
        char path[320];
        snprintf(path, sizeof path, "%s/%d/task/%d/comm", t->root, best->pid, best->tid);
        if (stoke_read_line(path, t->buf, sizeof t->buf) > 0)
            snprintf(out->comm, sizeof out->comm, "%.15s", t->buf);
        else
            snprintf(out->comm, sizeof out->comm, "?");
    }
    thread_ent *swap = t->prev;
    t->prev = t->cur;
    t->cur = swap;
    t->nprev = t->ncur;
    t->prev_t = now_s;
    t->have_prev = true;
    return found;
}
