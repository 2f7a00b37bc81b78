/* write_pause.c - `stoke` with the writer of finished files held mid-write, for the
 * signal tests of tests/e2e/data.sh and train.sh (docs/testing.md, "Test seams").
 *
 *   WRITE_PAUSE_FILE=FILE stoke_write_pause ARGS...   runs `stoke ARGS...`
 *
 * The CLI's sources are compiled into this executable with their main renamed
 * (tests/write_pause.cmake), so the command runs exactly as the built binary runs it,
 * with core's chunk hook installed: after each chunk a file writes, its chunk count
 * goes to FILE (written aside and renamed, so a reader never sees half of it)
 * and the writer waits until tmpfile's signal handler has seen a signal. A test polls
 * FILE for 1, sends a signal, and knows the writer is mid-write; for two signals
 * in a row it waits for 2 in between, which proves the first was handled. After 60 s
 * without a signal the file is written on without pausing. FILE comes in the
 * environment, not the arguments: the CLI may re-execute itself (/proc/self/exe, with
 * the arguments it was given: src/cli/omp_wait.c), and the environment goes along.
 * The library never reads it; this test executable does. */
#undef main

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/test_seam.h"

int stoke_cli_main(int argc, char **argv); /* src/cli/main.c's main */

static const char *pause_file;

static bool pause_after_chunk(unsigned chunks)
{
    unsigned seen = stoke_tmpfile_signals_seen();
    char tmp[4200], text[32];
    snprintf(tmp, sizeof tmp, "%s.part", pause_file);
    int n = snprintf(text, sizeof text, "%u\n", chunks);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, text, (size_t)n);
        (void)w;
        close(fd);
        rename(tmp, pause_file);
    }
    const struct timespec tick = {0, 5 * 1000 * 1000};
    for (int i = 0; i < 12000 && stoke_tmpfile_signals_seen() == seen; i++)
        nanosleep(&tick, NULL);
    return stoke_tmpfile_signals_seen() != seen; /* no signal came: pause no more */
}

int main(int argc, char **argv)
{
    pause_file = getenv("WRITE_PAUSE_FILE");
    if (!pause_file || !*pause_file) {
        fprintf(stderr, "usage: WRITE_PAUSE_FILE=FILE stoke_write_pause ARGS...\n");
        return 2;
    }
    stoke_tmpfile_set_chunk_hook(pause_after_chunk);
    return stoke_cli_main(argc, argv);
}
