/* cpuload.c - what the machine's other processes take: two snapshots of /proc/stat
 * and this process's own CPU time, and the arithmetic between them. */
#include "stoke/hw.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/parse.h"

/* The counters of an aggregate "cpu  1 2 3 ..." line (after "cpu"), in /proc/stat's
 * order; older kernels stop before steal, which then stays 0. False when it does not
 * have at least user, nice, system and idle. */
static bool parse_cpu_line(const char *p, stoke_cpu_snapshot *out)
{
    uint64_t *f[] = {&out->user,   &out->nice, &out->system,  &out->idle,
                     &out->iowait, &out->irq,  &out->softirq, &out->steal};
    int n = 0;
    for (; n < 8; n++) {
        while (*p == ' ' || *p == '\t')
            p++;
        const char *end;
        if (!stoke_parse_u64_prefix(p, 10, f[n], &end))
            break;
        p = end;
    }
    return n >= 4;
}

/* utime + stime (fields 14 and 15) of a /proc/PID/stat line; the command name in
 * parentheses may hold blanks and parentheses, so fields count from the last ')'. */
static bool parse_own_stat(const char *line, double *ticks)
{
    const char *p = strrchr(line, ')');
    if (!p)
        return false;
    p++;
    uint64_t utime = 0, stime = 0;
    for (int field = 3; field <= 15; field++) {
        while (*p == ' ')
            p++;
        if (field == 14 || field == 15) {
            const char *end;
            if (!stoke_parse_u64_prefix(p, 10, field == 14 ? &utime : &stime, &end))
                return false;
            p = end;
        } else {
            p += strcspn(p, " ");
        }
        if (!*p && field < 15)
            return false;
    }
    *ticks = (double)utime + (double)stime;
    return true;
}

static void read_own(const char *root, stoke_cpu_snapshot *out)
{
    if (!root || !*root) {
        struct rusage ru;
        long hz = sysconf(_SC_CLK_TCK);
        if (getrusage(RUSAGE_SELF, &ru) != 0 || hz <= 0)
            return;
        double s = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                   ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
        out->own_ticks = s * (double)hz;
        out->own_valid = true;
        return;
    }
    char path[1024], buf[1024];
    snprintf(path, sizeof path, "%s/proc/self/stat", root);
    if (stoke_read_file(path, buf, sizeof buf) > 0 && parse_own_stat(buf, &out->own_ticks))
        out->own_valid = true;
}

stoke_status stoke_cpu_snapshot_read(const char *root, stoke_cpu_snapshot *out)
{
    memset(out, 0, sizeof *out);
    out->procs_running = -1;
    char path[1024];
    snprintf(path, sizeof path, "%s/proc/stat", root ? root : "");
    FILE *f = fopen(path, "re");
    if (!f)
        return stoke_fail(STOKE_ERR_IO, "%s: cannot open: %m", path);
    /* getline: the "intr" line holds a counter per interrupt and may be long */
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (!strncmp(line, "cpu", 3) && (line[3] == ' ' || line[3] == '\t')) {
            if (!out->valid)
                out->valid = parse_cpu_line(line + 3, out);
        } else if (!strncmp(line, "cpu", 3) && line[3] >= '0' && line[3] <= '9') {
            out->ncpu++;
        } else if (!strncmp(line, "procs_running ", 14)) {
            uint64_t v;
            if (stoke_parse_u64_prefix(line + 14, 10, &v, NULL) && v < 1u << 30)
                out->procs_running = (int)v;
        }
    }
    free(line);
    fclose(f);
    if (!out->valid)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: no aggregate \"cpu\" line", path);
    read_own(root, out);
    return STOKE_OK;
}

static uint64_t busy_of(const stoke_cpu_snapshot *s)
{
    return s->user + s->nice + s->system + s->irq + s->softirq;
}

static uint64_t total_of(const stoke_cpu_snapshot *s)
{
    return busy_of(s) + s->idle + s->iowait + s->steal;
}

bool stoke_cpu_load_between(const stoke_cpu_snapshot *a, const stoke_cpu_snapshot *b,
                            stoke_cpu_load *out)
{
    memset(out, 0, sizeof *out);
    out->run_queue = -1;
    if (!a->valid || !b->valid || b->ncpu <= 0)
        return false;
    uint64_t ta = total_of(a), tb = total_of(b), ba = busy_of(a), bb = busy_of(b);
    if (tb <= ta || bb < ba || b->steal < a->steal)
        return false;
    double total = (double)(tb - ta); /* ticks of all CPUs: ncpu x the interval */
    out->valid = true;
    out->ncpu = b->ncpu;
    long hz = sysconf(_SC_CLK_TCK);
    out->seconds = total / b->ncpu / (double)(hz > 0 ? hz : 100);
    out->busy_cpus = (double)(bb - ba) / total * b->ncpu;
    if (a->own_valid && b->own_valid && b->own_ticks >= a->own_ticks)
        out->own_cpus = (b->own_ticks - a->own_ticks) / total * b->ncpu;
    out->others_cpus = out->busy_cpus - out->own_cpus;
    if (out->others_cpus < 0) /* the counters are read at slightly different times */
        out->others_cpus = 0;
    out->steal_pct = (double)(b->steal - a->steal) / total * 100.0;
    out->run_queue = b->procs_running;
    return true;
}

stoke_status stoke_cpu_load_sample(double seconds, stoke_cpu_load *out)
{
    memset(out, 0, sizeof *out);
    out->run_queue = -1;
    stoke_cpu_snapshot a, b;
    stoke_status s = stoke_cpu_snapshot_read(NULL, &a);
    if (s != STOKE_OK)
        return s;
    if (seconds > 0) {
        struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    s = stoke_cpu_snapshot_read(NULL, &b);
    if (s != STOKE_OK)
        return s;
    stoke_cpu_load_between(&a, &b, out);
    return STOKE_OK;
}
