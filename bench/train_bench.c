/* train_bench.c - the machine's matrix-multiply peaks for bench/train_bench.sh: 1024^3
 * products through OpenBLAS cblas_sgemm, oneDNN dnnl_sgemm, and oneDNN's matmul
 * primitive in fp32 and bf16 (weights in the layout the primitive prefers, as a trainer
 * would keep them), on 1 and 2 threads. Prints "name GFLOP/s" lines; the training
 * benchmark divides each training step's FLOP rate by the best of them. */
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 1024

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void check(dnnl_status_t s, const char *what)
{
    if (s != dnnl_success) {
        fprintf(stderr, "train_bench: %s failed (oneDNN status %d)\n", what, (int)s);
        exit(1);
    }
}

/* Best GFLOP/s of `repeats` windows of `iters` calls of fn(ctx). A shared, busy machine
 * makes the best window the closest to what the hardware can do. */
static double best_rate(void (*fn)(void *), void *ctx, int repeats, int iters)
{
    for (int i = 0; i < 3; i++)
        fn(ctx);
    double best = 0;
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
        for (int i = 0; i < iters; i++)
            fn(ctx);
        double rate = 2.0 * N * N * N * iters / (now() - t0) / 1e9;
        if (rate > best)
            best = rate;
    }
    return best;
}

typedef struct {
    float *a, *b, *c;
} sgemm_ctx;

static void openblas_run(void *p)
{
    sgemm_ctx *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, g->a, N, g->b, N, 0.0f,
                g->c, N);
}

static void dnnl_sgemm_run(void *p)
{
    sgemm_ctx *g = p;
    check(dnnl_sgemm('N', 'N', N, N, N, 1.0f, g->a, N, g->b, N, 0.0f, g->c, N), "dnnl_sgemm");
}

typedef struct {
    dnnl_primitive_t prim;
    dnnl_stream_t stream;
    dnnl_memory_t src, wei, dst;
} matmul_ctx;

static void matmul_run(void *p)
{
    matmul_ctx *m = p;
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, m->src}, {DNNL_ARG_WEIGHTS, m->wei}, {DNNL_ARG_DST, m->dst}};
    check(dnnl_primitive_execute(m->prim, m->stream, 3, args), "matmul execute");
    check(dnnl_stream_wait(m->stream), "stream wait");
}

/* Fills a oneDNN memory object with small nonzero values (the bit pattern 0x3e3e is
 * 0.186 in bf16; as fp32 pairs it is 0.186 too), so no denormals or NaNs slow it. */
static void fill(dnnl_memory_t mem)
{
    const dnnl_memory_desc_t *md;
    void *h;
    check(dnnl_memory_get_memory_desc(mem, &md), "get md");
    check(dnnl_memory_get_data_handle(mem, &h), "get handle");
    memset(h, 0x3e, dnnl_memory_desc_get_size(md));
}

static double matmul_rate(dnnl_engine_t eng, dnnl_stream_t stream, dnnl_data_type_t dt)
{
    dnnl_dims_t dims = {N, N};
    dnnl_memory_desc_t a_md, b_md, c_md;
    check(dnnl_memory_desc_init_by_tag(&a_md, 2, dims, dt, dnnl_ab), "src md");
    check(dnnl_memory_desc_init_by_tag(&b_md, 2, dims, dt, dnnl_format_tag_any), "weights md");
    check(dnnl_memory_desc_init_by_tag(&c_md, 2, dims, dnnl_f32, dnnl_ab), "dst md");
    dnnl_matmul_desc_t desc;
    check(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md), "matmul desc");
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &desc, NULL, eng, NULL), "matmul pd");
    matmul_ctx m = {.stream = stream};
    check(dnnl_primitive_create(&m.prim, pd), "matmul primitive");
    check(dnnl_memory_create(&m.src, &a_md, eng, DNNL_MEMORY_ALLOCATE), "src");
    check(dnnl_memory_create(&m.wei, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                             eng, DNNL_MEMORY_ALLOCATE),
          "weights");
    check(dnnl_memory_create(&m.dst, &c_md, eng, DNNL_MEMORY_ALLOCATE), "dst");
    fill(m.src);
    fill(m.wei);
    double r = best_rate(matmul_run, &m, 3, dt == dnnl_bf16 ? 60 : 20);
    dnnl_memory_destroy(m.src);
    dnnl_memory_destroy(m.wei);
    dnnl_memory_destroy(m.dst);
    dnnl_primitive_destroy(m.prim);
    dnnl_primitive_desc_destroy(pd);
    return r;
}

int main(void)
{
    sgemm_ctx g = {malloc(sizeof(float) * N * N), malloc(sizeof(float) * N * N),
                   malloc(sizeof(float) * N * N)};
    if (!g.a || !g.b || !g.c) {
        fprintf(stderr, "train_bench: out of memory\n");
        return 1;
    }
    srand(1);
    for (int i = 0; i < N * N; i++) {
        g.a[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        g.b[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    }
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    check(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine");
    check(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags), "stream");
    const char *ct = getenv("OPENBLAS_CORETYPE");
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    printf("# OpenBLAS core %s (OPENBLAS_CORETYPE=%s), oneDNN ISA %s\n", openblas_get_corename(),
           ct ? ct : "(unset)",
           isa == dnnl_cpu_isa_avx512_core_amx    ? "avx512_core_amx"
           : isa == dnnl_cpu_isa_avx512_core_bf16 ? "avx512_core_bf16"
           : isa == dnnl_cpu_isa_avx2             ? "avx2"
                                                  : "other");
    for (int t = 1; t <= 2; t++) {
        openblas_set_num_threads(t);
        omp_set_num_threads(t);
        printf("openblas_sgemm_t%d %.1f\n", t, best_rate(openblas_run, &g, 3, 20));
        printf("dnnl_sgemm_t%d %.1f\n", t, best_rate(dnnl_sgemm_run, &g, 3, 20));
        printf("dnnl_matmul_f32_t%d %.1f\n", t, matmul_rate(eng, stream, dnnl_f32));
        printf("dnnl_matmul_bf16_t%d %.1f\n", t, matmul_rate(eng, stream, dnnl_bf16));
        fflush(stdout);
    }
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    free(g.a);
    free(g.b);
    free(g.c);
    return 0;
}
