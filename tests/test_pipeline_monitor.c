/* test_pipeline_monitor.c - a real loader feeding a real monitor: the samples carry
 * the input pipeline's numbers, consistent with the loader's own statistics. */
#include "check.h"
#include "stoke/train.h"
#include "stoke/data.h"
#include "stoke/monitor.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The adapter is the loader's stoke_loader_pipeline (the monitor does not
 * depend on the data module); it runs on the sampler thread. */

#define MAX_SAMPLES 4096

/* Every sample the monitor took, written on the sampler thread only and read after
 * stoke_monitor_stop has joined it. */
typedef struct record {
    int n;
    stoke_mon_sample s[MAX_SAMPLES];
    char json[2048]; /* the last sample's JSON line */
    bool json_ok;
} record;

static stoke_status keep(const stoke_mon_sample *s, void *ctx)
{
    record *r = ctx;
    if (r->n < MAX_SAMPLES)
        r->s[r->n++] = *s;
    r->json_ok = stoke_mon_format_json(s, r->json, sizeof r->json) > 0;
    return STOKE_OK;
}

enum { N = 512, H = 32, W = 32 };

static const stoke_op ops[3] = {
    {.kind = STOKE_OP_CROP, .height = H, .width = W, .pad = 4},
    {.kind = STOKE_OP_HFLIP},
    {.kind = STOKE_OP_NORMALIZE, .mean = {0.5f}, .std = {0.25f}},
};

/* Waits until the monitor has taken a sample with a sequence number past `seq`, for as
 * long as that takes: no clock (ctest's TIMEOUT bounds a sampler that never samples). */
static uint64_t wait_past(stoke_monitor *m, uint64_t seq)
{
    stoke_mon_sample s;
    while (!stoke_monitor_latest(m, &s) || s.seq <= seq)
        usleep(5000);
    return s.seq;
}

static void test_loader_feeds_monitor(int workers)
{
    uint8_t *x = malloc((size_t)N * H * W);
    int32_t *y = malloc((size_t)N * sizeof *y);
    for (int i = 0; i < N * H * W; i++)
        x[i] = (uint8_t)(i * 2654435761u >> 24);
    for (int i = 0; i < N; i++)
        y[i] = i % 10;
    stoke_dataset_info info = {.count = N,
                               .input_shape = {2, {H, W}},
                               .input_dtype = STOKE_U8,
                               .target_kind = STOKE_TARGET_CLASS,
                               .target_dtype = STOKE_I32,
                               .num_classes = 10,
                               .input_bytes = H * W,
                               .target_bytes = 4};
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, x, y, false, &d), STOKE_OK);
    stoke_transform_opts to = {.ops = ops, .nops = 3};
    stoke_loader_opts lo = {.sampler = {.batch_size = 16, .shuffle = true, .seed = 5},
                            .transform = &to,
                            .workers = workers,
                            .prefetch = 3};
    stoke_loader *l = NULL;
    if (d)
        CHECK_INT_EQ(stoke_loader_create(d, &lo, &l), STOKE_OK);
    record *r = calloc(1, sizeof *r);
    stoke_monitor_config mc = {.interval_s = 0.05,
                               .no_gpu = true,
                               .on_sample = keep,
                               .ctx = r,
                               .pipeline_fn = stoke_loader_pipeline,
                               .pipeline_ctx = l};
    stoke_monitor *m = NULL;
    if (l)
        CHECK_INT_EQ(stoke_monitor_create(&mc, &m), STOKE_OK);
    if (!m) {
        stoke_loader_destroy(l);
        stoke_dataset_close(d);
        free(r), free(x), free(y);
        return;
    }
    CHECK_INT_EQ(stoke_monitor_start(m), STOKE_OK);

    /* A consumer that also does a little work per batch, until the monitor has taken
     * several samples while it ran (bounded, so a stuck sampler fails instead). */
    int64_t taken = 0;
    uint64_t seq0 = wait_past(m, 0);
    double sink = 0;
    stoke_mon_sample now;
    for (int i = 0; i < 200000; i++) {
        stoke_batch b;
        if (stoke_loader_next(l, &b) != STOKE_OK) {
            CHECK_MSG(0, "loader: %s", stoke_last_error());
            break;
        }
        if (b.size == 0)
            continue;
        taken++;
        const float *in = b.inputs;
        for (int64_t k = 0; k < b.size * H * W; k += 7)
            sink += in[k];
        usleep(300);
        if (taken >= 40 && stoke_monitor_latest(m, &now) && now.seq >= seq0 + 6)
            break;
    }
    CHECK(isfinite(sink));
    /* One more sample after the last batch, so the final snapshot is complete. */
    stoke_monitor_latest(m, &now);
    CHECK(wait_past(m, now.seq + 1) > 0);
    stoke_monitor_stop(m);
    CHECK_INT_EQ(stoke_monitor_error(m, NULL, 0), STOKE_OK);

    stoke_loader_stats ls;
    stoke_loader_get_stats(l, &ls);
    CHECK_INT_EQ(ls.batches, taken);

    /* Every sample carries the pipeline; counts never go backwards; shares are shares. */
    int rated = 0;
    const stoke_mon_sample *prev = NULL;
    for (int i = 0; i < r->n; i++) {
        const stoke_mon_sample *s = &r->s[i];
        CHECK_MSG(s->valid & STOKE_MS_PIPELINE, "sample %llu has no pipeline",
                  (unsigned long long)s->seq);
        /* The first sample has a window too: create took the baseline. */
        CHECK(s->valid & STOKE_MS_PIPELINE_RATE);
        const stoke_mon_pipeline *p = &s->pipe;
        CHECK_INT_EQ(p->slots, ls.slots);
        CHECK_INT_EQ(p->workers, workers);
        CHECK(p->batches >= 0 && p->batches <= taken);
        CHECK(p->busy_frac >= 0 && p->busy_frac <= 1.0);
        CHECK(p->wait_max_ms >= p->wait_avg_ms - 1e-9 || p->batches == 0);
        CHECK(p->fill_avg >= 0 && p->fill_avg <= ls.slots);
        if (s->valid & STOKE_MS_PIPELINE_RATE) {
            rated++;
            CHECK_MSG(s->data_wait_pct >= 0 && s->data_wait_pct <= 100, "wait %.3f%%",
                      s->data_wait_pct);
            CHECK(s->batches_per_s >= 0);
        }
        if (prev) {
            CHECK(p->batches >= prev->pipe.batches);
            CHECK(p->wait_total_s >= prev->pipe.wait_total_s);
            /* A window with batches has a rate, one without has none (it may have a
             * wait: the wait in progress counts, test_slow_batches). */
            bool moved = p->batches > prev->pipe.batches;
            CHECK_INT_EQ(s->batches_per_s > 0, moved);
        }
        prev = s;
    }
    CHECK(r->n >= 7);
    /* The last snapshot is the loader's own account, frozen since the last batch. */
    if (prev) {
        const stoke_mon_pipeline *p = &prev->pipe;
        CHECK_INT_EQ(p->batches, taken);
        CHECK_NEAR(p->wait_avg_ms, ls.wait_avg_ms, 0);
        CHECK_NEAR(p->wait_p95_ms, ls.wait_p95_ms, 0);
        CHECK_NEAR(p->wait_max_ms, ls.wait_max_ms, 0);
        CHECK_NEAR(p->fill_avg, ls.fill_avg, 0);
        CHECK_NEAR(p->wait_total_s, ls.wait_avg_ms * (double)taken / 1e3, 1e-12);
    }
    /* The JSON line of the last sample carries the same numbers. */
    CHECK(r->json_ok);
    cJSON *j = r->json_ok ? cJSON_Parse(r->json) : NULL;
    cJSON *jp = j ? cJSON_GetObjectItem(j, "pipeline") : NULL;
    CHECK(jp != NULL);
    if (jp) {
        CHECK_NEAR(cJSON_GetObjectItem(jp, "batches")->valuedouble, (double)taken, 0);
        CHECK_NEAR(cJSON_GetObjectItem(jp, "workers")->valuedouble, workers, 0);
        double wp = cJSON_GetObjectItem(jp, "wait_pct")->valuedouble;
        CHECK(wp >= 0 && wp <= 100);
    }
    cJSON_Delete(j);

    /* The history has one wait-share value per rated sample; the summary shows the
     * loader; the diagnosis, if it blames the pipeline, quotes its numbers. */
    const stoke_mon_history *h = stoke_monitor_history(m);
    CHECK_INT_EQ(h->sys[STOKE_M_DATA_WAIT].count, (size_t)rated);
    CHECK_INT_EQ(h->sys[STOKE_M_BATCH_RATE].count, (size_t)rated);
    stoke_mon_summary sum;
    CHECK_INT_EQ(stoke_mon_summarize(h, 2, &sum), STOKE_OK);
    CHECK(sum.have_pipeline);
    CHECK(sum.sys[STOKE_M_DATA_WAIT].max <= 100);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    stoke_mon_summary_print(&sum, f);
    fclose(f);
    char want[96];
    snprintf(want, sizeof want, "input pipeline: %lld batches, %d workers, %d slots",
             (long long)taken, workers, ls.slots);
    CHECK_STR_CONTAINS(text, want);
    CHECK_STR_CONTAINS(text, "data_wait_pct");
    free(text);
    stoke_finding fs[16];
    size_t nf = stoke_diagnose(&sum, fs, 16);
    for (size_t i = 0; i < nf && i < 16; i++)
        if (strcmp(fs[i].rule->id, "data-wait") == 0) {
            CHECK_STR_CONTAINS(fs[i].evidence, "the ring of 3 slots");
            /* the loader's numbers, as the finding's fields */
            const stoke_finding_figure *slots = stoke_finding_figure_of(&fs[i], "prefetch");
            const stoke_finding_figure *w = stoke_finding_figure_of(&fs[i], "workers");
            CHECK(slots && slots->value == 3 && w && w->value == workers);
        }

    stoke_monitor_free(m);
    stoke_loader_destroy(l);
    stoke_dataset_close(d);
    free(r);
    free(x);
    free(y);
}

/* Batches slower to come than the monitor's window (each sample costs CPU time:
 * sample_delay_us): the windows in which the consumer waits with no batch handed out
 * count that wait, so the median wait share shows a loop that does nothing but wait.
 * Counted only when a batch arrives, most windows said 0% and the median 0. */
static void test_slow_batches(void)
{
    enum { SN = 64, BS = 16, DELAY_US = 20000 }; /* 0.32 s of CPU per batch */
    uint8_t *x = calloc((size_t)SN, H * W);
    int32_t *y = calloc((size_t)SN, sizeof *y);
    stoke_dataset_info info = {.count = SN,
                               .input_shape = {2, {H, W}},
                               .input_dtype = STOKE_U8,
                               .target_kind = STOKE_TARGET_CLASS,
                               .target_dtype = STOKE_I32,
                               .num_classes = 10,
                               .input_bytes = H * W,
                               .target_bytes = 4};
    stoke_dataset *d = NULL;
    CHECK_INT_EQ(stoke_dataset_from_arrays(&info, x, y, false, &d), STOKE_OK);
    stoke_loader_opts lo = {.sampler = {.batch_size = BS}, .sample_delay_us = DELAY_US};
    stoke_loader *l = NULL;
    if (d)
        CHECK_INT_EQ(stoke_loader_create(d, &lo, &l), STOKE_OK);
    stoke_monitor_config mc = {.interval_s = 0.05,
                               .no_gpu = true,
                               .pipeline_fn = stoke_loader_pipeline,
                               .pipeline_ctx = l};
    stoke_monitor *m = NULL;
    if (l)
        CHECK_INT_EQ(stoke_monitor_create(&mc, &m), STOKE_OK);
    if (m) {
        CHECK_INT_EQ(stoke_monitor_start(m), STOKE_OK);
        stoke_batch b;
        for (int i = 0; i < SN / BS; i++)
            CHECK_INT_EQ(stoke_loader_next(l, &b), STOKE_OK);
        stoke_monitor_stop(m);
        const stoke_mon_history *h = stoke_monitor_history(m);
        stoke_mon_summary sum;
        CHECK_INT_EQ(stoke_mon_summarize(h, 2, &sum), STOKE_OK);
        const stoke_stats *w = &sum.sys[STOKE_M_DATA_WAIT];
        const stoke_stats *rate = &sum.sys[STOKE_M_BATCH_RATE];
        /* more windows than batches: most saw none handed out */
        CHECK_MSG(w->n > (size_t)(SN / BS), "%zu windows for %d batches", w->n, SN / BS);
        CHECK_MSG(rate->median == 0, "batches/s median %.2f", rate->median);
        CHECK_MSG(w->median >= 50, "wait share median %.1f%% of a loop that only waits", w->median);
        stoke_monitor_free(m);
    }
    stoke_loader_destroy(l);
    stoke_dataset_close(d);
    free(x);
    free(y);
}

int main(void)
{
    test_slow_batches();
    test_loader_feeds_monitor(2);
    test_loader_feeds_monitor(0); /* the consumer does the work: busy is its own */
    return CHECK_DONE();
}
