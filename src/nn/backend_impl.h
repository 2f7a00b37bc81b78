/* backend_impl.h - the table of functions a compute backend provides (ggml style):
 * per op a forward, a backward, its workspace and saved-state sizes; plus memory,
 * reductions and optimizer updates. The graph, memory plan and executor only go
 * through this table, so a CUDA backend is another table. Internal to src/nn. */
#ifndef STOKE_NN_BACKEND_IMPL_H
#define STOKE_NN_BACKEND_IMPL_H

#include "nn/graph_impl.h"

/* The buffers of one node for one call, all in the backend's memory, laid out
 * sample-major over `batch` samples. Pointers the op does not use are NULL; din[i] is
 * NULL when input i needs no gradient (data inputs), and kernels then skip it. */
typedef struct nn_exec_args {
    const stoke_graph *graph;
    const nn_node *node;
    int index; /* the node's index (dropout keys) */
    int64_t batch;
    bool train;
    /* A forward run again in backward (gradient checkpointing) after the real one:
     * the same values, but no state may change twice (batch norm's running statistics
     * are left alone). */
    bool recompute;
    stoke_precision precision;
    const void *in[NN_MAX_INPUTS]; /* fp32, or int32 ids/classes */
    float *din[NN_MAX_INPUTS];     /* ACCUMULATED into */
    float *out;                    /* losses and metrics: out[0] = the batch mean */
    float *dout;                   /* for losses, NULL: grad_scale seeds it */
    float *param[NN_MAX_PARAMS];
    float *grad[NN_MAX_PARAMS];              /* NULL for buffers and inference models */
    const uint16_t *param_lp[NN_MAX_PARAMS]; /* bf16/fp16 copies, or NULL */
    void *saved;                             /* saved_bytes(node) x batch, forward -> backward */
    void *ws;                                /* shared scratch, workspace(node, batch) bytes */
    size_t ws_size;
    uint64_t seed;    /* per node: model seed mixed with the index */
    uint64_t step;    /* dropout mask key: advances every train forward */
    float grad_scale; /* losses: d(total)/d(this loss), loss scale included */
    /* A fused chain (nn_fused_impl): node, in, din, param, grad are its first node's;
     * out, dout, saved its last node's; chain lists the nodes. Else NULL, 0. */
    const int *chain;
    int nchain;
} nn_exec_args;

typedef struct nn_op_impl {
    /* Writes out (and saved). NULL: the backend lacks the op. */
    stoke_status (*forward)(void *ctx, const nn_exec_args *a);
    /* Accumulates into din and grad from dout (or grad_scale for losses). NULL for
     * metrics and inputs. */
    stoke_status (*backward)(void *ctx, const nn_exec_args *a);
    /* Bytes of shared scratch either direction needs at this batch (may be NULL: 0).
     * Also prepares whatever the op caches for the shape (primitives), so the first
     * step does not pay for it. */
    stoke_status (*workspace)(void *ctx, const stoke_graph *g, const nn_node *n, int64_t batch,
                              stoke_precision p, size_t *bytes);
    /* Bytes per sample kept from forward to backward (may be NULL: 0). */
    size_t (*saved_bytes)(void *ctx, const stoke_graph *g, const nn_node *n);
} nn_op_impl;

/* Nodes the backend runs as one kernel: chain[k] is the only reader of chain[k-1]'s
 * output, and no intermediate output is a model output, so the intermediates never
 * need to exist in memory: only the last node has an output and an output gradient,
 * and the chain one saved state (saved_bytes per sample). */
#define NN_MAX_CHAIN 3
typedef struct nn_fused_impl {
    const char *name;
    stoke_status (*forward)(void *ctx, const nn_exec_args *a);
    stoke_status (*backward)(void *ctx, const nn_exec_args *a);
    stoke_status (*workspace)(void *ctx, const stoke_graph *g, const int *chain, int n,
                              int64_t batch, stoke_precision p, size_t *bytes);
    size_t (*saved_bytes)(void *ctx, const stoke_graph *g, const int *chain, int n);
} nn_fused_impl;

typedef struct nn_backend {
    const char *name; /* "cpu" */
    /* Passed to every entry: what this instance runs with (the CPU's: compute threads,
     * implementation choices, oneDNN engine, stream and primitive cache); every model
     * and every plan has its own. */
    void *ctx;
    nn_op_impl ops[STOKE_NN_OP_COUNT];
    /* Whether the op runs natively at this precision (its matmul/conv takes bf16 or
     * fp16 operands); otherwise the executor's plan keeps it in fp32. */
    bool (*supports)(void *ctx, stoke_nn_op op, stoke_precision p);
    /* Whether those ops run on kernels of precision p, else emulate it (nn.h). */
    bool (*native)(void *ctx, stoke_precision p);
    /* *out: the fused kernel for chain[0..n) at this batch and precision, or NULL.
     * Fails only on errors (an invalid shape). The entry may be NULL: no fusion. */
    stoke_status (*fuse)(void *ctx, const stoke_graph *g, const int *chain, int n, int64_t batch,
                         stoke_precision p, const nn_fused_impl **out);

    /* Memory: 64-byte aligned, zeroed. */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    void (*zero)(void *ctx, void *p, size_t bytes);
    /* Copies device bytes to the host and back (the CPU: memcpy). */
    void (*read)(void *ctx, void *host, const void *dev, size_t bytes);
    void (*write)(void *ctx, void *dev, const void *host, size_t bytes);
    /* Between two buffers of this backend's memory. */
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);

    /* fp32 -> bf16/fp16 bits (weight copies). */
    void (*to_lowp)(void *ctx, stoke_precision p, const float *in, uint16_t *out, size_t n);
    /* out[k]: the sum of squares of x[k]'s n[k] floats, in float64 (inf or NaN when
     * one is not finite), for `count` tensors in one call: a device answers them all
     * with one wait. Deterministic. */
    void (*sum_squares)(void *ctx, const float *const *x, const size_t *n, int count, double *out);
    /* x *= s */
    void (*scale)(void *ctx, float *x, size_t n, float s);
    /* One parameter's update; t is the 1-based step (SGD's first momentum step, AdamW's
     * bias correction). check_optim validates the options first (STOKE_ERR_ARG). */
    stoke_status (*check_optim)(void *ctx, const stoke_optim *o);
    /* SGD, then in the same pass w's low-precision copy refreshed (w_lp non-NULL, in
     * precision lp) and g zeroed: the step's three passes over the parameters in one. */
    void (*sgd)(void *ctx, float *w, float *g, float *mom, size_t n, float lr, int64_t t,
                const stoke_optim *o, uint16_t *w_lp, stoke_precision lp);
    void (*adamw)(void *ctx, float *w, const float *g, float *m, float *v, size_t n, float lr,
                  int64_t t, const stoke_optim *o);
    /* Compute threads the backend's kernels use; n <= 0: every online CPU. */
    int (*threads)(void *ctx);
    void (*set_threads)(void *ctx, int n);
    /* Waits for the work queued so far and returns the first error since the last
     * call, of the entries that return none (alloc aside). NULL: nothing is queued
     * (the CPU). */
    stoke_status (*sync)(void *ctx);
    /* A forward's results read without waiting inside a step (a device; NULL: the CPU,
     * whose ops fail as they run and whose values the model reads at once). After a
     * forward's ops are queued, forward_fetch queues the copies of its n device floats
     * values[k] (losses and metrics) and of its kernels' bad-input flags; forward_check
     * waits for them, fills values[k] and returns the first node (in graph order) whose
     * input its kernels found bad (a class outside the logits, an id outside the table),
     * *node its index and the error worded for it, or the first error since the last
     * check or sync; STOKE_OK when none. */
    stoke_status (*forward_fetch)(void *ctx, const float *const *values, int n);
    stoke_status (*forward_check)(void *ctx, int *node, float *values);
    /* Graphs: from capture_begin to capture_end the work the entries queue is recorded
     * instead of run, into *graph, which replay queues again, whole, with the same
     * buffers, sizes and arguments (what varies must come from device memory: set_key).
     * A failed capture leaves nothing behind (no graph, no noted error). NULL: none. */
    stoke_status (*capture_begin)(void *ctx);
    stoke_status (*capture_end)(void *ctx, void **graph);
    stoke_status (*replay)(void *ctx, void *graph);
    void (*graph_free)(void *ctx, void *graph);
    /* The optimizer step decided on the device (NULL: the CPU, whose model decides on
     * the host from sum_squares), so that nothing in a step waits: set_step puts the
     * host's scalars in device memory before the step's graph (learning rate, 1-based
     * step, inv = 1 / (loss scale x batches), the options' clipping norm); step_decide,
     * in the graph before the updates, sums every gradient's squares and decides the
     * gradients' factor (nk_step_coef) or, when one is not finite, a skip; scale, sgd
     * and adamw read both as their kernels run (their own lr, t and factor arguments
     * unused). After the graph, step_fetch queues the decision's copy to the host;
     * step_result waits for it, with the first error since the last check or sync. */
    void (*set_step)(void *ctx, float lr, int64_t t, double inv, const stoke_optim *o);
    stoke_status (*step_decide)(void *ctx, const float *const *x, const size_t *n, int count);
    stoke_status (*step_fetch)(void *ctx);
    stoke_status (*step_result)(void *ctx, double *norm, int *bad, bool *skip);
    /* The key of the forward about to run (nn_exec_args.step), for a backend whose
     * kernels read it from device memory as they run, so that a captured graph replays
     * with each forward's own dropout mask. NULL: the args' step is all it uses. */
    void (*set_key)(void *ctx, uint64_t key);
    /* The device's own clock, for the step's phases (stoke_model_mark): a timing event;
     * recorded after the work queued so far; whether it has completed (waiting for it
     * when `wait`); the seconds from a to b, both completed. Failures are kept for sync
     * (a failed event counts as completed, 0 s). NULL (the CPU, which has done the work
     * by the time a call returns): the model reads the wall clock instead. */
    void *(*event_new)(void *ctx);
    void (*event_free)(void *ctx, void *ev);
    void (*event_record)(void *ctx, void *ev);
    bool (*event_done)(void *ctx, void *ev, bool wait);
    double (*event_seconds)(void *ctx, void *a, void *b);
    /* The queue the backend's work goes on (cudaStream_t), handed to a data-parallel
     * reducer (stoke_grad_ops.stream, src/nn/buckets.c): its collective is enqueued
     * there, after the gradients it reads and before the step, and recorded into the
     * backward's graph when one is captured. NULL: the CPU, whose work is done as each
     * entry returns. The reducer's other needs are the entries above: alloc, free and
     * copy (staging buffers). */
    void *(*queue)(void *ctx);
    /* Releases a context of this backend (nn_backend_free calls it). */
    void (*ctx_free)(void *ctx);
} nn_backend;

/* A CPU backend instance with a context of its own: `threads` compute threads (<= 0:
 * the machine's, cpu_machine_threads) and the automatic implementation choices.
 * The caller frees it with nn_backend_free. STOKE_ERR_NOMEM, recorded. */
stoke_status nn_cpu_backend_new(int threads, nn_backend **out);

/* The optimizer's options checked as PyTorch checks them (SGD's or AdamW's rules in
 * src/nn/cpu/optim.c), for every backend's check_optim. STOKE_ERR_ARG naming the field. */
stoke_status nn_optim_check(const stoke_optim *o);

/* A CUDA backend instance on device `device` (src/nn/cuda_backend.c), with its own
 * stream, cuBLAS handle and kernel table, its fp32 products on TF32 as `tf32` says
 * (cuda_ctx_new). STOKE_ERR_UNAVAILABLE saying what is missing
 * (runtime, device, cuBLAS, the kernel module), recorded. */
stoke_status nn_cuda_backend_new(int device, stoke_tf32 tf32, nn_backend **out);

/* A CUDA instance's stream (cudaStream_t), NULL for another backend. */
void *nn_backend_stream(const nn_backend *be);

/* What a CUDA instance runs with ("CUDA device 0 (compute capability 9.0), kernels:
 * ..."), or "" for another backend. */
const char *nn_backend_describe(const nn_backend *be);

/* Frees an instance and its context. NULL is ignored. */
void nn_backend_free(nn_backend *be);

#endif
