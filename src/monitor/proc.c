/* proc.c - system CPU, iowait and memory, and a watched process tree, from /proc (with
 * the MPI ranks among its processes). */
#include "stoke/monitor.h"
#include "monitor/proc_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A process of the tree, with its /proc files kept open: pread on an open
 * /proc/PID/stat is much cheaper than open+read+close every tick, and the descriptor
 * refers to that process only, so a reused PID cannot be mistaken for it. */
typedef struct proc_entry {
    int pid;
    unsigned long long start; /* starttime, clock ticks after boot */
    int stat_fd, io_fd;
    unsigned long long ticks;  /* utime + stime + cutime + cstime at the last read */
    unsigned long long rd, wr; /* read_bytes, write_bytes at the last read */
    bool have_io;
    bool init; /* read at least once */
    bool seen;
    bool ended; /* a zombie: it has exited and waits for its parent to reap it */
    int ppid;
    long rss_pages;
    /* The MPI rank its environment names (-1: none, or unreadable), read again when
     * its name changes: a launcher's child is a copy of the launcher until it execs
     * the rank's program with the rank's environment. */
    int rank;
    char comm[16];
} proc_entry;

/* A rank's processes summed in one read of the tree (rank_procs). */
typedef struct rank_total {
    int rank, pid;
    unsigned long long ticks;
    long rss_pages;
} rank_total;

struct stoke_proc_reader {
    int stat_fd, meminfo_fd;
    int ncpu;
    long clk_tck, page_size;
    /* /proc/stat totals at the previous read */
    bool have_prev_cpu;
    unsigned long long prev_total, prev_busy, prev_iowait;
    /* the tree */
    int root;
    bool use_children_files; /* /proc/PID/task/TID/children exists */
    proc_entry *ents;
    int nents, cap_ents;
    int *pids;
    int npids, cap_pids;
    double prev_tree_t; /* monotonic seconds of the previous tree read, 0 = none */
    unsigned long long prev_ticks, prev_rd, prev_wr; /* tree totals then */
    bool prev_io;                                    /* every process's io file was readable then */
    stoke_thread_reader *threads;                    /* the busiest thread, NULL without a tree */
    rank_total ranks_prev[STOKE_MON_LOCAL_RANKS];    /* the ranks at the previous read */
    int nranks_prev;
    char buf[16384];
};

static double mono_s(void) { return (double)stoke_now_ns() * 1e-9; }

static long pread_all(int fd, char *buf, size_t size)
{
    ssize_t n;
    do
        n = pread(fd, buf, size - 1, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return (long)n;
}

static int push_pid(stoke_proc_reader *r, int pid)
{
    for (int i = 0; i < r->npids; i++)
        if (r->pids[i] == pid)
            return 0; /* a child is listed by one thread only, but be safe */
    if (r->npids == r->cap_pids) {
        int cap = r->cap_pids ? r->cap_pids * 2 : 64;
        int *p = realloc(r->pids, (size_t)cap * sizeof *p);
        if (!p)
            return -1;
        r->pids = p;
        r->cap_pids = cap;
    }
    r->pids[r->npids++] = pid;
    return 0;
}

bool stoke_proc_parse_stat(const char *text, stat_fields *f)
{
    /* The command name may contain spaces and parentheses: skip to the last ')'. */
    const char *p = strrchr(text, ')');
    if (!p)
        return false;
    char state;
    unsigned long long utime, stime;
    /* fields 3.. : state ppid pgrp session tty tpgid flags minflt cminflt majflt
     * cmajflt utime stime cutime cstime priority nice num_threads itrealvalue
     * starttime vsize rss */
    long long cutime, cstime;
    int n = sscanf(p + 1,
                   " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld %*d %*d "
                   "%ld %*d %llu %*u %ld",
                   &state, &f->ppid, &utime, &stime, &cutime, &cstime, &f->threads, &f->start,
                   &f->rss_pages);
    if (n != 9)
        return false;
    f->ended = state == 'Z' || state == 'X';
    f->own_ticks = utime + stime;
    /* Own time plus reaped children's: see read_tree. */
    f->ticks = utime + stime + (unsigned long long)(cutime > 0 ? cutime : 0) +
               (unsigned long long)(cstime > 0 ? cstime : 0);
    return true;
}

bool stoke_proc_parse_io(const char *buf, unsigned long long *rd, unsigned long long *wr)
{
    const char *a = strstr(buf, "\nread_bytes:");
    const char *b = strstr(buf, "\nwrite_bytes:");
    if (!a || !b)
        return false;
    *rd = strtoull(a + 12, NULL, 10);
    *wr = strtoull(b + 13, NULL, 10);
    return true;
}

static bool read_io(int fd, char *buf, size_t size, unsigned long long *rd, unsigned long long *wr)
{
    return fd >= 0 && pread_all(fd, buf, size) > 0 && stoke_proc_parse_io(buf, rd, wr);
}

static void entry_close(proc_entry *e)
{
    if (e->stat_fd >= 0)
        close(e->stat_fd);
    if (e->io_fd >= 0)
        close(e->io_fd);
    e->stat_fd = e->io_fd = -1;
}

static int open_proc_file(int pid, const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", pid, name);
    return open(path, O_RDONLY | O_CLOEXEC);
}

/* Children of pid from /proc/PID/task/TID/children (every thread can fork). */
static int add_children_files(stoke_proc_reader *r, int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d)
        return 0; /* the process ended between two reads: no children */
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char cpath[96];
        snprintf(cpath, sizeof cpath, "/proc/%d/task/%.16s/children", pid, de->d_name);
        if (stoke_read_file(cpath, r->buf, sizeof r->buf) <= 0)
            continue;
        char *s = r->buf, *end;
        for (;;) {
            long c = strtol(s, &end, 10);
            if (end == s)
                break;
            if (c > 0 && push_pid(r, (int)c) < 0) {
                closedir(d);
                return -1;
            }
            s = end;
        }
    }
    closedir(d);
    return 0;
}

/* Fallback without the children files: one scan of /proc for every process's parent. */
static int scan_all(stoke_proc_reader *r)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    int cap = 256, n = 0;
    int(*pp)[2] = malloc((size_t)cap * sizeof *pp);
    if (!pp) {
        closedir(d);
        return -1;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%.16s/stat", de->d_name);
        stat_fields f;
        if (stoke_read_file(path, r->buf, sizeof r->buf) <= 0 || !stoke_proc_parse_stat(r->buf, &f))
            continue;
        if (n == cap) {
            cap *= 2;
            void *np = realloc(pp, (size_t)cap * sizeof *pp);
            if (!np)
                break;
            pp = np;
        }
        pp[n][0] = atoi(de->d_name);
        pp[n][1] = f.ppid;
        n++;
    }
    closedir(d);
    for (int i = 0; i < r->npids; i++) /* r->pids grows as descendants are found */
        for (int j = 0; j < n; j++)
            if (pp[j][1] == r->pids[i] && push_pid(r, pp[j][0]) < 0) {
                free(pp);
                return -1;
            }
    free(pp);
    return 0;
}

static proc_entry *find_entry(stoke_proc_reader *r, int pid)
{
    for (int i = 0; i < r->nents; i++)
        if (r->ents[i].pid == pid)
            return &r->ents[i];
    if (r->nents == r->cap_ents) {
        int cap = r->cap_ents ? r->cap_ents * 2 : 32;
        proc_entry *p = realloc(r->ents, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        r->ents = p;
        r->cap_ents = cap;
    }
    proc_entry *e = &r->ents[r->nents++];
    memset(e, 0, sizeof *e);
    e->pid = pid;
    e->stat_fd = e->io_fd = -1;
    e->rank = -1;
    return e;
}

/* The entry of pid if the tree has it; never adds one. */
static proc_entry *peek_entry(stoke_proc_reader *r, int pid)
{
    for (int i = 0; i < r->nents; i++)
        if (r->ents[i].pid == pid)
            return &r->ents[i];
    return NULL;
}

bool stoke_proc_parse_environ_rank(const char *buf, size_t len, int *rank)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK=", "PMIX_RANK=", "PMI_RANK="};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        size_t nl = strlen(names[k]);
        for (size_t at = 0; at < len;) {
            const char *e = buf + at;
            const char *end = memchr(e, '\0', len - at);
            size_t el = end ? (size_t)(end - e) : len - at;
            if (el > nl && el - nl <= 10 && !memcmp(e, names[k], nl)) {
                long v = 0;
                size_t i = nl;
                while (i < el && e[i] >= '0' && e[i] <= '9')
                    v = v * 10 + (e[i++] - '0');
                if (i == el && v <= (1L << 30)) {
                    *rank = (int)v;
                    return true;
                }
            }
            at += el + 1;
        }
    }
    return false;
}

/* The rank in /proc/PID/environ, -1 if none. This reads the environment another process
 * was started with, the launcher's word on which rank it is: it is not a variable of
 * stoke's own (those go through core/env.c). A process of another user cannot be read
 * (EACCES): it then has no rank, and the monitor goes on. */
static int read_environ_rank(int pid)
{
    int fd = open_proc_file(pid, "environ");
    if (fd < 0)
        return -1;
    /* A launcher's environment is a few kB; 1 MiB bounds a pathological one. */
    size_t cap = 0, len = 0, limit = 1u << 20;
    char *buf = NULL;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 16384;
            char *nb = ncap <= limit ? realloc(buf, ncap) : NULL;
            if (!nb)
                break;
            buf = nb;
            cap = ncap;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    int rank = -1;
    if (buf && !stoke_proc_parse_environ_rank(buf, len, &rank))
        rank = -1;
    free(buf);
    return rank;
}

/* Reads e's rank when it is new to the tree or has exec'd (its name in stat, the text
 * in stat_text, changed). */
static void update_rank(proc_entry *e, const char *stat_text)
{
    const char *a = strchr(stat_text, '('), *b = strrchr(stat_text, ')');
    char comm[16] = "";
    if (a && b && b > a)
        snprintf(comm, sizeof comm, "%.*s", (int)(b - a - 1), a + 1);
    if (e->init && !strcmp(comm, e->comm))
        return;
    memcpy(e->comm, comm, sizeof comm);
    e->rank = read_environ_rank(e->pid);
}

/* The process that stands for e's rank: the nearest process at or above e that has a
 * rank, then up through its parents of the same rank (a rank's own children inherit
 * its environment). NULL when e belongs to no rank. Depth is bounded: a parent link
 * read at two moments may loop through reused PIDs. */
static proc_entry *rank_top(stoke_proc_reader *r, proc_entry *e)
{
    int depth = 0;
    while (e && e->rank < 0 && depth++ < 64)
        e = e->pid == r->root ? NULL : peek_entry(r, e->ppid);
    if (!e || e->rank < 0)
        return NULL;
    proc_entry *p;
    while (depth++ < 128 && e->pid != r->root && (p = peek_entry(r, e->ppid)) && p->rank == e->rank)
        e = p;
    return e;
}

/* The ranks of the tree into s->rank_procs, each with its processes' CPU since the
 * previous read and their memory. */
static void read_ranks(stoke_proc_reader *r, stoke_mon_sample *s, double dt)
{
    rank_total cur[STOKE_MON_LOCAL_RANKS];
    int n = 0;
    for (int i = 0; i < r->nents; i++) {
        proc_entry *e = &r->ents[i];
        /* An ended rank is no longer one: a zombie has no memory left (RSS 0), and the
         * launcher may take a while to reap it on a busy machine. */
        if (e->ended)
            continue;
        proc_entry *top = rank_top(r, e);
        if (!top)
            continue;
        int k = 0;
        while (k < n && cur[k].pid != top->pid)
            k++;
        if (k == n) {
            if (n == STOKE_MON_LOCAL_RANKS)
                continue;
            cur[n++] = (rank_total){top->rank, top->pid, 0, 0};
        }
        cur[k].ticks += e->ticks;
        cur[k].rss_pages += e->rss_pages;
    }
    /* In rank order, as a person reads them. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && (cur[j].rank < cur[j - 1].rank ||
                                  (cur[j].rank == cur[j - 1].rank && cur[j].pid < cur[j - 1].pid));
             j--) {
            rank_total t = cur[j];
            cur[j] = cur[j - 1];
            cur[j - 1] = t;
        }
    for (int i = 0; i < n; i++) {
        stoke_mon_rank_proc *o = &s->rank_procs[i];
        memset(o, 0, sizeof *o);
        o->rank = cur[i].rank;
        o->pid = cur[i].pid;
        o->rss_bytes = (uint64_t)cur[i].rss_pages * (uint64_t)r->page_size;
        for (int k = 0; k < r->nranks_prev && dt > 0; k++) {
            const rank_total *q = &r->ranks_prev[k];
            /* a rank whose process left it alive took its time along: no rate */
            if (q->pid == cur[i].pid && q->rank == cur[i].rank && cur[i].ticks >= q->ticks) {
                o->cpu_pct = 100.0 * (double)(cur[i].ticks - q->ticks) / (double)r->clk_tck / dt;
                o->cpu_valid = true;
            }
        }
    }
    memcpy(r->ranks_prev, cur, (size_t)n * sizeof cur[0]);
    r->nranks_prev = n;
    s->nrank_procs = n;
    if (n > 0)
        s->valid |= STOKE_MS_RANKS;
}

stoke_status stoke_proc_reader_open(int pid, stoke_proc_reader **out)
{
    *out = NULL;
    if (pid < 0)
        return stoke_fail(STOKE_ERR_ARG, "invalid pid %d", pid);
    if (pid > 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        if (access(path, R_OK) != 0)
            return stoke_fail(STOKE_ERR_NOTFOUND, "no process with pid %d", pid);
    }
    stoke_proc_reader *r = calloc(1, sizeof *r);
    if (!r)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory");
    r->stat_fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    r->meminfo_fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
    if (r->stat_fd < 0 || r->meminfo_fd < 0) {
        int e = errno;
        stoke_proc_reader_free(r);
        return stoke_fail(STOKE_ERR_IO, "cannot open /proc/stat or /proc/meminfo: %s", strerror(e));
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    r->ncpu = n > 0 ? (int)n : 1;
    r->clk_tck = sysconf(_SC_CLK_TCK);
    if (r->clk_tck <= 0)
        r->clk_tck = 100;
    r->page_size = sysconf(_SC_PAGESIZE);
    if (r->page_size <= 0)
        r->page_size = 4096;
    r->root = pid;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    r->use_children_files = access(path, R_OK) == 0;
    if (pid > 0) {
        stoke_status st = stoke_thread_reader_open("/proc", &r->threads);
        if (st != STOKE_OK) {
            stoke_proc_reader_free(r);
            return st;
        }
    }
    *out = r;
    return STOKE_OK;
}

void stoke_proc_reader_free(stoke_proc_reader *r)
{
    if (!r)
        return;
    if (r->stat_fd >= 0)
        close(r->stat_fd);
    if (r->meminfo_fd >= 0)
        close(r->meminfo_fd);
    for (int i = 0; i < r->nents; i++)
        entry_close(&r->ents[i]);
    free(r->ents);
    free(r->pids);
    stoke_thread_reader_free(r->threads);
    free(r);
}

static stoke_status read_system(stoke_proc_reader *r, stoke_mon_sample *s)
{
    /* Only the first line ("cpu  user nice system idle iowait irq softirq steal") is
     * needed. */
    char line[512];
    if (pread_all(r->stat_fd, line, sizeof line) <= 0)
        return stoke_fail(STOKE_ERR_IO, "cannot read /proc/stat: %s", strerror(errno));
    unsigned long long v[8] = {0};
    if (sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) < 5)
        return stoke_fail(STOKE_ERR_FORMAT, "/proc/stat: unexpected first line");
    unsigned long long total = 0;
    for (int i = 0; i < 8; i++)
        total += v[i];
    unsigned long long idle = v[3], iowait = v[4];
    unsigned long long busy = total - idle - iowait;
    s->ncpu = r->ncpu;
    if (r->have_prev_cpu && total > r->prev_total) {
        double dt = (double)(total - r->prev_total);
        s->cpu_pct = 100.0 * (double)(busy - r->prev_busy) / dt;
        /* iowait may go backwards on some kernels (it is per-CPU idle accounting) */
        s->iowait_pct =
            iowait >= r->prev_iowait ? 100.0 * (double)(iowait - r->prev_iowait) / dt : 0.0;
        if (s->cpu_pct < 0)
            s->cpu_pct = 0;
        s->valid |= STOKE_MS_CPU;
    }
    r->prev_total = total;
    r->prev_busy = busy;
    r->prev_iowait = iowait;
    r->have_prev_cpu = true;

    char mem[512];
    if (pread_all(r->meminfo_fd, mem, sizeof mem) > 0) {
        const char *a = strstr(mem, "MemTotal:");
        const char *b = strstr(mem, "MemAvailable:");
        if (a && b) {
            unsigned long long tot = strtoull(a + 9, NULL, 10);
            unsigned long long av = strtoull(b + 13, NULL, 10);
            s->mem_total_bytes = tot * 1024;
            s->mem_used_bytes = tot > av ? (tot - av) * 1024 : 0;
            s->valid |= STOKE_MS_MEM;
        }
    }
    return STOKE_OK;
}

/* Finds the tree, reads each process and accumulates the tree's totals. */
static void read_tree(stoke_proc_reader *r, stoke_mon_sample *s, bool *root_alive)
{
    r->npids = 0;
    s->proc_pid = r->root;
    proc_entry *root = find_entry(r, r->root);
    if (root && root->stat_fd < 0)
        root->stat_fd = open_proc_file(r->root, "stat");
    stat_fields rf;
    if (!root || root->stat_fd < 0 || pread_all(root->stat_fd, r->buf, sizeof r->buf) <= 0 ||
        !stoke_proc_parse_stat(r->buf, &rf)) {
        *root_alive = false;
        return;
    }
    /* A zombie root has ended: its children are being reparented. */
    if (rf.ended) {
        *root_alive = false;
        return;
    }
    push_pid(r, r->root);
    if (r->use_children_files) {
        for (int i = 0; i < r->npids; i++)
            if (add_children_files(r, r->pids[i]) < 0)
                break;
    } else {
        scan_all(r);
    }

    /* The tree's CPU time is the sum over its processes of their own time plus that
     * of the children they have reaped (cutime, cstime): when a child is reaped its
     * whole time moves into its parent's, so the sum stays continuous and short-lived
     * children (a shell's $(...)) are counted. /proc/PID/io folds in reaped children
     * the same way. Only a process that leaves the tree alive (reparented away) takes
     * its total with it; it is subtracted from the previous total below. */
    double now = mono_s();
    bool rates = r->prev_tree_t > 0 && now > r->prev_tree_t;
    double dt = now - r->prev_tree_t;
    unsigned long long ticks = 0, rd_sum = 0, wr_sum = 0;
    bool all_io = true;
    long threads = 0, rss = 0;
    int count = 0;
    for (int i = 0; i < r->nents; i++)
        r->ents[i].seen = false;
    for (int i = 0; i < r->npids; i++) {
        proc_entry *e = find_entry(r, r->pids[i]);
        if (!e)
            break;
        if (e->stat_fd < 0)
            e->stat_fd = open_proc_file(e->pid, "stat");
        if (!e->init && e->io_fd < 0)
            e->io_fd = open_proc_file(e->pid, "io");
        stat_fields f;
        if (e->stat_fd < 0 || pread_all(e->stat_fd, r->buf, sizeof r->buf) <= 0 ||
            !stoke_proc_parse_stat(r->buf, &f))
            continue; /* ended since it was listed */
        e->seen = true;
        e->ended = f.ended;
        update_rank(e, r->buf);
        e->ppid = f.ppid;
        e->rss_pages = f.rss_pages;
        unsigned long long rd = 0, wr = 0;
        bool io = read_io(e->io_fd, r->buf, sizeof r->buf, &rd, &wr);
        all_io &= io;
        e->init = true;
        e->start = f.start;
        e->ticks = f.ticks;
        e->rd = rd;
        e->wr = wr;
        e->have_io = io;
        ticks += f.ticks;
        rd_sum += rd;
        wr_sum += wr;
        threads += f.threads;
        rss += f.rss_pages;
        count++;
    }
    /* Forget processes that left the tree; those still alive were reparented away. */
    unsigned long long gone_ticks = 0, gone_rd = 0, gone_wr = 0;
    for (int i = 0; i < r->nents;) {
        proc_entry *e = &r->ents[i];
        if (e->seen || e->pid == r->root) {
            i++;
            continue;
        }
        stat_fields f;
        if (e->stat_fd >= 0 && pread_all(e->stat_fd, r->buf, sizeof r->buf) > 0 &&
            stoke_proc_parse_stat(r->buf, &f)) {
            if (!f.ended) {
                gone_ticks += e->ticks;
                gone_rd += e->rd;
                gone_wr += e->wr;
            }
        }
        entry_close(e);
        r->ents[i] = r->ents[--r->nents];
    }
    unsigned long long pt =
        r->prev_ticks - (gone_ticks < r->prev_ticks ? gone_ticks : r->prev_ticks);
    unsigned long long prd = r->prev_rd - (gone_rd < r->prev_rd ? gone_rd : r->prev_rd);
    unsigned long long pwr = r->prev_wr - (gone_wr < r->prev_wr ? gone_wr : r->prev_wr);
    if (rates && dt > 0) {
        s->proc_cpu_pct = ticks > pt ? 100.0 * (double)(ticks - pt) / (double)r->clk_tck / dt : 0;
        s->valid |= STOKE_MS_PROC_CPU;
        if (all_io && r->prev_io) {
            s->proc_read_Bps = rd_sum > prd ? (double)(rd_sum - prd) / dt : 0;
            s->proc_write_Bps = wr_sum > pwr ? (double)(wr_sum - pwr) / dt : 0;
            s->valid |= STOKE_MS_PROC_IO;
        }
    }
    read_ranks(r, s, rates ? dt : 0);
    r->prev_ticks = ticks;
    r->prev_rd = rd_sum;
    r->prev_wr = wr_sum;
    r->prev_io = all_io;
    r->prev_tree_t = now;
    if (r->threads &&
        stoke_thread_read(r->threads, r->pids, r->npids, now, &s->busiest, &s->busy_threads))
        s->valid |= STOKE_MS_THREAD;
    s->proc_count = count;
    s->proc_threads = (int)threads;
    s->proc_rss_bytes = (uint64_t)rss * (uint64_t)r->page_size;
    s->valid |= STOKE_MS_PROC;
}

stoke_status stoke_proc_read(stoke_proc_reader *r, stoke_mon_sample *s, bool *root_alive)
{
    *root_alive = true;
    stoke_status st = read_system(r, s);
    if (st != STOKE_OK)
        return st;
    if (r->root > 0)
        read_tree(r, s, root_alive);
    return STOKE_OK;
}

const int *stoke_proc_tree_pids(const stoke_proc_reader *r, int *count)
{
    *count = r->npids;
    return r->pids;
}
