/* test_records_jpeg.c - packed records that keep the JPEG bytes (version 2, --store
 * jpeg): every sample reads back as the image folder's own read, byte for byte, plain
 * and through a window; the file against the pixel records; each header, index and
 * trailer field corrupted; truncation; a damaged JPEG inside a record and in the
 * folder being converted; the loader over the records and over the folder. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../bench/jpeg_gen.h"
#include "check.h"
#include "data/dataset_impl.h"
#include "data/records_impl.h"
#include "stoke/data.h"

static char dir[4096];    /* the work directory */
static char folder[4200]; /* the image folder: dir/imgs/{a,b}/ */
static char jrec[4200], prec[4200], bad[4200];

enum { NIMG = 12, OW = 256, OH = 224 }; /* not square: width and height must not swap */

/* Photo-like JPEGs of several sizes and qualities, in two classes. */
static int make_folder(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/stoke-jrec-XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(dir))
        return 0;
    snprintf(folder, sizeof folder, "%s/imgs", dir);
    snprintf(jrec, sizeof jrec, "%s/j.rec", dir);
    snprintf(prec, sizeof prec, "%s/p.rec", dir);
    snprintf(bad, sizeof bad, "%s/bad.rec", dir);
    mkdir(folder, 0700);
    static const int sizes[][2] = {{400, 350}, {500, 375}, {375, 500}, {333, 500},
                                   {448, 336}, {350, 400}, {100, 80},  {640, 480}};
    for (int k = 0; k < NIMG; k++) {
        char p[4300];
        snprintf(p, sizeof p, "%s/%c", folder, k % 2 ? 'b' : 'a');
        mkdir(p, 0700);
        snprintf(p, sizeof p, "%s/%c/%02d.jpg", folder, k % 2 ? 'b' : 'a', k);
        unsigned char *j = NULL;
        unsigned long n = 0;
        if (!jg_jpeg(sizes[k % 8][0], sizes[k % 8][1], 40 + k, 75 + 2 * k, &j, &n))
            return 0;
        check_spit(p, j, n);
        tjFree(j);
    }
    return 1;
}

static stoke_dataset *open_or_fail(const char *path, const stoke_dataset_opts *o)
{
    stoke_dataset *d = NULL;
    CHECK_MSG(stoke_dataset_open(path, o, &d) == STOKE_OK, "%s: %s", path, stoke_last_error());
    return d;
}

/* A crop window: the box from 10% to 70% of the width and 20% to 90% of the height,
 * resized to 40 x 30, as a transform's window would be drawn on the original. */
static void crop_window(void *ctx, int w, int h, stoke_image_window *win)
{
    (void)ctx;
    int x0 = w / 10, x1 = w * 7 / 10, y0 = h / 5, y1 = h * 9 / 10;
    win->x = (stoke_resize_axis){x0, x1, x0, x1, 40, 0, 40};
    win->y = (stoke_resize_axis){y0, y1, y0, y1, 30, 0, 30};
}

static void test_round_trip(void)
{
    stoke_dataset_opts o = {.image_width = OW, .image_height = OH};
    stoke_dataset *f = open_or_fail(folder, &o);
    if (!f)
        return;
    CHECK_MSG(stoke_records_write_as(f, jrec, STOKE_STORE_JPEG, NULL, NULL) == STOKE_OK, "%s",
              stoke_last_error());
    CHECK_MSG(stoke_records_write_as(f, prec, STOKE_STORE_PIXELS, NULL, NULL) == STOKE_OK, "%s",
              stoke_last_error());
    stoke_dataset *j = open_or_fail(jrec, NULL), *p = open_or_fail(prec, NULL);
    if (!j || !p) {
        stoke_dataset_close(f);
        stoke_dataset_close(j);
        stoke_dataset_close(p);
        return;
    }
    const stoke_dataset_info *fi = stoke_dataset_get_info(f), *ji = stoke_dataset_get_info(j);
    CHECK_STR_EQ(ji->format, "records");
    CHECK_INT_EQ(ji->count, NIMG);
    CHECK_INT_EQ(ji->num_classes, 2);
    CHECK_INT_EQ(ji->input_bytes, fi->input_bytes);
    CHECK(memcmp(&ji->input_shape, &fi->input_shape, sizeof ji->input_shape) == 0);
    CHECK_INT_EQ(ji->target_kind, STOKE_TARGET_CLASS);
    CHECK_INT_EQ(ji->target_bytes, 8);

    /* Every sample, plain and through the window, as the folder reads it. */
    size_t in = fi->input_bytes;
    unsigned char *a = malloc(in), *b = malloc(in);
    unsigned char wa[40 * 30 * 3], wb[40 * 30 * 3];
    for (int64_t i = 0; i < NIMG; i++) {
        int64_t ta = -1, tb = -2;
        memset(b, 0x5a, in);
        CHECK_MSG(stoke_dataset_read(f, i, a, &ta) == STOKE_OK, "%s", stoke_last_error());
        CHECK_MSG(stoke_dataset_read(j, i, b, &tb) == STOKE_OK, "%s", stoke_last_error());
        CHECK_MSG(memcmp(a, b, in) == 0 && ta == tb, "sample %" PRId64 ": plain read differs", i);
        memset(wb, 0x5a, sizeof wb);
        ta = -1, tb = -2;
        CHECK(f->vt->read_window(f, i, crop_window, NULL, wa, &ta) == STOKE_OK);
        CHECK(j->vt->read_window &&
              j->vt->read_window(j, i, crop_window, NULL, wb, &tb) == STOKE_OK);
        CHECK_MSG(memcmp(wa, wb, sizeof wa) == 0 && ta == tb, "sample %" PRId64 ": window differs",
                  i);
    }
    free(a);
    free(b);
    int64_t ca[2] = {0}, cb[2] = {0};
    CHECK(stoke_dataset_class_counts(f, ca) == STOKE_OK);
    CHECK(stoke_dataset_class_counts(j, cb) == STOKE_OK);
    CHECK(ca[0] == cb[0] && ca[1] == cb[1] && ca[0] + ca[1] == NIMG);

    /* The file: the JPEGs' bytes, several times smaller than the pixels. */
    struct stat sj, sp;
    CHECK(stat(jrec, &sj) == 0 && stat(prec, &sp) == 0);
    fprintf(stderr, "jpeg records %lld bytes, pixel records %lld bytes\n", (long long)sj.st_size,
            (long long)sp.st_size);
    CHECK_MSG(sj.st_size * 4 < sp.st_size, "%lld vs %lld", (long long)sj.st_size,
              (long long)sp.st_size);
    double mj = 0, mp = 0;
    CHECK_STR_EQ(stoke_records_encoding(j, &mj), "jpeg");
    CHECK_STR_EQ(stoke_records_encoding(p, &mp), "pixels");
    CHECK(stoke_records_encoding(f, NULL) == NULL);
    CHECK_INT_EQ(mp, (OW * OH * 3 + 8 + 15) / 16 * 16); /* version 1: 16-byte records */
    double images = (double)(sj.st_size - STOKE_REC_HEADER_SIZE - STOKE_REC_TRAILER_SIZE -
                             NIMG * (STOKE_REC_INDEX_ENTRY + 8));
    CHECK_NEAR(mj, images / NIMG, 1e-9);

    /* Records of records: only an image folder keeps its files' bytes. */
    CHECK(stoke_records_write_as(j, bad, STOKE_STORE_JPEG, NULL, NULL) == STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "only an image folder");

    /* The loader over each, 0 and 2 workers, shuffled, plain and with RandomResizedCrop
     * + flip: the same batches as over the folder. */
    stoke_op ops[2] = {{.kind = STOKE_OP_RANDOM_RESIZED_CROP, .height = 64, .width = 64},
                       {.kind = STOKE_OP_HFLIP}};
    stoke_transform_opts to = {
        .in_shape = fi->input_shape, .in_dtype = STOKE_U8, .ops = ops, .nops = 2};
    for (int tr = 0; tr < 2; tr++) {
        unsigned char *ref = NULL;
        size_t ref_n = 0;
        for (int w = 0; w <= 2; w += 2) {
            for (int src = 0; src < 2; src++) {
                stoke_loader_opts lo = {.sampler = {.batch_size = 5, .shuffle = true, .seed = 9},
                                        .workers = w,
                                        .transform = tr ? &to : NULL};
                stoke_loader *l = NULL;
                CHECK_MSG(stoke_loader_create(src ? j : f, &lo, &l) == STOKE_OK, "%s",
                          stoke_last_error());
                if (!l)
                    continue;
                unsigned char *got = NULL;
                size_t n = 0;
                stoke_batch bt;
                while (stoke_loader_next(l, &bt) == STOKE_OK && bt.size > 0) {
                    size_t k = (size_t)bt.size * bt.input_bytes;
                    got = realloc(got, n + k + (size_t)bt.size * 8);
                    memcpy(got + n, bt.host_inputs, k);
                    memcpy(got + n + k, bt.host_targets, (size_t)bt.size * 8);
                    n += k + (size_t)bt.size * 8;
                }
                CHECK_MSG(n > 0, "loader: %s", stoke_last_error());
                if (!ref) {
                    ref = got, ref_n = n;
                } else {
                    CHECK_MSG(n == ref_n && memcmp(got, ref, n) == 0,
                              "transform %d, %d workers, %s: batches differ", tr, w,
                              src ? "records" : "folder");
                    free(got);
                }
                stoke_loader_destroy(l);
            }
        }
        free(ref);
    }
    stoke_dataset_close(f);
    stoke_dataset_close(j);
    stoke_dataset_close(p);
}

static void put64(unsigned char *p, uint64_t v) { stoke_rec_put_u64(p, v); }

static void fix_crc(unsigned char *b)
{
    uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), b, STOKE_REC_CRC_OFFSET);
    for (int k = 0; k < 4; k++)
        b[STOKE_REC_CRC_OFFSET + k] = (unsigned char)(c >> 8 * k);
}

/* Every header field, the index entries, the trailer, truncation: refused on open with
 * the field's byte offset named. */
static void test_corrupt(void)
{
    size_t n;
    unsigned char *good = check_slurp(jrec, &n);
    CHECK(good != NULL);
    if (!good)
        return;
    uint64_t index = n - STOKE_REC_TRAILER_SIZE - NIMG * STOKE_REC_INDEX_ENTRY;
    uint64_t off0 = stoke_rec_get_u64(good + index), len0 = stoke_rec_get_u64(good + index + 8);
    CHECK_INT_EQ(off0, 256);
    char m_idx[64], m_len[64], m_trailer[64], m_end[64], m_rec3[64];
    snprintf(m_idx, sizeof m_idx, "offset %" PRIu64 ": record 0 starts at 257", index);
    snprintf(m_len, sizeof m_len, "offset %" PRIu64 ": record 2 at", index + 2 * 16 + 8);
    snprintf(m_rec3, sizeof m_rec3, "offset %" PRIu64 ": record 3 starts at", index + 3 * 16);
    snprintf(m_trailer, sizeof m_trailer, "trailer, offset %zu: index offset", n - 16);
    snprintf(m_end, sizeof m_end, "offset %zu: no end marker", n - 8);
    struct {
        const char *what;
        size_t at;      /* first byte to change (SIZE_MAX: none) */
        uint64_t value; /* written as u64 when wide, else one byte */
        bool wide;
        size_t len;   /* bytes of the file to keep */
        bool fix_crc; /* recompute the header checksum after the change */
        const char *needle1, *needle2;
    } cases[] = {
        {"version 3", 8, 3, false, n, true, "offset 8: version 3", "versions 1 and 2"},
        {"bad checksum", 100, 0x55, false, n, false, "offset 252: bad checksum", NULL},
        {"header size", 12, 255, false, n, true, "offset 12: header size", NULL},
        {"count too large", 16, 1000000, true, n, true, "offset 16", "1000000 records"},
        {"count smaller", 16, NIMG - 1, true, n, true, "trailer, offset", "index offset"},
        {"record size", 24, 16, true, n, true, "offset 24: record size 16", "records vary"},
        {"input bytes", 32, 1, true, n, true, "offset 32: input bytes", NULL},
        {"target bytes", 40, 4, true, n, true, "offset 40: target bytes", NULL},
        {"num_classes", 48, 0, true, n, true, "offset 48: num_classes 0", NULL},
        {"input dtype", 56, 42, false, n, true, "offset 56: unknown input dtype", NULL},
        {"input ndim", 57, 9, false, n, true, "offset 57: input ndim 9", NULL},
        {"target kind", 58, 7, false, n, true, "offset 58: unknown target kind", NULL},
        {"target dtype", 59, 99, false, n, true, "offset 59: unknown target dtype", NULL},
        {"target ndim", 60, 1, false, n, true, "offset 128: target dimension 0 is 0", NULL},
        {"reserved 61", 61, 1, false, n, true, "offset 61: reserved", NULL},
        {"height", 64, 20000, true, n, true, "offset 64: height 20000", NULL},
        {"width", 72, 20000, true, n, true, "offset 72: width 20000", NULL},
        {"channels", 80, 2, true, n, true, "offset 80: channels 2", NULL},
        {"input dim past ndim", 88, 1, true, n, true, "offset 88", "past ndim"},
        {"target dims", 128, 3, true, n, true, "offset 128", "past ndim"},
        {"target offset", 192, 8, true, n, true, "offset 192: target offset 8", NULL},
        {"encoding", 200, 2, false, n, true, "offset 200: encoding 2", NULL},
        {"reserved 201", 201, 1, false, n, true, "offset 201: reserved", NULL},
        {"reserved 251", 251, 1, false, n, true, "offset 251: reserved", NULL},
        {"entry offset", index, 257, true, n, false, m_idx, "no gap or overlap"},
        {"entry length short", index + 2 * 16 + 8, 8, true, n, false, m_len, "1 byte to 1 GiB"},
        {"entry length long", index + 2 * 16 + 8, 1u << 20, true, n, false, m_len,
         "past the index"},
        {"entry overlap", index + 8, len0 - 1, true, n, false, "record 1 starts at", NULL},
        {"entry gap", index + 3 * 16, 0, true, n, false, m_rec3, NULL},
        {"trailer index offset", n - 16, 256, true, n, false, m_trailer, NULL},
        {"trailer magic", n - 1, 'X', false, n, false, m_end, NULL},
        {"truncated by 1", SIZE_MAX, 0, false, n - 1, false, "truncated", "no end marker"},
        {"truncated in a record", SIZE_MAX, 0, false, n / 2, false, "truncated", NULL},
        {"truncated to the header", SIZE_MAX, 0, false, 256, false, "truncated", NULL},
        {"truncated header", SIZE_MAX, 0, false, 100, false, "header truncated", NULL},
        {"trailing bytes", SIZE_MAX, 0, false, n + 16, false, "no end marker", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t len = cases[i].len;
        unsigned char *b = calloc(1, len);
        memcpy(b, good, len < n ? len : n);
        if (cases[i].at != SIZE_MAX) {
            if (cases[i].wide)
                put64(b + cases[i].at, cases[i].value);
            else
                b[cases[i].at] = (unsigned char)cases[i].value;
        }
        if (cases[i].fix_crc)
            fix_crc(b);
        check_spit(bad, b, len);
        free(b);
        stoke_dataset *d = (stoke_dataset *)1;
        stoke_status s = stoke_dataset_open(bad, NULL, &d);
        const char *e = stoke_last_error();
        CHECK_MSG(s == STOKE_ERR_FORMAT && d == NULL, "%s: accepted (%s)", cases[i].what,
                  stoke_status_name(s));
        CHECK_MSG(strstr(e, cases[i].needle1) &&
                      (!cases[i].needle2 || strstr(e, cases[i].needle2)) && strstr(e, "bad.rec"),
                  "%s: message \"%s\"", cases[i].what, e);
        if (s != STOKE_OK)
            fprintf(stderr, "%-24s %s\n", cases[i].what, e);
        else
            stoke_dataset_close(d);
    }

    /* A damaged JPEG inside record 3: the file opens (its structure is sound), reading
     * that sample fails naming the file, the sample and the image's byte offset, and
     * the others still read. */
    uint64_t off3 = stoke_rec_get_u64(good + index + 3 * 16),
             len3 = stoke_rec_get_u64(good + index + 3 * 16 + 8);
    unsigned char *b = malloc(n);
    memcpy(b, good, n);
    for (uint64_t k = off3 + len3 / 2; k < off3 + len3 / 2 + 64; k++)
        b[k] = (k & 1) ? 0xD3 : 0xFF; /* restart markers where none are declared */
    check_spit(bad, b, n);
    free(b);
    stoke_dataset *d = open_or_fail(bad, NULL);
    if (d) {
        size_t in = stoke_dataset_get_info(d)->input_bytes;
        unsigned char *px = malloc(in);
        int64_t t;
        CHECK(stoke_dataset_read(d, 2, px, &t) == STOKE_OK);
        CHECK_INT_EQ(stoke_dataset_read(d, 3, px, &t), STOKE_ERR_FORMAT);
        char want[128];
        snprintf(want, sizeof want,
                 "bad.rec: the image at byte %" PRIu64 " (sample 3): corrupt JPEG", off3 + 8);
        CHECK_STR_CONTAINS(stoke_last_error(), want);
        fprintf(stderr, "%s\n", stoke_last_error());
        unsigned char w[40 * 30 * 3];
        CHECK_INT_EQ(d->vt->read_window(d, 3, crop_window, NULL, w, NULL), STOKE_ERR_FORMAT);
        CHECK_STR_CONTAINS(stoke_last_error(), want);
        CHECK(stoke_dataset_read(d, 4, px, &t) == STOKE_OK);
        free(px);
        stoke_dataset_close(d);
    }
    free(good);
}

/* Converting a folder with a damaged JPEG fails naming the file, and leaves no file. */
static void test_convert_damaged(void)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/b/05.jpg", folder);
    size_t n;
    unsigned char *j = check_slurp(p, &n);
    CHECK(j != NULL);
    if (!j)
        return;
    for (size_t k = n / 2; k < n / 2 + 64; k++)
        j[k] = (k & 1) ? 0xD3 : 0xFF;
    check_spit(p, j, n);
    free(j);
    char out[4300];
    snprintf(out, sizeof out, "%s/never.rec", dir);
    stoke_dataset *f = open_or_fail(folder, NULL);
    if (!f)
        return;
    CHECK_INT_EQ(stoke_records_write_as(f, out, STOKE_STORE_JPEG, NULL, NULL), STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "b/05.jpg (sample 8): corrupt JPEG");
    struct stat st;
    CHECK(stat(out, &st) != 0);
    stoke_dataset_close(f);
}

/* A file that shrinks while open: reading a record past the new end is an error naming
 * the file and the sample, never SIGBUS (the reader used to map the file); the index
 * was read on open and stays as checked. */
static void test_shrinks_while_open(void)
{
    size_t n;
    unsigned char *good = check_slurp(jrec, &n);
    CHECK(good != NULL);
    if (!good)
        return;
    check_spit(bad, good, n);
    free(good);
    stoke_dataset *d = open_or_fail(bad, NULL);
    if (!d)
        return;
    unsigned char *px = malloc(stoke_dataset_get_info(d)->input_bytes);
    int64_t t;
    CHECK(stoke_dataset_read(d, 5, px, &t) == STOKE_OK);
    CHECK(truncate(bad, 300) == 0);
    CHECK_INT_EQ(stoke_dataset_read(d, 5, px, &t), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "bad.rec: sample 5: the file ends at byte 300");
    CHECK_STR_CONTAINS(stoke_last_error(), "truncated or rewritten while in use");
    unsigned char w[40 * 30 * 3];
    CHECK_INT_EQ(d->vt->read_window(d, 6, crop_window, NULL, w, NULL), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "bad.rec: sample 6: the file ends");
    int64_t counts[2];
    CHECK_INT_EQ(stoke_dataset_class_counts(d, counts), STOKE_ERR_IO);
    CHECK_STR_CONTAINS(stoke_last_error(), "bad.rec: sample 1: the file ends");
    free(px);
    stoke_dataset_close(d);
}

int main(void)
{
    if (!make_folder()) {
        perror("making the image folder");
        return 1;
    }
    test_round_trip();
    test_corrupt();
    test_convert_damaged();
    test_shrinks_while_open();
    check_rm_rf(dir);
    return CHECK_DONE();
}
