/* stoke_step_fault.c - `stoke_step_fault N[:M] COMMAND ARGS...`: the stoke command line
 * itself (src/cli, built into this executable with its main renamed stoke_cli_main)
 * with the trainer's fault seam installed: batch M (default 0) of optimizer step N
 * fails once as a workspace grown within training would (tests/step_fault.h). What
 * tests/e2e/train_batch.sh runs where a real run cannot be made to run out of memory
 * on cue (docs/testing.md, "The trainer's fault seam"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "step_fault.h"

#undef main
int stoke_cli_main(int argc, char **argv);

/* stoke re-executes itself with its argv (cli/omp_wait.c): the program name it gets,
 * "stoke_step_fault=N[:M]", carries the fault into the new image. */
#define MARK "stoke_step_fault="

/* "N[:M]" into *step, *batch; false unless digits, and M, if given, too. */
static bool parse_spec(const char *s, long long *step, long *batch)
{
    char *end = NULL;
    errno = 0;
    *step = strtoll(s, &end, 10);
    *batch = 0;
    if (end != s && *end == ':')
        *batch = strtol(end + 1, &end, 10);
    return end != s && !*end && !errno && *step >= 0 && *batch >= 0;
}

int main(int argc, char **argv)
{
    static char name[64];
    long long step;
    long batch;
    if (!strncmp(argv[0], MARK, strlen(MARK))) { /* re-executed: already shifted */
        if (!parse_spec(argv[0] + strlen(MARK), &step, &batch))
            return 2;
    } else if (argc < 3 || !parse_spec(argv[1], &step, &batch)) {
        fprintf(stderr, "usage: stoke_step_fault N[:M] COMMAND ARGS... (N, M >= 0)\n");
        return 2;
    } else {
        snprintf(name, sizeof name, MARK "%s", argv[1]);
        argv[1] = name;
        argv++;
        argc--;
    }
    step_fault f;
    step_fault_set(&f, step, (int)batch);
    return stoke_cli_main(argc, argv);
}
