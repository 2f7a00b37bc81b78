/* resize.c - Pillow's resampling (ImagingResample with the BILINEAR filter), written
 * out because no Debian C library offers it with the same arithmetic: a separable
 * triangle filter whose support grows with the downscale factor, so shrinking averages
 * every source pixel (area-correct) instead of skipping, with 22-bit fixed-point
 * weights. The horizontal pass runs first, as in Pillow, so results match Pillow's
 * resize().
 *
 * The AVX2 path does the same integer sums 8 lanes at a time (32-bit products, as the
 * scalar code), so it is bit-exact with it: integer addition does not care about order.
 * 16-bit weights (madd_epi16, as Pillow-SIMD does) would be faster but round
 * differently from Pillow. */
#include "data/resize.h"
#include "core/isa.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define RZ_PRECISION_BITS (32 - 8 - 2)

static int isa_level = -1; /* -1: detect; 0: scalar; 1: AVX2 (see resize.h) */

void stoke_resize_set_isa(int level) { isa_level = level; }

static bool have_avx2(void)
{
#if defined(__x86_64__)
    return isa_level != 0 && (stoke_isa_usable() & STOKE_ISA_AVX2);
#else
    return false;
#endif
}

const char *stoke_resize_path(void) { return have_avx2() ? "avx2" : "scalar"; }

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

static bool rz_coeffs_make(int in_size, int out_size, rz_coeffs *co)
{
    double scale = (double)in_size / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    co->ksize = ksize;
    co->bounds = malloc(sizeof(int) * 2 * (size_t)out_size);
    co->k = malloc(sizeof(int) * (size_t)ksize * (size_t)out_size);
    double *w = malloc(sizeof(double) * (size_t)ksize);
    if (!co->bounds || !co->k || !w) {
        free(w);
        return false;
    }
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
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
        co->bounds[2 * xx] = xmin;
        co->bounds[2 * xx + 1] = xmax;
    }
    free(w);
    return true;
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

/* Output rows [yy0, yy1) from src, whose row 0 is source row y0. */
static void rz_vert_scalar(const unsigned char *src, unsigned char *out, size_t stride, int yy0,
                           int yy1, int y0, const rz_coeffs *vy)
{
    for (int yy = yy0; yy < yy1; yy++) {
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

/* The horizontal pass, 8 output values (pixel * c + channel) at a time: each lane
 * gathers its source byte for one tap. Every output value gets ksize taps from one
 * base index, moved left at the right edge (with its weights moved right, zeros in
 * front) so all taps are inside the row; taps past the filter have weight 0. */
typedef struct rz_hplan {
    int nj;   /* ow * c, rounded up to 8 */
    int *idx; /* per output value: byte offset of its first tap in the row */
    int *kt;  /* per tap, per output value: weight */
} rz_hplan;

static bool rz_hplan_make(const rz_coeffs *hx, int iw, int ow, int c, rz_hplan *p)
{
    int ks = hx->ksize;
    p->nj = (ow * c + 7) & ~7;
    p->idx = calloc((size_t)p->nj, sizeof(int));
    p->kt = calloc((size_t)p->nj * (size_t)ks, sizeof(int));
    if (!p->idx || !p->kt)
        return false;
    for (int xx = 0; xx < ow; xx++) {
        int xmin = hx->bounds[2 * xx], xn = hx->bounds[2 * xx + 1];
        int base = xmin + ks > iw ? iw - ks : xmin, shift = xmin - base;
        const int *k = hx->k + (size_t)xx * ks;
        for (int ch = 0; ch < c; ch++) {
            int j = xx * c + ch;
            p->idx[j] = base * c + ch;
            for (int t = shift; t < shift + xn; t++)
                p->kt[(size_t)t * p->nj + j] = k[t - shift];
        }
    }
    return true;
}

__attribute__((target("avx2"))) static void rz_horiz_avx2(const unsigned char *in, int iw,
                                                          unsigned char *tmp, int ow, int c, int y0,
                                                          int y1, int ih, int ks, const rz_hplan *p,
                                                          unsigned char *pad)
{
    size_t nout = (size_t)ow * c, rowbytes = (size_t)iw * c;
    const __m256i round = _mm256_set1_epi32(1 << (RZ_PRECISION_BITS - 1));
    const __m256i lo8 = _mm256_set1_epi32(0xff);
    for (int y = y0; y < y1; y++) {
        const unsigned char *row = in + (size_t)y * rowbytes;
        if (y == ih - 1) { /* a gather reads 4 bytes: the last row's end must be padded */
            memcpy(pad, row, rowbytes);
            row = pad;
        }
        unsigned char *o = tmp + (size_t)(y - y0) * nout;
        for (int j = 0; j < p->nj; j += 8) {
            __m256i idx = _mm256_loadu_si256((const __m256i *)(p->idx + j));
            __m256i acc = round;
            for (int t = 0; t < ks; t++) {
                __m256i v =
                    _mm256_i32gather_epi32((const int *)(const void *)(row + t * c), idx, 1);
                __m256i w = _mm256_loadu_si256((const __m256i *)(p->kt + (size_t)t * p->nj + j));
                acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_and_si256(v, lo8), w));
            }
            if ((size_t)j + 8 <= nout) {
                rz_store8(o + j, acc);
            } else {
                unsigned char last[8];
                rz_store8(last, acc);
                memcpy(o + j, last, nout - (size_t)j);
            }
        }
    }
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
#endif

bool stoke_resize_u8(const unsigned char *in, int iw, int ih, unsigned char *out, int ow, int oh,
                     int c)
{
    rz_coeffs hx = {0}, vy = {0};
    unsigned char *tmp = NULL, *pad = NULL;
    bool ok = false, simd = have_avx2();
#if defined(__x86_64__)
    rz_hplan hp = {0};
#endif
    if (!rz_coeffs_make(iw, ow, &hx) || !rz_coeffs_make(ih, oh, &vy))
        goto done;
    /* Only the source rows the vertical pass reads go through the horizontal pass. */
    int y0 = vy.bounds[0], y1 = vy.bounds[2 * (oh - 1)] + vy.bounds[2 * (oh - 1) + 1];
    const unsigned char *src = in;
    if (iw != ow) {
        tmp = malloc((size_t)(y1 - y0) * (size_t)ow * (size_t)c);
        if (!tmp)
            goto done;
#if defined(__x86_64__)
        /* The plan needs every tap inside the row: a row narrower than the filter
         * (tiny images) takes the scalar pass. */
        if (simd && iw >= hx.ksize) {
            if (!rz_hplan_make(&hx, iw, ow, c, &hp) || !(pad = malloc((size_t)iw * c + 4)))
                goto done;
            rz_horiz_avx2(in, iw, tmp, ow, c, y0, y1, ih, hx.ksize, &hp, pad);
        } else
#endif
            rz_horiz_scalar(in, iw, tmp, ow, c, y0, y1, &hx);
        src = tmp;
    } else {
        y0 = 0;
    }
    if (ih != oh) {
#if defined(__x86_64__)
        if (simd)
            rz_vert_avx2(src, out, (size_t)ow * c, oh, y0, &vy);
        else
#endif
            rz_vert_scalar(src, out, (size_t)ow * c, 0, oh, y0, &vy);
    } else {
        memcpy(out, src, (size_t)oh * ow * c);
    }
    ok = true;
done:
#if defined(__x86_64__)
    free(hp.idx);
    free(hp.kt);
#endif
    free(pad);
    free(tmp);
    rz_coeffs_free(&hx);
    rz_coeffs_free(&vy);
    return ok;
}
