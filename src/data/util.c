/* util.c - the helpers the file readers share (util_impl.h): reading a file by offset, byte
 * swapping, decoding one element, and deciding what scalar targets are. Apart from
 * dataset.c so the readers depend on it and dataset.c on them, without a cycle. */
#include "data/util_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/regular.h"

/* ---- helpers shared by the readers (util_impl.h) ---------------------------------- */

stoke_status stoke_rfile_open(const char *path, stoke_rfile *f)
{
    f->fd = -1;
    f->size = 0;
    struct stat st;
    stoke_status s = stoke_open_regular(path, &f->fd, &st);
    if (s == STOKE_OK)
        f->size = (uint64_t)st.st_size;
    return s;
}

void stoke_rfile_close(stoke_rfile *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    f->size = 0;
}

/* "PATH: sample I: " or "PATH: ", for the messages below. */
static void where(char *buf, size_t size, const char *path, int64_t sample)
{
    if (sample >= 0)
        snprintf(buf, size, "%s: sample %" PRId64, path, sample);
    else
        snprintf(buf, size, "%s", path);
}

stoke_status stoke_rfile_readv(const stoke_rfile *f, const char *path, int64_t sample,
                               const stoke_rfile_part *parts, int nparts, uint64_t off)
{
    struct iovec iov[4];
    size_t total = 0;
    int n = 0;
    for (int k = 0; k < nparts && k < 4; k++)
        if (parts[k].n) {
            iov[n++] = (struct iovec){parts[k].buf, parts[k].n};
            total += parts[k].n;
        }
    size_t got = 0;
    struct iovec *v = iov;
    while (got < total) {
        ssize_t r = preadv(f->fd, v, n, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = errno;
            char at[1200];
            where(at, sizeof at, path, sample);
            if (r < 0)
                return stoke_fail(STOKE_ERR_IO,
                                  "%s: cannot read %zu bytes at offset %" PRIu64 ": %s", at, total,
                                  off, strerror(e));
            struct stat st;
            long long now = fstat(f->fd, &st) == 0 ? (long long)st.st_size : -1;
            return stoke_fail(STOKE_ERR_IO,
                              "%s: the file ends at byte %lld, before the %zu bytes at offset "
                              "%" PRIu64 " (it held %" PRIu64
                              " bytes when opened: it was truncated or rewritten while in use)",
                              at, now, total, off, f->size);
        }
        got += (size_t)r;
        /* a short read (rare for a regular file): go on after what arrived */
        while (n > 0 && (size_t)r >= v->iov_len) {
            r -= (ssize_t)v->iov_len;
            v++;
            n--;
        }
        if (n > 0) {
            v->iov_base = (char *)v->iov_base + r;
            v->iov_len -= (size_t)r;
        }
    }
    return STOKE_OK;
}

stoke_status stoke_rfile_read(const stoke_rfile *f, const char *path, int64_t sample, void *buf,
                              size_t n, uint64_t off)
{
    stoke_rfile_part p = {buf, n};
    return stoke_rfile_readv(f, path, sample, &p, 1, off);
}

void stoke_swap_in_place(void *p, size_t n, size_t elem_size)
{
    /* 2, 4, 8: each element is read whole before it is written, so in place is safe */
    if (elem_size == 2 || elem_size == 4 || elem_size == 8) {
        stoke_copy_swapped(p, p, n, elem_size, true);
        return;
    }
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++, b += elem_size)
        for (size_t lo = 0, hi = elem_size ? elem_size - 1 : 0; lo < hi; lo++, hi--) {
            unsigned char t = b[lo];
            b[lo] = b[hi];
            b[hi] = t;
        }
}

void stoke_copy_swapped(void *dst, const void *src, size_t n, size_t elem_size, bool swap)
{
    if (!swap || elem_size == 1) {
        memcpy(dst, src, n * elem_size);
        return;
    }
    unsigned char *d = dst;
    const unsigned char *s = src;
    switch (elem_size) {
    case 2:
        for (size_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, s + 2 * i, 2);
            v = __builtin_bswap16(v);
            memcpy(d + 2 * i, &v, 2);
        }
        break;
    case 4:
        for (size_t i = 0; i < n; i++) {
            uint32_t v;
            memcpy(&v, s + 4 * i, 4);
            v = __builtin_bswap32(v);
            memcpy(d + 4 * i, &v, 4);
        }
        break;
    case 8:
        for (size_t i = 0; i < n; i++) {
            uint64_t v;
            memcpy(&v, s + 8 * i, 8);
            v = __builtin_bswap64(v);
            memcpy(d + 8 * i, &v, 8);
        }
        break;
    default:
        for (size_t i = 0; i < n; i++)
            for (size_t b = 0; b < elem_size; b++)
                d[i * elem_size + b] = s[i * elem_size + elem_size - 1 - b];
    }
}

/* IEEE half to double, by hand: C11 has no portable _Float16. */
static double half_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    double m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

double stoke_value_as_double(const void *p, stoke_dtype t)
{
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        int64_t i64;
        float f32;
        double f64;
    } v;
    size_t n = stoke_dtype_size(t);
    if (!n)
        return NAN;
    memcpy(&v, p, n);
    switch (t) {
    case STOKE_U8: return v.u8;
    case STOKE_I8: return v.i8;
    case STOKE_U16: return v.u16;
    case STOKE_I16: return v.i16;
    case STOKE_U32: return v.u32;
    case STOKE_I32: return v.i32;
    case STOKE_I64: return (double)v.i64;
    case STOKE_F16: return half_to_double(v.u16);
    case STOKE_BF16: {
        uint32_t bits = (uint32_t)v.u16 << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    case STOKE_F32: return v.f32;
    case STOKE_F64: return v.f64;
    case STOKE_DTYPE_COUNT: break;
    }
    return NAN;
}

bool stoke_dtype_is_integer(stoke_dtype t)
{
    return t == STOKE_U8 || t == STOKE_I8 || t == STOKE_U16 || t == STOKE_I16 || t == STOKE_U32 ||
           t == STOKE_I32 || t == STOKE_I64;
}

bool stoke_class_of(const void *p, stoke_dtype t, int64_t limit, int64_t *out)
{
    if (t == STOKE_I64) { /* beyond 2^53 a double would round */
        int64_t v;
        memcpy(&v, p, 8);
        if (v < 0 || v >= limit)
            return false;
        *out = v;
        return true;
    }
    double v = stoke_value_as_double(p, t);
    if (!(v >= 0) || v >= (double)limit || v != floor(v))
        return false;
    *out = (int64_t)v;
    return true;
}

stoke_status stoke_scalar_targets(const char *path, const unsigned char *data, int64_t count,
                                  stoke_dtype t, bool swap, bool regression,
                                  stoke_target_kind *kind, int64_t *num_classes)
{
    *kind = STOKE_TARGET_SCALAR;
    *num_classes = 0;
    if (regression)
        return STOKE_OK;
    size_t es = stoke_dtype_size(t);
    bool integer = stoke_dtype_is_integer(t);
    int64_t max = -1;
    for (int64_t i = 0; i < count; i++) {
        unsigned char v[8];
        stoke_copy_swapped(v, data + (size_t)i * es, 1, es, swap);
        int64_t c;
        if (!stoke_class_of(v, t, STOKE_MAX_CLASSES, &c)) {
            if (!integer)
                return STOKE_OK; /* not whole numbers: regression targets */
            return stoke_fail(STOKE_ERR_FORMAT,
                              "%s: sample %" PRId64 ": label %.0f is not a "
                              "class index (0 to %d)",
                              path, i, stoke_value_as_double(v, t), STOKE_MAX_CLASSES - 1);
        }
        if (c > max)
            max = c;
    }
    if (count == 0 && !integer)
        return STOKE_OK;
    *kind = STOKE_TARGET_CLASS;
    *num_classes = max + 1;
    return STOKE_OK;
}
