/* stoke_seams.c - the `stoke` command with test seams installed, for the e2e tests
 * that must force what no user setting reaches (docs/testing.md, "Seams"):
 *
 *   [REFUSE_ALLOC_ABOVE=BYTES] [STEP_FAULT=N[:M]] [WRITE_PAUSE_FILE=FILE] stoke_seams ARGS...
 *
 * - REFUSE_ALLOC_ABOVE: the CPU allocator seam (nn/cpu/alloc_seam.h) refuses every block
 *   above BYTES as an out-of-memory would (train_batch.sh: the trainer halves the batch).
 * - STEP_FAULT: the trainer's fault seam (train/fault.h, tests/step_fault.h) fails batch
 *   M (default 0) of optimizer step N once (train_batch.sh, on the CUDA test doubles).
 * - WRITE_PAUSE_FILE: core's chunk hook (core/test_seam.h): after each chunk a finished
 *   file writes, its chunk count goes to FILE (written aside and renamed, so a reader
 *   never sees half of it) and the writer waits until tmpfile's signal handler has seen
 *   a signal (up to 60 s, then it writes on). A test polls FILE for 1, sends a signal,
 *   and knows the writer is mid-write (data.sh, train.sh).
 *
 * The CLI's sources are compiled in with their main renamed (tests/seams.cmake), so the
 * command runs exactly as the built binary does. The settings come in the environment,
 * not the arguments: the CLI re-executes itself (/proc/self/exe with its arguments,
 * src/cli/omp_wait.c) and the environment goes along. The library reads none of them;
 * this test executable does. */
#undef main

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/test_seam.h"
#include "nn/cpu/alloc_seam.h"
#include "step_fault.h"

int stoke_cli_main(int argc, char **argv); /* src/cli/main.c's main */

static unsigned long long g_above;
static const char *g_pause_file;

static void *refusing_alloc(size_t bytes)
{
    return bytes > g_above ? NULL : cpu_alloc_default_ops()->alloc(bytes);
}

static void refusing_free(void *p) { cpu_alloc_default_ops()->free(p); }

static bool pause_after_chunk(unsigned chunks)
{
    unsigned seen = stoke_tmpfile_signals_seen();
    char tmp[4200], text[32];
    snprintf(tmp, sizeof tmp, "%s.part", g_pause_file);
    int n = snprintf(text, sizeof text, "%u\n", chunks);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, text, (size_t)n);
        (void)w;
        close(fd);
        rename(tmp, g_pause_file);
    }
    const struct timespec tick = {0, 5 * 1000 * 1000};
    for (int i = 0; i < 12000 && stoke_tmpfile_signals_seen() == seen; i++)
        nanosleep(&tick, NULL);
    return stoke_tmpfile_signals_seen() != seen; /* no signal came: pause no more */
}

/* "N[:M]" into *step, *batch; false unless digits, and M, if given, too. */
static bool parse_step_fault(const char *s, long long *step, long *batch)
{
    char *end = NULL;
    errno = 0;
    *step = strtoll(s, &end, 10);
    *batch = 0;
    if (end != s && *end == ':')
        *batch = strtol(end + 1, &end, 10);
    return end != s && !*end && !errno && *step >= 0 && *batch >= 0;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "stoke_seams: %s\nusage: [REFUSE_ALLOC_ABOVE=BYTES] [STEP_FAULT=N[:M]] "
            "[WRITE_PAUSE_FILE=FILE] stoke_seams ARGS...\n",
            why);
    return 2;
}

int main(int argc, char **argv)
{
    static const cpu_alloc_ops refusing = {refusing_alloc, refusing_free};
    static step_fault fault;
    const char *above = getenv("REFUSE_ALLOC_ABOVE");
    const char *step = getenv("STEP_FAULT");
    g_pause_file = getenv("WRITE_PAUSE_FILE");
    if (!(above && *above) && !(step && *step) && !(g_pause_file && *g_pause_file))
        return usage("no seam asked for");
    if (above && *above) {
        char *end = NULL;
        g_above = strtoull(above, &end, 10);
        if (*end)
            return usage("REFUSE_ALLOC_ABOVE is not a number of bytes");
        cpu_alloc_set_ops(&refusing);
    }
    if (step && *step) {
        long long n;
        long m;
        if (!parse_step_fault(step, &n, &m))
            return usage("STEP_FAULT is not N[:M] (N, M >= 0)");
        step_fault_set(&fault, n, (int)m);
    }
    if (g_pause_file && *g_pause_file)
        stoke_tmpfile_set_chunk_hook(pause_after_chunk);
    return stoke_cli_main(argc, argv);
}
