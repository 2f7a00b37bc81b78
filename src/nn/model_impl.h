/* model_impl.h - the model's private state, shared by the files that make it up
 * (plan.c, model.c, exec.c, step.c): the memory plan's table of sizes, the model
 * struct, and the few functions one of them provides to the others. Internal to
 * src/nn. */
#ifndef STOKE_NN_MODEL_IMPL_H
#define STOKE_NN_MODEL_IMPL_H

#include "core/precision.h"
#include "nn/backend_impl.h"
#include "nn/marks.h"

#define ALIGN 64
#define NONE  ((size_t)-1)
/* captured (batch, mode) keys per model: the batch, the epoch's last, an odd one */
#define NN_MAX_GRAPHS 8

static inline size_t align_up(size_t n) { return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

/* ---- layout: the table of sizes every arena is cut from (plan.c) ---- */

typedef struct layout {
    int nnodes, nparams;
    int64_t batch;
    int64_t last_batch; /* the epoch's last batch when smaller than batch, else 0 */
    /* per node */
    int *alias;     /* the node whose buffers it uses (itself but for reshape) */
    bool *lowp;     /* runs in the model's low precision */
    size_t *out_ps; /* aligned bytes per sample; 0 for aliases */
    size_t *saved_ps;
    size_t *dout_ps; /* 0: no gradient kept */
    /* fused chains (nn_fused_impl): for each member the chain's first node, else -1;
     * at the first node the chain and its kernels */
    int *head;
    int (*chain)[NN_MAX_CHAIN];
    int *chain_len;
    const nn_fused_impl **fused;
    /* per parameter: offsets into their arenas, NONE when absent */
    size_t *param_off, *lp_off, *grad_off, *state_off;
    int slots;
    size_t params, grads, optim, act_ps, fwd_ps, ws;
    /* recompute: nsegs segments, segment s the nodes (seg_start[s], seg_end[s]]; seg[i]
     * the segment whose shared region holds node i's buffers (at shared_off[i] in the
     * forward part, shared_doff[i] in the gradient part), else -1. seg_dout_ps[s] is
     * what zeroing segment s's gradients covers. The region is shared_fwd_ps +
     * shared_dout_ps per sample, counted in act_ps. */
    int nsegs;
    int *seg, *seg_start, *seg_end;
    size_t *shared_off, *shared_doff, *seg_dout_ps;
    size_t shared_fwd_ps, shared_dout_ps;
} layout;

static inline int L_last(const layout *L, int head)
{
    return L->chain[head][L->chain_len[head] - 1];
}

/* ---- the model ---- */

struct stoke_model {
    const stoke_graph *g;
    stoke_model_opts o;
    const nn_backend *be; /* == own: the backend with this model's context */
    nn_backend *own;
    layout L;
    stoke_mem_plan plan;
    char *params_arena, *grads_arena, *optim_arena, *act_arena, *ws_arena;
    /* batches whose workspace is known to be enough, and the compute threads that held
     * then (the libraries' scratch depends on the thread count too) */
    int64_t *ready;
    int nready, ready_cap, ready_threads;
    /* the named pointers cut from the arenas (llm.c's ParameterTensors) */
    float **param, **grad, **state; /* state: slots per parameter */
    uint16_t **param_lp;
    float **out, **saved, **dout; /* per node, sized for max_batch */
    char *dout_base;
    size_t dout_bytes;
    char *shared_dout; /* the segments' shared gradient region (recompute) */
    double *value;     /* per node: loss and metric values */
    double total_loss;
    int64_t fwd_batch;
    bool fwd_train, fwd_valid;
    uint64_t fwd_key, micro;
    int64_t steps; /* applied (an fp16 overflow's skipped step is not) */
    int64_t calls; /* stoke_model_step calls: the dropout keys', known without the device */
    int backward_passes;
    double grad_norm;
    /* fp16 only (scale 1 otherwise): PyTorch GradScaler's defaults and rules */
    cpu_loss_scaler scaler;
    nn_marks *marks; /* the step's phases (stoke_model_mark), made at the first mark */
    /* Captured forwards and backwards (backend capture_begin), replayed when the same
     * batch, mode and loss scale come again. A key's first call runs as it is (it
     * prepares what the ops cache: cuDNN plans, workspace), its second is captured. */
    struct model_graph {
        int64_t batch;
        bool train;
        float scale; /* the loss scale the backward was captured with */
        int fwd_runs, bwd_runs;
        void *fwd, *bwd;
    } graphs[NN_MAX_GRAPHS];
    int ngraphs;
    void *step_graph; /* the optimizer's updates, any batch */
    int step_runs;
    double step_lr, step_coef; /* the updates' arguments (step_ops) */
    void *norm_buf;            /* the gradients, sizes and sums of squares (step), made once */
    int norm_count;            /* the gradients in it */
    /* A device's results read late (backend forward_fetch, step_decide): a forward's
     * losses and metrics once its backward is queued, a step's decision once the next
     * backward is (settle_forward, settle_step). An error found then is kept in late
     * and returned by the next call that can return one. */
    bool fwd_pending, step_pending, step_skipped;
    const float **fetch_ptrs; /* the forward's loss and metric outputs (device) */
    float *fetch_vals;
    stoke_status late;
    char late_msg[512];
    void *input_event;    /* recorded after each device input copy (stoke_model_input_event) */
    char graphs_off[256]; /* why this model stopped capturing ("" while it does) */
    /* Data parallel (buckets.c): the installed reducer, its buckets in readiness order,
     * ready_at[b] the backward iteration (node index) after which bucket b's gradients
     * are final, and the next bucket a backward hands over. */
    bool has_reducer;
    stoke_grad_reducer reducer;
    stoke_grad_ops gops;
    stoke_grad_bucket *buckets;
    int *ready_at, *bucket_params;
    float **bucket_grads;
    size_t *bucket_elems;
    int nbuckets, next_bucket;
};

/* plan.c */
void nn_layout_free(layout *L);
/* The options checked against the graph and the backend (STOKE_ERR_ARG or
 * STOKE_ERR_UNAVAILABLE, recorded). */
stoke_status nn_check_opts(const stoke_graph *g, const stoke_model_opts *o, const nn_backend *be);
/* The optimizer options with PyTorch's AdamW defaults filled in for zeros. */
stoke_model_opts nn_fill_defaults(const stoke_model_opts *o);
/* plan.c: the backend instance a model or a plan with these options runs on (every one
 * has its own context), its options checked against it; *out NULL on failure. */
stoke_status nn_backend_for(const stoke_graph *g, const stoke_model_opts *o, nn_backend **out);
/* The batches a layout is planned for (b[0], and b[1] if the epoch's last differs);
 * returns how many. */
int nn_planned(const layout *L, int64_t b[2]);
/* The workspace the nodes need at `batch` (largest over them, aligned). */
stoke_status nn_ws_at(const stoke_graph *g, const stoke_model_opts *o, const nn_backend *be,
                      const layout *L, int64_t batch, size_t *out);
stoke_status nn_layout_build(const stoke_graph *g, const stoke_model_opts *o, const nn_backend *be,
                             layout *L);
void nn_plan_fill(const layout *L, const stoke_graph *g, const stoke_model_opts *o,
                  stoke_mem_plan *p);

/* exec.c */
void nn_graphs_drop(stoke_model *m);
/* ops(m) through a captured graph (see exec.c). */
stoke_status nn_run_graphed(stoke_model *m, void **graph, int *runs,
                            stoke_status (*ops)(stoke_model *m));
/* The first error found late kept for the next call that can return it; taken once. */
stoke_status nn_keep_late(stoke_model *m, stoke_status st);
stoke_status nn_take_late(stoke_model *m);
/* A device's forward results, waited for. */
stoke_status nn_settle_forward(stoke_model *m);

/* buckets.c */
/* Hands the reducer every bucket not yet handed over whose gradients are final before
 * backward iteration i (i = -1: after the last). */
stoke_status nn_reduce_ready(stoke_model *m, int i);
/* The reducer's finish, before the optimizer step. */
stoke_status nn_reduce_finish(stoke_model *m);
/* Releases the reducer and its buckets (stoke_model_set_reducer(m, NULL)). */
void nn_reducer_drop(stoke_model *m);

/* step.c */
/* A device's step decision, waited for. */
stoke_status nn_settle_step(stoke_model *m);
/* What a getter reads, settled (`step`: the last step's decision, else the forward's). */
void nn_settle_for_getter(const stoke_model *cm, bool step);

#endif
