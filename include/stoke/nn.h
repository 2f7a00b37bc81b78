/* nn.h - neural networks as static graphs: build a graph of named layers, plan its
 * memory, compile it into a model (one arena per kind of buffer), then run forward,
 * backward and optimizer steps through a backend (CPU now; CUDA later). */
#ifndef STOKE_NN_H
#define STOKE_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoke/core.h"
#include "stoke/hw.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Graphs ---------------------------------------------------------------------
 * A graph is built by calls that only record nodes (as ggml does): nothing is
 * allocated for data and nothing is computed. Every shape is PER SAMPLE (the batch
 * dimension is implicit and comes with the model): images (C, H, W), sequences
 * (T, C), vectors (C). Each builder returns a tensor handle; on a bad argument or a
 * shape mismatch it records the FIRST error in the graph (naming the layer, e.g.
 * "fc2: input has 100 features, linear expects ... ") and returns STOKE_NO_TENSOR;
 * builders given STOKE_NO_TENSOR return it silently, so a whole chain of calls can
 * be checked once with stoke_graph_status. */

typedef struct stoke_graph stoke_graph;

typedef int32_t stoke_tensor; /* a node of one graph; STOKE_NO_TENSOR is none */
#define STOKE_NO_TENSOR ((stoke_tensor)-1)

/* Ops. Values only grow at the end (they name nodes in logs and plans). */
typedef enum stoke_nn_op {
    STOKE_NN_INPUT = 0,      /* data fed by the caller: fp32, or int32 ids/classes */
    STOKE_NN_LINEAR,         /* (..., IN) -> (..., OUT): y = x W^T + b over the last dim */
    STOKE_NN_CONV2D,         /* (C, H, W) -> (OC, OH, OW), stride, zero padding */
    STOKE_NN_MAXPOOL2D,      /* (C, H, W) -> (C, OH, OW) */
    STOKE_NN_AVGPOOL2D,      /* (C, H, W) -> (C, OH, OW), padding counted (PyTorch's
                               count_include_pad=True) */
    STOKE_NN_GLOBAL_AVGPOOL, /* (C, H, W) -> (C) */
    STOKE_NN_BATCHNORM,      /* (C, H, W) or (C): per channel over batch (and space) */
    STOKE_NN_LAYERNORM,      /* (..., C): over the last dim, with weight and bias */
    STOKE_NN_RELU,
    STOKE_NN_GELU, /* exact (erf) GELU, PyTorch's default */
    STOKE_NN_TANH,
    STOKE_NN_SIGMOID,
    STOKE_NN_DROPOUT,         /* inverted dropout; identity in eval mode */
    STOKE_NN_ADD,             /* a + b, same shapes (residuals) */
    STOKE_NN_RESHAPE,         /* same elements, new per-sample shape (flatten) */
    STOKE_NN_EMBEDDING,       /* int32 ids (T) -> (T, C) */
    STOKE_NN_SOFTMAX,         /* over the last dim */
    STOKE_NN_ATTENTION,       /* (T, C) -> (T, C): multi-head self-attention with QKV and
                               output projections (PyTorch nn.MultiheadAttention) */
    STOKE_NN_PATCHIFY,        /* (C, H, W) -> (H/P * W/P, C*P*P), patches row-major,
                               each patch vector ordered (c, py, px) */
    STOKE_NN_POS_EMBED,       /* (T, C) + a learned (T, C) table */
    STOKE_NN_SEQ_MEAN,        /* (T, C) -> (C): mean over tokens */
    STOKE_NN_CROSS_ENTROPY,   /* logits (K) + int32 class -> scalar, label smoothing */
    STOKE_NN_BCE_LOGITS,      /* logits (...) + fp32 targets in [0, 1] -> scalar */
    STOKE_NN_MSE,             /* pred + fp32 target of the same shape -> scalar */
    STOKE_NN_L1,              /* pred + fp32 target of the same shape -> scalar */
    STOKE_NN_ACCURACY,        /* metric: logits (K) + int32 class -> fraction correct */
    STOKE_NN_MAE,             /* metric: mean |pred - target| */
    STOKE_NN_POLICY_GRADIENT, /* logits (K) + fp32 [action, advantage(, old log-prob)]
                               -> scalar: -advantage log pi(action) (or PPO's clipped
                               surrogate), minus an entropy bonus */
    STOKE_NN_SLICE,           /* (..., C) -> (..., end - begin): columns [begin, end) of
                               the last dim */
    STOKE_NN_OP_COUNT
} stoke_nn_op;

const char *stoke_nn_op_name(stoke_nn_op op); /* "linear", "conv2d", ...; "?" */

/* An empty graph. `name` (copied) names the model in messages. Returns NULL only when
 * out of memory. Free with stoke_graph_free. */
stoke_graph *stoke_graph_new(const char *name);
void stoke_graph_free(stoke_graph *g); /* NULL is fine */

/* STOKE_OK, or the first error recorded while building (the message is recorded
 * again, so stoke_last_error() shows it on this thread). */
stoke_status stoke_graph_status(const stoke_graph *g);

/* Builders. `name` is the layer's name (copied): its parameters are "<name>.weight",
 * "<name>.bias" (and the like, as PyTorch names them), so it must be unique among
 * layers with parameters. Parameter-free ops take no name; a node's name in messages
 * is then "<op>#<index>". */

/* An input fed by the caller each step; fp32 data (dtype STOKE_F32) or int32 ids or
 * class labels (STOKE_I32, for embedding, cross-entropy and accuracy targets). Class
 * targets have the shape () (ndim 0). */
stoke_tensor stoke_nn_input(stoke_graph *g, const char *name, stoke_dtype dtype,
                            const stoke_shape *shape);
/* PyTorch nn.Linear(in, out, bias) over the last dim of x. */
stoke_tensor stoke_nn_linear(stoke_graph *g, const char *name, stoke_tensor x, int64_t out_features,
                             bool bias);
/* PyTorch nn.Conv2d(C, out_channels, kernel, stride, padding, bias); x is (C, H, W). */
stoke_tensor stoke_nn_conv2d(stoke_graph *g, const char *name, stoke_tensor x, int64_t out_channels,
                             int kernel, int stride, int padding, bool bias);
/* Square windows; stride 0 means stride = kernel (PyTorch's default). Output size
 * floor((H + 2 pad - kernel) / stride) + 1; pad <= kernel / 2. */
stoke_tensor stoke_nn_maxpool2d(stoke_graph *g, stoke_tensor x, int kernel, int stride,
                                int padding);
stoke_tensor stoke_nn_avgpool2d(stoke_graph *g, stoke_tensor x, int kernel, int stride,
                                int padding);
stoke_tensor stoke_nn_global_avgpool(stoke_graph *g, stoke_tensor x);
/* PyTorch BatchNorm2d (x is (C, H, W)) or BatchNorm1d (x is (C)): parameters
 * "<name>.weight", "<name>.bias" and buffers "<name>.running_mean",
 * "<name>.running_var" (unbiased variance, as PyTorch keeps). momentum 0.1 and eps
 * 1e-5 are PyTorch's defaults. */
stoke_tensor stoke_nn_batchnorm(stoke_graph *g, const char *name, stoke_tensor x, float momentum,
                                float eps);
/* PyTorch nn.LayerNorm(C, eps) over the last dim. */
stoke_tensor stoke_nn_layernorm(stoke_graph *g, const char *name, stoke_tensor x, float eps);
stoke_tensor stoke_nn_relu(stoke_graph *g, stoke_tensor x);
stoke_tensor stoke_nn_gelu(stoke_graph *g, stoke_tensor x);
stoke_tensor stoke_nn_tanh(stoke_graph *g, stoke_tensor x);
stoke_tensor stoke_nn_sigmoid(stoke_graph *g, stoke_tensor x);
/* Zeroes each element with probability p (0 <= p < 1) and scales the rest by
 * 1/(1-p), in train mode; the mask is a counter-based hash of (model seed, node,
 * step, element), so it needs no storage and is the same for any thread count. */
stoke_tensor stoke_nn_dropout(stoke_graph *g, stoke_tensor x, float p);
stoke_tensor stoke_nn_add(stoke_graph *g, stoke_tensor a, stoke_tensor b);
stoke_tensor stoke_nn_reshape(stoke_graph *g, stoke_tensor x, const stoke_shape *shape);
stoke_tensor stoke_nn_flatten(stoke_graph *g, stoke_tensor x); /* -> (elems) */
/* PyTorch nn.Embedding(vocab, dim): ids is an int32 input of shape (T) (or ()), values
 * in [0, vocab) (others are an error at forward time, naming the sample). */
stoke_tensor stoke_nn_embedding(stoke_graph *g, const char *name, stoke_tensor ids, int64_t vocab,
                                int64_t dim);
stoke_tensor stoke_nn_softmax(stoke_graph *g, stoke_tensor x);
/* Multi-head self-attention over x (T, C), C divisible by heads, no mask, no dropout:
 * PyTorch nn.MultiheadAttention(C, heads, batch_first=True)(x, x, x) with parameters
 * "<name>.in_proj_weight" (3C, C), "<name>.in_proj_bias" (3C),
 * "<name>.out_proj.weight" (C, C), "<name>.out_proj.bias" (C). */
stoke_tensor stoke_nn_attention(stoke_graph *g, const char *name, stoke_tensor x, int heads);
/* Images (C, H, W) -> (H/P * W/P, C*P*P) patch vectors (H, W divisible by P), for a
 * transformer (follow it with a linear to the hidden size). */
stoke_tensor stoke_nn_patchify(stoke_graph *g, stoke_tensor x, int patch);
/* x (T, C) + "<name>.weight" (T, C), a learned position table (init N(0, 0.02)). */
stoke_tensor stoke_nn_pos_embed(stoke_graph *g, const char *name, stoke_tensor x);
stoke_tensor stoke_nn_seq_mean(stoke_graph *g, stoke_tensor x); /* (T, C) -> (C) */
/* Columns [begin, end) of the last dim of x (0 <= begin < end <= C): splits one target
 * input into the parts several heads' losses take (the actor-critic's policy target
 * and return). */
stoke_tensor stoke_nn_slice(stoke_graph *g, stoke_tensor x, int64_t begin, int64_t end);

/* Losses: a scalar, the MEAN over the batch (and over elements for BCE, MSE and L1,
 * as PyTorch's reduction='mean'). Each loss is added to the model's total loss with
 * its weight (stoke_nn_loss_weight; 1 by default); backward differentiates the
 * total. A graph may have several losses (heads): the actor-critic's total is
 * policy loss + 0.5 x value MSE (see docs/nn.md). */
stoke_tensor stoke_nn_cross_entropy(stoke_graph *g, stoke_tensor logits, stoke_tensor target,
                                    float label_smoothing);
stoke_tensor stoke_nn_bce_logits(stoke_graph *g, stoke_tensor logits, stoke_tensor target);
stoke_tensor stoke_nn_mse(stoke_graph *g, stoke_tensor pred, stoke_tensor target);
stoke_tensor stoke_nn_l1(stoke_graph *g, stoke_tensor pred, stoke_tensor target);
/* Policy-gradient loss of an actor-critic's policy head, the batch mean of
 *   2 columns [action, advantage]:  -A log pi(a)                       (REINFORCE, A2C)
 *   3 columns [action, advantage, old_log_prob], clip in (0, 1): PPO's clipped surrogate
 *       -min(r A, clip(r, 1 - clip, 1 + clip) A),  r = exp(log pi(a) - old_log_prob)
 * each minus entropy x H(pi), pi = softmax(logits). logits (K), K >= 2; target an fp32
 * input (or a slice of one) of 2 or 3 values; clip must be 0 with 2 columns. An action
 * that is not a whole number in [0, K), or a non-finite advantage or old log-prob, is
 * an error at forward time naming the layer and the sample. */
stoke_tensor stoke_nn_policy_gradient(stoke_graph *g, stoke_tensor logits, stoke_tensor target,
                                      float clip, float entropy);
/* Sets the weight of a loss node in the total loss (0 keeps it as a reported value
 * only). */
void stoke_nn_loss_weight(stoke_graph *g, stoke_tensor loss, float weight);

/* Metrics: scalars computed in forward, never differentiated. */
stoke_tensor stoke_nn_accuracy(stoke_graph *g, stoke_tensor logits, stoke_tensor target);
stoke_tensor stoke_nn_mae(stoke_graph *g, stoke_tensor pred, stoke_tensor target);

/* Marks a tensor as a named output (a head: "logits", "policy", "value"), readable
 * after forward with stoke_model_output. Losses and metrics are outputs already,
 * named "loss:<op>#<index>" unless renamed here. */
void stoke_nn_output(stoke_graph *g, const char *name, stoke_tensor t);

/* Inspection. */
int stoke_graph_node_count(const stoke_graph *g);
stoke_nn_op stoke_graph_node_op(const stoke_graph *g, stoke_tensor t);
/* Per-sample shape (a scalar () for losses and metrics); NULL for a bad handle. */
const stoke_shape *stoke_graph_shape(const stoke_graph *g, stoke_tensor t);
const char *stoke_graph_node_name(const stoke_graph *g, stoke_tensor t);
/* The input or output called `name`, or STOKE_NO_TENSOR. */
stoke_tensor stoke_graph_find(const stoke_graph *g, const char *name);

/* ---- Parameters -----------------------------------------------------------------
 * Initialization follows PyTorch's defaults (bounds and distributions, not its random
 * stream): linear and conv weights Kaiming-uniform with a = sqrt(5), i.e.
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), biases U(-1/sqrt(fan_in), 1/sqrt(fan_in));
 * attention in_proj_weight Xavier-uniform U(-sqrt(6/(C+3C)), ...), its biases 0;
 * embedding N(0, 1); position table N(0, 0.02); batch/layer norm weight 1, bias 0,
 * running mean 0, running var 1. Each parameter draws from its own stream keyed by
 * (seed, parameter name), so adding a layer does not change the others' values. */

typedef struct stoke_param_info {
    const char *name;  /* "conv1.weight", "bn1.running_mean", ... */
    stoke_shape shape; /* e.g. (32, 1, 3, 3) */
    int64_t elems;
    bool trainable;     /* false for batch norm running statistics */
    stoke_tensor layer; /* the node it belongs to */
} stoke_param_info;

int stoke_graph_param_count(const stoke_graph *g); /* parameters and buffers */
/* i < stoke_graph_param_count; the pointer lives as long as the graph. */
const stoke_param_info *stoke_graph_param(const stoke_graph *g, int i);
/* Sum of elems over trainable parameters (what PyTorch's
 * sum(p.numel() for p in model.parameters()) counts). */
int64_t stoke_graph_trainable_elems(const stoke_graph *g);
/* Floating-point operations of one sample's forward pass in its matmuls and
 * convolutions (2 per multiply-add: linear, conv2d, attention's projections and its
 * two batched products). 0 for a graph with errors. */
double stoke_graph_flops(const stoke_graph *g);
/* The same for one sample of a training step, the work MFU counts: forward plus what
 * backward computes, per op: every weight gradient (as many FLOPs as the forward
 * product), the input gradient only where the input needs one (not for a first layer
 * fed by the data), and two products for each of attention's two. Less than 3 x
 * forward: an MLP's first layer costs 2 x its forward, not 3. 0 for a graph with
 * errors. */
double stoke_graph_step_flops(const stoke_graph *g);

/* ---- Precision, optimizers, learning rates --------------------------------------- */

typedef enum stoke_precision {
    STOKE_PREC_FP32 = 0,
    STOKE_PREC_BF16, /* bf16 copies of linear/conv weights and inputs, fp32 accumulation */
    STOKE_PREC_FP16, /* fp16 likewise, with dynamic loss scaling */
} stoke_precision;

const char *stoke_precision_name(stoke_precision p); /* "fp32", "bf16", "fp16" */
/* "fp32", "bf16", "fp16" -> *out; false otherwise ("auto" is the trainer's). */
bool stoke_precision_parse(const char *s, stoke_precision *out);

typedef enum stoke_optim_kind {
    STOKE_SGD = 0, /* PyTorch SGD: momentum, dampening 0, Nesterov, L2 weight decay */
    STOKE_ADAMW,   /* PyTorch AdamW: decoupled weight decay, bias correction */
} stoke_optim_kind;

typedef struct stoke_optim {
    stoke_optim_kind kind;
    float momentum;          /* SGD; 0 keeps no momentum buffer */
    bool nesterov;           /* SGD, needs momentum > 0 */
    float weight_decay;      /* SGD: added to the gradient; AdamW: decoupled */
    float beta1, beta2, eps; /* AdamW (0 means 0.9, 0.999, 1e-8) */
    float clip_norm;         /* > 0: clip the global gradient L2 norm to this */
} stoke_optim;

const char *stoke_optim_name(stoke_optim_kind k); /* "sgd", "adamw" */

typedef enum stoke_lr_kind {
    STOKE_LR_CONSTANT = 0,
    STOKE_LR_STEP,   /* lr x gamma^(floor(step / step_size)) */
    STOKE_LR_COSINE, /* from lr down to min_lr over total_steps (after warm-up) */
} stoke_lr_kind;

typedef struct stoke_lr_schedule {
    stoke_lr_kind kind;
    double lr;            /* base learning rate */
    int64_t warmup_steps; /* linear warm-up from lr/warmup_steps to lr first */
    int64_t step_size;    /* STEP */
    double gamma;         /* STEP */
    int64_t total_steps;  /* COSINE: steps including the warm-up */
    double min_lr;        /* COSINE */
} stoke_lr_schedule;

/* The learning rate for optimizer step `step` (0-based). Can't fail. */
double stoke_lr_at(const stoke_lr_schedule *s, int64_t step);

/* How the compute threads wait at OpenMP barriers in this process: libgomp reads
 * OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded, so a launcher that
 * chooses for the user (the stoke command, src/cli/omp_wait.c) sets GOMP_SPINCOUNT and
 * STOKE_OMP_WAIT_MARK in a fresh process image. One line for the setup output: the
 * setting, and whether stoke or the user chose it. */
#define STOKE_OMP_WAIT_MARK "STOKE_OMP_WAIT_SET"
const char *stoke_nn_omp_wait(char *buf, size_t size);

/* Whether the backend runs matmuls and convolutions in precision p on kernels of
 * that precision (true for fp32; bf16 where oneDNN has bf16 kernels: AVX-512 and up)
 * or emulates it (false: operands rounded to p, fp32 kernels and accumulation, the
 * same arithmetic up to the order of sums but no faster than fp32; fp16 always, bf16
 * below AVX-512 or under an ISA cap below it). A function of the machine and the ISA
 * caps only (no model's or caller's setting changes it). Can't fail. */
bool stoke_nn_precision_native(stoke_precision p);

/* The CPU backend's matmul rate, measured: oneDNN's matmul (what linear layers and,
 * at their rate, convolutions run on) on an n x n x n product large enough to run at
 * its best (n 1024 up to 8 threads, 2048 up to 32, 3072 above; smaller, down to 512,
 * where a rep would take over 50 ms), in precision p (fp32, or bf16 where it is
 * native), on `threads` compute threads (<= 0: the machine's, as a model's 0), best
 * of 3 to 10 reps after a warm-up: about 0.2 s in all. It is the peak MFU is measured
 * against on a CPU: the clock the kernel reports under a hypervisor, and
 * FLOPs-per-cycle tables, can be far from what the cores do. STOKE_ERR_UNAVAILABLE
 * for fp16, and bf16 where it is emulated; STOKE_ERR_NOMEM. */
typedef struct stoke_nn_matmul_rate {
    double flops;   /* best rep's FLOP/s (2 per multiply-add) */
    int n;          /* the product's size */
    int reps;       /* timed reps (the warm-up not counted) */
    int threads;    /* compute threads it ran on */
    double seconds; /* the whole measurement, allocation and warm-up included */
    /* the process's CPU time in the best rep / (its wall time x threads): near 1 when
     * the threads had their cores; well below, other processes took them and the rate
     * is theirs to share, not the peak */
    double cpu_share;
} stoke_nn_matmul_rate;
stoke_status stoke_nn_cpu_matmul_rate(stoke_precision p, int threads, stoke_nn_matmul_rate *r);

/* Whether the CUDA backend can run on CUDA device `device`: it loads what a model would
 * (the runtime, the device, cuBLAS, the kernel module) and lets it go. true with what it
 * runs with in `why` ("CUDA device 0 (compute capability 9.0), kernels: device (...)"),
 * false with the reason ("the CUDA kernels (...) are missing: ..."). Can't fail. */
bool stoke_nn_cuda_ready(int device, char *why, size_t size);
/* The same for m->gpus[g] (NVML's numbering): through its CUDA number, matched by PCI
 * bus id, or false when the runtime sees other GPUs but not this one
 * (CUDA_VISIBLE_DEVICES). Can't fail. */
bool stoke_nn_cuda_ready_gpu(const stoke_machine *m, int g, char *why, size_t size);

/* ---- Memory plan ---------------------------------------------------------------- */

/* Whether fp32 products may run on TF32 (10 of fp32's 23 mantissa bits, fp32 range):
 * the speed PyTorch's allow_tf32 buys. ON applies where the device has TF32 (compute
 * capability 8.0 and up); OFF keeps fp32 products. */
typedef enum stoke_tf32 {
    STOKE_TF32_AUTO = 0, /* the rule (on where the device has it) */
    STOKE_TF32_OFF,
    STOKE_TF32_ON,
} stoke_tf32;

typedef struct stoke_model_opts {
    int64_t max_batch;     /* the largest batch forward will be given (>= 1) */
    int64_t epoch_samples; /* > 0: forward will also be given the last, smaller
                                   batch of an epoch of this many samples
                                   (epoch_samples % max_batch), and the plan covers it
                                   too; 0: only max_batch is planned */
    stoke_precision precision;
    stoke_optim optim; /* sizes the optimizer state */
    bool training;     /* false: inference only: no grads, optimizer state or
                                   activation grads (eval / predict) */
    uint64_t seed;     /* initialization and dropout */
    bool no_fusion;    /* run every op apart (the backend otherwise fuses
                                   chains such as conv2d -> relu -> max_pool2d; same
                                   values), for before/after measurements; the trainer
                                   sets it from STOKE_NO_FUSION=1 (its config layer
                                   reads the environment, the library never does) */
    int threads;       /* compute threads of this model's kernels (its backend
                                   context's; >= 0); 0: OpenMP's count when the
                                   library loaded (OMP_NUM_THREADS, else every
                                   online CPU). Two models may differ. */
    /* Where the model's buffers live and its ops run: false: the CPU backend; true:
     * CUDA device cuda_device, through the kernel module libstoke_cuda.so, cuBLAS and
     * cuDNN, all loaded at run time (docs/gpu.md). Its buffers are then device memory:
     * the pointers below (input, output, param, grad, optim_state) are device
     * pointers, for the transfer functions (stoke_model_set_input, stoke_model_read,
     * stoke_model_write) and device copies, never to be dereferenced. */
    bool cuda;
    int cuda_device;
    /* Gradient checkpointing (training models): the graph is cut into about
     * sqrt(nodes) segments at nodes where only their own output is live (a
     * transformer's or ResNet's residual add, any node of a plain chain); only the
     * segments' boundaries (and inputs, losses, metrics, outputs) keep their
     * activations from forward to backward; the rest share one region sized for the
     * largest segment, and backward runs each segment's forward again just before its
     * backward. The same values bit for bit, about one more forward of compute, fewer
     * activation bytes per sample. A graph with no cut has no segments (nothing
     * changes). Ignored without training. */
    bool recompute;
    /* fp32 matmuls and convolutions on TF32 tensor cores (CUDA models; ignored on the
     * CPU): the run's decision (stoke_decision.tf32) passes it; AUTO (zero, a model
     * made without one) asks the same rule, from the device's compute capability. */
    stoke_tf32 tf32;
} stoke_model_opts;

/* Bytes of each arena of a model compiled for plan.batch samples. total =
 * params + grads + optim + batch x activations_per_sample + workspace; every figure
 * includes alignment padding (each buffer starts on 64 bytes), so total is exactly
 * what stoke_model_new allocates (stoke_model_used_mem).
 * The workspace is not a function of max_batch alone, nor monotone in the batch: the
 * kernels' libraries pick algorithms per shape (the reference CNN's second fused
 * convolution block, fp32, needs 107 MB at batch 281 and 45 MB at 282 on an AMD EPYC
 * Zen 4). So it is the largest need over the batches the model will run: max_batch
 * and, with epoch_samples, the epoch's last batch; any other batch is checked when
 * it first runs (stoke_model_reserve). */
typedef struct stoke_mem_plan {
    int64_t batch;
    size_t params;                 /* fp32 parameters and buffers, + the bf16/fp16 weight copies */
    size_t grads;                  /* fp32 gradients of trainable parameters */
    size_t optim;                  /* momentum (SGD), first and second moments (AdamW) */
    size_t activations_per_sample; /* outputs, saved state and activation grads */
    int recompute_segments;        /* checkpointed segments (opts.recompute), else 0 */
    size_t workspace;              /* kernel scratch, the largest over the ops and over the
                             planned batches (batch, and the epoch's last one) */
    int64_t last_batch;            /* the epoch's last batch when smaller than batch, else 0 */
    size_t total;
    /* private: what stoke_plan_max_batch re-plans with */
    const stoke_graph *graph;
    stoke_model_opts opts;
} stoke_mem_plan;

/* Plans the memory of `g` compiled with `o` (o->max_batch is the batch). Needs a
 * graph without errors and a valid backend for the precision; STOKE_ERR_ARG names
 * what is wrong. Allocates nothing but small bookkeeping. */
stoke_status stoke_graph_plan(const stoke_graph *g, const stoke_model_opts *o, stoke_mem_plan *out);

/* A batch b whose plan total, plus b x extra_per_sample (memory outside the model
 * that grows with the batch: the loader's ring of prefetched batches), fits in
 * budget_bytes, or 0 if not even batch 1 fits; never
 * more than the plan's epoch_samples when given (a larger batch never runs). Each
 * candidate is planned exactly (its workspace at that batch and at the epoch's last
 * batch for it), so the answer always fits, and the next batch up does not unless
 * the answer is the epoch. It is the largest such batch when the total grows with
 * the batch; since the workspace need not (see stoke_mem_plan), the search walks
 * down from the bound that ignores the workspace in steps of 1/64 of the batch and
 * bisects below the first step that fits: a larger batch that fits is missed only
 * when the batches that fit there form a stretch narrower than one step. The plan
 * must come from stoke_graph_plan and its graph must still exist. */
int64_t stoke_plan_max_batch(const stoke_mem_plan *plan, size_t budget_bytes,
                             size_t extra_per_sample);

/* ---- Models --------------------------------------------------------------------- */

typedef struct stoke_model stoke_model;

/* Compiles `g` for o->max_batch samples on the CPU backend: allocates the arenas of
 * stoke_graph_plan (64-byte aligned) and initializes the parameters from o->seed.
 * The model keeps a pointer to g: free the graph after the model. STOKE_ERR_ARG
 * (graph errors, bad options), STOKE_ERR_NOMEM (naming the arena and its bytes),
 * STOKE_ERR_UNAVAILABLE (an op the backend does not provide). */
stoke_status stoke_model_new(const stoke_graph *g, const stoke_model_opts *o, stoke_model **out);
void stoke_model_free(stoke_model *m); /* NULL is fine */

const stoke_graph *stoke_model_graph(const stoke_model *m);
const stoke_mem_plan *stoke_model_plan(const stoke_model *m);
/* The compute threads the model's kernels run with (resolved, >= 1), and a new count
 * for its next calls (n <= 0: every online CPU; the next forward re-checks the
 * workspace, which depends on it). Can't fail. */
int stoke_model_threads(const stoke_model *m);
void stoke_model_set_threads(stoke_model *m, int n);
size_t stoke_model_used_mem(const stoke_model *m); /* bytes in all arenas */

/* Where to write an input of the next batch: max_batch x elems of its dtype (fp32 or
 * int32), sample-major. NULL for a tensor that is not an input. The caller (or the
 * loader's consumer) writes the first `batch` samples, then calls forward. */
void *stoke_model_input(stoke_model *m, stoke_tensor input);

/* Makes sure the model can run a batch of `batch` (1..max_batch) samples: the
 * workspace the kernels need at that batch (which may exceed what max_batch needs,
 * see stoke_mem_plan) is allocated, growing the workspace arena if needed (the plan's
 * workspace and total and stoke_model_used_mem then say so), and fused kernels can
 * run at it. Planned batches are ready at stoke_model_new; forward calls this for any
 * other, but a caller that knows its batch sizes can call it first, so a failure
 * comes before any work. STOKE_ERR_ARG (batch out of range), STOKE_ERR_NOMEM (naming
 * the batch and the bytes), STOKE_ERR_UNAVAILABLE (a fused kernel cannot run at that
 * batch); the model is unchanged on failure. */
stoke_status stoke_model_reserve(stoke_model *m, int64_t batch);

/* Runs every node in order over the first `batch` (1..max_batch) samples. train:
 * batch norm uses batch statistics and updates its running statistics, dropout
 * drops; otherwise the running statistics and no dropout. Errors: STOKE_ERR_ARG (bad
 * batch, an id or class out of range: names the layer and sample).
 *
 * On a device nothing in a training step waits for the host: a training forward is
 * only queued, and its bad input (an id or class out of range) is returned by the
 * backward that follows (or read by stoke_model_loss / value, which wait for it); an
 * evaluation forward waits and returns it. A step's decision (its clipping factor, or
 * a skip for a gradient that is not finite) is made on the device and read by the next
 * backward, or at once when `applied` is asked for: a non-finite gradient in fp32 or
 * bf16 is then that call's error (or stoke_model_sync's), and no weight has moved. */
stoke_status stoke_model_forward(stoke_model *m, int64_t batch, bool train);

/* After a forward in train mode on the same batch: zeroes the activation grads,
 * seeds d(total loss) = loss scale (fp16; else 1), and runs the nodes in reverse,
 * ACCUMULATING into the parameter gradients (so several backward passes accumulate
 * a larger effective batch; stoke_model_zero_grad starts afresh). STOKE_ERR_ARG if
 * the model has no loss or was compiled without training. */
stoke_status stoke_model_backward(stoke_model *m);

void stoke_model_zero_grad(stoke_model *m);

/* Applies one optimizer step with learning rate lr to every trainable parameter:
 * gradients are first divided by (loss scale x accum) (accum = backward passes since
 * zero_grad, >= 1), checked for inf/NaN (fp16: an overflow skips the step, halves the
 * scale and sets *applied false; the scale doubles after 2000 good steps, as
 * PyTorch's GradScaler), clipped to the global norm, then the update; the bf16/fp16
 * weight copies are refreshed; the gradients are zeroed. applied may be NULL (on a
 * device, asking for it waits for the step). In fp32/bf16 a non-finite gradient is
 * STOKE_ERR_ARG naming the parameter and the step. */
stoke_status stoke_model_step(stoke_model *m, double lr, int accum, bool *applied);

/* The last forward's value of a loss or metric node (batch mean), or of the total
 * loss (stoke_model_loss). NaN for a bad handle. */
double stoke_model_value(const stoke_model *m, stoke_tensor t);
double stoke_model_loss(const stoke_model *m);

/* An output's fp32 data after forward: batch x elems, sample-major; NULL if t is not
 * an output or not fp32. */
const float *stoke_model_output(const stoke_model *m, stoke_tensor t);

/* The global L2 norm of the gradients as of the last step, before clipping. */
double stoke_model_grad_norm(const stoke_model *m);
float stoke_model_loss_scale(const stoke_model *m);
void stoke_model_set_loss_scale(stoke_model *m, float scale); /* resume */

/* Parameters, gradients and optimizer state, for optimizers and checkpoints: fp32
 * arrays of stoke_graph_param(g, i)->elems each, owned by the model. grad and the
 * state slots are NULL for buffers (running statistics) and for inference models;
 * slot 0 is SGD's momentum or AdamW's first moment, slot 1 AdamW's second moment.
 * After writing parameters (a checkpoint load), call stoke_model_params_changed. */
float *stoke_model_param(stoke_model *m, int i);
float *stoke_model_grad(stoke_model *m, int i);
float *stoke_model_optim_state(stoke_model *m, int i, int slot);
int stoke_model_optim_slots(const stoke_model *m);              /* 0, 1 or 2 */
int64_t stoke_model_step_count(const stoke_model *m);           /* optimizer steps applied */
void stoke_model_set_step_count(stoke_model *m, int64_t steps); /* resume */
/* Refreshes the bf16/fp16 weight copies from the fp32 masters. Can't fail. */
void stoke_model_params_changed(stoke_model *m);

/* ---- Models on a device ----------------------------------------------------------
 * The same calls work for both backends; on the CPU they are plain copies. */

/* Whether the model's buffers are device memory (opts.cuda). */
bool stoke_model_on_device(const stoke_model *m);
/* "cpu", or what the CUDA backend runs with ("CUDA device 0 (compute capability 9.0),
 * kernels: device (sm_80 sm_89 sm_90), TF32 matmuls"). */
const char *stoke_model_device_name(const stoke_model *m);
/* Copies `bytes` from host memory into input `t` (the first samples of the batch);
 * the caller may reuse its memory at once (a device copies through pinned memory
 * without waiting; a failed copy is the next waiting call's error). STOKE_ERR_ARG if
 * t is not an input or bytes exceed it. */
stoke_status stoke_model_set_input(stoke_model *m, stoke_tensor t, const void *host, size_t bytes);
/* A device model: its CUDA stream (a cudaStream_t: every op is queued on it, so work
 * that must come first, such as a loader's copy, is made to precede it with
 * stoke_loader_stream_wait); and a copy of `bytes` of device memory (the loader's
 * batch) into input t, queued on that stream. NULL / STOKE_ERR_ARG on the CPU. */
void *stoke_model_stream(const stoke_model *m);
stoke_status stoke_model_set_input_device(stoke_model *m, stoke_tensor t, const void *dev,
                                          size_t bytes);
/* A device model: an event (a cudaEvent_t) recorded after each such copy, for the
 * loader to wait on before reusing the device memory copied from
 * (stoke_loader_set_consumer_event): the model's copies are queued, not waited for.
 * Owned by the model; NULL on the CPU. */
void *stoke_model_input_event(stoke_model *m);
/* Copies `bytes` between host memory and a buffer of the model (a pointer from
 * stoke_model_param/grad/optim_state/output/input, possibly offset). After writing
 * parameters call stoke_model_params_changed. Errors of the device (a failed copy) are
 * returned, recorded. */
stoke_status stoke_model_read(stoke_model *m, const void *buf, void *host, size_t bytes);
stoke_status stoke_model_write(stoke_model *m, void *buf, const void *host, size_t bytes);
/* Copies every parameter and buffer of `src` into `dst`, two models of one graph on
 * one device (the inference model taking the training model's weights), and refreshes
 * dst's low-precision copies. STOKE_ERR_ARG for models of two graphs or devices. */
stoke_status stoke_model_copy_params(stoke_model *dst, stoke_model *src);
/* Waits until the model's queued work is done; its first error if any (a device
 * model runs asynchronously, see stoke_model_forward). */
stoke_status stoke_model_sync(stoke_model *m);

/* A device model captures each forward and backward as a CUDA graph on the second call
 * with the same batch and mode (the first prepares what the ops cache), then replays
 * it: one launch instead of one per kernel and library call. The graphs captured so
 * far; *why (if not NULL) says why the model stopped capturing, "" while it captures
 * or on a backend without graphs (the CPU). */
int stoke_model_graphs(const stoke_model *m, const char **why);

/* The phases of a training step, timed on the clock of the device that runs them. */
typedef enum stoke_phase {
    STOKE_PHASE_START = 0, /* a step begins: ends no phase */
    STOKE_PHASE_INPUT,     /* the batch copied into the model (on a GPU: device copy) */
    STOKE_PHASE_FORWARD,
    STOKE_PHASE_BACKWARD,
    STOKE_PHASE_OPTIMIZER,
    STOKE_PHASE_COUNT
} stoke_phase;
/* Marks the end of phase p after the work asked for so far: on a GPU a timing event
 * on the model's stream (nothing waits), on the CPU the wall clock. The time from one
 * mark to the next is the later mark's phase. */
void stoke_model_mark(stoke_model *m, stoke_phase p);
/* Adds into sec[phase] the seconds of the phases completed since the last call (on a
 * GPU those whose events have completed; all of them when `wait`). Errors of the
 * device surface at the next sync. */
void stoke_model_phase_seconds(stoke_model *m, bool wait, double sec[STOKE_PHASE_COUNT]);

/* ---- Data parallel: the gradients' reduction (src/dist) ----------------------------
 * A reducer (stoke_dist.h's, or a test's) is handed the model's gradients in buckets
 * as they become final during backward, and is waited for before the optimizer step,
 * as PyTorch's DistributedDataParallel overlaps its all-reduce with the backward. */

/* Parameters whose gradients become final together. The model groups its trainable
 * parameters by its backward order (after which op each gradient is last written:
 * the last layers' first) into buckets of about the reducer's bucket_bytes; every
 * trainable parameter is in exactly one bucket. The pointers are the model's and stay
 * valid while the reducer is installed (device memory on a device). */
typedef struct stoke_grad_bucket {
    int index;           /* 0, 1, ...: the order the buckets become ready in */
    int count;           /* its parameters */
    const int *params;   /* their indices (stoke_model_param), in readiness order */
    float *const *grads; /* their gradients */
    const size_t *elems; /* floats in each */
    size_t bytes;        /* all of them: 4 x the sum of elems */
} stoke_grad_bucket;

/* What a reducer may do to the model's memory: the model's backend entries, each
 * queued in the model's order. stream: the queue the model's ops go on
 * (cudaStream_t) or NULL on the CPU, where work is done as called. A transport
 * enqueues its collective on stream (NCCL's all-reduce takes it), so the reduction is
 * ordered after the gradients it reads and before the step that reads its result,
 * with no host wait. */
typedef struct stoke_grad_ops {
    void *ctx; /* passed back to each entry */
    void *stream;
    void *(*alloc)(void *ctx, size_t bytes); /* the model's memory, zeroed; NULL: none */
    void (*free)(void *ctx, void *p);
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
} stoke_grad_ops;

/* The seam a data-parallel transport fills. The model copies the struct; self is the
 * reducer's own and must outlive the model's use of it. Each entry may be NULL.
 * On a device that captures graphs (stoke_model_graphs) reduce runs while the
 * backward is captured, once, and what it queued on stream is replayed with the
 * backward's graph: reduce must only queue work there (an NCCL all-reduce may be
 * captured), not do host work each step. finish runs on the host before every step,
 * outside the graphs: where a transport that cannot be captured does its work. */
typedef struct stoke_grad_reducer {
    void *self;
    size_t bucket_bytes; /* the buckets' target size; 0: 25 MiB (PyTorch DDP's) */
    /* Once, when installed: the model's buckets in readiness order (staging buffers
     * are made here, through ops). An error uninstalls it. */
    stoke_status (*prepare)(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b,
                            int n);
    /* During every backward (each micro-batch's, when gradients accumulate), as soon
     * as bucket b's gradients are final: reduces them in place (queued on ops->stream). */
    stoke_status (*reduce)(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b);
    /* Between the last backward and the optimizer step: every reduction complete
     * (on a device: queued on ops->stream, ahead of the step). */
    stoke_status (*finish)(void *self, const stoke_grad_ops *ops);
    /* When uninstalled or the model is freed: frees what prepare made. */
    void (*release)(void *self, const stoke_grad_ops *ops);
} stoke_grad_reducer;

/* Installs r (NULL: none, the default) on a training model, releasing the one before;
 * the captured graphs are dropped (the next backward captures with the reducer). With
 * none, backward and step run as without this seam. STOKE_ERR_ARG (an inference
 * model), STOKE_ERR_NOMEM, or prepare's error (nothing installed then). */
stoke_status stoke_model_set_reducer(stoke_model *m, const stoke_grad_reducer *r);
/* The buckets of the installed reducer (*out NULL and 0 when none). */
int stoke_model_buckets(const stoke_model *m, const stoke_grad_bucket **out);

/* ---- Presets --------------------------------------------------------------------
 * Each builds a whole graph with an input "x", a target "y", its loss and metrics,
 * and an output "logits" (or "policy" and "value"); see docs/nn.md for the layer
 * tables. On failure NULL, with the message in stoke_last_error(). */

/* Multi-layer perceptron: input (in) -> sizes[0] -> ReLU -> ... -> classes, with
 * cross-entropy on class targets (classes > 1) or MSE on one scalar (classes 1). */
stoke_graph *stoke_preset_mlp(const stoke_shape *input, const int64_t *hidden, int nhidden,
                              int64_t classes);
/* The reference CNN on (C, H, W) images (H, W divisible by 4): conv 3x3 32 (padding 1)
 * + ReLU + max-pool 2, conv 3x3 64 (padding 1) + ReLU + max-pool 2, linear 128 +
 * ReLU, linear to the classes. 28x28 -> 14x14 -> 7x7. classes 1: MSE regression. */
stoke_graph *stoke_preset_cnn(const stoke_shape *input, int64_t classes);
/* A small residual CNN: conv 3x3 `width` + BN + ReLU, then `blocks` basic blocks
 * (conv-BN-ReLU-conv-BN + identity, ReLU), every second block doubling the width
 * with stride 2 (and a 1x1 conv + BN shortcut), global average pool, linear. */
stoke_graph *stoke_preset_resnet(const stoke_shape *input, int64_t classes, int width, int blocks);
/* A pre-norm transformer encoder. Images (C, H, W) are patchified (patch > 0) and
 * projected to `hidden`; feature sequences (T, F) are projected; a learned position
 * table is added; then `layers` x [LN, attention(heads), residual, LN, linear 4h,
 * GELU, linear h, residual], a final LN, the mean over tokens, linear to classes. */
stoke_graph *stoke_preset_transformer(const stoke_shape *input, int patch, int64_t hidden,
                                      int layers, int heads, int64_t classes);
/* Actor-critic: a shared trunk (obs -> hidden[0] -> tanh -> ...), a policy head
 * (linear to `actions`, output "policy") and a value head (linear to 1, output
 * "value"). The target input "y" holds, per sample (opts->targets):
 *   0: an int32 action: behaviour cloning, loss "policy_loss" = cross-entropy, metric
 *      accuracy; the value head has no target and no loss;
 *   3: fp32 [action, advantage, return]: "policy_loss" = policy gradient
 *      (stoke_nn_policy_gradient, entropy bonus opts->entropy) + "value_loss" =
 *      0.5 x MSE(value, return), metric MAE(value, return);
 *   4: fp32 [action, advantage, old_log_prob, return]: the same with PPO's clipped
 *      surrogate, epsilon opts->clip (0: 0.2).
 * opts NULL is behaviour cloning. */
typedef struct stoke_actor_critic_opts {
    int targets;   /* 0, 3 or 4 values per sample, as above */
    float clip;    /* PPO epsilon in (0, 1) for targets 4; 0 means 0.2 */
    float entropy; /* entropy bonus coefficient, >= 0 (0: none) */
} stoke_actor_critic_opts;
stoke_graph *stoke_preset_actor_critic(const stoke_shape *obs, const int64_t *hidden, int nhidden,
                                       int64_t actions, const stoke_actor_critic_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
