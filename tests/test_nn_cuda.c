/* test_nn_cuda.c - the CUDA backend against the CPU backend, op by op and model by
 * model, without a GPU: the CUDA runtime, cuBLAS and cuDNN are the test doubles of
 * tests/fake (device memory is host memory, GEMMs and convolutions are loops that check
 * their arguments) and the kernels are their host build (STOKE_CUDA_KERNELS=host), the
 * same bodies nvcc compiles into libstoke_cuda.so. Each case builds a small graph
 * twice with one seed, so both models start from the same weights, feeds both the same
 * batches and compares losses, gradients and weights after a few optimizer steps.
 *
 * Tolerances: the two backends sum in different orders (cuBLAS's double-precision
 * double against oneDNN's fp32 blocking), so fp32 losses agree to ~1e-5 relative and
 * weights after steps to ~1e-4; bf16 operands are rounded identically on both sides,
 * but the sums they feed differ in order, so bf16 gets 1e-2.
 *
 * With --real (main) the same comparisons run on whatever the environment names: on a
 * GPU machine NVIDIA's libraries and libstoke_cuda.so, at the same tolerances (TF32 is
 * off for them: fp32 stays fp32), plus a pass of the fp32 cases on TF32 (TF32_TOL);
 * the tests that read the doubles' counters, log or clock say they are skipped. Each
 * case prints its verdict and the worst differences it saw. */
#include "check.h"
#include "core/precision.h"
#include "nn/cpu/conv.h"
#include "nn/cpu/eltwise.h"
#include "nn/cuda/k_pool.h"
#include "nn/cuda/ops.h"
#include "nn/cuda/seam.h"
#include "stoke/dist.h"
#include "stoke/hw.h"
#include "stoke/nn.h"

#include <math.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float rnd(void)
{ /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint32_t rndu(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)((rng >> 33) % n);
}

/* One comparison: a graph, how its int32 inputs are drawn, the model options. */
typedef struct cuda_case {
    const char *name;
    stoke_graph *(*build)(void);
    int32_t int_max; /* int32 inputs (classes, ids) are drawn from [0, int_max) */
    stoke_precision precision;
    stoke_optim optim;
    int64_t batch;
    int steps;
    double tol; /* relative, on losses, gradient norms, gradients and weights */
} cuda_case;

static double rel_err(double a, double b) { return fabs(a - b) / (fabs(b) > 1 ? fabs(b) : 1); }

/* The choices the contexts of this test's models run with (seam.h): fp32 products
 * (TF32 off, so the CUDA results are held to the CPU's fp32 tolerances) unless a test
 * lets the models' options decide, and the attention a test forces. */
static bool tf32_by_options;
static cuda_attention forced_attention = CUDA_ATTN_AUTO;

static void test_ctx_hook(const cuda_ctx *c, cuda_ctx_cfg *cfg)
{
    (void)c;
    if (!tf32_by_options)
        cfg->tf32 = false;
    cfg->attention = forced_attention;
}

/* A case's training model options on either backend. */
static stoke_model_opts opts_of(const cuda_case *c, bool cuda)
{
    stoke_model_opts o = {.max_batch = c->batch,
                          .precision = c->precision,
                          .training = true,
                          .seed = 7,
                          .optim = c->optim,
                          .threads = 1,
                          .cuda = cuda,
                          .cuda_device = 0};
    return o;
}

static stoke_model *make(const stoke_graph *g, const cuda_case *c, bool cuda)
{
    stoke_model_opts o = opts_of(c, cuda);
    stoke_model *m = NULL;
    stoke_status st = stoke_model_new(g, &o, &m);
    CHECK_MSG(st == STOKE_OK, "%s on %s: %s", c->name, cuda ? "cuda" : "cpu", stoke_last_error());
    return m;
}

/* Fills every input of both models with the same random batch. */
static void feed(stoke_model *cpu, stoke_model *gpu, const cuda_case *c)
{
    const stoke_graph *g = stoke_model_graph(cpu);
    for (int t = 0; t < stoke_graph_node_count(g); t++) {
        if (stoke_graph_node_op(g, t) != STOKE_NN_INPUT)
            continue;
        size_t n = (size_t)c->batch * (size_t)stoke_shape_elems(stoke_graph_shape(g, t));
        uint32_t *v = malloc(n * 4);
        const char *name = stoke_graph_node_name(g, t);
        size_t cols = (size_t)stoke_shape_elems(stoke_graph_shape(g, t));
        bool ints = strcmp(name, "y") == 0 ? c->int_max > 0 : strcmp(name, "ids") == 0;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(name, "pg") == 0) { /* [action, advantage(, old log-prob)] */
                float f = i % cols == 0   ? (float)rndu((uint32_t)c->int_max)
                          : i % cols == 1 ? rnd()
                                          : -logf((float)c->int_max) + 0.5f * rnd();
                memcpy(&v[i], &f, 4);
            } else if (ints) {
                v[i] = rndu((uint32_t)c->int_max);
            } else {
                float f = rnd();
                memcpy(&v[i], &f, 4);
            }
        }
        CHECK(stoke_model_set_input(cpu, t, v, n * 4) == STOKE_OK);
        CHECK(stoke_model_set_input(gpu, t, v, n * 4) == STOKE_OK);
        free(v);
    }
}

/* The largest relative difference between a buffer of each model. */
static double diff(stoke_model *cpu, const float *a, stoke_model *gpu, const float *b, size_t n)
{
    float *ha = malloc(n * 4), *hb = malloc(n * 4);
    CHECK(stoke_model_read(cpu, a, ha, n * 4) == STOKE_OK);
    CHECK(stoke_model_read(gpu, b, hb, n * 4) == STOKE_OK);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(ha[i]));
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)ha[i] - hb[i]) / (scale > 1e-3 ? scale : 1e-3));
    free(ha);
    free(hb);
    return worst;
}

/* A forward in eval mode on a fresh batch: dropout off, batch norm on its running
 * statistics, where the two modes differ. The loss's relative difference. */
static double compare_eval(stoke_model *cpu, stoke_model *gpu, const cuda_case *c)
{
    feed(cpu, gpu, c);
    CHECK(stoke_model_forward(cpu, c->batch, false) == STOKE_OK);
    stoke_status st = stoke_model_forward(gpu, c->batch, false);
    CHECK_MSG(st == STOKE_OK, "%s eval: %s", c->name, stoke_last_error());
    double lc = stoke_model_loss(cpu), lg = stoke_model_loss(gpu);
    CHECK_MSG(rel_err(lg, lc) <= c->tol, "%s eval: loss cuda %.9g, cpu %.9g", c->name, lg, lc);
    return rel_err(lg, lc);
}

/* The largest relative differences a case saw, printed with its verdict: how far off
 * a failing run on a GPU was. */
typedef struct case_worst {
    double loss, norm, grads, weights; /* norm: the gradient norm */
} case_worst;

/* Every gradient of step s (the first step's ops run as they are, the last's replay a
 * captured graph: by then the weights may differ as much as after training); only
 * measured when `measured` (tf32_pass). */
static void compare_grads(stoke_model *cpu, stoke_model *gpu, const cuda_case *c, int s,
                          bool measured, case_worst *w)
{
    const stoke_graph *g = stoke_model_graph(cpu);
    double gtol = measured ? INFINITY : s == 0 ? c->tol : 10 * c->tol;
    for (int i = 0; i < stoke_graph_param_count(g); i++) {
        const float *ga = stoke_model_grad(cpu, i), *gb = stoke_model_grad(gpu, i);
        if (!ga)
            continue;
        double d = diff(cpu, ga, gpu, gb, (size_t)stoke_graph_param(g, i)->elems);
        w->grads = fmax(w->grads, d);
        CHECK_MSG(d <= gtol, "%s step %d: gradient of %s differs by %.3g", c->name, s,
                  stoke_graph_param(g, i)->name, d);
    }
}

/* Trains both models c->steps steps on the same batches, comparing as it goes, then
 * evaluates and compares the weights (gradients and weights only measured when
 * `measured`). */
static void train_both(stoke_model *cpu, stoke_model *gpu, const cuda_case *c, bool measured,
                       case_worst *w)
{
    const stoke_graph *g = stoke_model_graph(cpu);
    for (int s = 0; s < c->steps; s++) {
        feed(cpu, gpu, c);
        CHECK(stoke_model_forward(cpu, c->batch, true) == STOKE_OK);
        stoke_status st = stoke_model_forward(gpu, c->batch, true);
        CHECK_MSG(st == STOKE_OK, "%s: %s", c->name, stoke_last_error());
        double lc = stoke_model_loss(cpu), lg = stoke_model_loss(gpu);
        w->loss = fmax(w->loss, rel_err(lg, lc));
        CHECK_MSG(rel_err(lg, lc) <= c->tol, "%s step %d: loss cuda %.9g, cpu %.9g", c->name, s, lg,
                  lc);
        CHECK(stoke_model_backward(cpu) == STOKE_OK);
        st = stoke_model_backward(gpu);
        CHECK_MSG(st == STOKE_OK, "%s: %s", c->name, stoke_last_error());
        if (s == 0 || s == c->steps - 1)
            compare_grads(cpu, gpu, c, s, measured, w);
        /* a new learning rate at every step: replays must take each step's own */
        double lr = 0.05 * (1.0 - 0.1 * s);
        CHECK(stoke_model_step(cpu, lr, 1, NULL) == STOKE_OK);
        st = stoke_model_step(gpu, lr, 1, NULL);
        CHECK_MSG(st == STOKE_OK, "%s: %s", c->name, stoke_last_error());
        double dn = rel_err(stoke_model_grad_norm(gpu), stoke_model_grad_norm(cpu));
        w->norm = fmax(w->norm, dn);
        CHECK_MSG(dn <= c->tol, "%s: gradient norm cuda %.9g, cpu %.9g", c->name,
                  stoke_model_grad_norm(gpu), stoke_model_grad_norm(cpu));
    }
    /* the second step on captured graphs (forward, backward, the optimizer's updates):
     * cuBLAS, cuDNN and the kernels all capturable */
    const char *why = NULL;
    int graphs = stoke_model_graphs(gpu, &why);
    CHECK_MSG(c->steps < 2 || (graphs == 3 && !*why), "%s: %d graphs (%s)", c->name, graphs, why);
    w->loss = fmax(w->loss, compare_eval(cpu, gpu, c));
    for (int i = 0; i < stoke_graph_param_count(g); i++) {
        double d = diff(cpu, stoke_model_param(cpu, i), gpu, stoke_model_param(gpu, i),
                        (size_t)stoke_graph_param(g, i)->elems);
        w->weights = fmax(w->weights, d);
        CHECK_MSG(measured || d <= 10 * c->tol, "%s: %s after %d steps differs by %.3g", c->name,
                  stoke_graph_param(g, i)->name, c->steps, d);
    }
}

/* Runs case c, holding its losses, gradient norms, gradients and weights to its
 * tolerance (only the losses and norms when `measured`: tf32_pass), and prints its
 * verdict with the worst differences. */
static void run_case_held(const cuda_case *c, bool measured)
{
    /* each case's inputs from its name: adding a case changes no other's */
    rng = 0x9E3779B97F4A7C15ull;
    for (const char *p = c->name; *p; p++)
        rng = (rng ^ (unsigned char)*p) * 0x100000001B3ull;
    rng |= 1;
    int failures = check_failures;
    stoke_graph *g = c->build();
    CHECK_MSG(stoke_graph_status(g) == STOKE_OK, "%s: %s", c->name, stoke_last_error());
    stoke_model *cpu = make(g, c, false), *gpu = make(g, c, true);
    case_worst w = {0};
    if (cpu && gpu) {
        train_both(cpu, gpu, c, measured, &w);
        printf("%-4s %s: loss %.1e, grad norm %.1e, grads %.1e, weights %.1e (tol %.0e%s)\n",
               check_failures == failures ? "ok" : "FAIL", c->name, w.loss, w.norm, w.grads,
               w.weights, c->tol, measured ? " on losses and norms" : ", x10 after steps");
    } else {
        printf("FAIL %s: no model\n", c->name);
    }
    fflush(stdout);
    stoke_model_free(cpu);
    stoke_model_free(gpu);
    stoke_graph_free(g);
}

static void run_case(const cuda_case *c) { run_case_held(c, false); }

/* ---- graphs ---- */

static stoke_graph *mlp(void)
{
    stoke_shape in = {.ndim = 1, .dims = {37}};
    int64_t hidden[2] = {64, 48};
    return stoke_preset_mlp(&in, hidden, 2, 10);
}

/* x (5, 12) -> layernorm -> dropout -> gelu -> seq_mean -> MSE: stoke's own kernels
 * only (no cuBLAS or cuDNN call), dropout's mask new at every forward */
static stoke_graph *kernels_only(void)
{
    stoke_graph *g = stoke_graph_new("kernels_only");
    stoke_shape xs = {.ndim = 2, .dims = {5, 12}}, ys = {.ndim = 1, .dims = {12}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_layernorm(g, "ln", x, 1e-5f);
    h = stoke_nn_dropout(g, h, 0.3f);
    h = stoke_nn_gelu(g, h);
    stoke_nn_mse(g, stoke_nn_seq_mean(g, h), y);
    return g;
}

/* x (3, 37) -> linear over the last dim, no bias -> flatten -> linear -> MSE */
static stoke_graph *linear_3d(void)
{
    stoke_graph *g = stoke_graph_new("linear_3d");
    stoke_shape xs = {.ndim = 2, .dims = {3, 37}}, ys = {.ndim = 1, .dims = {5}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_linear(g, "fc1", x, 16, false);
    h = stoke_nn_flatten(g, h);
    h = stoke_nn_linear(g, "fc2", h, 5, true);
    stoke_nn_mse(g, h, y);
    return g;
}

/* ---- element-wise and sequence ops ---- */

/* ids (11) -> embedding -> pos_embed -> gelu -> + itself through a linear (add) ->
 * seq_mean -> linear -> CE; a transformer's glue without attention. ids and classes
 * share [0, 7), so ids repeat within and across samples. */
static stoke_graph *seq_chain(void)
{
    stoke_graph *g = stoke_graph_new("seq_chain");
    stoke_shape ids_s = {.ndim = 1, .dims = {11}}, ys = {.ndim = 0};
    stoke_tensor ids = stoke_nn_input(g, "ids", STOKE_I32, &ids_s);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor h = stoke_nn_embedding(g, "emb", ids, 7, 13);
    h = stoke_nn_pos_embed(g, "pos", h);
    h = stoke_nn_gelu(g, h);
    h = stoke_nn_add(g, h, stoke_nn_linear(g, "mix", h, 13, true));
    h = stoke_nn_seq_mean(g, h);
    stoke_nn_cross_entropy(g, stoke_nn_linear(g, "head", h, 7, true), y, 0.1f);
    return g;
}

/* x (36, 8) -> pos_embed (so patchify's input has a gradient) -> (3, 12, 8) ->
 * patchify 4 -> linear -> tanh -> seq_mean -> linear -> CE */
static stoke_graph *image_chain(void)
{
    stoke_graph *g = stoke_graph_new("image_chain");
    stoke_shape xs = {.ndim = 2, .dims = {36, 8}}, ys = {.ndim = 0};
    stoke_shape img = {.ndim = 3, .dims = {3, 12, 8}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor h = stoke_nn_reshape(g, stoke_nn_pos_embed(g, "pos", x), &img);
    h = stoke_nn_patchify(g, h, 4);
    h = stoke_nn_tanh(g, stoke_nn_linear(g, "proj", h, 10, true));
    h = stoke_nn_seq_mean(g, h);
    stoke_nn_cross_entropy(g, stoke_nn_linear(g, "head", h, 5, true), y, 0.0f);
    return g;
}

/* The actor-critic's use: one target y (6) split by slice into two heads' targets, and
 * a slice of the trunk feeding one head (a slice with a gradient). */
static stoke_graph *slice_heads(void)
{
    stoke_graph *g = stoke_graph_new("slice_heads");
    stoke_shape xs = {.ndim = 1, .dims = {19}}, ys = {.ndim = 1, .dims = {6}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_relu(g, stoke_nn_linear(g, "trunk", x, 24, true));
    stoke_tensor pi = stoke_nn_linear(g, "policy", stoke_nn_slice(g, h, 3, 17), 4, true);
    stoke_nn_mse(g, pi, stoke_nn_slice(g, y, 0, 4));
    stoke_nn_mse(g, stoke_nn_linear(g, "value", h, 2, true), stoke_nn_slice(g, y, 4, 6));
    return g;
}

/* x (32) -> linear -> dropout -> + the linear's output (both gradients) -> + x (a data
 * input: no gradient) -> gelu -> dropout -> dropout p = 0 (a copy) -> linear -> CE */
static stoke_graph *dropout_chain(void)
{
    stoke_graph *g = stoke_graph_new("dropout_chain");
    stoke_shape xs = {.ndim = 1, .dims = {32}}, ys = {.ndim = 0};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor h = stoke_nn_linear(g, "fc1", x, 32, true);
    h = stoke_nn_add(g, stoke_nn_dropout(g, h, 0.3f), h);
    h = stoke_nn_gelu(g, stoke_nn_add(g, x, h));
    h = stoke_nn_dropout(g, stoke_nn_dropout(g, h, 0.5f), 0.0f);
    stoke_nn_cross_entropy(g, stoke_nn_linear(g, "fc2", h, 6, true), y, 0.0f);
    return g;
}

/* x (13) -> linear -> sigmoid -> linear -> BCE with logits */
static stoke_graph *sigmoid_bce(void)
{
    stoke_graph *g = stoke_graph_new("sigmoid_bce");
    stoke_shape xs = {.ndim = 1, .dims = {13}}, ys = {.ndim = 1, .dims = {4}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_sigmoid(g, stoke_nn_linear(g, "fc1", x, 9, true));
    stoke_nn_bce_logits(g, stoke_nn_linear(g, "fc2", h, 4, true), y);
    return g;
}

/* x (3, 17) -> linear over the last dim -> softmax over it -> flatten -> linear -> MSE */
static stoke_graph *softmax_rows(void)
{
    stoke_graph *g = stoke_graph_new("softmax_rows");
    stoke_shape xs = {.ndim = 2, .dims = {3, 17}}, ys = {.ndim = 1, .dims = {5}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_softmax(g, stoke_nn_linear(g, "fc1", x, 9, true));
    stoke_nn_mse(g, stoke_nn_linear(g, "fc2", stoke_nn_flatten(g, h), 5, true), y);
    return g;
}

/* x (5, 12) -> linear -> layernorm -> attention (4 heads) -> layernorm -> linear
 * [-> relu] -> flatten -> linear -> cross-entropy: the transformer preset's ops this
 * branch has, every one with an input gradient. */
static stoke_graph *attn_graph(bool relu)
{
    stoke_graph *g = stoke_graph_new("attn_block");
    stoke_shape xs = {.ndim = 2, .dims = {5, 12}}, ys = {0};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor h = stoke_nn_linear(g, "embed", x, 16, true);
    h = stoke_nn_layernorm(g, "ln1", h, 1e-5f);
    h = stoke_nn_attention(g, "attn", h, 4);
    h = stoke_nn_layernorm(g, "ln2", h, 1e-5f);
    h = stoke_nn_linear(g, "fc", h, 16, true);
    if (relu)
        h = stoke_nn_relu(g, h);
    h = stoke_nn_linear(g, "head", stoke_nn_flatten(g, h), 7, true);
    stoke_nn_cross_entropy(g, h, y, 0.0f);
    return g;
}

static stoke_graph *attn_block(void) { return attn_graph(true); }
/* bf16: the CPU runs attention in fp32, so a relu behind it would flip the units its
 * bf16 rounding moves across zero, and those flips, not the kernels, would dominate
 * the comparison (0.4 of a gradient measured, against 0.014 without the relu). */
static stoke_graph *attn_block_smooth(void) { return attn_graph(false); }

/* Attention and layer norm straight on the data (no input gradients), one head,
 * odd sizes: x (6, 9) -> attention -> flatten -> linear -> MSE; x2 (11) ->
 * layernorm -> linear -> MSE. */
static stoke_graph *attn_on_data(void)
{
    stoke_graph *g = stoke_graph_new("attn_on_data");
    stoke_shape xs = {.ndim = 2, .dims = {6, 9}}, x2s = {.ndim = 1, .dims = {11}};
    stoke_shape ys = {.ndim = 1, .dims = {3}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor x2 = stoke_nn_input(g, "x2", STOKE_F32, &x2s);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_attention(g, "attn", x, 1);
    stoke_nn_mse(g, stoke_nn_linear(g, "fc", stoke_nn_flatten(g, h), 3, true), y);
    h = stoke_nn_layernorm(g, "ln", x2, 1e-5f);
    stoke_nn_mse(g, stoke_nn_linear(g, "fc2", h, 3, true), y);
    return g;
}

/* A sequence long enough for the fused attention to be chosen by itself
 * (CUDA_ATTN_FUSED_FROM_T), small elsewhere: x (T, 6) -> linear -> layernorm ->
 * attention (2 heads of 8) -> layernorm -> seq_mean -> linear -> cross-entropy. */
static stoke_graph *attn_seq(int64_t T, int64_t heads)
{
    stoke_graph *g = stoke_graph_new("attn_long");
    stoke_shape xs = {.ndim = 2, .dims = {T, 6}}, ys = {0};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor h = stoke_nn_linear(g, "embed", x, 16, true);
    h = stoke_nn_layernorm(g, "ln1", h, 1e-5f);
    h = stoke_nn_attention(g, "attn", h, heads);
    h = stoke_nn_layernorm(g, "ln2", h, 1e-5f);
    h = stoke_nn_linear(g, "head", stoke_nn_seq_mean(g, h), 5, true);
    stoke_nn_cross_entropy(g, h, y, 0.0f);
    return g;
}

static stoke_graph *attn_long(void) { return attn_seq(CUDA_ATTN_FUSED_FROM_T, 2); }

/* The resnet-ish block without convolutions: batch norm 2d on the data (3, 4, 5),
 * batch norm 1d after a linear, batch norm 2d after a linear reshaped to (3, 4, 4). */
static stoke_graph *bn_block(void)
{
    stoke_graph *g = stoke_graph_new("bn_block");
    stoke_shape xs = {.ndim = 3, .dims = {3, 4, 5}}, ys = {0};
    stoke_shape img = {.ndim = 3, .dims = {3, 4, 4}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor h = stoke_nn_batchnorm(g, "bn0", x, 0.1f, 1e-5f);
    h = stoke_nn_linear(g, "fc1", stoke_nn_flatten(g, h), 24, true);
    h = stoke_nn_relu(g, stoke_nn_batchnorm(g, "bn1", h, 0.1f, 1e-5f));
    h = stoke_nn_reshape(g, stoke_nn_linear(g, "fc2", h, 48, true), &img);
    h = stoke_nn_relu(g, stoke_nn_batchnorm(g, "bn2", h, 0.3f, 1e-3f));
    h = stoke_nn_linear(g, "head", stoke_nn_flatten(g, h), 10, true);
    stoke_nn_cross_entropy(g, h, y, 0.0f);
    return g;
}

/* The actor-critic preset's losses with the policy target fed directly (no slice):
 * "pg" holds [action, advantage] or [action, advantage, old log-prob]. */
static stoke_graph *actor_critic(int cols, float clip, float entropy)
{
    stoke_graph *g = stoke_graph_new("actor_critic");
    stoke_shape xs = {.ndim = 1, .dims = {11}}, ts = {.ndim = 1, .dims = {cols}};
    stoke_shape ys = {.ndim = 1, .dims = {1}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor t = stoke_nn_input(g, "pg", STOKE_F32, &ts);
    stoke_tensor y = stoke_nn_input(g, "ret", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_relu(g, stoke_nn_linear(g, "trunk", x, 16, true));
    stoke_nn_policy_gradient(g, stoke_nn_linear(g, "policy", h, 5, true), t, clip, entropy);
    stoke_tensor vl = stoke_nn_mse(g, stoke_nn_linear(g, "value", h, 1, true), y);
    stoke_nn_loss_weight(g, vl, 0.5f);
    return g;
}

static stoke_graph *a2c(void) { return actor_critic(2, 0.0f, 0.01f); }
static stoke_graph *ppo(void) { return actor_critic(3, 0.2f, 0.05f); }

/* The reference CNN (conv-relu-maxpool 2x2 twice, then two linears) on 1x28x28:
 * ReLU's zeros make max-pool windows tie. */
static stoke_graph *cnn(void)
{
    stoke_shape in = {.ndim = 3, .dims = {1, 28, 28}};
    return stoke_preset_cnn(&in, 10);
}

/* conv stride 2, padding 1, no bias on an odd, non-square image; relu then an
 * overlapping padded max-pool (3x3, stride 2, padding 1): inputs under several
 * windows, windows clipped by the padding, ties between ReLU's zeros. */
static stoke_graph *conv_s2(void)
{
    stoke_graph *g = stoke_graph_new("conv_s2");
    stoke_shape xs = {.ndim = 3, .dims = {3, 11, 9}}, ys = {.ndim = 0};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor h = stoke_nn_conv2d(g, "conv", x, 5, 3, 2, 1, false);
    h = stoke_nn_maxpool2d(g, stoke_nn_relu(g, h), 3, 2, 1);
    h = stoke_nn_linear(g, "fc", stoke_nn_flatten(g, h), 4, true);
    stoke_nn_cross_entropy(g, h, y, 0.0f);
    return g;
}

/* conv with bias (kernel 2, no padding) -> avgpool 3x3, stride 2, padding 1 (count
 * include pad: edge windows divide by 9) -> linear -> MSE */
static stoke_graph *avgpool_pad(void)
{
    stoke_graph *g = stoke_graph_new("avgpool_pad");
    stoke_shape xs = {.ndim = 3, .dims = {2, 10, 7}}, ys = {.ndim = 1, .dims = {3}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_conv2d(g, "conv", x, 4, 2, 1, 0, true);
    h = stoke_nn_avgpool2d(g, h, 3, 2, 1);
    h = stoke_nn_linear(g, "fc", stoke_nn_flatten(g, h), 3, true);
    stoke_nn_mse(g, h, y);
    return g;
}

/* conv 5x5 padding 2 -> relu -> global average pool -> linear head */
static stoke_graph *gap_head(void)
{
    stoke_graph *g = stoke_graph_new("gap_head");
    stoke_shape xs = {.ndim = 3, .dims = {3, 9, 13}}, ys = {.ndim = 0};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor h = stoke_nn_relu(g, stoke_nn_conv2d(g, "conv", x, 6, 5, 1, 2, true));
    h = stoke_nn_linear(g, "fc", stoke_nn_global_avgpool(g, h), 5, true);
    stoke_nn_cross_entropy(g, h, y, 0.0f);
    return g;
}

/* One activation read by two convolutions (stride 1 and stride 2), each with a head of
 * its own (two losses): the second backward must add to the first's input gradient. */
static stoke_graph *conv_fanout(void)
{
    stoke_graph *g = stoke_graph_new("conv_fanout");
    stoke_shape xs = {.ndim = 3, .dims = {4, 8, 7}}, ys = {.ndim = 0},
                ts = {.ndim = 1, .dims = {2}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor t = stoke_nn_input(g, "t", STOKE_F32, &ts);
    stoke_tensor h = stoke_nn_relu(g, stoke_nn_conv2d(g, "conv0", x, 6, 3, 1, 1, true));
    stoke_tensor a = stoke_nn_conv2d(g, "conv_a", h, 5, 3, 1, 0, true);
    a = stoke_nn_linear(g, "fc_a", stoke_nn_global_avgpool(g, a), 3, true);
    stoke_nn_cross_entropy(g, a, y, 0.1f);
    stoke_tensor b = stoke_nn_conv2d(g, "conv_b", h, 4, 2, 2, 1, false);
    b = stoke_nn_linear(g, "fc_b", stoke_nn_flatten(g, b), 2, false);
    stoke_nn_mse(g, b, t);
    return g;
}

/* Macros, not const objects: C11 does not make a const object a constant initializer
 * (GCC accepts it, clang does not). */
#define SGD                                                        \
    {                                                              \
        .kind = STOKE_SGD, .momentum = 0.9f, .weight_decay = 1e-4f \
    }
#define NESTEROV                                              \
    {                                                         \
        .kind = STOKE_SGD, .momentum = 0.9f, .nesterov = true \
    }
#define ADAMW                                                         \
    {                                                                 \
        .kind = STOKE_ADAMW, .weight_decay = 0.01f, .clip_norm = 0.5f \
    }

static const cuda_case cases[] = {
    {"mlp fp32 sgd", mlp, 10, STOKE_PREC_FP32, SGD, 32, 3, 1e-4},
    {"mlp fp32 nesterov", mlp, 10, STOKE_PREC_FP32, NESTEROV, 17, 3, 1e-4},
    {"mlp fp32 adamw clipped", mlp, 10, STOKE_PREC_FP32, ADAMW, 32, 3, 1e-4},
    {"mlp bf16", mlp, 10, STOKE_PREC_BF16, SGD, 32, 3, 2e-2},
    {"mlp fp16", mlp, 10, STOKE_PREC_FP16, SGD, 32, 2, 2e-2},
    {"linear 3d mse", linear_3d, 0, STOKE_PREC_FP32, SGD, 9, 3, 1e-4},
    {"seq embedding gelu ce", seq_chain, 7, STOKE_PREC_FP32, SGD, 7, 3, 1e-4},
    {"seq embedding gelu ce adamw", seq_chain, 7, STOKE_PREC_FP32, ADAMW, 33, 2, 1e-4},
    {"seq embedding gelu ce bf16", seq_chain, 7, STOKE_PREC_BF16, SGD, 9, 2, 2e-2},
    {"image patchify tanh ce", image_chain, 5, STOKE_PREC_FP32, SGD, 7, 3, 1e-4},
    {"image patchify tanh ce bf16", image_chain, 5, STOKE_PREC_BF16, SGD, 9, 2, 2e-2},
    {"slice heads mse", slice_heads, 0, STOKE_PREC_FP32, NESTEROV, 33, 3, 1e-4},
    {"dropout add gelu ce", dropout_chain, 6, STOKE_PREC_FP32, SGD, 33, 4, 1e-4},
    {"sigmoid bce", sigmoid_bce, 0, STOKE_PREC_FP32, SGD, 17, 3, 1e-4},
    {"softmax rows mse", softmax_rows, 0, STOKE_PREC_FP32, SGD, 7, 3, 1e-4},
    {"attention fp32", attn_block, 7, STOKE_PREC_FP32, SGD, 7, 3, 1e-4},
    {"attention fp32 nesterov", attn_block, 7, STOKE_PREC_FP32, NESTEROV, 33, 2, 1e-4},
    {"attention bf16", attn_block_smooth, 7, STOKE_PREC_BF16, SGD, 7, 3, 2e-2},
    {"attention on data bf16", attn_on_data, 0, STOKE_PREC_BF16, SGD, 9, 3, 2e-2},
    {"attention fp16", attn_block_smooth, 7, STOKE_PREC_FP16, SGD, 7, 2, 2e-2},
    {"attention on data", attn_on_data, 0, STOKE_PREC_FP32, SGD, 5, 3, 1e-4},
    {"attention long", attn_long, 5, STOKE_PREC_FP32, SGD, 3, 2, 1e-4},
    {"attention long bf16", attn_long, 5, STOKE_PREC_BF16, SGD, 3, 2, 2e-2},
    {"batchnorm fp32", bn_block, 10, STOKE_PREC_FP32, SGD, 33, 3, 1e-4},
    /* 3 values a channel: batch norm's input gradient nearly cancels, so the two
     * backends' rounding shows in what is left (1.5e-4 measured in the ASan build,
     * whose -O2 contracts other multiply-adds than Release's -O3) */
    {"batchnorm fp32 small batch", bn_block, 10, STOKE_PREC_FP32, NESTEROV, 3, 3, 1e-3},
    {"policy gradient a2c", a2c, 5, STOKE_PREC_FP32, SGD, 13, 3, 1e-4},
    {"policy gradient ppo", ppo, 5, STOKE_PREC_FP32, ADAMW, 13, 3, 1e-4},
    {"cnn fp32", cnn, 10, STOKE_PREC_FP32, SGD, 5, 3, 1e-4},
    /* The CPU backend's bf16 first layer (1 input channel) depends on the CPU: fp32 math
     * in its fused block with AVX-512, rounded operands below (STOKE_MAX_CPU_ISA=avx2:
     * gradients 7% to 13% apart on three different inputs, measured, the second layer's
     * through ReLU and max-pool choices that flip); the GPU keeps fp32 there, so the
     * tolerance covers both CPUs' choice and still fails a wrong term (a wrong
     * convolution gradient is off by its whole size) */
    {"cnn bf16", cnn, 10, STOKE_PREC_BF16, SGD, 5, 3, 2e-1},
    {"conv stride 2 fp32", conv_s2, 4, STOKE_PREC_FP32, NESTEROV, 7, 3, 1e-4},
    {"conv stride 2 bf16", conv_s2, 4, STOKE_PREC_BF16, SGD, 7, 3, 2e-2},
    {"conv stride 2 fp16", conv_s2, 4, STOKE_PREC_FP16, SGD, 7, 2, 2e-2},
    {"avgpool padding fp32", avgpool_pad, 0, STOKE_PREC_FP32, ADAMW, 7, 3, 1e-4},
    {"avgpool padding bf16", avgpool_pad, 0, STOKE_PREC_BF16, SGD, 7, 3, 2e-2},
    {"global avgpool head fp32", gap_head, 5, STOKE_PREC_FP32, SGD, 33, 3, 1e-4},
    {"conv fan-out fp32", conv_fanout, 3, STOKE_PREC_FP32, SGD, 11, 3, 1e-4},
    {"conv fan-out bf16", conv_fanout, 3, STOKE_PREC_BF16, SGD, 11, 3, 2e-2},
    /* last: the cases above keep their random inputs */
    {"kernels only fp32", kernels_only, 0, STOKE_PREC_FP32, SGD, 6, 4, 1e-4},
};

/* An attention case again with the other attention forced (seam.h's hook, taken by
 * the contexts its models create): the fused kernels at the short sequences, the GEMM
 * path at the long ones (named "long"), which choose the other by themselves. */
static void run_forced(const cuda_case *c)
{
    bool long_seq = strstr(c->name, "long") != NULL;
    char name[128];
    snprintf(name, sizeof name, "%s, %s forced", c->name, long_seq ? "GEMM" : "fused");
    cuda_case f = *c;
    f.name = name;
    forced_attention = long_seq ? CUDA_ATTN_GEMM : CUDA_ATTN_FUSED;
    run_case(&f);
    forced_attention = CUDA_ATTN_AUTO;
}

/* ---- the device and its errors ---- */

/* The doubles, which the test loads too to read their counters, call log and clock;
 * all NULL in real mode (main), whose libraries are whatever the environment names. */
static struct {
    void *rt, *blas, *lt, *dnn;
} doubles;

/* The caller's value of an environment variable (a copy; NULL: unset), put back by
 * env_restore after a test points the variable elsewhere. */
static char *env_save(const char *name)
{
    const char *v = getenv(name);
    return v ? strdup(v) : NULL;
}

static void env_restore(const char *name, char *saved)
{
    if (saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
}

/* What the user reads when the backend cannot run: no such device, no kernels, no
 * cuBLAS; then a model runs and refuses an input larger than its own. */
static void test_unavailable(void)
{
    stoke_graph *g = mlp();
    stoke_model_opts o = {.max_batch = 4, .training = true, .cuda = true, .cuda_device = 99};
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(stoke_last_error(), "CUDA device 99 does not exist") != NULL, "%s",
              stoke_last_error());
    char *kernels = env_save("STOKE_CUDA_KERNELS");
    setenv("STOKE_CUDA_KERNELS", "/nonexistent/libstoke_cuda.so", 1);
    o.cuda_device = 0;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(stoke_last_error(), "/nonexistent/libstoke_cuda.so") != NULL, "%s",
              stoke_last_error());
    env_restore("STOKE_CUDA_KERNELS", kernels);
    char *blas = env_save("STOKE_CUBLAS_LIBRARY");
    setenv("STOKE_CUBLAS_LIBRARY", "/nonexistent/libcublas.so.13", 1);
    CHECK(stoke_model_new(g, &o, &m) == STOKE_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(stoke_last_error(), "libcublas") != NULL, "%s", stoke_last_error());
    env_restore("STOKE_CUBLAS_LIBRARY", blas);
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    CHECK(stoke_model_on_device(m));
    CHECK(strstr(stoke_model_device_name(m), "fused attention from sequence length") != NULL);
    /* an input larger than the model's is refused, naming it */
    static float big[4 * 37 + 1];
    CHECK(stoke_model_set_input(m, stoke_graph_find(g, "x"), big, sizeof big) == STOKE_ERR_ARG);
    CHECK(strstr(stoke_last_error(), "x") != NULL);
    stoke_model_free(m);
    stoke_graph_free(g);
}

/* On the doubles a model says so: the scenario's H100 and the kernels' host build. */
static void test_device_of_doubles(void)
{
    stoke_graph *g = mlp();
    stoke_model_opts o = {.max_batch = 4, .training = true, .cuda = true};
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    if (m) {
        CHECK_STR_CONTAINS(stoke_model_device_name(m), "compute capability 9.0");
        CHECK_STR_CONTAINS(stoke_model_device_name(m), "kernels: host");
    }
    stoke_model_free(m);
    stoke_graph_free(g);
}

/* Which attention runs and what it costs: from CUDA_ATTN_FUSED_FROM_T the automatic
 * choice is the fused path, whose saved state and workspace are exactly its layouts'
 * (attn.c), linear in T where the GEMM path's hold H T^2 floats a sample; the model's
 * plan shows the difference, so the plan and the ops agree on the path. */
static const nn_node *attn_node(const stoke_graph *g)
{
    for (int t = 0; t < stoke_graph_node_count(g); t++)
        if (stoke_graph_node_op(g, t) == STOKE_NN_ATTENTION)
            return nn_graph_node(g, t);
    return NULL;
}

static void test_attn_choice(void)
{
    const int64_t T = CUDA_ATTN_FUSED_FROM_T, C = 16, H = 2, B = 3;
    stoke_graph *g = attn_long(), *gs = attn_seq(T - 1, 2);
    const nn_node *n = attn_node(g), *ns = attn_node(gs);
    cuda_ctx *c = NULL;
    CHECK_MSG(cuda_ctx_new(0, STOKE_TF32_OFF, &c) == STOKE_OK, "%s", stoke_last_error());
    CHECK(n && ns);
    if (!c || !n || !ns) {
        stoke_graph_free(g);
        stoke_graph_free(gs);
        return;
    }
    CHECK(cuda_attn_fused(c, T, C / H) && !cuda_attn_fused(c, T - 1, C / H));
    CHECK(!cuda_attn_fused(c, 4 * T, NK_ATTN_MAX_HS + 1)); /* left to the GEMMs */
    CHECK_MSG(strstr(c->why, "fused attention from sequence length 128"), "%s", c->why);
    size_t fused = (size_t)(4 * T * C + H * T) * 4, gemm = (size_t)(4 * T * C + H * T * T) * 4;
    size_t ws = 0, fused_ws = (size_t)(4 * B * T * C + B * H * T) * 4;
    CHECK(cuda_attn_saved(c, g, n) == fused);
    CHECK(cuda_attn_ws(c, g, n, B, STOKE_PREC_FP32, &ws) == STOKE_OK && ws == fused_ws);
    CHECK(cuda_attn_ws(c, g, n, B, STOKE_PREC_BF16, &ws) == STOKE_OK &&
          ws == fused_ws + (size_t)(4 * B * T * C) * 2);
    CHECK(cuda_attn_saved(c, gs, ns) == (size_t)(4 * (T - 1) * C + H * (T - 1) * (T - 1)) * 4);
    cuda_ctx_set_attention(c, CUDA_ATTN_GEMM);
    CHECK(cuda_attn_saved(c, g, n) == gemm && fused < gemm);
    CHECK(cuda_attn_ws(c, g, n, B, STOKE_PREC_FP32, &ws) == STOKE_OK && ws > fused_ws);
    CHECK_MSG(strstr(c->why, "GEMM attention"), "%s", c->why);
    cuda_ctx_set_attention(c, CUDA_ATTN_FUSED);
    CHECK(cuda_attn_saved(c, gs, ns) == (size_t)(4 * (T - 1) * C + H * (T - 1)) * 4);
    cuda_ctx_free(c);

    /* the model's plan, per choice: auto = fused, and the GEMM path's probabilities */
    stoke_model_opts o = {.max_batch = B, .training = true, .cuda = true};
    const cuda_attention modes[3] = {CUDA_ATTN_AUTO, CUDA_ATTN_FUSED, CUDA_ATTN_GEMM};
    stoke_mem_plan p[3];
    for (int k = 0; k < 3; k++) {
        forced_attention = modes[k];
        CHECK_MSG(stoke_graph_plan(g, &o, &p[k]) == STOKE_OK, "%s", stoke_last_error());
    }
    forced_attention = CUDA_ATTN_AUTO;
    CHECK(p[0].activations_per_sample == p[1].activations_per_sample);
    CHECK_MSG(p[2].activations_per_sample - p[0].activations_per_sample == gemm - fused,
              "activations a sample: fused %zu, GEMM %zu", p[0].activations_per_sample,
              p[2].activations_per_sample);
    CHECK(p[0].workspace < p[2].workspace);
    stoke_graph_free(g);
    stoke_graph_free(gs);
}

/* The fused kernel bodies against attention written out in double (the probabilities
 * materialized), on scores far larger than the models' (q scaled up, so exp without
 * the running max would overflow and the max moves often) and one row whose scores
 * rise key after key, rescaling at every step. Forward outputs, logsumexp and dq, dk,
 * dv within 1e-5 of the largest of each. */
static void test_flash_bits(void)
{
    enum { B = 2, H = 3, T = 37, HS = 5, C = H * HS };
    float *qkv = malloc(sizeof(float) * B * T * 3 * C), *dy = malloc(sizeof(float) * B * T * C);
    float *y = malloc(sizeof(float) * B * T * C), *dqkv = malloc(sizeof(float) * B * T * 3 * C);
    float *lse = malloc(sizeof(float) * B * H * T), *D = malloc(sizeof(float) * B * H * T);
    double *ry = calloc((size_t)B * T * C, sizeof(double));
    double *rd = calloc((size_t)B * T * 3 * C, sizeof(double));
    double *rl = calloc((size_t)B * H * T, sizeof(double));
    double *P = malloc(sizeof(double) * T * T), *dS = malloc(sizeof(double) * T * T);
    for (int i = 0; i < B * T * 3 * C; i++)
        qkv[i] = rnd() * ((i % (3 * C)) < C ? 8.0f : 1.0f);
    for (int i = 0; i < B * T * C; i++)
        dy[i] = rnd();
    for (int t = 0; t < T; t++) /* b 0, h 0, query 0: key t's score grows with t */
        for (int d = 0; d < HS; d++)
            qkv[t * 3 * C + C + d] = d == 0 ? 0.5f * (float)t : 0.0f, qkv[d] = d == 0 ? 1.0f : 0.0f;
    const double scale = 1.0 / sqrt((double)HS);
    nk_flash_args a = {qkv, dy, y, lse, D, dqkv, T, C, H, (float)(1.0 / sqrt((double)HS))};
    for (int r = 0; r < B * H * T; r++)
        nk_flash_fwd(r, &a);
    for (int r = 0; r < B * H * T; r++)
        nk_flash_bwd_d(r, &a);
    for (int r = 0; r < B * H * T; r++)
        nk_flash_bwd_dq(r, &a), nk_flash_bwd_dkv(r, &a);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
#define Q(t, d)    ((double)qkv[((size_t)(b * T + (t))) * 3 * C + h * HS + (d)])
#define K(t, d)    ((double)qkv[((size_t)(b * T + (t))) * 3 * C + C + h * HS + (d)])
#define V(t, d)    ((double)qkv[((size_t)(b * T + (t))) * 3 * C + 2 * C + h * HS + (d)])
#define DY(t, d)   ((double)dy[((size_t)(b * T + (t))) * C + h * HS + (d)])
#define G(p, t, d) rd[((size_t)(b * T + (t))) * 3 * C + (p)*C + h * HS + (d)]
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    double s = 0;
                    for (int d = 0; d < HS; d++)
                        s += Q(i, d) * K(j, d);
                    P[i * T + j] = s * scale;
                    mx = fmax(mx, s * scale);
                }
                for (int j = 0; j < T; j++)
                    sum += exp(P[i * T + j] - mx);
                rl[(b * H + h) * T + i] = mx + log(sum);
                double dot = 0;
                for (int j = 0; j < T; j++) {
                    P[i * T + j] = exp(P[i * T + j] - mx) / sum;
                    double dp = 0;
                    for (int d = 0; d < HS; d++)
                        dp += DY(i, d) * V(j, d);
                    dS[i * T + j] = dp;
                    dot += P[i * T + j] * dp;
                }
                for (int j = 0; j < T; j++)
                    dS[i * T + j] = P[i * T + j] * (dS[i * T + j] - dot) * scale;
                for (int d = 0; d < HS; d++)
                    for (int j = 0; j < T; j++)
                        ry[(size_t)(b * T + i) * C + h * HS + d] += P[i * T + j] * V(j, d);
            }
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++)
                    for (int d = 0; d < HS; d++) {
                        G(0, i, d) += dS[i * T + j] * K(j, d);
                        G(1, j, d) += dS[i * T + j] * Q(i, d);
                        G(2, j, d) += P[i * T + j] * DY(i, d);
                    }
#undef Q
#undef K
#undef V
#undef DY
#undef G
        }
    struct {
        const char *what;
        const float *got;
        const double *want;
        int n;
    } cmp[3] = {
        {"y", y, ry, B * T * C}, {"lse", lse, rl, B * H * T}, {"dqkv", dqkv, rd, B * T * 3 * C}};
    for (int k = 0; k < 3; k++) {
        double worst = 0, big = 0;
        for (int i = 0; i < cmp[k].n; i++)
            big = fmax(big, fabs(cmp[k].want[i]));
        for (int i = 0; i < cmp[k].n; i++)
            worst = fmax(worst, fabs(cmp[k].got[i] - cmp[k].want[i]) / big);
        CHECK_MSG(worst <= 1e-5, "fused attention %s differs from the reference by %.3g",
                  cmp[k].what, worst);
    }
    free(qkv), free(dy), free(y), free(dqkv), free(lse), free(D);
    free(ry), free(rd), free(rl), free(P), free(dS);
}

/* A head larger than the fused kernels' arrays is refused when the model is planned,
 * naming the layer, when the fused path is forced; it runs on the GEMMs otherwise. */
static void test_attn_big_head(void)
{
    stoke_graph *g = stoke_graph_new("big_head");
    stoke_shape xs = {.ndim = 2, .dims = {3, NK_ATTN_MAX_HS + 8}}, ys = {.ndim = 1, .dims = {2}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_attention(g, "wide_attn", x, 1);
    stoke_nn_mse(g, stoke_nn_linear(g, "fc", stoke_nn_flatten(g, h), 2, true), y);
    stoke_model_opts o = {.max_batch = 2, .training = true, .cuda = true};
    stoke_model *m = NULL;
    forced_attention = CUDA_ATTN_FUSED;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_ERR_ARG);
    CHECK_MSG(strstr(stoke_last_error(), "wide_attn") &&
                  strstr(stoke_last_error(), "fused attention kernels hold (256)"),
              "%s", stoke_last_error());
    forced_attention = CUDA_ATTN_AUTO;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    stoke_model_free(m);
    stoke_graph_free(g);
}

/* A training forward and its backward: a device reports the forward's bad input once
 * the backward is queued (nothing in a step waits), the CPU as the forward runs. */
static stoke_status train_pass(stoke_model *m, int64_t batch)
{
    stoke_status st = stoke_model_forward(m, batch, true);
    return st == STOKE_OK ? stoke_model_backward(m) : st;
}

/* A class outside [0, K) is an error naming the sample, as on the CPU: from the
 * backward in training, from the forward itself in evaluation. */
static void test_bad_class(void)
{
    stoke_graph *g = mlp();
    stoke_model_opts o = {.max_batch = 4, .training = true, .cuda = true};
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    if (!m) {
        stoke_graph_free(g);
        return;
    }
    int32_t y[4] = {1, 2, 10, 3};
    static float x[4 * 37];
    CHECK(stoke_model_set_input(m, stoke_graph_find(g, "x"), x, sizeof x) == STOKE_OK);
    CHECK(stoke_model_set_input(m, stoke_graph_find(g, "y"), y, sizeof y) == STOKE_OK);
    CHECK(train_pass(m, 4) == STOKE_ERR_ARG);
    CHECK_MSG(strstr(stoke_last_error(), "sample 2") != NULL, "%s", stoke_last_error());
    CHECK(isnan(stoke_model_loss(m)));
    CHECK(stoke_model_forward(m, 4, false) == STOKE_ERR_ARG);
    CHECK_MSG(strstr(stoke_last_error(), "sample 2") != NULL, "%s", stoke_last_error());
    y[2] = 0; /* and a good batch after it runs */
    CHECK(stoke_model_set_input(m, stoke_graph_find(g, "y"), y, sizeof y) == STOKE_OK);
    stoke_model_zero_grad(m);
    CHECK(train_pass(m, 4) == STOKE_OK);
    CHECK(isfinite(stoke_model_loss(m)));
    stoke_model_free(m);
    stoke_graph_free(g);
}

/* An id outside the table is the CPU backend's error, word for word: the layer and
 * the position in the batch's ids. */
static void test_bad_id(void)
{
    stoke_graph *g = seq_chain();
    char cpu_msg[512] = "";
    for (int cuda = 0; cuda < 2; cuda++) {
        stoke_model_opts o = {.max_batch = 3, .training = true, .cuda = cuda};
        stoke_model *m = NULL;
        CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
        if (!m)
            break;
        int32_t ids[3 * 11] = {0}, y[3] = {0};
        ids[2 * 11 + 4] = 7; /* sample 2, position 4 of its 11 */
        ids[2 * 11 + 9] = -1;
        CHECK(stoke_model_set_input(m, stoke_graph_find(g, "ids"), ids, sizeof ids) == STOKE_OK);
        CHECK(stoke_model_set_input(m, stoke_graph_find(g, "y"), y, sizeof y) == STOKE_OK);
        CHECK(train_pass(m, 3) == STOKE_ERR_ARG);
        if (!cuda)
            snprintf(cpu_msg, sizeof cpu_msg, "%s", stoke_last_error());
        else
            CHECK_MSG(strcmp(stoke_last_error(), cpu_msg) == 0, "cuda: %s; cpu: %s",
                      stoke_last_error(), cpu_msg);
        CHECK_MSG(strstr(stoke_last_error(), "emb") && strstr(stoke_last_error(), "position 26"),
                  "%s", stoke_last_error());
        stoke_model_free(m);
    }
    stoke_graph_free(g);
}

/* The dropout mask past the first 2^32 elements, where the block key changes: the
 * kernel body on a few elements each side of the boundary, against the CPU's mask. */
static void test_dropout_blocks(void)
{
    const int64_t starts[2] = {((int64_t)1 << 32) - 40, (int64_t)1 << 32};
    float one[40], out[40];
    for (int i = 0; i < 40; i++)
        one[i] = 1.0f;
    for (int s = 0; s < 2; s++) {
        const uint64_t step = 5;
        nk_dropout_args k = cuda_dropout_block(99, &step, 0.5f, starts[s], out, one, 0);
        int kept = 0;
        for (int i = 0; i < 40; i++) {
            nk_dropout(i, &k);
            int keep = cpu_dropout_keep(99, 5, (size_t)(starts[s] + i), 0.5f);
            kept += keep;
            CHECK_MSG(out[i] == (keep ? 2.0f : 0.0f), "dropout element %lld: %g, cpu keeps: %d",
                      (long long)(starts[s] + i), (double)out[i], keep);
        }
        CHECK(kept > 5 && kept < 35);
    }
}

/* Zeros into every input of a model for `batch` samples, but the first pg_n floats of
 * "pg" from pg. */
static void set_inputs(stoke_model *m, int64_t batch, const float *pg, size_t pg_n)
{
    const stoke_graph *g = stoke_model_graph(m);
    for (int t = 0; t < stoke_graph_node_count(g); t++) {
        if (stoke_graph_node_op(g, t) != STOKE_NN_INPUT)
            continue;
        size_t n = (size_t)batch * (size_t)stoke_shape_elems(stoke_graph_shape(g, t));
        float *v = calloc(n, 4);
        if (strcmp(stoke_graph_node_name(g, t), "pg") == 0)
            memcpy(v, pg, pg_n * 4);
        CHECK(stoke_model_set_input(m, t, v, n * 4) == STOKE_OK);
        free(v);
    }
}

/* The first error of a forward on each backend: both fail with the same message. */
static void same_error(stoke_graph *(*build)(void), int64_t batch, const float *pg, size_t pg_n)
{
    stoke_graph *g = build();
    char cpu_msg[1024] = "";
    for (int dev = 0; dev < 2; dev++) {
        stoke_model_opts o = {.max_batch = batch, .training = true, .seed = 7, .cuda = dev};
        stoke_model *m = NULL;
        CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
        if (!m)
            break;
        set_inputs(m, batch, pg, pg_n);
        CHECK(train_pass(m, batch) == STOKE_ERR_ARG);
        if (dev == 0)
            snprintf(cpu_msg, sizeof cpu_msg, "%s", stoke_last_error());
        else
            CHECK_MSG(strcmp(stoke_last_error(), cpu_msg) == 0, "cuda: %s\ncpu:  %s",
                      stoke_last_error(), cpu_msg);
        stoke_model_free(m);
    }
    CHECK_MSG(strstr(cpu_msg, pg ? "sample 2" : "batchnorm") != NULL, "%s", cpu_msg);
    stoke_graph_free(g);
}

/* Bad policy-gradient targets name the sample and what is wrong, as on the CPU; batch
 * norm refuses to train on one value per channel. */
static void test_bad_targets(void)
{
    const float action[] = {0, 1, 4, 1, 2.5f, 0, 1, 1};
    const float advantage[] = {0, 1, 4, 1, 2, INFINITY, 5, NAN};
    const float old_logp[] = {0, 1, -1, 1, 0, 0, 3, 1, NAN, 0, 0, 0};
    const float negative[] = {1, 0, 2, 0, -1, 0};
    same_error(a2c, 4, action, 8);
    same_error(a2c, 4, advantage, 8);
    same_error(ppo, 4, old_logp, 12);
    same_error(a2c, 3, negative, 6);
    same_error(bn_block, 1, NULL, 0);
}

/* ---- cuDNN pooling and the fused conv -> relu -> max-pool chain (cudnn-pool) ----
 * Pooling now runs through cuDNN (the double in tests/fake): each pool after a
 * convolution without ReLU, so its input has no ties and the gradients cannot depend
 * on which of equal maxima cuDNN picks (it documents no rule); after a ReLU the ties
 * are zeros, whose gradient the ReLU drops wherever it goes. */

/* x -> conv 3x3 (bias) -> pool -> flatten -> linear -> cross-entropy; pool: 0 max 3x3
 * stride 2 padding 1 (stride != kernel, windows overlapping and clipped), 1 average
 * 3x3 stride 2 padding 1 (edge windows divide by 9), 2 global average */
static stoke_graph *conv_pool(int pool)
{
    static const char *const names[] = {"conv_maxpool", "conv_avgpool", "conv_gap"};
    stoke_graph *g = stoke_graph_new(names[pool]);
    stoke_shape xs = {.ndim = 3, .dims = {2, 9, 8}}, ys = {.ndim = 0};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor h = stoke_nn_conv2d(g, "conv", x, 5, 3, 1, 1, true);
    h = pool == 0   ? stoke_nn_maxpool2d(g, h, 3, 2, 1)
        : pool == 1 ? stoke_nn_avgpool2d(g, h, 3, 2, 1)
                    : stoke_nn_global_avgpool(g, h);
    h = stoke_nn_linear(g, "fc", stoke_nn_flatten(g, h), 4, true);
    stoke_nn_cross_entropy(g, h, y, 0.0f);
    return g;
}
static stoke_graph *conv_maxpool(void) { return conv_pool(0); }
static stoke_graph *conv_avgpool(void) { return conv_pool(1); }
static stoke_graph *conv_gap(void) { return conv_pool(2); }

/* conv (no bias: the fused call adds a zero one) -> relu -> max-pool 2x2: fusable on
 * both backends; then relu -> max-pool 3x3 stride 2 after a second conv, not */
static stoke_graph *chain_nobias(void)
{
    stoke_graph *g = stoke_graph_new("chain_nobias");
    stoke_shape xs = {.ndim = 3, .dims = {4, 10, 8}}, ys = {.ndim = 0};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor h = stoke_nn_relu(g, stoke_nn_conv2d(g, "conv1", x, 6, 3, 1, 1, false));
    h = stoke_nn_maxpool2d(g, h, 2, 2, 0);
    h = stoke_nn_relu(g, stoke_nn_conv2d(g, "conv2", h, 5, 3, 1, 1, true));
    h = stoke_nn_maxpool2d(g, h, 3, 2, 1);
    h = stoke_nn_linear(g, "fc", stoke_nn_flatten(g, h), 3, true);
    stoke_nn_cross_entropy(g, h, y, 0.0f);
    return g;
}

/* conv -> relu -> max-pool 2x2 whose ReLU output is also read by a second head: the
 * ReLU has two readers, so nothing fuses */
static stoke_graph *chain_shared(void)
{
    stoke_graph *g = stoke_graph_new("chain_shared");
    stoke_shape xs = {.ndim = 3, .dims = {3, 8, 8}}, ys = {.ndim = 0};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &ys);
    stoke_tensor r = stoke_nn_relu(g, stoke_nn_conv2d(g, "conv", x, 4, 3, 1, 1, true));
    stoke_tensor a = stoke_nn_flatten(g, stoke_nn_maxpool2d(g, r, 2, 2, 0));
    stoke_tensor b = stoke_nn_global_avgpool(g, r);
    stoke_nn_cross_entropy(g, stoke_nn_linear(g, "fc_a", a, 3, true), y, 0.0f);
    stoke_nn_cross_entropy(g, stoke_nn_linear(g, "fc_b", b, 3, true), y, 0.0f);
    return g;
}

static const cuda_case pool_cases[] = {
    {"cudnn maxpool s2 fp32", conv_maxpool, 4, STOKE_PREC_FP32, SGD, 7, 3, 1e-4},
    {"cudnn maxpool s2 bf16", conv_maxpool, 4, STOKE_PREC_BF16, SGD, 7, 3, 2e-2},
    {"cudnn maxpool s2 fp16", conv_maxpool, 4, STOKE_PREC_FP16, SGD, 7, 2, 2e-2},
    {"cudnn avgpool pad fp32", conv_avgpool, 4, STOKE_PREC_FP32, NESTEROV, 7, 3, 1e-4},
    {"cudnn avgpool pad bf16", conv_avgpool, 4, STOKE_PREC_BF16, SGD, 7, 3, 2e-2},
    {"cudnn avgpool pad fp16", conv_avgpool, 4, STOKE_PREC_FP16, SGD, 7, 2, 2e-2},
    {"cudnn global avgpool fp32", conv_gap, 4, STOKE_PREC_FP32, ADAMW, 9, 3, 1e-4},
    {"cudnn global avgpool bf16", conv_gap, 4, STOKE_PREC_BF16, SGD, 9, 3, 2e-2},
    {"cudnn global avgpool fp16", conv_gap, 4, STOKE_PREC_FP16, SGD, 9, 2, 2e-2},
    {"cudnn chain no bias fp32", chain_nobias, 3, STOKE_PREC_FP32, SGD, 5, 3, 1e-4},
    {"cudnn chain no bias bf16", chain_nobias, 3, STOKE_PREC_BF16, SGD, 5, 3, 2e-2},
    {"cudnn chain no bias fp16", chain_nobias, 3, STOKE_PREC_FP16, SGD, 5, 2, 2e-2},
    {"cudnn chain shared fp32", chain_shared, 3, STOKE_PREC_FP32, SGD, 5, 3, 1e-4},
};

/* Chains the GPU model fuses: cudnnConvolutionBiasActivationForward's calls in one
 * training forward, and the activations a sample against the same model unfused
 * (unless `others`: the model has chains of other kinds, linear -> relu). */
static void fused_chains(const cuda_case *c, int want_chains, bool others)
{
    int (*fused)(void) = NULL;
    *(void **)&fused = dlsym(doubles.dnn, "fake_cudnn_fused_calls");
    CHECK(fused != NULL);
    stoke_graph *g = c->build();
    stoke_model_opts o = opts_of(c, true);
    stoke_model *on = NULL, *off = NULL;
    CHECK_MSG(stoke_model_new(g, &o, &on) == STOKE_OK, "%s", stoke_last_error());
    o.no_fusion = true;
    CHECK_MSG(stoke_model_new(g, &o, &off) == STOKE_OK, "%s", stoke_last_error());
    if (on && off && fused) {
        size_t a_on = stoke_model_plan(on)->activations_per_sample,
               a_off = stoke_model_plan(off)->activations_per_sample;
        CHECK_MSG(want_chains || others ? a_on < a_off : a_on == a_off,
                  "%s: %zu bytes a sample fused, %zu unfused", c->name, a_on, a_off);
        stoke_model *m[2] = {on, off};
        for (int k = 0; k < 2; k++) {
            CHECK(stoke_model_sync(m[k]) == STOKE_OK);
            int before = fused();
            CHECK(stoke_model_forward(m[k], c->batch, true) == STOKE_OK);
            CHECK(stoke_model_sync(m[k]) == STOKE_OK);
            CHECK_MSG(fused() - before == (k == 0 ? want_chains : 0),
                      "%s %s: %d fused convolutions, want %d", c->name,
                      k == 0 ? "fused" : "no_fusion", fused() - before, k == 0 ? want_chains : 0);
        }
    }
    stoke_model_free(on);
    stoke_model_free(off);
    stoke_graph_free(g);
}

static void test_pool_cases(void)
{
    for (size_t i = 0; i < sizeof pool_cases / sizeof pool_cases[0]; i++)
        run_case(&pool_cases[i]);
}

static void test_fused_chains(void)
{
    fused_chains(&cases[0], 0, true); /* an MLP: no convolution to fuse */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(cases[i].name, "cnn fp32") == 0 || strcmp(cases[i].name, "cnn bf16") == 0)
            fused_chains(&cases[i], 2, false);
        if (strcmp(cases[i].name, "conv stride 2 fp32") == 0) /* max-pool 3x3 stride 2 */
            fused_chains(&cases[i], 0, false);
    }
    fused_chains(&pool_cases[9], 1, false);  /* the first chain of two */
    fused_chains(&pool_cases[11], 1, false); /* fp16 too */
    fused_chains(&pool_cases[12], 0, false); /* a ReLU with two readers */
}

/* Batches below the model's, in training and in eval, agree with the CPU. */
static const cuda_case conv_batches = {
    "conv batches", conv_fanout, 3, STOKE_PREC_FP32, SGD, 9, 1, 1e-4};
static const int64_t conv_batch_sizes[] = {9, 4, 1, 4, 9};
#define CONV_BATCHES (sizeof conv_batch_sizes / sizeof conv_batch_sizes[0])

static void test_conv_batches(void)
{
    const cuda_case c = conv_batches;
    stoke_graph *g = c.build();
    stoke_model *cpu = make(g, &c, false), *gpu = make(g, &c, true);
    for (size_t i = 0; cpu && gpu && i < CONV_BATCHES; i++) {
        cuda_case at = c;
        at.batch = conv_batch_sizes[i];
        feed(cpu, gpu, &at);
        for (int train = 0; train < 2; train++) {
            CHECK(stoke_model_forward(cpu, at.batch, train) == STOKE_OK);
            CHECK_MSG(stoke_model_forward(gpu, at.batch, train) == STOKE_OK, "%s",
                      stoke_last_error());
            CHECK_MSG(rel_err(stoke_model_loss(gpu), stoke_model_loss(cpu)) <= c.tol,
                      "batch %lld %s: loss cuda %.9g, cpu %.9g", (long long)at.batch,
                      train ? "train" : "eval", stoke_model_loss(gpu), stoke_model_loss(cpu));
        }
        CHECK(stoke_model_backward(cpu) == STOKE_OK && stoke_model_backward(gpu) == STOKE_OK);
        const float *ga = stoke_model_grad(cpu, 0), *gb = stoke_model_grad(gpu, 0);
        double d = diff(cpu, ga, gpu, gb, (size_t)stoke_graph_param(g, 0)->elems);
        CHECK_MSG(d <= c.tol, "batch %lld: gradient differs by %.3g", (long long)at.batch, d);
        stoke_model_zero_grad(cpu);
        stoke_model_zero_grad(gpu);
    }
    stoke_model_free(cpu);
    stoke_model_free(gpu);
    stoke_graph_free(g);
}

/* Each of those batches is planned once: a plan per batch, reused by later steps,
 * which create no cuDNN objects. */
static void test_conv_plans_kept(void)
{
    int (*live)(void) = NULL;
    *(void **)&live = dlsym(doubles.dnn, "fake_cudnn_live");
    CHECK(live != NULL);
    stoke_graph *g = conv_batches.build();
    stoke_model *m = make(g, &conv_batches, true);
    int objects = -1;
    for (size_t i = 0; m && live && i < CONV_BATCHES; i++) {
        set_inputs(m, conv_batch_sizes[i], NULL, 0);
        CHECK(stoke_model_forward(m, conv_batch_sizes[i], false) == STOKE_OK);
        CHECK(train_pass(m, conv_batch_sizes[i]) == STOKE_OK);
        if (i == 2)
            objects = live();
    }
    if (objects >= 0)
        CHECK_MSG(live() == objects, "cuDNN objects %d, then %d", objects, live());
    stoke_model_free(m);
    stoke_graph_free(g);
}

/* Without cuDNN a model with a convolution is refused, naming the layer and the
 * library; one without runs (cuDNN is loaded at the first convolution). */
static void test_no_cudnn(void)
{
    char *dnn = env_save("STOKE_CUDNN_LIBRARY");
    setenv("STOKE_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9", 1);
    stoke_graph *g = cnn(), *g2 = mlp();
    stoke_model_opts o = {.max_batch = 3, .training = true, .cuda = true};
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(stoke_last_error(), "conv1") && strstr(stoke_last_error(), "libcudnn"), "%s",
              stoke_last_error());
    CHECK(stoke_model_new(g2, &o, &m) == STOKE_OK);
    stoke_model_free(m);
    stoke_graph_free(g);
    stoke_graph_free(g2);
    env_restore("STOKE_CUDNN_LIBRARY", dnn);
}

/* The convolutions broke none of the double's rules (descriptors that agree, tensors
 * and workspace inside allocations) and freed every descriptor and handle with their
 * models. The test holds the doubles loaded so their counters outlive the models. */
static void test_cudnn_clean(void)
{
    int (*violations)(void), (*live)(void), (*calls)(void);
    const char *(*problem)(void);
    *(void **)&violations = dlsym(doubles.dnn, "fake_cudnn_violations");
    *(void **)&live = dlsym(doubles.dnn, "fake_cudnn_live");
    *(void **)&calls = dlsym(doubles.dnn, "fake_cudnn_calls");
    *(void **)&problem = dlsym(doubles.dnn, "fake_cudnn_last_problem");
    CHECK(violations && live && calls && problem);
    if (!violations || !live || !calls || !problem)
        return;
    CHECK_MSG(violations() == 0, "%d cuDNN violations, the last: %s", violations(), problem());
    CHECK_MSG(live() == 0, "%d cuDNN objects never destroyed", live());
    CHECK(calls() > 0);
}

/* The kernels' fp16/bf16 conversions (nn/cuda/kern.h, which the doubles use too) are
 * the CPU's (core/precision.h): every fp16 value back to fp32, and fp32 values of every
 * exponent, ties, subnormals, infinities and NaNs to both. */
static void test_conversions(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = nk_f16_to_f32((uint16_t)h), b = cpu_f16_to_f32_1((uint16_t)h);
        uint32_t ua, ub;
        memcpy(&ua, &a, 4);
        memcpy(&ub, &b, 4);
        bad += ua != ub;
    }
    CHECK_MSG(bad == 0, "%d fp16 values decode differently", bad);
    bad = 0;
    for (uint64_t u = 0; u < 0x100000000ull; u += 0x10001ull * 7 + (u & 0xff)) {
        float f;
        uint32_t b = (uint32_t)u;
        memcpy(&f, &b, 4);
        bad += nk_to_f16(f) != cpu_f32_to_f16_1(f) || nk_to_bf16(f) != cpu_f32_to_bf16_1(f);
    }
    /* ties of both formats at every exponent and sign, and one bit either side */
    for (uint32_t e = 0; e < 512; e++)
        for (int k = 0; k < 6; k++) {
            uint32_t b =
                (e << 23) | ((uint32_t[]){0x8000, 0x18000, 0x1000, 0x3000, 0x7fff, 0x8001}[k]);
            float f;
            memcpy(&f, &b, 4);
            bad += nk_to_f16(f) != cpu_f32_to_f16_1(f) || nk_to_bf16(f) != cpu_f32_to_bf16_1(f);
        }
    CHECK_MSG(bad == 0, "%d fp32 values round differently", bad);
}

/* ---- the tree of sums (reduce.c) ---- */

/* A copy of c that runs the kernels' host build at once on host memory: the same
 * planner and bodies, so on a GPU (--real) the device's sums can be held to the host's
 * bits. */
typedef struct host_tree {
    cuda_ctx c;
    double *tree;
} host_tree;

static bool host_tree_of(const cuda_ctx *c, host_tree *h)
{
    h->c = *c;
    h->c.k = nn_cuda_host_kernels();
    h->c.L = (nk_launch){0};
    h->tree = malloc(2 * (size_t)CUDA_TREE_CAP * sizeof(double));
    h->c.tree = h->tree;
    return h->tree != NULL;
}

static void *dev_copy(cuda_ctx *c, const void *host, size_t bytes)
{
    void *d = NULL;
    CHECK(stoke_cudart_malloc(c->rt, bytes ? bytes : 1, &d) == STOKE_OK);
    if (d && bytes)
        CHECK(stoke_cudart_copy_to_device_async(c->rt, d, host, bytes, c->L.stream) == STOKE_OK);
    CHECK(stoke_cudart_stream_sync(c->rt, c->L.stream) == STOKE_OK);
    return d;
}

static void host_of(cuda_ctx *c, void *host, const void *dev, size_t bytes)
{
    CHECK(stoke_cudart_copy_to_host_async(c->rt, host, dev, bytes, c->L.stream) == STOKE_OK);
    CHECK(stoke_cudart_stream_sync(c->rt, c->L.stream) == STOKE_OK);
}

/* One bias gradient (db0 + the sums of dy over all but its channel axis) on c, twice
 * (the same bits), on the host build (the same bits again) and against a plain double
 * sum: a convolution's (`conv`: dy [B][C][P], cuda_conv_bias_grad) or a linear or
 * attention layer's (dy [B rows][C cols], P 1, cuda_bias_grad). The tree's doubles are
 * exact to ~1e-16 of the sum of magnitudes, so what is left is db's fp32 rounding,
 * within 2^-22 of |db0| + sum |dy|. */
static void tree_db_case(cuda_ctx *c, host_tree *h, bool conv, int64_t B, int64_t C, int64_t P)
{
    size_t n = (size_t)(B * C * P);
    float *dy = malloc(n * sizeof *dy + 4), *db0 = malloc((size_t)C * sizeof *db0);
    float *got[3] = {malloc((size_t)C * 4), malloc((size_t)C * 4), malloc((size_t)C * 4)};
    if (!dy || !db0 || !got[0] || !got[1] || !got[2]) {
        CHECK(!"out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++)
        dy[i] = rnd();
    for (int64_t k = 0; k < C; k++)
        db0[k] = rnd();
    float *ddy = dev_copy(c, dy, n * 4), *ddb = dev_copy(c, db0, (size_t)C * 4);
    for (int r = 0; r < 2 && ddy && ddb; r++) {
        CHECK(stoke_cudart_copy_to_device_async(c->rt, ddb, db0, (size_t)C * 4, c->L.stream) ==
              STOKE_OK);
        stoke_status st =
            conv ? cuda_conv_bias_grad(c, ddb, ddy, B, C, P) : cuda_bias_grad(c, ddb, ddy, B, C);
        CHECK_MSG(st == STOKE_OK, "%s", stoke_last_error());
        host_of(c, got[r], ddb, (size_t)C * 4);
    }
    memcpy(got[2], db0, (size_t)C * 4);
    CHECK((conv ? cuda_conv_bias_grad(&h->c, got[2], dy, B, C, P)
                : cuda_bias_grad(&h->c, got[2], dy, B, C)) == STOKE_OK);
    double worst = 0;
    for (int64_t k = 0; k < C; k++) {
        double s = 0, mag = fabs(db0[k]);
        for (int64_t b = 0; b < B; b++)
            for (int64_t p = 0; p < P; p++) {
                s += dy[(b * C + k) * P + p];
                mag += fabs(dy[(b * C + k) * P + p]);
            }
        double e = fabs(got[0][k] - (db0[k] + s)) / mag;
        worst = e > worst ? e : worst;
    }
    const char *what = conv ? "conv bias" : "bias";
    CHECK_MSG(worst <= 0x1p-22, "%s %lldx%lldx%lld (cap %lld): %g of the magnitudes", what,
              (long long)B, (long long)C, (long long)P, (long long)c->tree_cap, worst);
    CHECK_MSG(memcmp(got[0], got[1], (size_t)C * 4) == 0, "%s %lldx%lldx%lld: runs differ", what,
              (long long)B, (long long)C, (long long)P);
    CHECK_MSG(memcmp(got[0], got[2], (size_t)C * 4) == 0,
              "%s %lldx%lldx%lld: the host build's bits differ", what, (long long)B, (long long)C,
              (long long)P);
    stoke_cudart_free(c->rt, ddy);
    stoke_cudart_free(c->rt, ddb);
    free(dy);
    free(db0);
    for (int r = 0; r < 3; r++)
        free(got[r]);
}

/* A sum of squares of n values as tree_db_case: the same bits each run and on the
 * host build, within 1e-12 relative of a compensated (Kahan) double sum. The squares
 * are exact in double, so that is the tree's own rounding: ~eps for each value a path
 * from a leaf adds (fan-ins of 32 over five levels, or one of 60k at the lowest cap
 * below), where a plain sum's error grows with n (1e-13 at 3M values here). */
static void tree_sumsq_case(cuda_ctx *c, host_tree *h, int64_t n)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    if (!x) {
        CHECK(!"out of memory");
        return;
    }
    double want = 0, lost = 0, got[3] = {-1, -2, -3};
    for (int64_t i = 0; i < n; i++) {
        x[i] = rnd() * (i % 7 == 0 ? 100.0f : 1.0f);
        double y = (double)x[i] * (double)x[i] - lost, t = want + y;
        lost = (t - want) - y;
        want = t;
    }
    float *dx = dev_copy(c, x, (size_t)n * 4);
    double *dt8 = NULL;
    CHECK(stoke_cudart_malloc(c->rt, sizeof(double), (void **)&dt8) == STOKE_OK);
    for (int r = 0; r < 2 && dx && dt8; r++) {
        CHECK_MSG(cuda_sum_squares(c, dx, n, dt8) == STOKE_OK, "%s", stoke_last_error());
        host_of(c, &got[r], dt8, sizeof(double));
    }
    CHECK(cuda_sum_squares(&h->c, x, n, &got[2]) == STOKE_OK);
    CHECK_MSG(fabs(got[0] - want) <= 1e-12 * want, "sumsq of %lld (cap %lld): %.17g, want %.17g",
              (long long)n, (long long)c->tree_cap, got[0], want);
    CHECK_MSG(memcmp(&got[0], &got[1], 8) == 0 && memcmp(&got[0], &got[2], 8) == 0,
              "sumsq of %lld: runs or builds differ: %a %a %a", (long long)n, got[0], got[1],
              got[2]);
    stoke_cudart_free(c->rt, dx);
    stoke_cudart_free(c->rt, dt8);
    free(x);
}

/* The optimizer step's sums of squares of many tensors at once (groups of
 * NK_TREE_MANY, levels shared), as each tensor's own tree, bit for bit: the CNN's
 * eight gradients, then 37 tensors of odd sizes (three groups, one of them whose
 * first level overflows a lowered scratch and goes tensor by tensor). */
static void tree_many_case(cuda_ctx *c, host_tree *h, const size_t *n, int count)
{
    size_t all = 0;
    for (int k = 0; k < count; k++)
        all += n[k];
    float *x = malloc((all ? all : 1) * sizeof *x);
    const float **dx = malloc((size_t)count * sizeof *dx),
                **hx = malloc((size_t)count * sizeof *hx);
    double *want = malloc((size_t)count * 8), *got = malloc((size_t)count * 8);
    double *hgot = malloc((size_t)count * 8);
    if (!x || !dx || !hx || !want || !got || !hgot) {
        CHECK(!"out of memory");
        return;
    }
    for (size_t i = 0; i < all; i++)
        x[i] = rnd();
    float *d = dev_copy(c, x, all * 4);
    double *dt = NULL;
    CHECK(stoke_cudart_malloc(c->rt, (size_t)count * 8, (void **)&dt) == STOKE_OK);
    if (!d || !dt)
        return;
    size_t at = 0;
    for (int k = 0; k < count; k++) {
        dx[k] = d + at;
        hx[k] = x + at;
        at += n[k];
        CHECK(cuda_sum_squares(c, dx[k], (int64_t)n[k], dt + k) == STOKE_OK);
    }
    host_of(c, want, dt, (size_t)count * 8);
    CHECK(stoke_cudart_memset_async(c->rt, dt, 0xff, (size_t)count * 8, c->L.stream) == STOKE_OK);
    CHECK_MSG(cuda_sum_squares_many(c, dx, n, count, dt) == STOKE_OK, "%s", stoke_last_error());
    host_of(c, got, dt, (size_t)count * 8);
    CHECK(cuda_sum_squares_many(&h->c, hx, n, count, hgot) == STOKE_OK);
    int differ = 0;
    for (int k = 0; k < count; k++) {
        double s = 0;
        for (size_t i = 0; i < n[k]; i++)
            s += (double)hx[k][i] * (double)hx[k][i];
        CHECK_MSG(fabs(want[k] - s) <= 1e-12 * s, "tensor %d of %zu: %.17g, want %.17g", k, n[k],
                  want[k], s);
        differ += memcmp(&want[k], &got[k], 8) != 0 || memcmp(&want[k], &hgot[k], 8) != 0;
    }
    CHECK_MSG(differ == 0,
              "%d of %d tensors' sums of squares differ from their own trees (cap %lld)", differ,
              count, (long long)c->tree_cap);
    stoke_cudart_free(c->rt, d);
    stoke_cudart_free(c->rt, dt);
    free(x);
    free(dx);
    free(hx);
    free(want);
    free(got);
    free(hgot);
}

static void tree_many_cases(cuda_ctx *c, host_tree *h)
{
    static const size_t cnn[] = {288, 32, 18432, 64, 401408, 128, 1280, 10};
    size_t odd[37];
    for (int k = 0; k < 37; k++)
        odd[k] = k == 5 ? 0 : k == 20 ? 300001 : (size_t)(1 + rndu(5000));
    tree_many_case(c, h, cnn, 8);
    tree_many_case(c, h, odd, 37);
}

/* Sizes that need several levels (the CNN's bias at batch 128, a 3M-value tensor),
 * odd ones, one value, none; then a scratch lowered so the first level's fan-in grows
 * past NK_TREE_F, the convolution goes in groups of samples, and (fewer doubles than
 * channels) sample by sample. */
static void test_tree_sums(void)
{
    cuda_ctx *c = NULL;
    CHECK_MSG(cuda_ctx_new(0, STOKE_TF32_OFF, &c) == STOKE_OK, "%s", stoke_last_error());
    host_tree h = {0};
    if (!c || !host_tree_of(c, &h)) {
        cuda_ctx_free(c);
        return;
    }
    static const int64_t conv[][3] = {{128, 64, 784}, {128, 32, 196}, {3, 5, 1},   {1, 1, 1},
                                      {7, 3, 33},     {33, 1, 1025},  {2, 64, 32}, {0, 4, 9}};
    static const int64_t sq[] = {3000007, 1 << 20, 1025, 33, 32, 31, 1, 0};
    static const int64_t bias[][2] = {{4096, 48}, {1, 10}, {1000, 1}, {33, 7}};
    static const int64_t caps[] = {CUDA_TREE_CAP, 1000, 50};
    for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
        c->tree_cap = h.c.tree_cap = caps[k];
        for (size_t i = 0; i < sizeof conv / sizeof conv[0]; i++)
            if (caps[k] == CUDA_TREE_CAP || conv[i][0] * conv[i][1] * conv[i][2] < (1 << 20))
                tree_db_case(c, &h, true, conv[i][0], conv[i][1], conv[i][2]);
        for (size_t i = 0; i < sizeof sq / sizeof sq[0]; i++)
            tree_sumsq_case(c, &h, sq[i]);
        for (size_t i = 0; i < sizeof bias / sizeof bias[0]; i++)
            tree_db_case(c, &h, false, bias[i][0], bias[i][1], 1);
        tree_many_cases(c, &h);
    }
    free(h.tree);
    cuda_ctx_free(c);
}

/* Graphs: a model's second forward and backward at a batch are captured, later ones
 * replayed, and the numbers stay the CPU's (run_case, "kernels only": dropout's mask
 * changes at every step through the key in device memory); a new batch is a new
 * capture. `no`: the runtime cannot capture, and the model runs its ops, saying why. */
static void graphs(bool no)
{
    stoke_graph *g = kernels_only();
    cuda_case c = {"graphs", kernels_only, 0, STOKE_PREC_FP32, SGD, 6, 4, 1e-4};
    stoke_model *m = make(g, &c, true);
    if (m) {
        const char *why = NULL;
        static float x[6 * 60], y[6 * 12];
        CHECK(stoke_model_set_input(m, stoke_graph_find(g, "x"), x, sizeof x) == STOKE_OK);
        CHECK(stoke_model_set_input(m, stoke_graph_find(g, "y"), y, sizeof y) == STOKE_OK);
        for (int s = 0; s < 3; s++) {
            CHECK_INT_EQ(stoke_model_graphs(m, NULL), s <= 1 || no ? 0 : 3);
            CHECK(stoke_model_forward(m, 6, true) == STOKE_OK);
            CHECK(stoke_model_backward(m) == STOKE_OK);
            CHECK(stoke_model_step(m, 0.01, 1, NULL) == STOKE_OK);
        }
        CHECK(stoke_model_forward(m, 4, true) == STOKE_OK); /* another batch: its own */
        CHECK(stoke_model_forward(m, 4, true) == STOKE_OK);
        CHECK_INT_EQ(stoke_model_graphs(m, &why), no ? 0 : 4);
        if (no)
            CHECK_MSG(strstr(why, "cudaStreamBeginCapture") != NULL, "%s", why);
        else
            CHECK_STR_EQ(why, "");
        CHECK(stoke_model_sync(m) == STOKE_OK);
    }
    stoke_model_free(m);
    stoke_graph_free(g);
}

static void test_graphs(void) { graphs(false); }

/* dist's one-process reducer, watched: the stream it is handed and its host calls. */
typedef struct watched {
    stoke_grad_reducer inner;
    void *stream;
    int reduces, finishes;
} watched;

static stoke_status watched_prepare(void *self, const stoke_grad_ops *ops,
                                    const stoke_grad_bucket *b, int n)
{
    watched *w = self;
    w->stream = ops->stream;
    return w->inner.prepare(w->inner.self, ops, b, n);
}

static stoke_status watched_reduce(void *self, const stoke_grad_ops *ops,
                                   const stoke_grad_bucket *b)
{
    watched *w = self;
    w->reduces++;
    return w->inner.reduce(w->inner.self, ops, b);
}

static stoke_status watched_finish(void *self, const stoke_grad_ops *ops)
{
    watched *w = self;
    w->finishes++;
    return w->inner.finish(w->inner.self, ops);
}

static void watched_release(void *self, const stoke_grad_ops *ops)
{
    watched *w = self;
    w->inner.release(w->inner.self, ops);
}

/* The reducer seam in the graphs: the buckets' copies are queued on the model's stream
 * and captured into the backward's graph, so the host calls reduce in the first two
 * backwards only (run, then captured) and the replays reduce all the same; finish runs
 * before every step. The weights end bit for bit as without a reducer. */
static void test_reducer_graphs(void)
{
    stoke_graph *g = linear_3d();
    cuda_case c = {"reducer graphs", linear_3d, 0, STOKE_PREC_FP32, SGD, 6, 4, 1e-4};
    stoke_model *m[2] = {make(g, &c, true), make(g, &c, true)};
    stoke_dist *d = NULL;
    CHECK(stoke_dist_local(&d) == STOKE_OK);
    watched w = {.inner = d ? stoke_dist_reducer(d) : (stoke_grad_reducer){0}};
    stoke_grad_reducer r = {.self = &w,
                            .bucket_bytes = 1, /* a bucket a parameter */
                            .prepare = watched_prepare,
                            .reduce = watched_reduce,
                            .finish = watched_finish,
                            .release = watched_release};
    if (m[0] && m[1] && d) {
        CHECK_MSG(stoke_model_set_reducer(m[1], &r) == STOKE_OK, "%s", stoke_last_error());
        CHECK(w.stream != NULL && w.stream == stoke_model_stream(m[1]));
        const stoke_grad_bucket *b = NULL;
        int nb = stoke_model_buckets(m[1], &b);
        CHECK(nb > 1);
        static float x[6 * 111], y[6 * 5];
        for (int i = 0; i < 6 * 111; i++)
            x[i] = (float)((i * 13) % 17) / 17.0f - 0.5f;
        for (int i = 0; i < 6 * 5; i++)
            y[i] = (float)((i * 5) % 7) / 7.0f;
        for (int k = 0; k < 2; k++) {
            CHECK(stoke_model_set_input(m[k], stoke_graph_find(g, "x"), x, sizeof x) == STOKE_OK);
            CHECK(stoke_model_set_input(m[k], stoke_graph_find(g, "y"), y, sizeof y) == STOKE_OK);
            for (int s = 0; s < 4; s++) {
                CHECK(stoke_model_forward(m[k], 6, true) == STOKE_OK);
                CHECK(stoke_model_backward(m[k]) == STOKE_OK);
                CHECK(stoke_model_step(m[k], 0.01, 1, NULL) == STOKE_OK);
            }
            CHECK(stoke_model_sync(m[k]) == STOKE_OK);
        }
        CHECK_INT_EQ(stoke_model_graphs(m[1], NULL), 3);
        CHECK_INT_EQ(w.reduces, 2 * nb);
        CHECK_INT_EQ(w.finishes, 4);
        for (int p = 0; p < stoke_graph_param_count(g); p++) {
            size_t n = (size_t)stoke_graph_param(g, p)->elems;
            float *a = malloc(n * 4), *bb = malloc(n * 4);
            CHECK(stoke_model_read(m[0], stoke_model_param(m[0], p), a, n * 4) == STOKE_OK);
            CHECK(stoke_model_read(m[1], stoke_model_param(m[1], p), bb, n * 4) == STOKE_OK);
            CHECK_MSG(memcmp(a, bb, n * 4) == 0, "%s differs with the reducer",
                      stoke_graph_param(g, p)->name);
            free(a);
            free(bb);
        }
    }
    stoke_model_free(m[0]);
    stoke_model_free(m[1]);
    stoke_dist_free(d);
    stoke_graph_free(g);
}

/* The runtime double's switch: cudaStreamBeginCapture fails. */
static void test_graphs_refused(void)
{
    setenv("STOKE_FAKE_CUDA_NO_CAPTURE", "1", 1);
    graphs(true);
    unsetenv("STOKE_FAKE_CUDA_NO_CAPTURE");
}

/* One training step of the mlp on fixed inputs; a NaN written into the first
 * gradient before the step when `poison`. */
static stoke_status poisoned_step(stoke_model *m, const stoke_graph *g, bool poison, bool *applied)
{
    int32_t y[4] = {1, 2, 3, 0};
    float x[4 * 37];
    for (int i = 0; i < 4 * 37; i++)
        x[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    stoke_status st = stoke_model_set_input(m, stoke_graph_find(g, "x"), x, sizeof x);
    if (st == STOKE_OK)
        st = stoke_model_set_input(m, stoke_graph_find(g, "y"), y, sizeof y);
    if (st == STOKE_OK)
        st = train_pass(m, 4);
    float nan = NAN;
    if (st == STOKE_OK && poison)
        st = stoke_model_write(m, stoke_model_grad(m, 0) + 3, &nan, sizeof nan);
    return st == STOKE_OK ? stoke_model_step(m, 0.05, 1, applied) : st;
}

/* A gradient that is not finite, decided on the device inside the step's replayed
 * graph: in fp32 the step's error (the CPU's words, from the next call on the device,
 * which waits for nothing in the step itself) and no weight moves; in fp16 the step is
 * skipped and the loss scale backs off, as on the CPU, whether the caller asks at once
 * (applied) or reads it later. */
static void test_step_not_finite(void)
{
    stoke_graph *g = mlp();
    char cpu_msg[512] = "";
    float cpu_w[64], cpu_scale = 0;
    int64_t cpu_steps = -1;
    for (int dev = 0; dev < 2; dev++) {
        stoke_model_opts o = {.max_batch = 4, .training = true, .seed = 3, .cuda = dev};
        stoke_model *m = NULL;
        CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
        if (!m)
            break;
        for (int k = 0; k < 4; k++) /* the step's graph captured on the second */
            CHECK(poisoned_step(m, g, false, NULL) == STOKE_OK);
        float before[64], after[64];
        CHECK(stoke_model_read(m, stoke_model_param(m, 0), before, sizeof before) == STOKE_OK);
        stoke_status st = poisoned_step(m, g, true, NULL);
        if (dev) { /* queued: the error comes with the next call that waits */
            CHECK(st == STOKE_OK);
            st = stoke_model_sync(m);
        }
        CHECK(st == STOKE_ERR_ARG);
        if (!dev)
            snprintf(cpu_msg, sizeof cpu_msg, "%s", stoke_last_error());
        else
            CHECK_MSG(strcmp(stoke_last_error(), cpu_msg) == 0, "cuda: %s\ncpu:  %s",
                      stoke_last_error(), cpu_msg);
        CHECK_MSG(strstr(cpu_msg, "not finite") && strstr(cpu_msg, "at step 4"), "%s", cpu_msg);
        CHECK(stoke_model_sync(m) == STOKE_OK); /* said once */
        CHECK(stoke_model_read(m, stoke_model_param(m, 0), after, sizeof after) == STOKE_OK);
        CHECK(memcmp(before, after, sizeof before) == 0);
        CHECK_INT_EQ(stoke_model_step_count(m), 4);
        stoke_model_free(m);

        /* fp16: skipped, the scale halved; then a good step counts again */
        o.precision = STOKE_PREC_FP16;
        CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
        if (!m)
            break;
        for (int k = 0; k < 4; k++)
            CHECK(poisoned_step(m, g, false, NULL) == STOKE_OK);
        float scale = stoke_model_loss_scale(m);
        bool applied = true;
        CHECK(poisoned_step(m, g, true, &applied) == STOKE_OK);
        CHECK(!applied);
        CHECK(stoke_model_loss_scale(m) == scale / 2);
        CHECK(isinf(stoke_model_grad_norm(m)));
        CHECK(poisoned_step(m, g, true, NULL) == STOKE_OK); /* read later this time */
        CHECK(poisoned_step(m, g, false, &applied) == STOKE_OK);
        CHECK(applied);
        CHECK(stoke_model_loss_scale(m) == scale / 4);
        CHECK(isfinite(stoke_model_grad_norm(m)));
        CHECK(stoke_model_read(m, stoke_model_param(m, 0), after, sizeof after) == STOKE_OK);
        if (!dev) {
            memcpy(cpu_w, after, sizeof after);
            cpu_scale = stoke_model_loss_scale(m);
            cpu_steps = stoke_model_step_count(m);
        } else {
            CHECK(stoke_model_loss_scale(m) == cpu_scale);
            CHECK_INT_EQ(stoke_model_step_count(m), cpu_steps);
            double worst = 0;
            for (int i = 0; i < 64; i++)
                worst = fmax(worst, fabs((double)after[i] - cpu_w[i]));
            CHECK_MSG(worst < 1e-3, "fp16 weights after skips: %g from the CPU's", worst);
        }
        CHECK_INT_EQ(stoke_model_step_count(m), 5);
        stoke_model_free(m);
    }
    stoke_graph_free(g);
}

/* Steady steps wait for nothing but what is behind queued work: no stream sync, and
 * two waits a step on an event not yet complete, the forward's results (its backward
 * queued behind them) and the last step's decision (this forward queued behind it). */
static void test_step_waits(void)
{
    void (*reset)(void) = (void (*)(void))dlsym(doubles.rt, "fake_cudart_log_reset");
    int (*log)(int, char *, int *, int *, const void **) =
        (int (*)(int, char *, int *, int *, const void **))dlsym(doubles.rt, "fake_cudart_log");
    CHECK(reset && log);
    stoke_graph *g = mlp();
    stoke_model_opts o = {.max_batch = 4, .training = true, .seed = 5, .cuda = true};
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    if (m && reset && log) {
        for (int k = 0; k < 4; k++)
            CHECK(poisoned_step(m, g, false, NULL) == STOKE_OK);
        reset();
        enum { STEPS = 6 };
        for (int k = 0; k < STEPS; k++) {
            CHECK(poisoned_step(m, g, false, NULL) == STOKE_OK);
            CHECK(isfinite(stoke_model_loss(m)));
        }
        int syncs = 0, waits = 0, n = 0;
        char op;
        int stream, event;
        const void *dst;
        for (; log(n, &op, &stream, &event, &dst); n++) {
            syncs += op == 'Y';
            waits += op == 'S' && stream != 0; /* 0: an event already complete */
        }
        CHECK_MSG(n > 0 && n < 4096, "%d calls logged", n);
        CHECK_INT_EQ(syncs, 0);
        CHECK_INT_EQ(waits, 2 * STEPS);
        CHECK(stoke_model_sync(m) == STOKE_OK);
    }
    stoke_model_free(m);
    stoke_graph_free(g);
}

/* The double stamps an event with its clock when its stream runs it, which a step no
 * longer waits for: the work queued so far runs first, at the clock it was queued at. */
static void tick(stoke_model *m, void (*set_clock)(double), double t)
{
    if (!set_clock)
        return;
    CHECK(stoke_model_sync(m) == STOKE_OK);
    set_clock(t);
}

/* A few steps of the trainer's sequence of marks: the device's clock set between them
 * (by the double's manual clock, for the CUDA model) says what each phase took. */
static void marked_steps(stoke_model *m, const stoke_graph *g, void (*set_clock)(double), int steps)
{
    int32_t y[4] = {1, 2, 3, 0};
    static float x[4 * 37];
    for (int k = 0; k < steps; k++) {
        double t0 = 1000.0 * k;
        tick(m, set_clock, t0);
        stoke_model_mark(m, STOKE_PHASE_START);
        CHECK(stoke_model_set_input(m, stoke_graph_find(g, "x"), x, sizeof x) == STOKE_OK);
        CHECK(stoke_model_set_input(m, stoke_graph_find(g, "y"), y, sizeof y) == STOKE_OK);
        tick(m, set_clock, t0 + 1);
        stoke_model_mark(m, STOKE_PHASE_INPUT);
        CHECK(stoke_model_forward(m, 4, true) == STOKE_OK);
        tick(m, set_clock, t0 + 3);
        stoke_model_mark(m, STOKE_PHASE_FORWARD);
        CHECK(stoke_model_backward(m) == STOKE_OK);
        tick(m, set_clock, t0 + 6);
        stoke_model_mark(m, STOKE_PHASE_BACKWARD);
        CHECK(stoke_model_step(m, 0.01, 1, NULL) == STOKE_OK);
        tick(m, set_clock, t0 + 10);
        stoke_model_mark(m, STOKE_PHASE_OPTIMIZER);
    }
}

/* The step's phases on the device's clock, set by the test through the double: each
 * interval goes to the later mark's phase, the time before a START to nobody, events
 * still pending are read later (the double answers "not ready" to a first query), and
 * more marks than the ring holds between two reads lose nothing. */
static void test_phase_clock(void)
{
    void (*set_clock)(double) = (void (*)(double))dlsym(doubles.rt, "fake_cudart_set_clock");
    CHECK(set_clock != NULL);
    if (!set_clock)
        return;
    stoke_graph *g = mlp();
    stoke_model_opts o = {.max_batch = 4, .training = true, .cuda = true};
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    if (m) {
        enum { STEPS = 20 }; /* 100 marks: the ring of 32 fills three times */
        marked_steps(m, g, set_clock, STEPS);
        double sec[STOKE_PHASE_COUNT] = {0};
        stoke_model_phase_seconds(m, false, sec);
        CHECK(sec[STOKE_PHASE_OPTIMIZER] < STEPS * 0.004); /* the last is still pending */
        stoke_model_phase_seconds(m, true, sec);
        const double want[STOKE_PHASE_COUNT] = {0, 0.001, 0.002, 0.003, 0.004};
        for (int p = 0; p < STOKE_PHASE_COUNT; p++)
            CHECK_MSG(fabs(sec[p] - STEPS * want[p]) < 1e-9, "phase %d: %.9f s", p, sec[p]);
        double again[STOKE_PHASE_COUNT] = {0};
        stoke_model_phase_seconds(m, true, again); /* taken: nothing twice */
        for (int p = 0; p < STOKE_PHASE_COUNT; p++)
            CHECK(again[p] == 0);
        CHECK(stoke_model_sync(m) == STOKE_OK);
        stoke_model_free(m);
    }
    set_clock(-1);
    stoke_graph_free(g);
}

/* The phases on the clock each backend has (the device's events, the CPU's wall
 * clock): only what holds whatever the timings (they are bench/'s). */
static void test_phase_marks(void)
{
    stoke_graph *g = mlp();
    for (int dev = 0; dev < 2; dev++) {
        stoke_model_opts o = {.max_batch = 4, .training = true, .cuda = dev};
        stoke_model *m = NULL;
        CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
        if (!m)
            break;
        marked_steps(m, g, NULL, 3);
        double sec[STOKE_PHASE_COUNT] = {0}, again[STOKE_PHASE_COUNT] = {0};
        stoke_model_phase_seconds(m, true, sec);
        stoke_model_phase_seconds(m, true, again);
        for (int p = 0; p < STOKE_PHASE_COUNT; p++)
            CHECK(sec[p] >= 0 && again[p] == 0);
        CHECK(sec[STOKE_PHASE_START] == 0);
        CHECK(stoke_model_sync(m) == STOKE_OK);
        stoke_model_free(m);
    }
    stoke_graph_free(g);
}

/* Gradient checkpointing runs through the same executor on the device: a small
 * transformer (fp32) and the batch-norm block trained with recompute off and on give
 * the same losses, gradients, weights and running statistics, bit for bit (the
 * doubles are deterministic; on a GPU the kernels use no atomics, and the libraries
 * run one algorithm per shape), with fewer activation bytes per sample. */
static stoke_graph *tiny_transformer(void)
{
    stoke_shape img = {.ndim = 3, .dims = {2, 8, 8}};
    return stoke_preset_transformer(&img, 4, 16, 3, 2, 5);
}

static void host_copy(stoke_model *m, const float *dev, float *host, size_t n)
{
    CHECK(stoke_model_read(m, dev, host, n * sizeof *host) == STOKE_OK);
}

static void same_buffers(const char *what, stoke_model *off, stoke_model *on, bool grads, int step)
{
    const stoke_graph *g = stoke_model_graph(off);
    for (int i = 0; i < stoke_graph_param_count(g); i++) {
        const float *a = grads ? stoke_model_grad(off, i) : stoke_model_param(off, i);
        const float *b = grads ? stoke_model_grad(on, i) : stoke_model_param(on, i);
        if (!a || !b)
            continue;
        size_t n = (size_t)stoke_graph_param(g, i)->elems;
        float *ha = malloc(n * sizeof *ha), *hb = malloc(n * sizeof *hb);
        host_copy(off, a, ha, n);
        host_copy(on, b, hb, n);
        CHECK_MSG(memcmp(ha, hb, n * sizeof *ha) == 0, "%s step %d: %s of %s differ", what, step,
                  grads ? "gradient" : "value", stoke_graph_param(g, i)->name);
        free(ha);
        free(hb);
    }
}

static void test_recompute(void)
{
    const cuda_case cs[] = {
        {"transformer recompute", tiny_transformer, 5, STOKE_PREC_FP32, ADAMW, 6, 3, 0},
        {"batchnorm recompute", bn_block, 10, STOKE_PREC_FP32, SGD, 9, 3, 0},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        const cuda_case *c = &cs[k];
        stoke_graph *g = c->build();
        stoke_model_opts o = opts_of(c, true);
        stoke_model *off = NULL, *on = NULL;
        CHECK_MSG(stoke_model_new(g, &o, &off) == STOKE_OK, "%s", stoke_last_error());
        o.recompute = true;
        CHECK_MSG(stoke_model_new(g, &o, &on) == STOKE_OK, "%s", stoke_last_error());
        if (off && on) {
            const stoke_mem_plan *po = stoke_model_plan(off), *pn = stoke_model_plan(on);
            CHECK_MSG(pn->recompute_segments > 0 &&
                          pn->activations_per_sample < po->activations_per_sample,
                      "%s: %d segments, %zu -> %zu bytes per sample", c->name,
                      pn->recompute_segments, po->activations_per_sample,
                      pn->activations_per_sample);
            for (int s = 0; s < c->steps; s++) {
                feed(off, on, c);
                CHECK(stoke_model_forward(off, c->batch, true) == STOKE_OK);
                CHECK(stoke_model_forward(on, c->batch, true) == STOKE_OK);
                CHECK_MSG(stoke_model_loss(off) == stoke_model_loss(on),
                          "%s step %d: loss %.9g kept, %.9g recomputed", c->name, s,
                          stoke_model_loss(off), stoke_model_loss(on));
                CHECK(stoke_model_backward(off) == STOKE_OK);
                CHECK_MSG(stoke_model_backward(on) == STOKE_OK, "%s", stoke_last_error());
                same_buffers(c->name, off, on, true, s);
                CHECK(stoke_model_step(off, 0.05, 1, NULL) == STOKE_OK);
                CHECK(stoke_model_step(on, 0.05, 1, NULL) == STOKE_OK);
                same_buffers(c->name, off, on, false, s);
            }
        }
        stoke_model_free(off);
        stoke_model_free(on);
        stoke_graph_free(g);
    }
}

/* ---- cuBLASLt: the linear layer's matmuls and the chain linear -> relu fused ---- */

static struct {
    int (*epi)(int); /* matmuls queued with an epilogue, so far */
    int (*violations)(void), (*live)(void), (*calls)(void);
    const char *(*problem)(void);
} LTD;

static bool lt_double(void *lt)
{
    *(void **)&LTD.epi = dlsym(lt, "fake_cublaslt_epilogue_calls");
    *(void **)&LTD.violations = dlsym(lt, "fake_cublaslt_violations");
    *(void **)&LTD.live = dlsym(lt, "fake_cublaslt_live");
    *(void **)&LTD.calls = dlsym(lt, "fake_cublaslt_calls");
    *(void **)&LTD.problem = dlsym(lt, "fake_cublaslt_last_problem");
    bool ok = LTD.epi && LTD.violations && LTD.live && LTD.calls && LTD.problem;
    CHECK(ok);
    return ok;
}

/* x (9) -> fc1 -> relu -> + fc1's output (add) -> fc2 -> MSE: fc1's output has two
 * readers, so linear -> relu is not a chain and fc1 runs alone (bias epilogue). */
static stoke_graph *relu_skip(void)
{
    stoke_graph *g = stoke_graph_new("relu_skip");
    stoke_shape xs = {.ndim = 1, .dims = {9}}, ys = {.ndim = 1, .dims = {4}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_linear(g, "fc1", x, 12, true);
    stoke_tensor r = stoke_nn_add(g, stoke_nn_relu(g, h), h);
    stoke_nn_mse(g, stoke_nn_linear(g, "fc2", r, 4, true), y);
    return g;
}

/* x (3, 9) -> fc1 (13 features, no bias) -> relu -> flatten -> fc2 -> MSE: a chain
 * without a bias (RELU_AUX, DRELU), over the last dimension, whose odd width puts the
 * mask's padding and the workspace's regions off any power of two. */
static stoke_graph *odd_chain(void)
{
    stoke_graph *g = stoke_graph_new("odd_chain");
    stoke_shape xs = {.ndim = 2, .dims = {3, 9}}, ys = {.ndim = 1, .dims = {5}};
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &xs);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &ys);
    stoke_tensor h = stoke_nn_relu(g, stoke_nn_linear(g, "fc1", x, 13, false));
    stoke_nn_mse(g, stoke_nn_linear(g, "fc2", stoke_nn_flatten(g, h), 5, true), y);
    return g;
}

/* The MLP (linear -> relu twice, then linear -> CE) at every precision, a chain without
 * a bias at an odd width, and a ReLU whose linear layer has another reader. */
static const cuda_case lt_chained[] = {
    {"lt chain fp32", mlp, 10, STOKE_PREC_FP32, SGD, 9, 2, 1e-4},
    {"lt chain bf16", mlp, 10, STOKE_PREC_BF16, SGD, 9, 2, 2e-2},
    {"lt chain fp16", mlp, 10, STOKE_PREC_FP16, SGD, 9, 2, 2e-2},
};
static const cuda_case lt_odd[] = {
    {"lt odd chain fp32", odd_chain, 0, STOKE_PREC_FP32, SGD, 7, 2, 1e-4},
    {"lt odd chain bf16", odd_chain, 0, STOKE_PREC_BF16, SGD, 7, 2, 2e-2},
};
static const cuda_case lt_skip = {"lt relu skip", relu_skip, 0, STOKE_PREC_FP32, SGD, 7, 2, 1e-4};

/* Those compare with the CPU step by step while their chains run fused on the GPU
 * (test_lt_epilogues). */
static void test_lt_chains(void)
{
    for (size_t i = 0; i < sizeof lt_chained / sizeof lt_chained[0]; i++)
        run_case(&lt_chained[i]);
    for (size_t i = 0; i < sizeof lt_odd / sizeof lt_odd[0]; i++)
        run_case(&lt_odd[i]);
    run_case(&lt_skip);
}

/* Counts of the epilogues queued. */
typedef struct lt_counts {
    int relu_fwd, relu_bwd, bias, bgradb, aux, daux;
} lt_counts;

static lt_counts lt_now(void)
{
    return (lt_counts){LTD.epi(NC_LT_EPI_RELU_AUX_BIAS), LTD.epi(NC_LT_EPI_DRELU_BGRAD),
                       LTD.epi(NC_LT_EPI_BIAS),          LTD.epi(NC_LT_EPI_BGRADB),
                       LTD.epi(NC_LT_EPI_RELU_AUX),      LTD.epi(NC_LT_EPI_DRELU)};
}

/* The epilogues one training forward and backward of c's graph queued on the GPU. */
static lt_counts lt_pass(const cuda_case *c, bool no_fusion)
{
    lt_counts a = lt_now();
    stoke_graph *g = c->build();
    stoke_model_opts o = opts_of(c, true);
    o.no_fusion = no_fusion;
    stoke_model *m = NULL;
    CHECK_MSG(stoke_model_new(g, &o, &m) == STOKE_OK, "%s: %s", c->name, stoke_last_error());
    if (m) {
        set_inputs(m, c->batch, NULL, 0);
        CHECK(train_pass(m, c->batch) == STOKE_OK);
        CHECK(stoke_model_sync(m) == STOKE_OK);
    }
    stoke_model_free(m);
    stoke_graph_free(g);
    lt_counts b = lt_now();
    return (lt_counts){b.relu_fwd - a.relu_fwd, b.relu_bwd - a.relu_bwd, b.bias - a.bias,
                       b.bgradb - a.bgradb,     b.aux - a.aux,           b.daux - a.daux};
}

/* The chains run fused (the ReLU's forward and backward epilogues queued) and the last
 * layer's bias by its epilogues; nothing fused with no_fusion or where the linear
 * layer has another reader. */
static void test_lt_epilogues(void)
{
    for (size_t i = 0; i < sizeof lt_chained / sizeof lt_chained[0]; i++) {
        lt_counts d = lt_pass(&lt_chained[i], false);
        CHECK_MSG(d.relu_fwd > 0 && d.relu_bwd > 0, "%s: %d, %d fused matmuls", lt_chained[i].name,
                  d.relu_fwd, d.relu_bwd);
        CHECK_MSG(d.bias > 0 && d.bgradb > 0, "%s: the output layer unfused", lt_chained[i].name);
    }
    lt_counts plain = lt_pass(&lt_chained[0], true);
    CHECK(plain.relu_fwd == 0 && plain.relu_bwd == 0);
    for (size_t i = 0; i < sizeof lt_odd / sizeof lt_odd[0]; i++) {
        lt_counts d = lt_pass(&lt_odd[i], false);
        CHECK_MSG(d.aux > 0 && d.daux > 0, "%s unfused", lt_odd[i].name);
    }
    lt_counts d = lt_pass(&lt_skip, false);
    CHECK(d.relu_fwd == 0 && d.relu_bwd == 0);
    CHECK(d.bias > 0 && d.bgradb > 0);
}

/* The fused chain against the same model unfused on the GPU (no_fusion): the same
 * loss and gradients up to the order of the bias gradient's sums. */
static void test_lt_fused_vs_unfused(void)
{
    stoke_graph *g = mlp();
    cuda_case c = {"lt fused vs unfused", mlp, 10, STOKE_PREC_FP32, SGD, 6, 1, 1e-5};
    stoke_model_opts o = opts_of(&c, true);
    stoke_model *fused = NULL, *plain = NULL;
    CHECK(stoke_model_new(g, &o, &fused) == STOKE_OK);
    o.no_fusion = true;
    CHECK(stoke_model_new(g, &o, &plain) == STOKE_OK);
    if (fused && plain) {
        feed(plain, fused, &c);
        CHECK(stoke_model_forward(plain, c.batch, true) == STOKE_OK);
        CHECK(stoke_model_backward(plain) == STOKE_OK);
        CHECK(stoke_model_forward(fused, c.batch, true) == STOKE_OK);
        CHECK(stoke_model_backward(fused) == STOKE_OK);
        CHECK(rel_err(stoke_model_loss(fused), stoke_model_loss(plain)) <= c.tol);
        for (int i = 0; i < stoke_graph_param_count(g); i++) {
            double d = diff(plain, stoke_model_grad(plain, i), fused, stoke_model_grad(fused, i),
                            (size_t)stoke_graph_param(g, i)->elems);
            CHECK_MSG(d <= c.tol, "gradient of %s: fused and unfused differ by %.3g",
                      stoke_graph_param(g, i)->name, d);
        }
    }
    stoke_model_free(fused);
    stoke_model_free(plain);
    stoke_graph_free(g);
}

/* Without cuBLASLt the backend is refused, naming the library. */
static void test_no_cublaslt(void)
{
    char *lt = env_save("STOKE_CUBLASLT_LIBRARY");
    setenv("STOKE_CUBLASLT_LIBRARY", "/nonexistent/libcublasLt.so.13", 1);
    stoke_graph *g = mlp();
    stoke_model_opts o = {.max_batch = 3, .training = true, .cuda = true};
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_ERR_UNAVAILABLE);
    CHECK_MSG(strstr(stoke_last_error(), "STOKE_CUBLASLT_LIBRARY=/nonexistent/libcublasLt.so.13"),
              "%s", stoke_last_error());
    stoke_graph_free(g);
    env_restore("STOKE_CUBLASLT_LIBRARY", lt);
}

/* Every matmul of the run kept cuBLASLt's rules and every descriptor was destroyed with
 * its model. */
static void test_lt_clean(void)
{
    CHECK_MSG(LTD.violations() == 0, "%d cuBLASLt violations, the last: %s", LTD.violations(),
              LTD.problem());
    CHECK_MSG(LTD.live() == 0, "%d cuBLASLt objects never destroyed", LTD.live());
    CHECK(LTD.calls() > 0);
}

/* ---- TF32 ---- */

/* TF32 turned off reaches every library call: fp32 models with convolutions (cuDNN),
 * linear layers (cuBLASLt) and attention's products (cuBLAS) train without a call the
 * real library could run on TF32 (the doubles count them), and the models do not claim
 * TF32; turned on, each library gets such calls (the scenario's H100 has TF32). */
static void test_tf32_calls(void)
{
    static const char *const counters[] = {"fake_cublas_tf32_calls", "fake_cublaslt_tf32_calls",
                                           "fake_cudnn_tf32_calls"};
    void *const libs[] = {doubles.blas, doubles.lt, doubles.dnn};
    int (*count[3])(void);
    for (int k = 0; k < 3; k++) {
        *(void **)&count[k] = dlsym(libs[k], counters[k]);
        CHECK(count[k] != NULL);
        if (!count[k])
            return;
    }
    static const cuda_case fp32[] = {
        {"tf32 cnn", cnn, 10, STOKE_PREC_FP32, SGD, 3, 1, 0},
        {"tf32 attention", attn_block, 7, STOKE_PREC_FP32, SGD, 3, 1, 0},
    };
    /* the models' option decides (stoke_model_opts.tf32, as the run's decision passes
     * it), the seam leaving it alone */
    tf32_by_options = true;
    for (int on = 0; on < 2; on++) {
        int before[3];
        for (int k = 0; k < 3; k++)
            before[k] = count[k]();
        for (size_t i = 0; i < sizeof fp32 / sizeof fp32[0]; i++) {
            stoke_graph *g = fp32[i].build();
            stoke_model_opts o = opts_of(&fp32[i], true);
            o.tf32 = on ? STOKE_TF32_ON : STOKE_TF32_OFF;
            stoke_model *m = NULL;
            CHECK_MSG(stoke_model_new(g, &o, &m) == STOKE_OK, "%s", stoke_last_error());
            if (m) {
                bool claims = strstr(stoke_model_device_name(m), ", TF32 matmuls") != NULL;
                CHECK_MSG(claims == on, "TF32 %s: %s", on ? "on" : "off",
                          stoke_model_device_name(m));
                set_inputs(m, fp32[i].batch, NULL, 0);
                CHECK(train_pass(m, fp32[i].batch) == STOKE_OK);
                CHECK(stoke_model_sync(m) == STOKE_OK);
            }
            stoke_model_free(m);
            stoke_graph_free(g);
        }
        for (int k = 0; k < 3; k++)
            CHECK_MSG(on ? count[k]() > before[k] : count[k]() == before[k], "TF32 %s: %d calls %s",
                      on ? "on" : "off", count[k]() - before[k], counters[k]);
    }
    tf32_by_options = false;
}

/* The TF32 pass's tolerance, on losses and gradient norms. TF32 keeps 10 of fp32's 23
 * mantissa bits: an operand is off by up to 2^-11 = 4.9e-4 relative if rounded, twice
 * that if truncated (the tensor cores may read only the top bits), so a product by
 * ~5e-4 to 1e-3. Rounding errors have either sign: a sum of K products is off by about
 * 5e-4 sqrt(K) products, and the sum itself, of products of either sign, is about
 * sqrt(K) products, so ~5e-4 of the values' scale whatever K; truncation's all shrink
 * the products, ~1e-3 of the sum. Losses and gradient norms follow those sums
 * smoothly through up to six matmuls and convolutions forward and back: several
 * times one product's error, 1e-2, half of bf16's 2e-2. Measured once with the
 * doubles rounding fp32 operands to TF32 (to nearest, then truncated; not kept): at
 * most 1.3e-3 on losses and 4.5e-3 on gradient norms.
 * Element by element TF32 also flips decisions: a ReLU input or a max-pool's maximum
 * within TF32's error of its rival sends a sample's gradient the other way, and
 * AdamW moves a weight by up to lr whatever its gradient's size, so a near-zero
 * gradient whose sign flips moves it 2 lr. The same measurement: up to 0.3 on
 * gradients and 0.8 on weights with a correct backend, so those are printed, not
 * held. */
#define TF32_TOL 1e-2

/* Says what the CUDA models run on (the device name of a model made now): false, and a
 * failed check with the reason, when none can be made. */
static bool print_device(const char *what)
{
    stoke_graph *g = mlp();
    stoke_model_opts o = {.max_batch = 1, .training = true, .cuda = true};
    stoke_model *m = NULL;
    stoke_status st = stoke_model_new(g, &o, &m);
    CHECK_MSG(st == STOKE_OK, "no CUDA model: %s", stoke_last_error());
    if (m)
        printf("%s: %s\n", what, stoke_model_device_name(m));
    fflush(stdout);
    bool ok = m != NULL;
    stoke_model_free(m);
    stoke_graph_free(g);
    return ok;
}

/* The fp32 cases again with TF32 on: losses and gradient norms within TF32_TOL (or the
 * case's own, if larger), gradients and weights measured. */
static void tf32_pass(const char *only)
{
    tf32_by_options = true; /* the options' AUTO: the rule */
    if (print_device("TF32 pass on")) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            cuda_case c = cases[i];
            if (c.precision != STOKE_PREC_FP32 || (only && !strstr(c.name, only)))
                continue;
            char name[128];
            snprintf(name, sizeof name, "%s, TF32", c.name);
            c.name = name;
            c.tol = fmax(c.tol, TF32_TOL);
            run_case_held(&c, true);
        }
    }
    tf32_by_options = false;
}

/* ---- main ---- */

/* A test of the list main runs; `needs` says what it reads of the doubles (NULL:
 * nothing), skipped in real mode with that reason. */
typedef struct named_test {
    const char *name;
    void (*run)(void);
    const char *needs;
} named_test;

static const named_test tests[] = {
    {"unavailable", test_unavailable, NULL},
    {"device of the doubles", test_device_of_doubles, "the scenario's device, the host kernels"},
    {"bad class", test_bad_class, NULL},
    {"attention choice", test_attn_choice, NULL},
    {"attention big head", test_attn_big_head, NULL},
    {"flash bits", test_flash_bits, NULL},
    {"bad id", test_bad_id, NULL},
    {"dropout blocks", test_dropout_blocks, NULL},
    {"recompute", test_recompute, NULL},
    {"bad targets", test_bad_targets, NULL},
    {"conversions", test_conversions, NULL},
    {"tree sums", test_tree_sums, NULL},
    {"phase marks", test_phase_marks, NULL},
    {"phase clock", test_phase_clock, "the runtime double's clock"},
    {"step not finite", test_step_not_finite, NULL},
    {"step waits", test_step_waits, "the runtime double's call log"},
    {"graphs", test_graphs, NULL},
    {"graphs refused", test_graphs_refused, "STOKE_FAKE_CUDA_NO_CAPTURE"},
    {"reducer graphs", test_reducer_graphs, NULL},
    {"no cudnn", test_no_cudnn, NULL},
    {"pool cases", test_pool_cases, NULL},
    {"fused chains", test_fused_chains, "the cuDNN double's count of fused calls"},
    {"conv batches", test_conv_batches, NULL},
    {"conv plans kept", test_conv_plans_kept, "the cuDNN double's count of live objects"},
    {"tf32 calls", test_tf32_calls, "the doubles' count of calls that allow TF32"},
    {"cudnn clean", test_cudnn_clean, "the cuDNN double's violations and live objects"},
};

/* The cuBLASLt group (NAME-FILTER "lt" runs it alone). */
static const named_test lt_tests[] = {
    {"lt chains", test_lt_chains, NULL},
    {"lt epilogues", test_lt_epilogues, "the cuBLASLt double's count of epilogues"},
    {"lt fused vs unfused", test_lt_fused_vs_unfused, NULL},
    {"no cublaslt", test_no_cublaslt, NULL},
    {"lt clean", test_lt_clean, "the cuBLASLt double's violations and live objects"},
};

static void run_tests(const named_test *t, size_t n, bool real)
{
    for (size_t i = 0; i < n; i++) {
        if (real && t[i].needs) {
            printf("skip: %s (needs the CUDA test doubles: %s)\n", t[i].name, t[i].needs);
        } else {
            int failures = check_failures;
            t[i].run();
            printf("%-4s %s\n", check_failures == failures ? "ok" : "FAIL", t[i].name);
        }
        fflush(stdout);
    }
}

/* Normal mode: the backend on the doubles and the kernels' host build, the doubles
 * loaded by the test too. */
static bool load_doubles(void)
{
    setenv("STOKE_CUDART_LIBRARY", FAKE_CUDART, 1);
    setenv("STOKE_CUBLAS_LIBRARY", FAKE_CUBLAS, 1);
    setenv("STOKE_CUBLASLT_LIBRARY", FAKE_CUBLASLT, 1);
    setenv("STOKE_CUDNN_LIBRARY", FAKE_CUDNN, 1);
    setenv("STOKE_FAKE_GPU_SCENARIO", STOKE_TEST_DATA "/scenarios/cuda_train.gpu", 1);
    setenv("STOKE_CUDA_KERNELS", "host", 1);
    doubles.rt = dlopen(FAKE_CUDART, RTLD_NOW);
    doubles.blas = dlopen(FAKE_CUBLAS, RTLD_NOW);
    doubles.lt = dlopen(FAKE_CUBLASLT, RTLD_NOW);
    doubles.dnn = dlopen(FAKE_CUDNN, RTLD_NOW);
    bool ok = doubles.rt && doubles.blas && doubles.lt && doubles.dnn;
    CHECK_MSG(ok, "%s", dlerror());
    return ok && lt_double(doubles.lt);
}

static void close_doubles(void)
{
    void *libs[] = {doubles.lt, doubles.blas, doubles.dnn, doubles.rt};
    for (int i = 0; i < 4; i++)
        if (libs[i])
            dlclose(libs[i]);
}

/* test_nn_cuda [--real] [NAME-FILTER]. Normal mode runs everything on the doubles.
 * --real runs on the libraries, device and kernels the environment names (the
 * STOKE_*_LIBRARY and STOKE_CUDA_KERNELS variables as the caller set them, or their
 * defaults: on a GPU, NVIDIA's libraries and libstoke_cuda.so) every comparison with
 * the CPU and every test that reads nothing of the doubles, saying which it skips,
 * and the fp32 cases once more on TF32. A filter runs the cases whose names contain
 * it ("lt": the cuBLASLt group). Both modes compare with TF32 off, so fp32 is held to
 * fp32's tolerances on a GPU too. */
int main(int argc, char **argv)
{
    bool real = argc > 1 && strcmp(argv[1], "--real") == 0;
    const char *only = argc > 1 + real ? argv[1 + real] : NULL;
    if (!real && !load_doubles())
        return CHECK_DONE();
    cuda_set_ctx_hook(test_ctx_hook);
    if (!print_device("device"))
        return CHECK_DONE();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!only || strstr(cases[i].name, only))
            run_case(&cases[i]);
        if (strstr(cases[i].name, "attention") && (!only || strstr(cases[i].name, only)))
            run_forced(&cases[i]);
    }
    if (real)
        tf32_pass(only);
    if (!only)
        run_tests(tests, sizeof tests / sizeof tests[0], real);
    if (!only || strcmp(only, "lt") == 0)
        run_tests(lt_tests, sizeof lt_tests / sizeof lt_tests[0], real);
    close_doubles();
    return CHECK_DONE();
}
