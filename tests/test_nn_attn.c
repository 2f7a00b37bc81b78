/* test_nn_attn.c - the CPU multi-head self-attention: forward against a float64
 * reference written here (with and without the causal mask), backward to the input
 * and all four parameter tensors against float64 central differences, accumulation,
 * thread-count independence, the serial path (fewer (b, h) pairs than threads: heads
 * one after the other) by a directional derivative, argument errors, and torch's
 * nn.MultiheadAttention.
 *
 * Tolerances (|got - want| <= atol + rtol |want|), fp32 kernel against float64:
 *   forward atol 1e-5 rtol 1e-4; backward vs finite differences atol 1e-4 rtol 1e-3;
 *   torch (fp32 too) atol = rtol = 1e-4 forward, 2e-4 gradients. */
#include <omp.h>

#include "nn/cpu/dense.h"

#include "nn/cpu/attn.h"
#include "nn_norm_attn_util.h"

typedef struct attn_shape {
    int B, T, C, H, causal;
    const double *r; /* (B, T, C) loss weights */
} attn_shape;

/* Sizes of the differentiated inputs, packed as x | w_qkv | b_qkv | w_out | b_out. */
static size_t packed_size(const attn_shape *s)
{
    size_t C = (size_t)s->C;
    return (size_t)s->B * s->T * C + 3 * C * C + 3 * C + C * C + C;
}

/* The definition, in float64. */
static void attn_ref(double *out, const double *x, const double *wqkv, const double *bqkv,
                     const double *wo, const double *bo, const attn_shape *s)
{
    int B = s->B, T = s->T, C = s->C, H = s->H, hs = C / H;
    double *qkv = malloc((size_t)T * 3 * C * sizeof *qkv);
    double *y = malloc((size_t)T * C * sizeof *y);
    double *p = malloc((size_t)T * sizeof *p);
    for (int b = 0; b < B; b++) {
        const double *xb = x + (size_t)b * T * C;
        for (int t = 0; t < T; t++) {
            for (int j = 0; j < 3 * C; j++) {
                double a = bqkv[j];
                for (int c = 0; c < C; c++) {
                    a += xb[t * C + c] * wqkv[(size_t)j * C + c];
                }
                qkv[(size_t)t * 3 * C + j] = a;
            }
        }
        for (int h = 0; h < H; h++) {
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    double d = 0;
                    for (int k = 0; k < hs; k++) {
                        d += qkv[(size_t)i * 3 * C + h * hs + k] *
                             qkv[(size_t)j * 3 * C + C + h * hs + k];
                    }
                    p[j] = (s->causal && j > i) ? -INFINITY : d / sqrt((double)hs);
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j < T; j++) {
                    p[j] = exp(p[j] - mx);
                    sum += p[j];
                }
                for (int k = 0; k < hs; k++) {
                    double a = 0;
                    for (int j = 0; j < T; j++) {
                        a += p[j] / sum * qkv[(size_t)j * 3 * C + 2 * C + h * hs + k];
                    }
                    y[(size_t)i * C + h * hs + k] = a;
                }
            }
        }
        for (int t = 0; t < T; t++) {
            for (int j = 0; j < C; j++) {
                double a = bo[j];
                for (int c = 0; c < C; c++) {
                    a += y[(size_t)t * C + c] * wo[(size_t)j * C + c];
                }
                out[((size_t)b * T + t) * C + j] = a;
            }
        }
    }
    free(qkv), free(y), free(p);
}

static double attn_loss(const double *all, void *vctx)
{
    attn_shape *s = vctx;
    size_t C = (size_t)s->C, n = (size_t)s->B * s->T * C;
    const double *x = all, *wqkv = x + n, *bqkv = wqkv + 3 * C * C, *wo = bqkv + 3 * C,
                 *bo = wo + C * C;
    double *out = malloc(n * sizeof *out), l = 0;
    attn_ref(out, x, wqkv, bqkv, wo, bo, s);
    for (size_t i = 0; i < n; i++) {
        l += out[i] * s->r[i];
    }
    free(out);
    return l;
}

/* Random inputs and parameters, packed; weights ~ U(-1/sqrt C, 1/sqrt C) like
 * torch's init, so scores stay O(1). */
static float *make_inputs(const attn_shape *s)
{
    size_t C = (size_t)s->C, n = (size_t)s->B * s->T * C;
    float *all = falloc(packed_size(s));
    double k = 1.0 / sqrt((double)C);
    fill_away(all, n, 1.5);
    fill_away(all + n, 3 * C * C, 2 * k);
    fill_away(all + n + 3 * C * C, 3 * C, 0.5);
    fill_away(all + n + 3 * C * C + 3 * C, C * C, 2 * k);
    fill_away(all + n + 4 * C * C + 3 * C, C, 0.5);
    return all;
}

typedef struct attn_run {
    float *out, *saved, *grads; /* grads packed like the inputs */
    void *ws;
    size_t ws_size;
} attn_run;

static void run_alloc(attn_run *r, const attn_shape *s)
{
    r->out = falloc((size_t)s->B * s->T * s->C);
    r->saved = falloc(cpu_attention_saved_floats(s->B, s->T, s->C, s->H));
    r->grads = falloc(packed_size(s));
    r->ws_size = cpu_attention_workspace(s->B, s->T, s->C, s->H);
    r->ws = malloc(r->ws_size);
}

static void run_free(attn_run *r) { free(r->out), free(r->saved), free(r->grads), free(r->ws); }

static stoke_status run_forward(attn_run *r, const float *all, const attn_shape *s)
{
    size_t C = (size_t)s->C, n = (size_t)s->B * s->T * C;
    const float *x = all, *wqkv = x + n, *bqkv = wqkv + 3 * C * C, *wo = bqkv + 3 * C,
                *bo = wo + C * C;
    return cpu_attention_forward(r->out, r->saved, x, wqkv, bqkv, wo, bo, s->B, s->T, s->C, s->H,
                                 s->causal);
}

static stoke_status run_backward(attn_run *r, const float *all, const float *dout,
                                 const attn_shape *s)
{
    size_t C = (size_t)s->C, n = (size_t)s->B * s->T * C;
    float *g = r->grads;
    return cpu_attention_backward(g, g + n, g + n + 3 * C * C, g + n + 3 * C * C + 3 * C,
                                  g + n + 4 * C * C + 3 * C, dout, all, all + n,
                                  all + n + 3 * C * C + 3 * C, r->saved, s->B, s->T, s->C, s->H,
                                  s->causal, r->ws, r->ws_size);
}

static const char *const part_name[] = {"dinp", "dw_qkv", "db_qkv", "dw_out", "db_out"};

static void part_bounds(const attn_shape *s, size_t off[6])
{
    size_t C = (size_t)s->C;
    off[0] = 0;
    off[1] = (size_t)s->B * s->T * C;
    off[2] = off[1] + 3 * C * C;
    off[3] = off[2] + 3 * C;
    off[4] = off[3] + C * C;
    off[5] = off[4] + C;
}

static void case_against_reference(int B, int T, int C, int H, int causal)
{
    size_t n = (size_t)B * T * C;
    float *dy = falloc(n);
    fill(dy, n, -1, 1);
    double *rd = to_double(dy, n);
    attn_shape s = {B, T, C, H, causal, rd};
    float *all = make_inputs(&s);
    size_t np = packed_size(&s);
    attn_run r;
    run_alloc(&r, &s);
    CHECK_INT_EQ(run_forward(&r, all, &s), STOKE_OK);

    double *xd = to_double(all, np), *want = malloc(n * sizeof *want), *g = malloc(np * sizeof *g);
    size_t off[6];
    part_bounds(&s, off);
    attn_ref(want, xd, xd + off[1], xd + off[2], xd + off[3], xd + off[4], &s);
    char label[128];
    snprintf(label, sizeof label, "attention forward B%d T%d C%d H%d causal %d", B, T, C, H,
             causal);
    check_close(label, r.out, want, n, 1e-5, 1e-4);
    numgrad(attn_loss, &s, xd, np, g);

    float *g0 = falloc(np);
    fill(g0, np, -1, 1);
    memcpy(r.grads, g0, np * sizeof *g0);
    for (int call = 1; call <= 2; call++) {
        CHECK_INT_EQ(run_backward(&r, all, dy, &s), STOKE_OK);
        for (int p = 0; p < 5; p++) {
            size_t m = off[p + 1] - off[p];
            float *delta = falloc(m);
            double *w = malloc(m * sizeof *w);
            for (size_t i = 0; i < m; i++) {
                delta[i] = r.grads[off[p] + i] - g0[off[p] + i];
                w[i] = g[off[p] + i] * call;
            }
            snprintf(label, sizeof label, "attention %s (causal %d, backward call %d)",
                     part_name[p], causal, call);
            check_close(label, delta, w, m, 1e-4 * call, 1e-3);
            free(delta), free(w);
        }
    }
    run_free(&r);
    free(dy), free(rd), free(all), free(xd), free(want), free(g), free(g0);
}

/* One (b, h) pair on 2 threads, fewer pairs than threads, so the heads run one after
 * the other and oneDNN threads each product: forward against the reference, backward
 * by a directional derivative (L(x + h v) - L(x - h v)) / 2h = <grad, v> over all
 * inputs at once. */
static void case_serial_heads(void)
{
    const int B = 1, T = 96, C = 64, H = 1;
    int saved_threads = omp_get_max_threads();
    cpu_set_threads(2);
    size_t n = (size_t)B * T * C;
    float *dy = falloc(n);
    fill(dy, n, -1, 1);
    double *rd = to_double(dy, n);
    attn_shape s = {B, T, C, H, 1, rd};
    float *all = make_inputs(&s);
    size_t np = packed_size(&s), off[6];
    part_bounds(&s, off);
    attn_run r;
    run_alloc(&r, &s);
    CHECK_INT_EQ(run_forward(&r, all, &s), STOKE_OK);
    double *xd = to_double(all, np), *want = malloc(n * sizeof *want);
    attn_ref(want, xd, xd + off[1], xd + off[2], xd + off[3], xd + off[4], &s);
    check_close("attention forward, serial heads", r.out, want, n, 1e-5, 1e-4);
    CHECK_INT_EQ(run_backward(&r, all, dy, &s), STOKE_OK);
    double *v = calloc(np, sizeof *v), *xp = calloc(np, sizeof *xp);
    double dot = 0;
    for (size_t i = 0; i < np; i++) {
        v[i] = 2 * rnd_unit() - 1;
        dot += v[i] * r.grads[i];
    }
    const double h = 1e-5;
    for (size_t i = 0; i < np; i++) {
        xp[i] = xd[i] + h * v[i];
    }
    double up = attn_loss(xp, &s);
    for (size_t i = 0; i < np; i++) {
        xp[i] = xd[i] - h * v[i];
    }
    double fd = (up - attn_loss(xp, &s)) / (2 * h);
    CHECK_MSG(fabs(dot - fd) <= 1e-3 * fabs(fd) + 1e-3, "directional derivative %.9g vs %.9g", dot,
              fd);
    cpu_set_threads(saved_threads);
    run_free(&r);
    free(dy), free(rd), free(all), free(xd), free(want), free(v), free(xp);
}

static void case_threads_and_errors(void)
{
    const int B = 8, T = 32, C = 64, H = 4; /* projections over 2M MACs: threaded */
    size_t n = (size_t)B * T * C;
    float *dy = falloc(n);
    fill(dy, n, -1, 1);
    attn_shape s = {B, T, C, H, 0, NULL};
    float *all = make_inputs(&s);
    size_t np = packed_size(&s);
    /* 1 thread, 2 threads, 2 threads again: the same bits for the same count (the
     * trainer's promise); across counts the projections' oneDNN matmuls may split
     * their sums differently, so 1 against 2 is compared within fp32 rounding. */
    attn_run r[3];
    int saved_threads = omp_get_max_threads();
    for (int t = 0; t < 3; t++) {
        cpu_set_threads(t == 0 ? 1 : 2);
        run_alloc(&r[t], &s);
        CHECK_INT_EQ(run_forward(&r[t], all, &s), STOKE_OK);
        CHECK_INT_EQ(run_backward(&r[t], all, dy, &s), STOKE_OK);
    }
    cpu_set_threads(saved_threads);
    CHECK_MSG(memcmp(r[1].out, r[2].out, n * sizeof(float)) == 0,
              "attention forward differs between runs");
    CHECK_MSG(memcmp(r[1].grads, r[2].grads, np * sizeof(float)) == 0,
              "attention backward differs between runs");
    double *w1 = to_double(r[0].out, n), *g1 = to_double(r[0].grads, np);
    check_close("attention forward, 2 threads vs 1", r[1].out, w1, n, 1e-6, 1e-5);
    check_close("attention backward, 2 threads vs 1", r[1].grads, g1, np, 1e-5, 1e-5);
    free(w1), free(g1);

    /* dinp NULL: the parameter gradients are the same bits */
    {
        size_t nx = (size_t)B * T * C;
        float *pg = falloc(np - nx);
        size_t C_ = (size_t)C;
        CHECK_INT_EQ(cpu_attention_backward(NULL, pg, pg + 3 * C_ * C_, pg + 3 * C_ * C_ + 3 * C_,
                                            pg + 4 * C_ * C_ + 3 * C_, dy, all, all + nx,
                                            all + nx + 3 * C_ * C_ + 3 * C_, r[1].saved, B, T, C, H,
                                            0, r[1].ws, r[1].ws_size),
                     STOKE_OK);
        CHECK_MSG(memcmp(pg, r[1].grads + nx, (np - nx) * sizeof(float)) == 0,
                  "attention parameter gradients change with dinp NULL");
        free(pg);
    }

    /* a short workspace or bad sizes: an error before any gradient changes */
    float *before = fdup(r[0].grads, np);
    r[0].ws_size -= 4;
    CHECK_INT_EQ(run_backward(&r[0], all, dy, &s), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "workspace");
    CHECK(memcmp(before, r[0].grads, np * sizeof(float)) == 0);
    attn_shape bad = s;
    bad.H = 5;
    CHECK_INT_EQ(run_forward(&r[0], all, &bad), STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "5 heads do not divide the width 64");
    bad.H = 4, bad.T = 0;
    CHECK_INT_EQ(run_forward(&r[0], all, &bad), STOKE_ERR_ARG);
    CHECK_INT_EQ(cpu_attention_workspace(B, T, C, H),
                 (size_t)(B * T * C + B * T * 3 * C + B * H * T * T) * sizeof(float));
    run_free(&r[0]), run_free(&r[1]), run_free(&r[2]);
    free(before), free(dy), free(all);
}

static void case_torch(void)
{
    const int B = 2, T = 9, C = 24, H = 3;
    size_t n = (size_t)B * T * C;
    float *dy = falloc(n);
    fill(dy, n, -1, 1);
    attn_shape s = {B, T, C, H, 0, NULL};
    float *all = make_inputs(&s);
    size_t off[6];
    part_bounds(&s, off);
    tbuf ins[6];
    for (int p = 0; p < 5; p++) {
        ins[p].p = all + off[p];
        ins[p].n = off[p + 1] - off[p];
    }
    ins[5].p = dy, ins[5].n = n;
    size_t outn[12];
    float *t[12];
    for (int c = 0; c < 2; c++) {
        outn[6 * c] = n;
        for (int p = 0; p < 5; p++) {
            outn[6 * c + 1 + p] = off[p + 1] - off[p];
        }
    }
    for (int i = 0; i < 12; i++) {
        t[i] = falloc(outn[i]);
    }
    char args[64];
    snprintf(args, sizeof args, "%d %d %d %d", B, T, C, H);
    if (torch_run("attn", args, ins, 6, t, outn, 12) == 0) {
        for (int causal = 0; causal < 2; causal++) {
            s.causal = causal;
            attn_run r;
            run_alloc(&r, &s);
            CHECK_INT_EQ(run_forward(&r, all, &s), STOKE_OK);
            CHECK_INT_EQ(run_backward(&r, all, dy, &s), STOKE_OK);
            char label[96];
            double *w = to_double(t[6 * causal], n);
            snprintf(label, sizeof label, "attention vs torch (causal %d)", causal);
            check_close(label, r.out, w, n, 1e-4, 1e-4);
            free(w);
            for (int p = 0; p < 5; p++) {
                w = to_double(t[6 * causal + 1 + p], outn[6 * causal + 1 + p]);
                snprintf(label, sizeof label, "attention %s vs torch (causal %d)", part_name[p],
                         causal);
                check_close(label, r.grads + off[p], w, off[p + 1] - off[p], 2e-4, 2e-4);
                free(w);
            }
            run_free(&r);
        }
    }
    for (int i = 0; i < 12; i++) {
        free(t[i]);
    }
    free(dy), free(all);
}

int main(int argc, char **argv)
{
    CHECK_TORCH_PART(argc, argv, case_torch);
    case_against_reference(2, 5, 8, 2, 0);
    case_against_reference(2, 5, 8, 2, 1);
    case_against_reference(1, 7, 12, 3, 1); /* odd sizes, hs = 4 */
    case_serial_heads();
    case_threads_and_errors();
    return CHECK_DONE();
}
