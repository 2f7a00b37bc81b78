/* main.c - `stoke`: dispatches to subcommands. */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sigstack.h"
#include "stoke/core.h"

static const cli_command commands[] = {
    {"probe", "print what the machine has and what stoke will do with it", cmd_probe,
     cmd_probe_usage},
    {"monitor", "sample GPU, CPU, memory and I/O of a job; diagnose its bottleneck", cmd_monitor,
     cmd_monitor_usage},
    {"data", "describe a dataset; convert it to stoke's packed records", cmd_data, cmd_data_usage},
    {"train", "train a model (default: the cnn preset on Fashion-MNIST), tuned for the machine",
     cmd_train, cmd_train_usage},
    {"config", "show the settings `stoke train` would run with and where each came from",
     cmd_config, cmd_config_usage},
    {"tune", "measure the fastest batch, workers, prefetch, threads and precision by trials",
     cmd_tune, cmd_tune_usage},
    {"bench", "measure naive against tuned settings (before/after table), and robustness",
     cmd_bench, cmd_bench_usage},
    {"report", "draw a run's logs as one HTML page of plots, with the diagnosis",
     cmd_report, cmd_report_usage},
    {"eval", "evaluate a checkpoint on a dataset", cmd_eval, cmd_eval_usage},
    {"predict", "print a checkpoint's predictions for a dataset or .npy samples", cmd_predict,
     cmd_predict_usage},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f,
            "stoke %s - a training runtime that keeps the accelerator fed\n\n"
            "usage: stoke <command> [options]\n"
            "       stoke help [command]\n"
            "       stoke --version\n\ncommands:\n",
            STOKE_VERSION);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`stoke <command> --help` describes a command's options.\n");
}

static const cli_command *find(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* The SIGXFSZ disposition stoke was started with, for the commands it starts. */
static struct sigaction inherited_sigxfsz;
static bool sigxfsz_changed;

void cli_restore_inherited_signals(void)
{
    if (sigxfsz_changed)
        sigaction(SIGXFSZ, &inherited_sigxfsz, NULL);
}

/* Output that could not be written (stdout on a full disk, /dev/full, a closed pipe
 * when SIGPIPE is ignored) must not end in exit 0: stdio reports such errors only
 * when the buffer is flushed, so the last flush is checked here, once for every
 * command. */
static int close_stdout(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "stoke: cannot write the standard output: %s\n",
                errno ? strerror(errno) : "write error");
        return rc ? rc : 1;
    }
    return rc;
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("stoke %s\n", STOKE_VERSION);
        return 0;
    }
    if (strcmp(name, "help") == 0 || cli_is_help(name)) {
        if (argc > 2 && !cli_is_help(argv[2])) {
            const cli_command *c = find(argv[2]);
            if (!c) {
                fprintf(stderr, "stoke: unknown command '%s' (try `stoke help`)\n", argv[2]);
                return 2;
            }
            c->usage();
            return 0;
        }
        usage(stdout);
        return 0;
    }
    const cli_command *c = find(name);
    if (!c) {
        fprintf(stderr, "stoke: unknown command '%s' (try `stoke help`)\n", name);
        return 2;
    }
    /* A bad STOKE_MAX_CPU_ISA is a usage error of every command, found before any work
     * (the library would only report it at the first probe or model). */
    stoke_cpu_isa cap;
    if (stoke_max_cpu_isa(&cap) != STOKE_OK) {
        fprintf(stderr, "stoke: %s\n", stoke_last_error());
        return 2;
    }
    static const char *const computes[] = {"train", "tune", "bench", "eval", "predict"};
    for (size_t i = 0; i < sizeof computes / sizeof computes[0]; i++)
        if (!strcmp(name, computes[i]))
            cli_omp_wait_choose(argv);
    return c->run(argc - 1, argv + 1);
}

int main(int argc, char **argv)
{
    /* Before any work: a signal handled while oneDNN's JIT GEMMs run on this thread
     * must not write its frame over the heap (core/sigstack.h). */
    stoke_sigstack_ensure();
    /* A write past the file-size limit (ulimit -f) then fails with EFBIG, which the
     * writer reports by name and cleans up after, instead of the process dying of
     * SIGXFSZ without a word. */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigxfsz_changed = sigaction(SIGXFSZ, &ign, &inherited_sigxfsz) == 0;
    return close_stdout(run(argc, argv));
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stoke %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(try `stoke %s --help`)\n", cmd);
    va_end(ap);
    return 2;
}

int cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stoke %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_last_error(const char *cmd) { return cli_error(cmd, "%s", stoke_last_error()); }

bool cli_parse_double(const char *s, double min, double max, double *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool cli_parse_long(const char *s, long min, long max, long *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool cli_is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }
