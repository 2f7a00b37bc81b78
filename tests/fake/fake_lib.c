/* fake_lib.c - the runtime lookup and violation counts the cuBLAS and cuDNN doubles
 * share (fake_lib.h). */
#include "fake_lib.h"

#include "nn/cuda/kern.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

fake_runtime fake_rt;
pthread_mutex_t fake_lib_mu = PTHREAD_MUTEX_INITIALIZER;
static int violations, calls, tf32_calls;
static char last_problem[256];

static void load_runtime(void)
{
    const char *path = getenv("STOKE_CUDART_LIBRARY");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (!lib)
        return;
    *(void **)&fake_rt.extent = dlsym(lib, "fake_cudart_extent");
    *(void **)&fake_rt.launch_owned = dlsym(lib, "fake_cudart_launch_owned");
}

int fake_have_runtime(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_runtime);
    return fake_rt.extent && fake_rt.launch_owned;
}

int fake_queue(void *stream, void (*fn)(void *), const void *params, size_t size, size_t scratch)
{
    if (scratch > SIZE_MAX - size - 1)
        return 2; /* cudaErrorMemoryAllocation */
    void *copy = malloc(size + scratch + 1);
    if (!copy)
        return 2;
    memcpy(copy, params, size);
    if (!stream) {
        fn(copy);
        free(copy);
        return 0;
    }
    return fake_rt.launch_owned(stream, fn, copy, size + scratch);
}

int fake_violation(int status, const char *fmt, ...)
{
    pthread_mutex_lock(&fake_lib_mu);
    violations++;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_problem, sizeof last_problem, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&fake_lib_mu);
    return status;
}

void fake_count_call(void)
{
    pthread_mutex_lock(&fake_lib_mu);
    calls++;
    pthread_mutex_unlock(&fake_lib_mu);
}

void fake_count_tf32(void)
{
    pthread_mutex_lock(&fake_lib_mu);
    tf32_calls++;
    pthread_mutex_unlock(&fake_lib_mu);
}

int fake_lib_tf32_calls(void) { return tf32_calls; }
int fake_lib_violations(void) { return violations; }
int fake_lib_calls(void) { return calls; }
const char *fake_lib_last_problem(void) { return last_problem; }

void fake_lib_reset(void)
{
    pthread_mutex_lock(&fake_lib_mu);
    violations = calls = tf32_calls = 0;
    last_problem[0] = '\0';
    pthread_mutex_unlock(&fake_lib_mu);
}

double fake_load(const void *p, int kind, long long i)
{
    if (kind == FAKE_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return kind == FAKE_F16 ? nk_f16_to_f32(h) : nk_bf16_to_f32(h);
}

void fake_store(void *p, int kind, long long i, double v)
{
    float f = (float)v;
    if (kind == FAKE_F32)
        ((float *)p)[i] = f;
    else
        ((uint16_t *)p)[i] = kind == FAKE_F16 ? nk_to_f16(f) : nk_to_bf16(f);
}

void fake_pack(const void *p, int kind, long long outer, long long inner, long long so,
               long long si, double *out)
{
    for (long long o = 0; o < outer; o++)
        for (long long q = 0; q < inner; q++)
            out[o * inner + q] = fake_load(p, kind, o * so + q * si);
}

size_t fake_pack_bytes(int m, int n, int k)
{
    return ((size_t)m + (size_t)n) * (size_t)k * sizeof(double);
}
