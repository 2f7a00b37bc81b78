/* test_transform.c - each transform against a straightforward scalar reference written
 * here from torchvision's definitions, the fused pass against the general one and its
 * scalar twin, the f16/bf16 rounding, and (where Debian's python3-torch is installed)
 * torch's own pad/crop/flip/normalize, bilinear resize and half/bfloat16 casts. */
#include <stdint.h>
#include <unistd.h>

#include "check.h"
#include "core/precision.h"
#include "data/transform_impl.h"
#include "stoke/data.h"

static uint64_t rng_state = 12345;

static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

static void fill_u8(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

/* Reference: pixel (y, x, c) of a u8 image of layout hwc, as a float in [0, 1]. */
static float px(const uint8_t *img, int H, int W, int C, bool hwc, int y, int x, int c)
{
    size_t i = hwc ? ((size_t)y * W + x) * C + c : ((size_t)c * H + y) * W + x;
    return img[i] / 255.0f;
}

/* Reference for pad + crop + flip + normalize, written as the definition reads. */
static void ref_crop_flip_norm(const uint8_t *img, int H, int W, int C, bool hwc, int pad, int oh,
                               int ow, int ci, int cj, bool flip, const float *mean,
                               const float *std, bool out_hwc, float *out)
{
    for (int c = 0; c < C; c++)
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++) {
                int xx = flip ? ow - 1 - x : x;
                int sy = y + ci - pad, sx = xx + cj - pad;
                float v = (sy >= 0 && sy < H && sx >= 0 && sx < W)
                              ? px(img, H, W, C, hwc, sy, sx, c)
                              : 0.0f;
                v = (v - mean[c]) / std[c];
                size_t o = out_hwc ? ((size_t)y * ow + x) * C + c : ((size_t)c * oh + y) * ow + x;
                out[o] = v;
            }
}

static void case_fused_crop_flip_normalize(void)
{
    const int shapes[][4] = {{28, 28, 1, 1}, {32, 32, 3, 1}, {32, 32, 3, 0}, {17, 9, 4, 1}};
    for (int k = 0; k < 4; k++) {
        int H = shapes[k][0], W = shapes[k][1], C = shapes[k][2];
        bool hwc = shapes[k][3];
        uint8_t img[32 * 32 * 4];
        fill_u8(img, sizeof img);
        stoke_op ops[3] = {
            {.kind = STOKE_OP_CROP, .height = H, .width = W - 1, .pad = 4},
            {.kind = STOKE_OP_HFLIP},
            {.kind = STOKE_OP_NORMALIZE,
             .mean = {0.5f, 0.4f, 0.3f, 0.2f},
             .std = {0.25f, 0.3f, 0.2f, 0.5f}},
        };
        for (int out_hwc = 0; out_hwc < 2; out_hwc++) {
            stoke_transform_opts o = {.in_dtype = STOKE_U8,
                                      .ops = ops,
                                      .nops = 3,
                                      .out_layout = out_hwc ? STOKE_LAYOUT_HWC : STOKE_LAYOUT_CHW};
            o.in_shape.ndim = C == 1 && k == 0 ? 2 : 3;
            if (o.in_shape.ndim == 2) {
                o.in_shape.dims[0] = H, o.in_shape.dims[1] = W;
            } else if (hwc) {
                o.in_shape.dims[0] = H, o.in_shape.dims[1] = W, o.in_shape.dims[2] = C;
            } else {
                o.in_shape.dims[0] = C, o.in_shape.dims[1] = H, o.in_shape.dims[2] = W;
            }
            stoke_transform *fast = NULL, *slow = NULL;
            stoke_transform_set_isa(1);
            CHECK_INT_EQ(stoke_transform_create(&o, &fast), STOKE_OK);
            stoke_transform_set_isa(0);
            CHECK_INT_EQ(stoke_transform_create(&o, &slow), STOKE_OK);
            stoke_transform_set_isa(-1);
            if (!fast || !slow)
                return;
            CHECK_INT_EQ(stoke_transform_scratch_bytes(fast), 0); /* the fused path */
            stoke_shape os = stoke_transform_out_shape(fast);
            CHECK_INT_EQ(os.dims[out_hwc ? 2 : 0], C);
            size_t n = (size_t)C * H * (W - 1);
            float out[32 * 32 * 4], out2[32 * 32 * 4], ref[32 * 32 * 4];
            int flips = 0, corners = 0;
            for (int64_t i = 0; i < 60; i++) {
                stoke_transform_apply(fast, img, out, NULL, 7, 3, i);
                stoke_transform_apply(slow, img, out2, NULL, 7, 3, i);
                CHECK(memcmp(out, out2, n * sizeof(float)) == 0); /* AVX2 == scalar */
                stoke_op_draw p[3];
                stoke_transform_draw(fast, 7, 3, i, p);
                CHECK(p[0].crop_i >= 0 && p[0].crop_i <= 8 && p[0].crop_j >= 0 && p[0].crop_j <= 9);
                flips += p[1].flip;
                corners += p[0].crop_i == 0 || p[0].crop_i == 8;
                ref_crop_flip_norm(img, H, W, C, hwc, 4, H, W - 1, p[0].crop_i, p[0].crop_j,
                                   p[1].flip, ops[2].mean, ops[2].std, out_hwc, ref);
                double maxerr = 0;
                for (size_t j = 0; j < n; j++)
                    maxerr = fmax(maxerr, fabs(out[j] - ref[j]));
                CHECK_MSG(maxerr < 2e-6, "shape %d sample %d: max error %g", k, (int)i, maxerr);
                /* The stream depends on (seed, epoch, index) only. */
                stoke_transform_apply(fast, img, out2, NULL, 7, 3, i);
                CHECK(memcmp(out, out2, n * sizeof(float)) == 0);
            }
            CHECK_MSG(flips > 10 && flips < 50, "%d flips of 60", flips);
            CHECK(corners > 0);
            stoke_transform_destroy(fast);
            stoke_transform_destroy(slow);
        }
    }
}

/* The general path (f32 input) must agree with the fused one (u8 input). */
static void case_general_matches_fused(void)
{
    uint8_t img[28 * 28];
    float imgf[28 * 28];
    fill_u8(img, sizeof img);
    for (int i = 0; i < 28 * 28; i++)
        imgf[i] = img[i] / 255.0f;
    stoke_op ops[3] = {{.kind = STOKE_OP_CROP, .height = 28, .width = 28, .pad = 2},
                       {.kind = STOKE_OP_HFLIP},
                       {.kind = STOKE_OP_NORMALIZE, .mean = {0.2860f}, .std = {0.3530f}}};
    stoke_transform_opts o = {
        .in_shape = {2, {28, 28}}, .in_dtype = STOKE_U8, .ops = ops, .nops = 3};
    stoke_transform *a = NULL, *b = NULL;
    CHECK_INT_EQ(stoke_transform_create(&o, &a), STOKE_OK);
    o.in_dtype = STOKE_F32;
    CHECK_INT_EQ(stoke_transform_create(&o, &b), STOKE_OK);
    if (!a || !b)
        return;
    CHECK(stoke_transform_scratch_bytes(b) > 0);
    float *scratch = malloc(stoke_transform_scratch_bytes(b));
    float o1[784], o2[784];
    for (int64_t i = 0; i < 20; i++) {
        stoke_transform_apply(a, img, o1, NULL, 1, 0, i);
        stoke_transform_apply(b, imgf, o2, scratch, 1, 0, i);
        double maxerr = 0;
        for (int j = 0; j < 784; j++)
            maxerr = fmax(maxerr, fabs(o1[j] - o2[j]));
        CHECK_MSG(maxerr < 2e-6, "sample %d: %g", (int)i, maxerr);
    }
    free(scratch);
    stoke_transform_destroy(a);
    stoke_transform_destroy(b);
}

/* ---- color jitter, from torchvision's functional_tensor definitions ---- */

static double clampd(double v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

static void ref_jitter(double *img, int npx, const stoke_op_draw *p, const stoke_op *op)
{
    for (int k = 0; k < 4; k++) {
        int fn = p->order[k];
        double f = p->factor[fn];
        if (fn == 0 && op->brightness > 0) {
            for (int i = 0; i < npx * 3; i++)
                img[i] = clampd(img[i] * f);
        } else if (fn == 1 && op->contrast > 0) {
            double m = 0;
            for (int i = 0; i < npx; i++)
                m += 0.299 * img[3 * i] + 0.587 * img[3 * i + 1] + 0.114 * img[3 * i + 2];
            m /= npx;
            for (int i = 0; i < npx * 3; i++)
                img[i] = clampd(f * img[i] + (1 - f) * m);
        } else if (fn == 2 && op->saturation > 0) {
            for (int i = 0; i < npx; i++) {
                double g = 0.299 * img[3 * i] + 0.587 * img[3 * i + 1] + 0.114 * img[3 * i + 2];
                for (int c = 0; c < 3; c++)
                    img[3 * i + c] = clampd(f * img[3 * i + c] + (1 - f) * g);
            }
        } else if (fn == 3 && op->hue > 0) {
            for (int i = 0; i < npx; i++) {
                double r = img[3 * i], g = img[3 * i + 1], b = img[3 * i + 2];
                double mx = fmax(r, fmax(g, b)), mn = fmin(r, fmin(g, b)), h = 0, s, v = mx;
                s = mx == mn ? 0 : (mx - mn) / mx;
                if (mx != mn) {
                    double d = mx - mn;
                    if (mx == r)
                        h = (g - b) / d;
                    else if (mx == g)
                        h = 2 + (b - r) / d;
                    else
                        h = 4 + (r - g) / d;
                    h = fmod(h / 6 + 1, 1);
                }
                h = h + f;
                h -= floor(h);
                int sector = (int)floor(h * 6) % 6;
                double fr = h * 6 - floor(h * 6);
                double pp = v * (1 - s), q = v * (1 - s * fr), t = v * (1 - s * (1 - fr));
                double rgb[6][3] = {{v, t, pp}, {q, v, pp}, {pp, v, t},
                                    {pp, q, v}, {t, pp, v}, {v, pp, q}};
                for (int c = 0; c < 3; c++)
                    img[3 * i + c] = rgb[sector][c];
            }
        }
    }
}

static void case_color_jitter(void)
{
    enum { H = 9, W = 7 };
    uint8_t img[H * W * 3];
    fill_u8(img, sizeof img);
    img[0] = img[1] = img[2] = 200; /* a gray pixel: hue undefined, saturation 0 */
    stoke_op ops[1] = {{.kind = STOKE_OP_COLOR_JITTER,
                        .brightness = 0.4f,
                        .contrast = 0.4f,
                        .saturation = 0.4f,
                        .hue = 0.1f,
                        .random_order = true}};
    stoke_transform_opts o = {.in_shape = {3, {H, W, 3}},
                              .in_dtype = STOKE_U8,
                              .ops = ops,
                              .nops = 1,
                              .out_layout = STOKE_LAYOUT_HWC};
    stoke_transform *t = NULL;
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_OK);
    if (!t)
        return;
    void *scratch = malloc(stoke_transform_scratch_bytes(t));
    int orders_seen = 0;
    int first_fn[4] = {0};
    for (int64_t i = 0; i < 40; i++) {
        float out[H * W * 3];
        double ref[H * W * 3];
        stoke_transform_apply(t, img, out, scratch, 99, 1, i);
        stoke_op_draw p;
        stoke_transform_draw(t, 99, 1, i, &p);
        CHECK(p.factor[0] >= 0.6f && p.factor[0] <= 1.4f);
        CHECK(p.factor[3] >= -0.1f && p.factor[3] <= 0.1f);
        first_fn[p.order[0]]++;
        for (int j = 0; j < H * W * 3; j++)
            ref[j] = img[j] / 255.0;
        ref_jitter(ref, H * W, &p, &ops[0]);
        double maxerr = 0;
        for (int j = 0; j < H * W * 3; j++)
            maxerr = fmax(maxerr, fabs(out[j] - ref[j]));
        CHECK_MSG(maxerr < 1e-4, "sample %d: max error %g", (int)i, maxerr);
    }
    for (int k = 0; k < 4; k++)
        orders_seen += first_fn[k] > 0;
    CHECK_INT_EQ(orders_seen, 4); /* random_order draws every op first sometimes */
    free(scratch);
    stoke_transform_destroy(t);
}

/* ---- conversions ---- */

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void case_half_and_bfloat(void)
{
    enum { N = 4096 };
    float v[N];
    for (int i = 0; i < N; i++)
        v[i] = bits_f(rnd() ^ ((uint32_t)rnd() << 16));
    const float special[] = {0.0f,
                             -0.0f,
                             1.0f,
                             65504.0f,
                             65519.0f,
                             65520.0f,
                             1e-8f,
                             5.96e-8f,
                             2.98e-8f,
                             2.99e-8f,
                             6.1e-5f,
                             INFINITY,
                             -INFINITY,
                             NAN,
                             1.0f + 0x1.0p-11f,
                             1.0f + 0x1.8p-11f,
                             1.0f + 0x1.0p-8f,
                             1.0f + 0x1.8p-8f,
                             3.0e38f};
    memcpy(v, special, sizeof special);
    uint16_t a[N], b[N];
    stoke_f32_to_f16(v, a, N);                   /* the dispatched path (F16C here) */
    cpu_f32_to_f16_isa(CPU_ISA_SCALAR, v, b, N); /* the exact scalar path */
    int mismatches = 0;
    for (int i = 0; i < N; i++) {
        bool nan_a = (a[i] & 0x7c00) == 0x7c00 && (a[i] & 0x3ff);
        bool nan_b = (b[i] & 0x7c00) == 0x7c00 && (b[i] & 0x3ff);
        if (nan_a != nan_b || (!nan_a && a[i] != b[i]))
            mismatches++;
    }
    CHECK_INT_EQ(mismatches, 0); /* F16C and the scalar rounding agree bit for bit */
    CHECK_INT_EQ(b[2], 0x3c00);
    CHECK_INT_EQ(b[3], 0x7bff);
    CHECK_INT_EQ(b[4], 0x7bff);  /* 65519 rounds down */
    CHECK_INT_EQ(b[5], 0x7c00);  /* 65520 rounds to infinity */
    CHECK_INT_EQ(b[8], 0x0000);  /* 2^-25 ties to even: zero */
    CHECK_INT_EQ(b[14], 0x3c00); /* 1 + 2^-11 ties to even: 1 */
    CHECK_INT_EQ(b[15], 0x3c01); /* above the tie: up */
    CHECK_NEAR(stoke_f16_to_f32(0x0001), 0x1.0p-24, 0);
    CHECK_NEAR(stoke_f16_to_f32(0xc000), -2.0, 0);
    uint16_t bf[N];
    stoke_f32_to_bf16(v, bf, N);
    CHECK_INT_EQ(bf[2], 0x3f80);
    CHECK_INT_EQ(bf[16], 0x3f80); /* 1 + 2^-8: tie to even */
    CHECK_INT_EQ(bf[17], 0x3f81);
    CHECK((bf[13] & 0x7f80) == 0x7f80 && (bf[13] & 0x7f));
    /* Reference by long arithmetic on the random values: nearest, ties to even. */
    int bad = 0;
    for (int i = 20; i < N; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        if ((u & 0x7fffffff) > 0x7f800000)
            continue;
        uint32_t lo = u & 0xffff0000u, rem = u & 0xffffu;
        uint32_t r = rem > 0x8000 || (rem == 0x8000 && (lo >> 16) & 1) ? lo + 0x10000 : lo;
        bad += bf[i] != (uint16_t)(r >> 16);
    }
    CHECK_INT_EQ(bad, 0);
}

/* ---- against torch (Debian's python3-torch), where installed ---- */

static void case_torch(void)
{
    enum { H = 13, W = 11, C = 3, RH = 20, RW = 7 };
    uint8_t img[H * W * C];
    fill_u8(img, sizeof img);
    char dir[] = "/tmp/stoke-test-transform-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char in_path[128], out_path[128], cmd[512];
    snprintf(in_path, sizeof in_path, "%s/in.bin", dir);
    snprintf(out_path, sizeof out_path, "%s/out.bin", dir);
    /* Parameters for the script: a crop (pad 3, 10 x 9 at (2, 5), flipped), normalize,
     * a resize to RH x RW, and the values to cast to half and bfloat16. */
    float vals[256];
    for (int i = 0; i < 256; i++)
        vals[i] = (float)(rnd() % 200000) / 1000.0f - 100.0f + (float)rnd() / 4294967296.0f;
    FILE *f = fopen(in_path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fwrite(img, 1, sizeof img, f);
    fwrite(vals, sizeof(float), 256, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/transform_ref.py %s %s", STOKE_TEST_DATA,
             in_path, out_path);
    CHECK_INT_EQ(system(cmd), 0);
    enum { NCROP = C * 10 * 9, NRES = C * RH * RW };
    float tcrop[NCROP], tres[NRES];
    uint16_t th[256], tb[256];
    f = fopen(out_path, "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fread(tcrop, sizeof(float), NCROP, f) == NCROP);
    CHECK(fread(tres, sizeof(float), NRES, f) == NRES);
    CHECK(fread(th, 2, 256, f) == 256);
    CHECK(fread(tb, 2, 256, f) == 256);
    fclose(f);
    unlink(in_path);
    unlink(out_path);
    rmdir(dir);

    /* stoke's crop at the same offsets: find the sample whose draw is (2, 5, flip). */
    stoke_op ops[3] = {{.kind = STOKE_OP_CROP, .height = 10, .width = 9, .pad = 3},
                       {.kind = STOKE_OP_HFLIP},
                       {.kind = STOKE_OP_NORMALIZE,
                        .mean = {0.485f, 0.456f, 0.406f},
                        .std = {0.229f, 0.224f, 0.225f}}};
    stoke_transform_opts o = {
        .in_shape = {3, {H, W, C}}, .in_dtype = STOKE_U8, .ops = ops, .nops = 3};
    stoke_transform *t = NULL;
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_OK);
    int64_t found = -1;
    for (int64_t i = 0; t && i < 10000 && found < 0; i++) {
        stoke_op_draw p[3];
        stoke_transform_draw(t, 5, 0, i, p);
        if (p[0].crop_i == 2 && p[0].crop_j == 5 && p[1].flip)
            found = i;
    }
    CHECK(found >= 0);
    if (found >= 0) {
        float out[NCROP];
        stoke_transform_apply(t, img, out, NULL, 5, 0, found);
        double maxerr = 0;
        for (int j = 0; j < NCROP; j++)
            maxerr = fmax(maxerr, fabs(out[j] - tcrop[j]));
        CHECK_MSG(maxerr < 2e-6, "crop/flip/normalize vs torch: %g", maxerr);
    }
    stoke_transform_destroy(t);

    stoke_op rs[1] = {{.kind = STOKE_OP_RESIZE, .height = RH, .width = RW}};
    stoke_transform_opts ro = {
        .in_shape = {3, {H, W, C}}, .in_dtype = STOKE_U8, .ops = rs, .nops = 1};
    CHECK_INT_EQ(stoke_transform_create(&ro, &t), STOKE_OK);
    if (t) {
        float out[NRES];
        stoke_transform_apply(t, img, out, NULL, 0, 0, 0);
        double maxerr = 0;
        for (int j = 0; j < NRES; j++)
            maxerr = fmax(maxerr, fabs(out[j] - tres[j]));
        CHECK_MSG(maxerr < 1e-5, "bilinear resize vs torch: %g", maxerr);
        stoke_transform_destroy(t);
    }
    uint16_t h[256], b[256];
    stoke_f32_to_f16(vals, h, 256);
    stoke_f32_to_bf16(vals, b, 256);
    CHECK(memcmp(h, th, sizeof h) == 0);
    CHECK(memcmp(b, tb, sizeof b) == 0);
}

static void case_bad_options(void)
{
    stoke_transform *t = (stoke_transform *)1;
    stoke_op crop = {.kind = STOKE_OP_CROP, .height = 40, .width = 8, .pad = 2};
    stoke_transform_opts o = {
        .in_shape = {2, {28, 28}}, .in_dtype = STOKE_U8, .ops = &crop, .nops = 1};
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_ERR_ARG);
    CHECK(t == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "op 0 (crop)");
    o.in_shape = (stoke_shape){3, {5, 6, 7}};
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "in_layout");
    o.in_shape = (stoke_shape){2, {28, 28}};
    o.in_dtype = STOKE_I16;
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_ERR_ARG);
    stoke_op norm = {.kind = STOKE_OP_NORMALIZE, .mean = {0.5f}};
    o.in_dtype = STOKE_U8, o.ops = &norm;
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "std 0");
}

static void case_out_dtypes(void)
{
    /* bf16 and f16 outputs are the f32 output rounded. */
    uint8_t img[6 * 5 * 3];
    fill_u8(img, sizeof img);
    stoke_op ops[2] = {
        {.kind = STOKE_OP_HFLIP, .p = 1.0f},
        {.kind = STOKE_OP_NORMALIZE, .mean = {0.1f, 0.2f, 0.3f}, .std = {0.3f, 0.3f, 0.3f}}};
    stoke_transform_opts o = {
        .in_shape = {3, {3, 6, 5}}, .in_dtype = STOKE_U8, .ops = ops, .nops = 2};
    stoke_transform *t32 = NULL, *t16 = NULL, *tb = NULL;
    CHECK_INT_EQ(stoke_transform_create(&o, &t32), STOKE_OK);
    o.out_dtype = STOKE_F16;
    CHECK_INT_EQ(stoke_transform_create(&o, &t16), STOKE_OK);
    o.out_dtype = STOKE_BF16;
    CHECK_INT_EQ(stoke_transform_create(&o, &tb), STOKE_OK);
    if (!t32 || !t16 || !tb)
        return;
    CHECK_INT_EQ(stoke_transform_out_bytes(t16), 90 * 2);
    float f[90], scratch[1024];
    uint16_t h[90], b[90], hr[90], br[90];
    stoke_transform_apply(t32, img, f, NULL, 0, 0, 0);
    stoke_transform_apply(t16, img, h, scratch, 0, 0, 0);
    stoke_transform_apply(tb, img, b, scratch, 0, 0, 0);
    stoke_f32_to_f16(f, hr, 90);
    stoke_f32_to_bf16(f, br, 90);
    /* The fused f32 path folds /255 into the normalization: at most one rounding of
     * difference before the cast. */
    int off = 0;
    for (int i = 0; i < 90; i++)
        off += abs((int)h[i] - (int)hr[i]) > 1 || abs((int)b[i] - (int)br[i]) > 1;
    CHECK_INT_EQ(off, 0);
    /* p = 1: always flipped; CHW input (3, 6, 5) is read as such. */
    float ref = (img[0 * 30 + 0 * 5 + 4] / 255.0f - 0.1f) / 0.3f;
    CHECK_NEAR(f[0], ref, 1e-5);
    stoke_transform_destroy(t32);
    stoke_transform_destroy(t16);
    stoke_transform_destroy(tb);
    /* uint8 output: a flip and a crop give the input's own bytes, in HWC or CHW; a
     * normalize is refused; so is out_u8 with another dtype. */
    stoke_op u8ops[2] = {{.kind = STOKE_OP_CROP, .height = 4, .width = 3, .pad = 1},
                         {.kind = STOKE_OP_HFLIP, .p = 1.0f}};
    stoke_transform_opts uo = {.in_shape = {3, {3, 6, 5}},
                               .in_dtype = STOKE_U8,
                               .ops = u8ops,
                               .nops = 2,
                               .out_u8 = true,
                               .out_layout = STOKE_LAYOUT_HWC};
    stoke_transform *tu = NULL;
    CHECK_INT_EQ(stoke_transform_create(&uo, &tu), STOKE_OK);
    if (tu) {
        CHECK_INT_EQ(stoke_transform_out_dtype(tu), STOKE_U8);
        CHECK_INT_EQ(stoke_transform_out_bytes(tu), 4 * 3 * 3);
        uint8_t got[36];
        stoke_op_draw p[2];
        stoke_transform_apply(tu, img, got, scratch, 4, 0, 2);
        stoke_transform_draw(tu, 4, 0, 2, p);
        int bad = 0;
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 3; x++)
                for (int c = 0; c < 3; c++) {
                    int sy = y + p[0].crop_i - 1, sx = (2 - x) + p[0].crop_j - 1;
                    int v = sy < 0 || sy >= 6 || sx < 0 || sx >= 5 ? 0 : img[c * 30 + sy * 5 + sx];
                    bad += got[(y * 3 + x) * 3 + c] != v;
                }
        CHECK_INT_EQ(bad, 0);
        stoke_transform_destroy(tu);
    }
    uo.ops = ops, uo.nops = 2, tu = NULL;
    CHECK_INT_EQ(stoke_transform_create(&uo, &tu), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "(normalize): uint8 output");
    uo.ops = u8ops, uo.out_dtype = STOKE_F16;
    CHECK_INT_EQ(stoke_transform_create(&uo, &tu), STOKE_ERR_ARG);
    CHECK(tu == NULL);
}

/* The tuner's cheap_transform (stoke_transform_one_pass): none, normalize alone, or
 * u8 through crop, flip and normalize (the fused pass); resampling and jitter are not,
 * and neither is a crop on f32 samples. */
static void case_one_pass(void)
{
    stoke_op crop = {.kind = STOKE_OP_CROP, .height = 8, .width = 8, .pad = 2};
    stoke_op flip = {.kind = STOKE_OP_HFLIP}, norm = {.kind = STOKE_OP_NORMALIZE};
    stoke_op rrc = {.kind = STOKE_OP_RANDOM_RESIZED_CROP, .height = 8, .width = 8};
    stoke_op jit = {.kind = STOKE_OP_COLOR_JITTER, .brightness = 0.4f};
    stoke_op fused[] = {crop, flip, norm}, resample[] = {rrc, flip, norm}, jitter[] = {crop, jit};
    stoke_transform_opts o = {.in_dtype = STOKE_U8, .ops = fused, .nops = 3};
    CHECK(stoke_transform_one_pass(NULL));
    CHECK(stoke_transform_one_pass(&o));
    o.in_dtype = STOKE_F32;
    CHECK(!stoke_transform_one_pass(&o));
    o.ops = &norm;
    o.nops = 1;
    CHECK(stoke_transform_one_pass(&o)); /* normalize alone, any dtype */
    o.in_dtype = STOKE_U8;
    o.ops = resample;
    o.nops = 3;
    CHECK(!stoke_transform_one_pass(&o));
    o.ops = jitter;
    o.nops = 2;
    CHECK(!stoke_transform_one_pass(&o));
}

int main(int argc, char **argv)
{
    CHECK_TORCH_PART(argc, argv, case_torch);
    case_fused_crop_flip_normalize();
    case_one_pass();
    case_general_matches_fused();
    case_color_jitter();
    case_half_and_bfloat();
    case_out_dtypes();
    case_bad_options();
    return CHECK_DONE();
}
