/* tune.h - what stoke will do with a machine: recommendations derived from its probed
 * facts (precision, TF32, loader workers, pinned memory, prefetch depth, peak FLOP/s,
 * OpenBLAS's kernels), each with the reason it was made; and the one decision a
 * training run applies (stoke_decide): the machine's recommendations, the dataset's
 * facts and the settings the user gave, each setting with its source and reason. */
#ifndef STOKE_TUNE_H
#define STOKE_TUNE_H

#include <stdbool.h>

#include "stoke/hw.h"
#include "stoke/nn.h" /* stoke_precision */

#ifdef __cplusplus
extern "C" {
#endif

/* The device a recommendation is about: the CPU (which also hosts the loader and
 * owns machine-wide settings) or one GPU. */
#define STOKE_TUNE_CPU (-1)

typedef enum stoke_rec_type {
    STOKE_REC_TEXT = 0, /* text: "bf16", "fp16+loss-scaling", ... */
    STOKE_REC_BOOL,     /* number is 0 or 1 */
    STOKE_REC_COUNT,    /* number is a whole count (workers, batches, threads) */
    STOKE_REC_FLOPS,    /* number is floating-point operations per second */
} stoke_rec_type;

typedef struct stoke_rec {
    const char *key; /* static: "precision", "tf32", "loader_workers", ... */
    int device;      /* STOKE_TUNE_CPU or the GPU's index in stoke_machine.gpus */
    stoke_rec_type type;
    bool known;                /* false: the value could not be derived; `reason` says why */
    char text[32];             /* the value of a STOKE_REC_TEXT recommendation */
    stoke_precision precision; /* a "precision" recommendation's value as the CPU
                                  backend runs it (text "fp16+loss-scaling" is fp16) */
    double number;             /* the value of the other types */
    char reason[320];          /* the facts the value came from, for the user */
    /* The facts do not settle the value: a trial should (the CPU's precision with
     * AVX512-BF16 and no AMX, where bf16 may or may not beat fp32). A run that leaves
     * the setting unset measures it (docs/tune.md); `unsure_why` says what the rule
     * could not tell from ("AVX512-BF16 without AMX"), "" when sure. */
    bool unsure;
    char unsure_why[64];
} stoke_rec;

#define STOKE_MAX_RECS (8 + 6 * STOKE_MAX_GPUS)

typedef struct stoke_recs {
    int count;
    stoke_rec items[STOKE_MAX_RECS];
} stoke_recs;

/* Applies every rule to the machine, in table order, and writes the results into
 * *out (which needs no cleanup). Rules that do not apply (TF32 without a GPU) emit
 * nothing; rules whose inputs are missing emit known = false with the reason. Can't
 * fail. */
void stoke_recommend(const stoke_machine *m, stoke_recs *out);

/* The first recommendation with this key and device, or NULL. */
const stoke_rec *stoke_recs_find(const stoke_recs *recs, const char *key, int device);

/* Where a decided setting came from. The first five are the config layer's
 * (stoke_cfg_source in stoke/train.h has the same values). */
typedef enum stoke_source {
    STOKE_SRC_DEFAULT = 0, /* the built-in default */
    STOKE_SRC_FILE,        /* a --config file */
    STOKE_SRC_ENV,         /* an environment variable */
    STOKE_SRC_FLAG,        /* a command-line flag */
    STOKE_SRC_CHECKPOINT,  /* the config of the checkpoint resumed */
    STOKE_SRC_RULE,        /* derived by a rule from the machine and the dataset: nothing
                            was measured */
    STOKE_SRC_CACHED,      /* measured by an earlier run's trials on this machine, model
                            and dataset, read from the tuning cache */
    STOKE_SRC_MEASURED,    /* measured by this run's trials (stoke_tune_search) */
} stoke_source;

/* "default", "file", "env", "flag", "checkpoint", "rule", "cached", "measured". */
const char *stoke_source_name(stoke_source s);

/* Decided by stoke (a rule, this run's trials or the cache) rather than given. */
static inline bool stoke_source_decided(stoke_source s)
{
    return s == STOKE_SRC_RULE || s == STOKE_SRC_MEASURED || s == STOKE_SRC_CACHED;
}

/* A decided setting's provenance. */
typedef struct stoke_why {
    stoke_source source;
    char reason[600]; /* the facts behind a decided value (sized for the longest: batch
                         auto's rule and the memory fit it names); "" for a given one */
} stoke_why;

/* ---- Hardware profiles (docs/profiles.md) -------------------------------------------
 * The seeds' per-GPU starting points (and stoke's own for A100, L4 and the CPU) as data:
 * data/profiles.yaml, embedded in the library, or the file STOKE_PROFILES names (read
 * by stoke_profiles_load in stoke/train.h, which owns the YAML reader). Starting
 * points, not measurements: the decision starts from them, trials confirm them. */
#define STOKE_MAX_PROFILES      32
#define STOKE_PROFILE_MAX_NAMES 8

typedef struct stoke_profile {
    char name[32];
    bool cpu_only; /* the class of a run on the CPU (no usable GPU, or --device cpu) */
    char gpu_names[STOKE_PROFILE_MAX_NAMES][32]; /* NVML name parts, e.g. "RTX 4090" */
    int gpu_name_count;
    int cc_major, cc_minor; /* the class's compute capability; 0.0: none given */
    double memory_gb;       /* the class's memory (decimal GB, as NVML's bytes); 0: none */
    int64_t batch;          /* the seed's batch; 0: none given (the memory fit decides) */
    char batch_for[160];    /* the model and data that batch was for */
    int workers;            /* loader workers ... */
    int workers_for_cores;  /* ... for this many CPU cores (scaled); 0: a fixed count */
    int workers_max;        /* 0: no cap but the machine's */
    int prefetch_factor;    /* batches each worker keeps ahead (PyTorch's meaning) */
    bool precision_auto;    /* the probe's rule decides */
    stoke_precision precision;
    bool tf32;
    char source[64]; /* which seed ("seed 003"), or "stoke's own" */
    char note[400];  /* what the seed said, or why stoke's own values */
} stoke_profile;

typedef struct stoke_profiles {
    char origin[256]; /* "built-in data/profiles.yaml" or the file read */
    int count;
    stoke_profile items[STOKE_MAX_PROFILES];
} stoke_profiles;

typedef enum stoke_profile_how {
    STOKE_PROFILE_NONE = 0, /* no profile: the rules alone */
    STOKE_PROFILE_BY_NAME,  /* the GPU's NVML name contains one of the profile's names */
    STOKE_PROFILE_BY_CLASS, /* the nearest compute capability, then memory */
    STOKE_PROFILE_CPU,      /* the CPU-only class */
} stoke_profile_how;

/* A device's profile and its start values on this machine. */
typedef struct stoke_profile_match {
    stoke_profile_how how;
    stoke_profile profile; /* a copy; meaningful unless how is NONE */
    int workers;           /* the profile's workers scaled to this machine's CPUs */
    int prefetch;          /* workers x prefetch_factor, within the loader's [2, 32] */
    char why[320];         /* how it matched, or why none did */
} stoke_profile_match;

/* The profile for `gpu` (an index into m->gpus) or, with STOKE_TUNE_CPU, the CPU-only
 * class: by name first (a name matches a whole word of the NVML name: "H200" is not
 * "GH200", "L4" is not "L40S"), the longest name winning; else the profile of the
 * nearest class (same compute capability major, nearest minor, then nearest memory);
 * else none, saying why. `p` may be NULL (no profiles: none). Returns out->how. */
stoke_profile_how stoke_profile_match_device(const stoke_profiles *p, const stoke_machine *m,
                                             int gpu, stoke_profile_match *out);

/* "none", "name", "class", "cpu". */
const char *stoke_profile_how_name(stoke_profile_how how);

/* What a run asks for, each setting with the source of its value, and the facts of
 * its dataset the rules need. */
typedef struct stoke_tune_request {
    const char *device; /* "auto" (or NULL: a GPU when there is one), "cpu", "cuda",
                           "cuda:N" */
    stoke_source device_src;
    const char *precision; /* "auto" (decide), "fp32", "bf16", "fp16" */
    stoke_source precision_src;
    int workers; /* loader workers; < 0: decide */
    stoke_source workers_src;
    int threads; /* compute threads; <= 0: decide */
    stoke_source threads_src;
    int prefetch; /* batches in flight; <= 0: decide */
    stoke_source prefetch_src;
    int64_t batch; /* samples per batch (given or the default: not tuned yet) */
    stoke_source batch_src;
    bool in_memory;                 /* the training set is held in memory */
    bool cheap_transform;           /* its transform is one fused pass (or none) */
    const stoke_profiles *profiles; /* NULL: the rules alone */
    /* The threads the caller's own process computes on beside the loader (a PyTorch
     * script's torch.get_num_threads()); 0: unknown, the rules share the CPUs out (what
     * `stoke train` passes). With a count, workers left to decide take what is left:
     * the available CPUs, less these threads, less the CPUs other processes keep busy
     * (stoke_machine.load), at least 1, at most the rules' cap; the in-memory rule's 0
     * and a single CPU's 0 stay. */
    int host_threads;
    const char *host_threads_from; /* where the count came from, for the reason
                                      ("torch.get_num_threads()"); NULL: nothing said */
} stoke_tune_request;

/* The settings a training run applies, each with its provenance. */
typedef struct stoke_decision {
    stoke_precision precision;
    int device;         /* STOKE_TUNE_CPU, or a CUDA device: the GPU's index in
                           stoke_machine.gpus (NVML's order, which the CUDA ordinal
                           follows when CUDA_DEVICE_ORDER=PCI_BUS_ID) */
    int usable_cpus;    /* CPUs this process may run on (affinity; at least 1) */
    int available_cpus; /* what threads + workers share: usable_cpus, less what a
                           cgroup CPU quota allows (stoke_cpu_available) */
    int others_cpus;    /* whole CPUs of those the machine's other processes were busy
                           on when the run started (stoke_machine.load), taken out of
                           the compute threads; 0 when not sampled */
    int threads;        /* compute threads (OpenMP: oneDNN, kernels, BLAS) */
    int workers;        /* loader worker threads; 0: the training thread loads */
    int prefetch;       /* the loader's ring slots (batches in flight) */
    bool pinned;        /* page-locked ring slots (only with a device copy) */
    int64_t batch;
    stoke_why precision_why, device_why, threads_why, workers_why, prefetch_why, pinned_why,
        batch_why;
    /* precision auto took a rule that is unsure (stoke_rec.unsure) and why: a measured
     * search trials fp32 against bf16 (stoke_tune_space.precision_compare), and a run
     * that leaves precision unset measures it */
    bool precision_unsure;
    char precision_unsure_why[64];
    /* The decided device's hardware profile: the start values a measured search begins
     * from (its batch, tf32 and precision are recorded, not applied). */
    stoke_profile_match profile;
    stoke_why accumulate_why; /* tuned: from effective_batch (set by the trainer) */
    /* TF32 on the decided GPU, from its "tf32" recommendation (the rule of
     * core/tf32.h); AUTO on the CPU or when the GPU's compute capability is unknown
     * (the model then asks the rule with the device's own). For stoke_model_opts.tf32. */
    stoke_tf32 tf32;
} stoke_decision;

/* The device setting's form: "auto", "cpu", "cuda" or "cuda:N" with N a CUDA device
 * index stoke can address (0 to STOKE_MAX_GPUS - 1). STOKE_ERR_ARG naming the value
 * ("device: 'gpu' is not ...", "device: 'cuda:99': stoke addresses at most ...") so
 * each source of settings refuses it with its own name first (a file's line, a
 * variable, a flag). Whether that GPU exists is the model's to say when it is made. */
stoke_status stoke_device_check(const char *device);

/* Decides every setting of the request from the machine's recommendations (`recs`
 * from stoke_recommend on `m`, the rules `stoke probe` prints) where the request
 * leaves it open. STOKE_ERR_ARG naming the value for a precision that is not auto,
 * fp32, bf16 or fp16, or a device that is not auto, cpu, cuda or cuda:N; otherwise
 * STOKE_OK. A device asked for is decided as given, even with no GPU found (creating
 * the model then says why it cannot run); auto takes the first GPU found. */
stoke_status stoke_decide(const stoke_machine *m, const stoke_recs *recs,
                          const stoke_tune_request *req, stoke_decision *out);

/* ---- The batch size (batch.c): batch_size auto and effective_batch ------------------
 * The trainer measures what the batch depends on (its models' exact plans, the free
 * memory, the samples) and applies what is decided; the rule that turns those facts
 * and the settings into the batch, the accumulation and their reasons is here. */

/* The CPU's batch where its memory fit is larger: its throughput flattens past a few
 * hundred samples (a cap there, not the fastest batch; stoke tune measures that). */
#define STOKE_TUNE_CPU_START_BATCH 256
/* The fewest optimizer steps an epoch that batch auto (the rule and the measured
 * search) leaves: the fastest batch of a small dataset is a few steps an epoch, and a
 * few steps do not train (2,000 samples at batch 1024: 2 steps, 9% validation
 * accuracy). 50 steps is a batch of at most 2% of the samples: a full Fashion-MNIST
 * (60,000) keeps batches up to 1024 open, --limit 2000 caps them at 40. */
#define STOKE_TUNE_MIN_EPOCH_STEPS 50

/* The largest power of two <= b (b >= 1). */
int64_t stoke_tune_pow2_floor(int64_t b);

/* What memory_safety leaves of `free_bytes`: the budget the batch's plan must fit. */
size_t stoke_tune_batch_budget(size_t free_bytes, double safety);

/* The facts of the memory fit, as the trainer measured them. */
typedef struct stoke_batch_fit {
    double safety;              /* memory_safety */
    size_t free_bytes;          /* what the budget is a share of ... */
    const char *free_what;      /* ... named: "free on the GPU (cudaMemGetInfo)", ... */
    size_t budget;              /* stoke_tune_batch_budget(free_bytes, safety) */
    size_t held;                /* data held in memory the budget already covers */
    const stoke_mem_plan *plan; /* the training model's, at batch 1 */
    size_t ring_per_sample;     /* the loader's bytes a sample beside the plan */
    size_t beside;              /* what else the budget holds (validation, data held) */
    int64_t fit;                /* the largest batch whose exact plan fits the budget beside
                               the rest (stoke_plan_max_batch); < 1: none */
    int64_t samples;            /* the training samples (the fit is at most these) */
    bool pow2;                  /* rounded down to a power of two */
} stoke_batch_fit;

/* The memory fit's batch (*cap: the fit, rounded down to a power of two with pow2)
 * and its numbers in `why`. STOKE_ERR_NOMEM, with them, when not even batch 1 fits. */
stoke_status stoke_tune_batch_fit(const stoke_batch_fit *f, int64_t *cap, char *why, size_t n);

/* The largest batch that keeps STOKE_TUNE_MIN_EPOCH_STEPS optimizer steps an epoch of
 * `samples` at `accumulate` batches a step, at least 1, with the reason; 0 when an
 * effective_batch is given (the user chose the optimizer's batch, the micro-batch only
 * sets the speed). */
int64_t stoke_tune_steps_cap(int64_t samples, int64_t accumulate, bool effective_given, char *why,
                             size_t n);

/* The CPU's starting point (STOKE_TUNE_CPU_START_BATCH) and why. */
int64_t stoke_tune_cpu_start_batch(char *why, size_t n);

/* batch_size auto: the smallest of the memory fit (`fit`, its reason `fit_why` from
 * stoke_tune_batch_fit), the batch the epoch's steps allow and, on the CPU, its
 * starting point, each a power of two with pow2; the bound that decided it first in
 * w's reason (source: rule). */
int64_t stoke_tune_batch_auto(int64_t fit, const char *fit_why, int64_t samples, int64_t accumulate,
                              bool effective_given, bool cpu, bool pow2, stoke_why *w);

/* effective_batch at `batch`: the accumulation that reaches it (the effective batch
 * is the next multiple of the batch when it is not one), said in w (source: rule). */
int64_t stoke_tune_accumulate(int64_t effective, int64_t batch, stoke_why *w);

/* ---- Measured tuning (search.c): which settings run fastest, found by trials -------
 * The search only decides which settings to try and what the measurements mean; a
 * trial (stoke_tune_trial_fn) runs them. The trainer's trials run real training steps
 * (stoke_train_tune, stoke/train.h); the tests' trials are a model of a loader and a
 * step whose costs they control, so the knee the search must find is known exactly. */

/* The settings one trial runs. */
typedef struct stoke_tune_point {
    int64_t batch;
    int workers, prefetch, threads;
    stoke_precision precision;
} stoke_tune_point;

/* What one trial measured over its steady steps (after its warm-up). */
typedef struct stoke_tune_measure {
    bool ran; /* false: the setting could not run (error says why: out of
                              memory at this batch, ...); the search goes on without it */
    char error[240];
    int64_t steps;         /* optimizer steps measured */
    double seconds;        /* their wall time */
    double samples_per_s;  /* training samples per second */
    double wait_pct;       /* % of that time the step waited for its batch */
    double step_ms;        /* wall time per step */
    double produce_ms;     /* the loader's time to produce one batch (one worker's,
                              reading + transforming); 0 when unknown */
    double produce_p95_ms; /* its 95th percentile: the jitter prefetch must cover */
    bool finite;           /* every loss of the trial was finite; a trial that could not
                              run is false when it diverged (a loss or gradient not
                              finite stopped it), true otherwise (memory, ...) */
    double memory_bytes;   /* the models' planned bytes and the loader's ring */
    double loss;           /* the mean training loss over the trial's first steps, the
                              same steps (and batches) in every trial of one batch size:
                              what the precisions' accuracy is compared by; NAN unknown */
} stoke_tune_measure;

/* Runs one trial. Returns STOKE_OK with m->ran = false for a setting that cannot run
 * (the search skips it); any other status stops the search with that error. */
typedef stoke_status (*stoke_tune_trial_fn)(void *ctx, const stoke_tune_point *p,
                                            stoke_tune_measure *m);

/* What may be searched, and where from. */
typedef struct stoke_tune_space {
    stoke_tune_point start; /* the rules' (or a profile's) values: the first trial, and
                               the value of every setting not searched */
    bool batch, workers, prefetch, threads, precision; /* open: searched */
    /* precision open and the rule unsure: fp32 and bf16 are both tried, not the
     * start's confirmed; `precision_unsure_why` is the rule's doubt, for the reason */
    bool precision_compare;
    char precision_unsure_why[64];
    bool cpu;                     /* the CPU computes: workers and threads share
                                     usable_cpus (the core split) */
    int usable_cpus;              /* the decision's available_cpus (affinity, cgroup quota) */
    int max_workers;              /* 0: usable_cpus (a GPU's loader), else the bound */
    int64_t batch_min, batch_max; /* batches tried: powers of two within; batch_max is
                                     the memory fit capped by the dataset */
    char batch_max_why[200];      /* what set batch_max, for the batch's reason ("" when
                                     unknown) */
    double wait_target_pct;       /* a data wait at most this is fed (0: 5%) */
    bool grid;                    /* exhaustive: every combination (the benchmark's peer) */
} stoke_tune_space;

#define STOKE_TUNE_MAX_TRIALS 1024

/* The loader's ring: batches in flight, whatever the workers (the floor keeps the next
 * batch ready without workers; the ceiling bounds the RAM the ring holds). */
#define STOKE_TUNE_PREFETCH_MIN 2
#define STOKE_TUNE_PREFETCH_MAX 32

typedef struct stoke_tune_trial {
    stoke_tune_point p;
    stoke_tune_measure m;
    const char *stage; /* static: "start", "precision", "batch", "workers", "prefetch",
                          "confirm", "grid" */
} stoke_tune_trial;

typedef struct stoke_tune_result {
    stoke_tune_point best;
    stoke_tune_measure best_m; /* the trial that ran `best` */
    int ntrials;
    stoke_tune_trial trials[STOKE_TUNE_MAX_TRIALS];
    /* why each searched setting has its value (from the measurements); "" when not
     * searched */
    char why_batch[600], why_workers[600], why_prefetch[600], why_threads[600], why_precision[600];
} stoke_tune_result;

/* Called after each trial (may be NULL): the trainer prints it. */
typedef void (*stoke_tune_trial_cb)(void *ctx, const stoke_tune_trial *t);

/* bf16 measured against fp32 is kept only when its trial's mean loss is at most
 * fp32's plus this fraction of it (over the same first steps: STOKE_TUNE_BF16_LOSS_TOL
 * x |fp32's|): faster but learning worse is not faster. */
#define STOKE_TUNE_BF16_LOSS_TOL 0.03

/* Searches the open settings of `space` by trials, one setting after another:
 *   precision: the start's (the probe's rule) kept when its trial's losses are
 *     finite, else fp32; with precision_compare (the rule unsure) fp32 and bf16 are
 *     both tried at the start's other settings and bf16 is kept when its losses are
 *     finite, its mean loss is within STOKE_TUNE_BF16_LOSS_TOL of fp32's and its
 *     samples/s beat fp32's by more than 5%, else fp32;
 *   batch: powers of two from the start's, doubled while samples/s rises by more
 *     than 5%, halved while within 5%: the smallest batch within 5% of the fastest;
 *   workers: on a GPU the fewest loader workers whose data wait is at most the
 *     target (a first guess from the measured batch production and step times, then
 *     walked to the knee); on the CPU (the core split) the workers/threads split with
 *     the most samples/s, fewer workers preferred within 3%;
 *   prefetch: the workers' batches in flight plus enough ready ones to cover the
 *     measured p95 jitter of a batch's production (at least 2), confirmed by a trial.
 * STOKE_ERR_ARG for an empty space (a batch range without a power of two), any error
 * a trial returns, and STOKE_ERR_UNAVAILABLE when no trial could run (naming the
 * first's error). `grid` measures every combination instead and keeps the fastest. */
stoke_status stoke_tune_search(const stoke_tune_space *space, stoke_tune_trial_fn fn, void *ctx,
                               stoke_tune_trial_cb on_trial, void *cb_ctx, stoke_tune_result *out);

/* The depth the prefetch rule takes: `workers` batches being produced plus the ready
 * ones that cover (p95 - mean) of production at a step every step_ms, at least 1
 * ready, within [2, 32]. Pure. */
int stoke_tune_prefetch_for(int workers, double produce_ms, double produce_p95_ms, double step_ms);

/* Theoretical peak FLOP/s from a GPU's own properties: SM count × max SM clock ×
 * FLOPs per clock per SM for its compute capability. `tensor` selects the dense
 * bf16/fp16 tensor-core rate (fp32 accumulation) instead of fp32 FMA. Returns false
 * and writes why into `why` when an input or the table entry is missing; otherwise
 * writes the figure into *flops and the formula into `why`. */
bool stoke_gpu_peak_flops(const stoke_gpu_info *gpu, bool tensor, double *flops, char *why,
                          size_t why_size);

/* Same for the CPU: physical cores × max clock × FLOPs per cycle per core from its
 * SIMD level; `bf16` selects the AMX-BF16 / AVX512-BF16 rate. */
bool stoke_cpu_peak_flops(const stoke_cpu_info *cpu, bool bf16, double *flops, char *why,
                          size_t why_size);

/* How the kernels OpenBLAS loaded compare with the CPU's vector units. */
typedef enum stoke_blas_fit {
    STOKE_BLAS_FIT_UNKNOWN = 0, /* the core or the CPU's level is not in the table */
    STOKE_BLAS_FIT_MATCH,       /* the core uses the widest vectors the CPU has */
    STOKE_BLAS_FIT_BELOW,       /* AVX2 kernels on an AVX-512 CPU: slower, not crippled */
    STOKE_BLAS_FIT_FALLBACK,    /* far below: plain C, SSE-class or AVX-without-AVX2
                                 * kernels on a CPU with more (AVX2 or AVX-512, say) */
    STOKE_BLAS_FIT_ABOVE,       /* needs instructions the CPU lacks: GEMMs would fault */
} stoke_blas_fit;

typedef struct stoke_blas_check {
    stoke_blas_fit fit;
    const char *core_isa; /* static: the core's kernels' ISA ("SSE3", "AVX2", "AVX-512"),
                           * NULL if the core is not in the table */
    const char *cpu_isa;  /* static: the widest the CPU offers OpenBLAS, NULL if unknown */
    const char *coretype; /* static: the OPENBLAS_CORETYPE to set when fit is BELOW,
                           * FALLBACK or ABOVE; NULL otherwise */
    char reason[320];     /* the facts the verdict came from, and the advice */
} stoke_blas_check;

/* Judges an OpenBLAS core name (as openblas_get_corename() returns it; any case)
 * against the CPU's STOKE_SIMD_* bits, from a table of OpenBLAS's x86-64 cores: a
 * pure function, so every CPU class is testable anywhere. Fills *out and returns its
 * fit. An empty or unlisted core (other architectures) or a CPU without SSE4.2 in
 * its flags is UNKNOWN, with the reason. Can't fail. */
stoke_blas_fit stoke_openblas_check(const char *core, uint32_t simd, stoke_blas_check *out);

/* "unknown", "match", "below", "fallback", "above". */
const char *stoke_blas_fit_name(stoke_blas_fit fit);

#ifdef __cplusplus
}
#endif
#endif
