/* test_dist.c - the data-parallel seam (stoke_grad_reducer, nn.h) and dist's one-process
 * world: buckets announced in backward order with every trainable parameter in exactly
 * one, each handed over during backward as soon as its gradients are final, the finish
 * hook between backward and the step, reducers that change the gradients changing the
 * step exactly as they should, and no reducer (or stoke_dist_local's) leaving the
 * weights bit for bit as without one. On the CPU, whose gradients are host memory. */
#include "check.h"
#include "dist_util.h"
#include "stoke/dist.h"
#include "stoke/nn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { B = 8, IN = 16, CLASSES = 5, STEPS = 3 };

static stoke_graph *graph(void)
{
    stoke_shape in = {.ndim = 1, .dims = {IN}};
    int64_t hidden[2] = {32, 24};
    return stoke_preset_mlp(&in, hidden, 2, CLASSES);
}

static stoke_model *model(const stoke_graph *g, stoke_optim optim)
{
    stoke_model_opts o = {
        .max_batch = B, .precision = STOKE_PREC_FP32, .training = true, .seed = 5, .optim = optim};
    stoke_model *m = NULL;
    CHECK_MSG(stoke_model_new(g, &o, &m) == STOKE_OK, "%s", stoke_last_error());
    return m;
}

/* Micro-batch k's inputs, the same for every model. */
static void feed(stoke_model *m, int k)
{
    const stoke_graph *g = stoke_model_graph(m);
    float *x = stoke_model_input(m, stoke_graph_find(g, "x"));
    int32_t *y = stoke_model_input(m, stoke_graph_find(g, "y"));
    dist_micro_batch(k, B, IN, CLASSES, x, y);
}

/* STEPS optimizer steps of `accum` micro-batches each. */
static bool train(stoke_model *m, int accum)
{
    for (int s = 0; s < STEPS; s++) {
        stoke_model_zero_grad(m);
        for (int a = 0; a < accum; a++) {
            feed(m, s * accum + a);
            if (stoke_model_forward(m, B, true) != STOKE_OK || stoke_model_backward(m) != STOKE_OK)
                return false;
        }
        if (stoke_model_step(m, 0.05, accum, NULL) != STOKE_OK)
            return false;
    }
    return true;
}

static bool same_params(stoke_model *a, stoke_model *b)
{
    const stoke_graph *g = stoke_model_graph(a);
    for (int p = 0; p < stoke_graph_param_count(g); p++)
        if (memcmp(stoke_model_param(a, p), stoke_model_param(b, p),
                   (size_t)stoke_graph_param(g, p)->elems * sizeof(float)))
            return false;
    return true;
}

static bool all_zero(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0)
            return false;
    return true;
}

/* ---- a reducer that records what it is handed ---- */

typedef struct recorder {
    stoke_model *m;
    const stoke_grad_bucket *buckets;
    int nbuckets, prepared, released, finished;
    int order[64], nreduced; /* bucket indices as handed over */
    bool later_untouched;    /* at each hand-over, earlier layers' gradients still zero */
    float *seen[64];         /* each bucket's first gradient as handed over */
    bool params_before_step; /* at finish, the parameters still the step's inputs */
    float *before;           /* the first parameter before the step */
} recorder;

static stoke_status rec_prepare(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b,
                                int n)
{
    recorder *r = self;
    r->prepared++;
    r->buckets = b;
    r->nbuckets = n;
    CHECK(ops->stream == NULL && ops->alloc && ops->free && ops->copy); /* the CPU */
    return STOKE_OK;
}

static stoke_status rec_reduce(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b)
{
    (void)ops;
    recorder *r = self;
    if (r->nreduced < 64)
        r->order[r->nreduced++] = b->index;
    /* the layers before this bucket's have not run their backward yet */
    const stoke_graph *g = stoke_model_graph(r->m);
    int layer = stoke_graph_param(g, b->params[b->count - 1])->layer;
    for (int k = b->index + 1; k < r->nbuckets; k++)
        for (int j = 0; j < r->buckets[k].count; j++)
            if (stoke_graph_param(g, r->buckets[k].params[j])->layer < layer &&
                !all_zero(r->buckets[k].grads[j], r->buckets[k].elems[j]))
                r->later_untouched = false;
    if (!r->seen[b->index]) {
        r->seen[b->index] = malloc(b->elems[0] * sizeof(float));
        memcpy(r->seen[b->index], b->grads[0], b->elems[0] * sizeof(float));
    }
    return STOKE_OK;
}

static stoke_status rec_finish(void *self, const stoke_grad_ops *ops)
{
    (void)ops;
    recorder *r = self;
    r->finished++;
    const stoke_graph *g = stoke_model_graph(r->m);
    r->params_before_step = memcmp(r->before, stoke_model_param(r->m, 0),
                                   (size_t)stoke_graph_param(g, 0)->elems * sizeof(float)) == 0;
    return STOKE_OK;
}

static void rec_release(void *self, const stoke_grad_ops *ops)
{
    (void)ops;
    ((recorder *)self)->released++;
}

/* Buckets in backward order (the last layers' parameters first), each trainable
 * parameter in exactly one, handed over in that order during backward while the
 * earlier layers' gradients are still to come, and as final as backward leaves them;
 * finish once per step, after the backward, before the parameters change. */
static void test_buckets(size_t bucket_bytes, int want_buckets)
{
    stoke_graph *g = graph();
    stoke_model *m = model(g, (stoke_optim){.kind = STOKE_SGD});
    if (!m) {
        stoke_graph_free(g);
        return;
    }
    recorder r = {.m = m, .later_untouched = true};
    stoke_grad_reducer red = {.self = &r,
                              .bucket_bytes = bucket_bytes,
                              .prepare = rec_prepare,
                              .reduce = rec_reduce,
                              .finish = rec_finish,
                              .release = rec_release};
    CHECK_MSG(stoke_model_set_reducer(m, &red) == STOKE_OK, "%s", stoke_last_error());
    const stoke_grad_bucket *b = NULL;
    int nb = stoke_model_buckets(m, &b);
    CHECK_INT_EQ(r.prepared, 1);
    CHECK(b == r.buckets && nb == r.nbuckets);
    CHECK_INT_EQ(nb, want_buckets);
    int np = stoke_graph_param_count(g), seen[64] = {0}, last_layer = 1 << 30;
    for (int k = 0; k < nb; k++) {
        CHECK_INT_EQ(b[k].index, k);
        size_t bytes = 0;
        for (int j = 0; j < b[k].count; j++) {
            int p = b[k].params[j];
            CHECK(p >= 0 && p < np && p < 64);
            seen[p]++;
            int layer = stoke_graph_param(g, p)->layer;
            CHECK_MSG(layer <= last_layer, "bucket %d: %s after a layer before it", k,
                      stoke_graph_param(g, p)->name);
            last_layer = layer;
            CHECK(b[k].grads[j] == stoke_model_grad(m, p));
            CHECK_INT_EQ(b[k].elems[j], stoke_graph_param(g, p)->elems);
            bytes += b[k].elems[j] * sizeof(float);
        }
        CHECK_INT_EQ(b[k].bytes, bytes);
    }
    for (int p = 0; p < np; p++)
        CHECK_MSG(seen[p] == (stoke_graph_param(g, p)->trainable ? 1 : 0), "%s in %d buckets",
                  stoke_graph_param(g, p)->name, seen[p]);

    /* one step: a backward hands every bucket over, in order, then the step finishes */
    size_t n0 = (size_t)stoke_graph_param(g, 0)->elems;
    r.before = malloc(n0 * sizeof(float));
    memcpy(r.before, stoke_model_param(m, 0), n0 * sizeof(float));
    stoke_model_zero_grad(m);
    feed(m, 0);
    CHECK(stoke_model_forward(m, B, true) == STOKE_OK);
    CHECK(stoke_model_backward(m) == STOKE_OK);
    CHECK_INT_EQ(r.nreduced, nb);
    for (int k = 0; k < r.nreduced; k++)
        CHECK_INT_EQ(r.order[k], k);
    CHECK(r.later_untouched);
    CHECK_INT_EQ(r.finished, 0);
    for (int k = 0; k < nb; k++) {
        CHECK(r.seen[k] && !all_zero(r.seen[k], b[k].elems[0]));
        CHECK_MSG(r.seen[k] && !memcmp(r.seen[k], b[k].grads[0], b[k].elems[0] * sizeof(float)),
                  "bucket %d changed after it was handed over", k);
    }
    CHECK(stoke_model_step(m, 0.05, 1, NULL) == STOKE_OK);
    CHECK_INT_EQ(r.finished, 1);
    CHECK(r.params_before_step);
    CHECK(memcmp(r.before, stoke_model_param(m, 0), n0 * sizeof(float)) != 0);
    /* two micro-batches: each backward hands the buckets over; one finish */
    CHECK(train(m, 2));
    CHECK_INT_EQ(r.nreduced, nb + 2 * STEPS * nb < 64 ? nb + 2 * STEPS * nb : 64);
    CHECK_INT_EQ(r.finished, 1 + STEPS);
    CHECK(stoke_model_set_reducer(m, NULL) == STOKE_OK);
    CHECK_INT_EQ(r.released, 1);
    CHECK(stoke_model_buckets(m, &b) == 0 && b == NULL);
    for (int k = 0; k < 64; k++)
        free(r.seen[k]);
    free(r.before);
    stoke_model_free(m);
    stoke_graph_free(g);
}

/* ---- reducers that change the gradients ---- */

/* The mean with a second rank whose gradients equal this one's (copied through the
 * model's memory, as a transport stages them): (g + g) / 2 is g, bit for bit. */
typedef struct twin {
    float *other; /* the largest bucket's floats */
    int zero;     /* zeroer: the bucket to zero */
} twin;

static stoke_status twin_prepare(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b,
                                 int n)
{
    twin *t = self;
    size_t most = 0;
    for (int k = 0; k < n; k++)
        for (int j = 0; j < b[k].count; j++)
            most = b[k].elems[j] > most ? b[k].elems[j] : most;
    t->other = ops->alloc(ops->ctx, most * sizeof(float));
    return t->other ? STOKE_OK : stoke_fail(STOKE_ERR_NOMEM, "twin: no memory");
}

static stoke_status twin_reduce(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b)
{
    twin *t = self;
    for (int j = 0; j < b->count; j++) {
        float *g = b->grads[j];
        ops->copy(ops->ctx, t->other, g, b->elems[j] * sizeof(float));
        for (size_t i = 0; i < b->elems[j]; i++)
            g[i] = (g[i] + t->other[i]) * 0.5f;
    }
    return STOKE_OK;
}

static void twin_release(void *self, const stoke_grad_ops *ops)
{
    twin *t = self;
    ops->free(ops->ctx, t->other);
    t->other = NULL;
}

static stoke_status zero_reduce(void *self, const stoke_grad_ops *ops, const stoke_grad_bucket *b)
{
    (void)ops;
    if (b->index == ((twin *)self)->zero)
        for (int j = 0; j < b->count; j++)
            memset(b->grads[j], 0, b->elems[j] * sizeof(float));
    return STOKE_OK;
}

static stoke_status failing_reduce(void *self, const stoke_grad_ops *ops,
                                   const stoke_grad_bucket *b)
{
    (void)self, (void)ops, (void)b;
    return stoke_fail(STOKE_ERR_UNAVAILABLE, "the peer is gone");
}

/* Trains a model with reducer r (NULL: none) and one without, from the same start;
 * whether they end bit for bit alike. */
static bool same_as_plain(stoke_optim optim, const stoke_grad_reducer *r, int accum)
{
    stoke_graph *g = graph();
    stoke_model *a = model(g, optim), *b = model(g, optim);
    bool same = false;
    if (a && b) {
        CHECK_MSG(stoke_model_set_reducer(a, r) == STOKE_OK, "%s", stoke_last_error());
        CHECK(train(a, accum) && train(b, accum));
        same = same_params(a, b);
    }
    stoke_model_free(a);
    stoke_model_free(b);
    stoke_graph_free(g);
    return same;
}

static void test_reducers(void)
{
    const stoke_optim sgd = {.kind = STOKE_SGD, .momentum = 0.9f, .weight_decay = 1e-2f},
                      adamw = {.kind = STOKE_ADAMW, .weight_decay = 1e-2f};
    twin t = {0};
    stoke_grad_reducer mean = {
        .self = &t, .prepare = twin_prepare, .reduce = twin_reduce, .release = twin_release};
    CHECK(same_as_plain(sgd, &mean, 1));
    CHECK(same_as_plain(adamw, &mean, 2));
    mean.bucket_bytes = 1; /* a bucket a parameter */
    CHECK(same_as_plain(sgd, &mean, 2));

    /* no reducer, and one installed then removed: as today */
    CHECK(same_as_plain(sgd, NULL, 2));
    stoke_graph *g = graph();
    stoke_model *a = model(g, sgd), *b = model(g, sgd);
    if (a && b) {
        CHECK(stoke_model_set_reducer(a, &mean) == STOKE_OK);
        CHECK(stoke_model_set_reducer(a, NULL) == STOKE_OK && t.other == NULL);
        CHECK(train(a, 1) && train(b, 1) && same_params(a, b));
    }
    stoke_model_free(a);
    stoke_model_free(b);

    /* a bucket zeroed: under plain SGD without weight decay its parameters stay */
    a = model(g, (stoke_optim){.kind = STOKE_SGD});
    if (a) {
        twin z = {.zero = 1};
        stoke_grad_reducer zr = {.self = &z, .bucket_bytes = 1, .reduce = zero_reduce};
        CHECK(stoke_model_set_reducer(a, &zr) == STOKE_OK);
        const stoke_grad_bucket *bk = NULL;
        int nb = stoke_model_buckets(a, &bk);
        CHECK(nb > 2);
        int np = stoke_graph_param_count(g);
        float **start = calloc((size_t)np, sizeof *start);
        for (int p = 0; p < np; p++) {
            size_t n = (size_t)stoke_graph_param(g, p)->elems * sizeof(float);
            start[p] = malloc(n);
            memcpy(start[p], stoke_model_param(a, p), n);
        }
        CHECK(train(a, 1));
        for (int k = 0; k < nb; k++)
            for (int j = 0; j < bk[k].count; j++) {
                int p = bk[k].params[j];
                bool kept = !memcmp(start[p], stoke_model_param(a, p), bk[k].elems[j] * 4);
                CHECK_MSG(kept == (k == 1), "bucket %d (%s): %s", k, stoke_graph_param(g, p)->name,
                          kept ? "unchanged" : "changed");
            }
        for (int p = 0; p < np; p++)
            free(start[p]);
        free(start);

        /* a reducer's error is backward's, naming the bucket */
        stoke_grad_reducer bad = {.reduce = failing_reduce};
        CHECK(stoke_model_set_reducer(a, &bad) == STOKE_OK);
        feed(a, 0);
        CHECK(stoke_model_forward(a, B, true) == STOKE_OK);
        CHECK(stoke_model_backward(a) == STOKE_ERR_UNAVAILABLE);
        CHECK_MSG(strstr(stoke_last_error(), "bucket 0") &&
                      strstr(stoke_last_error(), "the peer is gone"),
                  "%s", stoke_last_error());
    }
    stoke_model_free(a);

    /* an inference model has no gradients to reduce */
    stoke_model_opts o = {.max_batch = B, .seed = 5};
    stoke_model *inf = NULL;
    CHECK(stoke_model_new(g, &o, &inf) == STOKE_OK);
    if (inf)
        CHECK(stoke_model_set_reducer(inf, &mean) == STOKE_ERR_ARG);
    stoke_model_free(inf);
    stoke_graph_free(g);
}

/* dist's world of one process: its reducer stages each bucket and copies it back, so
 * the model trains bit for bit as without it, whatever the buckets. */
static void test_dist_local(void)
{
    stoke_dist *d = NULL;
    CHECK(stoke_dist_local(&d) == STOKE_OK);
    if (!d)
        return;
    CHECK_INT_EQ(stoke_dist_world_size(d), 1);
    CHECK_INT_EQ(stoke_dist_rank(d), 0);
    stoke_grad_reducer r = stoke_dist_reducer(d);
    CHECK(same_as_plain((stoke_optim){.kind = STOKE_SGD, .momentum = 0.9f}, &r, 1));
    CHECK(same_as_plain((stoke_optim){.kind = STOKE_ADAMW}, &r, 2));
    r.bucket_bytes = 512;
    CHECK(same_as_plain((stoke_optim){.kind = STOKE_SGD}, &r, 2));
    stoke_dist_free(d);
}

int main(void)
{
    test_buckets(1, 6);    /* a bucket a parameter: three layers' weights and biases */
    test_buckets(0, 1);    /* 25 MiB: the whole model in one */
    test_buckets(2048, 2); /* from 2 KiB: layers 3 and 2 (3668 bytes), then layer 1 */
    test_reducers();
    test_dist_local();
    return CHECK_DONE();
}
