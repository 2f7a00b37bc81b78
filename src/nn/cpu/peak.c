/* peak.c - the CPU backend's matmul rate, measured: the peak MFU is taken against.
 * A peak computed from the clock and a FLOPs-per-cycle table reads whatever the
 * hypervisor reports (2,596 MHz for an EPYC whose cores run at 4.3 GHz) and assumes
 * two 512-bit FMA units for any AVX-512 core: MFU then read 1.6x high there, above
 * 100%. The kernels stoke trains with, timed at a size where they run at their best,
 * are the ceiling a training step can approach. */
#include <stdlib.h>
#include <time.h>

#include "nn/cpu/ctx.h"
#include "nn/cpu/dense.h"
#include "stoke/nn.h"

/* Square sizes large enough that packing and thread start-up are a few percent: each
 * thread gets at least 128 rows of a 1024 product up to 8 threads; more threads need a
 * larger one. The largest (3072) holds 113 MB of fp32 operands. A slow machine (no
 * AVX, or one thread under a cap) gets a smaller one, by the rate a 512 product shows:
 * the largest whose rep takes at most 50 ms, 512 at least, where such kernels already
 * run at their best. */
static int square_size(int threads) { return threads <= 8 ? 1024 : threads <= 32 ? 2048 : 3072; }
#define REP_TARGET_S 0.05

/* Timing: a 512 product twice (the primitive is built in the first; the caches and
 * the clock ramp up), one warm-up at the size chosen, then at least 3 reps and at most
 * 10, stopping once the reps took 150 ms: about 0.2 s in all. Best of them: noise (a
 * preempted thread, another process) only ever slows a rep. */
enum { MIN_REPS = 3, MAX_REPS = 10, PROBE_N = 512 };
#define REPS_BUDGET_NS 150000000ull

static double process_cpu_s(void)
{
    struct timespec ts;
    return clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts)
               ? 0
               : (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One n x n x n product: its wall and process CPU seconds. */
static stoke_status one_rep(int n, bool bf16, void *a, void *w, float *out, double *wall,
                            double *cpu)
{
    stoke_status s = cpu_linear_prepare(n, n, n, 0, bf16);
    if (s != STOKE_OK)
        return s;
    double c0 = process_cpu_s();
    uint64_t t0 = stoke_now_ns();
    s = bf16 ? cpu_linear_forward_bf16(out, a, w, NULL, n, n, n)
             : cpu_linear_forward(out, a, w, NULL, n, n, n);
    *wall = (double)(stoke_now_ns() - t0) * 1e-9;
    *cpu = process_cpu_s() - c0;
    return s;
}

static stoke_status run_reps(int max_n, bool bf16, void *a, void *w, float *out,
                             stoke_nn_matmul_rate *r)
{
    double wall = 0, cpu = 0;
    stoke_status s = one_rep(PROBE_N, bf16, a, w, out, &wall, &cpu);
    if (s == STOKE_OK)
        s = one_rep(PROBE_N, bf16, a, w, out, &wall, &cpu);
    if (s != STOKE_OK)
        return s;
    double probe = wall > 0 ? 2.0 * PROBE_N * PROBE_N * (double)PROBE_N / wall : 0;
    int n = PROBE_N;
    for (int c = max_n; c > PROBE_N; c = c > 1024 ? c - 1024 : PROBE_N)
        if (probe > 0 && 2.0 * c * c * (double)c / probe <= REP_TARGET_S) {
            n = c;
            break;
        }
    r->n = n;
    if (n != PROBE_N && (s = one_rep(n, bf16, a, w, out, &wall, &cpu)) != STOKE_OK)
        return s;
    double best = 0, spent = 0;
    for (int rep = 0; rep < MAX_REPS; rep++) {
        if ((s = one_rep(n, bf16, a, w, out, &wall, &cpu)) != STOKE_OK)
            return s;
        double f = wall > 0 ? 2.0 * n * n * (double)n / wall : 0;
        if (f > best) {
            best = f;
            r->cpu_share = wall > 0 ? cpu / (wall * r->threads) : 0;
        }
        spent += wall;
        r->reps = rep + 1;
        if (r->reps >= MIN_REPS && spent >= REPS_BUDGET_NS * 1e-9)
            break;
    }
    r->flops = best;
    return STOKE_OK;
}

stoke_status stoke_nn_cpu_matmul_rate(stoke_precision p, int threads, stoke_nn_matmul_rate *r)
{
    *r = (stoke_nn_matmul_rate){0};
    if (p == STOKE_PREC_FP16)
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "matmul rate: the CPU backend has no fp16 kernels (fp16 runs on fp32 "
                          "ones)");
    bool bf16 = p == STOKE_PREC_BF16;
    if (bf16 && !stoke_nn_precision_native(p))
        return stoke_fail(STOKE_ERR_UNAVAILABLE,
                          "matmul rate: oneDNN has no bf16 kernels on this CPU (bf16 runs on "
                          "fp32 ones)");
    uint64_t start = stoke_now_ns();
    cpu_ctx *c = cpu_ctx_new(threads);
    if (!c)
        return STOKE_ERR_NOMEM;
    /* oneDNN's matmul whatever a context would choose: it is what training runs */
    atomic_store(&c->linear_impl, CPU_LINEAR_DNNL);
    int n = square_size(cpu_ctx_threads(c));
    size_t elems = (size_t)n * n, esize = bf16 ? 2 : 4;
    void *a = malloc(elems * esize), *w = malloc(elems * esize);
    float *out = malloc(elems * sizeof *out);
    stoke_status s = STOKE_OK;
    if (!a || !w || !out) {
        s = stoke_fail(STOKE_ERR_NOMEM, "matmul rate: out of memory for %dx%d operands", n, n);
    } else {
        /* small normal values (no denormals, no overflow); bf16's are the bit patterns
         * of 0.125 to 0.23 */
        for (size_t i = 0; i < elems; i++) {
            if (bf16) {
                ((uint16_t *)a)[i] = (uint16_t)(0x3e00 + i % 7);
                ((uint16_t *)w)[i] = (uint16_t)(0x3e00 + i % 5);
            } else {
                ((float *)a)[i] = 0.125f + 0.015625f * (float)(i % 7);
                ((float *)w)[i] = 0.125f + 0.015625f * (float)(i % 5);
            }
        }
        CPU_CTX_SCOPE(c);
        r->threads = cpu_ctx_threads(c);
        s = run_reps(n, bf16, a, w, out, r);
    }
    free(a);
    free(w);
    free(out);
    cpu_ctx_free(c);
    r->seconds = (double)(stoke_now_ns() - start) * 1e-9;
    if (s == STOKE_OK && !(r->flops > 0))
        s = stoke_fail(STOKE_ERR_UNAVAILABLE, "matmul rate: the clock did not advance");
    return s;
}
