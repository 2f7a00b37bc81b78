/* test_data_formats.c - the dataset formats stoke owns (IDX, NPY, packed records),
 * read from files written by independent tools (the Debian package, numpy, gzip) and
 * compared exactly; corrupt inputs; the records writer's guarantees.
 * usage: test_data_formats [FIXTURES] (the directory tests/data/make_fixtures.py wrote;
 * ctest's data_fixtures test writes it first). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "data/dataset_impl.h"
#include "data/npy_impl.h"
#include "data/records_impl.h"
#include "stoke/data.h"

static const char *fixtures;
static char work[1024]; /* scratch directory under the fixtures */

#define FM "/usr/share/datasets/fashion-mnist"

static void spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f && fwrite(data, 1, n, f) == n, "cannot write %s", path);
    if (f)
        fclose(f);
}

/* "28x28" or "-" -> shape */
static void parse_shape(const char *s, stoke_shape *out)
{
    memset(out, 0, sizeof *out);
    if (strcmp(s, "-") == 0)
        return;
    for (const char *p = s; *p && out->ndim < STOKE_MAX_DIMS;) {
        char *end;
        out->dims[out->ndim++] = strtoll(p, &end, 10);
        p = *end == 'x' ? end + 1 : end;
        if (!*end)
            break;
    }
}

static bool shape_eq(const stoke_shape *a, const stoke_shape *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int k = 0; k < a->ndim; k++)
        if (a->dims[k] != b->dims[k])
            return false;
    return true;
}

static const char *kind_name(stoke_target_kind k)
{
    static const char *n[] = {"none", "class", "scalar", "vector"};
    return (unsigned)k < 4 ? n[k] : "?";
}

/* Reads every sample of d; returns the concatenated inputs and targets (caller frees). */
static void read_all(stoke_dataset *d, unsigned char **in, unsigned char **tg)
{
    const stoke_dataset_info *f = stoke_dataset_get_info(d);
    *in = malloc((size_t)f->count * f->input_bytes + 1);
    *tg = malloc((size_t)f->count * f->target_bytes + 1);
    for (int64_t i = 0; i < f->count; i++) {
        stoke_status s =
            stoke_dataset_read(d, i, *in + (size_t)i * f->input_bytes,
                               f->target_bytes ? *tg + (size_t)i * f->target_bytes : NULL);
        CHECK_MSG(s == STOKE_OK, "sample %" PRId64 ": %s", i, stoke_last_error());
    }
}

static void test_basics(void)
{
    CHECK_INT_EQ(stoke_dtype_size(STOKE_U8), 1);
    CHECK_INT_EQ(stoke_dtype_size(STOKE_BF16), 2);
    CHECK_INT_EQ(stoke_dtype_size(STOKE_F64), 8);
    CHECK_INT_EQ(stoke_dtype_size(STOKE_DTYPE_COUNT), 0);
    CHECK_STR_EQ(stoke_dtype_name(STOKE_F32), "float32");
    CHECK_STR_EQ(stoke_dtype_name((stoke_dtype)99), "?");
    stoke_shape s = {2, {28, 28}};
    char buf[64];
    CHECK_STR_EQ(stoke_shape_format(&s, buf, sizeof buf), "(28, 28)");
    CHECK_INT_EQ(stoke_shape_elems(&s), 784);
    s.ndim = 0;
    CHECK_STR_EQ(stoke_shape_format(&s, buf, sizeof buf), "()");
    CHECK_INT_EQ(stoke_shape_elems(&s), 1);
    s.ndim = 1;
    s.dims[0] = 5;
    CHECK_STR_EQ(stoke_shape_format(&s, buf, sizeof buf), "(5,)");

    stoke_dataset *d = (stoke_dataset *)1;
    CHECK(stoke_dataset_open("/nonexistent/dataset", NULL, &d) == STOKE_ERR_NOTFOUND);
    CHECK(d == NULL);
    CHECK_STR_CONTAINS(stoke_last_error(), "/nonexistent/dataset");
    CHECK(stoke_dataset_open("/etc", NULL, &d) == STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "unrecognised directory");
    CHECK(stoke_dataset_open(NULL, NULL, &d) == STOKE_ERR_ARG);
    stoke_dataset_close(NULL);
    CHECK(stoke_dataset_get_info(NULL) == NULL);
    CHECK(stoke_dataset_read(NULL, 0, buf, NULL) == STOKE_ERR_ARG);
    CHECK(stoke_dataset_class_counts(NULL, NULL) == STOKE_ERR_ARG);
}

/* The Debian package against numpy's reading of the same .gz files. */
static void check_debian(const char *split, long count, unsigned long crc, const char *first,
                         const char *last, const char *labels, const char *class_counts)
{
    stoke_dataset_opts o = {.split = split};
    stoke_dataset *d;
    stoke_status s = stoke_dataset_open(FM, &o, &d);
    CHECK_MSG(s == STOKE_OK, "%s", stoke_last_error());
    if (s != STOKE_OK)
        return;
    const stoke_dataset_info *f = stoke_dataset_get_info(d);
    CHECK_STR_EQ(f->format, "idx");
    CHECK_INT_EQ(f->count, count);
    stoke_shape want = {2, {28, 28}};
    CHECK(shape_eq(&f->input_shape, &want));
    CHECK(f->input_dtype == STOKE_U8 && f->input_bytes == 784);
    CHECK(f->target_kind == STOKE_TARGET_CLASS && f->target_dtype == STOKE_U8);
    CHECK_INT_EQ(f->target_bytes, 1);
    CHECK_INT_EQ(f->num_classes, 10);

    size_t n1, n2, nl;
    unsigned char *want_first = check_slurp(first, &n1), *want_last = check_slurp(last, &n2);
    unsigned char *want_labels = check_slurp(labels, &nl);
    CHECK(want_first && want_last && want_labels && n1 == 784 && nl == (size_t)count);
    unsigned char img[784];
    uLong all = crc32(0L, Z_NULL, 0);
    bool labels_ok = true;
    for (int64_t i = 0; i < f->count; i++) {
        unsigned char label = 0xff;
        if (stoke_dataset_read(d, i, img, &label) != STOKE_OK) {
            CHECK_MSG(0, "read %" PRId64 ": %s", i, stoke_last_error());
            break;
        }
        all = crc32(all, img, sizeof img);
        if (want_labels && label != want_labels[i])
            labels_ok = false;
        if (i == 0 && want_first)
            CHECK(memcmp(img, want_first, 784) == 0);
        if (i == f->count - 1 && want_last)
            CHECK(memcmp(img, want_last, 784) == 0);
    }
    CHECK_MSG(all == crc, "crc32 of all images %lu, numpy's %lu", all, crc);
    CHECK(labels_ok);

    int64_t counts[10];
    CHECK(stoke_dataset_class_counts(d, counts) == STOKE_OK);
    const char *p = class_counts;
    for (int c = 0; c < 10; c++) {
        CHECK_INT_EQ(counts[c], strtoll(p, (char **)&p, 10));
        if (*p == ',')
            p++;
    }

    /* Bounds: every index outside [0, count) is refused, naming the dataset. */
    CHECK(stoke_dataset_read(d, -1, img, NULL) == STOKE_ERR_ARG);
    CHECK(stoke_dataset_read(d, count, img, NULL) == STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "out of range");
    CHECK(stoke_dataset_read(d, 0, NULL, NULL) == STOKE_ERR_ARG);
    stoke_dataset_close(d);

    /* One images file: its labels are found beside it by the standard naming. */
    char path[512];
    snprintf(path, sizeof path, FM "/%s-images-idx3-ubyte.gz",
             strcmp(split, "test") == 0 ? "t10k" : "train");
    s = stoke_dataset_open(path, NULL, &d);
    CHECK_MSG(s == STOKE_OK, "%s", stoke_last_error());
    if (s == STOKE_OK) {
        f = stoke_dataset_get_info(d);
        CHECK_INT_EQ(f->count, count);
        CHECK(f->target_kind == STOKE_TARGET_CLASS && f->num_classes == 10);
        unsigned char label = 0xff;
        CHECK(stoke_dataset_read(d, count - 1, img, &label) == STOKE_OK);
        CHECK(want_last && memcmp(img, want_last, 784) == 0);
        CHECK(want_labels && label == want_labels[count - 1]);
        stoke_dataset_close(d);
    }
    free(want_first);
    free(want_last);
    free(want_labels);
}

static stoke_dtype dtype_named(const char *n)
{
    for (int t = 0; t < STOKE_DTYPE_COUNT; t++)
        if (strcmp(stoke_dtype_name((stoke_dtype)t), n) == 0)
            return (stoke_dtype)t;
    return STOKE_DTYPE_COUNT;
}

/* A fixture written by numpy / gzip: info and every byte of every sample. */
static void check_case(char **w)
{
    const char *name = w[1], *inputs = w[2], *targets = w[3];
    stoke_dataset_opts o = {0};
    if (strcmp(targets, "-") != 0 && strstr(name, "npy"))
        o.targets_path = targets; /* also found by name: see test_naming */
    stoke_dataset *d;
    stoke_status s = stoke_dataset_open(inputs, &o, &d);
    CHECK_MSG(s == STOKE_OK, "%s: %s", name, stoke_last_error());
    if (s != STOKE_OK)
        return;
    const stoke_dataset_info *f = stoke_dataset_get_info(d);
    stoke_shape ish, tsh;
    parse_shape(w[7], &ish);
    parse_shape(w[10], &tsh);
    CHECK_MSG(f->count == atoll(w[6]), "%s: count %" PRId64, name, f->count);
    CHECK_MSG(shape_eq(&f->input_shape, &ish), "%s: input shape", name);
    CHECK_MSG(f->input_dtype == dtype_named(w[8]), "%s: input dtype %s, want %s", name,
              stoke_dtype_name(f->input_dtype), w[8]);
    CHECK_MSG(strcmp(kind_name(f->target_kind), w[9]) == 0, "%s: target kind %s, want %s", name,
              kind_name(f->target_kind), w[9]);
    if (strcmp(w[9], "none") != 0) {
        CHECK_MSG(shape_eq(&f->target_shape, &tsh), "%s: target shape", name);
        CHECK_MSG(f->target_dtype == dtype_named(w[11]), "%s: target dtype %s, want %s", name,
                  stoke_dtype_name(f->target_dtype), w[11]);
    }
    CHECK_MSG(f->num_classes == atoll(w[12]), "%s: %" PRId64 " classes", name, f->num_classes);

    unsigned char *in, *tg;
    read_all(d, &in, &tg);
    size_t n;
    unsigned char *want = check_slurp(w[4], &n);
    CHECK_MSG(want && n == (size_t)f->count * f->input_bytes && memcmp(in, want, n) == 0,
              "%s: inputs differ from numpy's", name);
    free(want);
    if (strcmp(w[5], "-") != 0) {
        want = check_slurp(w[5], &n);
        CHECK_MSG(want && n == (size_t)f->count * f->target_bytes && memcmp(tg, want, n) == 0,
                  "%s: targets differ from numpy's", name);
        free(want);
    }
    free(in);
    free(tg);

    /* Through packed records and back: the same bytes. */
    char rec[1200];
    snprintf(rec, sizeof rec, "%s/%s.rec", work, name);
    s = stoke_records_write(d, rec, NULL, NULL);
    CHECK_MSG(s == STOKE_OK, "%s: %s", name, stoke_last_error());
    stoke_dataset *r;
    if (s == STOKE_OK && stoke_dataset_open(rec, NULL, &r) == STOKE_OK) {
        const stoke_dataset_info *g = stoke_dataset_get_info(r);
        CHECK_STR_EQ(g->format, "records");
        CHECK(g->count == f->count && shape_eq(&g->input_shape, &f->input_shape) &&
              g->input_dtype == f->input_dtype && g->target_kind == f->target_kind &&
              shape_eq(&g->target_shape, &f->target_shape) && g->num_classes == f->num_classes &&
              g->input_bytes == f->input_bytes && g->target_bytes == f->target_bytes);
        unsigned char *in2, *tg2;
        read_all(d, &in, &tg);
        read_all(r, &in2, &tg2);
        CHECK_MSG(memcmp(in, in2, (size_t)f->count * f->input_bytes) == 0 &&
                      memcmp(tg, tg2, (size_t)f->count * f->target_bytes) == 0,
                  "%s: records differ from the source", name);
        free(in);
        free(tg);
        free(in2);
        free(tg2);
        stoke_dataset_close(r);
    } else {
        CHECK_MSG(0, "%s: reopen records: %s", name, stoke_last_error());
    }
    stoke_dataset_close(d);
}

static void check_bad(char **w)
{
    const char *name = w[1], *path = w[2];
    stoke_dataset *d = (stoke_dataset *)1;
    stoke_status s = stoke_dataset_open(path, NULL, &d);
    CHECK_MSG(strcmp(stoke_status_name(s), w[3]) == 0, "%s: status %s, want %s (%s)", name,
              stoke_status_name(s), w[3], stoke_last_error());
    CHECK(d == NULL);
    char needles[512];
    snprintf(needles, sizeof needles, "%s", w[4]);
    for (char *save, *t = strtok_r(needles, "|", &save); t; t = strtok_r(NULL, "|", &save))
        CHECK_MSG(strstr(stoke_last_error(), t), "%s: message \"%s\" lacks \"%s\"", name,
                  stoke_last_error(), t);
}

static void test_manifest(void)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/manifest.txt", fixtures);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "no %s: run tests/data/make_fixtures.py", path);
    if (!f)
        return;
    char line[4096];
    int cases = 0, bads = 0, debian = 0;
    while (fgets(line, sizeof line, f)) {
        char *w[16] = {0};
        int n = 0;
        line[strcspn(line, "\n")] = '\0';
        /* A bad case's last field (the expected message parts) may hold spaces. */
        int max = strncmp(line, "bad ", 4) == 0 ? 5 : 16;
        char *save = NULL;
        for (char *t = strtok_r(line, " ", &save); t && n < max;) {
            w[n++] = t;
            if (max == 5 && n == 4) {
                w[n++] = save;
                break;
            }
            t = strtok_r(NULL, " ", &save);
        }
        if (n == 8 && strcmp(w[0], "idx-debian") == 0) {
            check_debian(w[1], atol(w[2]), strtoul(w[3], NULL, 10), w[4], w[5], w[6], w[7]);
            debian++;
        } else if (n == 13 && strcmp(w[0], "case") == 0) {
            check_case(w);
            cases++;
        } else if (n == 5 && strcmp(w[0], "bad") == 0) {
            check_bad(w);
            bads++;
        } else {
            CHECK_MSG(0, "bad manifest line: %s", line);
        }
    }
    fclose(f);
    CHECK(debian == 2 && cases >= 15 && bads >= 20);
}

/* Targets found by name, the explicit --targets file, and the regression flag. */
static void test_naming(void)
{
    char path[1200];
    stoke_dataset *d;
    const char *pairs[][2] = {{"npy_v1_u8/x.npy", "class"},
                              {"npy_v2_i16be/X_train.npy", "class"},
                              {"npy_v3_f4_regression/inputs.npy", "scalar"},
                              {"npy_v1_f8be_vector/pose_x.npy", "vector"},
                              {"npy_v1_scalar_samples/values.npy", "none"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", fixtures, pairs[i][0]);
        stoke_status s = stoke_dataset_open(path, NULL, &d);
        CHECK_MSG(s == STOKE_OK, "%s", stoke_last_error());
        if (s == STOKE_OK) {
            CHECK_STR_EQ(kind_name(stoke_dataset_get_info(d)->target_kind), pairs[i][1]);
            stoke_dataset_close(d);
        }
    }
    /* Integer-valued float labels are classes unless the caller says regression. */
    snprintf(path, sizeof path, "%s/npy_v1_float_labels/x.npy", fixtures);
    stoke_dataset_opts o = {.regression = true};
    if (stoke_dataset_open(path, &o, &d) == STOKE_OK) {
        CHECK(stoke_dataset_get_info(d)->target_kind == STOKE_TARGET_SCALAR);
        CHECK(stoke_dataset_get_info(d)->num_classes == 0);
        int64_t c[4];
        CHECK(stoke_dataset_class_counts(d, c) == STOKE_ERR_ARG);
        stoke_dataset_close(d);
    } else {
        CHECK_MSG(0, "%s", stoke_last_error());
    }
    /* A targets file that does not exist is an error, not "no targets". */
    o = (stoke_dataset_opts){.targets_path = "/nonexistent/y.npy"};
    CHECK(stoke_dataset_open(path, &o, &d) == STOKE_ERR_NOTFOUND);
    CHECK_STR_CONTAINS(stoke_last_error(), "/nonexistent/y.npy");
    o = (stoke_dataset_opts){.split = "validation"};
    CHECK(stoke_dataset_open(FM, &o, &d) == STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "split 'validation'");
}

/* The header parser on buffers (what the fuzz target drives). */
static void test_npy_parser(void)
{
    stoke_npy_header h;
#define LIT(x)  x, sizeof(x) - 1
#define ULIT(x) (const unsigned char *)(x), sizeof(x) - 1
    CHECK_MSG(stoke_npy_parse_header(ULIT("\x93NUMPY\x01\x00\x44\x00{'descr': '>i2', "
                                          "'fortran_order': False, 'shape': (), }            \n"),
                                     "buf", &h) == STOKE_OK,
              "%s", stoke_last_error());
    CHECK(h.ndim == 0 && h.dtype == STOKE_I16 && h.swap && h.data_bytes == 2);
    CHECK_INT_EQ(h.data_offset, 78);
    CHECK_MSG(stoke_npy_parse_header(ULIT("\x93NUMPY\x03\x00\x3b\x00\x00\x00{\"shape\": (7L, 2), "
                                          "\"descr\": \"|b1\", \"fortran_order\": False}\n"),
                                     "buf", &h) == STOKE_OK,
              "%s", stoke_last_error());
    CHECK(h.ndim == 2 && h.shape[0] == 7 && h.shape[1] == 2 && h.dtype == STOKE_U8 && !h.swap);
    CHECK(h.major == 3 && h.data_offset == 71);
    static const struct {
        const char *buf;
        size_t n;
        const char *why;
    } bads[] = {
        {LIT("\x93NUMPY\x01\x00\x35\x00{'descr': '|i2', 'fortran_order': False, 'shape': ()}"),
         "offset 20: unsupported dtype '|i2'"},
        {LIT("\x93NUMPY\x01\x00\x32\x00{'descr': '<f4', 'shape': (), 'shape': (), 'x': 1}"),
         "offset 40: repeated key 'shape'"},
        {LIT("\x93NUMPY\x01\x00\x28\x00{'descr': '<f4', 'fortran_order': False}"),
         "offset 10: the header has no 'shape'"},
        {LIT("\x93NUMPY\x01\x00\x0a\x00{'descr': "), "expected a quoted string"},
        {LIT("\x93NUMPY\x01\x00\x0a\x00{'descr':'"), "offset 20: unterminated string"},
        {LIT("\x93NUMPY\x01\x00\x33\x00{'descr': [('a', '<f4')], 'fortran_order': False, }"),
         "offset 20: structured dtypes"},
        {LIT("\x93NUMPY\x02\x00\x05"), "offset 9: truncated preamble"},
        {LIT("\x93NUMPY\x01\x00\x4a\x00{'descr': '<f8', 'fortran_order': False, 'shape': "
             "(99999999999999999999,)}"),
         "dimension too large"},
        {LIT("\x93NUMPY\x01\x00\x4c\x00{'descr': '<f8', 'fortran_order': False, 'shape': "
             "(4294967296, 4294967296,)}"),
         "more bytes than this machine"},
        {LIT("\x93NUMPX\x01\x00"), "offset 0: not an NPY file"},
    };
#undef LIT
#undef ULIT
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        CHECK_MSG(stoke_npy_parse_header((const unsigned char *)bads[i].buf, bads[i].n, "buf",
                                         &h) == STOKE_ERR_FORMAT,
                  "case %zu accepted", i);
        CHECK_STR_CONTAINS(stoke_last_error(), bads[i].why);
        CHECK_STR_CONTAINS(stoke_last_error(), "buf: NPY header, offset ");
    }
}

/* A dataset whose reads fail at one sample: the writer must give up cleanly. */
static stoke_status failing_read(stoke_dataset *d, int64_t i, void *input, void *target)
{
    (void)target;
    memset(input, 7, d->info.input_bytes);
    if (i == 3)
        return stoke_fail(STOKE_ERR_IO, "%s: sample %" PRId64 ": disk on fire", d->path, i);
    return STOKE_OK;
}
static void failing_close(stoke_dataset *d) { (void)d; }
static const stoke_dataset_vt failing_vt = {.read = failing_read, .close = failing_close};

static int count_temp_files(const char *dir)
{
    int n = 0;
    DIR *dp = opendir(dir);
    for (struct dirent *e; dp && (e = readdir(dp));)
        if (strstr(e->d_name, ".stoke-tmp-"))
            n++;
    if (dp)
        closedir(dp);
    return n;
}

static void on_progress(void *ctx, int64_t done, int64_t total)
{
    int64_t *last = ctx;
    CHECK(done >= *last && done <= total);
    *last = done;
}

static void test_records(void)
{
    /* The Debian test split through records: every sample, and the class balance. */
    char rec[1200];
    snprintf(rec, sizeof rec, "%s/fm_test.rec", work);
    stoke_dataset_opts o = {.split = "test"};
    stoke_dataset *src, *r;
    if (stoke_dataset_open(FM, &o, &src) != STOKE_OK) {
        CHECK_MSG(0, "%s", stoke_last_error());
        return;
    }
    int64_t last = -1;
    CHECK_MSG(stoke_records_write(src, rec, on_progress, &last) == STOKE_OK, "%s",
              stoke_last_error());
    CHECK_INT_EQ(last, 10000);
    CHECK_INT_EQ(count_temp_files(work), 0);
    struct stat st;
    CHECK(stat(rec, &st) == 0 && st.st_size == 256 + 10000 * 800); /* 784 + 1 -> 800 */
    CHECK_MSG(stoke_dataset_open(rec, NULL, &r) == STOKE_OK, "%s", stoke_last_error());
    if (r) {
        unsigned char *a, *at, *b, *bt;
        read_all(src, &a, &at);
        read_all(r, &b, &bt);
        CHECK(memcmp(a, b, 10000 * 784) == 0 && memcmp(at, bt, 10000) == 0);
        free(a);
        free(at);
        free(b);
        free(bt);
        int64_t c1[10], c2[10];
        CHECK(stoke_dataset_class_counts(src, c1) == STOKE_OK);
        CHECK(stoke_dataset_class_counts(r, c2) == STOKE_OK);
        CHECK(memcmp(c1, c2, sizeof c1) == 0);
        stoke_dataset_close(r);
    }

    /* Corrupt copies: each names the field and its offset. */
    size_t n;
    unsigned char *good = check_slurp(rec, &n);
    if (!good)
        return;
    char bad[1300];
    snprintf(bad, sizeof bad, "%s/bad.rec", work);
    struct {
        const char *what;
        size_t at; /* byte to change (SIZE_MAX: none) */
        unsigned char value;
        size_t len;   /* bytes of the file to keep */
        bool fix_crc; /* recompute the checksum after the change */
        const char *needle1, *needle2;
    } cases[] = {
        {"bad magic", 0, 'X', n, false, "unrecognised format", "58 54 4f 4b"},
        {"wrong version", 8, 3, n, false, "offset 8: version 3", "reads versions 1 and 2"},
        {"bad checksum", 70, 0x55, n, false, "offset 252: bad checksum", NULL},
        {"truncated body", SIZE_MAX, 0, n - 1, false, "truncated", "holds 8000255"},
        {"truncated header", SIZE_MAX, 0, 100, false, "header truncated: 100 bytes", NULL},
        {"oversized", SIZE_MAX, 0, n + 16, false, "oversized", NULL},
        {"bad dtype", 56, 42, n, true, "offset 56: unknown input dtype 42", NULL},
        {"bad kind", 58, 9, n, true, "offset 58: unknown target kind 9", NULL},
        {"bad record size", 24, 0x30, n, true, "offset 24: record size", NULL},
        {"dim past ndim", 64 + 8 * 5, 1, n, true, "offset 104", "past ndim"},
        {"reserved", 230, 1, n, true, "offset 230: reserved", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *b = calloc(1, cases[i].len);
        memcpy(b, good, cases[i].len < n ? cases[i].len : n);
        if (cases[i].at != SIZE_MAX)
            b[cases[i].at] = cases[i].value;
        if (cases[i].fix_crc) {
            uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, STOKE_REC_CRC_OFFSET);
            for (int k = 0; k < 4; k++)
                b[STOKE_REC_CRC_OFFSET + k] = (unsigned char)(c >> 8 * k);
        }
        spit(bad, b, cases[i].len);
        free(b);
        stoke_dataset *d = (stoke_dataset *)1;
        stoke_status s = stoke_dataset_open(bad, NULL, &d);
        CHECK_MSG(s == STOKE_ERR_FORMAT && d == NULL, "%s: accepted", cases[i].what);
        CHECK_MSG(strstr(stoke_last_error(), cases[i].needle1) &&
                      (!cases[i].needle2 || strstr(stoke_last_error(), cases[i].needle2)) &&
                      strstr(stoke_last_error(), "bad.rec"),
                  "%s: message \"%s\"", cases[i].what, stoke_last_error());
    }
    /* The records reader itself, given a file with another magic. */
    unsigned char *b = calloc(1, n);
    memcpy(b, good, n);
    b[3] = 'x';
    spit(bad, b, n);
    free(b);
    stoke_dataset raw = {0};
    CHECK(stoke_records_open(&raw, bad, NULL) == STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "bad.rec: records header, offset 0: bad magic");
    free(good);

    /* A failure mid-write leaves an existing destination intact and no temporary. */
    char dest[1300];
    snprintf(dest, sizeof dest, "%s/keep.rec", work);
    spit(dest, "old contents", 12);
    stoke_dataset fake = {.vt = &failing_vt};
    snprintf(fake.path, sizeof fake.path, "fake-source");
    fake.info = *stoke_dataset_get_info(src);
    CHECK(stoke_records_write(&fake, dest, NULL, NULL) == STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "sample 3: disk on fire");
    unsigned char *kept = check_slurp(dest, &n);
    CHECK(kept && n == 12 && memcmp(kept, "old contents", 12) == 0);
    free(kept);
    CHECK_INT_EQ(count_temp_files(work), 0);

    /* An unwritable destination: nothing is created. */
    CHECK(stoke_records_write(src, "/nonexistent-dir/x.rec", NULL, NULL) == STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "/nonexistent-dir/x.rec");
    CHECK(stat("/nonexistent-dir", &st) != 0);
    /* A destination that is a directory: rename fails, the directory stays, no temp. */
    snprintf(dest, sizeof dest, "%s/a-directory", work);
    mkdir(dest, 0755);
    CHECK(stoke_records_write(src, dest, NULL, NULL) == STOKE_ERR_IO);
    CHECK(stat(dest, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_INT_EQ(count_temp_files(work), 0);
    stoke_dataset_close(src);
}

/* Reads are thread-safe: workers reading the same dataset at once get what one
 * thread reading alone gets (ThreadSanitizer checks the rest in the tsan build). */
typedef struct reader_arg {
    stoke_dataset *d;
    int64_t first, step;
    uLong crc;
    int failures;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *a = p;
    unsigned char img[784], label;
    a->crc = 0;
    for (int64_t i = a->first; i < stoke_dataset_get_info(a->d)->count; i += a->step) {
        if (stoke_dataset_read(a->d, i, img, &label) != STOKE_OK)
            a->failures++;
        a->crc += crc32(crc32(0L, Z_NULL, 0), img, sizeof img) + label;
    }
    return NULL;
}

static void test_concurrent_reads(void)
{
    const char *paths[] = {FM, NULL};
    char rec[1200];
    snprintf(rec, sizeof rec, "%s/fm_test.rec", work);
    paths[1] = rec;
    for (int k = 0; k < 2; k++) {
        stoke_dataset_opts o = {.split = "test"};
        stoke_dataset *d;
        if (stoke_dataset_open(paths[k], &o, &d) != STOKE_OK) {
            CHECK_MSG(0, "%s", stoke_last_error());
            continue;
        }
        reader_arg one = {d, 0, 1, 0, 0}, par[3];
        reader(&one);
        pthread_t t[3];
        for (int i = 0; i < 3; i++) {
            par[i] = (reader_arg){d, i, 3, 0, 0};
            CHECK(pthread_create(&t[i], NULL, reader, &par[i]) == 0);
        }
        uLong sum = 0;
        for (int i = 0; i < 3; i++) {
            pthread_join(t[i], NULL);
            sum += par[i].crc;
            CHECK_INT_EQ(par[i].failures, 0);
        }
        CHECK_MSG(sum == one.crc, "%s: parallel reads differ", paths[k]);
        stoke_dataset_close(d);
    }
}

/* An NPY v1.0 file of u8 `shape` (a header string such as "(100, 8)"), data[i] = i. */
static void write_npy_u8(const char *path, const char *shape, size_t n)
{
    char dict[128];
    int len = snprintf(dict, sizeof dict, "{'descr': '|u1', 'fortran_order': False, 'shape': %s, }",
                       shape);
    size_t hlen = ((size_t)len + 1 + 10 + 63) / 64 * 64 - 10; /* data 64-byte aligned */
    unsigned char *b = malloc(10 + hlen + n);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (unsigned char)hlen;
    b[9] = (unsigned char)(hlen >> 8);
    memset(b + 10, ' ', hlen);
    memcpy(b + 10, dict, (size_t)len);
    b[10 + hlen - 1] = '\n';
    for (size_t i = 0; i < n; i++)
        b[10 + hlen + i] = (unsigned char)i;
    spit(path, b, 10 + hlen + n);
    free(b);
}

/* Reading sample i of d after its file shrank: an error naming the file and the sample,
 * never SIGBUS (the readers used to map their files). */
static void check_shrunk_read(stoke_dataset *d, const char *file, int64_t i)
{
    const stoke_dataset_info *f = stoke_dataset_get_info(d);
    unsigned char *in = malloc(f->input_bytes), tg[16];
    stoke_status s = stoke_dataset_read(d, i, in, tg);
    CHECK_MSG(s == STOKE_ERR_IO, "%s: sample %" PRId64 ": %s", file, i, stoke_status_name(s));
    char want[1400];
    snprintf(want, sizeof want, "%s: sample %" PRId64 ": the file ends at byte 300", file, i);
    CHECK_STR_CONTAINS(stoke_last_error(), want);
    CHECK_STR_CONTAINS(stoke_last_error(), "truncated or rewritten while in use");
    free(in);
}

/* A file that shrinks while open (truncated, or rewritten in place by a convert that
 * does not go through a temporary file): each reader of a file it keeps open. */
static void test_shrinks_while_open(void)
{
    char rec[1200], cp[1300], x[1300], y[1300], im[1300], lb[1300];
    snprintf(rec, sizeof rec, "%s/fm_test.rec", work);
    snprintf(cp, sizeof cp, "%s/shrink.rec", work);
    size_t n;
    unsigned char *b = check_slurp(rec, &n);
    CHECK(b != NULL);
    if (b) {
        spit(cp, b, n);
        free(b);
        stoke_dataset *d = NULL;
        CHECK_MSG(stoke_dataset_open(cp, NULL, &d) == STOKE_OK, "%s", stoke_last_error());
        if (d) {
            unsigned char in[784], tg;
            CHECK(stoke_dataset_read(d, 5000, in, &tg) == STOKE_OK);
            CHECK(truncate(cp, 300) == 0);
            check_shrunk_read(d, cp, 5000);
            int64_t counts[10];
            CHECK_INT_EQ(stoke_dataset_class_counts(d, counts), STOKE_ERR_IO);
            CHECK_STR_CONTAINS(stoke_last_error(), "shrink.rec: sample 0: the file ends");
            stoke_dataset_close(d);
        }
    }

    /* NPY: the inputs are read per sample; scalar targets were read on open. */
    snprintf(x, sizeof x, "%s/shrink_x.npy", work);
    snprintf(y, sizeof y, "%s/shrink_y.npy", work);
    write_npy_u8(x, "(100, 8)", 800);
    write_npy_u8(y, "(100,)", 100);
    stoke_dataset *d = NULL;
    CHECK_MSG(stoke_dataset_open(x, NULL, &d) == STOKE_OK, "%s", stoke_last_error());
    if (d) {
        unsigned char in[8], tg = 0;
        CHECK(truncate(y, 64) == 0);
        CHECK(stoke_dataset_read(d, 99, in, &tg) == STOKE_OK && tg == 99 && in[0] == 24);
        CHECK(truncate(x, 300) == 0);
        check_shrunk_read(d, x, 50);
        stoke_dataset_close(d);
    }

    /* IDX, plain: the images per sample, the labels in memory since open. */
    snprintf(im, sizeof im, "%s/shrink-images-idx3-ubyte", work);
    snprintf(lb, sizeof lb, "%s/shrink-labels-idx1-ubyte", work);
    unsigned char ib[16 + 100 * 16], lbb[8 + 100];
    memcpy(ib, "\0\0\x08\x03\0\0\0\x64\0\0\0\x04\0\0\0\x04", 16);
    memcpy(lbb, "\0\0\x08\x01\0\0\0\x64", 8);
    for (int i = 0; i < 100 * 16; i++)
        ib[16 + i] = (unsigned char)i;
    for (int i = 0; i < 100; i++)
        lbb[8 + i] = (unsigned char)(i % 10);
    spit(im, ib, sizeof ib);
    spit(lb, lbb, sizeof lbb);
    d = NULL;
    CHECK_MSG(stoke_dataset_open(im, NULL, &d) == STOKE_OK, "%s", stoke_last_error());
    if (d) {
        unsigned char in[16], tg = 0;
        CHECK(truncate(lb, 8) == 0);
        CHECK(stoke_dataset_read(d, 57, in, &tg) == STOKE_OK && tg == 7);
        CHECK(truncate(im, 300) == 0);
        check_shrunk_read(d, im, 90);
        stoke_dataset_close(d);
    }
    unlink(cp);
    unlink(x);
    unlink(y);
    unlink(im);
    unlink(lb);
}

int main(int argc, char **argv)
{
    fixtures = argc > 1 ? argv[1] : STOKE_DATA_FIXTURES;
    snprintf(work, sizeof work, "%s/work", fixtures);
    mkdir(work, 0755);
    test_basics();
    test_npy_parser();
    test_manifest();
    test_naming();
    test_records();
    test_concurrent_reads();
    test_shrinks_while_open();
    return CHECK_DONE();
}
