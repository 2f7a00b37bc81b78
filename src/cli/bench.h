/* bench.h - `stoke bench`'s measurements, shared by the runs (cmd_bench.c) and their
 * report, the table and the JSON (cmd_bench_report.c). */
#ifndef STOKE_CLI_BENCH_H
#define STOKE_CLI_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/hw.h"
#include "stoke/monitor.h" /* stoke_finding: the robustness run's diagnosis in numbers */
#include "stoke/tune.h"    /* stoke_why: a detail holds its reason */

#define BENCH_SETTINGS 10
#define BENCH_WARNINGS 8

/* One setting a configuration ran with: its value, where it came from ("bench" for
 * what bench fixed, else the config layer's or the tuner's source) and why. */
typedef struct bench_setting {
    const char *key;
    char value[32];
    char source[16];
    char detail[sizeof((stoke_why *)0)->reason];
} bench_setting;

/* A configuration's steady state: the steps after the warm-up, differenced from the
 * trainer's totals (evaluations left out). NaN where unknown. */
typedef struct bench_run {
    const char *name; /* "naive", "tuned" */
    bench_setting settings[BENCH_SETTINGS];
    int nsettings;
    int64_t batch, accumulate;
    int64_t warmup_steps, steps, samples;
    double seconds;
    double samples_per_s, data_wait_pct;
    double phase_pct[4]; /* input, forward, backward, optimizer */
    double cpu_pct;      /* the process over the measured steps, 100 = one core */
    double gpu_pct;      /* mean of the monitor's readings; NaN without a GPU */
    double mfu_pct;
    double plan_bytes;     /* the memory plan of the training model's batch */
    double peak_rss_bytes; /* VmHWM after the run (reset before it when possible) */
    bool rss_reset;        /* the peak was reset before the configuration */
    char warnings[BENCH_WARNINGS][1000];
    int nwarnings;
} bench_run;

/* The slowed-loader run and its verdict. */
typedef struct bench_robust {
    bool ran;
    char skipped[128]; /* why it did not run */
    int64_t delay_us, limit, workers;
    double data_wait_pct;
    bool passed;
    char rule[32];      /* the first finding naming a bound, "" if none */
    bool moves_loading; /* its changes: more workers or cheaper per-sample work, stoke's */
    char verdict[160];  /* what bench concluded */
    char evidence[1000];
    char advice[1000];
    stoke_finding finding; /* that finding's numbers (rule NULL when none) */
} bench_robust;

typedef struct bench_report {
    const stoke_machine *machine;
    const char *model, *dataset;
    int64_t limit;
    bench_run runs[2]; /* naive, tuned */
    double speedup;    /* tuned samples/s over naive's */
    bench_robust robust;
} bench_report;

void bench_print(const bench_report *r);
/* Writes the report as JSON to `path` atomically; 0 or the exit code (1) after the
 * error. */
int bench_write_json(const bench_report *r, const char *path);
/* Checks that `path` can be written (creating and removing its temporary file), so
 * a bad --json fails before minutes of training. 0 or the exit code. */
int bench_check_json_path(const char *path);

#endif
