/* test_loader.c - the sampler (permutations, drop_last, sharding, resume), the
 * in-memory datasets, and the loader: the same bytes for 0, 1, 2 and 8 workers,
 * resume mid-epoch, a failing sample's error and a clean shutdown, instrumentation,
 * and the pinned/device path against the CUDA runtime double (tests/fake). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "data/dataset_impl.h"
#include "stoke/data.h"

/* ---- sampler ---- */

static void check_permutation(const int64_t *v, int64_t n, const char *what)
{
    char *seen = calloc((size_t)n, 1);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (v[i] < 0 || v[i] >= n || seen[v[i]])
            bad++;
        else
            seen[v[i]] = 1;
    }
    CHECK_MSG(bad == 0, "%s: %d indices out of range or repeated", what, bad);
    free(seen);
}

/* All indices of one epoch of a sampler, in order; returns how many. */
static int64_t one_epoch(stoke_sampler *s, int64_t *out, int64_t bs)
{
    int64_t n = 0, k, e;
    int64_t *tmp = malloc((size_t)bs * sizeof *tmp);
    while ((k = stoke_sampler_next(s, tmp, &e)) > 0) {
        memcpy(out + n, tmp, (size_t)k * sizeof *tmp);
        n += k;
    }
    free(tmp);
    return n;
}

static void case_sampler_order(void)
{
    enum { N = 1000 };
    stoke_sampler *s = NULL;
    stoke_sampler_opts o = {.batch_size = 64};
    CHECK_INT_EQ(stoke_sampler_create(N, &o, &s), STOKE_OK);
    int64_t a[N], b[N], c[N];
    CHECK_INT_EQ(one_epoch(s, a, 64), N);
    for (int i = 0; i < N; i++)
        CHECK(a[i] == i);
    CHECK_INT_EQ(stoke_sampler_epoch_batches(s), 16);
    stoke_sampler_destroy(s);

    o.shuffle = true, o.seed = 42;
    CHECK_INT_EQ(stoke_sampler_create(N, &o, &s), STOKE_OK);
    stoke_sampler *s2 = NULL;
    CHECK_INT_EQ(stoke_sampler_create(N, &o, &s2), STOKE_OK);
    int in_place_total = 0;
    int64_t prev[N];
    for (int epoch = 0; epoch < 4; epoch++) {
        CHECK_INT_EQ(one_epoch(s, a, 64), N);
        CHECK_INT_EQ(one_epoch(s2, b, 64), N);
        check_permutation(a, N, "shuffled epoch");
        CHECK(memcmp(a, b, sizeof a) == 0); /* same seed, same order */
        /* A permutation of 1000 has on average one fixed point; far more means no
         * shuffle. */
        for (int i = 0; i < N; i++)
            in_place_total += a[i] == i;
        if (epoch > 0) {
            int same = 0;
            for (int i = 0; i < N; i++)
                same += a[i] == prev[i];
            CHECK_MSG(same < 20, "epochs %d and %d share %d positions", epoch - 1, epoch, same);
        }
        memcpy(prev, a, sizeof a);
    }
    CHECK_MSG(in_place_total < 20, "%d fixed points over 4 epochs", in_place_total);
    /* Positions are uniform: sample 0's mean position over many epochs is near N/2. */
    double pos_sum = 0;
    for (int epoch = 0; epoch < 200; epoch++) {
        one_epoch(s, a, 64);
        for (int i = 0; i < N; i++)
            if (a[i] == 0)
                pos_sum += i;
    }
    CHECK_NEAR(pos_sum / 200, (N - 1) / 2.0, 80); /* sd of the mean is about 20 */
    stoke_sampler_destroy(s2);
    o.seed = 43;
    CHECK_INT_EQ(stoke_sampler_create(N, &o, &s2), STOKE_OK);
    one_epoch(s2, c, 64);
    stoke_sampler_state st = {0, 0};
    CHECK_INT_EQ(stoke_sampler_set_state(s, st), STOKE_OK);
    one_epoch(s, a, 64);
    CHECK(memcmp(a, c, sizeof a) != 0); /* another seed, another order */
    stoke_sampler_destroy(s);
    stoke_sampler_destroy(s2);

    /* drop_last */
    o.drop_last = true;
    CHECK_INT_EQ(stoke_sampler_create(N, &o, &s), STOKE_OK);
    CHECK_INT_EQ(stoke_sampler_epoch_batches(s), 15);
    CHECK_INT_EQ(one_epoch(s, a, 64), 960);
    stoke_sampler_destroy(s);
    o.batch_size = 0;
    CHECK_INT_EQ(stoke_sampler_create(N, &o, &s), STOKE_ERR_ARG);
    o.batch_size = 8, o.rank = 2, o.world_size = 2;
    CHECK_INT_EQ(stoke_sampler_create(N, &o, &s), STOKE_ERR_ARG);
}

static void case_sharding(void)
{
    const int64_t counts[] = {100, 103, 7, 3};
    for (int t = 0; t < 4; t++) {
        int64_t n = counts[t];
        int world = 4;
        int *seen = calloc((size_t)n, sizeof *seen);
        int64_t per = -1;
        for (int r = 0; r < world; r++) {
            stoke_sampler_opts o = {
                .batch_size = 5, .shuffle = true, .seed = 9, .rank = r, .world_size = world};
            stoke_sampler *s = NULL;
            CHECK_INT_EQ(stoke_sampler_create(n, &o, &s), STOKE_OK);
            if (!s)
                continue;
            int64_t idx[128];
            int64_t k = one_epoch(s, idx, 5);
            CHECK_INT_EQ(k, (n + world - 1) / world);
            if (per >= 0)
                CHECK_INT_EQ(k, per); /* equal counts on every rank */
            per = k;
            for (int64_t i = 0; i < k; i++)
                seen[idx[i]]++;
            stoke_sampler_destroy(s);
        }
        int missing = 0, repeated = 0;
        for (int64_t i = 0; i < n; i++) {
            missing += seen[i] == 0;
            repeated += seen[i] > 1;
        }
        CHECK_INT_EQ(missing, 0);
        if (n % world == 0)
            CHECK_INT_EQ(repeated, 0);
        else
            CHECK(repeated <= world - n % world);
        free(seen);
    }
}

static stoke_sampler *sampler_of(int64_t n, int64_t bs, int rank, int world, bool exact)
{
    stoke_sampler_opts o = {.batch_size = bs,
                            .shuffle = true,
                            .seed = 11,
                            .rank = rank,
                            .world_size = world,
                            .exact = exact};
    stoke_sampler *s = NULL;
    CHECK_INT_EQ(stoke_sampler_create(n, &o, &s), STOKE_OK);
    return s;
}

/* A step of N ranks takes the samples one process takes in N micro-batches, rank r
 * the r-th of them (so data parallel matches accumulation); an exact epoch (evaluation)
 * takes every sample once with no padding; a state saved by 2 ranks resumes with 3,
 * together covering the epoch. */
static void case_global_batches(void)
{
    enum { N = 103, BS = 4 };
    int64_t one[N + 16], part[BS], e;
    stoke_sampler *s1 = sampler_of(N, BS, 0, 1, false);
    CHECK_INT_EQ(one_epoch(s1, one, BS), N);
    for (int world = 2; world <= 3; world++) {
        stoke_sampler *r[3];
        for (int k = 0; k < world; k++)
            r[k] = sampler_of(N, BS, k, world, false);
        int64_t pos = 0, batches = stoke_sampler_epoch_batches(r[0]);
        for (int k = 1; k < world; k++)
            CHECK_INT_EQ(stoke_sampler_epoch_batches(r[k]), batches);
        for (int64_t b = 0; b < batches; b++)
            for (int k = 0; k < world; k++) {
                int64_t got = stoke_sampler_next(r[k], part, &e);
                CHECK(got > 0);
                for (int64_t i = 0; i < got; i++, pos++) /* padding wraps to the start */
                    CHECK_INT_EQ(part[i], one[pos % N]);
            }
        for (int k = 0; k < world; k++) {
            CHECK_INT_EQ(stoke_sampler_next(r[k], part, &e), 0); /* the epoch's end */
            stoke_sampler_destroy(r[k]);
        }
        CHECK_INT_EQ(pos, (N + world - 1) / world * world);
    }
    /* exact: 103 samples over 3 ranks, each once, rank shares summing to 103 */
    int64_t all[N + 16];
    int64_t total = 0;
    for (int k = 0; k < 3; k++) {
        stoke_sampler *x = sampler_of(N, BS, k, 3, true);
        int64_t got = one_epoch(x, all + total, BS);
        CHECK_INT_EQ(got, stoke_sampler_epoch_samples(x));
        total += got;
        stoke_sampler_destroy(x);
    }
    CHECK_INT_EQ(total, N);
    check_permutation(all, N, "exact shards");
    /* 2 ranks take 5 global batches, then 3 ranks resume from their state */
    stoke_sampler *a0 = sampler_of(N, BS, 0, 2, false), *a1 = sampler_of(N, BS, 1, 2, false);
    int64_t got = 0;
    for (int b = 0; b < 5; b++) {
        got += stoke_sampler_next(a0, all + got, &e);
        got += stoke_sampler_next(a1, all + got, &e);
    }
    stoke_sampler_state st = stoke_sampler_get_state(a0);
    CHECK_INT_EQ(st.index, 5 * 2 * BS);
    CHECK_INT_EQ(stoke_sampler_get_state(a1).index, st.index);
    stoke_sampler *c[3];
    for (int k = 0; k < 3; k++) {
        c[k] = sampler_of(N, BS, k, 3, false);
        CHECK_INT_EQ(stoke_sampler_set_state(c[k], st), STOKE_OK);
    }
    for (int more = 1; more;) {
        more = 0;
        for (int k = 0; k < 3; k++) {
            int64_t n = stoke_sampler_next(c[k], part, &e);
            for (int64_t i = 0; i < n && got < N; i++)
                all[got++] = part[i]; /* the padding's repeats left out */
            more |= n > 0;
        }
    }
    CHECK_INT_EQ(got, N);
    check_permutation(all, N, "resumed with another world");
    for (int k = 0; k < 3; k++)
        stoke_sampler_destroy(c[k]);
    stoke_sampler_destroy(a0);
    stoke_sampler_destroy(a1);
    stoke_sampler_destroy(s1);
}

static void case_sampler_resume(void)
{
    stoke_sampler_opts o = {.batch_size = 10, .shuffle = true, .seed = 5};
    stoke_sampler *a = NULL, *b = NULL;
    CHECK_INT_EQ(stoke_sampler_create(95, &o, &a), STOKE_OK);
    CHECK_INT_EQ(stoke_sampler_create(95, &o, &b), STOKE_OK);
    int64_t x[10], y[10], e1, e2;
    for (int i = 0; i < 14; i++) /* epoch 0 (10 batches + end) and 3 of epoch 1 */
        stoke_sampler_next(a, x, &e1);
    stoke_sampler_state st = stoke_sampler_get_state(a);
    CHECK_INT_EQ(st.epoch, 1);
    CHECK_INT_EQ(st.index, 30);
    CHECK_INT_EQ(stoke_sampler_set_state(b, st), STOKE_OK);
    for (int i = 0; i < 12; i++) {
        int64_t k1 = stoke_sampler_next(a, x, &e1), k2 = stoke_sampler_next(b, y, &e2);
        CHECK_INT_EQ(k1, k2);
        CHECK_INT_EQ(e1, e2);
        CHECK(memcmp(x, y, (size_t)k1 * sizeof *x) == 0);
    }
    st.index = 96;
    CHECK_INT_EQ(stoke_sampler_set_state(b, st), STOKE_ERR_ARG);
    stoke_sampler_destroy(a);
    stoke_sampler_destroy(b);
}

/* ---- datasets ---- */

enum { IMG_H = 12, IMG_W = 10 };

static stoke_dataset_info image_info(int64_t n)
{
    stoke_dataset_info info = {.count = n,
                               .input_shape = {2, {IMG_H, IMG_W}},
                               .input_dtype = STOKE_U8,
                               .target_kind = STOKE_TARGET_CLASS,
                               .target_dtype = STOKE_I32,
                               .num_classes = 10,
                               .input_bytes = IMG_H * IMG_W,
                               .target_bytes = 4};
    return info;
}

typedef struct arrays {
    uint8_t *x;
    int32_t *y;
} arrays;

static arrays make_arrays(int64_t n)
{
    arrays a = {malloc((size_t)n * IMG_H * IMG_W), malloc((size_t)n * 4)};
    uint64_t z = 1;
    for (int64_t i = 0; i < n * IMG_H * IMG_W; i++) {
        z = z * 6364136223846793005ULL + 1;
        a.x[i] = (uint8_t)(z >> 56);
    }
    for (int64_t i = 0; i < n; i++)
        a.y[i] = (int32_t)(i % 10);
    return a;
}

/* A dataset whose sample `bad` fails to read, wrapping an in-memory one. */
typedef struct failing {
    stoke_dataset *inner;
    int64_t bad;
} failing;

static stoke_status failing_read(stoke_dataset *d, int64_t i, void *in, void *tg)
{
    failing *f = d->impl;
    if (i == f->bad)
        return stoke_fail(STOKE_ERR_FORMAT, "%s: record %lld: checksum mismatch", d->path,
                          (long long)i);
    return f->inner->vt->read(f->inner, i, in, tg);
}

static void failing_close(stoke_dataset *d)
{
    failing *f = d->impl;
    stoke_dataset_close(f->inner);
    free(f);
}

static const stoke_dataset_vt failing_vt = {.read = failing_read, .close = failing_close};

static stoke_dataset *make_failing(stoke_dataset *inner, int64_t bad)
{
    stoke_dataset *d = calloc(1, sizeof *d);
    failing *f = calloc(1, sizeof *f);
    f->inner = inner;
    f->bad = bad;
    d->vt = &failing_vt;
    d->info = inner->info;
    snprintf(d->path, sizeof d->path, "/data/broken.rec");
    d->impl = f;
    return d;
}

static void case_memory_dataset(void)
{
    arrays a = make_arrays(50);
    stoke_dataset_info info = image_info(50);
    stoke_dataset *borrowed = NULL, *copied = NULL, *loaded = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &borrowed), STOKE_OK);
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, true, &copied), STOKE_OK);
    CHECK_INT_EQ(stoke_dataset_load(borrowed, &loaded), STOKE_OK);
    if (!borrowed || !copied || !loaded)
        return;
    CHECK_STR_EQ(stoke_dataset_get_info(loaded)->format, "memory");
    uint8_t x[IMG_H * IMG_W];
    int32_t y;
    a.x[7 * IMG_H * IMG_W] ^= 0xff; /* the borrowed one sees it, the copies do not */
    CHECK_INT_EQ(stoke_dataset_read(borrowed, 7, x, &y), STOKE_OK);
    CHECK(memcmp(x, a.x + 7 * IMG_H * IMG_W, sizeof x) == 0);
    CHECK_INT_EQ(y, 7);
    CHECK_INT_EQ(stoke_dataset_read(copied, 7, x, NULL), STOKE_OK);
    CHECK_INT_EQ(x[0], (uint8_t)(a.x[7 * IMG_H * IMG_W] ^ 0xffu));
    CHECK_INT_EQ(stoke_dataset_read(loaded, 49, x, &y), STOKE_OK);
    CHECK(memcmp(x, a.x + 49 * IMG_H * IMG_W, sizeof x) == 0);
    CHECK_INT_EQ(y, 9);
    /* Loading a failing dataset reports the failing sample. */
    stoke_dataset *bad = make_failing(copied, 20), *out = (stoke_dataset *)1;
    CHECK_INT_EQ(stoke_dataset_load(bad, &out), STOKE_ERR_FORMAT);
    CHECK(out == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "record 20");
    info.input_bytes = 7;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &out), STOKE_ERR_ARG);
    stoke_dataset_close(bad);
    stoke_dataset_close(borrowed);
    stoke_dataset_close(loaded);
    free(a.x);
    free(a.y);
}

/* ---- loader ---- */

static const stoke_op aug_ops[3] = {
    {.kind = STOKE_OP_CROP, .height = IMG_H, .width = IMG_W, .pad = 2},
    {.kind = STOKE_OP_HFLIP},
    {.kind = STOKE_OP_NORMALIZE, .mean = {0.3f}, .std = {0.35f}},
};

/* opts.sample_delay_us of run_loader's loaders (case_loader_delay). */
static int run_delay_us;

/* Every byte of `nb` batches (end markers included as a 0 size), appended to out. */
static size_t run_loader(stoke_dataset *d, int workers, int prefetch, int nb, unsigned char *out,
                         size_t cap)
{
    stoke_transform_opts to = {.ops = aug_ops, .nops = 3};
    stoke_loader_opts o = {.sampler = {.batch_size = 32, .shuffle = true, .seed = 11},
                           .transform = &to,
                           .workers = workers,
                           .prefetch = prefetch,
                           .sample_delay_us = run_delay_us};
    stoke_loader *l = NULL;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    if (!l)
        return 0;
    size_t n = 0;
    double waited = 0; /* each batch's wait_ms: the stats' total, batch by batch */
    for (int i = 0; i < nb; i++) {
        stoke_batch b;
        CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_OK);
        CHECK(b.wait_ms >= 0);
        if (b.size > 0)
            waited += b.wait_ms;
        size_t in = (size_t)b.size * b.input_bytes, tg = (size_t)b.size * b.target_bytes;
        if (n + in + tg + 16 > cap)
            break;
        memcpy(out + n, &b.size, 8);
        memcpy(out + n + 8, &b.epoch, 8);
        n += 16;
        memcpy(out + n, b.inputs, in);
        n += in;
        memcpy(out + n, b.targets, tg);
        n += tg;
    }
    stoke_loader_stats st;
    stoke_loader_get_stats(l, &st);
    CHECK_NEAR(waited, st.wait_avg_ms * (double)st.batches, 1e-6 * (1 + waited));
    stoke_loader_destroy(l);
    return n;
}

/* The per-batch wait histogram (the train log's wait_hist): its fixed edges, where a
 * wait on an edge goes, the overflow bucket, zero (and nonsense) waits, and the
 * quantiles interpolated within a bucket, never above the max. */
static void case_wait_hist(void)
{
    const double *e = stoke_wait_hist_edges();
    CHECK_INT_EQ(STOKE_WAIT_EDGES, 23);
    CHECK(e[0] == 0 && e[1] == 0.001 && e[2] == 0.002 && e[3] == 0.005);
    CHECK(e[STOKE_WAIT_EDGES - 1] == 10000);
    for (int i = 1; i + 3 < STOKE_WAIT_EDGES; i++) /* 1-2-5: a decade every 3 */
        CHECK_NEAR(e[i + 3], e[i] * 10, e[i] * 1e-9);
    stoke_wait_hist h = {0};
    CHECK(isnan(stoke_wait_hist_quantile(&h, 0.5)));
    /* zero waits, a negative and a NaN one: the first bucket, [0, 0.001) */
    stoke_wait_hist_add(&h, 0);
    stoke_wait_hist_add(&h, -1);
    stoke_wait_hist_add(&h, NAN);
    CHECK_INT_EQ(h.counts[0], 3);
    CHECK_INT_EQ(h.batches, 3);
    CHECK(h.max_ms == 0 && stoke_wait_hist_quantile(&h, 0.5) == 0);
    /* an edge opens its bucket; just below it, the one before */
    stoke_wait_hist_add(&h, 0.001);
    stoke_wait_hist_add(&h, 0.0009999);
    CHECK_INT_EQ(h.counts[1], 1);
    CHECK_INT_EQ(h.counts[0], 4);
    stoke_wait_hist_add(&h, 1);
    CHECK_INT_EQ(h.counts[10], 1); /* [1, 2) ms */
    /* the overflow bucket: the last edge and beyond */
    stoke_wait_hist_add(&h, 9999.9);
    CHECK_INT_EQ(h.counts[STOKE_WAIT_EDGES - 2], 1);
    stoke_wait_hist_add(&h, 10000);
    stoke_wait_hist_add(&h, 1e9);
    CHECK_INT_EQ(h.counts[STOKE_WAIT_EDGES - 1], 2);
    CHECK(h.max_ms == 1e9);
    int64_t sum = 0;
    for (int i = 0; i < STOKE_WAIT_EDGES; i++)
        sum += h.counts[i];
    CHECK_INT_EQ(sum, h.batches);
    CHECK_INT_EQ(h.batches, 9);
    CHECK(stoke_wait_hist_quantile(&h, 1) == 1e9);
    /* within a bucket, linearly, up to the max: ten waits of 3 ms in [2, 5) */
    stoke_wait_hist g = {0};
    for (int i = 0; i < 10; i++)
        stoke_wait_hist_add(&g, 3);
    CHECK_INT_EQ(g.counts[11], 10);
    CHECK_NEAR(stoke_wait_hist_quantile(&g, 0.5), 2.5, 1e-12);
    CHECK_NEAR(stoke_wait_hist_quantile(&g, 0.95), 2.95, 1e-12);
    CHECK(stoke_wait_hist_quantile(&g, 1) == 3);
    /* one wait past the last edge: between the edge and the max */
    stoke_wait_hist o = {0};
    stoke_wait_hist_add(&o, 20000);
    CHECK_NEAR(stoke_wait_hist_quantile(&o, 0.5), 15000, 1e-9);
}

static void case_loader_workers_identical(void)
{
    enum { N = 300 }; /* 10 batches of 32 (the last 12) per epoch */
    arrays a = make_arrays(N);
    stoke_dataset_info info = image_info(N);
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &d), STOKE_OK);
    size_t cap = 2u << 20;
    unsigned char *ref = malloc(cap), *got = malloc(cap);
    size_t nref = run_loader(d, 0, 0, 25, ref, cap); /* 2 epochs and a bit */
    CHECK(nref > 0);
    const int workers[] = {1, 2, 8};
    const int prefetch[] = {2, 0, 3};
    for (int k = 0; k < 3; k++) {
        size_t n = run_loader(d, workers[k], prefetch[k], 25, got, cap);
        CHECK_INT_EQ(n, nref);
        CHECK_MSG(n == nref && memcmp(ref, got, n) == 0, "%d workers differ from 0", workers[k]);
    }
    /* The content is right: batch 0 holds samples transformed as the transform alone
     * does, and their targets. */
    stoke_transform_opts to = {
        .in_shape = info.input_shape, .in_dtype = STOKE_U8, .ops = aug_ops, .nops = 3};
    stoke_transform *t = NULL;
    CHECK_INT_EQ(stoke_transform_create(&to, &t), STOKE_OK);
    stoke_loader_opts o = {
        .sampler = {.batch_size = 32, .shuffle = true, .seed = 11}, .transform = &to, .workers = 2};
    stoke_loader *l = NULL;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    stoke_batch b;
    int epochs_seen = 0, batches = 0;
    while (l && t && epochs_seen < 2) {
        CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_OK);
        if (b.size == 0) {
            CHECK_INT_EQ(batches, 10);
            epochs_seen++, batches = 0;
            continue;
        }
        CHECK_INT_EQ(b.index, batches);
        CHECK_INT_EQ(b.epoch, epochs_seen);
        CHECK_INT_EQ(b.input_dtype, STOKE_F32);
        CHECK_INT_EQ(b.input_shape.ndim, 3);
        CHECK_INT_EQ(b.input_shape.dims[0], 1);
        CHECK(!b.on_device);
        batches++;
        float want[IMG_H * IMG_W];
        for (int64_t j = 0; j < b.size; j += 7) {
            stoke_transform_apply(t, a.x + b.samples[j] * IMG_H * IMG_W, want, NULL, 11, b.epoch,
                                  b.samples[j]);
            CHECK(memcmp(want, (float *)b.inputs + j * IMG_H * IMG_W, sizeof want) == 0);
            CHECK_INT_EQ(((int32_t *)b.targets)[j], b.samples[j] % 10);
        }
    }
    stoke_loader_stats st;
    stoke_loader_get_stats(l, &st);
    CHECK_INT_EQ(st.batches, 20);
    CHECK_INT_EQ(st.samples, 600);
    CHECK(st.wait_avg_ms >= 0 && st.wait_avg_ms <= st.wait_max_ms);
    CHECK(st.wait_p95_ms <= st.wait_max_ms);
    CHECK(st.fill_min >= 0 && st.fill_max <= st.slots && st.fill_avg <= st.fill_max);
    CHECK_INT_EQ(st.slots, 6);
    CHECK_INT_EQ(st.workers, 2);
    CHECK(st.busy_frac[0] >= 0 && st.busy_frac[0] <= 1.01);
    CHECK(st.busy_avg_ms > 0);
    CHECK_STR_EQ(stoke_loader_device_reason(l), "no device requested");
    stoke_loader_destroy(l);
    stoke_transform_destroy(t);
    stoke_dataset_close(d);
    free(ref);
    free(got);
    free(a.x);
    free(a.y);
}

/* sample_delay_us: the batches are the same bytes as without it, with 0 and with 2
 * workers, and a delay out of range is refused naming it. */
static void case_loader_delay(void)
{
    enum { N = 80, DELAY_US = 400 };
    arrays a = make_arrays(N);
    stoke_dataset_info info = image_info(N);
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &d), STOKE_OK);
    size_t cap = 1u << 20;
    unsigned char *ref = malloc(cap), *got = malloc(cap);
    size_t nref = run_loader(d, 0, 0, 4, ref, cap);
    run_delay_us = DELAY_US;
    for (int workers = 0; workers <= 2; workers += 2) {
        size_t n = run_loader(d, workers, 0, 4, got, cap);
        CHECK_MSG(n == nref && memcmp(ref, got, n) == 0, "delay with %d workers: other bytes",
                  workers);
    }
    run_delay_us = 0;
    /* How much the delay costs is a timing, measured where timings belong: bench/ (and
     * `stoke bench`'s robustness run, which must be diagnosed input-bound by it). */
    stoke_loader_opts o = {.sampler = {.batch_size = 32}, .sample_delay_us = DELAY_US};
    stoke_loader *l = (stoke_loader *)1;
    o.sample_delay_us = -1;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "sample delay -1 us");
    CHECK(l == NULL);
    o.sample_delay_us = 1000001;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_ERR_ARG);
    stoke_dataset_close(d);
    free(ref);
    free(got);
    free(a.x);
    free(a.y);
}

/* A rank whose exact shard is empty (1 sample over 2 ranks: evaluation): every next
 * is the epoch's end, with the training thread loading or with workers. */
static void case_loader_empty_shard(void)
{
    arrays a = make_arrays(1);
    stoke_dataset_info info = image_info(1);
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &d), STOKE_OK);
    for (int workers = 0; d && workers <= 2; workers += 2) {
        stoke_loader_opts o = {
            .sampler = {.batch_size = 4, .rank = 1, .world_size = 2, .exact = true},
            .workers = workers};
        stoke_loader *l = NULL;
        CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
        stoke_batch b;
        for (int i = 0; l && i < 5; i++) {
            CHECK_MSG(stoke_loader_next(l, &b) == STOKE_OK, "workers %d: %s", workers,
                      stoke_last_error());
            CHECK_INT_EQ(b.size, 0);
        }
        stoke_loader_destroy(l);
    }
    stoke_dataset_close(d);
    free(a.x);
    free(a.y);
}

static void case_loader_resume(void)
{
    enum { N = 200 };
    arrays a = make_arrays(N);
    stoke_dataset_info info = image_info(N);
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &d), STOKE_OK);
    stoke_transform_opts to = {.ops = aug_ops, .nops = 3};
    stoke_loader_opts o = {
        .sampler = {.batch_size = 16, .shuffle = true, .seed = 3}, .transform = &to, .workers = 2};
    stoke_loader *l = NULL, *r = NULL;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    stoke_batch b, c;
    for (int i = 0; l && i < 13 + 1 + 5; i++) /* epoch 0 (13 batches, end), 5 of epoch 1 */
        CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_OK);
    stoke_sampler_state st = stoke_loader_state(l);
    CHECK_INT_EQ(st.epoch, 1);
    CHECK_INT_EQ(st.index, 80);
    o.start = st; /* a fresh loader, as after a restart from a checkpoint */
    o.workers = 1;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &r), STOKE_OK);
    for (int i = 0; l && r && i < 12; i++) {
        CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_OK);
        CHECK_INT_EQ(stoke_loader_next(r, &c), STOKE_OK);
        CHECK_INT_EQ(b.size, c.size);
        CHECK_INT_EQ(b.epoch, c.epoch);
        CHECK_INT_EQ(b.index, c.index);
        CHECK(memcmp(b.samples, c.samples, (size_t)b.size * 8) == 0);
        CHECK(memcmp(b.inputs, c.inputs, (size_t)b.size * b.input_bytes) == 0);
    }
    stoke_loader_destroy(l);
    stoke_loader_destroy(r);
    stoke_dataset_close(d);
    free(a.x);
    free(a.y);
}

static void case_loader_error(void)
{
    enum { N = 1500 };
    arrays a = make_arrays(N);
    stoke_dataset_info info = image_info(N);
    const int workers[] = {0, 2, 8};
    for (int k = 0; k < 3; k++) {
        stoke_dataset *inner = NULL;
        CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &inner), STOKE_OK);
        stoke_dataset *d = make_failing(inner, 1000);
        stoke_transform_opts to = {.ops = aug_ops, .nops = 3};
        stoke_loader_opts o = {
            .sampler = {.batch_size = 64}, .transform = &to, .workers = workers[k], .prefetch = 4};
        stoke_loader *l = NULL;
        CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
        stoke_batch b;
        int good = 0;
        stoke_status st = STOKE_OK;
        while (l && (st = stoke_loader_next(l, &b)) == STOKE_OK && b.size > 0)
            good++;
        CHECK_INT_EQ(good, 15); /* samples 0..959; 960..1023 holds sample 1000 */
        CHECK_INT_EQ(st, STOKE_ERR_FORMAT);
        CHECK_STR_CONTAINS(stoke_last_error(), "/data/broken.rec: record 1000: checksum");
        CHECK_STR_CONTAINS(stoke_last_error(), "sample 1000, batch 15 of epoch 0");
        CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_ERR_FORMAT); /* and stays failed */
        CHECK_INT_EQ(b.size, 0);
        stoke_loader_destroy(l); /* LSan and TSan check the rest */
        stoke_dataset_close(d);
    }
    free(a.x);
    free(a.y);
}

static void case_loader_bad_options(void)
{
    arrays a = make_arrays(10);
    stoke_dataset_info info = image_info(10);
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &d), STOKE_OK);
    stoke_loader *l = (stoke_loader *)1;
    stoke_loader_opts o = {.sampler = {.batch_size = 4}, .workers = -1};
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_ERR_ARG);
    CHECK(l == NULL);
    o.workers = 1;
    stoke_op big = {.kind = STOKE_OP_CROP, .height = 99, .width = 5};
    stoke_transform_opts to = {.ops = &big, .nops = 1};
    o.transform = &to;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "crop");
    o.transform = NULL;
    o.start.index = 11;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_ERR_ARG);
    /* A ring larger than the memory left is refused before it is allocated: 5 slots
     * of 4 samples of (IMG_H x IMG_W + 4 + 8) bytes, one byte over and exactly. */
    o.start.index = 0;
    o.prefetch = 5;
    size_t ring = 5 * 4 * (size_t)(IMG_H * IMG_W + 4 + 8);
    o.memory_limit = ring - 1;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_ERR_NOMEM);
    CHECK_STR_CONTAINS(stoke_last_error(), "5 slots (prefetch) of 4 samples");
    CHECK(l == NULL);
    o.memory_limit = ring;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    stoke_loader_destroy(l);
    o.prefetch = 0;
    o.memory_limit = 0;
    /* No transform: the raw bytes as read. */
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    stoke_batch b;
    CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_OK);
    CHECK_INT_EQ(b.input_dtype, STOKE_U8);
    CHECK(memcmp(b.inputs, a.x, 4 * IMG_H * IMG_W) == 0);
    stoke_loader_destroy(l);
    stoke_dataset_close(d);
    free(a.x);
    free(a.y);
}

/* ---- the device path, against the CUDA runtime double ---- */

typedef int (*int_fn)(void);
typedef int (*kind_fn)(const void *);
typedef int (*log_fn)(int, char *, int *, int *, const void **);

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Points the CUDA runtime double at a new scenario file `scen` (a mkstemp template):
 * a driver, CUDA 12.4, and `devices` (scenario lines, may be ""). */
static void fake_gpu(char *scen, const char *devices)
{
    int fd = mkstemp(scen);
    CHECK(fd >= 0);
    close(fd);
    char text[512];
    snprintf(text, sizeof text, "driver 550.54.15\ncuda 12040\n%s", devices);
    write_file(scen, text);
    setenv("STOKE_FAKE_GPU_SCENARIO", scen, 1);
    setenv("STOKE_CUDART_LIBRARY", FAKE_CUDART, 1);
}

static void device_case(void)
{
    char scen[] = "/tmp/stoke-test-loader-XXXXXX";
    fake_gpu(scen, "device name=\"NVIDIA L4\" bus=00000000:01:00.0 memory=24000000000 cc=8.9 "
                   "sm=58\n");

    enum { N = 300 };
    arrays a = make_arrays(N);
    stoke_dataset_info info = image_info(N);
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &d), STOKE_OK);
    size_t cap = 1u << 20;
    unsigned char *ref = malloc(cap);
    size_t nref = run_loader(d, 2, 0, 22, ref, cap); /* host-only reference */

    stoke_transform_opts to = {.ops = aug_ops, .nops = 3};
    stoke_loader_opts o = {.sampler = {.batch_size = 32, .shuffle = true, .seed = 11},
                           .transform = &to,
                           .use_device = true};
    /* Workers and ring sizes, the smallest ring included (2 slots: one held by the
     * pending copy, one being filled). */
    const int cfg[3][2] = {{2, 0}, {0, 2}, {1, 2}};
    for (int c = 0; c < 3; c++) {
        o.workers = cfg[c][0], o.prefetch = cfg[c][1];
        stoke_loader *l = NULL;
        CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
        void *fake = dlopen(FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
        CHECK(fake != NULL);
        if (!l || !fake)
            break;
        kind_fn kind = (kind_fn)dlsym(fake, "fake_cudart_kind");
        int_fn live = (int_fn)dlsym(fake, "fake_cudart_live");
        int_fn violations = (int_fn)dlsym(fake, "fake_cudart_violations");
        log_fn getlog = (log_fn)dlsym(fake, "fake_cudart_log");
        kind_fn event_id = (kind_fn)dlsym(fake, "fake_cudart_event_id");
        CHECK(stoke_loader_on_device(l));
        CHECK_STR_EQ(stoke_loader_device_reason(l), "");
        /* In the first configuration the test plays a consumer with its own compute
         * stream and an event recorded after each step. */
        typedef int (*create_fn)(void **, unsigned);
        typedef int (*pp_fn)(void *, void *);
        typedef int (*p_fn)(void *);
        void *cstream = NULL, *cevent = NULL;
        if (c == 0) {
            ((create_fn)dlsym(fake, "cudaStreamCreateWithFlags"))(&cstream, 1);
            ((create_fn)dlsym(fake, "cudaEventCreateWithFlags"))(&cevent, 2);
            stoke_loader_set_consumer_event(l, cevent);
        }
        int waits_before = 0, waits = 0;
        CHECK(live() > 0);
        size_t pos = 0;
        int mismatched = 0, not_after_copy = 0;
        for (int i = 0; i < 22; i++) {
            stoke_batch b;
            CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_OK);
            int64_t size, epoch;
            memcpy(&size, ref + pos, 8);
            memcpy(&epoch, ref + pos + 8, 8);
            pos += 16;
            CHECK_INT_EQ(b.size, size);
            if (b.size == 0)
                continue;
            CHECK(b.on_device);
            CHECK_INT_EQ(kind(b.inputs), 2); /* device memory */
            CHECK_INT_EQ(kind(b.targets), 2);
            CHECK_INT_EQ(kind(b.host_inputs), 1); /* pinned host slot */
            CHECK(b.event != NULL);
            /* The event handed out was recorded after the last copy into this batch. */
            int last_copy = -1, record_after = -1, id = event_id(b.event);
            char op;
            int stream, ev;
            const void *dst;
            for (int k = 0; getlog(k, &op, &stream, &ev, &dst); k++) {
                if (op == 'C' && dst == b.targets)
                    last_copy = k, record_after = -1;
                if (op == 'R' && ev == id && last_copy >= 0 && record_after < 0)
                    record_after = k;
            }
            not_after_copy += last_copy < 0 || record_after < last_copy;
            CHECK_INT_EQ(stoke_loader_wait(l, &b), STOKE_OK);
            if (cevent) /* "kernels" on this batch enqueued: mark their end */
                ((pp_fn)dlsym(fake, "cudaEventRecord"))(cevent, cstream);
            size_t in = (size_t)b.size * b.input_bytes, tg = (size_t)b.size * b.target_bytes;
            mismatched +=
                memcmp(ref + pos, b.inputs, in) != 0 || memcmp(ref + pos + in, b.targets, tg) != 0;
            pos += in + tg;
        }
        CHECK_INT_EQ(pos, nref);
        CHECK_INT_EQ(mismatched, 0);
        CHECK_INT_EQ(not_after_copy, 0);
        CHECK_INT_EQ(violations(), 0); /* no copy into a device slot with one pending */
        /* The loader waits on its own events before reusing a device slot. */
        int syncs = 0;
        char op;
        int stream, ev;
        const void *dst;
        for (int k = 0; getlog(k, &op, &stream, &ev, &dst); k++)
            syncs += op == 'S';
        CHECK(syncs >= 18);
        for (int k = 0; getlog(k, &op, &stream, &ev, &dst); k++)
            waits += op == 'W' && ev == event_id(cevent);
        if (c == 0) /* every copy into a device slot used before waited on the consumer */
            CHECK_MSG(waits - waits_before >= 15, "%d waits on the consumer's event", waits);
        else
            CHECK_INT_EQ(waits, 0);
        stoke_loader_destroy(l);
        if (cevent) {
            ((p_fn)dlsym(fake, "cudaEventDestroy"))(cevent);
            ((p_fn)dlsym(fake, "cudaStreamDestroy"))(cstream);
        }
        CHECK_INT_EQ(live(), 0); /* pinned, device memory, stream and events all freed */
        dlclose(fake);
    }
    /* Pinned memory refused: a clear error, nothing left behind. */
    void *fake = dlopen(FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
    if (fake) {
        void (*fail_host)(int) = (void (*)(int))dlsym(fake, "fake_cudart_fail_host_alloc");
        int_fn live = (int_fn)dlsym(fake, "fake_cudart_live");
        fail_host(1);
        stoke_loader *l = (stoke_loader *)1;
        CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_ERR_NOMEM);
        CHECK(l == NULL);
        CHECK_STR_CONTAINS(stoke_last_error(), "cudaHostAlloc");
        CHECK_INT_EQ(live(), 0);
        fail_host(0);
        dlclose(fake);
    }

    unlink(scen);

    /* This machine's real runtime, if any: a reason, never a crash. */
    unsetenv("STOKE_CUDART_LIBRARY");
    stoke_loader *h = NULL;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &h), STOKE_OK);
    if (h && !stoke_loader_on_device(h)) {
        CHECK(stoke_loader_device_reason(h)[0] != '\0');
        fprintf(stderr, "note: real CUDA runtime: %s\n", stoke_loader_device_reason(h));
    }
    stoke_loader_destroy(h);
    stoke_dataset_close(d);
    free(ref);
    free(a.x);
    free(a.y);
}

/* opts.hold: every batch stays as it was handed out while the caller holds it, however
 * far the loader goes meanwhile; given back, its buffers are reused, so a caller that
 * drops each batch keeps a bounded set. */
static void case_loader_hold(void)
{
    enum { N = 300, NB = 22 };
    arrays a = make_arrays(N);
    stoke_dataset_info info = image_info(N);
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &d), STOKE_OK);
    size_t cap = 1u << 20;
    unsigned char *ref = malloc(cap);
    size_t nref = run_loader(d, 2, 0, NB, ref, cap);
    const int cfg[3][2] = {{0, 0}, {3, 2}, {2, 0}}; /* workers, prefetch */
    for (int c = 0; c < 3; c++) {
        stoke_transform_opts to = {.ops = aug_ops, .nops = 3};
        stoke_loader_opts o = {.sampler = {.batch_size = 32, .shuffle = true, .seed = 11},
                               .transform = &to,
                               .workers = cfg[c][0],
                               .prefetch = cfg[c][1],
                               .hold = true};
        stoke_loader *l = NULL;
        CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
        if (!l)
            break;
        stoke_batch b[NB];
        int held = 0;
        for (int i = 0; i < NB; i++) {
            CHECK_INT_EQ(stoke_loader_next(l, &b[i]), STOKE_OK);
            CHECK((b[i].size == 0) == (b[i].held == NULL));
            held += b[i].size > 0;
        }
        stoke_loader_stats st;
        stoke_loader_get_stats(l, &st);
        CHECK_INT_EQ(st.held, held);
        CHECK_INT_EQ(st.buffers, held);
        /* Compared only now, after the loader has gone round its ring several times. */
        size_t pos = 0;
        int mismatched = 0;
        for (int i = 0; i < NB; i++) {
            int64_t size;
            memcpy(&size, ref + pos, 8);
            pos += 16;
            CHECK_INT_EQ(b[i].size, size);
            size_t in = (size_t)b[i].size * b[i].input_bytes;
            size_t tg = (size_t)b[i].size * b[i].target_bytes;
            mismatched += memcmp(ref + pos, b[i].inputs, in) != 0 ||
                          memcmp(ref + pos + in, b[i].targets, tg) != 0 ||
                          b[i].host_inputs != b[i].inputs;
            pos += in + tg;
        }
        CHECK_INT_EQ(pos, nref);
        CHECK_MSG(mismatched == 0, "config %d: %d held batches changed", c, mismatched);
        /* Given back (out of order), then a long run dropping each batch before the
         * next: the sets are reused, none is allocated. */
        for (int i = NB - 1; i >= 0; i--)
            stoke_loader_release(l, b[i].held);
        stoke_loader_release(l, NULL);
        for (int i = 0; i < 200; i++) {
            stoke_batch x;
            CHECK_INT_EQ(stoke_loader_next(l, &x), STOKE_OK);
            stoke_loader_release(l, x.held);
        }
        stoke_loader_get_stats(l, &st);
        CHECK_INT_EQ(st.held, 0);
        CHECK_INT_EQ(st.buffers, held);
        stoke_loader_destroy(l); /* with held sets in the pool: ASan checks the frees */
    }
    /* Stopped while the caller holds batches: they stay valid, no more come; then
     * destroyed with them still held: everything is freed. */
    stoke_loader_opts o = {.sampler = {.batch_size = 32}, .workers = 1, .hold = true};
    stoke_loader *l = NULL;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    stoke_batch x;
    for (int i = 0; l && i < 5; i++)
        CHECK_INT_EQ(stoke_loader_next(l, &x), STOKE_OK);
    if (l) {
        stoke_loader_stop(l);
        stoke_loader_stop(l); /* twice is fine */
        CHECK(memcmp(x.inputs, a.x + x.samples[0] * IMG_H * IMG_W, IMG_H * IMG_W) == 0);
        stoke_batch y;
        CHECK_INT_EQ(stoke_loader_next(l, &y), STOKE_ERR_ARG);
        CHECK_STR_CONTAINS(stoke_last_error(), "stopped");
        stoke_loader_release(l, x.held);
    }
    stoke_loader_destroy(l);
    stoke_dataset_close(d);
    free(ref);
    free(a.x);
    free(a.y);
}

/* A dataset whose reads wait at a gate the test opens: a batch that is not ready. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static const stoke_dataset_vt *gated_inner;

static stoke_status gated_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    pthread_mutex_lock(&gate_mu);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    return gated_inner->read(d, i, input, target);
}

static void case_loader_timed(void)
{
    enum { N = 100 };
    arrays a = make_arrays(N);
    stoke_dataset_info info = image_info(N);
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &d), STOKE_OK);
    if (!d)
        return;
    stoke_dataset_vt vt = *d->vt;
    gated_inner = d->vt;
    vt.read = gated_read;
    d->vt = &vt;
    stoke_loader_opts o = {.sampler = {.batch_size = 32}, .workers = 2};
    stoke_loader *l = NULL;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    stoke_batch b;
    /* Not ready: a timeout, nothing handed out, and again. */
    for (int k = 0; l && k < 2; k++) {
        CHECK_INT_EQ(stoke_loader_next_timed(l, &b, 0.05), STOKE_ERR_TIMEOUT);
        CHECK_INT_EQ(b.size, 0);
        CHECK_STR_CONTAINS(stoke_last_error(), "not ready");
    }
    CHECK_INT_EQ(stoke_loader_next_timed(l, &b, -1), STOKE_ERR_ARG);
    pthread_mutex_lock(&gate_mu);
    gate_open = true;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    /* The same batch arrives, counted once. (That its wait includes the calls that
     * timed out is not asserted: a duration against a number belongs in bench/.) */
    CHECK_INT_EQ(stoke_loader_next_timed(l, &b, 100), STOKE_OK);
    CHECK_INT_EQ(b.index, 0);
    CHECK_INT_EQ(b.size, 32);
    CHECK(memcmp(b.inputs, a.x, 32 * IMG_H * IMG_W) == 0);
    stoke_loader_stats st;
    stoke_loader_get_stats(l, &st);
    CHECK_INT_EQ(st.batches, 1);
    stoke_loader_destroy(l);
    /* No workers: every call does some of the work, so a caller polling with a zero
     * timeout still gets its batches, the same ones. */
    o.workers = 0;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    int64_t got = 0;
    for (int calls = 0; l && got < 4 && calls < 1000; calls++) {
        stoke_status r = stoke_loader_next_timed(l, &b, 0);
        CHECK(r == STOKE_OK || r == STOKE_ERR_TIMEOUT);
        if (r == STOKE_OK) {
            if (b.size > 0)
                CHECK(memcmp(b.inputs, a.x + b.samples[0] * IMG_H * IMG_W, IMG_H * IMG_W) == 0);
            got++;
        }
    }
    CHECK_INT_EQ(got, 4); /* 32 + 32 + 32 + 4 samples */
    stoke_loader_destroy(l);
    stoke_dataset_close(d);
    free(a.x);
    free(a.y);
}

/* A scenario with a driver and no device: host batches, and the reason. */
static void no_device_case(void)
{
    char scen[] = "/tmp/stoke-test-loader-XXXXXX";
    fake_gpu(scen, "");
    arrays a = make_arrays(64);
    stoke_dataset_info info = image_info(64);
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &d), STOKE_OK);
    stoke_loader_opts o = {.sampler = {.batch_size = 32}, .workers = 1, .use_device = true};
    stoke_loader *h = NULL;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &h), STOKE_OK);
    if (h) {
        CHECK(!stoke_loader_on_device(h));
        CHECK_STR_CONTAINS(stoke_loader_device_reason(h), "no CUDA-capable device");
        stoke_batch b;
        CHECK_INT_EQ(stoke_loader_next(h, &b), STOKE_OK);
        CHECK(!b.on_device && b.event == NULL);
        CHECK_INT_EQ(b.size, 32);
        CHECK(memcmp(b.inputs, a.x, 32 * IMG_H * IMG_W) == 0);
    }
    stoke_loader_destroy(h);
    stoke_dataset_close(d);
    unlink(scen);
    free(a.x);
    free(a.y);
}

/* opts.hold on a device: held device batches keep their contents while later batches
 * are copied, stoke_loader_stream_wait makes the caller's stream wait on the batch's
 * copy, and everything is freed. */
static void device_hold_case(void)
{
    char scen[] = "/tmp/stoke-test-loader-XXXXXX";
    fake_gpu(scen, "device name=\"NVIDIA L4\" bus=00000000:01:00.0 memory=24000000000 cc=8.9 "
                   "sm=58\n");
    enum { N = 300, NB = 22 };
    arrays a = make_arrays(N);
    stoke_dataset_info info = image_info(N);
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, a.x, a.y, false, &d), STOKE_OK);
    size_t cap = 1u << 20;
    unsigned char *ref = malloc(cap);
    size_t nref = run_loader(d, 2, 0, NB, ref, cap);
    stoke_transform_opts to = {.ops = aug_ops, .nops = 3};
    stoke_loader_opts o = {.sampler = {.batch_size = 32, .shuffle = true, .seed = 11},
                           .transform = &to,
                           .workers = 2,
                           .use_device = true,
                           .hold = true};
    stoke_loader *l = NULL;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    void *fake = dlopen(FAKE_CUDART, RTLD_NOW | RTLD_NOLOAD);
    CHECK(fake != NULL);
    if (l && fake) {
        kind_fn kind = (kind_fn)dlsym(fake, "fake_cudart_kind");
        int_fn live = (int_fn)dlsym(fake, "fake_cudart_live");
        log_fn getlog = (log_fn)dlsym(fake, "fake_cudart_log");
        kind_fn event_id = (kind_fn)dlsym(fake, "fake_cudart_event_id");
        typedef int (*create_fn)(void **, unsigned);
        void *cstream = NULL;
        ((create_fn)dlsym(fake, "cudaStreamCreateWithFlags"))(&cstream, 1);
        CHECK(stoke_loader_on_device(l));
        stoke_batch b[NB];
        int waited = 0, nonempty = 0;
        for (int i = 0; i < NB; i++) {
            CHECK_INT_EQ(stoke_loader_next(l, &b[i]), STOKE_OK);
            if (b[i].size == 0)
                continue;
            nonempty++;
            CHECK_INT_EQ(kind(b[i].inputs), 2);
            CHECK_INT_EQ(kind(b[i].host_inputs), 1);
            CHECK_INT_EQ(stoke_loader_stream_wait(l, &b[i], cstream), STOKE_OK);
            /* The wait is on this batch's event, logged as the stream's wait. */
            char op;
            int stream, ev;
            const void *dst;
            int last = -1;
            for (int k = 0; getlog(k, &op, &stream, &ev, &dst); k++)
                if (op == 'W')
                    last = ev;
            waited += last == event_id(b[i].event);
        }
        CHECK_INT_EQ(nonempty, 20); /* two epochs of 10 batches and their markers */
        CHECK_INT_EQ(waited, nonempty);
        size_t pos = 0;
        int mismatched = 0;
        for (int i = 0; i < NB; i++) {
            pos += 16;
            size_t in = (size_t)b[i].size * b[i].input_bytes;
            size_t tg = (size_t)b[i].size * b[i].target_bytes;
            mismatched += memcmp(ref + pos, b[i].inputs, in) != 0 ||
                          memcmp(ref + pos + in, b[i].targets, tg) != 0;
            pos += in + tg;
        }
        CHECK_INT_EQ(pos, nref);
        CHECK_INT_EQ(mismatched, 0);
        for (int i = 0; i < NB; i++)
            stoke_loader_release(l, b[i].held);
        stoke_loader_destroy(l);
        ((int (*)(void *))dlsym(fake, "cudaStreamDestroy"))(cstream);
        CHECK_INT_EQ(live(), 0); /* pinned and device memory of the held sets freed too */
        dlclose(fake);
    }
    unlink(scen);
    stoke_dataset_close(d);
    free(ref);
    free(a.x);
    free(a.y);
}

static void run_in_child(void (*fn)(void), const char *what)
{
    /* Its own process: the double and its scenario are process-wide. */
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        check_failures = 0; /* its own verdict, not the parent's failures so far */
        fn();
        _exit(check_failures ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed", what);
}

static void case_device(void)
{
    run_in_child(no_device_case, "no-device case");
    run_in_child(device_case, "device case");
    run_in_child(device_hold_case, "device hold case");
}

static void case_fashion_mnist(void)
{
    const char *path = "/usr/share/datasets/fashion-mnist";
    stoke_dataset *src = NULL, *mem = NULL;
    CHECK_INT_EQ(stoke_dataset_open(path, NULL, &src), STOKE_OK);
    if (!src)
        return;
    CHECK_INT_EQ(stoke_dataset_get_info(src)->count, 60000);
    CHECK_INT_EQ(stoke_dataset_load(src, &mem), STOKE_OK);
    stoke_op ops[3] = {{.kind = STOKE_OP_CROP, .height = 28, .width = 28, .pad = 2},
                       {.kind = STOKE_OP_HFLIP},
                       {.kind = STOKE_OP_NORMALIZE, .mean = {0.2860f}, .std = {0.3530f}}};
    stoke_transform_opts to = {.ops = ops, .nops = 3};
    stoke_loader_opts o = {
        .sampler = {.batch_size = 256, .shuffle = true, .seed = 1}, .transform = &to, .workers = 2};
    stoke_loader *l = NULL;
    CHECK_INT_EQ(stoke_loader_create(mem, &o, &l), STOKE_OK);
    stoke_batch b;
    CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_OK);
    CHECK_INT_EQ(b.size, 256);
    CHECK_INT_EQ(b.input_shape.dims[1], 28);
    /* The first sample against a direct read and transform of the file. */
    uint8_t raw[784];
    uint8_t label;
    float want[784];
    CHECK_INT_EQ(stoke_dataset_read(src, b.samples[0], raw, &label), STOKE_OK);
    to.in_shape = stoke_dataset_get_info(src)->input_shape;
    to.in_dtype = STOKE_U8;
    stoke_transform *t = NULL;
    CHECK_INT_EQ(stoke_transform_create(&to, &t), STOKE_OK);
    stoke_transform_apply(t, raw, want, NULL, 1, 0, b.samples[0]);
    CHECK(memcmp(want, b.inputs, sizeof want) == 0);
    CHECK_INT_EQ(((uint8_t *)b.targets)[0], label);
    stoke_transform_destroy(t);
    stoke_loader_destroy(l);
    stoke_dataset_close(mem);
    stoke_dataset_close(src);
}

int main(int argc, char **argv)
{
    if (check_part(argc, argv, "fashion_mnist")) {
        if (access("/usr/share/datasets/fashion-mnist", R_OK) != 0) {
            fprintf(stderr, "skipped: /usr/share/datasets/fashion-mnist is missing\n");
            return CHECK_SKIPPED;
        }
        case_fashion_mnist();
        return CHECK_DONE();
    }
    case_sampler_order();
    case_sharding();
    case_global_batches();
    case_sampler_resume();
    case_memory_dataset();
    case_loader_workers_identical();
    case_loader_delay();
    case_wait_hist();
    case_loader_resume();
    case_loader_empty_shard();
    case_loader_error();
    case_loader_bad_options();
    case_loader_hold();
    case_loader_timed();
    case_device();
    return CHECK_DONE();
}
