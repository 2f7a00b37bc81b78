/* dense.c - linear layer kernels on oneDNN matmul (fp32, bf16) or OpenBLAS SGEMM
 * (fp32), and the compute-thread setting. */
#include "nn/cpu/dense.h"

#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/sigstack.h"
#include "nn/cpu/dnnl_util.h"

/* The team size whose threads were given alternate signal stacks, for this calling
 * thread: libgomp keeps one pool of threads per thread that starts a team. */
static _Thread_local int t_sigstack_team;

/* oneDNN's JIT GEMMs run on the calling thread and its OpenMP team with rsp on the
 * heap, so a signal handled there would write its frame over the heap: every thread
 * of a team of n gets an alternate signal stack (core/sigstack.h says why). The pool
 * only grows, so a team no larger than one already covered needs nothing; `force`
 * covers again (a thread setting: cheap, and rare). */
static void team_sigstacks(int n, int force)
{
    if (!force && n <= t_sigstack_team)
        return;
#pragma omp parallel num_threads(n)
    stoke_sigstack_ensure();
    if (n > t_sigstack_team)
        t_sigstack_team = n;
}

void cpu_set_threads(int n)
{
    if (n <= 0)
        n = omp_get_num_procs();
    if (n < 1)
        n = 1;
    atomic_store(&cpu_ctx_current()->threads, n);
    openblas_set_num_threads(n);
    omp_set_num_threads(n);
    team_sigstacks(n, 1);
}

int cpu_get_threads(void) { return cpu_ctx_threads(cpu_ctx_current()); }

int cpu_threads_apply(void)
{
    int n = cpu_get_threads();
    if (omp_get_max_threads() != n)
        omp_set_num_threads(n);
    team_sigstacks(n, 0);
    return n;
}

void cpu_linear_set_impl(cpu_linear_impl impl)
{
    atomic_store(&cpu_ctx_current()->linear_impl, (int)impl);
}

/* OpenBLAS keeps one thread count for the process: each BLAS call sets it to its
 * context's (a thread's own context's unset count leaves OpenBLAS's own). */
static void blas_threads(void)
{
    int n = atomic_load(&cpu_ctx_current()->threads);
    if (n > 0 && openblas_get_num_threads() != n)
        openblas_set_num_threads(n);
}

/* oneDNN vs OpenBLAS, measured by bench/kernels_bench.c on the Sapphire Rapids
 * machine (Intel Xeon, 2 cores, AVX-512, AMX): oneDNN's matmul is as fast or faster at
 * every benchmark shape with 1 thread (MLP 784-512-512-10 at batch 256: 5-45% faster;
 * the CNN's 3136-128-10 at batch 128: equal to 2x), so AUTO uses it; it also does not
 * depend on the core OpenBLAS picks by CPU model (docs/nn-kernels.md). OpenBLAS stays
 * selectable for that benchmark and the tests. */
static int use_blas(void)
{
    return atomic_load(&cpu_ctx_current()->linear_impl) == CPU_LINEAR_BLAS;
}

/* GEMMs below this many multiply-adds run on one thread: splitting a few microseconds
 * of work costs more in OpenMP fork/join than it saves (OpenBLAS makes the same call
 * internally), and a second thread that the OS has descheduled would stall them for
 * a whole time slice. */
#define LINEAR_SERIAL_MACS (1L << 21)

static int linear_threads(int B, int C, int OC)
{
    return (long)B * C * OC < LINEAR_SERIAL_MACS ? 1 : cpu_get_threads();
}

/* One cached shape: the three matmuls and the memory objects they run on. The lock
 * serializes calls of one shape, since the memory objects' handles are per call. */
typedef struct linear_key {
    int B, C, OC, has_bias, bf16, threads;
    int relu; /* forward applies ReLU (a oneDNN post-op): linear -> relu fused */
} linear_key;

typedef struct linear_entry {
    pthread_mutex_t lock;
    dnnl_util_prim fwd, bwd_d, bwd_w;
    dnnl_memory_t f_inp, f_w, f_bias, f_out; /* inp (B,C), weight^T (C,OC), (1,OC), (B,OC) */
    dnnl_memory_t d_dout, d_w, d_dinp;       /* dout (B,OC), weight (OC,C), dinp (B,C) */
    dnnl_memory_t w_doutT, w_inp, w_dw;      /* dout^T (OC,B), inp (B,C), dweight (OC,C) */
    void *scratch;                           /* max scratchpad of the three */
    size_t scratch_bytes;
    int threads; /* OpenMP threads the primitives were created for */
} linear_entry;

static stoke_status md2(dnnl_memory_desc_t *md, int64_t d0, int64_t d1, dnnl_data_type_t dt,
                        int64_t s0, int64_t s1)
{
    dnnl_dims_t dims = {d0, d1}, strides = {s0, s1};
    return dnnl_util_check(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides), "md");
}

/* Builds a matmul dst = src @ wei (+ bias) (+ dst if sum) and memory objects for it. */
static stoke_status make_matmul(dnnl_util_prim *pr, const dnnl_memory_desc_t *src,
                                const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                                const dnnl_memory_desc_t *dst, int post, dnnl_memory_t *m_src,
                                dnnl_memory_t *m_wei, dnnl_memory_t *m_bias, dnnl_memory_t *m_dst)
{
    dnnl_engine_t eng = NULL;
    stoke_status st = dnnl_util_engine(&eng, NULL);
    if (st != STOKE_OK)
        return st;
    dnnl_matmul_desc_t desc;
    st = dnnl_util_check(dnnl_matmul_desc_init(&desc, src, wei, bias, dst), "matmul desc");
    if (st != STOKE_OK)
        return st;
    dnnl_primitive_attr_t attr = dnnl_util_attr(post);
    if (!attr)
        return stoke_fail(STOKE_ERR_NOMEM, "oneDNN: cannot create a matmul attribute");
    dnnl_primitive_desc_t pd = NULL;
    st = dnnl_util_check(dnnl_primitive_desc_create(&pd, &desc, attr, eng, NULL), "matmul");
    dnnl_primitive_attr_destroy(attr);
    if (st != STOKE_OK)
        return st;
    st = dnnl_util_prim_init(pr, pd, "matmul");
    dnnl_primitive_desc_destroy(pd);
    if (st != STOKE_OK)
        return st;
    dnnl_memory_t *mems[4] = {m_src, m_wei, m_bias, m_dst};
    const dnnl_memory_desc_t *mds[4] = {src, wei, bias, dst};
    for (int i = 0; i < 4 && st == STOKE_OK; i++)
        if (mems[i])
            st = dnnl_util_check(dnnl_memory_create(mems[i], mds[i], eng, DNNL_MEMORY_NONE),
                                 "memory");
    return st;
}

static void linear_entry_free(void *value)
{
    linear_entry *e = value;
    dnnl_util_prim_destroy(&e->fwd);
    dnnl_util_prim_destroy(&e->bwd_d);
    dnnl_util_prim_destroy(&e->bwd_w);
    dnnl_memory_t ms[] = {e->f_inp, e->f_w,    e->f_bias,  e->f_out, e->d_dout,
                          e->d_w,   e->d_dinp, e->w_doutT, e->w_inp, e->w_dw};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        if (ms[i])
            dnnl_memory_destroy(ms[i]);
    pthread_mutex_destroy(&e->lock);
    free(e->scratch);
    free(e);
}

/* fp32 backward products whose reduction (K: the output features for dinp, the batch
 * for dweight) is at most this long run on oneDNN's GEMM, dnnl_sgemm, rather than the
 * matmul primitives. The reference CNN's 3136->128 layer at batch 128 has K = 128 in
 * both: there the primitives ran at 60-65% of the forward's rate on the Cascade Lake
 * machine and dnnl_sgemm cut the layer's backward by 29% (1 and 2 threads); at K = 256
 * (the MLP's weight gradients at batch 256) it was 11% faster for 784->512 and 8%
 * slower for 512->512, so longer reductions stay on the primitives
 * (docs/nn-kernels.md, "Where a training step's time goes"). On AVX-512 the
 * reduction is then one of dnnl_sgemm's K blocks and it adds one finished product to
 * the gradient, as the primitive's sum post-op does: from zero, a second call doubles
 * it exactly (tests/test_nn_dense_conv.c, test_linear_large). Under an AVX2 or SSE4.1
 * cap neither the primitives nor dnnl_sgemm double exactly at these sizes (they
 * accumulate onto the gradient as they go); they still add, deterministically. */
#define SGEMM_MAX_K 128

/* Whether product (M x N, reduction K) of a backward runs on dnnl_sgemm: fp32, a short
 * reduction, and large enough to be threaded (the MLP's 512->10 and the CNN's 128->10
 * gained nothing measurable either way). */
static int use_sgemm(int bf16, long M, long N, long K)
{
    return !bf16 && K <= SGEMM_MAX_K && M * N * K >= LINEAR_SERIAL_MACS;
}

static stoke_status linear_create(const void *key, void **value)
{
    const linear_key *k = key;
    linear_entry *e = calloc(1, sizeof *e);
    if (!e)
        return stoke_fail(STOKE_ERR_NOMEM, "linear %dx%d->%d: out of memory", k->B, k->C, k->OC);
    pthread_mutex_init(&e->lock, NULL);
    e->threads = k->threads;
    dnnl_data_type_t in = k->bf16 ? dnnl_bf16 : dnnl_f32, f = dnnl_f32;
    int64_t B = k->B, C = k->C, OC = k->OC;
    dnnl_memory_desc_t inp, wT, bias, out, dout, w, dinp, doutT, dw;
    stoke_status st = STOKE_OK;
    if ((st = md2(&inp, B, C, in, C, 1)) || (st = md2(&wT, C, OC, in, 1, C)) ||
        (st = md2(&bias, 1, OC, f, OC, 1)) || (st = md2(&out, B, OC, f, OC, 1)) ||
        (st = md2(&dout, B, OC, in, OC, 1)) || (st = md2(&w, OC, C, in, C, 1)) ||
        (st = md2(&dinp, B, C, f, C, 1)) || (st = md2(&doutT, OC, B, in, 1, OC)) ||
        (st = md2(&dw, OC, C, f, C, 1)))
        goto fail;
    st = make_matmul(&e->fwd, &inp, &wT, k->has_bias ? &bias : NULL, &out,
                     k->relu ? DNNL_UTIL_POST_RELU : 0, &e->f_inp, &e->f_w,
                     k->has_bias ? &e->f_bias : NULL, &e->f_out);
    if (st == STOKE_OK)
        st = make_matmul(&e->bwd_d, &dout, &w, NULL, &dinp, DNNL_UTIL_POST_SUM, &e->d_dout, &e->d_w,
                         NULL, &e->d_dinp);
    if (st == STOKE_OK)
        st = make_matmul(&e->bwd_w, &doutT, &inp, NULL, &dw, DNNL_UTIL_POST_SUM, &e->w_doutT,
                         &e->w_inp, NULL, &e->w_dw);
    if (st != STOKE_OK)
        goto fail;
    size_t s = e->fwd.scratch_bytes;
    if (e->bwd_d.scratch_bytes > s)
        s = e->bwd_d.scratch_bytes;
    if (e->bwd_w.scratch_bytes > s)
        s = e->bwd_w.scratch_bytes;
    e->scratch_bytes = dnnl_util_align(s);
    if (use_sgemm(k->bf16, B, C, OC) || use_sgemm(k->bf16, OC, C, B)) {
        /* dnnl_sgemm generates its kernels on its first call, which took 44 ms on the
         * Cascade Lake machine: a call of 8x8x8 does it here, while the model is
         * planned, rather than in the first step */
        float a[64] = {0}, b[64] = {0}, c[64] = {0};
        st = dnnl_util_check(dnnl_sgemm('N', 'N', 8, 8, 8, 1.0f, a, 8, b, 8, 0.0f, c, 8),
                             "linear backward (sgemm)");
        if (st != STOKE_OK)
            goto fail;
    }
    if (s && !(e->scratch = aligned_alloc(DNNL_UTIL_ALIGN, e->scratch_bytes))) {
        st = stoke_fail(STOKE_ERR_NOMEM, "linear %dx%d->%d: out of memory", k->B, k->C, k->OC);
        goto fail;
    }
    *value = e;
    return STOKE_OK;
fail:
    /* Failed shapes are not cached; release what was built. */
    linear_entry_free(e);
    return st;
}

static stoke_status linear_entry_get(int B, int C, int OC, int has_bias, int bf16, int relu,
                                     linear_entry **e)
{
    if (B <= 0 || C <= 0 || OC <= 0)
        return stoke_fail(STOKE_ERR_ARG, "linear: sizes B=%d C=%d OC=%d must be positive", B, C,
                          OC);
    linear_key k;
    memset(&k, 0, sizeof k);
    k = (linear_key){B, C, OC, has_bias != 0, bf16 != 0, linear_threads(B, C, OC), relu != 0};
    /* The primitive is created and run (see with_threads) with the key's thread count. */
    int prev = omp_get_max_threads();
    if (prev != k.threads)
        omp_set_num_threads(k.threads);
    void *v = NULL;
    stoke_status st = dnnl_util_cache_get(&k, sizeof k, linear_create, linear_entry_free, &v);
    if (prev != k.threads)
        omp_set_num_threads(prev);
    *e = v;
    return st;
}

/* Sets the calling thread's OpenMP count to the entry's for the duration of its
 * primitives, and back: the other kernels rely on the compute-thread setting. */
static int with_threads(const linear_entry *e)
{
    int prev = omp_get_max_threads();
    if (prev != e->threads)
        omp_set_num_threads(e->threads);
    return prev;
}

static void restore_threads(const linear_entry *e, int prev)
{
    if (prev != e->threads)
        omp_set_num_threads(prev);
}

stoke_status cpu_linear_prepare(int B, int C, int OC, int has_bias, int bf16)
{
    linear_entry *e = NULL;
    return linear_entry_get(B, C, OC, has_bias, bf16, 0, &e);
}

stoke_status cpu_linear_workspace(int B, int C, int OC, int has_bias, int bf16, size_t *bytes)
{
    linear_entry *e = NULL;
    stoke_status st = linear_entry_get(B, C, OC, has_bias, bf16, 0, &e);
    *bytes = st == STOKE_OK ? e->scratch_bytes : 0;
    return st;
}

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* dbias (OC) += sum over b of dout (B, OC). Each column is summed in b order whatever
 * the thread count, so the result does not depend on the split. Hand-written because
 * it is a memory-bound column sum that oneDNN has no primitive for outside the
 * convolution. */
static void bias_grad(float *dbias, const float *dout, const uint16_t *dout16, int B, int OC)
{
    enum { CHUNK = 256 };
    int nchunks = (OC + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (nchunks > 1 && (long)B * OC > 65536)
    for (int c = 0; c < nchunks; c++) {
        int o0 = c * CHUNK, n = OC - o0 < CHUNK ? OC - o0 : CHUNK;
        float acc[CHUNK];
        for (int j = 0; j < n; j++)
            acc[j] = 0.0f;
        for (int b = 0; b < B; b++) {
            if (dout16) {
                const uint16_t *row = dout16 + (size_t)b * OC + o0;
                for (int j = 0; j < n; j++)
                    acc[j] += bf16_to_f32(row[j]);
            } else {
                const float *row = dout + (size_t)b * OC + o0;
                for (int j = 0; j < n; j++)
                    acc[j] += row[j];
            }
        }
        for (int j = 0; j < n; j++)
            dbias[o0 + j] += acc[j];
    }
}

static void set(dnnl_memory_t m, const void *p)
{
    dnnl_memory_set_data_handle(m, (void *)(uintptr_t)p);
}

static stoke_status matmul_forward(float *out, const void *inp, const void *weight,
                                   const float *bias, int B, int C, int OC, int bf16, int relu)
{
    linear_entry *e = NULL;
    stoke_status st = linear_entry_get(B, C, OC, bias != NULL, bf16, relu, &e);
    if (st != STOKE_OK)
        return st;
    pthread_mutex_lock(&e->lock);
    set(e->f_inp, inp);
    set(e->f_w, weight);
    set(e->f_out, out);
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, e->f_inp}, {DNNL_ARG_WEIGHTS, e->f_w}, {DNNL_ARG_DST, e->f_out}};
    int n = 3;
    if (bias) {
        set(e->f_bias, bias);
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->f_bias};
    }
    int prev = with_threads(e);
    st = dnnl_util_exec(&e->fwd, n, args, e->scratch, "linear forward");
    restore_threads(e, prev);
    pthread_mutex_unlock(&e->lock);
    return st;
}

static stoke_status sgemm(char ta, int M, int N, int K, const float *A, int lda, const float *Bm,
                          int ldb, float *Cm, int ldc, const char *what)
{
    return dnnl_util_check(dnnl_sgemm(ta, 'N', M, N, K, 1.0f, A, lda, Bm, ldb, 1.0f, Cm, ldc),
                           what);
}

static stoke_status matmul_backward(float *dinp, float *dweight, float *dbias, const void *dout,
                                    const void *inp, const void *weight, int B, int C, int OC,
                                    int bf16)
{
    linear_entry *e = NULL;
    stoke_status st = linear_entry_get(B, C, OC, dbias != NULL, bf16, 0, &e);
    if (st != STOKE_OK)
        return st;
    pthread_mutex_lock(&e->lock);
    int prev = with_threads(e);
    if (dinp && use_sgemm(bf16, B, C, OC)) {
        /* dinp (B, C) += dout (B, OC) . weight (OC, C) */
        st = sgemm('N', B, C, OC, dout, OC, weight, C, dinp, C, "linear backward data (sgemm)");
    } else if (dinp) {
        set(e->d_dout, dout);
        set(e->d_w, weight);
        set(e->d_dinp, dinp);
        dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_SRC, e->d_dout}, {DNNL_ARG_WEIGHTS, e->d_w}, {DNNL_ARG_DST, e->d_dinp}};
        st = dnnl_util_exec(&e->bwd_d, 3, args, e->scratch, "linear backward data");
    }
    if (st == STOKE_OK && use_sgemm(bf16, OC, C, B)) {
        /* dweight (OC, C) += dout^T (OC, B) . inp (B, C) */
        st = sgemm('T', OC, C, B, dout, OC, inp, C, dweight, C, "linear backward weights (sgemm)");
    } else if (st == STOKE_OK) {
        set(e->w_doutT, dout);
        set(e->w_inp, inp);
        set(e->w_dw, dweight);
        dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_SRC, e->w_doutT}, {DNNL_ARG_WEIGHTS, e->w_inp}, {DNNL_ARG_DST, e->w_dw}};
        st = dnnl_util_exec(&e->bwd_w, 3, args, e->scratch, "linear backward weights");
    }
    restore_threads(e, prev);
    pthread_mutex_unlock(&e->lock);
    if (st == STOKE_OK && dbias)
        bias_grad(dbias, bf16 ? NULL : dout, bf16 ? dout : NULL, B, OC);
    return st;
}

stoke_status cpu_linear_forward(float *out, const float *inp, const float *weight,
                                const float *bias, int B, int C, int OC)
{
    cpu_threads_apply();
    if (!use_blas())
        return matmul_forward(out, inp, weight, bias, B, C, OC, 0, 0);
    if (B <= 0 || C <= 0 || OC <= 0)
        return stoke_fail(STOKE_ERR_ARG, "linear: sizes B=%d C=%d OC=%d must be positive", B, C,
                          OC);
    blas_threads();
    float beta = 0.0f;
    if (bias) {
        for (int b = 0; b < B; b++)
            memcpy(out + (size_t)b * OC, bias, (size_t)OC * sizeof *out);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, C, 1.0f, inp, C, weight, C, beta,
                out, OC);
    return STOKE_OK;
}

stoke_status cpu_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, int B, int C, int OC)
{
    cpu_threads_apply();
    if (!use_blas())
        return matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, C, OC, 0);
    if (B <= 0 || C <= 0 || OC <= 0)
        return stoke_fail(STOKE_ERR_ARG, "linear: sizes B=%d C=%d OC=%d must be positive", B, C,
                          OC);
    blas_threads();
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, C, OC, 1.0f, dout, OC, weight, C,
                    1.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, B, 1.0f, dout, OC, inp, C, 1.0f,
                dweight, C);
    if (dbias)
        bias_grad(dbias, dout, NULL, B, OC);
    return STOKE_OK;
}

stoke_status cpu_linear_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight,
                                     const float *bias, int B, int C, int OC)
{
    cpu_threads_apply();
    return matmul_forward(out, inp, weight, bias, B, C, OC, 1, 0);
}

stoke_status cpu_linear_backward_bf16(float *dinp, float *dweight, float *dbias,
                                      const uint16_t *dout, const uint16_t *inp,
                                      const uint16_t *weight, int B, int C, int OC)
{
    cpu_threads_apply();
    return matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, C, OC, 1);
}

stoke_status cpu_linear_relu_forward(float *out, const void *inp, const void *weight,
                                     const float *bias, int B, int C, int OC, int bf16)
{
    cpu_threads_apply();
    return matmul_forward(out, inp, weight, bias, B, C, OC, bf16 != 0, 1);
}

stoke_status cpu_linear_relu_prepare(int B, int C, int OC, int has_bias, int bf16)
{
    linear_entry *e = NULL;
    return linear_entry_get(B, C, OC, has_bias, bf16, 1, &e);
}
