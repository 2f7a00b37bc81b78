/* nn_norm_attn_util.h - shared helpers of test_nn_norm_eltwise and test_nn_attn:
 * random fills, float64 central differences, tolerance checks, and a runner for
 * tests/nn_norm_attn_ref.py (torch references through float32 files). */
#ifndef NN_NORM_ATTN_UTIL_H
#define NN_NORM_ATTN_UTIL_H

#include <stdint.h>
#include <unistd.h>

#include "check.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static double rnd_unit(void)
{ /* uniform in [0, 1) */
    rng_state += 0x9e3779b97f4a7c15ull;
    uint64_t z = rng_state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* Uniform in [lo, hi). */
static void fill(float *p, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)(lo + (hi - lo) * rnd_unit());
    }
}

/* Uniform magnitudes in [0.1, scale) with random signs: never zero, never at a kink. */
static void fill_away(float *p, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) {
        double m = 0.1 + (scale - 0.1) * rnd_unit();
        p[i] = (float)(rnd_unit() < 0.5 ? -m : m);
    }
}

static double *to_double(const float *p, size_t n)
{
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) {
        d[i] = p[i];
    }
    return d;
}

static float *falloc(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p) {
        abort();
    }
    return p;
}

static float *fdup(const float *src, size_t n)
{
    float *p = falloc(n);
    memcpy(p, src, n * sizeof *p);
    return p;
}

/* Every |got - want| <= atol + rtol |want|; reports the worst element. */
static void check_close_(const char *file, int line, const char *what, const float *got,
                         const double *want, size_t n, double atol, double rtol)
{
    double worst = -1.0;
    size_t wi = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        double excess = err - (atol + rtol * fabs(want[i]));
        if (!(excess <= 0.0)) {
            bad = 1;
        }
        if (!(excess <= worst) || isnan(excess)) {
            worst = isnan(excess) ? INFINITY : excess;
            wi = i;
        }
    }
    check_count++;
    if (bad) {
        check_failures++;
        fprintf(stderr,
                "%s:%d: CHECK failed: %s: element %zu is %.9g, want %.9g (atol %g, rtol %g)\n",
                file, line, what, wi, (double)got[wi], want[wi], atol, rtol);
    }
}
#define check_close(what, got, want, n, atol, rtol) \
    check_close_(__FILE__, __LINE__, what, got, want, n, atol, rtol)

/* The float64 reference of an op as a scalar loss: sum(out * R) over its outputs,
 * given the vector of all differentiated inputs. */
typedef double (*loss_fn)(const double *x, void *ctx);

/* Central differences in float64 (step h): truncation O(h^2 f''') ~ 1e-10 and
 * rounding ~ 1e-16 / h for these O(1) functions. */
static void numgrad(loss_fn f, void *ctx, double *x, size_t n, double *grad)
{
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double up = f(x, ctx);
        x[i] = keep - h;
        double down = f(x, ctx);
        x[i] = keep;
        grad[i] = (up - down) / (2.0 * h);
    }
}

/* ---- torch references: tests/nn_norm_attn_ref.py MODE IN OUT (check_have_torch) ---- */

typedef struct tbuf {
    const float *p;
    size_t n;
} tbuf;

/* Writes the inputs as one float32 file, runs the script in `mode` with `args`
 * (sizes), reads `nout` float32 arrays back into outs. Returns 0 on success. */
static int torch_run(const char *mode, const char *args, const tbuf *ins, int nin, float **outs,
                     const size_t *outn, int nout)
{
    char in_path[] = "/tmp/stoke-nn-ref-in-XXXXXX";
    char out_path[] = "/tmp/stoke-nn-ref-out-XXXXXX";
    int fi = mkstemp(in_path), fo = mkstemp(out_path);
    if (fi < 0 || fo < 0) {
        return -1;
    }
    close(fo);
    FILE *f = fdopen(fi, "wb");
    for (int i = 0; i < nin; i++) {
        fwrite(ins[i].p, sizeof(float), ins[i].n, f);
    }
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/nn_norm_attn_ref.py %s %s %s %s",
             STOKE_TEST_DATA, mode, in_path, out_path, args);
    int rc = system(cmd);
    int ok = rc == 0;
    if (ok) {
        f = fopen(out_path, "rb");
        ok = f != NULL;
        for (int i = 0; ok && i < nout; i++) {
            ok = fread(outs[i], sizeof(float), outn[i], f) == outn[i];
        }
        if (f) {
            ok = ok && fgetc(f) == EOF;
            fclose(f);
        }
    }
    unlink(in_path);
    unlink(out_path);
    CHECK_MSG(ok, "torch reference %s failed (exit %d)", mode, rc);
    return ok ? 0 : -1;
}

#endif
