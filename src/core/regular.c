/* regular.c - opening a user's file for reading without blocking (regular.h). */
#include "core/regular.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

const char *stoke_file_kind(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "an unknown kind of file";
}

static stoke_status cannot_open(const char *path, const char *context, int e)
{
    return stoke_fail(e == ENOENT ? STOKE_ERR_NOTFOUND : STOKE_ERR_IO, "%s: %s%scannot open: %s",
                      path, context ? context : "", context ? ": " : "", strerror(e));
}

static stoke_status not_regular(const char *path, const char *context, mode_t mode)
{
    return stoke_fail(STOKE_ERR_IO, "%s: %s%sis %s, not a regular file", path,
                      context ? context : "", context ? ": " : "", stoke_file_kind(mode));
}

static stoke_status open_regular(const char *path, const char *context, int *fd, struct stat *st)
{
    *fd = -1;
    struct stat before, after;
    if (stat(path, &before) != 0)
        return cannot_open(path, context, errno);
    if (!S_ISREG(before.st_mode))
        return not_regular(path, context, before.st_mode);
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0)
        return cannot_open(path, context, errno);
    if (fstat(f, &after) != 0) {
        int e = errno;
        close(f);
        return cannot_open(path, context, e);
    }
    if (!S_ISREG(after.st_mode)) {
        close(f);
        return not_regular(path, context, after.st_mode);
    }
    /* Reads of a regular file never return EAGAIN, but the descriptor may go to code
     * (stdio, libyaml) that should see an ordinary blocking file. */
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(f);
        return cannot_open(path, context, e);
    }
    *fd = f;
    if (st)
        *st = after;
    return STOKE_OK;
}

stoke_status stoke_open_regular(const char *path, int *fd, struct stat *st)
{
    return open_regular(path, NULL, fd, st);
}

stoke_status stoke_fopen_regular(const char *path, const char *context, FILE **f)
{
    *f = NULL;
    int fd;
    stoke_status s = open_regular(path, context, &fd, NULL);
    if (s != STOKE_OK)
        return s;
    *f = fdopen(fd, "rb");
    if (!*f) {
        int e = errno;
        close(fd);
        return cannot_open(path, context, e);
    }
    return STOKE_OK;
}

stoke_status stoke_check_library(const char *var, const char *path)
{
    struct stat st;
    /* a path that cannot be stat'ed is dlopen's to report, in the loader's words */
    if (!strchr(path, '/') || stat(path, &st) != 0 || S_ISREG(st.st_mode))
        return STOKE_OK;
    if (var)
        return stoke_fail(STOKE_ERR_IO, "%s=%s: is %s, not a regular file (a library is one)", var,
                          path, stoke_file_kind(st.st_mode));
    return not_regular(path, NULL, st.st_mode);
}
