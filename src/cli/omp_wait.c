/* omp_wait.c - how the CPU backend's OpenMP threads wait at barriers, chosen before
 * libgomp starts.
 *
 * libgomp's threads spin at every barrier before they sleep: GOMP_SPINCOUNT times,
 * 300,000 by default (milliseconds of pause instructions on Intel). On a machine whose
 * cores the team has to itself that saves a wake-up; when another process holds a
 * core, a spinning thread burns the time slice the descheduled one needs, and a step
 * takes several times as long (docs/train.md, "Shared cores"). libgomp reads its
 * settings once, when it is loaded, before main(), and offers no call to change them
 * (omp_set_dynamic and friends change team sizes, not waiting), so the only way to
 * choose is the environment of a fresh process image: stoke sets it and re-executes
 * itself, once, before any work. What the user set is never overridden. */
#include "cli/cli.h"
#include "core/env.h"

#include "stoke/nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libgomp's own spin count when a process has more threads than CPUs (its "throttled"
 * count): long enough to cover the gap between two oneDNN primitives on a quiet
 * machine, short enough that a thread waiting on a descheduled one yields within
 * microseconds. Measured on the 2-core Intel Xeon (Cascade Lake) with the reference
 * CNN and the MLP: the same samples/s as the default on a quiet machine, and 1.3x to
 * 4x the default's beside a busy process (docs/train.md, "Shared cores"). */
#define STOKE_SPINCOUNT "1000"

/* STOKE_OMP_WAIT_MARK marks a process image stoke re-executed with its own choice, so
 * that it says so (stoke_nn_omp_wait) and does not re-execute again. */
#define MARK STOKE_OMP_WAIT_MARK

void cli_omp_wait_choose(char **argv)
{
    /* the mark by its literal name (MARK's value), as every reader of the environment
     * names its variable */
    if (stoke_env("OMP_WAIT_POLICY") || stoke_env("GOMP_SPINCOUNT") ||
        stoke_env("STOKE_OMP_WAIT_SET"))
        return;
    if (setenv("GOMP_SPINCOUNT", STOKE_SPINCOUNT, 1) || setenv(MARK, "1", 1))
        return;
    fflush(NULL);
    execv("/proc/self/exe", argv);
    /* No /proc (a chroot without it): run on with libgomp's default, and say nothing
     * was set. */
    unsetenv("GOMP_SPINCOUNT");
    unsetenv(MARK);
}
