/* cmd_monitor.c - `stoke monitor`: samples a job (a command it starts, a PID, or the
 * whole system), shows a live line, logs CSV / JSON lines, and ends with a summary and
 * a diagnosis. */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/tmpfile.h"
#include "stoke/hw.h"
#include "stoke/monitor.h"

#define CMD "monitor"

typedef struct monitor_args {
    double interval, duration;
    const char *csv, *jsonl, *data, *report, *prometheus;
    bool prometheus_public;
    long pid;
    char **command;
} monitor_args;

#define M(f) offsetof(monitor_args, f)
static const cli_opt monitor_opts[] = {
    {.name = "interval",
     .type = CLI_DOUBLE,
     .off = M(interval),
     .arg = "S",
     .min = 0.05,
     .max = 86400,
     .want = "must be a number of seconds from 0.05 to 86400",
     .help = "seconds between samples (default 1, at least 0.05)"},
    {.name = "duration",
     .type = CLI_DOUBLE,
     .off = M(duration),
     .arg = "S",
     .min = 0.001,
     .max = 1e9,
     .want = "must be a positive number of seconds",
     .help = "stop after S seconds (a COMMAND then gets SIGTERM)"},
    {.name = "csv",
     .type = CLI_TEXT,
     .off = M(csv),
     .arg = "FILE",
     .help = "write one CSV row per sample (header first)"},
    {.name = "jsonl",
     .type = CLI_TEXT,
     .off = M(jsonl),
     .arg = "FILE",
     .help = "write one JSON object per sample and line"},
    {.name = "report",
     .type = CLI_TEXT,
     .off = M(report),
     .arg = "FILE",
     .min = 1,
     .help = "at the end write the HTML page of `stoke report` from the samples\n(docs/report.md)"},
    {.name = "data",
     .type = CLI_TEXT,
     .off = M(data),
     .arg = "PATH",
     .help = "where the job reads its data (rotational or network storage\nfeeds the I/O "
             "diagnosis)"},
    {.name = "prometheus",
     .type = CLI_TEXT,
     .off = M(prometheus),
     .arg = "ADDR:PORT",
     .min = 1,
     .help = "serve the readings for Prometheus at\nhttp://ADDR:PORT/metrics (:PORT is "
             "loopback; port 0 picks\na free one; docs/prometheus.md)"},
    {.name = "prometheus-public",
     .type = CLI_SWITCH,
     .off = M(prometheus_public),
     .help = "let --prometheus listen on an address other than loopback"},
    {.name = "pid",
     .type = CLI_LONG,
     .off = M(pid),
     .arg = "PID",
     .min = 1,
     .max = 0x7fffffff,
     .want = "must be a process id",
     .help = "watch a running process and its descendants until it ends"},
    {.name = "",
     .type = CLI_REST,
     .off = M(command),
     .arg = "COMMAND ...",
     .want = "a command",
     .help = "start COMMAND (no shell), forward SIGINT/SIGTERM to it, and exit\nwith its exit "
             "status (128+N if it died of signal N)"},
    {0}};
#undef M

void cmd_monitor_usage(void)
{
    cli_print_usage("usage: stoke monitor", 21, (const cli_opt *[]){monitor_opts, NULL}, NULL);
    puts("\n"
         "Samples GPU utilization, memory, power, temperature, clocks, throttling and PCIe\n"
         "traffic, system CPU, iowait and memory, and the CPU, threads, RSS, disk I/O and\n"
         "GPU memory of a job and all its descendants. Shows a live line; at the end prints\n"
         "min / median / p95 / max of every series and a diagnosis of what bounded the run.\n");
    cli_print_options(monitor_opts, 18);
    puts("With neither --pid nor a COMMAND the whole system is sampled until Ctrl-C or\n"
         "--duration. When stdout is not a terminal the live line is printed as plain\n"
         "lines, at most about one per second. Exit: the COMMAND's status; otherwise 0,\n"
         "1 on a run-time error (no such PID, unwritable log), 2 on a usage error, 127 if\n"
         "COMMAND cannot be started. Fields and rules: docs/monitor.md.");
}

typedef struct sink_ctx {
    int csv_fd, json_fd;
    const char *csv_path, *json_path;
    int gpu_count;
    stoke_prom_server *prom; /* NULL without --prometheus */
    bool tty;
    double interval, last_line_t;
    bool printed;
    char buf[32768];
} sink_ctx;

/* The JSON lines' last line: the diagnosis printed, as one write like a sample's (a
 * log that failed already said so and gets none). */
static stoke_status write_diagnosis(const sink_ctx *c, const stoke_finding *f, size_t n, double t)
{
    char *line = stoke_mon_format_diagnosis_json(f, n, t, stoke_wall_time());
    if (!line)
        return stoke_fail(STOKE_ERR_NOMEM, "out of memory writing the diagnosis to '%s'",
                          c->json_path);
    stoke_status st = stoke_mon_write_line(c->json_fd, line, strlen(line), c->json_path);
    free(line);
    return st;
}

/* Runs on the sampler thread; the main thread touches ctx only after it is joined. */
static stoke_status on_sample(const stoke_mon_sample *s, void *arg)
{
    sink_ctx *c = arg;
    stoke_status st = STOKE_OK;
    stoke_prom_publish_sample(c->prom, s);
    if (c->json_fd >= 0) {
        size_t n = stoke_mon_format_json(s, c->buf, sizeof c->buf);
        if (n)
            st = stoke_mon_write_line(c->json_fd, c->buf, n, c->json_path);
    }
    if (c->csv_fd >= 0) {
        size_t n = stoke_mon_format_csv_row(s, c->gpu_count, c->buf, sizeof c->buf);
        if (n) {
            stoke_status e = stoke_mon_write_line(c->csv_fd, c->buf, n, c->csv_path);
            if (st == STOKE_OK)
                st = e;
        }
    }
    /* Plain lines at short intervals would flood a log: about one per second. */
    if (c->tty || !c->printed || s->t - c->last_line_t >= 1.0 - c->interval / 2) {
        stoke_mon_format_line(s, c->buf, sizeof c->buf);
        if (c->tty)
            printf("\r%s\033[K", c->buf);
        else
            printf("%s\n", c->buf);
        fflush(stdout);
        c->last_line_t = s->t;
        c->printed = true;
    }
    return st;
}

static int exit_code_of(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return 1;
}

/* Starts argv with the parent's signal mask and the SIGXFSZ disposition stoke inherited
 * restored. An exec failure travels back through a close-on-exec pipe, so "cannot
 * start" is told apart from the command's own exit status 127. Returns the pid, or -1
 * with *err set (errno of fork or exec). */
static pid_t spawn(char **argv, const sigset_t *old_mask, int *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        *err = errno;
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        *err = errno;
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        sigprocmask(SIG_SETMASK, old_mask, NULL);
        cli_restore_inherited_signals();
        execvp(argv[0], argv);
        int e = errno;
        ssize_t w = write(p[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    close(p[1]);
    int e = 0;
    ssize_t n;
    do
        n = read(p[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(p[0]);
    if (n == (ssize_t)sizeof e) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        *err = e;
        return -1;
    }
    return pid;
}

/* The CPUs the job may keep busy: its affinity, and, for a COMMAND started here (it is
 * in this process's cgroup and inherits its affinity) or the system seen from here,
 * the cgroup CPU quota too. Another process's cgroup (--pid) is not read. */
static int usable_cpus_of(pid_t pid)
{
    if (pid == 0) {
        stoke_cpu_info c;
        if (stoke_cpu_probe(NULL, &c) == STOKE_OK)
            return stoke_cpu_available(&c);
    }
    cpu_set_t set;
    if (sched_getaffinity(pid, sizeof set, &set) != 0)
        return 0;
    return CPU_COUNT(&set);
}

int cmd_monitor(int argc, char **argv)
{
    monitor_args m = {.interval = 1.0};
    cli_group g = {monitor_opts, &m};
    cli_spec spec = {.cmd = CMD, .usage = cmd_monitor_usage, .groups = &g, .ngroups = 1};
    int prc = cli_parse(&spec, argc, argv, 1);
    if (prc >= 0)
        return prc;
    double interval = m.interval, duration = m.duration;
    const char *csv_path = m.csv, *json_path = m.jsonl, *data_path = m.data;
    long pid_arg = m.pid;
    char **command = m.command;
    if (command && pid_arg)
        return cli_usage_error(CMD, "--pid and a COMMAND cannot be combined");

    stoke_disk_info disk;
    if (data_path && stoke_disk_probe(data_path, &disk) != STOKE_OK)
        return cli_error(CMD, "--data %s: %s", data_path, stoke_last_error());

    /* --report without --jsonl: the samples go to a temporary file for the page */
    char report_tmp[4200] = "";
    if (m.report && !json_path) {
        int trc = cli_report_temp(CMD, m.report, "jsonl", report_tmp, sizeof report_tmp);
        if (trc >= 0)
            return trc;
        json_path = report_tmp;
    }
    if (m.report && stoke_tmpfile_check(m.report) != STOKE_OK) {
        if (report_tmp[0])
            unlink(report_tmp);
        return cli_error(CMD, "--report: %s", stoke_last_error());
    }

    /* Log files first: an unwritable one stops everything before sampling starts. */
    sink_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        if (report_tmp[0])
            unlink(report_tmp);
        return cli_error(CMD, "out of memory");
    }
    ctx->csv_fd = ctx->json_fd = -1;
    ctx->csv_path = csv_path;
    ctx->json_path = json_path;
    ctx->interval = interval;
    ctx->tty = isatty(STDOUT_FILENO);
    int rc = 0;
    stoke_monitor *mon = NULL;
    int sfd = -1, pidfd = -1;
    pid_t child = 0;
    bool child_done = false;
    int child_status = 0;
    sigset_t mask, old_mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGCHLD);
    bool masked = false;

    if ((json_path && stoke_mon_open_log(json_path, false, &ctx->json_fd) != STOKE_OK) ||
        (csv_path && stoke_mon_open_log(csv_path, false, &ctx->csv_fd) != STOKE_OK)) {
        rc = cli_error(CMD, "%s", stoke_last_error());
        goto out;
    }

    /* Signals arrive through a signalfd in the main loop; blocking them before any
     * thread exists keeps them away from the sampler thread too. */
    if (sigprocmask(SIG_BLOCK, &mask, &old_mask) != 0 ||
        (sfd = signalfd(-1, &mask, SFD_CLOEXEC)) < 0) {
        rc = cli_error(CMD, "cannot set up signal handling: %s", strerror(errno));
        goto out;
    }
    masked = true;

    /* After the signals are blocked, so the server's thread never takes them; before
     * the COMMAND, so a taken port stops everything before the job starts. */
    if (m.prometheus) {
        if (stoke_prom_start(m.prometheus, m.prometheus_public, "monitor", &ctx->prom) !=
            STOKE_OK) {
            rc = cli_error(CMD, "%s", stoke_last_error());
            goto out;
        }
        printf("prometheus: %s\n", stoke_prom_url(ctx->prom));
        fflush(stdout);
    }

    int watch = (int)pid_arg;
    if (command) {
        int err = 0;
        child = spawn(command, &old_mask, &err);
        if (child < 0) {
            child = 0;
            cli_error(CMD, "cannot start '%s': %s", command[0], strerror(err));
            rc = 127;
            goto out;
        }
        watch = child;
    }

    stoke_monitor_config cfg = {
        .interval_s = interval, .pid = watch, .on_sample = on_sample, .ctx = ctx};
    stoke_status st = stoke_monitor_create(&cfg, &mon);
    if (st != STOKE_OK && !(command && st == STOKE_ERR_NOTFOUND)) {
        rc = cli_error(CMD, "%s", stoke_last_error());
        goto out;
    }
    if (mon) {
        ctx->gpu_count = stoke_monitor_gpu_count(mon);
        if (ctx->csv_fd >= 0) {
            size_t n = stoke_mon_format_csv_header(ctx->gpu_count, ctx->buf, sizeof ctx->buf);
            if (stoke_mon_write_line(ctx->csv_fd, ctx->buf, n, csv_path) != STOKE_OK) {
                rc = cli_error(CMD, "%s", stoke_last_error());
                goto out;
            }
        }
        const char *note = stoke_monitor_gpu_note(mon);
        if (command)
            printf("stoke monitor: '%s' (pid %d)", command[0], (int)child);
        else if (watch)
            printf("stoke monitor: pid %d", watch);
        else
            printf("stoke monitor: whole system");
        printf(", every %g s; %d GPU%s%s%s\n", interval, ctx->gpu_count,
               ctx->gpu_count == 1 ? "" : "s", *note ? "; " : "", note);
        if (data_path)
            printf("stoke monitor: data under %s is on %s storage (%s)\n", data_path,
                   stoke_disk_kind_name(disk.kind), disk.reason);
        fflush(stdout);
        if (stoke_monitor_start(mon) != STOKE_OK) {
            rc = cli_error(CMD, "%s", stoke_last_error());
            goto out;
        }
    }
#ifdef SYS_pidfd_open
    if (!command && watch > 0)
        pidfd = (int)syscall(SYS_pidfd_open, watch, 0); /* -1 on old kernels: polled */
#endif

    uint64_t end_ns = duration > 0 ? stoke_now_ns() + (uint64_t)(duration * 1e9) : 0;
    bool stopping = false, sent_term = false;
    while (!stopping) {
        if (command && child_done)
            break;
        int timeout = -1;
        if (end_ns && !sent_term) {
            uint64_t now = stoke_now_ns();
            timeout = now >= end_ns ? 0 : (int)((end_ns - now) / 1000000u) + 1;
        }
        /* Without a pidfd the sampler notices the end of the PID; look a few times a
         * second. */
        if (!command && watch > 0 && pidfd < 0 && (timeout < 0 || timeout > 250))
            timeout = 250;
        struct pollfd pfd[2] = {{.fd = sfd, .events = POLLIN}, {.fd = pidfd, .events = POLLIN}};
        int n = poll(pfd, pidfd >= 0 ? 2 : 1, timeout);
        if (n < 0 && errno != EINTR) {
            rc = cli_error(CMD, "poll: %s", strerror(errno));
            break;
        }
        if (n > 0 && (pfd[0].revents & POLLIN)) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo == SIGCHLD && command) {
                    int status;
                    if (waitpid(child, &status, WNOHANG) == child) {
                        child_done = true;
                        child_status = status;
                    }
                } else if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM) {
                    if (!command) {
                        stopping = true;
                    } else if (!(si.ssi_signo == SIGINT && si.ssi_code == SI_KERNEL)) {
                        /* Ctrl-C on a terminal already reached the whole foreground
                         * process group, the command included; forward only signals
                         * sent to stoke alone (kill). */
                        kill(child, (int)si.ssi_signo);
                    }
                }
            }
        }
        if (pidfd >= 0 && n > 0 && (pfd[1].revents & (POLLIN | POLLHUP)))
            stopping = true;
        if (mon && !command && watch > 0 && stoke_monitor_target_gone(mon))
            stopping = true;
        if (end_ns && stoke_now_ns() >= end_ns) {
            if (!command)
                stopping = true;
            else if (!sent_term) {
                kill(child, SIGTERM);
                sent_term = true;
            }
        }
    }
    if (command && !child_done) {
        /* Left the loop on an error: still collect the command's status. */
        while (waitpid(child, &child_status, 0) < 0 && errno == EINTR) {
        }
        child_done = true;
    }

    if (mon) {
        stoke_monitor_stop(mon);
        if (ctx->tty && ctx->printed)
            putchar('\n');
        stoke_mon_summary sum;
        stoke_finding f[16];
        size_t nf = 0;
        bool diagnosed = false;
        if (stoke_mon_summarize(stoke_monitor_history(mon), usable_cpus_of(child ? 0 : watch),
                                &sum) == STOKE_OK) {
            if (data_path) {
                sum.have_disk = true;
                sum.disk_kind = disk.kind;
                snprintf(sum.data_path, sizeof sum.data_path, "%s", data_path);
            }
            putchar('\n');
            stoke_mon_summary_print(&sum, stdout);
            size_t fired = stoke_diagnose(&sum, f, 16);
            nf = fired < 16 ? fired : 16;
            putchar('\n');
            stoke_diagnosis_print(&sum, f, nf, fired, stdout);
            diagnosed = true;
        } else {
            rc = cli_error(CMD, "%s", stoke_last_error());
        }
        fflush(stdout);
        char msg[512];
        if (stoke_monitor_error(mon, msg, sizeof msg) != STOKE_OK)
            rc = cli_error(CMD, "%s", msg);
        else if (diagnosed && ctx->json_fd >= 0 &&
                 write_diagnosis(ctx, f, nf, stoke_monitor_history(mon)->duration_s) != STOKE_OK)
            rc = cli_error(CMD, "%s", stoke_last_error());
    } else if (command) {
        printf("stoke monitor: '%s' ended before the first sample\n", command[0]);
    }

out:
    stoke_monitor_free(mon);
    stoke_prom_stop(ctx->prom); /* after the sampler, which publishes to it */
    if (command && child > 0 && child_done)
        rc = exit_code_of(child_status);
    if (pidfd >= 0)
        close(pidfd);
    if (sfd >= 0)
        close(sfd);
    if (masked)
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
    /* close() can be the first to report a failed write (NFS): the log is then
     * incomplete, and the exit status says so unless it is the COMMAND's. */
    const int fds[2] = {ctx->csv_fd, ctx->json_fd};
    const char *paths[2] = {ctx->csv_path, ctx->json_path};
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0 && close(fds[i]) != 0) {
            int e = cli_error(CMD, "cannot write to '%s': %s", paths[i], strerror(errno));
            if (!(command && child > 0 && child_done))
                rc = e;
        }
    free(ctx);
    /* the page from the samples, whatever ended the run; a failure to write it makes
     * the exit status non-zero without changing a non-zero one */
    if (m.report && json_path) {
        const char *name = report_tmp[0] ? "the samples of this stoke monitor" : NULL;
        int wrc = cli_report_write(CMD, &json_path, &name, 1, m.report);
        if (wrc && !rc)
            rc = wrc;
    }
    if (report_tmp[0])
        unlink(report_tmp);
    return rc;
}
