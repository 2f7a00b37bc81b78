/* monitor.h - samples GPUs, the system and a watched process tree; keeps the series of
 * a run, summarizes it and diagnoses what bounded it (rules are a data table). */
#ifndef STOKE_MONITOR_H
#define STOKE_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stoke/core.h"
#include "stoke/hw.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- One sample ------------------------------------------------------------------
 * Every reading has a valid bit: a reading that is not available is absent (bit
 * clear), never zero. */

enum {
    STOKE_MS_CPU = 1u << 0,           /* cpu_pct, iowait_pct (need two /proc/stat reads) */
    STOKE_MS_MEM = 1u << 1,           /* mem_used_bytes, mem_total_bytes */
    STOKE_MS_PROC = 1u << 2,          /* proc_* except io and GPU memory */
    STOKE_MS_PROC_CPU = 1u << 3,      /* proc_cpu_pct (needs two reads of the tree) */
    STOKE_MS_PROC_IO = 1u << 4,       /* proc_read_Bps, proc_write_Bps */
    STOKE_MS_PROC_GPU = 1u << 5,      /* proc_gpu_mem_bytes (NVML's process lists) */
    STOKE_MS_PIPELINE = 1u << 6,      /* pipe: the input pipeline's snapshot (a provider) */
    STOKE_MS_PIPELINE_RATE = 1u << 7, /* data_wait_pct, batches_per_s (two snapshots) */
    STOKE_MS_THREAD = 1u << 8,        /* busiest: the tree's busiest thread (two reads) */
    STOKE_MS_RANKS = 1u << 9,         /* rank_procs: the tree's MPI ranks (their rss; cpu_pct
                                         where each one's cpu_valid says) */
};

/* At most this many ranks per sample: those the monitor sees on its own machine. */
enum { STOKE_MON_LOCAL_RANKS = 64 };

/* A process of the watched tree that an MPI launcher started as a rank (its environment
 * names the rank: OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK), with the processes it
 * started. */
typedef struct stoke_mon_rank_proc {
    int rank;
    int pid;            /* the rank's process (the topmost one of that rank in the tree) */
    bool cpu_valid;     /* cpu_pct is known (this pid was read in the previous sample too) */
    double cpu_pct;     /* the rank's processes, 100 = one core */
    uint64_t rss_bytes; /* their RSS summed */
} stoke_mon_rank_proc;

/* One thread of the watched tree and its CPU since the previous read. */
typedef struct stoke_mon_thread {
    int pid, tid;
    char comm[16];   /* /proc/PID/task/TID/comm: the name the program gave the thread */
    double core_pct; /* CPU of this thread, 100 = one core */
} stoke_mon_thread;

/* What an input pipeline (stoke's loader, or any other) reports to the monitor. The
 * cumulative counts let the monitor compute each window's share; the rest are the
 * pipeline's own summaries since it started. */
typedef struct stoke_mon_pipeline {
    double wait_total_s; /* cumulative time the consumer waited for batches (stoke's
                            loader: with the wait in progress) */
    int64_t batches;     /* cumulative batches handed out */
    double wait_avg_ms;  /* the consumer's wait per batch: mean, */
    double wait_p95_ms;  /*   p95 (over the pipeline's recent batches), */
    double wait_max_ms;  /*   and max */
    double fill_avg;     /* batches ready in the ring when the consumer asked */
    int slots;           /* ring size (prefetch depth) */
    int workers;         /* worker threads; 0 = the consumer does the work */
    double busy_frac;    /* mean worker busy fraction 0..1 (reading + transforming) */
} stoke_mon_pipeline;

/* Fills *out with the pipeline's current numbers; false when there is nothing yet (no
 * loader). Called on the monitor's sampler thread while the consumer runs, so it must
 * be thread-safe with respect to the pipeline (stoke_loader_get_stats is). */
typedef bool (*stoke_mon_pipeline_fn)(void *ctx, stoke_mon_pipeline *out);

typedef struct stoke_mon_gpu {
    stoke_gpu_sample s;      /* the device reading, with its own STOKE_GS_* bits */
    uint64_t proc_mem_bytes; /* GPU memory held by the watched tree on this device */
    bool proc_mem_valid;
    char name[96], uuid[96]; /* the device's, "" when NVML did not say (Prometheus labels) */
} stoke_mon_gpu;

typedef struct stoke_mon_sample {
    uint64_t seq;            /* 1, 2, ... */
    double t;                /* seconds since sampling started */
    double wall;             /* Unix time, seconds */
    unsigned valid;          /* STOKE_MS_* */
    double cpu_pct;          /* all CPUs busy (not idle, not iowait), 0..100 */
    double iowait_pct;       /* all CPUs waiting on I/O, 0..100 */
    int ncpu;                /* CPUs counted in /proc/stat */
    uint64_t mem_used_bytes; /* MemTotal - MemAvailable */
    uint64_t mem_total_bytes;
    int proc_pid;        /* watched root, 0 in whole-system mode */
    int proc_count;      /* processes in the tree (root and descendants) */
    double proc_cpu_pct; /* CPU of the tree, 100 = one core */
    int proc_threads;
    uint64_t proc_rss_bytes; /* sum of RSS over the tree (shared pages count twice) */
    double proc_read_Bps;    /* storage reads of the tree, bytes/s (/proc/PID/io) */
    double proc_write_Bps;
    uint64_t proc_gpu_mem_bytes; /* sum of proc_mem_bytes over the GPUs */
    int gpu_count;               /* 0 without NVML */
    stoke_mon_gpu gpus[STOKE_MAX_GPUS];
    stoke_mon_pipeline pipe;  /* STOKE_MS_PIPELINE */
    double data_wait_pct;     /* % of the wall time since the previous snapshot that
                                    the consumer waited for data, 0..100 (as the
                                    pipeline counts its waits: wait_total_s) */
    double batches_per_s;     /* batches handed out per second in that window */
    stoke_mon_thread busiest; /* STOKE_MS_THREAD: the tree's busiest thread */
    int busy_threads;         /* STOKE_MS_THREAD: threads of the tree that were busy
                                 (stoke_thread_read) */
    int nrank_procs;          /* STOKE_MS_RANKS: the tree's ranks, in rank order */
    stoke_mon_rank_proc rank_procs[STOKE_MON_LOCAL_RANKS];
} stoke_mon_sample;

/* ---- /proc readers (proc.c) -------------------------------------------------- */

typedef struct stoke_proc_reader stoke_proc_reader;

/* Opens the readers of /proc/stat and /proc/meminfo (kept open, read with pread) and,
 * if pid > 0, of that process tree. STOKE_ERR_NOTFOUND if pid does not exist,
 * STOKE_ERR_IO if /proc cannot be read. On success *out must be freed with
 * stoke_proc_reader_free. */
stoke_status stoke_proc_reader_open(int pid, stoke_proc_reader **out);
void stoke_proc_reader_free(stoke_proc_reader *r); /* NULL is fine */

/* Fills the system and tree fields of *s (rates are over the time since the previous
 * call, so the first call leaves them invalid) and sets their valid bits. When the
 * watched root has ended, the tree fields stay invalid and *root_alive is false.
 * Returns STOKE_ERR_IO only if /proc/stat cannot be read. */
stoke_status stoke_proc_read(stoke_proc_reader *r, stoke_mon_sample *s, bool *root_alive);

/* PIDs of the tree found by the last stoke_proc_read (root first); valid until the
 * next call. */
const int *stoke_proc_tree_pids(const stoke_proc_reader *r, int *count);

/* Per-thread CPU (/proc/PID/task/TID/stat, utime + stime) of a set of processes. A
 * saturated thread beside idle cores is invisible in the process totals, so the
 * monitor keeps the busiest thread of each sample. proc_root is "/proc", or a recorded
 * tree in tests. */
typedef struct stoke_thread_reader stoke_thread_reader;
stoke_status stoke_thread_reader_open(const char *proc_root, stoke_thread_reader **out);
void stoke_thread_reader_free(stoke_thread_reader *t); /* NULL is fine */
/* Reads every thread of pids[0..npids) at time now_s (seconds on any steady clock;
 * tests pass it so that rates do not depend on timing). Fills *out with the thread
 * that used the most CPU since the previous call and returns true; false on the first
 * call, or when no thread was seen in both reads. *busy (busy may be NULL) receives
 * how many threads were busy since the previous call (0 when false is returned): at
 * least half the busiest thread's CPU or 20% of a core, and at least 5% of a core
 * (threads.c says why). */
bool stoke_thread_read(stoke_thread_reader *t, const int *pids, int npids, double now_s,
                       stoke_mon_thread *out, int *busy);

/* ---- Series and the history of a run (series.c) ------------------------------ */

/* A growable series of values. To bound memory on long runs it keeps at most `limit`
 * values: when full it drops every other kept value and from then on keeps one value
 * in `stride`, so percentiles stay those of an evenly thinned run. min, max, mean and
 * count are exact over every value pushed. */
typedef struct stoke_series {
    float *v;
    size_t n, cap;
    size_t limit; /* 0 = default (1 << 18 values, 1 MB) */
    unsigned stride, phase;
    size_t count;
    double min, max, sum;
} stoke_series;

typedef struct stoke_stats {
    size_t n;                           /* values pushed; 0 = the series is empty */
    double min, median, p95, max, mean; /* p95: nearest rank over kept values */
} stoke_stats;

void stoke_series_init(stoke_series *s);
void stoke_series_free(stoke_series *s);
/* Appends x. STOKE_ERR_NOMEM if the series cannot grow (x is then not kept). */
stoke_status stoke_series_push(stoke_series *s, double x);
/* Statistics of the series; an empty series gives n = 0 and zeros. STOKE_ERR_NOMEM if
 * the sort buffer cannot be allocated. */
stoke_status stoke_series_stats(const stoke_series *s, stoke_stats *out);

/* System and process-tree series of a run. */
typedef enum stoke_sys_metric {
    STOKE_M_CPU,      /* % all CPUs */
    STOKE_M_IOWAIT,   /* % all CPUs */
    STOKE_M_MEM_USED, /* bytes */
    STOKE_M_PROC_CPU, /* % of one core */
    STOKE_M_PROC_THREADS,
    STOKE_M_PROC_RSS,     /* bytes */
    STOKE_M_PROC_READ,    /* bytes/s */
    STOKE_M_PROC_WRITE,   /* bytes/s */
    STOKE_M_PROC_GPU_MEM, /* bytes */
    STOKE_M_DATA_WAIT,    /* % of wall time the consumer waited for data */
    STOKE_M_BATCH_RATE,   /* batches/s */
    STOKE_M_THREAD_MAX,   /* % of one core used by the tree's busiest thread */
    STOKE_M_BUSY_THREADS, /* threads of the tree that were busy (stoke_thread_read) */
    STOKE_M_OTHERS_CPU,   /* % of one core: busy CPUs not used by the tree (>= 0) */
    STOKE_M_COUNT
} stoke_sys_metric;

/* Per-GPU series. */
typedef enum stoke_gpu_metric {
    STOKE_G_UTIL,     /* % */
    STOKE_G_MEM_UTIL, /* % */
    STOKE_G_MEM_USED, /* bytes */
    STOKE_G_POWER,    /* watts */
    STOKE_G_TEMP,     /* degrees C */
    STOKE_G_SM_CLOCK, /* MHz */
    STOKE_G_PCIE_RX,  /* bytes/s */
    STOKE_G_PCIE_TX,  /* bytes/s */
    STOKE_G_PROC_MEM, /* bytes held by the watched tree */
    STOKE_G_COUNT
} stoke_gpu_metric;

typedef struct stoke_mon_gpu_history {
    stoke_series s[STOKE_G_COUNT];
    uint64_t mem_total_bytes; /* largest total seen; 0 = never read */
    double power_limit_w;     /* largest limit seen; 0 = never read */
    size_t throttle_samples;  /* samples with valid throttle reasons */
    size_t power_throttled;   /* ... with a power cap/brake or HW slowdown bit */
    size_t thermal_throttled; /* ... with a SW/HW thermal bit */
} stoke_mon_gpu_history;

typedef struct stoke_mon_history {
    size_t samples;
    double duration_s; /* t of the last sample */
    int ncpu;          /* CPUs seen in /proc/stat */
    uint64_t mem_total_bytes;
    int proc_pid; /* watched root, 0 = none */
    stoke_series sys[STOKE_M_COUNT];
    int gpu_count; /* most GPUs seen in a sample */
    stoke_mon_gpu_history gpu[STOKE_MAX_GPUS];
    bool have_pipeline;          /* a pipeline snapshot was seen */
    stoke_mon_pipeline pipeline; /* the last one (its summaries cover the whole run) */
    /* The threads that were the busiest of a sample, and in how many samples (the
     * first 8 distinct ones: a saturated thread is the busiest from the start). */
    stoke_mon_thread busy[8];
    size_t busy_samples[8];
    int nbusy;
    /* A watched job's startup: the samples before its first GPU work (it holds GPU
     * memory and a GPU is busy) are left out of the series once that work starts, as
     * they are imports and data preparation, not training; a job that never works on
     * a GPU keeps them all. */
    bool gpu_work_seen;
    double last_t;          /* t of the previous sample */
    size_t startup_samples; /* the samples left out */
    double startup_s;       /* t of the last of them */
    double startup_thread;  /* their busiest thread's median % of a core (0: not read) */
    double startup_job;     /* the job's median % of a core over them (0: not read) */
    /* The tree's MPI ranks (STOKE_MS_RANKS), in the order first seen: the series of
     * each one's CPU (% of a core) and RSS (bytes); pid is the latest one's. */
    int nranks;
    struct stoke_mon_rank_history {
        int rank, pid;
        stoke_series cpu, rss;
    } ranks[STOKE_MON_LOCAL_RANKS];
} stoke_mon_history;

void stoke_mon_history_init(stoke_mon_history *h);
void stoke_mon_history_free(stoke_mon_history *h);
/* Adds the valid readings of *s. STOKE_ERR_NOMEM if a series cannot grow. */
stoke_status stoke_mon_history_add(stoke_mon_history *h, const stoke_mon_sample *s);

/* Name ("cpu_pct"), label ("CPU busy") and unit ("%", "bytes", "bytes/s", "W", "C",
 * "MHz", "") of a metric, for tables and logs. Never NULL. */
const char *stoke_sys_metric_name(stoke_sys_metric m);
const char *stoke_sys_metric_unit(stoke_sys_metric m);
const char *stoke_gpu_metric_name(stoke_gpu_metric m);
const char *stoke_gpu_metric_unit(stoke_gpu_metric m);

/* Who runs under the monitor: the rules word their advice for it (stoke's flags for
 * stoke's trainer, PyTorch's for a foreign job). */
typedef enum stoke_mon_program_kind {
    STOKE_PROG_EXTERNAL = 0, /* a foreign job: stoke monitor -- CMD, --pid, Python */
    STOKE_PROG_STOKE,        /* stoke's trainer watching itself (stoke train) */
} stoke_mon_program_kind;

typedef struct stoke_mon_program {
    stoke_mon_program_kind kind;
    /* stoke's settings of the run (STOKE_PROG_STOKE); 0 = unknown */
    int workers, threads, prefetch, batch_size, accumulate;
} stoke_mon_program;

/* At most this many ranks in a summary's per-rank step figures. */
enum { STOKE_MON_MAX_RANKS = 256 };

/* One rank of a data-parallel run as its trainer measured it: per-step means in
 * seconds of the whole step's wall time, the time waiting for the loader's batches,
 * forward + backward + optimizer compute, and the exposed wait at the gradients'
 * all-reduce (the part not hidden behind backward). */
typedef struct stoke_mon_rank {
    int rank;
    char host[64];
    int64_t steps; /* steps the means cover */
    double step_s, input_wait_s, compute_s, reduce_wait_s;
} stoke_mon_rank;

/* A rank of the watched tree over the run (stoke_mon_rank_proc's series). */
typedef struct stoke_mon_rank_usage {
    int rank, pid;
    stoke_stats cpu_pct, rss_bytes;
} stoke_mon_rank_usage;

/* The statistics of every series of a run, which the rules read. */
typedef struct stoke_mon_summary {
    stoke_mon_program program; /* set by the caller after stoke_mon_summarize */
    size_t samples;
    double duration_s;
    int ncpu;        /* CPUs in /proc/stat */
    int usable_cpus; /* CPUs the job may use (affinity); = ncpu if unknown */
    uint64_t mem_total_bytes;
    int proc_pid;
    stoke_stats sys[STOKE_M_COUNT];
    int gpu_count;
    struct {
        stoke_stats s[STOKE_G_COUNT];
        uint64_t mem_total_bytes;
        double power_limit_w;
        size_t throttle_samples, power_throttled, thermal_throttled;
    } gpu[STOKE_MAX_GPUS];
    bool have_pipeline;              /* the input pipeline reported (data-wait rule) */
    stoke_mon_pipeline pipeline;     /* its last snapshot */
    bool have_thread;                /* busiest_thread is known */
    stoke_mon_thread busiest_thread; /* the one most often the busiest of a sample */
    size_t busiest_thread_samples;   /* ... in this many samples */
    /* The job's startup before its first GPU work, left out of the figures above
     * (stoke_mon_history): samples, seconds, busiest thread and job, % of a core. */
    size_t startup_samples;
    double startup_s, startup_thread, startup_job;
    /* Storage under --data, for the I/O rule. */
    bool have_disk;
    stoke_disk_kind disk_kind;
    char data_path[256];
    /* The ranks of the watched tree (stoke monitor -- mpirun ...), in the order first
     * seen: what the monitor saw of each one's process. */
    int nrank_procs;
    stoke_mon_rank_usage rank_procs[STOKE_MON_LOCAL_RANKS];
    /* The ranks of a data-parallel run as the trainer measured them, set by the caller
     * after stoke_mon_summarize (stoke train gathers them to rank 0); 0 = one process,
     * and the rank rules do not fire. */
    int nranks;
    stoke_mon_rank ranks[STOKE_MON_MAX_RANKS];
    /* Also set by the trainer of a data-parallel run under OpenMPI's mpirun: on Ctrl-C
     * mpirun sends each rank SIGTERM and stop_grace_s later SIGKILL (its
     * odls_base_sigkill_timeout); an orderly stop needs the rest of a step, or of an
     * epoch's evaluation and checkpoint, and then a checkpoint: rank 0's last eval_s and
     * checkpoint_s (0 = none written: nothing to lose, the stop-grace rule is silent). */
    bool stop_grace_known;
    double stop_grace_s, eval_s, checkpoint_s;
} stoke_mon_summary;

/* Computes the summary of h. usable_cpus <= 0 means "same as ncpu". The program is
 * left STOKE_PROG_EXTERNAL: stoke's trainer says it is itself; nranks is left 0. */
stoke_status stoke_mon_summarize(const stoke_mon_history *h, int usable_cpus,
                                 stoke_mon_summary *out);

/* Writes the min / median / p95 / max table of every non-empty series to f, the input
 * pipeline's own summaries when it reported, and the ranks (of the tree, and the
 * trainer's per-rank step figures) when there are any. */
void stoke_mon_summary_print(const stoke_mon_summary *s, FILE *f);

/* ---- Diagnosis (rules.c) ---------------------------------------------------------
 * Each rule is a row of a table: its thresholds are fields of the row (documented
 * below and in docs/monitor.md), its check is a function that reads the summary. */

typedef enum stoke_rule_kind {
    STOKE_RULE_BOUND,   /* names the resource that bounded the run */
    STOKE_RULE_RISK,    /* something that can fail the run (out of memory) */
    STOKE_RULE_WARNING, /* worth knowing; does not name a single cause */
} stoke_rule_kind;

/* "bottleneck", "risk", "warning"; "?" if invalid. */
const char *stoke_rule_kind_name(stoke_rule_kind k);

/* A finding in numbers, so that programs read its fields rather than its English:
 * the figures of the run its rule read, and the settings its advice asks to change.
 * The evidence and advice texts are renderings of these (docs/monitor.md lists the
 * names each rule uses). */
enum { STOKE_FINDING_FIGURES = 16, STOKE_FINDING_CHANGES = 4 };

typedef struct stoke_finding_figure {
    const char *name; /* "gpu_util_median", "data_wait_p95", ... */
    double value;
    const char *unit; /* "%", "% of a core", "cores", "GB", "ms", "batches/s", "s", "W",
                         "C", "MHz", "bytes/s", "x", "" */
} stoke_finding_figure;

typedef struct stoke_finding_change {
    const char *setting; /* "workers", "prefetch", "threads", "batch_size",
                            "grad_accum_steps", "precision", "power_limit",
                            "data_format", "data_location", "per_sample_work",
                            "host_load", "ranks_on_host", "bucket_size",
                            "interconnect", "stop_grace" */
    const char *unit;    /* of current and suggested: "workers", "batches", "threads",
                            "samples", "steps", "W", "ranks"; "" for a word or a
                            direction */
    double current;      /* the run's value; NAN when unknown */
    double suggested;    /* the value to set; NAN when the advice gives only a direction
                            or a word (`to`) */
    int direction;       /* +1 raise, -1 lower, 0 set to the word `to` */
    const char *to;      /* the word to set ("bf16", "stoke-records", "shards",
                            "tmpfs"); NULL for a number or a direction */
} stoke_finding_change;

typedef struct stoke_finding {
    const struct stoke_rule *rule;
    int gpu;                        /* GPU index the finding is about, -1 if none */
    int rank;                       /* the rank the finding names, -1 if none */
    char host[64];                  /* ... and its host ("" if none or unknown) */
    stoke_mon_program_kind program; /* whose knobs the advice names (the summary's) */
    int nfigures;
    stoke_finding_figure figures[STOKE_FINDING_FIGURES];
    int nchanges;
    stoke_finding_change changes[STOKE_FINDING_CHANGES];
    char evidence[400]; /* the figures, rendered */
    char advice[400];   /* the changes (and why), rendered */
} stoke_finding;

/* The figure called name, or the change of setting; NULL when the finding has none. */
const stoke_finding_figure *stoke_finding_figure_of(const stoke_finding *f, const char *name);
const stoke_finding_change *stoke_finding_change_of(const stoke_finding *f, const char *setting);

struct cJSON;
/* A finding as one JSON object, the same wherever stoke writes one (bench --json's
 * robustness, train --log's finding record, monitor --jsonl's diagnosis line):
 * {"rule", "resource", "gpu", "rank" (-1: none), "evidence", "advice", "figures":
 * {NAME: {"value", "unit"}}, "changes": [{"setting", "unit", "current", "suggested",
 * "direction", "to"}]}; unknown numbers and absent words are null, never 0 or NaN.
 * NULL when out of memory; the caller frees it (cJSON_Delete). */
struct cJSON *stoke_finding_json(const stoke_finding *f);
/* Only its "figures" and "changes", added to o. */
void stoke_finding_numbers_json(struct cJSON *o, const stoke_finding *f);

typedef struct stoke_rule {
    const char *id; /* stable name: "input-bound-cpu", ... */
    stoke_rule_kind kind;
    const char *resource; /* what bounded the run: "CPU (input pipeline)" */
    /* Thresholds; a rule reads only those its check names. */
    double gpu_util_below;       /* median GPU utilization % under this = mostly idle */
    double gpu_util_atleast;     /* median GPU utilization % at least this = busy */
    double cpu_atleast;          /* median CPU busy % (all CPUs) at least this = saturated */
    double iowait_atleast;       /* median iowait % at least this = waiting on storage */
    double mem_frac_below;       /* peak memory used / total under this = mostly unused */
    double mem_frac_atleast;     /* peak memory used / total at least this = nearly full */
    double mem_target_frac;      /* memory fill to aim for when sizing a batch */
    double samples_frac_atleast; /* fraction of samples showing a condition */
    double job_cores_atleast;    /* the job keeps at least this many cores busy */
    double cores_frac_below;     /* ... but under this fraction of the usable cores */
    double data_wait_atleast;    /* median % of the time the consumer waited for data */
    double busy_frac_atleast;    /* loader workers busy at least this fraction = saturated */
    double fill_below;           /* ring fill (batches ready) under this = mostly empty */
    double job_share_atleast;    /* the job's share of the busy cores to blame it for them */
    double thread_core_atleast;  /* median busiest thread % of a core = saturated thread */
    double idle_cores_atleast;   /* cores idle (median) for a saturated thread to be the cap */
    double others_cores_atleast; /* other processes' cores (median) to call the CPUs shared */
    double excess_cores_atleast; /* compute threads + others' cores over the usable CPUs */
    double thread_share_below;   /* the job's cores per compute thread under this = starved */
    double startup_frac_atleast; /* the share of the watched time before the first GPU work */
    double reduce_wait_atleast;  /* % of a rank's step waiting at the all-reduce = waiting */
    double wait_ratio_below;     /* a rank waiting under this fraction of the others' wait
                                    is the one they wait for */
    double input_wait_atleast;   /* % of a rank's step waiting for its batches = input-bound */
    /* Fills *f and returns true when the rule fires. Figures and changes are appended
     * to those *f has: start from a zeroed finding, as stoke_diagnose does. */
    bool (*check)(const struct stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
} stoke_rule;

/* The rule table, in the order findings are reported. *count receives its length. */
const stoke_rule *stoke_rules(size_t *count);

/* Runs every rule of the table over s; writes at most cap findings, returns how many
 * fired (possibly more than cap). Can't fail. */
size_t stoke_diagnose(const stoke_mon_summary *s, stoke_finding *out, size_t cap);

/* Writes the diagnosis (which resource bounded the run, each finding's evidence and
 * advice, or plainly that nothing fired) to f. */
void stoke_diagnosis_print(const stoke_mon_summary *s, const stoke_finding *f, size_t n,
                           size_t fired, FILE *f_out);

/* ---- Output formats (sink.c) ------------------------------------------------- */

/* The live line ("GPU 85% | VRAM 12.3/24.0 GB (51%) | ... | IO 120 MB/s") of *s into
 * buf (always NUL-terminated); returns its length. Absent readings are left out. */
size_t stoke_mon_format_line(const stoke_mon_sample *s, char *buf, size_t size);

/* One JSON object and a newline (schema in docs/monitor.md; absent readings have no
 * key). Returns the length, or 0 if buf is too small (then buf holds ""). */
size_t stoke_mon_format_json(const stoke_mon_sample *s, char *buf, size_t size);

/* The JSON lines' last line, after the run's summary: {"type":"diagnosis", "time" (Unix
 * time), "t" (the last sample's), "findings": [stoke_finding_json of each]} and a
 * newline; malloc'd, NULL when out of memory. Samples have no "type". */
char *stoke_mon_format_diagnosis_json(const stoke_finding *f, size_t n, double t, double wall);

/* CSV header for gpu_count GPUs, and one row; both end with a newline. Absent
 * readings are empty cells. Return the length, or 0 if buf is too small. */
size_t stoke_mon_format_csv_header(int gpu_count, char *buf, size_t size);
size_t stoke_mon_format_csv_row(const stoke_mon_sample *s, int gpu_count, char *buf, size_t size);

/* Opens a log file for appending lines: created, and truncated unless `append` (a
 * resumed run adds to its log). A FIFO is opened without blocking: one with a reader
 * works, one without is an error rather than a hang. STOKE_ERR_IO naming the file if
 * it cannot be opened. Returns the descriptor in *fd (close-on-exec). */
stoke_status stoke_mon_open_log(const char *path, bool append, int *fd);

/* Writes buf[0..len) with a single write(), so a line is never split between two
 * writes even if the process is killed; after a short write (a disk filling up) the
 * rest is retried so that the error names the cause. STOKE_ERR_IO naming `what` and
 * the cause (ENOSPC, EFBIG: the file size limit) on failure. */
stoke_status stoke_mon_write_line(int fd, const char *buf, size_t len, const char *what);

/* ---- Prometheus (prom.c: the exposition and addresses; exporter.c: the server) -----
 * docs/prometheus.md lists every metric. */

/* What `stoke train` adds to the exposition: its latest progress figures. Ratios are
 * 0..1; NaN = unknown (left out). */
typedef struct stoke_prom_train {
    bool valid;          /* a progress event has been seen */
    int64_t steps;       /* optimizer steps so far (counter) */
    int64_t epoch;       /* 1-based, the epoch running */
    int64_t epochs;      /* of the run */
    double samples_per_s, data_wait_ratio, loss, lr, mfu_ratio;
    double metric;        /* running training accuracy 0..1 (metric_is_acc) or MAE */
    bool metric_is_acc;
    double val_loss, val_metric; /* the last evaluation's, NaN if none */
    double phase_ratio[5]; /* input, forward, backward, optimizer, allreduce */
    double elapsed_s;      /* since the training loop started */
    int world;             /* ranks of a data parallel run (1 alone) */
} stoke_prom_train;

/* The exposition (text format 0.0.4) of a monitor sample (may be NULL: none yet) and
 * of train (may be NULL: not a training run) into buf; `command` ("monitor", "train")
 * is stoke_info's label. Absent readings are left out. Returns the length, or 0 when
 * buf is too small (then buf holds ""). */
size_t stoke_prom_format(const stoke_mon_sample *s, const stoke_prom_train *train,
                         const char *command, char *buf, size_t size);

/* A label value escaped for the exposition (\\, \" and \n) into buf, always
 * NUL-terminated (cut short at a whole character when buf is small). */
void stoke_prom_escape(const char *value, char *buf, size_t size);

/* Where to listen: "ADDR:PORT", "[V6]:PORT", "localhost:PORT" or ":PORT" (loopback).
 * The address is numeric or localhost; port 0 picks a free one. */
typedef struct stoke_prom_addr {
    int family;             /* AF_INET or AF_INET6 */
    unsigned char addr[16]; /* network order: 4 bytes for AF_INET */
    int port;
    bool loopback; /* 127.0.0.0/8 or ::1 */
} stoke_prom_addr;

/* STOKE_ERR_ARG naming the text and what is wrong with it. */
stoke_status stoke_prom_parse_addr(const char *text, stoke_prom_addr *out);
/* "127.0.0.1:9400", "[::1]:9400" into buf. */
void stoke_prom_format_addr(const stoke_prom_addr *a, int port, char *buf, size_t size);

typedef struct stoke_prom_server stoke_prom_server;

/* Whether this build serves Prometheus (libmicrohttpd was found when it was built). */
bool stoke_prom_available(void);

/* Binds `text` (stoke_prom_parse_addr) and serves GET/HEAD /metrics on a thread of its
 * own. A non-loopback address is refused unless allow_public. Errors: STOKE_ERR_ARG
 * (the address, or not local), STOKE_ERR_IO naming the address (taken: EADDRINUSE),
 * STOKE_ERR_UNAVAILABLE (a build without libmicrohttpd: what to install). */
stoke_status stoke_prom_start(const char *text, bool allow_public, const char *command,
                              stoke_prom_server **out);
/* The URL of /metrics ("http://127.0.0.1:9400/metrics", the port bound). */
const char *stoke_prom_url(const stoke_prom_server *p);
/* Publish the latest readings: a copy under a lock held only for the copy, so the
 * caller never waits for a client. Any thread. */
void stoke_prom_publish_sample(stoke_prom_server *p, const stoke_mon_sample *s);
void stoke_prom_publish_train(stoke_prom_server *p, const stoke_prom_train *t);
void stoke_prom_stop(stoke_prom_server *p); /* stops serving and frees; NULL is fine */

/* ---- The sampler (gpu.c, monitor.c) ------------------------------------------ */

typedef struct stoke_monitor stoke_monitor;

/* Called on the sampler thread after each sample; must not call back into the
 * monitor except stoke_monitor_latest. A non-OK return is recorded (first one wins,
 * see stoke_monitor_error) and sampling goes on. */
typedef stoke_status (*stoke_mon_callback)(const stoke_mon_sample *s, void *ctx);

typedef struct stoke_monitor_config {
    double interval_s;            /* >= 0.05 */
    int pid;                      /* watched tree root; 0 = whole system */
    bool no_gpu;                  /* do not load NVML */
    stoke_mon_callback on_sample; /* may be NULL */
    void *ctx;
    /* The input pipeline, may be NULL: called once by stoke_monitor_create (on the
     * caller's thread) and then on the sampler thread before each sample; see
     * stoke_mon_pipeline_fn. A snapshot whose counts went backwards (a new loader)
     * starts the windows afresh. */
    stoke_mon_pipeline_fn pipeline_fn;
    void *pipeline_ctx;
} stoke_monitor_config;

/* Creates a monitor: opens the /proc readers and NVML (a missing NVML is a normal
 * state, see stoke_monitor_gpu_note). Takes a first reading (of the pipeline too) so
 * the first sample has rates. Errors: STOKE_ERR_ARG (interval), STOKE_ERR_NOTFOUND
 * (pid), STOKE_ERR_IO. */
stoke_status stoke_monitor_create(const stoke_monitor_config *cfg, stoke_monitor **out);

/* Starts the sampler thread. STOKE_ERR_SYSTEM if it cannot be created. */
stoke_status stoke_monitor_start(stoke_monitor *m);

/* Stops and joins the sampler thread (no-op if not running). Thread-safe with respect
 * to the sampler; call from one controlling thread. */
void stoke_monitor_stop(stoke_monitor *m);

/* On a stopped monitor: takes one sample now, outside the schedule, covering the time
 * since the previous reading (to the log and the history as any other). A run shorter
 * than the interval then still has a sample of its whole length. Nothing is taken, and
 * false returned, when less than min_s seconds have passed since the previous reading
 * (rates over a shorter span are mostly the clock's granularity) or the watched root
 * has ended; errors are recorded as the sampler's (stoke_monitor_error). */
bool stoke_monitor_sample_now(stoke_monitor *m, double min_s);

/* Copies the latest sample into *out; false if none yet. Safe from any thread. */
bool stoke_monitor_latest(stoke_monitor *m, stoke_mon_sample *out);

/* True once the watched root has ended (the sampler stops itself). Any thread. */
bool stoke_monitor_target_gone(stoke_monitor *m);

/* Number of GPUs sampled and why there are none ("" if there are). */
int stoke_monitor_gpu_count(const stoke_monitor *m);
const char *stoke_monitor_gpu_note(const stoke_monitor *m);

/* The run's history; read it only while the sampler is stopped. */
const stoke_mon_history *stoke_monitor_history(const stoke_monitor *m);

/* The first error of the sampler or a callback (STOKE_OK if none), message in msg. */
stoke_status stoke_monitor_error(stoke_monitor *m, char *msg, size_t size);

void stoke_monitor_free(stoke_monitor *m); /* stops it first; NULL is fine */

/* GPU sampling through NVML (gpu.c); used by the monitor and usable alone. */
typedef struct stoke_gpu_reader stoke_gpu_reader;
/* Loads NVML. On STOKE_ERR_UNAVAILABLE (no library, no driver) the message says why;
 * that is a normal answer. On success *out must be freed. */
stoke_status stoke_gpu_reader_open(stoke_gpu_reader **out);
void stoke_gpu_reader_free(stoke_gpu_reader *g);
int stoke_gpu_reader_count(const stoke_gpu_reader *g);
/* Fills s->gpus and s->gpu_count, and the tree's GPU memory from the devices' process
 * lists for the given pids (pids may be NULL). */
void stoke_gpu_read(stoke_gpu_reader *g, const int *pids, int npids, stoke_mon_sample *s);

#ifdef __cplusplus
}
#endif
#endif
