/* decode.c - JPEG (libjpeg-turbo) and PNG (libpng) bytes to the pixels one sample needs
 * (decode.h). JPEG goes through libjpeg's own API rather than TurboJPEG's: in
 * libjpeg-turbo 2.1 (Debian 12) only it offers partial decoding (jpeg_crop_scanline,
 * jpeg_skip_scanlines), TurboJPEG's cropping arrived with its 3.0 API. */
#include "data/decode.h"
#include "core/regular.h"
#include "data/seam.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

/* A file larger than this is not an image stoke will read whole into memory. */
#define DEC_MAX_FILE_BYTES ((off_t)1 << 30)

/* A decoded image: 8-bit, `c` interleaved channels, rows packed. */
typedef struct img_pixels {
    unsigned char *data;
    int w, h, c;
} img_pixels;

stoke_status stoke_image_load_file(const char *path, int64_t i, unsigned char **buf, size_t *len)
{
    int fd;
    struct stat st;
    stoke_status os = stoke_open_regular(path, &fd, &st);
    if (os != STOKE_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", stoke_last_error());
        return stoke_fail(os, "%s (sample %lld)", why, (long long)i);
    }
    if (st.st_size > DEC_MAX_FILE_BYTES) {
        close(fd);
        return stoke_fail(STOKE_ERR_IO, "%s (sample %lld): larger than 1 GiB", path, (long long)i);
    }
    size_t size = (size_t)st.st_size;
    unsigned char *b = malloc(size ? size : 1);
    if (!b) {
        close(fd);
        return stoke_fail(STOKE_ERR_NOMEM, "%s (sample %lld): out of memory", path, (long long)i);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, b + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int err = errno;
            free(b);
            close(fd);
            return stoke_fail(STOKE_ERR_IO, "%s (sample %lld): read failed at offset %zu: %s", path,
                              (long long)i, got, r < 0 ? strerror(err) : "file shrank");
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = size;
    return STOKE_OK;
}

static bool dec_size_ok(long long w, long long h)
{
    return w > 0 && h > 0 && w * h <= STOKE_IMAGE_MAX_PIXELS;
}

int stoke_images_jpeg_denom(int bw, int bh, int ow, int oh)
{
    for (int denom = 8; denom > 1; denom /= 2)
        if ((bw + denom - 1) / denom >= ow && (bh + denom - 1) / denom >= oh)
            return denom;
    return 1;
}

void stoke_image_window_fit(void *ctx, int src_w, int src_h, stoke_image_window *w)
{
    const int *size = ctx;
    w->x = stoke_resize_whole(src_w, size[0]);
    w->y = stoke_resize_whole(src_h, size[1]);
    w->x0 = w->y0 = 0;
}

/* ---- JPEG -------------------------------------------------------------------------- */

/* libjpeg reports errors by longjmp: everything that must survive one lives here,
 * behind a pointer, so no local variable is clobbered. */
typedef struct dec_jpeg_job {
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr em;
    jmp_buf jb;
    char err[JMSG_LENGTH_MAX + 32];
    bool header_read;
    unsigned char *px; /* the decoded region */
    JSAMPROW *rows;
} dec_jpeg_job;

static void dec_jpeg_error(j_common_ptr ci)
{
    dec_jpeg_job *j = (dec_jpeg_job *)ci->client_data;
    char msg[JMSG_LENGTH_MAX];
    ci->err->format_message(ci, msg);
    snprintf(j->err, sizeof j->err, "%s: %s", j->header_read ? "corrupt JPEG" : "bad JPEG header",
             msg);
    longjmp(j->jb, 1);
}

/* Warnings (corrupt entropy data, a premature end) are errors: libjpeg would otherwise
 * go on with gray filler. Trace messages (level > 0) are dropped. */
static void dec_jpeg_message(j_common_ptr ci, int level)
{
    if (level < 0)
        dec_jpeg_error(ci);
}

/* One axis of the window in the coordinates of the image decoded at 1/denom (its
 * coordinate 0 moved to the image's first pixel): the box scaled, the filter's limits
 * widened to whole scaled pixels. */
static void dec_scale_axis(stoke_resize_axis *a, int *base, int denom, int scaled_size)
{
    if (denom == 1)
        return;
    a->in0 = (a->in0 + *base) / denom;
    a->in1 = (a->in1 + *base) / denom;
    a->lo = (a->lo + *base) / denom;
    a->hi = (a->hi + *base + denom - 1) / denom;
    if (a->hi > scaled_size)
        a->hi = scaled_size;
    *base = 0;
}

static bool dec_axis_ok(const stoke_resize_axis *a, int base, int size)
{
    return a->out >= 1 && a->virt >= 1 && a->off >= 0 && a->off <= a->virt - a->out &&
           a->in1 > a->in0 && a->lo + base >= 0 && a->hi + base <= size && a->lo < a->hi;
}

static bool dec_window_ok(const stoke_image_window *w, int width, int height)
{
    return dec_axis_ok(&w->x, w->x0, width) && dec_axis_ok(&w->y, w->y0, height);
}

static bool dec_jpeg_run(dec_jpeg_job *j, const unsigned char *buf, size_t len, int c,
                         stoke_image_window_fn fn, void *ctx, unsigned char *out)
{
    struct jpeg_decompress_struct *ci = &j->ci;
    if (setjmp(j->jb))
        return false;
    jpeg_mem_src(ci, buf, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    j->header_read = true;
    if (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK) {
        snprintf(j->err, sizeof j->err, "CMYK JPEG images are not supported");
        return false;
    }
    int W = (int)ci->image_width, H = (int)ci->image_height;
    if (!dec_size_ok(W, H)) {
        snprintf(j->err, sizeof j->err, "image size %dx%d is invalid or above the %lld-pixel limit",
                 W, H, STOKE_IMAGE_MAX_PIXELS);
        return false;
    }
    stoke_image_window w = {0};
    fn(ctx, W, H, &w);
    if (!dec_window_ok(&w, W, H)) {
        snprintf(j->err, sizeof j->err, "no valid window in a %dx%d image", W, H);
        return false;
    }
    /* the scale that leaves the window at least its resize's resolution */
    int bw = (int)ceil(w.x.in1 - w.x.in0), bh = (int)ceil(w.y.in1 - w.y.in0);
    ci->scale_num = 1;
    ci->scale_denom = (unsigned)stoke_images_jpeg_denom(bw, bh, w.x.virt, w.y.virt);
    ci->out_color_space = c == 3 ? JCS_RGB : JCS_GRAYSCALE;
    ci->dct_method = JDCT_ISLOW; /* Pillow's and TurboJPEG's ACCURATEDCT */
    jpeg_start_decompress(ci);
    int SW = (int)ci->output_width, SH = (int)ci->output_height;
    dec_scale_axis(&w.x, &w.x0, (int)ci->scale_denom, SW);
    dec_scale_axis(&w.y, &w.y0, (int)ci->scale_denom, SH);
    int x0, x1, y0, y1;
    stoke_resize_span(&w.x, &x0, &x1);
    stoke_resize_span(&w.y, &y0, &y1);
    x0 += w.x0, x1 += w.x0, y0 += w.y0, y1 += w.y0; /* image pixels */
    if (!stoke_data_seam_get()->jpeg_partial)
        x0 = 0, x1 = SW, y0 = 0, y1 = SH;
    /* Only the columns and rows the resize reads: the crop starts at an iMCU boundary
     * (libjpeg widens it); rows above are skipped (entropy-decoded, not transformed),
     * rows below are never decoded. libjpeg upsamples chroma at a crop's edges as at
     * the image's (replicating, not interpolating from the neighbour): one iMCU more
     * on each side keeps the columns the resize reads the whole decode's, bit for bit. */
    int imcu = ci->max_h_samp_factor * ci->min_DCT_scaled_size;
    int cx0 = x0 - imcu < 0 ? 0 : x0 - imcu, cx1 = x1 + imcu > SW ? SW : x1 + imcu;
    JDIMENSION xoff = (JDIMENSION)cx0, cw = (JDIMENSION)(cx1 - cx0);
    if (cx0 > 0 || cx1 < SW)
        jpeg_crop_scanline(ci, &xoff, &cw);
    if (y0 > 0 && jpeg_skip_scanlines(ci, (JDIMENSION)y0) != (JDIMENSION)y0) {
        snprintf(j->err, sizeof j->err, "corrupt JPEG: fewer rows than its header's %d", SH);
        return false;
    }
    size_t rowbytes = (size_t)cw * (size_t)c;
    int rh = y1 - y0;
    j->px = malloc(rowbytes * (size_t)rh);
    j->rows = malloc(sizeof *j->rows * (size_t)rh);
    if (!j->px || !j->rows) {
        snprintf(j->err, sizeof j->err, "out of memory");
        return false;
    }
    for (int r = 0; r < rh; r++)
        j->rows[r] = j->px + (size_t)r * rowbytes;
    while ((int)ci->output_scanline < y1) {
        JDIMENSION at = ci->output_scanline - (JDIMENSION)y0;
        if (jpeg_read_scanlines(ci, j->rows + at, (JDIMENSION)rh - at) == 0) {
            snprintf(j->err, sizeof j->err, "corrupt JPEG: no data for row %u",
                     (unsigned)ci->output_scanline);
            return false;
        }
    }
    if (y1 == SH && x0 == 0 && x1 == SW)
        jpeg_finish_decompress(ci); /* reads to the end-of-image marker */
    else
        jpeg_abort_decompress(ci);
    if (!stoke_resize_box_u8(j->px, (int)cw, rh, (int)xoff - w.x0, y0 - w.y0, &w.x, &w.y, out, c)) {
        snprintf(j->err, sizeof j->err, "out of memory resizing");
        return false;
    }
    return true;
}

/* A JPEG whose data stop before the end-of-image marker is truncated. Decoding only
 * the rows a crop needs would not see that, so it is checked here, for every read alike:
 * the marker must be in the file's last 64 KiB (trailing bytes after it are allowed,
 * as libjpeg allows them; entropy-coded data cannot contain FF D9). */
static bool dec_jpeg_has_eoi(const unsigned char *buf, size_t len)
{
    size_t stop = len > 65536 ? len - 65536 : 0;
    for (size_t k = len; k >= stop + 2; k--)
        if (buf[k - 2] == 0xFF && buf[k - 1] == 0xD9)
            return true;
    return false;
}

static stoke_status dec_jpeg(const char *name, int64_t i, const unsigned char *buf, size_t len,
                             int c, stoke_image_window_fn fn, void *ctx, unsigned char *out)
{
    if (!dec_jpeg_has_eoi(buf, len))
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s (sample %lld): corrupt JPEG: truncated (no end-of-image marker "
                          "in its last 64 KiB)",
                          name, (long long)i);
    dec_jpeg_job *j = calloc(1, sizeof *j);
    if (!j)
        return stoke_fail(STOKE_ERR_NOMEM, "%s (sample %lld): out of memory", name, (long long)i);
    j->ci.err = jpeg_std_error(&j->em);
    j->em.error_exit = dec_jpeg_error;
    j->em.emit_message = dec_jpeg_message;
    j->ci.client_data = j;
    jpeg_create_decompress(&j->ci);
    bool ok = dec_jpeg_run(j, buf, len, c, fn, ctx, out);
    jpeg_destroy_decompress(&j->ci);
    free(j->px);
    free(j->rows);
    stoke_status st =
        ok ? STOKE_OK
           : stoke_fail(STOKE_ERR_FORMAT, "%s (sample %lld): %s", name, (long long)i, j->err);
    free(j);
    return st;
}

/* ---- PNG --------------------------------------------------------------------------- */

/* libpng reports errors by longjmp: everything that must survive one lives here,
 * behind a pointer, so no local variable is clobbered. */
typedef struct dec_png_job {
    const unsigned char *buf;
    size_t len, pos;
    int want_c;
    char err[200];
    png_bytep *rows;
    img_pixels px;
} dec_png_job;

static void dec_png_error(png_structp p, png_const_charp msg)
{
    dec_png_job *j = png_get_error_ptr(p);
    snprintf(j->err, sizeof j->err, "%s", msg);
    png_longjmp(p, 1);
}

static void dec_png_warning(png_structp p, png_const_charp msg)
{
    (void)p; /* warnings are about ancillary chunks: the pixels are fine; never print */
    (void)msg;
}

static void dec_png_read(png_structp p, png_bytep out, size_t n)
{
    dec_png_job *j = png_get_io_ptr(p);
    if (n > j->len - j->pos)
        png_error(p, "file is truncated");
    memcpy(out, j->buf + j->pos, n);
    j->pos += n;
}

/* Decodes to 8 bits and 1 (gray) or 3 (RGB) channels, whatever is stored: palettes and
 * low bit depths expanded, 16-bit samples keep their high byte (as Pillow does for
 * 16-bit RGB), alpha dropped (as Pillow's convert("RGB") does). An RGB image asked for
 * in gray comes back with 3 channels; the caller converts it. */
static bool dec_png_run(png_structp p, png_infop info, dec_png_job *j)
{
    if (setjmp(png_jmpbuf(p)))
        return false;
    png_set_read_fn(p, j, dec_png_read);
    png_read_info(p, info);
    png_uint_32 w = png_get_image_width(p, info), h = png_get_image_height(p, info);
    int depth = png_get_bit_depth(p, info), type = png_get_color_type(p, info);
    if ((long long)w * h > STOKE_IMAGE_MAX_PIXELS) {
        snprintf(j->err, sizeof j->err, "image size %ux%u is above the %lld-pixel limit",
                 (unsigned)w, (unsigned)h, STOKE_IMAGE_MAX_PIXELS);
        return false;
    }
    png_set_expand(p);
    if (depth == 16)
        png_set_strip_16(p);
    png_set_strip_alpha(p);
    bool color = (type & PNG_COLOR_MASK_COLOR) != 0;
    if (!color && j->want_c == 3)
        png_set_gray_to_rgb(p);
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    int c = png_get_channels(p, info);
    size_t rowbytes = png_get_rowbytes(p, info);
    if ((c != 1 && c != 3) || rowbytes != (size_t)w * (size_t)c) {
        snprintf(j->err, sizeof j->err, "unexpected layout after conversion (%d channels)", c);
        return false;
    }
    j->px.w = (int)w;
    j->px.h = (int)h;
    j->px.c = c;
    j->px.data = malloc(rowbytes * h);
    j->rows = malloc(sizeof *j->rows * h);
    if (!j->px.data || !j->rows) {
        snprintf(j->err, sizeof j->err, "out of memory");
        return false;
    }
    for (png_uint_32 y = 0; y < h; y++)
        j->rows[y] = j->px.data + (size_t)y * rowbytes;
    png_read_image(p, j->rows);
    png_read_end(p, NULL); /* checks the CRCs of the chunks after the image data */
    return true;
}

static stoke_status dec_png_decode(const char *path, int64_t i, const unsigned char *buf,
                                   size_t len, int c, img_pixels *px)
{
    dec_png_job j = {.buf = buf, .len = len, .want_c = c};
    png_structp p =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &j, dec_png_error, dec_png_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!p || !info) {
        png_destroy_read_struct(p ? &p : NULL, NULL, NULL);
        return stoke_fail(STOKE_ERR_NOMEM, "%s (sample %lld): cannot start the PNG decoder", path,
                          (long long)i);
    }
    bool ok = dec_png_run(p, info, &j);
    png_destroy_read_struct(&p, &info, NULL);
    free(j.rows);
    if (!ok) {
        free(j.px.data);
        return stoke_fail(STOKE_ERR_FORMAT, "%s (sample %lld): corrupt PNG: %s", path, (long long)i,
                          j.err);
    }
    *px = j.px;
    return STOKE_OK;
}

/* RGB to gray in place with Pillow's convert("L") arithmetic (ITU-R 601-2 luma in 16.16
 * fixed point), so a gray dataset matches what a Pillow pipeline sees; libpng's own
 * conversion uses other coefficients. */
static void dec_rgb_to_gray(img_pixels *px)
{
    size_t n = (size_t)px->w * (size_t)px->h;
    unsigned char *d = px->data;
    for (size_t k = 0; k < n; k++) {
        const unsigned char *s = d + 3 * k;
        d[k] = (unsigned char)((s[0] * 19595u + s[1] * 38470u + s[2] * 7471u + 0x8000u) >> 16);
    }
    px->c = 1;
}

/* ---- Both -------------------------------------------------------------------------- */

stoke_status stoke_image_decode(const char *name, int64_t i, const unsigned char *buf, size_t len,
                                int c, stoke_image_window_fn fn, void *ctx, unsigned char *out)
{
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF)
        return dec_jpeg(name, i, buf, len, c, fn, ctx, out);
    if (!(len >= 8 && memcmp(buf, png_sig, 8) == 0))
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s (sample %lld): not a JPEG or PNG file (%zu bytes, no "
                          "JPEG or PNG signature)",
                          name, (long long)i, len);
    img_pixels px = {0};
    stoke_status st = dec_png_decode(name, i, buf, len, c, &px);
    if (st != STOKE_OK)
        return st;
    if (px.c == 3 && c == 1)
        dec_rgb_to_gray(&px);
    stoke_image_window w = {0};
    fn(ctx, px.w, px.h, &w);
    if (!dec_window_ok(&w, px.w, px.h))
        st = stoke_fail(STOKE_ERR_FORMAT, "%s (sample %lld): no valid window in a %dx%d image",
                        name, (long long)i, px.w, px.h);
    else if (!stoke_resize_box_u8(px.data, px.w, px.h, -w.x0, -w.y0, &w.x, &w.y, out, c))
        st = stoke_fail(STOKE_ERR_NOMEM, "%s (sample %lld): out of memory resizing", name,
                        (long long)i);
    free(px.data);
    return st;
}

/* The JPEG's header alone: libjpeg reads the markers up to the frame's size, no pixel. */
static bool dec_jpeg_header(dec_jpeg_job *j, const unsigned char *buf, size_t len)
{
    if (setjmp(j->jb))
        return false;
    jpeg_mem_src(&j->ci, buf, (unsigned long)len);
    jpeg_read_header(&j->ci, TRUE);
    return true;
}

stoke_status stoke_image_size(const char *name, int64_t i, const unsigned char *buf, size_t len,
                              int *width, int *height)
{
    static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    long long w = 0, h = 0;
    if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) {
        dec_jpeg_job *j = calloc(1, sizeof *j);
        if (!j)
            return stoke_fail(STOKE_ERR_NOMEM, "%s (sample %lld): out of memory", name,
                              (long long)i);
        j->ci.err = jpeg_std_error(&j->em);
        j->em.error_exit = dec_jpeg_error;
        j->em.emit_message = dec_jpeg_message;
        j->ci.client_data = j;
        jpeg_create_decompress(&j->ci);
        bool ok = dec_jpeg_header(j, buf, len);
        w = j->ci.image_width;
        h = j->ci.image_height;
        jpeg_destroy_decompress(&j->ci);
        stoke_status st =
            ok ? STOKE_OK
               : stoke_fail(STOKE_ERR_FORMAT, "%s (sample %lld): %s", name, (long long)i, j->err);
        free(j);
        if (st != STOKE_OK)
            return st;
    } else if (len >= 8 && memcmp(buf, png_sig, 8) == 0) {
        /* IHDR is the first chunk (PNG spec 5.6): its width and height, big-endian */
        if (len < 24 || memcmp(buf + 12, "IHDR", 4) != 0)
            return stoke_fail(STOKE_ERR_FORMAT, "%s (sample %lld): corrupt PNG: no IHDR chunk",
                              name, (long long)i);
        w = (long long)buf[16] << 24 | buf[17] << 16 | buf[18] << 8 | buf[19];
        h = (long long)buf[20] << 24 | buf[21] << 16 | buf[22] << 8 | buf[23];
    } else {
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s (sample %lld): not a JPEG or PNG file (%zu bytes, no JPEG or PNG "
                          "signature)",
                          name, (long long)i, len);
    }
    if (!dec_size_ok(w, h))
        return stoke_fail(STOKE_ERR_FORMAT,
                          "%s (sample %lld): image size %lldx%lld is invalid or above the "
                          "%lld-pixel limit",
                          name, (long long)i, w, h, STOKE_IMAGE_MAX_PIXELS);
    *width = (int)w;
    *height = (int)h;
    return STOKE_OK;
}
