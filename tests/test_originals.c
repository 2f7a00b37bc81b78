/* test_originals.c - RandomResizedCrop and the validation transform on the original
 * images (decode.c, stoke_transform_read): the partial JPEG decode (only the rows and
 * columns the resize reads) against the whole decode, byte for byte; the windows drawn
 * on the original's size; the loader's batches the same bytes whatever the workers; a
 * truncated file caught wherever the window lies. Part "pillow": the results against
 * Pillow's crop + resize of the whole decoded image (torchvision's RandomResizedCrop and
 * Resize + CenterCrop on PIL images): equal where the decoder's scale is 1, within the
 * stated tolerance where it decodes at 1/2, 1/4 or 1/8. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "../bench/jpeg_gen.h"
#include "check.h"
#include "data/dataset_impl.h"
#include "data/decode.h"
#include "data/test_seam.h"
#include "data/transform_impl.h"
#include "stoke/data.h"

static uint64_t rs = 0x2545F4914F6CDD1DULL;

static double unit(void)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

static int below(int n) { return (int)(unit() * n); }

/* An RGB image as JPEG with the given subsampling (TJSAMP_GRAY: a gray JPEG). */
static unsigned char *make_jpeg(int w, int h, int samp, uint64_t seed, unsigned long *len)
{
    unsigned char *out = NULL;
    int ok = jg_jpeg_samp(w, h, seed, 90, samp, &out, len);
    CHECK(ok);
    return ok ? out : NULL;
}

/* ---- partial decode == whole decode ---- */

/* A window given as fractions of the original, so one spec fits any size. */
typedef struct spec {
    double fx, fy, fw, fh; /* the box: origin and size as fractions */
    int ow, oh;            /* output */
    bool crop;             /* crop then resize; else the whole resized, the box's part kept */
} spec;

static void spec_window(void *ctx, int W, int H, stoke_image_window *w)
{
    const spec *s = ctx;
    int bx = (int)(s->fx * W), by = (int)(s->fy * H);
    int bw = (int)(s->fw * W), bh = (int)(s->fh * H);
    bw = bw < 1 ? 1 : bw > W - bx ? W - bx : bw;
    bh = bh < 1 ? 1 : bh > H - by ? H - by : bh;
    memset(w, 0, sizeof *w);
    if (s->crop) {
        w->x = stoke_resize_whole(bw, s->ow);
        w->y = stoke_resize_whole(bh, s->oh);
        w->x0 = bx, w->y0 = by;
    } else { /* the whole image to a size whose part at the box's place is ow x oh */
        int vw = (int)((double)s->ow * W / bw), vh = (int)((double)s->oh * H / bh);
        vw = vw < s->ow ? s->ow : vw, vh = vh < s->oh ? s->oh : vh;
        w->x = stoke_resize_whole(W, vw);
        w->y = stoke_resize_whole(H, vh);
        w->x.off = (int)((double)bx / W * vw), w->y.off = (int)((double)by / H * vh);
        if (w->x.off > vw - s->ow)
            w->x.off = vw - s->ow;
        if (w->y.off > vh - s->oh)
            w->y.off = vh - s->oh;
        w->x.out = s->ow, w->y.out = s->oh;
    }
}

static void case_partial_exact(void)
{
    static const int sizes[][2] = {{317, 241}, {640, 480}, {123, 457}, {1000, 751}};
    static const int samps[] = {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_GRAY, TJSAMP_440};
    int compared = 0, cropped = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (size_t k = 0; k < sizeof samps / sizeof *samps; k++) {
            int W = sizes[si][0], H = sizes[si][1];
            unsigned long len = 0;
            unsigned char *jpg = make_jpeg(W, H, samps[k], 7 + si * 10 + k, &len);
            if (!jpg)
                continue;
            for (int n = 0; n < 24; n++) {
                spec s = {unit() * 0.9,   unit() * 0.9,   0.05 + unit(), 0.05 + unit(),
                          4 + below(120), 4 + below(120), n % 3 != 0};
                int c = n % 4 == 3 ? 1 : 3;
                size_t nb = (size_t)s.ow * s.oh * c;
                unsigned char *a = malloc(nb), *b = malloc(nb);
                stoke_data_test_seam()->jpeg_partial = 0;
                stoke_status sa = stoke_image_decode("whole", 0, jpg, len, c, spec_window, &s, a);
                stoke_data_test_seam()->jpeg_partial = 1;
                stoke_status sb = stoke_image_decode("part", 0, jpg, len, c, spec_window, &s, b);
                CHECK_MSG(sa == STOKE_OK && sb == STOKE_OK, "decode: %s", stoke_last_error());
                stoke_image_window w;
                spec_window(&s, W, H, &w);
                cropped += w.x.in1 - w.x.in0 < W || w.y.in1 - w.y.in0 < H || w.x.out < w.x.virt;
                CHECK_MSG(memcmp(a, b, nb) == 0,
                          "%dx%d subsampling %d, %d channels, window %d: the partial decode "
                          "differs from the whole",
                          W, H, samps[k], c, n);
                compared++;
                free(a);
                free(b);
            }
            tjFree(jpg);
        }
    CHECK(compared == 480 && cropped > 300);
}

/* ---- an image folder of JPEG originals ---- */

static char folder[64];

static void put_file(const char *name, const void *b, size_t n)
{
    char p[128];
    snprintf(p, sizeof p, "%s/c/%s", folder, name);
    FILE *f = fopen(p, "wb");
    CHECK(f && fwrite(b, 1, n, f) == n);
    if (f)
        fclose(f);
}

static const int orig[][2] = {{500, 375}, {333, 500},  {640, 427},
                              {96, 80},   {1024, 768}, {375, 500}};
enum { NORIG = sizeof orig / sizeof *orig };

static stoke_dataset *make_folder(void)
{
    snprintf(folder, sizeof folder, "/tmp/stoke-originals-XXXXXX");
    if (!mkdtemp(folder))
        return NULL;
    char p[128];
    snprintf(p, sizeof p, "%s/c", folder);
    mkdir(p, 0755);
    for (int k = 0; k < NORIG; k++) {
        unsigned long len;
        unsigned char *j = make_jpeg(orig[k][0], orig[k][1], TJSAMP_420, 100 + k, &len);
        char name[32];
        snprintf(name, sizeof name, "%02d.jpg", k);
        if (j)
            put_file(name, j, len);
        tjFree(j);
    }
    stoke_dataset_opts o = {.image_height = 64, .image_width = 64};
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_open(folder, &o, &d), STOKE_OK);
    return d;
}

static stoke_transform *make_t(int H, int W, const stoke_op *ops, int n)
{
    stoke_transform_opts o = {
        .in_shape = {3, {H, W, 3}}, .in_dtype = STOKE_U8, .ops = ops, .nops = n};
    stoke_transform *t = NULL;
    CHECK_INT_EQ(stoke_transform_create(&o, &t), STOKE_OK);
    return t;
}

/* The windows come from the original's size: a transform made for that size draws the
 * same ones, and every later op's draws follow. */
static void case_windows_on_originals(stoke_dataset *d, const stoke_op *ops)
{
    stoke_transform *t = make_t(64, 64, ops, 3);
    CHECK(t && stoke_transform_on_originals(t, d));
    if (!t)
        return;
    size_t ob = stoke_transform_out_bytes(t), sb = stoke_transform_scratch_bytes(t);
    unsigned char *win = malloc(stoke_transform_window_bytes(t));
    float *out = malloc(ob), *ref = malloc(ob), *scratch = malloc(sb);
    for (int k = 0; k < NORIG; k++) {
        int W = orig[k][0], H = orig[k][1];
        stoke_transform *big = make_t(H, W, ops, 3); /* op by op: not the fused pass */
        for (int e = 0; e < 3; e++) {
            CHECK_INT_EQ(stoke_transform_read(t, d, k, win, out, NULL, scratch, 5, e), STOKE_OK);
            /* the reference: the whole original decoded, then the transform made for its
             * size, whose window is the same (decoded at 1/1 where the window allows) */
            stoke_op_draw p[3];
            stoke_transform_draw(big, 5, e, k, p);
            CHECK(p[0].win_h >= 1 && p[0].crop_i + p[0].win_h <= H &&
                  p[0].crop_j + p[0].win_w <= W);
            unsigned char *buf;
            size_t len;
            char path[128];
            snprintf(path, sizeof path, "%s/c/%02d.jpg", folder, k);
            CHECK_INT_EQ(stoke_image_load_file(path, k, &buf, &len), STOKE_OK);
            unsigned char *full = malloc((size_t)W * H * 3);
            int size[2] = {W, H};
            CHECK_INT_EQ(
                stoke_image_decode(path, k, buf, len, 3, stoke_image_window_fit, size, full),
                STOKE_OK);
            free(buf);
            void *bscratch = malloc(stoke_transform_scratch_bytes(big));
            stoke_transform_apply(big, full, ref, bscratch, 5, e, k);
            free(bscratch);
            free(full);
            double sum = 0;
            int n = 40 * 48 * 3, maxd = 0;
            for (int q = 0; q < n; q++) {
                int dv = abs((int)lrintf(out[q] * 255) - (int)lrintf(ref[q] * 255));
                sum += dv, maxd = dv > maxd ? dv : maxd;
            }
            int denom = stoke_images_jpeg_denom(p[0].win_w, p[0].win_h, 48, 40);
            /* 1/1: the same pixels, the same crop and filter; scaled: the DCT's averages
             * instead of the filter's (docs/loader.md states the tolerance) */
            if (denom == 1)
                CHECK_MSG(maxd == 0, "original %dx%d epoch %d: %d levels off at scale 1", W, H, e,
                          maxd);
            else
                CHECK_MSG(sum / n <= 2.0 && maxd <= 48,
                          "original %dx%d epoch %d, scale 1/%d: mean %.2f, max %d levels off", W, H,
                          e, denom, sum / n, maxd);
        }
        stoke_transform_destroy(big);
    }
    free(win), free(out), free(ref), free(scratch);
    stoke_transform_destroy(t);
}

/* Every byte of the first nb batches, and each sample against stoke_transform_read. */
static void case_loader(stoke_dataset *d)
{
    stoke_op ops[3] = {{.kind = STOKE_OP_RANDOM_RESIZED_CROP, .height = 32, .width = 32},
                       {.kind = STOKE_OP_HFLIP},
                       {.kind = STOKE_OP_NORMALIZE, .mean = {0.5f, 0.4f, 0.3f}, .std = {1, 2, 3}}};
    stoke_transform_opts to = {.ops = ops, .nops = 3};
    stoke_transform *t = make_t(64, 64, ops, 3);
    if (!t)
        return;
    enum { NB = 4, BS = 4 };
    size_t ob = stoke_transform_out_bytes(t), total = (size_t)NB * BS * ob;
    unsigned char *r[2] = {calloc(1, total), calloc(1, total)};
    float *one = malloc(ob), *scratch = malloc(stoke_transform_scratch_bytes(t));
    unsigned char *win = malloc(stoke_transform_window_bytes(t));
    for (int v = 0; v < 2; v++) {
        stoke_loader_opts o = {.sampler = {.batch_size = BS, .shuffle = true, .seed = 3},
                               .transform = &to,
                               .workers = v * 2};
        stoke_loader *l = NULL;
        CHECK_INT_EQ(stoke_loader_create(d, &o, &l), STOKE_OK);
        if (!l)
            continue;
        size_t at = 0;
        for (int b = 0; b < NB;) {
            stoke_batch bt;
            CHECK_INT_EQ(stoke_loader_next(l, &bt), STOKE_OK);
            if (bt.size == 0)
                continue;
            CHECK(bt.input_bytes == ob);
            memcpy(r[v] + at, bt.host_inputs, (size_t)bt.size * ob);
            for (int64_t s = 0; v == 1 && s < bt.size; s++) {
                CHECK_INT_EQ(
                    stoke_transform_read(t, d, bt.samples[s], win, one, NULL, scratch, 3, bt.epoch),
                    STOKE_OK);
                CHECK(memcmp(one, (const char *)bt.host_inputs + s * ob, ob) == 0);
            }
            at += (size_t)bt.size * ob, b++;
        }
        stoke_loader_destroy(l);
    }
    CHECK_MSG(memcmp(r[0], r[1], total) == 0, "the batches differ between 0 and 2 workers");
    free(r[0]), free(r[1]), free(one), free(scratch), free(win);
    stoke_transform_destroy(t);
}

/* A truncated JPEG is an error naming it even when the window lies in its first rows,
 * which a partial decode reads without reaching the cut. */
static void case_truncated(stoke_dataset *d)
{
    (void)d;
    unsigned long len;
    unsigned char *j = make_jpeg(400, 300, TJSAMP_420, 77, &len);
    if (!j)
        return;
    spec top = {0, 0, 0.2, 0.1, 16, 16, true};
    unsigned char out[16 * 16 * 3];
    CHECK_INT_EQ(stoke_image_decode("t.jpg", 4, j, len, 3, spec_window, &top, out), STOKE_OK);
    CHECK(stoke_image_decode("t.jpg", 4, j, len * 2 / 3, 3, spec_window, &top, out) ==
          STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "t.jpg (sample 4): corrupt JPEG: truncated");
    tjFree(j);
}

/* ---- against Pillow ---- */

/* Pillow's results for windows drawn on the original (tests/rrc_ref.py): crop + resize,
 * and Resize(RS) + CenterCrop(CC), of the whole decoded image. */
static bool pillow_ref(const unsigned char *img, int H, int W, int OH, int OW, int NW,
                       const int32_t *wins, int RS, int CC, unsigned char *ref, size_t nref)
{
    char dir[] = "/tmp/stoke-test-orig-XXXXXX", in[96], outp[96], cmd[400];
    if (!mkdtemp(dir))
        return false;
    snprintf(in, sizeof in, "%s/in.bin", dir);
    snprintf(outp, sizeof outp, "%s/out.bin", dir);
    FILE *f = fopen(in, "wb");
    if (!f)
        return false;
    const int32_t hdr[8] = {H, W, 3, OH, OW, NW, RS, CC};
    fwrite(hdr, sizeof hdr, 1, f);
    fwrite(img, 1, (size_t)H * W * 3, f);
    fwrite(wins, sizeof(int32_t) * 4, (size_t)NW, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/rrc_ref.py %s %s", STOKE_TEST_DATA, in, outp);
    bool ok = system(cmd) == 0 && (f = fopen(outp, "rb")) != NULL;
    if (ok) {
        ok = fread(ref, 1, nref, f) == nref;
        fclose(f);
    }
    unlink(in), unlink(outp), rmdir(dir);
    return ok;
}

/* Levels between a float output (u8 / 255, CHW) and an HWC u8 reference. */
static void diff_levels(const float *got, const unsigned char *ref, int n, double *mean, int *maxd)
{
    double sum = 0;
    *maxd = 0;
    for (int c = 0; c < 3; c++)
        for (int q = 0; q < n; q++) {
            int dv = abs((int)lrintf(got[c * n + q] * 255) - ref[q * 3 + c]);
            sum += dv, *maxd = dv > *maxd ? dv : *maxd;
        }
    *mean = sum / (3.0 * n);
}

static void case_pillow(stoke_dataset *d)
{
    enum { OH = 112, OW = 128, NW = 12, RS = 200, CC = 180 };
    stoke_op rrc = {.kind = STOKE_OP_RANDOM_RESIZED_CROP, .height = OH, .width = OW};
    stoke_op ev[2] = {{.kind = STOKE_OP_RESIZE_SHORTER, .height = RS},
                      {.kind = STOKE_OP_CROP, .height = CC, .width = CC, .center = true}};
    stoke_transform *t = make_t(64, 64, &rrc, 1), *v = make_t(64, 64, ev, 2);
    if (!t || !v)
        return;
    CHECK(stoke_transform_on_originals(v, d));
    int exact = 0, scaled = 0, worst_max = 0;
    double worst_mean = 0;
    size_t wb = stoke_transform_window_bytes(v), sb = stoke_transform_scratch_bytes(v);
    unsigned char *win = malloc(wb);
    float *out = malloc((size_t)CC * CC * 3 * sizeof(float));
    void *scratch =
        malloc(sb > stoke_transform_scratch_bytes(t) ? sb : stoke_transform_scratch_bytes(t));
    for (int k = 0; k < NORIG; k++) {
        int W = orig[k][0], H = orig[k][1];
        char path[128];
        snprintf(path, sizeof path, "%s/c/%02d.jpg", folder, k);
        unsigned char *buf, *full = malloc((size_t)W * H * 3);
        size_t len;
        int size[2] = {W, H};
        CHECK_INT_EQ(stoke_image_load_file(path, k, &buf, &len), STOKE_OK);
        CHECK_INT_EQ(stoke_image_decode(path, k, buf, len, 3, stoke_image_window_fit, size, full),
                     STOKE_OK);
        free(buf);
        /* sample k's window in epoch e: what a transform made for the original's size
         * draws */
        stoke_transform *big = make_t(H, W, &rrc, 1);
        int32_t wins[NW][4];
        for (int e = 0; e < NW; e++) {
            stoke_op_draw p;
            stoke_transform_draw(big, 21, e, k, &p);
            wins[e][0] = p.crop_i, wins[e][1] = p.crop_j, wins[e][2] = p.win_h,
            wins[e][3] = p.win_w;
        }
        stoke_transform_destroy(big);
        size_t nref = (size_t)NW * OH * OW * 3 + (size_t)CC * CC * 3;
        unsigned char *ref = malloc(nref);
        bool ok = pillow_ref(full, H, W, OH, OW, NW, &wins[0][0], RS, CC, ref, nref);
        CHECK_MSG(ok, "tests/rrc_ref.py failed");
        free(full);
        for (int e = 0; ok && e < NW; e++) {
            CHECK_INT_EQ(stoke_transform_read(t, d, k, win, out, NULL, scratch, 21, e), STOKE_OK);
            double mean;
            int maxd, denom = stoke_images_jpeg_denom(wins[e][3], wins[e][2], OW, OH);
            diff_levels(out, ref + (size_t)e * OH * OW * 3, OH * OW, &mean, &maxd);
            if (denom == 1) {
                exact++;
                CHECK_MSG(maxd == 0, "%dx%d window %d,%d %dx%d: %d levels off Pillow", W, H,
                          wins[e][0], wins[e][1], wins[e][2], wins[e][3], maxd);
            } else {
                scaled++;
                worst_mean = mean > worst_mean ? mean : worst_mean;
                worst_max = maxd > worst_max ? maxd : worst_max;
                CHECK_MSG(mean <= 2.0 && maxd <= 48,
                          "%dx%d window %dx%d at 1/%d: mean %.2f, max %d levels off Pillow", W, H,
                          wins[e][2], wins[e][3], denom, mean, maxd);
            }
        }
        if (ok) {
            CHECK_INT_EQ(stoke_transform_read(v, d, k, win, out, NULL, scratch, 0, 0), STOKE_OK);
            double mean;
            int maxd, s = W < H ? W : H;
            diff_levels(out, ref + (size_t)NW * OH * OW * 3, CC * CC, &mean, &maxd);
            /* the whole image is the box: 1/1 unless the shorter side is twice RS */
            if (s < 2 * RS)
                CHECK_MSG(maxd == 0, "%dx%d resize shorter %d + centre %d: %d levels off Pillow", W,
                          H, RS, CC, maxd);
            else
                CHECK_MSG(mean <= 2.0 && maxd <= 48,
                          "%dx%d resize shorter + centre crop, scaled: mean %.2f, max %d", W, H,
                          mean, maxd);
        }
        free(ref);
    }
    CHECK_MSG(exact >= 20 && scaled >= 20, "%d windows at 1/1, %d scaled", exact, scaled);
    printf("%d windows decoded at 1/1: equal to Pillow's; %d at 1/2-1/8: worst mean %.2f, "
           "worst max %d levels\n",
           exact, scaled, worst_mean, worst_max);
    free(win), free(out), free(scratch);
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
        stoke_dataset *d = make_folder();
        if (d)
            case_pillow(d);
        stoke_dataset_close(d);
        check_rm_rf(folder);
        return CHECK_DONE();
    }
    case_partial_exact();
    stoke_dataset *d = make_folder();
    if (d) {
        /* the ops after the window: the op-by-op pass (jitter), and the fused one */
        const stoke_op jit[3] = {{.kind = STOKE_OP_RANDOM_RESIZED_CROP, .height = 40, .width = 48},
                                 {.kind = STOKE_OP_HFLIP},
                                 {.kind = STOKE_OP_COLOR_JITTER, .brightness = 0.4f, .hue = 0.1f}};
        const stoke_op fus[3] = {{.kind = STOKE_OP_RANDOM_RESIZED_CROP, .height = 40, .width = 48},
                                 {.kind = STOKE_OP_HFLIP},
                                 {.kind = STOKE_OP_NORMALIZE, .std = {1, 1, 1}}};
        case_windows_on_originals(d, jit);
        case_windows_on_originals(d, fus);
        case_loader(d);
        case_truncated(d);
    }
    stoke_dataset_close(d);
    check_rm_rf(folder);
    return CHECK_DONE();
}
