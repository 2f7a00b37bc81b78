/* test_data_hdf5_images.c - HDF5 files written by h5py and image folders written by Pillow
 * (tests/data/make_hdf5_images.py), read through stoke_dataset_open and compared with
 * what h5py and Pillow read back; corrupt inputs; many threads reading at once. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "data/dataset_impl.h"
#include "data/test_seam.h"
#include "stoke/data.h"

static const char *fx; /* the fixture directory (argv[1]) */

/* Image folders are read at the size the generator wrote them (its H, W). */
#define IMG_H 10
#define IMG_W 12
/* Pillow's decode of a JPEG and TurboJPEG's may differ by rounding in the IDCT and
 * upsampling: the tolerance stated in docs/formats.md. */
#define JPEG_TOL 2

static char *fxpath(char *buf, size_t size, const char *rel)
{
    snprintf(buf, size, "%s/%s", fx, rel);
    return buf;
}

/* A whole file; aborts the test (not a check) when a fixture is missing. */
static unsigned char *load(const char *rel, size_t *len)
{
    char p[4096];
    FILE *f = fopen(fxpath(p, sizeof p, rel), "rb");
    if (!f) {
        fprintf(stderr, "fixture %s: %s\n", p, strerror(errno));
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "fixture %s: short read\n", p);
        exit(1);
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static stoke_dataset *open_ok(const char *rel, const stoke_dataset_opts *o)
{
    char p[4096];
    stoke_dataset *d = NULL;
    stoke_status s = stoke_dataset_open(fxpath(p, sizeof p, rel), o, &d);
    CHECK_MSG(s == STOKE_OK && d, "%s: %s", rel, stoke_last_error());
    return d;
}

/* Opening must fail with `want`, and the message must name the file and `needle`. */
static void open_fails(const char *rel, const stoke_dataset_opts *o, stoke_status want,
                       const char *needle)
{
    char p[4096];
    stoke_dataset *d = (stoke_dataset *)1;
    stoke_status s = stoke_dataset_open(fxpath(p, sizeof p, rel), o, &d);
    CHECK_MSG(s == want, "%s: got %s (%s), want %s", rel, stoke_status_name(s), stoke_last_error(),
              stoke_status_name(want));
    CHECK(d == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), p);
    CHECK_STR_CONTAINS(stoke_last_error(), needle);
    if (s == STOKE_OK)
        stoke_dataset_close(d);
}

/* Every sample's input (and target) equals the raw dumps, byte for byte; read forwards
 * then backwards (so the HDF5 block cache is missed and hit both ways). */
static void check_samples(stoke_dataset *d, const char *in_raw, const char *tg_raw)
{
    const stoke_dataset_info *info = stoke_dataset_get_info(d);
    size_t nin, ntg = 0;
    unsigned char *in = load(in_raw, &nin), *tg = tg_raw ? load(tg_raw, &ntg) : NULL;
    CHECK_INT_EQ(nin, (size_t)info->count * info->input_bytes);
    if (tg)
        CHECK_INT_EQ(ntg, (size_t)info->count * info->target_bytes);
    unsigned char *a = malloc(info->input_bytes), *b = malloc(info->target_bytes + 1);
    int bad = 0;
    for (int pass = 0; pass < 2 && nin == (size_t)info->count * info->input_bytes; pass++) {
        for (int64_t k = 0; k < info->count; k++) {
            int64_t i = pass ? info->count - 1 - k : k;
            stoke_status s = stoke_dataset_read(d, i, a, tg ? b : NULL);
            CHECK_MSG(s == STOKE_OK, "%s sample %lld: %s", in_raw, (long long)i,
                      stoke_last_error());
            if (memcmp(a, in + (size_t)i * info->input_bytes, info->input_bytes) != 0)
                bad++;
            if (tg && ntg == (size_t)info->count * info->target_bytes &&
                memcmp(b, tg + (size_t)i * info->target_bytes, info->target_bytes) != 0)
                bad++;
        }
    }
    CHECK_MSG(bad == 0, "%s: %d samples differ from h5py's values", in_raw, bad);
    free(a);
    free(b);
    free(in);
    free(tg);
}

static int64_t max_label_i64(const char *rel, int64_t n)
{
    size_t len;
    int64_t *y = (int64_t *)load(rel, &len), max = -1;
    for (int64_t i = 0; i < n && (size_t)(i + 1) * 8 <= len; i++)
        max = y[i] > max ? y[i] : max;
    free(y);
    return max;
}

/* ---- HDF5 ---------------------------------------------------------------------- */

static void test_hdf5_contiguous(void)
{
    stoke_dataset *d = open_ok("h5/contig.h5", NULL);
    if (!d)
        return;
    const stoke_dataset_info *info = stoke_dataset_get_info(d);
    CHECK_STR_EQ(info->format, "hdf5");
    CHECK_INT_EQ(info->count, 37);
    CHECK_INT_EQ(info->input_shape.ndim, 2);
    CHECK_INT_EQ(info->input_shape.dims[0], 5);
    CHECK_INT_EQ(info->input_shape.dims[1], 4);
    CHECK_INT_EQ(info->input_dtype, STOKE_U8);
    CHECK_INT_EQ(info->input_bytes, 20);
    CHECK_INT_EQ(info->target_kind, STOKE_TARGET_CLASS);
    CHECK_INT_EQ(info->target_dtype, STOKE_I64);
    CHECK_INT_EQ(info->target_shape.ndim, 0);
    CHECK_INT_EQ(info->target_bytes, 8);
    CHECK_INT_EQ(info->num_classes, max_label_i64("h5/contig.h5.y.raw", 37) + 1);
    check_samples(d, "h5/contig.h5.x.raw", "h5/contig.h5.y.raw");

    /* Class balance against the labels h5py read. */
    int64_t counts[64] = {0}, want[64] = {0};
    size_t len;
    int64_t *y = (int64_t *)load("h5/contig.h5.y.raw", &len);
    for (int i = 0; i < 37; i++)
        want[y[i]]++;
    free(y);
    CHECK_INT_EQ(stoke_dataset_class_counts(d, counts), STOKE_OK);
    for (int c = 0; c < info->num_classes && c < 64; c++)
        CHECK_INT_EQ(counts[c], want[c]);

    unsigned char buf[20];
    CHECK_INT_EQ(stoke_dataset_read(d, 37, buf, NULL), STOKE_ERR_ARG);
    CHECK_INT_EQ(stoke_dataset_read(d, -1, buf, NULL), STOKE_ERR_ARG);
    stoke_dataset_close(d);
}

static void test_hdf5_chunked_named(void)
{
    /* Names stoke does not guess: the error lists what the file has. */
    open_fails("h5/chunked.h5", NULL, STOKE_ERR_NOTFOUND, "'images' (50, 8, 8, 3)");
    CHECK_STR_CONTAINS(stoke_last_error(), "'labels' (50)");
    CHECK_STR_CONTAINS(stoke_last_error(), "'extra/meta' (3)");
    CHECK_STR_CONTAINS(stoke_last_error(), "'features'");

    stoke_dataset_opts o = {.input_name = "images", .target_name = "labels"};
    stoke_dataset *d = open_ok("h5/chunked.h5", &o);
    if (!d)
        return;
    const stoke_dataset_info *info = stoke_dataset_get_info(d);
    CHECK_INT_EQ(info->count, 50);
    CHECK_INT_EQ(info->input_shape.ndim, 3);
    CHECK_INT_EQ(info->input_shape.dims[2], 3);
    CHECK_INT_EQ(info->input_bytes, 8 * 8 * 3);
    CHECK_INT_EQ(info->num_classes, max_label_i64("h5/chunked.h5.labels.raw", 50) + 1);
    check_samples(d, "h5/chunked.h5.images.raw", "h5/chunked.h5.labels.raw");
    stoke_dataset_close(d);

    stoke_dataset_opts wrong = {.input_name = "images", .target_name = "classes"};
    open_fails("h5/chunked.h5", &wrong, STOKE_ERR_NOTFOUND, "'classes'");
    CHECK_STR_CONTAINS(stoke_last_error(), "'labels' (50)");
}

static void test_hdf5_regression_and_types(void)
{
    stoke_dataset *d = open_ok("h5/features.h5", NULL);
    if (d) {
        const stoke_dataset_info *info = stoke_dataset_get_info(d);
        CHECK_INT_EQ(info->input_dtype, STOKE_F32);
        CHECK_INT_EQ(info->target_kind, STOKE_TARGET_SCALAR);
        CHECK_INT_EQ(info->target_dtype, STOKE_F32);
        CHECK_INT_EQ(info->num_classes, 0);
        check_samples(d, "h5/features.h5.inputs.raw", "h5/features.h5.targets.raw");
        stoke_dataset_close(d);
    }
    /* Big-endian >f8 and >i4, converted to the host's order by HDF5. */
    d = open_ok("h5/bigendian.h5", NULL);
    if (d) {
        const stoke_dataset_info *info = stoke_dataset_get_info(d);
        CHECK_INT_EQ(info->input_dtype, STOKE_F64);
        CHECK_INT_EQ(info->target_dtype, STOKE_I32);
        CHECK_INT_EQ(info->target_kind, STOKE_TARGET_CLASS);
        check_samples(d, "h5/bigendian.h5.X.raw", "h5/bigendian.h5.Y.raw");
        stoke_dataset_close(d);
    }
    /* float16 inputs and vector targets. */
    d = open_ok("h5/vector.h5", NULL);
    if (d) {
        const stoke_dataset_info *info = stoke_dataset_get_info(d);
        CHECK_INT_EQ(info->input_dtype, STOKE_F16);
        CHECK_INT_EQ(info->input_bytes, 6);
        CHECK_INT_EQ(info->target_kind, STOKE_TARGET_VECTOR);
        CHECK_INT_EQ(info->target_shape.ndim, 1);
        CHECK_INT_EQ(info->target_shape.dims[0], 2);
        check_samples(d, "h5/vector.h5.data.raw", "h5/vector.h5.labels.raw");
        stoke_dataset_close(d);
    }
    /* Inputs only. */
    d = open_ok("h5/noy.h5", NULL);
    if (d) {
        const stoke_dataset_info *info = stoke_dataset_get_info(d);
        CHECK_INT_EQ(info->target_kind, STOKE_TARGET_NONE);
        CHECK_INT_EQ(info->target_bytes, 0);
        double x[3];
        CHECK_INT_EQ(stoke_dataset_read(d, 3, x, NULL), STOKE_OK);
        CHECK(x[0] == 9.0 && x[2] == 11.0);
        stoke_dataset_close(d);
    }

    static const struct {
        const char *name;
        stoke_dtype dtype;
    } types[] = {
        {"t_u1", STOKE_U8},    {"t_i1", STOKE_I8},        {"t_lei2", STOKE_I16},
        {"t_bei2", STOKE_I16}, {"t_leu2", STOKE_U16},     {"t_lei4", STOKE_I32},
        {"t_bei4", STOKE_I32}, {"t_leu4", STOKE_U32},     {"t_lei8", STOKE_I64},
        {"t_bei8", STOKE_I64}, {"t_lef2", STOKE_F16},     {"t_bef2", STOKE_F16},
        {"t_lef4", STOKE_F32}, {"t_bef4", STOKE_F32},     {"t_lef8", STOKE_F64},
        {"t_bef8", STOKE_F64}, {"grp/nested", STOKE_I16},
    };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        stoke_dataset_opts o = {.input_name = types[k].name, .target_name = "y"};
        d = open_ok("h5/dtypes.h5", &o);
        if (!d)
            continue;
        const stoke_dataset_info *info = stoke_dataset_get_info(d);
        CHECK_MSG(info->input_dtype == types[k].dtype, "%s: dtype %s", types[k].name,
                  stoke_dtype_name(info->input_dtype));
        CHECK_INT_EQ(info->num_classes, 9);
        CHECK_INT_EQ(info->target_dtype, STOKE_U8);
        char raw[128];
        snprintf(raw, sizeof raw, "h5/dtypes.h5.%s.raw", types[k].name);
        for (char *c = raw + 12; *c; c++)
            if (*c == '/')
                *c = '_';
        check_samples(d, raw, "h5/dtypes.h5.y.raw");
        stoke_dataset_close(d);
    }
    stoke_dataset_opts o = {.input_name = "u64"};
    open_fails("h5/dtypes.h5", &o, STOKE_ERR_FORMAT, "uint64");
    o.input_name = "strings";
    open_fails("h5/dtypes.h5", &o, STOKE_ERR_FORMAT, "string");
    o.input_name = "scalar";
    open_fails("h5/dtypes.h5", &o, STOKE_ERR_FORMAT, "scalar");
    o.input_name = "grp"; /* a group, not a dataset */
    open_fails("h5/dtypes.h5", &o, STOKE_ERR_NOTFOUND, "'grp/nested' (9, 2)");
    o = (stoke_dataset_opts){.input_name = "t_u1", .target_name = "neg"};
    open_fails("h5/dtypes.h5", &o, STOKE_ERR_FORMAT,
               "'neg': sample 2: label -1 is not a class index (0 to 16777215)");
}

static void test_hdf5_corrupt(void)
{
    open_fails("h5/mismatch.h5", NULL, STOKE_ERR_FORMAT,
               "'x' have 10 samples but targets 'y' have 9");
    /* Cut in half: HDF5 sees the end of file before the end of its address space. */
    char p[4096];
    stoke_dataset *d = NULL;
    stoke_status s = stoke_dataset_open(fxpath(p, sizeof p, "h5/cut.h5"), NULL, &d);
    CHECK_MSG(s == STOKE_ERR_FORMAT, "cut.h5: %s: %s", stoke_status_name(s), stoke_last_error());
    CHECK_STR_CONTAINS(stoke_last_error(), "cut.h5");
    stoke_dataset_close(d);
    /* Straight to the opener: a file that does not exist. */
    stoke_dataset *raw = calloc(1, sizeof *raw);
    CHECK_INT_EQ(stoke_hdf5_open(raw, fxpath(p, sizeof p, "h5/none.h5"), NULL), STOKE_ERR_NOTFOUND);
    CHECK_STR_CONTAINS(stoke_last_error(), "none.h5");
    free(raw);
}

/* ---- Image folders --------------------------------------------------------------- */

typedef struct manifest {
    int n;
    int64_t label[64];
    int tol[64];
    char rel[64][128];
} manifest;

static void load_manifest(manifest *m)
{
    size_t len;
    char *t = (char *)load("imgs.manifest", &len);
    t[len] = '\0';
    m->n = 0;
    for (char *line = strtok(t, "\n"); line && m->n < 64; line = strtok(NULL, "\n")) {
        long long lab;
        int tol;
        if (sscanf(line, "%lld %d %127s", &lab, &tol, m->rel[m->n]) == 3) {
            m->label[m->n] = lab;
            m->tol[m->n] = tol;
            m->n++;
        }
    }
    free(t);
}

/* Reads every sample and compares it with `ref_raw` (count x H x W x c): exact for
 * PNG, within the manifest's tolerance for JPEG; labels from the manifest. */
static void check_images(stoke_dataset *d, const manifest *m, const char *ref_raw, int c)
{
    const stoke_dataset_info *info = stoke_dataset_get_info(d);
    CHECK_INT_EQ(info->count, m->n);
    size_t len, px = (size_t)IMG_H * IMG_W * (size_t)c;
    unsigned char *ref = load(ref_raw, &len);
    CHECK_INT_EQ(len, (size_t)m->n * px);
    unsigned char *a = malloc(px);
    for (int i = 0; i < m->n && len == (size_t)m->n * px; i++) {
        int64_t label = -1;
        stoke_status s = stoke_dataset_read(d, i, a, &label);
        CHECK_MSG(s == STOKE_OK, "%s: %s", m->rel[i], stoke_last_error());
        CHECK_MSG(label == m->label[i], "%s: label %lld, want %lld", m->rel[i], (long long)label,
                  (long long)m->label[i]);
        int maxd = 0;
        for (size_t k = 0; k < px; k++) {
            int diff = abs((int)a[k] - (int)ref[(size_t)i * px + k]);
            maxd = diff > maxd ? diff : maxd;
        }
        CHECK_MSG(maxd <= m->tol[i], "%s (%d channels): max abs difference %d > %d", m->rel[i], c,
                  maxd, m->tol[i]);
    }
    free(a);
    free(ref);
}

static void test_images_exact(void)
{
    manifest m;
    load_manifest(&m);
    CHECK_INT_EQ(m.n, 8);
    stoke_dataset_opts o = {.image_height = IMG_H, .image_width = IMG_W};
    stoke_dataset *d = open_ok("imgs", &o);
    if (d) {
        const stoke_dataset_info *info = stoke_dataset_get_info(d);
        CHECK_STR_EQ(info->format, "images");
        CHECK_INT_EQ(info->num_classes, 4); /* "ant" is empty but still class 0 */
        CHECK_INT_EQ(info->input_shape.ndim, 3);
        CHECK_INT_EQ(info->input_shape.dims[0], IMG_H);
        CHECK_INT_EQ(info->input_shape.dims[1], IMG_W);
        CHECK_INT_EQ(info->input_shape.dims[2], 3);
        CHECK_INT_EQ(info->input_dtype, STOKE_U8);
        CHECK_INT_EQ(info->input_bytes, IMG_H * IMG_W * 3);
        CHECK_INT_EQ(info->target_kind, STOKE_TARGET_CLASS);
        CHECK_INT_EQ(info->target_dtype, STOKE_I64);
        check_images(d, &m, "imgs.rgb.raw", 3);
        int64_t counts[4] = {-1, -1, -1, -1};
        CHECK_INT_EQ(stoke_dataset_class_counts(d, counts), STOKE_OK);
        CHECK(counts[0] == 0 && counts[1] == 3 && counts[2] == 4 && counts[3] == 1);
        stoke_dataset_close(d);
    }
    o.image_channels = 1;
    d = open_ok("imgs", &o);
    if (d) {
        CHECK_INT_EQ(stoke_dataset_get_info(d)->input_shape.dims[2], 1);
        check_images(d, &m, "imgs.gray.raw", 1);
        stoke_dataset_close(d);
    }
    /* PATH/split/<class>/... */
    o = (stoke_dataset_opts){.image_height = IMG_H, .image_width = IMG_W, .split = "train"};
    d = open_ok("split", &o);
    if (d) {
        check_images(d, &m, "imgs.rgb.raw", 3);
        stoke_dataset_close(d);
    }
    /* Defaults: 224 x 224 x 3. */
    d = open_ok("imgs", NULL);
    if (d) {
        const stoke_dataset_info *info = stoke_dataset_get_info(d);
        CHECK_INT_EQ(info->input_shape.dims[0], 224);
        CHECK_INT_EQ(info->input_shape.dims[1], 224);
        CHECK_INT_EQ(info->input_shape.dims[2], 3);
        unsigned char *a = malloc(info->input_bytes);
        CHECK_INT_EQ(stoke_dataset_read(d, 0, a, NULL), STOKE_OK);
        free(a);
        stoke_dataset_close(d);
    }
}

/* Against Pillow's resize((W, H), BILINEAR) of the same PNGs (down by 1.9x and 33x,
 * up, and down in one direction only): stoke implements the same filter, pass order
 * and fixed-point arithmetic, so the tolerance is 0: identical bytes. */
static void test_images_resize(void)
{
    stoke_dataset_opts o = {.image_height = IMG_H, .image_width = IMG_W};
    stoke_dataset *d = open_ok("resize", &o);
    if (d) {
        manifest m = {.n = 4};
        for (int i = 0; i < 4; i++) {
            m.label[i] = 0;
            m.tol[i] = 0;
            snprintf(m.rel[i], sizeof m.rel[i], "resize sample %d", i);
        }
        check_images(d, &m, "resize.rgb.raw", 3);
        stoke_dataset_close(d);
    }
    /* A 480x400 JPEG read at 12x10: stoke lets the decoder shrink by 1/8 (DCT scaling)
     * and resamples the rest, Pillow decodes it whole and resamples. The tolerance is 3
     * levels (measured here: 1): DCT scaling averages 8x8 blocks much as the filter
     * does, and the picture is smooth with mild noise. */
    d = open_ok("resize_jpeg", &o);
    if (d) {
        manifest m = {.n = 1, .tol = {3}, .rel = {"resize_jpeg/c/big.jpg"}};
        check_images(d, &m, "resize_jpeg.rgb.raw", 3);
        stoke_dataset_close(d);
    }
}

static void test_images_corrupt(void)
{
    static const struct {
        const char *file;
        const char *needle;
    } bad[] = {
        {"a_truncated.jpg", "corrupt JPEG"}, {"b_badcrc.png", "CRC"},
        {"c_text.png", "not a JPEG or PNG"}, {"d_empty.jpg", "not a JPEG or PNG"},
        {"e_truncated.png", "corrupt PNG"},
    };
    stoke_dataset_opts o = {.image_height = IMG_H, .image_width = IMG_W};
    stoke_dataset *d = open_ok("bad", &o);
    if (d) {
        CHECK_INT_EQ(stoke_dataset_get_info(d)->count, 6);
        unsigned char a[IMG_H * IMG_W * 3];
        int64_t label;
        for (int i = 0; i < 5; i++) {
            stoke_status s = stoke_dataset_read(d, i, a, &label);
            CHECK_MSG(s == STOKE_ERR_FORMAT, "%s: %s (%s)", bad[i].file, stoke_status_name(s),
                      stoke_last_error());
            char want[64];
            snprintf(want, sizeof want, "(sample %d)", i);
            CHECK_STR_CONTAINS(stoke_last_error(), bad[i].file);
            CHECK_STR_CONTAINS(stoke_last_error(), want);
            CHECK_STR_CONTAINS(stoke_last_error(), bad[i].needle);
        }
        CHECK_MSG(stoke_dataset_read(d, 5, a, &label) == STOKE_OK, "%s", stoke_last_error());
        stoke_dataset_close(d);
    }
    /* Class folders without images: straight to the opener (stoke_dataset_open does not
     * take such a directory for an image folder). */
    char p[4096];
    stoke_dataset *raw = calloc(1, sizeof *raw);
    CHECK_INT_EQ(stoke_images_open(raw, fxpath(p, sizeof p, "noimg"), NULL), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "no .jpg, .jpeg or .png images");
    CHECK_STR_CONTAINS(stoke_last_error(), p);
    CHECK_INT_EQ(stoke_images_open(raw, fxpath(p, sizeof p, "h5"), NULL), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "no class subdirectories");
    o = (stoke_dataset_opts){.split = "val"};
    CHECK_INT_EQ(stoke_images_open(raw, fxpath(p, sizeof p, "split"), &o), STOKE_ERR_NOTFOUND);
    CHECK_STR_CONTAINS(stoke_last_error(), "split/val");
    o = (stoke_dataset_opts){.image_channels = 2};
    CHECK_INT_EQ(stoke_images_open(raw, fxpath(p, sizeof p, "imgs"), &o), STOKE_ERR_ARG);
    free(raw);
}

/* ---- Many threads at once ------------------------------------------------------ */

typedef struct reader {
    stoke_dataset *d;
    const unsigned char *ref_in, *ref_tg; /* serial reads of every sample */
    int64_t start, stride, n;
    int mismatches, errors;
} reader;

static void *reader_run(void *arg)
{
    reader *r = arg;
    const stoke_dataset_info *info = stoke_dataset_get_info(r->d);
    unsigned char *a = malloc(info->input_bytes), *b = malloc(info->target_bytes + 1);
    for (int64_t k = 0; k < r->n; k++) {
        int64_t i = (r->start + k * r->stride) % info->count;
        if (stoke_dataset_read(r->d, i, a, info->target_bytes ? b : NULL) != STOKE_OK) {
            r->errors++;
            continue;
        }
        if (memcmp(a, r->ref_in + (size_t)i * info->input_bytes, info->input_bytes) != 0 ||
            (info->target_bytes &&
             memcmp(b, r->ref_tg + (size_t)i * info->target_bytes, info->target_bytes) != 0))
            r->mismatches++;
    }
    free(a);
    free(b);
    return NULL;
}

/* 8 threads read `d` at once, each in its own order (sequential, strided, from
 * different places), and must get what serial reads got. */
static void check_threads(stoke_dataset *d, const char *what, int64_t reads_per_thread)
{
    const stoke_dataset_info *info = stoke_dataset_get_info(d);
    unsigned char *in = malloc((size_t)info->count * info->input_bytes);
    unsigned char *tg = malloc((size_t)info->count * info->target_bytes + 1);
    for (int64_t i = 0; i < info->count; i++)
        CHECK_INT_EQ(
            stoke_dataset_read(d, i, in + (size_t)i * info->input_bytes,
                               info->target_bytes ? tg + (size_t)i * info->target_bytes : NULL),
            STOKE_OK);
    enum { T = 8 };
    static const int64_t strides[T] = {1, 1, 7, 13, 101, 997, 1, 3};
    reader r[T];
    pthread_t th[T];
    for (int t = 0; t < T; t++) {
        r[t] = (reader){.d = d,
                        .ref_in = in,
                        .ref_tg = tg,
                        .start = t * info->count / T,
                        .stride = strides[t],
                        .n = reads_per_thread};
        CHECK_INT_EQ(pthread_create(&th[t], NULL, reader_run, &r[t]), 0);
    }
    int mism = 0, errs = 0;
    for (int t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        mism += r[t].mismatches;
        errs += r[t].errors;
    }
    CHECK_MSG(mism == 0 && errs == 0, "%s: %d mismatches, %d errors across threads", what, mism,
              errs);
    free(in);
    free(tg);
}

static void test_threads(void)
{
    stoke_dataset *d = open_ok("h5/big.h5", NULL); /* chunked, gzip */
    if (d) {
        check_samples(d, "h5/big.h5.x.raw", "h5/big.h5.y.raw");
        check_threads(d, "big.h5 x", 600);
        stoke_dataset_close(d);
    }
    /* Contiguous, vectors: small enough to be cached whole, and again as if it were
     * not (read-ahead for sequential readers, single rows for the others). */
    stoke_dataset_opts o = {.input_name = "xc", .target_name = "v"};
    for (int whole = 1; whole >= 0; whole--) {
        if (!whole)
            stoke_data_test_seam()->hdf5_whole_max = 0;
        d = open_ok("h5/big.h5", &o);
        if (d) {
            check_samples(d, "h5/big.h5.x.raw", "h5/big.h5.v.raw");
            check_threads(d, whole ? "big.h5 xc (whole)" : "big.h5 xc (blocks)", 600);
            stoke_dataset_close(d);
        }
        stoke_data_test_seam()->hdf5_whole_max = -1; /* the default */
    }
    o = (stoke_dataset_opts){.image_height = IMG_H, .image_width = IMG_W};
    d = open_ok("imgs", &o);
    if (d) {
        check_threads(d, "imgs", 24);
        stoke_dataset_close(d);
    }
    o = (stoke_dataset_opts){.image_height = 32, .image_width = 40};
    d = open_ok("resize", &o);
    if (d) {
        check_threads(d, "resize", 8);
        stoke_dataset_close(d);
    }
}

/* ---- Symbolic links in an image folder ------------------------------------------ */

static void put_link(const char *dir, const char *target, const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK_MSG(symlink(target, p) == 0, "%s: %s", p, strerror(errno));
}

static void put_copy(const char *from, const char *dir, const char *name)
{
    size_t n;
    unsigned char *b = load(from, &n);
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    check_spit(p, b, n);
    free(b);
}

/* Each file is one sample, by device and inode, in the class whose folder holds it;
 * nothing outside the root is read; what is left out is counted, with an example.
 * Before: links to "." multiplied a class's images, b/up -> .. gave class b (and a
 * class-folder link c) a's images. */
static void test_images_symlinks(void)
{
    char t[4096], root[4200], a[4300], b[4300], p[4400];
    snprintf(t, sizeof t, "%s/links-XXXXXX", fx);
    if (!mkdtemp(t)) {
        CHECK_MSG(0, "mkdtemp %s: %s", t, strerror(errno));
        return;
    }
    snprintf(root, sizeof root, "%s/root", t);
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(b, sizeof b, "%s/b", root);
    mkdir(root, 0755);
    mkdir(a, 0755);
    mkdir(b, 0755);
    snprintf(p, sizeof p, "%s/sub", a);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/sub2", b);
    mkdir(p, 0755);
    const char *img = "imgs/dog/photo.jpg";
    put_copy(img, a, "0.jpg");
    put_copy(img, a, "sub/1.jpg");
    put_copy(img, b, "2.jpg");
    put_copy(img, b, "sub2/3.jpg");
    put_copy(img, t, "outside.jpg");
    put_link(a, ".", "s1"); /* loops */
    put_link(a, ".", "s2");
    put_link(a, "0.jpg", "same.jpg");       /* a second name for a counted file */
    put_link(b, "..", "up");                /* the root: out of class b */
    put_link(b, "../a/0.jpg", "steal.jpg"); /* class a's image */
    put_link(b, "../../outside.jpg", "out.jpg");
    put_link(b, "nowhere.jpg", "broken.jpg");
    put_link(b, "sub2", "inner"); /* b's own folder: walked once, as inner */
    put_link(root, "a", "c");     /* a class folder that is a link */
    char f0[4400], hard[4400];
    snprintf(f0, sizeof f0, "%s/0.jpg", a);
    snprintf(hard, sizeof hard, "%s/hard.jpg", b);
    CHECK(link(f0, hard) == 0); /* the same inode in another class */

    stoke_dataset_opts o = {.image_height = IMG_H, .image_width = IMG_W};
    stoke_dataset *d = NULL;
    CHECK_MSG(stoke_dataset_open(root, &o, &d) == STOKE_OK, "%s", stoke_last_error());
    if (d) {
        const stoke_dataset_info *f = stoke_dataset_get_info(d);
        CHECK_INT_EQ(f->count, 4);
        CHECK_INT_EQ(f->num_classes, 2);
        int64_t counts[2] = {0, 0};
        if (f->num_classes == 2) {
            CHECK(stoke_dataset_class_counts(d, counts) == STOKE_OK);
            CHECK_INT_EQ(counts[0], 2);
            CHECK_INT_EQ(counts[1], 2);
        }
        const char *ex = NULL;
        /* s1 s2 same.jpg; broken.jpg hard.jpg out.jpg steal.jpg sub2 up; c */
        CHECK_INT_EQ(stoke_dataset_skipped(d, &ex), 10);
        CHECK_STR_CONTAINS(ex, "root/a/same.jpg: the same file as sample 0, ");
        CHECK_STR_CONTAINS(ex, "root/a/0.jpg");
        stoke_dataset_close(d);
    }
    /* A folder without links leaves nothing out. */
    d = open_ok("imgs", &o);
    if (d) {
        CHECK_INT_EQ(stoke_dataset_skipped(d, NULL), 0);
        stoke_dataset_close(d);
    }
    check_rm_rf(t);
}

int main(int argc, char **argv)
{
    fx = argc > 1 ? argv[1] : getenv("STOKE_FIXTURES");
    if (!fx) {
        fprintf(stderr,
                "usage: %s FIXTURE_DIR (or STOKE_FIXTURES; written by "
                "tests/data/make_hdf5_images.py)\n",
                argv[0]);
        return 2;
    }
    test_hdf5_contiguous();
    test_hdf5_chunked_named();
    test_hdf5_regression_and_types();
    test_hdf5_corrupt();
    test_images_exact();
    test_images_resize();
    test_images_corrupt();
    test_images_symlinks();
    test_threads();
    return CHECK_DONE();
}
