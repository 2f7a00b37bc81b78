/* tmpfile.h - writing a user's file whole or not at all: the bytes go to a temporary
 * file beside it, renamed into place once complete and flushed. The temporary file is
 * removed on every failure, and also when SIGINT, SIGTERM, SIGHUP or SIGXFSZ ends the
 * process mid-write. Internal: the one writer of finished files (packed records,
 * checkpoints).
 *
 * Signals. While a temporary file exists, a handler of this module is installed for
 * those four signals (each one that is not ignored), in front of whatever was there:
 * - a handler function (stoke train's, which only sets a flag) is called, and the
 *   write goes on; if that handler changes the disposition (train resets it to SIG_DFL
 *   so that a second Ctrl-C ends the run), the change is adopted as the one to pass
 *   on, and this module's handler stays in front of it;
 * - the default action: the registered temporary files are unlinked (unlinkat, which
 *   is async-signal-safe), the default disposition is restored and the signal raised
 *   again, so the process ends as it would have (status 130 for SIGINT, 143 for
 *   SIGTERM).
 * When the last temporary file is renamed or removed, the dispositions in front of
 * which the handler stood are restored (with any change adopted as above).
 * A SIGXFSZ that ends the process cannot be turned into a message; `stoke` ignores
 * SIGXFSZ (src/cli/main.c) so that a write past `ulimit -f` fails with EFBIG and says
 * so. */
#ifndef STOKE_CORE_TMPFILE_H
#define STOKE_CORE_TMPFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "stoke/core.h"

/* The most files being written at once, over all threads. */
#define STOKE_TMPFILE_MAX_OPEN 16

typedef struct stoke_tmpfile {
    int fd;                 /* the temporary file; -1 once closed */
    int dirfd;              /* the destination's directory; -1 once closed */
    int slot;               /* the signal handler's table entry; -1 when none */
    uint64_t written;       /* bytes written so far */
    unsigned chunks;        /* stoke_tmpfile_write calls so far (the test seam's count) */
    bool (*hook)(unsigned); /* the test seam's (core/test_seam.h), or NULL */
    char path[4096];        /* the destination as given, for messages */
    char base[256];         /* the destination's name in its directory */
    char tmp[256];          /* the temporary file's name: ".<base>.stoke-tmp-XXXXXX" */
} stoke_tmpfile;

/* Writes all n bytes to fd, retrying EINTR and short writes (a short write is how a
 * filling disk shows first; the retry gets the cause). Returns the bytes written: n,
 * or fewer with errno set (0 when a write made no progress). The one write loop of
 * stoke's files: temporary files here, the logs (monitor/sink.c). */
size_t stoke_write_all(int fd, const void *buf, size_t n);

/* Creates the temporary file for `path` in path's directory (so the rename stays on
 * one file system and is atomic), named ".<name>.stoke-tmp-XXXXXX", mode 0644 less
 * the umask, and registers it with the signal handler. A `path` that exists and is
 * not a regular file (a directory, a FIFO, a device) is refused: it would be replaced.
 * On failure (STOKE_ERR_ARG for an empty or too long path, STOKE_ERR_IO otherwise,
 * the message naming `path`) nothing is left behind and t needs no abort. */
stoke_status stoke_tmpfile_open(stoke_tmpfile *t, const char *path);

/* Appends n bytes: short writes are continued, EINTR retried. On failure
 * (STOKE_ERR_IO) the message names the destination, the bytes written and the cause
 * ("the file size limit (ulimit -f) of N bytes is reached", "no space left on the
 * device", ...), and the temporary file is already removed (as by abort). */
stoke_status stoke_tmpfile_write(stoke_tmpfile *t, const void *buf, size_t n);

/* Finishes: fsync, close (both checked), rename over the destination, fsync of the
 * directory (unchecked: the new file is in place by then, only the durability of the
 * rename is in doubt), unregister. On failure (STOKE_ERR_IO naming the destination)
 * the temporary file is removed and the destination is as it was. Either way t is
 * closed. */
stoke_status stoke_tmpfile_commit(stoke_tmpfile *t);

/* Closes and removes the temporary file, leaving the destination as it was. For a
 * caller that gives up for its own reasons; safe to call after any of the above
 * (it then does nothing). Can't fail. */
void stoke_tmpfile_abort(stoke_tmpfile *t);

/* Whether `path` could be written the way stoke_tmpfile_open writes it: its temporary
 * file is created and removed at once. For a command to check an output before the
 * work that produces it (a missing directory found at the end costs the work). The
 * status and message are stoke_tmpfile_open's. */
stoke_status stoke_tmpfile_check(const char *path);

#endif
