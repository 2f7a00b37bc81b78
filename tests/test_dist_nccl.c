/* test_dist_nccl.c - the gradients over NCCL (src/dist/nccl.c) without a GPU: a world of
 * two ranks as two threads of this process (host collectives over a barrier), NCCL's
 * test double (tests/fake/fake_nccl.c, which averages over the ranks' buffers and
 * records every call) on the CUDA runtime double's streams and device memory. The
 * transport alone through dist's reducer (means, the stream, the buffers, ncclAvg, the
 * call order), its errors, and two CUDA models, one a rank, trained together against
 * one model accumulating both micro-batches. */
#include "check.h"
#include "dist_util.h"
#include "dist/dist_impl.h"
#include "dist/nccl_abi.h"
#include "stoke/dist.h"
#include "stoke/nn.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { N = 2 };

/* ---- a world of threads: the host's collectives over a barrier ---- */

typedef struct world {
    pthread_barrier_t bar;
    const void *slot[N]; /* each rank's buffer during a collective */
} world;

typedef struct rank_ctx {
    world *w;
    int rank;
} rank_ctx;

static rank_ctx *ctx_of(stoke_dist *d) { return d->host_state; }

/* Each rank's buffer published; `f` run by each rank over all of them; written back
 * only after every rank has read. */
static void publish(stoke_dist *d, const void *mine)
{
    rank_ctx *c = ctx_of(d);
    c->w->slot[c->rank] = mine;
    pthread_barrier_wait(&c->w->bar);
}

static void done_reading(stoke_dist *d) { pthread_barrier_wait(&ctx_of(d)->w->bar); }

static stoke_status th_f64(stoke_dist *d, double *v, int n, int op)
{
    publish(d, v);
    double *t = malloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    for (int i = 0; t && i < n; i++) {
        t[i] = ((const double *)ctx_of(d)->w->slot[0])[i];
        for (int r = 1; r < N; r++) {
            double x = ((const double *)ctx_of(d)->w->slot[r])[i];
            t[i] = op == 0 ? t[i] + x : op == 1 ? (x < t[i] ? x : t[i]) : (x > t[i] ? x : t[i]);
        }
    }
    done_reading(d);
    if (t)
        memcpy(v, t, (size_t)n * sizeof *t);
    free(t);
    return t ? STOKE_OK : stoke_fail(STOKE_ERR_NOMEM, "threads: no memory");
}

static stoke_status th_f32(stoke_dist *d, float *v, size_t n)
{
    (void)d, (void)v, (void)n;
    return stoke_fail(STOKE_ERR_UNAVAILABLE, "threads: no float all-reduce");
}

static stoke_status th_bcast(stoke_dist *d, void *buf, size_t bytes, int root)
{
    publish(d, buf);
    if (ctx_of(d)->rank != root)
        memcpy(buf, ctx_of(d)->w->slot[root], bytes);
    done_reading(d);
    return STOKE_OK;
}

static stoke_status th_allgather(stoke_dist *d, const void *mine, size_t bytes, void *all)
{
    publish(d, mine);
    for (int r = 0; r < N; r++)
        memcpy((char *)all + (size_t)r * bytes, ctx_of(d)->w->slot[r], bytes);
    done_reading(d);
    return STOKE_OK;
}

static const dist_host threads_host = {.name = "threads",
                                       .allreduce_f64 = th_f64,
                                       .allreduce_f32 = th_f32,
                                       .bcast = th_bcast,
                                       .allgather = th_allgather};

/* The threads' world carries gradients only over NCCL. */
static stoke_status no_start(stoke_dist *d, int k, float *buf, size_t n, void *stream)
{
    (void)d, (void)k, (void)buf, (void)n, (void)stream;
    return stoke_fail(STOKE_ERR_UNAVAILABLE, "threads: gradients need NCCL");
}

static stoke_status no_wait(stoke_dist *d, void *stream)
{
    (void)d, (void)stream;
    return STOKE_OK;
}

static const dist_grads no_grads = {.name = "none", .start = no_start, .wait = no_wait};

/* Rank `rank` of a world of two on host "node0" (one machine, a GPU a rank). */
static stoke_dist *rank_dist(rank_ctx *c)
{
    stoke_dist *d = NULL;
    if (dist_new(N, c->rank, &threads_host, c, &no_grads, &d) != STOKE_OK)
        return NULL;
    strcpy(d->host_name, "node0");
    d->local_world = N;
    d->local_rank = c->rank;
    return d;
}

/* ---- the doubles, as this test reaches them ---- */

static struct {
    int (*malloc)(void **, size_t);
    int (*free)(void *);
    int (*memcpy)(void *, const void *, size_t, int);
    int (*memcpy_async)(void *, const void *, size_t, int, void *);
    int (*memset_async)(void *, int, size_t, void *);
    int (*stream_create)(void **, unsigned);
    int (*stream_sync)(void *);
    int (*stream_destroy)(void *);
} rt;

static struct {
    int (*calls)(void);
    int (*call)(int, char *, unsigned long *, int *, const void **, void **, size_t *, int *, int *,
                void **);
    long (*executed)(void);
    int (*live)(void);
    void (*fail_allreduce)(int);
    void (*set_async_error)(int);
    void (*set_version)(int);
    void (*reset)(void);
} nc;

static bool load_doubles(void)
{
    void *cu = dlopen(FAKE_CUDART, RTLD_NOW | RTLD_LOCAL);
    void *nl = dlopen(FAKE_NCCL, RTLD_NOW | RTLD_LOCAL);
    if (!cu || !nl)
        return false;
#define GET(lib, dst, name) *(void **)&(dst) = dlsym(lib, name)
    GET(cu, rt.malloc, "cudaMalloc");
    GET(cu, rt.free, "cudaFree");
    GET(cu, rt.memcpy, "cudaMemcpy");
    GET(cu, rt.memcpy_async, "cudaMemcpyAsync");
    GET(cu, rt.memset_async, "cudaMemsetAsync");
    GET(cu, rt.stream_create, "cudaStreamCreateWithFlags");
    GET(cu, rt.stream_sync, "cudaStreamSynchronize");
    GET(cu, rt.stream_destroy, "cudaStreamDestroy");
    GET(nl, nc.calls, "fake_nccl_calls");
    GET(nl, nc.call, "fake_nccl_call");
    GET(nl, nc.executed, "fake_nccl_executed");
    GET(nl, nc.live, "fake_nccl_live");
    GET(nl, nc.fail_allreduce, "fake_nccl_fail_allreduce");
    GET(nl, nc.set_async_error, "fake_nccl_set_async_error");
    GET(nl, nc.set_version, "fake_nccl_set_version");
    GET(nl, nc.reset, "fake_nccl_reset");
#undef GET
    return rt.malloc && rt.stream_destroy && nc.calls && nc.reset;
}

/* The model's memory entries on the runtime double: what a CUDA model hands a reducer. */
static void *dev_alloc(void *ctx, size_t bytes)
{
    void *p = NULL;
    if (rt.malloc(&p, bytes) != 0)
        return NULL;
    rt.memset_async(p, 0, bytes, ctx);
    return p;
}

static void dev_free(void *ctx, void *p)
{
    (void)ctx;
    rt.free(p);
}

static void dev_copy(void *ctx, void *dst, const void *src, size_t bytes)
{
    rt.memcpy_async(dst, src, bytes, 3 /* device to device */, ctx);
}

/* ---- (a) the transport alone, through dist's reducer ---- */

enum { BUCKETS = 3, ROUNDS = 2, MAXP = 3 };
static const int bucket_params[BUCKETS] = {2, 1, 3};
static const size_t bucket_elems[BUCKETS][MAXP] = {{5, 3}, {7}, {2, 4, 6}};

typedef enum mode { M_OK, M_FAIL_ALLREDUCE, M_ASYNC_ERROR, M_ONE_DEVICE } mode;

typedef struct rank_result {
    unsigned long thread;
    stoke_status use, prepare, reduce, finish; /* the checks are main's, after the join */
    char use_msg[1024], reduce_msg[1024], finish_msg[1024];
    char transport[16];
    void *stream;
    const float *stage[BUCKETS];
    size_t stage_n[BUCKETS];
    int wrong; /* gradients that are not the ranks' mean */
    int checked;
} rank_result;

typedef struct job {
    rank_ctx c;
    mode m;
    rank_result *res;
} job;

static float value(int rank, int round, int k, int j, size_t i)
{
    return (float)((k * 31 + j * 11 + (int)i * 7 + round * 5) % 13) * 0.25f + (float)rank * 1.5f;
}

static void *transport_rank(void *arg)
{
    job *jb = arg;
    rank_result *res = jb->res;
    int rank = jb->c.rank;
    res->thread = (unsigned long)pthread_self();
    stoke_dist *d = rank_dist(&jb->c);
    if (!d)
        return NULL;
    res->use = dist_use_nccl(d, jb->m == M_ONE_DEVICE ? 0 : rank);
    snprintf(res->use_msg, sizeof res->use_msg, "%s", res->use ? stoke_last_error() : "");
    snprintf(res->transport, sizeof res->transport, "%s", stoke_dist_transport(d));
    if (res->use != STOKE_OK) {
        stoke_dist_free(d);
        return NULL;
    }
    void *stream = NULL;
    rt.stream_create(&stream, 1);
    res->stream = stream;
    stoke_grad_ops ops = {
        .ctx = stream, .stream = stream, .alloc = dev_alloc, .free = dev_free, .copy = dev_copy};
    /* the buckets of a model: its gradients in device memory */
    stoke_grad_bucket b[BUCKETS];
    int params[BUCKETS][MAXP];
    float *grads[BUCKETS][MAXP];
    int p = 0;
    for (int k = 0; k < BUCKETS; k++) {
        b[k] = (stoke_grad_bucket){.index = k,
                                   .count = bucket_params[k],
                                   .params = params[k],
                                   .grads = grads[k],
                                   .elems = bucket_elems[k]};
        for (int j = 0; j < bucket_params[k]; j++) {
            params[k][j] = p++;
            grads[k][j] = dev_alloc(stream, bucket_elems[k][j] * sizeof(float));
            b[k].bytes += bucket_elems[k][j] * sizeof(float);
        }
    }
    stoke_grad_reducer r = stoke_dist_reducer(d);
    res->prepare = r.prepare(r.self, &ops, b, BUCKETS);
    rt.stream_sync(stream); /* the zeroing fills done before the values are written */
    for (int k = 0; res->prepare == STOKE_OK && k < BUCKETS; k++) {
        res->stage[k] = d->stage[k].buf;
        res->stage_n[k] = d->stage[k].n;
    }
    float host[8];
    for (int round = 0; res->prepare == STOKE_OK && round < ROUNDS; round++) {
        for (int k = 0; k < BUCKETS; k++)
            for (int j = 0; j < b[k].count; j++) {
                for (size_t i = 0; i < b[k].elems[j]; i++)
                    host[i] = value(rank, round, k, j, i);
                rt.memcpy(grads[k][j], host, b[k].elems[j] * sizeof(float), 1);
            }
        for (int k = 0; k < BUCKETS && res->reduce == STOKE_OK; k++) {
            res->reduce = r.reduce(r.self, &ops, &b[k]);
            if (res->reduce != STOKE_OK)
                snprintf(res->reduce_msg, sizeof res->reduce_msg, "%s", stoke_last_error());
        }
        if (res->reduce != STOKE_OK)
            break;
        res->finish = r.finish(r.self, &ops);
        if (res->finish != STOKE_OK)
            snprintf(res->finish_msg, sizeof res->finish_msg, "%s", stoke_last_error());
        rt.stream_sync(stream); /* the means and the copies back behind them */
        if (res->finish != STOKE_OK)
            break;
        for (int k = 0; k < BUCKETS; k++)
            for (int j = 0; j < b[k].count; j++) {
                rt.memcpy(host, grads[k][j], b[k].elems[j] * sizeof(float), 2);
                for (size_t i = 0; i < b[k].elems[j]; i++) {
                    float want = (value(0, round, k, j, i) + value(1, round, k, j, i)) * 0.5f;
                    res->wrong += host[i] != want;
                    res->checked++;
                }
            }
    }
    rt.stream_sync(stream); /* nothing pending after a failure either */
    r.release(r.self, &ops);
    for (int k = 0; k < BUCKETS; k++)
        for (int j = 0; j < b[k].count; j++)
            rt.free(grads[k][j]);
    rt.stream_destroy(stream);
    stoke_dist_free(d);
    return NULL;
}

/* Runs fn on ranks 0..N-1 as threads. */
static void run_world(void *(*fn)(void *), mode m, rank_result *res)
{
    world w = {0};
    pthread_barrier_init(&w.bar, NULL, N);
    job jobs[N];
    pthread_t t[N];
    for (int r = 0; r < N; r++) {
        jobs[r] = (job){.c = {.w = &w, .rank = r}, .m = m, .res = &res[r]};
        memset(&res[r], 0, sizeof res[r]);
        pthread_create(&t[r], NULL, fn, &jobs[r]);
    }
    for (int r = 0; r < N; r++)
        pthread_join(t[r], NULL);
    pthread_barrier_destroy(&w.bar);
}

static void test_transport(void)
{
    rank_result res[N];
    nc.reset();
    run_world(transport_rank, M_OK, res);
    size_t floats = 0;
    for (int k = 0; k < BUCKETS; k++)
        for (int j = 0; j < bucket_params[k]; j++)
            floats += bucket_elems[k][j];
    for (int r = 0; r < N; r++) {
        CHECK_MSG(res[r].use == STOKE_OK, "rank %d: %s", r, res[r].use_msg);
        CHECK_STR_EQ(res[r].transport, "nccl");
        CHECK_INT_EQ(res[r].prepare, STOKE_OK);
        CHECK_MSG(res[r].reduce == STOKE_OK, "rank %d: %s", r, res[r].reduce_msg);
        CHECK_MSG(res[r].finish == STOKE_OK, "rank %d: %s", r, res[r].finish_msg);
        CHECK_INT_EQ(res[r].checked, ROUNDS * floats); /* the ranks' mean, bit for bit */
        CHECK_INT_EQ(res[r].wrong, 0);
    }
    /* the calls: the id drawn once, by rank 0, before any rank joins; every rank joins a
     * world of N; each bucket's mean in bucket order, in place in its staging buffer,
     * floats averaged on the rank's stream; the communicators destroyed at the end */
    int uid = 0, init[N] = {0}, ar[N] = {0}, gone[N] = {0};
    char kind;
    unsigned long thread;
    int rank, dtype, op;
    const void *send;
    void *recv, *stream;
    size_t count;
    for (int i = 0; nc.call(i, &kind, &thread, &rank, &send, &recv, &count, &dtype, &op, &stream);
         i++) {
        if (kind == 'U') {
            uid++;
            CHECK(thread == res[0].thread && init[0] + init[1] == 0);
            continue;
        }
        CHECK_MSG(rank >= 0 && rank < N, "call %d (%c): rank %d", i, kind, rank);
        if (rank < 0 || rank >= N)
            continue;
        CHECK_MSG(thread == res[rank].thread, "call %d (%c) of rank %d from another thread", i,
                  kind, rank);
        if (kind == 'I') {
            CHECK(uid == 1 && init[rank]++ == 0);
            CHECK_INT_EQ(count, N);
        } else if (kind == 'A') {
            int k = ar[rank]++ % BUCKETS;
            CHECK(init[rank] == 1 && !gone[rank]);
            CHECK_MSG(send == res[rank].stage[k] && recv == send,
                      "rank %d: all-reduce %d not in place in bucket %d's buffer", rank,
                      ar[rank] - 1, k);
            CHECK_INT_EQ(count, res[rank].stage_n[k]);
            CHECK_INT_EQ(dtype, NC_FLOAT);
            CHECK_INT_EQ(op, NC_AVG);
            CHECK(stream == res[rank].stream);
        } else {
            CHECK_MSG(kind == 'D', "call %d: %c", i, kind);
            CHECK_INT_EQ(ar[rank], ROUNDS * BUCKETS);
            gone[rank]++;
        }
    }
    CHECK_INT_EQ(uid, 1);
    for (int r = 0; r < N; r++) {
        CHECK_INT_EQ(init[r], 1);
        CHECK_INT_EQ(ar[r], ROUNDS * BUCKETS);
        CHECK_INT_EQ(gone[r], 1);
    }
    CHECK_INT_EQ(nc.executed(), N * ROUNDS * BUCKETS);
    CHECK_INT_EQ(nc.live(), 0);
}

/* Whether the log holds an abort ('X') by every rank. */
static bool aborted_all(void)
{
    int seen[N] = {0};
    char kind;
    unsigned long thread;
    int rank, dtype, op;
    const void *send;
    void *recv, *stream;
    size_t count;
    for (int i = 0; nc.call(i, &kind, &thread, &rank, &send, &recv, &count, &dtype, &op, &stream);
         i++)
        if (kind == 'X' && rank >= 0 && rank < N)
            seen[rank]++;
    return seen[0] == 1 && seen[1] == 1;
}

static void test_errors(void)
{
    rank_result res[N];
    /* no NCCL: every rank stops with the reason (the missing rank's own, the others
     * naming it), none waits for the others in a collective */
    setenv("STOKE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    run_world(transport_rank, M_OK, res);
    for (int r = 0; r < N; r++) {
        CHECK_INT_EQ(res[r].use, STOKE_ERR_UNAVAILABLE);
        CHECK_STR_CONTAINS(res[r].use_msg, "/nonexistent/libnccl.so.2");
        CHECK_STR_CONTAINS(res[r].use_msg, "NCCL 2.10 or newer");
        CHECK_STR_EQ(res[r].transport, "none"); /* left as it was */
    }
    /* a world of one never loads it */
    stoke_dist *one = NULL;
    CHECK(stoke_dist_local(&one) == STOKE_OK);
    if (one) {
        CHECK(stoke_dist_use_device(one, 0) == STOKE_OK);
        CHECK_STR_EQ(stoke_dist_transport(one), "local");
    }
    stoke_dist_free(one);
    setenv("STOKE_NCCL_LIBRARY", FAKE_NCCL, 1);

    /* an NCCL without ncclAvg */
    nc.set_version(20907);
    run_world(transport_rank, M_OK, res);
    nc.set_version(22809);
    for (int r = 0; r < N; r++) {
        CHECK_INT_EQ(res[r].use, STOKE_ERR_UNAVAILABLE);
        CHECK_STR_CONTAINS(res[r].use_msg, "is NCCL 2.9.7");
        CHECK_STR_CONTAINS(res[r].use_msg, "ncclAvg");
    }
    /* two ranks of one machine on one GPU, which NCCL refuses */
    run_world(transport_rank, M_ONE_DEVICE, res);
    for (int r = 0; r < N; r++) {
        CHECK_INT_EQ(res[r].use, STOKE_ERR_ARG);
        CHECK_STR_CONTAINS(res[r].use_msg, "ranks 0 and 1 both use cuda:0 of node0");
    }
    CHECK_INT_EQ(nc.live(), 0);

    /* ncclAllReduce refusing: the bucket's reduction fails naming NCCL, the rank and its
     * error; the communicator is aborted, not destroyed (the peers may be gone) */
    nc.reset();
    nc.fail_allreduce(NC_INTERNAL_ERROR);
    run_world(transport_rank, M_OK, res);
    nc.fail_allreduce(0);
    for (int r = 0; r < N; r++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d of 2: NCCL's ncclAllReduce of gradient bucket 0", r);
        CHECK_INT_EQ(res[r].reduce, STOKE_ERR_IO);
        CHECK_STR_CONTAINS(res[r].reduce_msg, want);
        CHECK_STR_CONTAINS(res[r].reduce_msg, "internal error");
    }
    CHECK(aborted_all());

    /* NCCL's communicator failing later (a peer gone): reported before the step */
    nc.reset();
    nc.set_async_error(NC_REMOTE_ERROR);
    run_world(transport_rank, M_OK, res);
    nc.set_async_error(0);
    for (int r = 0; r < N; r++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d of 2: NCCL's communicator failed", r);
        CHECK_INT_EQ(res[r].reduce, STOKE_OK);
        CHECK_INT_EQ(res[r].finish, STOKE_ERR_IO);
        CHECK_STR_CONTAINS(res[r].finish_msg, want);
        CHECK_STR_CONTAINS(res[r].finish_msg, "remote process exited");
    }
    CHECK(aborted_all());
    CHECK_INT_EQ(nc.live(), 0);
}

/* ---- (b) two CUDA models, a rank each, against one accumulating both micro-batches ---- */

enum { B = 8, IN = 16, CLASSES = 5, STEPS = 4, MAXPARAMS = 16 };
static const double LR = 0.05;

static stoke_graph *mlp(void)
{
    stoke_shape in = {.ndim = 1, .dims = {IN}};
    int64_t hidden[2] = {32, 24};
    return stoke_preset_mlp(&in, hidden, 2, CLASSES);
}

static stoke_model *cuda_model(const stoke_graph *g, int device)
{
    stoke_model_opts o = {.max_batch = B,
                          .precision = STOKE_PREC_FP32,
                          .training = true,
                          .seed = 5,
                          .optim = {.kind = STOKE_SGD, .momentum = 0.9f},
                          .threads = 1,
                          .cuda = true,
                          .cuda_device = device};
    stoke_model *m = NULL;
    return stoke_model_new(g, &o, &m) == STOKE_OK ? m : NULL;
}

/* Micro-batch k's inputs, the same for every model. */
static stoke_status feed(stoke_model *m, int k)
{
    const stoke_graph *g = stoke_model_graph(m);
    float x[B * IN];
    int32_t y[B];
    dist_micro_batch(k, B, IN, CLASSES, x, y);
    stoke_status st = stoke_model_set_input(m, stoke_graph_find(g, "x"), x, sizeof x);
    return st == STOKE_OK ? stoke_model_set_input(m, stoke_graph_find(g, "y"), y, sizeof y) : st;
}

/* One micro-batch's forward and backward. */
static stoke_status micro(stoke_model *m, int k)
{
    stoke_status st = feed(m, k);
    if (st == STOKE_OK)
        st = stoke_model_forward(m, B, true);
    return st == STOKE_OK ? stoke_model_backward(m) : st;
}

typedef struct trained {
    stoke_status st;
    char msg[1024];
    int nparams, graphs, buckets;
    float *param[MAXPARAMS];
    size_t elems[MAXPARAMS];
} trained;

static int accum; /* micro-batches a step on each rank */

static stoke_status note(trained *t, stoke_status st)
{
    if (st != STOKE_OK && t->st == STOKE_OK) {
        t->st = st;
        snprintf(t->msg, sizeof t->msg, "%s", stoke_last_error());
    }
    return t->st;
}

/* The model's parameters into t (host memory). */
static void keep_params(stoke_model *m, trained *t)
{
    const stoke_graph *g = stoke_model_graph(m);
    t->nparams = stoke_graph_param_count(g) < MAXPARAMS ? stoke_graph_param_count(g) : MAXPARAMS;
    for (int p = 0; p < t->nparams; p++) {
        t->elems[p] = (size_t)stoke_graph_param(g, p)->elems;
        t->param[p] = malloc(t->elems[p] * sizeof(float));
        if (t->param[p])
            note(t, stoke_model_read(m, stoke_model_param(m, p), t->param[p],
                                     t->elems[p] * sizeof(float)));
    }
}

static void trained_free(trained *t)
{
    for (int p = 0; p < t->nparams; p++)
        free(t->param[p]);
}

/* One step on a micro-batch no rank trains on, without a reducer, every model alike:
 * what a model allocates on first use (its forward's, backward's and step's first runs
 * are not captured) is allocated before any model captures, since the runtime double's
 * capture is global as the runtime's global mode is: one thread's capture must not
 * meet another thread's cudaMalloc. */
static stoke_status warm_up(stoke_model *m)
{
    stoke_model_zero_grad(m);
    stoke_status st = micro(m, 1000);
    return st == STOKE_OK ? stoke_model_step(m, LR, 1, NULL) : st;
}

static stoke_graph *shared_graph;
static trained rank_trained[N];

/* A rank's model on its GPU with dist's reducer over NCCL. The models are made one
 * after the other and warmed up before the reducer is installed; the double runs a
 * stream when its thread waits for it, so the ranks wait for their streams at each
 * step's end, where their all-reduces meet, and pass a barrier only after that. */
static void *model_rank(void *arg)
{
    job *jb = arg;
    int rank = jb->c.rank;
    trained *t = &rank_trained[rank];
    pthread_barrier_t *bar = &jb->c.w->bar;
    stoke_dist *d = rank_dist(&jb->c);
    stoke_model *m = NULL;
    if (!d)
        note(t, stoke_fail(STOKE_ERR_NOMEM, "no world"));
    else
        note(t, dist_use_nccl(d, rank));
    for (int turn = 0; turn < N; turn++) { /* made one after the other */
        if (turn == rank && t->st == STOKE_OK && !(m = cuda_model(shared_graph, rank)))
            note(t, STOKE_ERR_UNAVAILABLE);
        pthread_barrier_wait(bar);
    }
    if (t->st == STOKE_OK)
        note(t, warm_up(m));
    if (m)
        note(t, stoke_model_sync(m));
    pthread_barrier_wait(bar);
    if (t->st == STOKE_OK) {
        stoke_grad_reducer r = stoke_dist_reducer(d);
        r.bucket_bytes = 512; /* several buckets */
        note(t, stoke_model_set_reducer(m, &r));
    }
    pthread_barrier_wait(bar);
    for (int s = 0; s < STEPS; s++) {
        if (t->st == STOKE_OK) {
            stoke_model_zero_grad(m);
            for (int a = 0; a < accum && t->st == STOKE_OK; a++) {
                stoke_dist_set_sync(d, a == accum - 1); /* as the trainer: DDP's no_sync */
                note(t, micro(m, (s * N + rank) * accum + a));
            }
            if (t->st == STOKE_OK)
                note(t, stoke_model_step(m, LR, accum, NULL));
        }
        if (m)
            note(t, stoke_model_sync(m));
        pthread_barrier_wait(bar);
    }
    if (m && t->st == STOKE_OK) {
        keep_params(m, t);
        const char *why = NULL;
        t->graphs = stoke_model_graphs(m, &why);
        const stoke_grad_bucket *b;
        t->buckets = stoke_model_buckets(m, &b);
    }
    stoke_model_free(m);
    stoke_dist_free(d);
    return NULL;
}

static void test_models(int acc)
{
    accum = acc;
    memset(rank_trained, 0, sizeof rank_trained);
    shared_graph = mlp();
    nc.reset();
    rank_result unused[N];
    run_world(model_rank, M_OK, unused);
    for (int r = 0; r < N; r++)
        CHECK_MSG(rank_trained[r].st == STOKE_OK, "rank %d: %s", r, rank_trained[r].msg);
    /* the reference: one model, both micro-batches of each step accumulated */
    trained one = {0};
    stoke_model *m = cuda_model(shared_graph, 0);
    note(&one, m ? warm_up(m) : STOKE_ERR_UNAVAILABLE);
    for (int s = 0; s < STEPS && one.st == STOKE_OK; s++) {
        stoke_model_zero_grad(m);
        for (int a = 0; a < N * accum && one.st == STOKE_OK; a++)
            note(&one, micro(m, s * N * accum + a));
        if (one.st == STOKE_OK)
            note(&one, stoke_model_step(m, LR, N * accum, NULL));
    }
    if (one.st == STOKE_OK)
        keep_params(m, &one);
    CHECK_MSG(one.st == STOKE_OK, "one model: %s", one.msg);
    stoke_model_free(m);
    trained *a = &rank_trained[0], *b = &rank_trained[1];
    if (a->st == STOKE_OK && b->st == STOKE_OK && one.st == STOKE_OK) {
        /* the ranks' replicas equal, bit for bit: every rank applies the same mean */
        CHECK(a->nparams > 0 && a->nparams == b->nparams && a->nparams == one.nparams);
        double worst = 0;
        for (int p = 0; p < a->nparams; p++) {
            CHECK_MSG(!memcmp(a->param[p], b->param[p], a->elems[p] * sizeof(float)),
                      "parameter %d differs between the ranks", p);
            for (size_t i = 0; i < a->elems[p]; i++) {
                double e = fabs((double)a->param[p][i] - one.param[p][i]);
                worst = e > worst ? e : worst;
            }
        }
        /* against one model accumulating every micro-batch: the same sum, rounded in
         * another order (the accumulating model adds each micro-batch's gradient into
         * the buffer inside its kernels, the ranks round each their own and NCCL adds
         * them; with accumulation the ranks also average a partial sum), so close, not
         * bit for bit: 1.5e-8 measured over these steps */
        printf("two ranks with accumulation %d vs one model with accumulation %d: largest weight "
               "difference %g\n",
               accum, N * accum, worst);
        CHECK_MSG(worst < 1e-6, "%g", worst);
        /* captured: each step's all-reduces ran from the graph, not called again */
        CHECK_MSG(a->graphs > 0 && b->graphs > 0, "the ranks ran without graphs");
        CHECK(a->buckets > 1);
        /* with accumulation the captured reductions run at every backward, each
         * micro-batch's: the sum of means is the mean of sums */
        if (accum == 1)
            CHECK_INT_EQ(nc.executed(), (long)N * STEPS * a->buckets);
        CHECK(nc.executed() >= (long)N * STEPS * a->buckets);
        int called = 0;
        char kind;
        unsigned long thread;
        int rank, dtype, op;
        const void *send;
        void *recv, *stream;
        size_t count;
        for (int i = 0;
             nc.call(i, &kind, &thread, &rank, &send, &recv, &count, &dtype, &op, &stream); i++)
            called += kind == 'A';
        printf("all-reduces: %d calls, %ld run over %d steps of %d buckets on %d ranks\n", called,
               nc.executed(), STEPS, a->buckets, N);
        CHECK(called < N * STEPS * a->buckets);
    }
    CHECK_INT_EQ(nc.live(), 0);
    for (int r = 0; r < N; r++)
        trained_free(&rank_trained[r]);
    trained_free(&one);
    stoke_graph_free(shared_graph);
}

/* ---- NVIDIA's libnccl, where installed: the table's functions and its version ---- */

/* The real library's file: the loader's libnccl.so.2, or the toolkit's. */
static bool real_nccl(char *path, size_t size)
{
    static const char *const names[] = {"libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2",
                                        "/usr/local/cuda/lib64/libnccl.so.2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        void *f = lib ? dlsym(lib, "ncclGetVersion") : NULL;
        Dl_info info;
        if (f && dladdr(f, &info) && info.dli_fname && info.dli_fname[0] == '/') {
            snprintf(path, size, "%s", info.dli_fname);
            dlclose(lib);
            return true;
        }
        if (lib)
            dlclose(lib);
    }
    return false;
}

/* NCCL's own library loads into the table (every function by its name, version 2.10 or
 * newer): with no CUDA runtime after it, the failure is the runtime's, not NCCL's. */
static int real_library(void)
{
    char path[4096];
    if (!real_nccl(path, sizeof path)) {
        printf("skip: NVIDIA's libnccl.so.2 is not installed\n");
        return CHECK_SKIPPED;
    }
    setenv("STOKE_NCCL_LIBRARY", path, 1);
    setenv("STOKE_CUDART_LIBRARY", "/nonexistent/libcudart.so.13", 1);
    stoke_dist *d = NULL;
    CHECK(stoke_dist_local(&d) == STOKE_OK);
    if (d) {
        CHECK_INT_EQ(dist_use_nccl(d, 0), STOKE_ERR_UNAVAILABLE);
        printf("%s: %s\n", path, stoke_last_error());
        CHECK_STR_CONTAINS(stoke_last_error(), "/nonexistent/libcudart.so.13");
        CHECK_MSG(!strstr(stoke_last_error(), "NCCL 2.10") && !strstr(stoke_last_error(), "lacks"),
                  "%s", stoke_last_error());
    }
    stoke_dist_free(d);
    return CHECK_DONE();
}

int main(int argc, char **argv)
{
    if (check_part(argc, argv, "real_library"))
        return real_library();
    setenv("STOKE_CUDART_LIBRARY", FAKE_CUDART, 1);
    setenv("STOKE_CUBLAS_LIBRARY", FAKE_CUBLAS, 1);
    setenv("STOKE_CUBLASLT_LIBRARY", FAKE_CUBLASLT, 1);
    setenv("STOKE_CUDNN_LIBRARY", FAKE_CUDNN, 1);
    setenv("STOKE_NCCL_LIBRARY", FAKE_NCCL, 1);
    setenv("STOKE_FAKE_GPU_SCENARIO", STOKE_TEST_DATA "/scenarios/nccl_two_gpus.gpu", 1);
    setenv("STOKE_CUDA_KERNELS", "host", 1);
    if (!load_doubles()) {
        printf("skip: the CUDA runtime and NCCL doubles do not load: %s\n", dlerror());
        return 77;
    }
    test_transport();
    test_errors();
    test_models(1);
    test_models(2);
    return CHECK_DONE();
}
