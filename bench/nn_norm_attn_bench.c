/* nn_norm_attn_bench.c - times the CPU norm, element-wise and attention kernels on the
 * shapes of the issue-4 presets (CNN/ResNet activations, transformer blocks) and
 * prints milliseconds per call and GB/s or GFLOP/s; bench/nn_norm_attn_torch.py
 * times PyTorch on the same shapes. Not a test: no thresholds. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cpu/attn.h"
#include "nn/cpu/dense.h"
#include "nn/cpu/eltwise.h"
#include "nn/cpu/norm.h"
#include "stoke/core.h"

static float *buf(size_t n)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        abort();
    }
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f + 1e-3f;
    }
    return p;
}

/* Best of `reps` timed runs of `body`, in ms. */
#define TIME_BEST(ms, reps, body)                             \
    do {                                                      \
        body;                                                 \
        ms = 1e30;                                            \
        for (int r_ = 0; r_ < (reps); r_++) {                 \
            uint64_t t0_ = stoke_now_ns();                    \
            body;                                             \
            double d_ = (double)(stoke_now_ns() - t0_) / 1e6; \
            ms = d_ < ms ? d_ : ms;                           \
        }                                                     \
    } while (0)

static void line(const char *name, double ms, double bytes, double flops)
{
    printf("%-34s %9.3f ms", name, ms);
    if (bytes > 0) {
        printf("  %7.1f GB/s", bytes / ms / 1e6);
    }
    if (flops > 0) {
        printf("  %7.1f GFLOP/s", flops / ms / 1e6);
    }
    printf("\n");
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
    cpu_set_threads(threads);
    printf("threads %d\n", threads);
    double ms;
    {
        /* the CNN's first activation: (128, 32, 28, 28) */
        size_t n = (size_t)128 * 32 * 28 * 28;
        float *x = buf(n), *y = buf(n), *dy = buf(n), *dx = buf(n);
        TIME_BEST(ms, 10, cpu_relu_forward(y, x, n));
        line("relu fwd (128,32,28,28)", ms, 8.0 * n, 0);
        TIME_BEST(ms, 10, cpu_relu_backward(dx, dy, y, n));
        line("relu bwd", ms, 16.0 * n, 0);
        TIME_BEST(ms, 10, cpu_gelu_forward(y, x, n, 0));
        line("gelu fwd", ms, 8.0 * n, 0);
        TIME_BEST(ms, 10, cpu_gelu_backward(dx, dy, x, n, 0));
        line("gelu bwd", ms, 16.0 * n, 0);
        TIME_BEST(ms, 10, cpu_tanh_forward(y, x, n));
        line("tanh fwd", ms, 8.0 * n, 0);
        TIME_BEST(ms, 10, cpu_sigmoid_forward(y, x, n));
        line("sigmoid fwd", ms, 8.0 * n, 0);
        TIME_BEST(ms, 10, cpu_dropout_forward(y, x, n, 0.1f, 1, 2, 1));
        line("dropout fwd p=0.1", ms, 8.0 * n, 0);
        float *sm = buf(32), *sr = buf(32), *rm = buf(32), *rv = buf(32), *w = buf(32),
              *b = buf(32);
        for (int c = 0; c < 32; c++) {
            rv[c] = 1.0f;
        }
        TIME_BEST(ms, 10,
                  cpu_batchnorm_forward(y, sm, sr, rm, rv, x, w, b, 128, 32, 784, 1, 0.1f, 1e-5f));
        line("batchnorm train fwd", ms, 12.0 * n, 0);
        float *dw = buf(32), *db = buf(32);
        TIME_BEST(ms, 10, cpu_batchnorm_backward(dx, dw, db, dy, x, w, sm, sr, 128, 32, 784, 1));
        line("batchnorm train bwd", ms, 20.0 * n, 0);
        free(x), free(y), free(dy), free(dx), free(sm), free(sr), free(rm), free(rv), free(w);
        free(b), free(dw), free(db);
    }
    {
        /* BatchNorm1d on an MLP's hidden layer: (256, 512) */
        const int B = 256, C = 512;
        size_t n = (size_t)B * C;
        float *x = buf(n), *y = buf(n), *dy = buf(n), *dx = buf(n), *sm = buf(C), *sr = buf(C);
        float *rm = buf(C), *rv = buf(C), *w = buf(C), *b = buf(C), *dw = buf(C), *db = buf(C);
        for (int c = 0; c < C; c++) {
            rv[c] = 1.0f;
        }
        TIME_BEST(ms, 10,
                  cpu_batchnorm_forward(y, sm, sr, rm, rv, x, w, b, B, C, 1, 1, 0.1f, 1e-5f));
        line("batchnorm1d train fwd (256,512)", ms, 8.0 * n, 0);
        TIME_BEST(ms, 10, cpu_batchnorm_backward(dx, dw, db, dy, x, w, sm, sr, B, C, 1, 1));
        line("batchnorm1d train bwd", ms, 16.0 * n, 0);
        free(x), free(y), free(dy), free(dx), free(sm), free(sr), free(rm), free(rv), free(w);
        free(b), free(dw), free(db);
    }
    {
        /* a transformer block: B 64, T 65, C 128, H 4, MLP 512 */
        const int B = 64, T = 65, C = 128, H = 4;
        size_t N = (size_t)B * T, n = N * C;
        float *x = buf(n), *y = buf(n), *dy = buf(n), *dx = buf(n), *m = buf(N), *r = buf(N);
        float *w = buf(C), *b = buf(C), *dw = buf(C), *db = buf(C);
        TIME_BEST(ms, 10, cpu_layernorm_forward(y, m, r, x, w, b, (int)N, C, 1e-5f));
        line("layernorm fwd (4160,128)", ms, 8.0 * n, 0);
        TIME_BEST(ms, 10, cpu_layernorm_backward(dx, dw, db, dy, x, w, m, r, (int)N, C));
        line("layernorm bwd", ms, 16.0 * n, 0);
        float *g = buf(n * 4), *gy = buf(n * 4);
        TIME_BEST(ms, 10, cpu_gelu_forward(gy, g, n * 4, 0));
        line("gelu fwd (4160,512)", ms, 32.0 * n, 0);
        TIME_BEST(ms, 10, cpu_softmax_forward(gy, g, (int)N * 4, C));
        line("softmax fwd (16640,128)", ms, 32.0 * n, 0);

        float *wqkv = buf((size_t)3 * C * C), *bqkv = buf((size_t)3 * C), *wo = buf((size_t)C * C),
              *bo = buf(C);
        float *gwqkv = buf((size_t)3 * C * C), *gbqkv = buf((size_t)3 * C),
              *gwo = buf((size_t)C * C), *gbo = buf(C);
        for (size_t i = 0; i < (size_t)3 * C * C; i++) {
            wqkv[i] *= 0.1f;
        }
        for (size_t i = 0; i < (size_t)C * C; i++) {
            wo[i] *= 0.1f;
        }
        float *saved = buf(cpu_attention_saved_floats(B, T, C, H));
        size_t wsz = cpu_attention_workspace(B, T, C, H);
        void *ws = malloc(wsz);
        double fl = 2.0 * N * C * 3 * C + 2.0 * N * C * C + 4.0 * B * T * T * C;
        TIME_BEST(ms, 10, cpu_attention_forward(y, saved, x, wqkv, bqkv, wo, bo, B, T, C, H, 0));
        line("attention fwd B64 T65 C128 H4", ms, 0, fl);
        TIME_BEST(ms, 10,
                  cpu_attention_backward(dx, gwqkv, gbqkv, gwo, gbo, dy, x, wqkv, wo, saved, B, T,
                                         C, H, 0, ws, wsz));
        line("attention bwd", ms, 0, 2 * fl);
        free(x), free(y), free(dy), free(dx), free(m), free(r), free(w), free(b), free(dw);
        free(db), free(g), free(gy), free(wqkv), free(bqkv), free(wo), free(bo), free(gwqkv);
        free(gbqkv), free(gwo), free(gbo), free(saved), free(ws);
    }
    return 0;
}
