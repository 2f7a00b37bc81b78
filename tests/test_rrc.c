/* test_rrc.c - RandomResizedCrop and resize-of-the-shorter-side + centre crop: the
 * windows' distribution against torchvision's definition (written out here and sampled
 * with the test's own generator), the fallback to a centre crop, the same windows
 * through the loader whatever the worker count, the float path against crop + RESIZE,
 * and (part "pillow", where /usr/bin/python3 has Pillow) the pixels against Pillow's
 * crop + resize(BILINEAR), which is what torchvision does on PIL images. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "data/transform_impl.h"
#include "stoke/data.h"

static uint64_t sm_state = 0x9e3779b97f4a7c15ULL;

/* splitmix64: the reference's uniform numbers, independent of stoke's generator. */
static double unit(void)
{
    uint64_t z = (sm_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

static void fill_u8(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(unit() * 256);
}

/* torchvision.transforms.RandomResizedCrop.get_params, as its source reads (Python's
 * round() is half to even: rint). Returns whether the fallback was taken. */
static bool ref_window(int H, int W, const double scale[2], const double ratio[2], int *win)
{
    double area = (double)H * W;
    for (int k = 0; k < 10; k++) {
        double target = area * (scale[0] + (scale[1] - scale[0]) * unit());
        double lr0 = log(ratio[0]), lr1 = log(ratio[1]);
        double aspect = exp(lr0 + (lr1 - lr0) * unit());
        int w = (int)rint(sqrt(target * aspect)), h = (int)rint(sqrt(target / aspect));
        if (0 < w && w <= W && 0 < h && h <= H) {
            win[0] = (int)(unit() * (H - h + 1)), win[1] = (int)(unit() * (W - w + 1));
            win[2] = h, win[3] = w;
            return false;
        }
    }
    double in_ratio = (double)W / H;
    int w = W, h = H;
    if (in_ratio < ratio[0])
        h = (int)rint(w / ratio[0]);
    else if (in_ratio > ratio[1])
        w = (int)rint(h * ratio[1]);
    win[0] = (H - h) / 2, win[1] = (W - w) / 2, win[2] = h, win[3] = w;
    return true;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Two-sample Kolmogorov-Smirnov statistic of sorted samples a and b, both of n. */
static double ks(const double *a, const double *b, int n)
{
    int i = 0, j = 0;
    double d = 0;
    while (i < n && j < n) {
        double v = a[i] < b[j] ? a[i] : b[j];
        while (i < n && a[i] <= v)
            i++;
        while (j < n && b[j] <= v)
            j++;
        d = fmax(d, fabs((double)(i - j) / n));
    }
    return d;
}

static stoke_transform *make_rrc(int H, int W, int C, stoke_dtype dt, int oh, int ow,
                                 const float *scale, const float *ratio)
{
    stoke_op op = {.kind = STOKE_OP_RANDOM_RESIZED_CROP, .height = oh, .width = ow};
    if (scale)
        op.scale[0] = scale[0], op.scale[1] = scale[1];
    if (ratio)
        op.ratio[0] = ratio[0], op.ratio[1] = ratio[1];
    stoke_transform_opts o = {.in_shape = {3, {H, W, C}}, .in_dtype = dt, .ops = &op, .nops = 1};
    stoke_transform *t = NULL;
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_OK);
    return t;
}

/* Area fraction and log aspect of 10,000 windows, stoke's (one per sample index) against
 * the definition's: KS distance, means and the 10/50/90% quantiles. n = 10,000 gives a
 * two-sample KS critical value of 0.028 at the 0.1% level; the seeds are fixed, so the
 * outcome is too. */
static void case_distribution(void)
{
    enum { N = 10000, H = 120, W = 160 };
    const int sizes[2][2] = {{H, W}, {W, H}};
    for (int s = 0; s < 2; s++) {
        int h = sizes[s][0], w = sizes[s][1];
        stoke_transform *t = make_rrc(h, w, 3, STOKE_U8, 32, 32, NULL, NULL);
        if (!t)
            return;
        static double sa[N], sr[N], ra[N], rr[N];
        const double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
        int bad = 0, fallback = 0;
        for (int i = 0; i < N; i++) {
            stoke_op_draw p;
            stoke_transform_draw(t, 42, 3, i, &p);
            bad += p.win_h < 1 || p.win_w < 1 || p.crop_i < 0 || p.crop_j < 0 ||
                   p.crop_i + p.win_h > h || p.crop_j + p.win_w > w;
            sa[i] = (double)p.win_h * p.win_w / ((double)h * w);
            sr[i] = log((double)p.win_w / p.win_h);
            int win[4];
            fallback += ref_window(h, w, scale, ratio, win);
            ra[i] = (double)win[2] * win[3] / ((double)h * w);
            rr[i] = log((double)win[3] / win[2]);
        }
        CHECK_INT_EQ(bad, 0);
        CHECK(fallback < 5); /* (P(reject) ~ 0.2)^10: the fallback is rare here */
        double ma = 0, mr = 0, mra = 0, mrr = 0;
        for (int i = 0; i < N; i++)
            ma += sa[i], mr += sr[i], mra += ra[i], mrr += rr[i];
        CHECK_MSG(fabs(ma - mra) / N < 0.01, "mean area %g vs %g", ma / N, mra / N);
        CHECK_MSG(fabs(mr - mrr) / N < 0.01, "mean log ratio %g vs %g", mr / N, mrr / N);
        qsort(sa, N, sizeof *sa, cmp_double), qsort(ra, N, sizeof *ra, cmp_double);
        qsort(sr, N, sizeof *sr, cmp_double), qsort(rr, N, sizeof *rr, cmp_double);
        const int q[3] = {N / 10, N / 2, N * 9 / 10};
        for (int k = 0; k < 3; k++) {
            CHECK_MSG(fabs(sa[q[k]] - ra[q[k]]) < 0.02, "area quantile %d: %g vs %g", k, sa[q[k]],
                      ra[q[k]]);
            CHECK_MSG(fabs(sr[q[k]] - rr[q[k]]) < 0.02, "log-ratio quantile %d: %g vs %g", k,
                      sr[q[k]], rr[q[k]]);
        }
        double da = ks(sa, ra, N), dr = ks(sr, rr, N);
        CHECK_MSG(da < 0.028, "KS distance of the area fractions %g", da);
        CHECK_MSG(dr < 0.028, "KS distance of the log ratios %g", dr);
        fprintf(stderr, "%dx%d: area mean %.4f (definition %.4f), KS %.4f; log ratio KS %.4f\n", h,
                w, ma / N, mra / N, da, dr);
        stoke_transform_destroy(t);
    }
}

/* No try fits: the whole image, clamped to the ratio range, centred. */
static void case_fallback(void)
{
    const struct {
        int H, W;
        float scale[2];
        int win[4];
    } cases[] = {
        {10, 1000, {0.08f, 1.0f}, {0, 493, 10, 13}}, /* wider than 4/3: h kept */
        {1000, 10, {0.08f, 1.0f}, {493, 0, 13, 10}}, /* taller than 3/4: w kept */
        {50, 60, {2.0f, 3.0f}, {0, 0, 50, 60}},      /* ratio in range, area too big */
        {7, 11, {1.5f, 2.0f}, {0, 1, 7, 9}},         /* 7 * 4/3 = 9.33 -> 9 wide */
        {1, 1, {0.08f, 1.0f}, {0, 0, 1, 1}},         /* a pixel: fits or falls back, the same */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        stoke_transform *t =
            make_rrc(cases[k].H, cases[k].W, 1, STOKE_U8, 4, 4, cases[k].scale, NULL);
        if (!t)
            continue;
        int wrong = 0;
        for (int i = 0; i < 100; i++) {
            stoke_op_draw p;
            stoke_transform_draw(t, 7, 0, i, &p);
            wrong += p.crop_i != cases[k].win[0] || p.crop_j != cases[k].win[1] ||
                     p.win_h != cases[k].win[2] || p.win_w != cases[k].win[3];
            if (i == 0 && wrong)
                fprintf(stderr, "case %zu: window (%d, %d, %d, %d)\n", k, p.crop_i, p.crop_j,
                        p.win_h, p.win_w);
        }
        CHECK_MSG(wrong == 0, "fallback case %zu: %d of 100 windows differ", k, wrong);
        stoke_transform_destroy(t);
    }
}

/* Float input: the window cropped, then resized as a RESIZE op does. */
static void case_float_path(void)
{
    enum { H = 23, W = 31, C = 3, OH = 9, OW = 12 };
    static float img[H * W * C];
    for (int i = 0; i < H * W * C; i++)
        img[i] = (float)unit();
    stoke_transform *t = make_rrc(H, W, C, STOKE_F32, OH, OW, NULL, NULL);
    if (!t)
        return;
    static float scratch[1 << 16], win[H * W * C];
    int worst = 0;
    for (int i = 0; i < 20; i++) {
        stoke_op_draw p;
        stoke_transform_draw(t, 3, 1, i, &p);
        for (int y = 0; y < p.win_h; y++)
            memcpy(win + (size_t)y * p.win_w * C, img + ((size_t)(p.crop_i + y) * W + p.crop_j) * C,
                   sizeof(float) * p.win_w * C);
        stoke_op rs = {.kind = STOKE_OP_RESIZE, .height = OH, .width = OW};
        stoke_transform_opts o = {
            .in_shape = {3, {p.win_h, p.win_w, C}}, .in_dtype = STOKE_F32, .ops = &rs, .nops = 1};
        stoke_transform *r = NULL;
        CHECK_INT_EQ(stoke_transform_create(&o, &r), STOKE_OK);
        if (!r)
            break;
        float a[OH * OW * C], b[OH * OW * C];
        stoke_transform_apply(t, img, a, scratch, 3, 1, i);
        stoke_transform_apply(r, win, b, scratch, 0, 0, 0);
        worst += memcmp(a, b, sizeof a) != 0;
        stoke_transform_destroy(r);
    }
    CHECK_INT_EQ(worst, 0);
    stoke_transform_destroy(t);
}

/* Shapes: torchvision's Resize(int) truncates the longer side; CenterCrop rounds an odd
 * margin half to even. */
static void case_resize_shorter_shapes(void)
{
    stoke_op ops[2] = {{.kind = STOKE_OP_RESIZE_SHORTER, .height = 16},
                       {.kind = STOKE_OP_CROP, .height = 16, .width = 16, .center = true}};
    stoke_transform_opts o = {
        .in_shape = {3, {30, 40, 3}}, .in_dtype = STOKE_U8, .ops = ops, .nops = 1};
    stoke_transform *t = NULL;
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_OK);
    if (t) {
        stoke_shape s = stoke_transform_out_shape(t);
        CHECK_INT_EQ(s.dims[1], 16);
        CHECK_INT_EQ(s.dims[2], 21); /* 40 * 16 / 30 = 21.3 */
        stoke_transform_destroy(t);
    }
    o.nops = 2;
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_OK);
    if (t) {
        stoke_op_draw p[2];
        stoke_transform_draw(t, 0, 0, 0, p);
        CHECK_INT_EQ(p[1].crop_i, 0);
        CHECK_INT_EQ(p[1].crop_j, 2); /* round(5 / 2) = 2 in Python */
        stoke_transform_destroy(t);
    }
    stoke_op bad = {
        .kind = STOKE_OP_RANDOM_RESIZED_CROP, .height = 8, .width = 8, .scale = {0.5f, 0.2f}};
    o.ops = &bad, o.nops = 1;
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "op 0 (random_resized_crop)");
}

/* Every byte of the first `nb` batches of a loader with `workers` workers. */
static size_t run_loader(stoke_dataset *d, int workers, int nb, unsigned char *out, size_t cap,
                         const stoke_transform_opts *to)
{
    stoke_loader_opts o = {.sampler = {.batch_size = 8, .shuffle = true, .seed = 9},
                           .transform = to,
                           .workers = workers};
    stoke_loader *l = NULL;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    if (!l)
        return 0;
    size_t n = 0;
    for (int i = 0; i < nb; i++) {
        stoke_batch b;
        CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_OK);
        size_t in = (size_t)b.size * b.input_bytes;
        if (n + in + 8 > cap)
            break;
        memcpy(out + n, &b.size, 8);
        memcpy(out + n + 8, b.inputs, in);
        n += 8 + in;
    }
    stoke_loader_destroy(l);
    return n;
}

/* The windows come from (seed, epoch, index): the loader's batches are the same bytes
 * with 0, 1 and 3 workers, and each sample is what stoke_transform_apply gives. */
static void case_loader_workers(void)
{
    enum { N = 40, H = 30, W = 26, C = 3, OH = 12, OW = 10 };
    static uint8_t imgs[N * H * W * C];
    fill_u8(imgs, sizeof imgs);
    stoke_dataset_info info = {.count = N,
                               .input_shape = {3, {H, W, C}},
                               .input_dtype = STOKE_U8,
                               .input_bytes = H * W * C};
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, imgs, NULL, false, &d), STOKE_OK);
    if (!d)
        return;
    stoke_op ops[2] = {{.kind = STOKE_OP_RANDOM_RESIZED_CROP, .height = OH, .width = OW},
                       {.kind = STOKE_OP_HFLIP}};
    stoke_transform_opts to = {.ops = ops, .nops = 2};
    enum { NB = 12 }; /* 2 epochs of 5 batches and their end markers */
    size_t cap = NB * (8 + 8 * OH * OW * C * sizeof(float));
    unsigned char *r0 = malloc(cap), *r1 = malloc(cap), *r3 = malloc(cap);
    size_t n0 = run_loader(d, 0, NB, r0, cap, &to), n1 = run_loader(d, 1, NB, r1, cap, &to),
           n3 = run_loader(d, 3, NB, r3, cap, &to);
    CHECK(n0 > 0 && n0 == n1 && n0 == n3);
    CHECK(memcmp(r0, r1, n0) == 0);
    CHECK(memcmp(r0, r3, n0) == 0);
    /* The loader's samples are the transform's for (seed 9, epoch, index). */
    to.in_shape = info.input_shape, to.in_dtype = STOKE_U8;
    stoke_transform *t = NULL;
    CHECK_INT_EQ(stoke_transform_create(&to, &t), STOKE_OK);
    stoke_loader_opts o = {
        .sampler = {.batch_size = 8, .shuffle = true, .seed = 9}, .transform = &to, .workers = 2};
    stoke_loader *l = NULL;
    CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
    static float want[OH * OW * C], scratch[1 << 16];
    int differ = 0, distinct = 0;
    for (int i = 0; l && t && i < 6; i++) {
        stoke_batch b;
        CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_OK);
        for (int64_t k = 0; k < b.size; k++) {
            int64_t s = b.samples[k];
            stoke_transform_apply(t, imgs + (size_t)s * H * W * C, want, scratch, 9, b.epoch, s);
            const float *got = (const float *)b.inputs + (size_t)k * OH * OW * C;
            differ += memcmp(got, want, sizeof want) != 0;
            stoke_op_draw p[2], p1[2];
            stoke_transform_draw(t, 9, b.epoch, s, p);
            stoke_transform_draw(t, 9, b.epoch + 1, s, p1);
            distinct += p[0].crop_i != p1[0].crop_i || p[0].win_h != p1[0].win_h ||
                        p[0].crop_j != p1[0].crop_j || p[0].win_w != p1[0].win_w;
        }
    }
    CHECK_INT_EQ(differ, 0);
    CHECK(distinct > 30); /* a new window each epoch */
    stoke_loader_destroy(l);
    stoke_transform_destroy(t);
    free(r0), free(r1), free(r3);
    stoke_dataset_close(d);
}

/* ---- against Pillow ---- */

/* Pillow's crop + resize(BILINEAR) of the windows stoke draws, and Resize(24) +
 * CenterCrop(20) as torchvision does them on a PIL image: stoke's u8 path uses the same
 * filter and fixed-point arithmetic, so the values are equal (scaled by 255, exact). */
static void case_pillow(int H, int W, int C)
{
    enum { MAXPX = 64 * 64 * 3, OH = 19, OW = 23, NW = 8, RS = 24, CC = 20 };
    static uint8_t img[MAXPX];
    for (int y = 0; y < H; y++) /* smooth plus noise: both the filter's slopes and edges */
        for (int x = 0; x < W; x++)
            for (int c = 0; c < C; c++)
                img[(y * W + x) * C + c] =
                    (uint8_t)((x * 4 + y * 3 + c * 50) % 200 + (int)(unit() * 56));
    stoke_transform *t = make_rrc(H, W, C, STOKE_U8, OH, OW, NULL, NULL);
    stoke_op vo[2] = {{.kind = STOKE_OP_RESIZE_SHORTER, .height = RS},
                      {.kind = STOKE_OP_CROP, .height = CC, .width = CC, .center = true}};
    stoke_transform_opts vopt = {
        .in_shape = {3, {H, W, C}}, .in_dtype = STOKE_U8, .ops = vo, .nops = 2};
    stoke_transform *v = NULL;
    CHECK_INT_EQ(stoke_transform_create(&vopt, &v), STOKE_OK);
    if (!t || !v)
        return;
    char dir[] = "/tmp/stoke-test-rrc-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char in_path[128], out_path[128], cmd[512];
    snprintf(in_path, sizeof in_path, "%s/in.bin", dir);
    snprintf(out_path, sizeof out_path, "%s/out.bin", dir);
    int32_t wins[NW][4];
    for (int i = 0; i < NW; i++) {
        stoke_op_draw p;
        stoke_transform_draw(t, 11, 0, i, &p);
        wins[i][0] = p.crop_i, wins[i][1] = p.crop_j, wins[i][2] = p.win_h, wins[i][3] = p.win_w;
    }
    FILE *f = fopen(in_path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    const int32_t hdr[8] = {H, W, C, OH, OW, NW, RS, CC};
    fwrite(hdr, sizeof hdr, 1, f);
    fwrite(img, 1, (size_t)H * W * C, f);
    fwrite(wins, sizeof wins, 1, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/rrc_ref.py %s %s", STOKE_TEST_DATA, in_path,
             out_path);
    CHECK_INT_EQ(system(cmd), 0);
    static uint8_t ref[NW * OH * OW * 3 + CC * CC * 3];
    size_t nref = (size_t)NW * OH * OW * C + (size_t)CC * CC * C;
    f = fopen(out_path, "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fread(ref, 1, nref, f) == nref);
    fclose(f);
    unlink(in_path), unlink(out_path), rmdir(dir);
    static float out[OH * OW * 3], scratch[1 << 16];
    int maxdiff = 0;
    for (int i = 0; i < NW; i++) {
        stoke_transform_apply(t, img, out, scratch, 11, 0, i);
        /* CHW out: compare with the HWC reference */
        for (int c = 0; c < C; c++)
            for (int k = 0; k < OH * OW; k++) {
                int got = (int)lrintf(out[c * OH * OW + k] * 255.0f);
                maxdiff = abs(got - ref[(size_t)i * OH * OW * C + (size_t)k * C + c]) > maxdiff
                              ? abs(got - ref[(size_t)i * OH * OW * C + (size_t)k * C + c])
                              : maxdiff;
            }
    }
    CHECK_MSG(maxdiff == 0, "random resized crop vs Pillow (%d x %d x %d): %d levels off", H, W, C,
              maxdiff);
    stoke_transform_apply(v, img, out, scratch, 0, 0, 0);
    maxdiff = 0;
    const uint8_t *vr = ref + NW * OH * OW * C;
    for (int c = 0; c < C; c++)
        for (int k = 0; k < CC * CC; k++) {
            int d = abs((int)lrintf(out[c * CC * CC + k] * 255.0f) - vr[k * C + c]);
            maxdiff = d > maxdiff ? d : maxdiff;
        }
    CHECK_MSG(maxdiff == 0, "resize shorter + centre crop vs Pillow (%d x %d x %d): %d levels off",
              H, W, C, maxdiff);
    stoke_transform_destroy(t);
    stoke_transform_destroy(v);
}

int main(int argc, char **argv)
{
    if (check_part(argc, argv, "pillow")) {
        if (!check_have_pillow()) {
            fprintf(stderr, "skipped: /usr/bin/python3 with Pillow not found\n");
            return CHECK_SKIPPED;
        }
        case_pillow(37, 53, 3);
        case_pillow(53, 37, 1); /* gray (mode L), taller than wide */
        return CHECK_DONE();
    }
    case_distribution();
    case_fallback();
    case_float_path();
    case_resize_shorter_shapes();
    case_loader_workers();
    return CHECK_DONE();
}
