/* test_nn_graph.c - the nn core: graph building and its errors, parameter tables of the
 * presets, the memory plan and the largest batch that fits, seeded initialization,
 * and the executor end to end (finite differences through whole presets, SGD
 * training, bit-identical reruns, mixed precision and loss scaling). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "stoke/nn.h"

static stoke_shape shp(int ndim, int64_t a, int64_t b, int64_t c)
{
    stoke_shape s = {.ndim = ndim, .dims = {a, b, c}};
    return s;
}

/* A small deterministic generator for test data (xorshift64*). */
static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) * 0x1.0p-53;
}

static size_t al(size_t n) { return (n + 63) / 64 * 64; }

/* ---- graph building errors ---- */

static void test_graph_errors(void)
{
    stoke_shape img = shp(3, 1, 8, 8), vec = shp(1, 10, 0, 0), s12 = shp(1, 12, 0, 0);
    stoke_graph *g = stoke_graph_new("bad");
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &img);
    stoke_tensor a = stoke_nn_conv2d(g, "conv1", x, 4, 3, 1, 1, true);
    stoke_tensor b = stoke_nn_conv2d(g, "conv2", x, 5, 3, 1, 1, true);
    CHECK(a >= 0 && b >= 0);
    CHECK(stoke_graph_status(g) == STOKE_OK);
    stoke_tensor s = stoke_nn_add(g, a, b); /* (4, 8, 8) + (5, 8, 8) */
    CHECK(s == STOKE_NO_TENSOR);
    CHECK(stoke_graph_status(g) == STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "conv1 is (4, 8, 8)");
    CHECK_STR_CONTAINS(stoke_last_error(), "conv2 is (5, 8, 8)");
    /* later calls in the chain are silent; the first error stays */
    stoke_tensor r = stoke_nn_relu(g, s);
    CHECK(r == STOKE_NO_TENSOR);
    stoke_nn_linear(g, "fc", stoke_nn_flatten(g, r), 3, true);
    CHECK(stoke_graph_status(g) == STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "conv1 is (4, 8, 8)");
    stoke_graph_free(g);

    g = stoke_graph_new("bad");
    x = stoke_nn_input(g, "x", STOKE_F32, &vec);
    stoke_nn_conv2d(g, "conv1", x, 4, 3, 1, 1, true);
    CHECK(stoke_graph_status(g) == STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "conv1: needs a (C, H, W) image");
    stoke_graph_free(g);

    g = stoke_graph_new("bad");
    x = stoke_nn_input(g, "x", STOKE_F32, &vec);
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_F32, &s12);
    stoke_tensor p = stoke_nn_linear(g, "fc2", x, 10, true);
    stoke_nn_mse(g, p, y);
    CHECK_STR_CONTAINS(stoke_last_error(), "prediction fc2 is (10,)");
    CHECK_STR_CONTAINS(stoke_last_error(), "target y is (12,)");
    stoke_graph_free(g);

    g = stoke_graph_new("bad");
    x = stoke_nn_input(g, "x", STOKE_F32, &vec);
    stoke_nn_linear(g, "fc1", x, 10, true);
    stoke_nn_linear(g, "fc1", x, 10, true);
    CHECK_STR_CONTAINS(stoke_last_error(), "\"fc1\" is used twice");
    stoke_graph_free(g);

    g = stoke_graph_new("bad");
    x = stoke_nn_input(g, "x", STOKE_F32, &img);
    stoke_nn_conv2d(g, "conv1", x, 4, 9, 1, 0, true); /* 9x9 on 8x8 */
    CHECK_STR_CONTAINS(stoke_last_error(), "conv1: a 9x9 kernel with padding 0 does not fit");
    stoke_graph_free(g);

    g = stoke_graph_new("bad");
    stoke_shape seq = shp(2, 4, 6, 0);
    x = stoke_nn_input(g, "x", STOKE_F32, &seq);
    stoke_nn_attention(g, "attn", x, 4);
    CHECK_STR_CONTAINS(stoke_last_error(), "attn: 6 channels of x do not split into 4 heads");
    stoke_graph_free(g);

    g = stoke_graph_new("bad");
    x = stoke_nn_input(g, "x", STOKE_F32, &vec);
    stoke_tensor l = stoke_nn_linear(g, "fc", x, 3, true);
    stoke_nn_cross_entropy(g, l, x, 0.0f); /* float target */
    CHECK_STR_CONTAINS(stoke_last_error(), "target x must be an int32 class");
    stoke_graph_free(g);

    /* an empty or broken graph cannot be planned or compiled */
    g = stoke_graph_new("empty");
    stoke_model_opts o = {.max_batch = 4};
    stoke_mem_plan plan;
    CHECK(stoke_graph_plan(g, &o, &plan) == STOKE_ERR_ARG);
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_ERR_ARG && m == NULL);
    stoke_graph_free(g);
}

/* ---- presets: parameter names and counts ---- */

static int find_param(const stoke_graph *g, const char *name)
{
    for (int i = 0; i < stoke_graph_param_count(g); i++)
        if (strcmp(stoke_graph_param(g, i)->name, name) == 0)
            return i;
    return -1;
}

static void check_param(const stoke_graph *g, const char *name, int ndim, const int64_t *dims,
                        bool trainable)
{
    int i = find_param(g, name);
    CHECK_MSG(i >= 0, "no parameter %s", name);
    if (i < 0)
        return;
    const stoke_param_info *p = stoke_graph_param(g, i);
    CHECK_INT_EQ(p->shape.ndim, ndim);
    for (int d = 0; d < ndim && d < p->shape.ndim; d++)
        CHECK_INT_EQ(p->shape.dims[d], dims[d]);
    CHECK(p->trainable == trainable);
}

static void test_preset_params(void)
{
    /* the reference CNN on Fashion-MNIST, as PyTorch counts it:
     * sum(p.numel() for p in model.parameters()) of Conv2d(1,32,3,padding=1),
     * Conv2d(32,64,3,padding=1), Linear(64*7*7,128), Linear(128,10) */
    stoke_shape in = shp(2, 28, 28, 0);
    stoke_graph *g = stoke_preset_cnn(&in, 10);
    CHECK(g != NULL);
    if (!g)
        return;
    int64_t torch_count = (32 * 1 * 3 * 3 + 32) + (64 * 32 * 3 * 3 + 64) +
                          (128 * (64 * 7 * 7) + 128) + (10 * 128 + 10);
    CHECK_INT_EQ(stoke_graph_trainable_elems(g), torch_count);
    CHECK_INT_EQ(stoke_graph_param_count(g), 8);
    check_param(g, "conv1.weight", 4, (int64_t[]){32, 1, 3, 3}, true);
    check_param(g, "conv1.bias", 1, (int64_t[]){32}, true);
    check_param(g, "conv2.weight", 4, (int64_t[]){64, 32, 3, 3}, true);
    check_param(g, "fc1.weight", 2, (int64_t[]){128, 3136}, true);
    check_param(g, "fc2.weight", 2, (int64_t[]){10, 128}, true);
    check_param(g, "fc2.bias", 1, (int64_t[]){10}, true);
    const stoke_shape *ls = stoke_graph_shape(g, stoke_graph_find(g, "logits"));
    CHECK(ls && ls->ndim == 1 && ls->dims[0] == 10);
    stoke_graph_free(g);

    stoke_shape flat = shp(1, 784, 0, 0);
    int64_t hidden[] = {512, 512};
    g = stoke_preset_mlp(&flat, hidden, 2, 10);
    CHECK(g && stoke_graph_trainable_elems(g) == 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
    if (g)
        check_param(g, "fc3.weight", 2, (int64_t[]){10, 512}, true);
    stoke_graph_free(g);

    stoke_shape img = shp(3, 3, 16, 16);
    g = stoke_preset_resnet(&img, 10, 8, 2);
    CHECK(g != NULL);
    if (g) {
        /* stem 3x3 (8), block1 2 x 3x3 (8->8), block2 3x3 (8->16) + 3x3 (16->16) + 1x1
         * shortcut (8->16), BN weight+bias per conv, fc 16->10 */
        int64_t want = 8 * 3 * 9 + 2 * 8 + 2 * (8 * 8 * 9 + 2 * 8) + (16 * 8 * 9 + 2 * 16) +
                       (16 * 16 * 9 + 2 * 16) + (16 * 8 + 2 * 16) + (10 * 16 + 10);
        CHECK_INT_EQ(stoke_graph_trainable_elems(g), want);
        check_param(g, "stem.conv.weight", 4, (int64_t[]){8, 3, 3, 3}, true);
        check_param(g, "block2.down.conv.weight", 4, (int64_t[]){16, 8, 1, 1}, true);
        check_param(g, "block2.down.bn.running_mean", 1, (int64_t[]){16}, false);
        check_param(g, "block1.b.bn.running_var", 1, (int64_t[]){8}, false);
        CHECK(find_param(g, "stem.conv.bias") < 0); /* conv before BN has no bias */
    }
    stoke_graph_free(g);

    stoke_shape gray = shp(3, 1, 8, 8);
    g = stoke_preset_transformer(&gray, 4, 16, 2, 4, 5);
    CHECK(g != NULL);
    if (g) {
        int64_t T = 4, P = 16, h = 16;
        int64_t layer =
            2 * (2 * h) + (3 * h * h + 3 * h + h * h + h) + (4 * h * h + 4 * h) + (h * 4 * h + h);
        int64_t want = (h * P + h) + T * h + 2 * layer + 2 * h + (5 * h + 5);
        CHECK_INT_EQ(stoke_graph_trainable_elems(g), want);
        check_param(g, "layer1.attn.in_proj_weight", 2, (int64_t[]){48, 16}, true);
        check_param(g, "layer2.attn.out_proj.weight", 2, (int64_t[]){16, 16}, true);
        check_param(g, "pos.weight", 2, (int64_t[]){4, 16}, true);
        check_param(g, "layer2.fc1.weight", 2, (int64_t[]){64, 16}, true);
    }
    stoke_graph_free(g);

    stoke_shape obs = shp(1, 6, 0, 0);
    int64_t trunk[] = {32, 32};
    stoke_actor_critic_opts a2c = {.targets = 3};
    g = stoke_preset_actor_critic(&obs, trunk, 2, 4, &a2c);
    CHECK(g != NULL);
    if (g) {
        CHECK_INT_EQ(stoke_graph_trainable_elems(g),
                     6 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4 + 32 * 1 + 1);
        check_param(g, "policy.weight", 2, (int64_t[]){4, 32}, true);
        check_param(g, "value.weight", 2, (int64_t[]){1, 32}, true);
        CHECK(stoke_graph_find(g, "policy") >= 0 && stoke_graph_find(g, "value") >= 0);
        stoke_tensor y = stoke_graph_find(g, "y");
        CHECK(y >= 0 && stoke_graph_shape(g, y)->ndim == 1 &&
              stoke_graph_shape(g, y)->dims[0] == 3);
    }
    stoke_graph_free(g);
    stoke_actor_critic_opts bad_targets = {.targets = 5};
    CHECK(stoke_preset_actor_critic(&obs, trunk, 2, 4, &bad_targets) == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "not 5");

    /* presets refuse bad sizes with a message */
    CHECK(stoke_preset_cnn(&in, 0) == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "classes");
    stoke_shape odd = shp(3, 1, 9, 9);
    CHECK(stoke_preset_transformer(&odd, 4, 16, 1, 4, 3) == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "patchify");
}

/* ---- memory plan of the cnn preset, by hand ---- */

static void test_cnn_plan(void)
{
    stoke_shape in = shp(2, 28, 28, 0);
    stoke_graph *g = stoke_preset_cnn(&in, 10);
    if (!g) {
        CHECK(0);
        return;
    }
    stoke_model_opts o = {.max_batch = 32,
                          .training = true,
                          .no_fusion = true,
                          .optim = {.kind = STOKE_SGD, .momentum = 0.9f}};
    stoke_mem_plan p;
    CHECK(stoke_graph_plan(g, &o, &p) == STOKE_OK);
    /* parameters: each array 64-byte aligned */
    size_t params = al(32 * 9 * 4) + al(32 * 4) + al(64 * 32 * 9 * 4) + al(64 * 4) +
                    al(128 * 3136 * 4) + al(128 * 4) + al(10 * 128 * 4) + al(10 * 4);
    CHECK_INT_EQ(p.params, params);
    CHECK_INT_EQ(p.grads, params);
    CHECK_INT_EQ(p.optim, params); /* one momentum buffer each */
    /* per sample: each node's output (and its gradient when a parameter lies
     * upstream), 64-byte aligned; reshape and flatten alias their input */
    size_t c1 = al(32 * 28 * 28 * 4), p1 = al(32 * 14 * 14 * 4), c2 = al(64 * 14 * 14 * 4),
           p2 = al(64 * 7 * 7 * 4), f1 = al(128 * 4), f2 = al(10 * 4);
    size_t act = al(784 * 4)                         /* x */
                 + 2 * c1 + 2 * c1                   /* conv1, relu: out + grad */
                 + 2 * p1 + 2 * c2 + 2 * c2 + 2 * p2 /* pool1, conv2, relu, pool2 */
                 + 2 * f1 + 2 * f1 + 2 * f2          /* fc1, relu, fc2 */
                 + al(4)                             /* y */
                 + al(4) + al(4);                    /* loss, accuracy */
    CHECK_INT_EQ(p.activations_per_sample, act);
    CHECK_INT_EQ(p.total, p.params + p.grads + p.optim + 32 * act + p.workspace);
    CHECK(p.workspace > 0); /* the conv kernels' scratch */

    /* fused (the default): each conv -> relu -> pool chain keeps only the pooled
     * output, its gradient and a byte per pooled element (the argmax); fc1 -> relu only
     * the ReLU's output and gradient */
    o.no_fusion = false;
    stoke_mem_plan pf;
    CHECK(stoke_graph_plan(g, &o, &pf) == STOKE_OK);
    size_t fused = al(784 * 4) + 2 * p1 + al(32 * 14 * 14) + 2 * p2 + al(64 * 7 * 7) + 2 * f1 +
                   2 * f2 + al(4) + al(4) + al(4);
    CHECK_INT_EQ(pf.activations_per_sample, fused);
    CHECK_INT_EQ(pf.params + pf.grads + pf.optim, p.params + p.grads + p.optim);
    o.no_fusion = true;

    /* AdamW: two moments; inference: parameters, activations and workspace only */
    o.optim.kind = STOKE_ADAMW;
    stoke_mem_plan pa;
    CHECK(stoke_graph_plan(g, &o, &pa) == STOKE_OK);
    CHECK_INT_EQ(pa.optim, 2 * params);
    o.training = false;
    stoke_mem_plan pi;
    CHECK(stoke_graph_plan(g, &o, &pi) == STOKE_OK);
    CHECK_INT_EQ(pi.grads + pi.optim, 0);
    CHECK_INT_EQ(pi.activations_per_sample,
                 al(784 * 4) + 2 * c1 + p1 + 2 * c2 + p2 + 2 * f1 + f2 + 3 * al(4));
    /* bf16: a bf16 copy of each conv/linear weight */
    o.training = true;
    o.optim.kind = STOKE_SGD;
    o.precision = STOKE_PREC_BF16;
    stoke_mem_plan pb;
    CHECK(stoke_graph_plan(g, &o, &pb) == STOKE_OK);
    CHECK_INT_EQ(pb.params, params + al(32 * 9 * 2) + al(64 * 32 * 9 * 2) + al(128 * 3136 * 2) +
                                al(10 * 128 * 2));

    /* the model allocates exactly the plan */
    o.precision = STOKE_PREC_FP32;
    o.max_batch = 8;
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    stoke_mem_plan p8;
    CHECK(stoke_graph_plan(g, &o, &p8) == STOKE_OK);
    if (m)
        CHECK_INT_EQ(stoke_model_used_mem(m), p8.total);
    stoke_model_free(m);

    /* the largest batch that fits: plan(b) fits, plan(b + 1) does not */
    o.max_batch = 16;
    CHECK(stoke_graph_plan(g, &o, &p) == STOKE_OK);
    size_t budgets[] = {p.params * 3 + 5 * act + 12345, p.total, p.total - 1, 40u << 20};
    for (size_t k = 0; k < sizeof budgets / sizeof *budgets; k++) {
        int64_t b = stoke_plan_max_batch(&p, budgets[k], 0);
        CHECK_MSG(b >= 1, "budget %zu gave batch %lld", budgets[k], (long long)b);
        stoke_model_opts ob = o;
        stoke_mem_plan pb1, pb2;
        ob.max_batch = b;
        CHECK(stoke_graph_plan(g, &ob, &pb1) == STOKE_OK && pb1.total <= budgets[k]);
        ob.max_batch = b + 1;
        CHECK(stoke_graph_plan(g, &ob, &pb2) == STOKE_OK && pb2.total > budgets[k]);
    }
    /* memory outside the model that grows with the batch counts too */
    size_t extra = 3 * act, bud = 40u << 20;
    int64_t be = stoke_plan_max_batch(&p, bud, extra);
    CHECK(be >= 1 && be < stoke_plan_max_batch(&p, bud, 0));
    {
        stoke_model_opts ob = o;
        stoke_mem_plan pe1, pe2;
        ob.max_batch = be;
        CHECK(stoke_graph_plan(g, &ob, &pe1) == STOKE_OK && pe1.total + (size_t)be * extra <= bud);
        ob.max_batch = be + 1;
        CHECK(stoke_graph_plan(g, &ob, &pe2) == STOKE_OK &&
              pe2.total + (size_t)(be + 1) * extra > bud);
    }
    /* 16 fits p.total exactly; a larger batch may too, where the workspace shrinks */
    CHECK(stoke_plan_max_batch(&p, p.total, 0) >= 16);
    CHECK_INT_EQ(stoke_plan_max_batch(&p, p.params, 0), 0);
    /* a budget far past what the kernels can index (issue 9: 24.6 GB gave 0, where
     * the bound ignoring the workspace lies beyond the int range of the kernels) */
    int64_t huge = stoke_plan_max_batch(&p, (size_t)1 << 40, 0);
    CHECK_MSG(huge >= 1000, "1 TB gave batch %lld", (long long)huge);
    /* capped by the epoch: a batch larger than the data never runs */
    o.epoch_samples = 600;
    CHECK(stoke_graph_plan(g, &o, &p) == STOKE_OK);
    CHECK_INT_EQ(stoke_plan_max_batch(&p, (size_t)1 << 40, 0), 600);
    stoke_graph_free(g);
}

/* ---- seeded initialization ---- */

static void test_init(void)
{
    stoke_shape in = shp(2, 28, 28, 0);
    stoke_graph *g = stoke_preset_cnn(&in, 10);
    stoke_model_opts o = {.max_batch = 2, .seed = 7};
    stoke_model *a = NULL, *b = NULL, *c = NULL;
    CHECK(g && stoke_model_new(g, &o, &a) == STOKE_OK);
    CHECK(stoke_model_new(g, &o, &b) == STOKE_OK);
    o.seed = 8;
    CHECK(stoke_model_new(g, &o, &c) == STOKE_OK);
    if (!a || !b || !c) {
        CHECK(0);
        return;
    }
    for (int i = 0; i < stoke_graph_param_count(g); i++) {
        const stoke_param_info *p = stoke_graph_param(g, i);
        size_t bytes = (size_t)p->elems * sizeof(float);
        CHECK_MSG(memcmp(stoke_model_param(a, i), stoke_model_param(b, i), bytes) == 0,
                  "%s differs between two models with seed 7", p->name);
        CHECK_MSG(memcmp(stoke_model_param(a, i), stoke_model_param(c, i), bytes) != 0,
                  "%s equal for seeds 7 and 8", p->name);
        /* PyTorch's bounds: 1/sqrt(fan_in) for weights and biases of conv and linear */
        int64_t fan_in = strstr(p->name, "conv1")   ? 9
                         : strstr(p->name, "conv2") ? 32 * 9
                         : strstr(p->name, "fc1")   ? 3136
                                                    : 128;
        double bound = 1.0 / sqrt((double)fan_in);
        const float *w = stoke_model_param(a, i);
        double mx = 0, mean = 0, var = 0;
        for (int64_t k = 0; k < p->elems; k++) {
            mx = fmax(mx, fabs(w[k]));
            mean += w[k];
            var += (double)w[k] * w[k];
        }
        mean /= (double)p->elems;
        var /= (double)p->elems;
        CHECK_MSG(mx < bound, "%s: max |w| %g >= bound %g", p->name, mx, bound);
        if (p->elems >= 1000) { /* U(-b, b): mean 0, variance b^2/3, max near b */
            double sd = bound / sqrt(3.0 * (double)p->elems);
            CHECK_MSG(fabs(mean) < 5 * sd, "%s: mean %g", p->name, mean);
            CHECK_MSG(fabs(var / (bound * bound / 3) - 1) < 0.05, "%s: variance %g vs %g", p->name,
                      var, bound * bound / 3);
            CHECK_MSG(mx > 0.99 * bound, "%s: max %g of bound %g", p->name, mx, bound);
        }
    }
    stoke_model_free(a);
    stoke_model_free(b);
    stoke_model_free(c);
    stoke_graph_free(g);

    /* the position table of the transformer is N(0, 0.02), norms start at 1 and 0 */
    stoke_shape seq = shp(2, 64, 8, 0);
    g = stoke_preset_transformer(&seq, 0, 32, 1, 4, 3);
    o.seed = 1;
    CHECK(g && stoke_model_new(g, &o, &a) == STOKE_OK);
    if (a) {
        int i = find_param(g, "pos.weight");
        const float *w = stoke_model_param(a, i);
        double s2 = 0;
        for (int k = 0; k < 64 * 32; k++)
            s2 += (double)w[k] * w[k];
        CHECK_NEAR(sqrt(s2 / (64 * 32)), 0.02, 0.002);
        CHECK(stoke_model_param(a, find_param(g, "layer1.ln1.weight"))[5] == 1.0f);
        CHECK(stoke_model_param(a, find_param(g, "layer1.attn.in_proj_bias"))[7] == 0.0f);
        const float *ip = stoke_model_param(a, find_param(g, "layer1.attn.in_proj_weight"));
        double xb = sqrt(6.0 / (32 + 96)), mx = 0;
        for (int k = 0; k < 96 * 32; k++)
            mx = fmax(mx, fabs(ip[k]));
        CHECK(mx < xb && mx > 0.95 * xb);
    }
    stoke_model_free(a);
    stoke_graph_free(g);
}

/* ---- the executor ---- */

/* Random inputs for every input of the model: floats in [-1, 1], classes in [0, K). */
static void fill_inputs(stoke_model *m, int64_t batch, int64_t classes)
{
    const stoke_graph *g = stoke_model_graph(m);
    for (int t = 0; t < stoke_graph_node_count(g); t++) {
        void *p = stoke_model_input(m, t);
        if (!p)
            continue;
        int64_t n = batch * stoke_shape_elems(stoke_graph_shape(g, t));
        const char *name = stoke_graph_node_name(g, t);
        bool ids = strcmp(name, "y") == 0 ? classes > 1
                                          : strcmp(name, "action") == 0 || strcmp(name, "tok") == 0;
        const stoke_shape *ts = stoke_graph_shape(g, t);
        if (!strcmp(name, "y") && stoke_graph_find(g, "policy") >= 0 && ts->ndim == 1) {
            /* actor-critic rows [action, advantage, (old_log_prob,) return]: the old
             * log-probability near the initial policy's -log K keeps PPO's ratio near 1,
             * inside the clip range (the clipped regions are the loss test's) */
            int64_t cols = ts->dims[0];
            for (int64_t b = 0; b < batch; b++) {
                float *r = (float *)p + b * cols;
                r[0] = (float)(int)(urand() * (double)classes);
                for (int64_t c = 1; c < cols; c++)
                    r[c] = (float)(2 * urand() - 1);
                if (cols == 4)
                    r[2] = (float)(-log((double)classes) + 0.05 * (2 * urand() - 1));
            }
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            if (ids)
                ((int32_t *)p)[i] = (int32_t)(urand() * (double)classes);
            else
                ((float *)p)[i] = (float)(2 * urand() - 1);
        }
    }
}

static double loss_at(stoke_model *m, int64_t batch)
{
    CHECK(stoke_model_forward(m, batch, true) == STOKE_OK);
    return stoke_model_loss(m);
}

/* Backward against central differences of the whole model's loss, along a random
 * direction v over all trainable parameters (entries U(-1, 1) times the RMS of each
 * parameter, at least 0.05, so every layer moves in proportion): sum(grad . v) vs
 * (L(w + h v) - L(w - h v)) / 2h with h = 1e-3. The executor runs in fp32; the
 * differences are taken in float64 from its losses. Two effects bound the agreement:
 * fp32 rounding of the loss (~1e-7 relative, /2h: ~1e-4) and the ReLU / max-pool
 * kinks that some of the thousands of units cross within +-h (measured: the cnn is
 * off by 3e-4 absolute, the smooth models by < 0.1%), hence 1% relative + 5e-4
 * absolute: a missing or doubled gradient term is far outside it. Also two single
 * coordinates with h = 1e-2 at 5% + 2e-4. */
static void check_fd(stoke_graph *g, int64_t batch, int64_t classes, const char *what)
{
    if (!g) {
        CHECK_MSG(0, "%s: preset failed: %s", what, stoke_last_error());
        return;
    }
    stoke_model_opts o = {
        .max_batch = batch, .training = true, .seed = 3, .optim = {.kind = STOKE_SGD}};
    stoke_model *m = NULL;
    stoke_status st = stoke_model_new(g, &o, &m);
    CHECK_MSG(st == STOKE_OK, "%s: %s", what, stoke_last_error());
    if (!m)
        return;
    fill_inputs(m, batch, classes);
    CHECK(stoke_model_forward(m, batch, true) == STOKE_OK);
    st = stoke_model_backward(m);
    CHECK_MSG(st == STOKE_OK, "%s: %s", what, stoke_last_error());
    int np = stoke_graph_param_count(g);
    double dot = 0, h = 1e-3;
    float **v = calloc((size_t)np, sizeof *v);
    for (int i = 0; i < np; i++) {
        const stoke_param_info *p = stoke_graph_param(g, i);
        if (!p->trainable)
            continue;
        v[i] = malloc((size_t)p->elems * sizeof(float));
        const float *gr = stoke_model_grad(m, i), *w = stoke_model_param(m, i);
        double rms = 0;
        for (int64_t k = 0; k < p->elems; k++)
            rms += (double)w[k] * w[k];
        rms = sqrt(rms / (double)p->elems);
        if (rms < 0.05) /* zero-initialized biases */
            rms = 0.05;
        for (int64_t k = 0; k < p->elems; k++) {
            v[i][k] = (float)((2 * urand() - 1) * rms);
            dot += (double)gr[k] * v[i][k];
        }
    }
    double lp = 0, lm = 0;
    for (int sgn = 1; sgn >= -1; sgn -= 2) {
        for (int i = 0; i < np; i++)
            for (int64_t k = 0; v[i] && k < stoke_graph_param(g, i)->elems; k++)
                stoke_model_param(m, i)[k] += (float)(sgn * h) * v[i][k];
        double l = loss_at(m, batch);
        if (sgn == 1)
            lp = l;
        else
            lm = l;
        for (int i = 0; i < np; i++)
            for (int64_t k = 0; v[i] && k < stoke_graph_param(g, i)->elems; k++)
                stoke_model_param(m, i)[k] -= (float)(sgn * h) * v[i][k];
    }
    double fd = (lp - lm) / (2 * h);
    if (getenv("NN_FD_DEBUG"))
        fprintf(stderr, "%s: dot %.6g fd %.6g rel %.3g\n", what, dot, fd,
                fabs(fd - dot) / fabs(dot));
    CHECK_MSG(fabs(fd - dot) <= 0.01 * fabs(dot) + 5e-4,
              "%s: directional derivative %g, finite difference %g", what, dot, fd);
    /* single coordinates: the first weight of the first and last layers */
    int picks[2] = {0, -1};
    for (int i = np - 1; i >= 0; i--)
        if (stoke_graph_param(g, i)->trainable && stoke_graph_param(g, i)->shape.ndim >= 2) {
            picks[1] = i;
            break;
        }
    for (int q = 0; q < 2; q++) {
        int i = picks[q];
        if (i < 0)
            continue;
        double gk = stoke_model_grad(m, i)[1];
        float *w = &stoke_model_param(m, i)[1];
        float w0 = *w;
        double hk = 1e-2;
        *w = w0 + (float)hk;
        double a = loss_at(m, batch);
        *w = w0 - (float)hk;
        double b = loss_at(m, batch);
        *w = w0;
        double fdk = (a - b) / (2 * hk);
        CHECK_MSG(fabs(fdk - gk) <= 0.05 * fabs(gk) + 2e-4, "%s: %s[1] grad %g, fd %g", what,
                  stoke_graph_param(g, i)->name, gk, fdk);
    }
    for (int i = 0; i < np; i++)
        free(v[i]);
    free(v);
    stoke_model_free(m);
    stoke_graph_free(g);
}

static void test_fd_presets(void)
{
    stoke_shape flat = shp(1, 12, 0, 0), img = shp(3, 1, 8, 8), rgb = shp(3, 3, 8, 8);
    int64_t hid[] = {16, 8};
    check_fd(stoke_preset_mlp(&flat, hid, 2, 4), 5, 4, "mlp");
    check_fd(stoke_preset_mlp(&flat, hid, 1, 1), 5, 1, "mlp regression");
    check_fd(stoke_preset_cnn(&img, 3), 4, 3, "cnn");
    check_fd(stoke_preset_resnet(&rgb, 3, 4, 2), 4, 3, "resnet");
    check_fd(stoke_preset_transformer(&img, 4, 8, 2, 2, 3), 3, 3, "transformer");
    stoke_shape seq = shp(2, 5, 6, 0);
    check_fd(stoke_preset_transformer(&seq, 0, 8, 1, 2, 1), 3, 1, "transformer on features");
    check_fd(stoke_preset_actor_critic(&flat, hid, 2, 3, NULL), 6, 3,
             "actor-critic (behaviour cloning)");
    stoke_actor_critic_opts a2c = {.targets = 3, .entropy = 0.05f},
                            ppo = {.targets = 4, .entropy = 0.05f};
    check_fd(stoke_preset_actor_critic(&flat, hid, 2, 3, &a2c), 6, 3, "actor-critic (A2C)");
    check_fd(stoke_preset_actor_critic(&flat, hid, 2, 3, &ppo), 6, 3, "actor-critic (PPO)");
}

/* Every remaining op through the executor: avg pooling, sigmoid, softmax, dropout,
 * embedding, BCE, L1, slice, label smoothing. */
static void test_fd_other_ops(void)
{
    stoke_shape img = shp(3, 2, 6, 6), ids = shp(1, 5, 0, 0), v4 = shp(1, 4, 0, 0), scalar = {0};
    stoke_graph *g = stoke_graph_new("ops");
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &img);
    stoke_tensor c = stoke_nn_conv2d(g, "conv", x, 3, 3, 2, 1, true); /* 6 -> 3 */
    stoke_tensor a = stoke_nn_avgpool2d(g, stoke_nn_sigmoid(g, c), 3, 1, 1);
    stoke_tensor f = stoke_nn_linear(g, "fc", stoke_nn_flatten(g, a), 4, true);
    stoke_tensor t = stoke_nn_input(g, "t", STOKE_F32, &v4);
    stoke_nn_output(g, "bce", stoke_nn_bce_logits(g, f, t));
    stoke_tensor tok = stoke_nn_input(g, "tok", STOKE_I32, &ids);
    stoke_tensor e = stoke_nn_embedding(g, "emb", tok, 7, 4);
    stoke_tensor s = stoke_nn_softmax(g, stoke_nn_linear(g, "proj", e, 4, false));
    stoke_tensor m1 = stoke_nn_seq_mean(g, s);
    stoke_tensor sum = stoke_nn_add(g, m1, stoke_nn_tanh(g, f));
    stoke_nn_l1(g, sum, t);
    stoke_nn_mse(g, stoke_nn_slice(g, f, 1, 3), stoke_nn_slice(g, t, 0, 2));
    stoke_tensor y = stoke_nn_input(g, "y", STOKE_I32, &scalar);
    stoke_tensor k = stoke_nn_linear(g, "cls", stoke_nn_gelu(g, sum), 3, true);
    stoke_tensor ce = stoke_nn_cross_entropy(g, k, y, 0.1f);
    stoke_nn_loss_weight(g, ce, 2.0f);
    CHECK_MSG(stoke_graph_status(g) == STOKE_OK, "%s", stoke_last_error());
    /* fill_inputs draws token ids and classes below 3, valid for both */
    check_fd(g, 3, 3, "other ops");
    stoke_model_opts o = {.max_batch = 3, .training = true, .seed = 9};
    stoke_model *m = NULL;

    /* dropout: train mode drops about p, eval is the identity; backward matches FD
     * because the mask is the same for the same step */
    g = stoke_graph_new("drop");
    stoke_shape v64 = shp(1, 64, 0, 0);
    x = stoke_nn_input(g, "x", STOKE_F32, &v64);
    stoke_tensor d = stoke_nn_dropout(g, stoke_nn_linear(g, "fc", x, 64, true), 0.25f);
    stoke_nn_output(g, "d", d);
    t = stoke_nn_input(g, "t", STOKE_F32, &v64);
    stoke_nn_mse(g, d, t);
    o.max_batch = 8;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    if (m) {
        fill_inputs(m, 8, 1);
        CHECK(stoke_model_forward(m, 8, true) == STOKE_OK);
        const float *out = stoke_model_output(m, d);
        int zeros = 0;
        for (int i = 0; i < 8 * 64; i++)
            zeros += out[i] == 0.0f;
        CHECK_MSG(zeros > 80 && zeros < 180, "dropped %d of 512 at p = 0.25", zeros);
        CHECK(stoke_model_forward(m, 8, false) == STOKE_OK);
        zeros = 0;
        for (int i = 0; i < 8 * 64; i++)
            zeros += out[i] == 0.0f;
        CHECK_INT_EQ(zeros, 0);
        stoke_model_free(m);
    }
    stoke_graph_free(g);
}

/* A tiny MLP trained by a plain SGD written here (w -= lr g) on a fixed batch. */
/* ---- the workspace at every batch that runs ----
 * The kernels' libraries pick an algorithm per shape, and its scratch is not monotone
 * in the batch (oneDNN's Winograd convolution on AVX-512 CPUs needs more at batch 21
 * than at 22 for the reference CNN's second block), so a workspace sized at max_batch
 * alone can be too small for the epoch's last batch. */

static size_t ws_of(const stoke_graph *g, stoke_model_opts o, int64_t batch, int64_t epoch)
{
    o.max_batch = batch;
    o.epoch_samples = epoch;
    stoke_mem_plan p;
    if (stoke_graph_plan(g, &o, &p) != STOKE_OK) {
        CHECK_MSG(0, "plan at batch %lld: %s", (long long)batch, stoke_last_error());
        return 0;
    }
    return p.workspace;
}

/* Forward + backward at `batch`, returning the loss; the inputs are the same values
 * whatever the model's max_batch (rng_state reset). */
static double step_loss(stoke_model *m, int64_t batch)
{
    rng_state = 7;
    fill_inputs(m, batch, 10);
    stoke_status st = stoke_model_forward(m, batch, true);
    CHECK_MSG(st == STOKE_OK, "forward at batch %lld: %s", (long long)batch, stoke_last_error());
    if (st != STOKE_OK)
        return NAN;
    st = stoke_model_backward(m);
    CHECK_MSG(st == STOKE_OK, "backward at batch %lld: %s", (long long)batch, stoke_last_error());
    return stoke_model_loss(m);
}

static void test_batch_workspace(void)
{
    stoke_shape in = shp(2, 28, 28, 0);
    stoke_graph *g = stoke_preset_cnn(&in, 10);
    if (!g) {
        CHECK(0);
        return;
    }
    stoke_model_opts o = {.training = true, .seed = 3, .optim = {.kind = STOKE_SGD}};

    /* the plan covers the epoch's last batch: the larger of the two workspaces */
    stoke_mem_plan p;
    o.max_batch = 32;
    o.epoch_samples = 100; /* 3 x 32 + 4 */
    CHECK(stoke_graph_plan(g, &o, &p) == STOKE_OK);
    CHECK_INT_EQ(p.last_batch, 4);
    size_t w32 = ws_of(g, o, 32, 0), w4 = ws_of(g, o, 4, 0);
    CHECK_INT_EQ(p.workspace, w32 > w4 ? w32 : w4);
    CHECK_INT_EQ(ws_of(g, o, 32, 96), w32); /* no remainder */
    o.epoch_samples = 20;                   /* fewer samples than a batch */
    CHECK(stoke_graph_plan(g, &o, &p) == STOKE_OK);
    CHECK_INT_EQ(p.last_batch, 20);
    o.epoch_samples = -1;
    CHECK(stoke_graph_plan(g, &o, &p) == STOKE_ERR_ARG);
    o.epoch_samples = 0;

    /* Find, on this CPU, a batch b below a max batch M that needs more workspace than
     * M. oneDNN's AVX-512 Winograd has many (and the suite runs again capped to
     * AVX-512 and AVX2, docs/testing.md); without one the checks below still run. */
    enum { SCAN = 48 };
    size_t ws[SCAN + 1];
    for (int b = 1; b <= SCAN; b++)
        ws[b] = ws_of(g, o, b, 0);
    int M = SCAN, small = SCAN - 1;
    for (int m = 2; m <= SCAN && small == SCAN - 1; m++)
        for (int b = 1; b < m; b++)
            if (ws[b] > ws[m]) {
                M = m, small = b;
                break;
            }
    if (ws[small] <= ws[M])
        printf("note: no batch in 1..%d needs more workspace than a larger one on this CPU\n",
               SCAN);
    else
        printf("batch %d needs %zu bytes of workspace, batch %d %zu\n", small, ws[small], M, ws[M]);

    /* a model compiled for M runs at `small`: the workspace grows, and says so */
    o.max_batch = M;
    stoke_model *m = NULL, *ref = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    o.max_batch = small;
    CHECK(stoke_model_new(g, &o, &ref) == STOKE_OK);
    if (m && ref) {
        size_t before = stoke_model_used_mem(m);
        CHECK_INT_EQ(stoke_model_plan(m)->workspace, ws[M]);
        double l = step_loss(m, small), lr = step_loss(ref, small);
        CHECK_MSG(l == lr, "batch %d: loss %.9g in a model for %d, %.9g in one for %d", small, l, M,
                  lr, small);
        size_t grown = ws[small] > ws[M] ? ws[small] - ws[M] : 0;
        CHECK_INT_EQ(stoke_model_used_mem(m), before + grown);
        CHECK_INT_EQ(stoke_model_plan(m)->workspace, ws[M] + grown);
        CHECK_INT_EQ(stoke_model_plan(m)->total, stoke_model_used_mem(m));
        CHECK(step_loss(m, M) == step_loss(m, M)); /* M still runs, in the grown arena */
        /* oneDNN's scratch depends on the thread count too: a change is re-checked */
        stoke_model_set_threads(m, 1);
        CHECK(isfinite(step_loss(m, small)) && isfinite(step_loss(m, M)));
        CHECK_INT_EQ(stoke_model_plan(m)->total, stoke_model_used_mem(m));
        stoke_model_set_threads(m, 2);
        CHECK(stoke_model_reserve(m, 0) == STOKE_ERR_ARG);
        CHECK(stoke_model_reserve(m, M + 1) == STOKE_ERR_ARG);
        CHECK(stoke_model_reserve(m, 1) == STOKE_OK);
    }
    stoke_model_free(m);
    stoke_model_free(ref);

    /* planned with the epoch's last batch, nothing grows when it runs */
    o.max_batch = M;
    o.epoch_samples = 2 * M + small;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    if (m) {
        size_t before = stoke_model_used_mem(m);
        CHECK_INT_EQ(stoke_model_plan(m)->workspace, ws[M] > ws[small] ? ws[M] : ws[small]);
        step_loss(m, M);
        step_loss(m, small);
        CHECK_INT_EQ(stoke_model_used_mem(m), before);
    }
    stoke_model_free(m);

    /* every batch from 1 to a max batch runs in one model */
    o.max_batch = 24;
    o.epoch_samples = 0;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    for (int b = 1; m && b <= 24; b++) {
        double l = step_loss(m, b);
        CHECK_MSG(isfinite(l), "batch %d: loss %g", b, l);
    }
    stoke_model_free(m);
    stoke_graph_free(g);
}

static void test_train_tiny_mlp(void)
{
    stoke_shape in = shp(1, 8, 0, 0);
    int64_t hid[] = {16};
    stoke_graph *g = stoke_preset_mlp(&in, hid, 1, 3);
    stoke_model_opts o = {.max_batch = 16, .training = true, .seed = 5};
    stoke_model *m = NULL;
    CHECK(g && stoke_model_new(g, &o, &m) == STOKE_OK);
    if (!m)
        return;
    fill_inputs(m, 16, 3);
    double first = loss_at(m, 16), last = first;
    for (int step = 0; step < 30; step++) {
        CHECK(stoke_model_forward(m, 16, true) == STOKE_OK);
        last = stoke_model_loss(m);
        stoke_model_zero_grad(m);
        CHECK(stoke_model_backward(m) == STOKE_OK);
        for (int i = 0; i < stoke_graph_param_count(g); i++) {
            float *w = stoke_model_param(m, i);
            const float *gr = stoke_model_grad(m, i);
            for (int64_t k = 0; k < stoke_graph_param(g, i)->elems; k++)
                w[k] -= 0.5f * gr[k];
        }
    }
    CHECK_MSG(last < 0.7 * first, "loss %g -> %g after 30 SGD steps", first, last);
    /* accuracy is a fraction of the batch */
    double acc = stoke_model_value(m, stoke_graph_find(g, "accuracy"));
    CHECK(acc >= 0 && acc <= 1);
    stoke_model_free(m);
    stoke_graph_free(g);
}

/* N optimizer steps; returns a copy of every parameter. */
static float *train_copy(const stoke_graph *g, stoke_precision prec, stoke_optim_kind kind,
                         int steps, double *final_loss)
{
    stoke_model_opts o = {
        .max_batch = 8,
        .training = true,
        .seed = 11,
        .precision = prec,
        .optim = {.kind = kind, .momentum = 0.9f, .weight_decay = 1e-4f, .clip_norm = 5.0f}};
    stoke_model *m = NULL;
    if (stoke_model_new(g, &o, &m) != STOKE_OK) {
        CHECK_MSG(0, "%s", stoke_last_error());
        return NULL;
    }
    rng_state = 99;
    for (int s = 0; s < steps; s++) {
        fill_inputs(m, 8, 3);
        CHECK(stoke_model_forward(m, 8, true) == STOKE_OK);
        *final_loss = stoke_model_loss(m);
        CHECK(stoke_model_backward(m) == STOKE_OK);
        bool applied = false;
        CHECK(stoke_model_step(m, 0.05, 1, &applied) == STOKE_OK && applied);
    }
    CHECK_INT_EQ(stoke_model_step_count(m), steps);
    size_t total = 0;
    for (int i = 0; i < stoke_graph_param_count(g); i++)
        total += (size_t)stoke_graph_param(g, i)->elems;
    float *copy = malloc(total * sizeof(float)), *p = copy;
    for (int i = 0; i < stoke_graph_param_count(g); i++) {
        size_t n = (size_t)stoke_graph_param(g, i)->elems;
        memcpy(p, stoke_model_param(m, i), n * sizeof(float));
        p += n;
    }
    stoke_model_free(m);
    return copy;
}

static size_t total_elems(const stoke_graph *g)
{
    size_t total = 0;
    for (int i = 0; i < stoke_graph_param_count(g); i++)
        total += (size_t)stoke_graph_param(g, i)->elems;
    return total;
}

static void test_reproducible(void)
{
    stoke_shape img = shp(3, 1, 8, 8);
    stoke_graph *g = stoke_preset_resnet(&img, 3, 4, 2);
    if (!g) {
        CHECK(0);
        return;
    }
    double l1 = 0, l2 = 0;
    for (int k = 0; k < 2; k++) {
        stoke_optim_kind kind = k ? STOKE_ADAMW : STOKE_SGD;
        float *a = train_copy(g, STOKE_PREC_FP32, kind, 4, &l1);
        float *b = train_copy(g, STOKE_PREC_FP32, kind, 4, &l2);
        CHECK_MSG(a && b && memcmp(a, b, total_elems(g) * sizeof(float)) == 0,
                  "%s: weights differ between two identical runs", stoke_optim_name(kind));
        free(a);
        free(b);
    }
    stoke_graph_free(g);
}

/* bf16 and fp16 run the conv/linear operands in low precision: after a few steps the
 * loss stays within a few percent of fp32's. fp16 loss scaling: an injected inf in a
 * gradient skips the step and halves the scale, the weights stay. */
static void test_precision(void)
{
    stoke_shape img = shp(3, 1, 8, 8);
    stoke_graph *g = stoke_preset_cnn(&img, 3);
    if (!g) {
        CHECK(0);
        return;
    }
    double l32 = 0, l16 = 0, lb = 0;
    float *a = train_copy(g, STOKE_PREC_FP32, STOKE_SGD, 3, &l32);
    float *b = train_copy(g, STOKE_PREC_BF16, STOKE_SGD, 3, &lb);
    float *c = train_copy(g, STOKE_PREC_FP16, STOKE_SGD, 3, &l16);
    CHECK_MSG(fabs(lb - l32) < 0.03 * l32, "bf16 loss %g vs fp32 %g", lb, l32);
    CHECK_MSG(fabs(l16 - l32) < 0.01 * l32, "fp16 loss %g vs fp32 %g", l16, l32);
    free(a);
    free(b);
    free(c);

    stoke_model_opts o = {.max_batch = 4,
                          .training = true,
                          .seed = 2,
                          .precision = STOKE_PREC_FP16,
                          .optim = {.kind = STOKE_SGD}};
    stoke_model *m = NULL;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    if (m) {
        CHECK(stoke_model_loss_scale(m) == 65536.0f);
        fill_inputs(m, 4, 3);
        CHECK(stoke_model_forward(m, 4, true) == STOKE_OK);
        CHECK(stoke_model_backward(m) == STOKE_OK);
        stoke_model_grad(m, 2)[3] = INFINITY;
        float w0 = stoke_model_param(m, 0)[0];
        bool applied = true;
        CHECK(stoke_model_step(m, 0.1, 1, &applied) == STOKE_OK && !applied);
        CHECK(stoke_model_loss_scale(m) == 32768.0f);
        CHECK(stoke_model_param(m, 0)[0] == w0);
        CHECK(stoke_model_step_count(m) == 0);
        CHECK(stoke_model_forward(m, 4, true) == STOKE_OK);
        CHECK(stoke_model_backward(m) == STOKE_OK);
        CHECK(stoke_model_step(m, 0.1, 1, &applied) == STOKE_OK && applied);
        CHECK(stoke_model_param(m, 0)[0] != w0);
        stoke_model_free(m);
    }
    /* fp32: a non-finite gradient is an error naming the parameter */
    o.precision = STOKE_PREC_FP32;
    CHECK(stoke_model_new(g, &o, &m) == STOKE_OK);
    if (m) {
        fill_inputs(m, 4, 3);
        CHECK(stoke_model_forward(m, 4, true) == STOKE_OK);
        CHECK(stoke_model_backward(m) == STOKE_OK);
        stoke_model_grad(m, 2)[0] = NAN;
        CHECK(stoke_model_step(m, 0.1, 1, NULL) == STOKE_ERR_ARG);
        CHECK_STR_CONTAINS(stoke_last_error(), "conv2.weight");
        /* forward beyond the max batch, and class labels out of range */
        CHECK(stoke_model_forward(m, 5, true) == STOKE_ERR_ARG);
        ((int32_t *)stoke_model_input(m, stoke_graph_find(g, "y")))[2] = 7;
        CHECK(stoke_model_forward(m, 4, true) == STOKE_ERR_ARG);
        CHECK_STR_CONTAINS(stoke_last_error(), "cross_entropy");
        stoke_model_free(m);
    }
    stoke_graph_free(g);
}

/* The actor-critic's total loss: policy loss + 0.5 value MSE (policy gradient forms)
 * or the cross-entropy alone (behaviour cloning); both heads read out; a bad action
 * names the layer and the sample; building errors of the policy-gradient op. */
static void test_actor_critic_loss(void)
{
    stoke_shape obs = shp(1, 4, 0, 0);
    int64_t hid[] = {8};
    stoke_actor_critic_opts a2c = {.targets = 3, .entropy = 0.01f};
    stoke_graph *g = stoke_preset_actor_critic(&obs, hid, 1, 3, &a2c);
    stoke_model_opts o = {.max_batch = 5, .training = true, .seed = 4};
    stoke_model *m = NULL;
    CHECK(g && stoke_model_new(g, &o, &m) == STOKE_OK);
    if (!m)
        return;
    fill_inputs(m, 5, 3);
    CHECK(stoke_model_forward(m, 5, true) == STOKE_OK);
    double pl = stoke_model_value(m, stoke_graph_find(g, "policy_loss"));
    double vl = stoke_model_value(m, stoke_graph_find(g, "value_loss"));
    double mae = stoke_model_value(m, stoke_graph_find(g, "value_mae"));
    CHECK(isfinite(pl) && pl != 0 && vl > 0 && mae > 0);
    CHECK_NEAR(stoke_model_loss(m), pl + 0.5 * vl, 1e-6 * (fabs(pl) + vl));
    /* the value head's MSE and MAE read the last column (the return) */
    const float *val = stoke_model_output(m, stoke_graph_find(g, "value"));
    const float *y = stoke_model_input(m, stoke_graph_find(g, "y"));
    double se = 0, ae = 0;
    for (int b = 0; b < 5; b++) {
        se += (val[b] - y[b * 3 + 2]) * (double)(val[b] - y[b * 3 + 2]);
        ae += fabs(val[b] - y[b * 3 + 2]);
    }
    CHECK_NEAR(vl, se / 5, 1e-6 * vl);
    CHECK_NEAR(mae, ae / 5, 1e-6 * mae);
    CHECK(stoke_model_output(m, stoke_graph_find(g, "policy")) != NULL);
    /* an action outside [0, 3) in sample 2: the layer and the sample are named */
    ((float *)stoke_model_input(m, stoke_graph_find(g, "y")))[2 * 3] = 3.0f;
    CHECK(stoke_model_forward(m, 5, true) == STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "policy_gradient#");
    CHECK_STR_CONTAINS(stoke_last_error(), "sample 2 has action 3");
    ((float *)stoke_model_input(m, stoke_graph_find(g, "y")))[2 * 3] = 1.5f;
    CHECK(stoke_model_forward(m, 5, true) == STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "sample 2 has action 1.5");
    stoke_model_free(m);
    stoke_graph_free(g);

    /* behaviour cloning: int32 actions, cross-entropy only, accuracy */
    g = stoke_preset_actor_critic(&obs, hid, 1, 3, NULL);
    m = NULL;
    CHECK(g && stoke_model_new(g, &o, &m) == STOKE_OK);
    if (m) {
        fill_inputs(m, 5, 3);
        CHECK(stoke_model_forward(m, 5, true) == STOKE_OK);
        CHECK(stoke_graph_find(g, "value_loss") == STOKE_NO_TENSOR);
        double ce = stoke_model_value(m, stoke_graph_find(g, "policy_loss"));
        CHECK(ce > 0 && stoke_model_loss(m) == ce);
        CHECK(stoke_model_value(m, stoke_graph_find(g, "accuracy")) >= 0);
        CHECK(stoke_model_output(m, stoke_graph_find(g, "value")) != NULL);
        stoke_model_free(m);
    }
    stoke_graph_free(g);

    /* building errors: target widths, clip without an old log-probability, slices */
    stoke_shape k3 = shp(1, 3, 0, 0), r2 = shp(1, 2, 0, 0), r4 = shp(1, 4, 0, 0);
    g = stoke_graph_new("pg");
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &k3);
    stoke_tensor l = stoke_nn_linear(g, "pi", x, 3, true);
    stoke_tensor t4 = stoke_nn_input(g, "t4", STOKE_F32, &r4);
    CHECK(stoke_nn_policy_gradient(g, l, t4, 0, 0) == STOKE_NO_TENSOR);
    CHECK_STR_CONTAINS(stoke_last_error(), "target t4 must be fp32 [action, advantage] (2)");
    stoke_graph_free(g);
    g = stoke_graph_new("pg");
    x = stoke_nn_input(g, "x", STOKE_F32, &k3);
    l = stoke_nn_linear(g, "pi", x, 3, true);
    stoke_tensor t2 = stoke_nn_input(g, "t2", STOKE_F32, &r2);
    CHECK(stoke_nn_policy_gradient(g, l, t2, 0.2f, 0) == STOKE_NO_TENSOR);
    CHECK_STR_CONTAINS(stoke_last_error(), "needs the old log-probability");
    stoke_graph_free(g);
    g = stoke_graph_new("pg");
    x = stoke_nn_input(g, "x", STOKE_F32, &k3);
    l = stoke_nn_linear(g, "pi", x, 3, true);
    stoke_tensor t3 = stoke_nn_input(g, "t3", STOKE_F32, &k3);
    CHECK(stoke_nn_policy_gradient(g, l, t3, 1.0f, 0) == STOKE_NO_TENSOR);
    CHECK_STR_CONTAINS(stoke_last_error(), "must be in (0, 1)");
    stoke_graph_free(g);
    g = stoke_graph_new("pg");
    x = stoke_nn_input(g, "x", STOKE_F32, &k3);
    CHECK(stoke_nn_slice(g, x, 2, 4) == STOKE_NO_TENSOR);
    CHECK_STR_CONTAINS(stoke_last_error(), "columns [2, 4) are not within the last dim of (3,)");
    stoke_graph_free(g);
}

static void test_lr(void)
{
    stoke_lr_schedule s = {.kind = STOKE_LR_COSINE,
                           .lr = 0.1,
                           .warmup_steps = 10,
                           .total_steps = 110,
                           .min_lr = 0.001};
    CHECK_NEAR(stoke_lr_at(&s, 0), 0.01, 1e-12);
    CHECK_NEAR(stoke_lr_at(&s, 9), 0.1, 1e-12);
    CHECK_NEAR(stoke_lr_at(&s, 10), 0.1, 1e-12);
    CHECK_NEAR(stoke_lr_at(&s, 60), 0.001 + 0.099 * 0.5, 1e-12);
    CHECK_NEAR(stoke_lr_at(&s, 500), 0.001, 1e-12);
    stoke_lr_schedule st = {.kind = STOKE_LR_STEP, .lr = 1, .step_size = 3, .gamma = 0.5};
    CHECK_NEAR(stoke_lr_at(&st, 2), 1, 0);
    CHECK_NEAR(stoke_lr_at(&st, 3), 0.5, 0);
    CHECK_NEAR(stoke_lr_at(&st, 7), 0.25, 0);
    stoke_precision p;
    CHECK(stoke_precision_parse("bf16", &p) && p == STOKE_PREC_BF16);
    CHECK(!stoke_precision_parse("auto", &p));
}

/* ---- FLOPs a step: what backward really computes, per op ---- */

static void test_step_flops(void)
{
    /* MLP 784 -> 512 -> 256 -> 10: forward 2 x sum(in x out) a sample; backward a
     * weight gradient for every linear and an input gradient for all but fc1, whose
     * input is the data (the backends never compute it). */
    stoke_shape in = shp(1, 784, 0, 0);
    int64_t hidden[] = {512, 256};
    stoke_graph *g = stoke_preset_mlp(&in, hidden, 2, 10);
    CHECK(g != NULL);
    double l1 = 2.0 * 784 * 512, l2 = 2.0 * 512 * 256, l3 = 2.0 * 256 * 10;
    CHECK(stoke_graph_flops(g) == l1 + l2 + l3);
    CHECK(stoke_graph_step_flops(g) == (l1 + l2 + l3) + (l1 + l2 + l3) + (l2 + l3));
    CHECK(stoke_graph_step_flops(g) < 3 * stoke_graph_flops(g));
    stoke_graph_free(g);

    /* The reference CNN on 1x28x28: conv1's input gradient is not computed either. */
    stoke_shape img = shp(3, 1, 28, 28);
    g = stoke_preset_cnn(&img, 10);
    CHECK(g != NULL);
    double c1 = 2.0 * 32 * 28 * 28 * (1 * 3 * 3), c2 = 2.0 * 64 * 14 * 14 * (32 * 3 * 3),
           f1 = 2.0 * 64 * 7 * 7 * 128, f2 = 2.0 * 128 * 10, fwd = c1 + c2 + f1 + f2;
    CHECK(stoke_graph_flops(g) == fwd);
    CHECK(stoke_graph_step_flops(g) == fwd + fwd + (c2 + f1 + f2));
    stoke_graph_free(g);

    /* Attention on the data itself: the Q, K, V projection's input gradient is skipped;
     * its weight gradient, the output projection's two products and both batched
     * products' two each are computed. */
    stoke_shape seq = shp(2, 6, 8, 0);
    g = stoke_graph_new("attn");
    stoke_tensor x = stoke_nn_input(g, "x", STOKE_F32, &seq);
    stoke_tensor a = stoke_nn_attention(g, "attn", x, 2);
    CHECK(a >= 0 && stoke_graph_status(g) == STOKE_OK);
    double T = 6, C = 8, qkv = 2 * T * C * 3 * C, proj = 2 * T * C * C, prod = 2 * 2 * T * T * C;
    CHECK(stoke_graph_flops(g) == qkv + proj + prod);
    CHECK(stoke_graph_step_flops(g) == (qkv + proj + prod) + qkv + 2 * proj + 2 * prod);
    /* fed by a layer that needs a gradient, the input gradient is computed too */
    stoke_graph_free(g);
    g = stoke_graph_new("attn2");
    x = stoke_nn_input(g, "x", STOKE_F32, &seq);
    x = stoke_nn_linear(g, "fc", x, 8, true);
    a = stoke_nn_attention(g, "attn", x, 2);
    CHECK(a >= 0 && stoke_graph_status(g) == STOKE_OK);
    double fc = 2 * T * 8 * 8;
    CHECK(stoke_graph_step_flops(g) ==
          2 * fc + (qkv + proj + prod) + 2 * qkv + 2 * proj + 2 * prod);
    stoke_graph_free(g);
    CHECK(stoke_graph_step_flops(NULL) == 0);
}

int main(void)
{
    test_step_flops();
    test_graph_errors();
    test_preset_params();
    test_cnn_plan();
    test_batch_workspace();
    test_init();
    test_lr();
    test_fd_presets();
    test_fd_other_ops();
    test_train_tiny_mlp();
    test_reproducible();
    test_precision();
    test_actor_critic_loss();
    return CHECK_DONE();
}
