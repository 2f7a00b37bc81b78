/* regular.h - opening a file a user named, for reading: only a regular file, and never
 * blocking on the way (a FIFO would hang open(), a device could do anything). Internal:
 * every reader of a user-given path (datasets, checkpoints, model and config files)
 * opens it here. */
#ifndef STOKE_CORE_REGULAR_H
#define STOKE_CORE_REGULAR_H

#include <stdio.h>
#include <sys/stat.h>

#include "stoke/core.h"

/* What kind of file `mode` (a st_mode) is, for messages: "a regular file", "a
 * directory", "a FIFO (named pipe)", "a character device", "a block device", "a
 * socket", "a symbolic link", "an unknown kind of file". Pure; never NULL. */
const char *stoke_file_kind(mode_t mode);

/* Opens `path` read-only (O_CLOEXEC) if it is a regular file. It is stat'ed first, so
 * nothing else is ever opened; then opened with O_NONBLOCK (a FIFO swapped in after the
 * stat cannot hang the open), checked again with fstat (the path may have changed in
 * between), and O_NONBLOCK is cleared. On success *fd is open (the caller closes it)
 * and *st, if not NULL, holds its fstat. On failure *fd is -1 and the message names
 * `path`: STOKE_ERR_NOTFOUND "PATH: cannot open: No such file or directory";
 * STOKE_ERR_IO "PATH: is a FIFO (named pipe), not a regular file" (or the kind it is)
 * or "PATH: cannot open: <reason>". */
stoke_status stoke_open_regular(const char *path, int *fd, struct stat *st);

/* The same as a stdio stream for reading (*f NULL on failure). `context`, if not NULL,
 * goes between the path and the reason: "PATH: CONTEXT: is a FIFO (named pipe), not a
 * regular file". */
stoke_status stoke_fopen_regular(const char *path, const char *context, FILE **f);

/* Checks a library that `var` (an environment variable, or NULL for a built-in path)
 * names before dlopen reads it: dlopen() opens without O_NONBLOCK, so a FIFO there would
 * hang it forever. A path with a '/' that exists must be a regular file (after symbolic
 * links; one that does not exist is left to dlopen, whose message says so);
 * a bare soname ("libcudart.so.13") is the loader's to find in its own search path
 * (LD_LIBRARY_PATH, the ld.so cache, the system directories), never a file in the
 * working directory: it is let through, as every program that loads that soname is.
 * A FIFO swapped in between this check and the dlopen could still block; nothing
 * narrower exists short of dlopen("/proc/self/fd/N"), which breaks a library's
 * $ORIGIN RUNPATH. STOKE_ERR_IO "VAR=PATH: is a FIFO (named pipe), not a regular file
 * (a library is one)" (or the kind it is; "PATH: is ..., not a regular file" when var
 * is NULL). */
stoke_status stoke_check_library(const char *var, const char *path);

#endif
