/* cli.h - the `stoke` subcommands and the helpers they share. Only the CLI prints and
 * chooses exit codes: 0 success, 1 a failure at run time, 2 a usage error. */
#ifndef STOKE_CLI_H
#define STOKE_CLI_H

#include <stdbool.h>

#include "cli/args.h"

typedef struct cli_command {
    const char *name;
    const char *summary;               /* one line for `stoke help` */
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
    void (*usage)(void);               /* full help, printed to stdout */
} cli_command;

int cmd_probe(int argc, char **argv);
void cmd_probe_usage(void);
int cmd_monitor(int argc, char **argv);
void cmd_monitor_usage(void);
int cmd_data(int argc, char **argv);
void cmd_data_usage(void);
int cmd_train(int argc, char **argv);
void cmd_train_usage(void);
int cmd_eval(int argc, char **argv);
void cmd_eval_usage(void);
int cmd_predict(int argc, char **argv);
void cmd_predict_usage(void);
int cmd_config(int argc, char **argv);
void cmd_config_usage(void);
int cmd_tune(int argc, char **argv);
void cmd_tune_usage(void);
int cmd_bench(int argc, char **argv);
void cmd_bench_usage(void);
int cmd_report(int argc, char **argv);
void cmd_report_usage(void);
/* cmd_report.c, for `--report F` of train and monitor: a temporary file beside F for a
 * log the run would not otherwise keep (".F.WHAT-XXXXXX", created empty; the caller
 * removes it), -1 when made, else the exit code after the message; and the page from
 * the run's files (names: stoke_report_write's): 0 written (a "report: F" line), else 1 after "stoke CMD: report:
 * <why>". */
int cli_report_temp(const char *cmd, const char *report, const char *what, char *path, size_t size);
int cli_report_write(const char *cmd, const char *const *inputs, const char *const *names, int n,
                     const char *out);

struct stoke_train_config;
/* The settings `stoke train` runs with, from defaults < --config file < environment <
 * flags (argv[0] is the command; argv[1..] train's options), and the command's `own`
 * options (may be NULL) into *own_dest, in the same pass. *config_path: the --config
 * file given, or NULL. Returns -1 when they are all valid; otherwise the exit code,
 * after printing the error as "stoke CMD: ..." naming the key and its source (or
 * `usage` for --help: 0). */
/* launch.c: `stoke train --nproc N`: argv (train's) again under mpirun with N ranks on
 * this machine, --nproc left out; returns only on failure, with the exit code. */
int cli_launch_nproc(long nproc, int argc, char **argv);

int cli_train_settings(const char *cmd, int argc, char **argv, const cli_opt *own, void *own_dest,
                       struct stoke_train_config *cfg, const char **config_path,
                       void (*usage)(void));

/* Prints "stoke CMD: message" and a hint to stderr; returns 2 (the usage exit code). */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "stoke CMD: message" to stderr; returns 1. */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* cli_error with the library's last error message: "stoke CMD: <message>". Returns 1. */
int cli_last_error(const char *cmd);

/* Parses a whole string as a number within [min, max]; false on trailing junk,
 * overflow or range. */
bool cli_parse_double(const char *s, double min, double max, double *out);
bool cli_parse_long(const char *s, long min, long max, long *out);

/* stop.c: SIGINT and SIGTERM set cli_stop_flag (the trainer's stop flag) between
 * cli_stop_catch and cli_stop_release, and a second one ends the process.
 * cli_stop_signal: the first signal caught since cli_stop_catch, 0 none; the exit code
 * of a run it stopped is 128 + that (130 SIGINT, 143 SIGTERM). */
extern volatile int cli_stop_flag;
void cli_stop_catch(void);
void cli_stop_release(void);
int cli_stop_signal(void);
/* "SIGINT", "SIGTERM", or "" when none was caught. */
const char *cli_stop_signal_name(void);

/* omp_wait.c: for the commands that compute, before any work: unless the user set
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT, sets GOMP_SPINCOUNT to stoke's bounded spin and
 * re-executes the process (libgomp reads it only when it is loaded); returns only when
 * nothing was to be done or the re-execution failed. argv is main's. */
void cli_omp_wait_choose(char **argv);

/* Gives SIGXFSZ back the disposition stoke inherited (main ignores it); for a child
 * process before exec. Async-signal-safe. */
void cli_restore_inherited_signals(void);

struct stoke_dataset;
struct stoke_dataset_opts;
/* An option given for a dataset whose format does not use it (--split on an NPY file,
 * --size on HDF5, ...) is a usage error, not dropped without a word. `given` holds only
 * the options the user gave. Returns -1 when all apply, else the exit code (2) after
 * printing "stoke CMD: --split applies to IDX directories and image folders; PATH is
 * npy". */
int cli_check_dataset_options(const char *cmd, const char *path, struct stoke_dataset *d,
                              const struct stoke_dataset_opts *given);

/* cmd_data.c: the dataset options (--split, --size, --channels, ...; see `stoke data
 * --help`), into a stoke_dataset_opts; `stoke data bench` takes them too. */
extern const cli_opt cli_data_opts[];
/* Opens a dataset for `stoke data`: -1 when it opened, else the exit code after the
 * message (2 for a bad option value or one the format does not use, 1 for a dataset
 * that cannot be read). */
int cli_data_open(const char *path, const struct stoke_dataset_opts *o, struct stoke_dataset **d);
/* What opening an image folder left out (stoke_dataset_skipped), as a warning line on
 * stderr: "stoke CMD: warning: PATH: N entries left out, e.g. ..."; nothing if none. */
void cli_warn_skipped(const char *cmd, const char *path, const struct stoke_dataset *d);
/* cmd_data_bench.c: `stoke data bench` (argv[1] is "bench"). */
int cmd_data_bench(int argc, char **argv);
void cmd_data_bench_usage(void);
/* Its usage line after `lead`, for `stoke data --help` too. */
void cli_data_bench_synopsis(const char *lead, int indent);

/* True if argv[i] is -h or --help. */
bool cli_is_help(const char *arg);

#endif
