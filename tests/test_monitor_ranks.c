/* test_monitor_ranks.c - the monitor and the diagnosis over the ranks of a data-parallel
 * run: the rank rules on the trainer's per-rank figures, the launcher's rank read from a
 * process's environment, and the ranks of a watched tree with their CPU and memory. */
#include "check.h"
#include "finding_util.h"
#include "monitor/proc_impl.h"
#include "stoke/monitor.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- The rank rules -------------------------------------------------------------- */

/* n ranks of the same step: each waits `wait` s at the all-reduce, `input` s for its
 * batches, and computes `compute` s. */
static void ranks_of(stoke_mon_summary *s, int n, double step, double input, double compute,
                     double wait)
{
    memset(s, 0, sizeof *s);
    s->samples = 10;
    s->duration_s = 5;
    s->ncpu = s->usable_cpus = 8;
    s->nranks = n;
    for (int k = 0; k < n; k++) {
        stoke_mon_rank *x = &s->ranks[k];
        x->rank = k;
        snprintf(x->host, sizeof x->host, "node-%c", 'a' + k / 2);
        x->steps = 100;
        x->step_s = step;
        x->input_wait_s = input;
        x->compute_s = compute;
        x->reduce_wait_s = wait;
    }
}

/* What every finding must be: texts whole, figures finite, changes well formed, the
 * advice in the watched program's words only. */
static void check_finding(const stoke_finding *f, const stoke_mon_summary *s)
{
    static const char *const pytorch[] = {
        "OMP_NUM_THREADS",         "torch.", "num_workers", "DataLoader",
        "DistributedDataParallel", "no_sync"};
    static const char *const stoke[] = {"--workers", "--threads", "--prefetch", "--accumulate",
                                        "--batch-size"};
    bool is_stoke = s->program.kind == STOKE_PROG_STOKE;
    const char *const *bad = is_stoke ? pytorch : stoke;
    size_t nbad = is_stoke ? sizeof pytorch / sizeof *pytorch : sizeof stoke / sizeof *stoke;
    for (size_t i = 0; i < nbad; i++)
        CHECK_MSG(!strstr(f->advice, bad[i]), "[%s] names %s: %s", f->rule->id, bad[i], f->advice);
    CHECK_MSG(strlen(f->advice) + 1 < sizeof f->advice, "[%s] advice cut: %s", f->rule->id,
              f->advice);
    CHECK_MSG(strlen(f->evidence) + 1 < sizeof f->evidence, "[%s] evidence cut: %s", f->rule->id,
              f->evidence);
    CHECK(f->nfigures > 0 && f->nfigures <= STOKE_FINDING_FIGURES);
    for (int i = 0; i < f->nfigures; i++)
        CHECK_MSG(isfinite(f->figures[i].value), "[%s] %s", f->rule->id, f->figures[i].name);
    for (int i = 0; i < f->nchanges; i++) {
        const stoke_finding_change *c = &f->changes[i];
        CHECK((c->to != NULL) == (c->direction == 0));
        if (!isnan(c->current) && !isnan(c->suggested))
            CHECK_MSG((c->suggested - c->current) * c->direction > 0, "[%s] %s", f->rule->id,
                      c->setting);
    }
}

static void check_change(const stoke_finding *x, const char *setting, double current,
                         double suggested, int direction)
{
    const stoke_finding_change *c = stoke_finding_change_of(x, setting);
    CHECK_MSG(c && same(c->current, current) && same(c->suggested, suggested) &&
                  c->direction == direction,
              "[%s] %s: %g -> %g (%+d), expected %g -> %g (%+d)", x->rule->id, setting,
              c ? c->current : NAN, c ? c->suggested : NAN, c ? c->direction : 9, current,
              suggested, direction);
}

/* The run's findings, each checked; returns how many fired. */
static size_t diagnose(const stoke_mon_summary *s, stoke_finding *f)
{
    size_t n = stoke_diagnose(s, f, 16);
    CHECK(n <= 16);
    for (size_t i = 0; i < n && i < 16; i++)
        check_finding(&f[i], s);
    return n;
}

static void test_straggler_input(void)
{
    stoke_mon_summary s;
    stoke_finding f[16];
    /* 4 ranks of 0.2 s steps; rank 2 waits for its batches 30% of its step, and the other
     * three wait for it at the all-reduce 30% of theirs */
    ranks_of(&s, 4, 0.2, 0.01, 0.13, 0.06);
    s.ranks[2].input_wait_s = 0.06;
    s.ranks[2].reduce_wait_s = 0.005;
    s.program = (stoke_mon_program){.kind = STOKE_PROG_STOKE, .workers = 2, .prefetch = 4};
    size_t n = diagnose(&s, f);
    const stoke_finding *x = find(f, n, "rank-straggler");
    CHECK(x != NULL);
    CHECK(find(f, n, "allreduce-exposed") == NULL);
    if (!x)
        return;
    CHECK_INT_EQ(x->rank, 2);
    CHECK_STR_EQ(x->host, "node-b");
    CHECK_STR_CONTAINS(x->evidence, "rank 2 on node-b waits 2% of its 0.2000 s step");
    CHECK_STR_CONTAINS(x->evidence, "the other 3 ranks wait 30%");
    CHECK_STR_CONTAINS(x->evidence, "input-bound");
    CHECK_STR_CONTAINS(x->advice, "--workers 3 (now 2)");
    CHECK_STR_CONTAINS(x->advice, "--prefetch 8");
    CHECK_STR_CONTAINS(x->advice, "faster storage on node-b");
    CHECK_NEAR(figure(x, "rank"), 2, 0);
    CHECK_NEAR(figure(x, "ranks"), 4, 0);
    CHECK_NEAR(figure(x, "slow_ranks"), 1, 0);
    CHECK_NEAR(figure(x, "reduce_wait_pct"), 2.5, 1e-9);
    CHECK_NEAR(figure(x, "others_reduce_wait_pct"), 30, 1e-9);
    CHECK_NEAR(figure(x, "input_wait_pct"), 30, 1e-9);
    CHECK_NEAR(figure(x, "others_input_wait_pct"), 5, 1e-9);
    /* waiting 30% of the step: the pipeline must be 1/0.7 as fast, 2 workers -> 3 */
    CHECK_NEAR(figure(x, "speedup_needed"), 1 / 0.7, 1e-9);
    check_change(x, "workers", 2, 3, +1);
    check_change(x, "prefetch", 4, 8, +1);
    const stoke_finding_change *c = stoke_finding_change_of(x, "data_location");
    CHECK(c && c->to && !strcmp(c->to, "tmpfs"));

    /* the same run watched from outside: PyTorch's knobs, the settings unknown */
    s.program = (stoke_mon_program){0};
    n = diagnose(&s, f);
    x = find(f, n, "rank-straggler");
    CHECK(x != NULL);
    if (x) {
        CHECK_STR_CONTAINS(x->advice, "DataLoader(num_workers=...)");
        check_change(x, "workers", NAN, NAN, +1);
        CHECK(stoke_finding_change_of(x, "prefetch") == NULL);
    }

    /* the diagnosis names the rank as what bounded the run; the summary lists the ranks */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    stoke_mon_summary_print(&s, out);
    stoke_diagnosis_print(&s, f, n < 16 ? n : 16, n, out);
    fclose(out);
    CHECK_STR_CONTAINS(text, "diagnosis: bounded by one rank (the others wait for it");
    CHECK_STR_CONTAINS(text, "[rank-straggler]: rank 2 on node-b");
    CHECK_STR_CONTAINS(text, "rank 2    node-b");
    free(text);
}

static void test_straggler_compute(void)
{
    stoke_mon_summary s;
    stoke_finding f[16];
    ranks_of(&s, 4, 0.2, 0.01, 0.13, 0.06);
    s.ranks[1].compute_s = 0.19;
    s.ranks[1].reduce_wait_s = 0.002;
    s.program = (stoke_mon_program){.kind = STOKE_PROG_STOKE, .workers = 2, .threads = 4};
    size_t n = diagnose(&s, f);
    const stoke_finding *x = find(f, n, "rank-straggler");
    CHECK(x != NULL);
    if (!x)
        return;
    CHECK_INT_EQ(x->rank, 1);
    CHECK_STR_EQ(x->host, "node-a");
    CHECK_STR_CONTAINS(x->evidence, "compute-bound");
    CHECK(strstr(x->evidence, "input-bound") == NULL);
    CHECK_STR_CONTAINS(x->advice, "check node-a's load");
    CHECK_STR_CONTAINS(x->advice, "--threads");
    CHECK_NEAR(figure(x, "compute_ratio"), 0.19 / 0.13, 1e-9);
    check_change(x, "host_load", NAN, NAN, -1);
    check_change(x, "ranks_on_host", NAN, NAN, -1);
    CHECK(stoke_finding_change_of(x, "workers") == NULL);

    /* two slow ranks on one host: the one waiting least is named, both are counted */
    s.ranks[0].compute_s = 0.185;
    s.ranks[0].reduce_wait_s = 0.004;
    n = diagnose(&s, f);
    x = find(f, n, "rank-straggler");
    CHECK(x && x->rank == 1 && figure(x, "slow_ranks") == 2);
    if (x)
        CHECK_STR_CONTAINS(x->evidence, "(2 ranks wait that little)");

    /* a host name as long as the field: the texts still fit */
    ranks_of(&s, 4, 0.2, 0.01, 0.13, 0.06);
    s.ranks[3].compute_s = 0.19;
    s.ranks[3].reduce_wait_s = 0.0;
    memset(s.ranks[3].host, 'h', sizeof s.ranks[3].host); /* not even terminated */
    s.ranks[3].rank = 255;
    s.nranks = 4;
    n = diagnose(&s, f);
    x = find(f, n, "rank-straggler");
    CHECK(x && x->rank == 255 && strlen(x->host) == 63);
}

static void test_allreduce_exposed(void)
{
    stoke_mon_summary s;
    stoke_finding f[16];
    /* every rank waits 35-45% of its step at the all-reduce */
    ranks_of(&s, 4, 0.2, 0.005, 0.11, 0.08);
    s.ranks[0].reduce_wait_s = 0.07;
    s.ranks[3].reduce_wait_s = 0.09;
    s.program = (stoke_mon_program){.kind = STOKE_PROG_STOKE, .accumulate = 1};
    size_t n = diagnose(&s, f);
    const stoke_finding *x = find(f, n, "allreduce-exposed");
    CHECK(x != NULL);
    CHECK(find(f, n, "rank-straggler") == NULL);
    if (x) {
        CHECK_INT_EQ(x->rank, -1);
        CHECK_STR_CONTAINS(x->evidence, "every one of the 4 ranks waits");
        CHECK_STR_CONTAINS(x->evidence, "at least 35%");
        CHECK_NEAR(figure(x, "reduce_wait_pct_median"), 40, 1e-9);
        CHECK_NEAR(figure(x, "reduce_wait_pct_min"), 35, 1e-9);
        /* 40% waiting: 0.4 / (0.4 + 0.6 k) < 15% from k = 4 */
        check_change(x, "grad_accum_steps", 1, 4, +1);
        check_change(x, "interconnect", NAN, NAN, +1);
        CHECK_STR_CONTAINS(x->advice, "--accumulate 4 (now 1)");
        CHECK(stoke_finding_change_of(x, "bucket_size") == NULL);
    }
    /* a foreign job: DDP's buckets and no_sync */
    s.program = (stoke_mon_program){0};
    n = diagnose(&s, f);
    x = find(f, n, "allreduce-exposed");
    CHECK(x != NULL);
    if (x) {
        CHECK_STR_CONTAINS(x->advice, "bucket_cap_mb");
        CHECK_STR_CONTAINS(x->advice, "about 4x");
        check_change(x, "grad_accum_steps", NAN, NAN, +1);
        check_change(x, "bucket_size", NAN, NAN, +1);
    }
}

/* Nothing to say: balanced ranks, one process, figures missing or broken. */
static void test_no_rank_finding(void)
{
    stoke_mon_summary s;
    stoke_finding f[16];
    /* balanced: each waits 5% of its step */
    ranks_of(&s, 4, 0.2, 0.01, 0.17, 0.01);
    s.ranks[1].reduce_wait_s = 0.002; /* one waits less, but nobody waits much */
    CHECK_INT_EQ(diagnose(&s, f), 0);
    /* similar waits, each 12%: under the threshold */
    ranks_of(&s, 8, 0.2, 0.01, 0.15, 0.024);
    CHECK_INT_EQ(diagnose(&s, f), 0);
    /* one process, or no figures */
    ranks_of(&s, 1, 0.2, 0.06, 0.1, 0.0);
    CHECK_INT_EQ(diagnose(&s, f), 0);
    ranks_of(&s, 0, 0.2, 0.06, 0.1, 0.0);
    CHECK_INT_EQ(diagnose(&s, f), 0);
    /* broken figures: one rank's NaN (it could be the straggler), zeros, infinities,
     * no steps, a count past the array */
    const double bad[] = {NAN, INFINITY, -1};
    for (int field = 0; field < 4; field++)
        for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
            ranks_of(&s, 4, 0.2, 0.01, 0.13, 0.06);
            s.ranks[2].reduce_wait_s = 0.005;
            double *v[] = {&s.ranks[2].step_s, &s.ranks[2].input_wait_s, &s.ranks[2].compute_s,
                           &s.ranks[2].reduce_wait_s};
            *v[field] = bad[b];
            CHECK_MSG(diagnose(&s, f) == 0, "field %d = %g", field, bad[b]);
        }
    ranks_of(&s, 4, 0, 0, 0, 0);
    CHECK_INT_EQ(diagnose(&s, f), 0);
    ranks_of(&s, 4, 0.2, 0.01, 0.13, 0.06);
    s.ranks[2].reduce_wait_s = 0.005;
    s.ranks[0].steps = 0;
    CHECK_INT_EQ(diagnose(&s, f), 0);
    s.ranks[0].steps = 100;
    s.nranks = STOKE_MON_MAX_RANKS + 1;
    CHECK_INT_EQ(diagnose(&s, f), 0);
    s.nranks = -3;
    CHECK_INT_EQ(diagnose(&s, f), 0);
}

/* A Ctrl-C on mpirun with the default 1 s between SIGTERM and SIGKILL: a step of 0.8 s
 * on the slowest rank and a 0.3 s checkpoint need 1.1 s; an evaluation of 0.2 s with two
 * checkpoints needs less. */
static void test_stop_grace(void)
{
    stoke_mon_summary s;
    stoke_finding f[16];
    ranks_of(&s, 2, 0.5, 0.01, 0.45, 0.04);
    s.ranks[1].step_s = 0.8;
    s.program = (stoke_mon_program){.kind = STOKE_PROG_STOKE, .workers = 1, .threads = 1};
    s.stop_grace_known = true;
    s.stop_grace_s = 1;
    s.eval_s = 0.2;
    s.checkpoint_s = 0.3;
    size_t n = diagnose(&s, f);
    const stoke_finding *x = find(f, n, "stop-grace");
    CHECK(x != NULL);
    if (x) {
        CHECK(x->rule->kind == STOKE_RULE_RISK);
        CHECK_NEAR(figure(x, "stop_grace_s"), 1, 1e-12);
        CHECK_NEAR(figure(x, "step_s"), 0.8, 1e-12);
        CHECK_NEAR(figure(x, "eval_s"), 0.2, 1e-12);
        CHECK_NEAR(figure(x, "checkpoint_s"), 0.3, 1e-12);
        CHECK_NEAR(figure(x, "stop_needs_s"), 1.1, 1e-12);
        check_change(x, "stop_grace", 1, 3, +1); /* ceil(2 x 1.1) */
        CHECK_STR_CONTAINS(x->evidence, "needs up to 1.10 s");
        CHECK_STR_CONTAINS(x->evidence, "0.80 s step (rank 1's)");
        CHECK_STR_CONTAINS(x->advice, "--mca odls_base_sigkill_timeout 3");
        CHECK_STR_CONTAINS(x->advice, "about 6 s");
    }
    /* the evaluation is the longer wait: 0.9 s of it, then two checkpoints */
    s.eval_s = 0.9;
    n = diagnose(&s, f);
    x = find(f, n, "stop-grace");
    CHECK(x && fabs(figure(x, "stop_needs_s") - 1.5) < 1e-12);
    /* a grace long enough is silent, and so is a need equal to it */
    s.eval_s = 0.2;
    s.stop_grace_s = 5;
    CHECK(find(f, diagnose(&s, f), "stop-grace") == NULL);
    s.stop_grace_s = 1.1 + 1e-9;
    CHECK(find(f, diagnose(&s, f), "stop-grace") == NULL);
    /* a grace of 0 (every stop is killed): raised to at least 1 s */
    s.stop_grace_s = 0;
    s.checkpoint_s = 0.01;
    s.ranks[0].step_s = s.ranks[1].step_s = 0.1; /* the evaluation's 0.22 s */
    n = diagnose(&s, f);
    x = find(f, n, "stop-grace");
    CHECK(x != NULL);
    if (x)
        check_change(x, "stop_grace", 0, 1, +1);
    /* a need past the grace, but not ... under mpirun, without a checkpoint written (the
     * stop loses nothing), or with figures that are not times */
    s.stop_grace_s = 1;
    s.ranks[1].step_s = 0.8;
    s.checkpoint_s = 0.3;
    s.stop_grace_known = false;
    CHECK(find(f, diagnose(&s, f), "stop-grace") == NULL);
    s.stop_grace_known = true;
    const double bad[] = {0, -1, NAN, INFINITY};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        s.checkpoint_s = bad[b];
        CHECK_MSG(find(f, diagnose(&s, f), "stop-grace") == NULL, "checkpoint %g", bad[b]);
        s.checkpoint_s = 0.3;
        if (b == 0)
            continue;
        s.eval_s = bad[b];
        CHECK_MSG(find(f, diagnose(&s, f), "stop-grace") == NULL, "eval %g", bad[b]);
        s.eval_s = 0.2;
        s.stop_grace_s = bad[b];
        CHECK_MSG(find(f, diagnose(&s, f), "stop-grace") == NULL, "grace %g", bad[b]);
        s.stop_grace_s = 1;
    }
    /* one process */
    s.nranks = 1;
    CHECK(find(f, diagnose(&s, f), "stop-grace") == NULL);
}

/* ---- The rank in a process's environment ----------------------------------------- */

static bool env_rank(const char *text, size_t len, int *rank)
{
    *rank = -7;
    return stoke_proc_parse_environ_rank(text, len, rank);
}

static void test_environ_rank(void)
{
    int r;
    static const char a[] = "PATH=/bin\0OMPI_COMM_WORLD_RANK=3\0HOME=/root";
    CHECK(env_rank(a, sizeof a, &r) && r == 3);
    /* Open MPI's own name first, then PMIx's (it may differ: a singleton) */
    static const char b[] = "PMIX_RANK=5\0OMPI_COMM_WORLD_RANK=1";
    CHECK(env_rank(b, sizeof b, &r) && r == 1);
    static const char c[] = "PMI_RANK=12";
    CHECK(env_rank(c, sizeof c - 1, &r) && r == 12); /* the last entry unterminated */
    static const char d[] = "XOMPI_COMM_WORLD_RANK=1\0OMPI_COMM_WORLD_RANK=\0PMIX_RANK=-1\0"
                            "PMI_RANK=2x\0OMPI_COMM_WORLD_RANK=99999999999\0PMIX_RANK=1 ";
    CHECK(!env_rank(d, sizeof d, &r) && r == -7);
    CHECK(!env_rank("", 0, &r));
    /* cut in the middle of the value: the digits read are what there is */
    static const char e[] = "OMPI_COMM_WORLD_RANK=42";
    CHECK(env_rank(e, sizeof e - 2, &r) && r == 4);
}

/* ---- The ranks of a watched tree -------------------------------------------------- */

/* A launcher: a parent that starts `rank 0` (sleep) and `rank 1` (a shell that starts
 * its own sleep, of its rank too), with the launchers' variables in their environment.
 * Each child waits for a byte on `go` before it execs, as a launcher's child is a copy
 * of the launcher until then. Returns the parent (its own process group); the ranks'
 * pids in ranks[2]. */
static pid_t launcher(int go, int ranks_pipe)
{
    pid_t pid = fork();
    if (pid != 0) {
        setpgid(pid, pid);
        return pid;
    }
    setpgid(0, 0);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            char c;
            if (read(go, &c, 1) != 1)
                _exit(1);
            if (k == 0) {
                char *env[] = {"OMPI_COMM_WORLD_RANK=0", "PMIX_RANK=0", NULL};
                execle("/bin/sleep", "sleep", "30", (char *)NULL, env);
            } else {
                char *env[] = {"PATH=/usr/bin:/bin", "PMIX_RANK=1", NULL};
                execle("/bin/sh", "sh", "-c", "sleep 30 & wait", (char *)NULL, env);
            }
            _exit(127);
        }
    }
    if (write(ranks_pipe, kids, sizeof kids) != (ssize_t)sizeof kids)
        _exit(1);
    while (wait(NULL) > 0) {
    }
    _exit(0);
}

/* The name of pid (/proc/PID/comm), "" once it has ended. */
static void comm_of(int pid, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", pid);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, (int)size, f))
            buf[0] = '\0';
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
}

static const stoke_mon_rank_proc *rank_in(const stoke_mon_sample *s, int rank)
{
    for (int k = 0; k < s->nrank_procs; k++)
        if (s->rank_procs[k].rank == rank)
            return &s->rank_procs[k];
    return NULL;
}

static void test_tree_ranks(void)
{
    int go[2], rp[2];
    if (pipe(go) != 0 || pipe(rp) != 0) {
        CHECK(false);
        return;
    }
    pid_t root = launcher(go[0], rp[1]);
    pid_t kids[2] = {0, 0};
    CHECK(read(rp[0], kids, sizeof kids) == (ssize_t)sizeof kids);
    stoke_proc_reader *r = NULL;
    CHECK_INT_EQ(stoke_proc_reader_open(root, &r), STOKE_OK);
    stoke_mon_sample s;
    bool alive = false;
    if (r) {
        /* before the exec the children are copies of this test: no rank */
        memset(&s, 0, sizeof s);
        CHECK_INT_EQ(stoke_proc_read(r, &s, &alive), STOKE_OK);
        CHECK(alive && s.proc_count == 3);
        CHECK_INT_EQ(s.nrank_procs, 0);
        CHECK(!(s.valid & STOKE_MS_RANKS));
    }
    CHECK(write(go[1], "gg", 2) == 2);
    /* until both have exec'd and rank 1's shell has started its sleep: waited for as
     * long as it takes (the suite's timeout bounds it), never against a clock */
    char c0[32] = "", c1[32] = "";
    while (strcmp(c0, "sleep") || strcmp(c1, "sh")) {
        usleep(10000);
        comm_of(kids[0], c0, sizeof c0);
        comm_of(kids[1], c1, sizeof c1);
    }
    CHECK_STR_EQ(c0, "sleep");
    CHECK_STR_EQ(c1, "sh");
    if (r) {
        do { /* the shell's sleep in the tree */
            usleep(10000);
            memset(&s, 0, sizeof s);
            CHECK_INT_EQ(stoke_proc_read(r, &s, &alive), STOKE_OK);
        } while (alive && s.proc_count < 4);
        usleep(100000); /* a second reading: CPU % over the interval */
        memset(&s, 0, sizeof s);
        CHECK_INT_EQ(stoke_proc_read(r, &s, &alive), STOKE_OK);
        CHECK(s.valid & STOKE_MS_RANKS);
        CHECK_INT_EQ(s.proc_count, 4); /* the launcher, two ranks, rank 1's sleep */
        CHECK_INT_EQ(s.nrank_procs, 2);
        const stoke_mon_rank_proc *a = rank_in(&s, 0), *b = rank_in(&s, 1);
        CHECK(a && a->pid == kids[0] && a->rss_bytes > 0 && a->cpu_valid && a->cpu_pct >= 0);
        /* the shell stands for rank 1, its sleep (of rank 1 too) counted in it */
        CHECK(b && b->pid == kids[1] && b->rss_bytes > 0 && b->cpu_valid);
        CHECK(s.rank_procs[0].rank == 0); /* in rank order */
        stoke_proc_reader_free(r);
    }

    /* the monitor: its JSON lines, history and summary name each rank's pid */
    stoke_monitor_config cfg = {.interval_s = 0.05, .pid = root, .no_gpu = true};
    stoke_monitor *m = NULL;
    CHECK_INT_EQ(stoke_monitor_create(&cfg, &m), STOKE_OK);
    if (m) {
        for (int i = 0; i < 3; i++) {
            usleep(60000);
            CHECK(stoke_monitor_sample_now(m, 0.01));
        }
        CHECK(stoke_monitor_latest(m, &s));
        char buf[32768];
        size_t len = stoke_mon_format_json(&s, buf, sizeof buf);
        CHECK(len > 0);
        cJSON *j = cJSON_Parse(buf);
        cJSON *ranks = cJSON_GetObjectItem(j, "ranks");
        CHECK(cJSON_GetArraySize(ranks) == 2);
        cJSON *r1 = cJSON_GetArrayItem(ranks, 1);
        CHECK(cJSON_GetObjectItem(r1, "rank") && cJSON_GetObjectItem(r1, "rank")->valueint == 1);
        CHECK(cJSON_GetObjectItem(r1, "pid") &&
              cJSON_GetObjectItem(r1, "pid")->valueint == kids[1]);
        CHECK(cJSON_GetObjectItem(r1, "cpu_pct") && cJSON_GetObjectItem(r1, "rss_bytes"));
        cJSON_Delete(j);
        char line[1024];
        stoke_mon_format_line(&s, line, sizeof line);
        CHECK_STR_CONTAINS(line, "RANKS 0:");
        CHECK_STR_CONTAINS(line, " 1:");
        stoke_mon_summary sum;
        CHECK_INT_EQ(stoke_mon_summarize(stoke_monitor_history(m), 0, &sum), STOKE_OK);
        CHECK_INT_EQ(sum.nrank_procs, 2);
        CHECK_INT_EQ(sum.nranks, 0);
        CHECK(sum.rank_procs[0].rank == 0 && sum.rank_procs[0].pid == kids[0]);
        CHECK(sum.rank_procs[1].rank == 1 && sum.rank_procs[1].pid == kids[1]);
        CHECK(sum.rank_procs[1].cpu_pct.n == 3 && sum.rank_procs[1].rss_bytes.max > 0);
        char *text = NULL;
        size_t tlen = 0;
        FILE *out = open_memstream(&text, &tlen);
        stoke_mon_summary_print(&sum, out);
        fclose(out);
        char want[64];
        snprintf(want, sizeof want, "rank 1    pid %-8d CPU", (int)kids[1]);
        CHECK_STR_CONTAINS(text, want);
        free(text);
        stoke_monitor_free(m);
    }
    /* Another user's processes: their environment cannot be read (EACCES), so they have
     * no rank, and the reader goes on. Run as root, a child becomes nobody to see that. */
    if (geteuid() == 0) {
        pid_t c = fork();
        if (c == 0) {
            stoke_proc_reader *q = NULL;
            stoke_mon_sample t;
            bool up = false;
            memset(&t, 0, sizeof t);
            if (setgid(65534) != 0 || setuid(65534) != 0)
                _exit(3);
            if (stoke_proc_reader_open(root, &q) != STOKE_OK ||
                stoke_proc_read(q, &t, &up) != STOKE_OK)
                _exit(4);
            _exit(up && t.proc_count == 4 && t.nrank_procs == 0 ? 0 : 5);
        }
        int st = 0;
        waitpid(c, &st, 0);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "another user's view: status %d", st);
    }
    kill(-root, SIGKILL);
    kill(kids[0], SIGKILL);
    kill(kids[1], SIGKILL);
    waitpid(root, NULL, 0);
    close(go[0]);
    close(go[1]);
    close(rp[0]);
    close(rp[1]);
}

/* The state letter of pid (/proc/PID/stat), '?' once it has gone. */
static char state_of(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

/* A rank that has exited while its launcher has not reaped it yet (a zombie, with no
 * memory left) is no longer listed: CI's busy machine once showed a rank with RSS 0 in
 * the last sample of `stoke monitor -- mpirun ...`. */
static void test_ended_rank(void)
{
    int quit[2], reap[2];
    if (pipe(quit) != 0 || pipe(reap) != 0) {
        CHECK(false);
        return;
    }
    pid_t kid = -1;
    int kp[2];
    CHECK(pipe(kp) == 0);
    pid_t root = fork();
    if (root == 0) {
        pid_t c = fork();
        if (c == 0) {
            /* the rank: a shell that ends when a line arrives on its input */
            dup2(quit[0], 0);
            char *env[] = {"OMPI_COMM_WORLD_RANK=0", NULL};
            execle("/bin/sh", "sh", "-c", "read x", (char *)NULL, env);
            _exit(127);
        }
        if (write(kp[1], &c, sizeof c) != (ssize_t)sizeof c)
            _exit(1);
        char b;
        if (read(reap[0], &b, 1) != 1) /* reaps only when told */
            _exit(1);
        waitpid(c, NULL, 0);
        _exit(0);
    }
    CHECK(read(kp[0], &kid, sizeof kid) == (ssize_t)sizeof kid);
    char comm[32] = "";
    while (strcmp(comm, "sh")) { /* until it has exec'd with the rank's environment */
        usleep(10000);
        comm_of(kid, comm, sizeof comm);
    }
    stoke_proc_reader *r = NULL;
    CHECK_INT_EQ(stoke_proc_reader_open(root, &r), STOKE_OK);
    stoke_mon_sample s;
    bool alive = false;
    if (r) {
        memset(&s, 0, sizeof s);
        CHECK_INT_EQ(stoke_proc_read(r, &s, &alive), STOKE_OK);
        CHECK(alive && s.nrank_procs == 1 && s.rank_procs[0].pid == kid &&
              s.rank_procs[0].rss_bytes > 0);
        CHECK(write(quit[1], "\n", 1) == 1);
        while (state_of(kid) != 'Z') /* exited, not reaped */
            usleep(10000);
        memset(&s, 0, sizeof s);
        CHECK_INT_EQ(stoke_proc_read(r, &s, &alive), STOKE_OK);
        CHECK(alive);
        CHECK_INT_EQ(s.proc_count, 2); /* the launcher and its zombie */
        CHECK_INT_EQ(s.nrank_procs, 0);
        stoke_proc_reader_free(r);
    }
    CHECK(write(reap[1], "r", 1) == 1);
    waitpid(root, NULL, 0);
    close(quit[0]);
    close(quit[1]);
    close(reap[0]);
    close(reap[1]);
    close(kp[0]);
    close(kp[1]);
}

int main(void)
{
    test_straggler_input();
    test_straggler_compute();
    test_allreduce_exposed();
    test_no_rank_finding();
    test_stop_grace();
    test_environ_rank();
    test_tree_ranks();
    test_ended_rank();
    return CHECK_DONE();
}
