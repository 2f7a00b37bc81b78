/* omp_wait.c - what the process's OpenMP runtime was told about waiting (nn.h). */
#include "stoke/nn.h"

#include <stdio.h>

#include "core/env.h"

const char *stoke_nn_omp_wait(char *buf, size_t size)
{
    const char *policy = stoke_env("OMP_WAIT_POLICY"), *spin = stoke_env("GOMP_SPINCOUNT");
    if (stoke_env("STOKE_OMP_WAIT_SET") /* STOKE_OMP_WAIT_MARK */ && spin && !policy)
        snprintf(buf, size,
                 "OpenMP threads spin %s times at a barrier, then sleep (GOMP_SPINCOUNT=%s set "
                 "by stoke: spinning threads take the cores descheduled ones need when other "
                 "processes share the CPUs)",
                 spin, spin);
    else if (policy || spin)
        snprintf(buf, size, "OpenMP waiting as given:%s%s%s%s", policy ? " OMP_WAIT_POLICY=" : "",
                 policy ? policy : "", spin ? " GOMP_SPINCOUNT=" : "", spin ? spin : "");
    else
        snprintf(buf, size,
                 "OpenMP threads spin at barriers as libgomp does by default "
                 "(OMP_WAIT_POLICY=passive or GOMP_SPINCOUNT=1000 bound it)");
    return buf;
}
