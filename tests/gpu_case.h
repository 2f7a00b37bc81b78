/* gpu_case.h - runs one case of a GPU-double test in a child process: the doubles keep
 * process-wide state (loaded libraries, scenario rows, counters), so each case starts
 * from a fresh one. The child's failures become one failed check of the parent. Include
 * after check.h. */
#ifndef STOKE_GPU_CASE_H
#define STOKE_GPU_CASE_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void gpu_case(const char *name, void (*fn)(void))
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        check_failures = 0;
        fn();
        const char *sc = getenv("STOKE_FAKE_GPU_SCENARIO");
        if (sc) /* a scenario file the case wrote */
            unlink(sc);
        _exit(check_failures > 100 ? 100 : check_failures);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    check_count++;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        check_failures++;
        fprintf(stderr, "case %s failed (status 0x%x)\n", name, status);
    }
}

#endif
