/* core.c - status names, per-thread last error, clocks, small file helpers. */
#include "stoke/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char last_error[1024];

const char *stoke_status_name(stoke_status s)
{
    switch (s) {
    case STOKE_OK: return "ok";
    case STOKE_ERR_ARG: return "argument";
    case STOKE_ERR_IO: return "io";
    case STOKE_ERR_FORMAT: return "format";
    case STOKE_ERR_NOMEM: return "nomem";
    case STOKE_ERR_UNAVAILABLE: return "unavailable";
    case STOKE_ERR_SYSTEM: return "system";
    case STOKE_ERR_NOTFOUND: return "notfound";
    case STOKE_ERR_TIMEOUT: return "timeout";
    }
    return "unknown";
}

stoke_status stoke_fail(stoke_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

const char *stoke_last_error(void) { return last_error; }

uint64_t stoke_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double stoke_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

long stoke_read_file(const char *path, char *buf, size_t size)
{
    if (size == 0)
        return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got + 1 < size) {
        ssize_t n = read(fd, buf + got, size - 1 - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    return (long)got;
}

long stoke_read_line(const char *path, char *buf, size_t size)
{
    long n = stoke_read_file(path, buf, size);
    if (n < 0)
        return -1;
    while (n > 0 &&
           (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\t' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    return n;
}

char *stoke_format_bytes(double bytes, char *buf, size_t size)
{
    static const char *units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (bytes >= 1000.0 && u < 5) {
        bytes /= 1000.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%.0f B", bytes);
    else
        snprintf(buf, size, "%.1f %s", bytes, units[u]);
    return buf;
}

char *stoke_format_flops(double flops, char *buf, size_t size)
{
    static const char *units[] = {"", "k", "M", "G", "T", "P", "E"};
    int u = 0;
    while (flops >= 1000.0 && u < 6) {
        flops /= 1000.0;
        u++;
    }
    snprintf(buf, size, "%.1f %sFLOP/s", flops, units[u]);
    return buf;
}
