/* test_nn_sigstack.c - signals handled while oneDNN's JIT GEMMs run leave the heap
 * intact: oneDNN points rsp at a heap workspace inside those kernels
 * (core/sigstack.h), so a frame written at rsp corrupts the heap and a later free()
 * aborts. The CPU backend's thread setting gives its OpenMP team alternate signal
 * stacks; here every thread of that team runs dnnl_sgemm while another thread sends
 * it SIGUSR1 with an SA_ONSTACK handler, as SIGINT reaches `stoke train`. Without the
 * stacks this aborts within a few hundred signals, under every instruction-set cap
 * the suite runs (AVX2 and AVX-512 kernels alike). */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "check.h"
#include "core/sigstack.h"
#include "nn/cpu/dense.h"
#include "stoke/nn.h"

#define TEAM  2
#define ITERS 4000

static atomic_long hits[TEAM];
static _Thread_local int t_index = -1;
static pthread_t team[TEAM];
static atomic_int ready, done;

static void on_usr1(int sig)
{
    (void)sig;
    if (t_index >= 0)
        atomic_fetch_add_explicit(&hits[t_index], 1, memory_order_relaxed);
}

/* SIGUSR1 to each thread of the team, about every 20 microseconds, until done. */
static void *pinger(void *arg)
{
    (void)arg;
    while (atomic_load(&ready) < TEAM)
        sched_yield();
    while (!atomic_load(&done)) {
        for (int k = 0; k < TEAM; k++)
            pthread_kill(team[k], SIGUSR1);
        usleep(20);
    }
    return NULL;
}

int main(void)
{
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    cpu_set_threads(TEAM); /* the path that gives the team its stacks (nn/cpu/dense.c) */

    /* the reference CNN's batch-4 linear layer (784 -> 512), which the naive run of
     * stoke bench was in when a SIGINT corrupted its heap */
    enum { M = 4, N = 512, K = 784 };
    pthread_t p;
    CHECK(pthread_create(&p, NULL, pinger, NULL) == 0);
    int bad[TEAM] = {0};
#pragma omp parallel num_threads(TEAM)
    {
        int me = omp_get_thread_num();
        t_index = me;
        team[me] = pthread_self();
        float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N),
              *c = malloc(sizeof(float) * M * N);
        for (int i = 0; i < M * K; i++)
            a[i] = 1.0f;
        for (int i = 0; i < K * N; i++)
            b[i] = 0.5f;
        atomic_fetch_add(&ready, 1);
        for (int it = 0; it < ITERS; it++) {
            if (dnnl_sgemm('N', 'N', M, N, K, 1.0f, a, K, b, N, 0.0f, c, N) != dnnl_success)
                bad[me]++;
            /* the heap is checked as it is used: a corrupted chunk aborts here */
            free(malloc(1000 + (size_t)(it % 4096)));
        }
        for (int i = 0; i < M * N; i++)
            bad[me] += c[i] != 0.5f * K;
        free(a);
        free(b);
        free(c);
    }
    atomic_store(&done, 1);
    pthread_join(p, NULL);
    for (int k = 0; k < TEAM; k++) {
        CHECK_INT_EQ(bad[k], 0);
        /* the test means something only if signals landed mid-GEMM */
        CHECK_MSG(atomic_load(&hits[k]) > 100, "thread %d got %ld signals", k,
                  atomic_load(&hits[k]));
        printf("thread %d: %ld signals handled during %d GEMMs\n", k, atomic_load(&hits[k]), ITERS);
    }
    /* the stacks are this module's size, which holds an AMX frame */
    CHECK(stoke_sigstack_bytes() >= 64UL << 10);
    return CHECK_DONE();
}
