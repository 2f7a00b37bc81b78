/* scenario.c - parses the GPU scenario files of the test doubles. */
#include "scenario.h"

#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static fake_scenario scenario;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void die(const char *file, int line, const char *what)
{
    fprintf(stderr, "fake GPU scenario %s:%d: %s\n", file, line, what);
    abort();
}

/* Splits "key=value" tokens; values may be double-quoted. Returns the next token
 * start or NULL at the end of the line. */
static char *next_field(char *p, char **key, char **val)
{
    while (*p && isspace((unsigned char)*p))
        p++;
    if (!*p || *p == '#')
        return NULL;
    *key = p;
    while (*p && *p != '=' && !isspace((unsigned char)*p))
        p++;
    if (*p != '=') {
        *val = NULL;
        if (*p)
            *p++ = '\0';
        return p;
    }
    *p++ = '\0';
    if (*p == '"') {
        *val = ++p;
        while (*p && *p != '"')
            p++;
    } else {
        *val = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
    }
    if (*p)
        *p++ = '\0';
    return p;
}

static unsigned long long num(const char *file, int line, const char *v)
{
    if (!v)
        die(file, line, "a key lacks its value");
    char *end;
    unsigned long long x = strtoull(v, &end, 0);
    if (*end)
        die(file, line, "not a number");
    return x;
}

static void load(void)
{
    fake_scenario *s = &scenario;
    s->runtime = 13000;
    const char *file = getenv("STOKE_FAKE_GPU_SCENARIO");
    if (!file || !*file)
        return;
    FILE *f = fopen(file, "r");
    if (!f)
        die(file, 0, "cannot open");
    char buf[1024];
    int line = 0;
    fake_device *dev = NULL;
    static const char *const keys[K_NKEYS] = {"util",     "mem_util", "mem_used", "power",  "temp",
                                              "sm_clock", "throttle", "pcie_rx",  "pcie_tx"};
    while (fgets(buf, sizeof buf, f)) {
        line++;
        char *p = buf, *word, *val;
        p = next_field(p, &word, &val);
        if (!p)
            continue;
        if (!strcmp(word, "driver") || !strcmp(word, "cuda") || !strcmp(word, "runtime") ||
            !strcmp(word, "init_error") || !strcmp(word, "cudart_error")) {
            char *arg, *unused;
            if (!next_field(p, &arg, &unused))
                die(file, line, "missing value");
            if (!strcmp(word, "driver"))
                snprintf(s->driver, sizeof s->driver, "%s", arg);
            else if (!strcmp(word, "cuda"))
                s->cuda = (int)num(file, line, arg);
            else if (!strcmp(word, "runtime"))
                s->runtime = (int)num(file, line, arg);
            else if (!strcmp(word, "cudart_error"))
                s->cudart_error = (int)num(file, line, arg);
            else
                s->init_error = (int)num(file, line, arg);
        } else if (!strcmp(word, "device")) {
            if (s->ndevices == FAKE_MAX_DEVICES)
                die(file, line, "too many devices");
            dev = &s->devices[s->ndevices++];
            while ((p = next_field(p, &word, &val))) {
                if (!val)
                    die(file, line, "expected key=value");
                if (!strcmp(word, "name"))
                    snprintf(dev->name, sizeof dev->name, "%s", val);
                else if (!strcmp(word, "uuid"))
                    snprintf(dev->uuid, sizeof dev->uuid, "%s", val);
                else if (!strcmp(word, "bus"))
                    dev->has_bus = true, snprintf(dev->bus, sizeof dev->bus, "%s", val);
                else if (!strcmp(word, "memory"))
                    dev->has_memory = true, dev->memory = num(file, line, val);
                else if (!strcmp(word, "cc")) {
                    if (sscanf(val, "%d.%d", &dev->cc_major, &dev->cc_minor) != 2)
                        die(file, line, "cc must be MAJOR.MINOR");
                    dev->has_cc = true;
                } else if (!strcmp(word, "sm"))
                    dev->has_sm = true, dev->sm = (int)num(file, line, val);
                else if (!strcmp(word, "power_limit"))
                    dev->has_power_limit = true, dev->power_limit = (unsigned)num(file, line, val);
                else if (!strcmp(word, "max_sm_clock"))
                    dev->has_max_clock = true, dev->max_sm_clock = (unsigned)num(file, line, val);
                else if (!strcmp(word, "pcie_gen"))
                    dev->has_pcie = true, dev->pcie_gen = (unsigned)num(file, line, val);
                else if (!strcmp(word, "pcie_width"))
                    dev->has_pcie = true, dev->pcie_width = (unsigned)num(file, line, val);
                else
                    die(file, line, "unknown device key");
            }
        } else if (!strcmp(word, "sample")) {
            if (!dev)
                die(file, line, "sample before any device");
            if (dev->nrows == FAKE_MAX_SAMPLES)
                die(file, line, "too many samples");
            fake_row *r = &dev->rows[dev->nrows++];
            while ((p = next_field(p, &word, &val))) {
                int k = 0;
                while (k < K_NKEYS && strcmp(keys[k], word))
                    k++;
                if (k == K_NKEYS)
                    die(file, line, "unknown sample key");
                r->has |= 1u << k;
                r->v[k] = num(file, line, val);
            }
        } else if (!strcmp(word, "proc")) {
            if (!dev)
                die(file, line, "proc before any device");
            if (dev->nprocs == FAKE_MAX_PROCS)
                die(file, line, "too many procs");
            fake_proc *pr = &dev->procs[dev->nprocs++];
            while ((p = next_field(p, &word, &val))) {
                if (!val)
                    die(file, line, "expected key=value");
                if (!strcmp(word, "pid")) {
                    if (!strcmp(val, "self"))
                        pr->kind = PID_SELF;
                    else if (!strcmp(val, "child"))
                        pr->kind = PID_CHILD;
                    else
                        pr->kind = PID_NUMBER, pr->pid = (unsigned)num(file, line, val);
                } else if (!strcmp(word, "mem"))
                    pr->has_mem = true, pr->mem = num(file, line, val);
                else
                    die(file, line, "unknown proc key");
            }
        } else {
            die(file, line, "unknown directive");
        }
    }
    fclose(f);
}

const fake_scenario *fake_scenario_get(void)
{
    pthread_once(&once, load);
    return &scenario;
}

unsigned fake_first_child(void)
{
    unsigned self = (unsigned)getpid();
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    unsigned found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        char *rp = strrchr(buf, ')'); /* the command name may hold spaces */
        unsigned ppid;
        char state;
        if (rp && sscanf(rp + 1, " %c %u", &state, &ppid) == 2 && ppid == self)
            found = (unsigned)atoi(e->d_name);
    }
    closedir(d);
    return found;
}
