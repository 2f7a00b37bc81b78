/* resize.c - Pillow's resampling (ImagingResample with the BILINEAR filter), written
 * out because no Debian C library offers it with the same arithmetic: a separable
 * triangle filter whose support grows with the downscale factor, so shrinking averages
 * every source pixel (area-correct) instead of skipping, with 22-bit fixed-point
 * weights. The horizontal pass runs first, as in Pillow, so results match Pillow's
 * resize().
 *
 * The AVX2 path does the same integer sums 8 lanes at a time (32-bit products, as the
 * scalar code), so it is bit-exact with it: integer addition does not care about order.
 * The AVX-512 path does them 16 lanes at a time, the same way. 16-bit weights
 * (madd_epi16, as Pillow-SIMD does) would be faster but round differently from
 * Pillow. */
#include "data/resize.h"
#include "core/isa.h"
#include "data/seam.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define RZ_PRECISION_BITS (32 - 8 - 2)

enum { RZ_SCALAR, RZ_AVX2, RZ_AVX512 };

/* The path the test seam asks for (data/seam.h: -1, the best, unless a test set it),
 * lowered to what the CPU and the cap allow. AVX512BW has AVX512F's cap level
 * (avx512_core), so the F bit carries the cap; isa.c has no BW bit, so its presence is
 * asked here (gcc and clang check the OS's zmm state for it). */
static int rz_level(void)
{
#if defined(__x86_64__)
    unsigned usable = stoke_isa_usable();
    int level = stoke_data_seam_get()->resize_isa;
    int want = level < 0 ? RZ_AVX512 : level;
    if (want >= RZ_AVX512 && (usable & STOKE_ISA_AVX512F) && __builtin_cpu_supports("avx512bw"))
        return RZ_AVX512;
    if (want >= RZ_AVX2 && (usable & STOKE_ISA_AVX2))
        return RZ_AVX2;
#endif
    return RZ_SCALAR;
}

const char *stoke_resize_path(void)
{
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    return names[rz_level()];
}

typedef struct rz_coeffs {
    int ksize;
    int *bounds; /* per output pixel: first source index, count */
    int *k;      /* per output pixel: ksize fixed-point weights */
} rz_coeffs;

static double rz_triangle(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Output pixel xx's first source coordinate and count: Pillow's precompute_coeffs with
 * a box (center = in0 + (off + xx + 0.5) * scale), the filter clipped to [lo, hi). */
static void rz_bound(const stoke_resize_axis *a, double scale, double support, int xx,
                     double *center, int *xmin, int *xmax)
{
    *center = a->in0 + (a->off + xx + 0.5) * scale;
    int lo = (int)(*center - support + 0.5), hi = (int)(*center + support + 0.5);
    *xmin = lo < a->lo ? a->lo : lo;
    *xmax = (hi > a->hi ? a->hi : hi) - *xmin;
}

static double rz_scale(const stoke_resize_axis *a) { return (a->in1 - a->in0) / a->virt; }

static bool rz_coeffs_make(const stoke_resize_axis *a, int origin, rz_coeffs *co)
{
    double scale = rz_scale(a);
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1, out_size = a->out;
    co->ksize = ksize;
    co->bounds = malloc(sizeof(int) * 2 * (size_t)out_size);
    co->k = malloc(sizeof(int) * (size_t)ksize * (size_t)out_size);
    double *w = malloc(sizeof(double) * (size_t)ksize);
    if (!co->bounds || !co->k || !w) {
        free(w);
        return false;
    }
    for (int xx = 0; xx < out_size; xx++) {
        double center, ww = 0.0, ss = 1.0 / filterscale;
        int xmin, xmax;
        rz_bound(a, scale, support, xx, &center, &xmin, &xmax);
        for (int x = 0; x < xmax; x++) {
            w[x] = rz_triangle((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        int *k = co->k + (size_t)xx * ksize;
        for (int x = 0; x < ksize; x++) {
            double v = x < xmax && ww != 0.0 ? w[x] / ww : 0.0;
            k[x] = (int)(v < 0 ? -0.5 + v * (1 << RZ_PRECISION_BITS)
                               : 0.5 + v * (1 << RZ_PRECISION_BITS));
        }
        /* the passes index the buffer, whose first pixel is coordinate `origin` */
        co->bounds[2 * xx] = xmin - origin;
        co->bounds[2 * xx + 1] = xmax < 0 ? 0 : xmax;
    }
    free(w);
    return true;
}

void stoke_resize_span(const stoke_resize_axis *a, int *first, int *end)
{
    double scale = rz_scale(a), support = scale < 1.0 ? 1.0 : scale, c;
    int x0, n0, x1, n1;
    rz_bound(a, scale, support, 0, &c, &x0, &n0);
    rz_bound(a, scale, support, a->out - 1, &c, &x1, &n1);
    *first = x0;
    *end = x1 + (n1 < 0 ? 0 : n1);
}

stoke_resize_axis stoke_resize_whole(int in, int out)
{
    return (stoke_resize_axis){
        .in0 = 0, .in1 = in, .lo = 0, .hi = in, .virt = out, .off = 0, .out = out};
}

static void rz_coeffs_free(rz_coeffs *co)
{
    free(co->bounds);
    free(co->k);
}

static unsigned char rz_clip8(int v)
{
    v >>= RZ_PRECISION_BITS;
    return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Source rows [y0, y1) of `in`, horizontally, into tmp (y1 - y0 rows of ow * c). */
static void rz_horiz_scalar(const unsigned char *in, int iw, unsigned char *tmp, int ow, int c,
                            int y0, int y1, const rz_coeffs *hx)
{
    for (int y = y0; y < y1; y++) {
        const unsigned char *row = in + (size_t)y * iw * c;
        unsigned char *o = tmp + (size_t)(y - y0) * ow * c;
        for (int xx = 0; xx < ow; xx++) {
            int xmin = hx->bounds[2 * xx], xn = hx->bounds[2 * xx + 1];
            const int *k = hx->k + (size_t)xx * hx->ksize;
            for (int ch = 0; ch < c; ch++) {
                int ss = 1 << (RZ_PRECISION_BITS - 1);
                for (int x = 0; x < xn; x++)
                    ss += row[(size_t)(x + xmin) * c + ch] * k[x];
                o[(size_t)xx * c + ch] = rz_clip8(ss);
            }
        }
    }
}

/* The oh output rows from src, whose row 0 is source row y0. */
static void rz_vert_scalar(const unsigned char *src, unsigned char *out, size_t stride, int oh,
                           int y0, const rz_coeffs *vy)
{
    for (int yy = 0; yy < oh; yy++) {
        int ymin = vy->bounds[2 * yy] - y0, yn = vy->bounds[2 * yy + 1];
        const int *k = vy->k + (size_t)yy * vy->ksize;
        unsigned char *o = out + (size_t)yy * stride;
        for (size_t xc = 0; xc < stride; xc++) {
            int ss = 1 << (RZ_PRECISION_BITS - 1);
            for (int y = 0; y < yn; y++)
                ss += src[(size_t)(y + ymin) * stride + xc] * k[y];
            o[xc] = rz_clip8(ss);
        }
    }
}

#if defined(__x86_64__)
/* Eight 22-bit fixed-point sums to bytes: the shift and clamp of rz_clip8 (packus
 * saturates at 0 and 255). */
__attribute__((target("avx2"))) static inline void rz_store8(unsigned char *o, __m256i acc)
{
    __m256i v = _mm256_srai_epi32(acc, RZ_PRECISION_BITS);
    v = _mm256_packus_epi32(v, v); /* per 128-bit lane: a0..a3 a0..a3 | a4..a7 a4..a7 */
    v = _mm256_packus_epi16(v, v);
    v = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    _mm_storel_epi64((__m128i *)o, _mm256_castsi256_si128(v));
}

/* The horizontal pass 8 rows at a time: the rows are transposed (each source byte
 * column becomes 8 contiguous bytes, one per row), so each output value's taps are
 * 8-lane vectors, as in the vertical pass; the results are transposed back. A gather
 * per tap instead measured no faster than the scalar loop. */
__attribute__((target("avx2"))) static void rz_transpose_in(const unsigned char *in,
                                                            size_t rowbytes, unsigned char *t)
{
    size_t x = 0;
    for (; x + 16 <= rowbytes; x += 16) {
        __m128i a[8], u[8];
        for (int r = 0; r < 8; r++)
            a[r] = _mm_loadu_si128((const __m128i *)(in + (size_t)r * rowbytes + x));
        for (int r = 0; r < 8; r += 2) { /* u[r]: columns 0-7, u[r+1]: 8-15, rows r, r+1 */
            u[r] = _mm_unpacklo_epi8(a[r], a[r + 1]);
            u[r + 1] = _mm_unpackhi_epi8(a[r], a[r + 1]);
        }
        /* 4 rows per column: columns 0-3, 4-7, 8-11, 12-15 of rows 0-3, then of 4-7 */
        __m128i v0 = _mm_unpacklo_epi16(u[0], u[2]), v1 = _mm_unpackhi_epi16(u[0], u[2]);
        __m128i v2 = _mm_unpacklo_epi16(u[1], u[3]), v3 = _mm_unpackhi_epi16(u[1], u[3]);
        __m128i v4 = _mm_unpacklo_epi16(u[4], u[6]), v5 = _mm_unpackhi_epi16(u[4], u[6]);
        __m128i v6 = _mm_unpacklo_epi16(u[5], u[7]), v7 = _mm_unpackhi_epi16(u[5], u[7]);
        __m128i *o = (__m128i *)(void *)(t + x * 8);
        _mm_storeu_si128(o + 0, _mm_unpacklo_epi32(v0, v4));
        _mm_storeu_si128(o + 1, _mm_unpackhi_epi32(v0, v4));
        _mm_storeu_si128(o + 2, _mm_unpacklo_epi32(v1, v5));
        _mm_storeu_si128(o + 3, _mm_unpackhi_epi32(v1, v5));
        _mm_storeu_si128(o + 4, _mm_unpacklo_epi32(v2, v6));
        _mm_storeu_si128(o + 5, _mm_unpackhi_epi32(v2, v6));
        _mm_storeu_si128(o + 6, _mm_unpacklo_epi32(v3, v7));
        _mm_storeu_si128(o + 7, _mm_unpackhi_epi32(v3, v7));
    }
    for (; x < rowbytes; x++)
        for (int r = 0; r < 8; r++)
            t[x * 8 + r] = in[(size_t)r * rowbytes + x];
}

/* ob holds 8 bytes (rows 0-7) per output value; out gets the 8 rows of n values. */
__attribute__((target("avx2"))) static void rz_transpose_out(const unsigned char *ob, size_t n,
                                                             unsigned char *out)
{
    const __m128i pair = _mm_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    for (size_t j = 0; j < n; j += 16) {
        __m128i w[8], a[8], b[8], row[8];
        for (int m = 0; m < 8; m++) /* word r of w[m]: row r of values j+2m, j+2m+1 */
            w[m] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(ob + (j + 2 * m) * 8)), pair);
        for (int m = 0; m < 8; m += 2) {
            a[m] = _mm_unpacklo_epi16(w[m], w[m + 1]);
            a[m + 1] = _mm_unpackhi_epi16(w[m], w[m + 1]);
        }
        b[0] = _mm_unpacklo_epi32(a[0], a[2]), b[1] = _mm_unpackhi_epi32(a[0], a[2]);
        b[2] = _mm_unpacklo_epi32(a[1], a[3]), b[3] = _mm_unpackhi_epi32(a[1], a[3]);
        b[4] = _mm_unpacklo_epi32(a[4], a[6]), b[5] = _mm_unpackhi_epi32(a[4], a[6]);
        b[6] = _mm_unpacklo_epi32(a[5], a[7]), b[7] = _mm_unpackhi_epi32(a[5], a[7]);
        for (int r = 0; r < 4; r++) {
            row[2 * r] = _mm_unpacklo_epi64(b[r], b[r + 4]);
            row[2 * r + 1] = _mm_unpackhi_epi64(b[r], b[r + 4]);
        }
        for (int r = 0; r < 8; r++) {
            if (j + 16 <= n) {
                _mm_storeu_si128((__m128i *)(out + r * n + j), row[r]);
            } else {
                unsigned char last[16];
                _mm_storeu_si128((__m128i *)last, row[r]);
                memcpy(out + r * n + j, last, n - j);
            }
        }
    }
}

/* One output value of 8 rows from the transposed rows: the taps of rz_horiz_scalar. */
__attribute__((target("avx2"))) static inline __m256i rz_htaps(const unsigned char *t, int first,
                                                               int xn, int c, const int *k)
{
    __m256i acc = _mm256_set1_epi32(1 << (RZ_PRECISION_BITS - 1));
    for (int x = 0; x < xn; x++) {
        __m128i v = _mm_loadl_epi64((const __m128i *)(t + (size_t)(first + x * c) * 8));
        acc = _mm256_add_epi32(
            acc, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(v), _mm256_set1_epi32(k[x])));
    }
    return _mm256_srai_epi32(acc, RZ_PRECISION_BITS);
}

/* One output value of the horizontal pass: its first tap's byte column, tap count
 * and weights (so the pass does not divide by c per value). */
typedef struct rz_tap {
    int first, xn;
    const int *k;
} rz_tap;

/* The taps of the nout = ow * c output values, padded with tapless ones (so 0) to npad. */
static void rz_taps_fill(rz_tap *taps, size_t nout, size_t npad, int c, const rz_coeffs *hx)
{
    for (size_t j = 0; j < npad; j++) {
        int xx = (int)(j / (size_t)c), ch = (int)(j % (size_t)c);
        taps[j] = j < nout ? (rz_tap){hx->bounds[2 * xx] * c + ch, hx->bounds[2 * xx + 1],
                                      hx->k + (size_t)xx * hx->ksize}
                           : (rz_tap){0, 0, hx->k};
    }
}

/* Rows [y0, y1) of in into tmp, as rz_horiz_scalar; t holds iw * c * 8 bytes, taps
 * and ob (ow * c rounded up to 16) entries and entries of 8 bytes. */
__attribute__((target("avx2"))) static void
rz_horiz_avx2(const unsigned char *in, int iw, unsigned char *tmp, int ow, int c, int y0, int y1,
              const rz_coeffs *hx, unsigned char *t, rz_tap *taps, unsigned char *ob)
{
    size_t rowbytes = (size_t)iw * c, nout = (size_t)ow * c, npad = (nout + 15) & ~(size_t)15;
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    rz_taps_fill(taps, nout, npad, c, hx);
    int y = y0;
    for (; y + 8 <= y1; y += 8) {
        rz_transpose_in(in + (size_t)y * rowbytes, rowbytes, t);
        for (size_t j = 0; j < npad; j += 4) {
            const rz_tap *p = taps + j;
            /* clamp to 0..255 as rz_clip8 does, 8 bytes (rows 0-7) per value */
            __m256i lo = _mm256_packus_epi32(rz_htaps(t, p[0].first, p[0].xn, c, p[0].k),
                                             rz_htaps(t, p[1].first, p[1].xn, c, p[1].k));
            __m256i hi = _mm256_packus_epi32(rz_htaps(t, p[2].first, p[2].xn, c, p[2].k),
                                             rz_htaps(t, p[3].first, p[3].xn, c, p[3].k));
            _mm256_storeu_si256((__m256i *)(void *)(ob + j * 8),
                                _mm256_permutevar8x32_epi32(_mm256_packus_epi16(lo, hi), order));
        }
        rz_transpose_out(ob, nout, tmp + (size_t)(y - y0) * nout);
    }
    if (y < y1)
        rz_horiz_scalar(in, iw, tmp + (size_t)(y - y0) * nout, ow, c, y, y1, hx);
}

__attribute__((target("avx2"))) static void rz_vert_avx2(const unsigned char *src,
                                                         unsigned char *out, size_t stride, int oh,
                                                         int y0, const rz_coeffs *vy)
{
    const __m256i round = _mm256_set1_epi32(1 << (RZ_PRECISION_BITS - 1));
    size_t vec_end = stride & ~(size_t)15;
    for (int yy = 0; yy < oh; yy++) {
        int ymin = vy->bounds[2 * yy] - y0, yn = vy->bounds[2 * yy + 1];
        const int *k = vy->k + (size_t)yy * vy->ksize;
        const unsigned char *s0 = src + (size_t)ymin * stride;
        unsigned char *o = out + (size_t)yy * stride;
        for (size_t xc = 0; xc < vec_end; xc += 16) {
            __m256i a = round, b = round;
            for (int y = 0; y < yn; y++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(s0 + (size_t)y * stride + xc));
                __m256i w = _mm256_set1_epi32(k[y]);
                a = _mm256_add_epi32(a, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(v), w));
                b = _mm256_add_epi32(
                    b, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)), w));
            }
            rz_store8(o + xc, a);
            rz_store8(o + xc + 8, b);
        }
        for (size_t xc = vec_end; xc < stride; xc++) {
            int ss = 1 << (RZ_PRECISION_BITS - 1);
            for (int y = 0; y < yn; y++)
                ss += s0[(size_t)y * stride + xc] * k[y];
            o[xc] = rz_clip8(ss);
        }
    }
}

/* The AVX-512 path: the AVX2 path's sums, 16 lanes (rows in the horizontal pass, byte
 * columns in the vertical one) at a time. */
#define RZ_AVX512_FN __attribute__((target("avx512f,avx512bw")))

/* 16x16 bytes transposed: one round of these unpacks rotates each byte's 8-bit
 * (register, byte) index left by one bit, so four rounds swap register and byte. */
RZ_AVX512_FN static inline void rz_transpose16(__m128i a[16])
{
    __m128i b[16];
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 8; i++) {
            b[2 * i] = _mm_unpacklo_epi8(a[i], a[i + 8]);
            b[2 * i + 1] = _mm_unpackhi_epi8(a[i], a[i + 8]);
        }
        for (int i = 0; i < 16; i++)
            a[i] = b[i];
    }
}

/* 16 rows of rowbytes into t, 16 bytes (one per row) per byte column. */
RZ_AVX512_FN static void rz_transpose_in16(const unsigned char *in, size_t rowbytes,
                                           unsigned char *t)
{
    size_t x = 0;
    for (; x + 16 <= rowbytes; x += 16) {
        __m128i a[16];
        for (int r = 0; r < 16; r++)
            a[r] = _mm_loadu_si128((const __m128i *)(in + (size_t)r * rowbytes + x));
        rz_transpose16(a);
        for (int k = 0; k < 16; k++)
            _mm_storeu_si128((__m128i *)(void *)(t + (x + k) * 16), a[k]);
    }
    for (; x < rowbytes; x++)
        for (int r = 0; r < 16; r++)
            t[x * 16 + r] = in[(size_t)r * rowbytes + x];
}

/* ob holds 16 bytes (rows 0-15) per output value, padded to a multiple of 16 values;
 * out gets the 16 rows of n values. */
RZ_AVX512_FN static void rz_transpose_out16(const unsigned char *ob, size_t n, unsigned char *out)
{
    for (size_t j = 0; j < n; j += 16) {
        __m128i a[16];
        for (int m = 0; m < 16; m++)
            a[m] = _mm_loadu_si128((const __m128i *)(ob + (j + m) * 16));
        rz_transpose16(a);
        for (int r = 0; r < 16; r++) {
            if (j + 16 <= n) {
                _mm_storeu_si128((__m128i *)(out + r * n + j), a[r]);
            } else {
                unsigned char last[16];
                _mm_storeu_si128((__m128i *)last, a[r]);
                memcpy(out + r * n + j, last, n - j);
            }
        }
    }
}

/* One output value of 16 rows from the transposed rows, as rz_htaps. */
RZ_AVX512_FN static inline __m512i rz_htaps16(const unsigned char *t, int first, int xn, int c,
                                              const int *k)
{
    __m512i acc = _mm512_set1_epi32(1 << (RZ_PRECISION_BITS - 1));
    for (int x = 0; x < xn; x++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(t + (size_t)(first + x * c) * 16));
        acc = _mm512_add_epi32(
            acc, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(v), _mm512_set1_epi32(k[x])));
    }
    return _mm512_srai_epi32(acc, RZ_PRECISION_BITS);
}

/* As rz_horiz_avx2, 16 rows at a time; the last rows (fewer than 16) go to it. t holds
 * iw * c * 16 bytes, ob 16 bytes per entry of taps. */
RZ_AVX512_FN static void rz_horiz_avx512(const unsigned char *in, int iw, unsigned char *tmp,
                                         int ow, int c, int y0, int y1, const rz_coeffs *hx,
                                         unsigned char *t, rz_tap *taps, unsigned char *ob)
{
    size_t rowbytes = (size_t)iw * c, nout = (size_t)ow * c, npad = (nout + 15) & ~(size_t)15;
    /* after the packs, 128-bit lane l holds rows 4l-4l+3 of values 0-3; gather each
     * value's 16 rows */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    rz_taps_fill(taps, nout, npad, c, hx);
    int y = y0;
    for (; y + 16 <= y1; y += 16) {
        rz_transpose_in16(in + (size_t)y * rowbytes, rowbytes, t);
        for (size_t j = 0; j < npad; j += 4) {
            const rz_tap *p = taps + j;
            /* clamp to 0..255 as rz_clip8 does, 16 bytes (rows 0-15) per value */
            __m512i lo = _mm512_packus_epi32(rz_htaps16(t, p[0].first, p[0].xn, c, p[0].k),
                                             rz_htaps16(t, p[1].first, p[1].xn, c, p[1].k));
            __m512i hi = _mm512_packus_epi32(rz_htaps16(t, p[2].first, p[2].xn, c, p[2].k),
                                             rz_htaps16(t, p[3].first, p[3].xn, c, p[3].k));
            _mm512_storeu_si512((void *)(ob + j * 16),
                                _mm512_permutexvar_epi32(order, _mm512_packus_epi16(lo, hi)));
        }
        rz_transpose_out16(ob, nout, tmp + (size_t)(y - y0) * nout);
    }
    if (y < y1)
        rz_horiz_avx2(in, iw, tmp + (size_t)(y - y0) * nout, ow, c, y, y1, hx, t, taps, ob);
}

/* 16 sums to bytes under mask m: rz_clip8's shift and clamp (the unsigned saturation of
 * vpmovusdb clamps at 255, the max at 0). */
RZ_AVX512_FN static inline void rz_store16(unsigned char *o, __m512i acc, __mmask16 m)
{
    __m512i v = _mm512_max_epi32(_mm512_srai_epi32(acc, RZ_PRECISION_BITS), _mm512_setzero_si512());
    _mm512_mask_cvtusepi32_storeu_epi8(o, m, v);
}

/* As rz_vert_avx2, 32 byte columns at a time, then 16 at a time under a mask. */
RZ_AVX512_FN static void rz_vert_avx512(const unsigned char *src, unsigned char *out, size_t stride,
                                        int oh, int y0, const rz_coeffs *vy)
{
    const __m512i round = _mm512_set1_epi32(1 << (RZ_PRECISION_BITS - 1));
    for (int yy = 0; yy < oh; yy++) {
        int ymin = vy->bounds[2 * yy] - y0, yn = vy->bounds[2 * yy + 1];
        const int *k = vy->k + (size_t)yy * vy->ksize;
        const unsigned char *s0 = src + (size_t)ymin * stride;
        unsigned char *o = out + (size_t)yy * stride;
        size_t xc = 0;
        for (; xc + 32 <= stride; xc += 32) {
            __m512i a = round, b = round;
            for (int y = 0; y < yn; y++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(s0 + (size_t)y * stride + xc));
                __m512i w = _mm512_set1_epi32(k[y]);
                a = _mm512_add_epi32(
                    a, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(v)), w));
                b = _mm512_add_epi32(
                    b, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(v, 1)), w));
            }
            rz_store16(o + xc, a, 0xFFFF);
            rz_store16(o + xc + 16, b, 0xFFFF);
        }
        for (; xc < stride; xc += 16) {
            size_t n = stride - xc < 16 ? stride - xc : 16;
            __mmask16 m = (__mmask16)((1u << n) - 1);
            __m512i a = round;
            for (int y = 0; y < yn; y++) {
                __m512i v = _mm512_maskz_loadu_epi8(m, s0 + (size_t)y * stride + xc);
                a = _mm512_add_epi32(
                    a, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(v)),
                                          _mm512_set1_epi32(k[y])));
            }
            rz_store16(o + xc, a, m);
        }
    }
}
#endif

bool stoke_resize_u8(const unsigned char *in, int iw, int ih, unsigned char *out, int ow, int oh,
                     int c)
{
    stoke_resize_axis ax = stoke_resize_whole(iw, ow), ay = stoke_resize_whole(ih, oh);
    return stoke_resize_box_u8(in, iw, ih, 0, 0, &ax, &ay, out, c);
}

/* An axis the resize copies unchanged: Pillow skips such a pass (and would compute
 * weights of exactly 1 and 0 if it did not). */
static bool rz_identity(const stoke_resize_axis *a, int origin, int in_size)
{
    return a->in0 == 0 && a->in1 == a->out && a->virt == a->out && a->off == 0 && a->lo == 0 &&
           a->hi == a->out && origin == 0 && in_size == a->out;
}

bool stoke_resize_box_u8(const unsigned char *in, int iw, int ih, int ox, int oy,
                         const stoke_resize_axis *ax, const stoke_resize_axis *ay,
                         unsigned char *out, int c)
{
    int ow = ax->out, oh = ay->out;
    rz_coeffs hx = {0}, vy = {0};
    unsigned char *tmp = NULL, *t = NULL, *ob = NULL;
#if defined(__x86_64__)
    rz_tap *taps = NULL;
#endif
    bool ok = false;
    int level = rz_level();
    (void)level; /* x86-64 only */
    if (!rz_coeffs_make(ax, ox, &hx) || !rz_coeffs_make(ay, oy, &vy))
        goto done;
    /* Only the source rows the vertical pass reads go through the horizontal pass. */
    int y0 = vy.bounds[0], y1 = vy.bounds[2 * (oh - 1)] + vy.bounds[2 * (oh - 1) + 1];
    const unsigned char *src = in;
    if (!rz_identity(ax, ox, iw)) {
        tmp = malloc((size_t)(y1 - y0) * (size_t)ow * (size_t)c);
        if (!tmp)
            goto done;
#if defined(__x86_64__)
        if (level != RZ_SCALAR) {
            size_t npad = ((size_t)ow * c + 15) & ~(size_t)15, rows = level == RZ_AVX512 ? 16 : 8;
            if (!(t = malloc((size_t)iw * c * rows)) || !(ob = malloc(npad * rows)) ||
                !(taps = malloc(npad * sizeof *taps)))
                goto done;
            if (level == RZ_AVX512)
                rz_horiz_avx512(in, iw, tmp, ow, c, y0, y1, &hx, t, taps, ob);
            else
                rz_horiz_avx2(in, iw, tmp, ow, c, y0, y1, &hx, t, taps, ob);
        } else
#endif
            rz_horiz_scalar(in, iw, tmp, ow, c, y0, y1, &hx);
        src = tmp;
    } else {
        y0 = 0;
    }
    if (!rz_identity(ay, oy, ih)) {
#if defined(__x86_64__)
        if (level == RZ_AVX512)
            rz_vert_avx512(src, out, (size_t)ow * c, oh, y0, &vy);
        else if (level == RZ_AVX2)
            rz_vert_avx2(src, out, (size_t)ow * c, oh, y0, &vy);
        else
#endif
            rz_vert_scalar(src, out, (size_t)ow * c, oh, y0, &vy);
    } else {
        memcpy(out, src, (size_t)oh * ow * c);
    }
    ok = true;
done:
#if defined(__x86_64__)
    free(taps);
#endif
    free(t);
    free(ob);
    free(tmp);
    rz_coeffs_free(&hx);
    rz_coeffs_free(&vy);
    return ok;
}
