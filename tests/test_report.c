/* test_report.c - `stoke report`'s reading side: the min/max downsampler (at most
 * RP_MAX_POINTS points, the extremes kept, NaN as a break), the inputs recognised by
 * their content, bad lines named, and the page's escaping. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "report/report.h"
#include "stoke/report.h"

static void test_small_series_exact(void)
{
    rp_series s;
    rp_series_init(&s, "loss");
    for (int i = 0; i < 100; i++)
        CHECK(rp_series_add(&s, i, i * 0.1, i * i));
    rp_out o;
    CHECK(rp_series_points(&s, &o));
    CHECK_INT_EQ(o.points, 100);
    CHECK_INT_EQ(o.n, 100);
    CHECK(!rp_series_downsampled(&s));
    for (int i = 0; i < 100; i++)
        CHECK(o.p[i].x == i && o.p[i].y == i * i && o.p[i].x2 == i * 0.1);
    free(o.p);
    /* exactly the cap: every point */
    rp_series_free(&s);
    rp_series_init(&s, "x");
    for (int i = 0; i < RP_MAX_POINTS; i++)
        rp_series_add(&s, i, i, sin(i));
    CHECK(rp_series_points(&s, &o));
    CHECK_INT_EQ(o.points, RP_MAX_POINTS);
    free(o.p);
    rp_series_free(&s);
}

static void test_downsample_keeps_extremes(void)
{
    rp_series s;
    rp_series_init(&s, "loss");
    const int n = 1000003;
    for (int i = 0; i < n; i++) {
        double y = sin(i * 0.001);
        if (i == 123457)
            y = 50; /* a spike */
        if (i == 876543)
            y = -40; /* a dip */
        rp_series_add(&s, i, i, y);
    }
    CHECK(rp_series_downsampled(&s));
    CHECK_INT_EQ(s.total, n);
    rp_out o;
    CHECK(rp_series_points(&s, &o));
    CHECK(o.points <= RP_MAX_POINTS && o.points > RP_MAX_POINTS / 2);
    bool spike = false, dip = false;
    for (int i = 0; i < o.n; i++) {
        spike |= o.p[i].y == 50 && o.p[i].x == 123457;
        dip |= o.p[i].y == -40 && o.p[i].x == 876543;
        if (i)
            CHECK(o.p[i].x > o.p[i - 1].x); /* in order */
    }
    CHECK(spike && dip);
    CHECK(o.p[0].x < 1000 && o.p[o.n - 1].x > n - 2000); /* the whole range */
    free(o.p);
    rp_series_free(&s);
}

static void test_nan_breaks(void)
{
    rp_series s;
    rp_series_init(&s, "loss");
    for (int i = 0; i < 20; i++)
        rp_series_add(&s, i * 10, i, i >= 5 && i < 8 ? NAN : (i == 12 ? INFINITY : 1.0 / (i + 1)));
    CHECK_INT_EQ(s.nonfinite, 4);
    CHECK(s.first_nonfinite_x == 50);
    rp_out o;
    CHECK(rp_series_points(&s, &o));
    CHECK_INT_EQ(o.points, 16);
    int breaks = 0;
    for (int i = 0; i < o.n; i++)
        breaks += isnan(o.p[i].y);
    CHECK(breaks >= 2);
    free(o.p);
    rp_series_free(&s);
    /* downsampled: a NaN still breaks the line, the finite points stay capped */
    rp_series_init(&s, "loss");
    for (int i = 0; i < 100000; i++)
        rp_series_add(&s, i, i, i % 25000 == 7 ? NAN : 1);
    CHECK(rp_series_points(&s, &o));
    CHECK(o.points <= RP_MAX_POINTS);
    breaks = 0;
    for (int i = 0; i < o.n; i++)
        breaks += isnan(o.p[i].y);
    CHECK_INT_EQ(breaks, 4);
    free(o.p);
    rp_series_free(&s);
}

static void test_stack(void)
{
    rp_stack st = {0};
    for (int i = 0; i < 10; i++)
        rp_stack_add(&st, i, (double[RP_STACK_MAX]){1, 2, 3, 4, 5, NAN});
    rp_row *r;
    CHECK_INT_EQ(rp_stack_rows(&st, &r), 10);
    CHECK(r[3].x == 3 && r[3].v[2] == 3 && r[3].v[5] == 0);
    free(r);
    for (int i = 10; i < 100000; i++)
        rp_stack_add(&st, i, (double[RP_STACK_MAX]){1, 2, 3, 4, 5, 6});
    int n = rp_stack_rows(&st, &r);
    CHECK(n <= RP_MAX_POINTS / 2 && n > 100);
    CHECK_NEAR(r[n - 1].v[1], 2, 1e-9);
    free(r);
    rp_stack_free(&st);
}

static rp_kind detect(const char *text, char *err, size_t n)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    rp_kind k = RP_NONE;
    if (!text[0]) { /* fmemopen refuses a size of 0 on some libcs */
        f = tmpfile();
    }
    if (rp_detect(f, "in.jsonl", &k) != STOKE_OK)
        snprintf(err, n, "%s", stoke_last_error());
    fclose(f);
    return k;
}

static void test_detect(void)
{
    char err[1024] = "";
    CHECK_INT_EQ(detect("{\"type\":\"start\",\"time\":1,\"model\":\"mlp\"}\n", err, sizeof err),
                 RP_RUN);
    CHECK_INT_EQ(detect("\n{\"type\":\"finding\",\"rule\":\"x\"}\n", err, sizeof err), RP_RUN);
    CHECK_INT_EQ(detect("{\"seq\":1,\"t\":0.5,\"time\":2}\n", err, sizeof err), RP_MONITOR);
    CHECK_INT_EQ(detect("{\"type\":\"diagnosis\",\"findings\":[]}\n", err, sizeof err), RP_MONITOR);
    CHECK_INT_EQ(detect("{\n  \"schema\": \"stoke-bench/1\",\n  \"speedup\": 2\n}\n", err, sizeof err),
                 RP_BENCH);
    CHECK_INT_EQ(detect("{\"trials\": [], \"chosen\": {}}", err, sizeof err), RP_TUNE);
    CHECK_INT_EQ(detect("", err, sizeof err), RP_RUN); /* empty: an empty run */
    err[0] = 0;
    CHECK_INT_EQ(detect("\n\nhello world\n", err, sizeof err), RP_NONE);
    CHECK_STR_CONTAINS(err, "in.jsonl:3:");
    err[0] = 0;
    CHECK_INT_EQ(detect("{\"type\":\"weird\"}\n", err, sizeof err), RP_NONE);
    CHECK_STR_CONTAINS(err, "in.jsonl:1:");
}

static const char *tmpdir;

static char *write_tmp(const char *name, const char *text)
{
    static char paths[8][512];
    static int k;
    char *p = paths[k++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    check_spit(p, text, strlen(text));
    return p;
}

static void test_read_and_errors(void)
{
    const char *run = write_tmp(
        "run.jsonl",
        "{\"type\":\"start\",\"time\":1,\"model\":\"<b>mlp</b>\",\"dataset\":\"d\",\"epochs\":1}\n"
        "{\"type\":\"step\",\"elapsed\":0.1,\"epoch\":0,\"step\":10,\"loss\":2.3,\"batch_loss\":null,"
        "\"lr\":0.1,\"samples_per_s\":100,\"data_wait_pct\":1,\"input_pct\":1,\"forward_pct\":30,"
        "\"backward_pct\":50,\"optimizer_pct\":10}\n"
        "not json\n");
    const char *out = write_tmp("o.html", "old");
    const char *in[2] = {run, NULL};
    CHECK(stoke_report_write(in, NULL, 1, out, NULL) == STOKE_ERR_FORMAT);
    CHECK_STR_CONTAINS(stoke_last_error(), "run.jsonl:3:");
    size_t n;
    char *kept = (char *)check_slurp(out, &n);
    CHECK(kept && n == 3 && !memcmp(kept, "old", 3)); /* no half page */
    free(kept);
    /* two of a kind */
    const char *run2 = write_tmp("run2.jsonl", "{\"type\":\"start\",\"time\":1}\n");
    const char *two[2] = {run2, run2};
    CHECK(stoke_report_write(two, NULL, 2, out, NULL) == STOKE_ERR_ARG);
    CHECK_STR_CONTAINS(stoke_last_error(), "both a training log");
    /* a good log: escaped, its plots drawn */
    const char *good = write_tmp(
        "good.jsonl",
        "{\"type\":\"start\",\"time\":1,\"model\":\"<b>mlp</b>\",\"dataset\":\"d\",\"epochs\":1}\n"
        "{\"type\":\"step\",\"elapsed\":0.1,\"epoch\":0,\"step\":10,\"loss\":2.3,\"lr\":0.1}\n"
        "{\"type\":\"step\",\"elapsed\":0.2,\"epoch\":0,\"step\":20,\"loss\":null,\"lr\":0.1}\n"
        "{\"type\":\"finding\",\"rule\":\"data-wait\",\"evidence\":\"a <script>\",\"advice\":\"x\","
        "\"figures\":{\"wait\":{\"value\":80,\"unit\":\"%\"}},\"changes\":[{\"setting\":\"workers\","
        "\"unit\":\"workers\",\"current\":0,\"suggested\":2,\"direction\":1,\"to\":null}]}\n");
    const char *one[1] = {good};
    CHECK(stoke_report_write(one, NULL, 1, out, &n) == STOKE_OK);
    unsigned char *raw = check_slurp(out, &n);
    char *page = raw ? calloc(n + 1, 1) : NULL; /* check_slurp's bytes end without a NUL */
    if (page)
        memcpy(page, raw, n);
    free(raw);
    CHECK(page != NULL);
    if (page) {
        CHECK(!strstr(page, "<b>mlp</b>") && strstr(page, "&lt;b&gt;mlp&lt;/b&gt;"));
        CHECK(!strstr(page, "<script"));
        CHECK_STR_CONTAINS(page, "1 of 2 losses are NaN, the first at step 20");
        CHECK_STR_CONTAINS(page, "workers 0 -&gt; 2 workers");
        CHECK_STR_CONTAINS(page, "wait 80%");
    }
    free(page);
}

int main(void)
{
    char dir[] = "/tmp/stoke-test-report-XXXXXX";
    tmpdir = mkdtemp(dir);
    CHECK(tmpdir != NULL);
    test_small_series_exact();
    test_downsample_keeps_extremes();
    test_nan_breaks();
    test_stack();
    test_detect();
    if (tmpdir) {
        test_read_and_errors();
        check_rm_rf(tmpdir);
    }
    return CHECK_DONE();
}
