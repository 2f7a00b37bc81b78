/* ctx.h - the CUDA backend's context: what one model's ops run with (the runtime,
 * cuBLAS and cuDNN handles bound to the model's stream, the kernel table, scratch for
 * reductions, the first error of the entries that cannot return one). Internal to
 * src/nn. */
#ifndef STOKE_NN_CUDA_CTX_H
#define STOKE_NN_CUDA_CTX_H

#include <stdbool.h>

#include "nn/backend_impl.h"
#include "nn/cuda/launch.h"
#include "nn/cuda/libs.h"
#include "stoke/hw.h"

/* Writes from the host up to CUDA_STAGE_MAX bytes are staged (stage.c): a batch's
 * targets, a step's inputs from host memory. Larger ones (parameters loaded from a
 * checkpoint) are waited for instead of keeping that much pinned memory. */
#define CUDA_STAGES    4
#define CUDA_STAGE_MAX ((size_t)4 << 20)

/* Partial sums of the embedding's check: enough to keep a GPU's SMs busy, few enough
 * for one thread to add them up. */
#define CUDA_SUM_STRIDE 4096

/* Doubles in each half of the sums' scratch (reduce.c): a first level of 32k threads
 * with 32 loads each in flight covers an H200's memory latency at full bandwidth (4 MB
 * in flight), and 512 KiB in all fits beside the smallest plan the tests make. */
#define CUDA_TREE_CAP ((int64_t)1 << 15)

/* Which attention the backend runs (attn.c): the fused kernels from this sequence
 * length up. The GEMM path keeps H T^2 probabilities a sample beside 4 T C other
 * floats (and as many again for their gradient in the workspace), so they outgrow the
 * rest once T >= 4 hs: from 128 for heads of 32 and less. */
#define CUDA_ATTN_FUSED_FROM_T 128
typedef enum cuda_attention {
    CUDA_ATTN_AUTO,  /* by sequence length: cuda_attn_fused */
    CUDA_ATTN_FUSED, /* always fused (a head larger than NK_ATTN_MAX_HS is refused) */
    CUDA_ATTN_GEMM,  /* always cuBLAS GEMMs with the probabilities kept */
} cuda_attention;

typedef struct cuda_ctx {
    stoke_cudart *rt;
    nn_cublas *blas;
    void *blas_h;
    nn_cublaslt *lt; /* the linear layer's matmuls (lt.c) */
    void *lt_h;
    nn_cudnn *dnn; /* loaded at the first convolution: models without one run without */
    void *dnn_h;
    void *module; /* libstoke_cuda.so, or NULL for the host build */
    const nn_cuda_kernels *k;
    nk_launch L;
    int device, cc_major, cc_minor;
    bool tf32;        /* fp32 GEMMs and convolutions on TF32 tensor cores (cuda_ctx_new) */
    double *partial;  /* CUDA_SUM_STRIDE doubles of device memory */
    double *tree;     /* 2 x CUDA_TREE_CAP doubles: the sums' partials (reduce.c), or NULL */
    int64_t tree_cap; /* of which each level uses at most this many a half (tests lower it) */
    double *totals;   /* ntotals doubles: one sum per tensor (cuda_ctx_totals) */
    int ntotals;
    /* Bad input found by a forward's kernels (a class outside the logits, an id outside
     * the table): flags[i] (device) is node i's first bad sample + 1, checks[i] how to
     * word its error. nchecks = the graph's nodes once a forward has run. */
    int32_t *flags;
    struct cuda_input_check *checks;
    int nchecks;
    /* What the host reads of a forward and a step (fetch.c), copied into pinned memory
     * behind the work and waited for only when the host needs it, so nothing in a step
     * waits: the flags, the losses' and metrics' values (nvalues), the step's decision. */
    int32_t *flags_host;
    int nflags; /* the flags the last forward_fetch copied */
    float *values_host;
    int nvalues;
    nk_step_result *result, *result_host; /* device, pinned host */
    void *fence[2];                       /* recorded after each fetch (CUDA_FETCH_*) */
    /* stage.c: small writes from the host go through pinned slots, so the host goes on
     * while they are copied (the next write to a slot waits for its last copy) */
    struct cuda_stage {
        void *host;
        size_t cap;
        void *event;
        bool pending;
    } stage[CUDA_STAGES];
    int next_stage;
    /* a capture in progress: the host build's launch arguments (cuda_capture_end) */
    void **kept;
    int nkept, capkept;
    uint64_t *key;    /* device: the running forward's dropout key (set_key) */
    nk_step *step;    /* device: the optimizer step's scalars (set_step) */
    stoke_status err; /* the first failure of a void entry (read, write, zero, ...) */
    char err_msg[512];
    char why[320]; /* how it was set up: "cuBLAS 13, kernels: device (sm_80 ...)" */
    cuda_attention attention;
    /* conv.c: cuDNN descriptors and algorithms per (shape, batch, precision) */
    struct cuda_conv_plan **conv_plans;
    int nconv_plans;
    /* pool.c: cuDNN pooling descriptors per (op, window, shape, batch) */
    struct cuda_pool_plan **pool_plans;
    int npool_plans;
    /* lt.c: cuBLASLt descriptors and algorithms per matmul shape and epilogue */
    struct cuda_lt_plan **lt_plans;
    int nlt_plans;
} cuda_ctx;

/* A context on CUDA device `device`, its fp32 products on TF32 as `tf32` says
 * (stoke_model_opts.tf32: the run's decision applied; AUTO asks core/tf32.h's rule
 * with the device's compute capability; either only where the device has TF32).
 * STOKE_ERR_UNAVAILABLE saying what is missing (no runtime, no device, no cuBLAS or
 * cuBLASLt, no kernel module), recorded. */
stoke_status cuda_ctx_new(int device, stoke_tf32 tf32, cuda_ctx **out);
void cuda_ctx_free(cuda_ctx *c);

/* A launch's or library call's result as a status: STOKE_OK, or STOKE_ERR_UNAVAILABLE
 * naming `what` with the runtime's reason (recorded). */
stoke_status cuda_check(cuda_ctx *c, int rc, const char *what);
stoke_status cuda_blas_check(cuda_ctx *c, int rc, const char *what);
stoke_status cuda_dnn_check(cuda_ctx *c, int rc, const char *what);

/* Keeps the first failure of an entry that returns nothing, for cuda_ctx_sync. */
void cuda_note(cuda_ctx *c, stoke_status st);

/* Waits for the stream; the first error noted or raised since the last call. */
stoke_status cuda_ctx_sync(cuda_ctx *c);

/* Graphs: the work queued between begin and end is recorded instead of run, and
 * replayed whole (what varies between replays must be read from device memory, as the
 * dropout key is). A failed capture discards what it recorded and its errors. */
typedef struct cuda_graph cuda_graph;
stoke_status cuda_capture_begin(cuda_ctx *c);
stoke_status cuda_capture_end(cuda_ctx *c, cuda_graph **out);
stoke_status cuda_graph_replay(cuda_ctx *c, cuda_graph *g);
void cuda_graph_free(cuda_ctx *c, cuda_graph *g);

typedef struct cuda_input_check {
    const nn_node *node; /* NULL: node i checks nothing */
    const void *data;    /* its targets or ids (device) */
    int64_t cols, tcols; /* classes or actions, target columns; or the table's rows */
} cuda_input_check;

/* flags and checks for a graph of n nodes (allocated at the first forward, outside any
 * capture); node i's flag, or NULL before. */
stoke_status cuda_ctx_checks(cuda_ctx *c, int n);
int32_t *cuda_flag_of(cuda_ctx *c, int node);

/* fetch.c. A forward's results: cuda_forward_fetch queues the copies of its flags and
 * of the n device floats values[k] (its losses and metrics) to the host; then
 * cuda_forward_check waits for them, values[k] the floats, and returns the first node
 * (in graph order) whose kernels flagged bad input (*node its index, the error worded
 * as the CPU backend's), or the first error noted since the last check. */
enum { CUDA_FETCH_FORWARD, CUDA_FETCH_STEP };
stoke_status cuda_forward_fetch(cuda_ctx *c, const float *const *values, int n);
stoke_status cuda_forward_check(cuda_ctx *c, int *node, float *values);
/* stage.c: `bytes` from host memory (which the caller may reuse at once) to device
 * memory, queued on the stream; the slots' memory freed. */
stoke_status cuda_stage_write(cuda_ctx *c, void *dev, const void *host, size_t bytes);
void cuda_stages_free(cuda_ctx *c);

/* The step's decision (nk_step_decide) from the n[k] floats of each x[k]: queued (in
 * the step's graph); its copy to the host queued (after the graph); waited for. */
stoke_status cuda_step_decide(cuda_ctx *c, const float *const *x, const size_t *n, int count);
stoke_status cuda_step_fetch(cuda_ctx *c);
stoke_status cuda_step_result(cuda_ctx *c, nk_step_result *out);
/* The embedding's and the losses' wording of node i's error (seq.c, loss.c). */
stoke_status cuda_emb_bad(cuda_ctx *c, const cuda_input_check *k, int32_t flag);
stoke_status cuda_loss_bad(cuda_ctx *c, const cuda_input_check *k, int32_t flag);

/* c->totals with room for at least n doubles (grown when needed). */
stoke_status cuda_ctx_totals(cuda_ctx *c, int n);

/* reduce.c: sums as trees of nk_tree_sum launches, the same bits on the host build
 * and on a GPU. *total = the sum of x[0..n)^2 in double; db[c] += the sum of dy over
 * rows (dy [rows][cols]), or over samples and plane (dy [batch][channels][plane]). */
stoke_status cuda_sum_squares(cuda_ctx *c, const float *x, int64_t n, double *total);
/* totals[k] = cuda_sum_squares of x[k] (n[k] values) for k < count, the same bits in
 * fewer launches: the optimizer step's gradients. */
stoke_status cuda_sum_squares_many(cuda_ctx *c, const float *const *x, const size_t *n, int count,
                                   double *totals);
stoke_status cuda_bias_grad(cuda_ctx *c, float *db, const float *dy, int64_t rows, int64_t cols);
stoke_status cuda_conv_bias_grad(cuda_ctx *c, float *db, const float *dy, int64_t batch,
                                 int64_t channels, int64_t plane);

/* cuDNN, loaded and bound to the stream on first use. */
stoke_status cuda_ctx_dnn(cuda_ctx *c);

/* Frees conv.c's cached plans (their cuDNN descriptors). */
void cuda_conv_plans_free(cuda_ctx *c);
/* Frees pool.c's cached plans. */
void cuda_pool_plans_free(cuda_ctx *c);
/* Frees lt.c's cached plans (their cuBLASLt descriptors). */
void cuda_lt_plans_free(cuda_ctx *c);

/* Whether attention of sequence length T and head size hs runs the fused kernels: the
 * one rule attn.c's saved size, workspace, forward and backward all follow, so it
 * depends on neither the batch nor the precision. AUTO takes the GEMM path for heads
 * larger than NK_ATTN_MAX_HS rather than refusing a model that runs there. */
bool cuda_attn_fused(const cuda_ctx *c, int64_t T, int64_t hs);

/* Sets c's attention choice (and its description, nn_backend_describe). For tests,
 * which force either path at any size (before any plan: seam.h reaches the contexts
 * a test's models create). */
void cuda_ctx_set_attention(cuda_ctx *c, cuda_attention a);

/* Runs kernel `name` over n indices with args a, as a status. */
#define CUDA_RUN(c, name, n, a) cuda_check((c), (c)->k->name(&(c)->L, (int64_t)(n), (a)), #name)

#endif
