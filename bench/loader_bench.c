/* loader_bench.c - stoke's side of bench/loader_bench.sh: the loader on Fashion-MNIST
 * held in memory, with the benchmark's transforms (pad 2 + random 28x28 crop, random
 * flip, normalize, float32) and with none (float32 samples copied as they are), beside
 * a plain memcpy of the same bytes. Prints one "name value" line per measurement. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoke/data.h"

static double run(stoke_dataset *d, const stoke_transform_opts *to, int workers, int epochs,
                  stoke_loader_stats *stats)
{
    stoke_loader_opts o = {.sampler = {.batch_size = 256, .shuffle = true, .seed = 1},
                           .transform = to,
                           .workers = workers};
    stoke_loader *l = NULL;
    if (stoke_loader_create(d, &o, &l) != STOKE_OK) {
        fprintf(stderr, "loader: %s\n", stoke_last_error());
        exit(1);
    }
    stoke_batch b;
    /* One epoch to warm up (threads started, pages touched), then the timed ones. */
    while (stoke_loader_next(l, &b) == STOKE_OK && b.size > 0)
        ;
    int64_t samples = 0;
    float sink = 0;
    uint64_t t0 = stoke_now_ns();
    for (int e = 0; e < epochs; e++)
        while (stoke_loader_next(l, &b) == STOKE_OK && b.size > 0) {
            samples += b.size;
            sink += ((const float *)b.inputs)[0]; /* the consumer touches its batch */
        }
    double s = (double)(stoke_now_ns() - t0) / 1e9;
    __asm__ volatile("" : : "r"(sink)); /* keep the touches */
    stoke_loader_get_stats(l, stats);
    stoke_loader_destroy(l);
    return (double)samples / s;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    int epochs = argc > 2 ? atoi(argv[2]) : 3;
    stoke_dataset *src = NULL, *mem = NULL, *f32 = NULL;
    if (stoke_dataset_open(path, NULL, &src) != STOKE_OK ||
        stoke_dataset_load(src, &mem) != STOKE_OK) {
        fprintf(stderr, "stoke_bench_loader: %s\n", stoke_last_error());
        return 1;
    }
    const stoke_dataset_info *info = stoke_dataset_get_info(mem);
    int64_t n = info->count;
    size_t px = info->input_bytes;
    /* The no-transform case holds float32 samples, as a TensorDataset would. */
    float *x = malloc((size_t)n * px * sizeof(float));
    unsigned char *y = malloc((size_t)n * info->target_bytes);
    unsigned char *raw = malloc(px);
    for (int64_t i = 0; i < n; i++) {
        stoke_dataset_read(mem, i, raw, y + i * info->target_bytes);
        for (size_t j = 0; j < px; j++)
            x[(size_t)i * px + j] = raw[j] / 255.0f;
    }
    stoke_dataset_info fi = *info;
    fi.input_dtype = STOKE_F32;
    fi.input_bytes = px * sizeof(float);
    if (stoke_dataset_from_arrays(&fi, x, y, false, &f32) != STOKE_OK) {
        fprintf(stderr, "stoke_bench_loader: %s\n", stoke_last_error());
        return 1;
    }
    stoke_op ops[3] = {{.kind = STOKE_OP_CROP, .height = 28, .width = 28, .pad = 2},
                       {.kind = STOKE_OP_HFLIP},
                       {.kind = STOKE_OP_NORMALIZE, .mean = {0.2860f}, .std = {0.3530f}}};
    stoke_transform_opts to = {.ops = ops, .nops = 3};
    stoke_loader_stats st;
    for (int w = 1; w <= 2; w++) {
        double r = run(mem, &to, w, epochs, &st);
        printf("stoke_transform_w%d %.0f\n", w, r);
        printf("# stoke transform, %d workers: wait avg %.3f ms p95 %.3f max %.3f, "
               "fill avg %.2f of %d, busy %.3f ms/batch\n",
               w, st.wait_avg_ms, st.wait_p95_ms, st.wait_max_ms, st.fill_avg, st.slots,
               st.busy_avg_ms);
    }
    for (int w = 1; w <= 2; w++) {
        double r = run(f32, NULL, w, epochs, &st);
        printf("stoke_plain_w%d %.0f\n", w, r);
        printf("# stoke plain, %d workers: wait avg %.3f ms p95 %.3f max %.3f, "
               "fill avg %.2f of %d\n",
               w, st.wait_avg_ms, st.wait_p95_ms, st.wait_max_ms, st.fill_avg, st.slots);
    }
    /* The physical limit: memcpy of the same bytes, batch by batch, in order. */
    size_t batch_bytes = 256 * fi.input_bytes;
    unsigned char *dst = malloc(batch_bytes);
    memset(dst, 0, batch_bytes);
    int64_t copied = 0;
    uint64_t t0 = stoke_now_ns();
    for (int e = 0; e < epochs; e++)
        for (int64_t i = 0; i + 256 <= n; i += 256) {
            memcpy(dst, (unsigned char *)x + (size_t)i * fi.input_bytes, batch_bytes);
            __asm__ volatile("" : : "r"(dst) : "memory");
            copied += 256;
        }
    double s = (double)(stoke_now_ns() - t0) / 1e9;
    printf("memcpy %.0f\n", (double)copied / s);
    printf("memcpy_gbps %.1f\n", 2.0 * (double)copied * (double)fi.input_bytes / s / 1e9);
    free(dst);
    stoke_dataset_close(f32);
    stoke_dataset_close(mem);
    stoke_dataset_close(src);
    free(x);
    free(y);
    free(raw);
    return 0;
}
