/* stoke_refusing.c - the `stoke` command built for tests with the CPU allocator seam
 * installed (nn/cpu/alloc_seam.h): every CPU backend allocation above
 * REFUSE_ALLOC_ABOVE bytes (the environment, so that stoke's own re-execution keeps
 * it) is refused as an out-of-memory would be. tests/e2e/train_batch.sh runs `train`
 * through it to see the trainer halve the batch. The CLI's sources are compiled in with
 * their main renamed stoke_cli_main (tests/train.cmake). */
#include <stdio.h>
#include <stdlib.h>

#include "nn/cpu/alloc_seam.h"

int stoke_cli_main(int argc, char **argv);

static unsigned long long g_above;

static void *refusing_alloc(size_t bytes)
{
    return bytes > g_above ? NULL : cpu_alloc_default_ops()->alloc(bytes);
}

static void refusing_free(void *p) { cpu_alloc_default_ops()->free(p); }

int main(int argc, char **argv)
{
    static const cpu_alloc_ops refusing = {refusing_alloc, refusing_free};
    const char *above = getenv("REFUSE_ALLOC_ABOVE");
    char *end = NULL;
    if (above && *above)
        g_above = strtoull(above, &end, 10);
    if (!above || !*above || *end) {
        fprintf(stderr, "stoke_refusing: set REFUSE_ALLOC_ABOVE to a number of bytes\n");
        return 2;
    }
    cpu_alloc_set_ops(&refusing);
    return stoke_cli_main(argc, argv);
}
