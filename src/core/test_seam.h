/* test_seam.h - core's one test seam: a hook the writer of finished files (tmpfile.c)
 * calls after each chunk, so a test can signal a writer that is certainly mid-write
 * (docs/testing.md, "Test seams"). Included by tests/ and by tmpfile.c, which defines
 * it; nothing in src/ installs a hook. */
#ifndef STOKE_CORE_TEST_SEAM_H
#define STOKE_CORE_TEST_SEAM_H

#include <stdbool.h>

/* Called on the writing thread after each stoke_tmpfile_write that succeeded, with
 * that file's chunk count so far (1 after the first); returning false stops the calls
 * for that file. */
typedef bool (*stoke_tmpfile_chunk_hook)(unsigned chunks);

/* Installs `hook` (NULL, the default: none) for the files opened afterwards. Set it
 * before any file is written; not thread-safe. */
void stoke_tmpfile_set_chunk_hook(stoke_tmpfile_chunk_hook hook);

/* The signals tmpfile's handler has seen so far: a hook that waits for a signal waits
 * for this to move. Async-signal-safe. */
unsigned stoke_tmpfile_signals_seen(void);

#endif
