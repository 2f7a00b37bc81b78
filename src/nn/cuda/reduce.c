/* reduce.c - sums with many inputs per output (bias gradients, the gradients' sums of
 * squares) as trees of nk_tree_sum launches (k_base.h). One thread per output looping
 * over a batch's values is bound by memory latency on a GPU (the CNN's first
 * convolution's bias gradient ran 32 threads over 100k values each); a level of the
 * tree adds NK_TREE_F values a thread (a few times that at the first level of a large
 * sum), with as many threads as there are partial sums.
 *
 * The levels are plain kernel bodies rather than one kernel with shared memory and
 * warp shuffles because the bodies are also the host build's C (kern.h): one code
 * path, so the tests on the doubles check the arithmetic the GPU runs, and the sums
 * are the same bits on either and run after run (each level's order is fixed by the
 * shapes alone).
 *
 * The partial sums live in c->tree: two halves of CUDA_TREE_CAP doubles, made at the
 * first sum (a model's first backward and step run uncaptured: a capture may not
 * allocate) and never moved, since every captured graph holds their address; a
 * context that never sums (evaluation) never makes them. A level reads one half (or
 * the input) and writes the other. The first level's fan-in grows past NK_TREE_F
 * where its outputs would not fit a half (G is a multiple of NK_TREE_F, the loop's
 * unrolled trip); every later level has fewer outputs than the one before, so it fits
 * too. */
#include "nn/cuda/ops.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static stoke_status scratch(cuda_ctx *c)
{
    if (c->tree)
        return STOKE_OK;
    if (c->L.capturing) /* the capture fails, and the model runs its ops uncaptured */
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "the sums' scratch is made on an uncaptured run, not in a capture");
    return stoke_cudart_malloc(c->rt, 2 * (size_t)CUDA_TREE_CAP * sizeof(double),
                               (void **)&c->tree);
}

/* x (floats xf, or doubles xd in scratch half *half; *half -1 for the caller's
 * memory) viewed [A][L][K], summed over L into total[A K] (written) or db[A K] (added
 * to), or with both NULL into the half other than the input's, *half then that one
 * (A K must fit a half then: the caller's bug otherwise, refused). */
static stoke_status tree(cuda_ctx *c, const float *xf, const double *xd, int square, int *half,
                         int64_t A, int64_t L, int64_t K, double *total, float *db)
{
    int64_t cap = c->tree_cap, outs = A * K;
    if (outs <= 0)
        return STOKE_OK;
    stoke_status st = scratch(c);
    if (st != STOKE_OK)
        return st;
    if (!total && !db && outs > cap)
        return stoke_fail(STOKE_ERR_ARG, "a sum of %lld outputs, the scratch holds %lld",
                          (long long)outs, (long long)cap);
    nk_tree_args a = {0};
    a.xf = xf;
    a.xd = xd;
    a.square = square;
    a.K = K;
    for (;;) {
        /* the least fan-in whose outputs fit a half; all of L when none would */
        int64_t most = outs > 0 ? cap / outs : cap;
        a.L = L;
        a.G = NK_TREE_F;
        if (most < 1)
            a.G = ceil_div(L > 0 ? L : 1, NK_TREE_F) * NK_TREE_F;
        else if (ceil_div(L, most) > NK_TREE_F)
            a.G = ceil_div(ceil_div(L, most), NK_TREE_F) * NK_TREE_F;
        a.Lout = L > a.G ? ceil_div(L, a.G) : 1;
        int next = *half == 0 ? 1 : 0;
        bool last = a.Lout == 1;
        a.out = last && (total || db) ? NULL : c->tree + (size_t)next * CUDA_TREE_CAP;
        a.total = total;
        a.db = db;
        st = CUDA_RUN(c, tree_sum, outs * a.Lout, &a);
        if (st != STOKE_OK || last) {
            if (a.out)
                *half = next;
            return st;
        }
        a.xf = NULL;
        a.xd = a.out;
        a.square = 0;
        *half = next;
        L = a.Lout;
    }
}

stoke_status cuda_sum_squares(cuda_ctx *c, const float *x, int64_t n, double *total)
{
    int half = -1;
    return tree(c, x, NULL, 1, &half, 1, n, 1, total, NULL);
}

/* Level after level, each one launch for all the group's tensors still summing (a
 * tree of NK_TREE_F, as cuda_sum_squares alone on each, so the same bits): the
 * deepest tensor's levels in all, where one tree each made a launch per level per
 * tensor. A group whose first level would not fit a half goes tensor by tensor. */
static stoke_status squares_group(cuda_ctx *c, const float *const *x, const size_t *n, int count,
                                  double *totals)
{
    int64_t outs = 0;
    for (int k = 0; k < count; k++)
        outs += n[k] > NK_TREE_F ? ceil_div((int64_t)n[k], NK_TREE_F) : 1;
    if (outs > c->tree_cap) {
        stoke_status st = STOKE_OK;
        for (int k = 0; k < count && st == STOKE_OK; k++)
            st = cuda_sum_squares(c, x[k], (int64_t)n[k], totals + k);
        return st;
    }
    stoke_status st = scratch(c);
    if (st != STOKE_OK)
        return st;
    nk_tree_many_args a = {0};
    for (int k = 0; k < count; k++) {
        a.x[k] = x[k];
        a.total[k] = totals + k;
        a.L[k] = (int64_t)n[k];
    }
    a.count = count;
    int half = -1;
    while (a.count > 0) {
        int next = half == 0 ? 1 : 0;
        a.xd = half < 0 ? NULL : c->tree + (size_t)half * CUDA_TREE_CAP;
        a.out = c->tree + (size_t)next * CUDA_TREE_CAP;
        a.out_at[0] = 0;
        for (int t = 0; t < a.count; t++)
            a.out_at[t + 1] = a.out_at[t] + (a.L[t] > NK_TREE_F ? ceil_div(a.L[t], NK_TREE_F) : 1);
        st = CUDA_RUN(c, tree_many, a.out_at[a.count], &a);
        if (st != STOKE_OK)
            return st;
        /* the entries with more than one output sum their partials next */
        nk_tree_many_args b = a;
        b.count = 0;
        for (int t = 0; t < a.count; t++) {
            int64_t lout = a.out_at[t + 1] - a.out_at[t];
            if (lout == 1)
                continue;
            b.x[b.count] = NULL;
            b.total[b.count] = a.total[t];
            b.L[b.count] = lout;
            b.in_at[b.count] = a.out_at[t];
            b.count++;
        }
        a = b;
        half = next;
    }
    return STOKE_OK;
}

stoke_status cuda_sum_squares_many(cuda_ctx *c, const float *const *x, const size_t *n, int count,
                                   double *totals)
{
    stoke_status st = STOKE_OK;
    for (int k = 0; k < count && st == STOKE_OK; k += NK_TREE_MANY)
        st = squares_group(c, x + k, n + k, count - k < NK_TREE_MANY ? count - k : NK_TREE_MANY,
                           totals + k);
    return st;
}

stoke_status cuda_bias_grad(cuda_ctx *c, float *db, const float *dy, int64_t rows, int64_t cols)
{
    int half = -1;
    return tree(c, dy, NULL, 0, &half, 1, rows, cols, NULL, db);
}

/* Over the plane per (sample, channel), then over the samples per channel, in order:
 * dy [B][C][P] has no layout that sums both at once with adjacent reads. Samples go
 * in groups whose [group][C] sums fit a half (all of them up to 32k samples x
 * channels: batch 512 at 64 channels), each group's total added to db in turn. */
stoke_status cuda_conv_bias_grad(cuda_ctx *c, float *db, const float *dy, int64_t batch,
                                 int64_t channels, int64_t plane)
{
    if (channels <= 0)
        return STOKE_OK;
    int64_t group = c->tree_cap / channels;
    stoke_status st = STOKE_OK;
    if (group < 1) { /* more channels than a half holds: each sample's sums into db */
        for (int64_t b = 0; b < batch && st == STOKE_OK; b++) {
            int half = -1;
            st = tree(c, dy + b * channels * plane, NULL, 0, &half, channels, plane, 1, NULL, db);
        }
        return st;
    }
    for (int64_t b = 0; b < batch && st == STOKE_OK; b += group) {
        int64_t nb = batch - b < group ? batch - b : group;
        int half = -1;
        st =
            tree(c, dy + b * channels * plane, NULL, 0, &half, nb * channels, plane, 1, NULL, NULL);
        if (st == STOKE_OK)
            st = tree(c, NULL, c->tree + (size_t)half * CUDA_TREE_CAP, 0, &half, 1, nb, channels,
                      NULL, db);
    }
    return st;
}
