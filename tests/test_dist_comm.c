/* test_dist_comm.c - the reducer's communication thread (src/dist/comm.c), which MPI's
 * gradients take, without MPI and without a model, so ThreadSanitizer sees it: a
 * bucket handed over returns at once while its mean runs on the thread (a mean that
 * waits for the test proves it), buckets are reduced in readiness order and copied
 * back only at finish, a bucket no backward handed over is reduced at finish, a
 * failure on the thread reaches the step with its message and later buckets are not
 * reduced, and release or free with buckets queued waits for them. Also the grace
 * OpenMPI's mpirun gives a rank between a Ctrl-C's SIGTERM and SIGKILL, as a rank reads
 * it from its environment. */
#include <pthread.h>
#include <stdatomic.h>

#include "check.h"
#include "dist/dist_impl.h"

enum { NB = 3 };

/* The test's transport: the mean over a world of two whose other rank holds 1.0 in
 * every slot, so a gradient g becomes (g + 1) / 2. A mean may be held until the test
 * releases it, and may fail. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool hold, fail_next;
static int order[16], norder;
static atomic_int running;

static stoke_status fake_mean(stoke_dist *d, float *buf, size_t n)
{
    (void)d;
    atomic_store(&running, 1);
    pthread_mutex_lock(&mu);
    while (hold)
        pthread_cond_wait(&cv, &mu);
    bool fail = fail_next;
    fail_next = false;
    if (norder < 16)
        order[norder++] = (int)buf[0]; /* each bucket's first value names it */
    pthread_mutex_unlock(&mu);
    atomic_store(&running, 0);
    if (fail)
        return stoke_fail(STOKE_ERR_IO, "rank 1 of 2: the peer is gone");
    for (size_t i = 0; i < n; i++)
        buf[i] = (buf[i] + 1.0f) / 2.0f;
    return STOKE_OK;
}

static stoke_status fake_f64(stoke_dist *d, double *v, int n, int op)
{
    (void)d, (void)v, (void)n, (void)op;
    return STOKE_OK;
}

static const dist_host host = {.name = "test", .allreduce_f64 = fake_f64};
static const dist_grads grads = {.name = "test", .mean = fake_mean};

static void *h_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    return calloc(1, bytes);
}

static void h_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static void h_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    memcpy(dst, src, bytes);
}

static const stoke_grad_ops ops = {.alloc = h_alloc, .free = h_free, .copy = h_copy};

/* NB buckets of two parameters each, 1000 floats per parameter; bucket k's values
 * start at 10 * (k + 1). */
static float grad[NB][2][1000];
static float *gp[NB][2];
static size_t elems[NB][2];
static int params[NB][2];
static stoke_grad_bucket buckets[NB];

static void fill(void)
{
    for (int k = 0; k < NB; k++) {
        for (int p = 0; p < 2; p++) {
            for (int i = 0; i < 1000; i++)
                grad[k][p][i] = (float)(10 * (k + 1) + i % 7);
            gp[k][p] = grad[k][p];
            elems[k][p] = 1000;
            params[k][p] = 2 * k + p;
        }
        buckets[k] = (stoke_grad_bucket){.index = k,
                                         .count = 2,
                                         .params = params[k],
                                         .grads = gp[k],
                                         .elems = elems[k],
                                         .bytes = 2 * 1000 * sizeof(float)};
    }
}

static void set_hold(bool h)
{
    pthread_mutex_lock(&mu);
    hold = h;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static bool reduced(int k)
{
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 1000; i++)
            if (grad[k][p][i] != (float)(10 * (k + 1) + i % 7 + 1) / 2.0f)
                return false;
    return true;
}

static void test_stop_grace(void)
{
    double g = -1;
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("OMPI_MCA_odls_base_sigkill_timeout", "5", 1);
    CHECK(!stoke_dist_stop_grace(&g) && g == 0); /* not under OpenMPI's mpirun */
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    CHECK(stoke_dist_stop_grace(&g) && g == 5);
    setenv("OMPI_MCA_odls_base_sigkill_timeout", "0", 1);
    CHECK(stoke_dist_stop_grace(&g) && g == 0);
    unsetenv("OMPI_MCA_odls_base_sigkill_timeout"); /* OpenMPI's default */
    CHECK(stoke_dist_stop_grace(&g) && g == 1);
    const char *bad[] = {"-1", "5s", "x", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("OMPI_MCA_odls_base_sigkill_timeout", bad[i], 1);
        CHECK_MSG(!stoke_dist_stop_grace(&g), "%s", bad[i]);
    }
    unsetenv("OMPI_MCA_odls_base_sigkill_timeout");
    unsetenv("OMPI_COMM_WORLD_SIZE");
}

int main(void)
{
    test_stop_grace();
    stoke_dist *d = NULL;
    CHECK_INT_EQ(dist_new(2, 0, &host, NULL, &grads, &d), STOKE_OK);
    if (!d)
        return CHECK_DONE();
    stoke_grad_reducer r = stoke_dist_reducer(d);
    fill();
    CHECK_INT_EQ(r.prepare(r.self, &ops, buckets, NB), STOKE_OK);

    /* handed over while the thread is held: reduce returns, nothing is copied back */
    set_hold(true);
    for (int k = 0; k < NB - 1; k++)
        CHECK_INT_EQ(r.reduce(r.self, &ops, &buckets[k]), STOKE_OK);
    CHECK(!reduced(0) && !reduced(1));
    while (!atomic_load(&running)) /* the first mean starts on the thread (however late) */
        usleep(1000);
    CHECK(atomic_load(&running));
    set_hold(false);
    /* the last bucket never handed over (an unsynced micro-batch): finish starts it */
    stoke_dist_set_sync(d, false);
    CHECK_INT_EQ(r.reduce(r.self, &ops, &buckets[NB - 1]), STOKE_OK); /* skipped */
    stoke_dist_set_sync(d, true);
    CHECK_INT_EQ(r.finish(r.self, &ops), STOKE_OK);
    for (int k = 0; k < NB - 1; k++)
        CHECK_MSG(reduced(k), "bucket %d", k);
    CHECK(!reduced(NB - 1)); /* finish reduces only when no bucket was started */
    CHECK_INT_EQ(norder, 2);
    CHECK(norder >= 2 && order[0] == 10 && order[1] == 20); /* readiness order */

    /* a step whose buckets were all unsynced: finish reduces every one */
    fill();
    norder = 0;
    stoke_dist_set_sync(d, false);
    for (int k = 0; k < NB; k++)
        CHECK_INT_EQ(r.reduce(r.self, &ops, &buckets[k]), STOKE_OK);
    stoke_dist_set_sync(d, true);
    CHECK_INT_EQ(r.finish(r.self, &ops), STOKE_OK);
    for (int k = 0; k < NB; k++)
        CHECK_MSG(reduced(k), "bucket %d at finish", k);
    stoke_dist_stats st;
    stoke_dist_get_stats(d, &st);
    CHECK_INT_EQ(st.steps, 2);
    CHECK_INT_EQ(st.reductions, 2 + NB);
    CHECK(st.exposed_s >= 0 && st.finish_s >= st.exposed_s);

    /* a failure on the thread reaches finish with its message */
    fill();
    pthread_mutex_lock(&mu);
    fail_next = true;
    pthread_mutex_unlock(&mu);
    for (int k = 0; k < NB; k++)
        CHECK_INT_EQ(r.reduce(r.self, &ops, &buckets[k]), STOKE_OK);
    CHECK_INT_EQ(r.finish(r.self, &ops), STOKE_ERR_IO);
    CHECK(strstr(stoke_last_error(), "the peer is gone") != NULL);
    /* and stays: the world is broken, every later step says so */
    CHECK_INT_EQ(r.finish(r.self, &ops), STOKE_ERR_IO);

    /* released with buckets still queued: release waits for them, then frees */
    r.release(r.self, &ops);
    stoke_dist_free(d);
    d = NULL;
    CHECK_INT_EQ(dist_new(2, 0, &host, NULL, &grads, &d), STOKE_OK);
    r = stoke_dist_reducer(d);
    fill();
    CHECK_INT_EQ(r.prepare(r.self, &ops, buckets, NB), STOKE_OK);
    for (int k = 0; k < NB; k++)
        CHECK_INT_EQ(r.reduce(r.self, &ops, &buckets[k]), STOKE_OK);
    r.release(r.self, &ops);
    stoke_dist_free(d);
    return CHECK_DONE();
}
