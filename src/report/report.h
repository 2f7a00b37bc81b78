/* report.h - `stoke report`: a run's logs (train --log, monitor --jsonl, bench --json,
 * tune --json) read into plain series of numbers, downsampled, and drawn as one
 * self-contained HTML page of inline SVG (docs/report.md). The readers stream: a log of a
 * million lines keeps only the buckets of each series (rp_series) and a few texts. */
#ifndef STOKE_REPORT_H
#define STOKE_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stoke/core.h"

/* The most points a drawn series keeps: min and max of each of half as many buckets. */
#define RP_MAX_POINTS 2000

/* ---- series.c: the min/max-per-bucket downsampler ------------------------------ */

typedef struct rp_point {
    double x, x2, y; /* x: steps or seconds; x2: a second abscissa (elapsed) */
} rp_point;

/* One bucket: its lowest and highest finite points and whether a non-finite value fell
 * in it (the drawn line breaks there). */
typedef struct rp_bucket {
    rp_point lo, hi;
    int64_t n;      /* finite points */
    bool gap;       /* a NaN or infinite value was among its inputs */
    bool gap_first; /* that value came before the finite ones */
} rp_bucket;

typedef struct rp_series {
    char name[48];
    rp_bucket *b;    /* RP_MAX_POINTS buckets */
    int nb;          /* full buckets */
    int64_t width;   /* inputs per bucket (doubles when the buckets fill up) */
    rp_bucket cur;   /* the bucket being filled */
    int64_t cur_in;  /* inputs in cur */
    int64_t total;   /* values added, finite or not */
    int64_t finite;  /* finite values added */
    int64_t nonfinite;
    double first_nonfinite_x; /* x of the first NaN/inf value */
} rp_series;

/* A drawn point, or a break in the line (y NaN). */
typedef struct rp_out {
    rp_point *p;
    int n;      /* entries, breaks included */
    int points; /* finite points */
} rp_out;

void rp_series_init(rp_series *s, const char *name);
void rp_series_free(rp_series *s);
/* Adds a value; false only when memory runs out (the series then stops growing). */
bool rp_series_add(rp_series *s, double x, double x2, double y);
/* The points to draw, in input order: every finite point when there were at most
 * RP_MAX_POINTS, else at most RP_MAX_POINTS (each bucket's min and max). A NaN entry
 * marks a break. Free o->p. */
bool rp_series_points(const rp_series *s, rp_out *o);
/* Whether rp_series_points drops points. */
bool rp_series_downsampled(const rp_series *s);

/* Rows of several values logged together (the step breakdown), downsampled by means
 * per stretch so the bands of a stacked area keep common abscissae: at most
 * RP_MAX_POINTS / 2 rows. */
#define RP_STACK_MAX 6
typedef struct rp_row {
    double x, v[RP_STACK_MAX];
    int64_t n; /* records averaged */
} rp_row;
typedef struct rp_stack {
    rp_row *rows;
    int n;
    int64_t width, total;
    rp_row cur;
} rp_stack;
bool rp_stack_add(rp_stack *s, double x, const double *v);
/* The rows (the partial last one included) into *out (free it); their count. */
int rp_stack_rows(const rp_stack *s, rp_row **out);
void rp_stack_free(rp_stack *s);

/* A growing text buffer; on allocation failure `failed` is set and appends stop. */
typedef struct rp_buf {
    char *s;
    size_t n, cap;
    bool failed;
} rp_buf;
void rp_puts(rp_buf *b, const char *s);
void rp_printf(rp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s with & < > " ' escaped (and bytes below 0x20 but \n and \t dropped). */
void rp_esc(rp_buf *b, const char *s);

/* ---- read.c: the inputs --------------------------------------------------------- */

typedef enum rp_kind { RP_NONE = 0, RP_RUN, RP_MONITOR, RP_BENCH, RP_TUNE } rp_kind;
const char *rp_kind_name(rp_kind k);

#define RP_MAX_GPUS 8
#define RP_MAX_FINDINGS 32
#define RP_MAX_SPANS 256
#define RP_MAX_TRIALS 64
#define RP_HIST_MAX 64

typedef struct rp_finding {
    char source[16]; /* "train", "monitor", "bench" */
    char rule[48], resource[32];
    char evidence[600], advice[600];
    char numbers[400]; /* figures and changes, as text */
    int repeats;       /* further records of the same rule */
} rp_finding;

typedef struct rp_span { double t0, t1; } rp_span;

typedef struct rp_gpu {
    int index;
    rp_series util, mem, power, clock;
    rp_span spans[RP_MAX_SPANS]; /* real throttling, merged */
    int nspans;
    double span_open; /* start of the throttle now on, NaN when none */
    char reasons[160];
} rp_gpu;

typedef struct rp_trial {
    char label[160];
    double samples_per_s; /* NaN when it failed */
    char error[200];
    bool chosen;
} rp_trial;

typedef struct rp_report {
    /* which inputs were given, and their paths */
    char path[5][4096]; /* by rp_kind */
    /* run log */
    int64_t run_lines, run_records;
    char model[128], dataset[512], device[160], precision[16];
    int64_t epochs_planned, epochs_done, batch;
    double final_val_acc, final_val_loss, last_sps, last_elapsed;
    rp_series loss, batch_loss, val_loss, acc, val_acc, lr, sps, wait, mfu;
    rp_stack phase; /* data_wait input forward backward optimizer allreduce _pct (step records) */
    bool has_allreduce;
    /* the loader's wait histogram, summed over the epochs */
    double hist_edges[RP_HIST_MAX];
    int64_t hist_counts[RP_HIST_MAX];
    int hist_n; /* edges (= counts) */
    int64_t hist_batches;
    double hist_p50, hist_p95, hist_max; /* last epoch's p50/p95, the run's max */
    bool hist_mismatch;
    /* monitor */
    int64_t mon_lines, mon_samples;
    double mon_last_t;
    rp_series cpu, host_mem, wait_p95, wait_max;
    rp_gpu gpu[RP_MAX_GPUS];
    int ngpu;
    /* findings of every input */
    rp_finding findings[RP_MAX_FINDINGS];
    int nfindings, findings_dropped;
    /* bench */
    bool has_bench;
    char bench_rows[12][3][64]; /* figure, naive, tuned */
    int bench_nrows;
    double speedup;
    char robustness[900];
    /* tune */
    rp_trial trials[RP_MAX_TRIALS];
    int ntrials, trials_dropped;
} rp_report;

void rp_report_init(rp_report *r);
void rp_report_free(rp_report *r);

/* What kind of input `f` holds, from its content: one JSON document with "schema":
 * "stoke-bench/1" (bench) or "trials" (tune), else JSON lines whose first record has a
 * train log "type" (run) or "seq" and "t" (monitor). An empty file is a run log (an
 * empty run). STOKE_ERR_FORMAT naming `name` and the line otherwise. */
stoke_status rp_detect(FILE *f, const char *name, rp_kind *kind);
/* Reads f (rewound) as `kind` into r; STOKE_ERR_FORMAT naming name:line on a line that
 * is not JSON or a record of the wrong shape. */
stoke_status rp_read(rp_report *r, FILE *f, const char *name, rp_kind kind);

/* ---- svg.c, html.c: the page ------------------------------------------------------ */

typedef struct rp_plot_series {
    const rp_series *s;
    const char *label;
    bool use_x2; /* against x2 (elapsed) rather than x */
    double scale; /* y multiplied by this (bytes to GiB) */
    bool pct;     /* a share of a whole: the y axis is 0..100 (the first series decides) */
} rp_plot_series;

/* A line plot as <figure class="plot" id=ID>, or <figure class="plot empty"> with the
 * reason when no series has a point; spans shade x ranges (throttling). */
void rp_plot_lines(rp_buf *b, const char *id, const char *title, const char *xlabel,
                   const char *ylabel, const rp_plot_series *ps, int n, const rp_span *spans,
                   int nspans, const char *empty_why);
/* The step breakdown as a stacked area (each band a path of its upper then lower edge). */
void rp_plot_stack(rp_buf *b, const char *id, const char *title, const rp_stack *st,
                   const char *const *names, const char *const *labels, int n,
                   const char *empty_why);
/* Bars: labels[i] -> values[i] (NaN: a failed bar, with notes[i]); marked[i] outlined. */
void rp_plot_bars(rp_buf *b, const char *id, const char *title, const char *xlabel,
                  const char *const *labels, const double *values, const bool *marked,
                  const char *const *notes, int n, const char *empty_why);
/* A formatted number, short ("1.23k", "0.0042"). */
void rp_num(char *buf, size_t size, double v);

/* The whole page into b. */
void rp_render(const rp_report *r, rp_buf *b);

#endif
